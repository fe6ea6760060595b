//! Which workers a decision considers (issue 35). Up to [`SAMPLE_ABOVE`] live workers, all of
//! them. Past that, a sample: the holders of the task's inputs first (locality is worth seeing),
//! then the others from a cursor that moves on with every decision, until [`FEASIBLE_SAMPLE`]
//! able to run it are found; of those that cannot, the first [`INFEASIBLE_KEPT`] become
//! candidates (so a decision with none able still says why), the rest are only counted.
//! Kubernetes' scheduler scores a share of its nodes the same way (`percentageOfNodesToScore`,
//! from a rotating start). Measured with `bench --bin fleet`: building a candidate of every worker
//! for every decision made placement cost O(workers): 6,099 placements/s at 100 workers, 515/s at
//! 5,000. The walk is lazy: a sampled decision visits the workers it goes through (from the
//! cursor, a worker id, in the ledger's id order), not every worker; collecting every live worker
//! first was still 12 % of the engine's time at 5,000 workers. Past the holders, a sampled
//! decision for a task that asks for cores walks only the ledger's index of workers with cores
//! free: in a full cluster with a deep queue the walk from the cursor went through every worker
//! to find the few with room, at every decision.

use std::collections::BTreeSet;
use std::ops::Bound::{Excluded, Included, Unbounded};

use plexus_proto::{ObjectId, WorkerId};

use super::ledger::Worker;
use super::state::Core;
use crate::spec::constraints::Constraint;

/// Live workers up to which every one is a candidate.
pub const SAMPLE_ABOVE: usize = 256;
/// Past that, the workers able to run the task a decision looks for.
pub const FEASIBLE_SAMPLE: usize = 128;
/// And the workers unable to that it keeps as candidates (with why not).
pub const INFEASIBLE_KEPT: usize = 16;
/// The candidates of one decision, at most (room made for them at once).
pub const CANDIDATES_AT_MOST: usize =
    if SAMPLE_ABOVE > FEASIBLE_SAMPLE + INFEASIBLE_KEPT { SAMPLE_ABOVE } else { FEASIBLE_SAMPLE + INFEASIBLE_KEPT };
/// An input's holders put first, at most.
const HOLDERS_FIRST: usize = 32;

/// Past one worker in this many meeting a constraint set, its walk merges with the ledger's.
const DENSE_SHARE: usize = 8;

/// The workers of `walk` (in id order) whose ids are in `ids[range]` (in id order too).
fn merged<'a>(
    walk: impl Iterator<Item = &'a Worker> + 'a,
    ids: std::sync::Arc<[WorkerId]>,
    range: std::ops::Range<usize>,
) -> impl Iterator<Item = &'a Worker> + 'a {
    let mut next = range.start;
    walk.filter(move |w| {
        while next < range.end && ids[next] < w.id() {
            next += 1;
        }
        next < range.end && ids[next] == w.id()
    })
}

/// The workers one decision goes through, in order (an iterator), and what it took of them.
pub(super) struct Consider<'a> {
    /// Live holders of the inputs, first (sampled decisions only).
    holders: std::vec::IntoIter<&'a Worker>,
    /// The rest: every live worker (not sampled), or from the cursor on, wrapping round.
    rest: Box<dyn Iterator<Item = &'a Worker> + 'a>,
    sampled: bool,
    /// The rest are the workers that meet the task's constraints (it has some).
    constrained: bool,
    feasible: usize,
    infeasible: usize,
    /// The worker of `rest` just handed out, and the last one gone through (taken or skipped),
    /// to move the cursor to.
    current: Option<WorkerId>,
    last: Option<WorkerId>,
}

impl Core {
    /// The workers that meet `constraints`, from the first after `after` (or the first), round
    /// to where they started. A few of many are looked up by id; when they are a good share of
    /// the ledger, it is walked in order and merged with them (both are in id order), which costs
    /// a step per worker rather than a lookup.
    /// With `room` (`Some(slot)`), only the workers with cores free for an attempt that takes a
    /// slot or none (the ledger's index of them: [`super::ledger::Ledger::with_room`]).
    fn universe(
        &self,
        constraints: &[Constraint],
        after: Option<WorkerId>,
        room: Option<bool>,
    ) -> Box<dyn Iterator<Item = &Worker> + '_> {
        let before = move |w: &&Worker| after.is_some_and(|c| w.id() <= c);
        // The workers (with room) after the cursor, and those up to it, each in id order.
        type Walk<'a> = Box<dyn Iterator<Item = &'a Worker> + 'a>;
        let (tail, head): (Walk<'_>, Walk<'_>) = match room {
            None => (Box::new(self.workers.after(after)), Box::new(self.workers.values().take_while(before))),
            Some(slot) => (
                Box::new(self.workers.with_room(slot, (after.map_or(Unbounded, Excluded), Unbounded))),
                match after {
                    Some(a) => Box::new(self.workers.with_room(slot, (Unbounded, Included(a)))),
                    None => Box::new(std::iter::empty()),
                },
            ),
        };
        let Some(ids) = self.workers.admitting(constraints) else {
            return Box::new(tail.chain(head));
        };
        let (n, start) = (ids.len(), after.map_or(0, |c| ids.partition_point(|id| *id <= c)));
        if n * DENSE_SHARE < self.workers.len() {
            let roomy = move |w: &&Worker| room.is_none_or(|slot| self.workers.has_room(slot, &w.id()));
            return Box::new((0..n).filter_map(move |i| self.workers.get(&ids[(start + i) % n])).filter(roomy));
        }
        Box::new(merged(tail, ids.clone(), start..n).chain(merged(head, ids, 0..start)))
    }

    /// The workers to consider for a task reading `inputs` and asking for `constraints` (see the
    /// module documentation). `room`: the task asks for at least twice
    /// [`super::ledger::ROOM_CORES`] and takes
    /// a slot (`Some(true)`) or none; then a sampled decision walks only the workers with cores
    /// free (past the holders of its inputs), since no other can run it.
    pub(super) fn consider(
        &self,
        inputs: &[(ObjectId, u64)],
        constraints: &[Constraint],
        room: Option<bool>,
    ) -> Consider<'_> {
        let live = |w: &&Worker| w.live();
        // Counting stops past the bound: O(SAMPLE_ABOVE) for a large fleet.
        let sampled = self.universe(constraints, None, None).filter(live).take(SAMPLE_ABOVE + 1).count() > SAMPLE_ABOVE;
        let holder_ids: BTreeSet<WorkerId> = match sampled {
            false => BTreeSet::new(),
            true => inputs
                .iter()
                .filter_map(|(o, _)| self.workers.holders(o))
                .flat_map(|h| h.iter().take(HOLDERS_FIRST))
                .copied()
                .collect(),
        };
        let holders: Vec<&Worker> = holder_ids.iter().filter_map(|id| self.workers.get(id)).filter(live).collect();
        // Sampled: from the worker after the cursor round to it; else every one, in order.
        let from = if sampled { self.sample_cursor.get() } else { None };
        let rest = self
            .universe(constraints, from, room.filter(|_| sampled))
            .filter(live)
            .filter(move |w| !holder_ids.contains(&w.id()));
        Consider {
            holders: holders.into_iter(),
            rest: Box::new(rest),
            sampled,
            constrained: !constraints.is_empty(),
            feasible: 0,
            infeasible: 0,
            current: None,
            last: None,
        }
    }
}

impl<'a> Iterator for Consider<'a> {
    type Item = &'a Worker;

    fn next(&mut self) -> Option<&'a Worker> {
        if let Some(w) = self.holders.next() {
            self.current = None;
            return Some(w);
        }
        let w = self.rest.next()?;
        self.current = Some(w.id());
        Some(w)
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
    /// Whether the worker just handed out is known to meet the task's constraints (it came from
    /// the workers that do), so they need not be tested again.
    pub(super) fn meets_constraints(&self) -> bool {
        self.constrained && self.current.is_some()
    }

    /// Whether the next worker (able to run the task: `fits`) becomes a candidate.
    pub(super) fn admit(&mut self, fits: bool) -> Admit {
        if !self.sampled {
            return Admit::Take;
        }
        if self.feasible >= FEASIBLE_SAMPLE {
            return Admit::Stop;
        }
        if self.current.is_some() {
            self.last = self.current;
        }
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
        if self.sampled && self.last.is_some() {
            core.sample_cursor.set(self.last);
        }
    }
}
