//! The runner's tests: assignments validated, commands run, inputs fetched, collectives reduced.

use std::path::Path;
use std::time::Duration;

use plexus_proto::ObjectId;
use tokio::time::Instant;

use super::*;
use crate::isolation::{Choice, Mode};
use crate::peer;
use plexus_proto::JobId;
use std::collections::HashMap;

struct Fixture {
    _dir: tempfile::TempDir,
    layout: Layout,
    cache: Cache,
    attempts: Arc<Attempts>,
    runner: Runner,
    tracker: TaskTracker,
    rails: Arc<plexus_dataplane::Endpoint>,
}

/// A runner whose commands run as bare process groups (no cgroups needed).
async fn fixture() -> Fixture {
    fixture_with(Choice::Only(Mode::ProcessGroup), NodeGpus::default()).await.0
}

/// A runner with the given isolation and GPUs; the isolation is returned too, to close it.
async fn fixture_with(choice: Choice, gpus: NodeGpus) -> (Fixture, Arc<Isolation>) {
    let dir = tempfile::tempdir().unwrap();
    let layout = Layout::new(dir.path());
    std::fs::create_dir_all(layout.tmp_dir()).unwrap();
    let cache = Cache::open(layout.cache_dir(), 1 << 30).unwrap();
    let attempts = Attempts::new(CancellationToken::new());
    let tracker = TaskTracker::new();
    let rails = endpoint().await;
    // A worker name of its own per fixture, so tests running side by side never share cgroups.
    let name = format!("test-{}", uuid::Uuid::new_v4());
    let isolation = Arc::new(Isolation::setup(choice, &name, layout.pid_records_dir()).unwrap());
    let runner = Runner::new(
        layout.clone(),
        cache.clone(),
        attempts.clone(),
        tracker.clone(),
        rails.clone(),
        isolation.clone(),
        gpus,
    );
    (Fixture { _dir: dir, layout, cache, attempts, runner, tracker, rails }, isolation)
}

/// A data-plane endpoint on one loopback rail.
async fn endpoint() -> Arc<plexus_dataplane::Endpoint> {
    Arc::new(plexus_dataplane::Endpoint::bind(Default::default()).await.unwrap())
}

fn grpc_only(url: &str) -> peer::Source {
    peer::Source { worker: String::new(), peer_addr: url.into(), rails: vec![] }
}

fn attempt(job: JobId, task: &str) -> AttemptRef {
    AttemptRef { job, task: task.into(), rank: 2, attempt: 1 }
}

fn sh(script: &str) -> Vec<String> {
    vec!["sh".into(), "-c".into(), script.into()]
}

fn work(a: &AttemptRef, argv: Vec<String>) -> Work {
    Work {
        attempt: a.clone(),
        replicas: 4,
        argv,
        collective: None,
        timeout: None,
        inputs: Vec::new(),
        outputs: Vec::new(),
        env: Vec::new(),
        cpu: 1.0,
        memory: 0,
        gpus: Vec::new(),
        gang: None,
        params: Vec::new(),
        checkpoint: None,
        resume: None,
        working_dir: None,
        python: Vec::new(),
        image: None,
    }
}

fn state(r: &pb::TaskReport) -> pb::SubtaskState {
    pb::SubtaskState::try_from(r.state).unwrap()
}

/// Whether a process is gone (a zombie waiting for a non-reaping init counts as gone).
fn process_gone(pid: i32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Err(_) => true,
        Ok(stat) => stat.rsplit_once(')').is_some_and(|(_, rest)| rest.trim_start().starts_with('Z')),
    }
}

#[tokio::test]
async fn commands_see_their_environment_and_outputs_go_to_the_cache() {
    let f = fixture().await;
    let a = attempt(JobId::random(), "gen");
    let mut w = work(
        &a,
        sh(r#"
        printf '%s %s %s %s %s %s' "$PLEXUS_JOB" "$PLEXUS_TASK" "$PLEXUS_RANK" "$PLEXUS_REPLICAS" "$PLEXUS_ATTEMPT" "$EXTRA" > "$PLEXUS_OUT/env"
        [ -d "$PLEXUS_IN" ] && [ -d ./in ] && [ -d ./out ] && printf ok > "$PLEXUS_OUT/checks"
        echo to-stdout; echo to-stderr >&2
    "#),
    );
    w.outputs = vec!["env".into(), "checks".into()];
    w.env = vec![("EXTRA".into(), "x y".into()), ("PLEXUS_RANK".into(), "overridden?".into())];
    let r = f.runner.run(&w, &CancellationToken::new()).await;
    assert_eq!(state(&r), pb::SubtaskState::Succeeded, "{}", r.error);
    assert_eq!(r.exit_code, 0);
    assert!(r.started_at > 0 && r.finished_at >= r.started_at);
    assert_eq!(r.stdout_tail, b"to-stdout\n");
    assert_eq!(r.stderr_tail, b"to-stderr\n");
    let expected = format!("{} gen 2 4 1 x y", a.job);
    let env_id = ObjectId { job: a.job, task: "gen".into(), rank: 2, name: "env".into() };
    // Each output's digest is made when the attempt completes.
    let digest = plexus_proto::Digest::of(expected.as_bytes()).to_vec();
    assert_eq!(r.outputs[0], pb::ObjectInfo { object_id: env_id.to_string(), size: expected.len() as u64, digest });
    assert_eq!(std::fs::read_to_string(f.cache.path(&env_id)).unwrap(), expected);
    assert_eq!(r.outputs[1].size, 2, "the work dir checks passed");
    // The RUNNING report went out first; the work dir is gone, the logs stay.
    let batch = f.attempts.take_batch().unwrap();
    assert_eq!(batch.messages()[0].state, pb::SubtaskState::Running as i32);
    assert!(!f.layout.work_dir(&a).exists());
    let (out, _) = f.layout.log_files(&a);
    assert_eq!(std::fs::read(out).unwrap(), b"to-stdout\n");
}

#[tokio::test]
async fn failures_are_reported_with_their_cause() {
    let f = fixture().await;
    let job = JobId::random();
    let cancel = CancellationToken::new();

    let r = f.runner.run(&work(&attempt(job, "a"), sh("echo bad >&2; exit 3")), &cancel).await;
    assert_eq!((state(&r), r.exit_code, r.error.as_str()), (pb::SubtaskState::Failed, 3, "exit code 3"));
    assert_eq!(r.stderr_tail, b"bad\n");

    let r = f.runner.run(&work(&attempt(job, "b"), sh("kill -9 $$")), &cancel).await;
    assert_eq!((state(&r), r.exit_code, r.error.as_str()), (pb::SubtaskState::Failed, 137, "killed by signal 9"));

    let mut w = work(&attempt(job, "c"), sh("touch \"$PLEXUS_OUT/one\""));
    w.outputs = vec!["one".into(), "two".into()];
    let r = f.runner.run(&w, &cancel).await;
    assert_eq!(state(&r), pb::SubtaskState::Failed);
    assert_eq!(r.error, "declared output \"two\" was not written");
    let one = ObjectId { job, task: "c".into(), rank: 2, name: "one".into() };
    assert!(!f.cache.contains(&one), "a failed attempt caches nothing");

    let mut w = work(&attempt(job, "d"), sh("ln -s /etc/passwd \"$PLEXUS_OUT/link\""));
    w.outputs = vec!["link".into()];
    let r = f.runner.run(&w, &cancel).await;
    assert_eq!(r.error, "declared output \"link\" is not a regular file");

    let r = f.runner.run(&work(&attempt(job, "e"), vec!["/no/such/program".into()]), &cancel).await;
    assert_eq!((state(&r), r.exit_code), (pb::SubtaskState::Failed, NO_EXIT_CODE));
    assert!(r.error.starts_with("could not start \"/no/such/program\": "), "{}", r.error);
    assert!(r.error.contains("No such file"), "{}", r.error);
}

/// A failed attempt's `checkpoint` output is kept in the cache under its attempt's name and
/// reported; the next attempt, given it as `resume`, reads it at `$PLEXUS_RESUME_FROM`. One that
/// wrote none, or a success, keeps nothing of the kind.
#[tokio::test]
async fn a_failed_attempts_checkpoint_is_kept_and_the_next_resumes_from_it() {
    let f = fixture().await;
    let job = JobId::random();
    let cancel = CancellationToken::new();
    let first = AttemptRef { job, task: "train".into(), rank: 1, attempt: 1 };
    let mut w = work(
        &first,
        sh(
            "printf 'step 7' > \"$PLEXUS_CHECKPOINT.tmp\"; mv \"$PLEXUS_CHECKPOINT.tmp\" \"$PLEXUS_CHECKPOINT\"; exit 3",
        ),
    );
    w.outputs = vec!["ckpt".into()];
    w.checkpoint = Some("ckpt".into());
    let r = f.runner.run(&w, &cancel).await;
    assert_eq!(state(&r), pb::SubtaskState::Failed);
    let kept = ObjectId { job, task: "train".into(), rank: 1, name: "ckpt.attempt-1".into() };
    let info = r.checkpoint.expect("the checkpoint is kept");
    assert_eq!(info.object_id, kept.to_string());
    assert_eq!(info.digest, plexus_proto::Digest::of(b"step 7").to_vec());
    assert_eq!(std::fs::read(f.cache.path(&kept)).unwrap(), b"step 7");

    let second = AttemptRef { attempt: 2, ..first.clone() };
    let mut w = work(
        &second,
        sh("cat \"$PLEXUS_RESUME_FROM\" > \"$PLEXUS_CHECKPOINT\"; echo ' resumed' >> \"$PLEXUS_CHECKPOINT\""),
    );
    w.outputs = vec!["ckpt".into()];
    w.checkpoint = Some("ckpt".into());
    w.resume = Some(Input {
        id: kept.clone(),
        task: "train".into(),
        rank: 1,
        name: kept.name.clone(),
        holders: vec![],
        size: info.size,
        digest: plexus_proto::Digest::from_field("d", &info.digest).unwrap(),
    });
    let r = f.runner.run(&w, &cancel).await;
    assert_eq!(state(&r), pb::SubtaskState::Succeeded, "{}", r.error);
    assert!(r.checkpoint.is_none(), "a success keeps no checkpoint of its own");
    let out = ObjectId { job, task: "train".into(), rank: 1, name: "ckpt".into() };
    assert_eq!(std::fs::read_to_string(f.cache.path(&out)).unwrap(), "step 7 resumed\n");

    // Nothing written yet: nothing kept. A resume no holder can serve: the attempt runs without.
    let third = AttemptRef { attempt: 3, ..first.clone() };
    let mut w = work(&third, sh("[ -z \"$PLEXUS_RESUME_FROM\" ] || exit 9; exit 4"));
    w.outputs = vec!["ckpt".into()];
    w.checkpoint = Some("ckpt".into());
    let gone = ObjectId { name: "ckpt.attempt-9".into(), ..out.clone() };
    w.resume = Some(Input {
        id: gone,
        task: "train".into(),
        rank: 1,
        name: "ckpt.attempt-9".into(),
        holders: vec![],
        size: 0,
        digest: None,
    });
    let r = f.runner.run(&w, &cancel).await;
    assert_eq!((state(&r), r.exit_code), (pb::SubtaskState::Failed, 4), "{}", r.error);
    assert!(r.checkpoint.is_none());
}

/// An assignment's `checkpoint` is one of its outputs; its `resume` is one of its inputs, a kept
/// checkpoint of an earlier attempt of the same subtask.
#[test]
fn checkpoint_and_resume_are_checked() {
    let a = AttemptRef { job: JobId::random(), task: "t".into(), rank: 0, attempt: 3 };
    let kept = |n: u32| ObjectId { job: a.job, task: "t".into(), rank: 0, name: format!("c.attempt-{n}") };
    let input = |o: &ObjectId| pb::InputObject { object_id: o.to_string(), ..Default::default() };
    let base = pb::Assignment {
        attempt: Some(pb::AttemptRef::from(&a)),
        command: sh("true"),
        outputs: vec!["c".into()],
        checkpoint: "c".into(),
        inputs: vec![input(&kept(2))],
        resume: kept(2).to_string(),
        ..Default::default()
    };
    let w = Work::from_pb(a.clone(), base.clone()).unwrap();
    assert_eq!(w.checkpoint.as_deref(), Some("c"));
    assert_eq!(w.resume.map(|r| r.id), Some(kept(2)));
    assert!(w.inputs.is_empty(), "the resume input is not an input the attempt needs");
    let err = |p: pb::Assignment| Work::from_pb(a.clone(), p).unwrap_err().to_string();
    assert!(err(pb::Assignment { checkpoint: "d".into(), ..base.clone() }).contains("checkpoint \"d\" is not one of"));
    assert!(
        err(pb::Assignment { inputs: vec![input(&kept(3))], resume: kept(3).to_string(), ..base.clone() })
            .contains("not a kept checkpoint of an earlier attempt")
    );
    assert!(err(pb::Assignment { inputs: vec![], ..base.clone() }).contains("is not one of its inputs"));
    assert!(err(pb::Assignment { checkpoint: String::new(), ..base }).contains("not a kept checkpoint"));
}

#[tokio::test]
async fn a_timeout_kills_the_whole_process_group() {
    let f = fixture().await;
    let a = attempt(JobId::random(), "slow");
    let pid_file = f.layout.root().join("bg.pid");
    let script = format!("sleep 100 & echo $! > '{}'; wait", pid_file.display());
    let mut w = work(&a, sh(&script));
    // Long enough that even a loaded machine has started the background sleep by then.
    w.timeout = Some(Duration::from_millis(1500));
    let r = f.runner.run(&w, &CancellationToken::new()).await;
    assert_eq!(state(&r), pb::SubtaskState::Failed);
    assert_eq!(r.error, "timed out after 1.5s");
    assert_eq!(r.exit_code, 128 + libc::SIGKILL);
    let bg: i32 = std::fs::read_to_string(&pid_file).unwrap().trim().parse().unwrap();
    // SIGKILL was sent to the group before we returned; wait (without a time bound that
    // matters) for the kernel to finish tearing the background sleep down.
    let mut tries = 0;
    while !process_gone(bg) && tries < 1000 {
        tokio::time::sleep(Duration::from_millis(10)).await;
        tries += 1;
    }
    assert!(process_gone(bg), "background process {bg} survived the timeout");
}

/// The timeout is measured on the runtime's clock: with the clock paused, an hour's limit is
/// reached as soon as the runtime has nothing else to do, the clock jumping to the deadline
/// while the process sleeps. (The test above keeps real time: it needs the shell to have
/// started its background process before the limit.)
#[tokio::test(start_paused = true)]
async fn a_timeout_is_measured_on_the_runtime_clock() {
    let f = fixture().await;
    let mut w = work(&attempt(JobId::random(), "hour"), vec!["sleep".into(), "100000".into()]);
    w.timeout = Some(Duration::from_secs(3600));
    let started = Instant::now();
    let r = f.runner.run(&w, &CancellationToken::new()).await;
    assert_eq!(state(&r), pb::SubtaskState::Failed);
    assert_eq!(r.error, "timed out after 3600s");
    assert_eq!(r.exit_code, 128 + libc::SIGKILL);
    assert!(started.elapsed() >= Duration::from_secs(3600), "the limit was waited for on the runtime's clock");
}

#[test]
fn env_keys_are_checked_with_the_shared_rule() {
    let a = attempt(JobId::random(), "env");
    let base = pb::Assignment { attempt: Some(pb::AttemptRef::from(&a)), command: sh("true"), ..Default::default() };
    let with_key = |k: &str| pb::Assignment { env: HashMap::from([(k.to_string(), "v".to_string())]), ..base.clone() };
    assert!(Work::from_pb(a.clone(), with_key("OMP_NUM_THREADS")).is_ok());
    for (key, text) in [
        ("PLEXUS_OUT", "invalid assignment: env key \"PLEXUS_OUT\" is reserved (PLEXUS_* are set by the worker)"),
        ("A=B", "invalid assignment: env key \"A=B\" is not a valid variable name"),
        ("", "invalid assignment: env key \"\" is not a valid variable name"),
    ] {
        assert_eq!(Work::from_pb(a.clone(), with_key(key)).unwrap_err().to_string(), text);
    }
}

/// Sweep parameters from the network are checked like env keys, and reach the task as
/// `PLEXUS_PARAM_<KEY>`.
#[tokio::test]
async fn sweep_params_are_checked_and_reach_the_task() {
    let a = attempt(JobId::random(), "sweep");
    let base = pb::Assignment { attempt: Some(pb::AttemptRef::from(&a)), command: sh("true"), ..Default::default() };
    let with =
        |k: &str, v: &str| pb::Assignment { params: HashMap::from([(k.to_string(), v.to_string())]), ..base.clone() };
    for (k, v, text) in [
        ("l-r", "1", "sweep parameter key \"l-r\" is not a valid name"),
        ("PATH=x", "1", "is not a valid name"),
        ("lr", "a\0b", "a value over 256 bytes or holding a NUL"),
        ("lr", &"x".repeat(300), "a value over 256 bytes"),
    ] {
        let e = Work::from_pb(a.clone(), with(k, v)).unwrap_err().to_string();
        assert!(e.contains(text), "{k}: {e}");
    }
    let many: HashMap<String, String> = (0..17).map(|i| (format!("k{i}"), "v".to_string())).collect();
    let e = Work::from_pb(a.clone(), pb::Assignment { params: many, ..base.clone() }).unwrap_err().to_string();
    assert!(e.contains("17 sweep parameters: at most 16"), "{e}");

    let f = fixture().await;
    let out = f.layout.root().join("params");
    let mut w = work(
        &a,
        sh(&format!("printf '%s %s' \"$PLEXUS_PARAM_LR\" \"$PLEXUS_PARAM_BATCH_SIZE\" > '{}'", out.display())),
    );
    w.params = vec![("batch_size".into(), "64".into()), ("lr".into(), "0.3".into())];
    let r = f.runner.run(&w, &CancellationToken::new()).await;
    assert_eq!(state(&r), pb::SubtaskState::Succeeded, "{}", r.error);
    assert_eq!(std::fs::read_to_string(&out).unwrap(), "0.3 64");
}

#[tokio::test]
async fn background_processes_do_not_outlive_a_successful_attempt() {
    let f = fixture().await;
    let a = attempt(JobId::random(), "leaky");
    let pid_file = f.layout.root().join("bg.pid");
    let script = format!("sleep 100 & echo $! > '{}'", pid_file.display());
    let r = f.runner.run(&work(&a, sh(&script)), &CancellationToken::new()).await;
    assert_eq!(state(&r), pb::SubtaskState::Succeeded, "{}", r.error);
    let bg: i32 = std::fs::read_to_string(&pid_file).unwrap().trim().parse().unwrap();
    let mut tries = 0;
    while !process_gone(bg) && tries < 1000 {
        tokio::time::sleep(Duration::from_millis(10)).await;
        tries += 1;
    }
    assert!(process_gone(bg), "background process {bg} survived its attempt");
}

#[tokio::test]
async fn cancel_through_the_runner_kills_and_reports_cancelled() {
    let f = fixture().await;
    let a = attempt(JobId::random(), "long");
    let pid_file = f.layout.root().join("pid");
    let assignment = pb::Assignment {
        attempt: Some(pb::AttemptRef::from(&a)),
        replicas: 1,
        command: sh(&format!("echo $$ > '{}'; exec sleep 100", pid_file.display())),
        ..Default::default()
    };
    f.runner.assign(assignment.clone());
    // Wait for RUNNING, which comes right before the spawn.
    let mut seen = Vec::new();
    while !seen.iter().any(|r: &pb::TaskReport| r.state == pb::SubtaskState::Running as i32) {
        f.attempts.reports_ready().await;
        let batch = f.attempts.take_batch().unwrap();
        seen.extend(batch.messages());
        batch.ack();
    }
    assert_eq!(f.attempts.running().len(), 1);
    // A duplicate assignment of the same attempt is ignored.
    f.runner.assign(assignment);
    f.runner.cancel(&pb::AttemptRef::from(&a));
    f.tracker.close();
    f.tracker.wait().await;
    let batch = f.attempts.take_batch().unwrap();
    let msgs = batch.messages();
    assert_eq!(msgs.len(), 1, "{msgs:?}");
    assert_eq!(state(&msgs[0]), pb::SubtaskState::Cancelled);
    assert_eq!(msgs[0].error, "cancelled by the coordinator");
    assert!(f.attempts.running().is_empty());
    // The cancel may land before the shell has written its pid (the file is created empty by
    // the redirection first); check the process only when the pid was written.
    if let Ok(pid) = std::fs::read_to_string(&pid_file)
        && let Ok(pid) = pid.trim().parse()
    {
        assert!(process_gone(pid));
    }
}

fn env_of(work: &Work, gpus: &NodeGpus) -> HashMap<String, String> {
    let env = task_env(work, gpus, Path::new("/w/in"), Path::new("/w/out"));
    let map: HashMap<String, String> = env.iter().cloned().collect();
    assert_eq!(map.len(), env.len(), "each key once: {env:?}");
    map
}

#[test]
fn thread_counts_follow_the_cpu_request_unless_the_job_sets_them() {
    let a = attempt(JobId::random(), "env");
    let mut w = work(&a, sh("true"));
    for (cpu, threads) in [(0.0, "1"), (0.5, "1"), (1.0, "1"), (2.5, "3"), (8.0, "8")] {
        w.cpu = cpu;
        let env = env_of(&w, &NodeGpus::default());
        assert_eq!((env["OMP_NUM_THREADS"].as_str(), env["MKL_NUM_THREADS"].as_str()), (threads, threads), "cpu {cpu}");
    }
    w.env = vec![("OMP_NUM_THREADS".into(), "16".into()), ("OTHER".into(), "x".into())];
    let env = env_of(&w, &NodeGpus::default());
    assert_eq!(
        (env["OMP_NUM_THREADS"].as_str(), env["MKL_NUM_THREADS"].as_str(), env["OTHER"].as_str()),
        ("16", "8", "x")
    );
    // The PLEXUS_* variables are the worker's, whatever the env says.
    w.env = vec![("PLEXUS_RANK".into(), "99".into())];
    let env = env_of(&w, &NodeGpus::default());
    assert_eq!(
        (env["PLEXUS_RANK"].as_str(), env["PLEXUS_OUT"].as_str(), env["PLEXUS_IN"].as_str()),
        ("2", "/w/out", "/w/in")
    );
    assert_eq!(env["PLEXUS_JOB"], a.job.to_string());
}

#[test]
fn gpus_are_exposed_as_assigned_and_hidden_otherwise() {
    let a = attempt(JobId::random(), "gpu");
    let node = NodeGpus { offered: vec![0, 1, 2, 3], present: true };
    let mut w = work(&a, sh("true"));
    w.gpus = vec![1, 3];
    // The job's own value loses: the devices are the coordinator's to give.
    w.env =
        vec![("CUDA_VISIBLE_DEVICES".into(), "0,1,2,3".into()), ("CUDA_DEVICE_ORDER".into(), "FASTEST_FIRST".into())];
    let env = env_of(&w, &node);
    assert_eq!(env["CUDA_VISIBLE_DEVICES"], "1,3");
    assert_eq!(env["PLEXUS_GPUS"], "1,3");
    assert_eq!(env["CUDA_DEVICE_ORDER"], "PCI_BUS_ID");

    // No GPUs on a node that has some: an empty list, so it can touch none.
    w.gpus = vec![];
    let env = env_of(&w, &node);
    assert_eq!((env["CUDA_VISIBLE_DEVICES"].as_str(), env["PLEXUS_GPUS"].as_str()), ("", ""));
    // A node offering none (`--gpus none`) still has devices to hide.
    let env = env_of(&w, &NodeGpus { offered: vec![], present: true });
    assert_eq!(env["CUDA_VISIBLE_DEVICES"], "");

    // A node without GPUs leaves CUDA alone (the job may set it for its own reasons).
    w.env = vec![("CUDA_VISIBLE_DEVICES".into(), "x".into())];
    let env = env_of(&w, &NodeGpus::default());
    assert_eq!(env["CUDA_VISIBLE_DEVICES"], "x");
    assert!(!env.contains_key("CUDA_DEVICE_ORDER"));
    assert_eq!(env["PLEXUS_GPUS"], "");
}

#[test]
fn gpu_assignments_are_checked() {
    let a = attempt(JobId::random(), "gpu");
    let base = pb::Assignment {
        attempt: Some(pb::AttemptRef::from(&a)),
        command: sh("true"),
        resources: Some(pb::Resources { cpu: 0.5, memory: 64 << 20, gpu: 2 }),
        gpus: vec![2, 0],
        ..Default::default()
    };
    let w = Work::from_pb(a.clone(), base.clone()).unwrap();
    assert_eq!((w.cpu, w.memory, w.gpus.clone()), (0.5, 64 << 20, vec![2, 0]));
    let node = NodeGpus { offered: vec![0, 1, 2], present: true };
    assert!(w.check_gpus(&node).is_ok());
    let e = w.check_gpus(&NodeGpus { offered: vec![0, 1], present: true }).unwrap_err().to_string();
    assert_eq!(e, "invalid assignment: GPU 2 is not one this worker offers ([0, 1])");
    let e = Work::from_pb(a.clone(), pb::Assignment { gpus: vec![0], ..base.clone() }).unwrap_err().to_string();
    assert_eq!(e, "invalid assignment: it asks for 2 GPUs but is given 1 devices ([0])");
    let e = Work::from_pb(a.clone(), pb::Assignment { gpus: vec![1, 1], ..base.clone() }).unwrap_err().to_string();
    assert_eq!(e, "invalid assignment: GPU 1 is given twice");
    let w = Work::from_pb(a.clone(), pb::Assignment { resources: None, gpus: vec![], ..base }).unwrap();
    assert_eq!((w.cpu, w.memory), (0.0, 0), "no resources: no limits");
}

/// The assignment path (`Runner::assign`) refuses GPUs the worker does not offer.
#[tokio::test]
async fn an_attempt_given_a_gpu_the_worker_lacks_fails() {
    let (f, _iso) = fixture_with(Choice::Only(Mode::ProcessGroup), NodeGpus { offered: vec![0], present: true }).await;
    let a = attempt(JobId::random(), "gpu");
    f.runner.assign(pb::Assignment {
        attempt: Some(pb::AttemptRef::from(&a)),
        command: sh("true"),
        resources: Some(pb::Resources { cpu: 1.0, memory: 0, gpu: 1 }),
        gpus: vec![5],
        ..Default::default()
    });
    let msgs = f.attempts.take_batch().unwrap().messages();
    assert_eq!(state(&msgs[0]), pb::SubtaskState::Failed);
    assert_eq!(msgs[0].error, "invalid assignment: GPU 5 is not one this worker offers ([0])");
}

/// With cgroups, a daemon (setsid, so out of the process group) dies with its attempt:
/// when the attempt is cancelled, and when it simply exits.
#[tokio::test]
async fn daemons_do_not_outlive_their_attempt() {
    let (f, iso) = fixture_with(Choice::Auto, NodeGpus::default()).await;
    let Some(_closing) = crate::isolation::tests::guard("daemons_do_not_outlive_their_attempt", &iso) else {
        return;
    };
    let job = JobId::random();
    for cancelled in [true, false] {
        let pid_file = f.layout.root().join(format!("daemon-{cancelled}"));
        let tail = if cancelled { "exec sleep 100" } else { "exit 0" };
        let script = format!(
            "setsid sh -c 'echo $$ > {}; exec sleep 100' & while [ ! -s {} ]; do sleep 0.01; done; {tail}",
            pid_file.display(),
            pid_file.display()
        );
        let w = work(&attempt(job, &format!("d{cancelled}")), sh(&script));
        let cancel = CancellationToken::new();
        let run = f.runner.run(&w, &cancel);
        let stop = async {
            let daemon = loop {
                if let Some(pid) = std::fs::read_to_string(&pid_file).ok().and_then(|t| t.trim().parse::<i32>().ok()) {
                    break pid;
                }
                tokio::time::sleep(Duration::from_millis(10)).await;
            };
            if cancelled {
                cancel.cancel();
            }
            daemon
        };
        let (r, daemon) = tokio::join!(run, stop);
        let expected = if cancelled { pb::SubtaskState::Cancelled } else { pb::SubtaskState::Succeeded };
        assert_eq!(state(&r), expected, "{}", r.error);
        assert!(
            process_gone(daemon) || {
                tokio::time::sleep(Duration::from_millis(200)).await;
                process_gone(daemon)
            },
            "daemon {daemon} survived (cancelled: {cancelled})"
        );
    }
}

/// A command over its memory limit is killed by the kernel and reported as such, not as
/// "killed by signal 9"; the same command under a larger limit succeeds.
#[tokio::test]
async fn memory_over_the_limit_is_reported_as_out_of_memory() {
    let (f, iso) = fixture_with(Choice::Auto, NodeGpus::default()).await;
    let Some(_closing) = crate::isolation::tests::guard("memory_over_the_limit_is_reported_as_out_of_memory", &iso)
    else {
        return;
    };
    let job = JobId::random();
    // tail keeps a line in memory until its end; /dev/zero has no newline.
    let mut w = work(&attempt(job, "hog"), sh("head -c 256M /dev/zero | tail > /dev/null"));
    w.memory = 64 << 20;
    let r = f.runner.run(&w, &CancellationToken::new()).await;
    assert_eq!(state(&r), pb::SubtaskState::Failed);
    assert_eq!(r.error, "killed: out of memory (limit 64.0 MiB)");
    let mut w = work(&attempt(job, "fits"), sh("head -c 16M /dev/zero | tail > /dev/null"));
    w.memory = 64 << 20;
    let r = f.runner.run(&w, &CancellationToken::new()).await;
    assert_eq!(state(&r), pb::SubtaskState::Succeeded, "{}", r.error);
    // A plain SIGKILL under a limit is still just that.
    let mut w = work(&attempt(job, "shot"), sh("kill -9 $$"));
    w.memory = 64 << 20;
    let r = f.runner.run(&w, &CancellationToken::new()).await;
    assert_eq!(r.error, "killed by signal 9");
}

#[tokio::test]
async fn noop_and_unknown_kinds_finish_at_once() {
    let f = fixture().await;
    let job = JobId::random();
    let noop = attempt(job, "n");
    let weird = attempt(job, "w");
    let mk = |a: &AttemptRef, kind: &str| pb::Assignment {
        attempt: Some(pb::AttemptRef::from(a)),
        kind: kind.into(),
        ..Default::default()
    };
    f.runner.assign(mk(&noop, "noop"));
    f.runner.assign(mk(&noop, "noop"));
    f.runner.assign(mk(&weird, "teleport"));
    f.runner.assign(pb::Assignment { attempt: None, kind: "noop".into(), ..Default::default() });
    let batch = f.attempts.take_batch().unwrap();
    let msgs = batch.messages();
    assert_eq!(msgs.len(), 2, "the duplicate and the invalid one are ignored: {msgs:?}");
    assert_eq!(state(&msgs[0]), pb::SubtaskState::Succeeded);
    assert!(msgs[0].started_at > 0 && msgs[0].started_at == msgs[0].finished_at);
    assert_eq!(state(&msgs[1]), pb::SubtaskState::Failed);
    assert_eq!(msgs[1].error, "unknown built-in kind \"teleport\"");
    assert!(f.tracker.is_empty(), "no task was spawned");
}

#[tokio::test]
async fn invalid_assignments_fail_with_a_reason() {
    let f = fixture().await;
    let a = attempt(JobId::random(), "bad");
    let base = pb::Assignment { attempt: Some(pb::AttemptRef::from(&a)), command: sh("true"), ..Default::default() };
    let cases = [
        pb::Assignment { command: vec![], ..base.clone() },
        pb::Assignment { outputs: vec!["../escape".into()], ..base.clone() },
        pb::Assignment { outputs: vec!["x".into(), "x".into()], ..base.clone() },
        pb::Assignment { env: HashMap::from([("A=B".into(), "c".into())]), ..base.clone() },
        pb::Assignment {
            inputs: vec![pb::InputObject { object_id: "../../etc/passwd".into(), ..Default::default() }],
            ..base.clone()
        },
    ];
    for (i, case) in cases.into_iter().enumerate() {
        let mut case = case;
        case.attempt = Some(pb::AttemptRef { attempt: i as u32, ..pb::AttemptRef::from(&a) });
        f.runner.assign(case);
    }
    let batch = f.attempts.take_batch().unwrap();
    let msgs = batch.messages();
    assert_eq!(msgs.len(), 5);
    for m in &msgs {
        assert_eq!(state(m), pb::SubtaskState::Failed, "{m:?}");
        assert!(!m.error.is_empty());
    }
    assert!(msgs[0].error.contains("neither a command nor a built-in kind"), "{}", msgs[0].error);
    assert!(msgs[2].error.contains("declared twice"), "{}", msgs[2].error);
}

#[tokio::test]
async fn cached_inputs_are_linked_and_missing_ones_fail_the_attempt() {
    let f = fixture().await;
    let job = JobId::random();
    let mut inputs = Vec::new();
    for rank in 0..3u32 {
        let id = ObjectId { job, task: "gen".into(), rank, name: "numbers".into() };
        let src = f.layout.root().join("scratch");
        std::fs::write(&src, format!("{rank}\n")).unwrap();
        drop(f.cache.insert(&id, &src).unwrap());
        inputs.push(Input {
            id,
            task: "gen".into(),
            rank,
            name: "numbers".into(),
            holders: vec![],
            size: 2,
            digest: None,
        });
    }
    let a = attempt(job, "sum");
    let mut w = work(&a, sh("cat \"$PLEXUS_IN\"/gen/*/numbers > \"$PLEXUS_OUT/all\""));
    w.inputs = inputs.clone();
    w.outputs = vec!["all".into()];
    let r = f.runner.run(&w, &CancellationToken::new()).await;
    assert_eq!(state(&r), pb::SubtaskState::Succeeded, "{}", r.error);
    assert_eq!((r.fetch_ms, r.fetched_bytes), (0, 0));
    let all = ObjectId { job, task: "sum".into(), rank: 2, name: "all".into() };
    assert_eq!(std::fs::read_to_string(f.cache.path(&all)).unwrap(), "0\n1\n2\n");

    let missing = ObjectId { job, task: "gen".into(), rank: 9, name: "numbers".into() };
    let mut w = work(&attempt(job, "sum2"), sh("true"));
    w.inputs = vec![Input {
        id: missing.clone(),
        task: "gen".into(),
        rank: 9,
        name: "numbers".into(),
        holders: vec![grpc_only("http://127.0.0.1:1")],
        size: 0,
        digest: None,
    }];
    let r = f.runner.run(&w, &CancellationToken::new()).await;
    assert_eq!(state(&r), pb::SubtaskState::Failed);
    assert!(r.error.starts_with(&format!("could not fetch input {missing}: http://127.0.0.1:1: ")), "{}", r.error);
    assert_eq!(r.started_at, 0, "it never started");
    assert_eq!(r.unfetched_input, missing.to_string(), "the coordinator is told which input no holder served");

    // A cached input whose file was removed behind the worker's back is forgotten and
    // fetched like any other (here from nowhere): the report names it, and the worker's
    // object list stops listing it.
    let gone = inputs[1].id.clone();
    std::fs::remove_file(f.cache.path(&gone)).unwrap();
    let mut w = work(&attempt(job, "sum3"), sh("true"));
    w.inputs = vec![Input { holders: vec![grpc_only("http://127.0.0.1:1")], ..inputs[1].clone() }];
    let r = f.runner.run(&w, &CancellationToken::new()).await;
    assert_eq!(state(&r), pb::SubtaskState::Failed);
    assert_eq!(r.unfetched_input, gone.to_string(), "{}", r.error);
    assert!(!f.cache.contains(&gone));
    assert!(!f.cache.objects().iter().any(|o| o.object_id == gone.to_string()));
    // A task that fails for its own reasons names no input.
    let r = f.runner.run(&work(&attempt(job, "sum4"), sh("exit 3")), &CancellationToken::new()).await;
    assert_eq!((state(&r), r.unfetched_input.as_str()), (pb::SubtaskState::Failed, ""));
}

#[tokio::test]
async fn inputs_are_fetched_from_a_peer_with_accounting() {
    // The producer: a second cache behind a real PeerService.
    let producer_dir = tempfile::tempdir().unwrap();
    let producer = Layout::new(producer_dir.path());
    let producer_cache = Cache::open(producer.cache_dir(), 1 << 30).unwrap();
    let job = JobId::random();
    let id = ObjectId { job, task: "gen".into(), rank: 5, name: "numbers".into() };
    let data = vec![7u8; 3_000_000];
    std::fs::write(producer.root().join("scratch"), &data).unwrap();
    drop(producer_cache.insert(&id, &producer.root().join("scratch")).unwrap());
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    let stop = CancellationToken::new();
    let producer_rails = endpoint().await;
    let server = tokio::spawn(peer::serve(
        listener,
        peer::PeerServer::new(producer_cache, producer, producer_rails.clone()),
        None,
        stop.clone(),
    ));

    let f = fixture().await;
    // A dead holder first: the next one must be tried. The live one has rails, so the object
    // comes over the data plane.
    let mut w = work(&attempt(job, "use"), sh("wc -c < \"$PLEXUS_IN/gen/5/numbers\" | tr -d ' ' > \"$PLEXUS_OUT/n\""));
    w.inputs = vec![Input {
        id: id.clone(),
        task: "gen".into(),
        rank: 5,
        name: "numbers".into(),
        holders: vec![
            grpc_only("http://127.0.0.1:1"),
            peer::Source { worker: String::new(), peer_addr: url, rails: producer_rails.local_addrs() },
        ],
        size: 3_000_000,
        digest: None,
    }];
    w.outputs = vec!["n".into()];
    let r = f.runner.run(&w, &CancellationToken::new()).await;
    assert_eq!(state(&r), pb::SubtaskState::Succeeded, "{}", r.error);
    assert_eq!(r.fetched_bytes, 3_000_000);
    assert!(f.cache.contains(&id), "the fetched input stays cached");
    let n = ObjectId { job, task: "use".into(), rank: 2, name: "n".into() };
    assert_eq!(std::fs::read_to_string(f.cache.path(&n)).unwrap().trim(), "3000000");
    assert!(std::fs::read_dir(f.layout.tmp_dir()).unwrap().next().is_none(), "no partial downloads left");
    let got: u64 = f.rails.stats().rails.iter().map(|r| r.bytes_received).sum();
    assert!(got >= 3_000_000, "the object came over the data plane ({got} bytes received)");
    stop.cancel();
    server.await.unwrap().unwrap();
}

/// A PeerService in front of a cache holding `data` as object `id`: its URL, rails, and what
/// stops it.
async fn holding(
    id: &ObjectId,
    data: &[u8],
) -> (String, Arc<plexus_dataplane::Endpoint>, CancellationToken, tempfile::TempDir) {
    let dir = tempfile::tempdir().unwrap();
    let layout = Layout::new(dir.path());
    let cache = Cache::open(layout.cache_dir(), 1 << 30).unwrap();
    std::fs::write(layout.root().join("scratch"), data).unwrap();
    drop(cache.insert(id, &layout.root().join("scratch")).unwrap());
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    let stop = CancellationToken::new();
    let rails = endpoint().await;
    tokio::spawn(peer::serve(listener, peer::PeerServer::new(cache, layout, rails.clone()), None, stop.clone()));
    (url, rails, stop, dir)
}

/// A holder whose copy does not hash to the input's digest is refused, over the data plane and
/// over gRPC alike, and named in the report's `bad_copies`; the next holder's good copy is used.
/// With no good copy the attempt fails before its task runs, naming the input (so the
/// coordinator places it again), and leaves no partial download.
#[tokio::test]
async fn a_fetched_copy_that_does_not_match_its_digest_is_refused_and_reported() {
    let job = JobId::random();
    let id = ObjectId { job, task: "gen".into(), rank: 5, name: "numbers".into() };
    let good = vec![7u8; 3_000_000];
    let mut bad = good.clone();
    bad[2_999_999] = 8;
    let (bad_url, bad_rails, stop_bad, _d1) = holding(&id, &bad).await;
    let (good_url, _, stop_good, _d2) = holding(&id, &good).await;
    let digest = plexus_proto::Digest::of(&good);
    let expected_bad_copy = pb::BadCopy {
        object_id: id.to_string(),
        worker_id: "wkr-bad".into(),
        expected: digest.to_vec(),
        got: plexus_proto::Digest::of(&bad).to_vec(),
    };
    let input = |holders: Vec<peer::Source>| Input {
        id: id.clone(),
        task: "gen".into(),
        rank: 5,
        name: "numbers".into(),
        holders,
        size: 3_000_000,
        digest: Some(digest),
    };
    let bad_holder =
        |rails: Vec<std::net::SocketAddr>| peer::Source { worker: "wkr-bad".into(), peer_addr: bad_url.clone(), rails };

    let f = fixture().await;
    let mut w = work(&attempt(job, "use"), sh("cp \"$PLEXUS_IN/gen/5/numbers\" \"$PLEXUS_OUT/copy\""));
    w.inputs = vec![input(vec![bad_holder(bad_rails.local_addrs()), grpc_only(&good_url)])];
    w.outputs = vec!["copy".into()];
    let r = f.runner.run(&w, &CancellationToken::new()).await;
    assert_eq!(state(&r), pb::SubtaskState::Succeeded, "{}", r.error);
    assert_eq!(r.bad_copies, vec![expected_bad_copy.clone()]);
    let copy = ObjectId { job, task: "use".into(), rank: 2, name: "copy".into() };
    assert_eq!(std::fs::read(f.cache.path(&copy)).unwrap(), good, "the task read the good copy");
    assert_eq!(r.outputs[0].digest, digest.to_vec());

    let f = fixture().await;
    let mut w = work(&attempt(job, "use"), sh("touch \"$PLEXUS_OUT/ran\""));
    w.inputs = vec![input(vec![bad_holder(vec![])])];
    let r = f.runner.run(&w, &CancellationToken::new()).await;
    assert_eq!(state(&r), pb::SubtaskState::Failed);
    assert_eq!(r.unfetched_input, id.to_string(), "{}", r.error);
    assert!(r.error.contains("does not match its digest") && r.error.contains("worker wkr-bad"), "{}", r.error);
    assert_eq!(r.bad_copies, vec![expected_bad_copy]);
    assert!(!f.cache.contains(&id), "the bad copy is not kept");
    assert!(std::fs::read_dir(f.layout.tmp_dir()).unwrap().next().is_none(), "no partial downloads left");
    stop_bad.cancel();
    stop_good.cancel();
}

#[tokio::test]
async fn evictions_count_against_the_attempt_that_caused_them() {
    let dir = tempfile::tempdir().unwrap();
    let layout = Layout::new(dir.path());
    std::fs::create_dir_all(layout.tmp_dir()).unwrap();
    let cache = Cache::open(layout.cache_dir(), 100).unwrap();
    let attempts = Attempts::new(CancellationToken::new());
    let isolation =
        Arc::new(Isolation::setup(Choice::Only(Mode::ProcessGroup), "test", layout.pid_records_dir()).unwrap());
    let runner = Runner::new(
        layout.clone(),
        cache.clone(),
        attempts,
        TaskTracker::new(),
        endpoint().await,
        isolation,
        NodeGpus::default(),
    );
    let job = JobId::random();
    let old = ObjectId { job, task: "old".into(), rank: 0, name: "x".into() };
    std::fs::write(layout.root().join("scratch"), [0u8; 80]).unwrap();
    drop(cache.insert(&old, &layout.root().join("scratch")).unwrap());
    let mut w = work(&attempt(job, "new"), sh("head -c 50 /dev/zero > \"$PLEXUS_OUT/y\""));
    w.outputs = vec!["y".into()];
    let r = runner.run(&w, &CancellationToken::new()).await;
    assert_eq!(state(&r), pb::SubtaskState::Succeeded, "{}", r.error);
    assert_eq!(r.evicted_bytes, 80);
    assert!(!cache.contains(&old));
}

/// An allreduce assignment for `rank` of a gang over `members`, reading `gen/<rank>/g`.
fn member(job: JobId, rank: u32, kind: &str, members: &[Vec<std::net::SocketAddr>], dtype: &str) -> pb::Assignment {
    let a = AttemptRef { job, task: "sum".into(), rank, attempt: 1 };
    let id = ObjectId { job, task: "gen".into(), rank, name: "g".into() };
    pb::Assignment {
        attempt: Some(pb::AttemptRef::from(&a)),
        kind: kind.into(),
        replicas: members.len() as u32,
        inputs: vec![pb::InputObject { object_id: id.to_string(), ..Default::default() }],
        outputs: vec!["total".into()],
        collective: Some(pb::Collective {
            members: members
                .iter()
                .map(|m| pb::Member { rails: m.iter().map(ToString::to_string).collect() })
                .collect(),
            // Each gang has its own tag space, as the coordinator gives it (a hash of job, task
            // and generation): the data plane refuses a second message under a tag that was
            // delivered to a posted receive, so two collectives must not share one.
            tag: gang_tag_of(job),
            dtype: dtype.into(),
            op: "sum".into(),
            root: 1,
            algorithm: "halving".into(),
            ..Default::default()
        }),
        ..Default::default()
    }
}

#[tokio::test]
async fn collective_members_reduce_their_inputs_over_the_data_plane() {
    let (f0, f1) = (fixture().await, fixture().await);
    let job = JobId::random();
    let members = vec![f0.rails.local_addrs(), f1.rails.local_addrs()];
    for (rank, f) in [&f0, &f1].into_iter().enumerate() {
        let id = ObjectId { job, task: "gen".into(), rank: rank as u32, name: "g".into() };
        let values: Vec<u8> = (0..1000i32).flat_map(|i| (i * (rank as i32 + 1)).to_le_bytes()).collect();
        std::fs::write(f.layout.root().join("scratch"), values).unwrap();
        drop(f.cache.insert(&id, &f.layout.root().join("scratch")).unwrap());
    }
    for kind in ["allreduce", "reduce"] {
        let job = if kind == "reduce" {
            // A fresh job id keeps the two runs' attempts and outputs apart; same inputs.
            let j2 = JobId::random();
            for (rank, f) in [&f0, &f1].into_iter().enumerate() {
                let from = ObjectId { job, task: "gen".into(), rank: rank as u32, name: "g".into() };
                let to = ObjectId { job: j2, task: "gen".into(), rank: rank as u32, name: "g".into() };
                std::fs::copy(f.cache.path(&from), f.layout.root().join("scratch")).unwrap();
                drop(f.cache.insert(&to, &f.layout.root().join("scratch")).unwrap());
            }
            j2
        } else {
            job
        };
        let w0 = Work::from_pb(attempt_of(job, 0), member(job, 0, kind, &members, "i32")).unwrap();
        let w1 = Work::from_pb(attempt_of(job, 1), member(job, 1, kind, &members, "i32")).unwrap();
        let cancel = CancellationToken::new();
        let (r0, r1) = tokio::join!(f0.runner.run(&w0, &cancel), f1.runner.run(&w1, &cancel));
        for r in [&r0, &r1] {
            assert_eq!(state(r), pb::SubtaskState::Succeeded, "{kind}: {}", r.error);
        }
        let expect: Vec<u8> = (0..1000i32).flat_map(|i| (i * 3).to_le_bytes()).collect();
        let out = |f: &Fixture, rank| {
            std::fs::read(f.cache.path(&ObjectId { job, task: "sum".into(), rank, name: "total".into() })).unwrap()
        };
        if kind == "allreduce" {
            assert_eq!(out(&f0, 0), expect);
            assert_eq!(out(&f1, 1), expect);
        } else {
            assert!(out(&f0, 0).is_empty(), "only the root holds a reduce's result");
            assert_eq!(out(&f1, 1), expect);
        }
        let log = String::from_utf8_lossy(&r1.stdout_tail).to_string();
        assert!(log.starts_with(&format!("{kind} i32 sum over 2 members")), "{log}");
    }
}

fn gang_tag_of(job: JobId) -> u64 {
    u64::from(u32::from_le_bytes(job.as_bytes()[..4].try_into().unwrap()).max(1)) << 32
}

fn attempt_of(job: JobId, rank: u32) -> AttemptRef {
    AttemptRef { job, task: "sum".into(), rank, attempt: 1 }
}

#[test]
fn bad_collective_assignments_are_refused_with_a_reason() {
    let job = JobId::random();
    let members = vec![vec!["127.0.0.1:1".parse().unwrap()], vec!["127.0.0.1:2".parse().unwrap()]];
    let err = |a: pb::Assignment| Work::from_pb(attempt_of(job, 0), a).unwrap_err().to_string();
    let ok = member(job, 0, "allreduce", &members, "f32");
    assert!(Work::from_pb(attempt_of(job, 0), ok.clone()).is_ok());
    assert!(err(member(job, 0, "allreduce", &members, "f16")).contains("unknown dtype \"f16\""));
    assert!(err(pb::Assignment { collective: None, ..ok.clone() }).contains("without its communicator"));
    assert!(err(pb::Assignment { outputs: vec![], ..ok.clone() }).contains("needs 1 input(s) and one output"));
    let mut one = ok.clone();
    one.collective.as_mut().unwrap().members.truncate(0);
    assert!(err(one).contains("rank 0 is not a member of a collective of 0"));
    let mut bad_rail = ok.clone();
    bad_rail.collective.as_mut().unwrap().members[1].rails = vec!["nowhere".into()];
    assert!(err(bad_rail).contains("collective member 1: rail address \"nowhere\""));
    let mut root = member(job, 0, "reduce", &members, "f32");
    root.collective.as_mut().unwrap().root = 2;
    assert!(err(root).contains("reduce root 2"));
}
