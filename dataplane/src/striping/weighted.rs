//! Segments placed by earliest completion over each rail's measured throughput, the
//! bandwidth-aware striping of UCX (bandwidth-proportional lanes) and Open MPI's ob1
//! (bandwidth-weighted BTL split), driven by the rails' backlogs rather than by a fixed ratio.

use std::time::Duration;

use super::rail::{AckRate, RailScheduler, RailView};

/// Weight of a new rate sample in the running average. One eighth (the TCP SRTT gain) follows a
/// rate change within a few dozen segments while smoothing the noise of single samples.
const RATE_GAIN: f64 = 1.0 / 8.0;

/// Earliest completion: a segment of `len` bytes goes to the up rail where it would be through
/// first, `(queued bytes + unacknowledged bytes + len) / rate`, ties to the lowest index.
///
/// Over a backlogged stretch this splits bytes in proportion to the rates, like a weighted
/// round-robin, but it also corrects itself: a rail that runs slower than its estimate keeps
/// its backlog longer and gets fewer of the next segments, so the rails drain together and a
/// message ends close to when its bytes ÷ Σ rates says. Unacknowledged bytes count, so what
/// sits in a slow rail's socket buffer is seen. (The previous split, smooth weighted
/// round-robin by the rate estimates alone, measured 0.883 of Σ rates on 1500/750/250 Mbit/s
/// rails and 0.956 on 2000/500 in the `rails` benchmark; this one 0.966 and 0.988, same
/// machine, same hour.)
///
/// Like the others, a rail's full queue is waited for, not passed over: the earliest-completion
/// rail is the one to wait for, and with backlogs balanced in time it is the fast rail, whose
/// queue drains in a few milliseconds.
///
/// A rail's rate is measured from acknowledgements ([`AckRate`]: the bytes acknowledged over
/// spans of at least 2 ms while the rail stays busy), so back-to-back segments measure the
/// rail's service rate and an isolated one its rate-plus-latency. Before any sample every rail
/// is assumed to run at the nominal bandwidth.
#[derive(Debug)]
pub struct Weighted {
    rate: Vec<f64>,
    acks: Vec<AckRate>,
}

impl Weighted {
    pub fn new(rails: usize, nominal_bandwidth: f64) -> Weighted {
        Weighted { rate: vec![nominal_bandwidth; rails], acks: vec![AckRate::default(); rails] }
    }

    /// The current rate estimates, bytes/s.
    pub fn rates(&self) -> &[f64] {
        &self.rate
    }

    /// Seconds until a segment of `len` bytes queued on rail `i` now would be through.
    pub fn completion(&self, i: usize, v: &RailView, len: u64) -> f64 {
        (v.backlog_bytes() + len) as f64 / self.rate[i]
    }
}

impl RailScheduler for Weighted {
    fn pick(&mut self, rails: &[RailView], len: u64, _now: Duration) -> usize {
        let len = len.max(1);
        let mut best: Option<(usize, f64)> = None;
        for (i, v) in rails.iter().enumerate() {
            if !v.up {
                continue;
            }
            let t = self.completion(i, v, len);
            if best.is_none_or(|(_, bt)| t < bt) {
                best = Some((i, t));
            }
        }
        best.expect("the transport calls pick only with a rail up").0
    }

    fn delivered(&mut self, rail: usize, bytes: u64, sent_at: Duration, now: Duration) {
        if let Some(sample) = self.acks[rail].delivered(bytes, sent_at, now) {
            self.rate[rail] += RATE_GAIN * (sample - self.rate[rail]);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn up(m: usize) -> Vec<RailView> {
        vec![RailView { up: true, queued: 0, ..RailView::default() }; m]
    }

    /// Picks `n` segments of `len` bytes on rails that do not drain: each pick's bytes join
    /// the chosen rail's queue, as they would between two drain steps.
    fn pick_without_draining(w: &mut Weighted, views: &mut [RailView], n: usize, len: u64) -> Vec<usize> {
        (0..n)
            .map(|_| {
                let a = w.pick(views, len, Duration::ZERO);
                views[a].queued += 1;
                views[a].queued_bytes += len;
                a
            })
            .collect()
    }

    #[test]
    fn alternates_before_measuring() {
        // Equal (nominal) rates: the empty rail finishes first, ties go to the lower index.
        let mut w = Weighted::new(2, 1e9);
        let picks = pick_without_draining(&mut w, &mut up(2), 6, 100);
        assert_eq!(picks, [0, 1, 0, 1, 0, 1]);
    }

    #[test]
    fn earliest_completion_by_hand() {
        // Rates 6, 3, 1 bytes/s, segments of 1 byte, nothing draining. Completion times
        // (b_i + 1) / rate_i, ties to the lower index:
        //  1: 1/6, 1/3, 1        → 0      6: 5/6, 2/3, 1     → 1
        //  2: 2/6, 1/3 (tie), 1  → 0      7: 5/6, 1, 1       → 0
        //  3: 1/2, 1/3, 1        → 1      8: 1, 1, 1 (tie)   → 0
        //  4: 1/2, 2/3, 1        → 0      9: 7/6, 1, 1 (tie) → 1
        //  5: 2/3, 2/3 (tie), 1  → 0     10: 7/6, 4/3, 1     → 2
        let mut w = Weighted::new(3, 1.0);
        w.rate = vec![6.0, 3.0, 1.0];
        let picks = pick_without_draining(&mut w, &mut up(3), 10, 1);
        assert_eq!(picks, [0, 0, 1, 0, 0, 1, 0, 0, 1, 2]);
    }

    #[test]
    fn splits_bytes_in_proportion_to_rates() {
        let mut w = Weighted::new(3, 1.0);
        w.rate = vec![4.0, 1.0, 3.0];
        let picks = pick_without_draining(&mut w, &mut up(3), 800, 10);
        let bytes: Vec<u64> = (0..3).map(|r| 10 * picks.iter().filter(|&&p| p == r).count() as u64).collect();
        assert_eq!(bytes, [4000, 1000, 3000]);
    }

    #[test]
    fn counts_unacknowledged_bytes_as_backlog() {
        // Rail 0: 1000 B/s with 500 B in flight and 400 B queued: (900 + 100) / 1000 = 1.0 s.
        // Rail 1: 200 B/s with 60 B in flight: (60 + 100) / 200 = 0.8 s → rail 1.
        let mut w = Weighted::new(2, 1.0);
        w.rate = vec![1000.0, 200.0];
        let mut v = up(2);
        v[0].queued = 1;
        v[0].queued_bytes = 400;
        v[0].in_flight_bytes = 500;
        v[1].in_flight_bytes = 60;
        assert_eq!(w.pick(&v, 100, Duration::ZERO), 1);
        // 100 more bytes in flight on rail 1: (160 + 100) / 200 = 1.3 s → rail 0.
        v[1].in_flight_bytes = 160;
        assert_eq!(w.pick(&v, 100, Duration::ZERO), 0);
        assert!((w.completion(0, &v[0], 100) - 1.0).abs() < 1e-12);
    }

    #[test]
    fn a_rail_slower_than_its_estimate_gets_fewer_segments() {
        // Both rails estimated at 100 B/s, but rail 1 still holds 300 B it has not delivered:
        // the next three segments of 100 B go to rail 0 (1, 2, 3 s against 4 s), the fourth is
        // a tie at 4 s (rail 0), and only then rail 1.
        let mut w = Weighted::new(2, 100.0);
        let mut v = up(2);
        v[1].in_flight_bytes = 300;
        let picks = pick_without_draining(&mut w, &mut v, 5, 100);
        assert_eq!(picks, [0, 0, 0, 0, 1]);
    }

    #[test]
    fn never_picks_a_rail_that_is_down() {
        let mut w = Weighted::new(2, 1.0);
        w.rate = vec![10.0, 1.0];
        let mut v = up(2);
        v[0].up = false;
        for _ in 0..10 {
            assert_eq!(w.pick(&v, 5, Duration::ZERO), 1);
        }
    }

    #[test]
    fn measures_rate_from_back_to_back_acknowledgements() {
        let mut w = Weighted::new(1, 1.0);
        let ms = Duration::from_millis;
        // Segments of 1000 bytes sent at once, acknowledged every 10 ms: 100 kB/s.
        for i in 1..=200 {
            w.delivered(0, 1000, ms(0), ms(10 * i));
        }
        assert!((w.rates()[0] - 100_000.0).abs() < 1.0, "{}", w.rates()[0]);
        // An isolated segment after an idle second counts from when it was sent.
        w.delivered(0, 1000, ms(3000), ms(3020));
        assert!((w.rates()[0] - (100_000.0 + (50_000.0 - 100_000.0) / 8.0)).abs() < 1.0);
    }
}
