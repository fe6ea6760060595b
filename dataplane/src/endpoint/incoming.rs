//! The receiving side: reassembly of incoming messages straight into their buffers, the
//! record of completed messages (so late duplicates are recognised), receives posted in
//! advance (a message that lands in, or is reduced into, memory its receiver lent), and the
//! mailbox that `recv` matches on.
//!
//! What a peer may cost here is bounded (the peer is not authenticated; its id is what it
//! announced in its handshake):
//! * a message's own buffer is allocated at most `alloc_ahead` beyond the bytes that arrived
//!   (plus the segment being received) and grows as segments arrive; a segment that starts
//!   further ahead is answered busy;
//! * the bytes held for a peer's messages that are half received or not taken yet (their
//!   buffers and a fixed cost per message) stay under a per-peer and an endpoint-wide cap; a
//!   segment that would go over is refused and its connection dropped;
//! * a half-received message without a segment for `partial_expiry`, and a complete one nobody
//!   took for `unclaimed_expiry`, are dropped by the endpoint's reaper ([`Incoming::expire`]);
//! * a (sender, tag) whose receive is posted takes exactly one message: a second message under
//!   it — while the first is open, waiting to be taken, or after the first was delivered to the
//!   post — is refused and its connection dropped, so nothing but the one message ever writes
//!   memory its receiver lent. Tags that were not posted may carry any number of messages
//!   (an object push sends its pieces under one tag; a benchmark keeps two messages in flight
//!   under one), delivered in the order they completed.

use std::collections::{HashMap, HashSet, VecDeque};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use bytes::BytesMut;
use tokio::sync::Notify;
use tokio_util::sync::CancellationToken;

use crate::elem::{DType, ReduceOp};
use crate::error::{Error, Result};
use crate::peer_id::PeerId;
use crate::reassembly::{Admit, Reassembler};
use crate::shared_buf::SharedBuf;
use crate::wire::SegmentHeader;

/// Where a posted message's bytes go: `len` bytes at `offset` of `buf`.
pub(crate) struct Posted {
    pub buf: Arc<SharedBuf>,
    pub offset: usize,
    pub len: usize,
    /// `None`: the payload is written there. `Some`: each verified segment is reduced into the
    /// bytes there (`dst = op(segment, dst)`, element-wise), which already hold the receiver's
    /// own contribution.
    pub reduce: Option<(DType, ReduceOp)>,
}

/// A delivered message.
pub(crate) enum Landed {
    /// It was posted, and is in place: how long its reductions took, if it was reduced.
    InPlace { reduce: Duration },
    /// It was not posted (or arrived before its post): its bytes.
    Fresh(BytesMut),
}

/// Where an incoming message is being assembled.
enum Dest {
    /// Its own buffer, as long as the message has arrived so far plus up to `alloc_ahead`.
    Own(Arc<SharedBuf>),
    Posted(Posted),
}

/// How many completed message ids, and tags delivered to posts, are remembered per peer. A
/// duplicate can only arrive while its sender still resends, i.e. within a `rail_timeout` or
/// two of completion; 65,536 messages is far more than any sender completes in that time.
const DONE_MEMORY: usize = 1 << 16;

/// What a message costs beyond its buffer (its record, reassembly maps and mailbox entry),
/// charged to its peer like its bytes, so that a flood of tiny messages is bounded like a flood
/// of large ones. 1 KiB is more than those take for a message with a few holes.
pub(crate) const MSG_COST: u64 = 1 << 10;

/// The bounds [`Incoming`] keeps, from the endpoint's configuration (see `EndpointConfig`).
#[derive(Clone, Copy, Debug)]
pub(crate) struct Limits {
    pub alloc_ahead: u64,
    pub per_peer: u64,
    pub total: u64,
    pub partial_expiry: Duration,
    pub unclaimed_expiry: Duration,
}

struct InMsg {
    tag: u64,
    reasm: Reassembler,
    dest: Dest,
    /// Which connection holds each reserved range (by offset).
    holders: HashMap<u64, u64>,
    /// Time spent reducing its segments (posted reductions only).
    reduce: Duration,
    /// Bytes charged to its peer: its own buffer's length, and `MSG_COST`.
    charged: u64,
    /// When a segment of it last arrived or was committed.
    active: Instant,
}

/// A complete message waiting for `recv`.
struct Mail {
    peer: PeerId,
    tag: u64,
    landed: Landed,
    since: Instant,
    charged: u64,
}

/// A set that forgets its oldest members beyond `DONE_MEMORY`.
#[derive(Default)]
struct Recent {
    set: HashSet<u64>,
    order: VecDeque<u64>,
}

impl Recent {
    fn insert(&mut self, id: u64) {
        if self.set.insert(id) {
            self.order.push_back(id);
            if self.order.len() > DONE_MEMORY
                && let Some(old) = self.order.pop_front()
            {
                self.set.remove(&old);
            }
        }
    }

    fn contains(&self, id: u64) -> bool {
        self.set.contains(&id)
    }
}

/// What the endpoint holds and remembers of one peer.
struct PeerState {
    /// Bytes charged for its messages that are open or waiting to be taken.
    open_bytes: u64,
    /// Its completed message ids.
    done: Recent,
    /// Tags under which one of its messages was delivered to (or is landing in) a post.
    posted: Recent,
    /// When a segment from it last arrived; a peer that holds nothing is forgotten
    /// `partial_expiry` after that.
    seen: Instant,
}

/// The bytes held for every peer, and in all.
#[derive(Default)]
struct Ledger {
    peers: HashMap<PeerId, PeerState>,
    open_bytes: u64,
}

impl Ledger {
    /// Charges `bytes` to `peer` (which has a state), unless that takes it or all peers over
    /// their cap.
    fn charge(&mut self, peer: PeerId, bytes: u64, lim: &Limits) -> Result<(), Refusal> {
        let ps = self.peers.get_mut(&peer).expect("a peer being charged has a state");
        if ps.open_bytes.saturating_add(bytes) > lim.per_peer {
            return Err(Refusal::OverBudget(format!(
                "{peer} holds {} bytes here and needs {bytes} more, over max_open_bytes_per_peer {}",
                ps.open_bytes, lim.per_peer
            )));
        }
        if self.open_bytes.saturating_add(bytes) > lim.total {
            return Err(Refusal::OverBudget(format!(
                "all peers hold {} bytes here and {peer} needs {bytes} more, over max_open_bytes {}",
                self.open_bytes, lim.total
            )));
        }
        ps.open_bytes += bytes;
        self.open_bytes += bytes;
        Ok(())
    }

    fn release(&mut self, peer: PeerId, bytes: u64) {
        if let Some(ps) = self.peers.get_mut(&peer) {
            ps.open_bytes = ps.open_bytes.saturating_sub(bytes);
        }
        self.open_bytes = self.open_bytes.saturating_sub(bytes);
    }
}

#[derive(Default)]
struct State {
    msgs: HashMap<(PeerId, u64), InMsg>,
    ledger: Ledger,
    mailbox: VecDeque<Mail>,
    /// Receives posted for (sender, tag), not yet claimed by an arriving message.
    posts: HashMap<(PeerId, u64), Posted>,
    /// Messages open or waiting in the mailbox, per (sender, tag).
    live: HashMap<(PeerId, u64), u32>,
}

/// Decrements the messages live under `key`.
fn unlive(live: &mut HashMap<(PeerId, u64), u32>, key: (PeerId, u64)) {
    if let Some(n) = live.get_mut(&key) {
        *n -= 1;
        if *n == 0 {
            live.remove(&key);
        }
    }
}

/// What to do with an arriving segment's payload.
pub(crate) enum Admission {
    /// Its range is reserved for this connection: read the payload, verify it, then (if
    /// `reduce`) reduce it into `buf[at..]`, else it was read straight into `buf[at..]`; then
    /// commit or abort.
    Fresh { buf: Arc<SharedBuf>, at: usize, reduce: Option<(DType, ReduceOp)> },
    /// Already held: skip the payload and acknowledge.
    Duplicate,
    /// Being received on another connection (this id) right now: skip the payload and reply
    /// busy.
    Busy(u64),
    /// The message's buffer must grow to take it, and other segments of the message are being
    /// written into the buffer right now: wait for [`Incoming::released`], then ask again.
    Grow,
    /// Not now: it starts more than `alloc_ahead` beyond what arrived of its message. Skip the
    /// payload and reply busy; the sender retries it.
    Later,
}

/// Why a segment was refused; its connection is closed.
#[derive(Debug, thiserror::Error)]
pub(crate) enum Refusal {
    /// It contradicts the protocol: a correct sender never sends it.
    #[error("{0}")]
    Malformed(String),
    /// A second message under a (sender, tag) whose receive was posted.
    #[error("{0}")]
    DuplicateTag(String),
    /// Its peer, or all peers, would hold more than their cap (or the allocation failed).
    #[error("{0}")]
    OverBudget(String),
}

/// What [`Incoming::expire`] dropped.
#[derive(Debug, Default)]
pub(crate) struct Expired {
    /// Connections holding a range of an idle message they have been writing for all that
    /// time: stuck; close them (the message goes at the next pass, once their ranges are
    /// released).
    pub stuck: Vec<u64>,
    pub partial: u64,
    pub unclaimed: u64,
}

pub(crate) struct Incoming {
    state: Mutex<State>,
    mail: Notify,
    /// Woken whenever a reserved range is committed or aborted (a buffer may grow then).
    released: Notify,
    limits: Limits,
}

impl Incoming {
    pub fn new(limits: Limits) -> Incoming {
        Incoming { state: Mutex::new(State::default()), mail: Notify::new(), released: Notify::new(), limits }
    }

    /// Notified whenever a reserved range is released (see [`Admission::Grow`]).
    pub fn released(&self) -> &Notify {
        &self.released
    }

    /// Decides what to do with a segment arriving on connection `conn` at `now`.
    pub fn admit(&self, peer: PeerId, conn: u64, h: &SegmentHeader, now: Instant) -> Result<Admission, Refusal> {
        let lim = &self.limits;
        let mut guard = self.state.lock().expect("incoming lock");
        let st = &mut *guard;
        let ps = st.ledger.peers.entry(peer).or_insert_with(|| PeerState {
            open_bytes: 0,
            done: Recent::default(),
            posted: Recent::default(),
            seen: now,
        });
        ps.seen = now;
        if ps.done.contains(h.msg_id) {
            return Ok(Admission::Duplicate);
        }
        let key = (peer, h.msg_id);
        if !st.msgs.contains_key(&key) {
            let Some(m) = self.open_msg(st, peer, h, now)? else {
                return Ok(Admission::Later);
            };
            st.msgs.insert(key, m);
            *st.live.entry((peer, h.tag)).or_default() += 1;
        }
        let m = st.msgs.get_mut(&key).expect("opened above");
        if m.tag != h.tag || m.reasm.total() != h.total {
            return Err(Refusal::Malformed(format!(
                "segment of message {} from {peer} says tag {} and {} bytes, earlier ones said tag {} and {} bytes",
                h.msg_id,
                h.tag,
                h.total,
                m.tag,
                m.reasm.total()
            )));
        }
        m.active = now;
        let end = h.offset + u64::from(h.len);
        if let Dest::Own(buf) = &m.dest
            && end > buf.len() as u64
        {
            // The buffer grows to what arrived plus `alloc_ahead` (at least to this segment's
            // end), and only while nobody writes into it: the allocation may move.
            let received = m.reasm.received();
            if h.offset > received.saturating_add(lim.alloc_ahead) {
                return Ok(Admission::Later);
            }
            if m.reasm.in_flight() > 0 {
                return Ok(Admission::Grow);
            }
            let len = h.total.min(end.max(received.saturating_add(lim.alloc_ahead)));
            let more = len - buf.len() as u64;
            st.ledger.charge(peer, more, lim)?;
            // SAFETY: no range of the message is reserved, so no reader writes the buffer;
            // readers that wrote it earlier only hold it, and nothing reads it before the
            // message is complete.
            let Some(grown) = (unsafe { buf.grown(len as usize) }) else {
                st.ledger.release(peer, more);
                return Err(Refusal::OverBudget(format!(
                    "cannot grow the buffer of message {} from {peer} to {len} bytes",
                    h.msg_id
                )));
            };
            m.dest = Dest::Own(Arc::new(grown));
            m.charged += more;
        }
        match m.reasm.reserve(h.offset, u64::from(h.len)) {
            Ok(Admit::Fresh) => {
                let (buf, at, reduce) = match &m.dest {
                    Dest::Own(b) => (b.clone(), h.offset as usize, None),
                    Dest::Posted(p) => {
                        if let Some((dtype, _)) = p.reduce {
                            let size = dtype.size() as u64;
                            if !h.offset.is_multiple_of(size) || !u64::from(h.len).is_multiple_of(size) {
                                m.reasm.abort(h.offset, u64::from(h.len));
                                return Err(Refusal::Malformed(format!(
                                    "segment [{}, +{}) of message {} from {peer} splits a {dtype} element of a reduction (a peer's seg_max must be a multiple of 8)",
                                    h.offset, h.len, h.msg_id
                                )));
                            }
                        }
                        (p.buf.clone(), p.offset + h.offset as usize, p.reduce)
                    }
                };
                m.holders.insert(h.offset, conn);
                Ok(Admission::Fresh { buf, at, reduce })
            }
            Ok(Admit::Duplicate) => Ok(Admission::Duplicate),
            Ok(Admit::Busy) => Ok(Admission::Busy(m.holders.get(&h.offset).copied().unwrap_or(u64::MAX))),
            Err(e) => Err(Refusal::Malformed(format!("message {} from {peer}: {e}", h.msg_id))),
        }
    }

    /// The record of a new message from `peer` whose first segment (to arrive) is `h`: it
    /// claims the receive posted for its (sender, tag), or gets a buffer of its own, charged to
    /// the peer. `None`: the segment starts too far ahead to allocate for yet.
    fn open_msg(
        &self,
        st: &mut State,
        peer: PeerId,
        h: &SegmentHeader,
        now: Instant,
    ) -> Result<Option<InMsg>, Refusal> {
        let lim = &self.limits;
        let key = (peer, h.tag);
        let ps = st.ledger.peers.get_mut(&peer).expect("admit made it");
        if ps.posted.contains(h.tag) {
            return Err(Refusal::DuplicateTag(format!(
                "message {} from {peer} has tag {:#x}, under which a message was already delivered to a posted receive",
                h.msg_id, h.tag
            )));
        }
        let live = st.live.get(&key).copied().unwrap_or(0);
        if live > 0 && st.posts.contains_key(&key) {
            // The receiver will take the message already here (and withdraw its post): another
            // one must not land in the memory it lent meanwhile.
            return Err(Refusal::DuplicateTag(format!(
                "message {} from {peer} has tag {:#x}, under which a receive is posted and another message is already open or waiting",
                h.msg_id, h.tag
            )));
        }
        let record = |dest, charged| InMsg {
            tag: h.tag,
            reasm: Reassembler::new(h.total),
            dest,
            holders: HashMap::new(),
            reduce: Duration::ZERO,
            charged,
            active: now,
        };
        // A post of another length is not this message's: leave it, and let the receiver see
        // the length it got.
        if st.posts.get(&key).is_some_and(|p| p.len as u64 == h.total) {
            st.ledger.charge(peer, MSG_COST, lim)?;
            let post = st.posts.remove(&key).expect("checked above");
            let ps = st.ledger.peers.get_mut(&peer).expect("admit made it");
            ps.posted.insert(h.tag);
            return Ok(Some(record(Dest::Posted(post), MSG_COST)));
        }
        if h.offset > lim.alloc_ahead {
            return Ok(None);
        }
        let end = h.offset + u64::from(h.len);
        let len = h.total.min(end.max(lim.alloc_ahead));
        st.ledger.charge(peer, len + MSG_COST, lim)?;
        let Some(buf) = SharedBuf::try_uninit(len as usize) else {
            st.ledger.release(peer, len + MSG_COST);
            return Err(Refusal::OverBudget(format!(
                "cannot allocate {len} bytes for message {} from {peer}",
                h.msg_id
            )));
        };
        Ok(Some(record(Dest::Own(Arc::new(buf)), len + MSG_COST)))
    }

    /// Commits a verified segment (whose reduction, if any, took `reduce`); returns true when
    /// that completed (and delivered) its message.
    pub fn commit(&self, peer: PeerId, h: &SegmentHeader, reduce: Duration) -> bool {
        let done = self.commit_locked(peer, h, reduce);
        self.released.notify_waiters();
        if done {
            self.mail.notify_waiters();
        }
        done
    }

    fn commit_locked(&self, peer: PeerId, h: &SegmentHeader, reduce: Duration) -> bool {
        let mut guard = self.state.lock().expect("incoming lock");
        let st = &mut *guard;
        let key = (peer, h.msg_id);
        // A message with a reserved range is never expired, so it is there.
        let Some(m) = st.msgs.get_mut(&key) else {
            return false;
        };
        let now = Instant::now();
        m.reasm.commit(h.offset, u64::from(h.len));
        m.holders.remove(&h.offset);
        m.reduce += reduce;
        m.active = now;
        if !m.reasm.is_complete() {
            return false;
        }
        let m = st.msgs.remove(&key).expect("present");
        let landed = match m.dest {
            // SAFETY: the message is complete, so nothing is reserved and every byte was
            // written, and we hold the lock; the buffer was this message's alone (its length
            // is the message's: it never grows past `total`). Vec → Bytes → BytesMut hands the
            // allocation over without copying (it is unique).
            Dest::Own(buf) => Landed::Fresh(BytesMut::from(bytes::Bytes::from(unsafe { buf.take() }))),
            Dest::Posted(_) => Landed::InPlace { reduce: m.reduce },
        };
        if let Some(ps) = st.ledger.peers.get_mut(&peer) {
            ps.done.insert(h.msg_id);
        }
        st.mailbox.push_back(Mail { peer, tag: m.tag, landed, since: now, charged: m.charged });
        true
    }

    pub fn abort(&self, peer: PeerId, h: &SegmentHeader) {
        {
            let mut st = self.state.lock().expect("incoming lock");
            if let Some(m) = st.msgs.get_mut(&(peer, h.msg_id)) {
                m.reasm.abort(h.offset, u64::from(h.len));
                m.holders.remove(&h.offset);
            }
        }
        self.released.notify_waiters();
    }

    /// Lends `post.buf[post.offset..][..post.len]` to the next message from `from` tagged
    /// `tag` that is `post.len` bytes long and not yet arriving: its segments land there (or are
    /// reduced into it), and `recv` then says [`Landed::InPlace`]. A message that started
    /// arriving before the post lands in its own buffer as usual, and taking it with `recv`
    /// withdraws the post. No other message under (`from`, `tag`) is accepted while the post
    /// is lent or after it was delivered (see the module's description).
    ///
    /// # Safety
    /// Until the message was delivered, or [`unpost`](Self::unpost) returned true, or a
    /// message that arrived before the post was taken with `recv`, nothing else reads or
    /// writes those bytes.
    pub unsafe fn post(&self, from: PeerId, tag: u64, post: Posted) {
        self.state.lock().expect("incoming lock").posts.insert((from, tag), post);
    }

    /// Withdraws a post no message claimed yet; true if there was one. After this returns
    /// false, a message may still be landing in the posted memory: wait for its delivery —
    /// unless a message that arrived before the post was taken (which withdrew the post).
    pub fn unpost(&self, from: PeerId, tag: u64) -> bool {
        self.state.lock().expect("incoming lock").posts.remove(&(from, tag)).is_some()
    }

    /// The first delivered message with this tag (from this peer, if given), waiting for one.
    /// Taking a message that landed in its own buffer withdraws a receive posted for it too
    /// late (in the same step, so no other message can claim that post in between).
    pub async fn recv(&self, from: Option<PeerId>, tag: u64, cancel: &CancellationToken) -> Result<(PeerId, Landed)> {
        loop {
            let notified = self.mail.notified();
            tokio::pin!(notified);
            notified.as_mut().enable();
            {
                let mut guard = self.state.lock().expect("incoming lock");
                let st = &mut *guard;
                if let Some(pos) = st.mailbox.iter().position(|m| m.tag == tag && from.is_none_or(|f| f == m.peer)) {
                    let m = st.mailbox.remove(pos).expect("position is valid");
                    st.ledger.release(m.peer, m.charged);
                    unlive(&mut st.live, (m.peer, m.tag));
                    if matches!(m.landed, Landed::Fresh(_)) {
                        st.posts.remove(&(m.peer, m.tag));
                    }
                    return Ok((m.peer, m.landed));
                }
            }
            tokio::select! {
                _ = notified => {}
                _ = cancel.cancelled() => return Err(Error::Shutdown),
            }
        }
    }

    /// Drops what peers left behind as of `now`: half-received messages idle for
    /// `partial_expiry` (once no connection is writing into them; those that still are are
    /// returned as stuck), complete messages nobody took for `unclaimed_expiry`, and what is
    /// remembered of peers that hold nothing and were silent for `partial_expiry`.
    pub fn expire(&self, now: Instant) -> Expired {
        let lim = &self.limits;
        let mut out = Expired::default();
        let mut guard = self.state.lock().expect("incoming lock");
        let st = &mut *guard;
        let idle = |since: Instant, limit: Duration| now.saturating_duration_since(since) >= limit;
        let mut gone = Vec::new();
        for (key, m) in &st.msgs {
            if !idle(m.active, lim.partial_expiry) {
                continue;
            }
            if m.reasm.in_flight() > 0 {
                out.stuck.extend(m.holders.values().copied());
            } else {
                gone.push(*key);
            }
        }
        for key in gone {
            let m = st.msgs.remove(&key).expect("collected above");
            // A posted message's tag stays in its peer's `posted`: no later message lands in
            // the memory its receiver may still consider lent.
            st.ledger.release(key.0, m.charged);
            unlive(&mut st.live, (key.0, m.tag));
            out.partial += 1;
        }
        // The mailbox is in completion order, so the old ones are at its front.
        while st.mailbox.front().is_some_and(|m| idle(m.since, lim.unclaimed_expiry)) {
            let m = st.mailbox.pop_front().expect("checked");
            st.ledger.release(m.peer, m.charged);
            unlive(&mut st.live, (m.peer, m.tag));
            out.unclaimed += 1;
        }
        st.ledger.peers.retain(|_, p| p.open_bytes > 0 || !idle(p.seen, lim.partial_expiry));
        out
    }

    /// Messages being received (for tests and diagnostics).
    pub fn open(&self) -> usize {
        self.state.lock().expect("incoming lock").msgs.len()
    }

    /// Bytes held for messages not taken yet (see `Stats::open_bytes`).
    pub fn open_bytes(&self) -> u64 {
        self.state.lock().expect("incoming lock").ledger.open_bytes
    }

    /// Receives posted and not claimed by a message yet (for tests and diagnostics).
    pub fn posted(&self) -> usize {
        self.state.lock().expect("incoming lock").posts.len()
    }
}
