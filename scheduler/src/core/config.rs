//! How the core is configured, and what it counts for metrics.

use crate::gpu::objective::Weights;
use crate::gpu::topology::MscCosts;

use super::eviction::EvictionGuard;
use crate::error::Error;

/// The least time a worker whose lease ran out has to kill its attempts before the coordinator
/// may declare it lost: `heartbeat_timeout_ms - lease_ms` may not be less. Killing an attempt's
/// cgroup takes milliseconds; the rest covers a busy worker's scheduling delays and the engine
/// round in which a heartbeat is stamped.
pub const MIN_FENCE_MARGIN_MS: u64 = 500;

/// The default of [`CoreConfig::max_heartbeats_per_sec`].
pub const DEFAULT_MAX_HEARTBEATS_PER_SEC: u64 = 2_000;

/// Timing of the worker protocol.
#[derive(Clone, Debug)]
pub struct CoreConfig {
    pub heartbeat_interval_ms: u64,
    /// A worker silent for longer than this is declared lost and its attempts placed again.
    pub heartbeat_timeout_ms: u64,
    /// The worker's lease (`RegisterResponse.lease_ms`): a worker whose heartbeats have gone
    /// unanswered this long kills its attempts (self-fencing). [`CoreConfig::check`] keeps
    /// `heartbeat_timeout_ms >= lease_ms + MIN_FENCE_MARGIN_MS`, so the attempts are dead before
    /// the coordinator places them again.
    pub lease_ms: u64,
    /// When the loss of many workers at once halts evictions (`liveness.rs`).
    pub eviction: EvictionGuard,
    /// The GPU topology's model-synchronisation costs, for GPU gangs (issue 16).
    pub msc: MscCosts,
    /// Seed 002's objective weights `α·I + β·C/C_ref` for GPU gangs (`--gpu-weights`).
    pub gpu_weights: Weights,
    /// The most heartbeats a second the alive workers may send together: past it, the timing
    /// (interval, lease and timeout alike) is stretched in steps of 1.5× (`timing.rs`). 0: the
    /// configured timing at any cluster size.
    pub max_heartbeats_per_sec: u64,
}

impl Default for CoreConfig {
    fn default() -> Self {
        // Heartbeats twice a second keep node state fresh for placement at negligible cost;
        // six missed beats (3 s) declare a worker lost: long enough to ride out a stalled
        // process on a busy 2-core machine, short enough that a dead node's work restarts soon.
        // The lease is two thirds of the timeout: 4 heartbeats, and 1 s to kill the attempts.
        CoreConfig {
            heartbeat_interval_ms: 500,
            heartbeat_timeout_ms: 3_000,
            lease_ms: CoreConfig::default_lease_ms(3_000),
            eviction: EvictionGuard::default(),
            msc: Default::default(),
            gpu_weights: Weights::default(),
            // 1,000 workers at the default 500 ms; measured at 5,000 workers (issue 35), the
            // 10,000 heartbeats a second cost the engine a third of its placements.
            max_heartbeats_per_sec: DEFAULT_MAX_HEARTBEATS_PER_SEC,
        }
    }
}

impl CoreConfig {
    /// The lease that goes with a heartbeat timeout when none is configured: two thirds of it.
    pub fn default_lease_ms(heartbeat_timeout_ms: u64) -> u64 {
        heartbeat_timeout_ms / 3 * 2
    }

    /// Refuses timings that break the liveness contract: a lease that a single late heartbeat
    /// would end (`lease_ms < 2 × heartbeat_interval_ms`), or a timeout that leaves a worker less
    /// than [`MIN_FENCE_MARGIN_MS`] after its lease to kill its attempts.
    pub fn check(&self) -> Result<(), Error> {
        let (interval, timeout, lease) = (self.heartbeat_interval_ms, self.heartbeat_timeout_ms, self.lease_ms);
        let share = self.eviction.max_lost_share;
        if !(share > 0.0 && share <= 1.0) {
            return Err(Error::Timing(format!(
                "--max-lost-share {share} is not in (0, 1]: the share of workers that may be declared lost at once \
                 (1: evictions never halt)"
            )));
        }
        if interval == 0 {
            return Err(Error::Timing("the heartbeat interval must be at least 1 ms".into()));
        }
        if lease < interval.saturating_mul(2) {
            return Err(Error::Timing(format!(
                "the worker lease ({lease} ms) must be at least two heartbeat intervals ({interval} ms each), \
                 or one late heartbeat makes a worker kill its attempts"
            )));
        }
        if timeout < lease.saturating_add(MIN_FENCE_MARGIN_MS) {
            return Err(Error::Timing(format!(
                "the heartbeat timeout ({timeout} ms) must be at least the worker lease ({lease} ms) plus \
                 {MIN_FENCE_MARGIN_MS} ms, so that a worker that lost its lease has killed its attempts before \
                 they are placed again (raise --heartbeat-timeout-ms or lower --worker-lease-ms)"
            )));
        }
        Ok(())
    }
}

/// Events the core counts since it started (the coordinator's `/metrics` exports them).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Counters {
    /// Members reserved for gangs.
    pub gang_reservations: u64,
    /// Gangs bound (their `min_members` reserved and dispatched together).
    pub gangs_bound: u64,
    /// Gangs rolled back, for any reason.
    pub gang_rollbacks: u64,
    /// Of those, at their deadline.
    pub gang_timeouts: u64,
    /// Tries to place one subtask through the placer (each judges every worker once, and ends
    /// in a decision or in finding no room): the work a scheduling round does.
    pub placement_tries: u64,
    /// Times evictions halted because too many workers fell silent at once.
    pub eviction_halts: u64,
    /// Copies of objects found not to match their digest (by a worker fetching an input, or the
    /// coordinator relaying a download).
    pub digest_mismatches: u64,
}

#[cfg(test)]
mod tests {
    use super::*;

    fn timing(interval: u64, timeout: u64, lease: u64) -> CoreConfig {
        CoreConfig {
            heartbeat_interval_ms: interval,
            heartbeat_timeout_ms: timeout,
            lease_ms: lease,
            ..Default::default()
        }
    }

    #[test]
    fn the_default_timing_keeps_the_lease_contract() {
        let c = CoreConfig::default();
        c.check().unwrap();
        assert!(c.heartbeat_timeout_ms >= c.lease_ms + MIN_FENCE_MARGIN_MS);
        // A timeout alone gets a lease that keeps the contract, down to small test timings.
        for timeout in [1_500, 2_000, 3_000, 10_000, 60_000] {
            timing(100, timeout, CoreConfig::default_lease_ms(timeout)).check().unwrap();
        }
    }

    #[test]
    fn a_lease_without_its_margin_is_refused() {
        let e = timing(500, 3_000, 2_600).check().unwrap_err().to_string();
        assert!(e.contains("heartbeat timeout (3000 ms)") && e.contains("lease (2600 ms)"), "{e}");
        timing(500, 3_000, 2_500).check().unwrap();
        // The lease may not equal the timeout either.
        assert!(timing(500, 3_000, 3_000).check().is_err());
    }

    #[test]
    fn a_lease_shorter_than_two_heartbeats_is_refused() {
        let e = timing(500, 3_000, 900).check().unwrap_err().to_string();
        assert!(e.contains("two heartbeat intervals"), "{e}");
        timing(500, 3_000, 1_000).check().unwrap();
        assert!(timing(0, 3_000, 1_000).check().is_err());
    }
}
