//! One placer's run: the stream submitted on its arrival times, the jobs watched to the end,
//! and what each job and worker did.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use plexus_proto::pb;

type Client = plexus_e2e::ha::Client;

use crate::POLL;
use crate::args::Opts;
use crate::cluster::{Live, RigPlan, start};
use crate::stream::Plan;

/// How one job went under one placer.
#[derive(Clone, Debug, Default)]
pub(crate) struct JobResult {
    pub(crate) id: String,
    /// finished_at − submitted_at (ms), when it succeeded.
    pub(crate) jct_ms: Option<u64>,
    /// Why not, when it did not.
    pub(crate) failure: Option<String>,
}

/// Per worker, what ran there.
#[derive(Clone, Debug, Default)]
pub(crate) struct WorkerStats {
    pub(crate) maps: u32,
    pub(crate) map_run_ms: u64,
    pub(crate) subtasks: u32,
    fetch_ms: u64,
    pub(crate) fetched_bytes: u64,
    pub(crate) throttled: Option<(u64, f64)>,
    pub(crate) relative_speed: f64,
    pub(crate) fetch_bytes_per_ms: f64,
}

/// Where one job's time went, from its subtasks' timestamps (ms): the means over its maps, and
/// the stages along its critical path.
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct Breakdown {
    /// gen ready -> gen finished.
    pub(crate) produce: u64,
    /// gen finished -> last map finished.
    pub(crate) map_stage: u64,
    /// Per map (means): ready -> started less the fetch (queueing and dispatch), fetch, run.
    pub(crate) map_wait: f64,
    pub(crate) map_fetch: f64,
    pub(crate) map_run: f64,
    /// last map finished -> reduce finished, and the reduce's fetch within it.
    pub(crate) reduce_stage: u64,
    pub(crate) reduce_fetch: u64,
}

pub(crate) struct PlacerRun {
    pub(crate) placer: String,
    pub(crate) jobs: Vec<JobResult>,
    pub(crate) breakdown: Vec<Option<Breakdown>>,
    pub(crate) workers: Vec<WorkerStats>,
    pub(crate) wall: Duration,
    pub(crate) error: Option<String>,
}

pub(crate) fn run_placer(
    o: &Opts,
    placer: &str,
    plans: &[Plan],
    ids: &[String],
    rig: Option<&RigPlan>,
    stop: &AtomicBool,
) -> PlacerRun {
    let t0 = Instant::now();
    let mut out = PlacerRun {
        placer: placer.to_string(),
        jobs: vec![JobResult::default(); plans.len()],
        breakdown: vec![None; plans.len()],
        workers: vec![WorkerStats::default(); ids.len()],
        wall: Duration::ZERO,
        error: None,
    };
    let mut live = match start(o, placer, ids, rig) {
        Ok(l) => l,
        Err(e) => {
            out.error = Some(e);
            return out;
        }
    };
    eprintln!(
        "[{placer}] cluster up in {:.1} s; streaming {} jobs ({} warm-up)",
        t0.elapsed().as_secs_f64(),
        plans.len(),
        o.warmup
    );
    let mut client = live.cluster.client_with(live.cluster.admin_token.as_deref());
    stream_jobs(o, placer, plans, &mut live, &mut client, stop, &mut out);
    collect_work(&live, &mut client, ids, &mut out);
    drop(live);
    out.wall = t0.elapsed();
    out
}

/// Submits the stream on its arrival times and polls the jobs until every one has ended, been
/// cancelled past `--job-timeout`, or the run stops (interrupted, drained past `--drain`, a
/// worker gone), recording each job's completion time or failure in `out`.
fn stream_jobs(
    o: &Opts,
    placer: &str,
    plans: &[Plan],
    live: &mut Live,
    client: &mut Client,
    stop: &AtomicBool,
    out: &mut PlacerRun,
) {
    let mut index: HashMap<String, usize> = HashMap::new();
    let mut done = vec![false; plans.len()];
    let mut submitted = 0usize;
    let mut finished = 0usize;
    let stream_t0 = Instant::now();
    let last_arrival = plans.last().map_or(Duration::ZERO, |p| p.at);
    let mut last_poll = Instant::now() - POLL;
    while finished < plans.len() {
        if stop.load(Ordering::Relaxed) {
            out.error = Some("interrupted".into());
            break;
        }
        let now = stream_t0.elapsed();
        while submitted < plans.len() && plans[submitted].at <= now {
            let i = submitted;
            match live.cluster.try_submit(&format!("live-{i:03}.toml"), &plans[i].source) {
                Ok(id) => {
                    index.insert(id.clone(), i);
                    out.jobs[i].id = id;
                }
                Err(e) => {
                    out.jobs[i].failure = Some(format!("refused: {}", e.message()));
                    done[i] = true;
                    finished += 1;
                }
            }
            submitted += 1;
        }
        if last_poll.elapsed() >= POLL {
            last_poll = Instant::now();
            match live.cluster.block_on(bounded(client.list_jobs(pb::ListJobsRequest {}))) {
                Ok(r) => {
                    for j in r.into_inner().jobs {
                        let Some(&i) = index.get(&j.job_id) else { continue };
                        if done[i] || j.state == pb::JobState::Running as i32 {
                            continue;
                        }
                        done[i] = true;
                        finished += 1;
                        if j.state == pb::JobState::Succeeded as i32 {
                            out.jobs[i].jct_ms = Some(j.finished_at.saturating_sub(j.submitted_at));
                        } else {
                            out.jobs[i].failure = Some(format!("state {}: {}", j.state, j.error));
                        }
                        if finished.is_multiple_of(10) {
                            eprintln!(
                                "[{placer}] {finished}/{} jobs done, {:.0} s",
                                plans.len(),
                                stream_t0.elapsed().as_secs_f64()
                            );
                        }
                    }
                }
                Err(e) => eprintln!("[{placer}] list_jobs: {e}"),
            }
            // Jobs past their limit are cancelled and counted as failed.
            for (id, &i) in &index {
                if !done[i] && now > plans[i].at + o.job_timeout {
                    let _ =
                        live.cluster.block_on(bounded(client.cancel_job(pb::CancelJobRequest { job_id: id.clone() })));
                    out.jobs[i].failure = Some(format!("not done in {} s (cancelled)", o.job_timeout.as_secs()));
                    done[i] = true;
                    finished += 1;
                }
            }
        }
        if submitted == plans.len() && now > last_arrival + o.drain {
            out.error = Some(format!(
                "{} jobs not done {} s after the last arrival",
                plans.len() - finished,
                o.drain.as_secs()
            ));
            break;
        }
        if let Some((i, status)) = live.exited_worker() {
            out.error =
                Some(format!("worker {i} exited ({status}); its log:\n{}", tail(&live.cluster.worker_log(i), 2000)));
            break;
        }
        let next_arrival = plans.get(submitted).map(|p| p.at.saturating_sub(stream_t0.elapsed())).unwrap_or(POLL);
        std::thread::sleep(next_arrival.min(POLL.saturating_sub(last_poll.elapsed())).max(Duration::from_millis(5)));
    }
}

/// Where the work ran, from every job's subtasks, and what the coordinator learnt of each worker.
fn collect_work(live: &Live, client: &mut Client, ids: &[String], out: &mut PlacerRun) {
    let by_id: HashMap<&str, usize> = ids.iter().enumerate().map(|(i, id)| (id.as_str(), i)).collect();
    for (k, j) in out.jobs.iter().enumerate().filter(|(_, j)| !j.id.is_empty()) {
        let Ok(s) =
            live.cluster.block_on(bounded(client.get_job(pb::GetJobRequest { job_id: j.id.clone(), subtasks: true })))
        else {
            continue;
        };
        let subtasks = s.into_inner().subtasks;
        out.breakdown[k] = breakdown(&subtasks);
        for st in subtasks {
            let Some(&w) = by_id.get(st.worker_id.as_str()) else { continue };
            if st.state != pb::SubtaskState::Succeeded as i32 {
                continue;
            }
            let ws = &mut out.workers[w];
            ws.subtasks += 1;
            ws.fetch_ms += st.fetch_ms;
            ws.fetched_bytes += st.fetched_bytes;
            if st.task == "map" {
                ws.maps += 1;
                ws.map_run_ms += st.finished_at.saturating_sub(st.started_at);
            }
        }
    }
    // What the coordinator learnt of each worker.
    if let Ok(r) = live.cluster.block_on(bounded(client.list_workers(pb::ListWorkersRequest::default()))) {
        for w in r.into_inner().workers {
            let Some(&i) = by_id.get(w.worker_id.as_str()) else { continue };
            if let Some(sp) = w.speed {
                out.workers[i].relative_speed = sp.relative_speed;
                out.workers[i].fetch_bytes_per_ms = sp.fetch_bytes_per_ms;
            }
        }
    }
    for i in 0..ids.len() {
        out.workers[i].throttled = live.quotas.throttled(i);
    }
}

/// Every call to the coordinator is bounded: an answer that does not come in this long is an
/// error like any other.
const RPC_TIMEOUT: Duration = Duration::from_secs(20);

async fn bounded<T, E: std::fmt::Display>(call: impl std::future::Future<Output = Result<T, E>>) -> Result<T, String> {
    match tokio::time::timeout(RPC_TIMEOUT, call).await {
        Ok(r) => r.map_err(|e| e.to_string()),
        Err(_) => Err(format!("no answer in {} s", RPC_TIMEOUT.as_secs())),
    }
}

/// A succeeded job's breakdown (None when a stage did not succeed).
pub(crate) fn breakdown(subtasks: &[pb::SubtaskStatus]) -> Option<Breakdown> {
    let ok = |t: &str| -> Vec<&pb::SubtaskStatus> {
        subtasks.iter().filter(|s| s.task == t && s.state == pb::SubtaskState::Succeeded as i32).collect()
    };
    let producer = *ok("gen").first()?;
    let reduce = *ok("reduce").first()?;
    let maps = ok("map");
    if maps.is_empty() {
        return None;
    }
    let n = maps.len() as f64;
    let last_map = maps.iter().map(|m| m.finished_at).max()?;
    let avg = |f: &dyn Fn(&pb::SubtaskStatus) -> u64| maps.iter().map(|m| f(m) as f64).sum::<f64>() / n;
    Some(Breakdown {
        produce: producer.finished_at.saturating_sub(producer.ready_at),
        map_stage: last_map.saturating_sub(producer.finished_at),
        map_wait: avg(&|m| m.started_at.saturating_sub(m.ready_at).saturating_sub(m.fetch_ms)),
        map_fetch: avg(&|m| m.fetch_ms),
        map_run: avg(&|m| m.finished_at.saturating_sub(m.started_at)),
        reduce_stage: reduce.finished_at.saturating_sub(last_map),
        reduce_fetch: reduce.fetch_ms,
    })
}

fn tail(s: &str, n: usize) -> &str {
    let start = s.len().saturating_sub(n);
    let start = (start..s.len()).find(|&i| s.is_char_boundary(i)).unwrap_or(s.len());
    &s[start..]
}
