//! The one event loop every gang scheduler runs under, and what it measures.
//!
//! Time moves on a grid of rounds (`round_ms`, 100 ms by default). At each round, in order:
//! members whose item's run time is over finish (the scheduler is told), arrivals up to now are
//! submitted, and the scheduler's round returns the members it starts. The loop keeps its own
//! account of every worker's cores and refuses a start that does not fit (a scheduler bug, not a
//! figure). Rounds in which nothing can differ from the last are skipped: the next round is at
//! the next completion, arrival or scheduler timer (a gang's deadline or back-off), or at once
//! after a round that changed the scheduler's state. `every_round` turns skipping off (the
//! figures must not change).
//!
//! An item makes progress only while all its members run: it finishes its `duration_ms` after
//! its last member started. A gang with some but not all members running is a *partial start*
//! (counted once per gang). Members never stop before their item finishes (no preemption), so
//! the loop can tell when partially started gangs can never complete — a *deadlock*: the
//! cores that running work will give back, and the free ones, cannot hold the missing members
//! of any of them even if one after another completed. The run then ends there and reports it;
//! it also ends, as stalled, if nothing is left to happen with work unfinished, or at the
//! horizon.

use std::cmp::Reverse;
use std::collections::{BTreeSet, BinaryHeap};

use super::report::{End, GangReport};
use super::workload::{GangWorkload, Item, Kind};
use crate::SimError;

/// A member a scheduler starts.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Start {
    pub item: usize,
    pub member: u32,
    /// Index of the worker (0..workers).
    pub worker: usize,
}

/// A scheduler under the loop.
pub trait GangScheduler {
    fn name(&self) -> &'static str;
    /// An arrival, at the round it is noticed.
    fn submit(&mut self, item: &Item, now: u64) -> Result<(), SimError>;
    /// A member finished (its item ran its duration); its cores are free.
    fn finished(&mut self, item: &Item, member: u32, now: u64);
    /// One scheduling round: the members it starts now.
    fn round(&mut self, now: u64) -> Vec<Start>;
    /// Whether the last round changed the scheduler's state (a start, a reservation, a
    /// rollback): when not, and nothing happens before the next timer, the next round would
    /// change nothing either.
    fn changed(&self) -> bool;
    /// The earliest time after `now` at which the scheduler acts on its own (a deadline, the
    /// end of a back-off).
    fn next_timer(&self, now: u64) -> Option<u64>;
    /// Gang rollbacks (at deadlines) so far, where the scheduler has them.
    fn rollbacks(&self) -> u64 {
        0
    }
    /// Anything the scheduler saw that should not happen (a refused report, an over-committed
    /// worker in its own books).
    fn anomalies(&self) -> Vec<String> {
        Vec::new()
    }
    /// Σ cores × time set aside by reservations for gangs not running yet (ours only).
    fn reserved_core_ms(&self) -> u64 {
        0
    }
    /// Observations worth printing under the scheduler's row.
    fn notes(&self) -> Vec<String> {
        Vec::new()
    }
}

/// How the loop runs.
#[derive(Clone, Debug)]
pub struct Options {
    /// The round grid, ms.
    pub round_ms: u64,
    /// Run every round on the grid rather than skipping the ones where nothing can change.
    pub every_round: bool,
    /// Give up at this time (ms); `None`: 50 × the last arrival, at least an hour past it.
    pub horizon_ms: Option<u64>,
    /// The heuristic that places single members, for all three schedulers.
    pub placer: &'static str,
}

impl Default for Options {
    fn default() -> Self {
        Options { round_ms: 100, every_round: false, horizon_ms: None, placer: "least-loaded" }
    }
}

/// The loop's view of one item.
#[derive(Clone, Debug)]
struct Run {
    /// The worker of each member that runs.
    workers: Vec<Option<usize>>,
    running: u32,
    /// When its last member started.
    all_at: Option<u64>,
    done_at: Option<u64>,
    partial: bool,
}

/// Runs `workload` under `sched`.
pub fn run(workload: &GangWorkload, sched: &mut dyn GangScheduler, opts: &Options) -> Result<GangReport, SimError> {
    let round = opts.round_ms.max(1);
    let items = &workload.items;
    let last_arrival = items.last().map_or(0, |i| i.arrival_ms);
    let horizon = opts.horizon_ms.unwrap_or_else(|| (last_arrival.saturating_mul(50)).max(last_arrival + 3_600_000));
    let mut st = State::new(workload, on_grid(items.first().map_or(0, |i| i.arrival_ms), round));
    let end = loop {
        st.held_core_ms += st.allocated * (st.now - st.last_t);
        st.last_t = st.now;
        let mut moved = st.complete(sched);
        st.arrive(sched)?;
        st.rounds += 1;
        moved |= st.start(sched)?;
        st.judge_starts();
        if st.done == items.len() {
            break End::Finished;
        }
        if moved && !st.partial.is_empty() {
            let stuck = deadlocked(workload, &st.runs, &st.partial);
            if !stuck.is_empty() {
                st.makespan = st.now;
                break End::Deadlock { at_ms: st.now, gangs: stuck };
            }
        }
        match st.next_round(sched, opts, round) {
            None => {
                st.makespan = st.now;
                break End::Stalled { at_ms: st.now };
            }
            Some(t) if t > horizon => {
                st.makespan = st.now;
                break End::Horizon { at_ms: st.now };
            }
            Some(t) => st.now = t,
        }
    };
    Ok(st.report(workload, sched, end))
}

/// `t` rounded up to the round grid.
fn on_grid(t: u64, round: u64) -> u64 {
    t.div_ceil(round) * round
}

/// The loop's state between rounds: its own account of every worker's cores and every item,
/// and the figures it measures.
struct State<'w> {
    items: &'w [Item],
    /// Free cores per worker.
    free: Vec<u32>,
    runs: Vec<Run>,
    /// Running items by the time they finish, earliest first.
    ends: BinaryHeap<Reverse<(u64, usize)>>,
    /// Gangs with some but not all members running.
    partial: BTreeSet<usize>,
    /// Items that had a member started in the current round.
    touched: BTreeSet<usize>,
    /// The first item not submitted yet.
    next_arrival: usize,
    done: usize,
    /// Cores held by running members now.
    allocated: u64,
    held_core_ms: u64,
    useful_core_ms: u64,
    rounds: u64,
    partial_starts: usize,
    now: u64,
    /// When `held_core_ms` was last brought up to date.
    last_t: u64,
    makespan: u64,
}

impl<'w> State<'w> {
    fn new(workload: &'w GangWorkload, now: u64) -> Self {
        let items = &workload.items;
        State {
            items,
            free: vec![workload.cores; workload.workers as usize],
            runs: items
                .iter()
                .map(|i| Run {
                    workers: vec![None; i.members as usize],
                    running: 0,
                    all_at: None,
                    done_at: None,
                    partial: false,
                })
                .collect(),
            ends: BinaryHeap::new(),
            partial: BTreeSet::new(),
            touched: BTreeSet::new(),
            next_arrival: 0,
            done: 0,
            allocated: 0,
            held_core_ms: 0,
            useful_core_ms: 0,
            rounds: 0,
            partial_starts: 0,
            now,
            last_t: now,
            makespan: 0,
        }
    }

    /// Completions up to now: every member of a finished item frees its cores and the scheduler
    /// is told. Whether any item finished.
    fn complete(&mut self, sched: &mut dyn GangScheduler) -> bool {
        let (items, now) = (self.items, self.now);
        let mut moved = false;
        while let Some(&Reverse((at, i))) = self.ends.peek() {
            if at > now {
                break;
            }
            self.ends.pop();
            let item = &items[i];
            for m in 0..item.members {
                let w = self.runs[i].workers[m as usize].take().expect("a finishing member runs");
                self.free[w] += item.cores;
                self.allocated -= u64::from(item.cores);
                sched.finished(item, m, now);
            }
            self.runs[i].running = 0;
            self.runs[i].done_at = Some(at);
            self.useful_core_ms += item.core_ms();
            self.makespan = self.makespan.max(at);
            self.done += 1;
            moved = true;
        }
        moved
    }

    /// Arrivals up to now, submitted to the scheduler.
    fn arrive(&mut self, sched: &mut dyn GangScheduler) -> Result<(), SimError> {
        let items = self.items;
        while self.next_arrival < items.len() && items[self.next_arrival].arrival_ms <= self.now {
            sched.submit(&items[self.next_arrival], self.now)?;
            self.next_arrival += 1;
        }
        Ok(())
    }

    /// The scheduler's round: its starts, each checked against the loop's own books (a start
    /// of an unknown or running member, or one that does not fit, is a scheduler bug). Whether
    /// anything started.
    fn start(&mut self, sched: &mut dyn GangScheduler) -> Result<bool, SimError> {
        let (items, now) = (self.items, self.now);
        let free = &mut self.free;
        let mut moved = false;
        for s in sched.round(now) {
            let item = items.get(s.item).ok_or_else(|| {
                SimError::SchedulerBug(format!("{} started item {} of {}", sched.name(), s.item, items.len()))
            })?;
            let r = &mut self.runs[s.item];
            let slot = r.workers.get_mut(s.member as usize).ok_or_else(|| {
                SimError::SchedulerBug(format!(
                    "{} started member {} of item {} ({} members)",
                    sched.name(),
                    s.member,
                    s.item,
                    item.members
                ))
            })?;
            if slot.is_some() || r.done_at.is_some() {
                return Err(SimError::SchedulerBug(format!(
                    "{} started member {} of item {} twice (at {now} ms)",
                    sched.name(),
                    s.member,
                    s.item
                )));
            }
            if s.worker >= free.len() || free[s.worker] < item.cores {
                return Err(SimError::SchedulerBug(format!(
                    "{} started member {} of item {} ({} cores) on worker {} with {} cores free at {now} ms",
                    sched.name(),
                    s.member,
                    s.item,
                    item.cores,
                    s.worker,
                    free.get(s.worker).copied().unwrap_or(0)
                )));
            }
            free[s.worker] -= item.cores;
            self.allocated += u64::from(item.cores);
            *slot = Some(s.worker);
            r.running += 1;
            moved = true;
            self.touched.insert(s.item);
        }
        Ok(moved)
    }

    /// Judged once the round's starts are all in: a gang whose members all started in this
    /// round started whole.
    fn judge_starts(&mut self) {
        for i in std::mem::take(&mut self.touched) {
            let (item, r) = (&self.items[i], &mut self.runs[i]);
            if r.running == item.members {
                r.all_at = Some(self.now);
                self.ends.push(Reverse((self.now + item.duration_ms, i)));
                self.partial.remove(&i);
            } else {
                if !r.partial {
                    r.partial = true;
                    self.partial_starts += 1;
                }
                self.partial.insert(i);
            }
        }
    }

    /// The next round worth running: the next completion, arrival or scheduler timer, or the
    /// next on the grid when every round runs or the last one changed the scheduler's state.
    /// `None` when nothing is left to happen.
    fn next_round(&self, sched: &dyn GangScheduler, opts: &Options, round: u64) -> Option<u64> {
        let now = self.now;
        let grid = |t: u64| on_grid(t, round);
        let mut next: Option<u64> = self.ends.peek().map(|Reverse((at, _))| grid(*at).max(now + round));
        let mut consider = |t: u64| next = Some(next.map_or(t, |n| n.min(t)));
        if let Some(i) = self.items.get(self.next_arrival) {
            consider(grid(i.arrival_ms).max(now + round));
        }
        if let Some(t) = sched.next_timer(now) {
            consider(grid(t).max(now + round));
        }
        if opts.every_round || sched.changed() {
            consider(now + round);
        }
        next
    }

    /// The run's figures, once it ended with `end`.
    fn report(mut self, workload: &GangWorkload, sched: &dyn GangScheduler, end: End) -> GangReport {
        let (items, makespan, last_t) = (self.items, self.makespan, self.last_t);
        self.held_core_ms += self.allocated * (makespan.max(last_t) - last_t);
        // Work done by items still running when the run ended early.
        for (i, r) in self.runs.iter().enumerate() {
            if let (Some(at), None) = (r.all_at, r.done_at) {
                let item = &items[i];
                self.useful_core_ms +=
                    u64::from(item.members) * u64::from(item.cores) * makespan.saturating_sub(at).min(item.duration_ms);
            }
        }
        let runs = &self.runs;
        let wait = |i: &Item| runs[i.id].all_at.map(|at| at - i.arrival_ms);
        GangReport {
            scheduler: sched.name().to_string(),
            end,
            gang_ids: items.iter().filter(|i| i.kind == Kind::Gang).map(|i| i.id).collect(),
            gang_wait_ms: items.iter().filter(|i| i.kind == Kind::Gang).map(wait).collect(),
            small_wait_ms: items.iter().filter(|i| i.kind == Kind::Small).map(wait).collect(),
            completed: self.done,
            items: items.len(),
            partial_starts: self.partial_starts,
            makespan_ms: makespan,
            useful_core_ms: self.useful_core_ms,
            held_core_ms: self.held_core_ms,
            cores: workload.total_cores(),
            rounds: self.rounds,
            rollbacks: sched.rollbacks(),
            anomalies: sched.anomalies(),
            reserved_core_ms: sched.reserved_core_ms(),
            notes: sched.notes(),
        }
    }
}

/// The partially started gangs that can never complete: repeatedly, a gang whose missing
/// members fit into the room that is or will be free — every core not held by a partially
/// started gang — could complete and give its cores back; the ones left never can.
fn deadlocked(workload: &GangWorkload, runs: &[Run], partial: &BTreeSet<usize>) -> Vec<usize> {
    let mut room: Vec<u32> = vec![workload.cores; workload.workers as usize];
    for &g in partial {
        for w in runs[g].workers.iter().flatten() {
            room[*w] -= workload.items[g].cores;
        }
    }
    let mut pending: Vec<usize> = partial.iter().copied().collect();
    loop {
        // Members of a gang are alike, so they fit iff Σ ⌊room / cores⌋ covers the missing.
        let can = pending.iter().position(|&g| {
            let item = &workload.items[g];
            let missing = item.members - runs[g].running;
            room.iter().map(|r| r / item.cores).sum::<u32>() >= missing
        });
        let Some(p) = can else { return pending };
        let g = pending.swap_remove(p);
        for w in runs[g].workers.iter().flatten() {
            room[*w] += workload.items[g].cores;
        }
    }
}
