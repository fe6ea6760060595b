//! What crosses the core's boundary: reports from workers in, assignments and what changed
//! (the [`Outbox`]) out.

use std::collections::{BTreeMap, BTreeSet};

use plexus_proto::{AttemptRef, Digest, JobId, ObjectId, Resources, SubtaskState, WorkerId};

use super::records::Capacity;
use crate::spec::{CollectiveSpec, TaskSpec, Work};

/// Latest node state from a worker.
#[derive(Clone, Debug, Default)]
pub struct NodeReport {
    pub cpu_utilisation: f64,
    pub memory_free: u64,
    pub running: Vec<AttemptRef>,
    pub objects: Vec<(ObjectId, u64)>,
    pub cache_used: u64,
    /// The data plane's per-rail counters, in rail order.
    pub rails: Vec<RailCounter>,
    /// Each offered GPU's load, for `plexus workers` (placement does not read it).
    pub gpus: Vec<GpuUsage>,
    /// How the worker confines subtasks (`cgroup-v2`, `cgroup-v1`, `process-group`), for display.
    pub isolation: String,
    /// Rail connections the worker dropped because they failed the rail handshake.
    pub rails_refused: u64,
}

/// The load of one GPU of a worker, from its latest heartbeat.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct GpuUsage {
    pub index: u32,
    /// 0..1.
    pub utilisation: f64,
    /// Bytes.
    pub memory_used: u64,
}

/// Cumulative counters of one data-plane rail of a worker.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct RailCounter {
    pub addr: String,
    pub bytes_sent: u64,
    pub bytes_received: u64,
    pub failures: u64,
}

/// A worker's (re-)registration.
#[derive(Clone, Debug)]
pub struct Registration {
    pub worker: WorkerId,
    pub session: String,
    pub peer_addr: String,
    pub capacity: Capacity,
    pub state: NodeReport,
    /// Attempts the worker process knows (running, or finished with a report to come).
    pub known: Vec<AttemptRef>,
}

/// A status change of an attempt, from the worker running it.
#[derive(Clone, Debug, Default)]
pub struct Report {
    pub attempt: Option<AttemptRef>,
    pub state: Option<SubtaskState>,
    pub exit_code: i32,
    pub error: String,
    pub started_at: u64,
    pub finished_at: u64,
    pub fetch_ms: u64,
    pub fetched_bytes: u64,
    pub evicted_bytes: u64,
    pub outputs: Vec<(ObjectId, u64)>,
    /// The digest of each output (by output name) the worker reported with them.
    pub digests: BTreeMap<String, Digest>,
    pub stdout_tail: String,
    pub stderr_tail: String,
    /// The median iteration time the task printed (`plexus:iter_ms=`), ms; 0 = none.
    pub iter_ms: f64,
    /// A failed attempt's input that no holder could serve (the task never ran).
    pub unfetched_input: Option<ObjectId>,
    /// Copies of inputs that a holder served and that did not match their digest.
    pub bad_copies: Vec<BadCopy>,
    /// A failed or stopped attempt's `checkpoint` output, kept on the reporting worker: its
    /// object (`<output>.attempt-<n>`), size and digest.
    pub checkpoint: Option<(ObjectId, u64, Option<Digest>)>,
    /// With state `Assigned`: what the attempt is doing before it runs (`pulling image ...`).
    pub stage: String,
}

/// A copy of `object` that `holder` served and whose bytes did not hash to its digest: the
/// holder is treated as having lost the object.
#[derive(Clone, Debug, PartialEq)]
pub struct BadCopy {
    pub object: ObjectId,
    pub holder: WorkerId,
}

/// An input object of an assignment and where to get it.
#[derive(Clone, Debug, PartialEq)]
pub struct InputLocation {
    pub object: ObjectId,
    pub size: u64,
    /// Its digest as its producer reported it (`None`: not known).
    pub digest: Option<Digest>,
    /// Live workers holding it.
    pub holders: Vec<HolderLocation>,
}

/// A worker holding an input: its PeerService URL and its data-plane rails.
#[derive(Clone, Debug, PartialEq)]
pub struct HolderLocation {
    pub worker: WorkerId,
    pub peer_addr: String,
    pub rails: Vec<String>,
}

/// Work sent to a worker.
#[derive(Clone, Debug, PartialEq)]
pub struct Assignment {
    pub attempt: AttemptRef,
    pub replicas: u32,
    pub work: Work,
    pub resources: Resources,
    pub timeout_ms: u64,
    pub inputs: Vec<InputLocation>,
    pub outputs: Vec<String>,
    pub env: BTreeMap<String, String>,
    /// For the collective kinds: the communicator the member joins.
    pub collective: Option<CollectiveAssignment>,
    /// The worker's GPU devices that are this attempt's alone (filled in when it is dispatched).
    pub gpus: Vec<u32>,
    /// This replica's sweep parameters, key order.
    pub params: Vec<(String, String)>,
    /// The task's `checkpoint` output, which the worker keeps when the attempt fails.
    pub checkpoint: Option<String>,
    /// The input (one of `inputs`) that is the subtask's latest kept checkpoint.
    pub resume: Option<ObjectId>,
    /// The job's working dir: its archive's digest and size (set when it is dispatched).
    pub working_dir: Option<(plexus_proto::Digest, u64)>,
    /// The requirements of the Python environment the command runs with (empty: none).
    pub python: Vec<String>,
    /// The container image the command runs in.
    pub image: Option<String>,
}

impl Assignment {
    /// The assignment of an attempt of `task` with the given resources, inputs and communicator.
    pub(super) fn of(
        task: &TaskSpec,
        attempt: AttemptRef,
        resources: Resources,
        inputs: Vec<InputLocation>,
        collective: Option<CollectiveAssignment>,
    ) -> Assignment {
        Assignment {
            replicas: task.replicas,
            work: task.work.clone(),
            resources,
            timeout_ms: task.timeout_ms,
            inputs,
            outputs: task.outputs.clone(),
            env: task.env.clone(),
            collective,
            gpus: Vec::new(),
            params: task.sweep.as_ref().map(|s| s.params(attempt.rank)).unwrap_or_default(),
            attempt,
            checkpoint: task.checkpoint.clone(),
            resume: None,
            working_dir: None,
            python: task.python.as_ref().map(|p| p.packages.clone()).unwrap_or_default(),
            image: task.image.clone(),
        }
        .sharing(task)
    }

    /// A sharing task holds no whole device, but runs on one: the worker is told `gpu = 1`.
    fn sharing(mut self, task: &TaskSpec) -> Assignment {
        if task.shares_gpu() {
            self.resources.gpu = 1;
        }
        self
    }
}

/// A collective member's communicator: every member's data-plane rails in rank order (the
/// member's own rank is its subtask's rank) and the tag base of this gang.
#[derive(Clone, Debug, PartialEq)]
pub struct CollectiveAssignment {
    pub spec: CollectiveSpec,
    pub members: Vec<Vec<String>>,
    pub tag: u64,
}

/// What a batch of calls changed: records to persist first, then messages to send.
#[derive(Debug, Default)]
pub struct Outbox {
    pub jobs: BTreeSet<JobId>,
    pub subtasks: BTreeSet<(JobId, u32)>,
    pub workers: BTreeSet<WorkerId>,
    /// Workers forgotten (`plexus workers remove`): their records are deleted.
    pub removed_workers: BTreeSet<WorkerId>,
    pub placements: BTreeSet<(JobId, u32)>,
    pub assignments: Vec<(WorkerId, Assignment)>,
    pub cancels: Vec<(WorkerId, AttemptRef)>,
}

impl Outbox {
    pub fn is_empty(&self) -> bool {
        self.jobs.is_empty()
            && self.subtasks.is_empty()
            && self.workers.is_empty()
            && self.removed_workers.is_empty()
            && self.placements.is_empty()
            && self.assignments.is_empty()
            && self.cancels.is_empty()
    }
}
