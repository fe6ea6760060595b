//! The faults: a plan drawn from the seed before the run (what, on whom, when, for how long),
//! and the thread that injects each and heals it (continues, restarts, frees) when its time is
//! up. Faults come one after another, never two at once, so each violation can be laid next to
//! the one fault that was active.

use std::time::{Duration, Instant};

use rand::rngs::StdRng;
use rand::seq::SliceRandom;
use rand::{Rng, SeedableRng};

use super::cluster::ChaosCluster;

/// What a fault does.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum FaultKind {
    /// `kill -9` of a worker, restarted after the hold.
    KillWorker,
    /// `SIGSTOP` of a worker, `SIGCONT` after the hold.
    StopWorker,
    /// `kill -9` of a coordinator, restarted (same port, same data) after the hold.
    KillCoordinator,
    /// `SIGSTOP` of a coordinator, `SIGCONT` after the hold.
    StopCoordinator,
    /// `kill -9` of an etcd member (with `--ha`), restarted after the hold.
    KillEtcd,
    /// Worker 0's data dir (a small tmpfs) filled up, freed after the hold.
    DiskFull,
    /// The namespaced worker's link cut (both ways), mended after the hold.
    PartitionWorker,
    /// Worker 1's data dir throttled to [`super::rig::SLOW_BPS`] and [`super::rig::SLOW_IOPS`],
    /// lifted after the hold.
    SlowDisk,
}

impl FaultKind {
    pub fn describe(self) -> &'static str {
        match self {
            FaultKind::KillWorker => "kill -9 worker",
            FaultKind::StopWorker => "SIGSTOP worker",
            FaultKind::KillCoordinator => "kill -9 coordinator",
            FaultKind::StopCoordinator => "SIGSTOP coordinator",
            FaultKind::KillEtcd => "kill -9 etcd member",
            FaultKind::DiskFull => "disk full (worker 0)",
            FaultKind::PartitionWorker => "network partition of worker",
            FaultKind::SlowDisk => "slow disk of worker",
        }
    }

    pub const ALL: [FaultKind; 8] = [
        FaultKind::KillWorker,
        FaultKind::StopWorker,
        FaultKind::KillCoordinator,
        FaultKind::StopCoordinator,
        FaultKind::KillEtcd,
        FaultKind::DiskFull,
        FaultKind::PartitionWorker,
        FaultKind::SlowDisk,
    ];
}

/// One planned fault.
#[derive(Clone, Debug)]
pub struct Fault {
    /// When it starts, after the run's start.
    pub at: Duration,
    pub kind: FaultKind,
    pub target: usize,
    /// How long it lasts before it is healed.
    pub hold: Duration,
}

/// One fault as it happened: when it started and was healed (after the run's start), and what
/// went wrong doing it, if anything.
#[derive(Clone, Debug)]
pub struct Injected {
    pub fault: Fault,
    pub started: Duration,
    pub healed: Duration,
    pub error: Option<String>,
}

/// What the plan draws from.
pub struct Shape {
    pub duration: Duration,
    /// The mean gap between one fault's end and the next one's start.
    pub every: Duration,
    pub workers: usize,
    pub coordinators: usize,
    pub etcd_members: usize,
    pub small_disk: bool,
    /// The worker in a network namespace, if one is.
    pub partitionable: Option<usize>,
    /// The worker on the slow disk, if one is.
    pub slow_disk: Option<usize>,
}

/// The faults of a run, a pure function of `seed` and `shape`.
pub fn plan(seed: u64, shape: &Shape) -> Vec<Fault> {
    let mut rng = StdRng::seed_from_u64(seed ^ 0xfa17_fa17);
    let mut kinds: Vec<(FaultKind, u32)> = vec![
        (FaultKind::KillWorker, 3),
        (FaultKind::StopWorker, 3),
        (FaultKind::KillCoordinator, 1),
        (FaultKind::StopCoordinator, 1),
    ];
    if shape.etcd_members > 0 {
        kinds.push((FaultKind::KillEtcd, 2));
    }
    if shape.small_disk {
        kinds.push((FaultKind::DiskFull, 1));
    }
    if shape.partitionable.is_some() {
        kinds.push((FaultKind::PartitionWorker, 2));
    }
    if shape.slow_disk.is_some() {
        kinds.push((FaultKind::SlowDisk, 2));
    }
    let total: u32 = kinds.iter().map(|k| k.1).sum();
    let mut out = Vec::new();
    let every = shape.every.as_millis() as u64;
    // Every kind once first, in a seeded order, so a short run meets each; then by weight.
    let mut first: Vec<FaultKind> = kinds.iter().map(|k| k.0).collect();
    first.shuffle(&mut rng);
    let mut t = Duration::from_millis(rng.random_range(every / 2..=every * 3 / 2));
    while t < shape.duration {
        let kind = if out.len() < first.len() { first[out.len()] } else { weighted(&mut rng, &kinds, total) };
        let (target, hold_ms) = match kind {
            FaultKind::KillWorker => (rng.random_range(0..shape.workers), rng.random_range(500..4_000)),
            // Past the coordinator's heartbeat timeout (3 s) about half of the time.
            FaultKind::StopWorker => (rng.random_range(0..shape.workers), rng.random_range(1_000..8_000)),
            FaultKind::KillCoordinator => (rng.random_range(0..shape.coordinators), rng.random_range(500..3_000)),
            // Past the 7 s pause that once made a coordinator evict every worker, now and then.
            FaultKind::StopCoordinator => (rng.random_range(0..shape.coordinators), rng.random_range(1_000..10_000)),
            FaultKind::KillEtcd => (rng.random_range(0..shape.etcd_members), rng.random_range(1_000..6_000)),
            FaultKind::DiskFull => (0, rng.random_range(2_000..10_000)),
            // Past the heartbeat timeout about two times in three: the worker fences itself.
            FaultKind::PartitionWorker => (shape.partitionable.unwrap_or(0), rng.random_range(1_000..10_000)),
            FaultKind::SlowDisk => (shape.slow_disk.unwrap_or(0), rng.random_range(3_000..15_000)),
        };
        let hold = Duration::from_millis(hold_ms);
        out.push(Fault { at: t, kind, target, hold });
        t += hold + Duration::from_millis(rng.random_range(every / 2..=every * 3 / 2));
    }
    out
}

/// A kind drawn by weight.
fn weighted(rng: &mut StdRng, kinds: &[(FaultKind, u32)], total: u32) -> FaultKind {
    let mut pick = rng.random_range(0..total);
    for (k, w) in kinds {
        if pick < *w {
            return *k;
        }
        pick -= w;
    }
    kinds[kinds.len() - 1].0
}

fn inject(c: &mut ChaosCluster, f: &Fault) -> Result<(), String> {
    match f.kind {
        FaultKind::KillWorker => c.launch.kill_worker(f.target),
        FaultKind::StopWorker => {
            c.launch.signal_worker(f.target, libc::SIGSTOP).map_err(|e| format!("SIGSTOP: {e}"))?
        }
        FaultKind::KillCoordinator => c.launch.kill_coordinator(f.target),
        FaultKind::StopCoordinator => {
            c.launch.signal_coordinator(f.target, libc::SIGSTOP).map_err(|e| format!("SIGSTOP: {e}"))?
        }
        FaultKind::KillEtcd => c.etcd.as_mut().ok_or("no etcd")?.kill(f.target),
        FaultKind::DiskFull => c.fill_disk()?,
        FaultKind::PartitionWorker => c.link(false)?,
        FaultKind::SlowDisk => c.slow(true)?,
    }
    Ok(())
}

/// Undoes `f`: continues what was stopped, restarts what was killed, frees the disk.
fn heal(c: &mut ChaosCluster, f: &Fault) -> Result<(), String> {
    match f.kind {
        FaultKind::KillWorker => c.start_worker(f.target).map_err(|e| format!("restarting: {e}")),
        FaultKind::StopWorker => c.launch.signal_worker(f.target, libc::SIGCONT).map_err(|e| format!("SIGCONT: {e}")),
        FaultKind::KillCoordinator => c.launch.start_coordinator(f.target).map_err(|e| format!("restarting: {e}")),
        FaultKind::StopCoordinator => {
            c.launch.signal_coordinator(f.target, libc::SIGCONT).map_err(|e| format!("SIGCONT: {e}"))
        }
        FaultKind::KillEtcd => {
            c.etcd.as_mut().ok_or("no etcd")?.restart(f.target).map_err(|e| format!("restarting: {e}"))
        }
        FaultKind::DiskFull => {
            c.free_disk();
            Ok(())
        }
        FaultKind::PartitionWorker => c.link(true),
        FaultKind::SlowDisk => c.slow(false),
    }
}

/// Injects the plan's faults at their times, each healed after its hold, from `start` on;
/// returns the cluster (every fault healed) and what happened.
pub fn run(mut c: ChaosCluster, plan: Vec<Fault>, start: Instant) -> (ChaosCluster, Vec<Injected>) {
    let mut log = Vec::new();
    for f in plan {
        let wait = f.at.saturating_sub(start.elapsed());
        std::thread::sleep(wait);
        let started = start.elapsed();
        let mut error = inject(&mut c, &f).err();
        std::thread::sleep(f.hold);
        if let Err(e) = heal(&mut c, &f) {
            error = Some(error.map_or(e.clone(), |first| format!("{first}; {e}")));
        }
        let healed = start.elapsed();
        eprintln!(
            "chaos: {:>7.1}s {} {} for {:.1}s{}",
            started.as_secs_f64(),
            f.kind.describe(),
            f.target,
            (healed - started).as_secs_f64(),
            error.as_deref().map(|e| format!(": {e}")).unwrap_or_default()
        );
        log.push(Injected { fault: f, started, healed, error });
    }
    (c, log)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn shape() -> Shape {
        Shape {
            duration: Duration::from_secs(600),
            every: Duration::from_secs(5),
            workers: 4,
            coordinators: 3,
            etcd_members: 3,
            small_disk: true,
            partitionable: Some(3),
            slow_disk: Some(1),
        }
    }

    #[test]
    fn the_plan_is_a_function_of_the_seed_and_faults_do_not_overlap() {
        let a = plan(11, &shape());
        let b = plan(11, &shape());
        assert_eq!(format!("{a:?}"), format!("{b:?}"));
        assert_ne!(format!("{a:?}"), format!("{:?}", plan(12, &shape())));
        for w in a.windows(2) {
            assert!(w[0].at + w[0].hold < w[1].at, "{w:?}");
        }
        // Every kind comes once among the first eight.
        for k in FaultKind::ALL {
            assert!(a[..FaultKind::ALL.len()].iter().any(|f| f.kind == k), "{k:?} not among the first faults");
        }
    }

    #[test]
    fn without_etcd_or_a_small_disk_those_faults_are_not_drawn() {
        let s = Shape {
            etcd_members: 0,
            small_disk: false,
            coordinators: 1,
            partitionable: None,
            slow_disk: None,
            ..shape()
        };
        let p = plan(3, &s);
        assert!(p.iter().all(|f| !matches!(
            f.kind,
            FaultKind::KillEtcd | FaultKind::DiskFull | FaultKind::PartitionWorker | FaultKind::SlowDisk
        )));
        // The partition and the slow disk hit the worker that has them.
        for f in plan(4, &shape()) {
            match f.kind {
                FaultKind::PartitionWorker => assert_eq!(f.target, 3),
                FaultKind::SlowDisk => assert_eq!(f.target, 1),
                _ => {}
            }
        }
        assert!(
            p.iter()
                .all(|f| !matches!(f.kind, FaultKind::KillCoordinator | FaultKind::StopCoordinator) || f.target == 0)
        );
    }
}
