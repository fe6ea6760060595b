//! The gang simulator on hand-checked scenarios, its determinism, and its own checks.

use super::engine::{self, GangScheduler, Options, Start};
use super::*;

const S: u64 = 1_000;

fn gang(at: u64, members: u32, cores: u32, dur: u64, timeout: u64) -> Item {
    Item { id: 0, kind: Kind::Gang, arrival_ms: at, members, cores, duration_ms: dur, timeout_ms: timeout, limit_ms: 0 }
}

fn small(at: u64, dur: u64) -> Item {
    Item {
        id: 0,
        kind: Kind::Small,
        arrival_ms: at,
        members: 1,
        cores: 1,
        duration_ms: dur,
        timeout_ms: 0,
        limit_ms: 0,
    }
}

fn run(w: &GangWorkload, p: Policy) -> GangReport {
    simulate(w, p, &Options::default()).unwrap_or_else(|e| panic!("{}: {e}", p.name()))
}

/// Two 2-core workers. A small task holds one core of worker 0 for 10 s; gang A (2 × 2 cores)
/// and gang B (3 × 1 core) arrive behind it. Naive starts A's first member on worker 1 and B's
/// first on worker 0's free core: A's second needs a whole worker and B's others need cores
/// that A and B hold — a deadlock, certain from 0.6 s (the small task's core helps neither),
/// where the run stops. Ours reserves for A (the head) only, holds worker 0 for it, binds it
/// whole at 10 s, then B; so does strict FIFO.
#[test]
fn naive_partially_starts_and_deadlocks_where_ours_does_not() {
    let w = GangWorkload::from_items(
        2,
        2,
        vec![small(0, 10 * S), gang(500, 2, 2, 20 * S, 120 * S), gang(600, 3, 1, 20 * S, 120 * S)],
    )
    .unwrap();

    let naive = run(&w, Policy::Naive);
    assert_eq!(naive.partial_starts, 2, "{naive:?}");
    assert_eq!(naive.end, End::Deadlock { at_ms: 600, gangs: vec![1, 2] }, "{naive:?}");
    assert_eq!(naive.deadlocks(), 1);
    assert_eq!(naive.completed, 0);
    assert_eq!(naive.gang_wait_ms, vec![None, None]);

    let ours = run(&w, Policy::Ours);
    assert_eq!(ours.end, End::Finished, "{ours:?}");
    assert_eq!((ours.partial_starts, ours.deadlocks()), (0, 0));
    assert!(ours.anomalies.is_empty(), "{:?}", ours.anomalies);
    // A binds when the small task ends (10 s; it arrived at 0.5 s), B when A ends (30 s).
    assert_eq!(ours.gang_wait_ms, vec![Some(10 * S - 500), Some(30 * S - 600)]);
    assert_eq!(ours.makespan_ms, 50 * S);
    assert!(ours.reserved_core_ms > 0, "A held a reservation on worker 1 while it waited");

    let fifo = run(&w, Policy::StrictFifo);
    assert_eq!(fifo.gang_wait_ms, ours.gang_wait_ms);
    assert_eq!((fifo.partial_starts, fifo.end.clone()), (0, End::Finished));
    assert!(targets(&w, &ours, &fifo).iter().all(|t| t.pass), "{:?}", targets(&w, &ours, &fifo));
}

/// A gang that naive starts partially but that completes later is a partial start, not a
/// deadlock: the detector must not stop a run that can go on.
#[test]
fn a_partial_start_that_can_complete_is_no_deadlock() {
    let w = GangWorkload::from_items(2, 2, vec![small(0, 10 * S), gang(500, 2, 2, 20 * S, 120 * S)]).unwrap();
    let naive = run(&w, Policy::Naive);
    assert_eq!(naive.partial_starts, 1);
    assert_eq!(naive.end, End::Finished);
    assert_eq!(naive.gang_wait_ms, vec![Some(10 * S - 500)]);
    // Its first member held 2 cores for 9.5 s without progress: held, not useful.
    assert_eq!(naive.held_core_ms - naive.useful_core_ms, 2 * (10 * S - 500));
}

/// Backfill: two long small tasks hold one core each of workers 0 and 1 (of three 2-core
/// workers) for 100 s; a gang of 2 × 2 cores needs two whole workers, so it waits 100 s under
/// both ours and strict FIFO. Short small tasks behind it run at once under ours, on the
/// worker the gang does not hold; under strict FIFO they wait for the gang.
#[test]
fn ours_backfills_small_tasks_that_strict_fifo_holds_back() {
    let mut items = vec![small(0, 100 * S), small(0, 100 * S), gang(1_000, 2, 2, 50 * S, 120 * S)];
    items.extend((0..10).map(|i| small(2_000 + i * 5 * S, 5 * S)));
    let w = GangWorkload::from_items(3, 2, items).unwrap();
    let ours = run(&w, Policy::Ours);
    let fifo = run(&w, Policy::StrictFifo);
    assert_eq!(ours.gang_wait_ms, vec![Some(99 * S)]);
    assert_eq!(fifo.gang_wait_ms, vec![Some(99 * S)]);
    let waits = |r: &GangReport| r.small_wait_ms.iter().map(|w| w.unwrap()).collect::<Vec<_>>();
    assert!(
        waits(&ours)[2..].iter().all(|&w| w <= 100),
        "ours: the short tasks start within a round: {:?}",
        waits(&ours)
    );
    assert!(waits(&fifo)[2..].iter().all(|&w| w >= 48 * S), "strict FIFO: they wait for the gang: {:?}", waits(&fifo));
    assert!(ours.mean_small_wait_s() <= 0.5 * fifo.mean_small_wait_s());
    assert_eq!((ours.partial_starts, fifo.partial_starts), (0, 0));
    // Naive starts the gang's first member on worker 2 at once and holds it for 99 s.
    let naive = run(&w, Policy::Naive);
    assert_eq!(naive.partial_starts, 1);
}

/// With time limits (each item's run time × 2, declared as `timeout`), the head gang plans its
/// start from the limits of what runs: it reserves nothing while it waits (no core sits idle),
/// holds the workers it will use, and short work whose limit ends before then runs on them too;
/// it still starts when the long tasks end.
#[test]
fn with_time_limits_the_head_plans_its_start_and_short_work_uses_its_workers() {
    let limited = |mut i: Item| {
        i.limit_ms = 2 * i.duration_ms;
        i
    };
    let mut items =
        vec![limited(small(0, 100 * S)), limited(small(0, 100 * S)), limited(gang(1_000, 2, 2, 50 * S, 120 * S))];
    items.extend((0..10).map(|i| limited(small(2_000 + i * 5 * S, 5 * S))));
    let w = GangWorkload::from_items(3, 2, items).unwrap();
    let ours = run(&w, Policy::Ours);
    let fifo = run(&w, Policy::StrictFifo);
    assert_eq!(ours.end, End::Finished);
    assert_eq!(ours.reserved_core_ms, 0, "nothing reserved idle while the start was planned");
    let g = ours.gang_wait_ms[0].unwrap();
    assert!(g <= fifo.gang_wait_ms[0].unwrap() + 120 * S, "{g}");
    let waits: Vec<u64> = ours.small_wait_ms.iter().map(|w| w.unwrap()).collect();
    assert!(waits[2..].iter().all(|&w| w <= 100), "short work starts within a round: {waits:?}");
    assert!(targets(&w, &ours, &fifo).iter().all(|t| t.pass), "{:?}", targets(&w, &ours, &fifo));
}

/// A head that cannot fill within its deadline gives its reservation back and backs off (the
/// core's rollback, seen from the simulator); it still runs once room appears.
#[test]
fn a_head_that_cannot_fill_rolls_back_and_still_runs() {
    let w = GangWorkload::from_items(2, 2, vec![small(0, 30 * S), gang(500, 2, 2, 10 * S, 5 * S)]).unwrap();
    let ours = run(&w, Policy::Ours);
    assert_eq!(ours.end, End::Finished);
    // Reservations at 0.5 s; deadlines at 5.5, then after 1 s, 2 s, 4 s, 8 s back-offs...
    assert!(ours.rollbacks >= 3, "{}", ours.rollbacks);
    let wait = ours.gang_wait_ms[0].unwrap();
    assert!(
        (30 * S - 500..=30 * S - 500 + 16 * S).contains(&wait),
        "bound when the small task ended or at the end of a back-off: {wait}"
    );
}

/// Same configuration and seed: the same workload and the same figures; another seed: another
/// workload.
#[test]
fn the_same_seed_gives_the_same_numbers() {
    let mut config = GangConfig::new(8, 0.9);
    config.window_s = 900;
    let a = GangWorkload::generate(&config, 7).unwrap();
    assert_eq!(a, GangWorkload::generate(&config, 7).unwrap());
    assert_ne!(a.items, GangWorkload::generate(&config, 8).unwrap().items);
    assert!(
        a.gangs().count() >= 3 && a.smalls().count() > 100,
        "{} gangs, {} small",
        a.gangs().count(),
        a.smalls().count()
    );
    for p in Policy::ALL {
        let (x, y) = (run(&a, p), run(&a, p));
        assert_eq!(x, y, "{}", p.name());
        assert!(x.completed > 0 && x.makespan_ms > 0);
    }
}

/// Skipping rounds in which nothing can change is only a speed-up: every figure but the
/// number of rounds is the same with a round every 100 ms.
#[test]
fn skipping_idle_rounds_changes_no_figure() {
    let mut config = GangConfig::new(4, 1.0);
    config.window_s = 600;
    config.gang_timeout_ms = 10 * S; // rollbacks and back-offs: timers the skipping must honour
    config.time_limits = false; // (with limits, gangs plan their start instead of rolling back)
    let w = GangWorkload::generate(&config, 3).unwrap();
    let every = Options { every_round: true, ..Options::default() };
    let mut rolled_back = false;
    for p in Policy::ALL {
        let mut skip = simulate(&w, p, &Options::default()).unwrap();
        let all = simulate(&w, p, &every).unwrap();
        assert!(skip.rounds < all.rounds / 2, "{}: {} rounds skipping, {} not", p.name(), skip.rounds, all.rounds);
        rolled_back |= skip.rollbacks > 0;
        skip.rounds = all.rounds;
        assert_eq!(skip, all, "{}", p.name());
    }
    assert!(rolled_back, "the workload exercises the core's deadlines");
}

/// The generator: arrivals in order within the window, every gang within the configured
/// shape and able to run alone, and the offered work near the configured load on average.
#[test]
fn workloads_have_the_configured_shape_and_load() {
    let config = GangConfig::new(16, 0.8);
    let mut loads = Vec::new();
    for seed in 1..=8 {
        let w = GangWorkload::generate(&config, seed).unwrap();
        assert!(w.items.windows(2).all(|p| p[0].arrival_ms <= p[1].arrival_ms));
        assert!(w.items.iter().enumerate().all(|(n, i)| i.id == n && i.arrival_ms < config.window_s * S));
        for g in w.gangs() {
            assert!((2..=16).contains(&g.members) && config.member_cores.contains(&g.cores), "{g:?}");
            assert!((60 * S..=600 * S).contains(&g.duration_ms) && g.timeout_ms == config.gang_timeout_ms);
        }
        assert!(w.smalls().all(|s| s.cores == 1 && (5 * S..=60 * S).contains(&s.duration_ms)));
        let work = |k: Kind| w.items.iter().filter(|i| i.kind == k).map(Item::core_ms).sum::<u64>() as f64;
        loads.push((work(Kind::Gang) + work(Kind::Small)) / (w.total_cores() as f64 * (config.window_s * S) as f64));
        let share = work(Kind::Gang) / (work(Kind::Gang) + work(Kind::Small));
        assert!((0.4..0.9).contains(&share), "seed {seed}: gang share {share}");
    }
    let mean = loads.iter().sum::<f64>() / loads.len() as f64;
    assert!((0.65..0.95).contains(&mean), "mean offered load {mean} for 0.8 ({loads:?})");
    assert!(
        GangWorkload::generate(&GangConfig { member_cores: vec![16], ..config.clone() }, 1).is_err(),
        "members larger than a worker"
    );
    assert!(GangWorkload::from_items(2, 2, vec![gang(0, 5, 1, S, S)]).is_err(), "a gang larger than the cluster");
    assert!(GangWorkload::from_items(2, 2, vec![small(5, S), small(0, S)]).is_err(), "out of order");
}

/// The loop refuses a scheduler that starts more than a worker has free, or a member twice.
#[test]
fn the_loop_refuses_impossible_starts() {
    struct Greedy(Vec<Start>);
    impl GangScheduler for Greedy {
        fn name(&self) -> &'static str {
            "greedy"
        }
        fn submit(&mut self, item: &Item, _now: u64) -> Result<(), SimError> {
            self.0.extend((0..item.members).map(|m| Start { item: item.id, member: m, worker: 0 }));
            Ok(())
        }
        fn finished(&mut self, _: &Item, _: u32, _: u64) {}
        fn round(&mut self, _now: u64) -> Vec<Start> {
            std::mem::take(&mut self.0)
        }
        fn changed(&self) -> bool {
            false
        }
        fn next_timer(&self, _now: u64) -> Option<u64> {
            None
        }
    }
    let w = GangWorkload::from_items(2, 2, vec![gang(0, 3, 1, S, S)]).unwrap();
    let e = engine::run(&w, &mut Greedy(Vec::new()), &Options::default()).unwrap_err();
    assert!(matches!(&e, SimError::SchedulerBug(m) if m.contains("with 0 cores free")), "{e}");
    let w = GangWorkload::from_items(2, 2, vec![small(0, S)]).unwrap();
    let e =
        engine::run(&w, &mut Greedy(vec![Start { item: 0, member: 0, worker: 1 }]), &Options::default()).unwrap_err();
    assert!(matches!(&e, SimError::SchedulerBug(m) if m.contains("twice")), "{e}");
}

/// Every arrival becomes a job file the core accepts, with the gang's fields.
#[test]
fn job_files_carry_the_gang_fields() {
    let g = GangWorkload::from_items(4, 8, vec![gang(0, 12, 2, S, 30 * S)]).unwrap();
    let spec =
        plexus_scheduler::spec::parse(&job_file(&g.items[0]), plexus_scheduler::spec::Format::Toml, "g.toml").unwrap();
    let t = &spec.tasks[0];
    assert_eq!((t.replicas, t.resources.cpu), (12, 2.0));
    let gs = t.gang.as_ref().unwrap();
    assert_eq!((gs.min_members, gs.timeout_ms), (12, 30 * S));
    let s =
        plexus_scheduler::spec::parse(&job_file(&small(0, S)), plexus_scheduler::spec::Format::Toml, "s.toml").unwrap();
    assert!(s.tasks[0].gang.is_none() && s.tasks[0].replicas == 1);
}

/// A regression found with this simulator (issue 14): a gang that stopped being head kept its
/// reservations, and a head that could reserve nothing had no deadline, so two gangs that each
/// fit the cluster alone could block each other forever. Two 2-core workers; a small task holds
/// a core of worker 0 for 100 s. Gang A (2 × 2 cores, deadline 5 s) reserves worker 1 and rolls
/// back at 5.5 s; gang B (4 × 1 core) becomes head during A's back-off and reserves the three
/// free cores; A is head again. Now B gives its reservations back when A is head, and A's
/// deadline runs from the moment it is head: both finish.
#[test]
fn a_waiting_gangs_reservations_never_block_the_head_forever() {
    let w = GangWorkload::from_items(
        2,
        2,
        vec![small(0, 100 * S), gang(500, 2, 2, 10 * S, 5 * S), gang(600, 4, 1, 10 * S, 5 * S)],
    )
    .unwrap();
    let mut sched = Ours::new(2, 2, "least-loaded", 0).unwrap();
    let ours = engine::run(&w, &mut sched, &Options::default()).unwrap();
    let core = sched.core();
    let state: Vec<String> = [1, 2]
        .iter()
        .map(|&i| {
            let j = core.job(Ours::job_of(i)).unwrap();
            let reserved = j.subtasks().iter().filter(|s| s.reserved_on.is_some()).count();
            format!("gang {i}: {reserved} reserved, {:?}", j.record().gangs.get("m"))
        })
        .collect();
    assert_eq!(ours.end, End::Finished, "{}; {state:?}", ours.end_str());
}
