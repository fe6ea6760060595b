//! The workers page, `/workers`, and its JSON, `/api/workers`: the cluster's summary (counts,
//! cores, memory and GPUs held and offered), then its workers a page of [`PAGE`] at a time in id
//! order (`?after=ID` continues after that worker), so a cluster of thousands renders in the
//! time of one page. The page's script refreshes the rows it shows from the JSON of the same page.

use axum::extract::{Query, State};
use axum::http::StatusCode;
use axum::response::{Html, IntoResponse, Response};
use maud::{Markup, html};
use plexus_proto::{WorkerId, pb};
use serde_json::{Value, json};

use super::Http as Dash;
use super::dashboard::{bytes, page, short, unavailable};
use crate::convert;
use crate::engine::Cmd;
use crate::view::{WorkerList, WorkerPage, WorkerSummary};

/// Workers shown on one page.
pub const PAGE: usize = 200;

#[derive(serde::Deserialize)]
pub struct WorkersQuery {
    /// Continue after this worker (the previous page's last).
    after: Option<String>,
}

/// The page `q` asks for, or why it is not one.
fn asked(q: &WorkersQuery) -> Result<WorkerPage, String> {
    let after = match q.after.as_deref() {
        None | Some("") => None,
        Some(a) => Some(a.parse::<WorkerId>().map_err(|e| format!("after={a:?} is not a worker id: {e}"))?),
    };
    Ok(WorkerPage { after, limit: Some(PAGE), only: None })
}

async fn list(d: &Dash, q: &WorkersQuery) -> Result<WorkerList, Response> {
    let page = asked(q).map_err(|e| (StatusCode::BAD_REQUEST, e).into_response())?;
    d.engine.call(|reply| Cmd::ListWorkers { page, reply }).await.map_err(unavailable)
}

fn workers_json(list: &WorkerList) -> Value {
    let ws: Vec<pb::WorkerInfo> = list.workers.iter().map(convert::worker_info).collect();
    json!({
        "workers": ws.iter().map(|w| {
            let st = w.state.clone().unwrap_or_default();
            json!({
                "worker_id": w.worker_id, "alive": w.alive, "assigned": w.assigned,
                "cpu_utilisation": st.cpu_utilisation, "cache_used": st.cache_used,
                "rails": st.rails.iter().map(|r| json!({"addr": r.addr, "sent": r.bytes_sent, "received": r.bytes_received, "failures": r.failures})).collect::<Vec<_>>(),
                "gpus": st.gpus.iter().map(|g| json!({"index": g.index, "utilisation": g.utilisation, "memory_used": g.memory_used})).collect::<Vec<_>>(),
            })
        }).collect::<Vec<_>>(),
        "next": list.next.map(|id| id.to_string()),
        "summary": summary_text(&list.summary),
    })
}

/// One line for the whole cluster.
fn summary_text(s: &WorkerSummary) -> String {
    format!(
        "{} workers: {} alive, {} lost, {} draining; {:.1}/{:.0} cores, {}/{} memory, {}/{} GPUs held; {} attempts placed",
        s.total,
        s.alive,
        s.total - s.alive,
        s.draining,
        s.cpu.0,
        s.cpu.1,
        bytes(s.memory.0),
        bytes(s.memory.1),
        s.gpus.0,
        s.gpus.1,
        s.assigned
    )
}

fn rows(ws: &[pb::WorkerInfo]) -> Markup {
    html! {
        @for w in ws {
            @let cap = w.capacity.clone().unwrap_or_default();
            @let st = w.state.clone().unwrap_or_default();
            @let alloc = w.allocated.unwrap_or_default();
            tr data-worker=(w.worker_id) {
                td { code { (short(&w.worker_id)) } } td { (cap.hostname) } td.state { (if w.alive { "alive" } else { "lost" }) }
                td { (format!("{:.1}", alloc.cpu)) "/" (cap.cpus) " cores, " span.util { (format!("{:.0}", st.cpu_utilisation * 100.0)) } "% busy" }
                td { (bytes(alloc.memory)) "/" (bytes(cap.memory)) }
                td { @for g in &cap.gpus { @let u = st.gpus.iter().find(|s| s.index == g.index); div.gpu data-gpu=(g.index) { (g.index) ": " (g.name) " " span.gutil { (u.map(|u| format!("{:.0}%", u.utilisation * 100.0)).unwrap_or_default()) } } } }
                td { @for (n, r) in st.rails.iter().enumerate() { div.rail data-rail=(n) { code { (r.addr) } " " span.traffic { (bytes(r.bytes_sent)) " / " (bytes(r.bytes_received)) } @if r.failures > 0 { span.err { " " (r.failures) " failures" } } } } }
                td { span.cache { (bytes(st.cache_used)) } "/" (bytes(cap.cache_bytes)) }
                td.assigned { (w.assigned) }
            }
        }
    }
}

pub async fn workers_page(State(d): State<Dash>, Query(q): Query<WorkersQuery>) -> Response {
    let list = match list(&d, &q).await {
        Ok(l) => l,
        Err(r) => return r,
    };
    let ws: Vec<pb::WorkerInfo> = list.workers.iter().map(convert::worker_info).collect();
    let halt = d.engine.call(|reply| Cmd::EvictionHalt { reply }).await.ok().flatten();
    let later = q.after.as_deref().is_some_and(|a| !a.is_empty());
    let body = html! {
        h2 { "Workers" }
        p #summary { (summary_text(&list.summary)) }
        @if let Some(h) = halt {
            p.err #evictions-halted { "Evictions halted: " (h.silent) " of " (h.alive) " workers missed their heartbeats at once; none is declared lost until they heartbeat again (--max-lost-share)." }
        }
        table #workers {
            thead { tr { th { "Worker" } th { "Host" } th { "State" } th { "CPU" } th { "Memory" } th { "GPUs" } th { "Rails (sent / received)" } th { "Cache" } th { "Attempts" } } }
            tbody { (rows(&ws)) }
        }
        p.pages {
            @if later { a #first-page href="/workers" { "first page" } " " }
            @if let Some(next) = list.next { a #next-page href={ "/workers?after=" (next) } { "next " (PAGE) " workers" } }
        }
    };
    Html(page("Workers", "Workers", "workers", body).into_string()).into_response()
}

pub async fn api_workers(State(d): State<Dash>, Query(q): Query<WorkersQuery>) -> Response {
    match list(&d, &q).await {
        Ok(l) => axum::Json(workers_json(&l)).into_response(),
        Err(r) => r,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_page_is_asked_for_by_the_worker_it_follows() {
        let id = WorkerId::random();
        let q = |after: Option<&str>| WorkersQuery { after: after.map(String::from) };
        assert_eq!(asked(&q(None)).unwrap(), WorkerPage { after: None, limit: Some(PAGE), only: None });
        assert_eq!(asked(&q(Some(""))).unwrap(), WorkerPage { after: None, limit: Some(PAGE), only: None });
        assert_eq!(
            asked(&q(Some(&id.to_string()))).unwrap(),
            WorkerPage { after: Some(id), limit: Some(PAGE), only: None }
        );
        let e = asked(&q(Some("wkr-nope"))).unwrap_err();
        assert!(e.contains("after=\"wkr-nope\" is not a worker id"), "{e}");
    }

    #[test]
    fn the_summary_counts_lost_workers_and_sums_what_is_held() {
        let s = WorkerSummary {
            total: 5000,
            alive: 4998,
            draining: 1,
            assigned: 12,
            cpu: (10.5, 80_000.0),
            memory: (1 << 30, 1 << 40),
            gpus: (2, 8),
            rail_bytes_sent: 0,
        };
        let t = summary_text(&s);
        assert!(t.starts_with("5000 workers: 4998 alive, 2 lost, 1 draining; 10.5/80000 cores"), "{t}");
        assert!(t.contains("2/8 GPUs held; 12 attempts placed"), "{t}");
    }
}
