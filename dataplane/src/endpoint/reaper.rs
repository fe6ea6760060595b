//! The reaper: drops what peers left behind in the incoming side — half-received messages whose
//! sender went quiet, complete messages nobody takes — so their memory returns, and closes the
//! connections that sit inside such a message's payload without sending it.

use std::sync::Arc;
use std::sync::atomic::Ordering::Relaxed;
use std::time::{Duration, Instant};

use tracing::debug;

use super::conn::Conn;
use super::health::Closing;
use super::state::Inner;

/// The reaper looks at most this often: expiries are minutes by default, so once a second
/// costs nothing and a message outlives its expiry by at most a second (a quarter of it, with
/// the short expiries of tests).
const REAP_EVERY: Duration = Duration::from_secs(1);

impl Inner {
    /// Expires idle incoming messages every quarter of the shorter expiry (at most every
    /// `REAP_EVERY`) until the endpoint shuts down.
    pub(super) async fn reaper(self: Arc<Self>) {
        let every = (self.cfg.partial_expiry.min(self.cfg.unclaimed_expiry) / 4).min(REAP_EVERY);
        loop {
            tokio::select! {
                _ = tokio::time::sleep(every) => {}
                _ = self.cancel.cancelled() => return,
            }
            let e = self.incoming.expire(Instant::now());
            self.counters.expired_partial.fetch_add(e.partial, Relaxed);
            self.counters.expired_unclaimed.fetch_add(e.unclaimed, Relaxed);
            if e.partial + e.unclaimed > 0 {
                debug!(partial = e.partial, unclaimed = e.unclaimed, "expired incoming messages");
            }
            let stuck: Vec<Arc<Conn>> = {
                let live = self.live.lock().expect("live lock");
                e.stuck.iter().filter_map(|id| live.get(id).cloned()).collect()
            };
            for c in stuck {
                self.fail_conn(
                    &c,
                    format!("a segment on it made no progress for {:.1} s", self.cfg.partial_expiry.as_secs_f64()),
                    Closing::Failed,
                );
            }
        }
    }
}
