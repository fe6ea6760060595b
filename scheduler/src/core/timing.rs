//! Heartbeat timing that grows with the cluster (issue 35).
//!
//! Every worker heartbeats at the interval the coordinator gives it, and the coordinator answers
//! each heartbeat on its one engine thread. At 5,000 workers and the default 500 ms that is
//! 10,000 heartbeats a second, which the engine serves at the expense of placing work. As Nomad
//! stretches its heartbeat TTL so that the servers see at most `max_heartbeats_per_second`, the
//! coordinator stretches its timing — interval, lease and timeout together, by one factor — so
//! that the alive workers send at most [`CoreConfig::max_heartbeats_per_sec`] heartbeats a
//! second. Below that (1,000 workers at the defaults) the configured timing holds unchanged.
//!
//! The factor moves in steps of 1.5× ([`STEP`]): up as soon as the alive workers would exceed the
//! budget, down one step once they would stay under three quarters of it at the lower step, so
//! a cluster at the edge does not flap. Each step keeps the configured ratios, so the liveness
//! contract ([`CoreConfig::check`]) holds at every step: the lease is at least two intervals and
//! the timeout at least the lease plus [`MIN_FENCE_MARGIN_MS`].
//!
//! Workers learn the timing from their `RegisterResponse` and from every `HeartbeatResponse`.
//! The coordinator never declares a worker process lost sooner than the longest timeout it has
//! told that process (`WorkerRecord::timeout_ms`, stored whenever it grows, so a new leader
//! waits as long): a worker told a shorter lease when the cluster shrinks may still hold the
//! longer one it was granted before.

use super::config::{CoreConfig, MIN_FENCE_MARGIN_MS};

/// The factor between successive steps of the timing.
pub const STEP: f64 = 1.5;

/// The highest step: 1.5^8 ≈ 25.6 times the configured timing (12.8 s heartbeats at the default
/// 500 ms), which keeps 25,000 workers within the default budget.
pub const MAX_LEVEL: u32 = 8;

/// The share of the budget the workers must stay under at the lower step before the timing
/// shortens again.
const SHORTEN_BELOW: f64 = 0.75;

/// The timing told to workers: how often to heartbeat, how long a heartbeat's answer renews the
/// lease, and how long the coordinator waits for a heartbeat before declaring the worker lost.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct HeartbeatTiming {
    pub heartbeat_interval_ms: u64,
    pub heartbeat_timeout_ms: u64,
    pub lease_ms: u64,
}

impl HeartbeatTiming {
    /// The configured timing stretched to step `level`.
    pub fn at(config: &CoreConfig, level: u32) -> HeartbeatTiming {
        let f = STEP.powi(level.min(MAX_LEVEL) as i32);
        let scale = |ms: u64| (ms as f64 * f).round() as u64;
        let interval = scale(config.heartbeat_interval_ms).max(1);
        // Rounding may not undo the contract the configured timing keeps.
        let lease = scale(config.lease_ms).max(interval.saturating_mul(2));
        let timeout = scale(config.heartbeat_timeout_ms).max(lease.saturating_add(MIN_FENCE_MARGIN_MS));
        HeartbeatTiming { heartbeat_interval_ms: interval, heartbeat_timeout_ms: timeout, lease_ms: lease }
    }

    /// Heartbeats a second that `workers` send at this timing.
    pub fn rate(&self, workers: usize) -> f64 {
        workers as f64 * 1000.0 / self.heartbeat_interval_ms as f64
    }
}

/// The step the timing is at now, and the timing it gives.
#[derive(Clone, Copy, Debug)]
pub struct TimingScale {
    level: u32,
    current: HeartbeatTiming,
}

impl TimingScale {
    /// The configured timing (step 0).
    pub fn new(config: &CoreConfig) -> TimingScale {
        TimingScale { level: 0, current: HeartbeatTiming::at(config, 0) }
    }

    /// The timing workers are told now.
    pub fn current(&self) -> HeartbeatTiming {
        self.current
    }

    /// The step (0: the configured timing; each step is 1.5× longer).
    pub fn level(&self) -> u32 {
        self.level
    }

    /// Moves to the step that keeps `alive` workers within the budget: up as far as needed at
    /// once, down one step when the lower one would keep them under three quarters of it.
    /// Returns whether the timing changed.
    pub fn rescale(&mut self, config: &CoreConfig, alive: usize) -> bool {
        let budget = config.max_heartbeats_per_sec as f64;
        let before = self.level;
        if budget <= 0.0 {
            self.level = 0;
        } else {
            while self.level < MAX_LEVEL && HeartbeatTiming::at(config, self.level).rate(alive) > budget {
                self.level += 1;
            }
            if self.level > 0 && HeartbeatTiming::at(config, self.level - 1).rate(alive) <= SHORTEN_BELOW * budget {
                self.level -= 1;
            }
        }
        self.current = HeartbeatTiming::at(config, self.level);
        self.level != before
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config(budget: u64) -> CoreConfig {
        CoreConfig { max_heartbeats_per_sec: budget, ..CoreConfig::default() }
    }

    #[test]
    fn the_configured_timing_holds_until_the_budget_is_reached() {
        let c = config(2_000);
        let mut s = TimingScale::new(&c);
        // 1,000 workers at 500 ms: exactly the budget.
        assert!(!s.rescale(&c, 1_000));
        assert_eq!(
            s.current(),
            HeartbeatTiming { heartbeat_interval_ms: 500, heartbeat_timeout_ms: 3_000, lease_ms: 2_000 }
        );
        assert!(s.rescale(&c, 1_001));
        assert_eq!(s.level(), 1);
        assert_eq!(
            s.current(),
            HeartbeatTiming { heartbeat_interval_ms: 750, heartbeat_timeout_ms: 4_500, lease_ms: 3_000 }
        );
    }

    #[test]
    fn a_storm_moves_up_at_once_and_the_budget_is_kept_at_every_size() {
        let c = config(2_000);
        for n in [1, 10, 500, 1_500, 2_000, 5_000, 10_000, 20_000] {
            let mut s = TimingScale::new(&c);
            s.rescale(&c, n);
            let t = s.current();
            assert!(t.rate(n) <= 2_000.0, "{n} workers send {} heartbeats/s at {t:?}", t.rate(n));
            // The liveness contract holds at every step.
            let stretched = CoreConfig {
                heartbeat_interval_ms: t.heartbeat_interval_ms,
                heartbeat_timeout_ms: t.heartbeat_timeout_ms,
                lease_ms: t.lease_ms,
                ..c.clone()
            };
            stretched.check().unwrap();
            // No longer than needed: one step shorter would exceed the budget.
            if s.level() > 0 {
                assert!(HeartbeatTiming::at(&c, s.level() - 1).rate(n) > 2_000.0);
            }
        }
        let mut s = TimingScale::new(&c);
        s.rescale(&c, 5_000);
        // 5,000 workers: 1.5^4 ≈ 5.06, 2,531 ms heartbeats, about 1,975 a second.
        assert_eq!(s.level(), 4);
        assert_eq!(s.current().heartbeat_interval_ms, 2_531);
    }

    #[test]
    fn a_shrinking_cluster_shortens_one_step_at_a_time_without_flapping() {
        let c = config(2_000);
        let mut s = TimingScale::new(&c);
        s.rescale(&c, 5_000);
        assert_eq!(s.level(), 4);
        // Just under the budget at step 3 (3,375 × 1.5 = 5,062 workers would fill it), but not
        // under three quarters of it: it stays.
        assert!(!s.rescale(&c, 4_000));
        assert_eq!(s.level(), 4);
        // Under three quarters: one step down per call.
        assert!(s.rescale(&c, 100));
        assert_eq!(s.level(), 3);
        for _ in 0..3 {
            s.rescale(&c, 100);
        }
        assert_eq!(s.level(), 0);
        assert_eq!(s.current(), HeartbeatTiming::at(&c, 0));
    }

    #[test]
    fn a_zero_budget_keeps_the_configured_timing_and_the_scale_is_bounded() {
        let c = config(0);
        let mut s = TimingScale::new(&c);
        assert!(!s.rescale(&c, 1_000_000));
        assert_eq!(s.level(), 0);
        // A budget of one heartbeat a second for a million workers stops at the highest step.
        let c = config(1);
        s.rescale(&c, 1_000_000);
        assert_eq!(s.level(), MAX_LEVEL);
        let t = s.current();
        assert!(t.heartbeat_interval_ms < 13_000 && t.heartbeat_timeout_ms < 80_000, "{t:?}");
    }
}
