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
//!
//! # Layout
//! * `args`: the command line.
//! * `stream`: the seeded job stream, the same for every placer.
//! * `cluster`: one placer's cluster (rig, coordinator, workers in their cgroups) and its teardown.
//! * `run`: one placer's run over the stream, and what each job and worker did.
//! * `report`: the tables printed at the end.

mod args;
mod cluster;
mod report;
mod run;
mod stream;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use args::parse_opts;
use cluster::build_rig;
use report::report;
use run::run_placer;
use stream::{stream, worker_ids};

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
