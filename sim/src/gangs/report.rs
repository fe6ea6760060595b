//! What one gang simulation measured ([`GangReport`]) and how it ended ([`End`]).
//!
//! The engine fills a report in and `gangs`' comparison reads it; it lives in a module of its
//! own so that the engine imports a sibling rather than its parent.

/// How a run ended.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum End {
    /// Every item ran to completion.
    Finished,
    /// These partially started gangs (item ids) could never complete; the run stopped here.
    Deadlock { at_ms: u64, gangs: Vec<usize> },
    /// Nothing left to happen with work unfinished (nothing running, no arrival, no timer).
    Stalled { at_ms: u64 },
    /// The horizon passed with work unfinished.
    Horizon { at_ms: u64 },
}

/// What one scheduler's run measured. Times are milliseconds of simulated time.
#[derive(Clone, Debug, PartialEq)]
pub struct GangReport {
    pub scheduler: String,
    pub end: End,
    /// The gangs' item ids, in arrival order; `gang_wait_ms` is in the same order.
    pub gang_ids: Vec<usize>,
    /// Arrival → all members running, per gang; `None`: never.
    pub gang_wait_ms: Vec<Option<u64>>,
    /// Arrival → start, per small task; `None`: never.
    pub small_wait_ms: Vec<Option<u64>>,
    /// Items that ran to completion, of `items`.
    pub completed: usize,
    pub items: usize,
    /// Gangs that had some but not all of their members running at some point.
    pub partial_starts: usize,
    /// The last completion (or when the run stopped early).
    pub makespan_ms: u64,
    /// Core-ms of work done: cores × time of members whose item had all its members running.
    pub useful_core_ms: u64,
    /// Core-ms held by started members, whether their item progressed or not.
    pub held_core_ms: u64,
    pub cores: u64,
    /// Rounds the loop ran (rounds where nothing could change are skipped).
    pub rounds: u64,
    /// Gang rollbacks at deadlines (ours only).
    pub rollbacks: u64,
    /// What the scheduler saw that should not happen (empty when all is well).
    pub anomalies: Vec<String>,
    /// Core-ms set aside by reservations of gangs not running yet (ours only).
    pub reserved_core_ms: u64,
    /// Observations of the scheduler's own (ours: how many gangs held reservations at once).
    pub notes: Vec<String>,
}

fn mean(v: impl Iterator<Item = u64>) -> f64 {
    let (n, s) = v.fold((0u64, 0u64), |(n, s), x| (n + 1, s + x));
    if n == 0 { 0.0 } else { s as f64 / n as f64 }
}

impl GangReport {
    /// Deadlocks: 1 if the run stopped at one (it stops at the first).
    pub fn deadlocks(&self) -> usize {
        usize::from(matches!(self.end, End::Deadlock { .. }))
    }

    /// Gangs caught in the deadlock the run stopped at.
    pub fn deadlocked_gangs(&self) -> usize {
        match &self.end {
            End::Deadlock { gangs, .. } => gangs.len(),
            _ => 0,
        }
    }

    /// Mean wait of the gangs that started, seconds.
    pub fn mean_gang_wait_s(&self) -> f64 {
        mean(self.gang_wait_ms.iter().flatten().copied()) / 1e3
    }

    pub fn max_gang_wait_s(&self) -> f64 {
        self.gang_wait_ms.iter().flatten().copied().max().unwrap_or(0) as f64 / 1e3
    }

    /// Mean wait of the small tasks that started, seconds.
    pub fn mean_small_wait_s(&self) -> f64 {
        mean(self.small_wait_ms.iter().flatten().copied()) / 1e3
    }

    /// Useful core-seconds ÷ (cores × makespan).
    pub fn utilisation(&self) -> f64 {
        if self.makespan_ms == 0 {
            0.0
        } else {
            self.useful_core_ms as f64 / (self.cores as f64 * self.makespan_ms as f64)
        }
    }

    /// Held core-seconds ÷ (cores × makespan): counts the cores that partially started gangs
    /// hold without progress.
    pub fn held_utilisation(&self) -> f64 {
        if self.makespan_ms == 0 {
            0.0
        } else {
            self.held_core_ms as f64 / (self.cores as f64 * self.makespan_ms as f64)
        }
    }

    /// Reserved core-seconds ÷ (cores × makespan): cores set aside for gangs, idle.
    pub fn reserved_share(&self) -> f64 {
        if self.makespan_ms == 0 {
            0.0
        } else {
            self.reserved_core_ms as f64 / (self.cores as f64 * self.makespan_ms as f64)
        }
    }

    /// Items that did not run to completion.
    pub fn unfinished(&self) -> usize {
        self.items - self.completed
    }

    /// How the run ended, in a few words.
    pub fn end_str(&self) -> String {
        match &self.end {
            End::Finished => "finished".into(),
            End::Deadlock { at_ms, gangs } => {
                format!("deadlock at {:.0} s ({} gangs)", *at_ms as f64 / 1e3, gangs.len())
            }
            End::Stalled { at_ms } => format!("stalled at {:.0} s", *at_ms as f64 / 1e3),
            End::Horizon { at_ms } => format!("horizon at {:.0} s", *at_ms as f64 / 1e3),
        }
    }
}
