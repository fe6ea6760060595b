//! Everything `plexus` prints: human sizes and durations, hand-formatted tables, and the stable
//! JSON documents of `-o json`. All functions here are pure (the current time is a parameter), so
//! the formats are pinned by unit tests; the command modules only fetch data and call these.
//!
//! JSON conventions: snake_case field names, states as lowercase strings ("succeeded"), times as
//! milliseconds since the Unix epoch in fields ending `_ms` (null when not happened yet),
//! durations in fields ending `_ms`, sizes in bytes in fields ending `_bytes`.

use std::collections::BTreeMap;
use std::io::{self, Write};

use plexus_proto::convert::{job_state, subtask_state};
use plexus_proto::pb;
use plexus_proto::{JobState, SubtaskState};
use serde::Serialize;

use crate::client::one_line;

// ---------------------------------------------------------------------------------------------
// Writing
// ---------------------------------------------------------------------------------------------

/// Writes to stdout. A closed pipe (`plexus status | head`) is not an error: the reader has
/// what it wanted, and `println!` would panic there.
pub fn print(s: &str) -> anyhow::Result<()> {
    write_ignoring_closed_pipe(&mut io::stdout().lock(), s.as_bytes())
}

/// Writes raw bytes to stdout or stderr (task logs need not be UTF-8).
pub fn write_bytes(w: &mut dyn Write, bytes: &[u8]) -> anyhow::Result<()> {
    write_ignoring_closed_pipe(w, bytes)
}

fn write_ignoring_closed_pipe(w: &mut dyn Write, bytes: &[u8]) -> anyhow::Result<()> {
    match w.write_all(bytes).and_then(|()| w.flush()) {
        Err(e) if e.kind() == io::ErrorKind::BrokenPipe => Ok(()),
        r => Ok(r.map_err(|e| anyhow::anyhow!("cannot write the output: {e}"))?),
    }
}

/// Pretty JSON with a trailing newline.
pub fn json<T: Serialize>(value: &T) -> String {
    // Serialising these plain structs cannot fail (string keys, no custom serialisers).
    let mut s = serde_json::to_string_pretty(value).unwrap_or_else(|e| format!("{{\"error\": \"{e}\"}}"));
    s.push('\n');
    s
}

// ---------------------------------------------------------------------------------------------
// Units
// ---------------------------------------------------------------------------------------------

/// `512 B`, `1.5 KiB`, `12.0 MiB`, `3.2 GiB`, `1.0 TiB`.
pub fn human_size(bytes: u64) -> String {
    const UNITS: [&str; 5] = ["KiB", "MiB", "GiB", "TiB", "PiB"];
    if bytes < 1024 {
        return format!("{bytes} B");
    }
    let mut value = bytes as f64 / 1024.0;
    let mut unit = 0;
    while value >= 1024.0 && unit + 1 < UNITS.len() {
        value /= 1024.0;
        unit += 1;
    }
    format!("{value:.1} {}", UNITS[unit])
}

/// `850ms`, `12.3s`, `4m05s`, `2h03m`, `3d04h`.
pub fn human_duration(ms: u64) -> String {
    const S: u64 = 1000;
    const M: u64 = 60 * S;
    const H: u64 = 60 * M;
    const D: u64 = 24 * H;
    match ms {
        _ if ms < S => format!("{ms}ms"),
        _ if ms < M => format!("{:.1}s", ms as f64 / S as f64),
        _ if ms < H => format!("{}m{:02}s", ms / M, ms % M / S),
        _ if ms < D => format!("{}h{:02}m", ms / H, ms % H / M),
        _ => format!("{}d{:02}h", ms / D, ms % D / H),
    }
}

/// How long ago `at_ms` was, `-` when it never happened (0 in the contract).
pub fn age(at_ms: u64, now_ms: u64) -> String {
    if at_ms == 0 { "-".to_string() } else { format!("{} ago", human_duration(now_ms.saturating_sub(at_ms))) }
}

/// A number without noise: `3`, `0.25`, `1.3333`, `-2`.
pub fn number(v: f64) -> String {
    if !v.is_finite() {
        return v.to_string();
    }
    if v.fract() == 0.0 && v.abs() < 1e15 {
        return format!("{}", v as i64);
    }
    let s = format!("{v:.4}");
    let s = s.trim_end_matches('0').trim_end_matches('.');
    if s == "-0" { "0".to_string() } else { s.to_string() }
}

fn yes_no(b: bool) -> &'static str {
    if b { "yes" } else { "no" }
}

/// 0 means "not yet" in the contract; JSON says null instead.
fn time(ms: u64) -> Option<u64> {
    (ms != 0).then_some(ms)
}

fn non_empty(s: &str) -> Option<String> {
    (!s.is_empty()).then(|| s.to_string())
}

pub fn job_state_name(v: i32) -> &'static str {
    job_state("state", v).map(JobState::as_str).unwrap_or("unknown")
}

pub fn subtask_state_name(v: i32) -> &'static str {
    subtask_state("state", v).map(SubtaskState::as_str).unwrap_or("unknown")
}

// ---------------------------------------------------------------------------------------------
// Tables
// ---------------------------------------------------------------------------------------------

/// A plain text table: left-aligned columns two spaces apart, an upper-case header row, no
/// trailing spaces.
pub struct Table {
    header: Vec<String>,
    rows: Vec<Vec<String>>,
}

impl Table {
    pub fn new(header: &[&str]) -> Self {
        Table { header: header.iter().map(|h| h.to_string()).collect(), rows: Vec::new() }
    }

    pub fn row(&mut self, cells: Vec<String>) {
        self.rows.push(cells);
    }

    pub fn is_empty(&self) -> bool {
        self.rows.is_empty()
    }

    pub fn render(&self) -> String {
        let cols = self.header.len();
        let mut widths: Vec<usize> = self.header.iter().map(|h| h.chars().count()).collect();
        for row in &self.rows {
            for (i, cell) in row.iter().enumerate().take(cols) {
                widths[i] = widths[i].max(cell.chars().count());
            }
        }
        let mut out = String::new();
        for row in std::iter::once(&self.header).chain(&self.rows) {
            let mut line = String::new();
            for (i, width) in widths.iter().enumerate() {
                let cell = row.get(i).map(String::as_str).unwrap_or("");
                if i > 0 {
                    line.push_str("  ");
                }
                line.push_str(cell);
                line.extend(std::iter::repeat_n(' ', width - cell.chars().count()));
            }
            out.push_str(line.trim_end());
            out.push('\n');
        }
        out
    }
}

/// `key:   value` lines with the values aligned.
fn fields(pairs: &[(&str, String)]) -> String {
    let width = pairs.iter().map(|(k, _)| k.len() + 1).max().unwrap_or(0);
    pairs.iter().map(|(k, v)| format!("{:<width$} {v}\n", format!("{k}:"))).collect()
}

// ---------------------------------------------------------------------------------------------
// Jobs
// ---------------------------------------------------------------------------------------------

fn succeeded(job: &pb::JobStatus) -> u32 {
    job.groups.iter().map(|g| g.succeeded).sum()
}

fn total(job: &pb::JobStatus) -> u32 {
    if job.total_subtasks > 0 { job.total_subtasks } else { job.groups.iter().map(|g| g.replicas).sum() }
}

/// Wall time of a job: to its end, or to now while it runs.
fn job_duration(job: &pb::JobStatus, now_ms: u64) -> Option<u64> {
    if job.submitted_at == 0 {
        return None;
    }
    let end = if job.finished_at != 0 { job.finished_at } else { now_ms };
    Some(end.saturating_sub(job.submitted_at))
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

fn dash(v: Option<String>) -> String {
    v.unwrap_or_else(|| "-".to_string())
}

/// `plexus status`: one row per job, oldest first.
pub fn jobs_table(jobs: &[pb::JobStatus], now_ms: u64) -> String {
    if jobs.is_empty() {
        return "no jobs\n".to_string();
    }
    let mut jobs: Vec<&pb::JobStatus> = jobs.iter().collect();
    jobs.sort_by(|a, b| (a.submitted_at, &a.job_id).cmp(&(b.submitted_at, &b.job_id)));
    let mut t = Table::new(&["ID", "NAME", "STATE", "PROGRESS", "SUBMITTED", "DURATION"]);
    for j in jobs {
        t.row(vec![
            j.job_id.clone(),
            j.name.clone(),
            job_state_name(j.state).to_string(),
            format!("{}/{}", succeeded(j), total(j)),
            age(j.submitted_at, now_ms),
            dash(job_duration(j, now_ms).map(human_duration)),
        ]);
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
    let mut head =
        vec![("job", job.job_id.clone()), ("name", job.name.clone()), ("state", job_state_name(job.state).to_string())];
    if !job.error.is_empty() {
        head.push(("error", one_line(&job.error)));
    }
    head.push(("submitted", age(job.submitted_at, now_ms)));
    head.push(("duration", dash(job_duration(job, now_ms).map(human_duration))));
    head.push(("progress", format!("{}/{} succeeded", succeeded(job), total(job))));
    if job.priority != 0 {
        head.push(("priority", job.priority.to_string()));
    }
    if !job.queue.is_empty() && job.queue != "default" {
        head.push(("queue", job.queue.clone()));
    }
    let mut out = fields(&head);

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
        let mut subs =
            Table::new(&["TASK", "RANK", "STATE", "ATTEMPT", "WORKER", "EXIT", "DURATION", "REASON", "ERROR"]);
        for s in &job.subtasks {
            subs.row(vec![
                s.task.clone(),
                s.rank.to_string(),
                subtask_state_name(s.state).to_string(),
                s.attempt.to_string(),
                dash(non_empty(&s.worker_id)),
                dash(exit_code(s).map(|c| c.to_string())),
                dash(subtask_duration(s, now_ms).map(human_duration)),
                dash(waiting_reason(job, s, now_ms)),
                one_line(&s.error),
            ]);
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

/// Why a subtask that is not running waits: `after: gen` (tasks it needs, not done), its gang's
/// state, a retry's back-off, or why its task's ready subtasks are not placed.
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
    pub submitted_at_ms: Option<u64>,
    pub finished_at_ms: Option<u64>,
    /// Only for a finished job, so the document does not change while nothing happens.
    pub duration_ms: Option<u64>,
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
}

pub fn job_view(job: &pb::JobStatus, detail: Detail) -> JobView {
    JobView {
        job_id: job.job_id.clone(),
        name: job.name.clone(),
        state: job_state_name(job.state),
        submitted_at_ms: time(job.submitted_at),
        finished_at_ms: time(job.finished_at),
        duration_ms: (job.submitted_at != 0 && job.finished_at != 0)
            .then(|| job.finished_at.saturating_sub(job.submitted_at)),
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
        outputs: s.outputs.iter().map(|o| ObjectView { object_id: o.object_id.clone(), size_bytes: o.size }).collect(),
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

/// The last line of `watch` (and of `cancel`): `job <id> <state>`, then `: <error>` if any.
pub fn job_final_line(job: &pb::JobStatus) -> String {
    let mut line = format!("job {} {}", job.job_id, job_state_name(job.state));
    if !job.error.is_empty() {
        line.push_str(": ");
        line.push_str(&one_line(&job.error));
    }
    line.push('\n');
    line
}

// ---------------------------------------------------------------------------------------------
// Watch progress
// ---------------------------------------------------------------------------------------------

/// What `watch` shows of one task group; a change in it is a new progress line.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct GroupCounts {
    pub replicas: u32,
    pub succeeded: u32,
    /// Assigned or running: placed on a worker.
    pub running: u32,
    pub failed: u32,
    pub cancelled: u32,
    /// Failed attempts, retried or not.
    pub failed_attempts: u32,
}

impl From<&pb::TaskGroupStatus> for GroupCounts {
    fn from(g: &pb::TaskGroupStatus) -> Self {
        GroupCounts {
            replicas: g.replicas,
            succeeded: g.succeeded,
            running: g.assigned + g.running,
            failed: g.failed,
            cancelled: g.cancelled,
            failed_attempts: g.failed_attempts,
        }
    }
}

impl GroupCounts {
    /// The bar message: `2 running, 0 failed` (`, 1 cancelled` and `, 3 failed attempts` only
    /// when there are some).
    pub fn message(&self) -> String {
        let mut s = format!("{} running, {} failed", self.running, self.failed);
        if self.cancelled > 0 {
            s.push_str(&format!(", {} cancelled", self.cancelled));
        }
        if self.failed_attempts > 0 {
            let plural = if self.failed_attempts == 1 { "" } else { "s" };
            s.push_str(&format!(", {} failed attempt{plural}", self.failed_attempts));
        }
        s
    }

    /// The plain-text progress line: `gen 8/8 succeeded, 0 running, 0 failed`.
    pub fn line(&self, task: &str) -> String {
        format!("{task} {}/{} succeeded, {}", self.succeeded, self.replicas, self.message())
    }
}

/// The header of `watch`: `job <id> (<name>) running: 3/8 subtasks succeeded`.
pub fn watch_header(job: &pb::JobStatus) -> String {
    let name = if job.name.is_empty() { String::new() } else { format!(" ({})", job.name) };
    format!(
        "job {}{name} {}: {}/{} subtasks succeeded",
        job.job_id,
        job_state_name(job.state),
        succeeded(job),
        total(job)
    )
}

// ---------------------------------------------------------------------------------------------
// Workers
// ---------------------------------------------------------------------------------------------

/// `plexus workers`: one row per worker, then, when any worker has GPUs, one row per device with
/// its model and its load from the latest heartbeat. SPEED and FETCH IN are what the coordinator
/// measured (issue 17): its run times against the cluster's mean for the same tasks (`1.5x`:
/// faster), and the mean throughput of the fetches to it; `-` until measured.
/// Short names for ids (`wkr-1a2b3c4d`): each id's shortest prefix, at least 8 hex digits, that
/// no other id in the list shares — what a person types to name one.
pub fn short_names<'a>(ids: impl Iterator<Item = &'a str> + Clone) -> Vec<String> {
    ids.clone()
        .map(|id| {
            let (prefix, hex) = id.split_at(id.find('-').map_or(0, |i| i + 1));
            let mut n = 8.min(hex.len());
            while n < hex.len()
                && ids.clone().any(|o| o != id && o.get(prefix.len()..prefix.len() + n) == Some(&hex[..n]))
            {
                n += 1;
            }
            format!("{prefix}{}", &hex[..n])
        })
        .collect()
}

pub fn workers_table(workers: &[pb::WorkerInfo], now_ms: u64) -> String {
    if workers.is_empty() {
        return "no workers\n".to_string();
    }
    let names = short_names(workers.iter().map(|w| w.worker_id.as_str()));
    let mut t = Table::new(&[
        "NAME",
        "ID",
        "ALIVE",
        "PEER",
        "CPUS",
        "MEMORY",
        "GPUS",
        "RAILS",
        "ISOLATION",
        "ASSIGNED",
        "ALLOC CPU",
        "CPU UTIL",
        "CACHE",
        "OBJECTS",
        "SPEED",
        "FETCH IN",
        "HEARTBEAT",
    ]);
    let mut devices = Table::new(&["WORKER", "GPU", "MODEL", "UTIL", "MEMORY"]);
    for (w, name) in workers.iter().zip(&names) {
        let cap = w.capacity.clone().unwrap_or_default();
        let state = w.state.clone().unwrap_or_default();
        let alloc = w.allocated.unwrap_or_default();
        let speed = speed_view(w.speed.as_ref());
        t.row(vec![
            name.clone(),
            w.worker_id.clone(),
            if w.draining { format!("{}, drained", yes_no(w.alive)) } else { yes_no(w.alive).to_string() },
            w.peer_addr.clone(),
            cap.cpus.to_string(),
            human_size(cap.memory),
            cap.gpus.len().to_string(),
            cap.rails.len().to_string(),
            dash(non_empty(&cap.isolation)),
            w.assigned.to_string(),
            number(alloc.cpu),
            format!("{:.0}%", state.cpu_utilisation * 100.0),
            format!("{}/{}", human_size(state.cache_used), human_size(cap.cache_bytes)),
            state.objects.len().to_string(),
            speed.relative_speed.map_or("-".into(), |v| format!("{v:.2}x")),
            speed.fetch_bytes_per_s.map_or("-".into(), |v| format!("{}/s", human_size(v as u64))),
            age(w.last_heartbeat, now_ms),
        ]);
        for g in &cap.gpus {
            let load = state.gpus.iter().find(|s| s.index == g.index);
            devices.row(vec![
                w.worker_id.clone(),
                g.index.to_string(),
                g.name.clone(),
                load.map_or("-".into(), |s| format!("{:.0}%", s.utilisation * 100.0)),
                match load {
                    Some(s) => format!("{}/{}", human_size(s.memory_used), human_size(g.memory)),
                    None => format!("-/{}", human_size(g.memory)),
                },
            ]);
        }
    }
    if workers.iter().any(|w| w.capacity.as_ref().is_some_and(|c| !c.gpus.is_empty())) {
        format!("{}\n{}", t.render(), devices.render())
    } else {
        t.render()
    }
}

/// Each worker's data-plane rails, one row per rail: the counters of its last heartbeat
/// (cumulative since the worker started), and each rail's share of what the worker sent.
pub fn rails_table(workers: &[pb::WorkerInfo]) -> String {
    let names = short_names(workers.iter().map(|w| w.worker_id.as_str()));
    let mut t = Table::new(&["WORKER", "RAIL", "ADDRESS", "SENT", "RECEIVED", "SHARE SENT", "FAILURES"]);
    for (w, name) in workers.iter().zip(&names) {
        let rails = w.state.as_ref().map(|s| s.rails.as_slice()).unwrap_or_default();
        let total: u64 = rails.iter().map(|r| r.bytes_sent).fold(0, u64::saturating_add);
        for (i, r) in rails.iter().enumerate() {
            t.row(vec![
                name.clone(),
                i.to_string(),
                r.addr.clone(),
                human_size(r.bytes_sent),
                human_size(r.bytes_received),
                if total == 0 {
                    "-".to_string()
                } else {
                    format!("{:.0}%", r.bytes_sent as f64 * 100.0 / total as f64)
                },
                r.failures.to_string(),
            ]);
        }
    }
    if t.is_empty() { "no rail counters reported yet\n".to_string() } else { t.render() }
}

#[derive(Debug, Serialize)]
pub struct WorkerList {
    pub workers: Vec<WorkerView>,
}

#[derive(Debug, Serialize)]
pub struct WorkerView {
    pub worker_id: String,
    pub alive: bool,
    pub peer_addr: String,
    pub hostname: String,
    pub cpus: u32,
    pub memory_bytes: u64,
    pub gpus: Vec<GpuView>,
    /// How the worker confines subtasks: `cgroup-v2`, `cgroup-v1` or `process-group`; null when
    /// it does not say.
    pub isolation: Option<String>,
    /// The worker's `--label`s (`rack=r1`).
    pub labels: std::collections::BTreeMap<String, String>,
    /// How its GPUs connect, from `nvidia-smi topo -m`: one entry per pair, `"0-1": "NV2"`.
    pub gpu_links: std::collections::BTreeMap<String, String>,
    pub rails: Vec<String>,
    /// The data plane's cumulative counters per rail, from the latest heartbeat.
    pub rail_traffic: Vec<RailTrafficView>,
    /// Rail connections the worker dropped because they failed the rail handshake.
    pub rails_refused: u64,
    pub assigned: u32,
    pub allocated: ResourcesView,
    pub cpu_utilisation: f64,
    pub memory_free_bytes: u64,
    pub cache_used_bytes: u64,
    pub cache_bound_bytes: u64,
    pub objects: usize,
    /// Attempts running or being prepared, as `<job>/<task>/<rank>#<attempt>`.
    pub running: Vec<String>,
    pub last_heartbeat_ms: Option<u64>,
    /// What the coordinator measured of its speed.
    pub speed: SpeedView,
}

/// A worker's measured speed (issue 17); null where nothing was measured. `*_samples` are
/// effective sample counts (recency-weighted, at most 10 per estimate).
#[derive(Debug, Default, Serialize, PartialEq)]
pub struct SpeedView {
    /// Its run times against the cluster's mean for the same tasks (geometric mean; > 1 faster).
    pub relative_speed: Option<f64>,
    /// Kinds of task (command or kind, and requests) with measured run times here.
    pub signatures: u32,
    pub run_samples: f64,
    /// Compute per 10⁹ flops, from tasks with a `flops` hint.
    pub ms_per_gflop: Option<f64>,
    pub flop_samples: f64,
    /// Holders whose fetches to it were measured, and their mean throughput and latency.
    pub fetch_pairs: u32,
    pub fetch_bytes_per_s: Option<f64>,
    pub fetch_latency_ms: Option<f64>,
    pub fetch_samples: f64,
}

/// 0 on the wire is "not measured".
fn speed_view(s: Option<&pb::WorkerSpeed>) -> SpeedView {
    let Some(s) = s else { return SpeedView::default() };
    let measured = |v: f64| (v > 0.0 && v.is_finite()).then_some(v);
    SpeedView {
        relative_speed: measured(s.relative_speed),
        signatures: s.signatures,
        run_samples: s.run_samples,
        ms_per_gflop: measured(s.ms_per_gflop),
        flop_samples: s.flop_samples,
        fetch_pairs: s.fetch_pairs,
        fetch_bytes_per_s: measured(s.fetch_bytes_per_ms).map(|v| v * 1000.0),
        fetch_latency_ms: (s.fetch_pairs > 0).then_some(s.fetch_latency_ms),
        fetch_samples: s.fetch_samples,
    }
}

#[derive(Debug, Serialize)]
pub struct RailTrafficView {
    pub addr: String,
    pub bytes_sent: u64,
    pub bytes_received: u64,
    pub failures: u64,
}

#[derive(Debug, Serialize)]
pub struct GpuView {
    pub index: u32,
    /// The model, as nvidia-smi names it.
    pub name: String,
    pub memory_bytes: u64,
    /// Its NUMA node, when the worker reported one.
    pub numa: Option<u32>,
    /// 0..1, from the latest heartbeat; null before the first sample.
    pub utilisation: Option<f64>,
    pub memory_used_bytes: Option<u64>,
}

#[derive(Debug, Serialize)]
pub struct ResourcesView {
    pub cpu: f64,
    pub memory_bytes: u64,
    pub gpu: u32,
}

pub fn worker_list_view(workers: &[pb::WorkerInfo]) -> WorkerList {
    let workers = workers
        .iter()
        .map(|w| {
            let cap = w.capacity.clone().unwrap_or_default();
            let state = w.state.clone().unwrap_or_default();
            let alloc = w.allocated.unwrap_or_default();
            WorkerView {
                worker_id: w.worker_id.clone(),
                alive: w.alive,
                peer_addr: w.peer_addr.clone(),
                hostname: cap.hostname,
                cpus: cap.cpus,
                memory_bytes: cap.memory,
                gpus: cap
                    .gpus
                    .iter()
                    .map(|g| {
                        let load = state.gpus.iter().find(|s| s.index == g.index);
                        GpuView {
                            index: g.index,
                            name: g.name.clone(),
                            memory_bytes: g.memory,
                            numa: cap.gpu_numa.get(&g.index).copied(),
                            utilisation: load.map(|s| s.utilisation),
                            memory_used_bytes: load.map(|s| s.memory_used),
                        }
                    })
                    .collect(),
                isolation: non_empty(&cap.isolation),
                labels: cap.labels.iter().map(|(k, v)| (k.clone(), v.clone())).collect(),
                gpu_links: cap.gpu_links.iter().map(|l| (format!("{}-{}", l.a, l.b), l.level.clone())).collect(),
                rails: cap.rails,
                rails_refused: state.rails_refused,
                rail_traffic: state
                    .rails
                    .iter()
                    .map(|r| RailTrafficView {
                        addr: r.addr.clone(),
                        bytes_sent: r.bytes_sent,
                        bytes_received: r.bytes_received,
                        failures: r.failures,
                    })
                    .collect(),
                assigned: w.assigned,
                allocated: ResourcesView { cpu: alloc.cpu, memory_bytes: alloc.memory, gpu: alloc.gpu },
                cpu_utilisation: state.cpu_utilisation,
                memory_free_bytes: state.memory_free,
                cache_used_bytes: state.cache_used,
                cache_bound_bytes: cap.cache_bytes,
                objects: state.objects.len(),
                running: state
                    .running
                    .iter()
                    .map(|a| format!("{}/{}/{}#{}", a.job_id, a.task, a.rank, a.attempt))
                    .collect(),
                last_heartbeat_ms: time(w.last_heartbeat),
                speed: speed_view(w.speed.as_ref()),
            }
        })
        .collect();
    WorkerList { workers }
}

// ---------------------------------------------------------------------------------------------
// Placement explanations
// ---------------------------------------------------------------------------------------------

/// A candidate's estimated fetch and compute, ms, from its features (issue 17).
fn estimates_of(c: &pb::CandidateScore) -> (Option<f64>, Option<f64>) {
    let get = |name: &str| c.features.iter().find(|f| f.name == name).map(|f| f.value);
    (get("est_fetch_ms"), get("est_compute_ms"))
}

/// `plexus explain`: the decision, then one row per candidate with the chosen one marked `*`.
/// When candidates carry estimates, EST MS is their fetch + compute (each also in FEATURES, with
/// the samples behind it).
pub fn explain_text(e: &pb::ExplainPlacementResponse, now_ms: u64) -> String {
    let mut out = fields(&[
        ("placer", e.placer.clone()),
        ("attempt", e.attempt.to_string()),
        ("chosen", dash(non_empty(&e.chosen_worker))),
        ("exploratory", yes_no(e.exploratory).to_string()),
        ("decided", age(e.decided_at, now_ms)),
        ("reason", dash(non_empty(&one_line(&e.reason)))),
    ]);
    if e.candidates.is_empty() {
        out.push_str("\nno candidates recorded\n");
        return out;
    }
    let estimated = e.candidates.iter().any(|c| matches!(estimates_of(c), (Some(_), Some(_))));
    let mut header = vec!["", "WORKER", "FEASIBLE", "SCORE"];
    if estimated {
        header.push("EST MS");
    }
    header.extend(["FEATURES", "NOTE"]);
    let mut t = Table::new(&header);
    for c in &e.candidates {
        let chosen = !e.chosen_worker.is_empty() && c.worker_id == e.chosen_worker;
        let features: Vec<String> = c.features.iter().map(|f| format!("{}={}", f.name, number(f.value))).collect();
        let mut row = vec![
            if chosen { "*" } else { "" }.to_string(),
            c.worker_id.clone(),
            yes_no(c.feasible).to_string(),
            // An infeasible candidate was never scored in earnest.
            if c.feasible { number(c.score) } else { "-".to_string() },
        ];
        if estimated {
            row.push(match estimates_of(c) {
                (Some(f), Some(x)) => number(f + x),
                _ => "-".to_string(),
            });
        }
        row.extend([features.join(" "), one_line(&c.note)]);
        t.row(row);
    }
    out.push('\n');
    out.push_str(&t.render());
    out
}

#[derive(Debug, Serialize)]
pub struct ExplainView {
    pub placer: String,
    pub attempt: u32,
    pub chosen_worker: Option<String>,
    pub exploratory: bool,
    pub reason: Option<String>,
    pub decided_at_ms: Option<u64>,
    pub candidates: Vec<CandidateView>,
}

#[derive(Debug, Serialize)]
pub struct CandidateView {
    pub worker_id: String,
    pub chosen: bool,
    pub feasible: bool,
    pub score: f64,
    pub features: BTreeMap<String, f64>,
    /// Its estimated fetch and compute, ms (also in `features`); null where none was made.
    pub est_fetch_ms: Option<f64>,
    pub est_compute_ms: Option<f64>,
    pub note: Option<String>,
}

pub fn explain_view(e: &pb::ExplainPlacementResponse) -> ExplainView {
    ExplainView {
        placer: e.placer.clone(),
        attempt: e.attempt,
        chosen_worker: non_empty(&e.chosen_worker),
        exploratory: e.exploratory,
        reason: non_empty(&e.reason),
        decided_at_ms: time(e.decided_at),
        candidates: e
            .candidates
            .iter()
            .map(|c| CandidateView {
                worker_id: c.worker_id.clone(),
                chosen: !e.chosen_worker.is_empty() && c.worker_id == e.chosen_worker,
                feasible: c.feasible,
                score: c.score,
                features: c.features.iter().map(|f| (f.name.clone(), f.value)).collect(),
                est_fetch_ms: estimates_of(c).0,
                est_compute_ms: estimates_of(c).1,
                note: non_empty(&c.note),
            })
            .collect(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    const J1: &str = "job-00000000000000000000000000000001";
    const J2: &str = "job-00000000000000000000000000000002";
    const W1: &str = "wkr-0000000000000000000000000000000a";
    const W2: &str = "wkr-0000000000000000000000000000000b";
    const NOW: u64 = 1_700_000_100_000;

    #[test]
    fn short_names_are_unique_prefixes_of_at_least_8_digits() {
        let ids = [
            "wkr-1a2b3c4d00000000000000000000000a",
            "wkr-1a2b3c4d50000000000000000000000b",
            "wkr-ffff0000000000000000000000000000",
        ];
        assert_eq!(short_names(ids.iter().copied()), ["wkr-1a2b3c4d0", "wkr-1a2b3c4d5", "wkr-ffff0000"]);
    }

    fn group(task: &str, replicas: u32, counts: [u32; 7]) -> pb::TaskGroupStatus {
        let [waiting, ready, assigned, running, succeeded, failed, cancelled] = counts;
        pb::TaskGroupStatus {
            task: task.into(),
            replicas,
            waiting,
            ready,
            assigned,
            running,
            succeeded,
            failed,
            cancelled,
            waiting_reason: String::new(),
            failed_attempts: 0,
            after: vec![],
        }
    }

    fn job() -> pb::JobStatus {
        pb::JobStatus {
            job_id: J1.into(),
            name: "demo".into(),
            state: pb::JobState::Running as i32,
            submitted_at: NOW - 65_000,
            finished_at: 0,
            error: String::new(),
            groups: vec![
                group("gen", 4, [0, 0, 1, 1, 2, 0, 0]),
                pb::TaskGroupStatus { after: vec!["gen".into()], ..group("sum", 1, [1, 0, 0, 0, 0, 0, 0]) },
            ],
            gangs: vec![],
            priority: 0,
            queue: "default".into(),
            subtasks: vec![
                pb::SubtaskStatus {
                    task: "gen".into(),
                    rank: 0,
                    state: pb::SubtaskState::Succeeded as i32,
                    attempt: 1,
                    worker_id: W1.into(),
                    ready_at: NOW - 64_000,
                    assigned_at: NOW - 63_900,
                    started_at: NOW - 63_000,
                    finished_at: NOW - 60_500,
                    exit_code: 0,
                    outputs: vec![pb::ObjectInfo { object_id: format!("{J1}/gen/0/numbers"), size: 4096 }],
                    ..Default::default()
                },
                pb::SubtaskStatus {
                    task: "gen".into(),
                    rank: 1,
                    state: pb::SubtaskState::Failed as i32,
                    attempt: 3,
                    failures: 3,
                    worker_id: W2.into(),
                    started_at: NOW - 2_000,
                    finished_at: NOW - 1_000,
                    exit_code: 2,
                    error: "exit status 2\nsee logs".into(),
                    ..Default::default()
                },
                pb::SubtaskStatus {
                    task: "sum".into(),
                    rank: 0,
                    state: pb::SubtaskState::Waiting as i32,
                    ..Default::default()
                },
            ],
            total_subtasks: 5,
        }
    }

    #[test]
    fn sizes() {
        assert_eq!(human_size(0), "0 B");
        assert_eq!(human_size(1023), "1023 B");
        assert_eq!(human_size(1024), "1.0 KiB");
        assert_eq!(human_size(1536), "1.5 KiB");
        assert_eq!(human_size(12 * 1024 * 1024), "12.0 MiB");
        assert_eq!(human_size(3 * 1024 * 1024 * 1024 + 200 * 1024 * 1024), "3.2 GiB");
        assert_eq!(human_size(1 << 40), "1.0 TiB");
        assert_eq!(human_size(u64::MAX), "16384.0 PiB");
    }

    #[test]
    fn durations_and_ages() {
        assert_eq!(human_duration(0), "0ms");
        assert_eq!(human_duration(850), "850ms");
        assert_eq!(human_duration(12_345), "12.3s");
        assert_eq!(human_duration(245_000), "4m05s");
        assert_eq!(human_duration(2 * 3_600_000 + 3 * 60_000 + 59_000), "2h03m");
        assert_eq!(human_duration(3 * 86_400_000 + 4 * 3_600_000), "3d04h");
        assert_eq!(age(0, NOW), "-");
        assert_eq!(age(NOW - 1_500, NOW), "1.5s ago");
        assert_eq!(age(NOW + 10, NOW), "0ms ago", "clock skew never underflows");
    }

    #[test]
    fn numbers() {
        assert_eq!(number(3.0), "3");
        assert_eq!(number(0.25), "0.25");
        assert_eq!(number(4.0 / 3.0), "1.3333");
        assert_eq!(number(-2.0), "-2");
        assert_eq!(number(-0.00001), "0");
        assert_eq!(number(f64::NAN), "NaN");
    }

    #[test]
    fn table_aligns_and_trims() {
        let mut t = Table::new(&["A", "LONGER", "C"]);
        t.row(vec!["xxxx".into(), "y".into(), "z".into()]);
        t.row(vec!["1".into(), "".into(), "".into()]);
        assert_eq!(t.render(), "A     LONGER  C\nxxxx  y       z\n1\n");
    }

    #[test]
    fn job_list_table() {
        let mut done = job();
        done.job_id = J2.into();
        done.name = "old".into();
        done.state = pb::JobState::Succeeded as i32;
        done.submitted_at = NOW - 3_600_000;
        done.finished_at = NOW - 3_600_000 + 12_300;
        done.groups = vec![group("a", 2, [0, 0, 0, 0, 2, 0, 0])];
        done.total_subtasks = 2;
        let text = jobs_table(&[job(), done], NOW);
        let expected = format!(
            "ID{p}NAME  STATE      PROGRESS  SUBMITTED  DURATION\n\
             {J2}  old   succeeded  2/2       1h00m ago  12.3s\n\
             {J1}  demo  running    2/5       1m05s ago  1m05s\n",
            p = " ".repeat(36)
        );
        assert_eq!(text, expected);
        assert_eq!(jobs_table(&[], NOW), "no jobs\n");
    }

    #[test]
    fn gangs_say_where_they_stand() {
        let g = |phase: &str| pb::GangStatus {
            name: "train".into(),
            tasks: vec!["w".into()],
            min_members: 4,
            members: 4,
            reserved: 3,
            phase: phase.into(),
            deadline: NOW + 11_500,
            rolled_back_at: 1_700_000_067_000,
            retry_at: NOW + 4_000,
            rollbacks: 1,
            reason: "deadline: 3 of 4 members reserved within 30000 ms".into(),
            timeout_ms: 30_000,
            ..Default::default()
        };
        assert_eq!(gang_line(&g("reserving"), NOW), "3/4 reserved, deadline in 12 s");
        assert_eq!(gang_line(&g("bound"), NOW), "bound (4 of 4 members needed to start)");
        assert_eq!(
            gang_line(&g("backing off"), NOW),
            "rolled back at 22:14:27 (deadline: 3 of 4 members reserved within 30000 ms), retry in 4 s"
        );
        let mut j = job();
        j.gangs = vec![g("reserving")];
        j.priority = 10;
        assert!(job_detail(&j, Detail::Summary, NOW).contains("gang train: 3/4 reserved, deadline in 12 s\n"));
        assert!(job_detail(&j, Detail::Summary, NOW).contains("priority:  10"));
        let v = serde_json::to_value(job_view(&j, Detail::Summary)).unwrap();
        assert_eq!(v["gangs"][0]["phase"], "reserving");
        assert_eq!(v["gangs"][0]["deadline_ms"], NOW + 11_500);
        assert_eq!(v["priority"], 10);
    }

    #[test]
    fn job_detail_with_and_without_subtasks() {
        let text = job_detail(&job(), Detail::Summary, NOW);
        let expected = format!(
            "job:       {J1}\n\
             name:      demo\n\
             state:     running\n\
             submitted: 1m05s ago\n\
             duration:  1m05s\n\
             progress:  2/5 succeeded\n\
             \n\
             TASK  REPLICAS  WAITING  READY  RUNNING  SUCCEEDED  FAILED  CANCELLED\n\
             gen   4         0        0      2        2          0       0\n\
             sum   1         1        0      0        0          0       0\n"
        );
        assert_eq!(text, expected);

        let mut waits = job();
        waits.groups[1].waiting_reason = "needs 4 workers for gang \"sum\" (...), 2 alive".into();
        let text = job_detail(&waits, Detail::Summary, NOW);
        assert!(text.ends_with("sum   1         1        0      0        0          0       0\nwaiting: sum: needs 4 workers for gang \"sum\" (...), 2 alive\n"), "{text}");
        let view = serde_json::to_value(job_view(&waits, Detail::Summary)).unwrap();
        assert_eq!(view["groups"][1]["waiting_reason"], "needs 4 workers for gang \"sum\" (...), 2 alive");
        assert!(view["groups"][0].get("waiting_reason").is_none());

        let mut failed = job();
        failed.error = "task gen failed".into();
        let text = job_detail(&failed, Detail::WithSubtasks, NOW);
        assert!(text.contains("\nerror:     task gen failed\n"), "{text}");
        let subtask_part = text.split("\n\n").nth(2).unwrap();
        let expected = format!(
            "TASK  RANK  STATE      ATTEMPT  WORKER{p}EXIT  DURATION  REASON      ERROR\n\
             gen   0     succeeded  1        {W1}  0     2.5s      -\n\
             gen   1     failed     3        {W2}  2     1.0s      -           exit status 2 see logs\n\
             sum   0     waiting    0        -{q}-     -         after: gen\n",
            p = " ".repeat(32),
            q = " ".repeat(37)
        );
        assert_eq!(subtask_part, expected);
    }

    #[test]
    fn job_json_shape() {
        let v = serde_json::to_value(job_view(&job(), Detail::WithSubtasks)).unwrap();
        assert_eq!(v["job_id"], J1);
        assert_eq!(v["state"], "running");
        assert_eq!(v["submitted_at_ms"], NOW - 65_000);
        assert_eq!(v["finished_at_ms"], serde_json::Value::Null);
        assert_eq!(v["duration_ms"], serde_json::Value::Null);
        assert_eq!(v["error"], serde_json::Value::Null);
        assert_eq!(v["total_subtasks"], 5);
        assert_eq!(v["succeeded_subtasks"], 2);
        assert_eq!(
            v["groups"][0],
            json!({"task": "gen", "replicas": 4, "waiting": 0, "ready": 0, "assigned": 1, "running": 1,
                   "succeeded": 2, "failed": 0, "cancelled": 0, "failed_attempts": 0})
        );
        assert_eq!(
            v["subtasks"][0],
            json!({
                "task": "gen", "rank": 0, "state": "succeeded", "attempt": 1, "failures": 0,
                "worker_id": W1, "ready_at_ms": NOW - 64_000, "assigned_at_ms": NOW - 63_900,
                "started_at_ms": NOW - 63_000, "finished_at_ms": NOW - 60_500, "duration_ms": 2_500,
                "exit_code": 0, "error": null, "fetch_ms": 0, "fetched_bytes": 0, "evicted_bytes": 0,
                "outputs": [{"object_id": format!("{J1}/gen/0/numbers"), "size_bytes": 4096}],
                "failed_attempts": [], "not_before_ms": null, "reruns": 0, "unfetched_requeues": 0
            })
        );
        assert_eq!(v["subtasks"][2]["worker_id"], serde_json::Value::Null);
        assert_eq!(v["subtasks"][2]["exit_code"], serde_json::Value::Null);

        let list = serde_json::to_value(job_list_view(&[job()])).unwrap();
        assert_eq!(list["jobs"][0]["job_id"], J1);
        assert!(list["jobs"][0].get("subtasks").is_none(), "summaries carry no subtasks");
        let mut keys: Vec<&str> = list["jobs"][0].as_object().unwrap().keys().map(String::as_str).collect();
        keys.sort_unstable();
        assert_eq!(
            keys,
            [
                "duration_ms",
                "error",
                "finished_at_ms",
                "gangs",
                "groups",
                "job_id",
                "name",
                "priority",
                "queue",
                "state",
                "submitted_at_ms",
                "succeeded_subtasks",
                "total_subtasks"
            ]
        );
    }

    #[test]
    fn unknown_states_do_not_panic() {
        let mut j = job();
        j.state = 42;
        j.subtasks[0].state = 0;
        assert_eq!(job_view(&j, Detail::WithSubtasks).state, "unknown");
        assert!(job_detail(&j, Detail::WithSubtasks, NOW).contains("unknown"));
    }

    #[test]
    fn final_line_and_progress_lines() {
        let mut j = job();
        assert_eq!(job_final_line(&j), format!("job {J1} running\n"));
        j.state = pb::JobState::Failed as i32;
        j.error = "task gen rank 1 failed:\nexit status 2".into();
        assert_eq!(job_final_line(&j), format!("job {J1} failed: task gen rank 1 failed: exit status 2\n"));
        assert_eq!(watch_header(&job()), format!("job {J1} (demo) running: 2/5 subtasks succeeded"));

        let c = GroupCounts::from(&group("gen", 8, [0, 0, 0, 0, 8, 0, 0]));
        assert_eq!(c.line("gen"), "gen 8/8 succeeded, 0 running, 0 failed");
        let c = GroupCounts::from(&group("gen", 8, [0, 1, 2, 1, 3, 1, 0]));
        assert_eq!(c.line("gen"), "gen 3/8 succeeded, 3 running, 1 failed");
        let c = GroupCounts::from(&group("gen", 8, [0, 0, 0, 0, 3, 1, 4]));
        assert_eq!(c.message(), "0 running, 1 failed, 4 cancelled");
    }

    fn workers() -> Vec<pb::WorkerInfo> {
        vec![pb::WorkerInfo {
            worker_id: W1.into(),
            peer_addr: "http://127.0.0.1:7001".into(),
            capacity: Some(pb::NodeCapacity {
                cpus: 4,
                memory: 8 << 30,
                gpus: vec![
                    pb::GpuInfo { index: 0, name: "H100".into(), memory: 80 << 30 },
                    pb::GpuInfo { index: 2, name: "H100".into(), memory: 80 << 30 },
                ],
                rails: vec!["10.0.0.1:7100".into(), "10.0.1.1:7100".into()],
                cache_bytes: 1 << 30,
                hostname: "node1".into(),
                isolation: "cgroup-v1".into(),
                gpu_links: vec![pb::GpuLink { a: 0, b: 2, level: "NV2".into() }],
                labels: [("rack".to_string(), "r1".to_string())].into(),
                gpu_numa: [(0, 1)].into(),
            }),
            state: Some(pb::NodeState {
                cpu_utilisation: 0.375,
                memory_free: 6 << 30,
                running: vec![pb::AttemptRef { job_id: J1.into(), task: "gen".into(), rank: 2, attempt: 1 }],
                objects: vec![pb::ObjectInfo { object_id: "o".into(), size: 12 << 20 }],
                cache_used: 12 << 20,
                rails: vec![pb::RailCounters {
                    addr: "10.0.0.1:7100".into(),
                    bytes_sent: 5,
                    bytes_received: 7,
                    failures: 1,
                }],
                gpus: vec![pb::GpuState { index: 0, utilisation: 0.37, memory_used: 12 << 30 }],
                isolation: "cgroup-v1".into(),
                rails_refused: 3,
            }),
            alive: true,
            last_heartbeat: NOW - 1_200,
            allocated: Some(pb::Resources { cpu: 1.5, memory: 1 << 30, gpu: 0 }),
            assigned: 2,
            speed: Some(pb::WorkerSpeed {
                relative_speed: 1.25,
                signatures: 2,
                run_samples: 3.5,
                fetch_pairs: 1,
                fetch_bytes_per_ms: 1048.576,
                fetch_latency_ms: 2.5,
                fetch_samples: 1.9,
                ..Default::default()
            }),
            draining: false,
        }]
    }

    #[test]
    fn rails_table_shows_each_rail_and_its_share() {
        let text = rails_table(&workers());
        assert_eq!(
            text,
            "WORKER        RAIL  ADDRESS        SENT  RECEIVED  SHARE SENT  FAILURES\n\
             wkr-00000000  0     10.0.0.1:7100  5 B   7 B       100%        1\n"
        );
        let bare = pb::WorkerInfo { worker_id: W2.into(), ..Default::default() };
        assert_eq!(rails_table(&[bare]), "no rail counters reported yet\n");
    }

    #[test]
    fn workers_table_and_json() {
        let text = workers_table(&workers(), NOW);
        let expected = format!(
            "NAME          ID{p}ALIVE  PEER                   CPUS  MEMORY   GPUS  RAILS  ISOLATION  ASSIGNED  ALLOC CPU  CPU UTIL  CACHE             OBJECTS  SPEED  FETCH IN   HEARTBEAT\n\
             wkr-00000000  {W1}  yes    http://127.0.0.1:7001  4     8.0 GiB  2     2      cgroup-v1  2         1.5        38%       12.0 MiB/1.0 GiB  1        1.25x  1.0 MiB/s  1.2s ago\n\
             \n\
             WORKER{w}GPU  MODEL  UTIL  MEMORY\n\
             {W1}  0    H100   37%   12.0 GiB/80.0 GiB\n\
             {W1}  2    H100   -     -/80.0 GiB\n",
            p = " ".repeat(36),
            w = " ".repeat(32)
        );
        assert_eq!(text, expected);
        assert_eq!(workers_table(&[], NOW), "no workers\n");
        // A worker that has not reported yet has no capacity or state: still a row, no panic, and
        // no device table without GPUs.
        let bare = pb::WorkerInfo { worker_id: W2.into(), ..Default::default() };
        let text = workers_table(&[bare], NOW);
        assert!(text.contains("0 B/0 B") && text.lines().count() == 2, "{text}");

        let v = serde_json::to_value(worker_list_view(&workers())).unwrap();
        assert_eq!(
            v["workers"][0],
            json!({
                "worker_id": W1, "alive": true, "peer_addr": "http://127.0.0.1:7001", "hostname": "node1",
                "cpus": 4, "memory_bytes": 8u64 << 30,
                "gpus": [
                    {"index": 0, "name": "H100", "memory_bytes": 80u64 << 30, "numa": 1, "utilisation": 0.37, "memory_used_bytes": 12u64 << 30},
                    {"index": 2, "name": "H100", "memory_bytes": 80u64 << 30, "numa": null, "utilisation": null, "memory_used_bytes": null}
                ],
                "isolation": "cgroup-v1",
                "labels": {"rack": "r1"},
                "gpu_links": {"0-2": "NV2"},
                "rails": ["10.0.0.1:7100", "10.0.1.1:7100"],
                "rail_traffic": [{"addr": "10.0.0.1:7100", "bytes_sent": 5, "bytes_received": 7, "failures": 1}],
                "rails_refused": 3,
                "assigned": 2,
                "allocated": {"cpu": 1.5, "memory_bytes": 1u64 << 30, "gpu": 0},
                "cpu_utilisation": 0.375, "memory_free_bytes": 6u64 << 30,
                "cache_used_bytes": 12u64 << 20, "cache_bound_bytes": 1u64 << 30, "objects": 1,
                "running": [format!("{J1}/gen/2#1")], "last_heartbeat_ms": NOW - 1_200,
                "speed": {"relative_speed": 1.25, "signatures": 2, "run_samples": 3.5, "ms_per_gflop": null, "flop_samples": 0.0,
                          "fetch_pairs": 1, "fetch_bytes_per_s": 1048576.0, "fetch_latency_ms": 2.5, "fetch_samples": 1.9}
            })
        );
    }

    fn explanation() -> pb::ExplainPlacementResponse {
        let feature = |name: &str, value: f64| pb::Feature { name: name.into(), value };
        pb::ExplainPlacementResponse {
            placer: "greedy".into(),
            attempt: 1,
            chosen_worker: W2.into(),
            exploratory: false,
            candidates: vec![
                pb::CandidateScore {
                    worker_id: W1.into(),
                    feasible: false,
                    score: 0.0,
                    features: vec![feature("free_cpu", 0.0)],
                    note: "needs 2 cpu, 0 free".into(),
                },
                pb::CandidateScore {
                    worker_id: W2.into(),
                    feasible: true,
                    score: 0.8125,
                    features: vec![feature("free_cpu", 3.0), feature("local_bytes", 4096.0)],
                    note: String::new(),
                },
            ],
            decided_at: NOW - 3_000,
            reason: "most input bytes local".into(),
        }
    }

    #[test]
    fn explain_table_marks_the_chosen_worker() {
        let text = explain_text(&explanation(), NOW);
        let expected = format!(
            "placer:      greedy\n\
             attempt:     1\n\
             chosen:      {W2}\n\
             exploratory: no\n\
             decided:     3.0s ago\n\
             reason:      most input bytes local\n\
             \n\
             {s}WORKER{p}FEASIBLE  SCORE   FEATURES                     NOTE\n\
             {s}{W1}  no        -       free_cpu=0                   needs 2 cpu, 0 free\n\
             *  {W2}  yes       0.8125  free_cpu=3 local_bytes=4096\n",
            s = "   ",
            p = " ".repeat(32)
        );
        assert_eq!(text, expected);
    }

    #[test]
    fn explain_json_shape() {
        let v = serde_json::to_value(explain_view(&explanation())).unwrap();
        assert_eq!(v["placer"], "greedy");
        assert_eq!(v["chosen_worker"], W2);
        assert_eq!(v["decided_at_ms"], NOW - 3_000);
        assert_eq!(
            v["candidates"][1],
            json!({"worker_id": W2, "chosen": true, "feasible": true, "score": 0.8125,
                   "features": {"free_cpu": 3.0, "local_bytes": 4096.0}, "est_fetch_ms": null, "est_compute_ms": null, "note": null})
        );
        assert_eq!(v["candidates"][0]["chosen"], false);
    }

    /// Candidates with measured estimates (issue 17) get an EST MS column (fetch + compute) and
    /// the estimates in their JSON.
    #[test]
    fn explain_shows_each_candidates_estimates() {
        let feature = |name: &str, value: f64| pb::Feature { name: name.into(), value };
        let mut e = explanation();
        e.candidates[1].features =
            vec![feature("est_fetch_ms", 12.5), feature("est_fetch_samples", 1.9), feature("est_compute_ms", 40.0)];
        let text = explain_text(&e, NOW);
        let rows: Vec<&str> = text.lines().skip(7).collect();
        assert!(rows[0].contains("EST MS") && rows[0].find("EST MS") < rows[0].find("FEATURES"), "{text}");
        assert!(rows[1].contains("  -  "), "no estimate: {text}");
        assert!(rows[2].contains("52.5") && rows[2].contains("est_fetch_samples=1.9"), "{text}");
        let v = serde_json::to_value(explain_view(&e)).unwrap();
        assert_eq!(
            (v["candidates"][1]["est_fetch_ms"].clone(), v["candidates"][1]["est_compute_ms"].clone()),
            (json!(12.5), json!(40.0))
        );
        assert_eq!(v["candidates"][0]["est_fetch_ms"], json!(null));
        // Without estimates the table is as before.
        assert!(!explain_text(&explanation(), NOW).contains("EST MS"));
    }

    #[test]
    fn closed_pipe_is_not_an_error() {
        struct Closed;
        impl Write for Closed {
            fn write(&mut self, _: &[u8]) -> io::Result<usize> {
                Err(io::ErrorKind::BrokenPipe.into())
            }
            fn flush(&mut self) -> io::Result<()> {
                Ok(())
            }
        }
        assert!(write_bytes(&mut Closed, b"x").is_ok());
    }

    #[test]
    fn every_failed_attempt_is_shown_and_watch_counts_them() {
        let mut j = job();
        j.subtasks[1].failed_attempts = vec![
            pb::AttemptFailure {
                attempt: 1,
                worker_id: W1.into(),
                exit_code: 2,
                error: "exit status 2".into(),
                finished_at: NOW - 62_000,
            },
            pb::AttemptFailure {
                attempt: 2,
                worker_id: W2.into(),
                exit_code: 2,
                error: "exit status 2\nsee logs".into(),
                finished_at: NOW - 61_000,
            },
        ];
        j.groups[0].failed_attempts = 2;
        let text = job_detail(&j, Detail::WithSubtasks, NOW);
        let part = text.split("failed attempts:\n").nth(1).expect("a failed-attempts table");
        let lines: Vec<&str> = part.lines().collect();
        assert_eq!(lines.len(), 3, "{part}");
        assert!(lines[1].starts_with("gen   1     1        ") && lines[1].ends_with("2     exit status 2"), "{part}");
        assert!(lines[2].ends_with("exit status 2 see logs"), "{part}");
        let v = serde_json::to_value(job_view(&j, Detail::WithSubtasks)).unwrap();
        assert_eq!(v["subtasks"][1]["failed_attempts"][1]["attempt"], 2);
        assert_eq!(v["subtasks"][1]["failed_attempts"][0]["error"], "exit status 2");
        assert_eq!(v["groups"][0]["failed_attempts"], 2);
        let c = GroupCounts::from(&j.groups[0]);
        assert_eq!(c.line("gen"), "gen 2/4 succeeded, 2 running, 0 failed, 2 failed attempts");
        assert!(
            !job_detail(&job(), Detail::WithSubtasks, NOW).contains("failed attempts:"),
            "no table without failures"
        );
    }
}
