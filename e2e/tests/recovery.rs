//! End-to-end: what a real cluster does when workers die and when job files are hostile (issue
//! 12, items 3, 4, 7 and 8), with real processes on loopback.

use std::time::Duration;

use plexus_e2e::{Cluster, ClusterConfig, describe};
use plexus_proto::pb;

const ALLREDUCE: &str = include_str!("../../examples/allreduce.toml");

/// The product's heartbeat timeout (3 s): shorter ones lose workers on a loaded 2-core CI machine.
fn cluster(workers: usize) -> Cluster {
    Cluster::start(ClusterConfig { workers, ..Default::default() })
}

fn wait_alive(c: &Cluster, n: usize) {
    c.wait_for(&format!("exactly {n} live workers"), Duration::from_secs(30), |c| {
        (c.workers()?.iter().filter(|w| w.alive).count() == n).then_some(())
    });
}

#[test]
fn a_job_only_lost_workers_could_run_is_refused_naming_what_is_missing() {
    let mut c = cluster(4);
    c.kill_worker(2);
    c.kill_worker(3);
    wait_alive(&c, 2);
    let e = c.try_submit("allreduce.toml", ALLREDUCE).expect_err("refused");
    assert_eq!(e.code(), tonic::Code::InvalidArgument, "{}", e.message());
    assert!(
        e.message().contains("needs 4 workers for gang \"sum\"") && e.message().ends_with("2 alive"),
        "{}",
        e.message()
    );
    assert!(c.plexus(&["status", "-o", "json"]).status.success());
    let list = c.plexus(&["status", "-o", "json"]);
    assert!(
        !String::from_utf8_lossy(&list.stdout).contains("allreduce"),
        "nothing of a refused job is stored: {}",
        describe(&list)
    );
}

#[test]
fn a_job_that_becomes_unrunnable_says_why_it_waits() {
    let mut c = cluster(4);
    // The producers are slow enough that the gang is not placed before two workers die.
    let slow = ALLREDUCE.replace("perl -e 'my $r", "sleep 2; perl -e 'my $r");
    let job = c.submit("allreduce.toml", &slow);
    c.kill_worker(2);
    c.kill_worker(3);
    let why = c.wait_for("the gang's waiting reason", Duration::from_secs(60), |c| {
        let g = c.job_summary(&job)?.groups.into_iter().find(|g| g.task == "sum")?;
        (!g.waiting_reason.is_empty() && g.waiting_reason.contains("2 alive")).then_some(g.waiting_reason)
    });
    assert!(why.starts_with("needs 4 workers for gang \"sum\""), "{why}");
    let out = c.plexus(&["status", &job]);
    assert!(
        String::from_utf8_lossy(&out.stdout).contains("waiting: sum: needs 4 workers for gang \"sum\""),
        "{}",
        describe(&out)
    );
}

/// Submits gen -> gate -> use: gen writes a value; gate waits for the file `go` (returned) that
/// the test creates; use reads gen's value. Returns once gen succeeded, with the worker holding
/// its output.
fn gen_held_before_a_gate(c: &Cluster) -> (String, std::path::PathBuf, String) {
    let go = c.path("go");
    let src = format!(
        "[[task]]\nname = \"gen\"\ncommand = \"echo 42 > $PLEXUS_OUT/value\"\noutputs = [\"value\"]\n\
         [[task]]\nname = \"gate\"\ncommand = \"while [ ! -e '{go}' ]; do sleep 0.05; done\"\nafter = [\"gen\"]\ncpu = 0\n\
         [[task]]\nname = \"use\"\ncommand = \"test $(cat $PLEXUS_IN/gen/0/value) = 42\"\ninputs = [\"gen/value\"]\nafter = [\"gate\"]\n",
        go = go.display()
    );
    let job = c.submit("lineage.toml", &src);
    let holder = c.wait_for("gen to succeed", Duration::from_secs(30), |c| {
        let j = c.job(&job)?;
        let s = j.subtasks.iter().find(|s| s.task == "gen")?;
        (s.state == pb::SubtaskState::Succeeded as i32).then(|| s.worker_id.clone())
    });
    (job, go, holder)
}

#[test]
fn an_output_lost_with_its_only_holder_is_recomputed_and_the_job_finishes() {
    let mut c = cluster(2);
    let (job, go, holder) = gen_held_before_a_gate(&c);
    let i = c.worker_index(&holder).expect("the holder is one of ours");
    c.kill_worker(i);
    wait_alive(&c, 1);
    std::fs::write(&go, b"").unwrap();
    let end = c.wait_job(&job, Duration::from_secs(60));
    assert_eq!(end.state, pb::JobState::Succeeded as i32, "{end:?}\n{}", c.coordinator_log());
    let producer = end.subtasks.iter().find(|s| s.task == "gen").unwrap();
    assert_eq!((producer.reruns, producer.failures), (1, 0), "the producer ran once more, and that is not a failure");
    assert_ne!(producer.worker_id, holder, "it ran again on the surviving worker");
    let used = end.subtasks.iter().find(|s| s.task == "use").unwrap();
    assert_eq!(used.failures, 0, "the consumer never ran without its input");
}

/// An input whose file was removed from its holder's cache behind the worker's back: the
/// consumer's attempt cannot get it, which is not the consumer's failure. The attempt is placed
/// again, uncounted, once the holder has stopped listing the object; gen runs again, and the job
/// (max_retries = 0) succeeds. Before, the consumer failed and so did the job.
#[test]
fn an_input_whose_file_vanished_from_its_holder_is_made_again_without_failing_the_consumer() {
    let c = cluster(2);
    let (job, go, holder) = gen_held_before_a_gate(&c);
    let i = c.worker_index(&holder).expect("the holder is one of ours");
    let file = c.worker_dir(i).join("cache").join(&job).join("gen").join("0").join("value");
    std::fs::remove_file(&file).unwrap_or_else(|e| panic!("removing {}: {e}", file.display()));
    std::fs::write(&go, b"").unwrap();
    let end = c.wait_job(&job, Duration::from_secs(60));
    assert_eq!(end.state, pb::JobState::Succeeded as i32, "{end:?}\n{}", c.coordinator_log());
    let used = end.subtasks.iter().find(|s| s.task == "use").unwrap();
    assert_eq!((used.failures, used.unfetched_requeues), (0, 1), "placed again once, not failed: {used:?}");
    let producer = end.subtasks.iter().find(|s| s.task == "gen").unwrap();
    assert_eq!((producer.reruns, producer.failures), (1, 0), "gen made its value again");
    assert!(c.worker_log(i).contains("file is gone; forgotten"), "{}", c.worker_log(i));
}

/// A holder that hangs (SIGSTOP: its sockets stay open and nothing answers) while a consumer on
/// the other worker fetches from it: when the holder is declared lost, the consumer's attempt is
/// placed again at once, uncounted, and gen runs again; it does not wait out its fetch timeouts
/// and report the input unfetched.
#[test]
fn a_consumer_fetching_from_a_hung_holder_is_placed_again_when_the_holder_is_lost() {
    let c = Cluster::start(ClusterConfig { workers: 2, cpus_per_worker: 1, ..Default::default() });
    let (go, go2) = (c.path("go"), c.path("go2"));
    let wait = |f: &std::path::Path| format!("while [ ! -e '{}' ]; do sleep 0.05; done", f.display());
    // gen and hold take a worker each; blk then fills gen's worker, so use goes to the other.
    let src = format!(
        "[[task]]\nname = \"gen\"\ncommand = \"echo 42 > $PLEXUS_OUT/value\"\noutputs = [\"value\"]\n\
         [[task]]\nname = \"hold\"\ncommand = \"{}\"\n\
         [[task]]\nname = \"blk\"\ncommand = \"{}\"\nafter = [\"gen\"]\n\
         [[task]]\nname = \"use\"\ncommand = \"test $(cat $PLEXUS_IN/gen/0/value) = 42\"\ninputs = [\"gen/value\"]\nafter = [\"hold\"]\n",
        wait(&go),
        wait(&go2)
    );
    let job = c.submit("hung.toml", &src);
    let (holder, hold_at) = c.wait_for("blk to run beside gen's output", Duration::from_secs(30), |c| {
        let j = c.job(&job)?;
        let on = |t: &str| {
            j.subtasks
                .iter()
                .find(|s| s.task == t && s.state == pb::SubtaskState::Running as i32)
                .map(|s| s.worker_id.clone())
        };
        let made = j.subtasks.iter().find(|s| s.task == "gen" && s.state == pb::SubtaskState::Succeeded as i32)?;
        (on("blk")? == made.worker_id).then(|| (made.worker_id.clone(), on("hold")))
    });
    assert!(hold_at.is_some_and(|w| w != holder), "hold runs on the other worker");
    c.freeze_worker(c.worker_index(&holder).expect("one of ours"));
    std::fs::write(&go, b"").unwrap();
    std::fs::write(&go2, b"").unwrap();
    let end = c.wait_job(&job, Duration::from_secs(120));
    assert_eq!(end.state, pb::JobState::Succeeded as i32, "{end:?}\n{}", c.coordinator_log());
    let used = end.subtasks.iter().find(|s| s.task == "use").unwrap();
    // Placed again when the holder was lost, before its fetch timed out (or, on a machine slow
    // enough that the holder was declared lost before use was placed, placed once after gen ran
    // again): never failed, never reported unfetched.
    assert_eq!((used.failures, used.unfetched_requeues), (0, 0), "{used:?}");
    assert_eq!(end.subtasks.iter().find(|s| s.task == "gen").unwrap().reruns, 1);
}

/// The examples' allreduce with a gate before its check: the worker that holds member 1's sum
/// (and grads 1, its input) dies after the gang completed. A member cannot run alone, so the
/// whole gang runs again on the four survivors, after grads 1 is made again; the check passes.
#[test]
fn an_allreduce_output_lost_after_the_gang_completed_reruns_the_gang_and_the_job_finishes() {
    let mut c = cluster(5);
    let go = c.path("go");
    let gate = format!(
        "[[task]]\nname = \"gate\"\ncommand = \"while [ ! -e '{}' ]; do sleep 0.05; done\"\nafter = [\"sum\"]\ncpu = 0\n",
        go.display()
    );
    let src = ALLREDUCE.replace("name = \"check\"\n", "name = \"check\"\nafter = [\"gate\"]\n") + &gate;
    assert!(src.contains("after = [\"gate\"]"), "the example still has its check task");
    let job = c.submit("allreduce.toml", &src);
    let holder = c.wait_for("the gang to complete", Duration::from_secs(120), |c| {
        let j = c.job(&job)?;
        let sum: Vec<_> = j.subtasks.iter().filter(|s| s.task == "sum").collect();
        sum.iter()
            .all(|s| s.state == pb::SubtaskState::Succeeded as i32)
            .then(|| sum.iter().find(|s| s.rank == 1).unwrap().worker_id.clone())
    });
    let i = c.worker_index(&holder).expect("the holder is one of ours");
    c.kill_worker(i);
    wait_alive(&c, 4);
    std::fs::write(&go, b"").unwrap();
    let end = c.wait_job(&job, Duration::from_secs(180));
    assert_eq!(end.state, pb::JobState::Succeeded as i32, "{end:?}\n{}", c.coordinator_log());
    let logs = c.plexus(&["logs", &job, "check"]);
    assert!(
        String::from_utf8_lossy(&logs.stdout).starts_with("ok: 262144 elements summed over 4 replicas"),
        "{}",
        describe(&logs)
    );
    for s in end.subtasks.iter().filter(|s| s.task == "sum") {
        assert_eq!(
            (s.reruns, s.failures),
            (1, 0),
            "member {} ran once more with its gang, and that is not a failure",
            s.rank
        );
        assert_ne!(s.worker_id, holder);
    }
    let grads1 = end.subtasks.iter().find(|s| s.task == "grads" && s.rank == 1).unwrap();
    assert_eq!(grads1.reruns, 1, "member 1's input, lost with the same worker, was made again");
}

#[test]
fn workers_stay_alive_while_a_five_thousand_task_file_is_submitted() {
    let c = cluster(2);
    let mut src = String::from("name = \"wide\"\n");
    for i in 0..5_000 {
        src.push_str(&format!("[[task]]\nname = \"t{i}\"\nkind = \"noop\"\ncpu = 0\n"));
    }
    let workers = c.workers().unwrap().len();
    let job = c.submit("wide.toml", &src);
    let end = c.wait_job(&job, Duration::from_secs(120));
    assert_eq!(end.state, pb::JobState::Succeeded as i32);
    let after = c.workers().unwrap();
    assert_eq!(after.len(), workers);
    assert!(after.iter().all(|w| w.alive), "no worker was declared lost");
    assert!(!c.coordinator_log().contains("missed its heartbeats; declared lost"), "{}", c.coordinator_log());
}

#[test]
fn hostile_job_files_are_refused_or_run_without_harm() {
    let c = cluster(1);
    // A valid 10,000-task chain listed dependants-first: accepted, and the coordinator lives.
    let tasks: Vec<String> = (0..10_000)
        .rev()
        .map(|i| {
            let after = if i > 0 { format!("[\"t{}\"]", i - 1) } else { "[]".into() };
            format!("{{\"name\": \"t{i}\", \"kind\": \"noop\", \"cpu\": 0, \"after\": {after}}}")
        })
        .collect();
    let chain = format!("{{\"name\": \"chain\", \"tasks\": [{}]}}", tasks.join(",\n"));
    let job = c.submit("chain.json", &chain);
    assert!(c.job_summary(&job).is_some(), "the coordinator still answers");
    // A 10 MB command and a 5 MB env value: refused at submit, naming the limit.
    let huge = format!("[[task]]\nname = \"a\"\ncommand = \"echo {}\"\n", "x".repeat(10 << 20));
    let e = c.try_submit("huge.toml", &huge).expect_err("refused");
    assert!(e.message().contains("at most 1024 KiB per task"), "{}", &e.message()[..e.message().len().min(300)]);
    let env = format!("[[task]]\nname = \"a\"\ncommand = [\"true\"]\nenv = {{ BIG = \"{}\" }}\n", "y".repeat(5 << 20));
    assert!(c.try_submit("env.toml", &env).is_err());
    // Endless retries of a failing command: refused above the cap.
    let e = c
        .try_submit("retry.toml", "[[task]]\nname = \"a\"\ncommand = [\"false\"]\nmax_retries = 4294967295\n")
        .expect_err("refused");
    assert!(e.message().contains("max_retries = 4294967295 is out of range"), "{}", e.message());
    // Terminal escapes in a job name; NUL in an argument.
    let e = c
        .try_submit("ansi.toml", "name = \"\\u001b[2Jboom\"\n[[task]]\nname = \"a\"\ncommand = [\"true\"]\n")
        .expect_err("refused");
    assert!(e.message().contains("invalid job name"), "{}", e.message());
    let e =
        c.try_submit("nul.toml", "[[task]]\nname = \"a\"\ncommand = [\"echo\", \"a\\u0000b\"]\n").expect_err("refused");
    assert!(e.message().contains("NUL"), "{}", e.message());
    // The chain still runs (one task after another: 10,000 of them would take a minute, so the
    // test watches it advance, then cancels it): every hostile file above hurt nobody.
    c.wait_for("the chain to advance", Duration::from_secs(60), |c| {
        let j = c.job_summary(&job)?;
        (j.groups.iter().map(|g| g.succeeded).sum::<u32>() >= 200 && j.state == pb::JobState::Running as i32)
            .then_some(())
    });
    let out = c.plexus(&["cancel", &job]);
    assert!(out.status.success(), "{}", describe(&out));
}

#[test]
fn policy_export_and_migrate_dry_run_work_while_the_coordinator_runs() {
    let c = Cluster::start(ClusterConfig { workers: 1, placer: "rl".into(), ..Default::default() });
    let port = c.url.rsplit(':').next().unwrap().to_string();
    let coordinator = |args: &[&str]| {
        std::process::Command::new(c.bin.join("plexus-coordinator"))
            .args(["--data-dir"])
            .arg(c.path("coordinator"))
            .args(["--listen", &format!("127.0.0.1:{port}")])
            .args(args)
            .output()
            .expect("running plexus-coordinator")
    };
    let out = coordinator(&["migrate", "--dry-run"]);
    assert!(out.status.success(), "{}", describe(&out));
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.contains("in use by the coordinator at") && text.contains("no pending migrations"),
        "{}",
        describe(&out)
    );
    let file = c.path("weights.safetensors");
    let out = coordinator(&["policy", "export", file.to_str().unwrap()]);
    assert!(out.status.success(), "{}", describe(&out));
    assert!(
        String::from_utf8_lossy(&out.stdout).contains("initial weights"),
        "before any training step, the note says so: {}",
        describe(&out)
    );
    assert!(std::fs::metadata(&file).unwrap().len() > 1000, "a real safetensors file");
    let out = coordinator(&["policy", "import", file.to_str().unwrap()]);
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("in use by a running coordinator"), "{}", describe(&out));
}

/// Three sleepers, one per worker of a 1-core cluster: long enough to outlast the faults.
const SLEEPERS: &str = "name = \"long\"\n[[task]]\nname = \"s\"\ncommand = \"sleep 15\"\ncpu = 1\nreplicas = 3\n";

fn all_running(c: &Cluster, job: &str) -> Option<()> {
    let j = c.job(job)?;
    (j.subtasks.len() == 3 && j.subtasks.iter().all(|s| s.state == pb::SubtaskState::Running as i32)).then_some(())
}

fn metric(c: &Cluster, name: &str) -> Option<f64> {
    let (code, text) = plexus_e2e::http_get(
        c.http.as_deref().expect("the coordinator serves HTTP"),
        "/metrics",
        c.admin_token.as_deref(),
    );
    if code != 200 {
        return None;
    }
    text.lines().find_map(|l| l.strip_prefix(name)?.strip_prefix(' ')?.trim().parse().ok())
}

/// Issue 29: a coordinator stopped (`kill -STOP`) for longer than the heartbeat timeout declared
/// every worker lost when it resumed, and restarted every running subtask, though the workers
/// were fine. It notices its own stall and gives every worker a fresh timeout instead. (The
/// eviction guard is off here, so that it is the stall that saves them.)
#[test]
fn a_coordinator_paused_past_the_heartbeat_timeout_evicts_nobody() {
    let mut c = Cluster::start(ClusterConfig {
        workers: 3,
        cpus_per_worker: 1,
        coordinator_args: vec!["--max-lost-share".into(), "1".into()],
        ..Default::default()
    });
    let job = c.submit("long.toml", SLEEPERS);
    c.wait_for("the three sleepers running", Duration::from_secs(60), |c| all_running(c, &job));
    c.launcher().signal_coordinator(0, libc::SIGSTOP).unwrap();
    std::thread::sleep(Duration::from_millis(c.config.heartbeat_timeout_ms + 2_000));
    c.launcher().signal_coordinator(0, libc::SIGCONT).unwrap();
    c.wait_for("the stall to be counted", Duration::from_secs(30), |c| {
        (metric(c, "plexus_coordinator_stalls_total")? >= 1.0).then_some(())
    });
    let done = c.wait_job(&job, Duration::from_secs(90));
    assert_eq!(done.state, pb::JobState::Succeeded as i32, "{done:?}");
    assert!(done.subtasks.iter().all(|s| s.attempt == 1), "a subtask ran again: {:?}", done.subtasks);
    let log = c.coordinator_log();
    assert!(!log.contains("missed its heartbeats; declared lost"), "{log}");
    assert!(log.contains("the coordinator stalled"), "{log}");
    assert!(c.workers().unwrap().iter().all(|w| w.alive));
}

/// Issue 29: when more than `--max-lost-share` of the workers fall silent at once, none is
/// declared lost: evictions halt, and the metric and `plexus workers` say so, until they
/// heartbeat again; then evictions resume (a worker lost alone afterwards is lost as before).
#[test]
fn two_of_three_workers_silent_at_once_halt_evictions_until_they_come_back() {
    let mut c = Cluster::start(ClusterConfig {
        workers: 3,
        cpus_per_worker: 1,
        coordinator_args: vec!["--max-lost-share".into(), "0.5".into()],
        ..Default::default()
    });
    let job = c.submit("long.toml", SLEEPERS);
    c.wait_for("the three sleepers running", Duration::from_secs(60), |c| all_running(c, &job));
    c.freeze_worker(1);
    c.freeze_worker(2);
    c.wait_for("evictions halted", Duration::from_secs(30), |c| {
        (metric(c, "plexus_evictions_halted")? == 1.0).then_some(())
    });
    let out = c.plexus(&["workers"]);
    let said = String::from_utf8_lossy(&out.stderr);
    assert!(said.contains("evictions halted: 2 of 3 workers"), "{}", describe(&out));
    assert!(c.workers().unwrap().iter().all(|w| w.alive), "nobody is declared lost while halted");
    assert!(c.coordinator_log().contains("evictions halted"));

    // They come back: the halt ends, and nobody was lost or restarted.
    c.launcher().signal_worker(1, libc::SIGCONT).unwrap();
    c.launcher().signal_worker(2, libc::SIGCONT).unwrap();
    c.wait_for("evictions resumed", Duration::from_secs(30), |c| {
        (metric(c, "plexus_evictions_halted")? == 0.0).then_some(())
    });
    assert!(!String::from_utf8_lossy(&c.plexus(&["workers"]).stderr).contains("evictions halted"));
    assert_eq!(metric(&c, "plexus_eviction_halts_total"), Some(1.0));
    let j = c.job(&job).unwrap();
    assert!(j.subtasks.iter().all(|s| s.attempt == 1), "a subtask ran again: {:?}", j.subtasks);

    // One of three lost alone is within the share: declared lost as before.
    let gone = c.worker_id(2);
    c.kill_worker(2);
    c.wait_for("worker 2 lost", Duration::from_secs(30), |c| {
        c.workers()?.iter().any(|w| w.worker_id == gone && !w.alive).then_some(())
    });
    assert_eq!(metric(&c, "plexus_evictions_halted"), Some(0.0));
}

/// Issue 35: past `--max-heartbeats-per-sec` the coordinator stretches its timing and real
/// workers follow it from their next heartbeat; a worker that then hangs is declared lost only
/// after the stretched timeout it was told, not the configured one, and its subtask runs again
/// elsewhere once it is.
#[test]
fn the_stretched_heartbeat_timing_reaches_real_workers_and_their_timeout_is_honoured() {
    // Two workers at 500 ms send 4 heartbeats a second; a budget of 2 stretches the timing two
    // steps (2.25×): 1,125 ms heartbeats, a 4.5 s lease, a 6.75 s timeout (3 s configured).
    let c = Cluster::start(ClusterConfig {
        workers: 2,
        cpus_per_worker: 1,
        coordinator_args: vec!["--max-heartbeats-per-sec".into(), "2".into()],
        ..Default::default()
    });
    c.wait_for("the stretched interval", Duration::from_secs(30), |c| {
        (metric(c, "plexus_heartbeat_interval_seconds")? == 1.125).then_some(())
    });
    for i in 0..2 {
        c.wait_for("the workers to adopt the timing", Duration::from_secs(30), |c| {
            c.worker_log(i).contains("the coordinator changed the heartbeat timing").then_some(())
        });
    }
    assert!(c.coordinator_log().contains("heartbeat timing changed with the cluster's size"));
    let job = c.submit("one.toml", "name = \"one\"\n[[task]]\nname = \"s\"\ncommand = \"sleep 30\"\ncpu = 1\n");
    let held = c.wait_for("the sleeper running", Duration::from_secs(60), |c| {
        let j = c.job(&job)?;
        let s = j.subtasks.first().filter(|s| s.state == pb::SubtaskState::Running as i32)?;
        c.worker_index(&s.worker_id)
    });
    let gone = c.worker_id(held);
    c.freeze_worker(held);
    let frozen = std::time::Instant::now();
    // Its last heartbeat came at most one interval before the freeze, so it cannot be lost before
    // 6.75 − 1.125 = 5.6 s; with the configured 3 s timeout it would be by now.
    std::thread::sleep(Duration::from_millis(4_500));
    let w = c.workers().unwrap().into_iter().find(|w| w.worker_id == gone).unwrap();
    assert!(w.alive, "declared lost {:?} after it hung: before the timeout it was told", frozen.elapsed());
    c.wait_for("the hung worker lost", Duration::from_secs(30), |c| {
        c.workers()?.iter().any(|w| w.worker_id == gone && !w.alive).then_some(())
    });
    // The sleeper runs again on the other worker (the only one left: one worker, one step less
    // is within the budget, so the timing shortens again).
    c.wait_for("the sleeper running again elsewhere", Duration::from_secs(30), |c| {
        let j = c.job(&job)?;
        let s = j.subtasks.first()?;
        (s.attempt >= 2 && s.state == pb::SubtaskState::Running as i32 && s.worker_id != gone).then_some(())
    });
    c.wait_for("the timing shortened again", Duration::from_secs(30), |c| {
        (metric(c, "plexus_heartbeat_interval_seconds")? == 0.75).then_some(())
    });
    c.thaw_worker(held);
}
