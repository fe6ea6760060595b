//! Where an exchange's messages land, and what it holds while it runs
//! ([`Exchanger`](super::Exchanger)): the receives it posted (withdrawn however it ends), its
//! spawned sends (aborted when it ends early), and the copy of a message that arrived before its
//! post into its place in the receive buffer.

use std::sync::Arc;

use bytes::BytesMut;
use tokio::task::JoinHandle;

use crate::endpoint::{Endpoint, Landed};
use crate::error::{Error, Result};
use crate::peer_id::PeerId;
use crate::shared_buf::SharedBuf;

/// Messages that arrived before their post and are at least this large are copied into place
/// on a blocking thread, so the runtime's workers stay free for the transport; smaller ones
/// cost less than the hand-over (~10 µs).
pub(super) const BLOCKING_MIN: usize = 64 << 10;
/// The receives an exchange posted and no message has claimed yet: withdrawn when the exchange
/// ends, however it ends (finished, failed, or its future dropped mid-way), since each holds the
/// receive buffer and a stale post would keep it alive as long as the endpoint lives.
pub(super) struct Posts<'a> {
    pub(super) endpoint: &'a Endpoint,
    pub(super) tag: u64,
    pub(super) pending: Vec<PeerId>,
}

impl Drop for Posts<'_> {
    fn drop(&mut self) {
        for p in self.pending.drain(..) {
            self.endpoint.unpost(p, self.tag);
        }
    }
}

/// Aborts a spawned task when the exchange ends early.
pub(super) struct Task<T>(pub(super) JoinHandle<T>);

impl<T> Drop for Task<T> {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// Awaits a spawned send.
pub(super) async fn join(mut t: Task<Result<()>>, what: &str) -> Result<()> {
    (&mut t.0).await.map_err(|e| Error::Peer(format!("{what} task: {e}")))?
}

/// Brings a delivered message into `buf[range]`: in place already, or (it arrived before its
/// post, in its own buffer) checked for length and copied there.
pub(super) async fn land(
    buf: &Arc<SharedBuf>,
    from: usize,
    range: std::ops::Range<usize>,
    landed: Landed,
) -> Result<()> {
    let msg: BytesMut = match landed {
        Landed::InPlace { .. } => return Ok(()),
        Landed::Fresh(msg) => msg,
    };
    if msg.len() != range.len() {
        return Err(Error::Protocol(format!(
            "rank {from} sent {} bytes, the table says {}: do all ranks pass the same table?",
            msg.len(),
            range.len()
        )));
    }
    let buf = buf.clone();
    let len = range.len();
    let copy = move || {
        // SAFETY: taking the message withdrew this range's post in the same step (see
        // `Endpoint::recv_landed`), so no message writes it, and nothing reads it before the
        // exchange ends.
        let dst = unsafe { buf.range_uninit(range.start, range.len()) };
        for (d, s) in dst.iter_mut().zip(msg.iter()) {
            d.write(*s);
        }
    };
    if len < BLOCKING_MIN {
        copy();
        return Ok(());
    }
    tokio::task::spawn_blocking(copy).await.map_err(|e| Error::Peer(format!("exchange copy task: {e}")))
}
