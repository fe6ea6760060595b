//! Control-plane benchmark: a job of 10,000 no-op subtasks across 4 real worker processes on
//! loopback, measured end to end (submitted → placed → persisted → sent → reported done →
//! persisted), plus dispatch latency percentiles and where the coordinator's engine spent its
//! time. Run with `make bench-control` (release build).
//!
//! The whole measurement runs twice, on a secure cluster (mutual TLS between workers and
//! coordinator, TLS and a bearer token on every client call: the default) and on one started
//! with `--insecure`, and the table shows both side by side with their ratio; and a third time
//! on a secure cluster with metrics off (`--http none`), while the first two are scraped every
//! second, so the table shows what metrics cost (issue 18: < 5 % of throughput).
//!
//! Then a deep-queue run (issue 14): one secure cluster of 4 workers offering 16 cores each (64
//! one-core slots) is given a job of N one-core no-op replicas for N = 1,000, 10,000 and 100,000,
//! so that N replicas wait for those 64 slots, and placements per second are measured at each
//! depth side by side; then the same with priorities and small gangs mixed in (a priority-0 job of
//! N replicas submitted together with a few priority-10 jobs whose task is a gang of 4 one-core
//! no-op members that start together). The mixed run skips itself, saying why, while the
//! coordinator refuses those job-file fields. Each depth is cut off after a time limit (the rate
//! reached so far is printed, marked "timed out"). `--deep-only` runs only the deep-queue part,
//! `--no-deep` only the TLS / insecure part, `--depth-timeout SECS` changes the limit.
//!
//! Then the stores side by side (issue 19): the same 10,000-subtask bursts and one-subtask jobs
//! on the sled store and on etcd (one member, and three), each with three coordinators where the
//! store is etcd, measured through the leader: placements per second and submit→placed latency;
//! then the failover time: the leader killed with `kill -9` while a job runs, until a standby
//! serves as the leader, at two lease TTLs. `--stores-only` runs only this part, `--no-stores`
//! skips it; it skips itself, saying why, where etcd is not installed.
//!
//! Figures for other schedulers are the ones their projects published (cited, not measured here):
//! they are printed for scale, not as a same-machine comparison.

use std::time::{Duration, Instant};

use plexus_bench::percentile;
use plexus_e2e::{Cluster, ClusterConfig};
use plexus_proto::pb;

const SUBTASKS: u32 = 10_000;
const RUNS: usize = 3;
/// Single-subtask jobs submitted one after another, to measure the latency of one subtask on an
/// idle control plane (the burst runs measure throughput).
const SINGLES: usize = 200;

struct Run {
    wall: Duration,
    /// ready → assigned (queueing in the coordinator), ms per subtask.
    queue: Vec<u64>,
    /// assigned (persisted, sent) → started on the worker, ms per subtask.
    dispatch: Vec<u64>,
    /// ready → finished on the worker, ms per subtask.
    total: Vec<u64>,
}

fn one_run(c: &Cluster, i: usize) -> Run {
    let src =
        format!("name = \"noop-{i}\"\n[[task]]\nname = \"noop\"\nkind = \"noop\"\nreplicas = {SUBTASKS}\ncpu = 0\n");
    let t0 = Instant::now();
    let job = c.submit("noop.toml", &src);
    loop {
        let s = c.job_summary(&job).expect("coordinator reachable");
        if s.state != pb::JobState::Running as i32 {
            assert_eq!(s.state, pb::JobState::Succeeded as i32, "benchmark job failed: {}", s.error);
            break;
        }
        std::thread::sleep(Duration::from_millis(2));
    }
    let wall = t0.elapsed();
    let full = c.job(&job).expect("job status");
    let mut r = Run { wall, queue: Vec::new(), dispatch: Vec::new(), total: Vec::new() };
    for s in &full.subtasks {
        assert_eq!(s.attempt, 1, "every subtask placed once");
        r.queue.push(s.assigned_at.saturating_sub(s.ready_at));
        r.dispatch.push(s.started_at.saturating_sub(s.assigned_at));
        r.total.push(s.finished_at.saturating_sub(s.ready_at));
    }
    r.queue.sort_unstable();
    r.dispatch.sort_unstable();
    r.total.sort_unstable();
    r
}

/// Everything measured on one cluster.
struct Measured {
    runs: Vec<Run>,
    single_total: Vec<u64>,
    single_dispatch: Vec<u64>,
    engine: Option<String>,
}

/// Scrapes the coordinator's `/metrics` every [`SCRAPE_EVERY`] until dropped, as Prometheus
/// would (with the admin token when there is one): metrics cost what keeping and serving them costs.
struct Scraper {
    stop: std::sync::Arc<std::sync::atomic::AtomicBool>,
    thread: Option<std::thread::JoinHandle<u64>>,
}

const SCRAPE_EVERY: Duration = Duration::from_secs(1);

impl Scraper {
    fn start(c: &Cluster) -> Option<Scraper> {
        let addr = c.http.as_deref()?.strip_prefix("http://")?.to_string();
        let auth = c.admin_token.as_ref().map(|t| format!("Authorization: Bearer {t}\r\n")).unwrap_or_default();
        let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let flag = stop.clone();
        let thread = std::thread::spawn(move || {
            use std::io::{Read, Write};
            let mut ok = 0;
            while !flag.load(std::sync::atomic::Ordering::Relaxed) {
                if let Ok(mut s) = std::net::TcpStream::connect(&addr) {
                    let _ = s.set_read_timeout(Some(Duration::from_secs(5)));
                    let mut body = String::new();
                    if write!(s, "GET /metrics HTTP/1.1\r\nHost: {addr}\r\n{auth}Connection: close\r\n\r\n").is_ok()
                        && s.read_to_string(&mut body).is_ok()
                        && body.starts_with("HTTP/1.1 200")
                    {
                        ok += 1;
                    }
                }
                std::thread::sleep(SCRAPE_EVERY);
            }
            ok
        });
        Some(Scraper { stop, thread: Some(thread) })
    }

    /// Stops, and says how many scrapes succeeded.
    fn finish(mut self) -> u64 {
        self.stop.store(true, std::sync::atomic::Ordering::Relaxed);
        self.thread.take().and_then(|t| t.join().ok()).unwrap_or(0)
    }
}

fn measure(insecure: bool, metrics: bool) -> Measured {
    let coordinator_args = if metrics { vec![] } else { vec!["--http".to_string(), "none".to_string()] };
    let config = ClusterConfig {
        workers: 4,
        log: "warn,plexus_coordinator::engine=info".into(),
        insecure,
        coordinator_args,
        ..Default::default()
    };
    eprintln!(
        "starting a coordinator and {} workers ({}, metrics {}; release binaries from {})",
        config.workers,
        if insecure { "--insecure" } else { "TLS and tokens" },
        if metrics { "on, scraped every second" } else { "off (--http none)" },
        plexus_e2e::bin_dir().display()
    );
    let mut c = Cluster::start(config);
    let scraper = if metrics { Some(Scraper::start(&c).expect("the coordinator serves /metrics")) } else { None };

    // One warm-up job so connections and allocators are warm, then the measured runs.
    let _ = one_run(&c, 0);
    let runs: Vec<Run> = (1..=RUNS).map(|i| one_run(&c, i)).collect();

    // Isolated subtasks: submit, wait until done, repeat.
    let mut single_total = Vec::new();
    let mut single_dispatch = Vec::new();
    for i in 0..SINGLES {
        let t0 = Instant::now();
        let job =
            c.submit("one.toml", &format!("name = \"one-{i}\"\n[[task]]\nname = \"noop\"\nkind = \"noop\"\ncpu = 0\n"));
        let st = loop {
            let s = c.job(&job).expect("coordinator reachable");
            if s.state != pb::JobState::Running as i32 {
                break s;
            }
            std::thread::sleep(Duration::from_micros(200));
        };
        single_total.push(t0.elapsed().as_micros() as u64);
        let s = &st.subtasks[0];
        single_dispatch.push(s.started_at.saturating_sub(s.assigned_at));
    }
    single_total.sort_unstable();
    single_dispatch.sort_unstable();
    if let Some(s) = scraper {
        let n = s.finish();
        assert!(n > 0, "no scrape of /metrics succeeded during the runs");
        eprintln!("{n} scrapes of /metrics during the runs");
    }
    c.stop_coordinator();
    let engine = c.coordinator_log().lines().rev().find(|l| l.contains("engine stats")).map(str::to_string);
    Measured { runs, single_total, single_dispatch, engine }
}

fn median_rate(m: &Measured) -> f64 {
    let rates: Vec<f64> = m.runs.iter().map(|r| SUBTASKS as f64 / r.wall.as_secs_f64()).collect();
    plexus_bench::median(&rates).expect("at least one measured run")
}

/// The command line: which parts to run.
#[derive(Debug, clap::Parser)]
#[command(
    name = "control-plane",
    about = "The control plane's throughput and latency, TLS and insecure, sled and etcd, side by side"
)]
struct Cli {
    /// Only the deep-queue part.
    #[arg(long = "deep-only")]
    deep_only: bool,
    /// Leave out the deep-queue part.
    #[arg(long = "no-deep")]
    no_deep: bool,
    /// Only the stores part (sled and etcd).
    #[arg(long = "stores-only")]
    stores_only: bool,
    /// Leave out the stores part.
    #[arg(long = "no-stores")]
    no_stores: bool,
    /// How long the deep-queue part may take, seconds.
    #[arg(long = "depth-timeout", value_name = "SECS", default_value_t = DEPTH_TIMEOUT.as_secs())]
    depth_timeout: u64,
}

fn main() {
    let c = <Cli as clap::Parser>::parse();
    let tls_part = !c.deep_only && !c.stores_only;
    let deep_part = !c.no_deep && !c.stores_only;
    let store_part = !c.no_stores && !c.deep_only;
    let limit = Duration::from_secs(c.depth_timeout);
    if tls_part {
        tls_vs_insecure();
    }
    if store_part {
        stores();
    }
    if deep_part {
        let m = measure_deep(limit);
        print_deep(&m, limit);
    }
}

/// The 10,000-subtask bursts and isolated subtasks, TLS and `--insecure` side by side.
fn tls_vs_insecure() {
    let modes =
        [("tls", measure(false, true)), ("insecure", measure(true, true)), ("no-metrics", measure(false, false))];

    println!(
        "control plane: {SUBTASKS} no-op subtasks per job, 4 worker processes, 1 coordinator, loopback, 2-core machine"
    );
    println!(
        "tls = the default (mutual TLS worker<->coordinator, TLS + bearer token for the client), with /metrics scraped every second; insecure = --insecure (metrics on, scraped); no-metrics = tls with --http none (metrics not kept)"
    );
    println!();
    println!(
        "{:<10} {:>4} {:>9} {:>12} {:>11} {:>11} {:>13} {:>13} {:>11} {:>11}",
        "mode",
        "run",
        "wall_ms",
        "subtasks/s",
        "queue_p50",
        "queue_p99",
        "dispatch_p50",
        "dispatch_p99",
        "total_p50",
        "total_p99"
    );
    for (mode, m) in &modes {
        for (i, r) in m.runs.iter().enumerate() {
            println!(
                "{:<10} {:>4} {:>9} {:>12.0} {:>11} {:>11} {:>13} {:>13} {:>11} {:>11}",
                mode,
                i + 1,
                r.wall.as_millis(),
                SUBTASKS as f64 / r.wall.as_secs_f64(),
                percentile(&r.queue, 50.0),
                percentile(&r.queue, 99.0),
                percentile(&r.dispatch, 50.0),
                percentile(&r.dispatch, 99.0),
                percentile(&r.total, 50.0),
                percentile(&r.total, 99.0),
            );
        }
    }
    println!(
        "(latencies in ms; queue = ready→placed+persisted, dispatch = placed→started on the worker, total = ready→done on the worker)"
    );
    println!();
    println!("isolated subtasks ({SINGLES} one-subtask jobs, one at a time):");
    for (mode, m) in &modes {
        println!(
            "  {mode:<10} client submit -> job done seen: p50 {:.2} ms, p99 {:.2} ms (includes 0.2 ms polling); placed -> started: p50 {} ms, p99 {} ms",
            percentile(&m.single_total, 50.0) as f64 / 1000.0,
            percentile(&m.single_total, 99.0) as f64 / 1000.0,
            percentile(&m.single_dispatch, 50.0),
            percentile(&m.single_dispatch, 99.0)
        );
    }
    println!();
    let (tls, insecure) = (median_rate(&modes[0].1), median_rate(&modes[1].1));
    println!("{:<44} {:>12}", "system", "placements/s");
    println!("{:<44} {:>12.0}", "plexus, TLS + tokens (this run, median)", tls);
    println!("{:<44} {:>12.0}", "plexus, --insecure (this run, median)", insecure);
    println!("{:<44} {:>12.2}", "ratio TLS / insecure (target >= 0.80)", tls / insecure);
    let off = median_rate(&modes[2].1);
    println!("{:<44} {:>12.0}", "plexus, TLS, metrics off (this run, median)", off);
    println!("{:<44} {:>12.2}", "ratio metrics on / off (target >= 0.95)", tls / off);
    println!("{:<44} {:>12}", "target", 10_000);
    println!("{:<44} {:>12}", "Nomad C1M (published; 5 servers)", 3_750);
    println!("{:<44} {:>12}", "Slurm (documented jobs/s)", 500);
    println!("{:<44} {:>12}", "kube-scheduler (published pods/s)", 300);
    println!();

    // Where the coordinator's engine thread spent its time over all runs (warm-up included).
    for (mode, m) in &modes {
        print_engine(mode, "all jobs (warm-up included)", &m.engine);
    }
    println!();
}

// ---- deep queue (issue 14) ------------------------------------------------------------------

/// Queue depths: replicas of one job of one-core no-op subtasks, all waiting for the cluster's slots.
const DEPTHS: [u32; 3] = [1_000, 10_000, 100_000];
const DEEP_WORKERS: usize = 4;
const DEEP_CPUS: u32 = 16;
/// The mixed run: this many priority-10 gang jobs beside the priority-0 job of N replicas.
const GANG_JOBS: u32 = 8;
const GANG_SIZE: u32 = 4;
/// Default limit on one depth, from the submit call to every job of the run ended.
const DEPTH_TIMEOUT: Duration = Duration::from_secs(90);
/// How often the jobs' summaries are polled while waiting.
const DEEP_POLL: Duration = Duration::from_millis(25);
/// Placements per second the deep-queue runs should reach at every depth.
const DEEP_TARGET: f64 = 5_000.0;

/// The job files of one deep-queue run: the deep job first, then (mixed) the gang jobs.
fn deep_sources(n: u32, mixed: bool) -> Vec<(String, String)> {
    let task = |replicas: u32| format!("[[task]]\nname = \"noop\"\nkind = \"noop\"\nreplicas = {replicas}\ncpu = 1\n");
    if !mixed {
        return vec![(format!("deep-{n}.toml"), format!("name = \"deep-{n}\"\n{}", task(n)))];
    }
    let mut v = vec![(format!("deep-mixed-{n}.toml"), format!("name = \"deep-mixed-{n}\"\npriority = 0\n{}", task(n)))];
    for g in 0..GANG_JOBS {
        v.push((
            format!("gang-{n}-{g}.toml"),
            format!(
                "name = \"gang-{n}-{g}\"\npriority = 10\n[[task]]\nname = \"gang\"\nkind = \"noop\"\nreplicas = {GANG_SIZE}\nmin_members = {GANG_SIZE}\ngang_timeout = \"30s\"\ncpu = 1\n"
            ),
        ));
    }
    v
}

/// How one deep-queue run went.
enum Deep {
    /// The coordinator refused a job file (the mixed run while the fields it uses are unknown).
    Skipped(String),
    Ran(DeepRun),
}

struct DeepRun {
    /// Subtasks submitted (all jobs of the run).
    subtasks: u64,
    /// The submit calls, all jobs.
    submit: Duration,
    /// Submit → every job ended (or the time limit).
    wall: Duration,
    timed_out: bool,
    /// A job that ended other than succeeded (before any cancel of ours).
    failed: Option<String>,
    /// Subtasks placed as the last summaries counted them (assigned, running or ended).
    placed_seen: u64,
    /// From the subtasks' own timestamps, when they could be fetched: placed subtasks, and
    /// last assigned_at − first ready_at (ms).
    stamps: Option<(u64, u64)>,
    /// Why the per-subtask list could not be fetched (the rate then is wall-clock).
    fetch_error: Option<String>,
    /// ready → assigned of the deep job's placed subtasks, ms, sorted.
    queue: Vec<u64>,
    /// Per gang job: ready → its last member assigned (ms), and the spread of its members'
    /// start times (ms); None when not every member was placed.
    gangs: Vec<Option<(u64, u64)>>,
}

impl DeepRun {
    /// Placements per second from the coordinator's timestamps, else from the wall clock.
    fn rate(&self) -> f64 {
        match self.stamps {
            Some((placed, window)) => placed as f64 * 1000.0 / window.max(1) as f64,
            None => self.placed_seen as f64 / self.wall.as_secs_f64(),
        }
    }
}

fn placed_in(s: &pb::JobStatus) -> u64 {
    s.groups.iter().map(|g| (g.assigned + g.running + g.succeeded + g.failed) as u64).sum()
}

/// Cancels the jobs and waits until each has ended, polling summaries (not `wait_job`, which
/// fetches every subtask each time).
fn cancel_and_wait(c: &Cluster, ids: &[String]) {
    let mut client = c.client_with(c.admin_token.as_deref());
    for id in ids {
        let _ = c.block_on(client.cancel_job(pb::CancelJobRequest { job_id: id.clone() }));
    }
    for id in ids {
        let t = Instant::now();
        loop {
            let req = pb::GetJobRequest { job_id: id.clone(), subtasks: false };
            let s =
                c.block_on(client.get_job(req)).unwrap_or_else(|e| panic!("job {id}: {}", e.message())).into_inner();
            if s.state != pb::JobState::Running as i32 {
                break;
            }
            assert!(t.elapsed() < Duration::from_secs(300), "job {id} still running 5 minutes after it was cancelled");
            std::thread::sleep(DEEP_POLL);
        }
    }
}

fn deep_run(c: &Cluster, n: u32, mixed: bool, limit: Duration) -> Deep {
    let mut client = c.client_with(c.admin_token.as_deref());
    let sources = deep_sources(n, mixed);
    let subtasks = n as u64 + if mixed { (GANG_JOBS * GANG_SIZE) as u64 } else { 0 };
    let t0 = Instant::now();
    let mut ids: Vec<String> = Vec::new();
    for (name, src) in &sources {
        let req = pb::SubmitJobRequest {
            source: src.clone(),
            format: String::new(),
            filename: name.clone(),
            after_jobs: Vec::new(),
        };
        match c.block_on(client.submit_job(req)) {
            Ok(r) => ids.push(r.into_inner().job_id),
            Err(e) => {
                // Leave nothing running behind: cancel what this run already submitted.
                cancel_and_wait(c, &ids);
                let why = if e.message().contains("unknown field") {
                    format!("this coordinator does not know the fields yet; it refused {name}: {}", e.message())
                } else {
                    format!("REFUSED {name}: {}", e.message())
                };
                return Deep::Skipped(why);
            }
        }
    }
    let submit = t0.elapsed();
    let deadline = t0 + limit;
    let (mut timed_out, mut failed) = (false, None);
    let mut placed_seen: u64;
    loop {
        let mut running = false;
        placed_seen = 0;
        for id in &ids {
            let req = pb::GetJobRequest { job_id: id.clone(), subtasks: false };
            let s =
                c.block_on(client.get_job(req)).unwrap_or_else(|e| panic!("job {id}: {}", e.message())).into_inner();
            placed_seen += placed_in(&s);
            if s.state == pb::JobState::Running as i32 {
                running = true;
            } else if s.state != pb::JobState::Succeeded as i32 && failed.is_none() {
                failed = Some(format!("job {} ended in state {}: {}", s.name, s.state, s.error));
            }
        }
        if !running {
            break;
        }
        if Instant::now() >= deadline {
            timed_out = true;
            break;
        }
        std::thread::sleep(DEEP_POLL);
    }
    let wall = t0.elapsed();
    if timed_out {
        cancel_and_wait(c, &ids);
    }

    // Every subtask of every job, once, at the end.
    let mut run = DeepRun {
        subtasks,
        submit,
        wall,
        timed_out,
        failed,
        placed_seen,
        stamps: None,
        fetch_error: None,
        queue: Vec::new(),
        gangs: Vec::new(),
    };
    let (mut placed, mut first_ready, mut last_assigned) = (0u64, u64::MAX, 0u64);
    for (k, id) in ids.iter().enumerate() {
        let req = pb::GetJobRequest { job_id: id.clone(), subtasks: true };
        let full = match c.block_on(async { tokio::time::timeout(Duration::from_secs(120), client.get_job(req)).await })
        {
            Ok(Ok(r)) => r.into_inner(),
            Ok(Err(e)) => {
                run.fetch_error = Some(format!("job {id} with its subtasks: {:?}: {}", e.code(), e.message()));
                break;
            }
            Err(_) => {
                run.fetch_error = Some(format!("job {id} with its subtasks: no answer in 120 s"));
                break;
            }
        };
        let mut gang = (u64::MAX, 0u64, u64::MAX, 0u64, 0u32); // first ready, last assigned, first/last start, members placed
        for s in &full.subtasks {
            if s.assigned_at == 0 {
                continue;
            }
            placed += 1;
            first_ready = first_ready.min(s.ready_at);
            last_assigned = last_assigned.max(s.assigned_at);
            if k == 0 {
                run.queue.push(s.assigned_at.saturating_sub(s.ready_at));
            } else {
                gang.0 = gang.0.min(s.ready_at);
                gang.1 = gang.1.max(s.assigned_at);
                gang.2 = gang.2.min(s.started_at);
                gang.3 = gang.3.max(s.started_at);
                gang.4 += 1;
            }
        }
        if k > 0 {
            run.gangs
                .push((gang.4 == GANG_SIZE).then(|| (gang.1.saturating_sub(gang.0), gang.3.saturating_sub(gang.2))));
        }
    }
    run.queue.sort_unstable();
    if run.fetch_error.is_none() && placed > 0 {
        run.stamps = Some((placed, last_assigned.saturating_sub(first_ready)));
    }
    Deep::Ran(run)
}

struct DeepMeasured {
    /// Per depth: (plain, mixed).
    rows: Vec<(u32, Deep, Deep)>,
    engine: Option<String>,
    total: Duration,
}

fn measure_deep(limit: Duration) -> DeepMeasured {
    let t0 = Instant::now();
    let config = ClusterConfig {
        workers: DEEP_WORKERS,
        cpus_per_worker: DEEP_CPUS,
        log: "warn,plexus_coordinator::engine=info".into(),
        ..Default::default()
    };
    eprintln!(
        "deep queue: starting a coordinator and {DEEP_WORKERS} workers with --cpus {DEEP_CPUS} (TLS and tokens); each depth is cut off after {} s",
        limit.as_secs()
    );
    let mut c = Cluster::start(config);
    let mut rows = Vec::new();
    for n in DEPTHS {
        eprintln!("deep queue: {n} replicas ...");
        let plain = deep_run(&c, n, false, limit);
        eprintln!("deep queue: {n} replicas with priorities and gangs ...");
        let mixed = deep_run(&c, n, true, limit);
        rows.push((n, plain, mixed));
    }
    c.stop_coordinator();
    let engine = c.coordinator_log().lines().rev().find(|l| l.contains("engine stats")).map(str::to_string);
    DeepMeasured { rows, engine, total: t0.elapsed() }
}

fn fmt_opt(v: Option<f64>, digits: usize) -> String {
    v.map_or_else(|| "-".to_string(), |v| format!("{v:.digits$}"))
}

fn print_deep(m: &DeepMeasured, limit: Duration) {
    println!(
        "deep queue: one-core no-op replicas on {DEEP_WORKERS} workers x {DEEP_CPUS} cores ({} slots), TLS + tokens, 1 coordinator, loopback, 2-core machine",
        DEEP_WORKERS as u32 * DEEP_CPUS
    );
    println!("  plain = one job of N replicas (kind = \"noop\", cpu = 1), so N replicas wait for the slots");
    println!(
        "  mixed = the same job with priority = 0, submitted together with {GANG_JOBS} jobs with priority = 10 whose task is a gang (replicas = min_members = {GANG_SIZE}, cpu = 1, noop)"
    );
    println!(
        "  placements/s = subtasks placed / (last assigned_at - first ready_at), the coordinator's own timestamps"
    );
    println!(
        "  wall = submit call -> every job of the run ended (summaries polled every {} ms); limit {} s per run",
        DEEP_POLL.as_millis(),
        limit.as_secs()
    );
    println!();
    println!(
        "{:>7} {:<6} {:>9} {:>8} {:>13} {:>9} {:>10} {:>10} {:>10} {:>13} {:>12}  status",
        "depth",
        "run",
        "submit_ms",
        "placed",
        "placements/s",
        "wall_ms",
        "wall_rate",
        "queue_p50",
        "queue_p99",
        "gang_wait_max",
        "gang_spread"
    );
    for (n, plain, mixed) in &m.rows {
        for (name, d) in [("plain", plain), ("mixed", mixed)] {
            match d {
                Deep::Skipped(why) => println!("{n:>7} {name:<6} skipped: {why}"),
                Deep::Ran(r) => {
                    let mut status = Vec::new();
                    if r.timed_out {
                        status.push(format!(
                            "timed out after {} s ({} of {} placed)",
                            limit.as_secs(),
                            r.placed_seen,
                            r.subtasks
                        ));
                    } else if r.failed.is_none() {
                        status.push("done".to_string());
                    }
                    if let Some(f) = &r.failed {
                        status.push(f.clone());
                    }
                    if let Some(e) = &r.fetch_error {
                        status.push(format!("rate from the wall clock: could not fetch {e}"));
                    }
                    let gang_wait = r.gangs.iter().flatten().map(|g| g.0).max();
                    let gang_spread = r.gangs.iter().flatten().map(|g| g.1).max();
                    let gangs_unplaced = r.gangs.iter().filter(|g| g.is_none()).count();
                    if gangs_unplaced > 0 {
                        status.push(format!("{gangs_unplaced} of {} gangs not fully placed", r.gangs.len()));
                    }
                    let placed = r.stamps.map_or(r.placed_seen, |s| s.0);
                    println!(
                        "{:>7} {:<6} {:>9} {:>8} {:>13.0} {:>9} {:>10.0} {:>10} {:>10} {:>13} {:>12}  {}",
                        n,
                        name,
                        r.submit.as_millis(),
                        placed,
                        r.rate(),
                        r.wall.as_millis(),
                        r.placed_seen as f64 / r.wall.as_secs_f64(),
                        if r.queue.is_empty() { "-".into() } else { percentile(&r.queue, 50.0).to_string() },
                        if r.queue.is_empty() { "-".into() } else { percentile(&r.queue, 99.0).to_string() },
                        gang_wait.map_or("-".into(), |v| v.to_string()),
                        gang_spread.map_or("-".into(), |v| v.to_string()),
                        status.join("; ")
                    );
                }
            }
        }
    }
    println!(
        "(ms; wall_rate = placed / wall, placements/s; queue = ready -> placed of the deep job's placed replicas;"
    );
    println!(
        " gang_wait_max = the slowest gang job's ready -> last member placed; gang_spread = widest spread of one gang's members' start times)"
    );
    println!();

    let rate = |d: &Deep| match d {
        Deep::Ran(r) => Some(r.rate()),
        Deep::Skipped(_) => None,
    };
    let mark = |d: &Deep| match d {
        Deep::Ran(r) if r.timed_out => " (timed out)",
        _ => "",
    };
    println!("{:<40} {:>22} {:>22}", "placements/s by queue depth", "plain", "mixed");
    for (n, plain, mixed) in &m.rows {
        println!(
            "{:<40} {:>22} {:>22}",
            format!("depth {n}"),
            format!("{}{}", fmt_opt(rate(plain), 0), mark(plain)),
            format!("{}{}", fmt_opt(rate(mixed), 0), mark(mixed))
        );
    }
    let (first, last) = (&m.rows[0], &m.rows[m.rows.len() - 1]);
    let ratio = |a: &Deep, b: &Deep| Some(rate(b)? / rate(a)?);
    println!(
        "{:<40} {:>22} {:>22}",
        format!("ratio {}k / {}k (target 0.80..1.20)", last.0 / 1000, first.0 / 1000),
        fmt_opt(ratio(&first.1, &last.1), 2),
        fmt_opt(ratio(&first.2, &last.2), 2)
    );
    let lowest = |f: fn(&(u32, Deep, Deep)) -> &Deep| {
        m.rows.iter().map(|r| rate(f(r))).collect::<Option<Vec<f64>>>().map(|v| v.into_iter().fold(f64::MAX, f64::min))
    };
    let (low_plain, low_mixed) = (lowest(|r| &r.1), lowest(|r| &r.2));
    println!("{:<40} {:>22} {:>22}", "lowest of the depths", fmt_opt(low_plain, 0), fmt_opt(low_mixed, 0));
    println!("{:<40} {:>22} {:>22}", "target at every depth", DEEP_TARGET as u64, DEEP_TARGET as u64);
    let met = |low: Option<f64>, ratio: Option<f64>| match (low, ratio) {
        (Some(l), Some(r)) => {
            if l >= DEEP_TARGET && (0.8..=1.2).contains(&r) {
                "met"
            } else {
                "not met"
            }
        }
        _ => "-",
    };
    println!(
        "{:<40} {:>22} {:>22}",
        "targets (>= 5,000/s everywhere, flat)",
        met(low_plain, ratio(&first.1, &last.1)),
        met(low_mixed, ratio(&first.2, &last.2))
    );
    println!("{:<40} {:>22}", "Slurm (documented jobs/s)", 500);
    println!("{:<40} {:>22}", "kube-scheduler (published pods/s)", 300);
    println!("deep-queue part: {:.0} s in all (cluster start, every run, cancels and fetches)", m.total.as_secs_f64());
    println!();
    print_engine("deep queue", "all deep-queue runs", &m.engine);
}

/// The coordinator engine's stats line, field by field.
fn print_engine(mode: &str, what: &str, engine: &Option<String>) {
    match engine {
        Some(line) => {
            println!("coordinator engine ({mode}), {what}:");
            for field in ["rounds", "commands", "records", "apply_ms", "schedule_ms", "commit_ms", "dispatch_ms"] {
                if let Some(v) = line.split_whitespace().find_map(|w| w.strip_prefix(&format!("{field}="))) {
                    println!("  {field:<12} {v}");
                }
            }
        }
        None => println!("(no engine stats line in the {mode} coordinator log)"),
    }
}

// ---- stores (issue 19) ---------------------------------------------------------------------

type Client = plexus_e2e::ha::Client;

/// Bursts and single jobs through one client: the placements per second of each burst (subtasks
/// ÷ the client's wall time from its submit call until it sees the job succeeded: every subtask
/// placed, persisted, run on a worker and its completion persisted), the submit→placed latencies
/// of the bursts' subtasks (ms, the coordinator's clock: job submitted → subtask placed), and the
/// client's submit → placed-seen of one-subtask jobs (µs).
struct StoreRun {
    /// Per burst size: (size, placements/s of each burst, submit→placed of every subtask, sorted).
    sizes: Vec<(usize, Vec<f64>, Vec<u64>)>,
    single: Vec<u64>,
}

const STORE_BURSTS: usize = 3;
/// Burst sizes: how the rate and latency grow with the depth of one job's queue.
const STORE_SIZES: [usize; 2] = [1_000, SUBTASKS as usize];
const STORE_SINGLES: usize = 100;

async fn burst(c: &mut Client, i: usize, size: usize) -> (f64, Vec<u64>) {
    let src = format!("name = \"store-{i}\"\n[[task]]\nname = \"noop\"\nkind = \"noop\"\nreplicas = {size}\ncpu = 0\n");
    let t0 = Instant::now();
    let job = c
        .submit_job(pb::SubmitJobRequest {
            source: src,
            format: String::new(),
            filename: "noop.toml".into(),
            after_jobs: vec![],
        })
        .await
        .expect("submitted")
        .into_inner()
        .job_id;
    loop {
        let s =
            c.get_job(pb::GetJobRequest { job_id: job.clone(), subtasks: false }).await.expect("status").into_inner();
        if s.state != pb::JobState::Running as i32 {
            assert_eq!(s.state, pb::JobState::Succeeded as i32, "benchmark job failed: {}", s.error);
            break;
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let wall = t0.elapsed();
    let full = c.get_job(pb::GetJobRequest { job_id: job, subtasks: true }).await.expect("status").into_inner();
    let mut placed: Vec<u64> = full.subtasks.iter().map(|s| s.assigned_at.saturating_sub(full.submitted_at)).collect();
    placed.sort_unstable();
    (full.subtasks.len() as f64 / wall.as_secs_f64(), placed)
}

async fn store_run(c: &mut Client) -> StoreRun {
    let _ = burst(c, 0, SUBTASKS as usize).await;
    let mut r = StoreRun { sizes: Vec::new(), single: Vec::new() };
    for size in STORE_SIZES {
        let (mut rates, mut queue) = (Vec::new(), Vec::new());
        for i in 1..=STORE_BURSTS {
            let (rate, q) = burst(c, i, size).await;
            rates.push(rate);
            queue.extend(q);
        }
        queue.sort_unstable();
        r.sizes.push((size, rates, queue));
    }
    for i in 0..STORE_SINGLES {
        let t0 = Instant::now();
        let src = format!("name = \"one-{i}\"\n[[task]]\nname = \"noop\"\nkind = \"noop\"\ncpu = 0\n");
        let job = c
            .submit_job(pb::SubmitJobRequest {
                source: src,
                format: String::new(),
                filename: "one.toml".into(),
                after_jobs: vec![],
            })
            .await
            .expect("submitted")
            .into_inner()
            .job_id;
        loop {
            let s = c
                .get_job(pb::GetJobRequest { job_id: job.clone(), subtasks: true })
                .await
                .expect("status")
                .into_inner();
            if s.subtasks.first().is_some_and(|st| st.assigned_at > 0) {
                break;
            }
            tokio::time::sleep(Duration::from_micros(200)).await;
        }
        r.single.push(t0.elapsed().as_micros() as u64);
    }
    r.single.sort_unstable();
    r
}

fn median(v: &[f64]) -> f64 {
    plexus_bench::median(v).unwrap_or(0.0)
}

/// The leader killed mid-job, `trials` times: seconds until a standby serves as the leader.
fn failovers(c: &mut plexus_e2e::ha::HaCluster, trials: usize) -> Vec<f64> {
    let mut out = Vec::new();
    for t in 0..trials {
        let src = format!(
            "name = \"busy-{t}\"\n[[task]]\nname = \"s\"\ncommand = [\"sleep\", \"0.05\"]\nreplicas = 400\ncpu = 0\n"
        );
        let job = c.try_submit("busy.toml", &src).expect("submitted");
        std::thread::sleep(Duration::from_millis(500));
        let (leader, _) = c.wait_leader(Duration::from_secs(30));
        c.kill_coordinator(leader);
        let t0 = Instant::now();
        let _ = c.wait_leader(Duration::from_secs(60));
        out.push(t0.elapsed().as_secs_f64());
        c.start_coordinator(leader);
        let end = c.wait_job(&job, Duration::from_secs(300));
        assert_eq!(end.state, pb::JobState::Succeeded as i32, "a job across a failover failed: {}", end.error);
    }
    out
}

/// The learned placer's experiences written per second to sled and to etcd (1 and 3 members).
fn experiences_table() {
    let dir = tempfile::tempdir().expect("a temporary directory");
    let (sled, _) = plexus_coordinator::store::SledStore::open(dir.path()).expect("a sled store");
    let mut rows = vec![(
        "sled",
        experience_rates(&plexus_coordinator::store::KvPolicyStore::new(sled.spaces().expect("spaces").policy)),
    )];
    for (name, members) in [("etcd, 1 member", 1usize), ("etcd, 3 members", 3)] {
        let Ok(cluster) = plexus_e2e::etcd::EtcdCluster::start(members) else { break };
        let url: plexus_coordinator::etcd::EtcdUrl = format!("{}/bench", cluster.url()).parse().expect("an etcd URL");
        let etcd = plexus_coordinator::etcd::Etcd::connect(&url).expect("connecting to etcd");
        rows.push((name, experience_rates(&plexus_coordinator::store::KvPolicyStore::new(etcd.spaces().policy))));
    }
    println!();
    println!(
        "learned-placer experiences persisted per second (2,000 one at a time, 4,000 in batches of 256; ~120 B each)"
    );
    println!("{:<34} {:>14} {:>14} {:>8}", "store", "one at a time", "batched", "ratio");
    for (name, (one, batched)) in rows {
        println!("{:<34} {:>14.0} {:>14.0} {:>8.1}", name, one, batched, batched / one.max(1e-9));
    }
}

/// Experiences the learned placer persists per second through `store`'s policy space: one
/// write each (as before batching) and batches of up to 256 (as the training thread writes now).
fn experience_rates(store: &dyn plexus_policy::PolicyStore) -> (f64, f64) {
    const N: u64 = 2_000;
    let bytes = vec![0x5au8; 120]; // about one encoded experience
    let t0 = Instant::now();
    for id in 0..N {
        store.put_experience(id, &bytes).expect("an experience written");
    }
    let one = N as f64 / t0.elapsed().as_secs_f64();
    let items: Vec<(u64, Vec<u8>)> = (N..3 * N).map(|id| (id, bytes.clone())).collect();
    let t0 = Instant::now();
    for batch in items.chunks(256) {
        store.put_experiences(batch).expect("experiences written");
    }
    let batched = items.len() as f64 / t0.elapsed().as_secs_f64();
    let ids: Vec<u64> = (0..3 * N).collect();
    store.remove_experiences(&ids).expect("experiences removed");
    (one, batched)
}

fn stores() {
    use plexus_e2e::ha::{HaCluster, HaConfig};
    eprintln!("stores: sled, then etcd with 1 and 3 members (3 coordinators each)");
    let sled = {
        let c = Cluster::start(ClusterConfig {
            workers: 4,
            log: "warn".into(),
            coordinator_args: vec!["--http".into(), "none".into()],
            ..Default::default()
        });
        let mut client = c.client_with(c.admin_token.as_deref());
        c.block_on(store_run(&mut client))
    };
    let mut rows = vec![("sled (1 coordinator)".to_string(), sled)];
    let mut failover = Vec::new();
    for members in [1usize, 3] {
        let config = HaConfig {
            etcd_members: members,
            coordinators: 3,
            workers: 4,
            lease_ttl_s: 2,
            log: "warn".into(),
            ..Default::default()
        };
        let mut c = match HaCluster::start(config) {
            Ok(c) => c,
            Err(why) => {
                println!("stores: etcd rows skipped: {why}");
                break;
            }
        };
        let mut client = c.leader_client();
        let r = c.block_on(store_run(&mut client));
        rows.push((format!("etcd, {members} member{} (3 coordinators)", if members == 1 { "" } else { "s" }), r));
        if members == 3 {
            for ttl in [2u64, 5] {
                drop(c);
                let config = HaConfig {
                    etcd_members: 3,
                    coordinators: 3,
                    workers: 4,
                    lease_ttl_s: ttl,
                    log: "warn".into(),
                    ..Default::default()
                };
                c = HaCluster::start(config).expect("etcd started a moment ago");
                failover.push((ttl, failovers(&mut c, 3)));
            }
        }
    }
    println!(
        "stores: bursts of 1,000 and {SUBTASKS} no-op subtasks ({STORE_BURSTS} of each, after a warm-up), then {STORE_SINGLES} one-subtask jobs; 4 workers; loopback; TLS and tokens"
    );
    println!(
        "{:<34} {:>7} {:>14} {:>14} {:>12} {:>12} {:>16} {:>16}",
        "store", "burst", "placements/s", "(min..max)", "placed_p50", "placed_p99", "submit->placed", "p99"
    );
    for (name, r) in &rows {
        for (size, rates, queue) in &r.sizes {
            let lo = rates.iter().copied().fold(f64::INFINITY, f64::min);
            let hi = rates.iter().copied().fold(0.0, f64::max);
            println!(
                "{:<34} {:>7} {:>14.0} {:>14} {:>10}ms {:>10}ms {:>14.2}ms {:>14.2}ms",
                name,
                size,
                median(rates),
                format!("{lo:.0}..{hi:.0}"),
                percentile(queue, 50.0),
                percentile(queue, 99.0),
                percentile(&r.single, 50.0) as f64 / 1000.0,
                percentile(&r.single, 99.0) as f64 / 1000.0
            );
        }
    }
    if let Some((_, sled)) = rows.first() {
        for (name, r) in rows.iter().skip(1) {
            for ((size, rates, _), (_, sled_rates, _)) in r.sizes.iter().zip(&sled.sizes) {
                println!(
                    "{:<42} {:>14.2}",
                    format!("ratio {} / sled, {size}", name.split(" (").next().unwrap_or(name)),
                    median(rates) / median(sled_rates).max(1e-9)
                );
            }
        }
    }
    println!("{:<34} {:>14}", "target on etcd", 5_000);
    println!(
        "(placements/s: subtasks ÷ the client's wall time from submit until it sees the job succeeded (placed, persisted, run, completion persisted); placed = job submitted → subtask placed+persisted within a burst, by the coordinator's clock; submit->placed = a client's submit call until it sees its one subtask placed, polling every 0.2 ms)"
    );
    experiences_table();
    println!();
    if !failover.is_empty() {
        println!(
            "failover: the leader killed with kill -9 while a 400-subtask job runs; seconds until a standby serves as the leader (polled every 0.1 s), 3 etcd members, 3 coordinators"
        );
        println!("{:<12} {:>10} {:>10} {:>10} {:>16}", "lease TTL", "min", "median", "max", "target (TTL+2s)");
        for (ttl, v) in &failover {
            let lo = v.iter().copied().fold(f64::INFINITY, f64::min);
            let hi = v.iter().copied().fold(0.0, f64::max);
            println!("{:<12} {:>10.2} {:>10.2} {:>10.2} {:>16}", format!("{ttl} s"), lo, median(v), hi, ttl + 2);
        }
        println!();
    }
}
