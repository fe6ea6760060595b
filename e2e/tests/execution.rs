//! End-to-end: trustworthy execution on real workers (issue 12, the worker's part). Nothing a
//! task starts outlives its attempt or its worker — a `kill -9`'d worker's task dies when the
//! worker comes back, a daemon dies with its cancelled job —, memory requests are limits the
//! kernel enforces and reports, GPU tasks see only their own devices, and a data dir serves one
//! worker at a time.
//!
//! The tests that need cgroups say `SKIPPED <test>: <reason>` on stderr where a worker could make
//! none (it then runs subtasks as process groups, `isolation: process-group`).

use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use plexus_e2e::{Cluster, ClusterConfig, describe};
use plexus_proto::pb;

#[path = "support/wait.rs"]
mod wait;

const SUCCEEDED: i32 = pb::JobState::Succeeded as i32;

/// Whether the cluster's workers confine tasks in cgroups; if not, says on stderr that `test` is
/// skipped. (A worker that reports no isolation at all predates it: it is tested, and fails.)
fn cgroups_or_skip(c: &Cluster, test: &str) -> bool {
    let workers = c.workers().expect("the worker list");
    let modes: Vec<String> = workers.iter().map(|w| w.capacity.clone().unwrap_or_default().isolation).collect();
    if modes.iter().any(|m| m == "process-group") {
        let why = c.worker_log(0).lines().find(|l| l.contains("no cgroup could be made")).unwrap_or("").to_string();
        let _ = writeln!(std::io::stderr(), "SKIPPED {test}: the workers could make no cgroup here ({why})");
        return false;
    }
    true
}

/// Gone, or a zombie (an init that does not reap leaves dead orphans as zombies).
fn process_gone(pid: i32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Err(_) => true,
        Ok(stat) => stat.rsplit_once(')').is_some_and(|(_, rest)| rest.trim_start().starts_with('Z')),
    }
}

fn read_pid(file: &Path) -> Option<i32> {
    std::fs::read_to_string(file).ok()?.trim().parse().ok()
}

fn wait_pid(c: &Cluster, file: &Path) -> i32 {
    c.wait_for(&format!("a pid in {}", file.display()), Duration::from_secs(30), |_| read_pid(file))
}

fn lines(file: &Path) -> Vec<String> {
    std::fs::read_to_string(file).unwrap_or_default().lines().map(str::to_string).collect()
}

fn subtask<'a>(j: &'a pb::JobStatus, task: &str, rank: u32) -> &'a pb::SubtaskStatus {
    j.subtasks
        .iter()
        .find(|s| s.task == task && s.rank == rank)
        .unwrap_or_else(|| panic!("no subtask {task}/{rank} in {j:?}"))
}

/// Kills (SIGKILL) a test's stray process if it is still there, so a failed test leaves nothing.
struct Reap(Vec<PathBuf>);

impl Drop for Reap {
    fn drop(&mut self) {
        for f in &self.0 {
            if let Some(pid) = read_pid(f).filter(|&p| p > 1 && !process_gone(p)) {
                // SAFETY: kill(2); the pid is one our test's task wrote.
                unsafe { libc::kill(pid, libc::SIGKILL) };
            }
        }
    }
}

/// The parent of `pid`, from `/proc/PID/stat` (the field after the command's closing paren).
fn parent_of(pid: i32) -> Option<i32> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    stat.rsplit_once(')')?.1.split_whitespace().nth(1)?.parse().ok()
}

/// `kill -9` a worker *and its attempt's supervisor* in the middle of a task (as a machine-wide
/// kill would): the task's shell dies with its supervisor, but a background process it started
/// is left in the attempt's cgroup with nobody to kill it. The task runs again elsewhere
/// (attempt 2); the worker comes back on the same data dir, and the leftover must be dead within
/// a heartbeat timeout of the restart (before: it ran on, reparented to init). A worker killed
/// alone takes its attempts with it (its supervisors kill them: `e2e/tests/fencing.rs`).
#[test]
fn a_killed_workers_task_dies_when_the_worker_restarts_and_its_work_is_done_once() {
    let mut c = Cluster::start(ClusterConfig { workers: 2, ..Default::default() });
    let test = "a_killed_workers_task_dies_when_the_worker_restarts_and_its_work_is_done_once";
    if !cgroups_or_skip(&c, test) {
        return;
    }
    let (marks, leader, bg) = (c.path("marks"), c.path("leader.pid"), c.path("bg.pid"));
    let _reap = Reap(vec![leader.clone(), bg.clone()]);
    // Attempt 1 records its shell and a background sleep, and would mark "late" when its sleep
    // ends; any later attempt just marks its start.
    let script = format!(
        "echo \"start $PLEXUS_ATTEMPT\" >> {m}; if [ \"$PLEXUS_ATTEMPT\" = 1 ]; then echo $$ > {l}; sleep 12 & echo $! > {b}; wait; echo \"late $PLEXUS_ATTEMPT\" >> {m}; fi",
        m = marks.display(),
        l = leader.display(),
        b = bg.display()
    );
    let src = format!("[[task]]\nname = \"long\"\ncommand = {script:?}\ncpu = 0.5\n");
    let job = c.submit("long.toml", &src);
    let (leader_pid, bg_pid) = (wait_pid(&c, &leader), wait_pid(&c, &bg));
    let holder = c.job(&job).map(|j| subtask(&j, "long", 0).worker_id.clone()).unwrap();
    let i = c.worker_index(&holder).expect("the worker running attempt 1");
    let shim = parent_of(leader_pid).expect("the task's shell has a parent");
    assert_ne!(Some(shim as u32), c.launcher().worker_pid(i), "the shell's parent is its supervisor");
    // SAFETY: kill(2) of the supervisor our worker started for this attempt.
    assert_eq!(unsafe { libc::kill(shim, libc::SIGKILL) }, 0, "killing the supervisor {shim}");
    c.kill_worker(i);
    // Attempt 2 runs on the other worker once the coordinator has declared this one lost.
    let status = c.wait_job(&job, Duration::from_secs(60));
    assert_eq!(status.state, SUCCEEDED, "{status:?}");
    assert_eq!(subtask(&status, "long", 0).attempt, 2);
    assert!(process_gone(leader_pid), "the shell died with its supervisor");
    assert!(!process_gone(bg_pid), "the test needs attempt 1's leftover still running when its worker comes back");

    let restarted = Instant::now();
    c.start_worker(i);
    let timeout = Duration::from_millis(c.config.heartbeat_timeout_ms);
    c.wait_for("attempt 1's leftover to be killed by its restarted worker", timeout, |_| {
        process_gone(bg_pid).then_some(())
    });
    assert!(restarted.elapsed() <= timeout);
    c.wait_workers_alive(2);

    // Attempt 1 never got to mark "late": only its shell could, and it is gone.
    assert_eq!(lines(&marks), ["start 1", "start 2"]);
    let log = c.worker_log(i);
    assert!(log.contains("killed processes that a previous worker process on this data dir left running"), "{log}");
}

/// A task that starts a daemon (`setsid`: a session and process group of its own) and is then
/// cancelled: the daemon dies with it (before: killing the task's process group missed it).
#[test]
fn a_daemon_started_by_a_task_dies_when_its_job_is_cancelled() {
    let c = Cluster::start(ClusterConfig { workers: 1, ..Default::default() });
    if !cgroups_or_skip(&c, "a_daemon_started_by_a_task_dies_when_its_job_is_cancelled") {
        return;
    }
    let daemon_file = c.path("daemon.pid");
    let _reap = Reap(vec![daemon_file.clone()]);
    let script = format!("setsid sh -c 'echo $$ > {}; exec sleep 60' & exec sleep 60", daemon_file.display());
    let job = c.submit("daemon.toml", &format!("[[task]]\nname = \"d\"\ncommand = {script:?}\ncpu = 0.5\n"));
    let daemon = wait_pid(&c, &daemon_file);
    let out = c.plexus(&["cancel", &job]);
    assert!(out.status.success(), "{}", describe(&out));
    let status = c.wait_job(&job, Duration::from_secs(30));
    assert_eq!(status.state, pb::JobState::Cancelled as i32, "{status:?}");
    c.wait_for(&format!("daemon {daemon} to die"), Duration::from_secs(5), |_| process_gone(daemon).then_some(()));
}

/// Two GPU tasks at once on a worker whose `nvidia-smi` (a fake, first on its PATH) lists two
/// devices: each sees its own device, whatever the job's env says; a task without GPUs sees
/// none. `plexus workers` shows each device with its model and load, and the isolation.
#[test]
fn gpu_tasks_see_only_their_own_devices() {
    let fake = tempfile::tempdir().unwrap();
    let smi = fake.path().join("nvidia-smi");
    std::fs::write(&smi, "#!/bin/sh\nprintf '0, Fake GPU A, 16384, 1024, 25\\n1, Fake GPU B, 16384, 2048, 50\\n'\n")
        .unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&smi, std::fs::Permissions::from_mode(0o755)).unwrap();
    let path = format!("{}:{}", fake.path().display(), std::env::var("PATH").unwrap_or_default());
    let c = Cluster::start(ClusterConfig { workers: 1, worker_env: vec![("PATH".into(), path)], ..Default::default() });

    let dir = c.task_dir("seen");
    // Each GPU replica writes what it sees, then waits for the other's file: they run together.
    let gpu = format!(
        "printf %s \"${{CUDA_VISIBLE_DEVICES-unset}}\" > {d}/g.$PLEXUS_RANK; printf %s \"$PLEXUS_GPUS\" > {d}/p.$PLEXUS_RANK; \
         n=0; while [ ! -e {d}/g.0 ] || [ ! -e {d}/g.1 ]; do n=$((n+1)); [ $n -gt 400 ] && exit 1; sleep 0.05; done",
        d = dir.display()
    );
    let plain = format!("printf %s \"${{CUDA_VISIBLE_DEVICES-unset}}\" > {d}/n", d = dir.display());
    let src = format!(
        "[[task]]\nname = \"g\"\ncommand = {gpu:?}\nreplicas = 2\ngpu = 1\ncpu = 0.5\nenv = {{ CUDA_VISIBLE_DEVICES = \"0,1\" }}\n\
         [[task]]\nname = \"n\"\ncommand = {plain:?}\ncpu = 0.5\n"
    );
    let job = c.submit("gpus.toml", &src);
    let status = c.wait_job(&job, Duration::from_secs(60));
    assert_eq!(status.state, SUCCEEDED, "{status:?}");
    let seen = |f: &str| std::fs::read_to_string(dir.join(f)).unwrap();
    let mut devices = [seen("g.0"), seen("g.1")];
    devices.sort();
    assert_eq!(devices, ["0", "1"], "each GPU task sees its own device");
    assert_eq!((seen("p.0"), seen("p.1")), (seen("g.0"), seen("g.1")), "PLEXUS_GPUS names the same device");
    assert_eq!(seen("n"), "", "a task without GPUs sees none");

    let out = c.plexus(&["workers", "-o", "json"]);
    assert!(out.status.success(), "{}", describe(&out));
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let w = &v["workers"][0];
    assert_eq!(w["gpus"][0]["name"], "Fake GPU A", "{w}");
    assert_eq!(w["gpus"][1]["memory_bytes"], 16384u64 << 20, "{w}");
    assert_eq!(w["gpus"][1]["utilisation"], 0.5, "the heartbeat carries each device's load: {w}");
    assert_eq!(w["gpus"][1]["memory_used_bytes"], 2048u64 << 20, "{w}");
    assert!(["cgroup-v2", "cgroup-v1", "process-group"].contains(&w["isolation"].as_str().unwrap_or("")), "{w}");
    let table = c.plexus(&["workers"]);
    let text = String::from_utf8_lossy(&table.stdout);
    assert!(text.contains("ISOLATION") && text.contains("Fake GPU B") && text.contains("50%"), "{text}");
}

/// A task whose memory request is 64 MiB allocates 256 MiB: the kernel kills it and the report
/// says so; the task beside it and the worker carry on (before: it simply succeeded).
#[test]
fn a_task_over_its_memory_is_killed_and_reported_out_of_memory() {
    let c = Cluster::start(ClusterConfig { workers: 1, ..Default::default() });
    if !cgroups_or_skip(&c, "a_task_over_its_memory_is_killed_and_reported_out_of_memory") {
        return;
    }
    // tail keeps a line until its end, and /dev/zero has no newline: 256 MiB in tail.
    let src = "[[task]]\nname = \"hog\"\ncommand = \"head -c 256M /dev/zero | tail > /dev/null\"\nmemory = \"64MiB\"\ncpu = 0.5\non_failure = \"continue\"\n\
               [[task]]\nname = \"calm\"\ncommand = \"sleep 1; head -c 16M /dev/zero | tail > /dev/null; sleep 1\"\nmemory = \"64MiB\"\ncpu = 0.5\n";
    let job = c.submit("hog.toml", src);
    let status = c.wait_job(&job, Duration::from_secs(60));
    let hog = subtask(&status, "hog", 0);
    assert_eq!(hog.state, pb::SubtaskState::Failed as i32, "{status:?}");
    assert_eq!(hog.error, "killed: out of memory (limit 64.0 MiB)");
    assert_eq!(subtask(&status, "calm", 0).state, pb::SubtaskState::Succeeded as i32, "{status:?}");
    assert_eq!(status.state, pb::JobState::CompletedWithFailures as i32);
    // The worker is unharmed: alive, and running the next job.
    let next = c.submit("next.toml", "[[task]]\nname = \"t\"\ncommand = \"true\"\n");
    assert_eq!(c.wait_job(&next, Duration::from_secs(30)).state, SUCCEEDED);
    assert!(c.workers().unwrap().iter().all(|w| w.alive));
}

/// Two worker processes on one data dir would share an id and evict each other: the second
/// refuses to start, naming the dir; the first carries on.
#[test]
fn a_second_worker_on_the_same_data_dir_refuses_to_start() {
    let c = Cluster::start(ClusterConfig { workers: 1, ..Default::default() });
    let dir = c.worker_dir(0);
    let id = c.worker_id(0);
    let mut second = std::process::Command::new(c.bin.join("plexus-worker"))
        .args(["--coordinator", &c.url, "--data-dir"])
        .arg(&dir)
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("spawning a second plexus-worker");
    // It must refuse the data dir and end; if it has not within the limit it is killed, and the
    // test fails with its log.
    let ended = wait::within(Duration::from_secs(15), || second.try_wait().unwrap());
    if ended.is_none() {
        let _ = second.kill();
        let _ = second.wait();
    }
    let mut stderr = String::new();
    std::io::Read::read_to_string(second.stderr.as_mut().unwrap(), &mut stderr).unwrap();
    let status = ended.unwrap_or_else(|| panic!("the second worker kept running; its log:\n{stderr}"));
    assert!(!status.success());
    assert!(stderr.contains("another worker process") && stderr.contains(&dir.display().to_string()), "{stderr}");
    // The first is untouched: same id, alive, the only worker.
    let workers = c.workers().unwrap();
    assert_eq!(workers.len(), 1);
    assert!(workers[0].alive && workers[0].worker_id == id);
    let job = c.submit("after.toml", "[[task]]\nname = \"t\"\ncommand = \"true\"\n");
    assert_eq!(c.wait_job(&job, Duration::from_secs(30)).state, SUCCEEDED);
}

/// `cpu = 0` tasks take no core, so a worker's `--max-attempts` is what bounds how many run at
/// once: the coordinator places within it (a ledger the tasks write shows at most 2 running).
#[test]
fn a_worker_runs_at_most_max_attempts_at_once() {
    let c = Cluster::start(ClusterConfig {
        workers: 1,
        cpus_per_worker: 2,
        worker_args: vec!["--max-attempts".into(), "2".into()],
        ..ClusterConfig::default()
    });
    let dir = tempfile::tempdir().unwrap();
    let ledger = dir.path().join("ledger");
    std::fs::write(&ledger, "").unwrap();
    // Writable by whatever user the worker runs tasks as.
    std::fs::set_permissions(dir.path(), std::os::unix::fs::PermissionsExt::from_mode(0o777)).unwrap();
    std::fs::set_permissions(&ledger, std::os::unix::fs::PermissionsExt::from_mode(0o666)).unwrap();
    let job = c.submit(
        "sleepers.toml",
        &format!(
            "name = \"sleepers\"\n[[task]]\nname = \"s\"\nreplicas = 8\ncpu = 0\ncommand = \"echo start >> {l}; sleep 0.5; echo end >> {l}\"\n",
            l = ledger.display()
        ),
    );
    let st = c.wait_job(&job, Duration::from_secs(120));
    assert_eq!(st.state, SUCCEEDED, "{st:?}");
    let (mut running, mut most) = (0i32, 0i32);
    for line in lines(&ledger) {
        running += if line == "start" { 1 } else { -1 };
        most = most.max(running);
    }
    assert_eq!(lines(&ledger).len(), 16, "every sleeper ran once");
    assert_eq!(most, 2, "at most --max-attempts (2) ran at once, and that many did");
    let workers = c.workers().unwrap();
    assert_eq!(workers[0].capacity.as_ref().map(|c| c.max_attempts), Some(2), "reported at registration");
}

/// The object cache's bound holds: an output larger than the whole cache fails its attempt
/// with an error naming the sizes, instead of being kept past the bound.
#[test]
fn an_output_larger_than_the_cache_fails_its_attempt_naming_the_sizes() {
    let c = Cluster::start(ClusterConfig { workers: 1, cache: "1MiB".into(), ..ClusterConfig::default() });
    let job = c.submit(
        "big.toml",
        "name = \"big\"\n[[task]]\nname = \"t\"\noutputs = [\"o\"]\ncommand = \"head -c 2097152 /dev/zero > $PLEXUS_OUT/o\"\n",
    );
    let st = c.wait_job(&job, Duration::from_secs(60));
    assert_eq!(st.state, pb::JobState::Failed as i32, "{st:?}");
    let error = &subtask(&st, "t", 0).error;
    assert!(error.contains("is 2.0 MiB and this worker's object cache holds at most 1.0 MiB (--cache)"), "{error}");
    let cached: u64 = walk(&c.worker_dir(0).join("cache")).iter().map(|p| p.metadata().map_or(0, |m| m.len())).sum();
    assert!(cached <= 1 << 20, "the cache holds {cached} bytes");
}

/// Every file under `dir`.
fn walk(dir: &Path) -> Vec<PathBuf> {
    let mut files = Vec::new();
    for e in std::fs::read_dir(dir).into_iter().flatten().flatten() {
        let p = e.path();
        if p.is_dir() { files.extend(walk(&p)) } else { files.push(p) }
    }
    files
}

/// Issue 32, item 4: `constraints` choose workers by their `--label`s, with real workers. Of an
/// unlabelled worker and two in racks r1 and r2, `rack = "r1"` runs every replica on the r1
/// worker and `rack = "!=r1"` on the others; a rack no worker is in waits, and `plexus status`
/// says why; a label no worker has ever carried is refused at submit, naming it.
#[test]
fn constraints_place_tasks_by_worker_labels() {
    let mut c = Cluster::start(ClusterConfig { workers: 1, ..Default::default() });
    for rack in ["r1", "r2"] {
        let launch = plexus_launch::WorkerLaunch {
            args: vec!["--label".into(), format!("rack={rack}").into()],
            ..Default::default()
        };
        c.launcher().add_worker_with(&launch).expect("a labelled worker");
    }
    c.wait_workers_alive(3);
    let job = |constraints: &str| {
        format!("[[task]]\nname = \"t\"\ncommand = \"true\"\ncpu = 0\nreplicas = 4\nconstraints = {constraints}\n")
    };
    let ran_on = |c: &Cluster, id: &str| {
        let j = c.wait_job(id, Duration::from_secs(60));
        assert_eq!(j.state, SUCCEEDED, "{j:?}");
        let mut w: Vec<String> = j.subtasks.iter().map(|s| s.worker_id.clone()).collect();
        w.sort();
        w.dedup();
        w
    };
    let id = c.submit("r1.toml", &job("{ rack = \"r1\" }"));
    assert_eq!(ran_on(&c, &id), vec![c.worker_id(1)]);
    let id = c.submit("not-r1.toml", &job("{ rack = \"!=r1\" }"));
    let mut others = [c.worker_id(0), c.worker_id(2)];
    others.sort();
    assert!(ran_on(&c, &id).iter().all(|w| others.contains(w)));

    let id = c.submit("r9.toml", &job("{ rack = \"r9\" }"));
    let why = c.wait_for("the waiting reason", Duration::from_secs(30), |c| {
        let g = c.job_summary(&id)?.groups.into_iter().find(|g| g.task == "t")?;
        (!g.waiting_reason.is_empty()).then_some(g.waiting_reason)
    });
    assert!(why.contains("requires rack=r9: none of the 3 live worker(s) meets it"), "{why}");
    assert!(why.contains("rack: r1, r2"), "{why}");
    let out = c.plexus(&["status", &id]);
    assert!(
        String::from_utf8_lossy(&out.stdout).contains("waiting: t: task \"t\" requires rack=r9"),
        "{}",
        describe(&out)
    );
    assert!(c.plexus(&["cancel", &id]).status.success());

    let err = c.try_submit("zone.toml", &job("{ zone = \"a\" }")).expect_err("refused");
    assert!(err.message().contains("no worker has ever carried the label \"zone\""), "{}", err.message());
}

/// Issue 32, item 5: a sweep of 6 (lr × batch) runs 6 replicas, each with its own
/// `PLEXUS_PARAM_*`, shown in `plexus status --subtasks`; `plexus submit --set` changes the
/// file's values at submit (here the sweep's lists).
#[test]
fn a_sweep_gives_each_replica_its_parameters() {
    let c = Cluster::start(ClusterConfig { workers: 2, ..Default::default() });
    // One file per replica: replicas on other workers run as other uids.
    let marks = c.task_dir("sweep");
    let seen = |dir: &Path| {
        let mut all: Vec<String> = std::fs::read_dir(dir).unwrap().flat_map(|e| lines(&e.unwrap().path())).collect();
        all.sort();
        all
    };
    let file = c.path("sweep.toml");
    std::fs::write(
        &file,
        format!(
            "[[task]]\nname = \"train\"\ncpu = 0\nsweep = {{ lr = [0.1, 0.3, 1.0], batch = [32, 64] }}\n\
             command = \"echo $PLEXUS_RANK $PLEXUS_PARAM_BATCH $PLEXUS_PARAM_LR > {}/$PLEXUS_RANK\"\n",
            marks.display()
        ),
    )
    .unwrap();
    let out = c.plexus(&["submit", file.to_str().unwrap()]);
    assert!(out.status.success(), "{}", describe(&out));
    let id = String::from_utf8_lossy(&out.stdout).trim().to_string();
    let j = c.wait_job(&id, Duration::from_secs(60));
    assert_eq!(j.state, SUCCEEDED, "{j:?}");
    let want: Vec<String> =
        ["0 32 0.1", "1 32 0.3", "2 32 1.0", "3 64 0.1", "4 64 0.3", "5 64 1.0"].map(String::from).into();
    assert_eq!(seen(&marks), want, "every combination, once, by rank");
    let status = c.plexus(&["status", &id, "--subtasks"]);
    let text = String::from_utf8_lossy(&status.stdout);
    assert!(text.contains("PARAMS") && text.contains("batch=64 lr=0.3"), "{}", describe(&status));

    for e in std::fs::read_dir(&marks).unwrap() {
        std::fs::remove_file(e.unwrap().path()).unwrap();
    }
    let out = c.plexus(&[
        "submit",
        file.to_str().unwrap(),
        "--set",
        "task.train.sweep.lr=[0.5]",
        "--set",
        "task.train.sweep.batch=[8]",
    ]);
    assert!(out.status.success(), "{}", describe(&out));
    let id = String::from_utf8_lossy(&out.stdout).trim().to_string();
    assert_eq!(c.wait_job(&id, Duration::from_secs(60)).state, SUCCEEDED);
    assert_eq!(seen(&marks), vec!["0 8 0.5".to_string()], "one replica with the values set at submit");
    let bad = c.plexus(&["submit", file.to_str().unwrap(), "--set", "task.nope.replicas=2"]);
    assert!(
        !bad.status.success() && String::from_utf8_lossy(&bad.stderr).contains("no task named \"nope\""),
        "{}",
        describe(&bad)
    );
}
