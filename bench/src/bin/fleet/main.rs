//! `fleet` (issue 35): hollow workers at cluster scale against one real coordinator.
//!
//! For each fleet size N (`--workers`, default 100 and 1,000) and store (`--store`, default sled;
//! `sled,etcd` puts them side by side) a fresh secure control plane — one coordinator on the sled
//! store (the release binary, mutual TLS, as `plexus up` starts it), or two on an etcd cluster of
//! `--etcd-members` (default 3), one leading — and N hollow workers in this one process, each
//! speaking the real worker protocol over a connection of its own:
//! * **join** — a key pair and `Join` with the cluster's join token, as a new worker does
//!   (`plexus_worker::credentials::obtain`, its certificate kept in a directory of its own);
//! * **register** — all N at once (a cold start's storm): connect with its certificate,
//!   `Register`, open the `Assignments` stream;
//! * **heartbeats** at the interval the coordinator gives, each timed (round trip), for
//!   `--heartbeat-secs`, listing the attempts it is running; a new interval in an answer is
//!   followed from then on (the coordinator stretches its timing past `--max-heartbeats-per-sec`,
//!   a list of values puts runs side by side; the table shows the interval it ended at);
//! * **work** — a job of `--subtasks` one-core no-op replicas: each assignment is answered with
//!   RUNNING and SUCCEEDED in one `ReportTasks` (no process, no data), so the figure is what the
//!   control plane sustains: placements per second from submit to the job's end; with
//!   `--run-ms N`, RUNNING at once and SUCCEEDED N ms later, the subtask listed as running in
//!   the worker's heartbeats meanwhile (a full cluster, with enough);
//! * **flood** — `--flooders` clients list every worker in a loop for `--flood-secs` while the
//!   heartbeats are timed again: the heartbeats' p99 under that load, and how many listings were
//!   answered and how many shed (`--shed-lag-ms`, a list of values puts runs side by side);
//! * **lists** — `ListWorkers` through the API, timed: every worker in one response, one page
//!   of 500 (what `plexus workers` asks for at a time), and the summary alone
//!   (`plexus workers --summary`, and the dashboard's usage sampler).
//!
//! Printed per N: join and registration times, heartbeat p50/p99 (and, apart, when every
//! `Assignments` stream was open after registration and the p99 of the heartbeats answered after
//! that: the cold start's heartbeats apart from the settled cluster's), the coordinator's CPU (cores)
//! while the workers only heartbeat and while the job runs (the hollow workers share this
//! machine's 2 cores with it), placements/s, the
//! coordinator's RSS (and per worker), `ListWorkers` latency and size (whole, a page, the
//! summary), and how many workers the
//! coordinator reports not alive at the end (a worker falsely declared lost counts there).
//! Targets (issue 35, at 5,000 workers): all registered within 60 s, heartbeat p99 ≤ 200 ms,
//! ≥ 10,000 placements/s, RSS ≤ 2 GiB, `plexus workers` ≤ 1 s, none lost; PASS/FAIL per row
//! against them. Then (`--storm`, on by default) two restart storms: the coordinator `kill -9`ed
//! and started again on its data dir while every worker retries `Register` from the kill on its
//! back-off, the product's jittered one and the lockstep one before it; the time until all are
//! back. On etcd, instead, the HA takeover: the leader `kill -9`ed a quarter of the way through a
//! job of `--subtasks` no-op replicas, every worker retrying `Register` against both coordinators
//! on its jittered back-off; the time until the standby leads, until every worker is registered
//! with it, and until the job ends, whether it lost a subtask, and how many subtasks whose success
//! was acknowledged were assigned again (run twice). Target (issue 35): all back within the
//! lease + 10 s, nothing lost or run twice; every etcd figure within 2× of sled's.
//!
//! `cargo run --release -p plexus-bench --bin fleet [-- --workers 100,1000,5000 --store sled,etcd
//! --subtasks N --heartbeat-secs S --cpus C --run-ms N]`. Needs the release `plexus-coordinator` beside it
//! (and `etcd` for the etcd store: `make deps` installs it).
//!
//! # Layout
//! * `plane`: the control plane, one coordinator on sled or an HA pair on etcd.
//! * `hollow`: the hollow workers (join, register, heartbeats, assignments) and the ledger of
//!   what they were asked to run.
//! * `phases`: the placement run, the listings, the flood, the restart storms, the takeover.
//! * `report`: the tables, and what they read from /proc.

mod hollow;
mod phases;
mod plane;
mod report;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::Relaxed};
use std::time::{Duration, Instant};

use plexus_proto::pb;
use plexus_scheduler::core::config::DEFAULT_MAX_HEARTBEATS_PER_SEC;
use plexus_worker::credentials::TrustConfig;

use hollow::{Ledger, assignments, heartbeats, join_all, register_all};
use phases::{RealRun, flood, percentile, place_all, sorted, storm, takeover, timed_list};
use plane::{Plane, StoreKind};
use report::{cpu_of, print, rss_of, share};

#[derive(Debug, clap::Parser)]
#[command(name = "fleet", about = "Hollow workers at cluster scale against one real coordinator")]
struct Args {
    /// Fleet sizes, comma-separated.
    #[arg(long, value_delimiter = ',', default_value = "100,1000")]
    workers: Vec<usize>,
    /// Stores, comma-separated: `sled` (one coordinator) and `etcd` (an HA pair on etcd).
    #[arg(long = "store", value_delimiter = ',', default_value = "sled", value_parser = StoreKind::parse)]
    stores: Vec<StoreKind>,
    /// Members of the etcd cluster, for `--store etcd`.
    #[arg(long = "etcd-members", default_value_t = 3)]
    etcd_members: usize,
    /// The coordinators' leadership lease, seconds, for `--store etcd` (the product's default).
    #[arg(long = "lease-ttl-s", default_value_t = 5)]
    lease_ttl_s: u64,
    /// No-op one-core subtasks in the placement run (issue 35 measures draining a 100k queue).
    #[arg(long, default_value_t = 100_000)]
    subtasks: u32,
    /// How long heartbeats are timed.
    #[arg(long = "heartbeat-secs", default_value_t = 15)]
    heartbeat_secs: u64,
    /// Cores each hollow worker offers.
    #[arg(long, default_value_t = 2)]
    cpus: u32,
    /// How long each subtask runs on a hollow worker, ms (0: it ends as it is assigned). With
    /// enough, the cluster is full while the queue drains: each ending frees one core, and a
    /// decision must find the few workers with room (`--cpus 1 --run-ms 3000` at 5,000).
    #[arg(long = "run-ms", default_value_t = 0)]
    run_ms: u64,
    /// Seconds the placement run may take before it is reported unfinished.
    #[arg(long = "job-timeout", default_value_t = 300)]
    job_timeout: u64,
    /// Joins and connections made at once (the coordinator signs each join's certificate).
    #[arg(long, default_value_t = 64)]
    concurrency: usize,
    /// The coordinator's `--shed-lag-ms`, one fleet per value at each size (0: never shed),
    /// e.g. `200,0` to put shedding and none side by side.
    #[arg(long = "shed-lag-ms", value_delimiter = ',', default_value = "200")]
    shed_lag_ms: Vec<u64>,
    /// The coordinator's `--max-heartbeats-per-sec`, one fleet per value at each size (0: the
    /// configured 500 ms timing at any size), e.g. `2000,0` to put the stretched timing and the
    /// fixed one side by side.
    #[arg(long = "max-heartbeats-per-sec", value_delimiter = ',', default_values_t = [DEFAULT_MAX_HEARTBEATS_PER_SEC])]
    max_heartbeats_per_sec: Vec<u64>,
    /// Clients calling `ListWorkers` in a loop during the flood.
    #[arg(long, default_value_t = 8)]
    flooders: usize,
    /// What they ask for: `whole` (every worker: costly to encode and send) or `summary` (a pass
    /// over every worker on the engine's thread, a small answer).
    #[arg(long = "flood-list", default_value = "whole", value_parser = ["whole", "summary"])]
    flood_list: String,
    /// How long the flood lasts; its heartbeats are timed on their own (0: no flood).
    #[arg(long = "flood-secs", default_value_t = 10)]
    flood_secs: u64,
    /// Real worker processes (`plexus-worker`, as `plexus up` starts them) joined to the same
    /// control plane beside the hollow ones; during the placement run they run a job of their
    /// own (2 `true` subtasks each, one per core, which the hollow workers' label keeps off the fleet), timed.
    #[arg(long = "real-workers", default_value_t = 2)]
    real_workers: usize,
    /// Restart the coordinator twice at the end of each size (kill -9, start) and time every
    /// worker's return: on the product's jittered back-off, then in lockstep.
    #[arg(long, default_value_t = true, action = clap::ArgAction::Set)]
    storm: bool,
}

/// Waits out the heartbeats' window (`--heartbeat-secs`), noting when every one of the `n`
/// hollow workers' `Assignments` streams is open: how long after registration, and how many
/// heartbeats were answered by then (those after it are the settled cluster's).
fn settle(args: &Args, n: usize, ledger: &Ledger, rtts: &std::sync::Mutex<Vec<f64>>) -> Option<(Duration, usize)> {
    let start = Instant::now();
    let until = start + Duration::from_secs(args.heartbeat_secs);
    let mut settled = None;
    while Instant::now() < until {
        if settled.is_none() && ledger.streams.load(Relaxed) >= n as u64 {
            settled = Some((start.elapsed(), rtts.lock().expect("rtts").len()));
        }
        std::thread::sleep(Duration::from_millis(5));
    }
    settled
}

/// How long a hollow worker's subtask runs (`--run-ms`).
fn run_for(args: &Args) -> Duration {
    Duration::from_millis(args.run_ms)
}

/// Issue 35's targets, at 5,000 workers.
const REGISTER_TARGET: Duration = Duration::from_secs(60);
const HEARTBEAT_P99_TARGET_MS: f64 = 200.0;
const PLACEMENTS_TARGET: f64 = 10_000.0;
const RSS_TARGET: u64 = 2 << 30;
const LIST_TARGET: Duration = Duration::from_secs(1);

/// What one fleet size measured.
struct Row {
    n: usize,
    store: StoreKind,
    /// The etcd store's leader takeover.
    takeover: Option<Takeover>,
    storms: Vec<Storm>,
    /// The real workers' job, run beside the fleet's.
    real: Option<RealRun>,
    /// The coordinator's CPU (cores) while the workers only heartbeat, and while the job runs.
    idle_cpu: Option<f64>,
    work_cpu: Option<f64>,
    knobs: Knobs,
    /// The heartbeat interval the coordinator gave at the end of the placement run.
    interval: Duration,
    join: Duration,
    register: Duration,
    hb_p50_ms: f64,
    hb_p99_ms: f64,
    heartbeats: usize,
    /// From registration until every hollow worker's `Assignments` stream was open (the end
    /// of the cold start), if within the heartbeats' window.
    streams_open: Option<Duration>,
    /// The heartbeats answered after that, and their p99.
    settled_p99_ms: f64,
    settled_beats: usize,
    placements_per_s: f64,
    placed: u32,
    rss: Option<u64>,
    /// Before any worker joined.
    rss_before: Option<u64>,
    list: Duration,
    list_bytes: usize,
    /// One page of 500 workers (what `plexus workers` asks for at a time).
    page: Duration,
    /// The summary alone (`plexus workers --summary`, the dashboard's usage sampler).
    summary: Duration,
    not_alive: usize,
    flood: Flood,
}

/// A restart storm: the coordinator `kill -9`ed and started again while every worker retries.
struct Storm {
    jittered: bool,
    /// From the kill until the new coordinator listened.
    restart: Duration,
    /// From the kill until every worker was registered again.
    all: Duration,
    /// Registration attempts made, refused ones included.
    attempts: u64,
}

/// The leader killed mid-job and its standby taking over (see [`phases::takeover`]).
struct Takeover {
    /// Assignments answered before the kill.
    answered_at_kill: u64,
    /// From the kill until the standby led and served.
    leader: Duration,
    /// From the kill until every worker was registered with the new leader.
    all_back: Duration,
    /// From the kill until the job ended.
    job_end: Duration,
    /// Registration attempts made, refused ones included.
    attempts: u64,
    succeeded: u32,
    /// The job succeeded with every subtask.
    job_ok: bool,
    /// Assignments answered after the takeover.
    answered_after: u64,
    /// Subtasks assigned again after their success was acknowledged.
    twice: u64,
}

/// What a flood of whole listings did: the heartbeats' p99 meanwhile, listings answered and shed.
#[derive(Default)]
struct Flood {
    hb_p99_ms: f64,
    heartbeats: usize,
    answered: u64,
    shed: u64,
    /// Any other error, the first of them.
    failed: u64,
    error: Option<String>,
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Args = clap::Parser::parse();
    let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build()?;
    let (mut rows, mut failed) = (Vec::new(), Vec::new());
    for &n in &args.workers {
        for &store in &args.stores {
            for &shed in &args.shed_lag_ms {
                for &budget in &args.max_heartbeats_per_sec {
                    let knobs = Knobs { shed_lag_ms: shed, max_heartbeats_per_sec: budget };
                    eprintln!("fleet: {n} hollow workers, {} store, {knobs}", store.name());
                    // A size that fails is reported with the others, not instead of them.
                    match run(&rt, &args, (n, store), knobs) {
                        Ok(r) => rows.push(r),
                        Err(e) => failed.push(format!("N={n} {} {knobs}: {e}", store.name())),
                    }
                }
            }
        }
    }
    print(&args, &rows);
    if failed.is_empty() {
        return Ok(());
    }
    println!("\nfailed ({}):", failed.len());
    for f in &failed {
        println!("  {f}");
    }
    Err(format!("{} of {} runs failed", failed.len(), failed.len() + rows.len()).into())
}

/// The coordinator's settings a run compares (each a list on the command line).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Knobs {
    pub(crate) shed_lag_ms: u64,
    pub(crate) max_heartbeats_per_sec: u64,
}

impl std::fmt::Display for Knobs {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "--shed-lag-ms {} --max-heartbeats-per-sec {}", self.shed_lag_ms, self.max_heartbeats_per_sec)
    }
}

fn run(
    rt: &tokio::runtime::Runtime,
    args: &Args,
    (n, store): (usize, StoreKind),
    knobs: Knobs,
) -> Result<Row, Box<dyn std::error::Error>> {
    let mut c = Plane::start(store, args, knobs)?;
    // The coordinator's own footprint before any worker (libtorch's pages among it).
    let rss_before = c.pid().and_then(rss_of);
    let dirs = tempfile::tempdir()?;
    let trust = TrustConfig {
        insecure: false,
        ca_file: Some(c.ca_file()),
        join_token: Some(std::fs::read_to_string(c.join_token_file())?.trim().to_string()),
    };

    // Join: every worker's certificate, `concurrency` at a time, from the leader.
    let started = Instant::now();
    let creds = rt
        .block_on(join_all(&trust, &c.leader_url(), dirs.path(), n, args.concurrency))
        .map_err(|e| format!("joining: {e}"))?;
    let join = started.elapsed();

    // Register: all at once, as after a cold start.
    let stop = Arc::new(AtomicBool::new(false));
    let rtts = Arc::new(std::sync::Mutex::new(Vec::<f64>::new()));
    let timing = Arc::new(AtomicBool::new(false));
    let placed = Arc::new(AtomicU64::new(0));
    let ledger = Arc::new(Ledger::default());
    let started = Instant::now();
    let fleet = register_all(rt, &c.urls(), &creds, args.cpus).map_err(|e| format!("registering: {e}"))?;
    let register_time = started.elapsed();
    for h in &fleet {
        rt.spawn(heartbeats(h.clone(), stop.clone(), rtts.clone(), timing.clone()));
        rt.spawn(assignments(h.clone(), stop.clone(), placed.clone(), ledger.clone(), run_for(args)));
    }

    // Heartbeats, timed, and the coordinator's CPU meanwhile (all it does then is serve them).
    let pid = c.pid();
    let cpu0 = pid.and_then(cpu_of);
    timing.store(true, Relaxed);
    let settle = settle(args, n, &ledger, &rtts);
    timing.store(false, Relaxed);
    let idle_cpu = share(cpu0, pid.and_then(cpu_of), Duration::from_secs(args.heartbeat_secs));
    let mut settled: Vec<f64> = settle.map(|(_, i)| rtts.lock().expect("rtts")[i..].to_vec()).unwrap_or_default();
    settled.sort_by(f64::total_cmp);
    let hb = sorted(&rtts);

    // A flood of whole listings, heartbeats timed meanwhile.
    let flood = if args.flood_secs == 0 { Flood::default() } else { flood(&c, args, &rtts, &timing) };

    // Work: one job of no-op replicas, and the coordinator's CPU meanwhile.
    let cpu0 = pid.and_then(cpu_of);
    let (wall, real) = place_all(&c, args, n, &placed).map_err(|e| format!("the placement run: {e}"))?;
    let work_cpu = share(cpu0, pid.and_then(cpu_of), wall);
    let answered = placed.load(Relaxed) as u32;

    let lists = Lists::take(&c)?;
    let rss = c.pid().and_then(rss_of);
    // The interval the coordinator gives now (the fleet's longest: a worker learns a change from
    // its next heartbeat).
    let interval = fleet.iter().map(|h| h.interval()).max().unwrap_or_default();
    let (storms, takeover) = restarts(rt, &mut c, args, &creds, (&stop, &placed), &ledger)?;
    stop.store(true, Relaxed);
    drop(fleet);
    Ok(Row {
        n,
        store,
        takeover,
        storms,
        real,
        idle_cpu,
        work_cpu,
        knobs,
        interval,
        flood,
        join,
        register: register_time,
        hb_p50_ms: percentile(&hb, 0.50),
        hb_p99_ms: percentile(&hb, 0.99),
        heartbeats: hb.len(),
        streams_open: settle.map(|(t, _)| t),
        settled_p99_ms: percentile(&settled, 0.99),
        settled_beats: settled.len(),
        placements_per_s: f64::from(args.subtasks) / wall.as_secs_f64(),
        placed: answered,
        rss,
        rss_before,
        list: lists.whole.0,
        list_bytes: prost::Message::encoded_len(&lists.whole.1),
        page: lists.page,
        summary: lists.summary,
        not_alive: lists.whole.1.workers.iter().filter(|w| !w.alive).count()
            + (n + args.real_workers).saturating_sub(lists.whole.1.workers.len()),
    })
}

/// At the end of a size: on etcd, the leader killed mid-job and the standby taking over; on sled,
/// restart storms (the coordinator killed and started again, every worker coming back on its
/// back-off schedule, jittered, the product's, and in lockstep, before it).
fn restarts(
    rt: &tokio::runtime::Runtime,
    c: &mut Plane,
    args: &Args,
    creds: &[(plexus_proto::WorkerId, plexus_worker::credentials::Credentials)],
    (stop, placed): (&AtomicBool, &AtomicU64),
    ledger: &Arc<Ledger>,
) -> Result<(Vec<Storm>, Option<Takeover>), Box<dyn std::error::Error>> {
    Ok(match c {
        Plane::Etcd(_) => (
            Vec::new(),
            Some(takeover(rt, c, args, creds, (stop, placed), ledger).map_err(|e| format!("the takeover: {e}"))?),
        ),
        Plane::Sled(_) if args.storm => {
            stop.store(true, Relaxed);
            (vec![storm(rt, c, creds, args.cpus, true)?, storm(rt, c, creds, args.cpus, false)?], None)
        }
        Plane::Sled(_) => (Vec::new(), None),
    })
}

/// `ListWorkers` timed three ways: every worker, what `plexus workers` asks for (a page of 500),
/// and `plexus workers --summary`.
struct Lists {
    whole: (Duration, pb::ListWorkersResponse),
    page: Duration,
    summary: Duration,
}

impl Lists {
    fn take(c: &Plane) -> Result<Lists, Box<dyn std::error::Error>> {
        let whole = timed_list(c, pb::ListWorkersRequest::default()).map_err(|e| format!("listing workers: {e}"))?;
        let (page, _) = timed_list(c, pb::ListWorkersRequest { page_size: 500, ..Default::default() })?;
        let (summary, _) = timed_list(c, pb::ListWorkersRequest { summary_only: true, ..Default::default() })?;
        Ok(Lists { whole, page, summary })
    }
}
