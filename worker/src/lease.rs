//! The worker's lease with its coordinator, and the clock it is measured on.
//!
//! Every heartbeat (and `Register`) the coordinator acknowledges renews the lease: it then runs
//! until the moment the request was *sent* plus the lease's length. The coordinator saw that
//! request no earlier than it was sent, and it declares the worker lost (and places its attempts
//! again) only after the lease's length plus a margin without one, so an attempt that never runs
//! past the lease can never run beside its replacement. Two things hold attempts to it:
//!
//! - each attempt's supervisor ([`crate::shim`]) is told the lease's end and *freezes* the
//!   attempt when it passes without a renewal, even when the worker is stopped (`SIGSTOP`), and
//!   kills it when the worker dies; a later renewal thaws it;
//! - the worker itself ([`crate::session`]) renews (and so thaws) only when the coordinator
//!   acknowledges a heartbeat of this session, or answers a registration saying it still had
//!   this session alive (`RegisterResponse.resumed`): then nothing of it was placed elsewhere.
//!   Any other answer after a lapse (re-register, lost) kills the frozen attempts first.
//!   Attempts that run inside the worker (collectives) cannot be frozen: they are cancelled at
//!   the lease's end, and a command not started yet waits for a live lease.
//!
//! Times are milliseconds of `CLOCK_BOOTTIME`, which, unlike `CLOCK_MONOTONIC`, goes on while the
//! machine is suspended: a host that sleeps through its lease finds it expired when it wakes.
//! The worker and its supervisors share it, so a deadline is a plain number between them.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use tokio::sync::watch;

/// Milliseconds of `CLOCK_BOOTTIME` (time since boot, suspend included).
pub fn boot_ms() -> u64 {
    let mut ts = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: `ts` is a valid, writable timespec; CLOCK_BOOTTIME exists on every Linux since 2.6.39.
    let rc = unsafe { libc::clock_gettime(libc::CLOCK_BOOTTIME, &mut ts) };
    if rc != 0 {
        // Cannot happen with a valid clock id; a zero clock would make every lease look expired,
        // which fences (the safe side).
        return 0;
    }
    u64::try_from(ts.tv_sec).unwrap_or(0) * 1000 + u64::try_from(ts.tv_nsec).unwrap_or(0) / 1_000_000
}

/// The deadline that means "no lease": attempts run without one (a runner without a
/// coordinator, in tests).
pub const UNLIMITED: u64 = u64::MAX;

/// The lease: its length, and when it ends (boot-clock ms). Shared as `Arc<Lease>`.
#[derive(Debug)]
pub struct Lease {
    /// The end of the lease; 0 before the first registration ([`UNLIMITED`]: no lease at all).
    end: watch::Sender<u64>,
    /// How long an attempt may stay frozen after the lease's end before its supervisor kills it
    /// (ms; [`UNLIMITED`]: never), from the coordinator's timeout ([`frozen_limit`]).
    frozen_limit: AtomicU64,
    /// The lapses that ended (a renewal after the lease had run out), summed (ms).
    lapsed: AtomicU64,
}

impl Lease {
    /// A lease not granted yet: expired until the first registration renews it.
    pub fn new() -> Lease {
        Lease { end: watch::Sender::new(0), frozen_limit: AtomicU64::new(UNLIMITED), lapsed: AtomicU64::new(0) }
    }

    /// No lease: attempts run until they end (tests of the runner, without a coordinator).
    pub fn unlimited() -> Lease {
        Lease { end: watch::Sender::new(UNLIMITED), frozen_limit: AtomicU64::new(UNLIMITED), lapsed: AtomicU64::new(0) }
    }

    /// The coordinator acknowledged a request sent at `sent_at` (boot-clock ms), and it grants
    /// `length`: the lease runs to `sent_at + length`, unless it already runs longer.
    pub fn renew(&self, sent_at: u64, length: Duration) {
        let end = sent_at.saturating_add(u64::try_from(length.as_millis()).unwrap_or(u64::MAX));
        let now = boot_ms();
        self.end.send_if_modified(|e| {
            if end > *e && *e != UNLIMITED {
                // A renewal after a lapse ends it (the attempts thaw): the time frozen is kept.
                if *e != 0 && now > *e {
                    self.lapsed.fetch_add(now - *e, Ordering::Relaxed);
                }
                *e = end;
                true
            } else {
                false
            }
        });
    }

    /// How long the lease has been run out in all, up to boot-clock time `now` (ms): the lapses
    /// that ended and the one going on. The time the attempts spent frozen, which their task
    /// timeout does not count.
    pub fn lapsed_ms(&self, now: u64) -> u64 {
        let end = self.end();
        let current = if end == 0 || end == UNLIMITED { 0 } else { now.saturating_sub(end) };
        self.lapsed.load(Ordering::Relaxed).saturating_add(current)
    }

    /// Sets how long an attempt may stay frozen after the lease's end ([`frozen_limit`]).
    pub fn set_frozen_limit(&self, limit: Duration) {
        self.frozen_limit.store(u64::try_from(limit.as_millis()).unwrap_or(UNLIMITED), Ordering::Relaxed);
    }

    /// How long an attempt may stay frozen after the lease's end, in ms; `None`: for ever (no
    /// coordinator has stated its timeout yet, or there is no lease).
    pub fn frozen_limit_ms(&self) -> Option<u64> {
        Some(self.frozen_limit.load(Ordering::Relaxed)).filter(|&l| l != UNLIMITED)
    }

    /// When the lease ends (boot-clock ms; [`UNLIMITED`]: never).
    pub fn end(&self) -> u64 {
        *self.end.borrow()
    }

    /// Whether the lease has run out at boot-clock time `now`.
    pub fn expired_at(&self, now: u64) -> bool {
        now >= self.end()
    }

    /// Whether the lease has run out now.
    pub fn expired(&self) -> bool {
        self.expired_at(boot_ms())
    }

    /// Waits until the lease is live (not run out): at once when it is, else until a renewal.
    pub async fn live(&self) {
        let mut renewals = self.end.subscribe();
        while self.expired() {
            // The sender lives in `self`: `changed` cannot fail while we hold it.
            let _ = renewals.changed().await;
        }
    }

    /// A receiver that sees every renewal (the new end).
    pub fn subscribe(&self) -> watch::Receiver<u64> {
        self.end.subscribe()
    }
}

impl Default for Lease {
    fn default() -> Lease {
        Lease::new()
    }
}

/// How long the lease runs after each acknowledged heartbeat, from the registration reply:
/// the coordinator declares a worker lost after `heartbeat_timeout` without one, so the lease
/// ends well before that — a quarter of the timeout earlier, and at least two heartbeat
/// intervals — leaving the attempts' kill time to land before any replacement is placed.
pub fn length(heartbeat_timeout: Duration, interval: Duration) -> Duration {
    let margin = (heartbeat_timeout / 4).max(interval * 2);
    heartbeat_timeout.saturating_sub(margin).max(interval)
}

/// The least time an attempt stays frozen beyond the coordinator's timeout before its supervisor
/// kills it: a coordinator paused for less than this (a VM migration, a long GC) finds its
/// workers' attempts thawed, not killed, when it resumes (it notices its own stall and keeps them).
pub const FROZEN_GRACE: Duration = Duration::from_secs(30);

/// How long after the lease's end a frozen attempt is killed by its supervisor, when the worker
/// has still not heard from the coordinator: by then the coordinator's `heartbeat_timeout` has
/// passed (it runs from the last heartbeat it saw, sent no later than `lease_length` before the
/// lease's end), it gave the worker up and placed the attempt elsewhere, so thawing is no longer
/// possible — and a worker that never gets back would otherwise keep the frozen attempt (its
/// memory, its slot) for ever. The margin is the timeout again, and at least [`FROZEN_GRACE`].
pub fn frozen_limit(heartbeat_timeout: Duration, lease_length: Duration) -> Duration {
    heartbeat_timeout.saturating_sub(lease_length) + heartbeat_timeout.max(FROZEN_GRACE)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_lease_runs_from_the_send_time_and_never_shrinks() {
        let lease = Lease::new();
        assert!(lease.expired_at(0), "not granted yet");
        lease.renew(1_000, Duration::from_millis(2_000));
        assert_eq!(lease.end(), 3_000);
        assert!(!lease.expired_at(2_999) && lease.expired_at(3_000));
        // A late answer to an older request does not take the lease back.
        lease.renew(500, Duration::from_millis(2_000));
        assert_eq!(lease.end(), 3_000);
        let mut rx = lease.subscribe();
        lease.renew(1_500, Duration::from_millis(2_000));
        assert!(rx.has_changed().unwrap());
        assert_eq!(*rx.borrow_and_update(), 3_500);
        let unlimited = Lease::unlimited();
        unlimited.renew(1, Duration::from_millis(1));
        assert!(!unlimited.expired());
    }

    #[test]
    fn the_lease_ends_before_the_coordinator_gives_up() {
        let ms = Duration::from_millis;
        // The product defaults: 3 s timeout, 500 ms heartbeats.
        assert_eq!(length(ms(3_000), ms(500)), ms(2_000));
        assert_eq!(length(ms(10_000), ms(1_000)), ms(7_500));
        // An interval as long as the timeout still leaves a lease of one interval.
        assert_eq!(length(ms(1_000), ms(1_000)), ms(1_000));
    }

    #[test]
    fn a_frozen_attempt_outlives_the_coordinators_timeout_before_it_is_killed() {
        let ms = Duration::from_millis;
        // Killed 31 s after the lease's end with the defaults: 1 s until the coordinator's
        // timeout, then the grace.
        assert_eq!(frozen_limit(ms(3_000), ms(2_000)), ms(31_000));
        assert_eq!(frozen_limit(ms(60_000), ms(45_000)), ms(75_000));
        let lease = Lease::new();
        assert_eq!(lease.frozen_limit_ms(), None, "no limit before a coordinator stated its timeout");
        lease.set_frozen_limit(ms(31_000));
        assert_eq!(lease.frozen_limit_ms(), Some(31_000));
    }

    #[test]
    fn the_time_frozen_is_summed_over_lapses() {
        let lease = Lease::new();
        assert_eq!(lease.lapsed_ms(5_000), 0, "not granted yet is no lapse");
        let now = boot_ms();
        // Ran out 300 ms ago.
        lease.renew(now - 1_300, Duration::from_millis(1_000));
        let lapsed = lease.lapsed_ms(now);
        assert_eq!(lapsed, 300);
        // Renewed: that lapse is kept (at least 300 ms: the renewal read the clock later), and
        // no more accrues while the lease runs.
        lease.renew(boot_ms(), Duration::from_millis(60_000));
        let kept = lease.lapsed_ms(boot_ms());
        assert!((300..1_300).contains(&kept), "{kept}");
        assert_eq!(lease.lapsed_ms(boot_ms() + 1_000), kept);
        assert_eq!(Lease::unlimited().lapsed_ms(u64::MAX - 1), 0);
    }

    #[test]
    fn the_boot_clock_moves_forward() {
        let a = boot_ms();
        std::thread::sleep(Duration::from_millis(5));
        assert!(boot_ms() >= a + 5);
    }
}
