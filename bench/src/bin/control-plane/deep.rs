//! The deep-queue part (issue 14): placements per second with 1,000, 10,000 and 100,000
//! replicas waiting for 64 slots, plain and with priorities and gangs mixed in.

use std::time::{Duration, Instant};

use plexus_bench::percentile;
use plexus_e2e::{Cluster, ClusterConfig};
use plexus_proto::pb;

use crate::print_engine;

type Client = plexus_e2e::ha::Client;

/// Queue depths: replicas of one job of one-core no-op subtasks, all waiting for the cluster's slots.
const DEPTHS: [u32; 3] = [1_000, 10_000, 100_000];
const DEEP_WORKERS: usize = 4;
const DEEP_CPUS: u32 = 16;
/// The mixed run: this many priority-10 gang jobs beside the priority-0 job of N replicas.
const GANG_JOBS: u32 = 8;
const GANG_SIZE: u32 = 4;
/// Default limit on one depth, from the submit call to every job of the run ended.
pub(crate) const DEPTH_TIMEOUT: Duration = Duration::from_secs(90);
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
    pub(crate) subtasks: u64,
    /// The submit calls, all jobs.
    pub(crate) submit: Duration,
    /// Submit → every job ended (or the time limit).
    pub(crate) wall: Duration,
    timed_out: bool,
    /// A job that ended other than succeeded (before any cancel of ours).
    pub(crate) failed: Option<String>,
    /// Subtasks placed as the last summaries counted them (assigned, running or ended).
    placed_seen: u64,
    /// From the subtasks' own timestamps, when they could be fetched: placed subtasks, and
    /// last assigned_at − first ready_at (ms).
    stamps: Option<(u64, u64)>,
    /// Why the per-subtask list could not be fetched (the rate then is wall-clock).
    fetch_error: Option<String>,
    /// ready → assigned of the deep job's placed subtasks, ms, sorted.
    pub(crate) queue: Vec<u64>,
    /// Per gang job: ready → its last member assigned (ms), and the spread of its members'
    /// start times (ms); None when not every member was placed.
    pub(crate) gangs: Vec<Option<(u64, u64)>>,
}

impl DeepRun {
    /// Placements per second from the coordinator's timestamps, else from the wall clock.
    pub(crate) fn rate(&self) -> f64 {
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
    let ids = match submit_deep(c, &mut client, &sources) {
        Ok(ids) => ids,
        Err(Refused(why)) => return Deep::Skipped(why),
    };
    let submit = t0.elapsed();
    let (timed_out, failed, placed_seen) = wait_deep(c, &mut client, &ids, t0 + limit);
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
    fetch_stamps(c, &mut client, &ids, &mut run);
    Deep::Ran(run)
}

/// Why the coordinator refused a run's job, so the run is skipped.
struct Refused(String);

/// Submits every job of a run; a refused one cancels what went before and skips the run,
/// saying why.
fn submit_deep(c: &Cluster, client: &mut Client, sources: &[(String, String)]) -> Result<Vec<String>, Refused> {
    let mut ids: Vec<String> = Vec::new();
    for (name, src) in sources {
        let req = pb::SubmitJobRequest {
            source: src.clone(),
            format: String::new(),
            filename: name.clone(),
            after_jobs: Vec::new(),
            working_dir: Vec::new(),
            dry_run: false,
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
                return Err(Refused(why));
            }
        }
    }
    Ok(ids)
}

/// Polls the jobs' summaries until none runs or `deadline` passes: (timed out, the first job
/// that did not succeed, subtasks placed at the last poll).
fn wait_deep(c: &Cluster, client: &mut Client, ids: &[String], deadline: Instant) -> (bool, Option<String>, u64) {
    let (mut timed_out, mut failed) = (false, None);
    let mut placed_seen: u64;
    loop {
        let mut running = false;
        placed_seen = 0;
        for id in ids {
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
    (timed_out, failed, placed_seen)
}

/// Fetches every subtask of every job once and fills in `run`'s coordinator timestamps: the
/// placements, the deep job's queue times and each gang's wait and spread.
fn fetch_stamps(c: &Cluster, client: &mut Client, ids: &[String], run: &mut DeepRun) {
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
}

pub(crate) struct DeepMeasured {
    /// Per depth: (plain, mixed).
    rows: Vec<(u32, Deep, Deep)>,
    engine: Option<String>,
    total: Duration,
}

pub(crate) fn measure_deep(limit: Duration) -> DeepMeasured {
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

pub(crate) fn print_deep(m: &DeepMeasured, limit: Duration) {
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
                Deep::Ran(r) => print_deep_row(*n, name, r, limit),
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
    print_deep_rates(m);
    println!("deep-queue part: {:.0} s in all (cluster start, every run, cancels and fetches)", m.total.as_secs_f64());
    println!();
    print_engine("deep queue", "all deep-queue runs", &m.engine);
}

/// One run's row of the deep-queue table.
fn print_deep_row(n: u32, name: &str, r: &DeepRun, limit: Duration) {
    let mut status = Vec::new();
    if r.timed_out {
        status.push(format!("timed out after {} s ({} of {} placed)", limit.as_secs(), r.placed_seen, r.subtasks));
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

/// Placements per second by depth, plain and mixed, against the targets and published figures.
fn print_deep_rates(m: &DeepMeasured) {
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
}
