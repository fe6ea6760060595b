//! The web dashboard (issue 18), served with `/metrics` on `--http`: HTML rendered on the
//! server (`maud`), a small hand-written script (`app.js`, no framework, no npm) that polls the
//! JSON under `/api/` every second and updates the page in place.
//!
//! Pages: `/` jobs (state filter, search by name, live progress); `/jobs/{id}` one job (its DAG
//! as an SVG graph coloured by progress, task groups with why they wait, gangs, subtasks with
//! attempts and errors, links to logs and placements); `/jobs/{id}/explain/{task}/{rank}` a
//! placement with every candidate's features and score (Q-values for `rl`);
//! `/jobs/{id}/logs/{task}/{rank}` the kept log tails; `/workers` resources, GPUs, rails with
//! live traffic, cache; `/policy` the learned placer (in `policy`) (learning curve, decisions per second,
//! training steps, exploration rate).
//!
//! With security on, every page and API needs an API token: an `Authorization: Bearer` header,
//! or the `plexus_token` cookie that `/login?token=…` sets (HttpOnly, SameSite=Strict, 12 hours) before
//! redirecting, so the token leaves the address bar.

use std::collections::BTreeMap;
use std::time::Duration;

use axum::extract::{Path, Query, State};
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{Html, IntoResponse, Redirect, Response};
use maud::{DOCTYPE, Markup, PreEscaped, html};
use plexus_proto::pb;
use serde_json::{Value, json};

use super::access::{Http, TOKEN_COOKIE, refusal};
use crate::convert;
use crate::engine::Cmd;
use crate::view::{Detail, WorkerPage};

/// Subtask rows a job page shows (the rest are counted).
const MAX_ROWS: usize = 500;
/// Jobs the jobs page lists (the newest).
const MAX_JOBS: usize = 1_000;

/// The dashboard's handlers' shared state: the HTTP side's.
type Dash = Http;

pub(super) fn page(title: &str, nav: &str, live: &str, body: Markup) -> Markup {
    html! {
        (DOCTYPE)
        html lang="en" {
            head {
                meta charset="utf-8";
                meta name="viewport" content="width=device-width, initial-scale=1";
                title { (title) " · Plexus" }
                style { (PreEscaped(CSS)) }
            }
            body data-live=(live) data-updates="0" {
                header {
                    b { "Plexus" }
                    @for (href, name) in [("/", "Jobs"), ("/cluster", "Cluster"), ("/workers", "Workers"), ("/policy", "Learned placer")] {
                        a href=(href) class=(if nav == name { "on" } else { "" }) { (name) }
                    }
                    span #live { "live" }
                }
                main { (body) }
                script src="/static/app.js" {}
            }
        }
    }
}

const CSS: &str = include_str!("../../static/dashboard.css");

/// A number of bytes, for people.
pub(super) fn bytes(n: u64) -> String {
    bytesize::ByteSize(n).display().iec().to_string()
}

/// Every job state, in the order the jobs page offers them as a filter.
const JOB_STATES: [plexus_proto::JobState; 5] = {
    use plexus_proto::JobState::*;
    [Running, Succeeded, Failed, Cancelled, CompletedWithFailures]
};

/// What a job is doing as the pages show it: its phase (`pending`, `blocked`, `running`, or how
/// it ended).
fn shown_state(j: &pb::JobStatus) -> &str {
    if j.phase.is_empty() { state_name(j.state) } else { &j.phase }
}

/// A job state off the wire, by the domain's name (`unknown` for a value no build knows).
fn state_name(s: i32) -> &'static str {
    plexus_proto::convert::job_state("state", s).map_or("unknown", plexus_proto::JobState::as_str)
}

fn subtask_state_name(s: i32) -> &'static str {
    plexus_proto::convert::subtask_state("state", s).map_or("unknown", plexus_proto::SubtaskState::as_str)
}

/// A task group's state for colouring: failed if any failed, succeeded when all did, running
/// while any is placed or running, else waiting.
fn group_state(g: &pb::TaskGroupStatus) -> &'static str {
    if g.failed > 0 {
        "failed"
    } else if g.succeeded == g.replicas {
        "succeeded"
    } else if g.running + g.assigned > 0 || g.succeeded > 0 {
        "running"
    } else if g.cancelled > 0 {
        "cancelled"
    } else {
        "waiting"
    }
}

fn job_counts(j: &pb::JobStatus) -> (u32, u32) {
    let total: u32 = j.groups.iter().map(|g| g.replicas).sum();
    let done: u32 = j.groups.iter().map(|g| g.succeeded).sum();
    (done, total)
}

fn progress(done: u32, total: u32) -> Markup {
    let pct = if total == 0 { 0.0 } else { f64::from(done) * 100.0 / f64::from(total) };
    html! { span.bar { i style=(format!("width:{pct:.1}%")) {} } " " span.count { (done) "/" (total) } }
}

pub(super) fn short(id: &str) -> &str {
    let hex = id.strip_prefix("job-").or_else(|| id.strip_prefix("wkr-")).unwrap_or(id);
    &id[..(id.len() - hex.len() + hex.len().min(8))]
}

/// A span of milliseconds in words (`4 s`, `12 min`, `3 h`).
fn span(ms: u64) -> String {
    let s = ms / 1000;
    match s {
        0..=59 => format!("{s} s"),
        60..=3599 => format!("{} min", s / 60),
        _ => format!("{} h", s / 3600),
    }
}

/// A job's time queued (submission to its first subtask's start) and run (from there to its
/// end), as of `now`; `-` for what has not begun.
fn queued_and_ran(j: &pb::JobStatus, now: u64) -> (String, String) {
    let end = if j.finished_at > 0 { j.finished_at } else { now };
    let queued = match j.started_at {
        0 if j.submitted_at > 0 => span(end.saturating_sub(j.submitted_at)),
        0 => "-".into(),
        s => span(s.saturating_sub(j.submitted_at)),
    };
    let ran = if j.started_at > 0 { span(end.saturating_sub(j.started_at)) } else { "-".into() };
    (queued, ran)
}

fn ago(now: u64, at: u64) -> String {
    if at == 0 {
        return "-".into();
    }
    let s = now.saturating_sub(at) / 1000;
    match s {
        0..=59 => format!("{s} s ago"),
        60..=3599 => format!("{} min ago", s / 60),
        _ => format!("{} h ago", s / 3600),
    }
}

fn not_found(what: String) -> Response {
    (StatusCode::NOT_FOUND, Html(page("Not found", "", "", html! { p.err { (what) } }).into_string())).into_response()
}

/// What a standby coordinator's dashboard shows: that it stands by, and which coordinator leads
/// (its gRPC URL: the leader's dashboard is on that host's own HTTP port).
pub fn standby_page(why: &str, leader: Option<&str>) -> Response {
    let body = html! {
        h2 { "Standby" }
        p.err #standby { (why) }
        @if let Some(l) = leader {
            p { "Point the CLI at it (" code { "plexus --coordinator " (l) " status" } "), or open the dashboard on that coordinator's host." }
        }
    };
    (StatusCode::SERVICE_UNAVAILABLE, Html(page("Standby", "", "", body).into_string())).into_response()
}

pub(super) fn unavailable(e: crate::error::Error) -> Response {
    (
        StatusCode::SERVICE_UNAVAILABLE,
        Html(page("Unavailable", "", "", html! { p.err { (e.to_string()) } }).into_string()),
    )
        .into_response()
}

#[derive(serde::Deserialize, Default)]
pub struct JobsQuery {
    state: Option<String>,
    q: Option<String>,
}

async fn list_jobs(d: &Dash, query: &JobsQuery) -> Result<Vec<pb::JobStatus>, crate::error::Error> {
    let views = d.engine.call(|reply| Cmd::ListJobs { reply }).await?;
    let mut jobs: Vec<pb::JobStatus> = views.iter().map(convert::job_status).collect();
    if let Some(s) = query.state.as_deref().filter(|s| !s.is_empty()) {
        jobs.retain(|j| shown_state(j) == s);
    }
    if let Some(q) = query.q.as_deref().filter(|q| !q.is_empty()) {
        jobs.retain(|j| j.name.contains(q) || j.job_id.contains(q));
    }
    jobs.sort_by(|a, b| (b.submitted_at, &b.job_id).cmp(&(a.submitted_at, &a.job_id)));
    jobs.truncate(MAX_JOBS);
    Ok(jobs)
}

pub async fn jobs_page(State(d): State<Dash>, Query(query): Query<JobsQuery>) -> Response {
    let jobs = match list_jobs(&d, &query).await {
        Ok(j) => j,
        Err(e) => return unavailable(e),
    };
    let now = plexus_proto::now_ms();
    let states: Vec<&str> =
        ["", "pending", "blocked"].into_iter().chain(JOB_STATES.iter().map(|s| s.as_str())).collect();
    let body = html! {
        h2 { "Jobs" }
        form.filters method="get" action="/" {
            label { "State " select name="state" {
                @for s in states.iter().copied() {
                    option value=(s) selected[query.state.as_deref().unwrap_or("") == s] { (if s.is_empty() { "any" } else { s }) }
                }
            } }
            label { "Name " input type="search" name="q" value=(query.q.clone().unwrap_or_default()) placeholder="search by name"; }
            button type="submit" { "Filter" }
        }
        table #jobs {
            thead { tr { th { "Job" } th { "Name" } th { "State" } th { "Progress" } th { "Submitted" } th { "Queued" } th { "Ran" } th { "Queue" } th { "Error" } } }
            tbody {
                @for j in &jobs {
                    @let (done, total) = job_counts(j);
                    @let (queued, ran) = queued_and_ran(j, now);
                    tr data-job=(j.job_id) {
                        td { a href=(format!("/jobs/{}", j.job_id)) { (short(&j.job_id)) } }
                        td { (j.name) }
                        td.state class=(format!("state-{}", shown_state(j))) { (shown_state(j)) }
                        td.progress { (progress(done, total)) }
                        td { (ago(now, j.submitted_at)) }
                        td.queued { (queued) }
                        td.ran { (ran) }
                        td { (if j.queue.is_empty() { "default" } else { &j.queue }) @if j.priority != 0 { " (priority " (j.priority) ")" } }
                        td.err { (j.error) }
                    }
                }
            }
        }
        @if jobs.is_empty() { p #empty { "No jobs" @if query.state.is_some() || query.q.is_some() { " match these filters" } "." } }
    };
    Html(page("Jobs", "Jobs", "jobs", body).into_string()).into_response()
}

fn job_json(j: &pb::JobStatus) -> Value {
    let (done, total) = job_counts(j);
    let (queued, ran) = queued_and_ran(j, plexus_proto::now_ms());
    json!({
        "job_id": j.job_id, "name": j.name, "state": state_name(j.state), "error": j.error,
        "phase": shown_state(j), "phase_reason": j.phase_reason,
        "queued": queued, "ran": ran,
        "queue": j.queue, "priority": j.priority,
        "done": done, "total": total, "submitted_at": j.submitted_at,
        "groups": j.groups.iter().map(|g| json!({
            "task": g.task, "replicas": g.replicas, "waiting": g.waiting, "ready": g.ready, "assigned": g.assigned,
            "running": g.running, "succeeded": g.succeeded, "failed": g.failed, "cancelled": g.cancelled,
            "state": group_state(g), "waiting_reason": g.waiting_reason, "after": g.after,
        })).collect::<Vec<_>>(),
        "gangs": j.gangs.iter().map(|g| json!({"name": g.name, "phase": g.phase, "reserved": g.reserved, "min_members": g.min_members, "reason": g.reason})).collect::<Vec<_>>(),
        "subtasks": j.subtasks.iter().take(MAX_ROWS).map(|s| json!({
            "task": s.task, "rank": s.rank, "state": subtask_state_name(s.state), "attempt": s.attempt,
            "worker": s.worker_id, "error": s.error, "params": s.params,
            "failed_attempts": s.failed_attempts.iter().map(|f| json!({"attempt": f.attempt, "error": f.error})).collect::<Vec<_>>(),
        })).collect::<Vec<_>>(),
    })
}

pub async fn api_jobs(State(d): State<Dash>, Query(query): Query<JobsQuery>) -> Response {
    match list_jobs(&d, &query).await {
        Ok(jobs) => axum::Json(json!({ "jobs": jobs.iter().map(job_json).collect::<Vec<_>>() })).into_response(),
        Err(e) => (StatusCode::SERVICE_UNAVAILABLE, e.to_string()).into_response(),
    }
}

async fn get_job(d: &Dash, id: &str) -> Result<pb::JobStatus, Response> {
    let job: plexus_proto::JobId = id.parse().map_err(|e| not_found(format!("{id:?} is not a job id: {e}")))?;
    match d.engine.call(|reply| Cmd::GetJob { job, detail: Detail::WithSubtasks, reply }).await {
        Ok(Ok(j)) => Ok(convert::job_status(&j)),
        Ok(Err(e)) => Err(not_found(e.to_string())),
        Err(e) => Err(unavailable(e)),
    }
}

/// A short fingerprint of what the job page shows of a job's progress (state and every
/// group's counts): a page that asks with the one it has is answered when it changes.
fn version(j: &pb::JobStatus) -> String {
    use std::hash::{Hash, Hasher};
    let mut h = std::collections::hash_map::DefaultHasher::new();
    j.state.hash(&mut h);
    (&j.phase, &j.phase_reason).hash(&mut h);
    j.error.hash(&mut h);
    for g in &j.groups {
        (g.waiting, g.ready, g.assigned, g.running, g.succeeded, g.failed, g.cancelled, &g.waiting_reason).hash(&mut h);
    }
    format!("{:016x}", h.finish())
}

/// How long `/api/jobs/{id}?wait=V` holds a request while nothing changes.
const LONG_POLL: Duration = Duration::from_secs(10);

#[derive(serde::Deserialize, Default)]
pub struct WaitQuery {
    wait: Option<String>,
}

/// A job as JSON. With `?wait=V` (the `version` the page has) it answers when the job's
/// progress differs from V, or after [`LONG_POLL`]: pages update as soon as something changes
/// without polling hard.
pub async fn api_job(State(d): State<Dash>, Path(id): Path<String>, Query(q): Query<WaitQuery>) -> Response {
    let mut j = match get_job(&d, &id).await {
        Ok(j) => j,
        Err(r) => return r,
    };
    if let (Some(seen), Ok(job)) = (q.wait.as_deref(), id.parse::<plexus_proto::JobId>())
        && seen == version(&j)
        && let Ok(Ok(mut rx)) = d.engine.call(|reply| Cmd::Watch { job, reply }).await
    {
        let changed = tokio::time::timeout(LONG_POLL, async {
            while rx.changed().await.is_ok() {
                if version(&convert::job_status(&rx.borrow_and_update())) != seen {
                    return;
                }
            }
        })
        .await;
        if changed.is_ok() {
            match get_job(&d, &id).await {
                Ok(now) => j = now,
                Err(r) => return r,
            }
        }
    }
    let mut v = job_json(&j);
    v["version"] = json!(version(&j));
    axum::Json(v).into_response()
}

/// The job's DAG: one node per task, laid out in columns by depth (longest chain of `after`
/// before it), an edge from each task it waits for.
fn dag(j: &pb::JobStatus) -> Markup {
    let index: BTreeMap<&str, usize> = j.groups.iter().enumerate().map(|(i, g)| (g.task.as_str(), i)).collect();
    // Depth by repeated relaxation (the spec is acyclic; bounded by the task count anyway).
    let mut depth = vec![0usize; j.groups.len()];
    for _ in 0..j.groups.len() {
        let mut changed = false;
        for (i, g) in j.groups.iter().enumerate() {
            let d = g.after.iter().filter_map(|a| index.get(a.as_str())).map(|&p| depth[p] + 1).max().unwrap_or(0);
            if d > depth[i] {
                depth[i] = d;
                changed = true;
            }
        }
        if !changed {
            break;
        }
    }
    let (w, h, gx, gy) = (170.0, 52.0, 70.0, 22.0);
    let mut row = vec![0usize; j.groups.len()];
    let mut per_depth: BTreeMap<usize, usize> = BTreeMap::new();
    for (i, d) in depth.iter().enumerate() {
        let r = per_depth.entry(*d).or_insert(0);
        row[i] = *r;
        *r += 1;
    }
    let pos = |i: usize| (10.0 + depth[i] as f64 * (w + gx), 40.0 + row[i] as f64 * (h + gy));
    let width = 20.0 + (depth.iter().max().copied().unwrap_or(0) + 1) as f64 * (w + gx);
    let height = 50.0 + per_depth.values().max().copied().unwrap_or(1) as f64 * (h + gy);
    html! {
        svg #dag xmlns="http://www.w3.org/2000/svg" width=(width) height=(height) viewBox=(format!("0 0 {width} {height}")) {
            defs { marker #arrow viewBox="0 0 10 10" refX="10" refY="5" markerWidth="6" markerHeight="6" orient="auto" { path d="M0,0 L10,5 L0,10 z" fill="#8a93a6" {} } }
            @for (i, g) in j.groups.iter().enumerate() {
                @for a in &g.after {
                    @if let Some(&p) = index.get(a.as_str()) {
                        @let ((x1, y1), (x2, y2)) = (pos(p), pos(i));
                        // An edge that skips a column arcs over the boxes between.
                        @let (ya, yb, lift) = if depth[i] > depth[p] + 1 { (y1 + 10.0, y2 + 10.0, 34.0) } else { (y1 + h / 2.0, y2 + h / 2.0, 0.0) };
                        path.edge data-from=(a) data-to=(g.task) d=(format!("M{:.0},{:.0} C{:.0},{:.0} {:.0},{:.0} {:.0},{:.0}", x1 + w, ya, x1 + w + gx, ya - lift, x2 - gx, yb - lift, x2, yb)) {}
                    }
                }
            }
            @for (i, g) in j.groups.iter().enumerate() {
                @let (x, y) = pos(i);
                @let frac = if g.replicas == 0 { 0.0 } else { f64::from(g.succeeded) / f64::from(g.replicas) };
                g.node data-task=(g.task) data-state=(group_state(g)) data-after=(g.after.join(",")) transform=(format!("translate({x:.0},{y:.0})")) {
                    rect.box width=(w) height=(h) rx="6" {}
                    rect.done x="0" y=(h - 6.0) height="6" width=(format!("{:.1}", w * frac)) fill="#1a7f37" {}
                    text x="8" y="18" font-weight="600" { (g.task) }
                    text.counts x="8" y="36" { (g.succeeded) "/" (g.replicas) " done" @if g.running > 0 { ", " (g.running) " running" } @if g.failed > 0 { ", " (g.failed) " failed" } }
                }
            }
        }
    }
}

pub async fn job_page(State(d): State<Dash>, Path(id): Path<String>, headers: HeaderMap) -> Response {
    let j = match get_job(&d, &id).await {
        Ok(j) => j,
        Err(r) => return r,
    };
    let now = plexus_proto::now_ms();
    let (done, total) = job_counts(&j);
    // Cancel and resubmit, for a viewer who may (a submit or admin token), each a form that
    // carries this page's token (`actions`).
    let may_act = matches!(
        super::access::scope(&d, &headers),
        Ok(plexus_security::Scope::Submit | plexus_security::Scope::Admin)
    );
    let form_token = super::access::form_token(&d, &headers);
    let running = state_name(j.state) == "running";
    let body = html! {
        h2 { "Job " (j.name) }
        @if may_act {
            div.actions {
                @if running {
                    form #cancel method="post" action=(format!("/jobs/{}/cancel", j.job_id)) {
                        input type="hidden" name="token" value=(form_token); button type="submit" { "Cancel" }
                    }
                }
                form #resubmit method="post" action=(format!("/jobs/{}/resubmit", j.job_id)) {
                    input type="hidden" name="token" value=(form_token); button type="submit" { "Resubmit" }
                }
            }
        }
        p { code { (j.job_id) } " · " span #job-state class=(format!("state-{}", shown_state(&j))) { (shown_state(&j)) } " " span #job-why { (j.phase_reason) } " · submitted " (ago(now, j.submitted_at)) " · " span #job-progress { (progress(done, total)) } }
        @if !j.error.is_empty() { p.err #job-error { (j.error) } }
        @if !j.failed_stderr.is_empty() {
            p { "stderr of " code { (j.failed_task) } " rank " (j.failed_rank) " (last lines):" }
            pre #job-stderr { (j.failed_stderr) }
        }
        h3 { "Tasks" }
        (dag(&j))
        table #groups {
            thead { tr { th { "Task" } th { "Replicas" } th { "Waiting" } th { "Ready" } th { "Running" } th { "Succeeded" } th { "Failed" } th { "Why it waits" } } }
            tbody { @for g in &j.groups {
                tr data-task=(g.task) {
                    td { (g.task) } td { (g.replicas) } td.waiting { (g.waiting) } td.ready { (g.ready) } td.running { (g.running + g.assigned) }
                    td.succeeded { (g.succeeded) } td.failed { (g.failed) } td.reason { (g.waiting_reason) }
                }
            } }
        }
        @if !j.gangs.is_empty() {
            h3 { "Gangs" }
            table #gangs { thead { tr { th { "Gang" } th { "Tasks" } th { "Phase" } th { "Reserved" } th { "Last rollback" } } }
                tbody { @for g in &j.gangs { tr { td { (g.name) } td { (g.tasks.join(", ")) } td { (g.phase) } td { (g.reserved) "/" (g.min_members) } td { (g.reason) } } } } }
        }
        h3 { "Subtasks" }
        table #subtasks {
            thead { tr { th { "Task" } th { "Rank" } th { "Params" } th { "State" } th { "Attempt" } th { "Worker" } th { "Error" } th {} } }
            tbody { @for s in j.subtasks.iter().take(MAX_ROWS) {
                tr data-subtask=(format!("{}/{}", s.task, s.rank)) {
                    td { (s.task) } td { (s.rank) } td.params { (params_text(s)) } td.state class=(format!("state-{}", subtask_state_name(s.state))) { (subtask_state_name(s.state)) }
                    td.attempt { (s.attempt) } td.worker { (short(&s.worker_id)) }
                    td.err { (s.error) @for f in &s.failed_attempts { br; "attempt " (f.attempt) ": " (f.error) } }
                    td { a href=(format!("/jobs/{}/logs/{}/{}", j.job_id, s.task, s.rank)) { "logs" } " " a href=(format!("/jobs/{}/explain/{}/{}", j.job_id, s.task, s.rank)) { "placement" } }
                }
            } }
        }
        @if j.subtasks.len() > MAX_ROWS { p { "… and " (j.subtasks.len() - MAX_ROWS) " more subtasks (plexus status " (j.job_id) " --subtasks lists them all)" } }
    };
    Html(
        page(&format!("Job {}", j.name), "Jobs", "job", html! { div #job data-job=(j.job_id) { (body) } })
            .into_string(),
    )
    .into_response()
}

pub async fn explain_page(State(d): State<Dash>, Path((id, task, rank)): Path<(String, String, u32)>) -> Response {
    let Ok(job) = id.parse::<plexus_proto::JobId>() else { return not_found(format!("{id:?} is not a job id")) };
    let e = match d.engine.call(|reply| Cmd::Explain { job, task: task.clone(), rank, reply }).await {
        Ok(Ok((e, ran))) => {
            pb::ExplainPlacementResponse { collective: ran.unwrap_or_default(), ..convert::explanation(&e) }
        }
        Ok(Err(e)) => return not_found(e.to_string()),
        Err(e) => return unavailable(e),
    };
    let learner = match d.engine.call(|reply| Cmd::Learning { reply }).await {
        Ok((placer, l)) => crate::learned::summary(placer, l.as_ref()),
        Err(e) => return unavailable(e),
    };
    // The chosen worker first, then the others best first (by the placer's own order: the
    // chosen one scored best among those able to run it), then those that could not.
    let chosen = e.candidates.iter().find(|c| c.worker_id == e.chosen_worker);
    let high = chosen.is_none_or(|ch| e.candidates.iter().filter(|c| c.feasible).all(|c| c.score <= ch.score));
    let mut order: Vec<&pb::CandidateScore> = e.candidates.iter().collect();
    order.sort_by(|a, b| {
        let rank = |c: &pb::CandidateScore| (c.worker_id != e.chosen_worker, !c.feasible);
        rank(a).cmp(&rank(b)).then(if high { b.score.total_cmp(&a.score) } else { a.score.total_cmp(&b.score) })
    });
    let score_name = if crate::learned::is_learned(&e.placer) { "Q-value" } else { "Score" };
    let said = |c: &pb::CandidateScore| -> String {
        match chosen {
            _ if !c.feasible => "could not run it".into(),
            Some(ch) if ch.worker_id == c.worker_id => {
                format!(
                    "chosen: the {} {} of those able to run it",
                    if high { "highest" } else { "lowest" },
                    score_name.to_lowercase()
                )
            }
            Some(ch) if c.score == ch.score => "as good: a tie the placer broke".into(),
            Some(ch) => {
                format!("{:.4} {} than the chosen", (c.score - ch.score).abs(), if high { "lower" } else { "higher" })
            }
            None => String::new(),
        }
    };
    let body = html! {
        h2 { "Placement of " (task) "/" (rank) }
        p { a href=(format!("/jobs/{id}")) { "back to the job" } }
        p { "Placer " b { (e.placer) } ", attempt " (e.attempt) ": " code { (e.chosen_worker) } " — " (e.reason) @if e.exploratory { " (exploratory)" } }
        @if !e.collective.is_empty() { p { "Collective: " (e.collective) } }
        @if !learner.is_empty() { p #learner { "Learner: " (learner) } }
        @if e.omitted > 0 { p #omitted { (e.omitted) " more candidates were considered and not kept (a decision keeps 16: the chosen worker, the best others, and up to 4 that could not run it)." } }
        table #candidates {
            thead { tr { th { "Worker" } th { (score_name) } th { "Compared with the chosen" } th { "Note" } th { "Features" } } }
            tbody { @for c in &order {
                tr class=(if c.worker_id == e.chosen_worker { "chosen" } else { "" }) {
                    td { (short(&c.worker_id)) @if c.worker_id == e.chosen_worker { " ✓" } }
                    td { (if c.feasible && c.score.is_finite() { format!("{:.4}", c.score) } else { "-".into() }) }
                    td.said { (said(c)) }
                    td { (c.note) }
                    td { details { summary { (c.features.len()) " features" }
                        table.features { @for f in &c.features { tr { td { (f.name) } td { (format!("{:.3}", f.value)) } } } }
                    } }
                }
            } }
        }
    };
    Html(page("Placement", "Jobs", "", body).into_string()).into_response()
}

/// `/cluster`: the live workers' cores, memory and GPUs held and in all, and the rails' traffic,
/// over the last hour (a sample every 10 s, kept by the HTTP side), each drawn as a line; the
/// page reloads every 10 s.
pub async fn cluster_page(State(d): State<Dash>) -> Response {
    let mut usage = d.board.usage();
    // And now, so the page shows the cluster as it is (not stored: a reload adds no sample).
    match d.engine.call(|reply| Cmd::ListWorkers { page: WorkerPage::SUMMARY, reply }).await {
        Ok(list) => {
            let now = super::board::measure(&list.summary, plexus_proto::now_ms(), usage.last());
            usage.push(now);
        }
        Err(e) => return unavailable(e),
    }
    let series = |f: &dyn Fn(&super::board::Usage) -> (f64, f64)| -> Vec<Point> {
        usage
            .iter()
            .map(|u| {
                let (a, b) = f(u);
                (u.at_ms, a, b)
            })
            .collect()
    };
    let gib = |b: u64| b as f64 / f64::from(1u32 << 30);
    let charts: [(&str, &str, Vec<Point>); 4] = [
        ("cores", "cores held / offered", series(&|u| u.cpu)),
        ("memory", "memory held / offered (GiB)", series(&|u| (gib(u.memory.0), gib(u.memory.1)))),
        ("gpus", "GPUs held / offered", series(&|u| (u.gpus.0 as f64, u.gpus.1 as f64))),
        ("rails", "rail traffic sent (MB/s)", series(&|u| (u.rail_bytes_per_s / 1e6, 0.0))),
    ];
    let body = html! {
        h2 { "Cluster" }
        p { "The live workers over the last hour (" (usage.len()) " samples: one every 10 s, and now)." }
        @for (id, title, points) in &charts {
            h3 { (title) @if let Some((_, a, b)) = points.last() { ": " (format!("{a:.1}")) @if *b > 0.0 { " / " (format!("{b:.1}")) } } }
            (usage_chart(id, points))
        }
    };
    let mut html = page("Cluster", "Cluster", "", body).into_string();
    html = html.replacen("<head>", "<head><meta http-equiv=\"refresh\" content=\"10\">", 1);
    Html(html).into_response()
}

/// One sample of a usage chart: (time in ms, used, total).
type Point = (u64, f64, f64);

/// A line chart of (time, used, total): used in blue, total in grey, on a shared scale.
fn usage_chart(id: &str, points: &[Point]) -> Markup {
    let (w, h) = (640.0, 120.0);
    let top = points.iter().map(|p| p.1.max(p.2)).fold(0.0_f64, f64::max).max(1e-9);
    let (t0, t1) = (points.first().map_or(0, |p| p.0), points.last().map_or(1, |p| p.0));
    let span = (t1.saturating_sub(t0)).max(1) as f64;
    let line = |pick: &dyn Fn(&Point) -> f64| -> String {
        points
            .iter()
            .map(|p| format!("{:.1},{:.1}", (p.0 - t0) as f64 / span * w, h - pick(p) / top * (h - 4.0)))
            .collect::<Vec<_>>()
            .join(" ")
    };
    html! {
        svg.usage id=(format!("usage-{id}")) xmlns="http://www.w3.org/2000/svg" width="640" height="120" viewBox="0 0 640 120" data-points=(points.len()) {
            rect width="640" height="120" fill="#fff" stroke="#e3e6ec" {}
            polyline.total fill="none" stroke="#b8bfcc" stroke-width="1.5" points=(line(&|p| p.2)) {}
            polyline.used fill="none" stroke="#1f6feb" stroke-width="2" points=(line(&|p| p.1)) {}
        }
    }
}

pub async fn logs_page(State(d): State<Dash>, Path((id, task, rank)): Path<(String, String, u32)>) -> Response {
    let Ok(job) = id.parse::<plexus_proto::JobId>() else { return not_found(format!("{id:?} is not a job id")) };
    let src = match d.engine.call(|reply| Cmd::Logs { job, task: task.clone(), rank, attempt: 0, reply }).await {
        Ok(Ok(s)) => s,
        Ok(Err(e)) => return not_found(e.to_string()),
        Err(e) => return unavailable(e),
    };
    let body = html! {
        h2 { "Logs of " (task) "/" (rank) ", attempt " (src.attempt) }
        p { a href=(format!("/jobs/{id}")) { "back to the job" } " · on " code { (src.worker) } " · the tail the coordinator keeps; " code { "plexus logs " (id) " " (task) " --rank " (rank) } " reads the whole log from the worker" }
        h3 { "stdout" } pre #stdout { (src.stdout_tail) }
        h3 { "stderr" } pre #stderr { (src.stderr_tail) }
    };
    Html(page("Logs", "Jobs", "", body).into_string()).into_response()
}

pub async fn app_js() -> impl IntoResponse {
    ([(header::CONTENT_TYPE, "text/javascript; charset=utf-8"), (header::CACHE_CONTROL, "no-cache")], APP_JS)
}

#[derive(serde::Deserialize)]
pub struct Login {
    token: String,
    next: Option<String>,
}

/// How long the browser keeps the token cookie: a working day.
const COOKIE_MAX_AGE_S: u32 = 12 * 3600;

/// `/login?token=…[&next=/path]`: checks the token and keeps it in a cookie.
pub async fn login(State(http): State<Http>, Query(l): Query<Login>) -> Response {
    let mut headers = HeaderMap::new();
    headers.insert(
        header::AUTHORIZATION,
        match format!("Bearer {}", l.token.trim()).parse() {
            Ok(v) => v,
            Err(_) => {
                return (StatusCode::BAD_REQUEST, "the token has characters a header cannot carry\n").into_response();
            }
        },
    );
    if let Some(refused) = refusal(&http, &headers) {
        return refused;
    }
    let next = match l.next.as_deref().map(local_path) {
        None => "/",
        Some(Ok(path)) => path,
        Some(Err(why)) => return (StatusCode::BAD_REQUEST, why).into_response(),
    };
    let cookie =
        format!("{}={}; Path=/; Max-Age={COOKIE_MAX_AGE_S}; HttpOnly; SameSite=Strict", TOKEN_COOKIE, l.token.trim());
    let mut r = Redirect::to(next).into_response();
    if let Ok(v) = cookie.parse() {
        r.headers_mut().insert(header::SET_COOKIE, v);
    }
    r
}

/// Where `/login` may send the browser: a plain path of this site (one leading '/', no '//host',
/// no scheme, no backslash), else the front page. A control character is refused, not dropped:
/// browsers strip TAB, CR and LF from a URL, so `/\t/evil.example` would become `//evil.example`,
/// another site, and CR/LF cannot be carried in a header.
fn local_path(next: &str) -> Result<&str, &'static str> {
    if next.chars().any(char::is_control) {
        return Err("`next` must be a plain path of this site; it has a control character\n");
    }
    Ok(if next.starts_with('/') && !next.starts_with("//") && !next.contains('\\') { next } else { "/" })
}

/// The page a browser sees without a token when security is on.
pub fn login_form(why: &str) -> Response {
    let body = html! {
        h2 { "Sign in" }
        p { "This coordinator needs an API token (" (why.trim()) "). Make one with " code { "plexus-coordinator token create --scope read" } " or use " code { ".plexus/coordinator/admin.token" } "." }
        form method="get" action="/login" { input type="password" name="token" placeholder="plx_…" size="60"; " " button type="submit" { "Sign in" } }
    };
    (StatusCode::UNAUTHORIZED, Html(page("Sign in", "", "", body).into_string())).into_response()
}

/// The dashboard's script: polls `/api/*` every second and updates the page in place.
const APP_JS: &str = include_str!("../../static/app.js");

/// A sweep replica's parameters as `key=value` pairs in key order; empty without a sweep.
fn params_text(s: &pb::SubtaskStatus) -> String {
    let mut p: Vec<(&String, &String)> = s.params.iter().collect();
    p.sort();
    p.iter().map(|(k, v)| format!("{k}={v}")).collect::<Vec<_>>().join(" ")
}
