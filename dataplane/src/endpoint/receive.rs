//! The receive side of a connection: its reader takes frames off the socket. A segment is
//! admitted into the incoming reassembly (or a posted receive), its payload read straight into
//! the message buffer while it is checksummed piece by piece (or, for a posted reduction, read
//! into the connection's scratch buffer, verified, and reduced into place), and answered ok,
//! corrupt or busy. A segment the incoming side refuses (malformed, over its peer's open-bytes
//! cap, a second message under a posted tag) closes the connection, counted by reason. A
//! reply to one of our own segments acknowledges it, or sends it again.

use std::mem::MaybeUninit;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::Ordering::Relaxed;
use std::time::{Duration, Instant};

use tokio::io::{AsyncRead, AsyncReadExt, BufReader, ReadBuf};
use tokio::net::tcp::OwnedReadHalf;
use tracing::warn;

use super::conn::Conn;
use super::health::Closing;
use super::incoming::{Admission, Incoming, Refusal};
use super::state::{InboundSlot, Inner};
use crate::elem::reduce_from;
use crate::error::{Error, Result};
use crate::peer_id::PeerId;
use crate::wire::{Checksum, FrameKind, REPLY_BODY_LEN, Reply, ReplyStatus, SEGMENT_BODY_LEN, SegmentHeader};

/// A segment answered "busy" is retried after this long: enough for the racing original (a
/// segment being read on another rail) to finish on any rail faster than ~1 Gbit/s per 4 MiB.
/// A segment whose message's buffer must grow waits at most this long for the segments being
/// written into it to finish (they are the same racing reads), then is answered busy.
const BUSY_RETRY: Duration = Duration::from_millis(30);
/// Read buffer of a connection. Payloads at least this large bypass it and go straight from the
/// socket into the message buffer; headers and replies are parsed from it.
const READ_BUF: usize = 64 << 10;
/// A payload is read from the socket and checksummed in pieces of at most this many bytes, so
/// the checksum reads each piece from cache right after the kernel wrote it there.
const CHECK_PIECE: usize = 256 << 10;

impl Inner {
    /// Reads the connection until it closes. An accepted connection's `slot` counts it
    /// against its address's `max_conns_per_addr` until then.
    pub(super) async fn reader(self: Arc<Self>, conn: Arc<Conn>, rd: OwnedReadHalf, slot: Option<InboundSlot>) {
        let _slot = slot;
        let mut rd = BufReader::with_capacity(READ_BUF, rd);
        let mut scratch = Vec::new();
        let r = tokio::select! {
            r = self.read_loop(&conn, &mut rd, &mut scratch) => r,
            _ = conn.dead.cancelled() => return,
        };
        if let Err((e, how)) = r {
            self.fail_conn(&conn, e.to_string(), how);
        }
    }

    /// Reads frames until the connection fails. The error says how it ended: closed by the
    /// peer at a frame boundary, or failed (anything else).
    async fn read_loop(
        self: &Arc<Self>,
        conn: &Arc<Conn>,
        rd: &mut BufReader<OwnedReadHalf>,
        scratch: &mut Vec<u8>,
    ) -> Result<(), (Error, Closing)> {
        loop {
            let kind = match rd.read_u8().await {
                Ok(k) => k,
                Err(e) if e.kind() == std::io::ErrorKind::UnexpectedEof => {
                    return Err((Error::Protocol("connection closed by peer".into()), Closing::ByPeer));
                }
                Err(e) => return Err((e.into(), Closing::Failed)),
            };
            let hurt = |e: Error| (e, Closing::Failed);
            match FrameKind::from_byte(kind).map_err(hurt)? {
                FrameKind::Segment => {
                    let mut b = [0u8; SEGMENT_BODY_LEN];
                    rd.read_exact(&mut b).await.map_err(|e| hurt(e.into()))?;
                    let h = SegmentHeader::decode(&b).map_err(hurt)?;
                    self.receive_segment(conn, h, rd, scratch).await.map_err(hurt)?;
                }
                FrameKind::Reply => {
                    let mut b = [0u8; REPLY_BODY_LEN];
                    rd.read_exact(&mut b).await.map_err(|e| hurt(e.into()))?;
                    let r = Reply::decode(&b).map_err(hurt)?;
                    self.on_reply(conn, r);
                }
            }
        }
    }

    /// Receives one segment's payload (after its header) and answers it. `scratch` is the
    /// connection's buffer for segments that are reduced into posted memory: they are verified
    /// there first, so a corrupt payload never touches the receiver's data.
    async fn receive_segment(
        self: &Arc<Self>,
        conn: &Conn,
        h: SegmentHeader,
        rd: &mut BufReader<OwnedReadHalf>,
        scratch: &mut Vec<u8>,
    ) -> Result<()> {
        let len = u64::from(h.len);
        if h.total > self.cfg.max_message {
            return Err(Error::Protocol(format!(
                "message {} from {} is {} bytes, over max_message {}",
                h.msg_id, conn.peer, h.total, self.cfg.max_message
            )));
        }
        self.counters.rails[conn.rail].bytes_received.fetch_add(len, Relaxed);
        let status = match self.admit(conn, &h).await? {
            Admission::Fresh { buf, at, reduce } => {
                let mut guard = Reservation { incoming: &self.incoming, peer: conn.peer, h, armed: true };
                let n = h.len as usize;
                let mut took = Duration::ZERO;
                let ok = match reduce {
                    None => {
                        // SAFETY: `admit` reserved exactly this range for us (of a buffer of
                        // our own, or of posted memory nothing else touches meanwhile); the
                        // slice is dropped before the guard commits or aborts it.
                        let dst = unsafe { buf.range_uninit(at, n) };
                        read_checked(rd, dst).await? == h.crc
                    }
                    Some((dtype, op)) => {
                        if scratch.len() < n {
                            scratch.resize(n, 0);
                        }
                        // SAFETY: the scratch bytes are initialised, and reading only writes
                        // initialised bytes into them.
                        let dst = unsafe { &mut *(std::ptr::from_mut(&mut scratch[..n]) as *mut [MaybeUninit<u8>]) };
                        let ok = read_checked(rd, dst).await? == h.crc;
                        if ok {
                            let t = Instant::now();
                            // SAFETY: as above: this range of the posted memory is ours until
                            // the commit below.
                            let dst = unsafe { buf.range_mut(at, n) };
                            reduce_from(dtype, op, dst, &scratch[..n]);
                            took = t.elapsed();
                        }
                        ok
                    }
                };
                // Before the commit that may deliver the message: its receiver then finds
                // itself the buffer's only holder and takes it without waiting or copying.
                drop(buf);
                guard.armed = false;
                if ok {
                    self.incoming.commit(conn.peer, &h, took);
                    ReplyStatus::Ok
                } else {
                    self.incoming.abort(conn.peer, &h);
                    self.counters.corrupt_received.fetch_add(1, Relaxed);
                    warn!(peer = %conn.peer, rail = conn.rail, msg = h.msg_id, offset = h.offset, "segment failed its checksum; asking for it again");
                    ReplyStatus::Corrupt
                }
            }
            Admission::Duplicate => {
                skip(rd, len).await?;
                ReplyStatus::Ok
            }
            Admission::Later | Admission::Grow => {
                skip(rd, len).await?;
                ReplyStatus::Busy
            }
            Admission::Busy(holder) => {
                skip(rd, len).await?;
                // A sender resends a segment only after giving up on the copy it sent before
                // (its connection timed out or failed), so the connection still receiving that
                // copy is dead at the sender, though maybe not yet here (a cut link tells the
                // receiver nothing). Close it: that releases the range, and the retry after
                // the busy reply finds it free.
                let stale = self.live.lock().expect("live lock").get(&holder).cloned();
                if let Some(stale) = stale {
                    self.fail_conn(&stale, "superseded by a resend on another rail".into(), Closing::Failed);
                }
                ReplyStatus::Busy
            }
        };
        // The writer may be gone if the connection is closing; the sender then resends.
        let _ = conn.replies.send(Reply { msg_id: h.msg_id, offset: h.offset, status });
        Ok(())
    }

    /// Admits a segment into the incoming side. While its message's buffer must grow and other
    /// segments of the message are being written, waits for them up to `BUSY_RETRY`, then
    /// answers busy ([`Admission::Later`]). A refusal is counted by its reason and becomes the
    /// error that closes the connection.
    async fn admit(&self, conn: &Conn, h: &SegmentHeader) -> Result<Admission> {
        let deadline = Instant::now() + BUSY_RETRY;
        loop {
            let released = self.incoming.released().notified();
            tokio::pin!(released);
            released.as_mut().enable();
            match self.incoming.admit(conn.peer, conn.id, h, Instant::now()) {
                Ok(Admission::Grow) => {
                    let left = deadline.saturating_duration_since(Instant::now());
                    if left.is_zero() || tokio::time::timeout(left, released).await.is_err() {
                        return Ok(Admission::Later);
                    }
                }
                Ok(a) => return Ok(a),
                Err(refusal) => {
                    let counter = match &refusal {
                        Refusal::Malformed(_) => None,
                        Refusal::DuplicateTag(_) => Some(&self.counters.dropped_duplicate_tag),
                        Refusal::OverBudget(_) => Some(&self.counters.dropped_over_budget),
                    };
                    if let Some(c) = counter {
                        c.fetch_add(1, Relaxed);
                    }
                    return Err(Error::Protocol(refusal.to_string()));
                }
            }
        }
    }

    fn on_reply(self: &Arc<Self>, conn: &Conn, r: Reply) {
        // Unknown replies are for segments already given up on this connection: ignore them.
        let Some((seg, sent_at)) = conn.untrack(r.msg_id, r.offset) else {
            return;
        };
        self.in_flight[conn.rail].fetch_sub(u64::from(seg.len), Relaxed);
        match r.status {
            ReplyStatus::Ok => {
                {
                    let mut st = self.sched.lock().expect("sched lock");
                    st.sched.delivered(conn.rail, u64::from(seg.len), sent_at, self.now());
                    self.measure(&mut st, conn.rail, u64::from(seg.len), sent_at);
                    let m = st.queues.len();
                    st.health(conn.peer, m)[conn.rail].failures = 0;
                }
                if seg.msg.ack(seg.index) {
                    self.counters.bytes_acked.fetch_add(u64::from(seg.len), Relaxed);
                }
            }
            ReplyStatus::Corrupt => {
                let n = seg.corrupt_replies.fetch_add(1, Relaxed) + 1;
                if n >= self.cfg.max_attempts {
                    seg.msg.fail(Error::Corrupted {
                        peer: seg.msg.peer,
                        msg_id: seg.msg.msg_id,
                        offset: seg.offset,
                        attempts: n,
                    });
                } else {
                    self.reschedule(seg, Duration::ZERO);
                }
            }
            ReplyStatus::Busy => self.reschedule(seg, BUSY_RETRY),
        }
    }
}

/// Aborts a reserved range if the read into it did not finish (error or cancellation).
struct Reservation<'a> {
    incoming: &'a Incoming,
    peer: PeerId,
    h: SegmentHeader,
    armed: bool,
}

impl Drop for Reservation<'_> {
    fn drop(&mut self) {
        if self.armed {
            self.incoming.abort(self.peer, &self.h);
        }
    }
}

/// Fills `dst` from the socket, checksumming it piece by piece while each piece is in cache;
/// returns the CRC-32C of all of it. `dst` need not be initialised (a message buffer is
/// allocated without writing it): only bytes the socket wrote are read.
async fn read_checked<R: AsyncRead + Unpin>(rd: &mut R, dst: &mut [MaybeUninit<u8>]) -> std::io::Result<u32> {
    let mut crc = Checksum::new();
    for piece in dst.chunks_mut(CHECK_PIECE) {
        let mut buf = ReadBuf::uninit(piece);
        while buf.remaining() > 0 {
            let before = buf.filled().len();
            std::future::poll_fn(|cx| Pin::new(&mut *rd).poll_read(cx, &mut buf)).await?;
            if buf.filled().len() == before {
                return Err(std::io::ErrorKind::UnexpectedEof.into());
            }
        }
        crc.update(buf.filled());
    }
    Ok(crc.value())
}

/// Reads and drops `len` bytes.
async fn skip(rd: &mut BufReader<OwnedReadHalf>, len: u64) -> std::io::Result<()> {
    let n = tokio::io::copy(&mut (&mut *rd).take(len), &mut tokio::io::sink()).await?;
    if n < len {
        return Err(std::io::ErrorKind::UnexpectedEof.into());
    }
    Ok(())
}
