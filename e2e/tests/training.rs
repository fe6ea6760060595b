//! End-to-end: collectives from inside tasks (issue 31), on real worker processes. A
//! `communicator = true` gang's members reach their worker's collective endpoint and run
//! `torch.distributed` with the `plexus` backend: DDP trains and ends with Gloo's parameters;
//! a task outside a gang gets a clear error; a killed member fails the other's pending operation
//! at once, naming it; training that checkpoints resumes after a member is killed mid-training.
//!
//! The torch tests need the venv `make torch` installs (`.plexus/libtorch` points into it); they
//! are skipped, saying so, without it (a failure under `PLEXUS_REQUIRE_ALL=1`). Tasks run as the
//! worker's user (`--task-user worker`): the venv lives under `/root`, which a task uid cannot
//! enter.

use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use plexus_e2e::{Cluster, ClusterConfig};
use plexus_proto::pb;

const SUCCEEDED: i32 = pb::JobState::Succeeded as i32;
const FAILED: i32 = pb::JobState::Failed as i32;

/// The repository (the e2e crate's parent).
fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).parent().expect("the repository").to_path_buf()
}

/// The python of the torch venv, if installed.
fn torch_python() -> Option<PathBuf> {
    let venv = std::fs::canonicalize(repo().join(".plexus/libtorch")).ok()?;
    let py = venv.ancestors().nth(4)?.join("bin/python");
    py.exists().then_some(py)
}

/// The anchor script DDP runs: `$PLEXUS_DDP_ANCHOR`, else `shared/anchors/ddp_train.py` beside
/// the repository (or beside the folder of its worktrees).
fn anchor() -> Option<PathBuf> {
    if let Some(p) = std::env::var_os("PLEXUS_DDP_ANCHOR") {
        return std::fs::canonicalize(p).ok();
    }
    ["../shared", "../../shared"]
        .iter()
        .find_map(|d| std::fs::canonicalize(repo().join(d).join("anchors/ddp_train.py")).ok())
}

fn skip(test: &str, why: &str) {
    if std::env::var_os("PLEXUS_REQUIRE_ALL").is_some() {
        panic!("{test}: {why} (PLEXUS_REQUIRE_ALL=1)");
    }
    let _ = writeln!(std::io::stderr(), "SKIPPED {test}: {why}");
}

fn cluster(workers: usize) -> Cluster {
    Cluster::start(ClusterConfig {
        workers,
        cpus_per_worker: 2,
        worker_args: vec!["--task-user".into(), "worker".into()],
        ..Default::default()
    })
}

/// A TOML string literal.
fn lit(s: &str) -> String {
    format!("{:?}", s)
}

fn read_json(p: &Path) -> serde_json::Value {
    let text = std::fs::read_to_string(p).unwrap_or_else(|e| panic!("{}: {e}", p.display()));
    serde_json::from_str(&text).unwrap_or_else(|e| panic!("{}: {e}: {text}", p.display()))
}

fn close(a: f64, b: f64, what: &str) {
    let rel = (a - b).abs() / b.abs().max(1e-12);
    assert!(rel <= 1e-4, "{what}: plexus {a} vs gloo {b} (relative {rel:e})");
}

/// DDP over the `plexus` backend in a gang of 2 trains exactly as Gloo does: the same losses and
/// the same parameters after the same steps (the anchor script, unchanged).
#[test]
fn ddp_over_plexus_trains_and_matches_gloo() {
    let (Some(py), Some(script)) = (torch_python(), anchor()) else {
        return skip("ddp_over_plexus_trains_and_matches_gloo", "no torch venv (`make torch`) or anchor script");
    };
    let c = cluster(2);
    let out = c.task_dir("out");
    let common = ["--params-m", "0.3", "--steps", "6", "--warmup", "1", "--batch", "16"];
    let argv: Vec<String> = [py.display().to_string(), script.display().to_string()]
        .into_iter()
        .chain(["--rank", "env:PLEXUS_RANK", "--world", "env:PLEXUS_REPLICAS", "--backend", "plexus"].map(String::from))
        .chain(["--import", "plexus.distributed", "--json"].map(String::from))
        .chain([out.join("plexus.json").display().to_string()])
        .chain(common.map(String::from))
        .collect();
    let job = format!(
        "name = \"ddp\"\n[[task]]\nname = \"train\"\nreplicas = 2\ncommunicator = true\ncpu = 1\ntimeout = \"300s\"\n\
         command = [{}]\nenv = {{ PYTHONPATH = {} }}\n",
        argv.iter().map(|a| lit(a)).collect::<Vec<_>>().join(", "),
        lit(&repo().join("python").display().to_string()),
    );
    let id = c.submit("ddp.toml", &job);
    let j = c.wait_job(&id, Duration::from_secs(300));
    assert_eq!(
        j.state,
        SUCCEEDED,
        "{}: {}",
        j.error,
        String::from_utf8_lossy(&c.plexus(&["logs", &id, "train"]).stdout)
    );
    let gloo = out.join("gloo.json");
    // Gloo itself now and then aborts in `destroy_process_group` after rank 0 has written its
    // figures ("terminate called without an active exception"): the figures it wrote are the
    // reference, and a run that wrote none is tried again, at most three times in all.
    let mut failures = Vec::new();
    for _ in 0..3 {
        let _ = std::fs::remove_file(&gloo);
        let run = std::process::Command::new(&py)
            .arg(&script)
            .args(["--spawn", "2", "--json"])
            .arg(&gloo)
            .args(common)
            .output()
            .expect("running the anchor with gloo");
        if gloo.exists() {
            if !run.status.success() {
                eprintln!("gloo failed after writing its figures: {}", String::from_utf8_lossy(&run.stderr));
            }
            break;
        }
        failures.push(format!("{}: {}", run.status, String::from_utf8_lossy(&run.stderr)));
    }
    assert!(gloo.exists(), "gloo wrote no figures in 3 runs: {}", failures.join("\n---\n"));
    let (p, g) = (read_json(&out.join("plexus.json")), read_json(&gloo));
    for k in ["loss_first", "loss_last", "param_sum"] {
        close(p[k].as_f64().unwrap(), g[k].as_f64().unwrap(), k);
    }
    assert!(p["loss_last"].as_f64() < p["loss_first"].as_f64(), "it trains: {p}");
}

/// A process outside a `communicator = true` gang that asks for a communicator (directly, or
/// through `init_process_group(backend="plexus")`) gets an error saying so, not a hang.
#[test]
fn a_task_outside_a_gang_gets_a_clear_error() {
    let c = cluster(1);
    let py = torch_python().map_or("python3".into(), |p| p.display().to_string());
    let script = "import plexus.collective as pc\ntry:\n    pc.Communicator()\nexcept pc.NotInGang as e:\n    print(f'refused: {e}', flush=True)\n\
                  try:\n    import torch.distributed as dist, plexus.distributed\nexcept ImportError:\n    raise SystemExit(1)\n\
                  try:\n    dist.init_process_group('plexus')\nexcept pc.NotInGang as e:\n    raise SystemExit(f'torch refused: {e}')\n";
    let job = format!(
        "name = \"alone\"\n[[task]]\nname = \"t\"\nreplicas = 2\ncommand = [{}, \"-c\", {}]\nenv = {{ PYTHONPATH = {} }}\n",
        lit(&py),
        lit(script),
        lit(&repo().join("python").display().to_string()),
    );
    let id = c.submit("alone.toml", &job);
    let j = c.wait_job(&id, Duration::from_secs(60));
    assert_eq!(j.state, FAILED);
    let logs = c.plexus(&["logs", &id, "t", "--rank", "0"]);
    let text = format!("{}{}", String::from_utf8_lossy(&logs.stdout), String::from_utf8_lossy(&logs.stderr));
    assert!(
        text.contains("refused: no collective endpoint") && text.contains("not a member of a Plexus gang"),
        "{text}"
    );
    assert!(text.contains("communicator = true"), "the error says what to do: {text}");
    if torch_python().is_some() {
        assert!(text.contains("torch refused: env:// rendezvous: MASTER_ADDR is not set, and this process is not a member of a Plexus gang"), "{text}");
    }
}

/// A gang of 2 loops over allreduces; member 1 is killed with SIGKILL: member 0's pending
/// operation fails at once (well within the 30 s stall timeout), naming member 1.
#[test]
fn a_killed_member_fails_the_others_pending_operation_naming_it() {
    let c = cluster(2);
    let marks = c.task_dir("marks");
    let script = r#"
import array, os, sys, time
from plexus.collective import Communicator, CollectiveError
d = sys.argv[1]
c = Communicator()
buf = array.array("f", [1.0] * 4096)
c.barrier()
open(f"{d}/pid.{c.rank}.tmp", "w").write(str(os.getpid()))
os.rename(f"{d}/pid.{c.rank}.tmp", f"{d}/pid.{c.rank}")
try:
    while True:
        c.allreduce(buf, op="max")
        if c.rank == 1:
            time.sleep(0.01)
except CollectiveError as e:
    open(f"{d}/error.{c.rank}.tmp", "w").write(f"{time.time()}\n{e}")
    os.rename(f"{d}/error.{c.rank}.tmp", f"{d}/error.{c.rank}")
    sys.exit(3)
"#;
    let job = format!(
        "name = \"kill\"\n[[task]]\nname = \"loop\"\nreplicas = 2\ncommunicator = true\ncommand = [\"python3\", \"-c\", {}, {}]\n\
         env = {{ PYTHONPATH = {} }}\n",
        lit(script),
        lit(&marks.display().to_string()),
        lit(&repo().join("python").display().to_string()),
    );
    let id = c.submit("kill.toml", &job);
    let pid: i32 = c.wait_for("member 1 to run its loop", Duration::from_secs(60), |_| {
        std::fs::read_to_string(marks.join("pid.1")).ok().and_then(|s| s.trim().parse().ok())
    });
    std::thread::sleep(Duration::from_millis(300));
    let killed_at = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_secs_f64();
    let started = Instant::now();
    // SAFETY: kill(2) on a pid of this test's own cluster.
    assert_eq!(unsafe { libc::kill(pid, libc::SIGKILL) }, 0);
    let text = c
        .wait_for("member 0's error", Duration::from_secs(40), |_| std::fs::read_to_string(marks.join("error.0")).ok());
    let (at, msg) = text.split_once('\n').unwrap();
    let after = at.parse::<f64>().unwrap() - killed_at;
    assert!(msg.contains("member 1 of the gang failed"), "{msg}");
    assert!(msg.contains("signal 9") || msg.contains("137"), "it says how: {msg}");
    assert!(after < 30.0 && started.elapsed() < Duration::from_secs(30), "failed {after:.1} s after the kill");
    let j = c.wait_job(&id, Duration::from_secs(60));
    assert_eq!(j.state, FAILED, "{}", j.error);
}

/// The last `step N` a training log shows (0: none), and the step it said it resumed from.
fn steps_of(log: &str) -> (u32, Option<u32>) {
    let last = log.lines().rev().find_map(|l| l.strip_prefix("step ")?.split(' ').next()?.parse().ok());
    let resumed = log.lines().find_map(|l| l.strip_prefix("resumed from step ")?.split(' ').next()?.parse().ok());
    (last.unwrap_or(0), resumed)
}

/// The pid of the process of attempt `attempt` of `train` rank `rank` of job `job` (found by
/// its environment: tasks run as the worker's user, which is this test's).
fn task_pid(job: &str, rank: u32, attempt: u32) -> Option<i32> {
    let want = [format!("PLEXUS_JOB={job}"), format!("PLEXUS_RANK={rank}"), format!("PLEXUS_ATTEMPT={attempt}")];
    std::fs::read_dir("/proc").ok()?.flatten().find_map(|e| {
        let pid: i32 = e.file_name().to_str()?.parse().ok()?;
        let cmd = std::fs::read(e.path().join("cmdline")).ok()?;
        if !String::from_utf8_lossy(&cmd).contains("ddp_train.py") {
            return None;
        }
        let env = std::fs::read(e.path().join("environ")).ok()?;
        let vars: Vec<&[u8]> = env.split(|&b| b == 0).collect();
        want.iter().all(|w| vars.contains(&w.as_bytes())).then_some(pid)
    })
}

/// Real training that checkpoints (examples/ddp_train.py, `checkpoint = "ckpt"`) as a gang of 2
/// with an evaluation after it. Member 1's process is killed with SIGKILL mid-training: member 0
/// stops within the stall timeout, its error naming member 1 (the collective's, or the gang's
/// restart); the gang restarts under `max_retries`; each member resumes from the checkpoint its
/// first attempt left (fetched from the worker that kept it), losing at most one checkpoint
/// interval; the job succeeds and the evaluation finds both ranks' final parameters identical.
#[test]
fn a_member_killed_mid_training_restarts_the_gang_from_its_checkpoint() {
    const TEST: &str = "a_member_killed_mid_training_restarts_the_gang_from_its_checkpoint";
    let Some(py) = torch_python() else { return skip(TEST, "no torch venv (`make torch`)") };
    let c = cluster(2);
    let (every, steps) = (5u32, 80u32);
    let script = repo().join("examples/ddp_train.py").display().to_string();
    let argv = [
        py.display().to_string(),
        script.clone(),
        "--params-m".into(),
        "0.1".into(),
        "--steps".into(),
        steps.to_string(),
        "--batch".into(),
        "16".into(),
        "--checkpoint-every".into(),
        every.to_string(),
    ];
    let pythonpath = lit(&repo().join("python").display().to_string());
    let job = format!(
        "name = \"resume\"\n[[task]]\nname = \"train\"\nreplicas = 2\ncommunicator = true\noutputs = [\"ckpt\"]\n\
         checkpoint = \"ckpt\"\nmax_retries = 1\ncpu = 1\ntimeout = \"600s\"\ncommand = [{}]\nenv = {{ PYTHONPATH = {pythonpath} }}\n\
         [[task]]\nname = \"evaluate\"\ninputs = [\"train/ckpt\"]\ncommand = [{}, {}, \"--evaluate\", \"in/train/0/ckpt\", \"in/train/1/ckpt\"]\n\
         env = {{ PYTHONPATH = {pythonpath} }}\n",
        argv.iter().map(|a| lit(a)).collect::<Vec<_>>().join(", "),
        lit(&py.display().to_string()),
        lit(&script),
    );
    let id = c.submit("resume.toml", &job);
    let log = |rank: u32, attempt: u32| -> String {
        (0..2)
            .filter_map(|i| {
                let p = c.worker_dir(i).join("logs").join(&id).join("train").join(format!("{rank}.{attempt}.out"));
                std::fs::read_to_string(p).ok()
            })
            .collect()
    };
    let first_kill = 2 * every + 2;
    let pid = c.wait_for("member 1 to pass two checkpoints", Duration::from_secs(400), |_| {
        let (at, _) = steps_of(&log(1, 1));
        assert!(at < steps, "training ended before the kill (step {at} of {steps})");
        (at >= first_kill).then(|| task_pid(&id, 1, 1)).flatten()
    });
    let started = Instant::now();
    // SAFETY: kill(2) on a pid of this test's own cluster.
    assert_eq!(unsafe { libc::kill(pid, libc::SIGKILL) }, 0);
    // Member 0's first attempt ends: its pending operation fails naming member 1, or the gang is
    // restarted (the coordinator's note names member 1 too); either within the stall timeout.
    let how = c.wait_for("member 0 to stop", Duration::from_secs(40), |c| {
        let err: String = (0..2)
            .filter_map(|i| {
                let p = c.worker_dir(i).join("logs").join(&id).join("train").join("0.1.err");
                std::fs::read_to_string(p).ok()
            })
            .collect();
        if err.contains("member 1 of the gang failed") {
            return Some(format!(
                "its operation failed: {}",
                err.lines().rev().find(|l| l.contains("member 1")).unwrap_or("")
            ));
        }
        let s = c.job(&id)?.subtasks.into_iter().find(|s| s.task == "train" && s.rank == 0)?;
        (s.attempt >= 2 || s.state == pb::SubtaskState::Ready as i32).then(|| "the gang restarted".to_string())
    });
    assert!(started.elapsed() < Duration::from_secs(30), "member 0 stopped {:?} after the kill", started.elapsed());
    eprintln!("member 0 stopped {:?} after the kill: {how}", started.elapsed());
    let j = c.wait_job(&id, Duration::from_secs(600));
    let evaluate = c.plexus(&["logs", &id, "evaluate"]);
    let eval = String::from_utf8_lossy(&evaluate.stdout).to_string();
    assert_eq!(j.state, SUCCEEDED, "{}: {}\n{eval}", j.error, log(0, 2));
    let full = c.job(&id).expect("the job's status");
    let member = |r: u32| full.subtasks.iter().find(|s| s.task == "train" && s.rank == r).unwrap();
    assert_eq!(member(1).failures, 1, "the kill counts once against max_retries");
    assert!(member(1).failed_attempts[0].error.contains("signal 9"), "{:?}", member(1).failed_attempts);
    assert_eq!(member(0).failures, 0, "a member stopped for another's failure is not counted");
    // The ranks run in lockstep (each step's allreduce), so the furthest either got is what was
    // reached; both resume from the newest checkpoint either kept.
    let reached = (0..2).map(|r| steps_of(&log(r, 1)).0).max().unwrap();
    for r in 0..2 {
        assert_eq!(member(r).attempt, 2, "rank {r} ran twice");
        let (last, resumed) = steps_of(&log(r, 2));
        let resumed = resumed.unwrap_or_else(|| panic!("rank {r} did not resume: {}", log(r, 2)));
        assert!(resumed > 0, "rank {r} resumed from step 0");
        assert!(resumed <= reached && reached - resumed <= every, "rank {r}: reached {reached}, resumed {resumed}");
        assert_eq!(last, steps, "rank {r} trained to the end: {}", log(r, 2));
        eprintln!("rank {r}: reached step {reached} before the kill, resumed from step {resumed}");
    }
    assert!(eval.contains("identical parameters on every rank") && eval.contains("held-out loss"), "{eval}");
}

/// `scripts/gpu-check.sh` (the GPU check, here on CPU tensors) under `plexus-local-gang`: every op
/// of the backend on every dtype is right, DDP matches one-process training, and Gloo's run of
/// the same steps ends with the same parameters; a member that fails makes the gang fail,
/// naming it, and `plexus-local-gang` exits non-zero.
#[test]
fn the_gpu_check_passes_on_cpu_tensors_under_a_local_gang() {
    let Some(py) = torch_python() else {
        return skip("the_gpu_check_passes_on_cpu_tensors_under_a_local_gang", "no torch venv (make torch)");
    };
    let out = tempfile::tempdir().unwrap();
    let run = std::process::Command::new("bash")
        .arg(repo().join("scripts/gpu-check.sh"))
        .arg(plexus_e2e::bin_dir())
        .args(["--params-m", "0.2", "--steps", "4", "--warmup", "1", "--batch", "16", "--latency-iters", "10"])
        .env("PYTHON", &py)
        .env("DEVICE", "cpu")
        .env("MEMBERS", "2")
        .env("OUT", out.path())
        .output()
        .unwrap();
    let text = format!("{}{}", String::from_utf8_lossy(&run.stdout), String::from_utf8_lossy(&run.stderr));
    assert!(run.status.success(), "{text}");
    for want in
        ["ok  all_reduce sum torch.bfloat16", "ok  all_to_all_single", "matches one-process training", "gpu-check: ok"]
    {
        assert!(text.contains(want), "{want:?} missing from:\n{text}");
    }
    let (p, g) = (read_json(&out.path().join("plexus.json")), read_json(&out.path().join("gloo.json")));
    assert_eq!(p["op_checks"], 17, "{p}");
    close(p["param_sum"].as_f64().unwrap(), g["param_sum"].as_f64().unwrap(), "param_sum, plexus vs gloo");

    // A member that exits 3 before its first op: the other's init or first op fails naming it.
    let bad = std::process::Command::new(plexus_e2e::bin_dir().join("plexus-local-gang"))
        .args(["--members", "2", "--"])
        .arg(&py)
        .args([
            "-c",
            "import os, sys, torch, torch.distributed as dist, plexus.distributed\n\
                      if os.environ['PLEXUS_RANK'] == '1': sys.exit(3)\n\
                      dist.init_process_group('plexus'); dist.all_reduce(torch.ones(4))",
        ])
        .env("PYTHONPATH", repo().join("python"))
        .output()
        .unwrap();
    let text = format!("{}{}", String::from_utf8_lossy(&bad.stdout), String::from_utf8_lossy(&bad.stderr));
    assert!(!bad.status.success(), "{text}");
    assert!(text.contains("member 1 of the gang failed"), "the survivor's error names member 1: {text}");
    assert!(
        text.contains("members that failed: 0: exited with exit status: 1; 1: exited with exit status: 3"),
        "{text}"
    );
}
