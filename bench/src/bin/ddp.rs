//! `bench --bin ddp`: data-parallel training (issue 31), one table from one run. The anchor
//! script `../shared/anchors/ddp_train.py`, unchanged, three ways on loopback: torch's Gloo
//! backend (spawn mode, one process per rank), and the `plexus` backend as a Plexus job (a
//! `communicator = true` gang, one member per worker) with one data-plane rail per worker and
//! with two (127.0.0.2 and 127.0.0.3, striped). Per-step time (median, p90 over the steps after
//! the warm-up), steps per second relative to Gloo, and the first and last losses and the
//! parameter sum, which must agree with Gloo's within 1e-4 relative (the check column).
//!
//! With `--rig 2gbit,500mbit` (root, iproute2) the same three runs follow on the rail rig: `world`
//! hosts (host 0 the root namespace, the others namespaces `plx-h<h>`), Gloo one rank per host on
//! the fast rail alone (`--ifname plx<h>r0`), and Plexus with one worker per host — on rail 0
//! alone, and on both rails — whose coordinator listens on host 0's rail-0 address (so the
//! control traffic shares the fast rail; it is a few messages per step).
//!
//!   cargo run --release -p plexus-bench --bin ddp -- [--params-m 25] [--world 4] [--steps 30] [--rig 2gbit,500mbit]

use std::path::PathBuf;
use std::time::Duration;

use clap::Parser;
use plexus_bench::gloo;
use plexus_dataplane::rig::Rig;
use plexus_e2e::{Cluster, ClusterConfig};
use plexus_launch::WorkerLaunch;
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
    /// Also run on the rail rig with these rails (e.g. `2gbit,500mbit`); needs root.
    #[arg(long)]
    rig: Option<String>,
    /// Skip the loopback runs (with --rig: the rig's only).
    #[arg(long)]
    no_loopback: bool,
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
    train(a, &c)
}

/// The `plexus` backend on the rig: one worker per host on its first `rails` rails, the
/// coordinator on host 0's rail-0 address.
fn plexus_rig(a: &Args, rig: &Rig, rails: usize) -> Result<serde_json::Value, String> {
    let mut c = Cluster::start(ClusterConfig {
        workers: 0,
        cpus_per_worker: 1,
        worker_args: vec!["--task-user".into(), "worker".into()],
        listen_ip: rig.addr(0, 0),
        log: "warn".into(),
        ..Default::default()
    });
    for h in 0..rig.hosts() {
        let mut args: Vec<std::ffi::OsString> = vec!["--listen".into(), format!("{}:0", rig.addr(h, 0)).into()];
        for r in 0..rails {
            args.extend(["--rail".into(), rig.addr(h, r).to_string().into()]);
        }
        let prefix = match h {
            0 => vec![],
            _ => ["ip", "netns", "exec"].map(Into::into).into_iter().chain([format!("plx-h{h}").into()]).collect(),
        };
        c.launcher()
            .add_worker_with(&WorkerLaunch { prefix, args, coordinators: None })
            .map_err(|e| format!("worker on host {h}: {e}"))?;
    }
    c.wait_workers_alive(rig.hosts());
    train(a, &c)
}

/// Runs the anchor as a `communicator = true` gang of `world` members on `c`; what rank 0 wrote.
fn train(a: &Args, c: &Cluster) -> Result<serde_json::Value, String> {
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

/// The rig's three runs, or why there are none.
fn rig_runs(a: &Args, rails: &str) -> Vec<(String, Result<serde_json::Value, String>)> {
    if let Some(why) = plexus_dataplane::rig::unavailable() {
        return vec![("rig".into(), Err(why))];
    }
    let rig = match Rig::up(a.world, rails) {
        Ok(r) => r,
        Err(e) => return vec![("rig".into(), Err(e.to_string()))],
    };
    let job = gloo::Job { args: common(a), env: vec![], timeout: Duration::from_secs(1200) };
    vec![
        ("gloo (rig, rail 0)".into(), gloo::on_rig_with(&rig, &script(), &job)),
        ("plexus rig, rail 0".into(), plexus_rig(a, &rig, 1)),
        ("plexus rig, 2 rails".into(), plexus_rig(a, &rig, 2)),
    ]
}

/// One table: each run's step time and agreement with the first run (the baseline).
fn table(title: &str, runs: &[(String, Result<serde_json::Value, String>)]) {
    println!("{title}");
    println!(
        "{:<20} {:>12} {:>10} {:>9} {:>12} {:>12} {:>16}  check",
        "backend", "step ms p50", "p90", "vs gloo", "loss first", "loss last", "param_sum"
    );
    let base = runs[0].1.as_ref().ok().cloned();
    for (name, r) in runs {
        match r {
            Err(e) => println!("{name:<20} failed: {e}"),
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
                    "{name:<20} {p50:>12.1} {p90:>10.1} {speed:>8.2}x {:>12.6} {:>12.6} {:>16.6}  {check}",
                    f(v, "loss_first"),
                    f(v, "loss_last"),
                    f(v, "param_sum")
                );
            }
        }
    }
}

fn f(v: &serde_json::Value, k: &str) -> f64 {
    v[k].as_f64().unwrap_or(f64::NAN)
}

fn main() {
    let a = Args::parse();
    let dir = tempfile::tempdir().expect("a temp dir");
    let head = format!(
        "ddp_train.py --params-m {} --world {} --steps {} (after {} warm-up), batch {}",
        a.params_m, a.world, a.steps, a.warmup, a.batch
    );
    if !a.no_loopback {
        let runs: Vec<(String, Result<serde_json::Value, String>)> = vec![
            ("gloo (loopback)".into(), gloo_run(&a, dir.path())),
            ("plexus, 1 rail".into(), plexus_run(&a, &["127.0.0.1"])),
            ("plexus, 2 rails".into(), plexus_run(&a, &["127.0.0.2", "127.0.0.3"])),
        ];
        table(&format!("{head}, loopback"), &runs);
    }
    if let Some(rails) = &a.rig {
        let runs = rig_runs(&a, rails);
        table(&format!("{head}, rail rig {rails} (Gloo on rail 0 alone)"), &runs);
    }
}
