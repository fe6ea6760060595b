//! The receiving side: reassembly of incoming messages straight into their buffers, the
//! record of completed messages (so late duplicates are recognised), and the mailbox that
//! `recv` matches on.

use std::cell::UnsafeCell;
use std::collections::{HashMap, HashSet, VecDeque};
use std::sync::{Arc, Mutex};

use bytes::BytesMut;
use tokio::sync::Notify;
use tokio_util::sync::CancellationToken;

use crate::error::{Error, Result};
use crate::reassembly::{Admit, Reassembler};
use crate::wire::{PeerId, SegmentHeader};

/// How many completed message ids are remembered per peer. A duplicate can only arrive while
/// its sender still resends, i.e. within a `rail_timeout` or two of completion; 65,536 messages
/// is far more than any sender completes in that time.
const DONE_MEMORY: usize = 1 << 16;

/// A message's receive buffer, written by several connection readers at once, each in a range
/// the message's [`Reassembler`] reserved for it alone.
pub(crate) struct RecvBuf {
    ptr: *mut u8,
    len: usize,
    vec: UnsafeCell<Vec<u8>>,
}

// SAFETY: the buffer is only written through `range_mut` in ranges reserved by the Reassembler
// (disjoint by construction), and only taken out by `take` once no range is reserved; both are
// serialised against each other by the `Incoming` mutex, which gives the happens-before edge.
unsafe impl Send for RecvBuf {}
unsafe impl Sync for RecvBuf {}

impl RecvBuf {
    fn new(len: usize) -> RecvBuf {
        // Zeroed allocation: for large buffers the allocator maps fresh zero pages, which costs
        // nothing until written.
        let mut vec = vec![0u8; len];
        RecvBuf {
            ptr: vec.as_mut_ptr(),
            len,
            vec: UnsafeCell::new(vec),
        }
    }

    /// The bytes `[offset, offset + len)`.
    ///
    /// # Safety
    /// The caller holds the reservation of exactly this range from the message's Reassembler,
    /// and drops the slice before committing or aborting it.
    #[allow(clippy::mut_from_ref)]
    pub(crate) unsafe fn range_mut(&self, offset: u64, len: u64) -> &mut [u8] {
        let (offset, len) = (offset as usize, len as usize);
        assert!(offset + len <= self.len);
        if len == 0 {
            return &mut [];
        }
        // SAFETY: in bounds (checked above); exclusive by the caller's reservation.
        unsafe { std::slice::from_raw_parts_mut(self.ptr.add(offset), len) }
    }

    /// # Safety
    /// No range is reserved and the caller holds the `Incoming` lock.
    unsafe fn take(&self) -> Vec<u8> {
        // SAFETY: no writer exists (no reservation), and the lock excludes other takers.
        unsafe { std::mem::take(&mut *self.vec.get()) }
    }
}

struct InMsg {
    tag: u64,
    reasm: Reassembler,
    buf: Arc<RecvBuf>,
    /// Which connection holds each reserved range (by offset).
    holders: HashMap<u64, u64>,
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
    mailbox: VecDeque<(PeerId, u64, BytesMut)>,
}

/// What to do with an arriving segment's payload.
pub(crate) enum Admission {
    /// Read it into this buffer (its range is reserved), verify, then commit or abort.
    Fresh(Arc<RecvBuf>),
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
        let m = st.msgs.entry((peer, h.msg_id)).or_insert_with(|| InMsg {
            tag: h.tag,
            reasm: Reassembler::new(h.total),
            buf: Arc::new(RecvBuf::new(h.total as usize)),
            holders: HashMap::new(),
        });
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
                m.holders.insert(h.offset, conn);
                Ok(Admission::Fresh(m.buf.clone()))
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

    /// Commits a verified segment; returns true when that completed (and delivered) its message.
    pub fn commit(&self, peer: PeerId, h: &SegmentHeader) -> bool {
        let mut st = self.state.lock().expect("incoming lock");
        let key = (peer, h.msg_id);
        let m = st.msgs.get_mut(&key).expect("a reserved message is open");
        m.reasm.commit(h.offset, u64::from(h.len));
        m.holders.remove(&h.offset);
        if !m.reasm.is_complete() {
            return false;
        }
        let m = st.msgs.remove(&key).expect("present");
        // SAFETY: the message is complete, so nothing is reserved, and we hold the lock.
        // Vec → Bytes → BytesMut hands the allocation over without copying (it is unique).
        let data = BytesMut::from(bytes::Bytes::from(unsafe { m.buf.take() }));
        st.done.entry(peer).or_default().insert(h.msg_id);
        st.mailbox.push_back((peer, m.tag, data));
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

    /// The first delivered message with this tag (from this peer, if given), waiting for one.
    pub async fn recv(
        &self,
        from: Option<PeerId>,
        tag: u64,
        cancel: &CancellationToken,
    ) -> Result<(PeerId, BytesMut)> {
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
}
