//! `bench --bin call-latency`: the per-call latency of `torch.distributed.all_reduce` from Python
//! (issue 31's "overhead per call: a 4 KiB allreduce from Python within 2x Gloo's latency"), one
//! table from one run. The same script (`bench/scripts/allreduce_latency.py`) three ways on
//! loopback: torch's Gloo backend (spawn mode, one process per rank), and the `plexus` backend
//! as a Plexus job (a `communicator = true` gang, one member per worker, one rail) with its
//! default shared-memory payloads and with payloads on the socket
//! (`PLEXUS_COLLECTIVE_SHARED_MEMORY=0`). Per size: the median and p90 over the timed calls of
//! the slowest rank's time, and the plexus median over Gloo's, PASS when within 2x.
//!
//!   cargo run --release -p plexus-bench --bin call-latency -- [--world 4] [--iters 200]

use std::path::PathBuf;
use std::time::Duration;

use clap::Parser;
use plexus_bench::gloo;
use plexus_e2e::{Cluster, ClusterConfig};
use plexus_proto::pb;

/// The target: plexus's median per call within this many times Gloo's.
const WITHIN: f64 = 2.0;

#[derive(Parser)]
struct Args {
    #[arg(long, default_value_t = 4)]
    world: usize,
    /// Bytes of float32 per allreduce, comma-separated.
    #[arg(long, default_value = "4096,65536,1048576")]
    sizes: String,
    #[arg(long, default_value_t = 20)]
    warmup: u32,
    #[arg(long, default_value_t = 200)]
    iters: u32,
}

fn script() -> String {
    concat!(env!("CARGO_MANIFEST_DIR"), "/scripts/allreduce_latency.py").to_string()
}

fn common(a: &Args) -> Vec<String> {
    ["--sizes", &a.sizes, "--warmup", &a.warmup.to_string(), "--iters", &a.iters.to_string()].map(String::from).to_vec()
}

fn read(p: &std::path::Path) -> Result<serde_json::Value, String> {
    let text = std::fs::read_to_string(p).map_err(|e| format!("{}: {e}", p.display()))?;
    serde_json::from_str(&text).map_err(|e| format!("{}: {e}", p.display()))
}

/// Gloo in spawn mode on loopback.
fn gloo_run(a: &Args, dir: &std::path::Path) -> Result<serde_json::Value, String> {
    let json = dir.join("gloo.json");
    let out = std::process::Command::new(gloo::python())
        .arg(script())
        .args(["--spawn", &a.world.to_string(), "--json"])
        .arg(&json)
        .args(common(a))
        .env("PYTHONWARNINGS", "ignore")
        .output()
        .map_err(|e| format!("cannot start {}: {e}", gloo::python()))?;
    if !out.status.success() {
        return Err(format!("gloo: {}", String::from_utf8_lossy(&out.stderr)));
    }
    read(&json)
}

/// The `plexus` backend as a Plexus job of `world` members on one loopback rail each.
fn plexus_run(a: &Args, shared_memory: bool) -> Result<serde_json::Value, String> {
    let c = Cluster::start(ClusterConfig {
        workers: a.world,
        cpus_per_worker: 1,
        worker_args: ["--task-user", "worker", "--rail", "127.0.0.1"].map(String::from).to_vec(),
        log: "warn".into(),
        ..Default::default()
    });
    let json = c.task_dir("out").join("plexus.json");
    let repo = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..");
    let mut argv: Vec<String> = vec![gloo::python(), script()];
    argv.extend(
        ["--rank", "env:PLEXUS_RANK", "--world", "env:PLEXUS_REPLICAS", "--backend", "plexus"].map(String::from),
    );
    argv.extend(["--import".into(), "plexus.distributed".into(), "--json".into(), json.display().to_string()]);
    argv.extend(common(a));
    // PLEXUS_* keys are the worker's to set in a job's `env`: the switch goes through env(1).
    let switch = format!("PLEXUS_COLLECTIVE_SHARED_MEMORY={}", u8::from(shared_memory));
    argv.splice(0..0, ["env".to_string(), switch]);
    let job = format!(
        "name = \"latency\"\n[[task]]\nname = \"calls\"\nreplicas = {}\ncommunicator = true\ncpu = 1\n\
         timeout = \"1200s\"\ncommand = [{}]\nenv = {{ PYTHONPATH = {:?}, PYTHONWARNINGS = \"ignore\" }}\n",
        a.world,
        argv.iter().map(|s| format!("{s:?}")).collect::<Vec<_>>().join(", "),
        repo.join("python").display().to_string(),
    );
    let id = c.submit("latency.toml", &job);
    let j = c.wait_job(&id, Duration::from_secs(1200));
    if j.state != pb::JobState::Succeeded as i32 {
        let logs = c.plexus(&["logs", &id, "calls"]);
        return Err(format!("plexus job: {}: {}", j.error, String::from_utf8_lossy(&logs.stdout)));
    }
    read(&json)
}

/// (median, p90) in µs for `bytes` in a run's output.
fn at(v: &serde_json::Value, bytes: u64) -> Option<(f64, f64)> {
    let row = v["sizes"].as_array()?.iter().find(|r| r["bytes"].as_u64() == Some(bytes))?;
    Some((row["us_median"].as_f64()?, row["us_p90"].as_f64()?))
}

fn main() {
    let a = Args::parse();
    let dir = tempfile::tempdir().expect("a temp dir");
    let gloo = gloo_run(&a, dir.path());
    let runs = [("plexus (shared memory)", plexus_run(&a, true)), ("plexus (socket copy)", plexus_run(&a, false))];
    println!(
        "all_reduce(float32) from Python, world {}, {} timed calls after {} warm-up, loopback; \
         median/p90 of the slowest rank per call",
        a.world, a.iters, a.warmup
    );
    if let Err(e) = &gloo {
        println!("gloo failed: {e}");
    }
    for (name, r) in &runs {
        if let Err(e) = r {
            println!("{name} failed: {e}");
        }
    }
    println!(
        "{:>9} {:>14} {:>14} | {:<24} {:>14} {:>14} {:>8}  target",
        "bytes", "gloo us p50", "p90", "backend", "us p50", "p90", "vs gloo"
    );
    for bytes in a.sizes.split(',').filter_map(|s| s.trim().parse::<u64>().ok()) {
        let g = gloo.as_ref().ok().and_then(|v| at(v, bytes));
        let (gp50, gp90) = g.unwrap_or((f64::NAN, f64::NAN));
        for (name, r) in &runs {
            let Some((p50, p90)) = r.as_ref().ok().and_then(|v| at(v, bytes)) else { continue };
            let ratio = p50 / gp50;
            let verdict = if ratio.is_nan() {
                "-"
            } else if ratio <= WITHIN {
                "PASS (<= 2x)"
            } else {
                "FAIL (> 2x)"
            };
            println!(
                "{bytes:>9} {gp50:>14.1} {gp90:>14.1} | {name:<24} {p50:>14.1} {p90:>14.1} {ratio:>7.2}x  {verdict}"
            );
        }
    }
}
