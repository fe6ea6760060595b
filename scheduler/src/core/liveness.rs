//! Liveness (issue 29): which silent workers are declared lost, when evictions halt instead, and
//! the fresh grace period every worker gets after the coordinator itself stalled.
//!
//! A worker silent for longer than its heartbeat timeout (`heartbeat_timeout_ms`, or the longer
//! one its session was told as the cluster grew: `timing.rs`) is declared lost and its attempts are
//! placed again. But when many workers fall silent at once, the likelier cause is on the
//! coordinator's side (its network, its host), not that many nodes died together; re-placing
//! their work would restart the cluster's work for nothing. So, as Kubernetes' node lifecycle
//! controller stops evicting when a zone is fully disrupted (`--unhealthy-zone-threshold`, which
//! needs at least 3 nodes), when more than `max_lost_share` of the alive workers are silent at
//! once in a cluster of at least `min_workers`, none of them is declared lost: evictions halt,
//! nothing new is placed on the silent ones, and it is logged, counted and shown. They resume by
//! themselves when enough of the silent workers heartbeat again (then the rest, if still silent,
//! are lost) — or when the operator raises the share.
//!
//! The decision is [`may_evict`](super::eviction::may_evict), a pure function of counts (in
//! `eviction.rs`, with its types); the core applies it in
//! [`Core::tick`] with the `now` it is given. The coordinator's engine notices its own stalls
//! (it holds the clocks) and calls [`Core::grace`].

use plexus_proto::WorkerId;

use super::eviction::{EvictionHalt, may_evict};
use super::records::WorkerRecord;
use super::state::Core;

impl Core {
    /// Declares lost the workers silent past the heartbeat timeout, unless too many are silent
    /// at once (then evictions halt until they are not). Workers that fall silent together do
    /// not pass the timeout in the same round (their last heartbeats were up to an interval
    /// apart), so the share counts every worker silent for over half the timeout: otherwise the
    /// first would be lost alone, and the cluster be too small to halt by the time of the next.
    pub(super) fn evict_silent(&mut self, now: u64) {
        let mut alive = 0;
        let mut unresponsive = 0;
        let mut silent: Vec<WorkerId> = Vec::new();
        for w in self.workers.values().filter(|w| w.record().alive) {
            alive += 1;
            let timeout = self.timeout_of(w.record());
            let quiet = now.saturating_sub(w.record().last_heartbeat);
            if quiet > timeout / 2 {
                unresponsive += 1;
            }
            if quiet > timeout {
                silent.push(w.id());
            }
        }
        if self.timing.rescale(&self.config, alive) {
            let t = self.timing.current();
            tracing::info!(
                alive,
                step = self.timing.level(),
                interval_ms = t.heartbeat_interval_ms,
                lease_ms = t.lease_ms,
                timeout_ms = t.heartbeat_timeout_ms,
                max_heartbeats_per_sec = self.config.max_heartbeats_per_sec,
                "heartbeat timing changed with the cluster's size; workers learn it from their next heartbeat"
            );
        }
        if silent.is_empty() || may_evict(&self.config.eviction, alive, unresponsive) {
            if let Some(h) = self.halt.take() {
                tracing::warn!(
                    silent = silent.len(),
                    alive,
                    halted_ms = now.saturating_sub(h.since),
                    "evictions resume: the silent workers are within the allowed share again"
                );
            }
            for id in silent {
                self.lose_worker(id, now);
            }
            return;
        }
        let since = match self.halt {
            Some(h) => h.since,
            None => {
                self.counters.eviction_halts += 1;
                tracing::warn!(
                    silent = unresponsive,
                    alive,
                    max_lost_share = self.config.eviction.max_lost_share,
                    "evictions halted: {unresponsive} of {alive} workers missed their heartbeats at once, more than \
                     the allowed share; none is declared lost (a fault on the coordinator's side is likelier) until \
                     they heartbeat again or --max-lost-share is raised"
                );
                now
            }
        };
        self.halt = Some(EvictionHalt { since, silent: unresponsive, alive });
    }

    /// Whether a worker has been silent past its heartbeat timeout at `now` (while evictions are
    /// halted such a worker is alive, but nothing new is placed on it).
    pub(super) fn is_silent(&self, worker: &WorkerRecord, now: u64) -> bool {
        now.saturating_sub(worker.last_heartbeat) > self.timeout_of(worker)
    }

    /// How long the coordinator waits for a heartbeat of this worker before declaring it lost:
    /// the configured timeout, or the longest its session was told if that is longer.
    pub(super) fn timeout_of(&self, worker: &WorkerRecord) -> u64 {
        worker.timeout_ms.max(self.config.heartbeat_timeout_ms)
    }

    /// Gives every alive worker a fresh heartbeat timeout from `now`: the coordinator did not
    /// listen for a while (its process stalled), so their silence says nothing about them.
    /// Returns how many workers it applied to.
    pub fn grace(&mut self, now: u64) -> usize {
        self.workers.grace(now)
    }

    /// Whether, since when and why evictions are halted now.
    pub fn eviction_halt(&self) -> Option<EvictionHalt> {
        self.halt
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::core::eviction::EvictionGuard;
    use crate::core::tests::{assigned, core, reg, submit, wid};
    use crate::core::{CoreConfig, NodeReport};
    use plexus_proto::SubtaskState;

    const SLEEPERS: &str = "[[task]]\nname = \"a\"\ncommand = [\"sleep\", \"60\"]\nreplicas = 3\n";

    #[test]
    fn the_decision_halts_only_past_the_share_in_a_large_enough_cluster() {
        let g = EvictionGuard { max_lost_share: 0.5, min_workers: 3 };
        assert!(may_evict(&g, 3, 0));
        assert!(may_evict(&g, 3, 1), "one of three is a third");
        assert!(!may_evict(&g, 3, 2), "two of three is more than half");
        assert!(!may_evict(&g, 3, 3));
        assert!(may_evict(&g, 4, 2), "half is not more than half");
        assert!(!may_evict(&g, 4, 3));
        assert!(may_evict(&g, 2, 2), "a cluster of two is too small to tell");
        assert!(may_evict(&g, 1, 1));
        let never = EvictionGuard { max_lost_share: 1.0, min_workers: 3 };
        assert!(may_evict(&never, 10, 10));
    }

    /// Three workers each running a sleeper; all but `beating` fall silent past the timeout.
    fn three_running(beating: &[u8]) -> (Core, u64) {
        let mut c = core();
        for n in 1..=3 {
            c.register(reg(n, &format!("s{n}"), 1, vec![]), 0);
        }
        submit(&mut c, SLEEPERS, 0);
        c.schedule(1);
        assert_eq!(assigned(&mut c).len(), 3);
        let t = CoreConfig::default().heartbeat_timeout_ms + 1;
        for &n in beating {
            assert!(c.heartbeat(wid(n), &format!("s{n}"), NodeReport::default(), t));
        }
        c.tick(t);
        (c, t)
    }

    #[test]
    fn two_of_three_silent_at_once_halt_evictions_until_they_beat_again() {
        let (mut c, t) = three_running(&[1]);
        let halt = c.eviction_halt().expect("evictions halted");
        assert_eq!((halt.since, halt.silent, halt.alive), (t, 2, 3));
        assert!(c.workers().all(|w| w.record().alive), "nobody declared lost");
        assert_eq!(c.counters().eviction_halts, 1);
        assert!(c.jobs().next().unwrap().subtasks.iter().all(|s| s.attempt == 1 && s.state != SubtaskState::Ready));
        // Still halted later; counted once.
        assert!(c.heartbeat(wid(1), "s1", NodeReport::default(), t + 1_000));
        c.tick(t + 1_000);
        assert_eq!(c.eviction_halt().map(|h| h.since), Some(t));
        assert_eq!(c.counters().eviction_halts, 1);
        // Worker 2 beats again: one of three silent is within the share, so worker 3 is lost now.
        assert!(c.heartbeat(wid(1), "s1", NodeReport::default(), t + 2_000));
        assert!(c.heartbeat(wid(2), "s2", NodeReport::default(), t + 2_000));
        c.tick(t + 2_000);
        assert_eq!(c.eviction_halt(), None, "evictions resumed");
        assert!(!c.worker(wid(3)).unwrap().record().alive);
        assert!(c.worker(wid(2)).unwrap().record().alive);
    }

    #[test]
    fn workers_that_fall_silent_a_moment_apart_count_together() {
        let mut c = core();
        for n in 1..=3 {
            c.register(reg(n, &format!("s{n}"), 1, vec![]), 0);
        }
        assert!(c.heartbeat(wid(3), "s3", NodeReport::default(), 400));
        let t = CoreConfig::default().heartbeat_timeout_ms + 1;
        for now in [t, t + 100, t + 400] {
            assert!(c.heartbeat(wid(1), "s1", NodeReport::default(), now));
            c.tick(now);
            assert!(c.workers().all(|w| w.record().alive), "at {now}");
        }
        assert_eq!(c.eviction_halt().map(|h| (h.since, h.silent, h.alive)), Some((t, 2, 3)));
    }

    #[test]
    fn one_of_three_silent_is_lost_as_before() {
        let (c, _) = three_running(&[1, 2]);
        assert_eq!(c.eviction_halt(), None);
        assert!(!c.worker(wid(3)).unwrap().record().alive);
        assert_eq!(c.counters().eviction_halts, 0);
    }

    #[test]
    fn nothing_new_is_placed_on_a_silent_worker_while_evictions_halt() {
        let (mut c, t) = three_running(&[1]);
        assert!(c.eviction_halt().is_some());
        submit(&mut c, "[[task]]\nname = \"b\"\ncommand = [\"true\"]\ncpu = 0\nreplicas = 4\n", t);
        c.schedule(t + 1);
        let placed = assigned(&mut c);
        assert!(!placed.is_empty() && placed.iter().all(|(w, _)| *w == wid(1)), "{:?}", placed);
    }

    #[test]
    fn a_grace_period_after_a_stall_loses_nobody() {
        let mut c = core();
        for n in 1..=3 {
            c.register(reg(n, &format!("s{n}"), 1, vec![]), 0);
        }
        let t = 7_000; // the coordinator was stopped from 0 to 7 s: nobody was heard
        assert_eq!(c.grace(t), 3);
        c.tick(t);
        assert!(c.workers().all(|w| w.record().alive));
        assert_eq!(c.eviction_halt(), None);
        // A full timeout later, the silent ones are judged as usual.
        let later = t + CoreConfig::default().heartbeat_timeout_ms + 1;
        for n in 1..=2 {
            assert!(c.heartbeat(wid(n), &format!("s{n}"), NodeReport::default(), later));
        }
        c.tick(later);
        assert!(!c.worker(wid(3)).unwrap().record().alive);
    }
}
