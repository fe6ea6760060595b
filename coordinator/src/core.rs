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

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet, VecDeque};

use plexus_proto::{AttemptRef, JobId, JobState, ObjectId, Resources, SubtaskState, WorkerId};
use serde::{Deserialize, Serialize};

use crate::placer::{Candidate, Outcome, PlacementRequest, Placer};
use crate::spec::{CollectiveSpec, JobSpec, TaskSpec, Work};

/// Timing of the worker protocol.
#[derive(Clone, Debug)]
pub struct CoreConfig {
    pub heartbeat_interval_ms: u64,
    pub heartbeat_timeout_ms: u64,
}

impl Default for CoreConfig {
    fn default() -> Self {
        // Heartbeats twice a second keep node state fresh for placement at negligible cost;
        // six missed beats (3 s) declare a worker lost: long enough to ride out a stalled
        // process on a busy 2-core machine, short enough that a dead node's work restarts soon.
        CoreConfig { heartbeat_interval_ms: 500, heartbeat_timeout_ms: 3_000 }
    }
}

/// Why a request to the core was refused.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum CoreError {
    #[error("no job {0}")]
    NoJob(JobId),
    #[error("job {job} has no task {task:?}")]
    NoTask { job: JobId, task: String },
    #[error("task {task:?} of job {job} has {replicas} replica(s); rank {rank} does not exist")]
    NoRank { job: JobId, task: String, rank: u32, replicas: u32 },
    #[error("job {job} has already {}", state.as_str())]
    JobFinished { job: JobId, state: JobState },
    #[error("{0}")]
    Unsatisfiable(String),
    #[error("job {0} already exists")]
    Duplicate(JobId),
    #[error("{0}")]
    NotPlaced(String),
}

// ---- persisted records ----------------------------------------------------------------------

/// A job as stored. Its subtasks are stored separately (one record each), so that a state change
/// of one subtask rewrites one small record, not the whole job.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct JobRecord {
    pub id: JobId,
    /// Submission order, for FIFO scheduling across jobs.
    pub seq: u64,
    pub spec: JobSpec,
    pub state: JobState,
    pub submitted_at: u64,
    pub finished_at: u64,
    pub error: String,
}

/// One state change of a subtask, kept in its history.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Transition {
    pub state: SubtaskState,
    pub at: u64,
    pub attempt: u32,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub worker: Option<WorkerId>,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub note: String,
}

/// A subtask as stored and as held in memory.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Subtask {
    pub task: String,
    pub rank: u32,
    pub state: SubtaskState,
    /// 0 until first placed; +1 on every placement.
    pub attempt: u32,
    /// Failed attempts (a lost worker does not count).
    pub failures: u32,
    pub worker: Option<WorkerId>,
    pub ready_at: u64,
    pub assigned_at: u64,
    pub started_at: u64,
    pub finished_at: u64,
    pub exit_code: i32,
    pub error: String,
    pub fetch_ms: u64,
    pub fetched_bytes: u64,
    pub evicted_bytes: u64,
    /// (output name, size) of a succeeded attempt.
    pub outputs: Vec<(String, u64)>,
    pub stdout_tail: String,
    pub stderr_tail: String,
    pub history: Vec<Transition>,
}

/// The hardware a worker offers.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Capacity {
    pub cpus: u32,
    pub memory: u64,
    pub gpus: Vec<GpuRecord>,
    pub rails: Vec<String>,
    pub cache_bytes: u64,
    pub hostname: String,
}

impl Capacity {
    pub fn resources(&self) -> Resources {
        Resources { cpu: self.cpus as f64, memory: self.memory, gpu: self.gpus.len() as u32 }
    }
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct GpuRecord {
    pub index: u32,
    pub name: String,
    pub memory: u64,
}

/// A worker as stored.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct WorkerRecord {
    pub id: WorkerId,
    /// The worker process's session; a different one on re-registration means it restarted.
    pub session: String,
    pub peer_addr: String,
    pub capacity: Capacity,
    pub alive: bool,
    pub registered_at: u64,
    pub last_heartbeat: u64,
}

/// One candidate as recorded for `plexus explain`.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct CandidateRecord {
    pub worker: WorkerId,
    pub feasible: bool,
    pub score: Option<f64>,
    pub features: Vec<(String, f64)>,
    pub note: String,
}

/// The latest placement decision of a subtask, stored for `plexus explain`.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct PlacementRecord {
    /// The decision id given to the placer (see `PlacementRequest::decision`).
    #[serde(default)]
    pub decision: u64,
    pub placer: String,
    pub attempt: u32,
    pub chosen: WorkerId,
    pub exploratory: bool,
    pub reason: String,
    pub decided_at: u64,
    pub candidates: Vec<CandidateRecord>,
}

// ---- what crosses the boundary --------------------------------------------------------------

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
    pub stdout_tail: String,
    pub stderr_tail: String,
}

/// An input object of an assignment and where to get it.
#[derive(Clone, Debug, PartialEq)]
pub struct InputLocation {
    pub object: ObjectId,
    pub size: u64,
    /// Live workers holding it.
    pub holders: Vec<HolderLocation>,
}

/// A worker holding an input: its PeerService URL and its data-plane rails.
#[derive(Clone, Debug, PartialEq)]
pub struct HolderLocation {
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
}

impl Assignment {
    /// The assignment of an attempt of `task` with the given resources, inputs and communicator.
    fn of(task: &TaskSpec, attempt: AttemptRef, resources: Resources, inputs: Vec<InputLocation>, collective: Option<CollectiveAssignment>) -> Assignment {
        Assignment {
            attempt,
            replicas: task.replicas,
            work: task.work.clone(),
            resources,
            timeout_ms: task.timeout_ms,
            inputs,
            outputs: task.outputs.clone(),
            env: task.env.clone(),
            collective,
        }
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
    pub placements: BTreeSet<(JobId, u32)>,
    pub assignments: Vec<(WorkerId, Assignment)>,
    pub cancels: Vec<(WorkerId, AttemptRef)>,
}

impl Outbox {
    pub fn is_empty(&self) -> bool {
        self.jobs.is_empty()
            && self.subtasks.is_empty()
            && self.workers.is_empty()
            && self.placements.is_empty()
            && self.assignments.is_empty()
            && self.cancels.is_empty()
    }
}

// ---- in-memory state ------------------------------------------------------------------------

/// A job in memory: its record, its subtasks (task by task, rank by rank) and derived indexes.
pub struct Job {
    pub record: JobRecord,
    pub subtasks: Vec<Subtask>,
    pub placements: HashMap<u32, PlacementRecord>,
    /// Index of the first subtask of each task.
    offsets: Vec<u32>,
    /// counts[task][state as usize]
    counts: Vec<[u32; 7]>,
    /// Tasks that list each task in `after`.
    dependents: Vec<Vec<usize>>,
}

fn state_index(s: SubtaskState) -> usize {
    s as usize
}

impl Job {
    fn new(record: JobRecord, subtasks: Vec<Subtask>) -> Job {
        let spec = &record.spec;
        let mut offsets = Vec::with_capacity(spec.tasks.len());
        let mut off = 0u32;
        for t in &spec.tasks {
            offsets.push(off);
            off += t.replicas;
        }
        let names: HashMap<&str, usize> = spec.tasks.iter().enumerate().map(|(i, t)| (t.name.as_str(), i)).collect();
        let mut dependents = vec![Vec::new(); spec.tasks.len()];
        for (i, t) in spec.tasks.iter().enumerate() {
            for a in &t.after {
                if let Some(&j) = names.get(a.as_str()) {
                    dependents[j].push(i);
                }
            }
        }
        let mut counts = vec![[0u32; 7]; spec.tasks.len()];
        for s in &subtasks {
            if let Some(&t) = names.get(s.task.as_str()) {
                counts[t][state_index(s.state)] += 1;
            }
        }
        Job { record, subtasks, placements: HashMap::new(), offsets, counts, dependents }
    }

    pub fn id(&self) -> JobId {
        self.record.id
    }

    pub fn spec(&self) -> &JobSpec {
        &self.record.spec
    }

    pub fn task_index(&self, name: &str) -> Option<usize> {
        self.record.spec.tasks.iter().position(|t| t.name == name)
    }

    /// Index of a subtask, checking that the task and rank exist.
    pub fn subtask_index(&self, task: &str, rank: u32) -> Result<u32, CoreError> {
        let t = self.task_index(task).ok_or_else(|| CoreError::NoTask { job: self.id(), task: task.to_string() })?;
        let replicas = self.record.spec.tasks[t].replicas;
        if rank >= replicas {
            return Err(CoreError::NoRank { job: self.id(), task: task.to_string(), rank, replicas });
        }
        Ok(self.offsets[t] + rank)
    }

    /// Subtasks of task `t` per state, indexed like [`SubtaskState`].
    pub fn counts(&self, t: usize) -> [u32; 7] {
        self.counts[t]
    }

    fn task_of(&self, idx: u32) -> usize {
        // offsets is sorted; the task is the last one starting at or before idx.
        self.offsets.partition_point(|&o| o <= idx) - 1
    }

    fn task_done(&self, t: usize) -> bool {
        self.counts[t][state_index(SubtaskState::Succeeded)] == self.record.spec.tasks[t].replicas
    }

    fn deps_done(&self, t: usize) -> bool {
        self.record.spec.tasks[t].after.iter().all(|a| self.task_index(a).is_some_and(|j| self.task_done(j)))
    }

    pub fn succeeded(&self) -> u32 {
        self.counts.iter().map(|c| c[state_index(SubtaskState::Succeeded)]).sum()
    }

    pub fn total(&self) -> u32 {
        self.subtasks.len() as u32
    }
}

/// A worker in memory.
pub struct Worker {
    pub record: WorkerRecord,
    /// Registered with this coordinator process (a session is live). False after a restart until
    /// the worker registers again; assignments go only to connected workers.
    pub connected: bool,
    pub node: NodeReport,
    pub allocated: Resources,
    pub placed: BTreeSet<(JobId, u32)>,
    pub objects: HashMap<ObjectId, u64>,
}

impl Worker {
    pub fn free(&self) -> Resources {
        self.record.capacity.resources().minus(&self.allocated)
    }
}

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
    ready: VecDeque<(JobId, u32)>,
    /// Next placement decision id.
    next_decision: u64,
    out: Outbox,
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
            ready: VecDeque::new(),
            next_decision: 1,
            out: Outbox::default(),
        }
    }

    pub fn config(&self) -> &CoreConfig {
        &self.config
    }

    pub fn placer_name(&self) -> &'static str {
        self.placer.name()
    }

    /// Rebuilds the state from stored records. Workers are not connected until they register
    /// again; each gets a full heartbeat timeout from `now` to do so before it is declared lost.
    pub fn restore(&mut self, snap: Snapshot, now: u64) -> Result<(), String> {
        let mut subtasks: HashMap<JobId, Vec<(u32, Subtask)>> = HashMap::new();
        for (job, idx, s) in snap.subtasks {
            subtasks.entry(job).or_default().push((idx, s));
        }
        for rec in snap.jobs {
            let mut subs = subtasks.remove(&rec.id).unwrap_or_default();
            subs.sort_by_key(|(i, _)| *i);
            let expected = rec.spec.total_subtasks();
            if subs.len() as u64 != expected || subs.iter().enumerate().any(|(i, (idx, _))| i as u32 != *idx) {
                return Err(format!("job {}: store holds {} subtask records, the spec expands to {expected}", rec.id, subs.len()));
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
            let w = Worker { record: rec, connected: false, node: NodeReport::default(), allocated: Resources::default(), placed: BTreeSet::new(), objects: HashMap::new() };
            self.workers.insert(w.record.id, w);
        }
        // Derived state: allocations, and the ready queue in submission order.
        let order: Vec<JobId> = self.job_order.values().copied().collect();
        for id in order {
            let job = &self.jobs[&id];
            let running = job.record.state == JobState::Running;
            for (i, s) in job.subtasks.iter().enumerate() {
                if s.state.is_placed()
                    && let Some(w) = s.worker.and_then(|w| self.workers.get_mut(&w))
                {
                    w.allocated.add(&job.record.spec.tasks[job.task_of(i as u32)].resources);
                    w.placed.insert((id, i as u32));
                }
                if running && s.state == SubtaskState::Ready {
                    self.ready.push_back((id, i as u32));
                }
            }
        }
        Ok(())
    }

    // ---- jobs ----

    /// Why no registered worker could ever run some task of `spec`, if that is so. With no
    /// worker registered yet nothing can be judged, and the job waits for workers.
    pub fn unsatisfiable(&self, spec: &JobSpec) -> Option<String> {
        if self.workers.is_empty() {
            return None;
        }
        for t in &spec.tasks {
            let r = &t.resources;
            if !self.workers.values().any(|w| r.fits_in(&w.record.capacity.resources())) {
                let max_cpu = self.workers.values().map(|w| w.record.capacity.cpus).max().unwrap_or(0);
                let max_mem = self.workers.values().map(|w| w.record.capacity.memory).max().unwrap_or(0);
                let max_gpu = self.workers.values().map(|w| w.record.capacity.gpus.len()).max().unwrap_or(0);
                return Some(format!(
                    "task {:?} asks for cpu={}, memory={}, gpu={} but no registered worker can ever offer that (largest: cpu={max_cpu}, memory={}, gpu={max_gpu})",
                    t.name,
                    r.cpu,
                    bytesize::ByteSize(r.memory).display().iec(),
                    r.gpu,
                    bytesize::ByteSize(max_mem).display().iec(),
                ));
            }
            if t.collective.is_some() {
                let able = self.workers.values().filter(|w| r.fits_in(&w.record.capacity.resources())).count();
                if able < t.replicas as usize {
                    return Some(format!(
                        "task {:?} is a collective of {} members, each on its own worker, but only {able} registered worker(s) can fit a member",
                        t.name, t.replicas
                    ));
                }
            }
        }
        None
    }

    /// Accepts a validated job; returns its number of subtasks.
    pub fn submit(&mut self, id: JobId, spec: JobSpec, now: u64) -> Result<u32, CoreError> {
        if self.jobs.contains_key(&id) {
            return Err(CoreError::Duplicate(id));
        }
        if let Some(why) = self.unsatisfiable(&spec) {
            return Err(CoreError::Unsatisfiable(why));
        }
        let seq = self.next_seq;
        self.next_seq += 1;
        let mut subtasks = Vec::with_capacity(spec.total_subtasks() as usize);
        for t in &spec.tasks {
            for rank in 0..t.replicas {
                subtasks.push(Subtask {
                    task: t.name.clone(),
                    rank,
                    state: SubtaskState::Waiting,
                    attempt: 0,
                    failures: 0,
                    worker: None,
                    ready_at: 0,
                    assigned_at: 0,
                    started_at: 0,
                    finished_at: 0,
                    exit_code: 0,
                    error: String::new(),
                    fetch_ms: 0,
                    fetched_bytes: 0,
                    evicted_bytes: 0,
                    outputs: Vec::new(),
                    stdout_tail: String::new(),
                    stderr_tail: String::new(),
                    history: vec![Transition { state: SubtaskState::Waiting, at: now, attempt: 0, worker: None, note: String::new() }],
                });
            }
        }
        let n = subtasks.len() as u32;
        let record = JobRecord { id, seq, spec, state: JobState::Running, submitted_at: now, finished_at: 0, error: String::new() };
        let job = Job::new(record, subtasks);
        for i in 0..n {
            self.out.subtasks.insert((id, i));
        }
        let roots: Vec<usize> = (0..job.record.spec.tasks.len()).filter(|&t| job.record.spec.tasks[t].after.is_empty()).collect();
        self.jobs.insert(id, job);
        self.job_order.insert(seq, id);
        self.out.jobs.insert(id);
        for t in roots {
            self.release_task(id, t, now);
        }
        Ok(n)
    }

    /// Cancels a running job: pending subtasks are cancelled, running ones killed.
    pub fn cancel(&mut self, id: JobId, now: u64) -> Result<(), CoreError> {
        let job = self.jobs.get(&id).ok_or(CoreError::NoJob(id))?;
        if job.record.state.is_final() {
            return Err(CoreError::JobFinished { job: id, state: job.record.state });
        }
        self.finish_job(id, JobState::Cancelled, "cancelled by request".into(), now);
        Ok(())
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

    // ---- workers ----

    /// Registers a worker or re-registers it after a restart of either side.
    ///
    /// If the worker process is new (another session), every attempt placed on its previous
    /// process is lost and placed again. If it is the same process (the coordinator restarted or
    /// the connection broke), placed attempts it does not list in `known` never reached it and are
    /// placed again, and attempts it lists that are no longer current are cancelled on it.
    pub fn register(&mut self, reg: Registration, now: u64) {
        let id = reg.worker;
        let same_process = self.workers.get(&id).is_some_and(|w| w.record.session == reg.session);
        let known: HashSet<&AttemptRef> = reg.known.iter().collect();

        if let Some(w) = self.workers.get(&id) {
            let placed: Vec<(JobId, u32)> = w.placed.iter().copied().collect();
            for (job, idx) in placed {
                let Some(s) = self.jobs.get(&job).map(|j| &j.subtasks[idx as usize]) else { continue };
                let current = AttemptRef { job, task: s.task.clone(), rank: s.rank, attempt: s.attempt };
                if !same_process {
                    self.requeue(job, idx, now, "worker restarted".into());
                } else if !known.contains(&current) {
                    self.requeue(job, idx, now, "assignment never reached the worker".into());
                }
            }
        }
        // Attempts the worker runs that we no longer want there.
        for a in &reg.known {
            let wanted = self.jobs.get(&a.job).and_then(|j| {
                let idx = j.subtask_index(&a.task, a.rank).ok()?;
                let s = &j.subtasks[idx as usize];
                (s.attempt == a.attempt && s.worker == Some(id) && s.state.is_placed()).then_some(())
            });
            if wanted.is_none() {
                self.out.cancels.push((id, a.clone()));
            }
        }

        let registered_at = self.workers.get(&id).map(|w| w.record.registered_at).unwrap_or(now);
        let record = WorkerRecord {
            id,
            session: reg.session,
            peer_addr: reg.peer_addr,
            capacity: reg.capacity,
            alive: true,
            registered_at,
            last_heartbeat: now,
        };
        let w = self.workers.entry(id).or_insert_with(|| Worker {
            record: record.clone(),
            connected: true,
            node: NodeReport::default(),
            allocated: Resources::default(),
            placed: BTreeSet::new(),
            objects: HashMap::new(),
        });
        w.record = record;
        w.connected = true;
        self.out.workers.insert(id);
        self.update_node(id, reg.state);
    }

    /// A heartbeat; false if the worker must register again (unknown, or another session).
    pub fn heartbeat(&mut self, id: WorkerId, session: &str, node: NodeReport, now: u64) -> bool {
        let Some(w) = self.workers.get_mut(&id) else { return false };
        if !w.connected || w.record.session != session {
            return false;
        }
        w.record.last_heartbeat = now;
        self.update_node(id, node);
        true
    }

    fn update_node(&mut self, id: WorkerId, node: NodeReport) {
        let Some(w) = self.workers.get_mut(&id) else { return };
        let new: HashMap<ObjectId, u64> = node.objects.iter().cloned().collect();
        for o in w.objects.keys() {
            if !new.contains_key(o)
                && let Some(h) = self.holders.get_mut(o)
            {
                h.remove(&id);
                if h.is_empty() {
                    self.holders.remove(o);
                }
            }
        }
        for o in new.keys() {
            if !w.objects.contains_key(o) {
                self.holders.entry(o.clone()).or_default().insert(id);
            }
        }
        w.objects = new;
        w.node = node;
    }

    /// Declares workers whose heartbeats stopped lost and places their attempts again.
    pub fn tick(&mut self, now: u64) {
        let timeout = self.config.heartbeat_timeout_ms;
        let lost: Vec<WorkerId> =
            self.workers.values().filter(|w| w.record.alive && now.saturating_sub(w.record.last_heartbeat) > timeout).map(|w| w.record.id).collect();
        for id in lost {
            self.lose_worker(id, now);
        }
    }

    fn lose_worker(&mut self, id: WorkerId, now: u64) {
        let Some(w) = self.workers.get_mut(&id) else { return };
        tracing::warn!(worker = %id, "worker missed its heartbeats; declared lost");
        w.record.alive = false;
        w.connected = false;
        let placed: Vec<(JobId, u32)> = w.placed.iter().copied().collect();
        let objects: Vec<ObjectId> = w.objects.drain().map(|(o, _)| o).collect();
        for o in objects {
            if let Some(h) = self.holders.get_mut(&o) {
                h.remove(&id);
                if h.is_empty() {
                    self.holders.remove(&o);
                }
            }
        }
        self.out.workers.insert(id);
        for (job, idx) in placed {
            self.requeue(job, idx, now, format!("worker {id} lost"));
        }
    }

    /// Applies a worker's reports. Returns false if the worker must register again first.
    pub fn report(&mut self, id: WorkerId, session: &str, reports: Vec<Report>, now: u64) -> bool {
        match self.workers.get(&id) {
            Some(w) if w.connected && w.record.session == session => {}
            _ => return false,
        }
        for r in reports {
            self.apply_report(id, r, now);
        }
        true
    }

    fn apply_report(&mut self, wid: WorkerId, r: Report, now: u64) {
        let (Some(a), Some(state)) = (r.attempt, r.state) else { return };
        let Some(job) = self.jobs.get_mut(&a.job) else { return };
        let Ok(idx) = job.subtask_index(&a.task, a.rank) else { return };
        let s = &job.subtasks[idx as usize];
        if s.attempt != a.attempt || s.worker != Some(wid) || !s.state.is_placed() {
            tracing::debug!(attempt = %a, "stale report ignored");
            return;
        }
        let key = (a.job, idx);
        match state {
            SubtaskState::Running => {
                if s.state == SubtaskState::Assigned {
                    let st = &mut job.subtasks[idx as usize];
                    st.started_at = if r.started_at > 0 { r.started_at } else { now };
                    self.set_state(key, SubtaskState::Running, now, String::new());
                }
            }
            SubtaskState::Succeeded | SubtaskState::Failed | SubtaskState::Cancelled => {
                {
                    let st = &mut job.subtasks[idx as usize];
                    if r.started_at > 0 {
                        st.started_at = r.started_at;
                    }
                    st.finished_at = if r.finished_at > 0 { r.finished_at } else { now };
                    st.exit_code = r.exit_code;
                    st.error = r.error.clone();
                    st.fetch_ms = r.fetch_ms;
                    st.fetched_bytes = r.fetched_bytes;
                    st.evicted_bytes = r.evicted_bytes;
                    st.stdout_tail = r.stdout_tail;
                    st.stderr_tail = r.stderr_tail;
                }
                self.feedback(key, wid, state == SubtaskState::Succeeded);
                match state {
                    SubtaskState::Succeeded => self.succeed(key, wid, r.outputs, now),
                    SubtaskState::Failed => self.fail_attempt(key, now, r.error),
                    // Workers cancel only what we asked them to; any other cancellation (the
                    // worker shutting down) is not the task's fault: place it again.
                    _ => self.requeue(key.0, key.1, now, "cancelled on the worker".into()),
                }
            }
            _ => {}
        }
    }

    fn feedback(&mut self, (job, idx): (JobId, u32), wid: WorkerId, succeeded: bool) {
        let util = self.cluster_utilisation();
        let Some(j) = self.jobs.get(&job) else { return };
        let s = &j.subtasks[idx as usize];
        let Some(decision) = j.placements.get(&idx).filter(|p| p.attempt == s.attempt).map(|p| p.decision) else { return };
        let outcome = Outcome {
            decision,
            worker: wid,
            succeeded,
            wait_ms: s.started_at.saturating_sub(s.ready_at),
            run_ms: s.finished_at.saturating_sub(s.started_at),
            fetch_ms: s.fetch_ms,
            fetched_bytes: s.fetched_bytes,
            evicted_bytes: s.evicted_bytes,
            cluster_utilisation: util,
        };
        self.placer.observe(&outcome);
    }

    /// Promised share of all live cores.
    pub fn cluster_utilisation(&self) -> f64 {
        let (used, total) = self
            .workers
            .values()
            .filter(|w| w.record.alive)
            .fold((0.0, 0.0), |(u, t), w| (u + w.allocated.cpu, t + w.record.capacity.cpus as f64));
        if total > 0.0 { (used / total).min(1.0) } else { 0.0 }
    }

    fn succeed(&mut self, key: (JobId, u32), wid: WorkerId, outputs: Vec<(ObjectId, u64)>, now: u64) {
        self.release_worker(key, wid);
        let Some(job) = self.jobs.get_mut(&key.0) else { return };
        let s = &mut job.subtasks[key.1 as usize];
        s.outputs = outputs.iter().map(|(o, size)| (o.name.clone(), *size)).collect();
        if let Some(w) = self.workers.get_mut(&wid) {
            for (o, size) in outputs {
                w.objects.insert(o.clone(), size);
                self.holders.entry(o).or_default().insert(wid);
            }
        }
        self.set_state(key, SubtaskState::Succeeded, now, String::new());
        let job = &self.jobs[&key.0];
        let t = job.task_of(key.1);
        if job.task_done(t) {
            for d in job.dependents[t].clone() {
                if self.jobs[&key.0].deps_done(d) {
                    self.release_task(key.0, d, now);
                }
            }
        }
        let job = &self.jobs[&key.0];
        if job.succeeded() == job.total() {
            self.finish_job(key.0, JobState::Succeeded, String::new(), now);
        }
    }

    fn fail_attempt(&mut self, key: (JobId, u32), now: u64, error: String) {
        let Some(job) = self.jobs.get_mut(&key.0) else { return };
        let max_retries = job.record.spec.tasks[job.task_of(key.1)].max_retries;
        let s = &mut job.subtasks[key.1 as usize];
        s.failures += 1;
        let (failures, task, rank) = (s.failures, s.task.clone(), s.rank);
        if failures <= max_retries {
            self.requeue(key.0, key.1, now, format!("attempt failed ({error}); retry {failures} of {max_retries}"));
        } else {
            let wid = self.jobs[&key.0].subtasks[key.1 as usize].worker;
            if let Some(w) = wid {
                self.release_worker(key, w);
            }
            self.set_state(key, SubtaskState::Failed, now, error.clone());
            let attempts = if failures == 1 { "1 attempt".to_string() } else { format!("{failures} attempts") };
            self.finish_job(key.0, JobState::Failed, format!("task {task:?} rank {rank} failed after {attempts}: {error}"), now);
        }
    }

    /// Takes an attempt off its worker and makes the subtask ready for a new attempt.
    fn requeue(&mut self, job: JobId, idx: u32, now: u64, note: String) {
        let Some(j) = self.jobs.get(&job) else { return };
        let s = &j.subtasks[idx as usize];
        if s.state.is_final() {
            return;
        }
        if let Some(w) = s.worker {
            self.release_worker((job, idx), w);
        }
        if self.jobs[&job].record.state.is_final() {
            return;
        }
        let j = self.jobs.get_mut(&job).expect("checked above");
        let s = &mut j.subtasks[idx as usize];
        s.worker = None;
        s.ready_at = now;
        self.set_state((job, idx), SubtaskState::Ready, now, note);
        self.ready.push_back((job, idx));
    }

    /// Frees the resources an attempt held on a worker.
    fn release_worker(&mut self, (job, idx): (JobId, u32), wid: WorkerId) {
        let Some(j) = self.jobs.get(&job) else { return };
        let res = j.record.spec.tasks[j.task_of(idx)].resources;
        if let Some(w) = self.workers.get_mut(&wid)
            && w.placed.remove(&(job, idx))
        {
            w.allocated.sub(&res);
        }
    }

    fn release_task(&mut self, job: JobId, t: usize, now: u64) {
        let Some(j) = self.jobs.get(&job) else { return };
        let start = j.offsets[t];
        let n = j.record.spec.tasks[t].replicas;
        for idx in start..start + n {
            if self.jobs[&job].subtasks[idx as usize].state == SubtaskState::Waiting {
                self.jobs.get_mut(&job).expect("exists").subtasks[idx as usize].ready_at = now;
                self.set_state((job, idx), SubtaskState::Ready, now, String::new());
                self.ready.push_back((job, idx));
            }
        }
    }

    fn finish_job(&mut self, id: JobId, state: JobState, error: String, now: u64) {
        let Some(job) = self.jobs.get(&id) else { return };
        let open: Vec<u32> = (0..job.total()).filter(|&i| !job.subtasks[i as usize].state.is_final()).collect();
        for idx in open {
            let s = &self.jobs[&id].subtasks[idx as usize];
            if s.state.is_placed()
                && let Some(w) = s.worker
            {
                let a = AttemptRef { job: id, task: s.task.clone(), rank: s.rank, attempt: s.attempt };
                self.out.cancels.push((w, a));
                self.release_worker((id, idx), w);
            }
            self.set_state((id, idx), SubtaskState::Cancelled, now, String::new());
        }
        let job = self.jobs.get_mut(&id).expect("exists");
        job.record.state = state;
        job.record.finished_at = now;
        job.record.error = error;
        self.out.jobs.insert(id);
    }

    /// The one place a subtask changes state: keeps counts and history, marks it dirty.
    fn set_state(&mut self, (job, idx): (JobId, u32), state: SubtaskState, now: u64, note: String) {
        let Some(j) = self.jobs.get_mut(&job) else { return };
        let t = j.task_of(idx);
        let s = &mut j.subtasks[idx as usize];
        j.counts[t][state_index(s.state)] -= 1;
        j.counts[t][state_index(state)] += 1;
        s.state = state;
        s.history.push(Transition { state, at: now, attempt: s.attempt, worker: s.worker, note });
        self.out.subtasks.insert((job, idx));
    }

    // ---- placement ----

    /// Places ready subtasks on connected workers with room, oldest job first.
    pub fn schedule(&mut self, now: u64) {
        if self.ready.is_empty() || !self.workers.values().any(|w| w.connected && w.record.alive) {
            return;
        }
        let mut deferred = VecDeque::new();
        // Gangs that could not be placed this round: their other members wait without retrying.
        let mut gangs_waiting: HashSet<(JobId, usize)> = HashSet::new();
        let n = self.ready.len();
        for _ in 0..n {
            let Some((job, idx)) = self.ready.pop_front() else { break };
            let Some(j) = self.jobs.get(&job) else { continue };
            if j.record.state != JobState::Running || j.subtasks[idx as usize].state != SubtaskState::Ready {
                continue; // stale queue entry
            }
            let t = j.task_of(idx);
            let placed = if j.record.spec.tasks[t].collective.is_some() {
                !gangs_waiting.contains(&(job, t)) && self.place_gang(job, t, now)
            } else {
                self.place(job, idx, now)
            };
            if !placed {
                if self.jobs.get(&job).is_some_and(|j| j.record.spec.tasks[t].collective.is_some()) {
                    gangs_waiting.insert((job, t));
                }
                deferred.push_back((job, idx));
            }
        }
        deferred.append(&mut self.ready);
        self.ready = deferred;
    }

    /// Places one subtask; false if no worker has room now.
    fn place(&mut self, job: JobId, idx: u32, now: u64) -> bool {
        let j = &self.jobs[&job];
        let task = &j.record.spec.tasks[j.task_of(idx)];
        let req = task.resources;

        // Inputs: every replica's output of each input task.
        let mut inputs: Vec<(ObjectId, u64)> = Vec::new();
        for input in &task.inputs {
            let Some(t) = j.task_index(&input.task) else { continue };
            let producer = &j.record.spec.tasks[t];
            for rank in 0..producer.replicas {
                let s = &j.subtasks[(j.offsets[t] + rank) as usize];
                let size = s.outputs.iter().find(|(n, _)| *n == input.output).map(|(_, sz)| *sz).unwrap_or(0);
                inputs.push((ObjectId { job, task: input.task.clone(), rank, name: input.output.clone() }, size));
            }
        }

        let mut candidates = Vec::new();
        for w in self.workers.values().filter(|w| w.connected && w.record.alive) {
            let free = w.free();
            let fits = req.fits_in(&free);
            let local: u64 = inputs.iter().filter(|(o, _)| w.objects.contains_key(o)).map(|(_, s)| *s).sum();
            candidates.push(Candidate {
                worker: w.record.id,
                feasible: fits,
                note: if fits { String::new() } else { format!("needs {} free, has {}", fmt_res(&req), fmt_res(&free)) },
                capacity: w.record.capacity.resources(),
                free,
                assigned: w.placed.len() as u32,
                cpu_utilisation: w.node.cpu_utilisation,
                local_input_bytes: local,
                cache_bytes: w.record.capacity.cache_bytes,
                cache_used: w.node.cache_used,
                // The coordinator knows neither the network between workers nor their engine
                // speeds, so it estimates neither (the simulator does).
                est_fetch_ms: None,
                est_compute_ms: None,
            });
        }
        if !candidates.iter().any(|c| c.feasible) {
            return false;
        }
        let decision_id = self.next_decision;
        self.next_decision += 1;
        let preq = PlacementRequest {
            decision: decision_id,
            job_age_ms: now.saturating_sub(j.record.submitted_at),
            resources: req,
            input_bytes: inputs.iter().map(|(_, s)| *s).sum(),
            flops: task.flops,
            writes: !task.outputs.is_empty(),
        };
        let decision = self.placer.place(&preq, &candidates);
        let Some(chosen) = candidates.get(decision.chosen).filter(|c| c.feasible) else {
            tracing::error!(placer = self.placer.name(), "placer chose an infeasible or missing candidate; subtask left ready");
            return false;
        };
        let wid = chosen.worker;

        let record = PlacementRecord {
            decision: decision_id,
            placer: self.placer.name().to_string(),
            attempt: j.subtasks[idx as usize].attempt + 1,
            chosen: wid,
            exploratory: decision.exploratory,
            reason: decision.reason.clone(),
            decided_at: now,
            candidates: candidates
                .iter()
                .enumerate()
                .map(|(i, c)| CandidateRecord {
                    worker: c.worker,
                    feasible: c.feasible,
                    score: decision.scores.get(i).copied().filter(|s| !s.is_nan()),
                    features: decision.features.as_ref().and_then(|f| f.get(i).cloned()).unwrap_or_else(|| c.features()),
                    note: c.note.clone(),
                })
                .collect(),
        };

        let input_locations = inputs
            .into_iter()
            .map(|(o, size)| InputLocation { holders: self.holder_locations(&o), object: o, size })
            .collect();

        let attempt = self.begin_attempt(job, idx, wid, now);
        let j = &self.jobs[&job];
        let task = &j.record.spec.tasks[j.task_of(idx)];
        let assignment = Assignment::of(task, attempt, req, input_locations, None);
        self.dispatch((job, idx), wid, record, assignment, now);
        true
    }

    /// Live workers holding `o`, with their rails: where an assignment's input can be fetched.
    fn holder_locations(&self, o: &ObjectId) -> Vec<HolderLocation> {
        let Some(h) = self.holders.get(o) else { return Vec::new() };
        h.iter()
            .filter_map(|w| self.workers.get(w))
            .filter(|w| w.record.alive)
            .map(|w| HolderLocation { peer_addr: w.record.peer_addr.clone(), rails: w.record.capacity.rails.clone() })
            .collect()
    }

    /// Starts the next attempt of a subtask on `wid`: a new attempt number, outcome fields
    /// cleared. Returns the attempt.
    fn begin_attempt(&mut self, job: JobId, idx: u32, wid: WorkerId, now: u64) -> AttemptRef {
        let s = &mut self.jobs.get_mut(&job).expect("exists").subtasks[idx as usize];
        s.attempt += 1;
        s.worker = Some(wid);
        s.assigned_at = now;
        s.started_at = 0;
        s.finished_at = 0;
        s.exit_code = 0;
        s.error.clear();
        AttemptRef { job, task: s.task.clone(), rank: s.rank, attempt: s.attempt }
    }

    /// Records a placement decided by [`Core::place`] or [`Core::place_gang`]: the subtask is
    /// `Assigned`, the worker's allocation grows, and the assignment goes out.
    fn dispatch(&mut self, (job, idx): (JobId, u32), wid: WorkerId, record: PlacementRecord, assignment: Assignment, now: u64) {
        let req = assignment.resources;
        self.jobs.get_mut(&job).expect("exists").placements.insert(idx, record);
        self.out.placements.insert((job, idx));
        self.set_state((job, idx), SubtaskState::Assigned, now, String::new());
        let w = self.workers.get_mut(&wid).expect("candidate exists");
        w.allocated.add(&req);
        w.placed.insert((job, idx));
        self.out.assignments.push((wid, assignment));
    }

    /// Places every member of collective task `t` at once, each on its own worker, or none.
    ///
    /// A gang runs together or not at all: when some members are ready again (a failed or lost
    /// member) while others are still placed, those are cancelled and made ready first, so the
    /// whole gang is placed anew with one communicator. Members are placed where their input
    /// (the producer replica of the same rank) is resident when that worker has room, else on
    /// the feasible worker with the most free cores. False when the gang does not fit now (or
    /// cannot be rerun); nothing is then placed.
    fn place_gang(&mut self, job: JobId, t: usize, now: u64) -> bool {
        let j = &self.jobs[&job];
        let task = &j.record.spec.tasks[t];
        let (start, n) = (j.offsets[t], task.replicas);
        let members: Vec<u32> = (start..start + n).collect();

        if let Some(&done) = members.iter().find(|&&i| j.subtasks[i as usize].state == SubtaskState::Succeeded) {
            // A member that completed cannot join a new communicator; its result stands alone.
            let (name, rank) = (task.name.clone(), j.subtasks[done as usize].rank);
            let msg = format!("collective {name:?}: member {rank} completed but other members must run again; a partial gang cannot be rerun");
            self.finish_job(job, JobState::Failed, msg, now);
            return false;
        }
        let active: Vec<u32> = members.iter().copied().filter(|&i| j.subtasks[i as usize].state.is_placed()).collect();
        for idx in active {
            let s = &self.jobs[&job].subtasks[idx as usize];
            if let Some(w) = s.worker {
                let a = AttemptRef { job, task: s.task.clone(), rank: s.rank, attempt: s.attempt };
                self.out.cancels.push((w, a));
            }
            self.requeue(job, idx, now, "gang restarted: another member has to run again".into());
        }

        let j = &self.jobs[&job];
        let task = &j.record.spec.tasks[t];
        if members.iter().any(|&i| j.subtasks[i as usize].state != SubtaskState::Ready) {
            return false;
        }
        let req = task.resources;
        let input = &task.inputs[0];
        let producer = j.task_index(&input.task);
        let mut free: HashMap<WorkerId, Resources> =
            self.workers.values().filter(|w| w.connected && w.record.alive).map(|w| (w.record.id, w.free())).collect();
        let mut chosen: Vec<(WorkerId, ObjectId, u64, &'static str)> = Vec::with_capacity(members.len());
        for rank in 0..n {
            let size = producer
                .map(|p| &j.subtasks[(j.offsets[p] + rank) as usize])
                .and_then(|s| s.outputs.iter().find(|(o, _)| *o == input.output).map(|(_, sz)| *sz))
                .unwrap_or(0);
            let object = ObjectId { job, task: input.task.clone(), rank, name: input.output.clone() };
            let taken = |w: &WorkerId| chosen.iter().any(|(c, ..)| c == w);
            let holder = self.holders.get(&object).and_then(|h| {
                h.iter().copied().find(|w| !taken(w) && free.get(w).is_some_and(|f| req.fits_in(f)))
            });
            let (wid, why) = match holder {
                Some(w) => (w, "holds the member's input"),
                None => {
                    let best = free
                        .iter()
                        .filter(|(w, f)| !taken(w) && req.fits_in(f))
                        .max_by(|(a, fa), (b, fb)| fa.cpu.total_cmp(&fb.cpu).then_with(|| b.cmp(a)));
                    match best {
                        Some((w, _)) => (*w, "most free cores"),
                        None => return false,
                    }
                }
            };
            if let Some(f) = free.get_mut(&wid) {
                f.cpu -= req.cpu;
                f.memory = f.memory.saturating_sub(req.memory);
                f.gpu = f.gpu.saturating_sub(req.gpu);
            }
            chosen.push((wid, object, size, why));
        }

        let spec = task.collective.clone().expect("a collective task");
        let rails: Vec<Vec<String>> = chosen.iter().map(|(w, ..)| self.workers[w].record.capacity.rails.clone()).collect();
        let generation = j.subtasks[start as usize].attempt + 1;
        // The gang's tag base: distinct per job, task and generation, with the low 32 bits free
        // for the communicator's own message numbering.
        let tag = gang_tag(job, t, generation);
        let task_name = task.name.clone();
        for (rank, (wid, object, size, why)) in chosen.into_iter().enumerate() {
            let idx = start + rank as u32;
            let holders = self.holder_locations(&object);
            let decision = self.next_decision;
            self.next_decision += 1;
            let attempt = self.begin_attempt(job, idx, wid, now);
            let task = &self.jobs[&job].record.spec.tasks[t];
            let record = PlacementRecord {
                decision,
                placer: "gang".into(),
                attempt: attempt.attempt,
                chosen: wid,
                exploratory: false,
                reason: format!("member {rank} of {n} of collective {task_name:?}: {why}"),
                decided_at: now,
                candidates: Vec::new(),
            };
            let collective = CollectiveAssignment { spec: spec.clone(), members: rails.clone(), tag };
            let assignment = Assignment::of(task, attempt, req, vec![InputLocation { object, size, holders }], Some(collective));
            self.dispatch((job, idx), wid, record, assignment, now);
        }
        true
    }

    /// What was decided for a subtask's latest placement.
    pub fn explain(&self, job: JobId, task: &str, rank: u32) -> Result<&PlacementRecord, CoreError> {
        let j = self.jobs.get(&job).ok_or(CoreError::NoJob(job))?;
        let idx = j.subtask_index(task, rank)?;
        j.placements
            .get(&idx)
            .ok_or_else(|| CoreError::NotPlaced(format!("task {task:?} rank {rank} of job {job} has not been placed yet ({})", j.subtasks[idx as usize].state.as_str())))
    }

    /// The changes since the last call.
    pub fn take_outbox(&mut self) -> Outbox {
        std::mem::take(&mut self.out)
    }

    /// Number of subtasks waiting for a worker with room.
    pub fn ready_len(&self) -> usize {
        self.ready.len()
    }

    pub fn subtask(&self, job: JobId, idx: u32) -> Option<&Subtask> {
        self.jobs.get(&job).and_then(|j| j.subtasks.get(idx as usize))
    }

    pub fn placement(&self, job: JobId, idx: u32) -> Option<&PlacementRecord> {
        self.jobs.get(&job).and_then(|j| j.placements.get(&idx))
    }

}

/// A collective gang's tag base: a 32-bit FNV-1a hash of (job, task, generation) in the high
/// half, so concurrent gangs on the same workers use disjoint tags and a rerun never matches a
/// message of the gang before it.
fn gang_tag(job: JobId, task: usize, generation: u32) -> u64 {
    let mut h: u32 = 0x811c_9dc5;
    for b in job.to_string().bytes().chain((task as u64).to_le_bytes()).chain(generation.to_le_bytes()) {
        h ^= u32::from(b);
        h = h.wrapping_mul(0x0100_0193);
    }
    // Never 0: the high half of a random object-fetch tag is rarely 0, and 0 is easy to confuse.
    u64::from(h.max(1)) << 32
}

fn fmt_res(r: &Resources) -> String {
    format!("cpu={:.2} memory={} gpu={}", r.cpu, bytesize::ByteSize(r.memory).display().iec(), r.gpu)
}

#[cfg(test)]
mod tests;
