//! Waiting for a state instead of sleeping for it: a test that needs "the rail is back" or "the
//! watch has noticed" polls that condition until it holds, and fails naming it when it has not
//! held within a limit. The limit is a guard against a hang, never a measurement: a fast machine
//! goes on as soon as the state is there, a slow one waits longer instead of failing.
//!
//! Included by path (`#[path = ".../e2e/tests/support/wait.rs"] mod wait;`) in the test crates
//! that wait, so they share it without a dependency between those crates.

// Each including test crate uses only the forms it needs.
#![allow(dead_code)]

use std::time::{Duration, Instant};

/// How often a condition is polled: short against the limits (seconds), long enough that the
/// polling costs nothing beside the processes under test.
const POLL: Duration = Duration::from_millis(20);

/// Polls `cond` until it gives `Some`, and returns that; panics naming `what` if it has not
/// within `limit`. For threads that may block (plain `#[test]`s).
pub fn until<T>(what: &str, limit: Duration, cond: impl FnMut() -> Option<T>) -> T {
    within(limit, cond).unwrap_or_else(|| panic!("waited {limit:?} for {what}, in vain"))
}

/// [`until`] for a caller that reports the failure itself (with a log, after cleaning up):
/// `None` if `cond` has not given `Some` within `limit`.
pub fn within<T>(limit: Duration, mut cond: impl FnMut() -> Option<T>) -> Option<T> {
    let deadline = Instant::now() + limit;
    loop {
        if let Some(v) = cond() {
            return Some(v);
        }
        if Instant::now() >= deadline {
            return None;
        }
        std::thread::sleep(POLL);
    }
}

/// [`until`] for async tests: `cond` is awaited, and the wait between polls yields to the
/// runtime, so the tasks under test run meanwhile.
pub async fn until_async<T, F>(what: &str, limit: Duration, mut cond: impl FnMut() -> F) -> T
where
    F: std::future::Future<Output = Option<T>>,
{
    let deadline = Instant::now() + limit;
    loop {
        if let Some(v) = cond().await {
            return v;
        }
        assert!(Instant::now() < deadline, "waited {limit:?} for {what}, in vain");
        tokio::time::sleep(POLL).await;
    }
}
