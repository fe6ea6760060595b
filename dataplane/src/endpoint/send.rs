//! The send path: [`Endpoint::send`](super::Endpoint::send) cuts a message into segments and
//! asks the rail scheduler for a rail per segment; the segment joins that rail's FCFS queue
//! (waiting for room if it is full); one drain task per rail hands the head of its queue to the
//! rail's connection to the peer; the connection's writer checksums the segment and writes it
//! (and the replies this side owes the peer) in one system call. `send` returns once every
//! segment was acknowledged and no writer reads the message any more.

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU32, Ordering::Relaxed};
use std::time::{Duration, Instant};

use bytes::Bytes;
use tokio::io::AsyncWriteExt;
use tokio::net::tcp::OwnedWriteHalf;
use tokio::sync::{Notify, mpsc, oneshot};
use tracing::debug;

use super::conn::Conn;
use super::health::Closing;
use super::outgoing::{OutMsg, OutState, Segment};
use super::pacing;
use super::state::{Inner, POLL, Queued, SchedState};
use crate::error::{Error, Result};
use crate::peer_id::PeerId;
use crate::segment::cut;
use crate::striping::shares;
use crate::wire::{REPLY_BODY_LEN, Reply, checksum};

impl Inner {
    /// The body of [`Endpoint::send`](super::Endpoint::send): cuts the message, schedules its
    /// segments, and waits until every one is acknowledged and no writer reads `data` any more.
    ///
    /// `handed` is dropped once the message needs no more of the caller's attention (or the
    /// send ended first), when [`Handed`] says: every segment in a rail's send queue, or only
    /// the last segment of each rail it uses unacknowledged. A caller may then start its next
    /// message behind it on the wire.
    pub(super) async fn send_message(
        self: &Arc<Self>,
        peer: Vec<SocketAddr>,
        tag: u64,
        data: Bytes,
        handed: Option<Handed>,
        rates: Option<Vec<f64>>,
    ) -> Result<()> {
        let inner = self;
        let Some(&first) = peer.first() else {
            return Err(Error::Peer("a peer needs at least one rail address".into()));
        };
        let total = data.len() as u64;
        if total > inner.cfg.max_message {
            return Err(Error::Config(format!(
                "message of {total} bytes is over max_message {}",
                inner.cfg.max_message
            )));
        }
        let pieces = inner.pieces(total, peer.len(), rates);
        let rails_used = rails_used(&pieces, peer.len().min(inner.cfg.rails.len()));
        let msg = Arc::new(OutMsg {
            peer: PeerId(first),
            addrs: Arc::new(peer),
            msg_id: inner.next_msg.fetch_add(1, Relaxed),
            tag,
            data,
            state: Mutex::new(OutState {
                acked: vec![false; pieces.len()],
                remaining: pieces.len(),
                failed: None,
                finished: false,
                last_progress: Instant::now(),
                tail: 0,
            }),
            done: Notify::new(),
            writing: AtomicU32::new(0),
            idle: Notify::new(),
        });
        inner.outgoing.lock().expect("outgoing lock").insert(msg.msg_id, msg.clone());
        let _guard = Finish { inner, msg: &msg };
        for (index, (offset, len, rail)) in pieces.into_iter().enumerate() {
            let seg = Arc::new(Segment {
                msg: msg.clone(),
                index,
                offset,
                len: len as u32,
                rail,
                corrupt_replies: AtomicU32::new(0),
            });
            inner.schedule(seg).await?;
        }
        let mut handed = match handed {
            Some(Handed::Queued(tx)) => {
                drop(tx);
                None
            }
            Some(Handed::Tail(tx)) => {
                // One segment per rail the message uses may stay unacknowledged.
                msg.state.lock().expect("msg lock").tail = rails_used;
                Some(tx)
            }
            None => None,
        };
        loop {
            let notified = msg.done.notified();
            tokio::pin!(notified);
            notified.as_mut().enable();
            {
                let mut st = msg.state.lock().expect("msg lock");
                if let Some(e) = st.failed.take() {
                    return Err(e);
                }
                if st.remaining == 0 {
                    break;
                }
                if st.remaining <= st.tail {
                    handed.take();
                }
            }
            let idle = msg.stalled_for();
            if idle >= inner.cfg.stall_timeout {
                return Err(Error::Stalled { peer: msg.peer, msg_id: msg.msg_id, secs: idle.as_secs_f64() });
            }
            tokio::select! {
                _ = notified => {}
                _ = tokio::time::sleep(inner.cfg.stall_timeout - idle) => {}
                _ = inner.cancel.cancelled() => return Err(Error::Shutdown),
            }
        }
        inner.wait_unwritten(&msg).await?;
        inner.counters.messages_sent.fetch_add(1, Relaxed);
        Ok(())
    }

    /// A message of `total` bytes to a peer with `rails` addresses cut into segments: (offset,
    /// length, the rail it must go on). Striped by `rates` when given (each segment's rail fixed
    /// by the shares the caller expects), else left to the rail scheduler.
    fn pieces(&self, total: u64, rails: usize, rates: Option<Vec<f64>>) -> Vec<(u64, u64, Option<usize>)> {
        let seg_len = self.segment_len(rails);
        match rates {
            Some(mut rates) => {
                rates.truncate(rails.min(self.cfg.rails.len()));
                let split = shares::rail_shares(total, &rates, shares::MIN_SHARE);
                shares::plan_segments(&split, &rates, seg_len)
                    .into_iter()
                    .map(|s| (s.offset, s.len, Some(s.rail)))
                    .collect()
            }
            None => cut(total, seg_len).map(|(o, l)| (o, l, None)).collect(),
        }
    }

    /// Waits until no writer reads `msg`'s data any more: a copy of a segment that was resent
    /// (its first connection failed) may still be being written after the other copy was
    /// acknowledged.
    async fn wait_unwritten(&self, msg: &OutMsg) -> Result<()> {
        loop {
            let idle = msg.idle.notified();
            tokio::pin!(idle);
            idle.as_mut().enable();
            if msg.writing.load(std::sync::atomic::Ordering::Acquire) == 0 {
                return Ok(());
            }
            tokio::select! {
                _ = idle => {}
                _ = tokio::time::sleep(POLL) => {}
                _ = self.cancel.cancelled() => return Err(Error::Shutdown),
            }
        }
    }

    /// Appends `seg` to rail `a`'s send queue and wakes its writer, if the queue has room.
    fn enqueue_if_room(&self, st: &mut SchedState, a: usize, seg: &Arc<Segment>) -> bool {
        if st.queues[a].len() >= self.cfg.queue_max {
            return false;
        }
        st.queues[a].push_back(Queued { seg: seg.clone(), entered: self.now() });
        self.rail_ready[a].notify_one();
        true
    }

    /// Puts a segment on the send queue of its rail (its message's shares fixed it), or of the
    /// rail the scheduler picks (none fixed, or that rail is out of service).
    async fn schedule(self: &Arc<Self>, seg: Arc<Segment>) -> Result<()> {
        let peer = seg.msg.peer;
        let peer_rails = seg.msg.addrs.len();
        'pick: loop {
            if self.cancel.is_cancelled() {
                return Err(Error::Shutdown);
            }
            if seg.msg.settled(seg.index) {
                return Ok(());
            }
            self.check_stall(&seg.msg)?;
            let chosen = {
                let mut st = self.sched.lock().expect("sched lock");
                let views = st.views(peer, peer_rails, Instant::now(), &self.in_flight);
                if !views.iter().any(|v| v.up) {
                    None
                } else {
                    let a = match seg.rail {
                        Some(r) if views.get(r).is_some_and(|v| v.up) => r,
                        _ => st.sched.pick(&views, u64::from(seg.len), self.now()),
                    };
                    assert!(views[a].up, "scheduler picked rail {a}, which is down");
                    if self.enqueue_if_room(&mut st, a, &seg) {
                        return Ok(());
                    }
                    Some(a)
                }
            };
            let Some(a) = chosen else {
                // Every rail to this peer is out of service: wait for a back-off to end.
                tokio::select! {
                    _ = tokio::time::sleep(POLL) => continue 'pick,
                    _ = self.cancel.cancelled() => return Err(Error::Shutdown),
                }
            };
            // The chosen rail's queue is full: wait until it drains; the decision stands unless
            // the rail goes out of service meanwhile.
            loop {
                let space = self.rail_space[a].notified();
                tokio::pin!(space);
                space.as_mut().enable();
                {
                    let mut st = self.sched.lock().expect("sched lock");
                    if !st.views(peer, peer_rails, Instant::now(), &self.in_flight)[a].up {
                        continue 'pick;
                    }
                    if self.enqueue_if_room(&mut st, a, &seg) {
                        return Ok(());
                    }
                }
                tokio::select! {
                    _ = space => {}
                    _ = tokio::time::sleep(POLL) => {}
                    _ = self.cancel.cancelled() => return Err(Error::Shutdown),
                }
                if seg.msg.settled(seg.index) {
                    return Ok(());
                }
                self.check_stall(&seg.msg)?;
            }
        }
    }

    /// Schedules a segment again, in its own task (callers are readers and drains, which must
    /// not wait for queue space).
    pub(super) fn reschedule(self: &Arc<Self>, seg: Arc<Segment>, after: Duration) {
        if seg.msg.settled(seg.index) {
            return;
        }
        self.counters.resent.fetch_add(1, Relaxed);
        let inner = self.clone();
        self.tasks.spawn(async move {
            if !after.is_zero() {
                tokio::select! {
                    _ = tokio::time::sleep(after) => {}
                    _ = inner.cancel.cancelled() => return,
                }
            }
            if let Err(e) = inner.schedule(seg.clone()).await {
                seg.msg.fail(e);
            }
        });
    }

    /// Rail `rail`'s drain: sends its queue FCFS, one segment at a time.
    pub(super) async fn drain(self: Arc<Self>, rail: usize) {
        loop {
            let ready = self.rail_ready[rail].notified();
            tokio::pin!(ready);
            ready.as_mut().enable();
            let item = {
                let mut st = self.sched.lock().expect("sched lock");
                let q = st.queues[rail].pop_front();
                if let Some(q) = &q {
                    st.sched.departed(rail, q.entered, self.now());
                }
                q
            };
            let Some(Queued { seg, .. }) = item else {
                tokio::select! {
                    _ = ready => continue,
                    _ = self.cancel.cancelled() => return,
                }
            };
            self.rail_space[rail].notify_waiters();
            if seg.msg.settled(seg.index) {
                continue;
            }
            let peer = seg.msg.peer;
            let up = {
                let mut st = self.sched.lock().expect("sched lock");
                st.views(peer, seg.msg.addrs.len(), Instant::now(), &self.in_flight)[rail].up
            };
            if !up {
                self.reschedule(seg, Duration::ZERO);
                continue;
            }
            let conn = match self.connection(peer, rail, &seg.msg.addrs).await {
                Ok(c) => c,
                // No key to connect with: the message fails at once (no rail is at fault).
                Err(e @ Error::NoRailKey) => {
                    seg.msg.fail(e);
                    continue;
                }
                // The peer proved it does not hold our key: retrying cannot help, so the message
                // fails with that reason instead of stalling; the rail backs off for the others.
                Err(e @ Error::Handshake { .. }) => {
                    self.rail_down(peer, rail);
                    seg.msg.fail(e);
                    continue;
                }
                Err(e) => {
                    debug!(%peer, rail, error = %e, "cannot connect rail");
                    self.rail_down(peer, rail);
                    self.reschedule(seg, Duration::ZERO);
                    continue;
                }
            };
            let len = u64::from(seg.len);
            self.in_flight[rail].fetch_add(len, Relaxed);
            if !conn.track(seg.clone(), self.now()) {
                self.in_flight[rail].fetch_sub(len, Relaxed);
                self.reschedule(seg, Duration::ZERO);
                continue;
            }
            if !conn.transmit(seg).await {
                self.fail_conn(&conn, "write failed".into(), Closing::Failed);
            }
        }
    }

    pub(super) async fn writer(
        self: Arc<Self>,
        conn: Arc<Conn>,
        mut wr: OwnedWriteHalf,
        mut replies: mpsc::UnboundedReceiver<Reply>,
        mut segs: mpsc::Receiver<(Arc<Segment>, oneshot::Sender<()>)>,
    ) {
        let work = async {
            let mut buf = Vec::with_capacity(1 + REPLY_BODY_LEN);
            // The send buffer set on this socket so far (0: the kernel's autotuning).
            let mut sndbuf = 0usize;
            loop {
                tokio::select! {
                    // Replies first: they are small and unblock the peer's sender.
                    biased;
                    Some(r) = replies.recv() => {
                        buf.clear();
                        buf.extend_from_slice(&r.encode());
                        while let Ok(r) = replies.try_recv() {
                            buf.extend_from_slice(&r.encode());
                        }
                        wr.write_all(&buf).await?;
                    }
                    Some((seg, done)) = segs.recv() => {
                        self.size_send_buffer(&conn, &wr, &mut sndbuf);
                        self.write_segment(&conn, &mut wr, &seg).await?;
                        // Its view of the message's bytes goes before anyone hears it was written.
                        drop(seg);
                        let _ = done.send(());
                    }
                    else => return Ok::<(), Error>(()),
                }
            }
        };
        let r = tokio::select! {
            r = work => r,
            _ = conn.dead.cancelled() => Ok(()),
        };
        if let Err(e) = r {
            self.fail_conn(&conn, e.to_string(), Closing::Failed);
        }
    }

    /// Sets the socket's send buffer to what its rail's measured rate calls for (see
    /// `pacing`), when that moved by more than a quarter since it was last set.
    fn size_send_buffer(&self, conn: &Conn, wr: &OwnedWriteHalf, applied: &mut usize) {
        let target = self.sndbuf_target[conn.rail].load(Relaxed);
        if !pacing::resize(*applied, target) {
            return;
        }
        if let Err(e) = socket2::SockRef::from(wr.as_ref()).set_send_buffer_size(target) {
            debug!(peer = %conn.peer, rail = conn.rail, error = %e, "could not size the socket send buffer");
        }
        // Once per target either way: a socket that refuses is not asked again per segment.
        *applied = target;
    }

    async fn write_segment(&self, conn: &Conn, wr: &mut OwnedWriteHalf, seg: &Segment) -> Result<()> {
        let _writing = Writing::start(&seg.msg);
        let n = self.counters.transmissions.fetch_add(1, Relaxed);
        let mut payload = seg.payload();
        let header = seg.header(checksum(&payload)).encode();
        if self.cfg.faults.corrupt.contains(&n) && !payload.is_empty() {
            let mut bad = payload.to_vec();
            bad[0] ^= 1;
            payload = Bytes::from(bad);
        }
        write_all_vectored(wr, &header, &payload).await?;
        let rc = &self.counters.rails[conn.rail];
        rc.segments_sent.fetch_add(1, Relaxed);
        let sent = rc.bytes_sent.fetch_add(u64::from(seg.len), Relaxed) + u64::from(seg.len);
        if let Some((rail, after)) = self.cfg.faults.kill_rail
            && rail == conn.rail
            && sent >= after
            && !self.kill_fired.swap(true, Relaxed)
        {
            return Err(Error::Io(std::io::Error::other("fault injection: rail killed")));
        }
        Ok(())
    }
}

/// When a send's `handed` signal fires (see `send_message`).
pub(super) enum Handed {
    /// Once every segment is in a rail's send queue.
    Queued(oneshot::Sender<()>),
    /// Once no more than the last segment of each rail the message uses is unacknowledged: the
    /// caller's next message starts while those are on the wire, so only their round trip
    /// overlaps it, not a whole queue of data.
    Tail(oneshot::Sender<()>),
}

/// How many rails a message's segments go on: those its shares fixed, or, where the rail
/// scheduler picks, every rail to the peer (`peer_rails`); at least 1.
fn rails_used(pieces: &[(u64, u64, Option<usize>)], peer_rails: usize) -> usize {
    if pieces.iter().any(|p| p.2.is_none()) {
        return peer_rails.max(1);
    }
    let mut fixed: Vec<usize> = pieces.iter().filter_map(|p| p.2).collect();
    fixed.sort_unstable();
    fixed.dedup();
    fixed.len().max(1)
}

/// Marks a message finished when `send` returns or is dropped, so its queued segments are
/// skipped and late replies ignored.
struct Finish<'a> {
    inner: &'a Inner,
    msg: &'a Arc<OutMsg>,
}

impl Drop for Finish<'_> {
    fn drop(&mut self) {
        self.msg.state.lock().expect("msg lock").finished = true;
        self.inner.outgoing.lock().expect("outgoing lock").remove(&self.msg.msg_id);
    }
}

/// Counts a segment write in progress on its message, for as long as it lives.
struct Writing<'a>(&'a OutMsg);

impl<'a> Writing<'a> {
    fn start(msg: &'a OutMsg) -> Writing<'a> {
        msg.writing.fetch_add(1, std::sync::atomic::Ordering::AcqRel);
        Writing(msg)
    }
}

impl Drop for Writing<'_> {
    fn drop(&mut self) {
        if self.0.writing.fetch_sub(1, std::sync::atomic::Ordering::AcqRel) == 1 {
            self.0.idle.notify_waiters();
        }
    }
}

/// Writes a segment's header and payload, in as few system calls as the socket allows (one,
/// when it has room for both).
async fn write_all_vectored(wr: &mut OwnedWriteHalf, header: &[u8], payload: &[u8]) -> std::io::Result<()> {
    let mut done = 0;
    let total = header.len() + payload.len();
    while done < total {
        let n = if done < header.len() {
            let bufs = [std::io::IoSlice::new(&header[done..]), std::io::IoSlice::new(payload)];
            wr.write_vectored(&bufs).await?
        } else {
            wr.write(&payload[done - header.len()..]).await?
        };
        if n == 0 {
            return Err(std::io::ErrorKind::WriteZero.into());
        }
        done += n;
    }
    Ok(())
}
