//! One TCP connection of one rail to one peer ([`Conn`]), as the endpoint's tasks share it: the
//! channels to its writer, the segments written on it and not yet answered, and the token that
//! says it is dead. Closing it hands back what was in flight, exactly once.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use tokio::sync::{mpsc, oneshot};
use tokio_util::sync::CancellationToken;

use super::outgoing::Segment;
use crate::peer_id::PeerId;
use crate::wire::Reply;

/// One TCP connection of one rail to one peer, used in both directions.
pub(super) struct Conn {
    pub(super) id: u64,
    pub(super) peer: PeerId,
    pub(super) rail: usize,
    pub(super) replies: mpsc::UnboundedSender<Reply>,
    pub(super) segs: mpsc::Sender<(Arc<Segment>, oneshot::Sender<()>)>,
    inflight: Mutex<Inflight>,
    pub(super) dead: CancellationToken,
}

/// Segments written on a connection and not yet answered.
struct Inflight {
    closed: bool,
    map: HashMap<(u64, u64), (Arc<Segment>, Duration)>,
    last_progress: Instant,
}

impl Conn {
    /// A connection with nothing in flight yet. `replies` and `segs` feed its writer task;
    /// `dead` is cancelled when it closes.
    pub(super) fn new(
        id: u64,
        peer: PeerId,
        rail: usize,
        replies: mpsc::UnboundedSender<Reply>,
        segs: mpsc::Sender<(Arc<Segment>, oneshot::Sender<()>)>,
        dead: CancellationToken,
    ) -> Conn {
        Conn {
            id,
            peer,
            rail,
            replies,
            segs,
            inflight: Mutex::new(Inflight { closed: false, map: HashMap::new(), last_progress: Instant::now() }),
            dead,
        }
    }

    /// Records a segment about to be written; false if the connection is already closed.
    pub(super) fn track(&self, seg: Arc<Segment>, sent_at: Duration) -> bool {
        let mut f = self.inflight.lock().expect("inflight lock");
        if f.closed {
            return false;
        }
        if f.map.is_empty() {
            f.last_progress = Instant::now();
        }
        f.map.insert((seg.msg.msg_id, seg.offset), (seg, sent_at));
        true
    }

    pub(super) fn untrack(&self, msg_id: u64, offset: u64) -> Option<(Arc<Segment>, Duration)> {
        let mut f = self.inflight.lock().expect("inflight lock");
        f.last_progress = Instant::now();
        f.map.remove(&(msg_id, offset))
    }

    pub(super) fn silent_for(&self) -> Option<Duration> {
        let f = self.inflight.lock().expect("inflight lock");
        (!f.closed && !f.map.is_empty()).then(|| f.last_progress.elapsed())
    }

    /// Closes the connection once; returns the segments that were in flight on it.
    pub(super) fn close(&self) -> Option<Vec<Arc<Segment>>> {
        let mut f = self.inflight.lock().expect("inflight lock");
        if f.closed {
            return None;
        }
        f.closed = true;
        self.dead.cancel();
        Some(f.map.drain().map(|(_, (s, _))| s).collect())
    }

    /// Hands a segment to the writer and waits until the socket took all of it.
    pub(super) async fn transmit(&self, seg: Arc<Segment>) -> bool {
        let (tx, rx) = oneshot::channel();
        if self.segs.send((seg, tx)).await.is_err() {
            return false;
        }
        tokio::select! {
            r = rx => r.is_ok(),
            _ = self.dead.cancelled() => false,
        }
    }
}
