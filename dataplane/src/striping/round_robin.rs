//! The seed's baseline: segments go to rail 0, 1, …, m−1, 0, … whatever the rails' state.

use std::time::Duration;

use super::rail::{RailScheduler, RailView, next_up};

/// Round-robin over rails. The index is kept across messages, as in the seed (it is set to 0
/// once, at start). A rail out of service is skipped, which is the only departure from the seed
/// (whose rails never fail).
#[derive(Debug)]
pub struct RoundRobin {
    next: usize,
    rails: usize,
}

impl RoundRobin {
    pub fn new(rails: usize) -> RoundRobin {
        RoundRobin { next: 0, rails }
    }
}

impl RailScheduler for RoundRobin {
    fn pick(&mut self, rails: &[RailView], _len: u64, _now: Duration) -> usize {
        debug_assert_eq!(rails.len(), self.rails);
        let i = next_up(rails, self.next);
        self.next = (i + 1) % self.rails;
        i
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::segment::cut;

    /// The seed's procedure, transcribed step by step as a reference: i = 0 once; for each send
    /// request, cut the unsent part front to back into pieces of at most seg_max; put each on
    /// rail i; i = (i + 1) mod m.
    fn seed_round_robin(messages: &[u64], seg_max: u64, m: usize) -> Vec<(usize, u64, u64, usize)> {
        let mut out = vec![];
        let mut i = 0;
        for (msg, &len) in messages.iter().enumerate() {
            let mut message_length = len;
            let mut sent = 0;
            loop {
                let seg = if message_length > seg_max { seg_max } else { message_length };
                out.push((msg, sent, seg, i));
                sent += seg;
                i = (i + 1) % m;
                if message_length <= seg_max {
                    break;
                }
                message_length -= seg_max;
            }
        }
        out
    }

    #[test]
    fn matches_the_seed_procedure_across_messages() {
        let mib = 1 << 20;
        let messages = [10 * mib, 3 * mib + 5, mib, 1, 4 * mib, 0];
        for m in 1..=4 {
            for seg_max in [mib, 2 * mib, 3 * mib] {
                let want = seed_round_robin(&messages, seg_max, m);
                let mut rr = RoundRobin::new(m);
                let views = vec![RailView { up: true, queued: 0, ..RailView::default() }; m];
                let mut got = vec![];
                for (msg, &len) in messages.iter().enumerate() {
                    for (off, seg) in cut(len, seg_max) {
                        got.push((msg, off, seg, rr.pick(&views, seg, Duration::ZERO)));
                    }
                }
                assert_eq!(got, want, "m={m} seg_max={seg_max}");
            }
        }
    }

    #[test]
    fn ignores_queue_lengths_like_the_seed() {
        let mut rr = RoundRobin::new(2);
        let views = [
            RailView { up: true, queued: 100, ..RailView::default() },
            RailView { up: true, queued: 0, ..RailView::default() },
        ];
        let picks: Vec<_> = (0..4).map(|_| rr.pick(&views, 1, Duration::ZERO)).collect();
        assert_eq!(picks, [0, 1, 0, 1]);
    }

    #[test]
    fn skips_a_rail_out_of_service_and_resumes_after() {
        let mut rr = RoundRobin::new(3);
        let up = [RailView { up: true, queued: 0, ..RailView::default() }; 3];
        let mut one_down = up;
        one_down[1].up = false;
        assert_eq!(rr.pick(&up, 1, Duration::ZERO), 0);
        assert_eq!(rr.pick(&one_down, 1, Duration::ZERO), 2);
        assert_eq!(rr.pick(&one_down, 1, Duration::ZERO), 0);
        assert_eq!(rr.pick(&up, 1, Duration::ZERO), 1);
    }
}
