//! End-to-end tests of the control plane: a real coordinator, real workers and the real CLI on
//! loopback, with real sled files and real child processes.

use std::path::Path;
use std::time::Duration;

use plexus_e2e::{Cluster, ClusterConfig, describe};
use plexus_proto::pb;

const SUCCEEDED: i32 = pb::JobState::Succeeded as i32;

fn running(j: &pb::JobStatus) -> u32 {
    j.groups.iter().map(|g| g.running).sum()
}

/// Lines in each marker file `<dir>/<task>.<rank>.<what>`, as a sorted list of (file, lines).
fn markers(dir: &Path) -> Vec<(String, usize)> {
    let mut v: Vec<(String, usize)> = std::fs::read_dir(dir)
        .map(|rd| {
            rd.flatten()
                .map(|e| {
                    let n = e.file_name().to_string_lossy().to_string();
                    let lines = std::fs::read_to_string(e.path()).unwrap_or_default().lines().count();
                    (n, lines)
                })
                .collect()
        })
        .unwrap_or_default();
    v.sort();
    v
}

/// Processes whose argv is exactly `argv`.
fn processes_with(argv: &[&str]) -> usize {
    let Ok(rd) = std::fs::read_dir("/proc") else { return 0 };
    rd.flatten()
        .filter(|e| e.file_name().to_string_lossy().chars().all(|c| c.is_ascii_digit()))
        .filter(|e| {
            std::fs::read(e.path().join("cmdline"))
                .map(|b| {
                    let args: Vec<String> = b
                        .split(|&c| c == 0)
                        .filter(|a| !a.is_empty())
                        .map(|a| String::from_utf8_lossy(a).into_owned())
                        .collect();
                    args == argv
                })
                .unwrap_or(false)
        })
        .count()
}

#[test]
fn fan_out_fan_in_job_computes_its_result() {
    let c = Cluster::start(ClusterConfig::default());
    let file = concat!(env!("CARGO_MANIFEST_DIR"), "/../examples/fanout.toml");
    let out = c.plexus(&["submit", file, "--watch"]);
    assert!(out.status.success(), "submit --watch: {}", describe(&out));
    let stdout = String::from_utf8_lossy(&out.stdout);
    let job = stdout
        .lines()
        .map(str::trim)
        .find(|l| l.starts_with("job-") && l.len() == 36)
        .expect("the job id on stdout")
        .to_string();

    let status = c.job(&job).expect("status");
    assert_eq!(status.state, SUCCEEDED);
    assert_eq!(status.total_subtasks, 9);
    assert!(status.subtasks.iter().all(|s| s.state == pb::SubtaskState::Succeeded as i32 && s.attempt == 1));
    let sum = status.subtasks.iter().find(|s| s.task == "sum").unwrap();
    assert_eq!(sum.outputs.len(), 1);
    // The 8 inputs are spread over three workers, so at least some were fetched from peers.
    assert!(sum.fetched_bytes > 0, "sum fetched nothing: {sum:?}");

    // 1 + 2 + ... + 8000
    let logs = c.plexus(&["logs", &job, "sum"]);
    assert!(logs.status.success(), "{}", describe(&logs));
    assert_eq!(String::from_utf8_lossy(&logs.stdout).trim(), "32004000");

    let st = c.plexus(&["status", &job, "-o", "json"]);
    assert!(st.status.success(), "{}", describe(&st));
    let v: serde_json::Value = serde_json::from_slice(&st.stdout).expect("status -o json prints JSON");
    assert_eq!(v["state"], "succeeded", "{v}");
}

#[test]
fn coordinator_killed_mid_job_restarts_and_every_subtask_completes_once() {
    let mut c = Cluster::start(ClusterConfig::default());
    let mark = c.task_dir("marks");
    let job_file = format!(
        r#"
name = "durable"
[[task]]
name = "work"
replicas = 10
cpu = 1
command = "echo start >> $MARK/$PLEXUS_TASK.$PLEXUS_RANK.start; sleep 1; echo end >> $MARK/$PLEXUS_TASK.$PLEXUS_RANK.end"
env = {{ MARK = "{m}" }}
[[task]]
name = "last"
after = ["work"]
command = "echo start >> $MARK/last.0.start; echo end >> $MARK/last.0.end"
env = {{ MARK = "{m}" }}
"#,
        m = mark.display()
    );
    let job = c.submit("durable.toml", &job_file);
    c.wait_for("a running subtask", Duration::from_secs(20), |c| c.job(&job).filter(|j| running(j) > 0));
    c.kill_coordinator();
    // Subtasks keep running and finish while the coordinator is down; the workers hold their
    // reports until it is back.
    std::thread::sleep(Duration::from_millis(1500));
    c.start_coordinator();
    let status = c.wait_job(&job, Duration::from_secs(60));
    assert_eq!(status.state, SUCCEEDED, "{status:?}");
    let m = markers(&mark);
    assert_eq!(m.len(), 22, "a start and an end marker per subtask: {m:?}");
    for (file, lines) in &m {
        assert_eq!(*lines, 1, "{file} ran {lines} times");
    }
    assert!(c.coordinator_log().contains("state restored"));
}

#[test]
fn a_killed_worker_has_its_subtask_rerun_elsewhere() {
    let mut c = Cluster::start(ClusterConfig::default());
    let job = c.submit("slow.toml", "[[task]]\nname = \"slow\"\ncommand = \"sleep 2; echo done\"\ncpu = 1\n");
    let s = c.wait_for("the subtask to run", Duration::from_secs(20), |c| {
        c.job(&job).and_then(|j| j.subtasks.into_iter().find(|s| s.state == pb::SubtaskState::Running as i32))
    });
    let victim = c.worker_index(&s.worker_id).expect("the running worker is one of ours");
    c.kill_worker(victim);
    let status = c.wait_job(&job, Duration::from_secs(60));
    assert_eq!(status.state, SUCCEEDED, "{status:?}");
    let s2 = &status.subtasks[0];
    assert!(s2.attempt >= 2, "{s2:?}");
    assert_ne!(s2.worker_id, s.worker_id);
    assert_eq!(s2.failures, 0, "a lost worker is not the task's failure");
    let workers = c.workers().unwrap();
    assert!(!workers.iter().find(|w| w.worker_id == s.worker_id).unwrap().alive);
}

#[test]
fn bad_job_files_are_refused_with_a_clear_error_and_nothing_is_stored() {
    let c = Cluster::start(ClusterConfig { workers: 1, ..Default::default() });
    let cases: &[(&str, &str, &str)] = &[
        ("syntax.toml", "[[task]]\nname = \"a\"\ncommand = [\"true\"\n", "syntax.toml:3:"),
        ("unknown.toml", "[[task]]\nname = \"a\"\ncommand = [\"true\"]\ncpus = 1\n", "unknown field `cpus`"),
        (
            "dup.toml",
            "[[task]]\nname = \"a\"\nkind = \"noop\"\n[[task]]\nname = \"a\"\nkind = \"noop\"\n",
            "dup.toml:5: duplicate task name \"a\"",
        ),
        ("dep.toml", "[[task]]\nname = \"a\"\nkind = \"noop\"\nafter = [\"ghost\"]\n", "unknown dependency \"ghost\""),
        (
            "cycle.toml",
            "[[task]]\nname = \"a\"\nkind = \"noop\"\nafter = [\"b\"]\n[[task]]\nname = \"b\"\nkind = \"noop\"\nafter = [\"a\"]\n",
            "dependency cycle: ",
        ),
        (
            "input.toml",
            "[[task]]\nname = \"a\"\nkind = \"noop\"\ninputs = [\"gen/numbers\"]\n",
            "no task named \"gen\" produces it",
        ),
        ("huge.toml", "[[task]]\nname = \"a\"\ncommand = [\"true\"]\ncpu = 64\n", "no live worker can ever offer that"),
        ("gpu.toml", "[[task]]\nname = \"a\"\ncommand = [\"true\"]\ngpu = 2\n", "asks for cpu=1, memory=0 B, gpu=2"),
        ("bad.json", "{\"tasks\": [{\"name\": \"a\"}]}", "needs a `command`"),
    ];
    for (name, src, want) in cases {
        let path = c.path(name);
        std::fs::write(&path, src).unwrap();
        let out = c.plexus(&["submit", path.to_str().unwrap()]);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(1), "{name}: {}", describe(&out));
        assert!(stderr.contains(want), "{name}: want {want:?} in {stderr:?}");
        assert_eq!(stderr.trim().lines().count(), 1, "{name}: one line, got {stderr:?}");
        assert!(out.stdout.is_empty(), "{name}: nothing on stdout");
    }
    let jobs = c.plexus(&["status", "-o", "json"]);
    assert!(jobs.status.success(), "{}", describe(&jobs));
    let v: serde_json::Value = serde_json::from_slice(&jobs.stdout).unwrap();
    let n = v.as_array().map(|a| a.len()).or_else(|| v["jobs"].as_array().map(|a| a.len()));
    assert_eq!(n, Some(0), "no rejected job was stored: {v}");

    // Unknown and malformed job ids.
    let out = c.plexus(&["status", "job-00000000000000000000000000000000"]);
    assert_eq!(out.status.code(), Some(1));
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("no job job-00000000000000000000000000000000"),
        "{}",
        describe(&out)
    );
    let out = c.plexus(&["cancel", "wkr-00000000000000000000000000000000"]);
    assert_ne!(out.status.code(), Some(0));
    assert!(String::from_utf8_lossy(&out.stderr).contains("job-"), "{}", describe(&out));
}

#[test]
fn cancelling_a_running_job_kills_its_processes() {
    let c = Cluster::start(ClusterConfig { workers: 2, ..Default::default() });
    // A sleep length no other process on the machine uses, to find ours in /proc.
    let needle = ["sleep", "31.4159"];
    let job = c.submit("long.toml", "[[task]]\nname = \"long\"\nreplicas = 2\ncommand = [\"sleep\", \"31.4159\"]\n");
    c.wait_for("both replicas to run", Duration::from_secs(20), |c| c.job(&job).filter(|j| running(j) == 2));
    // Reported running as the worker starts the process: on a loaded machine `exec` of `sleep`
    // may come a moment later.
    c.wait_for("both sleep processes", Duration::from_secs(10), |_| (processes_with(&needle) == 2).then_some(()));
    let out = c.plexus(&["cancel", &job]);
    assert!(out.status.success(), "{}", describe(&out));
    let status = c.job(&job).unwrap();
    assert_eq!(status.state, pb::JobState::Cancelled as i32);
    assert!(status.subtasks.iter().all(|s| s.state == pb::SubtaskState::Cancelled as i32));
    c.wait_for("the processes to be killed", Duration::from_secs(10), |_| (processes_with(&needle) == 0).then_some(()));
    // Cancelling again is refused with a clear reason.
    let again = c.plexus(&["cancel", &job]);
    assert_eq!(again.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&again.stderr).contains("has already cancelled"), "{}", describe(&again));
}

#[test]
fn a_failing_task_is_retried_then_fails_the_job() {
    let c = Cluster::start(ClusterConfig { workers: 2, ..Default::default() });
    let job = c.submit("fail.toml", "[[task]]\nname = \"bad\"\ncommand = \"echo oops >&2; exit 3\"\nmax_retries = 1\n[[task]]\nname = \"never\"\nafter = [\"bad\"]\nkind = \"noop\"\n");
    let status = c.wait_job(&job, Duration::from_secs(30));
    assert_eq!(status.state, pb::JobState::Failed as i32);
    assert!(status.error.contains("task \"bad\" rank 0 failed after 2 attempts: exit code 3"), "{}", status.error);
    let bad = &status.subtasks[0];
    assert_eq!((bad.attempt, bad.failures, bad.exit_code), (2, 2, 3));
    assert_eq!(status.subtasks[1].state, pb::SubtaskState::Cancelled as i32);
    let logs = c.plexus(&["logs", &job, "bad"]);
    assert!(String::from_utf8_lossy(&logs.stderr).contains("oops"), "{}", describe(&logs));
    let watch = c.plexus(&["watch", &job]);
    assert_eq!(watch.status.code(), Some(1), "watch exits non-zero for a failed job: {}", describe(&watch));
}

#[test]
fn migrate_dry_run_lists_pending_migrations() {
    let dir = tempfile::tempdir().unwrap();
    let bin = plexus_e2e::bin_dir().join("plexus-coordinator");
    let out = std::process::Command::new(&bin)
        .args(["--data-dir"])
        .arg(dir.path())
        .args(["migrate", "--dry-run"])
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", describe(&out));
    assert!(
        String::from_utf8_lossy(&out.stdout).contains("new; it will be created at schema version"),
        "{}",
        describe(&out)
    );
    let out = std::process::Command::new(&bin).args(["--data-dir"]).arg(dir.path()).args(["migrate"]).output().unwrap();
    assert!(out.status.success(), "{}", describe(&out));
    let out = std::process::Command::new(&bin)
        .args(["--data-dir"])
        .arg(dir.path())
        .args(["migrate", "--dry-run"])
        .output()
        .unwrap();
    assert!(String::from_utf8_lossy(&out.stdout).contains("no pending migrations"), "{}", describe(&out));
}

/// The learned placer runs in a real coordinator: consumers of objects resident on particular
/// workers are placed by it, and `plexus explain` shows every candidate's features and Q-value,
/// the chosen node and whether the pick was exploratory.
#[test]
fn learned_placer_places_and_explains_with_real_workers() {
    let c = Cluster::start(ClusterConfig { placer: "rl".into(), ..Default::default() });
    let job = c.submit(
        "rl.toml",
        "[[task]]\nname = \"gen\"\nreplicas = 3\noutputs = [\"data\"]\ncommand = \"head -c 1048576 /dev/zero > $PLEXUS_OUT/data\"\n\
         [[task]]\nname = \"use\"\nreplicas = 3\ninputs = [\"gen/data\"]\ncommand = \"cat $PLEXUS_IN/gen/*/data | wc -c\"\n",
    );
    let status = c.wait_job(&job, Duration::from_secs(60));
    assert_eq!(status.state, SUCCEEDED, "{status:?}");

    let out = c.plexus(&["explain", &job, "use", "--rank", "1", "-o", "json"]);
    assert!(out.status.success(), "{}", describe(&out));
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).expect("explain -o json prints JSON");
    assert_eq!(v["placer"], "rl", "{v}");
    let cands = v["candidates"].as_array().expect("candidates");
    assert_eq!(cands.len(), 3);
    assert!(v["exploratory"].is_boolean());
    let chosen = v["chosen_worker"].as_str().unwrap();
    assert!(cands.iter().any(|c| c["worker_id"] == chosen));
    for cand in cands {
        assert!(cand["features"]["node_overlap"].is_number(), "{cand}");
        assert!(cand["score"].is_number(), "a Q-value per feasible candidate: {cand}");
    }
    // The gen outputs live on the workers that made them, so some candidate holds some input.
    assert!(cands.iter().any(|c| c["features"]["node_overlap"].as_f64().unwrap() > 0.0), "{v}");

    let table = c.plexus(&["explain", &job, "use", "--rank", "1", "-o", "wide"]);
    let text = String::from_utf8_lossy(&table.stdout);
    assert!(text.contains("rl") && text.contains("node_overlap"), "{text}");
    let short = c.plexus(&["explain", &job, "use", "--rank", "1"]);
    let text = String::from_utf8_lossy(&short.stdout);
    assert!(text.contains("chosen: ") && !text.contains("node_overlap"), "by default, in words: {text}");
}
