//! The scheduling core: jobs, subtasks, workers and every state transition between them.
//!
//! Pure: no I/O, no clock (every call takes `now` in ms), no tonic, no sled. Calls mutate the
//! in-memory state and record what changed in an [`Outbox`]: records to persist, assignments and
//! cancellations to send. The engine persists the outbox's records *before* it acts on the rest
//! or answers anyone, which is what makes every acknowledged change durable.
//!
//! Invariants kept here:
//! - A subtask's `attempt` grows by one on every placement; a report about any other attempt,
//!   or from a worker that does not hold it, is stale and ignored. So a subtask is completed at
//!   most once, however often a worker repeats itself.
//! - A worker's `allocated` resources are exactly the sum of the requests of the attempts placed
//!   on it (`placed`), and only feasible placements are made.
//! - A subtask is released (`Waiting` → `Ready`) only when every task in its `after` list has
//!   fully succeeded.

//!
//! # Layout
//! - [`records`]: what the store keeps (jobs, subtasks, workers, placement decisions).
//! - [`messages`]: what crosses the boundary: registrations and reports in, assignments and the
//!   [`Outbox`] out.
//! - `jobs`: submission, reports of attempts, retries, DAG release, the end of a job.
//! - `workers`: registration and reconciliation, heartbeats, held objects, lost workers.
//! - `placement`: the ready queue and single-subtask placement through the [`Placer`].
//! - `queue`: the ready queue, in priority-then-age order, one entry per task.
//! - `gang`: gangs — reservations, binding, holding workers for the head gang, deadlines and
//!   rollbacks — and collectives placed all at once, or none.
//! - [`lineage`]: lost inputs recomputed by re-running their producers.
//! - [`estimates`]: measured compute and fetch speeds (issue 17), learnt from succeeded attempts
//!   and read by placement for each candidate's estimates.

use std::collections::{BTreeMap, BTreeSet, HashMap};

use plexus_proto::{JobId, JobState, ObjectId, Resources, SubtaskState, WorkerId};

use crate::Error;
use crate::placer::Placer;

/// Timing of the worker protocol.
#[derive(Clone, Debug)]
pub struct CoreConfig {
    pub heartbeat_interval_ms: u64,
    pub heartbeat_timeout_ms: u64,
    /// The GPU topology's model-synchronisation costs, for GPU gangs (issue 16).
    pub msc: crate::gpu::topology::MscCosts,
}

impl Default for CoreConfig {
    fn default() -> Self {
        // Heartbeats twice a second keep node state fresh for placement at negligible cost;
        // six missed beats (3 s) declare a worker lost: long enough to ride out a stalled
        // process on a busy 2-core machine, short enough that a dead node's work restarts soon.
        CoreConfig { heartbeat_interval_ms: 500, heartbeat_timeout_ms: 3_000, msc: Default::default() }
    }
}

pub mod estimates;
mod gang;
mod gpus;
mod jobs;
pub mod lineage;
pub mod messages;
mod placement;
mod queue;
mod queues;
pub mod records;
mod workers;

pub use gpus::{FieldHash, signature};
pub use jobs::{GangPhase, GangView, Job};
pub use messages::{
    Assignment, CollectiveAssignment, HolderLocation, InputLocation, NodeReport, Outbox, RailCounter, Registration,
    Report,
};
pub use records::{
    AttemptFailure, CandidateRecord, Capacity, FetchPlan, GpuRecord, JobRecord, PlacementRecord, Subtask, Transition,
    WorkerRecord,
};
pub use workers::Worker;

/// The scheduling core.
pub struct Core {
    config: CoreConfig,
    placer: Box<dyn Placer>,
    jobs: HashMap<JobId, Job>,
    job_order: BTreeMap<u64, JobId>,
    next_seq: u64,
    workers: BTreeMap<WorkerId, Worker>,
    /// Which workers hold each object.
    holders: HashMap<ObjectId, BTreeSet<WorkerId>>,
    ready: queue::ReadyQueue,
    /// Ready subtasks waiting out a retry back-off, by the time they may be placed: `tick` moves
    /// the due ones to `ready`, so a waiting retry costs nothing per round.
    delayed: BTreeSet<(u64, JobId, u32)>,
    /// Next placement decision id.
    next_decision: u64,
    /// Bumped whenever a worker registers or is lost: what a waiting task's reason depends on.
    worker_epoch: u64,
    out: Outbox,
    /// Learns solo times and slowdowns from GPU attempts, predicts interference (issue 16).
    gpu_learner: Box<dyn crate::gpu::learner::GpuLearner>,
    /// Queues' shares of the cluster's cores (`plexus-coordinator queue set`), and the cores each
    /// queue's placed and reserved attempts hold.
    queue_shares: BTreeMap<String, f64>,
    queue_cpu: HashMap<String, f64>,
    /// Measured compute and fetch speeds (issue 17): candidates' estimates come from here.
    estimates: estimates::Estimates,
    /// Rounds each task with ready work was overtaken by work queued after it (a reordering
    /// placer, `Placer::order`); derived, bounded by the queue.
    overtaken: HashMap<queue::OrderKey, u32>,
    /// Events counted since start, for metrics.
    counters: Counters,
    /// Job → running jobs that wait for it to succeed (`after_jobs`). Derived.
    after_index: HashMap<JobId, Vec<JobId>>,
    /// Jobs whose `after_jobs` changed state, worked off by `finish_job`.
    to_settle: Vec<JobId>,
    settling: bool,
}

/// Events the core counts since it started (the coordinator's `/metrics` exports them).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Counters {
    /// Members reserved for gangs.
    pub gang_reservations: u64,
    /// Gangs bound (their `min_members` reserved and dispatched together).
    pub gangs_bound: u64,
    /// Gangs rolled back, for any reason.
    pub gang_rollbacks: u64,
    /// Of those, at their deadline.
    pub gang_timeouts: u64,
}

/// Everything loaded from the store at start.
#[derive(Default, Debug)]
pub struct Snapshot {
    pub jobs: Vec<JobRecord>,
    pub subtasks: Vec<(JobId, u32, Subtask)>,
    pub workers: Vec<WorkerRecord>,
    pub placements: Vec<(JobId, u32, PlacementRecord)>,
}

impl Core {
    pub fn new(config: CoreConfig, placer: Box<dyn Placer>) -> Core {
        Core {
            config,
            placer,
            jobs: HashMap::new(),
            job_order: BTreeMap::new(),
            next_seq: 1,
            workers: BTreeMap::new(),
            holders: HashMap::new(),
            ready: queue::ReadyQueue::default(),
            delayed: BTreeSet::new(),
            next_decision: 1,
            worker_epoch: 0,
            gpu_learner: Box::new(crate::gpu::learner::ContentionModel::default()),
            queue_shares: BTreeMap::new(),
            queue_cpu: HashMap::new(),
            estimates: estimates::Estimates::new(),
            overtaken: HashMap::new(),
            counters: Counters::default(),
            after_index: HashMap::new(),
            to_settle: Vec::new(),
            settling: false,
            out: Outbox::default(),
        }
    }

    pub fn config(&self) -> &CoreConfig {
        &self.config
    }

    pub fn placer_name(&self) -> &'static str {
        self.placer.name()
    }

    /// The cluster's measured speeds, for display and for the coordinator to save.
    /// The placer's learning counters, if it learns (its decision times since the last call).
    pub fn placer_learning(&mut self) -> Option<crate::placer::LearningStats> {
        self.placer.learning()
    }

    /// The live workers holding `object`, by id.
    pub fn live_holders(&self, object: &ObjectId) -> Vec<&Worker> {
        self.holders
            .get(object)
            .into_iter()
            .flatten()
            .filter_map(|w| self.workers.get(w))
            .filter(|w| w.connected && w.record.alive)
            .collect()
    }

    /// Events counted since start.
    pub fn counters(&self) -> Counters {
        self.counters
    }

    pub fn estimates(&self) -> &estimates::Estimates {
        &self.estimates
    }

    /// Replaces the measured speeds (the coordinator's, loaded at start).
    pub fn set_estimates(&mut self, e: estimates::Estimates) {
        self.estimates = e;
    }

    /// Rebuilds the state from stored records. Workers are not connected until they register
    /// again; each gets a full heartbeat timeout from `now` to do so before it is declared lost.
    pub fn restore(&mut self, snap: Snapshot, now: u64) -> Result<(), Error> {
        let mut subtasks: HashMap<JobId, Vec<(u32, Subtask)>> = HashMap::new();
        for (job, idx, s) in snap.subtasks {
            subtasks.entry(job).or_default().push((idx, s));
        }
        for rec in snap.jobs {
            let mut subs = subtasks.remove(&rec.id).unwrap_or_default();
            subs.sort_by_key(|(i, _)| *i);
            let expected = rec.spec.total_subtasks();
            if subs.len() as u64 != expected || subs.iter().enumerate().any(|(i, (idx, _))| i as u32 != *idx) {
                return Err(Error::Restore(format!(
                    "job {}: store holds {} subtask records, the spec expands to {expected}",
                    rec.id,
                    subs.len()
                )));
            }
            self.next_seq = self.next_seq.max(rec.seq + 1);
            self.job_order.insert(rec.seq, rec.id);
            let id = rec.id;
            self.jobs.insert(id, Job::new(rec, subs.into_iter().map(|(_, s)| s).collect()));
        }
        for (job, idx, p) in snap.placements {
            // Decision ids stay unique across restarts.
            self.next_decision = self.next_decision.max(p.decision + 1);
            if let Some(j) = self.jobs.get_mut(&job) {
                j.placements.insert(idx, p);
            }
        }
        for mut rec in snap.workers {
            rec.last_heartbeat = now;
            let w = Worker {
                record: rec,
                connected: false,
                node: NodeReport::default(),
                allocated: Resources::default(),
                placed: BTreeSet::new(),
                objects: HashMap::new(),
                gpus_used: BTreeSet::new(),
                reserved: BTreeSet::new(),
                gpu_shared: Default::default(),
                gpu_peers: HashMap::new(),
            };
            self.workers.insert(w.record.id, w);
        }
        // Derived state: allocations, and the ready queue in submission order.
        let order: Vec<JobId> = self.job_order.values().copied().collect();
        let mut ready = Vec::new();
        for id in order {
            let job = &self.jobs[&id];
            let running = job.record.state == JobState::Running;
            for (i, s) in job.subtasks.iter().enumerate() {
                if s.state.is_placed()
                    && let Some(w) = s.worker.and_then(|w| self.workers.get_mut(&w))
                {
                    let task = &job.record.spec.tasks[job.task_of(i as u32)];
                    w.allocated.add(&task.resources);
                    *self.queue_cpu.entry(job.record.spec.queue.clone()).or_default() += task.resources.cpu;
                    w.placed.insert((id, i as u32));
                    if task.shares_gpu() {
                        for &g in &s.gpus {
                            w.share_gpu(g, task.shared_gpu_memory());
                        }
                    } else {
                        w.gpus_used.extend(s.gpus.iter().copied());
                    }
                }
                if running && s.state == SubtaskState::Ready {
                    if s.not_before > now {
                        self.delayed.insert((s.not_before, id, i as u32));
                    } else {
                        ready.push((id, i as u32));
                    }
                }
            }
        }
        for (id, i) in ready {
            self.push_ready(id, i);
        }
        // Reservations of gangs that were not bound are rolled back: the workers they were on
        // may not come back, and the gang reserves again from nothing (at once). Stored with
        // the first round's commit.
        let unbound: Vec<(JobId, String)> = self
            .jobs
            .values()
            .flat_map(|j| {
                j.record
                    .gangs
                    .iter()
                    .filter(|(_, g)| g.bound_at == 0 && g.reserving_since > 0)
                    .map(move |(n, _)| (j.record.id, n.clone()))
            })
            .collect();
        let mut stray = Vec::new();
        for j in self.jobs.values_mut() {
            for (i, s) in j.subtasks.iter_mut().enumerate() {
                if s.reserved_on.take().is_some() {
                    // A sharing member's planned device goes with its reservation.
                    s.gpus.clear();
                    stray.push((j.record.id, i as u32));
                }
            }
        }
        for key in stray {
            self.out.subtasks.insert(key);
        }
        // Jobs waiting for other jobs: indexed again, and settled if what they wait for ended.
        let gated: Vec<JobId> = self
            .jobs
            .values()
            .filter(|j| j.record.state == JobState::Running && !j.record.spec.after_jobs.is_empty())
            .map(|j| j.record.id)
            .collect();
        for id in gated {
            for a in self.jobs[&id].record.spec.after_jobs.clone() {
                self.after_index.entry(a).or_default().push(id);
            }
            self.settle_after(id, now);
        }
        for (job, name) in unbound {
            self.set_gang(job, &name, |g| {
                g.reserving_since = 0;
                g.rollbacks += 1;
                g.rolled_back_at = now;
                g.retry_at = now;
                g.reason = "the coordinator restarted before the gang was bound".into();
            });
        }
        Ok(())
    }

    /// Where subtask `idx` of `job` sits in the scheduling order.
    fn order_key(&self, job: JobId, idx: u32) -> Option<queue::OrderKey> {
        let j = self.jobs.get(&job)?;
        Some(queue::OrderKey {
            priority: std::cmp::Reverse(j.record.spec.priority),
            seq: j.record.seq,
            task: j.task_of(idx) as u32,
            job,
        })
    }

    /// Queues a ready subtask for placement.
    pub(super) fn push_ready(&mut self, job: JobId, idx: u32) {
        if let Some(k) = self.order_key(job, idx) {
            self.ready.push(k, idx);
        }
    }

    pub fn job(&self, id: JobId) -> Option<&Job> {
        self.jobs.get(&id)
    }

    /// Jobs in submission order.
    pub fn jobs(&self) -> impl Iterator<Item = &Job> {
        self.job_order.values().filter_map(|id| self.jobs.get(id))
    }

    pub fn workers(&self) -> impl Iterator<Item = &Worker> {
        self.workers.values()
    }

    pub fn worker(&self, id: WorkerId) -> Option<&Worker> {
        self.workers.get(&id)
    }

    /// The changes since the last call.
    pub fn take_outbox(&mut self) -> Outbox {
        std::mem::take(&mut self.out)
    }

    /// Number of subtasks waiting for a worker with room.
    pub fn ready_len(&self) -> usize {
        self.ready.len()
    }

    /// Number of subtasks waiting out a retry back-off.
    pub fn delayed_len(&self) -> usize {
        self.delayed.len()
    }

    pub fn subtask(&self, job: JobId, idx: u32) -> Option<&Subtask> {
        self.jobs.get(&job).and_then(|j| j.subtasks.get(idx as usize))
    }

    pub fn placement(&self, job: JobId, idx: u32) -> Option<&PlacementRecord> {
        self.jobs.get(&job).and_then(|j| j.placements.get(&idx))
    }
}

#[cfg(test)]
mod gang_tests;
#[cfg(test)]
mod tests;
