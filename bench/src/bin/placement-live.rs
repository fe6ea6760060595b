//! Live placement benchmark (issue 17): the placers side by side on a real heterogeneous cluster
//! on this machine. For each placer a fresh coordinator (fresh data dir, so nothing learnt
//! carries over) with that `--placer`, and worker processes each held to a different CPU share by
//! a real limit: every worker process runs in a cgroup of the benchmark's own
//! (`<cpu mount>/plexus-bench-live/<run>/w<i>`) with a cfs quota (default 100 %, 50 %, 25 %,
//! 25 % of a core), and its subtasks with it (the workers run with `--isolation process-group`,
//! so a subtask stays in its worker's cgroup and shares its quota, as on a node of that speed).
//! On the rail rig (`scripts/rails-rig.sh`, root) each worker is in a namespace of its own with
//! one rail, shaped per worker (default 1 Gbit/s, and 200 Mbit/s for workers 1 and 3); the
//! coordinator listens on loopback and the workers reach it through a forwarder on the rig's
//! host-0 address. `--no-rig` (or a machine where the rig cannot be built) runs every worker on
//! loopback with the same quotas and no rail rates.
//!
//! The work: a seeded open-loop stream of fan-out/fan-in jobs, the same files and arrival times
//! for every placer: `gen` writes MB of data, `map` replicas each read it, hash it PASSES
//! times (CPU) and write a part of half its size, `reduce` reads every part and hashes them. Three
//! shapes (MB, maps, passes) = (4, 3, 24), (8, 3, 16), (16, 2, 10), drawn per job; the commands
//! are the same in every job (the shape is in the env), so the coordinator's measured estimates
//! (per worker and task signature, per holder → worker pair) carry from job to job.
//!
//! Job completion time = the coordinator's `finished_at − submitted_at`. The first `--warmup`
//! jobs are the warm-up (the placers' estimates and policy learn from them); mean and p95 are over
//! the `--jobs` after them. Printed: the table per placer, the ratios against the targets
//! (`rl` and `fastest` ≤ 0.7 × `least-loaded` and ≤ 0.85 × `locality`, on the mean and on p95),
//! the learning curve (mean completion time per block of `--block` jobs, warm-up included), where
//! each placer put the map subtasks, and what the coordinator had learnt of the workers.
//!
//! `cargo run --release -p plexus-bench --bin placement-live [-- --seed N --jobs N --warmup N
//! --placers least-loaded,locality,fastest,rl --no-rig --quotas 100,50,25,25 --slow 1,3
//! --fast-rate 1gbit --slow-rate 200mbit --slots 2 --interval-ms 2000 --block 10
//! --job-timeout 180 --drain 180]`. Needs the release `plexus-coordinator` and `plexus-worker`
//! next to it (`cargo build --release -p plexus-coordinator -p plexus-worker`), and root for the
//! cgroups (and the rig).

use std::collections::HashMap;
use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use plexus_bench::live::{CpuQuotas, Forward, confined};
use plexus_bench::percentile;
use plexus_dataplane::rig::Rig;
use plexus_e2e::{Cluster, ClusterConfig};
use plexus_launch::WorkerLaunch;
use plexus_proto::pb;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

const PROG: &str = "placement-live";
const TARGET_VS_LEAST_LOADED: f64 = 0.70;
const TARGET_VS_LOCALITY: f64 = 0.85;
/// Job shapes: (MB written by `gen`, map replicas, hash passes per map). Fan-outs of 2-3: with
/// two slots a worker, a fan-out of 4 cannot avoid the slow workers' speed whatever the placer
/// (two maps sharing the 100 % worker's core, two sharing the 50 % worker's, run at the 25 %
/// workers' speed), so wider jobs measure the cluster, not the placer.
const SHAPES: [(u32, u32, u32); 3] = [(4, 3, 24), (8, 3, 16), (16, 2, 10)];
/// How often the jobs' summaries are polled.
const POLL: Duration = Duration::from_millis(100);
/// A worker process gets this long after SIGTERM (it kills its subtasks) before SIGKILL.
const WORKER_GRACE: Duration = Duration::from_secs(5);
/// How long the workers get to register.
const JOIN_TIMEOUT: Duration = Duration::from_secs(40);

#[derive(Clone, Debug)]
struct Opts {
    seed: u64,
    jobs: usize,
    warmup: usize,
    placers: Vec<String>,
    rig: bool,
    /// Percent of one core, per worker.
    quotas: Vec<f64>,
    /// Workers behind the slow rail (rig only).
    slow: Vec<usize>,
    fast_rate: String,
    slow_rate: String,
    /// Cores each worker offers (`--cpus`); every task asks for one.
    slots: u32,
    interval_ms: u64,
    block: usize,
    job_timeout: Duration,
    drain: Duration,
}

/// The command line.
#[derive(Debug, clap::Parser)]
#[command(name = "placement-live", about = "The placers side by side on a real heterogeneous cluster")]
struct Cli {
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// Jobs measured; at least 1.
    #[arg(long, default_value_t = 40, value_parser = clap::value_parser!(u64).range(1..))]
    jobs: u64,
    /// Jobs run first, not measured.
    #[arg(long, default_value_t = 10)]
    warmup: usize,
    /// Placers, comma-separated.
    #[arg(long, value_delimiter = ',', default_value = "least-loaded,locality,fastest,rl")]
    placers: Vec<String>,
    /// Run on loopback instead of the rail rig.
    #[arg(long = "no-rig")]
    no_rig: bool,
    /// Each worker's CPU quota, percent of one core, comma-separated (at least two workers).
    #[arg(long, value_delimiter = ',', default_value = "100,50,25,25")]
    quotas: Vec<f64>,
    /// Workers behind the slow rail (rig only), comma-separated; `none` for none.
    #[arg(long, default_value = "1,3", value_parser = parse_slow)]
    slow: Slow,
    #[arg(long = "fast-rate", default_value = "1gbit")]
    fast_rate: String,
    #[arg(long = "slow-rate", default_value = "200mbit")]
    slow_rate: String,
    /// Cores each worker offers (`--cpus`); every task asks for one. At least 1.
    #[arg(long, default_value_t = 2, value_parser = clap::value_parser!(u32).range(1..))]
    slots: u32,
    #[arg(long = "interval-ms", default_value_t = 2000)]
    interval_ms: u64,
    #[arg(long, default_value_t = 10)]
    block: u64,
    /// How long one job may run, seconds.
    #[arg(long = "job-timeout", value_name = "SECS", default_value_t = 180)]
    job_timeout: u64,
    /// How long after the last arrival every job must be done, seconds.
    #[arg(long, value_name = "SECS", default_value_t = 180)]
    drain: u64,
}

/// `--slow`: worker indices (a newtype, so clap takes the whole list as one value).
#[derive(Clone, Debug)]
struct Slow(Vec<usize>);

fn parse_slow(v: &str) -> Result<Slow, String> {
    if v.is_empty() || v == "none" {
        return Ok(Slow(vec![]));
    }
    v.split(',').map(|x| x.trim().parse().map_err(|e| format!("{x:?}: {e}"))).collect::<Result<_, _>>().map(Slow)
}

/// Ends the program with a usage error saying `msg`, as clap does for the flags it checks.
fn fail(msg: String) -> ! {
    use clap::CommandFactory;
    Cli::command().error(clap::error::ErrorKind::ValueValidation, msg).exit()
}

fn parse_opts() -> Opts {
    let c = <Cli as clap::Parser>::parse();
    let o = Opts {
        seed: c.seed,
        jobs: c.jobs as usize,
        warmup: c.warmup,
        placers: c.placers,
        rig: !c.no_rig,
        quotas: c.quotas,
        slow: c.slow.0,
        fast_rate: c.fast_rate,
        slow_rate: c.slow_rate,
        slots: c.slots,
        interval_ms: c.interval_ms,
        block: c.block.max(1) as usize,
        job_timeout: Duration::from_secs(c.job_timeout),
        drain: Duration::from_secs(c.drain),
    };
    for p in &o.placers {
        if !plexus_coordinator::learned::PLACERS.contains(&p.as_str()) {
            fail(format!("unknown placer {p:?} (known: {})", plexus_coordinator::learned::PLACERS.join(", ")));
        }
    }
    if o.quotas.len() < 2 || o.quotas.iter().any(|q| !(q.is_finite() && *q >= 1.0)) {
        fail("--quotas needs at least two workers, each at least 1 (% of a core)".into());
    }
    if o.slow.iter().any(|&s| s >= o.quotas.len()) {
        fail(format!("--slow names a worker past the {} of --quotas", o.quotas.len()));
    }
    o
}

/// One job of the stream.
struct Plan {
    /// Arrival, from the start of the stream.
    at: Duration,
    shape: (u32, u32, u32),
    source: String,
}

fn job_source(i: usize, (mb, maps, passes): (u32, u32, u32)) -> String {
    // Literal TOML strings ('...'): the shell text holds no single quote.
    format!(
        r#"name = "live-{i:03}"

[[task]]
name = "gen"
command = 'head -c ${{MB}}M /dev/urandom > $PLEXUS_OUT/data'
env = {{ MB = "{mb}" }}
outputs = ["data"]
cpu = 1
timeout = "120s"

[[task]]
name = "map"
replicas = {maps}
inputs = ["gen/data"]
outputs = ["part"]
command = 'in=$PLEXUS_IN/gen/0/data; {{ i=0; while [ $i -lt $PASSES ]; do cat $in; i=$((i+1)); done | sha256sum; echo $PLEXUS_RANK; head -c $((MB * 512))K $in; }} > $PLEXUS_OUT/part'
env = {{ MB = "{mb}", PASSES = "{passes}" }}
cpu = 1
timeout = "120s"

[[task]]
name = "reduce"
inputs = ["map/part"]
outputs = ["total"]
command = 'cat $PLEXUS_IN/map/*/part | sha256sum > $PLEXUS_OUT/total'
cpu = 1
timeout = "120s"
"#
    )
}

/// The seeded stream: exponential gaps of mean `interval_ms`, a shape per job.
fn stream(o: &Opts) -> Vec<Plan> {
    let mut rng = StdRng::seed_from_u64(o.seed);
    let mut t = 0.0f64;
    (0..o.warmup + o.jobs)
        .map(|i| {
            if i > 0 {
                let u: f64 = rng.random::<f64>().max(1e-9);
                t += -u.ln() * o.interval_ms as f64;
            }
            let shape = SHAPES[rng.random_range(0..SHAPES.len())];
            Plan { at: Duration::from_micros((t * 1000.0) as u64), shape, source: job_source(i, shape) }
        })
        .collect()
}

/// Worker ids, seeded: the same for every placer, so candidates come in the same id order (the
/// heuristics break ties by it) in every run.
fn worker_ids(o: &Opts) -> Vec<String> {
    let mut rng = StdRng::seed_from_u64(o.seed ^ 0x05ee_d1d5);
    (0..o.quotas.len()).map(|_| format!("wkr-{:032x}", rng.random::<u128>())).collect()
}

/// How one job went under one placer.
#[derive(Clone, Debug, Default)]
struct JobResult {
    id: String,
    /// finished_at − submitted_at (ms), when it succeeded.
    jct_ms: Option<u64>,
    /// Why not, when it did not.
    failure: Option<String>,
}

/// Per worker, what ran there.
#[derive(Clone, Debug, Default)]
struct WorkerStats {
    maps: u32,
    map_run_ms: u64,
    subtasks: u32,
    fetch_ms: u64,
    fetched_bytes: u64,
    throttled: Option<(u64, f64)>,
    relative_speed: f64,
    fetch_bytes_per_ms: f64,
}

/// Where one job's time went, from its subtasks' timestamps (ms): the means over its maps, and
/// the stages along its critical path.
#[derive(Clone, Copy, Debug, Default)]
struct Breakdown {
    /// gen ready -> gen finished.
    produce: u64,
    /// gen finished -> last map finished.
    map_stage: u64,
    /// Per map (means): ready -> started less the fetch (queueing and dispatch), fetch, run.
    map_wait: f64,
    map_fetch: f64,
    map_run: f64,
    /// last map finished -> reduce finished, and the reduce's fetch within it.
    reduce_stage: u64,
    reduce_fetch: u64,
}

struct PlacerRun {
    placer: String,
    jobs: Vec<JobResult>,
    breakdown: Vec<Option<Breakdown>>,
    workers: Vec<WorkerStats>,
    wall: Duration,
    error: Option<String>,
}

/// The rig's shape for this run.
struct RigPlan {
    rig: Rig,
    /// Worker i's rail address (host i + 1).
    addrs: Vec<IpAddr>,
}

fn build_rig(o: &Opts) -> Result<RigPlan, String> {
    if let Some(why) = plexus_dataplane::rig::unavailable() {
        return Err(why);
    }
    let n = o.quotas.len();
    let rig = Rig::up(n + 1, &o.fast_rate).map_err(|e| e.to_string())?;
    for &w in &o.slow {
        rig.set_rate(w + 1, 0, &o.slow_rate).map_err(|e| e.to_string())?;
    }
    Ok(RigPlan { addrs: (0..n).map(|i| rig.addr(i + 1, 0)).collect(), rig })
}

/// Everything one placer's cluster holds: the workers are stopped first when it is dropped
/// (they kill their subtasks), then, in field order, their cgroups, the forwarder, the
/// coordinator and its directory.
struct Live {
    quotas: CpuQuotas,
    _forward: Option<Forward>,
    cluster: Cluster,
}

impl Drop for Live {
    fn drop(&mut self) {
        self.cluster.launcher().stop_workers();
    }
}

impl Live {
    /// The first worker that has exited, with its status.
    fn exited_worker(&mut self) -> Option<(usize, std::process::ExitStatus)> {
        let launcher = self.cluster.launcher();
        let e = launcher.reap().into_iter().find(|e| e.name.starts_with("worker-"))?;
        let i = (0..launcher.worker_count()).find(|&i| launcher.worker_log(i) == e.log)?;
        Some((i, e.status))
    }
}

fn start(o: &Opts, placer: &str, ids: &[String], rig: Option<&RigPlan>) -> Result<Live, String> {
    let n = o.quotas.len();
    let config = ClusterConfig {
        workers: 0,
        placer: placer.to_string(),
        log: "warn".into(),
        // Workers held to a quarter of a core answer late under load; none is lost here.
        heartbeat_timeout_ms: 10_000,
        cpus_per_worker: o.slots,
        cache: "256MiB".into(),
        // Subtasks stay in the worker's cgroup, under its quota (and in a namespace made by
        // `ip netns exec`, /sys/fs/cgroup is not mounted anyway).
        worker_args: vec!["--isolation".into(), "process-group".into()],
        stop_grace: WORKER_GRACE,
        ..Default::default()
    };
    let cluster = Cluster::start(config);
    let limits: Vec<(String, f64)> = o.quotas.iter().enumerate().map(|(i, q)| (format!("w{i}"), q / 100.0)).collect();
    let run = format!("run-{}-{placer}", std::process::id());
    let quotas = CpuQuotas::create(&run, &limits)?;
    let forward = match rig {
        Some(r) => {
            let port: u16 = cluster
                .url
                .rsplit(':')
                .next()
                .and_then(|p| p.parse().ok())
                .ok_or("no port in the coordinator's url")?;
            let f = Forward::start(r.rig.addr(0, 0), SocketAddr::from(([127, 0, 0, 1], port)))
                .map_err(|e| format!("forwarder: {e}"))?;
            Some(f)
        }
        None => None,
    };
    let url = forward.as_ref().map(|f| format!("https://{}", f.addr));
    let mut live = Live { quotas, _forward: forward, cluster };
    for (i, id) in ids.iter().enumerate() {
        let dir = live.cluster.worker_dir(i);
        std::fs::create_dir_all(&dir).map_err(|e| format!("{}: {e}", dir.display()))?;
        std::fs::write(dir.join("worker-id"), format!("{id}\n")).map_err(|e| format!("{}: {e}", dir.display()))?;
        let netns = rig.map(|_| format!("plx-h{}", i + 1));
        let args = match rig {
            Some(r) => {
                let a = r.addrs[i];
                vec!["--rail".into(), a.to_string().into(), "--listen".into(), format!("{a}:0").into()]
            }
            None => vec![],
        };
        let launch = WorkerLaunch {
            prefix: confined(&live.quotas.procs_file(i), netns.as_deref()),
            args,
            coordinators: url.clone(),
        };
        live.cluster.launcher().add_worker_with(&launch).map_err(|e| format!("starting worker {i}: {e}"))?;
    }
    let t0 = Instant::now();
    loop {
        if let Some((i, status)) = live.exited_worker() {
            return Err(format!(
                "worker {i} exited ({status}) while joining; its log:\n{}",
                live.cluster.worker_log(i)
            ));
        }
        let alive = live.cluster.workers().map_or(0, |ws| ws.iter().filter(|w| w.alive).count());
        if alive >= n {
            break;
        }
        if t0.elapsed() > JOIN_TIMEOUT {
            return Err(format!(
                "only {alive} of {n} workers joined in {} s; worker 0's log:\n{}",
                JOIN_TIMEOUT.as_secs(),
                live.cluster.worker_log(0)
            ));
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    Ok(live)
}

fn run_placer(
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
    let by_id: HashMap<&str, usize> = ids.iter().enumerate().map(|(i, id)| (id.as_str(), i)).collect();
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

    // Where the work ran, from every job's subtasks.
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
    if let Ok(r) = live.cluster.block_on(bounded(client.list_workers(pb::ListWorkersRequest {}))) {
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
    drop(live);
    out.wall = t0.elapsed();
    out
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
fn breakdown(subtasks: &[pb::SubtaskStatus]) -> Option<Breakdown> {
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

fn mean(v: &[u64]) -> Option<f64> {
    (!v.is_empty()).then(|| v.iter().sum::<u64>() as f64 / v.len() as f64)
}

/// Measured (post-warm-up) completion times, sorted.
fn measured(r: &PlacerRun, warmup: usize) -> Vec<u64> {
    let mut v: Vec<u64> = r.jobs.iter().skip(warmup).filter_map(|j| j.jct_ms).collect();
    v.sort_unstable();
    v
}

fn fmt(v: Option<f64>, digits: usize) -> String {
    v.map_or_else(|| "-".into(), |v| format!("{v:.digits$}"))
}

fn report(o: &Opts, runs: &[PlacerRun], rig_note: &str, plans: &[Plan], total: Duration) {
    let n = o.quotas.len();
    println!();
    println!(
        "placement-live: seed {}, {} worker processes offering {} cores each (every task asks for 1), CPU quotas {} % of a core",
        o.seed,
        n,
        o.slots,
        o.quotas.iter().map(|q| format!("{q:.0}")).collect::<Vec<_>>().join(" / ")
    );
    println!("  rails: {rig_note}");
    let counts = SHAPES.map(|s| plans.iter().filter(|p| p.shape == s).count());
    println!(
        "  stream: {} jobs ({} warm-up + {} measured), Poisson arrivals, mean gap {} ms, over {:.0} s; shapes (MB, maps, hash passes) {}",
        plans.len(),
        o.warmup,
        o.jobs,
        o.interval_ms,
        plans.last().map_or(0.0, |p| p.at.as_secs_f64()),
        SHAPES.iter().zip(counts).map(|(s, c)| format!("{s:?} x{c}")).collect::<Vec<_>>().join(", ")
    );
    println!(
        "  job completion time (JCT) = coordinator's finished_at - submitted_at; mean and p95 over the measured jobs"
    );
    println!();
    println!(
        "{:<14} {:>6} {:>7} {:>10} {:>10} {:>14} {:>8}",
        "placer", "jobs", "failed", "mean_ms", "p95_ms", "warmup_mean_ms", "wall_s"
    );
    let mut stats: HashMap<&str, (Option<f64>, Option<f64>)> = HashMap::new();
    for r in runs {
        let m = measured(r, o.warmup);
        let failed = r.jobs.iter().filter(|j| j.jct_ms.is_none()).count();
        let warm: Vec<u64> = r.jobs.iter().take(o.warmup).filter_map(|j| j.jct_ms).collect();
        let (mn, p95) = (mean(&m), (!m.is_empty()).then(|| percentile(&m, 95.0) as f64));
        stats.insert(&r.placer, (mn, p95));
        println!(
            "{:<14} {:>6} {:>7} {:>10} {:>10} {:>14} {:>8.0}{}",
            r.placer,
            m.len(),
            failed,
            fmt(mn, 0),
            fmt(p95, 0),
            fmt(mean(&warm), 0),
            r.wall.as_secs_f64(),
            r.error.as_ref().map_or(String::new(), |e| format!("  ERROR: {}", e.lines().next().unwrap_or("")))
        );
    }
    println!();
    println!("{:<26} {:>8} {:>8} {:>8}  result (mean, p95)", "ratio", "mean", "p95", "target");
    for (a, b, target) in [
        ("rl", "least-loaded", TARGET_VS_LEAST_LOADED),
        ("fastest", "least-loaded", TARGET_VS_LEAST_LOADED),
        ("rl", "locality", TARGET_VS_LOCALITY),
        ("fastest", "locality", TARGET_VS_LOCALITY),
    ] {
        let (Some(sa), Some(sb)) = (stats.get(a), stats.get(b)) else { continue };
        let ratio = |x: Option<f64>, y: Option<f64>| Some(x? / y?);
        let (rm, rp) = (ratio(sa.0, sb.0), ratio(sa.1, sb.1));
        let verdict = |r: Option<f64>| r.map_or("-", |r| if r <= target { "PASS" } else { "FAIL" });
        println!(
            "{:<26} {:>8} {:>8} {:>8}  {}, {}",
            format!("{a} / {b}"),
            fmt(rm, 2),
            fmt(rp, 2),
            format!("<= {target:.2}"),
            verdict(rm),
            verdict(rp)
        );
    }
    println!();
    println!("learning curve: mean JCT (ms) per block of {} jobs in submission order (w = warm-up block)", o.block);
    print!("{:<10}", "jobs");
    for r in runs {
        print!(" {:>13}", r.placer);
    }
    println!();
    let total_jobs = plans.len();
    let mut b = 0;
    while b * o.block < total_jobs {
        let (lo, hi) = (b * o.block, ((b + 1) * o.block).min(total_jobs));
        let label = format!(
            "{}-{}{}",
            lo + 1,
            hi,
            if hi <= o.warmup {
                " w"
            } else if lo < o.warmup {
                " w/m"
            } else {
                ""
            }
        );
        print!("{label:<10}");
        for r in runs {
            let v: Vec<u64> = r.jobs[lo..hi].iter().filter_map(|j| j.jct_ms).collect();
            print!(" {:>13}", fmt(mean(&v), 0));
        }
        println!();
        b += 1;
    }
    println!();
    println!(
        "where the time went (means over the measured jobs, ms): gen = ready -> done; map stage = gen done -> last map done;"
    );
    println!(
        "per map: wait = ready -> started less the fetch, fetch, run; reduce stage = last map done -> reduce done, of which fetch"
    );
    println!(
        "{:<14} {:>7} {:>10} {:>9} {:>10} {:>8} {:>13} {:>13}",
        "placer", "gen", "map_stage", "map_wait", "map_fetch", "map_run", "reduce_stage", "reduce_fetch"
    );
    for r in runs {
        let b: Vec<Breakdown> = r.breakdown.iter().skip(o.warmup).flatten().copied().collect();
        if b.is_empty() {
            continue;
        }
        let m = |f: &dyn Fn(&Breakdown) -> f64| b.iter().map(f).sum::<f64>() / b.len() as f64;
        println!(
            "{:<14} {:>7.0} {:>10.0} {:>9.0} {:>10.0} {:>8.0} {:>13.0} {:>13.0}",
            r.placer,
            m(&|x| x.produce as f64),
            m(&|x| x.map_stage as f64),
            m(&|x| x.map_wait),
            m(&|x| x.map_fetch),
            m(&|x| x.map_run),
            m(&|x| x.reduce_stage as f64),
            m(&|x| x.reduce_fetch as f64)
        );
    }
    println!();
    println!("where the map subtasks ran: share of all maps (mean map run ms) per worker; fetched MB into each worker");
    print!("{:<14}", "placer");
    for (i, q) in o.quotas.iter().enumerate() {
        let rail = if !o.rig {
            String::new()
        } else if o.slow.contains(&i) {
            format!(",{}", o.slow_rate)
        } else {
            format!(",{}", o.fast_rate)
        };
        print!(" {:>22}", format!("w{i} ({q:.0}%{rail})"));
    }
    println!(" {:>10}", "fetched_MB");
    for r in runs {
        let maps: u32 = r.workers.iter().map(|w| w.maps).sum();
        print!("{:<14}", r.placer);
        for w in &r.workers {
            let share = if maps == 0 { 0.0 } else { 100.0 * w.maps as f64 / maps as f64 };
            let run = if w.maps == 0 { "-".to_string() } else { format!("{}", w.map_run_ms / w.maps as u64) };
            print!(" {:>22}", format!("{share:.0}% ({run} ms)"));
        }
        println!(" {:>10.0}", r.workers.iter().map(|w| w.fetched_bytes).sum::<u64>() as f64 / (1u64 << 20) as f64);
    }
    println!();
    println!(
        "what the coordinator learnt by the end (relative_speed: cluster mean run time / the worker's, > 1 faster; fetch MB/s into it), and cgroup throttling"
    );
    for r in runs {
        print!("{:<14}", r.placer);
        for (i, w) in r.workers.iter().enumerate() {
            let thr = w.throttled.map_or("-".to_string(), |(_, ms)| format!("{:.0}s", ms / 1000.0));
            print!(
                "  w{i}: speed {} fetch {} thr {thr}",
                fmt((w.relative_speed > 0.0).then_some(w.relative_speed), 2),
                fmt((w.fetch_bytes_per_ms > 0.0).then(|| w.fetch_bytes_per_ms * 1000.0 / (1u64 << 20) as f64), 0)
            );
        }
        println!();
    }
    for r in runs {
        let failures: Vec<String> = r
            .jobs
            .iter()
            .enumerate()
            .filter_map(|(i, j)| j.failure.as_ref().map(|f| format!("job {}: {f}", i + 1)))
            .collect();
        if !failures.is_empty() {
            println!(
                "{} failures under {}: {}",
                failures.len(),
                r.placer,
                failures.iter().take(5).cloned().collect::<Vec<_>>().join("; ")
            );
        }
        if let Some(e) = &r.error {
            println!("{}: {e}", r.placer);
        }
    }
    println!("whole run: {:.0} s", total.as_secs_f64());
    let _ = n;
}

/// SIGINT / SIGTERM set the flag (the stream loop then stops and everything is torn down).
fn watch_signals(stop: Arc<AtomicBool>) {
    std::thread::spawn(move || {
        let Ok(rt) = tokio::runtime::Builder::new_current_thread().enable_all().build() else { return };
        rt.block_on(async {
            let Ok(mut term) = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) else {
                return;
            };
            tokio::select! {
                _ = tokio::signal::ctrl_c() => {}
                _ = term.recv() => {}
            }
        });
        eprintln!("{PROG}: interrupted; tearing down");
        stop.store(true, Ordering::Relaxed);
    });
}

fn main() {
    let mut o = parse_opts();
    let t0 = Instant::now();
    let stop = Arc::new(AtomicBool::new(false));
    watch_signals(stop.clone());
    let plans = stream(&o);
    let ids = worker_ids(&o);
    let rig = if o.rig {
        match build_rig(&o) {
            Ok(r) => Some(r),
            Err(why) => {
                println!(
                    "{PROG}: the rail rig cannot be used here ({why}); running on loopback (--no-rig): CPU quotas only, no rail rates"
                );
                o.rig = false;
                None
            }
        }
    } else {
        None
    };
    let rig_note = match &rig {
        Some(_) => format!(
            "rail rig, one rail per worker (worker i in namespace plx-h<i+1>), {} except workers {:?} at {}; coordinator on loopback behind a forwarder",
            o.fast_rate, o.slow, o.slow_rate
        ),
        None => "loopback (no rail rates)".to_string(),
    };
    let mut order: Vec<usize> = (0..ids.len()).collect();
    order.sort_by(|&a, &b| ids[a].cmp(&ids[b]));
    eprintln!(
        "{PROG}: {rig_note}; worker id order (ties go to the earliest): {}",
        order.iter().map(|i| format!("w{i}")).collect::<Vec<_>>().join(" < ")
    );
    let mut runs = Vec::new();
    for p in o.placers.clone() {
        if stop.load(Ordering::Relaxed) {
            break;
        }
        eprintln!("{PROG}: placer {p}");
        let r = run_placer(&o, &p, &plans, &ids, rig.as_ref(), &stop);
        if let Some(e) = &r.error {
            eprintln!("[{p}] {e}");
        }
        runs.push(r);
    }
    drop(rig);
    report(&o, &runs, &rig_note, &plans, t0.elapsed());
}
