//! Striping a message over the rails: the rail schedulers, which pick the rail that carries the
//! next segment (round robin, weighted by measured throughput, and the seed's Q-learning). Not to
//! be confused with the `plexus-scheduler` crate, which places tasks on workers: these place
//! segments on rails.
//!
//! A scheduler sees a snapshot of every rail ([`RailView`]: in service or not, how many
//! segments and bytes wait in its send queue, how many bytes it carries unacknowledged) and
//! answers with a rail index. The transport tells it when
//! a segment leaves a rail's queue ([`RailScheduler::departed`]) and when the peer acknowledged
//! one ([`RailScheduler::delivered`]). Time is always a parameter (time since the endpoint
//! started); schedulers read no clock and do no I/O, so they are tested with plain `#[test]`s
//! and in the discrete-event simulator of [`sim`].
//!
//! [`shares`] is the other way to stripe one message: by per-rail shares computed from the rates
//! the message can expect at both ends (a caller that knows the receiver's rails and how many
//! senders share them, as an all-to-all does), each segment's rail fixed in advance.

mod qlearning;
mod rail;
mod round_robin;
pub mod shares;
#[cfg(test)]
mod sim;
mod weighted;

pub use qlearning::{QConfig, QLearning, QTuning, QVariant};
pub use rail::{ACK_SPAN, AckRate, RailScheduler, RailView, SchedulerParams};
pub use round_robin::RoundRobin;
pub use weighted::Weighted;

use crate::error::Error;

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
    pub const ALL: [SchedulerKind; 4] =
        [SchedulerKind::RoundRobin, SchedulerKind::Weighted, SchedulerKind::QLearning, SchedulerKind::QLearningFresh];

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
    type Err = Error;
    fn from_str(s: &str) -> Result<Self, Error> {
        SchedulerKind::ALL.into_iter().find(|k| k.name() == s).ok_or_else(|| {
            let names: Vec<_> = SchedulerKind::ALL.iter().map(|k| k.name()).collect();
            Error::UnknownScheduler { got: s.to_string(), expected: names.join(", ") }
        })
    }
}

/// Builds the configured scheduler.
pub fn build(kind: SchedulerKind, p: &SchedulerParams) -> Box<dyn RailScheduler> {
    match kind {
        SchedulerKind::RoundRobin => Box::new(RoundRobin::new(p.rails)),
        SchedulerKind::Weighted => Box::new(Weighted::new(p.rails, p.bandwidth)),
        SchedulerKind::QLearning | SchedulerKind::QLearningFresh => {
            let variant = if kind == SchedulerKind::QLearning { QVariant::Seed } else { QVariant::Fresh };
            Box::new(QLearning::new(QConfig::from_params(p, variant)))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kinds_parse_from_their_names() {
        for k in SchedulerKind::ALL {
            assert_eq!(k.name().parse::<SchedulerKind>().unwrap(), k);
        }
        let e = "fastest".parse::<SchedulerKind>().unwrap_err().to_string();
        assert!(e.contains("round-robin, weighted, q-learning"), "{e}");
    }
}
