//! Jobs as `plexus status` and `plexus get` show them: the jobs table, a job's detail with its
//! groups, gangs and subtasks, why a subtask waits, and the JSON views of all of it.

use plexus_proto::SubtaskState;
use plexus_proto::convert::subtask_state;
use plexus_proto::pb;
use serde::Serialize;

use super::format::{Table, age, dash, fields, human_duration, job_state_name, non_empty, subtask_state_name, time};
use crate::client::one_line;

pub(super) fn succeeded(job: &pb::JobStatus) -> u32 {
    job.groups.iter().map(|g| g.succeeded).sum()
}

pub(super) fn total(job: &pb::JobStatus) -> u32 {
    if job.total_subtasks > 0 { job.total_subtasks } else { job.groups.iter().map(|g| g.replicas).sum() }
}

/// What a job is doing: its phase (`pending`, `blocked`, `running`, or how it ended), or its
/// state's name from a coordinator that sends no phase.
pub fn job_phase(job: &pb::JobStatus) -> &str {
    if job.phase.is_empty() { job_state_name(job.state) } else { &job.phase }
}

/// Time a job waited before anything of it ran: from submission to its first subtask's start,
/// or to now (or its end) when none has started.
fn job_queued(job: &pb::JobStatus, now_ms: u64) -> Option<u64> {
    if job.submitted_at == 0 {
        return None;
    }
    let end = match (job.started_at, job.finished_at) {
        (0, 0) => now_ms,
        (0, f) => f,
        (s, _) => s,
    };
    Some(end.saturating_sub(job.submitted_at))
}

/// Time a job has run: from its first subtask's start to its end, or to now while it runs.
fn job_ran(job: &pb::JobStatus, now_ms: u64) -> Option<u64> {
    if job.started_at == 0 {
        return None;
    }
    let end = if job.finished_at != 0 { job.finished_at } else { now_ms };
    Some(end.saturating_sub(job.started_at))
}

/// Run time of a subtask's current attempt: to its end, or to now while it runs.
fn subtask_duration(s: &pb::SubtaskStatus, now_ms: u64) -> Option<u64> {
    if s.started_at == 0 {
        return None;
    }
    let end = if s.finished_at != 0 { s.finished_at } else { now_ms };
    Some(end.saturating_sub(s.started_at))
}

/// An exit code means something only for a process that ran and ended.
fn exit_code(s: &pb::SubtaskStatus) -> Option<i32> {
    let ended = matches!(subtask_state("state", s.state), Ok(SubtaskState::Succeeded | SubtaskState::Failed));
    (ended && s.started_at != 0).then_some(s.exit_code)
}

/// `plexus status`: one row per job, newest first (as the dashboard lists them); ids as short
/// as keeps them apart (any of them is a job reference), full with `wide`.
pub fn jobs_table(jobs: &[pb::JobStatus], now_ms: u64, wide: bool) -> String {
    if jobs.is_empty() {
        return "no jobs\n".to_string();
    }
    let mut jobs: Vec<&pb::JobStatus> = jobs.iter().collect();
    jobs.sort_by(|a, b| (b.submitted_at, &b.job_id).cmp(&(a.submitted_at, &a.job_id)));
    let ids: Vec<String> = if wide {
        jobs.iter().map(|j| j.job_id.clone()).collect()
    } else {
        super::format::short_names(jobs.iter().map(|j| j.job_id.as_str()))
    };
    // Priority and queue when they say something (or with `wide`).
    let ordered = wide || jobs.iter().any(|j| j.priority != 0 || !matches!(j.queue.as_str(), "" | "default"));
    let mut heads = vec!["ID", "NAME", "STATE", "PROGRESS", "SUBMITTED", "QUEUED", "RAN"];
    if ordered {
        heads.extend(["PRI", "QUEUE"]);
    }
    let mut t = Table::new(&heads);
    for (j, id) in jobs.into_iter().zip(ids) {
        let order = [j.priority.to_string(), if j.queue.is_empty() { "default".into() } else { j.queue.clone() }];
        t.row(
            [
                id,
                j.name.clone(),
                job_phase(j).to_string(),
                format!("{}/{}", succeeded(j), total(j)),
                age(j.submitted_at, now_ms),
                dash(job_queued(j, now_ms).map(human_duration)),
                dash(job_ran(j, now_ms).map(human_duration)),
            ]
            .into_iter()
            .chain(order.into_iter().filter(|_| ordered))
            .collect(),
        );
    }
    t.render()
}

/// How much of a job to show: its task groups only, or one row (or JSON object) per subtask too.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Detail {
    /// The header and the task groups (the job list, `status JOB`).
    Summary,
    /// Also every subtask (`status JOB --subtasks`, and every `-o json` of one job).
    WithSubtasks,
}

/// `plexus status JOB [--subtasks]`: a header, the task groups, and with
/// [`Detail::WithSubtasks`] the subtasks.
pub fn job_detail(job: &pb::JobStatus, detail: Detail, now_ms: u64) -> String {
    let mut head = vec![("job", job.job_id.clone()), ("name", job.name.clone()), ("state", job_phase(job).to_string())];
    if !job.phase_reason.is_empty() {
        head.push(("why", one_line(&job.phase_reason)));
    }
    if !job.error.is_empty() {
        head.push(("error", one_line(&job.error)));
    }
    head.push(("submitted", age(job.submitted_at, now_ms)));
    head.push(("queued", dash(job_queued(job, now_ms).map(human_duration))));
    head.push(("ran", dash(job_ran(job, now_ms).map(human_duration))));
    head.push(("progress", format!("{}/{} succeeded", succeeded(job), total(job))));
    if job.priority != 0 {
        head.push(("priority", job.priority.to_string()));
    }
    if !job.queue.is_empty() && job.queue != "default" {
        head.push(("queue", job.queue.clone()));
    }
    let mut out = fields(&head);
    out.push_str(&failure_block(job));

    let mut groups =
        Table::new(&["TASK", "REPLICAS", "WAITING", "READY", "RUNNING", "SUCCEEDED", "FAILED", "CANCELLED"]);
    for g in &job.groups {
        groups.row(vec![
            g.task.clone(),
            g.replicas.to_string(),
            g.waiting.to_string(),
            g.ready.to_string(),
            (g.assigned + g.running).to_string(),
            g.succeeded.to_string(),
            g.failed.to_string(),
            g.cancelled.to_string(),
        ]);
    }
    out.push('\n');
    out.push_str(&groups.render());
    for g in job.groups.iter().filter(|g| !g.waiting_reason.is_empty()) {
        out.push_str(&format!("waiting: {}: {}\n", g.task, one_line(&g.waiting_reason)));
    }
    // A finished job's gangs have nothing to say beyond its tasks.
    if job_state_name(job.state) == "running" {
        for g in &job.gangs {
            out.push_str(&format!("gang {}: {}\n", g.name, gang_line(g, now_ms)));
        }
    }

    if detail == Detail::WithSubtasks {
        // A PARAMS column (`lr=0.1 batch=32`) when some subtask is a sweep's replica.
        let params = job.subtasks.iter().any(|s| !s.params.is_empty());
        let mut heads = vec!["TASK", "RANK"];
        if params {
            heads.push("PARAMS");
        }
        heads.extend(["STATE", "ATTEMPT", "WORKER", "EXIT", "DURATION", "REASON", "ERROR"]);
        let mut subs = Table::new(&heads);
        for s in &job.subtasks {
            let mut row = vec![s.task.clone(), s.rank.to_string()];
            if params {
                row.push(dash(param_text(s)));
            }
            row.extend([
                subtask_state_name(s.state).to_string(),
                s.attempt.to_string(),
                dash(non_empty(&s.worker_id)),
                dash(exit_code(s).map(|c| c.to_string())),
                dash(subtask_duration(s, now_ms).map(human_duration)),
                dash(waiting_reason(job, s, now_ms)),
                one_line(&s.error),
            ]);
            subs.row(row);
        }
        out.push('\n');
        out.push_str(&subs.render());
        let failures: Vec<(&pb::SubtaskStatus, &pb::AttemptFailure)> =
            job.subtasks.iter().flat_map(|s| s.failed_attempts.iter().map(move |f| (s, f))).collect();
        if !failures.is_empty() {
            let mut t = Table::new(&["TASK", "RANK", "ATTEMPT", "WORKER", "EXIT", "ERROR"]);
            for (s, f) in failures {
                t.row(vec![
                    s.task.clone(),
                    s.rank.to_string(),
                    f.attempt.to_string(),
                    dash(non_empty(&f.worker_id)),
                    f.exit_code.to_string(),
                    one_line(&f.error),
                ]);
            }
            out.push_str("\nfailed attempts:\n");
            out.push_str(&t.render());
        }
    }
    out
}

/// A sweep replica's parameters as `key=value` pairs in key order (`None`: it has none).
pub fn param_text(s: &pb::SubtaskStatus) -> Option<String> {
    let mut p: Vec<(&String, &String)> = s.params.iter().collect();
    p.sort();
    (!p.is_empty()).then(|| p.iter().map(|(k, v)| format!("{k}={}", one_line(v))).collect::<Vec<_>>().join(" "))
}

/// Why a subtask that is not running waits: `after: gen` (tasks it needs, not done), its gang's
/// state, a retry's back-off, why its task's ready subtasks are not placed, or, once placed, what
/// its worker is doing before it runs (`pulling image python:3.11-slim`).
pub fn waiting_reason(job: &pb::JobStatus, s: &pb::SubtaskStatus, now_ms: u64) -> Option<String> {
    let group = job.groups.iter().find(|g| g.task == s.task)?;
    match subtask_state_name(s.state) {
        "waiting" => {
            let pending: Vec<&str> = group
                .after
                .iter()
                .filter(|a| job.groups.iter().find(|g| &g.task == *a).is_some_and(|g| g.succeeded < g.replicas))
                .map(String::as_str)
                .collect();
            (!pending.is_empty()).then(|| format!("after: {}", pending.join(", ")))
        }
        "ready" => {
            if s.not_before > now_ms {
                return Some(format!("retry in {} s", (s.not_before - now_ms).div_ceil(1000)));
            }
            if let Some(g) = job.gangs.iter().find(|g| g.tasks.contains(&s.task) && g.phase != "bound") {
                return Some(format!("gang {}: {}", g.name, gang_line(g, now_ms)));
            }
            non_empty(&group.waiting_reason).map(|r| one_line(&r))
        }
        // Placed, not yet running: what its worker says it is doing (`pulling image ...`).
        "assigned" => non_empty(&s.stage).map(|r| one_line(&r)),
        _ => None,
    }
}

/// One gang's state in words: `3/4 reserved, deadline in 12 s`, `bound`, `rolled back at
/// 10:41:07 (deadline: …), retry in 4 s`, or `waiting (0/4 reserved)`.
pub fn gang_line(g: &pb::GangStatus, now_ms: u64) -> String {
    let secs = |ms: u64| format!("{} s", ms.saturating_sub(now_ms).div_ceil(1000));
    match g.phase.as_str() {
        "bound" => format!("bound ({} of {} members needed to start)", g.min_members, g.members),
        "reserving" => format!("{}/{} reserved, deadline in {}", g.reserved, g.min_members, secs(g.deadline)),
        "planned" => format!(
            "planned: starts in about {} by the time limits of what runs where it will (those workers take only work that ends sooner)",
            secs(g.planned_start)
        ),
        "backing off" => format!(
            "rolled back at {} ({}), retry in {}",
            clock_time(g.rolled_back_at),
            one_line(&g.reason),
            secs(g.retry_at)
        ),
        _ if g.rollbacks > 0 => format!(
            "waiting ({}/{} reserved; rolled back {} time(s), last: {})",
            g.reserved,
            g.min_members,
            g.rollbacks,
            one_line(&g.reason)
        ),
        _ => format!("waiting ({}/{} reserved)", g.reserved, g.min_members),
    }
}

/// HH:MM:SS (UTC) of a time in ms since the epoch.
fn clock_time(ms: u64) -> String {
    let s = ms / 1000 % 86_400;
    format!("{:02}:{:02}:{:02}", s / 3600, s / 60 % 60, s % 60)
}

#[derive(Debug, Serialize)]
pub struct GangView {
    pub name: String,
    pub tasks: Vec<String>,
    pub min_members: u32,
    pub members: u32,
    pub reserved: u32,
    /// waiting, planned, reserving, bound or backing off.
    pub phase: String,
    /// planned: when it is expected to start.
    pub planned_start_ms: Option<u64>,
    pub deadline_ms: Option<u64>,
    pub bound_at_ms: Option<u64>,
    pub rolled_back_at_ms: Option<u64>,
    pub retry_at_ms: Option<u64>,
    pub rollbacks: u32,
    pub reason: Option<String>,
    pub timeout_ms: u64,
}

#[derive(Debug, Serialize)]
pub struct JobList {
    pub jobs: Vec<JobView>,
}

#[derive(Debug, Serialize)]
pub struct JobView {
    pub job_id: String,
    pub name: String,
    pub state: &'static str,
    /// `pending`, `blocked`, `running`, or the ended state's name; and why for the first two.
    pub phase: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub phase_reason: Option<String>,
    pub submitted_at_ms: Option<u64>,
    /// When its first subtask started running.
    pub started_at_ms: Option<u64>,
    pub finished_at_ms: Option<u64>,
    /// Only for a finished job, so the document does not change while nothing happens.
    pub duration_ms: Option<u64>,
    /// Time from submission to its first subtask's start; and from there to its end (each once
    /// it is known).
    pub queued_ms: Option<u64>,
    pub ran_ms: Option<u64>,
    /// A failed job: the subtask whose failure ended it and the last lines of its stderr.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub failed_subtask: Option<FailedView>,
    pub error: Option<String>,
    pub total_subtasks: u32,
    pub succeeded_subtasks: u32,
    pub groups: Vec<GroupView>,
    pub priority: i64,
    pub queue: String,
    pub gangs: Vec<GangView>,
    /// Present for one job (`status JOB -o json`), absent in the job list.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub subtasks: Option<Vec<SubtaskView>>,
}

#[derive(Debug, Serialize)]
pub struct FailedView {
    pub task: String,
    pub rank: u32,
    pub stderr_tail: String,
}

#[derive(Debug, Serialize)]
pub struct GroupView {
    pub task: String,
    pub replicas: u32,
    pub waiting: u32,
    pub ready: u32,
    pub assigned: u32,
    pub running: u32,
    pub succeeded: u32,
    pub failed: u32,
    pub cancelled: u32,
    pub failed_attempts: u32,
    /// Why ready subtasks of the task are not placed, when some wait.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub waiting_reason: Option<String>,
}

#[derive(Debug, Serialize)]
pub struct SubtaskView {
    pub task: String,
    pub rank: u32,
    pub state: &'static str,
    pub attempt: u32,
    pub failures: u32,
    pub worker_id: Option<String>,
    pub ready_at_ms: Option<u64>,
    pub assigned_at_ms: Option<u64>,
    pub started_at_ms: Option<u64>,
    pub finished_at_ms: Option<u64>,
    /// Only when the attempt started and finished.
    pub duration_ms: Option<u64>,
    pub exit_code: Option<i32>,
    pub error: Option<String>,
    pub fetch_ms: u64,
    pub fetched_bytes: u64,
    pub evicted_bytes: u64,
    pub outputs: Vec<ObjectView>,
    /// Every failed attempt, oldest first.
    pub failed_attempts: Vec<AttemptFailureView>,
    /// A retry waiting out its back-off is not placed before this.
    pub not_before_ms: Option<u64>,
    /// Runs after success, to remake outputs lost with a worker (not failures).
    pub reruns: u32,
    /// Attempts placed again, uncounted, after no holder could serve one of their inputs.
    pub unfetched_requeues: u32,
}

#[derive(Debug, Serialize)]
pub struct AttemptFailureView {
    pub attempt: u32,
    pub worker_id: Option<String>,
    pub exit_code: i32,
    pub error: String,
    pub finished_at_ms: Option<u64>,
}

#[derive(Debug, Serialize)]
pub struct ObjectView {
    pub object_id: String,
    pub size_bytes: u64,
    /// BLAKE3 of its bytes (64 hex digits), as its attempt reported it; null when not known.
    pub digest: Option<String>,
}

pub fn job_view(job: &pb::JobStatus, detail: Detail) -> JobView {
    JobView {
        job_id: job.job_id.clone(),
        name: job.name.clone(),
        state: job_state_name(job.state),
        phase: job_phase(job).to_string(),
        phase_reason: non_empty(&job.phase_reason),
        submitted_at_ms: time(job.submitted_at),
        started_at_ms: time(job.started_at),
        finished_at_ms: time(job.finished_at),
        duration_ms: (job.submitted_at != 0 && job.finished_at != 0)
            .then(|| job.finished_at.saturating_sub(job.submitted_at)),
        queued_ms: (job.submitted_at != 0 && (job.started_at != 0 || job.finished_at != 0))
            .then(|| job_queued(job, 0).unwrap_or(0)),
        ran_ms: (job.started_at != 0 && job.finished_at != 0).then(|| job.finished_at.saturating_sub(job.started_at)),
        failed_subtask: (!job.failed_task.is_empty()).then(|| FailedView {
            task: job.failed_task.clone(),
            rank: job.failed_rank,
            stderr_tail: job.failed_stderr.clone(),
        }),
        error: non_empty(&job.error),
        total_subtasks: total(job),
        succeeded_subtasks: succeeded(job),
        groups: job
            .groups
            .iter()
            .map(|g| GroupView {
                task: g.task.clone(),
                replicas: g.replicas,
                waiting: g.waiting,
                ready: g.ready,
                assigned: g.assigned,
                running: g.running,
                succeeded: g.succeeded,
                failed: g.failed,
                cancelled: g.cancelled,
                failed_attempts: g.failed_attempts,
                waiting_reason: non_empty(&g.waiting_reason),
            })
            .collect(),
        priority: job.priority,
        queue: job.queue.clone(),
        gangs: job
            .gangs
            .iter()
            .map(|g| GangView {
                name: g.name.clone(),
                tasks: g.tasks.clone(),
                min_members: g.min_members,
                members: g.members,
                reserved: g.reserved,
                phase: g.phase.clone(),
                planned_start_ms: time(g.planned_start),
                deadline_ms: time(g.deadline),
                bound_at_ms: time(g.bound_at),
                rolled_back_at_ms: time(g.rolled_back_at),
                retry_at_ms: time(g.retry_at),
                rollbacks: g.rollbacks,
                reason: non_empty(&g.reason),
                timeout_ms: g.timeout_ms,
            })
            .collect(),
        subtasks: (detail == Detail::WithSubtasks).then(|| job.subtasks.iter().map(subtask_view).collect()),
    }
}

fn subtask_view(s: &pb::SubtaskStatus) -> SubtaskView {
    SubtaskView {
        task: s.task.clone(),
        rank: s.rank,
        state: subtask_state_name(s.state),
        attempt: s.attempt,
        failures: s.failures,
        worker_id: non_empty(&s.worker_id),
        ready_at_ms: time(s.ready_at),
        assigned_at_ms: time(s.assigned_at),
        started_at_ms: time(s.started_at),
        finished_at_ms: time(s.finished_at),
        duration_ms: (s.started_at != 0 && s.finished_at != 0).then(|| s.finished_at.saturating_sub(s.started_at)),
        exit_code: exit_code(s),
        error: non_empty(&s.error),
        fetch_ms: s.fetch_ms,
        fetched_bytes: s.fetched_bytes,
        evicted_bytes: s.evicted_bytes,
        outputs: s
            .outputs
            .iter()
            .map(|o| ObjectView {
                object_id: o.object_id.clone(),
                size_bytes: o.size,
                digest: plexus_proto::Digest::from_field("digest", &o.digest).ok().flatten().map(|d| d.to_string()),
            })
            .collect(),
        failed_attempts: s
            .failed_attempts
            .iter()
            .map(|f| AttemptFailureView {
                attempt: f.attempt,
                worker_id: non_empty(&f.worker_id),
                exit_code: f.exit_code,
                error: f.error.clone(),
                finished_at_ms: time(f.finished_at),
            })
            .collect(),
        not_before_ms: time(s.not_before),
        reruns: s.reruns,
        unfetched_requeues: s.unfetched_requeues,
    }
}

pub fn job_list_view(jobs: &[pb::JobStatus]) -> JobList {
    let mut jobs: Vec<&pb::JobStatus> = jobs.iter().collect();
    jobs.sort_by(|a, b| (a.submitted_at, &a.job_id).cmp(&(b.submitted_at, &b.job_id)));
    JobList { jobs: jobs.into_iter().map(|j| job_view(j, Detail::Summary)).collect() }
}

/// The last line of `watch` (and of `cancel`): `job <id> <state>`, then `: <error>` if any;
/// for a failure, then the last lines of the failed subtask's stderr ([`failure_block`]).
pub fn job_final_line(job: &pb::JobStatus) -> String {
    let mut line = format!("job {} {}", job.job_id, job_state_name(job.state));
    if !job.error.is_empty() {
        line.push_str(": ");
        line.push_str(&one_line(&job.error));
    }
    line.push('\n');
    line.push_str(&failure_block(job));
    line
}

/// The last lines of stderr of the subtask whose failure ended the job, each indented, under a
/// line saying whose they are and how to see all of it; empty when there are none.
pub fn failure_block(job: &pb::JobStatus) -> String {
    if job.failed_task.is_empty() || job.failed_stderr.trim().is_empty() {
        return String::new();
    }
    let mut out = format!(
        "stderr of {} rank {} (last lines; all of it: plexus logs {} {} --rank {}):\n",
        job.failed_task, job.failed_rank, job.job_id, job.failed_task, job.failed_rank
    );
    for l in job.failed_stderr.lines() {
        out.push_str("  | ");
        out.push_str(&l.chars().filter(|c| !c.is_control() || *c == '\t').collect::<String>());
        out.push('\n');
    }
    out
}
