//! Control-plane benchmark: a job of 10,000 no-op subtasks across 4 real worker processes on
//! loopback, measured end to end (submitted → placed → persisted → sent → reported done →
//! persisted), plus dispatch latency percentiles and where the coordinator's engine spent its
//! time. Run with `make bench-control` (release build).
//!
//! The whole measurement runs twice, on a secure cluster (mutual TLS between workers and
//! coordinator, TLS and a bearer token on every client call: the default) and on one started
//! with `--insecure`, and the table shows both side by side with their ratio.
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
    let src = format!("name = \"noop-{i}\"\n[[task]]\nname = \"noop\"\nkind = \"noop\"\nreplicas = {SUBTASKS}\ncpu = 0\n");
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

fn measure(insecure: bool) -> Measured {
    let config = ClusterConfig { workers: 4, log: "warn,plexus_coordinator::engine=info".into(), insecure, ..Default::default() };
    eprintln!(
        "starting a coordinator and {} workers ({}; release binaries from {})",
        config.workers,
        if insecure { "--insecure" } else { "TLS and tokens" },
        plexus_e2e::bin_dir().display()
    );
    let mut c = Cluster::start(config);

    // One warm-up job so connections and allocators are warm, then the measured runs.
    let _ = one_run(&c, 0);
    let runs: Vec<Run> = (1..=RUNS).map(|i| one_run(&c, i)).collect();

    // Isolated subtasks: submit, wait until done, repeat.
    let mut single_total = Vec::new();
    let mut single_dispatch = Vec::new();
    for i in 0..SINGLES {
        let t0 = Instant::now();
        let job = c.submit("one.toml", &format!("name = \"one-{i}\"\n[[task]]\nname = \"noop\"\nkind = \"noop\"\ncpu = 0\n"));
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
    c.stop_coordinator();
    let engine = c.coordinator_log().lines().rev().find(|l| l.contains("engine stats")).map(str::to_string);
    Measured { runs, single_total, single_dispatch, engine }
}

fn median_rate(m: &Measured) -> f64 {
    let mut rates: Vec<f64> = m.runs.iter().map(|r| SUBTASKS as f64 / r.wall.as_secs_f64()).collect();
    rates.sort_by(|a, b| a.total_cmp(b));
    rates[rates.len() / 2]
}

fn main() {
    let modes = [("tls", measure(false)), ("insecure", measure(true))];

    println!("control plane: {SUBTASKS} no-op subtasks per job, 4 worker processes, 1 coordinator, loopback, 2-core machine");
    println!("tls = the default (mutual TLS worker<->coordinator, TLS + bearer token for the client); insecure = --insecure");
    println!();
    println!(
        "{:<9} {:>4} {:>9} {:>12} {:>11} {:>11} {:>13} {:>13} {:>11} {:>11}",
        "mode", "run", "wall_ms", "subtasks/s", "queue_p50", "queue_p99", "dispatch_p50", "dispatch_p99", "total_p50", "total_p99"
    );
    for (mode, m) in &modes {
        for (i, r) in m.runs.iter().enumerate() {
            println!(
                "{:<9} {:>4} {:>9} {:>12.0} {:>11} {:>11} {:>13} {:>13} {:>11} {:>11}",
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
    println!("(latencies in ms; queue = ready→placed+persisted, dispatch = placed→started on the worker, total = ready→done on the worker)");
    println!();
    println!("isolated subtasks ({SINGLES} one-subtask jobs, one at a time):");
    for (mode, m) in &modes {
        println!(
            "  {mode:<9} client submit -> job done seen: p50 {:.2} ms, p99 {:.2} ms (includes 0.2 ms polling); placed -> started: p50 {} ms, p99 {} ms",
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
    println!("{:<44} {:>12}", "target", 10_000);
    println!("{:<44} {:>12}", "Nomad C1M (published; 5 servers)", 3_750);
    println!("{:<44} {:>12}", "Slurm (documented jobs/s)", 500);
    println!("{:<44} {:>12}", "kube-scheduler (published pods/s)", 300);
    println!();

    // Where the coordinator's engine thread spent its time over all runs (warm-up included).
    for (mode, m) in &modes {
        match &m.engine {
            Some(line) => {
                println!("coordinator engine ({mode}), all jobs (warm-up included):");
                for field in ["rounds", "commands", "records", "apply_ms", "schedule_ms", "commit_ms", "dispatch_ms"] {
                    if let Some(v) = line.split_whitespace().find_map(|w| w.strip_prefix(&format!("{field}="))) {
                        println!("  {field:<12} {v}");
                    }
                }
            }
            None => println!("(no engine stats line in the {mode} coordinator log)"),
        }
    }
}
