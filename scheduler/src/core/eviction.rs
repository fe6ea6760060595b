//! The eviction guard's types and its pure decision (issue 29), apart from `liveness.rs`, which
//! applies them to the core: the configuration and the core's state both hold them.

/// When the loss of many workers at once halts evictions.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct EvictionGuard {
    /// Evictions halt when more than this share of the alive workers are silent at once
    /// (`--max-lost-share`; 1 never halts).
    pub max_lost_share: f64,
    /// ... in a cluster of at least this many alive workers (`--halt-min-workers`): in a smaller
    /// one, one or two lost workers are a large share and are likely really gone.
    pub min_workers: usize,
}

impl Default for EvictionGuard {
    fn default() -> Self {
        EvictionGuard { max_lost_share: 0.5, min_workers: 3 }
    }
}

/// Evictions halted: since when, and how many of how many alive workers are silent.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct EvictionHalt {
    /// When the halt began.
    pub since: u64,
    /// Workers silent for over half the heartbeat timeout (none is declared lost).
    pub silent: usize,
    /// Alive workers (the silent ones included).
    pub alive: usize,
}

/// Whether `silent` of `alive` workers, all past the heartbeat timeout, may be declared lost.
pub fn may_evict(guard: &EvictionGuard, alive: usize, silent: usize) -> bool {
    silent == 0 || alive < guard.min_workers || silent as f64 <= guard.max_lost_share * alive as f64
}
