//! Rail health: a connection that fails is closed and its unanswered segments are resent on
//! the other rails; its rail goes out of service towards that peer for a back-off (250 ms,
//! doubling to 4 s), and the segments for that peer waiting in the rail's queue move to the
//! other rails too. The watchdog closes connections whose segments have had no reply for
//! `rail_timeout` (TCP itself would take minutes to give up on a cut link).

use std::sync::Arc;
use std::sync::atomic::Ordering::Relaxed;
use std::time::{Duration, Instant};

use tracing::{debug, warn};

use super::conn::Conn;
use super::outgoing::Segment;
use super::state::{Inner, POLL};
use crate::error::Error;
use crate::peer_id::PeerId;

/// First back-off of a failed rail. Short, so a connection reset on a healthy link costs little.
const BACKOFF_FIRST: Duration = Duration::from_millis(250);
/// Longest back-off: a rail that stays cut is probed at most this often, and each probe delays
/// the segments queued on it by at most `connect_timeout`.
const BACKOFF_MAX: Duration = Duration::from_secs(4);

/// How often a receive that waits for a message from a particular peer checks that the peer is
/// still there (see [`Inner::peer_lost`]).
const PEER_CHECK: Duration = Duration::from_secs(1);

/// How a connection ended, which decides whether its rail goes out of service for the peer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Closing {
    /// It failed: an I/O or protocol error, a write that did not finish, no reply in time, or
    /// a resend superseded it. The rail goes out of service.
    Failed,
    /// The peer closed it cleanly at a frame boundary. The rail stays in service unless
    /// segments were in flight on it.
    ByPeer,
}

impl Inner {
    /// Closes a connection and sends its unanswered segments again on the other rails. The
    /// rail goes out of service for the peer unless the peer closed the connection cleanly
    /// with nothing in flight (see [`Closing`]).
    pub(super) fn fail_conn(self: &Arc<Self>, conn: &Arc<Conn>, why: String, how: Closing) {
        let Some(segs) = conn.close() else { return };
        let lost: u64 = segs.iter().map(|s| u64::from(s.len)).sum();
        self.in_flight[conn.rail].fetch_sub(lost, Relaxed);
        {
            let mut conns = self.conns.lock().expect("conns lock");
            if conns.get(&(conn.peer, conn.rail)).is_some_and(|c| c.id == conn.id) {
                conns.remove(&(conn.peer, conn.rail));
            }
        }
        self.live.lock().expect("live lock").remove(&conn.id);
        if how == Closing::Failed || !segs.is_empty() {
            warn!(peer = %conn.peer, rail = conn.rail, conn = conn.id, in_flight = segs.len(), reason = %why, "rail connection failed; resending on other rails");
            self.rail_down(conn.peer, conn.rail);
        } else {
            debug!(peer = %conn.peer, rail = conn.rail, reason = %why, "rail connection closed");
        }
        for seg in segs {
            self.reschedule(seg, Duration::ZERO);
        }
    }

    /// Takes `rail` out of service towards `peer` for a back-off, and sends the segments for
    /// that peer still waiting in the rail's queue to the other rails.
    pub(super) fn rail_down(self: &Arc<Self>, peer: PeerId, rail: usize) {
        self.counters.rails[rail].failures.fetch_add(1, Relaxed);
        let stranded: Vec<Arc<Segment>> = {
            let mut st = self.sched.lock().expect("sched lock");
            let m = st.queues.len();
            let h = &mut st.health(peer, m)[rail];
            h.failures += 1;
            let backoff = BACKOFF_FIRST.saturating_mul(1 << (h.failures - 1).min(8)).min(BACKOFF_MAX);
            h.down_until = Some(Instant::now() + backoff);
            let q = std::mem::take(&mut st.queues[rail]);
            let (gone, keep): (Vec<_>, Vec<_>) = q.into_iter().partition(|q| q.seg.msg.peer == peer);
            st.queues[rail] = keep.into();
            gone.into_iter().map(|q| q.seg).collect()
        };
        // Senders waiting for room on this rail re-pick (they see it down).
        self.rail_space[rail].notify_waiters();
        for seg in stranded {
            self.reschedule(seg, Duration::ZERO);
        }
    }

    /// Closes connections that have had segments unanswered for `rail_timeout`.
    pub(super) async fn watchdog(self: Arc<Self>) {
        loop {
            tokio::select! {
                _ = tokio::time::sleep(POLL) => {}
                _ = self.cancel.cancelled() => return,
            }
            let conns: Vec<Arc<Conn>> = self.live.lock().expect("live lock").values().cloned().collect();
            for c in conns {
                if let Some(silent) = c.silent_for()
                    && silent >= self.cfg.rail_timeout
                {
                    self.fail_conn(&c, format!("no reply for {:.1} s", silent.as_secs_f64()), Closing::Failed);
                }
            }
        }
    }

    /// Resolves, with the error to report, once `peer` has looked gone for `stall_timeout`: at
    /// every check since then, no live connection to or from it on any rail, and a new
    /// connection to its rail-0 address refused or timed out. A receive from `peer` races this
    /// (see [`Endpoint::recv`](super::Endpoint::recv)), so a member of a collective whose peer
    /// vanished fails within the stall timeout instead of waiting for ever. A live connection
    /// to a process that died is closed by the peer's kernel; one over a cut link by TCP
    /// keepalive (see `connect`), so neither looks live for long.
    pub(super) async fn peer_lost(self: &Arc<Self>, peer: PeerId) -> Error {
        let mut gone_since: Option<Instant> = None;
        loop {
            tokio::select! {
                _ = tokio::time::sleep(PEER_CHECK) => {}
                _ = self.cancel.cancelled() => return Error::Shutdown,
            }
            let live = self.live.lock().expect("live lock").values().any(|c| c.peer == peer && !c.dead.is_cancelled());
            let present = live
                || match self.connection(peer, 0, &[peer.0]).await {
                    Ok(_) => true,
                    Err(e) => !unreachable(&e),
                };
            if present {
                gone_since = None;
                continue;
            }
            let since = *gone_since.get_or_insert_with(Instant::now);
            if since.elapsed() >= self.cfg.stall_timeout {
                return Error::PeerGone { peer, secs: since.elapsed().as_secs_f64() };
            }
        }
    }
}

/// Whether a failure to connect says the peer is not there (refused, unreachable, timed out),
/// rather than that it is there and refused us (a handshake failure, no key yet).
fn unreachable(e: &Error) -> bool {
    match e {
        Error::Io(_) => true,
        Error::Peer(m) => m.starts_with("connecting rail"),
        _ => false,
    }
}
