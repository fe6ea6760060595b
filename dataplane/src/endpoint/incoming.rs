//! The receiving side: reassembly of incoming messages straight into their buffers, the
//! record of completed messages (so late duplicates are recognised), receives posted in
//! advance (a message that lands in, or is reduced into, memory its receiver lent), and the
//! mailbox that `recv` matches on.

use std::collections::{HashMap, HashSet, VecDeque};
use std::sync::{Arc, Mutex};
use std::time::Duration;

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
    Own(Arc<SharedBuf>),
    Posted(Posted),
}

/// How many completed message ids are remembered per peer. A duplicate can only arrive while
/// its sender still resends, i.e. within a `rail_timeout` or two of completion; 65,536 messages
/// is far more than any sender completes in that time.
const DONE_MEMORY: usize = 1 << 16;

struct InMsg {
    tag: u64,
    reasm: Reassembler,
    dest: Dest,
    /// Which connection holds each reserved range (by offset).
    holders: HashMap<u64, u64>,
    /// Time spent reducing its segments (posted reductions only).
    reduce: Duration,
}

#[derive(Default)]
struct DoneSet {
    set: HashSet<u64>,
    order: VecDeque<u64>,
}

impl DoneSet {
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
}

#[derive(Default)]
struct State {
    msgs: HashMap<(PeerId, u64), InMsg>,
    done: HashMap<PeerId, DoneSet>,
    mailbox: VecDeque<(PeerId, u64, Landed)>,
    /// Receives posted for (sender, tag), not yet claimed by an arriving message.
    posts: HashMap<(PeerId, u64), Posted>,
}

/// What to do with an arriving segment's payload.
pub(crate) enum Admission {
    /// Its range is reserved for this connection: read the payload, verify it, then (if
    /// `reduce`) reduce it into `buf[at..]`, else it was read straight into `buf[at..]`; then
    /// commit or abort.
    Fresh {
        buf: Arc<SharedBuf>,
        at: usize,
        reduce: Option<(DType, ReduceOp)>,
    },
    /// Already held: skip the payload and acknowledge.
    Duplicate,
    /// Being received on another connection (this id) right now: skip the payload and reply
    /// busy.
    Busy(u64),
}

#[derive(Default)]
pub(crate) struct Incoming {
    state: Mutex<State>,
    mail: Notify,
}

impl Incoming {
    /// Decides what to do with a segment arriving on connection `conn`.
    pub fn admit(&self, peer: PeerId, conn: u64, h: &SegmentHeader) -> Result<Admission> {
        let mut st = self.state.lock().expect("incoming lock");
        if st
            .done
            .get(&peer)
            .is_some_and(|d| d.set.contains(&h.msg_id))
        {
            return Ok(Admission::Duplicate);
        }
        let st = &mut *st;
        let m = match st.msgs.entry((peer, h.msg_id)) {
            std::collections::hash_map::Entry::Occupied(e) => e.into_mut(),
            std::collections::hash_map::Entry::Vacant(e) => {
                // A post of another length is not this message's: leave it, and let the
                // receiver see the length it got.
                let dest = match st.posts.remove(&(peer, h.tag)) {
                    Some(p) if p.len as u64 == h.total => Dest::Posted(p),
                    Some(p) => {
                        st.posts.insert((peer, h.tag), p);
                        Dest::Own(Arc::new(SharedBuf::zeroed(h.total as usize)))
                    }
                    None => Dest::Own(Arc::new(SharedBuf::zeroed(h.total as usize))),
                };
                e.insert(InMsg {
                    tag: h.tag,
                    reasm: Reassembler::new(h.total),
                    dest,
                    holders: HashMap::new(),
                    reduce: Duration::ZERO,
                })
            }
        };
        if m.tag != h.tag || m.reasm.total() != h.total {
            return Err(Error::Protocol(format!(
                "segment of message {} from {peer} says tag {} and {} bytes, earlier ones said tag {} and {} bytes",
                h.msg_id,
                h.tag,
                h.total,
                m.tag,
                m.reasm.total()
            )));
        }
        match m.reasm.reserve(h.offset, u64::from(h.len)) {
            Ok(Admit::Fresh) => {
                let (buf, at, reduce) = match &m.dest {
                    Dest::Own(b) => (b.clone(), h.offset as usize, None),
                    Dest::Posted(p) => {
                        if let Some((dtype, _)) = p.reduce {
                            let size = dtype.size() as u64;
                            if !h.offset.is_multiple_of(size)
                                || !u64::from(h.len).is_multiple_of(size)
                            {
                                m.reasm.abort(h.offset, u64::from(h.len));
                                return Err(Error::Protocol(format!(
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
            Ok(Admit::Busy) => Ok(Admission::Busy(
                m.holders.get(&h.offset).copied().unwrap_or(u64::MAX),
            )),
            Err(e) => Err(Error::Protocol(format!(
                "message {} from {peer}: {e}",
                h.msg_id
            ))),
        }
    }

    /// Commits a verified segment (whose reduction, if any, took `reduce`); returns true when
    /// that completed (and delivered) its message.
    pub fn commit(&self, peer: PeerId, h: &SegmentHeader, reduce: Duration) -> bool {
        let mut st = self.state.lock().expect("incoming lock");
        let key = (peer, h.msg_id);
        let m = st.msgs.get_mut(&key).expect("a reserved message is open");
        m.reasm.commit(h.offset, u64::from(h.len));
        m.holders.remove(&h.offset);
        m.reduce += reduce;
        if !m.reasm.is_complete() {
            return false;
        }
        let m = st.msgs.remove(&key).expect("present");
        let landed = match m.dest {
            // SAFETY: the message is complete, so nothing is reserved, and we hold the lock;
            // the buffer was this message's alone. Vec → Bytes → BytesMut hands the allocation
            // over without copying (it is unique).
            Dest::Own(buf) => {
                Landed::Fresh(BytesMut::from(bytes::Bytes::from(unsafe { buf.take() })))
            }
            Dest::Posted(_) => Landed::InPlace { reduce: m.reduce },
        };
        st.done.entry(peer).or_default().insert(h.msg_id);
        st.mailbox.push_back((peer, m.tag, landed));
        drop(st);
        self.mail.notify_waiters();
        true
    }

    pub fn abort(&self, peer: PeerId, h: &SegmentHeader) {
        let mut st = self.state.lock().expect("incoming lock");
        if let Some(m) = st.msgs.get_mut(&(peer, h.msg_id)) {
            m.reasm.abort(h.offset, u64::from(h.len));
            m.holders.remove(&h.offset);
        }
    }

    /// Lends `post.buf[post.offset..][..post.len]` to the next message from `from` tagged
    /// `tag` that is `post.len` bytes long and not yet arriving: its segments land there (or are
    /// reduced into it), and `recv` then says [`Landed::InPlace`]. A message that started
    /// arriving before the post lands in its own buffer as usual.
    ///
    /// # Safety
    /// Until the message was delivered or [`unpost`](Self::unpost) returned, nothing else reads
    /// or writes those bytes.
    pub unsafe fn post(&self, from: PeerId, tag: u64, post: Posted) {
        self.state
            .lock()
            .expect("incoming lock")
            .posts
            .insert((from, tag), post);
    }

    /// Withdraws a post no message claimed yet; true if there was one. After this returns
    /// false, a message may still be landing in the posted memory: wait for its delivery.
    pub fn unpost(&self, from: PeerId, tag: u64) -> bool {
        self.state
            .lock()
            .expect("incoming lock")
            .posts
            .remove(&(from, tag))
            .is_some()
    }

    /// The first delivered message with this tag (from this peer, if given), waiting for one.
    pub async fn recv(
        &self,
        from: Option<PeerId>,
        tag: u64,
        cancel: &CancellationToken,
    ) -> Result<(PeerId, Landed)> {
        loop {
            let notified = self.mail.notified();
            tokio::pin!(notified);
            notified.as_mut().enable();
            {
                let mut st = self.state.lock().expect("incoming lock");
                if let Some(pos) = st
                    .mailbox
                    .iter()
                    .position(|(p, t, _)| *t == tag && from.is_none_or(|f| f == *p))
                {
                    let (p, _, data) = st.mailbox.remove(pos).expect("position is valid");
                    return Ok((p, data));
                }
            }
            tokio::select! {
                _ = notified => {}
                _ = cancel.cancelled() => return Err(Error::Shutdown),
            }
        }
    }

    /// Messages being received (for tests and diagnostics).
    pub fn open(&self) -> usize {
        self.state.lock().expect("incoming lock").msgs.len()
    }

    /// Receives posted and not claimed by a message yet (for tests and diagnostics).
    pub fn posted(&self) -> usize {
        self.state.lock().expect("incoming lock").posts.len()
    }
}
