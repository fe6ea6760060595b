//! Gangs, priorities and the deep queue: unit tests, and a property test over thousands of
//! seeded random scenarios.

use std::collections::{BTreeMap, HashMap};

use plexus_proto::{AttemptRef, JobId, JobState, Resources, SubtaskState, WorkerId};
use rand::{Rng, SeedableRng};

use super::tests::{core, reg, session, submit, wid};
use super::*;
use crate::spec::{Format, parse};

fn ok(a: &AttemptRef) -> Report {
    Report { attempt: Some(a.clone()), state: Some(SubtaskState::Succeeded), ..Default::default() }
}

fn gang_job(name: &str, replicas: u32, min: u32, timeout: &str, priority: i64) -> String {
    format!(
        "name = \"{name}\"\npriority = {priority}\n[[task]]\nname = \"m\"\nkind = \"noop\"\nreplicas = {replicas}\nmin_members = {min}\ngang_timeout = \"{timeout}\"\n"
    )
}

/// kube-batch#158: two jobs each larger than half the cluster deadlocked when both reserved.
/// Here only the head gang reserves: the first binds whole, the second waits whole, then runs.
#[test]
fn two_gangs_each_needing_three_of_four_workers_both_run_and_never_partially() {
    let mut c = core();
    for n in 1..=4 {
        c.register(reg(n, &format!("s{n}"), 1, vec![]), 0);
    }
    let a = submit(&mut c, &gang_job("a", 3, 3, "30s", 0), 0);
    let b = submit(&mut c, &gang_job("b", 3, 3, "30s", 0), 0);
    c.schedule(1);
    let first = c.take_outbox().assignments;
    assert_eq!(first.len(), 3, "gang a binds whole");
    assert!(first.iter().all(|(_, x)| x.attempt.job == a));
    let jb = c.job(b).unwrap();
    assert!(
        jb.subtasks.iter().all(|s| s.state == SubtaskState::Ready),
        "no member of b starts before its gang is whole"
    );
    // b holds one reservation at most (the free worker), and nothing leaks.
    let reserved: usize = c.workers().map(|w| w.reserved().len()).sum();
    assert!(reserved <= 1, "{reserved}");
    for (w, x) in &first {
        c.report(*w, &session(*w), vec![ok(&x.attempt)], 2);
    }
    c.schedule(3);
    let second = c.take_outbox().assignments;
    assert_eq!(second.len(), 3);
    assert!(second.iter().all(|(_, x)| x.attempt.job == b));
    assert!(c.job(b).unwrap().record.gangs["m"].bound_at == 3);
    assert!(c.workers().all(|w| w.reserved().is_empty()));
}

/// YuniKorn's placeholder timeout, Kueue's waitForPodsReady: a gang that cannot fill before its
/// deadline gives everything back, says so, backs off, and runs once room appears.
#[test]
fn a_gang_that_cannot_fill_rolls_back_at_its_deadline_and_runs_later() {
    let mut c = core();
    c.register(reg(1, "s1", 1, vec![]), 0);
    c.register(reg(2, "s2", 1, vec![]), 0);
    // A long plain task holds worker 1 (or 2).
    let long = submit(&mut c, "[[task]]\nname = \"long\"\nkind = \"noop\"\n", 0);
    c.schedule(1);
    let busy = c.take_outbox().assignments;
    assert_eq!(busy.len(), 1);
    let g = submit(&mut c, &gang_job("g", 2, 2, "5s", 0), 2);
    c.schedule(3);
    assert!(c.take_outbox().assignments.is_empty());
    let st = &c.job(g).unwrap().record.gangs["m"];
    assert_eq!(st.reserving_since, 3, "one member reserved on the free worker");
    assert_eq!(c.workers().map(|w| w.reserved().len()).sum::<usize>(), 1);
    c.schedule(5_002);
    assert_eq!(c.job(g).unwrap().record.gangs["m"].reserving_since, 3, "before the deadline it keeps waiting");
    c.schedule(5_003);
    let st = c.job(g).unwrap().record.gangs["m"].clone();
    assert_eq!((st.reserving_since, st.rollbacks, st.rolled_back_at, st.retry_at), (0, 1, 5_003, 6_003));
    assert!(st.reason.contains("deadline: 1 of 2 members reserved"), "{}", st.reason);
    assert!(c.workers().all(|w| w.reserved().is_empty() && w.allocated().cpu <= 1.0));
    // During the back-off it does not reserve.
    c.schedule(5_500);
    assert!(c.workers().all(|w| w.reserved().is_empty()));
    // The long task ends; after the back-off the gang binds.
    let (w, x) = &busy[0];
    c.report(*w, &session(*w), vec![ok(&x.attempt)], 5_600);
    assert_eq!(c.job(long).unwrap().record.state, JobState::Succeeded);
    c.schedule(6_003);
    assert_eq!(c.take_outbox().assignments.len(), 2);
    assert!(c.job(g).unwrap().record.gangs["m"].bound_at > 0);
}

#[test]
fn a_higher_priority_job_submitted_later_starts_first() {
    let mut c = core();
    let low = submit(&mut c, "name = \"low\"\n[[task]]\nname = \"a\"\nkind = \"noop\"\nreplicas = 3\n", 0);
    let high =
        submit(&mut c, "name = \"high\"\npriority = 10\n[[task]]\nname = \"a\"\nkind = \"noop\"\nreplicas = 2\n", 1);
    c.register(reg(1, "s1", 2, vec![]), 2);
    c.schedule(3);
    let a = c.take_outbox().assignments;
    assert_eq!(a.len(), 2);
    assert!(a.iter().all(|(_, x)| x.attempt.job == high), "priority 10 first");
    assert!(c.job(low).unwrap().subtasks.iter().all(|s| s.state == SubtaskState::Ready));
}

/// Slurm-style backfill: while a gang waits for busy workers, small tasks run on the workers it
/// does not need, and not on the ones it holds.
#[test]
fn small_tasks_backfill_around_a_waiting_gang_but_not_onto_its_workers() {
    let mut c = core();
    for n in 1..=3 {
        c.register(reg(n, &format!("s{n}"), 2, vec![]), 0);
    }
    // Two workers get a long 2-core task each, so the 2x2-core gang must wait for them.
    let _long = submit(&mut c, "[[task]]\nname = \"long\"\nkind = \"noop\"\ncpu = 2\nreplicas = 2\n", 0);
    c.schedule(1);
    let long = c.take_outbox().assignments;
    let busy: Vec<WorkerId> = long.iter().map(|(w, _)| *w).collect();
    let idle = (1..=3).map(wid).find(|w| !busy.contains(w)).unwrap();
    let g = submit(
        &mut c,
        "name = \"g\"\npriority = 5\n[[task]]\nname = \"m\"\nkind = \"noop\"\ncpu = 2\nreplicas = 2\nmin_members = 2\n",
        2,
    );
    let small = submit(&mut c, "name = \"small\"\n[[task]]\nname = \"s\"\nkind = \"noop\"\nreplicas = 4\n", 3);
    c.schedule(4);
    let out = c.take_outbox().assignments;
    // The gang reserved the idle worker (2 cores) and holds one busy worker; small tasks may
    // only use a worker that is neither — there is none free, so none runs yet.
    assert!(out.iter().all(|(_, x)| x.attempt.job == small));
    assert!(out.iter().all(|(w, _)| *w != idle), "no small task on the gang's reserved worker");
    assert_eq!(c.worker(idle).unwrap().reserved().len(), 1);
    let j = c.job(g).unwrap();
    assert!(j.subtasks.iter().all(|s| s.state == SubtaskState::Ready));
    // One long task ends: its worker goes to the gang (held), not to the small tasks.
    let (w, x) = &long[0];
    c.report(*w, &session(*w), vec![ok(&x.attempt)], 5);
    c.schedule(6);
    let out = c.take_outbox().assignments;
    assert_eq!(out.iter().filter(|(_, x)| x.attempt.job == g).count(), 2, "the gang bound: {out:?}");
    assert!(out.iter().filter(|(_, x)| x.attempt.job == small).all(|(wk, _)| *wk != *w && *wk != idle));
}

/// Slurm's backfill: a worker held for a waiting gang still takes work whose `timeout` ends
/// before the gang can expect the worker (when what runs there ends, by its timeout); work
/// that would end later, or has no timeout, goes elsewhere or waits.
#[test]
fn work_that_ends_before_the_gang_needs_a_held_worker_backfills_onto_it() {
    let mut c = core();
    for n in 1..=3 {
        c.register(reg(n, &format!("s{n}"), 4, vec![]), 0);
    }
    let _long =
        submit(&mut c, "[[task]]\nname = \"long\"\nkind = \"noop\"\ncpu = 2\nreplicas = 2\ntimeout = \"100s\"\n", 0);
    c.schedule(1);
    let long = c.take_outbox().assignments;
    let busy: Vec<WorkerId> = long.iter().map(|(w, _)| *w).collect();
    assert_ne!(busy[0], busy[1], "one long task per worker");
    let g = submit(
        &mut c,
        "name = \"g\"\npriority = 5\n[[task]]\nname = \"m\"\nkind = \"noop\"\ncpu = 4\nreplicas = 2\nmin_members = 2\ngang_timeout = \"300s\"\n",
        2,
    );
    c.schedule(3);
    assert!(c.take_outbox().assignments.is_empty(), "the gang waits");
    assert!(c.job(g).unwrap().subtasks.iter().all(|s| s.state == SubtaskState::Ready));
    // By the timeouts, the gang can start at 100 s on the idle worker and the busy one expected
    // first (both at 100 s: the lower id): it reserves nothing yet (the idle worker's cores
    // would sit idle), holds both, and its deadline's clock does not run.
    assert!(c.workers().all(|w| w.reserved().is_empty()));
    let view = c.job(g).unwrap().gangs(3);
    assert_eq!(view[0].phase, GangPhase::Planned { start: 1 + 100_000 }, "status shows the planned start");
    let held = *busy.iter().min().unwrap();
    let other = *busy.iter().max().unwrap();
    let idle = (1..=3).map(wid).find(|w| !busy.contains(w)).unwrap();
    let late = submit(
        &mut c,
        "name = \"late\"\n[[task]]\nname = \"l\"\nkind = \"noop\"\ncpu = 2\nreplicas = 2\ntimeout = \"200s\"\n",
        4,
    );
    let short = submit(
        &mut c,
        "name = \"short\"\n[[task]]\nname = \"s\"\nkind = \"noop\"\ncpu = 1\nreplicas = 2\ntimeout = \"10s\"\n",
        4,
    );
    c.schedule(5);
    let out = c.take_outbox().assignments;
    let on = |job: JobId| out.iter().filter(|(_, x)| x.attempt.job == job).map(|(w, _)| *w).collect::<Vec<_>>();
    assert_eq!(on(late), vec![other], "long work only where the gang holds nothing; the second waits: {out:?}");
    assert_eq!(on(short).len(), 2, "{out:?}");
    assert!(on(short).iter().all(|w| *w == held || *w == idle), "short work backfills onto the held workers: {out:?}");
    let why = c.explain(late, "l", 1).err().map(|e| e.to_string()).unwrap_or_default();
    assert!(why.contains("not been placed"), "{why}");
    // When the long task on the held worker ends (and the short ones), the gang binds there.
    let (w, x) = long.iter().find(|(w, _)| *w == held).unwrap();
    c.report(*w, &session(*w), vec![ok(&x.attempt)], 6);
    for (w, x) in out.iter().filter(|(_, x)| x.attempt.job == short) {
        c.report(*w, &session(*w), vec![ok(&x.attempt)], 7);
    }
    c.schedule(8);
    let bound = c.take_outbox().assignments;
    assert_eq!(bound.iter().filter(|(_, x)| x.attempt.job == g).count(), 2, "{bound:?}");
}

/// `plexus-coordinator queue set batch --share 0.5`: while another queue has work waiting, the
/// batch queue holds at most half the cores (and says why it waits); alone, it uses them all.
#[test]
fn a_queue_over_its_share_waits_only_while_another_queue_has_work() {
    let mut c = core();
    c.register(reg(1, "s1", 4, vec![]), 0);
    assert!(c.set_queue_share("batch", Some(0.5)).is_ok());
    assert!(c.set_queue_share("batch", Some(1.5)).unwrap_err().to_string().contains("not in (0, 1]"));
    assert!(c.set_queue_share("bad name", Some(0.5)).is_err());
    let job = |name: &str, queue: &str, n: u32| {
        format!("name = \"{name}\"\nqueue = \"{queue}\"\n[[task]]\nname = \"t\"\nkind = \"noop\"\nreplicas = {n}\n")
    };
    let alone = submit(&mut c, &job("alone", "batch", 4), 0);
    c.schedule(1);
    assert_eq!(c.take_outbox().assignments.len(), 4, "alone, the batch queue uses every core");
    assert_eq!(c.queue_usage("batch"), 4.0);
    c.cancel(alone, 2).unwrap();
    assert_eq!(c.queue_usage("batch"), 0.0);
    let batch = submit(&mut c, &job("b", "batch", 4), 3);
    let other = submit(&mut c, &job("o", "default", 4), 4);
    c.schedule(5);
    let out = c.take_outbox().assignments;
    let of = |j: JobId| out.iter().filter(|(_, x)| x.attempt.job == j).count();
    assert_eq!((of(batch), of(other)), (2, 2), "batch stops at its share while the default queue waits");
    let waiting = c.job(batch).unwrap().waiting.get(&0).cloned().unwrap_or_default();
    assert!(waiting.contains("queue \"batch\" holds 2.0 of its share 0.5 × 4 cores"), "{waiting}");
    c.set_queue_share("batch", None).unwrap();
    assert!(c.queue_shares().is_empty());
}

#[test]
fn a_worker_lost_before_binding_rolls_the_gang_back_and_a_restart_rolls_back_too() {
    let mut c = core();
    c.register(reg(1, "s1", 1, vec![]), 0);
    c.register(reg(2, "s2", 1, vec![]), 0);
    let long = submit(&mut c, "[[task]]\nname = \"long\"\nkind = \"noop\"\n", 0);
    c.schedule(1);
    let busy = c.take_outbox().assignments;
    let g = submit(&mut c, &gang_job("g", 2, 2, "60s", 0), 2);
    c.schedule(3);
    let free = (1..=2).map(wid).find(|w| *w != busy[0].0).unwrap();
    assert_eq!(c.worker(free).unwrap().reserved().len(), 1);

    // Restart: the store's records, restored: the reservation is rolled back, not leaked.
    let mut r = core();
    r.restore(snapshot(&c), 10).unwrap();
    assert!(r.workers().all(|w| w.reserved().is_empty()));
    assert!(r.job(g).unwrap().subtasks.iter().all(|s| s.reserved_on.is_none()));
    let st = &r.job(g).unwrap().record.gangs["m"];
    assert!(st.reason.contains("restarted") && st.rollbacks == 1, "{st:?}");
    assert!(r.take_outbox().subtasks.contains(&(g, 0)) || r.job(g).unwrap().subtasks[1].reserved_on.is_none());

    // Worker loss before binding: the whole gang rolls back.
    let t = CoreConfig::default().heartbeat_timeout_ms + 100;
    assert!(c.heartbeat(busy[0].0, &session(busy[0].0), NodeReport::default(), t - 10));
    c.tick(t);
    let st = &c.job(g).unwrap().record.gangs["m"];
    assert!(st.reason.contains("lost before the gang was bound"), "{st:?}");
    assert!(c.workers().all(|w| w.reserved().is_empty()));
    assert_eq!(c.job(long).unwrap().record.state, JobState::Running);
}

#[test]
fn gang_fields_are_checked_with_their_line() {
    let e = parse("[[task]]\nname = \"a\"\nkind = \"noop\"\nreplicas = 2\nmin_members = 3\n", Format::Toml, "g.toml")
        .unwrap_err();
    assert!(e.to_string().contains("min_members = 3 is out of range (1..=2"), "{e}");
    assert_eq!(e.line, Some(2), "the task's name line");
    let e = parse("[[task]]\nname = \"a\"\nkind = \"noop\"\ngang = \"x\"\n[[task]]\nname = \"b\"\nkind = \"noop\"\ngang = \"x\"\nafter = [\"a\"]\n", Format::Toml, "g.toml").unwrap_err();
    assert!(e.to_string().contains("do not become ready together"), "{e}");
    let e = parse("[[task]]\nname = \"a\"\nkind = \"noop\"\nmin_members = 0\n", Format::Toml, "g.toml").unwrap_err();
    assert!(e.to_string().contains("min_members = 0"), "{e}");
    let e =
        parse("[[task]]\nname = \"a\"\nkind = \"noop\"\ngang_timeout = \"0s\"\n", Format::Toml, "g.toml").unwrap_err();
    assert!(e.to_string().contains("gang_timeout"), "{e}");
    // A parameter server and its trainers: one gang across two tasks; K counts over both.
    let ok = parse(
        "[[task]]\nname = \"ps\"\nkind = \"noop\"\ngang = \"train\"\n[[task]]\nname = \"w\"\nkind = \"noop\"\nreplicas = 3\ngang = \"train\"\nmin_members = 4\n",
        Format::Toml,
        "g.toml",
    )
    .unwrap();
    assert_eq!(ok.tasks[0].gang, ok.tasks[1].gang);
    assert_eq!(ok.tasks[0].gang.as_ref().unwrap().min_members, 4);
    // Bigger than the live cluster can ever hold together: refused at submission.
    let mut c = core();
    c.register(reg(1, "s1", 2, vec![]), 0);
    let spec = parse(&gang_job("big", 3, 3, "10s", 0), Format::Toml, "b.toml").unwrap();
    let e = c.submit(JobId::random(), spec, 0).unwrap_err();
    assert!(
        e.to_string().contains("gang \"m\" needs 3 members placed at once") && e.to_string().contains("at most 2"),
        "{e}"
    );
}

/// The queue at scale: a 100,000-replica task costs one failed try per round once the workers
/// are full, not one per waiting replica.
#[test]
fn a_deep_queue_costs_one_try_per_task_per_round() {
    let mut c = core();
    for n in 1..=4 {
        c.register(reg(n, &format!("s{n}"), 16, vec![]), 0);
    }
    let job = submit(&mut c, "[[task]]\nname = \"a\"\nkind = \"noop\"\nreplicas = 100000\n", 0);
    c.schedule(1);
    assert_eq!(c.take_outbox().assignments.len(), 64);
    let decisions = c.next_decision;
    let tries = c.counters().placement_tries;
    for r in 0..100 {
        c.schedule(2 + r);
    }
    assert_eq!(c.next_decision, decisions, "a full cluster: no placement decision is even attempted");
    // The work done, counted rather than timed: one try per round for the one task, however
    // many of its replicas wait.
    assert_eq!(
        c.counters().placement_tries - tries,
        100,
        "100 rounds over a 100k-deep queue tried {} placements",
        c.counters().placement_tries - tries
    );
    assert_eq!(c.job(job).unwrap().counts(0)[SubtaskState::Ready as usize], 100_000 - 64);
}

// ---- the property test ------------------------------------------------------------------

/// What the test knows of an attempt it was sent.
struct Running {
    worker: WorkerId,
    attempt: AttemptRef,
    ends_at: u64,
}

fn check_invariants(c: &Core, seed: u64, step: usize, bound_before: &HashMap<(JobId, String), u64>) {
    // Allocation = placed + reserved, per worker; every reservation is a ready member's.
    for w in c.workers() {
        let mut sum = Resources::default();
        for (j, i) in w.placed().iter().chain(w.reserved().iter()) {
            let job = c.job(*j).unwrap();
            sum.add(&job.record.spec.tasks[job.task_of(*i)].resources);
        }
        assert!(
            (sum.cpu - w.allocated().cpu).abs() < 1e-9,
            "seed {seed} step {step}: worker {} allocated {:?} != placed+reserved {sum:?}",
            w.record().id,
            w.allocated()
        );
        for (j, i) in w.reserved() {
            let s = &c.job(*j).unwrap().subtasks[*i as usize];
            assert_eq!(
                s.state,
                SubtaskState::Ready,
                "seed {seed} step {step}: a reservation of a subtask that is {:?}",
                s.state
            );
            assert_eq!(s.reserved_on, Some(w.record().id), "seed {seed} step {step}");
        }
    }
    // Only a queue's head holds reservations: at most one unbound gang per queue.
    let mut holders: HashMap<String, Vec<String>> = HashMap::new();
    for j in c.jobs() {
        if j.subtasks.iter().any(|s| s.reserved_on.is_some()) {
            holders.entry(j.record.spec.queue.clone()).or_default().push(j.record.spec.name.clone());
        }
    }
    for (q, h) in &holders {
        assert!(h.len() <= 1, "seed {seed} step {step}: queue {q:?} has several gangs holding reservations: {h:?}");
    }
    for j in c.jobs() {
        for (i, s) in j.subtasks.iter().enumerate() {
            if let Some(w) = s.reserved_on {
                assert!(
                    c.worker(w).is_some_and(|w| w.reserved().contains(&(j.id(), i as u32))),
                    "seed {seed} step {step}: dangling reservation"
                );
                assert!(j.record.state == JobState::Running, "seed {seed} step {step}: a reservation outlived its job");
            }
        }
        // No partial start: a gang member is ever placed only once its gang is bound, and the
        // round that bound it dispatched at least min_members.
        for t in &j.record.spec.tasks {
            let Some(g) = &t.gang else { continue };
            let st = j.record.gangs.get(&g.name).cloned().unwrap_or_default();
            let members: Vec<&Subtask> = j
                .subtasks
                .iter()
                .filter(|s| j.record.spec.task(&s.task).is_some_and(|tt| tt.gang.as_ref() == Some(g)))
                .collect();
            if members.iter().any(|s| s.attempt > 0) {
                assert!(
                    st.bound_at > 0,
                    "seed {seed} step {step}: a member of gang {:?} started before the gang was bound",
                    g.name
                );
            }
            if st.bound_at > 0 && !bound_before.contains_key(&(j.id(), g.name.clone())) {
                let together = members.iter().filter(|s| s.attempt > 0 && s.assigned_at == st.bound_at).count() as u32;
                assert!(
                    together >= g.min_members,
                    "seed {seed} step {step}: gang {:?} bound with {together} of {} members dispatched together",
                    g.name,
                    g.min_members
                );
            }
        }
    }
}

fn snapshot(c: &Core) -> Snapshot {
    Snapshot {
        jobs: c.jobs().map(|j| j.record.clone()).collect(),
        subtasks: c
            .jobs()
            .flat_map(|j| j.subtasks.iter().enumerate().map(move |(i, s)| (j.id(), i as u32, s.clone())))
            .collect(),
        workers: c.workers().map(|w| w.record().clone()).collect(),
    }
}

/// Rounds the liveness phase may take, at 100 ms each: every gang's deadline is at most 5 s
/// and a back-off at most 60 s; tasks last at most 2 s. 3,000 rounds is 300 s of cluster time.
const LIVENESS_ROUNDS: usize = 3_000;

/// What a scenario exercised, so the test can insist the generator covers the cases.
#[derive(Default)]
struct Coverage {
    bound: u64,
    rollbacks: u64,
    restarts: u64,
    losses: u64,
    jobs: u64,
}

fn scenario(seed: u64, cov: &mut Coverage) {
    let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
    let mut c = core();
    let nw: u8 = rng.random_range(2..=5);
    let cpus: Vec<u32> = (0..nw).map(|_| rng.random_range(1..=4)).collect();
    let total_cpus: u32 = cpus.iter().sum();
    for n in 1..=nw {
        c.register(reg(n, &format!("s{n}"), cpus[n as usize - 1], vec![]), 0);
    }
    let mut sessions: HashMap<WorkerId, String> = (1..=nw).map(|n| (wid(n), format!("s{n}"))).collect();
    let mut down: HashMap<WorkerId, u64> = HashMap::new(); // worker → when it comes back
    let mut running: BTreeMap<(JobId, u32, u32), Running> = BTreeMap::new();
    let mut jobs = Vec::new();
    let mut now = 1;
    let mut bound_before: HashMap<(JobId, String), u64> = HashMap::new();
    let steps = 200;
    for step in 0..steps + LIVENESS_ROUNDS {
        let chaos = step < steps;
        now += 100;
        // New jobs.
        if chaos && jobs.len() < 6 && rng.random_bool(0.08) {
            let priority = rng.random_range(0..=2);
            // Members of one or two cores, so gangs can hold parts of what others need; a second
            // queue now and then.
            let cpu = rng.random_range(1..=2);
            let queue = if rng.random_bool(0.2) { "b" } else { "default" };
            let src = if rng.random_bool(0.5) {
                let replicas = rng.random_range(2..=total_cpus.clamp(2, 5));
                let min = rng.random_range(1..=replicas);
                let timeout = rng.random_range(1..=5);
                format!(
                    "priority = {priority}\nqueue = \"{queue}\"\n[[task]]\nname = \"g\"\nkind = \"noop\"\ncpu = {cpu}\nreplicas = {replicas}\nmin_members = {min}\ngang_timeout = \"{timeout}s\"\n"
                )
            } else {
                let replicas = rng.random_range(1..=6);
                format!(
                    "priority = {priority}\nqueue = \"{queue}\"\n[[task]]\nname = \"p\"\nkind = \"noop\"\ncpu = {cpu}\nreplicas = {replicas}\n"
                )
            };
            let id = JobId::random();
            if c.submit(id, parse(&src, Format::Toml, "r.toml").unwrap(), now).is_ok() {
                jobs.push(id);
                cov.jobs += 1;
            }
        }
        // A cancel now and then.
        if chaos && !jobs.is_empty() && rng.random_bool(0.01) {
            let j = jobs[rng.random_range(0..jobs.len())];
            let _ = c.cancel(j, now);
        }
        // A worker goes silent (and comes back later with a new session).
        if chaos && rng.random_bool(0.01) {
            let n = rng.random_range(1..=nw);
            down.entry(wid(n)).or_insert_with(|| {
                cov.losses += 1;
                now + rng.random_range(3_500..8_000)
            });
        }
        for (w, back) in down.clone() {
            if now >= back {
                down.remove(&w);
                let n = w.as_bytes()[15];
                let s = format!("s{n}-{now}");
                sessions.insert(w, s.clone());
                running.retain(|_, r| r.worker != w);
                c.register(reg(n, &s, cpus[n as usize - 1], vec![]), now);
            }
        }
        // Heartbeats of the live workers.
        for n in 1..=nw {
            let w = wid(n);
            if !down.contains_key(&w) {
                let node = NodeReport {
                    running: running.values().filter(|r| r.worker == w).map(|r| r.attempt.clone()).collect(),
                    ..Default::default()
                };
                c.heartbeat(w, &sessions[&w], node, now);
            }
        }
        // Attempts end.
        let due: Vec<(JobId, u32, u32)> = running
            .iter()
            .filter(|(_, r)| r.ends_at <= now && !down.contains_key(&r.worker))
            .map(|(k, _)| *k)
            .collect();
        for k in due {
            let r = running.remove(&k).unwrap();
            c.report(r.worker, &sessions[&r.worker], vec![ok(&r.attempt)], now);
        }
        // A coordinator restart now and then: the store's records, restored; live workers
        // register again with what they run.
        if chaos && rng.random_bool(0.005) {
            cov.restarts += 1;
            let snap = snapshot(&c);
            c = core();
            c.restore(snap, now).unwrap();
            for n in 1..=nw {
                let w = wid(n);
                if !down.contains_key(&w) {
                    let known = running.values().filter(|r| r.worker == w).map(|r| r.attempt.clone()).collect();
                    c.register(reg(n, &sessions[&w], cpus[n as usize - 1], known), now);
                }
            }
        }
        c.tick(now);
        c.schedule(now);
        for (w, a) in c.take_outbox().assignments {
            let ends_at = now + rng.random_range(100..=2_000);
            running.insert(
                (
                    a.attempt.job,
                    c.job(a.attempt.job).unwrap().subtask_index(&a.attempt.task, a.attempt.rank).unwrap(),
                    a.attempt.attempt,
                ),
                Running { worker: w, attempt: a.attempt, ends_at },
            );
        }
        // Attempts the core no longer holds (cancelled, lost, superseded) are forgotten.
        running.retain(|(j, i, att), _| {
            c.job(*j).is_some_and(|job| {
                job.subtasks[*i as usize].attempt == *att && job.subtasks[*i as usize].state.is_placed()
            })
        });
        check_invariants(&c, seed, step, &bound_before);
        for j in c.jobs() {
            for (n, g) in &j.record.gangs {
                if g.bound_at > 0 {
                    bound_before.insert((j.id(), n.clone()), g.bound_at);
                }
            }
        }
        if !chaos && c.jobs().all(|j| j.record.state.is_final()) {
            for j in c.jobs() {
                for g in j.record.gangs.values() {
                    cov.bound += u64::from(g.bound_at > 0);
                    cov.rollbacks += u64::from(g.rollbacks);
                }
            }
            return;
        }
    }
    let stuck: Vec<String> = c
        .jobs()
        .filter(|j| !j.record.state.is_final())
        .map(|j| {
            format!(
                "{} (priority {}, gangs {:?}, waiting {:?})",
                j.record.spec.name, j.record.spec.priority, j.record.gangs, j.waiting
            )
        })
        .collect();
    panic!(
        "seed {seed}: jobs still running {LIVENESS_ROUNDS} rounds after the chaos ended (deadlock or livelock): {stuck:?}"
    );
}

/// Thousands of seeded scenarios: gangs and plain tasks of random sizes and priorities, worker
/// losses, cancels and coordinator restarts. After every round: no partial start, allocation =
/// running + reserved on every worker, no reservation outlives its job or points nowhere. Then,
/// with the chaos over, every job ends within LIVENESS_ROUNDS rounds (every gang that fits the
/// cluster alone starts: admission refuses the others).
#[test]
fn random_scenarios_keep_the_gang_invariants() {
    let n: u64 = std::env::var("PLEXUS_GANG_SCENARIOS").ok().and_then(|v| v.parse().ok()).unwrap_or(2_000);
    let mut cov = Coverage::default();
    for seed in 0..n {
        scenario(seed, &mut cov);
    }
    eprintln!(
        "{n} scenarios: {} jobs, {} gangs bound, {} rollbacks, {} worker losses, {} coordinator restarts",
        cov.jobs, cov.bound, cov.rollbacks, cov.losses, cov.restarts
    );
    if n >= 1_000 {
        assert!(
            cov.bound > n / 2 && cov.rollbacks > 20 && cov.losses > n && cov.restarts > n / 4,
            "the scenarios do not exercise gangs enough"
        );
    }
}
