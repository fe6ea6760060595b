//! Rail schedulers: which rail carries the next segment.
//!
//! A scheduler sees a snapshot of every rail ([`RailView`]: in service or not, how many
//! segments and bytes wait in its send queue, how many bytes it carries unacknowledged) and
//! answers with a rail index. The transport tells it when
//! a segment leaves a rail's queue ([`RailScheduler::departed`]) and when the peer acknowledged
//! one ([`RailScheduler::delivered`]). Time is always a parameter (time since the endpoint
//! started); schedulers read no clock and do no I/O, so they are tested with plain `#[test]`s
//! and in the discrete-event simulator of [`sim`].

mod qlearning;
mod round_robin;
#[cfg(test)]
mod sim;
mod weighted;

use std::time::Duration;

pub use qlearning::{QConfig, QLearning, QVariant};
pub use round_robin::RoundRobin;
pub use weighted::Weighted;

/// What a scheduler sees of one rail when it decides.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct RailView {
    /// The rail can carry segments to this peer now (its connection is not known to be dead).
    pub up: bool,
    /// Segments waiting in the rail's send queue (the seed's `counter[i]`).
    pub queued: usize,
    /// Bytes of those segments.
    pub queued_bytes: u64,
    /// Bytes that left the queue on this rail (to any peer) and are not acknowledged yet: in
    /// the socket buffer, on the wire, or awaiting their acknowledgement.
    pub in_flight_bytes: u64,
}

impl RailView {
    /// Bytes the rail must still carry before a segment queued now can be acknowledged.
    pub fn backlog_bytes(&self) -> u64 {
        self.queued_bytes + self.in_flight_bytes
    }
}

/// A rail scheduler. The transport guarantees that at least one rail is up when it calls
/// [`pick`](Self::pick), and a scheduler must return an up rail.
pub trait RailScheduler: Send {
    /// Chooses the rail for the next segment, of `len` bytes, at time `now`.
    fn pick(&mut self, rails: &[RailView], len: u64, now: Duration) -> usize;

    /// A segment that joined `rail`'s queue at `entered` left it at `now` (it was handed to
    /// the connection: the seed's "sent to the NIC").
    fn departed(&mut self, rail: usize, entered: Duration, now: Duration) {
        let _ = (rail, entered, now);
    }

    /// The peer acknowledged a segment of `bytes` that was handed to `rail` at `sent_at`.
    fn delivered(&mut self, rail: usize, bytes: u64, sent_at: Duration, now: Duration) {
        let _ = (rail, bytes, sent_at, now);
    }
}

/// The schedulers a worker can be configured with.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SchedulerKind {
    /// The seed's baseline: rail i, then i+1 mod m.
    RoundRobin,
    /// Earliest completion by measured per-rail throughput: each segment goes to the rail where
    /// it would be acknowledged first, given that rail's backlog and delivery rate.
    Weighted,
    /// The seed's Q-learning scheduler, read literally (see [`QVariant::Seed`]).
    QLearning,
    /// The Q-learning scheduler with the changes argued in [`QVariant::Fresh`].
    QLearningFresh,
}

impl SchedulerKind {
    pub const ALL: [SchedulerKind; 4] = [
        SchedulerKind::RoundRobin,
        SchedulerKind::Weighted,
        SchedulerKind::QLearning,
        SchedulerKind::QLearningFresh,
    ];

    /// The configuration name (`round-robin`, `weighted`, `q-learning`, `q-learning-fresh`).
    pub fn name(self) -> &'static str {
        match self {
            SchedulerKind::RoundRobin => "round-robin",
            SchedulerKind::Weighted => "weighted",
            SchedulerKind::QLearning => "q-learning",
            SchedulerKind::QLearningFresh => "q-learning-fresh",
        }
    }
}

impl std::fmt::Display for SchedulerKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

impl std::str::FromStr for SchedulerKind {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        SchedulerKind::ALL
            .into_iter()
            .find(|k| k.name() == s)
            .ok_or_else(|| {
                let names: Vec<_> = SchedulerKind::ALL.iter().map(|k| k.name()).collect();
                format!(
                    "unknown rail scheduler {s:?} (one of: {})",
                    names.join(", ")
                )
            })
    }
}

/// Everything a scheduler may need, built from the endpoint configuration.
#[derive(Clone, Debug)]
pub struct SchedulerParams {
    pub rails: usize,
    pub seg_max: u64,
    pub queue_max: usize,
    /// Nominal bandwidth of one rail in bytes/s (the seed's `bandwidth`, used for
    /// `time_interval`, and the weighted scheduler's prior before it has measured anything).
    pub bandwidth: f64,
    /// Q-learning: states per rail, in 8..=32.
    pub k: usize,
    pub seed: u64,
}

/// Builds the configured scheduler.
pub fn build(kind: SchedulerKind, p: &SchedulerParams) -> Box<dyn RailScheduler> {
    match kind {
        SchedulerKind::RoundRobin => Box::new(RoundRobin::new(p.rails)),
        SchedulerKind::Weighted => Box::new(Weighted::new(p.rails, p.bandwidth)),
        SchedulerKind::QLearning | SchedulerKind::QLearningFresh => {
            let variant = if kind == SchedulerKind::QLearning {
                QVariant::Seed
            } else {
                QVariant::Fresh
            };
            Box::new(QLearning::new(QConfig::from_params(p, variant)))
        }
    }
}

/// The first up rail at or after `from`, cyclically. Shared by the schedulers that must skip
/// rails taken out of service.
pub(crate) fn next_up(rails: &[RailView], from: usize) -> usize {
    let m = rails.len();
    (0..m)
        .map(|d| (from + d) % m)
        .find(|&i| rails[i].up)
        .expect("the transport calls pick only with a rail up")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kinds_parse_from_their_names() {
        for k in SchedulerKind::ALL {
            assert_eq!(k.name().parse::<SchedulerKind>().unwrap(), k);
        }
        let e = "fastest".parse::<SchedulerKind>().unwrap_err();
        assert!(e.contains("round-robin, weighted, q-learning"), "{e}");
    }

    #[test]
    fn next_up_skips_down_rails_cyclically() {
        let v = |up: [bool; 3]| {
            up.map(|up| RailView {
                up,
                ..RailView::default()
            })
        };
        assert_eq!(next_up(&v([true, true, true]), 1), 1);
        assert_eq!(next_up(&v([true, false, true]), 1), 2);
        assert_eq!(next_up(&v([true, false, false]), 1), 0);
    }
}
