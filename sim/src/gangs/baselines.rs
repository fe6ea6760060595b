//! The two schedulers "ours" is measured against. Both place a single member the way the core
//! does — through the same [`Placer`] (least-loaded by default), over candidates built as the
//! core builds them, in worker order — so only the policy differs.
//!
//! - **naive**: every member is a task of its own, in arrival order; each round every task
//!   that fits somewhere starts (FIFO with skipping), without reservation. A gang's started
//!   members hold their cores while they wait for the rest.
//! - **strict FIFO**: items in arrival order; the head starts whole — every member of a gang at
//!   once, when all fit — before anything behind it; no backfill.

use std::collections::{HashMap, VecDeque};

use plexus_proto::{Resources, WorkerId};
use plexus_scheduler::placer::{Candidate, PlacementRequest, Placer, heuristic};

use super::engine::{GangScheduler, Start};
use super::workload::Item;
use crate::SimError;

/// The workers as a baseline sees them, and the placer that picks one for a member.
struct Cluster {
    cores: u32,
    free: Vec<u32>,
    /// Members running on each worker.
    assigned: Vec<u32>,
    ids: Vec<WorkerId>,
    placer: Box<dyn Placer>,
    next_decision: u64,
    /// Where each running member is.
    at: HashMap<(usize, u32), usize>,
}

impl Cluster {
    fn new(workers: u32, cores: u32, placer: &str, seed: u64) -> Result<Cluster, SimError> {
        let placer =
            heuristic(placer, seed).ok_or_else(|| SimError::GangWorkload(format!("unknown placer {placer:?}")))?;
        let ids = (0..workers as u64)
            .map(|n| {
                let mut b = [0u8; 16];
                b[8..].copy_from_slice(&(n + 1).to_be_bytes());
                WorkerId::from_bytes(b)
            })
            .collect();
        Ok(Cluster {
            cores,
            free: vec![cores; workers as usize],
            assigned: vec![0; workers as usize],
            ids,
            placer,
            next_decision: 1,
            at: HashMap::new(),
        })
    }

    /// How many members of `cores` cores fit the free cores now, all workers together.
    fn room_for(&self, cores: u32) -> u32 {
        self.free.iter().map(|f| f / cores).sum()
    }

    /// Starts member `member` of `item` on the worker the placer picks, if one has room.
    fn place(&mut self, item: &Queued, member: u32, now: u64) -> Option<Start> {
        if !self.free.iter().any(|&f| f >= item.cores) {
            return None;
        }
        let res = |cpu: u32| Resources { cpu: f64::from(cpu), memory: 0, gpu: 0 };
        let candidates: Vec<Candidate> = (0..self.free.len())
            .map(|w| Candidate {
                worker: self.ids[w],
                feasible: self.free[w] >= item.cores,
                note: String::new(),
                capacity: res(self.cores),
                free: res(self.free[w]),
                assigned: self.assigned[w],
                cpu_utilisation: 0.0,
                local_input_bytes: 0,
                cache_bytes: 0,
                cache_used: 0,
                est_fetch_ms: None,
                est_compute_ms: None,
                recent_slowdown: None,
                est_compute_own: false,
                est_compute_kind: false,
                running: Vec::new(),
            })
            .collect();
        let req = PlacementRequest {
            decision: self.next_decision,
            job_age_ms: now.saturating_sub(item.arrival_ms),
            resources: res(item.cores),
            input_bytes: 0,
            flops: None,
            writes: false,
            kind: 0,
        };
        self.next_decision += 1;
        let w = self.placer.place(&req, &candidates).chosen;
        if candidates.get(w).is_none_or(|c| !c.feasible) {
            return None;
        }
        self.free[w] -= item.cores;
        self.assigned[w] += 1;
        self.at.insert((item.id, member), w);
        Some(Start { item: item.id, member, worker: w })
    }

    fn finished(&mut self, item: &Item, member: u32) {
        if let Some(w) = self.at.remove(&(item.id, member)) {
            self.free[w] += item.cores;
            self.assigned[w] -= 1;
        }
    }
}

/// What a baseline keeps of an arrival.
#[derive(Clone, Copy, Debug)]
struct Queued {
    id: usize,
    arrival_ms: u64,
    cores: u32,
    members: u32,
}

impl Queued {
    fn of(i: &Item) -> Queued {
        Queued { id: i.id, arrival_ms: i.arrival_ms, cores: i.cores, members: i.members }
    }
}

/// Members placed one by one as room appears, any that fits (FIFO with skipping), no
/// reservation.
pub struct Naive {
    cluster: Cluster,
    /// Members not started, in arrival order (a gang's in rank order).
    queue: VecDeque<(Queued, u32)>,
    changed: bool,
}

impl Naive {
    pub fn new(workers: u32, cores: u32, placer: &str, seed: u64) -> Result<Naive, SimError> {
        Ok(Naive { cluster: Cluster::new(workers, cores, placer, seed)?, queue: VecDeque::new(), changed: false })
    }
}

impl GangScheduler for Naive {
    fn name(&self) -> &'static str {
        "naive"
    }

    fn submit(&mut self, item: &Item, _now: u64) -> Result<(), SimError> {
        let q = Queued::of(item);
        self.queue.extend((0..item.members).map(|m| (q, m)));
        Ok(())
    }

    fn finished(&mut self, item: &Item, member: u32, _now: u64) {
        self.cluster.finished(item, member);
    }

    fn round(&mut self, now: u64) -> Vec<Start> {
        let mut starts = Vec::new();
        // The smallest request that found no room: nothing asking as much can start this round.
        let mut full = u32::MAX;
        let mut left = VecDeque::with_capacity(self.queue.len());
        while let Some((q, m)) = self.queue.pop_front() {
            if full <= 1 {
                left.push_back((q, m));
                left.extend(self.queue.drain(..));
                break;
            }
            match (q.cores < full).then(|| self.cluster.place(&q, m, now)).flatten() {
                Some(s) => starts.push(s),
                None => {
                    full = full.min(q.cores);
                    left.push_back((q, m));
                }
            }
        }
        self.queue = left;
        self.changed = !starts.is_empty();
        starts
    }

    fn changed(&self) -> bool {
        self.changed
    }

    fn next_timer(&self, _now: u64) -> Option<u64> {
        None
    }
}

/// The queue's head starts whole before anything behind it; no backfill.
pub struct StrictFifo {
    cluster: Cluster,
    queue: VecDeque<Queued>,
    changed: bool,
}

impl StrictFifo {
    pub fn new(workers: u32, cores: u32, placer: &str, seed: u64) -> Result<StrictFifo, SimError> {
        Ok(StrictFifo { cluster: Cluster::new(workers, cores, placer, seed)?, queue: VecDeque::new(), changed: false })
    }
}

impl GangScheduler for StrictFifo {
    fn name(&self) -> &'static str {
        "strict-fifo"
    }

    fn submit(&mut self, item: &Item, _now: u64) -> Result<(), SimError> {
        self.queue.push_back(Queued::of(item));
        Ok(())
    }

    fn finished(&mut self, item: &Item, member: u32, _now: u64) {
        self.cluster.finished(item, member);
    }

    fn round(&mut self, now: u64) -> Vec<Start> {
        let mut starts = Vec::new();
        // Members of an item are alike: they all fit iff Σ ⌊free / cores⌋ covers them, and
        // then placing them one by one on any worker with room places them all.
        while let Some(&head) = self.queue.front() {
            if self.cluster.room_for(head.cores) < head.members {
                break;
            }
            for m in 0..head.members {
                let s = self.cluster.place(&head, m, now).expect("room was counted");
                starts.push(s);
            }
            self.queue.pop_front();
        }
        self.changed = !starts.is_empty();
        starts
    }

    fn changed(&self) -> bool {
        self.changed
    }

    fn next_timer(&self, _now: u64) -> Option<u64> {
        None
    }
}
