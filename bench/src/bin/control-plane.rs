//! Control-plane benchmark: a job of 10,000 no-op subtasks across 4 real worker processes on
//! loopback, measured end to end (submitted → placed → persisted → sent → reported done →
//! persisted), plus dispatch latency percentiles and where the coordinator's engine spent its
//! time. Run with `make bench-control` (release build).
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

fn main() {
    let config = ClusterConfig { workers: 4, log: "warn,plexus_coordinator::engine=info".into(), ..Default::default() };
    eprintln!("starting a coordinator and {} workers (release binaries from {})", config.workers, plexus_e2e::bin_dir().display());
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

    println!("control plane: {SUBTASKS} no-op subtasks per job, 4 worker processes, 1 coordinator, loopback, 2-core machine");
    println!();
    println!("{:>4} {:>9} {:>12} {:>11} {:>11} {:>13} {:>13} {:>11} {:>11}", "run", "wall_ms", "subtasks/s", "queue_p50", "queue_p99", "dispatch_p50", "dispatch_p99", "total_p50", "total_p99");
    let mut rates = Vec::new();
    for (i, r) in runs.iter().enumerate() {
        let rate = SUBTASKS as f64 / r.wall.as_secs_f64();
        rates.push(rate);
        println!(
            "{:>4} {:>9} {:>12.0} {:>11} {:>11} {:>13} {:>13} {:>11} {:>11}",
            i + 1,
            r.wall.as_millis(),
            rate,
            percentile(&r.queue, 50.0),
            percentile(&r.queue, 99.0),
            percentile(&r.dispatch, 50.0),
            percentile(&r.dispatch, 99.0),
            percentile(&r.total, 50.0),
            percentile(&r.total, 99.0),
        );
    }
    rates.sort_by(|a, b| a.total_cmp(b));
    let median = rates[rates.len() / 2];
    println!("(latencies in ms; queue = ready→placed+persisted, dispatch = placed→started on the worker, total = ready→done on the worker)");
    println!();
    println!("isolated subtasks ({SINGLES} one-subtask jobs, one at a time):");
    println!(
        "  client submit -> job done seen: p50 {:.2} ms, p99 {:.2} ms (includes the client's 0.2 ms polling)",
        percentile(&single_total, 50.0) as f64 / 1000.0,
        percentile(&single_total, 99.0) as f64 / 1000.0
    );
    println!("  placed -> started on the worker: p50 {} ms, p99 {} ms", percentile(&single_dispatch, 50.0), percentile(&single_dispatch, 99.0));
    println!();
    println!("{:<44} {:>12}", "system", "placements/s");
    println!("{:<44} {:>12.0}", "plexus (this run, median)", median);
    println!("{:<44} {:>12}", "target", 10_000);
    println!("{:<44} {:>12}", "Nomad C1M (published; 5 servers)", 3_750);
    println!("{:<44} {:>12}", "Slurm (documented jobs/s)", 500);
    println!("{:<44} {:>12}", "kube-scheduler (published pods/s)", 300);
    println!();

    // Where the coordinator's engine thread spent its time over all runs (warm-up included).
    let log = c.coordinator_log();
    match log.lines().rev().find(|l| l.contains("engine stats")) {
        Some(line) => {
            println!("coordinator engine, all jobs (warm-up included):");
            for field in ["rounds", "commands", "records", "apply_ms", "schedule_ms", "commit_ms", "dispatch_ms"] {
                if let Some(v) = line.split_whitespace().find_map(|w| w.strip_prefix(&format!("{field}="))) {
                    println!("  {field:<12} {v}");
                }
            }
        }
        None => println!("(no engine stats line in the coordinator log)"),
    }
}
