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
}

impl Lease {
    /// A lease not granted yet: expired until the first registration renews it.
    pub fn new() -> Lease {
        Lease { end: watch::Sender::new(0) }
    }

    /// No lease: attempts run until they end (tests of the runner, without a coordinator).
    pub fn unlimited() -> Lease {
        Lease { end: watch::Sender::new(UNLIMITED) }
    }

    /// The coordinator acknowledged a request sent at `sent_at` (boot-clock ms), and it grants
    /// `length`: the lease runs to `sent_at + length`, unless it already runs longer.
    pub fn renew(&self, sent_at: u64, length: Duration) {
        let end = sent_at.saturating_add(u64::try_from(length.as_millis()).unwrap_or(u64::MAX));
        self.end.send_if_modified(|e| {
            if end > *e && *e != UNLIMITED {
                *e = end;
                true
            } else {
                false
            }
        });
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
    fn the_boot_clock_moves_forward() {
        let a = boot_ms();
        std::thread::sleep(Duration::from_millis(5));
        assert!(boot_ms() >= a + 5);
    }
}
