//! The scheduling core's state: its parts, each the owner of one invariant, and the small
//! accessors over them. What the core does with them is in the files by stage (`jobs`,
//! `workers`, `placement`, `gang`, `gpus`, `lineage`, `restore`).

use std::cmp::Reverse;
use std::collections::{BTreeMap, HashSet};

use plexus_proto::{JobId, ObjectId, WorkerId};

use super::config::{CoreConfig, Counters};
use super::estimates::Estimates;
use super::eviction::EvictionHalt;
use super::fair_share::FairShare;
use super::job_table::{Job, JobTable};
use super::ledger::{Ledger, Worker};
use super::messages::Outbox;
use super::ready::{OrderKey, ReadyQueue};
use super::records::{PlacementRecord, Subtask};
use super::timing::{HeartbeatTiming, TimingScale};
use crate::error::Error;
use crate::gpu::learner::{ContentionModel, GpuLearner};
use crate::placer::{LearningStats, Placer};

/// The scheduling core: it coordinates its parts, which keep their own invariants.
pub struct Core {
    pub(super) config: CoreConfig,
    pub(super) placer: Box<dyn Placer>,
    /// Jobs, their submission order and the jobs waiting for each.
    pub(super) jobs: JobTable,
    /// Workers, what attempts hold on each, and who holds each object.
    pub(super) workers: Ledger,
    /// Ready subtasks in scheduling order, and those waiting out a back-off.
    pub(super) ready: ReadyQueue,
    /// Next placement decision id.
    pub(super) next_decision: u64,
    pub(super) out: Outbox,
    /// Learns solo times and slowdowns from GPU attempts, predicts interference (issue 16).
    pub(super) gpu_learner: Box<dyn GpuLearner>,
    /// Queues' shares of the cluster's cores (`plexus-coordinator queue set`), and the cores each
    /// queue's placed attempts hold.
    pub(super) fair_share: FairShare,
    /// Measured compute and fetch speeds (issue 17): candidates' estimates come from here.
    pub(super) estimates: Estimates,
    /// Events counted since start, for metrics.
    pub(super) counters: Counters,
    /// Jobs whose `after_jobs` changed state, worked off by `finish_job`.
    pub(super) to_settle: Vec<JobId>,
    pub(super) settling: bool,
    /// Evictions halted because too many workers fell silent at once (`liveness.rs`).
    pub(super) halt: Option<EvictionHalt>,
    /// Where the next decision's sample of workers starts (`sample.rs`), past 256 live workers.
    pub(super) sample_cursor: std::cell::Cell<Option<plexus_proto::WorkerId>>,
    /// When [`Core::tick`] last looked for silent workers.
    pub(super) evicted_at: u64,
    /// The heartbeat timing told to workers now, stretched with the cluster (`timing.rs`).
    pub(super) timing: TimingScale,
    /// Whether a finished subtask's placement record leaves memory (it is in the store; see
    /// [`Core::spill_placements`]).
    pub(super) spill: bool,
}

impl Core {
    pub fn new(config: CoreConfig, placer: Box<dyn Placer>) -> Core {
        Core {
            timing: TimingScale::new(&config),
            config,
            placer,
            jobs: JobTable::default(),
            workers: Ledger::default(),
            ready: ReadyQueue::default(),
            next_decision: 1,
            gpu_learner: Box::new(ContentionModel::default()),
            fair_share: FairShare::default(),
            estimates: Estimates::new(),
            counters: Counters::default(),
            to_settle: Vec::new(),
            settling: false,
            spill: false,
            halt: None,
            sample_cursor: std::cell::Cell::new(None),
            evicted_at: 0,
            out: Outbox::default(),
        }
    }

    pub fn config(&self) -> &CoreConfig {
        &self.config
    }

    /// The heartbeat timing workers are told now: the configured one, stretched when the alive
    /// workers would send more than `max_heartbeats_per_sec` (`timing.rs`).
    pub fn timing(&self) -> HeartbeatTiming {
        self.timing.current()
    }

    pub fn placer_name(&self) -> &'static str {
        self.placer.name()
    }

    /// The placer's learning counters, if it learns (its decision times since the last call).
    pub fn placer_learning(&mut self) -> Option<LearningStats> {
        self.placer.learning()
    }

    /// The live workers holding `object`, by id.
    pub fn live_holders(&self, object: &ObjectId) -> Vec<&Worker> {
        self.workers
            .holders(object)
            .into_iter()
            .flatten()
            .filter_map(|w| self.workers.get(w))
            .filter(|w| w.live())
            .collect()
    }

    /// Events counted since start.
    pub fn counters(&self) -> Counters {
        self.counters
    }

    /// The cluster's measured speeds, for display and for the coordinator to save.
    pub fn estimates(&self) -> &Estimates {
        &self.estimates
    }

    /// Replaces the measured speeds (the coordinator's, loaded at start).
    pub fn set_estimates(&mut self, e: Estimates) {
        self.estimates = e;
    }

    /// Where subtask `idx` of `job` sits in the scheduling order.
    pub(super) fn order_key(&self, job: JobId, idx: u32) -> Option<OrderKey> {
        let j = self.jobs.get(&job)?;
        Some(OrderKey {
            priority: Reverse(j.record.spec.priority),
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
        self.jobs.in_order()
    }

    pub fn workers(&self) -> impl Iterator<Item = &Worker> {
        self.workers.values()
    }

    /// The workers whose ids follow `after` (all of them for `None`), in id order: one page of
    /// a listing costs the page, not the cluster.
    pub fn workers_after(&self, after: Option<WorkerId>) -> impl Iterator<Item = &Worker> {
        self.workers.after(after)
    }

    /// How many workers are known, alive or not.
    pub fn worker_count(&self) -> usize {
        self.workers.len()
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
        self.ready.delayed_len()
    }

    pub fn subtask(&self, job: JobId, idx: u32) -> Option<&Subtask> {
        self.jobs.get(&job).and_then(|j| j.subtasks.get(idx as usize))
    }

    /// Drops a subtask's placement record from memory once the subtask has finished and the
    /// record was committed in an earlier round: a coordinator, whose store keeps it for `plexus
    /// explain` ([`Core::explain_at`] says it is stored), holds only those of unfinished subtasks
    /// (issue 35: ~4 KB a subtask, 400 MB after a 100,000-subtask job). Off by default: a core
    /// without a store (the simulator, tests) keeps them all.
    pub fn spill_placements(&mut self, on: bool) {
        self.spill = on;
    }

    pub fn placement(&self, job: JobId, idx: u32) -> Option<&PlacementRecord> {
        self.jobs.get(&job).and_then(|j| j.placements.get(&idx))
    }

    /// Sets (`Some`) or clears (`None`) a queue's share, in (0, 1].
    pub fn set_queue_share(&mut self, queue: &str, share: Option<f64>) -> Result<(), Error> {
        self.fair_share.set(queue, share)
    }

    /// Every queue with a share.
    pub fn queue_shares(&self) -> &BTreeMap<String, f64> {
        self.fair_share.shares()
    }

    /// The cores each queue's placed and reserved attempts hold now.
    pub fn queue_usage(&self, queue: &str) -> f64 {
        self.fair_share.usage(queue)
    }

    /// Attempt (job, idx) starts (`sign` 1) or stops (-1) holding its cores, for its queue.
    pub(super) fn count_queue(&mut self, job: JobId, idx: u32, sign: f64) {
        let Some(j) = self.jobs.get(&job) else { return };
        let cpu = j.record.spec.tasks[j.task_of(idx)].resources.cpu;
        if cpu > 0.0 {
            self.fair_share.add(&j.record.spec.queue, sign * cpu);
        }
    }

    /// Why a task of `queue` asking `cpu` cores may not place now: its queue is at its share
    /// and another queue has work waiting (`waiting`: the queues with ready work this round).
    pub(super) fn over_share(&self, queue: &str, cpu: f64, waiting: &HashSet<String>) -> Option<String> {
        let total =
            || self.workers.values().filter(|w| w.record().alive).map(|w| f64::from(w.record().capacity.cpus)).sum();
        self.fair_share.over(queue, cpu, waiting, total)
    }

    /// Promised share of all live cores.
    pub fn cluster_utilisation(&self) -> f64 {
        let (used, total) = self
            .workers
            .values()
            .filter(|w| w.record().alive)
            .fold((0.0, 0.0), |(u, t), w| (u + w.allocated().cpu, t + w.record().capacity.cpus as f64));
        if total > 0.0 { (used / total).min(1.0) } else { 0.0 }
    }
}
