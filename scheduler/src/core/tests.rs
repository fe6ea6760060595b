//! Unit tests of the scheduling core: no network, no disk, time passed by hand.

use super::lineage::{MAX_RERUNS, MAX_UNFETCHED_REQUEUES};
use super::*;
use crate::placer::heuristic;
use crate::spec::{Format, parse};
use std::collections::BTreeSet;

use crate::error::Error;
use crate::gpu::objective::Weights;
use plexus_proto::{AttemptRef, JobId, JobState, ObjectId, Resources, SubtaskState, WorkerId};

const FAN: &str = r#"
name = "fan"
[[task]]
name = "gen"
command = ["true"]
replicas = 3
outputs = ["numbers"]
max_retries = 1
[[task]]
name = "sum"
command = ["true"]
inputs = ["gen/numbers"]
outputs = ["total"]
"#;

pub(super) fn core() -> Core {
    Core::new(CoreConfig::default(), heuristic("least-loaded", 1).unwrap())
}

pub(super) fn wid(n: u8) -> WorkerId {
    let mut b = [0u8; 16];
    b[15] = n;
    WorkerId::from_bytes(b)
}

pub(super) fn reg(n: u8, session: &str, cpus: u32, known: Vec<AttemptRef>) -> Registration {
    Registration {
        worker: wid(n),
        session: session.into(),
        peer_addr: format!("http://127.0.0.1:{}", 7000 + n as u16),
        capacity: Capacity {
            cpus,
            memory: 8 << 30,
            gpus: vec![],
            rails: vec!["127.0.0.1".into()],
            cache_bytes: 1 << 30,
            hostname: "h".into(),
            topology: Default::default(),
            max_attempts: 0,
        },
        state: NodeReport::default(),
        known,
    }
}

/// Worker `n` of a large cluster (its id ends in `n`, its session is `s{n}`), with `cpus` cores.
fn numbered(n: u16, cpus: u32) -> Registration {
    let mut r = reg(1, &format!("s{n}"), cpus, vec![]);
    let mut b = [0u8; 16];
    b[14..].copy_from_slice(&n.to_be_bytes());
    r.worker = WorkerId::from_bytes(b);
    r
}

pub(super) fn submit(c: &mut Core, src: &str, now: u64) -> JobId {
    let id = JobId::random();
    c.submit(id, parse(src, Format::Toml, "t.toml").unwrap(), now).unwrap();
    id
}

fn done(a: &AttemptRef, state: SubtaskState) -> Report {
    let outputs = if state == SubtaskState::Succeeded {
        let name = if a.task == "gen" { "numbers" } else { "total" };
        vec![(ObjectId { job: a.job, task: a.task.clone(), rank: a.rank, name: name.into() }, 10)]
    } else {
        vec![]
    };
    Report {
        attempt: Some(a.clone()),
        state: Some(state),
        exit_code: if state == SubtaskState::Failed { 1 } else { 0 },
        error: if state == SubtaskState::Failed { "exit code 1".into() } else { String::new() },
        outputs,
        ..Default::default()
    }
}

pub(super) fn assigned(c: &mut Core) -> Vec<(WorkerId, Assignment)> {
    c.take_outbox().assignments
}

fn state(c: &Core, job: JobId, task: &str, rank: u32) -> SubtaskState {
    let j = c.job(job).unwrap();
    j.subtasks[j.subtask_index(task, rank).unwrap() as usize].state
}

#[test]
fn fan_out_then_fan_in_runs_in_dependency_order() {
    let mut c = core();
    c.register(reg(1, "s1", 4, vec![]), 0);
    c.register(reg(2, "s2", 4, vec![]), 0);
    let job = submit(&mut c, FAN, 0);
    c.schedule(1);
    let a = assigned(&mut c);
    assert_eq!(a.len(), 3, "only the gen replicas are released");
    assert!(a.iter().all(|(_, x)| x.attempt.task == "gen" && x.attempt.attempt == 1));
    // Least-loaded spreads them over both workers.
    assert!(a.iter().any(|(w, _)| *w == wid(1)) && a.iter().any(|(w, _)| *w == wid(2)));
    assert_eq!(state(&c, job, "sum", 0), SubtaskState::Waiting);

    for (w, x) in &a[..2] {
        assert!(c.report(
            *w,
            if *w == wid(1) { "s1" } else { "s2" },
            vec![done(&x.attempt, SubtaskState::Succeeded)],
            2
        ));
    }
    c.schedule(3);
    assert!(assigned(&mut c).is_empty(), "sum waits for every gen replica");
    let (w, x) = &a[2];
    c.report(*w, if *w == wid(1) { "s1" } else { "s2" }, vec![done(&x.attempt, SubtaskState::Succeeded)], 4);
    c.schedule(5);
    let b = assigned(&mut c);
    assert_eq!(b.len(), 1);
    let sum = &b[0].1;
    assert_eq!(sum.attempt.task, "sum");
    assert_eq!(sum.inputs.len(), 3);
    for i in &sum.inputs {
        assert_eq!(i.size, 10);
        assert_eq!(i.holders.len(), 1, "each gen output is held by the worker that made it");
    }
    let s = if b[0].0 == wid(1) { "s1" } else { "s2" };
    c.report(b[0].0, s, vec![done(&sum.attempt, SubtaskState::Succeeded)], 6);
    assert_eq!(c.job(job).unwrap().record.state, JobState::Succeeded);
    assert!(c.workers().all(|w| w.placed().is_empty() && w.allocated() == Resources::default()));
}

#[test]
fn failure_is_retried_then_fails_the_job_and_cancels_the_rest() {
    let mut c = core();
    c.register(reg(1, "s1", 8, vec![]), 0);
    let job = submit(&mut c, FAN, 0);
    c.schedule(1);
    let a = assigned(&mut c);
    let first = a[0].1.attempt.clone();
    c.report(wid(1), "s1", vec![done(&first, SubtaskState::Failed)], 2);
    assert_eq!(state(&c, job, "gen", first.rank), SubtaskState::Ready, "max_retries = 1 allows one retry");
    c.schedule(3);
    assert!(assigned(&mut c).is_empty(), "the retry waits out its back-off");
    let due = 2 + crate::spec::DEFAULT_RETRY_BACKOFF_MS;
    c.tick(due);
    c.schedule(due);
    let retry = assigned(&mut c);
    assert_eq!(retry.len(), 1);
    assert_eq!(retry[0].1.attempt.attempt, 2);
    c.report(wid(1), "s1", vec![done(&retry[0].1.attempt, SubtaskState::Failed)], due + 1);
    let j = c.job(job).unwrap();
    assert_eq!(j.record.state, JobState::Failed);
    assert!(j.record.error.contains("task \"gen\" rank 0 failed after 2 attempts: exit code 1"), "{}", j.record.error);
    assert_eq!(state(&c, job, "gen", 0), SubtaskState::Failed);
    assert_eq!(state(&c, job, "gen", 1), SubtaskState::Cancelled);
    assert_eq!(state(&c, job, "sum", 0), SubtaskState::Cancelled);
    let out = c.take_outbox();
    assert_eq!(out.cancels.len(), 2, "the two running gen replicas are killed");
    assert!(c.workers().all(|w| w.placed().is_empty()));
}

#[test]
fn stale_and_repeated_reports_complete_a_subtask_once() {
    let mut c = core();
    c.register(reg(1, "s1", 8, vec![]), 0);
    let job = submit(&mut c, "[[task]]\nname = \"a\"\ncommand = [\"true\"]\nmax_retries = 3\n", 0);
    c.schedule(1);
    let a = assigned(&mut c).remove(0).1.attempt;
    c.report(wid(1), "s1", vec![done(&a, SubtaskState::Failed)], 2);
    c.tick(3 + crate::spec::DEFAULT_RETRY_BACKOFF_MS);
    c.schedule(3 + crate::spec::DEFAULT_RETRY_BACKOFF_MS);
    let b = assigned(&mut c).remove(0).1.attempt;
    assert_eq!(b.attempt, 2);
    // A late success of attempt 1 is stale.
    c.report(wid(1), "s1", vec![done(&a, SubtaskState::Succeeded)], 4);
    assert_eq!(state(&c, job, "a", 0), SubtaskState::Assigned);
    c.report(wid(1), "s1", vec![done(&b, SubtaskState::Succeeded)], 5);
    c.report(wid(1), "s1", vec![done(&b, SubtaskState::Succeeded)], 6);
    let j = c.job(job).unwrap();
    assert_eq!(j.record.state, JobState::Succeeded);
    let successes = j.subtasks[0].history.iter().filter(|t| t.state == SubtaskState::Succeeded).count();
    assert_eq!(successes, 1);
    // A report from a worker that is not registered in this session asks it to register.
    assert!(!c.report(wid(1), "other", vec![], 7));
    assert!(!c.report(wid(9), "s9", vec![], 7));
}

#[test]
fn lost_worker_attempts_are_placed_elsewhere_without_counting_a_failure() {
    let mut c = core();
    c.register(reg(1, "s1", 1, vec![]), 0);
    c.register(reg(2, "s2", 1, vec![]), 0);
    let job = submit(&mut c, "[[task]]\nname = \"a\"\ncommand = [\"true\"]\nreplicas = 2\n", 0);
    c.schedule(1);
    let a = assigned(&mut c);
    assert_eq!(a.len(), 2);
    let on1 = a.iter().find(|(w, _)| *w == wid(1)).unwrap().1.attempt.clone();
    // Worker 2 keeps beating, worker 1 falls silent.
    assert!(c.heartbeat(wid(2), "s2", NodeReport::default(), 2_000));
    c.tick(2_000);
    assert!(c.worker(wid(1)).unwrap().record().alive, "not yet past the timeout");
    c.report(
        wid(2),
        "s2",
        vec![done(&a.iter().find(|(w, _)| *w == wid(2)).unwrap().1.attempt, SubtaskState::Succeeded)],
        2_500,
    );
    assert!(c.heartbeat(wid(2), "s2", NodeReport::default(), 3_500));
    c.tick(3_500);
    assert!(!c.worker(wid(1)).unwrap().record().alive);
    assert_eq!(state(&c, job, on1.task.as_str(), on1.rank), SubtaskState::Ready);
    c.schedule(3_501);
    let again = assigned(&mut c);
    assert_eq!(again.len(), 1);
    assert_eq!(again[0].0, wid(2));
    assert_eq!(again[0].1.attempt.attempt, 2);
    let j = c.job(job).unwrap();
    assert_eq!(j.subtasks[on1.rank as usize].failures, 0);
    // The lost worker's heartbeat is refused: it must register again.
    assert!(!c.heartbeat(wid(1), "s1", NodeReport::default(), 3_600));
    // Registering again with the same session is no resumption: its attempts were placed
    // elsewhere, so a worker that froze them must kill them.
    assert!(!c.register(reg(1, "s1", 4, vec![on1.clone()]), 3_700));
}

#[test]
fn resources_limit_concurrency() {
    let mut c = core();
    c.register(reg(1, "s1", 2, vec![]), 0);
    submit(&mut c, "[[task]]\nname = \"a\"\ncommand = [\"true\"]\nreplicas = 5\n", 0);
    c.schedule(1);
    let a = assigned(&mut c);
    assert_eq!(a.len(), 2, "two cores, one core each");
    assert_eq!(c.ready_len(), 3);
    c.report(wid(1), "s1", vec![done(&a[0].1.attempt, SubtaskState::Succeeded)], 2);
    c.schedule(3);
    assert_eq!(assigned(&mut c).len(), 1);
    // Zero-cpu work is not limited by cores.
    submit(&mut c, "[[task]]\nname = \"n\"\nkind = \"noop\"\ncpu = 0\nreplicas = 50\n", 4);
    c.schedule(5);
    assert_eq!(assigned(&mut c).len(), 50);
}

#[test]
fn unsatisfiable_requests_are_refused_only_once_workers_exist() {
    let mut c = core();
    let spec = parse("[[task]]\nname = \"big\"\ncommand = [\"true\"]\ncpu = 64\n", Format::Toml, "b.toml").unwrap();
    assert!(c.submit(JobId::random(), spec.clone(), 0).is_ok(), "no worker registered: nothing can be judged");
    c.register(reg(1, "s1", 8, vec![]), 0);
    let e = c.submit(JobId::random(), spec, 0).unwrap_err();
    assert!(e.to_string().contains("task \"big\" asks for cpu=64"), "{e}");
    assert!(e.to_string().contains("largest: cpu=8"), "{e}");
    let gpu = parse("[[task]]\nname = \"g\"\ncommand = [\"true\"]\ngpu = 1\n", Format::Toml, "g.toml").unwrap();
    assert!(matches!(c.submit(JobId::random(), gpu, 0), Err(Error::Unsatisfiable(_))));
}

#[test]
fn reregistration_reconciles_attempts() {
    let mut c = core();
    c.register(reg(1, "s1", 8, vec![]), 0);
    let job = submit(&mut c, "[[task]]\nname = \"a\"\ncommand = [\"true\"]\nreplicas = 3\n", 0);
    c.schedule(1);
    let a: Vec<AttemptRef> = assigned(&mut c).into_iter().map(|(_, x)| x.attempt).collect();
    // Same process reconnects knowing attempts 0 and 1 of rank 0/1, plus a stale attempt.
    let stale = AttemptRef { attempt: 7, ..a[0].clone() };
    let resumed = c.register(reg(1, "s1", 8, vec![a[0].clone(), a[1].clone(), stale.clone()]), 10);
    assert!(resumed, "the same process, never lost: its attempts are still its own");
    assert_eq!(state(&c, job, "a", a[0].rank), SubtaskState::Assigned);
    assert_eq!(state(&c, job, "a", a[1].rank), SubtaskState::Assigned);
    assert_eq!(state(&c, job, "a", a[2].rank), SubtaskState::Ready, "never reached the worker: placed again");
    let out = c.take_outbox();
    assert_eq!(out.cancels, vec![(wid(1), stale)]);
    // A new process of the same worker loses everything it had.
    assert!(!c.register(reg(1, "s1-restarted", 8, vec![]), 20));
    assert_eq!(state(&c, job, "a", a[0].rank), SubtaskState::Ready);
    assert!(c.worker(wid(1)).unwrap().placed().is_empty());
    assert_eq!(c.job(job).unwrap().subtasks[a[0].rank as usize].failures, 0);
}

#[test]
fn cancel_kills_placed_attempts() {
    let mut c = core();
    c.register(reg(1, "s1", 8, vec![]), 0);
    let job = submit(&mut c, FAN, 0);
    c.schedule(1);
    assigned(&mut c);
    c.cancel(job, 2).unwrap();
    let out = c.take_outbox();
    assert_eq!(out.cancels.len(), 3);
    assert_eq!(c.job(job).unwrap().record.state, JobState::Cancelled);
    assert!(matches!(c.cancel(job, 3), Err(Error::JobFinished { .. })));
    assert!(matches!(c.cancel(JobId::random(), 3), Err(Error::NoJob(_))));
    assert!(c.workers().all(|w| w.allocated() == Resources::default()));
}

#[test]
fn restore_rebuilds_allocations_and_the_ready_queue() {
    let mut c = core();
    c.register(reg(1, "s1", 1, vec![]), 0);
    let job = submit(&mut c, "[[task]]\nname = \"a\"\ncommand = [\"true\"]\nreplicas = 3\n", 0);
    c.schedule(1);
    let a = assigned(&mut c);
    assert_eq!(a.len(), 1);
    // Snapshot what a store would hold.
    let j = c.job(job).unwrap();
    let snap = Snapshot {
        jobs: vec![j.record.clone()],
        subtasks: j.subtasks.iter().enumerate().map(|(i, s)| (job, i as u32, s.clone())).collect(),
        workers: c.workers().map(|w| w.record().clone()).collect(),
    };
    let mut r = core();
    r.restore(snap, 100).unwrap();
    assert_eq!(r.ready_len(), 2);
    assert_eq!(r.worker(wid(1)).unwrap().allocated().cpu, 1.0);
    assert!(!r.worker(wid(1)).unwrap().connected());
    r.schedule(101);
    assert!(r.take_outbox().assignments.is_empty(), "nothing goes to a worker that has not registered again");
    // The worker comes back in the same process, still running its attempt.
    r.register(reg(1, "s1", 1, vec![a[0].1.attempt.clone()]), 102);
    r.schedule(103);
    assert!(r.take_outbox().assignments.is_empty(), "its one core is still busy");
    r.report(wid(1), "s1", vec![done(&a[0].1.attempt, SubtaskState::Succeeded)], 104);
    r.schedule(105);
    let next = r.take_outbox().assignments;
    assert_eq!(next.len(), 1);
    // The attempt placed before the restore is explained from the store (restoring does not load
    // placement records); the one placed after it from memory.
    assert!(matches!(r.explain_at(job, "a", a[0].1.attempt.rank), Ok(super::Explained::Stored(_))));
    assert!(r.explain(job, "a", a[0].1.attempt.rank).is_err());
    assert!(matches!(r.explain_at(job, "a", next[0].1.attempt.rank), Ok(super::Explained::Here(_))));
    let never = (0..3).find(|&k| k != a[0].1.attempt.rank && k != next[0].1.attempt.rank).unwrap();
    assert!(matches!(r.explain_at(job, "a", never), Err(Error::NotPlaced(_))), "rank {never} was never placed");
}

/// A restored worker gets the heartbeat timeout plus the restore grace to register again with
/// the new leader, not the timeout alone; past both it is lost.
#[test]
fn a_restored_worker_has_the_restore_grace_to_register_again() {
    let mut c = core();
    c.register(reg(1, "s1", 1, vec![]), 0);
    let snap = Snapshot { jobs: vec![], subtasks: vec![], workers: c.workers().map(|w| w.record().clone()).collect() };
    let mut r = core();
    r.restore(snap, 100).unwrap();
    let timeout = CoreConfig::default().heartbeat_timeout_ms;
    r.tick(100 + timeout + 1);
    assert!(r.worker(wid(1)).unwrap().record().alive, "lost after the timeout alone");
    r.tick(100 + timeout + super::restore::RESTORE_GRACE_MS + 1);
    assert!(!r.worker(wid(1)).unwrap().record().alive, "still alive past the timeout and the grace");
}

/// Past `max_heartbeats_per_sec` the timing stretches: workers are told it on their next
/// heartbeat, a session is never declared lost sooner than the longest timeout it was told (even
/// when the cluster shrinks and a shorter one is told), and that timeout is stored, so a new
/// leader waits as long.
#[test]
fn the_heartbeat_timing_stretches_with_the_cluster_and_a_told_timeout_is_kept() {
    // 20 heartbeats a second at most: 11 workers at 500 ms send 22, so one step (750 ms).
    // (Evictions never halt here: ten workers fall silent at once.)
    let config = CoreConfig {
        max_heartbeats_per_sec: 20,
        eviction: super::eviction::EvictionGuard { max_lost_share: 1.0, ..Default::default() },
        ..CoreConfig::default()
    };
    let base = timing::HeartbeatTiming::at(&config, 0);
    let mut c = Core::new(config.clone(), heuristic("least-loaded", 1).unwrap());
    for n in 0..10 {
        c.register(numbered(n, 1), 0);
    }
    c.tick(60);
    assert_eq!(c.timing(), base, "10 workers send 20 heartbeats a second: within the budget");
    assert_eq!(c.worker(numbered(0, 1).worker).unwrap().record().timeout_ms, base.heartbeat_timeout_ms);
    c.take_outbox();
    c.register(numbered(10, 1), 62);
    c.tick(120);
    let stretched = c.timing();
    assert_eq!(stretched, timing::HeartbeatTiming::at(&config, 1));
    assert!(stretched.heartbeat_interval_ms > base.heartbeat_interval_ms);
    // A heartbeat is answered with the new timing, and the longer timeout told is stored.
    c.take_outbox();
    assert!(c.heartbeat(numbered(0, 1).worker, "s0", NodeReport::default(), 100));
    assert_eq!(c.worker(numbered(0, 1).worker).unwrap().record().timeout_ms, stretched.heartbeat_timeout_ms);
    assert!(c.take_outbox().workers.contains(&numbered(0, 1).worker), "the longer timeout is stored");
    // Another heartbeat at the same timing writes nothing.
    assert!(c.heartbeat(numbered(0, 1).worker, "s0", NodeReport::default(), 150));
    assert!(c.take_outbox().workers.is_empty());

    // The cluster shrinks to a third: the timing shortens again (one step), but worker 0, told the
    // longer timeout, is not lost before it, while the others (never told it) are.
    let snap_workers: Vec<_> = c.workers().map(|w| w.record().clone()).collect();
    let last = 150;
    c.tick(last + base.heartbeat_timeout_ms + 1);
    let w0 = c.worker(numbered(0, 1).worker).unwrap().record().clone();
    assert!(w0.alive, "lost after the configured timeout although told a longer one");
    assert!(!c.worker(numbered(1, 1).worker).unwrap().record().alive);
    c.tick(last + stretched.heartbeat_timeout_ms + 1);
    assert!(!c.worker(numbered(0, 1).worker).unwrap().record().alive, "still alive past its own timeout");
    assert_eq!(c.timing(), base, "one worker left: the configured timing again");

    // A new leader restores the stored records: worker 0 keeps the longer timeout it was told.
    let snap = Snapshot { jobs: vec![], subtasks: vec![], workers: snap_workers };
    let mut r = Core::new(config, heuristic("least-loaded", 1).unwrap());
    r.restore(snap, 1_000).unwrap();
    let grace = 1_000 + super::restore::RESTORE_GRACE_MS;
    r.tick(grace + base.heartbeat_timeout_ms + 1);
    assert!(r.worker(numbered(0, 1).worker).unwrap().record().alive);
    assert!(!r.worker(numbered(1, 1).worker).unwrap().record().alive);
    r.tick(grace + stretched.heartbeat_timeout_ms + 1);
    assert!(!r.worker(numbered(0, 1).worker).unwrap().record().alive);
}

/// A worker process that registers again (same session) keeps the longest timeout it was told;
/// a new process starts from the timing of now.
#[test]
fn a_told_timeout_lasts_as_long_as_the_session() {
    let config = CoreConfig { max_heartbeats_per_sec: 20, ..CoreConfig::default() };
    let mut c = Core::new(config.clone(), heuristic("least-loaded", 1).unwrap());
    for n in 0..11 {
        c.register(numbered(n, 1), 0);
    }
    c.tick(60);
    let stretched = c.timing().heartbeat_timeout_ms;
    assert!(c.heartbeat(numbered(0, 1).worker, "s0", NodeReport::default(), 70));
    let again = |c: &mut Core, session: &str| {
        let mut r = numbered(0, 1);
        r.session = session.into();
        c.register(r, 130);
        c.worker(numbered(0, 1).worker).unwrap().record().timeout_ms
    };
    // The budget lifted: the configured timing again.
    c.config.max_heartbeats_per_sec = 0;
    c.tick(120);
    let base = c.timing().heartbeat_timeout_ms;
    assert!(base < stretched);
    assert_eq!(again(&mut c, "s0"), stretched, "the same process may hold the longer lease");
    assert_eq!(again(&mut c, "new"), base, "a new process holds no lease yet");
}

#[test]
fn restore_refuses_a_store_with_missing_subtasks() {
    let mut c = core();
    let job = submit(&mut c, "[[task]]\nname = \"a\"\ncommand = [\"true\"]\nreplicas = 3\n", 0);
    let j = c.job(job).unwrap();
    let snap = Snapshot {
        jobs: vec![j.record.clone()],
        subtasks: vec![(job, 0, j.subtasks[0].clone())],
        ..Default::default()
    };
    let e = core().restore(snap, 0).unwrap_err();
    assert!(e.to_string().contains("1 subtask records"), "{e}");
}

/// With the store keeping placement records, a finished subtask's leaves memory once written
/// (it is explained from the store); an unfinished one's, and one placed in the same round as it
/// finished, stay. Without, every record stays.
#[test]
fn finished_subtasks_placement_records_leave_memory_when_spilled() {
    for spill in [true, false] {
        let mut c = core();
        c.spill_placements(spill);
        c.register(reg(1, "s1", 1, vec![]), 0);
        let job = submit(&mut c, "[[task]]\nname = \"a\"\ncommand = [\"true\"]\nreplicas = 2\n", 0);
        c.schedule(1);
        let a = assigned(&mut c);
        c.report(wid(1), "s1", vec![done(&a[0].1.attempt, SubtaskState::Succeeded)], 2);
        c.schedule(3);
        let b = assigned(&mut c);
        let (first, second) = (a[0].1.attempt.rank, b[0].1.attempt.rank);
        match (spill, c.explain_at(job, "a", first).unwrap()) {
            (true, Explained::Stored(_)) | (false, Explained::Here(_)) => {}
            (_, e) => panic!("spill {spill}: {e:?}"),
        }
        assert!(matches!(c.explain_at(job, "a", second).unwrap(), Explained::Here(_)), "running: kept");
        // Placed and cancelled in one round: its record is still to be written, so it stays.
        c.report(wid(1), "s1", vec![done(&b[0].1.attempt, SubtaskState::Succeeded)], 4);
        let late = submit(&mut c, "[[task]]\nname = \"z\"\ncommand = [\"true\"]\n", 5);
        c.schedule(5);
        c.cancel(late, 5).unwrap();
        assert!(matches!(c.explain_at(late, "z", 0).unwrap(), Explained::Here(_)));
        assert!(c.take_outbox().placements.contains(&(late, 0)));
    }
}

#[test]
fn explain_records_every_candidate() {
    let mut c = core();
    c.register(reg(1, "s1", 1, vec![]), 0);
    c.register(reg(2, "s2", 4, vec![]), 0);
    let job = submit(&mut c, "[[task]]\nname = \"a\"\ncommand = [\"true\"]\ncpu = 2\n", 0);
    c.schedule(1);
    let p = c.explain(job, "a", 0).unwrap();
    assert_eq!(p.placer, "least-loaded");
    assert_eq!(p.chosen, wid(2));
    assert_eq!(p.candidates.len(), 2);
    let w1 = p.candidates.iter().find(|x| x.worker == wid(1)).unwrap();
    assert!(!w1.feasible && w1.score.is_none() && w1.note.contains("needs cpu=2.00"));
    assert!(matches!(c.explain(job, "zz", 0), Err(Error::NoTask { .. })));
    assert!(matches!(c.explain(job, "a", 5), Err(Error::NoRank { .. })));
}

/// With more workers than a record keeps, the record holds the chosen one and the best others
/// by the placer's score, those able to run it first, and counts the rest.
#[test]
fn a_placement_record_keeps_the_chosen_and_the_best_others() {
    use super::records::{INFEASIBLE_EXPLAINED, MAX_EXPLAINED};
    let mut c = core();
    // Workers 1..=40: the even ones have 1 core (cannot run a 2-core task), the odd ones 2..=40.
    for n in 1..=40u8 {
        c.register(reg(n, &format!("s{n}"), if n % 2 == 0 { 1 } else { u32::from(n) + 1 }, vec![]), 0);
    }
    let job = submit(&mut c, "[[task]]\nname = \"a\"\ncommand = [\"true\"]\ncpu = 2\n", 0);
    c.schedule(1);
    let p = c.explain(job, "a", 0).unwrap();
    assert_eq!(p.candidates.len(), MAX_EXPLAINED);
    assert_eq!(p.omitted as usize, 40 - MAX_EXPLAINED);
    assert!(p.candidates.iter().any(|x| x.worker == p.chosen), "the chosen one is kept");
    // 12 of the 20 able to run it, the best by score, and 4 of the 20 that cannot (why not).
    let feasible: Vec<_> = p.candidates.iter().filter(|x| x.feasible).collect();
    assert_eq!(feasible.len(), MAX_EXPLAINED - INFEASIBLE_EXPLAINED);
    assert_eq!(p.candidates.iter().filter(|x| !x.feasible).count(), INFEASIBLE_EXPLAINED);
    assert!(feasible.iter().all(|x| x.score.is_some()), "kept feasible candidates have scores");
    assert!(p.candidates.iter().filter(|x| !x.feasible).all(|x| x.note.contains("needs")), "and why not");
}

/// Past 256 live workers a decision considers a sample: 128 able to run the task (and up to 16
/// unable), starting where the previous decision stopped.
#[test]
fn many_workers_are_sampled_not_all_considered() {
    use super::records::MAX_EXPLAINED;
    use super::sample::{FEASIBLE_SAMPLE, INFEASIBLE_KEPT};
    let mut c = core();
    for n in 1..=300u16 {
        c.register(numbered(n, if n % 3 == 0 { 1 } else { 2 }), 0);
    }
    let job = submit(&mut c, "[[task]]\nname = \"a\"\ncommand = [\"true\"]\ncpu = 2\nreplicas = 2\n", 0);
    c.schedule(1);
    let (p0, p1) = (&c.explain(job, "a", 0).unwrap(), &c.explain(job, "a", 1).unwrap());
    for p in [p0, p1] {
        let considered = p.candidates.len() + p.omitted as usize;
        assert_eq!(considered, FEASIBLE_SAMPLE + INFEASIBLE_KEPT, "128 able and 16 unable");
        assert_eq!(p.candidates.len(), MAX_EXPLAINED);
    }
    // The second decision's sample starts where the first stopped: other workers.
    let ids = |p: &PlacementRecord| p.candidates.iter().map(|x| x.worker).collect::<std::collections::BTreeSet<_>>();
    assert!(ids(p0).is_disjoint(&ids(p1)), "{:?}\n{:?}", ids(p0), ids(p1));
}

/// In a full cluster a sampled decision walks only the workers with cores free (the ledger's
/// index of them): it considers the three that have one, not 16 full ones besides, and the index
/// follows every attempt placed and ended.
#[test]
fn a_sampled_decision_in_a_full_cluster_considers_only_workers_with_room() {
    let mut c = core();
    for n in 1..=300u16 {
        c.register(numbered(n, 2), 0);
    }
    submit(&mut c, "[[task]]\nname = \"fill\"\ncommand = [\"true\"]\ncpu = 1\nreplicas = 600\n", 0);
    c.schedule(1);
    let a = assigned(&mut c);
    assert_eq!(a.len(), 600, "300 workers of 2 cores");
    assert!(c.workers.values().all(|w| !c.workers.has_room(true, &w.id()) && !c.workers.has_room(false, &w.id())));
    // Three attempts on three workers end: each has a core free.
    let mut freed = Vec::new();
    for (w, x) in &a {
        if freed.len() == 3 || freed.contains(w) {
            continue;
        }
        freed.push(*w);
        let n = u16::from_be_bytes(w.as_bytes()[14..16].try_into().unwrap());
        let r = Report { attempt: Some(x.attempt.clone()), state: Some(SubtaskState::Succeeded), ..Default::default() };
        c.report(*w, &format!("s{n}"), vec![r], 2);
    }
    let roomy: Vec<WorkerId> = c.workers.values().map(|w| w.id()).filter(|id| c.workers.has_room(true, id)).collect();
    assert_eq!(roomy.len(), 3);
    assert!(roomy.iter().all(|w| freed.contains(w)));
    let job = submit(&mut c, "[[task]]\nname = \"a\"\ncommand = [\"true\"]\ncpu = 1\n", 3);
    c.schedule(4);
    let b = assigned(&mut c);
    assert_eq!(b.len(), 1);
    assert!(freed.contains(&b[0].0));
    let p = c.explain(job, "a", 0).unwrap();
    let considered: Vec<WorkerId> = p.candidates.iter().map(|x| x.worker).collect();
    assert_eq!(considered.len() + p.omitted as usize, 3, "only the workers with room: {considered:?}");
    assert!(p.candidates.iter().all(|x| x.feasible && freed.contains(&x.worker)));
    // Placed there, that worker is full again.
    assert!(!c.workers.has_room(true, &b[0].0));
}

#[test]
fn heartbeat_objects_feed_locality() {
    let mut c = Core::new(CoreConfig::default(), heuristic("locality", 1).unwrap());
    c.register(reg(1, "s1", 8, vec![]), 0);
    c.register(reg(2, "s2", 8, vec![]), 0);
    let job = submit(&mut c, FAN, 0);
    c.schedule(1);
    let a = assigned(&mut c);
    for (w, x) in &a {
        let s = if *w == wid(1) { "s1" } else { "s2" };
        let mut r = done(&x.attempt, SubtaskState::Succeeded);
        // Make rank 0's output large so its holder wins.
        if x.attempt.rank == 0 {
            r.outputs[0].1 = 1 << 20;
        }
        c.report(*w, s, vec![r], 2);
    }
    let holder_of_rank0 = a.iter().find(|(_, x)| x.attempt.rank == 0).unwrap().0;
    c.schedule(3);
    let b = assigned(&mut c);
    assert_eq!(b[0].0, holder_of_rank0);
    // The holder later reports (by heartbeat) that it evicted everything: holders are updated.
    let s = if holder_of_rank0 == wid(1) { "s1" } else { "s2" };
    c.heartbeat(holder_of_rank0, s, NodeReport::default(), 4);
    assert!(c.worker(holder_of_rank0).unwrap().objects().is_empty());
    let _ = job;
}

const GANG: &str = r#"
name = "gang"
[[task]]
name = "gen"
command = ["true"]
replicas = 3
outputs = ["numbers"]
[[task]]
name = "sum"
kind = "allreduce"
inputs = ["gen/numbers"]
outputs = ["total"]
dtype = "f32"
max_retries = 1
"#;

pub(super) fn session(w: WorkerId) -> String {
    format!("s{}", w.as_bytes()[15])
}

/// Runs the gen replicas of GANG to success; returns where each rank ran.
fn gens_done(c: &mut Core, now: u64) -> Vec<WorkerId> {
    c.schedule(now);
    let a = assigned(c);
    assert_eq!(a.len(), 3);
    let mut at = vec![wid(0); 3];
    for (w, x) in &a {
        at[x.attempt.rank as usize] = *w;
        assert!(c.report(*w, &session(*w), vec![done(&x.attempt, SubtaskState::Succeeded)], now + 1));
    }
    at
}

#[test]
fn a_collective_gang_is_placed_together_on_distinct_workers_near_its_inputs() {
    let mut c = core();
    for n in 1..=3 {
        c.register(reg(n, &format!("s{n}"), 4, vec![]), 0);
    }
    let job = submit(&mut c, GANG, 0);
    let gen_at = gens_done(&mut c, 1);
    c.schedule(3);
    let a = assigned(&mut c);
    assert_eq!(a.len(), 3, "every member at once");
    let mut workers: Vec<WorkerId> = a.iter().map(|(w, _)| *w).collect();
    let members = a[0].1.collective.clone().expect("a communicator");
    for (w, x) in &a {
        let coll = x.collective.as_ref().unwrap();
        assert_eq!(coll, &members, "one communicator for the whole gang");
        let r = x.attempt.rank as usize;
        assert_eq!(*w, gen_at[r], "member {r} runs where its input is");
        assert_eq!(x.inputs.len(), 1, "a member reads only its own rank's input");
        assert_eq!(x.inputs[0].object.rank, x.attempt.rank);
        assert_eq!(coll.members[r], c.workers().find(|v| v.record().id == *w).unwrap().record().capacity.rails);
        assert_eq!(c.placement(job, 3 + r as u32).unwrap().placer, "gang");
    }
    assert_eq!(members.tag & 0xFFFF_FFFF, 0, "the low half is the communicator's");
    assert_eq!(c.job(job).unwrap().gangs(3)[0].phase, GangPhase::Bound { at: 3 }, "status shows the collective bound");
    workers.sort();
    workers.dedup();
    assert_eq!(workers.len(), 3, "each member on its own worker");
    assert_eq!(members.spec.dtype, plexus_proto::DType::F32);
}

/// A command task with `communicator = true` is placed like a collective (every member at once,
/// each on its own worker, one communicator) and still runs its command; its `[rank]` input
/// reads the producer replica of its rank, and a failed member restarts the whole gang.
#[test]
fn a_communicator_command_gang_gets_one_communicator_on_distinct_workers() {
    let mut c = core();
    for n in 1..=3 {
        c.register(reg(n, &format!("s{n}"), 4, vec![]), 0);
    }
    let src = "name = \"ddp\"\n[[task]]\nname = \"gen\"\ncommand = [\"true\"]\nreplicas = 3\noutputs = [\"numbers\"]\n\
               [[task]]\nname = \"train\"\ncommand = [\"python\", \"train.py\"]\nreplicas = 3\ncommunicator = true\n\
               inputs = [\"gen/numbers[rank]\"]\nmax_retries = 1\n";
    let job = submit(&mut c, src, 0);
    gens_done(&mut c, 1);
    c.schedule(3);
    let a = assigned(&mut c);
    assert_eq!(a.len(), 3, "every member at once");
    let members = a[0].1.collective.clone().expect("a communicator");
    let mut workers: Vec<WorkerId> = a.iter().map(|(w, _)| *w).collect();
    for (_, x) in &a {
        assert_eq!(x.collective.as_ref(), Some(&members), "one communicator for the whole gang");
        assert_eq!(x.work, crate::spec::Work::Command(vec!["python".into(), "train.py".into()]));
        assert_eq!(x.inputs.len(), 1);
        assert_eq!(x.inputs[0].object.rank, x.attempt.rank, "[rank] reads its own producer replica");
    }
    workers.sort();
    workers.dedup();
    assert_eq!(workers.len(), 3, "each member on its own worker");
    // Member 1 fails: the other two are cancelled and the gang is placed anew, with a new tag.
    let (w1, x1) = a.iter().find(|(_, x)| x.attempt.rank == 1).unwrap().clone();
    assert!(c.report(w1, &session(w1), vec![done(&x1.attempt, SubtaskState::Failed)], 4));
    c.schedule(5);
    let out = c.take_outbox();
    assert_eq!(out.cancels.len(), 2, "the two running members are cancelled: {:?}", out.cancels);
    let due = 4 + crate::spec::DEFAULT_RETRY_BACKOFF_MS;
    c.tick(due);
    c.schedule(due);
    let b = c.take_outbox().assignments;
    assert_eq!(b.len(), 3, "the gang restarts whole");
    assert_ne!(b[0].1.collective.as_ref().unwrap().tag, members.tag, "a new communicator");
    let _ = job;
}

/// A redistribute from the 3 replicas of `gen` to 5 members is one gang of max(3, 5): members
/// 0..3 read their rank's input, members 3 and 4 none; an alltoall with a split file reads two
/// inputs of its rank.
#[test]
fn exchange_gangs_give_each_member_the_inputs_of_its_rank() {
    let mut c = core();
    for n in 1..=5 {
        c.register(reg(n, &format!("s{n}"), 4, vec![]), 0);
    }
    let file = GANG.replace("outputs = [\"numbers\"]", "outputs = [\"numbers\", \"split\"]").replace(
        "kind = \"allreduce\"\ninputs = [\"gen/numbers\"]\noutputs = [\"total\"]\ndtype = \"f32\"\n",
        "kind = \"redistribute\"\ninputs = [\"gen/numbers\"]\noutputs = [\"total\"]\ndtype = \"f32\"\nfrom_block = 2\nto_block = 3\nreplicas = 5\n\
         [[task]]\nname = \"x\"\nkind = \"alltoall\"\ninputs = [\"gen/numbers\", \"gen/split\"]\noutputs = [\"parts\"]\ndtype = \"i32\"\nsplit = \"file\"\n",
    );
    let job = submit(&mut c, &file, 0);
    c.schedule(1);
    for (w, x) in assigned(&mut c) {
        let mut report = done(&x.attempt, SubtaskState::Succeeded);
        report.outputs.push((ObjectId { name: "split".into(), ..report.outputs[0].0.clone() }, 4));
        assert!(c.report(w, &session(w), vec![report], 2));
    }
    c.schedule(3);
    let a = assigned(&mut c);
    let redist: Vec<&Assignment> = a.iter().map(|(_, x)| x).filter(|x| x.attempt.task == "sum").collect();
    assert_eq!(redist.len(), 5, "one gang of max(P, Q) members: {a:?}");
    let mut workers: Vec<WorkerId> = a.iter().filter(|(_, x)| x.attempt.task == "sum").map(|(w, _)| *w).collect();
    workers.sort();
    workers.dedup();
    assert_eq!(workers.len(), 5, "each member on its own worker");
    for x in &redist {
        let r = x.attempt.rank;
        let objects: Vec<(u32, &str)> = x.inputs.iter().map(|i| (i.object.rank, i.object.name.as_str())).collect();
        let want: Vec<(u32, &str)> = if r < 3 { vec![(r, "numbers")] } else { vec![] };
        assert_eq!(objects, want, "member {r}");
        let layout = x.collective.as_ref().and_then(|c| c.spec.exchange.as_ref()).and_then(|e| e.redistribute).unwrap();
        assert_eq!((layout.senders, layout.receivers, layout.from_block, layout.to_block), (3, 5, 2, 3));
    }
    c.schedule(4);
    let later = assigned(&mut c);
    let x: Vec<&Assignment> = a.iter().chain(later.iter()).map(|(_, x)| x).filter(|x| x.attempt.task == "x").collect();
    assert_eq!(x.len(), 3, "the alltoall gang, when there is room: {later:?}");
    for m in x {
        let objects: Vec<(u32, &str)> = m.inputs.iter().map(|i| (i.object.rank, i.object.name.as_str())).collect();
        assert_eq!(objects, vec![(m.attempt.rank, "numbers"), (m.attempt.rank, "split")]);
    }
    assert!(c.job(job).is_some());
}

#[test]
fn a_gang_that_does_not_fit_waits_whole_and_a_too_small_cluster_is_refused() {
    let mut c = core();
    // Most of the cluster is lost at once here: evictions must not halt (`liveness.rs`).
    c.config.eviction.max_lost_share = 1.0;
    c.register(reg(1, "s1", 4, vec![]), 0);
    c.register(reg(2, "s2", 4, vec![]), 0);
    let err = c.submit(JobId::random(), parse(GANG, Format::Toml, "t.toml").unwrap(), 0).unwrap_err();
    assert!(err.to_string().contains("collective of 3 members"), "{err}");

    c.register(reg(3, "s3", 4, vec![]), 0);
    let job = submit(&mut c, GANG, 0);
    let gen_at = gens_done(&mut c, 1);
    // Worker 3 goes away: two workers cannot hold a gang of three, so nobody is placed. Workers
    // 1 and 2 come back with what they held; what worker 3 held is made again first.
    c.tick(10_000);
    for n in [1, 2] {
        let mut r = reg(n, &format!("s{n}b"), 4, vec![]);
        r.state.objects = (0..3u32)
            .filter(|&k| gen_at[k as usize] == wid(n))
            .map(|k| (ObjectId { job, task: "gen".into(), rank: k, name: "numbers".into() }, 10))
            .collect();
        c.register(r, 10_000);
    }
    // One round finds the inputs lost and re-runs the producer; the next places the re-run.
    c.schedule(10_001);
    c.schedule(10_001);
    let reruns = assigned(&mut c);
    assert!(reruns.iter().all(|(_, x)| x.collective.is_none()), "no member placed alone");
    let lost: Vec<u32> = (0..3u32).filter(|&k| gen_at[k as usize] == wid(3)).collect();
    assert_eq!(
        reruns.iter().map(|(_, x)| x.attempt.rank).collect::<Vec<_>>(),
        lost,
        "only what worker 3 held is made again"
    );
    for (w, x) in &reruns {
        c.report(*w, &format!("s{}b", w.as_bytes()[15]), vec![done(&x.attempt, SubtaskState::Succeeded)], 10_002);
    }
    c.schedule(10_003);
    assert!(assigned(&mut c).is_empty(), "no member placed alone");
    assert!((0..3).all(|r| state(&c, job, "sum", r) == SubtaskState::Ready));
}

#[test]
fn a_failed_member_restarts_the_whole_gang_with_a_new_communicator() {
    let mut c = core();
    for n in 1..=3 {
        c.register(reg(n, &format!("s{n}"), 4, vec![]), 0);
    }
    let job = submit(&mut c, GANG, 0);
    gens_done(&mut c, 1);
    c.schedule(3);
    let first = assigned(&mut c);
    let tag1 = first[0].1.collective.as_ref().unwrap().tag;
    let (w0, m0) = first.iter().find(|(_, x)| x.attempt.rank == 0).unwrap().clone();
    assert!(c.report(w0, &session(w0), vec![done(&m0.attempt, SubtaskState::Failed)], 4));
    c.schedule(5);
    let out = c.take_outbox();
    assert_eq!(out.cancels.len(), 2, "the two running members are cancelled: {:?}", out.cancels);
    assert!(out.assignments.is_empty(), "the gang waits out the failed member's back-off together");
    assert!((0..3).all(|r| state(&c, job, "sum", r) == SubtaskState::Ready));
    let due = 4 + crate::spec::DEFAULT_RETRY_BACKOFF_MS;
    c.tick(due);
    c.schedule(due);
    let out = c.take_outbox();
    assert_eq!(out.assignments.len(), 3, "and the whole gang placed again");
    for (_, x) in &out.assignments {
        assert_eq!(x.attempt.attempt, 2);
        assert_ne!(x.collective.as_ref().unwrap().tag, tag1, "a new tag space per generation");
    }
    let j = c.job(job).unwrap();
    let failures: Vec<u32> = (0..3).map(|r| j.subtasks[(3 + r) as usize].failures).collect();
    assert_eq!(failures, vec![1, 0, 0], "only the member that failed counts a failure");
    // Late CANCELLED reports of the first generation change nothing.
    for (w, x) in first.iter().filter(|(_, x)| x.attempt.rank != 0) {
        c.report(*w, &session(*w), vec![done(&x.attempt, SubtaskState::Cancelled)], 6);
    }
    assert!((0..3).all(|r| state(&c, job, "sum", r) == SubtaskState::Assigned));
}

#[test]
fn admission_counts_only_live_workers_and_a_waiting_gang_says_why() {
    let mut c = core();
    // Most of the cluster is lost at once here: evictions must not halt (`liveness.rs`).
    c.config.eviction.max_lost_share = 1.0;
    for n in 1..=3 {
        c.register(reg(n, &format!("s{n}"), 4, vec![]), 0);
    }
    let job = submit(&mut c, GANG, 0);
    // Workers 2 and 3 stop heartbeating and are lost; worker 1 keeps beating.
    let t = CoreConfig::default().heartbeat_timeout_ms + 1;
    assert!(c.heartbeat(wid(1), "s1", NodeReport::default(), t));
    c.tick(t);
    assert_eq!(c.workers().filter(|w| w.record().alive).count(), 1);

    // A new job that only the lost workers could run is refused, naming what is missing.
    let err = c.submit(JobId::random(), parse(GANG, Format::Toml, "t.toml").unwrap(), t).unwrap_err();
    assert!(matches!(err, Error::Unsatisfiable(_)));
    assert!(
        err.to_string().contains("needs 3 workers for gang \"sum\"") && err.to_string().ends_with("1 alive"),
        "{err}"
    );

    // The job accepted before says why its gang waits once its producers are done.
    c.schedule(t + 1);
    let a = assigned(&mut c);
    assert_eq!(a.len(), 3, "the gen replicas all fit on worker 1");
    for (w, x) in &a {
        c.report(*w, "s1", vec![done(&x.attempt, SubtaskState::Succeeded)], t + 2);
    }
    c.schedule(t + 3);
    assert!(assigned(&mut c).is_empty());
    let j = c.job(job).unwrap();
    let why = j.waiting.get(&1).expect("the gang's task has a reason");
    assert!(why.starts_with("needs 3 workers for gang \"sum\"") && why.ends_with("1 alive"), "{why}");
    assert!(!j.waiting.contains_key(&0), "gen has nothing waiting");

    // Everybody comes back: the gang is placed and the reason goes away.
    c.register(reg(2, "s2b", 4, vec![]), t + 4);
    c.register(reg(3, "s3b", 4, vec![]), t + 4);
    c.schedule(t + 5);
    assert_eq!(assigned(&mut c).len(), 3);
    assert!(c.job(job).unwrap().waiting.is_empty());
}

#[test]
fn with_every_worker_lost_a_job_is_refused_and_ready_work_says_so() {
    let mut c = core();
    c.register(reg(1, "s1", 4, vec![]), 0);
    let job = submit(&mut c, "[[task]]\nname = \"a\"\ncommand = [\"true\"]\ncpu = 2\n", 0);
    let t = CoreConfig::default().heartbeat_timeout_ms + 1;
    c.tick(t);
    c.schedule(t);
    let why = &c.job(job).unwrap().waiting[&0];
    assert!(why.contains("none of the 1 registered worker(s) is alive"), "{why}");
    let err = c
        .submit(
            JobId::random(),
            parse("[[task]]\nname = \"x\"\ncommand = [\"true\"]\n", Format::Toml, "t.toml").unwrap(),
            t,
        )
        .unwrap_err();
    assert!(err.to_string().contains("none of the 1 registered worker(s) is alive"), "{err}");
}

#[test]
fn a_task_too_big_for_every_live_worker_is_refused_and_a_busy_one_waits_for_room() {
    let mut c = core();
    c.register(reg(1, "s1", 4, vec![]), 0);
    let err = c
        .submit(
            JobId::random(),
            parse("[[task]]\nname = \"x\"\ncommand = [\"true\"]\ncpu = 8\n", Format::Toml, "t.toml").unwrap(),
            0,
        )
        .unwrap_err();
    assert!(err.to_string().contains("no live worker can ever offer that (largest: cpu=4"), "{err}");
    let job = submit(&mut c, "[[task]]\nname = \"x\"\ncommand = [\"true\"]\ncpu = 3\nreplicas = 2\n", 0);
    c.schedule(1);
    assert_eq!(assigned(&mut c).len(), 1);
    let why = &c.job(job).unwrap().waiting[&0];
    assert!(why.starts_with("no live worker has room now for cpu=3.00"), "{why}");
}

#[test]
fn cancelled_subtasks_end_when_they_are_cancelled() {
    let mut c = core();
    c.register(reg(1, "s1", 1, vec![]), 0);
    let job = submit(&mut c, "[[task]]\nname = \"x\"\ncommand = [\"true\"]\nreplicas = 2\n", 0);
    c.schedule(1);
    assert_eq!(assigned(&mut c).len(), 1);
    c.cancel(job, 50).unwrap();
    let j = c.job(job).unwrap();
    assert!(
        j.subtasks.iter().all(|s| s.state == SubtaskState::Cancelled && s.finished_at == 50),
        "{:?}",
        j.subtasks.iter().map(|s| s.finished_at).collect::<Vec<_>>()
    );
    assert!(j.waiting.is_empty());
}

const CONTINUE: &str = r#"
[[task]]
name = "gen"
command = ["true"]
replicas = 3
outputs = ["numbers"]
on_failure = "continue"
max_retries = 1
retry_backoff = "2s"
[[task]]
name = "sum"
command = ["true"]
inputs = ["gen/numbers"]
outputs = ["total"]
[[task]]
name = "report"
command = ["true"]
after = ["sum"]
[[task]]
name = "other"
command = ["true"]
"#;

#[test]
fn on_failure_continue_skips_dependants_and_completes_with_failures() {
    let mut c = core();
    c.register(reg(1, "s1", 8, vec![]), 0);
    let job = submit(&mut c, CONTINUE, 0);
    c.schedule(1);
    let a = assigned(&mut c);
    assert_eq!(a.len(), 4, "3 gen replicas and other");
    let gen0 = a.iter().find(|(_, x)| x.attempt.task == "gen" && x.attempt.rank == 0).unwrap().1.attempt.clone();
    c.report(wid(1), "s1", vec![done(&gen0, SubtaskState::Failed)], 10);
    // The retry waits 2 s, then fails again: past max_retries.
    c.tick(1_000);
    c.schedule(1_000);
    assert!(assigned(&mut c).is_empty());
    c.tick(2_010);
    c.schedule(2_010);
    let retry = assigned(&mut c).remove(0).1.attempt;
    assert_eq!((retry.rank, retry.attempt), (0, 2));
    c.report(wid(1), "s1", vec![done(&retry, SubtaskState::Failed)], 2_020);
    let j = c.job(job).unwrap();
    assert_eq!(j.record.state, JobState::Running, "the rest of the job runs");
    assert_eq!(state(&c, job, "gen", 0), SubtaskState::Failed);
    for (task, rank) in [("sum", 0), ("report", 0)] {
        assert_eq!(
            state(&c, job, task, rank),
            SubtaskState::Cancelled,
            "{task} depends on the failed task, directly or not"
        );
        let s = &j.subtasks[j.subtask_index(task, rank).unwrap() as usize];
        assert_eq!(s.history.last().unwrap().note, "skipped: task \"gen\" failed");
    }
    let s0 = &j.subtasks[0];
    assert_eq!(s0.failed_attempts.len(), 2, "every failed attempt is kept");
    assert_eq!(s0.failed_attempts.iter().map(|f| f.attempt).collect::<Vec<_>>(), vec![1, 2]);
    assert!(
        s0.failed_attempts.iter().all(|f| f.error == "exit code 1" && f.exit_code == 1 && f.worker == Some(wid(1)))
    );
    assert_eq!(j.failed_attempts(0), 2);
    // The other gen replicas and the independent task finish: the job completes with failures.
    for (_, x) in a.iter().filter(|(_, x)| !(x.attempt.task == "gen" && x.attempt.rank == 0)) {
        c.report(wid(1), "s1", vec![done(&x.attempt, SubtaskState::Succeeded)], 2_030);
    }
    let j = c.job(job).unwrap();
    assert_eq!(j.record.state, JobState::CompletedWithFailures);
    assert!(j.record.error.contains("task \"gen\" rank 0 failed after 2 attempts"), "{}", j.record.error);
    assert!(c.workers().all(|w| w.placed().is_empty()));
}

#[test]
fn retry_back_off_doubles_and_is_capped() {
    use crate::spec::{MAX_RETRY_BACKOFF_MS, retry_delay_ms};
    assert_eq!((1..=4).map(|f| retry_delay_ms(1_000, f)).collect::<Vec<_>>(), vec![1_000, 2_000, 4_000, 8_000]);
    assert_eq!(retry_delay_ms(1_000, 100), MAX_RETRY_BACKOFF_MS);
    assert_eq!(retry_delay_ms(0, 5), 0, "no back-off asked, none given");
    assert_eq!(
        retry_delay_ms(10 * MAX_RETRY_BACKOFF_MS, 3),
        10 * MAX_RETRY_BACKOFF_MS,
        "a first wait longer than the cap is kept"
    );
    assert_eq!(retry_delay_ms(u64::MAX / 2, 64), u64::MAX / 2, "no overflow");
}

#[test]
fn a_retry_waiting_out_its_back_off_survives_a_restart() {
    let mut c = core();
    c.register(reg(1, "s1", 8, vec![]), 0);
    let job =
        submit(&mut c, "[[task]]\nname = \"a\"\ncommand = [\"false\"]\nmax_retries = 2\nretry_backoff = \"10s\"\n", 0);
    c.schedule(1);
    let a = assigned(&mut c).remove(0).1.attempt;
    c.report(wid(1), "s1", vec![done(&a, SubtaskState::Failed)], 100);
    let j = c.job(job).unwrap();
    assert_eq!(j.subtasks[0].not_before, 10_100);
    assert_eq!(c.delayed_len(), 1);
    let snap = Snapshot {
        jobs: vec![j.record.clone()],
        subtasks: vec![(job, 0, j.subtasks[0].clone())],
        workers: c.workers().map(|w| w.record().clone()).collect(),
    };
    let mut d = core();
    d.restore(snap, 5_000).unwrap();
    assert_eq!((d.ready_len(), d.delayed_len()), (0, 1), "still waiting after the restart");
    d.register(reg(1, "s1b", 8, vec![]), 5_000);
    assert!(d.heartbeat(wid(1), "s1b", NodeReport::default(), 7_500));
    d.tick(9_000);
    d.schedule(9_000);
    assert!(assigned(&mut d).is_empty());
    assert!(d.heartbeat(wid(1), "s1b", NodeReport::default(), 10_000));
    d.tick(10_100);
    d.schedule(10_100);
    assert_eq!(assigned(&mut d).remove(0).1.attempt.attempt, 2);
}

/// Registers every worker in `ns` again with a new session, holding `objects` each.
fn beat_all(c: &mut Core, ns: &[u8], now: u64) {
    for &n in ns {
        let w = wid(n);
        let session = c.worker(w).unwrap().record().session.clone();
        assert!(c.heartbeat(
            w,
            &session,
            NodeReport {
                objects: c.worker(w).unwrap().objects().iter().map(|(o, s)| (o.clone(), *s)).collect(),
                ..Default::default()
            },
            now
        ));
    }
}

fn session_of(c: &Core, w: WorkerId) -> String {
    c.worker(w).unwrap().record().session.clone()
}

const PAIR: &str = "[[task]]\nname = \"a\"\ncommand = [\"true\"]\noutputs = [\"o\"]\ncpu = 2\n[[task]]\nname = \"b\"\ncommand = [\"true\"]\ninputs = [\"a/o\"]\ncpu = 2\n";

/// Runs PAIR's `a` to success and places `b`; returns the job, a's output, where a ran and b's
/// attempt (placed at 3).
fn pair_with_b_placed(c: &mut Core) -> (JobId, ObjectId, WorkerId, (WorkerId, Assignment)) {
    c.register(reg(1, "s1", 2, vec![]), 0);
    c.register(reg(2, "s2", 2, vec![]), 0);
    let job = submit(c, PAIR, 0);
    c.schedule(1);
    let (wa, xa) = assigned(c).remove(0);
    let o = ObjectId { job, task: "a".into(), rank: 0, name: "o".into() };
    c.report(
        wa,
        &session_of(c, wa),
        vec![Report {
            attempt: Some(xa.attempt.clone()),
            state: Some(SubtaskState::Succeeded),
            outputs: vec![(o.clone(), 10)],
            ..Default::default()
        }],
        2,
    );
    c.schedule(3);
    let b = assigned(c).remove(0);
    (job, o, wa, b)
}

fn unfetched(c: &mut Core, (w, x): &(WorkerId, Assignment), o: &ObjectId, now: u64) {
    let error = format!("could not fetch input {o}: no holder could serve it");
    let r = Report {
        attempt: Some(x.attempt.clone()),
        state: Some(SubtaskState::Failed),
        exit_code: -1,
        error,
        unfetched_input: Some(o.clone()),
        ..Default::default()
    };
    assert!(c.report(*w, &session_of(c, *w), vec![r], now));
}

/// A consumer placed in the seconds before its input's holder is declared lost cannot fetch the
/// input. That is not its failure: it is placed again, uncounted, a heartbeat timeout later, when
/// the holder is lost and the producer runs again; the job (max_retries = 0) succeeds.
#[test]
fn an_attempt_that_could_not_fetch_its_input_is_placed_again_uncounted() {
    let mut c = core();
    let (job, o, wa, b) = pair_with_b_placed(&mut c);
    unfetched(&mut c, &b, &o, 4);
    let timeout = CoreConfig::default().heartbeat_timeout_ms;
    let j = c.job(job).unwrap();
    let sb = &j.subtasks[1];
    assert_eq!((sb.state, sb.failures, sb.unfetched_requeues, sb.not_before), (SubtaskState::Ready, 0, 1, 4 + timeout));
    assert!(
        sb.history.last().unwrap().note.contains("could not be fetched")
            && sb.history.last().unwrap().note.contains("not a failure"),
        "{:?}",
        sb.history
    );
    c.schedule(5);
    assert!(assigned(&mut c).is_empty(), "not before a heartbeat timeout");
    // a's holder is dead: only the other worker beats.
    let other = if wa == wid(1) { 2 } else { 1 };
    let t = 4 + timeout + 10;
    beat_all(&mut c, &[other], t - 5);
    c.tick(t);
    for round in 0..4 {
        c.schedule(t + round);
        for (w, x) in assigned(&mut c) {
            let outputs = if x.attempt.task == "a" { vec![(o.clone(), 10)] } else { vec![] };
            c.report(
                w,
                &session_of(&c, w),
                vec![Report {
                    attempt: Some(x.attempt.clone()),
                    state: Some(SubtaskState::Succeeded),
                    outputs,
                    ..Default::default()
                }],
                t + round,
            );
        }
    }
    let j = c.job(job).unwrap();
    assert_eq!(j.record.state, JobState::Succeeded, "{}", j.record.error);
    assert_eq!((j.subtasks[0].reruns, j.subtasks[1].failures), (1, 0), "a made o again; b never failed");
}

/// The digest a producer reports goes with its output to every consumer's assignment, with each
/// holder's id. A holder whose copy a consumer found not to match it is treated as having lost
/// the object, though its heartbeats still list it: the consumer, placed again uncounted, meets
/// no holder, so the producer runs again (and its new copy is trusted again); the job succeeds.
#[test]
fn a_holder_whose_copy_does_not_match_its_digest_has_lost_it_and_the_producer_runs_again() {
    let mut c = core();
    c.register(reg(1, "s1", 2, vec![]), 0);
    c.register(reg(2, "s2", 2, vec![]), 0);
    let job = submit(&mut c, PAIR, 0);
    c.schedule(1);
    let (wa, xa) = assigned(&mut c).remove(0);
    let o = ObjectId { job, task: "a".into(), rank: 0, name: "o".into() };
    let digest = plexus_proto::Digest::of(b"0123456789");
    let ok = |x: &Assignment, outputs: Vec<(ObjectId, u64)>| Report {
        attempt: Some(x.attempt.clone()),
        state: Some(SubtaskState::Succeeded),
        outputs,
        digests: [("o".to_string(), digest), ("not-an-output".to_string(), digest)].into(),
        ..Default::default()
    };
    c.report(wa, &session_of(&c, wa), vec![ok(&xa, vec![(o.clone(), 10)])], 2);
    assert_eq!(c.job(job).unwrap().subtasks[0].digests, [("o".to_string(), digest)].into(), "outputs' only");
    c.schedule(3);
    let b = assigned(&mut c).remove(0);
    assert_eq!(b.1.inputs[0].digest, Some(digest));
    assert_eq!(b.1.inputs[0].holders.iter().map(|h| h.worker).collect::<Vec<_>>(), vec![wa]);

    let r = Report {
        attempt: Some(b.1.attempt.clone()),
        state: Some(SubtaskState::Failed),
        exit_code: -1,
        error: format!("could not fetch input {o}: its copy does not match its digest"),
        unfetched_input: Some(o.clone()),
        bad_copies: vec![BadCopy { object: o.clone(), holder: wa }],
        ..Default::default()
    };
    assert!(c.report(b.0, &session_of(&c, b.0), vec![r], 4));
    assert_eq!(c.counters().digest_mismatches, 1);
    assert!(c.live_holders(&o).is_empty(), "the bad copy is not held");
    // wa still lists the object in every heartbeat: it stays not held.
    let listing = || NodeReport { objects: vec![(o.clone(), 10)], ..Default::default() };
    let timeout = CoreConfig::default().heartbeat_timeout_ms;
    let t = 4 + timeout + 10;
    for n in [1, 2] {
        let w = wid(n);
        let node = if w == wa { listing() } else { NodeReport::default() };
        assert!(c.heartbeat(w, &session_of(&c, w), node, t - 5));
    }
    assert!(c.live_holders(&o).is_empty(), "a heartbeat listing the bad copy does not make it held again");
    c.tick(t);
    for round in 0..4 {
        c.schedule(t + round);
        for (w, x) in assigned(&mut c) {
            if x.attempt.task == "b" {
                assert_eq!(x.inputs[0].digest, Some(digest), "the re-run's digest");
                assert!(!x.inputs[0].holders.is_empty());
            }
            let outputs = if x.attempt.task == "a" { vec![(o.clone(), 10)] } else { vec![] };
            c.report(w, &session_of(&c, w), vec![ok(&x, outputs)], t + round);
        }
    }
    let j = c.job(job).unwrap();
    assert_eq!(j.record.state, JobState::Succeeded, "{}", j.record.error);
    assert_eq!((j.subtasks[0].reruns, j.subtasks[1].failures), (1, 0), "a made o again; b never failed");
}

/// A consumer still fetching its input from a worker that hangs (no report, no refusal) is not
/// left to wait out its fetch timeouts: when the holder is declared lost, the attempt is placed
/// again at once, uncounted, and the input is made again.
#[test]
fn an_attempt_fetching_from_a_worker_that_is_lost_is_placed_again_at_once() {
    let mut c = core();
    c.register(reg(1, "s1", 1, vec![]), 0);
    c.register(reg(2, "s2", 1, vec![]), 0);
    // a and hold take one worker each; blk then fills a's worker, so b goes to the other.
    let src = "[[task]]\nname = \"a\"\ncommand = [\"true\"]\noutputs = [\"o\"]\n\
               [[task]]\nname = \"hold\"\ncommand = [\"true\"]\n\
               [[task]]\nname = \"blk\"\ncommand = [\"true\"]\nafter = [\"a\"]\n\
               [[task]]\nname = \"b\"\ncommand = [\"true\"]\ninputs = [\"a/o\"]\nafter = [\"hold\"]\n";
    let job = submit(&mut c, src, 0);
    c.schedule(1);
    let first = assigned(&mut c);
    let (wa, xa) = first.iter().find(|(_, x)| x.attempt.task == "a").unwrap().clone();
    let (wh, xh) = first.iter().find(|(_, x)| x.attempt.task == "hold").unwrap().clone();
    assert_ne!(wa, wh);
    let o = ObjectId { job, task: "a".into(), rank: 0, name: "o".into() };
    c.report(
        wa,
        &session_of(&c, wa),
        vec![Report {
            attempt: Some(xa.attempt.clone()),
            state: Some(SubtaskState::Succeeded),
            outputs: vec![(o.clone(), 10)],
            ..Default::default()
        }],
        2,
    );
    c.schedule(3);
    assert_eq!(
        assigned(&mut c).iter().map(|(w, x)| (*w, x.attempt.task.as_str())).collect::<Vec<_>>(),
        vec![(wa, "blk")]
    );
    c.report(wh, &session_of(&c, wh), vec![done(&xh.attempt, SubtaskState::Succeeded)], 4);
    c.schedule(5);
    let b = assigned(&mut c).remove(0);
    assert_eq!((b.0, b.1.attempt.task.as_str()), (wh, "b"), "b fetches a/o from a's worker");
    let t = CoreConfig::default().heartbeat_timeout_ms + 10;
    let other = if wh == wid(1) { 1 } else { 2 };
    beat_all(&mut c, &[other], t - 5);
    c.tick(t);
    let out = c.take_outbox();
    assert!(out.cancels.iter().any(|(w, a)| *w == wh && a.task == "b"), "b's fetch is stopped: {:?}", out.cancels);
    let j = c.job(job).unwrap();
    let sb = &j.subtasks[j.subtask_index("b", 0).unwrap() as usize];
    assert_eq!((sb.state, sb.failures), (SubtaskState::Ready, 0));
    assert!(
        sb.history
            .last()
            .unwrap()
            .note
            .contains(&format!("its input {o} was lost with worker {wa} while being fetched")),
        "{:?}",
        sb.history
    );
    for round in 0..6 {
        c.schedule(t + 1 + round);
        for (w, x) in assigned(&mut c) {
            let outputs = if x.attempt.task == "a" { vec![(o.clone(), 10)] } else { vec![] };
            c.report(
                w,
                &session_of(&c, w),
                vec![Report {
                    attempt: Some(x.attempt.clone()),
                    state: Some(SubtaskState::Succeeded),
                    outputs,
                    ..Default::default()
                }],
                t + 1 + round,
            );
        }
    }
    let j = c.job(job).unwrap();
    assert_eq!(j.record.state, JobState::Succeeded, "{}", j.record.error);
    assert_eq!(j.subtasks[j.subtask_index("a", 0).unwrap() as usize].reruns, 1);
}

/// Holders that are alive and listed but keep failing to serve an input (a network cut between
/// workers): past MAX_UNFETCHED_REQUEUES such a failure counts, and with max_retries = 0 fails
/// the job with the fetch error. A report naming an object that is not one of the task's inputs
/// counts at once.
#[test]
fn unfetched_inputs_are_forgiven_a_bounded_number_of_times() {
    let mut c = core();
    let (job, o, wa, mut b) = pair_with_b_placed(&mut c);
    let timeout = CoreConfig::default().heartbeat_timeout_ms;
    let mut now = 4;
    for n in 1..=MAX_UNFETCHED_REQUEUES {
        unfetched(&mut c, &b, &o, now);
        assert_eq!(c.job(job).unwrap().subtasks[1].unfetched_requeues, n);
        now += timeout + 1;
        beat_all(&mut c, &[1, 2], now);
        c.tick(now);
        c.schedule(now);
        b = assigned(&mut c).remove(0);
    }
    unfetched(&mut c, &b, &o, now + 1);
    let j = c.job(job).unwrap();
    assert_eq!((j.subtasks[1].state, j.subtasks[1].failures), (SubtaskState::Failed, 1));
    assert_eq!(j.record.state, JobState::Failed);
    assert!(j.record.error.contains("could not fetch input"), "{}", j.record.error);
    let _ = wa;

    // An object that is not an input of b: an ordinary failure.
    let mut c = core();
    let (job, _, _, b) = pair_with_b_placed(&mut c);
    let stranger = ObjectId { job, task: "b".into(), rank: 0, name: "o".into() };
    unfetched(&mut c, &b, &stranger, 4);
    assert_eq!(c.job(job).unwrap().record.state, JobState::Failed);
}

#[test]
fn an_output_lost_with_its_only_holder_is_made_again_by_its_producer() {
    let mut c = core();
    c.register(reg(1, "s1", 2, vec![]), 0);
    c.register(reg(2, "s2", 2, vec![]), 0);
    // sum waits for a slow task too, so gen's outputs are held a while before anyone reads them.
    let job = submit(
        &mut c,
        &format!("{FAN}after = [\"slow\"]\n[[task]]\nname = \"slow\"\ncommand = [\"true\"]\ncpu = 0\n"),
        0,
    );
    c.schedule(1);
    let a = assigned(&mut c);
    let gens: Vec<&(WorkerId, Assignment)> = a.iter().filter(|(_, x)| x.attempt.task == "gen").collect();
    for (w, x) in &gens {
        c.report(*w, &session_of(&c, *w), vec![done(&x.attempt, SubtaskState::Succeeded)], 2);
    }
    let on_1: Vec<u32> = gens.iter().filter(|(w, _)| *w == wid(1)).map(|(_, x)| x.attempt.rank).collect();
    assert!(!on_1.is_empty() && on_1.len() < 3, "least-loaded spread the gens: {on_1:?}");
    // Worker 1 dies with its outputs; then the slow task ends and sum becomes ready.
    let t = CoreConfig::default().heartbeat_timeout_ms + 10;
    beat_all(&mut c, &[2], t - 5);
    c.tick(t);
    let (w, slow) = a.iter().find(|(_, x)| x.attempt.task == "slow").unwrap();
    if *w == wid(2) {
        c.report(*w, "s2", vec![done(&slow.attempt, SubtaskState::Succeeded)], t + 1);
    }
    c.schedule(t + 2);
    c.schedule(t + 2);
    let out = assigned(&mut c);
    let rerun: Vec<u32> = out.iter().filter(|(_, x)| x.attempt.task == "gen").map(|(_, x)| x.attempt.rank).collect();
    if *w == wid(1) {
        // The slow task itself was lost with worker 1 and runs again (not a re-run of a success).
        let (w2, slow2) = out.iter().find(|(_, x)| x.attempt.task == "slow").unwrap();
        c.report(*w2, "s2", vec![done(&slow2.attempt, SubtaskState::Succeeded)], t + 3);
    }
    assert_eq!(rerun, on_1, "exactly the lost outputs' producers run again");
    assert!(out.iter().all(|(w, _)| *w == wid(2)));
    let j = c.job(job).unwrap();
    assert_eq!(state(&c, job, "sum", 0), SubtaskState::Waiting, "sum waits for its inputs to be made again");
    for &r in &on_1 {
        let s = &j.subtasks[r as usize];
        assert_eq!((s.reruns, s.failures), (1, 0), "a re-run is counted apart from failures");
        assert!(
            s.history.iter().any(|h| h.note.contains("re-run: its output") && h.note.contains(&wid(1).to_string())),
            "{:?}",
            s.history
        );
    }
    for (w, x) in out.iter().filter(|(_, x)| x.attempt.task == "gen") {
        c.report(*w, "s2", vec![done(&x.attempt, SubtaskState::Succeeded)], t + 4);
    }
    c.schedule(t + 5);
    let sum = assigned(&mut c);
    assert_eq!(sum.len(), 1);
    assert!(sum[0].1.inputs.iter().all(|i| i.holders.len() == 1), "every input has a live holder now");
    c.report(wid(2), "s2", vec![done(&sum[0].1.attempt, SubtaskState::Succeeded)], t + 6);
    assert_eq!(c.job(job).unwrap().record.state, JobState::Succeeded);
}

#[test]
fn recovery_walks_back_through_the_lineage() {
    let mut c = core();
    c.register(reg(1, "s1", 4, vec![]), 0);
    c.register(reg(2, "s2", 4, vec![]), 0);
    let src = "[[task]]\nname = \"a\"\ncommand = [\"true\"]\noutputs = [\"o\"]\n\
               [[task]]\nname = \"b\"\ncommand = [\"true\"]\ninputs = [\"a/o\"]\noutputs = [\"o\"]\n\
               [[task]]\nname = \"gate\"\ncommand = [\"true\"]\nafter = [\"b\"]\n\
               [[task]]\nname = \"c\"\ncommand = [\"true\"]\ninputs = [\"b/o\"]\nafter = [\"gate\"]\n";
    let job = submit(&mut c, src, 0);
    let mut now = 1;
    // Runs scheduling rounds until `task` is placed (recovery takes one round per level), then
    // reports it done.
    let run = |c: &mut Core, task: &str, now: &mut u64| -> WorkerId {
        let mut a = Vec::new();
        for _ in 0..4 {
            c.schedule(*now);
            a.extend(assigned(c));
        }
        let (w, x) = a.iter().find(|(_, x)| x.attempt.task == task).unwrap_or_else(|| panic!("{task} placed: {a:?}"));
        let outputs = if task == "gate" || task == "c" {
            vec![]
        } else {
            vec![(ObjectId { job, task: task.into(), rank: 0, name: "o".into() }, 10)]
        };
        *now += 1;
        c.report(
            *w,
            &session_of(c, *w),
            vec![Report {
                attempt: Some(x.attempt.clone()),
                state: Some(SubtaskState::Succeeded),
                outputs,
                ..Default::default()
            }],
            *now,
        );
        *now += 1;
        *w
    };
    let wa = run(&mut c, "a", &mut now);
    let wb = run(&mut c, "b", &mut now);
    // Both a's and b's outputs are lost; gate runs on the survivor.
    let dead = if wa == wb { wa } else { wb };
    let survivor = if dead == wid(1) { 2 } else { 1 };
    if wa != wb {
        // Make sure a's output is lost too: its holder is the other worker, which stays. Drop it
        // by having that worker report an empty cache (evicted).
        let w = wid(survivor);
        assert!(c.heartbeat(w, &session_of(&c, w), NodeReport::default(), now));
    }
    let t = now + CoreConfig::default().heartbeat_timeout_ms + 1;
    beat_all(&mut c, &[survivor], t - 1);
    c.tick(t);
    now = t;
    run(&mut c, "gate", &mut now);
    // c finds b/o lost: b re-runs, finds a/o lost: a re-runs; then b; then c.
    let wa2 = run(&mut c, "a", &mut now);
    assert_eq!(wa2, wid(survivor));
    run(&mut c, "b", &mut now);
    run(&mut c, "c", &mut now);
    let j = c.job(job).unwrap();
    assert_eq!(j.record.state, JobState::Succeeded);
    assert_eq!((j.subtasks[0].reruns, j.subtasks[1].reruns, j.subtasks[2].reruns), (1, 1, 0));
}

/// Runs whatever the next round assigns to success; returns the (task, rank) pairs it ran.
fn run_round(c: &mut Core, now: u64) -> Vec<(String, u32)> {
    c.schedule(now);
    let mut ran = Vec::new();
    for (w, x) in assigned(c) {
        assert!(c.report(w, &session(w), vec![done(&x.attempt, SubtaskState::Succeeded)], now));
        ran.push((x.attempt.task.clone(), x.attempt.rank));
    }
    ran.sort();
    ran
}

fn ranks(task: &str, n: u32) -> Vec<(String, u32)> {
    (0..n).map(|r| (task.to_string(), r)).collect()
}

/// Four workers; GANG (3 gens, a 3-member allreduce `sum`) completed, then `gate` and `check`
/// (which reads sum's rank 1 output) still to run. Returns the core, the job and the worker
/// holding sum's rank 1 output.
fn gang_completed_before_a_gated_check() -> (Core, JobId, WorkerId) {
    let mut c = core();
    for n in 1..=4 {
        c.register(reg(n, &format!("s{n}"), 4, vec![]), 0);
    }
    let src = format!(
        "{GANG}[[task]]\nname = \"check\"\ncommand = [\"true\"]\ninputs = [\"sum/total[1]\"]\nafter = [\"gate\"]\n[[task]]\nname = \"gate\"\ncommand = [\"true\"]\nafter = [\"sum\"]\ncpu = 0\n"
    );
    let job = submit(&mut c, &src, 0);
    gens_done(&mut c, 1);
    c.schedule(3);
    let members = assigned(&mut c);
    for (w, x) in &members {
        c.report(*w, &session(*w), vec![done(&x.attempt, SubtaskState::Succeeded)], 4);
    }
    let holder = members.iter().find(|(_, x)| x.attempt.rank == 1).unwrap().0;
    (c, job, holder)
}

/// Declares `holder` lost (every other of workers 1..=4 heartbeats); returns the time.
fn lose(c: &mut Core, holder: WorkerId) -> u64 {
    let others: Vec<u8> = (1..=4).filter(|&n| wid(n) != holder).collect();
    let t = CoreConfig::default().heartbeat_timeout_ms + 10;
    beat_all(c, &others, t - 1);
    c.tick(t);
    t
}

/// A collective member's output lost after the gang completed: the member cannot run alone, so
/// the whole gang runs again (the lost member's own input, lost with the same worker, first),
/// and the consumer gets its input.
#[test]
fn a_lost_output_of_a_completed_collective_reruns_the_whole_gang() {
    let (mut c, job, holder) = gang_completed_before_a_gated_check();
    let t = lose(&mut c, holder);
    assert_eq!(run_round(&mut c, t), vec![("gate".to_string(), 0)]);
    // check finds sum/total[1] lost: every member of sum is ready again, check waits.
    assert_eq!(run_round(&mut c, t + 1), vec![]);
    assert_eq!(state(&c, job, "check", 0), SubtaskState::Waiting);
    assert!((0..3).all(|r| state(&c, job, "sum", r) == SubtaskState::Ready));
    // The gang finds its rank 1 input (gen/numbers[1], on the same worker) lost: gen 1 runs again.
    assert_eq!(run_round(&mut c, t + 2), vec![]);
    assert_eq!(run_round(&mut c, t + 3), vec![("gen".to_string(), 1)]);
    let again = run_round(&mut c, t + 4);
    assert_eq!(again, ranks("sum", 3), "the gang runs whole");
    assert_eq!(run_round(&mut c, t + 5), vec![("check".to_string(), 0)]);
    let j = c.job(job).unwrap();
    assert_eq!(j.record.state, JobState::Succeeded, "{}", j.record.error);
    for r in 0..3 {
        let s = &j.subtasks[j.subtask_index("sum", r).unwrap() as usize];
        assert_eq!((s.reruns, s.failures), (1, 0), "member {r}: a re-run, not a failure");
        assert_ne!(s.worker, Some(holder));
    }
    let checks = &j.subtasks[j.subtask_index("check", 0).unwrap() as usize];
    assert_eq!(checks.failures, 0, "the consumer never ran without its input");
}

/// Four workers; GANG's gens done and its `sum` placed, every member but rank 1 reported
/// succeeded. Returns the core, the job and rank 1's worker.
fn gang_with_member_1_still_running() -> (Core, JobId, WorkerId) {
    let mut c = core();
    for n in 1..=4 {
        c.register(reg(n, &format!("s{n}"), 4, vec![]), 0);
    }
    let job = submit(&mut c, GANG, 0);
    gens_done(&mut c, 1);
    c.schedule(3);
    let members = assigned(&mut c);
    let (holder, _) = members.iter().find(|(_, x)| x.attempt.rank == 1).unwrap().clone();
    for (w, x) in members.iter().filter(|(_, x)| x.attempt.rank != 1) {
        c.report(*w, &session(*w), vec![done(&x.attempt, SubtaskState::Succeeded)], 4);
    }
    (c, job, holder)
}

/// A member lost while the others already completed (they reported success, it never did): the
/// gang restarts whole instead of failing the job.
#[test]
fn a_member_lost_after_its_peers_completed_reruns_the_whole_gang() {
    let (mut c, job, holder) = gang_with_member_1_still_running();
    let t = lose(&mut c, holder);
    assert_eq!(state(&c, job, "sum", 1), SubtaskState::Ready, "lost with its worker");
    assert_eq!(run_round(&mut c, t), vec![]);
    // The completed members run again with it; all wait for gen 1, lost with the same worker.
    let states: Vec<SubtaskState> = (0..3).map(|r| state(&c, job, "sum", r)).collect();
    assert_eq!(states, vec![SubtaskState::Waiting; 3]);
    let phase = c.job(job).unwrap().gangs(t)[0].phase;
    assert!(!matches!(phase, GangPhase::Bound { .. }), "a restarting collective is not shown bound: {phase:?}");
    assert_eq!(run_round(&mut c, t + 1), vec![("gen".to_string(), 1)]);
    assert_eq!(run_round(&mut c, t + 2), ranks("sum", 3));
    let j = c.job(job).unwrap();
    assert_eq!(j.record.state, JobState::Succeeded, "{}", j.record.error);
    let reruns: Vec<u32> = (0..3).map(|r| j.subtasks[j.subtask_index("sum", r).unwrap() as usize].reruns).collect();
    assert_eq!(reruns, vec![1, 0, 1], "the completed members re-ran; the lost one was requeued");
    assert_eq!(j.gangs(t + 2)[0].phase, GangPhase::Bound { at: t + 2 }, "bound again when placed whole");
}

/// A member lost after its peers completed, one of which was re-run MAX_RERUNS times already:
/// the lost member fails under the task's on_failure, naming the spent member.
#[test]
fn a_gang_that_cannot_run_again_fails_its_waiting_member() {
    let (mut c, job, holder) = gang_with_member_1_still_running();
    c.jobs
        .get_mut(&job)
        .unwrap()
        .subtasks
        .iter_mut()
        .filter(|s| s.task == "sum" && s.rank == 2)
        .for_each(|s| s.reruns = MAX_RERUNS);
    let t = lose(&mut c, holder);
    c.schedule(t);
    let j = c.job(job).unwrap();
    assert_eq!(j.record.state, JobState::Failed);
    let want = format!(
        "task \"sum\" rank 1 cannot run: its collective's member 2 completed but must run again with the gang, and it was re-run {MAX_RERUNS} times already"
    );
    assert_eq!(j.record.error, want);
}

/// Past MAX_RERUNS re-runs of a collective, recovery gives up, naming the object, its worker and
/// the member that was re-run too often.
#[test]
fn a_collective_rerun_too_often_fails_its_consumer_naming_object_and_worker() {
    let (mut c, job, holder) = gang_completed_before_a_gated_check();
    c.jobs
        .get_mut(&job)
        .unwrap()
        .subtasks
        .iter_mut()
        .filter(|s| s.task == "sum" && s.rank == 2)
        .for_each(|s| s.reruns = MAX_RERUNS);
    let t = lose(&mut c, holder);
    assert_eq!(run_round(&mut c, t), vec![("gate".to_string(), 0)]);
    c.schedule(t + 1);
    let j = c.job(job).unwrap();
    assert_eq!(j.record.state, JobState::Failed);
    let want = format!(
        "input {job}/sum/1/total was lost with worker {holder}, and its producer cannot be re-run: member 2 of its collective was re-run {MAX_RERUNS} times already"
    );
    assert!(j.record.error.contains(&want), "{}", j.record.error);
    assert!(j.record.error.starts_with("task \"check\" rank 0 cannot run: "), "{}", j.record.error);
}

#[test]
fn after_a_coordinator_restart_inputs_wait_for_their_holders_to_register() {
    let mut c = core();
    c.register(reg(1, "s1", 4, vec![]), 0);
    c.register(reg(2, "s2", 4, vec![]), 0);
    let job = submit(
        &mut c,
        "[[task]]\nname = \"a\"\ncommand = [\"true\"]\noutputs = [\"o\"]\ncpu = 4\n[[task]]\nname = \"b\"\ncommand = [\"true\"]\ninputs = [\"a/o\"]\ncpu = 4\n",
        0,
    );
    c.schedule(1);
    let (wa, xa) = assigned(&mut c).remove(0);
    c.report(
        wa,
        &session_of(&c, wa),
        vec![Report {
            attempt: Some(xa.attempt.clone()),
            state: Some(SubtaskState::Succeeded),
            outputs: vec![(ObjectId { job, task: "a".into(), rank: 0, name: "o".into() }, 10)],
            ..Default::default()
        }],
        2,
    );
    let j = c.job(job).unwrap();
    let snap = Snapshot {
        jobs: vec![j.record.clone()],
        subtasks: j.subtasks.iter().enumerate().map(|(i, s)| (job, i as u32, s.clone())).collect(),
        workers: c.workers().map(|w| w.record().clone()).collect(),
    };
    let mut d = core();
    d.restore(snap, 10).unwrap();
    let other = if wa == wid(1) { 2 } else { 1 };
    // The worker that does not hold a/o registers first: b must wait, not re-run a.
    d.register(reg(other, &format!("s{other}"), 4, vec![]), 11);
    d.schedule(12);
    d.schedule(12);
    assert!(assigned(&mut d).is_empty());
    assert_eq!(d.job(job).unwrap().subtasks[0].reruns, 0);
    let mut r = reg(wa.as_bytes()[15], "s-back", 4, vec![]);
    r.state.objects = vec![(ObjectId { job, task: "a".into(), rank: 0, name: "o".into() }, 10)];
    d.register(r, 13);
    d.schedule(14);
    let b = assigned(&mut d);
    assert_eq!(b.len(), 1);
    assert_eq!((b[0].0, b[0].1.attempt.task.as_str()), (wa, "b"));
}

fn gpu_worker(n: u8, indices: &[u32]) -> Registration {
    let mut r = reg(n, &format!("s{n}"), 8, vec![]);
    r.capacity.gpus = indices.iter().map(|&index| GpuRecord { index, name: "H100".into(), memory: 80 << 30 }).collect();
    r
}

/// `gpu_share`: sharing tasks join a device while their `gpu_memory` fits it (spread over the
/// least shared devices first); a whole-device task never gets a shared device, and sharing
/// tasks never join a device held whole; memory and devices come back when they end.
#[test]
fn sharing_tasks_fit_their_gpu_memory_and_never_meet_whole_device_tasks() {
    let mut c = core();
    c.register(gpu_worker(1, &[0, 1]), 0);
    let share = |name: &str, mem: &str, n: u32| {
        format!(
            "[[task]]\nname = \"{name}\"\ncommand = [\"true\"]\ncpu = 0\ngpu_share = true\ngpu_memory = \"{mem}\"\nreplicas = {n}\n"
        )
    };
    let job = submit(&mut c, &share("s", "30GiB", 4), 0);
    c.schedule(1);
    let a = assigned(&mut c);
    assert_eq!(a.len(), 4, "two 30 GiB tasks on each 80 GiB device: {a:?}");
    let mut devices: Vec<u32> = a
        .iter()
        .map(|(_, x)| {
            assert_eq!((x.resources.gpu, x.gpus.len()), (1, 1), "the worker is told one device");
            x.gpus[0]
        })
        .collect();
    devices.sort();
    assert_eq!(devices, vec![0, 0, 1, 1]);
    let w = c.worker(wid(1)).unwrap();
    assert_eq!((w.available().gpu, w.gpus_used().len()), (0, 0), "shared devices are taken for whole-device tasks");
    assert_eq!(w.gpu_shared().get(&0), Some(&((60u64) << 30, 2)));

    // A third 30 GiB task does not fit (20 GiB left on each); a whole-device task waits too.
    let more = submit(&mut c, &share("t", "30GiB", 1), 2);
    let whole = submit(&mut c, "[[task]]\nname = \"w\"\ncommand = [\"true\"]\ncpu = 0\ngpu = 1\n", 2);
    c.schedule(3);
    assert!(assigned(&mut c).is_empty());
    assert_eq!(state(&c, more, "t", 0), SubtaskState::Ready);
    let why = c.explain(more, "t", 0).err().map(|e| e.to_string()).unwrap_or_default();
    assert!(why.contains("not been placed"), "{why}");

    // Both tasks of device 1 end: the older waiting job, the sharing one, joins it; the
    // whole-device task still finds no device free of sharers.
    for (w, x) in a.iter().filter(|(_, x)| x.gpus[0] == 1) {
        assert!(c.report(*w, &session(*w), vec![done(&x.attempt, SubtaskState::Succeeded)], 4));
    }
    c.schedule(5);
    let b = assigned(&mut c);
    assert_eq!(b.len(), 1, "{b:?}");
    assert_eq!((b[0].1.attempt.job, b[0].1.gpus.clone()), (more, vec![1]));
    assert_eq!(state(&c, whole, "w", 0), SubtaskState::Ready);
    // The first job's sharers of device 0 end (cancelled): the whole-device task takes it.
    c.cancel(job, 6).unwrap();
    let w = c.worker(wid(1)).unwrap();
    assert_eq!(w.gpu_shared().keys().copied().collect::<Vec<_>>(), vec![1], "{:?}", w.gpu_shared());
    c.schedule(7);
    let d = assigned(&mut c);
    assert_eq!((d.len(), d[0].1.attempt.job, d[0].1.gpus.clone()), (1, whole, vec![0]));
    assert!(c.worker(wid(1)).unwrap().shareable_gpus(1).iter().all(|&g| g == 1), "device 0 is held whole");

    // Admission: no GPU is as large as asked.
    let e =
        c.submit(JobId::random(), parse(&share("huge", "100GiB", 1), Format::Toml, "t.toml").unwrap(), 8).unwrap_err();
    assert!(
        e.to_string().contains("gpu_memory = 100.0 GiB but no live worker has a GPU that large (largest: 80.0 GiB)"),
        "{e}"
    );
}

/// GPU runs teach the core's learner: a run alone gives its signature's solo time (its printed
/// iteration time when it has one), which every later vector of the same work carries; sharing
/// attempts on one device are each other's peers.
#[test]
fn gpu_runs_teach_solo_times_and_sharers_meet() {
    let mut c = core();
    c.register(gpu_worker(1, &[0]), 0);
    let file = "[[task]]\nname = \"train\"\ncommand = [\"python\", \"train.py\"]\ncpu = 0\ngpu_share = true\ngpu_memory = \"10GiB\"\ngpu_util = 0.7\n";
    let first = submit(&mut c, file, 0);
    c.schedule(1);
    let a = assigned(&mut c);
    let report =
        Report { iter_ms: 12.5, started_at: 1, finished_at: 1001, ..done(&a[0].1.attempt, SubtaskState::Succeeded) };
    assert!(c.report(a[0].0, &session(a[0].0), vec![report], 1002));
    let spec = c.job(first).unwrap().record.spec.tasks[0].clone();
    let v = c.task_vector(&spec, 80 << 30);
    assert_eq!((v.solo_ms, v.utilisation, v.gpu_memory, v.device_memory), (12.5, 0.7, 10 << 30, 80 << 30));
    // The same work in another job (another name) has the same signature.
    let renamed = parse(&file.replace("train\"\ncommand", "again\"\ncommand"), Format::Toml, "t.toml").unwrap();
    assert_eq!(c.task_vector(&renamed.tasks[0], 80 << 30).signature, v.signature);

    // Two sharers on the one device meet; each knows the other as a peer.
    submit(&mut c, &file.replace("cpu = 0", "cpu = 0\nreplicas = 2"), 2000);
    c.schedule(2001);
    let b = assigned(&mut c);
    assert_eq!(b.len(), 2);
    let w = c.worker(wid(1)).unwrap();
    let keys: Vec<_> = w.gpu_peers().keys().copied().collect();
    assert_eq!(keys.len(), 2);
    for k in &keys {
        assert_eq!(w.gpu_peers()[k].len(), 1, "{:?}", w.gpu_peers());
        assert!(!w.gpu_peers()[k].contains(k));
    }
    for (wk, x) in &b {
        assert!(c.report(*wk, &session(*wk), vec![done(&x.attempt, SubtaskState::Succeeded)], 3000));
    }
    assert!(c.worker(wid(1)).unwrap().gpu_peers().is_empty(), "released with their attempts");
}

/// Issue 16, item 4: a GPU gang goes where seed 002's search puts the group. On a worker whose
/// GPUs 2 and 3 are joined by NVLink (the others by SYS), beside a worker whose GPUs are all
/// SYS-linked, a 2-member gang that synchronises a large model takes the NVLink pair, each
/// member's decision says why (SFLA, predicted slowdown, I, C, objective, greedy's objective).
#[test]
fn a_gpu_gang_is_placed_by_the_search_on_the_best_connected_gpus() {
    use plexus_proto::topology::{GpuLink, LinkLevel};
    let mut c = core();
    let mut nv = gpu_worker(1, &[0, 1, 2, 3]);
    let mut links = Vec::new();
    for a in 0..4u32 {
        for b in a + 1..4 {
            links.push(GpuLink { a, b, level: if (a, b) == (2, 3) { LinkLevel::NvLink(2) } else { LinkLevel::Sys } });
        }
    }
    nv.capacity.topology.gpu_links = links;
    c.register(nv, 0);
    c.register(gpu_worker(2, &[0, 1, 2, 3]), 0);
    let job = submit(
        &mut c,
        "[[task]]\nname = \"train\"\ncommand = [\"true\"]\ncpu = 1\ngpu = 1\nmodel_size = \"1GiB\"\nreplicas = 2\nmin_members = 2\n",
        0,
    );
    c.schedule(1);
    let a = assigned(&mut c);
    assert_eq!(a.len(), 2, "bound whole: {a:?}");
    let mut at: Vec<(WorkerId, Vec<u32>)> = a.iter().map(|(w, x)| (*w, x.gpus.clone())).collect();
    at.sort();
    let why = c.explain(job, "train", 0).map(|p| p.reason.clone()).unwrap_or_default();
    assert_eq!(at, vec![(wid(1), vec![2]), (wid(1), vec![3])], "the NVLink pair: {why}");
    for r in 0..2 {
        let p = c.explain(job, "train", r).unwrap();
        assert_eq!(p.placer, "sfla");
        for part in ["SFLA over", "predicted slowdown", "I = ", "C = ", "objective", "greedy's would be"] {
            assert!(p.reason.contains(part), "{part}: {}", p.reason);
        }
    }
}

/// Issue 31, item 5: a collective GPU gang (`communicator = true`, `gpu = 1` per member) goes
/// where seed 002's search puts it, one member per worker: on three one-GPU workers, workers 1
/// and 3 in one rack and worker 2 in another, a 2-member gang with a large model takes the rack
/// pair (placement near inputs / most free cores would take workers 1 and 2), and each member's
/// decision says SFLA chose it, one member per worker, with the weights used.
#[test]
fn a_collective_gpu_gang_is_placed_by_the_search_one_member_per_worker() {
    let file = "[[task]]\nname = \"train\"\ncommand = [\"true\"]\ncpu = 1\ngpu = 1\nmodel_size = \"1GiB\"\nreplicas = 2\ncommunicator = true\n";
    let place = |weights: Weights| {
        let mut c = Core::new(
            CoreConfig { gpu_weights: weights, ..CoreConfig::default() },
            heuristic("least-loaded", 1).unwrap(),
        );
        for (n, rack) in [(1, "r1"), (2, "r2"), (3, "r1")] {
            let mut r = gpu_worker(n, &[0, 1]);
            r.capacity.topology.labels.insert("rack".into(), rack.into());
            c.register(r, 0);
        }
        let job = submit(&mut c, file, 0);
        c.schedule(1);
        let a = assigned(&mut c);
        assert_eq!(a.len(), 2, "placed whole: {a:?}");
        let mut at: Vec<(WorkerId, Vec<u32>)> = a.iter().map(|(w, x)| (*w, x.gpus.clone())).collect();
        at.sort();
        assert!(a.iter().all(|(_, x)| x.collective.is_some()), "members of one communicator");
        (c, job, at)
    };
    let (c, job, at) = place(Weights::default());
    let why = c.explain(job, "train", 0).map(|p| p.reason.clone()).unwrap_or_default();
    assert_eq!(at, vec![(wid(1), vec![0]), (wid(3), vec![0])], "the same-rack pair, one member each: {why}");
    for r in 0..2 {
        let p = c.explain(job, "train", r).unwrap();
        assert_eq!(p.placer, "sfla");
        for part in ["SFLA over", "(one member per worker)", "α = 1, β = 1", "greedy's would be"] {
            assert!(p.reason.contains(part), "{part}: {}", p.reason);
        }
    }
    // The weights are the configured ones: with β = 0 the communication cost weighs nothing,
    // every spread is equal, and the reason says so.
    let (c, job, at) = place(Weights { alpha: 1.0, beta: 0.0, msc_ref: None });
    assert_eq!(at.len(), 2);
    assert_ne!(at[0].0, at[1].0, "one member per worker whatever the weights");
    assert!(c.explain(job, "train", 0).unwrap().reason.contains("α = 1, β = 0"));
}

/// A collective that asks no GPU is placed as before, near its inputs (placer `gang`).
#[test]
fn a_collective_without_gpus_is_not_placed_by_the_search() {
    let mut c = core();
    for n in 1..=3 {
        c.register(gpu_worker(n, &[0]), 0);
    }
    let job = submit(
        &mut c,
        "[[task]]\nname = \"train\"\ncommand = [\"true\"]\ncpu = 1\nreplicas = 2\ncommunicator = true\n",
        0,
    );
    c.schedule(1);
    assert_eq!(assigned(&mut c).len(), 2);
    assert_eq!(c.explain(job, "train", 0).unwrap().placer, "gang");
}

/// `--gpu-weights`: `alpha=A,beta=B`, either left out keeps 1; bad input is named.
#[test]
fn gpu_weights_parse_and_refuse_bad_input() {
    assert_eq!("alpha=2,beta=0.5".parse::<Weights>().unwrap(), Weights { alpha: 2.0, beta: 0.5, msc_ref: None });
    assert_eq!("beta=3".parse::<Weights>().unwrap(), Weights { alpha: 1.0, beta: 3.0, msc_ref: None });
    let w: Weights = Weights::default().to_string().parse().unwrap();
    assert_eq!(w, Weights::default(), "Display reads back");
    for (bad, says) in [
        ("alpha", "not key=value"),
        ("gamma=1", "unknown key \"gamma\""),
        ("alpha=1,alpha=2", "alpha is given twice"),
        ("beta=-1", "not a finite number"),
        ("beta=inf", "not a finite number"),
        ("alpha=NaN", "not a finite number"),
        ("alpha=0,beta=0", "both 0"),
    ] {
        let e = bad.parse::<Weights>().unwrap_err().to_string();
        assert!(e.contains(says), "{bad}: {e}");
    }
}

/// Issue 32, item 4: `constraints` keep a task on the workers whose labels meet them, a task
/// no live worker meets waits with the reason, and a constraint on a label no worker has ever
/// carried is refused at submit; `gpu_model` is any word of a device's model name.
#[test]
fn constraints_choose_workers_by_their_labels() {
    let mut c = core();
    c.register(racked(1, "s1", "r1"), 0);
    c.register(racked(2, "s2", "r2"), 0);
    let mut g = gpu_worker(3, &[0]);
    g.capacity.gpus[0].name = "NVIDIA A100-SXM4-80GB".into();
    g.capacity.topology.labels.insert("spot".into(), "yes".into());
    c.register(g, 0);
    let task = |constraints: &str| {
        format!("[[task]]\nname = \"t\"\ncommand = [\"true\"]\ncpu = 1\nreplicas = 4\nconstraints = {constraints}\n")
    };
    let workers_of = |c: &mut Core, file: &str, at: u64| {
        let job = submit(c, file, at);
        c.schedule(at + 1);
        let mut w: Vec<WorkerId> = assigned(c).into_iter().map(|(w, _)| w).collect();
        w.sort();
        w.dedup();
        (job, w)
    };
    assert_eq!(workers_of(&mut c, &task("{ rack = \"r1\" }"), 10).1, vec![wid(1)]);
    assert_eq!(workers_of(&mut c, &task("{ rack = \"!=r1\", spot = false }"), 20).1, vec![wid(2)]);
    assert_eq!(workers_of(&mut c, &task("{ gpu_model = \"A100\" }"), 30).1, vec![wid(3)]);
    assert_eq!(workers_of(&mut c, &task("{ spot = true }"), 40).1, vec![wid(3)]);

    // A rack no live worker is in: the job waits, saying so.
    let (job, none) = workers_of(&mut c, &task("{ rack = \"r9\" }"), 50);
    assert!(none.is_empty());
    let why = c.job(job).unwrap().waiting_reason(0).unwrap_or_default().to_string();
    for part in ["requires rack=r9", "none of the 3 live worker(s) meets it", "rack: r1, r2"] {
        assert!(why.contains(part), "{part}: {why}");
    }
    // A worker in that rack comes: it runs there.
    c.register(racked(4, "s4", "r9"), 60);
    c.schedule(61);
    let a = assigned(&mut c);
    assert!(!a.is_empty() && a.iter().all(|(w, _)| *w == wid(4)), "{a:?}");

    // A label no worker has ever carried: refused at submit, naming it.
    let spec = parse(&task("{ zone = \"a\" }"), Format::Toml, "t.toml").unwrap();
    let err = c.submit(JobId::random(), spec, 70).unwrap_err().to_string();
    assert!(err.contains("constraint zone=a: no worker has ever carried the label \"zone\""), "{err}");
    assert!(err.contains("labels seen: rack, spot"), "{err}");
    // ... but its absence, or inequality, is met by every worker.
    for ok in ["{ zone = false }", "{ zone = \"!=a\" }"] {
        let spec = parse(&task(ok), Format::Toml, "t.toml").unwrap();
        assert!(c.submit(JobId::random(), spec, 80).is_ok(), "{ok}");
    }
}

#[test]
fn gpu_tasks_get_their_own_devices() {
    let mut c = core();
    c.register(gpu_worker(1, &[0, 2]), 0);
    let job = submit(&mut c, "[[task]]\nname = \"train\"\ncommand = [\"true\"]\ngpu = 1\nreplicas = 3\n", 0);
    c.schedule(1);
    let a = assigned(&mut c);
    assert_eq!(a.len(), 2, "two devices, two concurrent tasks");
    let mut devices: Vec<Vec<u32>> = a.iter().map(|(_, x)| x.gpus.clone()).collect();
    devices.sort();
    assert_eq!(devices, vec![vec![0], vec![2]], "each gets one of the worker's own indices, none shared");
    // The one holding device 2 ends: the third replica gets device 2, not 0.
    let (_, on2) = a.iter().find(|(_, x)| x.gpus == vec![2]).unwrap();
    c.report(wid(1), "s1", vec![done(&on2.attempt, SubtaskState::Succeeded)], 2);
    c.schedule(3);
    let b = assigned(&mut c);
    assert_eq!(b.len(), 1);
    assert_eq!(b[0].1.gpus, vec![2]);
    // Devices held by placed attempts survive a restart.
    let j = c.job(job).unwrap();
    let snap = Snapshot {
        jobs: vec![j.record.clone()],
        subtasks: j.subtasks.iter().enumerate().map(|(i, s)| (job, i as u32, s.clone())).collect(),
        workers: c.workers().map(|w| w.record().clone()).collect(),
    };
    let mut d = core();
    d.restore(snap, 5).unwrap();
    assert_eq!(d.worker(wid(1)).unwrap().gpus_used(), &[0u32, 2].into_iter().collect::<BTreeSet<u32>>());
    assert_eq!(d.worker(wid(1)).unwrap().free_gpus(1), None);
}

#[test]
fn a_two_gpu_task_gets_two_distinct_devices_and_frees_them() {
    let mut c = core();
    c.register(gpu_worker(1, &[0, 1, 2, 3]), 0);
    let job = submit(&mut c, "[[task]]\nname = \"t\"\ncommand = [\"true\"]\ngpu = 2\nreplicas = 2\n", 0);
    c.schedule(1);
    let a = assigned(&mut c);
    let mut all: Vec<u32> = a.iter().flat_map(|(_, x)| x.gpus.clone()).collect();
    all.sort();
    assert_eq!(all, vec![0, 1, 2, 3]);
    c.cancel(job, 2).unwrap();
    assert!(c.worker(wid(1)).unwrap().gpus_used().is_empty());
    assert_eq!(c.worker(wid(1)).unwrap().free_gpus(4), Some(vec![0, 1, 2, 3]));
}

fn racked(n: u8, session: &str, rack: &str) -> Registration {
    let mut r = reg(n, session, 4, vec![]);
    r.capacity.topology.labels.insert("rack".into(), rack.into());
    r
}

fn close(a: f64, b: f64) -> bool {
    (a - b).abs() <= 1e-9 * b.abs().max(1.0)
}

fn feature(r: &PlacementRecord, w: WorkerId, name: &str) -> Option<f64> {
    r.candidates.iter().find(|c| c.worker == w)?.features.get(name)
}

/// Issue 17: run times reported by workers become each worker's compute estimate; `fastest`
/// places on them, a worker that never ran the task is taken to be typical, and `explain` shows
/// the estimates with the samples behind them.
#[test]
fn measured_run_times_become_estimates_that_fastest_places_on() {
    let mut c = Core::new(CoreConfig::default(), heuristic("fastest", 1).unwrap());
    for n in 1..=3 {
        c.register(reg(n, &format!("s{n}"), 4, vec![]), 0);
    }
    const WORK: &str = "[[task]]\nname = \"w\"\ncommand = [\"work\"]\nreplicas = 3\n";
    let job = submit(&mut c, WORK, 0);
    c.schedule(1);
    let a = assigned(&mut c);
    let p = c.explain(job, "w", 0).unwrap();
    assert!(p.reason.starts_with("no estimate"), "nothing measured: placed as least-loaded: {}", p.reason);
    assert_eq!(feature(p, wid(1), "est_fetch_ms"), Some(0.0), "no inputs: nothing to fetch");
    assert_eq!(feature(p, wid(1), "est_compute_ms"), None);
    // Least-loaded spread them: worker 1 runs it in 100 ms, 2 in 300, 3 in 200.
    assert_eq!(a.iter().map(|(w, _)| *w).collect::<BTreeSet<_>>().len(), 3);
    for (w, x) in &a {
        let ms = [100, 300, 200][w.as_bytes()[15] as usize - 1];
        let r = Report { started_at: 1_000, finished_at: 1_000 + ms, ..done(&x.attempt, SubtaskState::Succeeded) };
        c.report(*w, &format!("s{}", w.as_bytes()[15]), vec![r], 2);
    }
    assert_eq!(c.job(job).unwrap().record.state, JobState::Succeeded);
    let job = submit(&mut c, &WORK.replace("replicas = 3", "replicas = 1"), 3);
    c.schedule(3);
    let a = assigned(&mut c);
    assert_eq!(a[0].0, wid(1), "the fastest measured worker");
    let p = c.explain(job, "w", 0).unwrap();
    assert!(p.reason.starts_with("least estimated"), "{}", p.reason);
    for (n, ms) in [(1, 100.0), (2, 300.0), (3, 200.0)] {
        assert_eq!(feature(p, wid(n), "est_compute_ms"), Some(ms));
        assert_eq!(feature(p, wid(n), "est_compute_samples"), Some(1.0));
    }
    // A new worker has run nothing: it is taken to be typical, the mean of the others.
    c.register(reg(4, "s4", 4, vec![]), 4);
    let sig = signature(&c.job(job).unwrap().record.spec.tasks[0]);
    assert_eq!(c.estimates().compute(wid(4), sig, None).map(|e| (e.ms, e.samples)), Some((200.0, 0.0)));
    // A second run on worker 1 moves its mean by recency weight: (0.9·100 + 160) / 1.9.
    let r = Report { started_at: 5_000, finished_at: 5_160, ..done(&a[0].1.attempt, SubtaskState::Succeeded) };
    c.report(wid(1), "s1", vec![r], 5);
    let e = c.estimates().compute(wid(1), sig, None).unwrap();
    assert!(close(e.ms, 250.0 / 1.9) && close(e.samples, 1.9), "{e:?}");
    let speeds = c.estimates().speeds();
    assert_eq!(speeds[&wid(2)].signatures, 1);
    assert!(speeds[&wid(1)].relative_speed.unwrap() > 1.0 && speeds[&wid(2)].relative_speed.unwrap() < 1.0);
}

/// Issue 17: a candidate's fetch estimate takes each missing input from its best holder; the
/// assignment lists that holder first; and the attempt's measured fetch is attributed to it.
/// Unmeasured pairs fall back to their rack class, then to the cluster's mean.
#[test]
fn measured_fetches_rank_holders_and_are_attributed_to_the_main_holder() {
    let mut c = Core::new(CoreConfig::default(), heuristic("fastest", 1).unwrap());
    c.register(racked(1, "s1", "r1"), 0);
    c.register(racked(2, "s2", "r2"), 0);
    c.register(racked(3, "s3", "r2"), 0);
    let src = "[[task]]\nname = \"gen\"\ncommand = [\"gen\"]\noutputs = [\"numbers\"]\n[[task]]\nname = \"sum\"\ncommand = [\"sum\"]\ninputs = [\"gen/numbers\"]\n";
    let job = submit(&mut c, src, 0);
    let (gen_sig, sum_sig) = {
        let spec = &c.job(job).unwrap().record.spec;
        (signature(&spec.tasks[0]), signature(&spec.tasks[1]))
    };
    c.schedule(1);
    let a = assigned(&mut c);
    assert_eq!(a[0].0, wid(1), "nothing measured: least-loaded's first");
    let object = ObjectId { job, task: "gen".into(), rank: 0, name: "numbers".into() };
    let gen_done = Report {
        outputs: vec![(object.clone(), 1 << 20)],
        started_at: 10,
        finished_at: 20,
        ..done(&a[0].1.attempt, SubtaskState::Succeeded)
    };
    c.report(wid(1), "s1", vec![gen_done], 2);
    // Worker 2 holds a copy too.
    assert!(c.heartbeat(
        wid(2),
        "s2",
        NodeReport { objects: vec![(object.clone(), 1 << 20)], ..Default::default() },
        2
    ));
    // What was measured before: worker 3 computes `sum` in 10 ms, 1 and 2 in 1000 ms; worker 1
    // sends 1 MiB to worker 3 in 500 ms, worker 2 (its rack) in 20 ms.
    let mut e = c.estimates().clone();
    e.observe_run(wid(1), sum_sig, None, 1_000.0);
    e.observe_run(wid(2), sum_sig, None, 1_000.0);
    e.observe_run(wid(3), sum_sig, None, 10.0);
    e.observe_fetch(wid(1), wid(3), Some(false), 1, 1 << 20, 500.0);
    e.observe_fetch(wid(2), wid(3), Some(true), 1, 1 << 20, 20.0);
    c.set_estimates(e);
    c.schedule(3);
    let a = assigned(&mut c);
    // Worker 3: 20 (from worker 2) + 10 beats 0 + 1000 on either holder.
    assert_eq!(a[0].0, wid(3));
    let holders: Vec<&str> = a[0].1.inputs[0].holders.iter().map(|h| h.peer_addr.as_str()).collect();
    assert_eq!(holders, vec!["http://127.0.0.1:7002", "http://127.0.0.1:7001"], "the faster holder first");
    let p = c.explain(job, "sum", 0).unwrap();
    assert_eq!((feature(p, wid(3), "est_fetch_ms"), feature(p, wid(3), "est_fetch_samples")), (Some(20.0), Some(1.0)));
    assert_eq!(
        (feature(p, wid(1), "est_fetch_ms"), feature(p, wid(1), "est_fetch_samples")),
        (Some(0.0), None),
        "resident"
    );
    let j = c.job(job).unwrap();
    assert_eq!(j.subtasks[1].fetch_plan, Some(FetchPlan { from: wid(2), objects: 1, bytes: 1 << 20 }));
    // The attempt fetched 1 MiB in 30 ms and ran 12 ms: the pair 2 → 3 now has two samples.
    let r = Report {
        started_at: 100,
        finished_at: 112,
        fetch_ms: 30,
        fetched_bytes: 1 << 20,
        ..done(&a[0].1.attempt, SubtaskState::Succeeded)
    };
    c.report(wid(3), "s3", vec![r], 4);
    let l = c.estimates().link(wid(2), wid(3), Some(true)).unwrap();
    // Both samples are 1 object of 1 MiB: all throughput, (0.9·20 + 30) / 1.9 ms per MiB.
    assert!(close(l.fetch_ms(1 << 20), 48.0 / 1.9) && close(l.samples, 1.9) && l.latency_ms == 0.0, "{l:?}");
    let e = c.estimates().compute(wid(3), sum_sig, None).unwrap();
    assert!(close(e.ms, 21.0 / 1.9), "{e:?}");
    assert!(c.estimates().compute(wid(1), gen_sig, None).is_some_and(|e| e.ms == 10.0));
    // Pairs never measured: their rack class's mean (same rack: 2 → 3 only), else the cluster's.
    let same = c.estimates().link(wid(3), wid(2), Some(true)).unwrap();
    assert!(close(same.ms_per_byte, l.ms_per_byte) && same.samples == 0.0);
    let other = c.estimates().link(wid(3), wid(1), Some(false)).unwrap();
    assert!(close(other.ms_per_byte, 500.0 / (1 << 20) as f64), "the other-rack class is 1 → 3 alone: {other:?}");
    let unlabelled = c.estimates().link(wid(9), wid(8), None).unwrap();
    assert!(close(unlabelled.ms_per_byte, (500.0 / (1 << 20) as f64 + l.ms_per_byte) / 2.0));
}

/// A placer that places like least-loaded and orders the ready work with `by` (issue 17: the
/// learned placer's choice of which work goes next, and an adversary for the starvation bound).
struct Reorder {
    by: fn(&[crate::placer::ReadyWork]) -> Option<Vec<usize>>,
}

impl crate::placer::Placer for Reorder {
    fn name(&self) -> &'static str {
        "reorder"
    }
    fn place(
        &mut self,
        req: &crate::placer::PlacementRequest,
        candidates: &[crate::placer::Candidate],
    ) -> crate::placer::Decision {
        crate::placer::LeastLoaded.place(req, candidates)
    }
    fn orders_work(&self) -> bool {
        true
    }
    fn order(&mut self, work: &[crate::placer::ReadyWork]) -> Option<Vec<usize>> {
        (self.by)(work)
    }
}

fn one_task(name: &str) -> String {
    format!("name = \"{name}\"\n[[task]]\nname = \"{name}\"\ncommand = [\"{name}\"]\ncpu = 1\n")
}

#[test]
fn a_reordering_placer_runs_the_shortest_job_first() {
    let mut c = Core::new(CoreConfig::default(), Box::new(Reorder { by: crate::placer::shortest_remaining_first }));
    c.register(reg(1, "s1", 1, vec![]), 0);
    let long = submit(&mut c, &one_task("long"), 1);
    let short = submit(&mut c, &one_task("short"), 2);
    let sig = |c: &Core, j: JobId| signature(&c.job(j).unwrap().record.spec.tasks[0]);
    let mut e = c.estimates().clone();
    e.observe_run(wid(1), sig(&c, long), None, 60_000.0);
    e.observe_run(wid(1), sig(&c, short), None, 50.0);
    c.set_estimates(e);
    c.schedule(3);
    let a = assigned(&mut c);
    assert_eq!(a.len(), 1, "one core");
    assert_eq!(a[0].1.attempt.job, short, "the 50 ms job goes before the older 60 s one");
    // Queue order (least-loaded does not reorder) would have run the older one.
    let mut q = core();
    q.register(reg(1, "s1", 1, vec![]), 0);
    let first = submit(&mut q, &one_task("long"), 1);
    submit(&mut q, &one_task("short"), 2);
    q.schedule(3);
    assert_eq!(assigned(&mut q)[0].1.attempt.job, first);
}

#[test]
fn a_reordering_placer_overtakes_a_task_at_most_max_overtaken_rounds() {
    // The adversary always puts the oldest work last. One core; every round a new one-core job
    // arrives and the running one ends. The first job is overtaken round after round until the
    // bound puts it first.
    let reverse: fn(&[crate::placer::ReadyWork]) -> Option<Vec<usize>> = |w| Some((0..w.len()).rev().collect());
    let mut c = Core::new(CoreConfig::default(), Box::new(Reorder { by: reverse }));
    c.register(reg(1, "s1", 1, vec![]), 0);
    let old = submit(&mut c, &one_task("old"), 1);
    let mut now = 2;
    let mut started = None;
    for round in 1..=(crate::placer::MAX_OVERTAKEN as u64 + 3) {
        submit(&mut c, &one_task(&format!("new{round}")), now);
        c.schedule(now);
        let a = assigned(&mut c);
        assert_eq!(a.len(), 1, "round {round}: one core, one placement");
        if a[0].1.attempt.job == old {
            started = Some(round);
            break;
        }
        now += 1;
        assert!(c.report(
            wid(1),
            "s1",
            vec![Report {
                attempt: Some(a[0].1.attempt.clone()),
                state: Some(SubtaskState::Succeeded),
                finished_at: now,
                ..Default::default()
            }],
            now
        ));
        now += 1;
    }
    let started = started.expect("the oldest job started within the bound");
    assert_eq!(started, crate::placer::MAX_OVERTAKEN as u64 + 1, "overtaken exactly MAX_OVERTAKEN rounds, then first");
}

#[test]
fn a_drained_worker_takes_no_new_work_and_only_a_lost_one_is_removed() {
    let mut c = core();
    c.register(reg(1, "s1", 4, vec![]), 0);
    c.register(reg(2, "s2", 4, vec![]), 0);
    c.drain_worker(wid(1), true).unwrap();
    assert!(c.worker(wid(1)).unwrap().record().draining);
    assert!(c.take_outbox().workers.contains(&wid(1)), "drain is durable");
    let job = submit(&mut c, "name = \"d\"\n[[task]]\nname = \"t\"\ncommand = [\"true\"]\ncpu = 1\nreplicas = 6\n", 1);
    c.schedule(1);
    let a = assigned(&mut c);
    assert_eq!(a.len(), 4, "only worker 2's four cores");
    assert!(a.iter().all(|(w, _)| *w == wid(2)));
    let p = c.explain(job, "t", 0).unwrap();
    let note = &p.candidates.iter().find(|k| k.worker == wid(1)).unwrap().note;
    assert!(note.contains("drained"), "{note}");
    // Re-registering (a worker restart) keeps the drain.
    c.register(reg(1, "s1b", 4, vec![]), 2);
    assert!(c.worker(wid(1)).unwrap().record().draining);
    c.drain_worker(wid(1), false).unwrap();
    c.schedule(3);
    assert_eq!(assigned(&mut c).len(), 2, "undrained: the rest go to worker 1");
    // Removal: a live worker is refused, an unknown one is named, a lost one goes.
    assert!(matches!(c.remove_worker(wid(2)), Err(crate::error::Error::WorkerBusy(m)) if m.contains("alive")));
    assert!(matches!(c.remove_worker(wid(9)), Err(crate::error::Error::NoWorker(_))));
    c.tick(1_000_000); // past the heartbeat timeout: both lost
    assert!(!c.worker(wid(2)).unwrap().record().alive);
    let _ = c.take_outbox();
    c.remove_worker(wid(2)).unwrap();
    assert!(c.worker(wid(2)).is_none());
    let out = c.take_outbox();
    assert!(out.removed_workers.contains(&wid(2)) && !out.workers.contains(&wid(2)));
}

fn after(name: &str, jobs: &[JobId]) -> String {
    let list: Vec<String> = jobs.iter().map(|j| format!("\"{j}\"")).collect();
    format!(
        "name = \"{name}\"\nafter_jobs = [{}]\n[[task]]\nname = \"t\"\ncommand = [\"true\"]\ncpu = 1\n",
        list.join(", ")
    )
}

#[test]
fn a_job_runs_after_the_jobs_it_names_and_fails_with_them() {
    let mut c = core();
    c.register(reg(1, "s1", 4, vec![]), 0);
    let a = submit(&mut c, &one_task("a"), 1);
    let b = submit(&mut c, &after("b", &[a]), 1);
    c.schedule(2);
    let first = assigned(&mut c);
    assert_eq!(first.iter().map(|(_, x)| x.attempt.job).collect::<Vec<_>>(), vec![a], "b waits for a");
    assert_eq!(state(&c, b, "t", 0), SubtaskState::Waiting);
    assert!(c.job(b).unwrap().waiting.values().any(|w| w.contains(&a.to_string())), "b says what it waits for");
    let ok = Report {
        attempt: Some(first[0].1.attempt.clone()),
        state: Some(SubtaskState::Succeeded),
        finished_at: 3,
        ..Default::default()
    };
    assert!(c.report(wid(1), "s1", vec![ok], 3));
    assert_eq!(c.job(a).unwrap().record.state, JobState::Succeeded);
    c.schedule(4);
    assert_eq!(
        assigned(&mut c).iter().map(|(_, x)| x.attempt.job).collect::<Vec<_>>(),
        vec![b],
        "released when a succeeded"
    );

    // Refused at submission: an unknown job, one that already failed.
    let unknown = JobId::random();
    let e = c.submit(JobId::random(), parse(&after("x", &[unknown]), Format::Toml, "x.toml").unwrap(), 5).unwrap_err();
    assert!(e.to_string().contains(&format!("no job {unknown}")), "{e}");
    let doomed = submit(&mut c, &one_task("doomed"), 5);
    c.cancel(doomed, 6).unwrap();
    let e = c.submit(JobId::random(), parse(&after("y", &[doomed]), Format::Toml, "y.toml").unwrap(), 7).unwrap_err();
    assert!(e.to_string().contains("has already cancelled"), "{e}");
}

#[test]
fn a_long_chain_of_jobs_fails_with_its_first_without_recursion() {
    let mut c = core();
    let first = submit(&mut c, &one_task("first"), 1);
    let mut prev = first;
    let mut chain = Vec::new();
    for i in 0..20_000 {
        prev = submit(&mut c, &after(&format!("j{i}"), &[prev]), 2);
        chain.push(prev);
    }
    c.cancel(first, 3).unwrap();
    for j in [chain[0], chain[9_999], chain[19_999]] {
        let r = &c.job(j).unwrap().record;
        assert_eq!(r.state, JobState::Failed, "{}", r.error);
        assert!(r.error.contains("runs after"), "{}", r.error);
    }
}

/// `cpu = 0` tasks take no core, so only a worker's `max_attempts` bounds how many run there at
/// once: the core places within it, and a gang that needs more is refused at submission.
#[test]
fn a_worker_runs_no_more_attempts_than_its_max_attempts() {
    let mut c = core();
    let mut r = reg(1, "s1", 2, vec![]);
    r.capacity.max_attempts = 2;
    c.register(r, 0);
    let job = submit(&mut c, "[[task]]\nname = \"s\"\ncommand = [\"sleep\", \"9\"]\nreplicas = 10\ncpu = 0\n", 0);
    c.schedule(1);
    let a = assigned(&mut c);
    assert_eq!(a.len(), 2, "two attempt slots");
    assert_eq!(c.worker(wid(1)).unwrap().free_slots(), 0);
    c.schedule(2);
    assert!(assigned(&mut c).is_empty(), "nothing more while both run");
    // One ends: one more starts, no more.
    let ended =
        Report { attempt: Some(a[0].1.attempt.clone()), state: Some(SubtaskState::Succeeded), ..Default::default() };
    c.report(wid(1), "s1", vec![ended], 3);
    c.schedule(4);
    assert_eq!(assigned(&mut c).len(), 1);
    assert_eq!(c.worker(wid(1)).unwrap().placed().len(), 2);
    assert_eq!(c.job(job).unwrap().subtasks.iter().filter(|s| s.state == SubtaskState::Ready).count(), 7);

    // A built-in `noop` runs no process: its attempts take no slot, so all of them are placed
    // beside the two commands that fill the slots, and the slots stay full.
    let noops = submit(&mut c, "[[task]]\nname = \"n\"\nkind = \"noop\"\nreplicas = 5\ncpu = 0\n", 5);
    c.schedule(6);
    let placed = assigned(&mut c);
    assert_eq!(placed.iter().filter(|(_, a)| a.attempt.job == noops).count(), 5, "every noop placed at once");
    assert_eq!(c.worker(wid(1)).unwrap().free_slots(), 0, "the commands still hold both slots");

    // A gang of three cpu = 0 members never fits a worker that takes two attempts: said at
    // submission, not left reserving for ever.
    let mut c = core();
    let mut r = reg(1, "s1", 2, vec![]);
    r.capacity.max_attempts = 2;
    c.register(r, 0);
    let gang = "[[task]]\nname = \"g\"\ncommand = [\"true\"]\nreplicas = 3\ncpu = 0\ngang = \"trio\"\n";
    let text = c.unsatisfiable(&parse(gang, Format::Toml, "t.toml").unwrap()).unwrap_or_default();
    assert!(text.contains("can hold at most 2 of them together"), "{text}");
}

/// A `checkpoint` gang: the failed member's kept checkpoint is taken from its report, the stopped
/// members' from their reports even though those arrive after the gang was made ready again (and
/// only from the worker that ran the attempt); each member's next attempt gets its own as an
/// input marked `resume`, with its holder and digest; a checkpoint on a lost worker is not handed on.
#[test]
fn a_restarted_gang_resumes_from_the_checkpoints_its_members_left() {
    let mut c = core();
    c.config.eviction.max_lost_share = 1.0;
    for n in 1..=4 {
        c.register(reg(n, &format!("s{n}"), 4, vec![]), 0);
    }
    let src = "name = \"ddp\"\n[[task]]\nname = \"train\"\ncommand = [\"python\", \"train.py\"]\nreplicas = 3\n\
               communicator = true\noutputs = [\"ckpt\"]\ncheckpoint = \"ckpt\"\nmax_retries = 2\n";
    let job = submit(&mut c, src, 0);
    c.schedule(1);
    let a = assigned(&mut c);
    assert_eq!(a.len(), 3);
    for (_, x) in &a {
        assert_eq!(x.checkpoint.as_deref(), Some("ckpt"));
        assert_eq!((x.resume.as_ref(), x.inputs.len()), (None, 0), "nothing to resume from yet");
    }
    let kept = |x: &Assignment, size: u64| {
        let o = plexus_proto::ids::kept_checkpoint(&x.attempt, "ckpt");
        let mut r = done(&x.attempt, SubtaskState::Cancelled);
        r.checkpoint = Some((o, size, Some(plexus_proto::Digest::of(&size.to_le_bytes()))));
        r
    };
    let (w1, x1) = a.iter().find(|(_, x)| x.attempt.rank == 1).unwrap().clone();
    let mut failed = done(&x1.attempt, SubtaskState::Failed);
    failed.checkpoint = kept(&x1, 11).checkpoint;
    assert!(c.report(w1, &session(w1), vec![failed], 2));
    c.schedule(3);
    assert_eq!(c.take_outbox().cancels.len(), 2);
    // The stopped members report afterwards (stale), each with its checkpoint; a worker that did
    // not run an attempt cannot give it one.
    for (w, x) in a.iter().filter(|(_, x)| x.attempt.rank != 1) {
        let other = a.iter().map(|(w, _)| *w).find(|o| o != w).unwrap();
        assert!(c.report(other, &session(other), vec![kept(x, 99)], 4));
        assert!(c.report(*w, &session(*w), vec![kept(x, 10 + x.attempt.rank as u64)], 4));
    }
    let due = 4 + crate::spec::DEFAULT_RETRY_BACKOFF_MS;
    c.tick(due);
    c.schedule(due);
    let b = c.take_outbox().assignments;
    assert_eq!(b.len(), 3, "the gang restarts whole");
    for (_, x) in &b {
        let r = x.attempt.rank;
        let o = x.resume.clone().expect("each member resumes");
        assert_eq!(o.name, "ckpt.attempt-1");
        assert_eq!((o.job, o.task.as_str(), o.rank), (job, "train", r));
        let input = x.inputs.iter().find(|i| i.object == o).expect("the resume object is an input");
        let (w, _) = a.iter().find(|(_, y)| y.attempt.rank == r).unwrap();
        assert_eq!(
            input.holders.iter().map(|h| h.worker).collect::<Vec<_>>(),
            vec![*w],
            "fetched from where it was kept"
        );
        assert_eq!(input.size, 10 + r as u64, "its own checkpoint, not another worker's claim");
        assert_eq!(input.digest, Some(plexus_proto::Digest::of(&input.size.to_le_bytes())));
    }
    // Rank 0's checkpoint was kept on a worker that is then lost: the gang restarts (uncounted)
    // and rank 0 starts without one; the others keep theirs.
    let (w0, _) = *a.iter().find(|(_, x)| x.attempt.rank == 0).unwrap();
    let t = due + 1 + CoreConfig::default().heartbeat_timeout_ms;
    for n in 1..=4 {
        if wid(n) != w0 {
            assert!(c.heartbeat(wid(n), &format!("s{n}"), NodeReport::default(), t - 1));
        }
    }
    c.tick(t);
    assert!(!c.workers().any(|w| w.id() == w0 && w.record().alive));
    let mut next = Vec::new();
    for at in [t, t + crate::spec::DEFAULT_RETRY_BACKOFF_MS] {
        c.tick(at);
        c.schedule(at);
        next.extend(c.take_outbox().assignments);
    }
    assert_eq!(next.len(), 3, "the gang restarts on the live workers: {next:?}");
    for (_, x) in &next {
        let resume = x.resume.as_ref().map(|o| o.name.as_str());
        assert_eq!(resume, if x.attempt.rank == 0 { None } else { Some("ckpt.attempt-1") }, "rank {}", x.attempt.rank);
    }
}

/// An `image` task goes only to a worker with a container runtime (the label the worker sets),
/// is refused at submit when no worker has ever had one, and the stage its worker reports
/// while it prepares (pulling the image) is kept until it runs.
#[test]
fn image_tasks_go_to_workers_with_a_runtime_and_their_stage_is_kept_until_they_run() {
    let mut c = core();
    c.register(reg(1, "s1", 4, vec![]), 0);
    let job = "[[task]]\nname = \"t\"\ncommand = [\"true\"]\nimage = \"python:3.11-slim\"\n";
    let err = c.submit(JobId::random(), parse(job, Format::Toml, "t.toml").unwrap(), 1).unwrap_err().to_string();
    assert!(err.contains("image \"python:3.11-slim\": no worker has a container runtime"), "{err}");

    let mut docker = reg(2, "s2", 4, vec![]);
    docker.capacity.topology.labels.insert(plexus_proto::runtime_env::RUNTIME_LABEL.into(), "docker".into());
    c.register(docker, 2);
    let id = submit(&mut c, job, 3);
    c.schedule(4);
    let (w, x) = assigned(&mut c).remove(0);
    assert_eq!((w, x.image.as_deref()), (wid(2), Some("python:3.11-slim")), "only the worker with a runtime");

    let staged = |stage: &str, state: SubtaskState| Report {
        attempt: Some(x.attempt.clone()),
        state: Some(state),
        stage: stage.into(),
        ..Default::default()
    };
    c.report(wid(2), "s2", vec![staged("pulling image python:3.11-slim", SubtaskState::Assigned)], 5);
    let s = &c.job(id).unwrap().subtasks[0];
    assert_eq!((s.state, s.stage.as_str()), (SubtaskState::Assigned, "pulling image python:3.11-slim"));
    c.report(wid(2), "s2", vec![staged("", SubtaskState::Running)], 6);
    let s = &c.job(id).unwrap().subtasks[0];
    assert_eq!((s.state, s.stage.as_str()), (SubtaskState::Running, ""), "running: the stage is over");
    // A stage report that arrives late (the attempt runs already) changes nothing.
    c.report(wid(2), "s2", vec![staged("pulling image python:3.11-slim", SubtaskState::Assigned)], 7);
    assert_eq!(c.job(id).unwrap().subtasks[0].stage, "");
}

/// A dry run says how many replicas of each task would start now and where, which wait and why,
/// what is ahead in the queue, and refuses what a submit would refuse; nothing changes.
#[test]
fn a_dry_run_plans_without_changing_anything() {
    let mut c = core();
    c.register(reg(1, "s1", 4, vec![]), 0);
    c.register(reg(2, "s2", 4, vec![]), 0);
    // Another job holds 2 cores of worker 1 and has one ready subtask left.
    let other = submit(&mut c, "[[task]]\nname = \"o\"\ncommand = [\"true\"]\ncpu = 2\nreplicas = 5\n", 1);
    c.schedule(2);
    let placed = assigned(&mut c).len();
    let spec = parse(
        "[[task]]\nname = \"train\"\ncommand = [\"x\"]\ncpu = 2\nreplicas = 6\n\
         [[task]]\nname = \"report\"\ncommand = [\"y\"]\nafter = [\"train\"]\n",
        Format::Toml,
        "t.toml",
    )
    .unwrap();
    let jobs_before = c.jobs().count();
    let plan = c.dry_run(&spec).unwrap();
    assert_eq!(c.jobs().count(), jobs_before, "nothing stored");
    assert_eq!(placed, 4, "the other job took both workers' room");
    let train = &plan.tasks[0];
    assert_eq!((train.replicas, train.start_now), (6, 0));
    assert!(train.waits.starts_with("6 would wait for room (cpu=2"), "{}", train.waits);
    assert!(plan.tasks[1].waits.starts_with("after task train"), "{}", plan.tasks[1].waits);
    assert_eq!((plan.ahead, plan.ahead_jobs, plan.subtasks), (1, 1, 7));
    assert_eq!((plan.cores, plan.cluster_cores), (12.0, 8.0));

    // With the other job gone, 4 of 6 start now, on both workers.
    c.cancel(other, 3).unwrap();
    let plan = c.dry_run(&spec).unwrap();
    let train = &plan.tasks[0];
    assert_eq!(train.start_now, 4);
    let mut on = train.workers.clone();
    on.sort();
    assert_eq!(on, [wid(1), wid(2)]);
    assert!(train.waits.starts_with("2 would wait for room"), "{}", train.waits);

    let too_big = parse("[[task]]\nname = \"t\"\ncommand = [\"x\"]\ncpu = 64\n", Format::Toml, "t.toml").unwrap();
    assert!(c.dry_run(&too_big).unwrap_err().to_string().contains("no live worker can ever offer that"));
}

/// A dry run of a very large job lays out a bounded number of replicas (the engine's thread is
/// not held for long) and says so.
#[test]
fn a_dry_run_of_a_huge_job_is_bounded_and_says_so() {
    let mut c = core();
    for n in 1..=4 {
        c.register(reg(n, &format!("s{n}"), 100_000, vec![]), 0);
    }
    let spec =
        parse("[[task]]\nname = \"t\"\ncommand = [\"x\"]\ncpu = 0.001\nreplicas = 60000\n", Format::Toml, "t.toml")
            .unwrap();
    let started = std::time::Instant::now();
    let plan = c.dry_run(&spec).unwrap();
    let t = &plan.tasks[0];
    assert_eq!(t.start_now, crate::core::dry_run::MAX_LAID_OUT);
    assert!(t.waits.contains("laid out 10000 of its 60000 replicas"), "{}", t.waits);
    assert!(started.elapsed() < std::time::Duration::from_secs(5), "bounded: {:?}", started.elapsed());
}

/// A task confined by its constraints to workers that are full must not hold back the tasks
/// queued behind it that fit elsewhere (issue 35: `round.full` took "no room for one core on the
/// workers that meet `rack=r1`" for "no room for one core anywhere").
#[test]
fn a_confined_task_with_no_room_does_not_hold_back_the_work_behind_it() {
    let mut c = core();
    c.register(racked(1, "s1", "r1"), 0);
    c.register(reg(2, "s2", 8, vec![]), 0);
    let cpus = c.worker(wid(1)).unwrap().record().capacity.cpus;
    let confined = format!(
        "[[task]]\nname = \"t\"\ncommand = [\"true\"]\ncpu = 1\nreplicas = {}\nconstraints = {{ rack = \"r1\" }}\n",
        cpus + 1
    );
    let first = submit(&mut c, &confined, 0);
    let behind = submit(&mut c, "[[task]]\nname = \"u\"\ncommand = [\"true\"]\ncpu = 1\nreplicas = 3\n", 1);
    c.schedule(2);
    let a = assigned(&mut c);
    let on = |job: JobId| a.iter().filter(|(_, x)| x.attempt.job == job).map(|(w, _)| *w).collect::<Vec<_>>();
    assert_eq!(on(first).len() as u32, cpus, "the confined task fills its rack: {a:?}");
    assert!(on(first).iter().all(|w| *w == wid(1)));
    assert_eq!(on(behind), vec![wid(2); 3], "the work behind it is placed in the same round: {a:?}");
}

/// Past 256 live workers a confined task considers only the workers that meet its constraints
/// (kept per constraint set until a worker registers), and they are found however few.
#[test]
fn a_confined_task_among_many_workers_considers_the_few_that_meet_it() {
    let mut c = core();
    for n in 1..=400u16 {
        let mut r = numbered(n, 2);
        if n % 100 == 0 {
            r.capacity.topology.labels.insert("real".into(), "yes".into());
        }
        c.register(r, 0);
    }
    let job = submit(
        &mut c,
        "[[task]]\nname = \"a\"\ncommand = [\"true\"]\ncpu = 1\nreplicas = 2\nconstraints = { real = true }\n",
        0,
    );
    c.schedule(1);
    let p = c.explain(job, "a", 0).unwrap();
    assert_eq!(p.candidates.len() + p.omitted as usize, 4, "the 4 workers that carry the label, no others");
    assert!(p.candidates.iter().all(|x| x.feasible));
    // A new worker that meets it is seen by the next decision.
    let mut r = reg(1, "s-new", 2, vec![]);
    r.worker = WorkerId::from_bytes([9; 16]);
    r.capacity.topology.labels.insert("real".into(), "yes".into());
    c.register(r, 2);
    let job =
        submit(&mut c, "[[task]]\nname = \"a\"\ncommand = [\"true\"]\ncpu = 1\nconstraints = { real = true }\n", 3);
    c.schedule(4);
    let p = c.explain(job, "a", 0).unwrap();
    assert_eq!(
        p.candidates.len() + p.omitted as usize,
        5,
        "{:?}",
        p.candidates.iter().map(|x| x.worker).collect::<Vec<_>>()
    );
}

/// Past 256 workers that meet a task's constraints, its sample is still drawn from them alone:
/// no decision looks at, or places on, a worker that does not meet them.
#[test]
fn a_sampled_confined_task_never_lands_on_a_worker_that_does_not_meet_it() {
    let mut c = core();
    for n in 1..=600u16 {
        let mut r = numbered(n, 2);
        if n % 2 == 0 {
            r.capacity.topology.labels.insert("pool".into(), "a".into());
        }
        c.register(r, 0);
    }
    let job = submit(
        &mut c,
        "[[task]]\nname = \"a\"\ncommand = [\"true\"]\ncpu = 1\nreplicas = 500\nconstraints = { pool = \"a\" }\n",
        0,
    );
    c.schedule(1);
    let a = assigned(&mut c);
    assert_eq!(a.len(), 500, "300 workers of 2 cores meet it");
    let even = |w: &WorkerId| u16::from_be_bytes(w.as_bytes()[14..16].try_into().unwrap()) % 2 == 0;
    assert!(a.iter().all(|(w, _)| even(w)), "placed only where pool=a");
    for rank in [0, 250, 499] {
        let p = c.explain(job, "a", rank).unwrap();
        assert!(p.candidates.iter().all(|x| even(&x.worker)), "rank {rank}: considered only pool=a");
    }
}
