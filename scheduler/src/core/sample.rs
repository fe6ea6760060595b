//! Which workers a decision considers (issue 35). Up to [`SAMPLE_ABOVE`] live workers, all of
//! them. Past that, a sample: the holders of the task's inputs first (locality is worth seeing),
//! then the others from a cursor that moves on with every decision, until [`FEASIBLE_SAMPLE`]
//! able to run it are found; of those that cannot, the first [`INFEASIBLE_KEPT`] become
//! candidates (so a decision with none able still says why), the rest are only counted.
//! Kubernetes' scheduler scores a share of its nodes the same way (`percentageOfNodesToScore`,
//! from a rotating start). Measured with `bench --bin fleet`: building a candidate of every worker
//! for every decision made placement cost O(workers): 6,099 placements/s at 100 workers, 515/s at
//! 5,000.

use std::collections::BTreeSet;

use plexus_proto::{ObjectId, WorkerId};

use super::ledger::Worker;
use super::state::Core;

/// Live workers up to which every one is a candidate.
pub const SAMPLE_ABOVE: usize = 256;
/// Past that, the workers able to run the task a decision looks for.
pub const FEASIBLE_SAMPLE: usize = 128;
/// And the workers unable to that it keeps as candidates (with why not).
pub const INFEASIBLE_KEPT: usize = 16;
/// An input's holders put first, at most.
const HOLDERS_FIRST: usize = 32;

/// The workers one decision goes through, in order, and what it took of them.
pub(super) struct Consider<'a> {
    pub(super) workers: Vec<&'a Worker>,
    sampled: bool,
    feasible: usize,
    infeasible: usize,
    /// Workers gone through (taken or skipped), to move the cursor on by.
    seen: usize,
}

impl Core {
    /// The workers to consider for a task reading `inputs` (see the module documentation).
    pub(super) fn consider(&self, inputs: &[(ObjectId, u64)]) -> Consider<'_> {
        let live: Vec<&Worker> = self.workers.values().filter(|w| w.live()).collect();
        if live.len() <= SAMPLE_ABOVE {
            return Consider { workers: live, sampled: false, feasible: 0, infeasible: 0, seen: 0 };
        }
        let holders: BTreeSet<WorkerId> = inputs
            .iter()
            .filter_map(|(o, _)| self.workers.holders(o))
            .flat_map(|h| h.iter().take(HOLDERS_FIRST))
            .copied()
            .collect();
        let start = self.sample_cursor.get() % live.len();
        let mut order: Vec<&Worker> = live.iter().filter(|w| holders.contains(&w.id())).copied().collect();
        order.extend(live[start..].iter().chain(&live[..start]).filter(|w| !holders.contains(&w.id())));
        Consider { workers: order, sampled: true, feasible: 0, infeasible: 0, seen: 0 }
    }
}

/// What to do with the next worker of a [`Consider`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Admit {
    Take,
    Skip,
    Stop,
}

impl Consider<'_> {
    /// Whether the next worker (able to run the task: `fits`) becomes a candidate.
    pub(super) fn admit(&mut self, fits: bool) -> Admit {
        if !self.sampled {
            return Admit::Take;
        }
        if self.feasible >= FEASIBLE_SAMPLE {
            return Admit::Stop;
        }
        self.seen += 1;
        match fits {
            true => self.feasible += 1,
            false if self.infeasible < INFEASIBLE_KEPT => self.infeasible += 1,
            false => return Admit::Skip,
        }
        Admit::Take
    }

    /// Moves the core's cursor past the workers this decision went through, so the next one
    /// starts where it stopped.
    pub(super) fn finish(&self, core: &Core) {
        if self.sampled {
            core.sample_cursor.set(core.sample_cursor.get().wrapping_add(self.seen));
        }
    }
}
