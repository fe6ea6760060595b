//! Gang workloads: training-like gangs mixed with many small tasks, drawn from a seed.
//!
//! Two Poisson arrival streams over `window_s`: gangs of `members` alike members (each
//! `member_cores` cores, one duration per gang), and one-core small tasks. Their rates are set
//! so that the offered work — Σ cores × duration — is `load` × the cluster's cores × the window,
//! `gang_share` of it in gangs. Times are milliseconds of simulated time, as in the scheduling
//! core.

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

use crate::SimError;

/// The cluster and the mix a gang workload is drawn for.
#[derive(Clone, Debug, PartialEq)]
pub struct GangConfig {
    /// Workers in the cluster, all alike.
    pub workers: u32,
    /// Cores of each worker.
    pub cores: u32,
    /// Offered work over the window ÷ (cluster cores × window).
    pub load: f64,
    /// Arrivals happen over this many seconds.
    pub window_s: u64,
    /// Share of the offered work (core-seconds) that comes in gangs.
    pub gang_share: f64,
    /// Members of a gang, uniform in this range (inclusive).
    pub members: (u32, u32),
    /// Cores of each member of a gang, one drawn per gang, uniformly from this list.
    pub member_cores: Vec<u32>,
    /// A gang's run time in seconds, uniform in this range (inclusive).
    pub gang_s: (u64, u64),
    /// A small task's run time in seconds, uniform in this range (inclusive).
    pub small_s: (u64, u64),
    /// Every gang's `gang_timeout`: the deadline for all its members to be reserved.
    pub gang_timeout_ms: u64,
    /// Whether items declare time limits (`timeout`, their run time over-estimated, see
    /// [`time_limit_ms`]), as users of batch schedulers do.
    pub time_limits: bool,
}

impl GangConfig {
    /// The benchmark's mix on `workers` 8-core workers at `load`: an hour of arrivals; gangs
    /// of 2–16 members of 1, 2, 4 or 8 cores running 1–10 minutes carry 70% of the work, small
    /// one-core tasks of 5–60 s the rest; the core's default gang deadline (120 s).
    pub fn new(workers: u32, load: f64) -> GangConfig {
        GangConfig {
            workers,
            cores: 8,
            load,
            window_s: 3_600,
            gang_share: 0.7,
            members: (2, 16),
            member_cores: vec![1, 2, 4, 8],
            gang_s: (60, 600),
            small_s: (5, 60),
            gang_timeout_ms: plexus_scheduler::spec::DEFAULT_GANG_TIMEOUT_MS,
            time_limits: true,
        }
    }

    pub fn total_cores(&self) -> u64 {
        u64::from(self.workers) * u64::from(self.cores)
    }

    fn validate(&self) -> Result<(), SimError> {
        let bad = |m: String| Err(SimError::GangWorkload(m));
        if self.workers == 0 || self.cores == 0 {
            return bad(format!("a cluster of {} workers × {} cores", self.workers, self.cores));
        }
        if !(self.load.is_finite() && self.load > 0.0 && (0.0..=1.0).contains(&self.gang_share)) {
            return bad(format!("load {} and gang_share {} (load > 0, share in 0..=1)", self.load, self.gang_share));
        }
        if self.window_s == 0 || self.gang_timeout_ms == 0 {
            return bad("window_s and gang_timeout_ms must be positive".into());
        }
        if self.members.0 < 1 || self.members.0 > self.members.1 {
            return bad(format!("members {:?}", self.members));
        }
        if self.member_cores.is_empty() || self.member_cores.iter().any(|&c| c == 0 || c > self.cores) {
            return bad(format!("member_cores {:?} on {}-core workers", self.member_cores, self.cores));
        }
        if self.gang_s.0 == 0 || self.gang_s.0 > self.gang_s.1 || self.small_s.0 == 0 || self.small_s.0 > self.small_s.1
        {
            return bad(format!("durations gang_s {:?}, small_s {:?}", self.gang_s, self.small_s));
        }
        Ok(())
    }
}

/// What an arrival is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    /// Members that make progress only while all of them run.
    Gang,
    /// One small task.
    Small,
}

/// One arrival.
#[derive(Clone, Debug, PartialEq)]
pub struct Item {
    /// Its index in [`GangWorkload::items`] (arrival order).
    pub id: usize,
    pub kind: Kind,
    pub arrival_ms: u64,
    /// 1 for a small task.
    pub members: u32,
    /// Cores of each member.
    pub cores: u32,
    /// How long it runs once all its members run.
    pub duration_ms: u64,
    /// A gang's deadline for reserving all its members (unused for a small task).
    pub timeout_ms: u64,
    /// The time limit its job file declares (`timeout`), which the core takes as an upper
    /// bound of its run time for backfill; 0 = none.
    pub limit_ms: u64,
}

/// The time limit a user declares for item `id` running `duration_ms`: the run time
/// over-estimated by a factor between 1.2 and 3 (users of batch schedulers over-estimate,
/// typically by 2× or more, so limits are upper bounds, never exact), drawn from a hash of the
/// id so that the workload's own random draws stay as they were.
pub fn time_limit_ms(id: usize, duration_ms: u64) -> u64 {
    let mut h: u64 = 0x9E37_79B9_7F4A_7C15 ^ id as u64;
    h ^= h >> 33;
    h = h.wrapping_mul(0xff51_afd7_ed55_8ccd);
    h ^= h >> 33;
    let factor = 1.2 + 1.8 * (h % 1_000_000) as f64 / 1_000_000.0;
    ((duration_ms.max(1) as f64) * factor).ceil() as u64
}

impl Item {
    /// Its work: cores × duration over all members.
    pub fn core_ms(&self) -> u64 {
        u64::from(self.members) * u64::from(self.cores) * self.duration_ms
    }
}

/// A cluster and the arrivals that every scheduler is given.
#[derive(Clone, Debug, PartialEq)]
pub struct GangWorkload {
    pub workers: u32,
    pub cores: u32,
    /// In arrival order; `items[i].id == i`.
    pub items: Vec<Item>,
    /// The seed it was drawn from (0 for a hand-built one).
    pub seed: u64,
}

/// `x` drawn uniformly from the inclusive range.
fn uniform<R: Rng>(rng: &mut R, (lo, hi): (u64, u64)) -> u64 {
    rng.random_range(lo..=hi)
}

/// Arrival times of a Poisson stream of `per_ms` arrivals per millisecond over `window_ms`.
fn poisson<R: Rng>(rng: &mut R, per_ms: f64, window_ms: u64) -> Vec<u64> {
    let mut out = Vec::new();
    if per_ms <= 0.0 {
        return out;
    }
    let mut t = 0.0f64;
    loop {
        let u: f64 = rng.random();
        t += -(1.0 - u).ln() / per_ms;
        if t >= window_ms as f64 {
            return out;
        }
        out.push(t as u64);
    }
}

impl GangWorkload {
    /// Draws a workload from `seed`: the same configuration and seed give the same items.
    pub fn generate(config: &GangConfig, seed: u64) -> Result<GangWorkload, SimError> {
        config.validate()?;
        let mut rng = StdRng::seed_from_u64(seed);
        let window_ms = config.window_s * 1_000;
        let offered = config.load * config.total_cores() as f64 * window_ms as f64; // core-ms
        let mean = |(lo, hi): (u64, u64)| (lo + hi) as f64 / 2.0;
        let mean_cores = config.member_cores.iter().sum::<u32>() as f64 / config.member_cores.len() as f64;
        let mean_members = mean((u64::from(config.members.0), u64::from(config.members.1)));
        let gang_core_ms = mean_members * mean_cores * mean(config.gang_s) * 1_000.0;
        let small_core_ms = mean(config.small_s) * 1_000.0;
        let gang_rate = offered * config.gang_share / gang_core_ms / window_ms as f64;
        let small_rate = offered * (1.0 - config.gang_share) / small_core_ms / window_ms as f64;

        let mut items = Vec::new();
        for at in poisson(&mut rng, gang_rate, window_ms) {
            let cores = config.member_cores[rng.random_range(0..config.member_cores.len())];
            // At most what the cluster holds at once, so that every gang can run alone.
            let most = config.workers * (config.cores / cores);
            let members = rng.random_range(config.members.0..=config.members.1).min(most);
            let duration_ms = uniform(&mut rng, config.gang_s) * 1_000;
            items.push(Item {
                id: 0,
                kind: Kind::Gang,
                arrival_ms: at,
                members,
                cores,
                duration_ms,
                timeout_ms: config.gang_timeout_ms,
                limit_ms: 0,
            });
        }
        for at in poisson(&mut rng, small_rate, window_ms) {
            let duration_ms = uniform(&mut rng, config.small_s) * 1_000;
            items.push(Item {
                id: 0,
                kind: Kind::Small,
                arrival_ms: at,
                members: 1,
                cores: 1,
                duration_ms,
                timeout_ms: 0,
                limit_ms: 0,
            });
        }
        // Stable: at equal times gangs (drawn first) come first.
        items.sort_by_key(|i| i.arrival_ms);
        for (n, i) in items.iter_mut().enumerate() {
            i.id = n;
            if config.time_limits {
                i.limit_ms = time_limit_ms(n, i.duration_ms);
            }
        }
        Ok(GangWorkload { workers: config.workers, cores: config.cores, items, seed })
    }

    /// A hand-built workload (tests, traces): items are numbered in the order given, which must
    /// be arrival order, and every gang must fit the cluster alone.
    pub fn from_items(workers: u32, cores: u32, items: Vec<Item>) -> Result<GangWorkload, SimError> {
        let mut items = items;
        for (n, i) in items.iter_mut().enumerate() {
            i.id = n;
            if i.members == 0 || i.cores == 0 || i.cores > cores || i.duration_ms == 0 {
                return Err(SimError::GangWorkload(format!(
                    "item {n}: {} members × {} cores for {} ms on {cores}-core workers",
                    i.members, i.cores, i.duration_ms
                )));
            }
            if i.members > workers * (cores / i.cores) {
                return Err(SimError::GangWorkload(format!(
                    "item {n}: {} members of {} cores never fit {workers} workers × {cores} cores at once",
                    i.members, i.cores
                )));
            }
            if i.kind == Kind::Gang && i.timeout_ms == 0 {
                return Err(SimError::GangWorkload(format!("item {n}: a gang needs a deadline")));
            }
        }
        if items.windows(2).any(|w| w[0].arrival_ms > w[1].arrival_ms) {
            return Err(SimError::GangWorkload("items are not in arrival order".into()));
        }
        Ok(GangWorkload { workers, cores, items, seed: 0 })
    }

    pub fn total_cores(&self) -> u64 {
        u64::from(self.workers) * u64::from(self.cores)
    }

    pub fn gangs(&self) -> impl Iterator<Item = &Item> {
        self.items.iter().filter(|i| i.kind == Kind::Gang)
    }

    pub fn smalls(&self) -> impl Iterator<Item = &Item> {
        self.items.iter().filter(|i| i.kind == Kind::Small)
    }

    /// Offered work ÷ (cluster cores × the span of arrivals).
    pub fn offered_load(&self) -> f64 {
        let span = self.items.last().map_or(0, |i| i.arrival_ms).max(1);
        self.items.iter().map(Item::core_ms).sum::<u64>() as f64 / (self.total_cores() as f64 * span as f64)
    }
}
