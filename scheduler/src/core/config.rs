//! How the core is configured, and what it counts for metrics.

use crate::gpu::topology::MscCosts;

/// Timing of the worker protocol.
#[derive(Clone, Debug)]
pub struct CoreConfig {
    pub heartbeat_interval_ms: u64,
    pub heartbeat_timeout_ms: u64,
    /// The GPU topology's model-synchronisation costs, for GPU gangs (issue 16).
    pub msc: MscCosts,
}

impl Default for CoreConfig {
    fn default() -> Self {
        // Heartbeats twice a second keep node state fresh for placement at negligible cost;
        // six missed beats (3 s) declare a worker lost: long enough to ride out a stalled
        // process on a busy 2-core machine, short enough that a dead node's work restarts soon.
        CoreConfig { heartbeat_interval_ms: 500, heartbeat_timeout_ms: 3_000, msc: Default::default() }
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
    /// Copies of objects found not to match their digest (by a worker fetching an input, or the
    /// coordinator relaying a download).
    pub digest_mismatches: u64,
}
