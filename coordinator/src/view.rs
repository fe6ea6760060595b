//! What the engine answers with: plain, owned snapshots of the core's state (a job, a worker, a
//! queue, a batch of work for a worker), taken on the engine thread and handed to the adapters.
//! They know no protobuf: [`crate::convert`] makes the gRPC messages of them, the dashboard its
//! pages. Built here, and only here, from the core's types, so what a reply shows of the core is
//! decided in one file.

use plexus_proto::{AttemptRef, JobId, JobState, ObjectId, Resources, SubtaskState, WorkerId};
use plexus_scheduler::core::estimates::WorkerSpeed;
use plexus_scheduler::core::{
    Assignment, AttemptFailure, Capacity, Core, GangView, Job, NodeReport, PlacementRecord, Worker,
};

/// How much of a job a view carries.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Detail {
    /// Per-task counts only: what lists, watches and cancels return.
    Summary,
    /// Also every subtask with its failed attempts.
    WithSubtasks,
}

impl Detail {
    /// The detail a `GetJob` request asks for.
    pub fn of_request(subtasks: bool) -> Detail {
        if subtasks { Detail::WithSubtasks } else { Detail::Summary }
    }
}

/// The worker protocol's timing a registration is answered with (`RegisterResponse`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Timing {
    pub heartbeat_interval_ms: u64,
    pub heartbeat_timeout_ms: u64,
    /// The worker's lease (see `CoreConfig::lease_ms`).
    pub lease_ms: u64,
    /// The registration was of a worker process (session) the coordinator still had alive.
    pub resumed: bool,
}

/// A job as `plexus status` and the dashboard show it.
#[derive(Clone, Debug)]
pub struct JobView {
    pub id: JobId,
    pub name: String,
    pub state: JobState,
    pub submitted_at: u64,
    pub finished_at: u64,
    pub error: String,
    /// One per task, in file order.
    pub groups: Vec<TaskGroupView>,
    /// Empty unless [`Detail::WithSubtasks`].
    pub subtasks: Vec<SubtaskView>,
    pub total_subtasks: u32,
    pub gangs: Vec<GangView>,
    pub priority: i64,
    pub queue: String,
    /// What it is doing (`pending`, `blocked`, `running`, or the ended state's name), and why
    /// for the first two.
    pub phase: &'static str,
    pub phase_reason: String,
    /// When its first subtask started running (0: none yet).
    pub started_at: u64,
    /// An ended job with a failed subtask: the first to fail for good (task, rank) and the last
    /// lines of its stderr.
    pub failed: Option<(String, u32, String)>,
}

/// A task's subtasks counted by state, and why its ready ones wait.
#[derive(Clone, Debug)]
pub struct TaskGroupView {
    pub task: String,
    pub replicas: u32,
    /// Subtasks in each state, indexed by `SubtaskState as usize`.
    pub counts: [u32; 7],
    pub waiting_reason: String,
    pub failed_attempts: u32,
    pub after: Vec<String>,
}

impl TaskGroupView {
    /// How many of the task's subtasks are in state `s`.
    pub fn count(&self, s: SubtaskState) -> u32 {
        self.counts[s as usize]
    }
}

/// One subtask: where it stands and what its attempts did. The log tails and the transition
/// history stay on the engine (they are large, and `plexus logs` reads them otherwise).
#[derive(Clone, Debug)]
pub struct SubtaskView {
    pub task: String,
    pub rank: u32,
    pub state: SubtaskState,
    pub attempt: u32,
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
    /// Each output's digest, by output name (absent: not known).
    pub digests: std::collections::BTreeMap<String, plexus_proto::Digest>,
    pub failed_attempts: Vec<AttemptFailure>,
    pub not_before: u64,
    pub reruns: u32,
    pub unfetched_requeues: u32,
    /// Its sweep parameters (key, value), key order; empty without a sweep.
    pub params: Vec<(String, String)>,
    /// What the current attempt is doing before it runs, as its worker reported.
    pub stage: String,
}

impl JobView {
    /// `job` as of `now` (gangs' phases depend on it), with its subtasks if `detail` asks.
    pub fn of(job: &Job, detail: Detail, now: u64) -> JobView {
        let r = job.record();
        let groups: Vec<TaskGroupView> = r
            .spec
            .tasks
            .iter()
            .enumerate()
            .map(|(t, spec)| TaskGroupView {
                task: spec.name.clone(),
                replicas: spec.replicas,
                counts: job.counts(t),
                waiting_reason: job.waiting_reason(t).unwrap_or_default().to_string(),
                failed_attempts: job.failed_attempts(t),
                after: spec.after.clone(),
            })
            .collect();
        // The tasks with a sweep, by name (usually none: then nothing is looked up per subtask).
        let sweeps: std::collections::HashMap<&str, &plexus_scheduler::spec::sweep::Sweep> =
            r.spec.tasks.iter().filter_map(|t| Some((t.name.as_str(), t.sweep.as_ref()?))).collect();
        let subtasks = match detail {
            Detail::Summary => Vec::new(),
            Detail::WithSubtasks => job
                .subtasks()
                .iter()
                .map(|s| SubtaskView {
                    params: sweeps.get(s.task.as_str()).map(|sw| sw.params(s.rank)).unwrap_or_default(),
                    stage: s.stage.clone(),
                    task: s.task.clone(),
                    rank: s.rank,
                    state: s.state,
                    attempt: s.attempt,
                    failures: s.failures,
                    worker: s.worker,
                    ready_at: s.ready_at,
                    assigned_at: s.assigned_at,
                    started_at: s.started_at,
                    finished_at: s.finished_at,
                    exit_code: s.exit_code,
                    error: s.error.clone(),
                    fetch_ms: s.fetch_ms,
                    fetched_bytes: s.fetched_bytes,
                    evicted_bytes: s.evicted_bytes,
                    outputs: s.outputs.clone(),
                    digests: s.digests.clone(),
                    failed_attempts: s.failed_attempts.clone(),
                    not_before: s.not_before,
                    reruns: s.reruns,
                    unfetched_requeues: s.unfetched_requeues,
                })
                .collect(),
        };
        let (phase, phase_reason) = phase(job, &groups);
        let failed = matches!(r.state, JobState::Failed | JobState::CompletedWithFailures)
            .then(|| {
                let s = job
                    .subtasks()
                    .iter()
                    .filter(|s| s.state == SubtaskState::Failed)
                    .min_by_key(|s| (s.finished_at, s.task.clone(), s.rank))?;
                Some((s.task.clone(), s.rank, last_lines(&s.stderr_tail, FAILED_LINES, FAILED_BYTES)))
            })
            .flatten();
        JobView {
            failed,
            phase,
            phase_reason,
            started_at: r.started_at,
            id: r.id,
            name: r.spec.name.clone(),
            state: r.state,
            submitted_at: r.submitted_at,
            finished_at: r.finished_at,
            error: r.error.clone(),
            groups,
            subtasks,
            total_subtasks: job.total(),
            gangs: job.gangs(now),
            priority: r.spec.priority,
            queue: r.spec.queue.clone(),
        }
    }

    pub fn is_final(&self) -> bool {
        self.state.is_final()
    }
}

/// How much of a failed subtask's stderr a job's status carries.
const FAILED_LINES: usize = 20;
const FAILED_BYTES: usize = 4096;

/// The last `lines` lines of `text`, at most `bytes` bytes of them (cut at a character).
pub fn last_lines(text: &str, lines: usize, bytes: usize) -> String {
    let trimmed = text.trim_end();
    let start = trimmed.rmatch_indices('\n').nth(lines.saturating_sub(1)).map_or(0, |(i, _)| i + 1);
    let mut tail = &trimmed[start..];
    if tail.len() > bytes {
        let mut cut = tail.len() - bytes;
        while !tail.is_char_boundary(cut) {
            cut += 1;
        }
        tail = &tail[cut..];
    }
    tail.to_string()
}

/// What a job is doing, and why when it waits: `blocked` while its `after_jobs` have not all
/// succeeded; `pending` until its first subtask starts running (with the first task's reason
/// for waiting, or that its placed subtasks are starting); then `running`; the ended state's
/// name once it ended.
fn phase(job: &Job, groups: &[TaskGroupView]) -> (&'static str, String) {
    let r = job.record();
    if r.state.is_final() {
        return (r.state.as_str(), String::new());
    }
    if let Some(why) = job.blocked() {
        return ("blocked", why.to_string());
    }
    if r.started_at > 0 {
        return ("running", String::new());
    }
    if let Some(g) = groups.iter().find(|g| !g.waiting_reason.is_empty()) {
        return ("pending", format!("task {}: {}", g.task, g.waiting_reason));
    }
    let placed: u32 = groups.iter().map(|g| g.count(SubtaskState::Assigned)).sum();
    let reason = match placed {
        0 => "waiting to be placed".to_string(),
        n => format!("starting: {n} subtask(s) placed, none running yet"),
    };
    ("pending", reason)
}

/// A worker for `plexus workers` and the dashboard.
#[derive(Clone, Debug)]
pub struct WorkerView {
    pub id: WorkerId,
    pub peer_addr: String,
    pub capacity: Capacity,
    /// The latest node state it reported (its isolation among it).
    pub node: NodeReport,
    pub objects: Vec<(ObjectId, u64)>,
    pub alive: bool,
    pub last_heartbeat: u64,
    pub allocated: Resources,
    /// Attempts placed on it.
    pub assigned: u32,
    /// What was measured of its speed (`None`: nothing yet).
    pub speed: Option<WorkerSpeed>,
    pub draining: bool,
}

impl WorkerView {
    pub fn of(w: &Worker, speed: Option<&WorkerSpeed>) -> WorkerView {
        WorkerView {
            id: w.record().id,
            peer_addr: w.record().peer_addr.clone(),
            capacity: w.record().capacity.clone(),
            node: w.node().clone(),
            objects: w.objects().iter().map(|(o, s)| (o.clone(), *s)).collect(),
            alive: w.record().alive,
            last_heartbeat: w.record().last_heartbeat,
            allocated: w.allocated(),
            assigned: w.placed().len() as u32,
            speed: speed.cloned(),
            draining: w.record().draining,
        }
    }

    /// Every worker of `core`, with its measured speed.
    pub fn all(core: &Core) -> Vec<WorkerView> {
        WorkerView::page(core, WorkerPage::ALL).workers
    }

    /// One page of `core`'s workers, and the summary of all of them. Builds views only for the
    /// page: at 5,000 workers a whole listing is ~750 KiB and tens of milliseconds of the
    /// engine's thread, a page of 500 a tenth of it, and the summary a pass of additions.
    pub fn page(core: &Core, page: WorkerPage) -> WorkerList {
        let limit = page.limit.unwrap_or(usize::MAX);
        // One more than the page, to know whether another follows.
        let chosen: Vec<&Worker> = match page.only {
            Some(id) => core.worker(id).into_iter().collect(),
            None => core.workers_after(page.after).take(limit.saturating_add(1)).collect(),
        };
        let next = (limit > 0 && chosen.len() > limit).then(|| chosen[limit - 1].record().id);
        let chosen = &chosen[..chosen.len().min(limit)];
        // The speeds (a pass over every measurement) only for a page that shows workers.
        let speeds = if chosen.is_empty() { Default::default() } else { core.estimates().speeds() };
        let workers = chosen.iter().map(|w| WorkerView::of(w, speeds.get(&w.record().id))).collect();
        WorkerList { workers, next, summary: WorkerSummary::of(core) }
    }
}

/// Which workers a listing wants: those after `after`, at most `limit` (`None`: no limit); or,
/// with `only`, that one worker (if it is known).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct WorkerPage {
    pub after: Option<WorkerId>,
    pub limit: Option<usize>,
    pub only: Option<WorkerId>,
}

impl WorkerPage {
    /// Every worker.
    pub const ALL: WorkerPage = WorkerPage { after: None, limit: None, only: None };
    /// No worker: the summary alone.
    pub const SUMMARY: WorkerPage = WorkerPage { after: None, limit: Some(0), only: None };

    /// The worker `id` alone.
    pub fn one(id: WorkerId) -> WorkerPage {
        WorkerPage { only: Some(id), ..WorkerPage::ALL }
    }
}

/// A page of workers: the page, the id to continue after (`None`: it was the last page), and
/// the summary of every worker.
#[derive(Clone, Debug)]
pub struct WorkerList {
    pub workers: Vec<WorkerView>,
    pub next: Option<WorkerId>,
    pub summary: WorkerSummary,
}

/// Counts and sums over every worker: what a cluster of thousands is at a glance.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct WorkerSummary {
    pub total: u32,
    pub alive: u32,
    pub draining: u32,
    /// Attempts placed and not finished, on every worker.
    pub assigned: u64,
    /// Over the alive workers: (held, offered).
    pub cpu: (f64, f64),
    pub memory: (u64, u64),
    pub gpus: (u64, u64),
    /// Bytes the alive workers' rails sent, as they last reported.
    pub rail_bytes_sent: u64,
}

impl WorkerSummary {
    pub fn of(core: &Core) -> WorkerSummary {
        let mut s = WorkerSummary::default();
        for w in core.workers() {
            let r = w.record();
            s.total += 1;
            s.draining += u32::from(r.draining);
            s.assigned += w.placed().len() as u64;
            if !r.alive {
                continue;
            }
            s.alive += 1;
            let held = w.allocated();
            s.cpu = (s.cpu.0 + held.cpu, s.cpu.1 + f64::from(r.capacity.cpus));
            s.memory = (s.memory.0.saturating_add(held.memory), s.memory.1.saturating_add(r.capacity.memory));
            s.gpus = (s.gpus.0 + u64::from(held.gpu), s.gpus.1 + r.capacity.gpus.len() as u64);
            s.rail_bytes_sent =
                w.node().rails.iter().map(|x| x.bytes_sent).fold(s.rail_bytes_sent, u64::saturating_add);
        }
        s
    }
}

/// A queue with a share, and the cores its placed attempts hold.
#[derive(Clone, Debug, PartialEq)]
pub struct QueueView {
    pub name: String,
    pub share: f64,
    pub used_cpu: f64,
}

impl QueueView {
    /// Every queue of `core` that has a share.
    pub fn all(core: &Core) -> Vec<QueueView> {
        core.queue_shares()
            .iter()
            .map(|(name, share)| QueueView { name: name.clone(), share: *share, used_cpu: core.queue_usage(name) })
            .collect()
    }
}

/// Why a subtask was placed where it was: the core's own record of the decision.
pub type Explanation = PlacementRecord;

/// New work and cancellations for one worker, sent in one message.
#[derive(Clone, Debug, Default)]
pub struct WorkBatch {
    pub assign: Vec<Assignment>,
    pub cancel: Vec<AttemptRef>,
}

impl WorkBatch {
    pub fn is_empty(&self) -> bool {
        self.assign.is_empty() && self.cancel.is_empty()
    }
}

#[cfg(test)]
mod last_lines_tests {
    use super::last_lines;

    #[test]
    fn the_last_lines_within_a_byte_bound() {
        let text = "a\nb\nc\nd\n\n";
        assert_eq!(last_lines(text, 2, 100), "c\nd");
        assert_eq!(last_lines(text, 10, 100), "a\nb\nc\nd");
        assert_eq!(last_lines("", 3, 100), "");
        assert_eq!(last_lines("one line", 3, 100), "one line");
        assert_eq!(last_lines("x\nééé", 1, 3), "é", "cut at a character, never inside one");
    }
}
