//! `fleet` (issue 35): hollow workers at cluster scale against one real coordinator.
//!
//! For each fleet size N (`--workers`, default 100 and 1,000) a fresh secure coordinator (the
//! release binary, sled store, mutual TLS, as `plexus up` starts it) and N hollow workers in this
//! one process, each speaking the real worker protocol over a connection of its own:
//! * **join** — a key pair and `Join` with the cluster's join token, as a new worker does
//!   (`plexus_worker::credentials::obtain`, its certificate kept in a directory of its own);
//! * **register** — all N at once (a cold start's storm): connect with its certificate,
//!   `Register`, open the `Assignments` stream;
//! * **heartbeats** at the interval the coordinator gives, each timed (round trip), for
//!   `--heartbeat-secs`, listing the attempts it is running;
//! * **work** — a job of `--subtasks` one-core no-op replicas: each assignment is answered with
//!   RUNNING and SUCCEEDED in one `ReportTasks` (no process, no data), so the figure is what the
//!   control plane sustains: placements per second from submit to the job's end;
//! * **lists** — `ListWorkers` through the API, timed: every worker in one response, one page
//!   of 500 (what `plexus workers` asks for at a time), and the summary alone
//!   (`plexus workers --summary`, and the dashboard's usage sampler).
//!
//! Printed per N: join and registration times, heartbeat p50/p99, placements/s, the
//! coordinator's RSS (and per worker), `ListWorkers` latency and size (whole, a page, the
//! summary), and how many workers the
//! coordinator reports not alive at the end (a worker falsely declared lost counts there).
//! Targets (issue 35, at 5,000 workers): all registered within 60 s, heartbeat p99 ≤ 200 ms,
//! ≥ 10,000 placements/s, RSS ≤ 2 GiB, `plexus workers` ≤ 1 s, none lost; PASS/FAIL per row
//! against them. Not built yet: the etcd store's column, a restart storm, HA takeover.
//!
//! `cargo run --release -p plexus-bench --bin fleet [-- --workers 100,1000,5000 --subtasks N
//! --heartbeat-secs S --cpus C]`. Needs the release `plexus-coordinator` beside it.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::Relaxed};
use std::time::{Duration, Instant};

use plexus_e2e::{Cluster, ClusterConfig};
use plexus_proto::WorkerId;
use plexus_proto::pb;
use plexus_proto::pb::worker_service_client::WorkerServiceClient;
use plexus_worker::credentials::{self, Credentials, TrustConfig};
use plexus_worker::layout::Layout;
use tokio::sync::{Mutex, Semaphore};
use tonic::transport::{Channel, Endpoint};

#[derive(Debug, clap::Parser)]
#[command(name = "fleet", about = "Hollow workers at cluster scale against one real coordinator")]
struct Args {
    /// Fleet sizes, comma-separated.
    #[arg(long, value_delimiter = ',', default_value = "100,1000")]
    workers: Vec<usize>,
    /// No-op one-core subtasks in the placement run.
    #[arg(long, default_value_t = 20_000)]
    subtasks: u32,
    /// How long heartbeats are timed.
    #[arg(long = "heartbeat-secs", default_value_t = 15)]
    heartbeat_secs: u64,
    /// Cores each hollow worker offers.
    #[arg(long, default_value_t = 2)]
    cpus: u32,
    /// Seconds the placement run may take before it is reported unfinished.
    #[arg(long = "job-timeout", default_value_t = 300)]
    job_timeout: u64,
    /// Joins and connections made at once (the coordinator signs each join's certificate).
    #[arg(long, default_value_t = 64)]
    concurrency: usize,
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
    join: Duration,
    register: Duration,
    hb_p50_ms: f64,
    hb_p99_ms: f64,
    heartbeats: usize,
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
}

/// One hollow worker: its identity, its connection, what it runs now.
struct Hollow {
    id: WorkerId,
    session: String,
    client: WorkerServiceClient<Channel>,
    running: Mutex<Vec<pb::AttemptRef>>,
    /// The heartbeat interval the coordinator gave at registration.
    every: Duration,
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Args = clap::Parser::parse();
    let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build()?;
    let mut rows = Vec::new();
    for &n in &args.workers {
        eprintln!("fleet: {n} hollow workers");
        rows.push(run(&rt, &args, n)?);
    }
    print(&args, &rows);
    Ok(())
}

fn run(rt: &tokio::runtime::Runtime, args: &Args, n: usize) -> Result<Row, Box<dyn std::error::Error>> {
    // Heartbeats at the product's interval; a worker is lost after 10 s silent.
    let c = Cluster::start(ClusterConfig {
        workers: 0,
        heartbeat_timeout_ms: 10_000,
        log: "warn".into(),
        coordinator_args: vec!["--http".into(), "none".into()],
        ..ClusterConfig::default()
    });
    // The coordinator's own footprint before any worker (libtorch's pages among it).
    let rss_before = c.coordinator_pid().and_then(rss_of);
    let dirs = tempfile::tempdir()?;
    let trust = TrustConfig {
        insecure: false,
        ca_file: Some(c.ca_file()),
        join_token: Some(std::fs::read_to_string(c.join_token_file())?.trim().to_string()),
    };
    let url = c.url.clone();

    // Join: every worker's certificate, `concurrency` at a time.
    let started = Instant::now();
    let creds = rt.block_on(join_all(&trust, &url, dirs.path(), n, args.concurrency))?;
    let join = started.elapsed();

    // Register: all at once, as after a cold start.
    let stop = Arc::new(AtomicBool::new(false));
    let rtts = Arc::new(std::sync::Mutex::new(Vec::<f64>::new()));
    let timing = Arc::new(AtomicBool::new(false));
    let placed = Arc::new(AtomicU64::new(0));
    let started = Instant::now();
    let fleet: Vec<Arc<Hollow>> = rt
        .block_on(async {
            let mut set = tokio::task::JoinSet::new();
            for (id, cred) in creds {
                let (url, cpus) = (url.clone(), args.cpus);
                set.spawn(async move { register(&url, id, &cred, cpus).await });
            }
            let mut out = Vec::with_capacity(n);
            while let Some(r) = set.join_next().await {
                out.push(r.expect("register task")?);
            }
            Ok::<_, Box<dyn std::error::Error + Send + Sync>>(out)
        })
        .map_err(|e| e.to_string())?;
    let register_time = started.elapsed();
    for h in &fleet {
        rt.spawn(heartbeats(h.clone(), stop.clone(), rtts.clone(), timing.clone()));
        rt.spawn(assignments(h.clone(), stop.clone(), placed.clone()));
    }

    // Heartbeats, timed.
    timing.store(true, Relaxed);
    std::thread::sleep(Duration::from_secs(args.heartbeat_secs));
    timing.store(false, Relaxed);
    let mut hb = std::mem::take(&mut *rtts.lock().expect("rtts"));
    hb.sort_by(f64::total_cmp);
    let pct = |p: f64| hb.get(((hb.len() as f64 * p) as usize).min(hb.len().saturating_sub(1))).copied().unwrap_or(0.0);

    // Work: one job of no-op replicas.
    let wall = place_all(&c, args, n, &placed)?;

    // Lists, and what the coordinator holds.
    let mut client = c.client_with(c.admin_token.as_deref());
    let started = Instant::now();
    let list = c.block_on(client.list_workers(pb::ListWorkersRequest::default()))?.into_inner();
    let list_time = started.elapsed();
    // What `plexus workers` asks for (a page of 500) and `plexus workers --summary`.
    let started = Instant::now();
    c.block_on(client.list_workers(pb::ListWorkersRequest { page_size: 500, ..Default::default() }))?;
    let page_time = started.elapsed();
    let started = Instant::now();
    c.block_on(client.list_workers(pb::ListWorkersRequest { summary_only: true, ..Default::default() }))?;
    let summary_time = started.elapsed();
    let not_alive = list.workers.iter().filter(|w| !w.alive).count();
    let rss = c.coordinator_pid().and_then(rss_of);
    stop.store(true, Relaxed);
    drop(fleet);
    Ok(Row {
        n,
        join,
        register: register_time,
        hb_p50_ms: pct(0.50),
        hb_p99_ms: pct(0.99),
        heartbeats: hb.len(),
        placements_per_s: f64::from(args.subtasks) / wall.as_secs_f64(),
        placed: placed.load(Relaxed) as u32,
        rss,
        rss_before,
        list: list_time,
        list_bytes: prost::Message::encoded_len(&list),
        page: page_time,
        summary: summary_time,
        not_alive: not_alive + n.saturating_sub(list.workers.len()),
    })
}

/// Every worker's certificate (`Join`, as a new worker does), `concurrency` at a time.
async fn join_all(
    trust: &TrustConfig,
    url: &str,
    dirs: &std::path::Path,
    n: usize,
    concurrency: usize,
) -> Result<Vec<(WorkerId, Credentials)>, plexus_worker::Error> {
    let gate = Arc::new(Semaphore::new(concurrency));
    let mut set = tokio::task::JoinSet::new();
    for i in 0..n {
        let (gate, trust, url, dir) = (gate.clone(), trust.clone(), url.to_string(), dirs.join(format!("w{i}")));
        set.spawn(async move {
            let _permit = gate.acquire_owned().await.expect("open semaphore");
            let id = WorkerId::random();
            let c = credentials::obtain(&trust, &Layout::new(dir), id, &url).await?;
            Ok::<_, plexus_worker::Error>((id, c.expect("a secure cluster gives credentials")))
        });
    }
    let mut out = Vec::with_capacity(n);
    while let Some(r) = set.join_next().await {
        out.push(r.expect("join task")?);
    }
    Ok(out)
}

/// Submits a job of `--subtasks` no-op replicas and waits for its end: submit to end.
fn place_all(c: &Cluster, args: &Args, n: usize, placed: &AtomicU64) -> Result<Duration, Box<dyn std::error::Error>> {
    let job = format!(
        "name = \"fleet-{n}\"\n[[task]]\nname = \"noop\"\nkind = \"noop\"\nreplicas = {}\ncpu = 1\n",
        args.subtasks
    );
    let started = Instant::now();
    let id = c.submit("fleet.toml", &job);
    let deadline = started + Duration::from_secs(args.job_timeout);
    let end = loop {
        let j = c.job(&id);
        if let Some(j) = j.as_ref().filter(|j| j.state != pb::JobState::Running as i32) {
            break j.clone();
        }
        if Instant::now() > deadline {
            let done = j.as_ref().map_or(0, |j| j.groups.iter().map(|g| g.succeeded).sum::<u32>());
            return Err(format!(
                "the fleet job did not end within {} s: {done} of {} subtasks succeeded, {} assignments answered",
                args.job_timeout,
                args.subtasks,
                placed.load(Relaxed)
            )
            .into());
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    if end.state != pb::JobState::Succeeded as i32 {
        return Err(format!("the fleet job ended {:?}: {}", end.state, end.error).into());
    }
    Ok(started.elapsed())
}

/// Connects as worker `id` with its certificate and registers a node of `cpus` cores.
async fn register(
    url: &str,
    id: WorkerId,
    cred: &Credentials,
    cpus: u32,
) -> Result<Arc<Hollow>, Box<dyn std::error::Error + Send + Sync>> {
    let channel = Endpoint::from_shared(url.to_string())?.tls_config(cred.coordinator_tls())?.connect().await?;
    let mut client = WorkerServiceClient::new(channel);
    let session = WorkerId::random().to_string();
    let r = client
        .register(pb::RegisterRequest {
            worker_id: id.to_string(),
            session: session.clone(),
            peer_addr: "http://127.0.0.1:9".into(),
            capacity: Some(pb::NodeCapacity {
                cpus,
                memory: 8 << 30,
                cache_bytes: 1 << 30,
                hostname: format!("hollow-{id}"),
                isolation: "none".into(),
                ..Default::default()
            }),
            state: Some(pb::NodeState { memory_free: 8 << 30, ..Default::default() }),
            known: vec![],
        })
        .await?
        .into_inner();
    let every = Duration::from_millis(r.heartbeat_interval_ms.max(1));
    Ok(Arc::new(Hollow { id, session, client, running: Mutex::new(Vec::new()), every }))
}

/// Heartbeats at the interval the coordinator gave until `stop`, timing each while `timing`.
async fn heartbeats(
    h: Arc<Hollow>,
    stop: Arc<AtomicBool>,
    rtts: Arc<std::sync::Mutex<Vec<f64>>>,
    timing: Arc<AtomicBool>,
) {
    // Spread over the interval, as workers that started at different times are.
    tokio::time::sleep(h.every * u32::from(h.id.as_bytes()[15]) / 256).await;
    let mut tick = tokio::time::interval(h.every);
    while !stop.load(Relaxed) {
        tick.tick().await;
        let running = h.running.lock().await.clone();
        let mut client = h.client.clone();
        let t = Instant::now();
        let r = client
            .heartbeat(pb::HeartbeatRequest {
                worker_id: h.id.to_string(),
                session: h.session.clone(),
                state: Some(pb::NodeState { memory_free: 8 << 30, running, ..Default::default() }),
            })
            .await;
        if r.is_ok() && timing.load(Relaxed) {
            rtts.lock().expect("rtts").push(t.elapsed().as_secs_f64() * 1e3);
        }
    }
}

/// Answers every assignment with RUNNING and SUCCEEDED in one report, until `stop`.
async fn assignments(h: Arc<Hollow>, stop: Arc<AtomicBool>, placed: Arc<AtomicU64>) {
    let mut client = h.client.clone();
    let req = pb::AssignmentsRequest { worker_id: h.id.to_string(), session: h.session.clone() };
    let Ok(stream) = client.assignments(req).await else { return };
    let mut stream = stream.into_inner();
    while !stop.load(Relaxed) {
        let Ok(Some(batch)) = stream.message().await else { return };
        if batch.assign.is_empty() {
            continue;
        }
        let now = plexus_proto::now_ms();
        let mut reports = Vec::with_capacity(batch.assign.len() * 2);
        for a in &batch.assign {
            let attempt = a.attempt.clone();
            for state in [pb::SubtaskState::Running, pb::SubtaskState::Succeeded] {
                reports.push(pb::TaskReport {
                    attempt: attempt.clone(),
                    state: state as i32,
                    started_at: now,
                    finished_at: if state == pb::SubtaskState::Succeeded { now } else { 0 },
                    ..Default::default()
                });
            }
        }
        placed.fetch_add(batch.assign.len() as u64, Relaxed);
        let r = client
            .report_tasks(pb::ReportTasksRequest { worker_id: h.id.to_string(), session: h.session.clone(), reports })
            .await;
        if r.is_err() {
            return;
        }
    }
}

/// A process's resident set, bytes.
fn rss_of(pid: u32) -> Option<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let kb: u64 = status.lines().find_map(|l| l.strip_prefix("VmRSS:"))?.split_whitespace().next()?.parse().ok()?;
    Some(kb * 1024)
}

fn print(args: &Args, rows: &[Row]) {
    println!(
        "\nfleet: hollow workers of {} cores each over mutual TLS against one coordinator (sled store), this machine; \
         a job of {} no-op one-core subtasks",
        args.cpus, args.subtasks
    );
    println!(
        "{:>6} {:>8} {:>9} {:>8} {:>8} {:>7} {:>11} {:>9} {:>10} {:>9} {:>10} {:>8} {:>8} {:>9}",
        "N",
        "join s",
        "register",
        "hb p50",
        "hb p99",
        "beats",
        "placed/s",
        "RSS MiB",
        "+KiB/wkr",
        "list ms",
        "list KiB",
        "page ms",
        "summ ms",
        "not alive"
    );
    for r in rows {
        let rss = r.rss.map_or("-".into(), |b| format!("{:.0}", b as f64 / f64::from(1 << 20)));
        // What the workers added, per worker (the coordinator's own pages, libtorch's among
        // them, are there before the first one).
        let per = match (r.rss, r.rss_before) {
            (Some(a), Some(b)) => format!("{:.0}", a.saturating_sub(b) as f64 / 1024.0 / r.n as f64),
            _ => "-".into(),
        };
        println!(
            "{:>6} {:>8.1} {:>8.1}s {:>6.1}ms {:>6.1}ms {:>7} {:>11.0} {:>9} {:>10} {:>9.1} {:>10.1} {:>8.1} {:>8.2} {:>9}",
            r.n,
            r.join.as_secs_f64(),
            r.register.as_secs_f64(),
            r.hb_p50_ms,
            r.hb_p99_ms,
            r.heartbeats,
            r.placements_per_s,
            rss,
            per,
            r.list.as_secs_f64() * 1e3,
            r.list_bytes as f64 / 1024.0,
            r.page.as_secs_f64() * 1e3,
            r.summary.as_secs_f64() * 1e3,
            r.not_alive
        );
    }
    println!("\ntargets (issue 35, meant at 5,000 workers; judged here at each size measured):");
    for r in rows {
        let v = |ok: bool| if ok { "PASS" } else { "FAIL" };
        println!(
            "  N={:<5} registered ≤ 60 s {}; heartbeat p99 ≤ 200 ms {}; ≥ 10,000 placements/s {}; RSS ≤ 2 GiB {}; \
             ListWorkers ≤ 1 s {}; none lost {}  ({} assignments answered)",
            r.n,
            v(r.register <= REGISTER_TARGET),
            v(r.hb_p99_ms <= HEARTBEAT_P99_TARGET_MS && r.heartbeats > 0),
            v(r.placements_per_s >= PLACEMENTS_TARGET),
            v(r.rss.is_some_and(|b| b <= RSS_TARGET)),
            v(r.list <= LIST_TARGET),
            v(r.not_alive == 0),
            r.placed
        );
    }
}
