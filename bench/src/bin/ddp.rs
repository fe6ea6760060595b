//! `bench --bin ddp`: data-parallel training (issue 31), one table from one run. The anchor
//! script `../shared/anchors/ddp_train.py`, unchanged, three ways on loopback: torch's Gloo
//! backend (spawn mode, one process per rank), and the `plexus` backend as a Plexus job (a
//! `communicator = true` gang, one member per worker) with one data-plane rail per worker and
//! with two (127.0.0.2 and 127.0.0.3, striped). Per-step time (median, p90 over the steps after
//! the warm-up), steps per second relative to Gloo, and the first and last losses and the
//! parameter sum, which must agree with Gloo's within 1e-4 relative (the check column).
//!
//! The rail rig's runs (Gloo on the fast rail of `2gbit,500mbit` namespaces against Plexus on one
//! and both rails) are not in this binary yet.
//!
//!   cargo run --release -p plexus-bench --bin ddp -- [--params-m 25] [--world 4] [--steps 30]

use std::path::PathBuf;
use std::time::Duration;

use clap::Parser;
use plexus_bench::gloo;
use plexus_e2e::{Cluster, ClusterConfig};
use plexus_proto::pb;

#[derive(Parser)]
struct Args {
    /// Millions of f32 parameters of the MLP (its gradient is allreduced every step).
    #[arg(long, default_value_t = 25.0)]
    params_m: f64,
    /// Ranks (Gloo processes; Plexus workers, one member each).
    #[arg(long, default_value_t = 4)]
    world: usize,
    #[arg(long, default_value_t = 30)]
    steps: u32,
    #[arg(long, default_value_t = 3)]
    warmup: u32,
    /// Global batch, split over the ranks.
    #[arg(long, default_value_t = 64)]
    batch: u32,
}

/// The anchor script: `$PLEXUS_DDP_ANCHOR`, else `shared/anchors/ddp_train.py` beside the
/// repository (or beside the folder of its worktrees).
fn script() -> String {
    if let Ok(p) = std::env::var("PLEXUS_DDP_ANCHOR") {
        return p;
    }
    let here = concat!(env!("CARGO_MANIFEST_DIR"), "/..");
    ["../shared", "../../shared"]
        .iter()
        .map(|d| format!("{here}/{d}/anchors/ddp_train.py"))
        .find(|p| std::path::Path::new(p).exists())
        .unwrap_or_else(|| format!("{here}/../shared/anchors/ddp_train.py"))
}

fn common(a: &Args) -> Vec<String> {
    let n = |v: &dyn ToString| v.to_string();
    vec![
        "--params-m".into(),
        n(&a.params_m),
        "--steps".into(),
        n(&a.steps),
        "--warmup".into(),
        n(&a.warmup),
        "--batch".into(),
        n(&a.batch),
    ]
}

/// Gloo in spawn mode on loopback: what rank 0 wrote to `--json`.
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

fn read(p: &std::path::Path) -> Result<serde_json::Value, String> {
    let text = std::fs::read_to_string(p).map_err(|e| format!("{}: {e}", p.display()))?;
    serde_json::from_str(&text).map_err(|e| format!("{}: {e}", p.display()))
}

/// The `plexus` backend as a Plexus job on a local cluster of `world` workers with `rails`.
fn plexus_run(a: &Args, rails: &[&str]) -> Result<serde_json::Value, String> {
    let mut worker_args: Vec<String> = vec!["--task-user".into(), "worker".into()];
    for r in rails {
        worker_args.extend(["--rail".into(), (*r).to_string()]);
    }
    let c = Cluster::start(ClusterConfig {
        workers: a.world,
        cpus_per_worker: 1,
        worker_args,
        log: "warn".into(),
        ..Default::default()
    });
    let out = c.task_dir("out");
    let json = out.join("plexus.json");
    let repo = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..");
    let mut argv: Vec<String> = vec![gloo::python(), script()];
    argv.extend(
        ["--rank", "env:PLEXUS_RANK", "--world", "env:PLEXUS_REPLICAS", "--backend", "plexus"].map(String::from),
    );
    argv.extend(["--import".into(), "plexus.distributed".into(), "--json".into(), json.display().to_string()]);
    argv.extend(common(a));
    let job = format!(
        "name = \"ddp\"\n[[task]]\nname = \"train\"\nreplicas = {}\ncommunicator = true\ncpu = 1\ntimeout = \"1200s\"\n\
         command = [{}]\nenv = {{ PYTHONPATH = {:?}, PYTHONWARNINGS = \"ignore\" }}\n",
        a.world,
        argv.iter().map(|s| format!("{s:?}")).collect::<Vec<_>>().join(", "),
        repo.join("python").display().to_string(),
    );
    let id = c.submit("ddp.toml", &job);
    let j = c.wait_job(&id, Duration::from_secs(1200));
    if j.state != pb::JobState::Succeeded as i32 {
        let logs = c.plexus(&["logs", &id, "train"]);
        return Err(format!("plexus job: {}: {}", j.error, String::from_utf8_lossy(&logs.stdout)));
    }
    read(&json)
}

fn f(v: &serde_json::Value, k: &str) -> f64 {
    v[k].as_f64().unwrap_or(f64::NAN)
}

fn main() {
    let a = Args::parse();
    let dir = tempfile::tempdir().expect("a temp dir");
    let runs: Vec<(&str, Result<serde_json::Value, String>)> = vec![
        ("gloo (loopback)", gloo_run(&a, dir.path())),
        ("plexus, 1 rail", plexus_run(&a, &["127.0.0.1"])),
        ("plexus, 2 rails", plexus_run(&a, &["127.0.0.2", "127.0.0.3"])),
    ];
    println!(
        "ddp_train.py --params-m {} --world {} --steps {} (after {} warm-up), batch {}, loopback",
        a.params_m, a.world, a.steps, a.warmup, a.batch
    );
    println!(
        "{:<18} {:>12} {:>10} {:>9} {:>12} {:>12} {:>16}  check",
        "backend", "step ms p50", "p90", "vs gloo", "loss first", "loss last", "param_sum"
    );
    let base = runs[0].1.as_ref().ok().cloned();
    for (name, r) in &runs {
        match r {
            Err(e) => println!("{name:<18} failed: {e}"),
            Ok(v) => {
                let (p50, p90) = (f(v, "step_ms_median"), f(v, "step_ms_p90"));
                let (speed, check) = match &base {
                    Some(b) => {
                        let rel = |k: &str| (f(v, k) - f(b, k)).abs() / f(b, k).abs().max(1e-12);
                        let worst = ["loss_first", "loss_last", "param_sum"].map(rel).into_iter().fold(0.0, f64::max);
                        (
                            f(b, "step_ms_median") / p50,
                            if worst <= 1e-4 { format!("ok ({worst:.1e})") } else { format!("DIFFERS ({worst:.1e})") },
                        )
                    }
                    None => (f64::NAN, "no gloo run".into()),
                };
                println!(
                    "{name:<18} {p50:>12.1} {p90:>10.1} {speed:>8.2}x {:>12.6} {:>12.6} {:>16.6}  {check}",
                    f(v, "loss_first"),
                    f(v, "loss_last"),
                    f(v, "param_sum")
                );
            }
        }
    }
}
