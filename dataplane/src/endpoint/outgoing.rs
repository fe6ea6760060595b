//! The record of a message being sent ([`OutMsg`]) and of each of its segments ([`Segment`]):
//! what the send path queues, connection writers write, replies acknowledge, and failures
//! reschedule. Plain data with its own locks; no tasks, no I/O.

use std::net::SocketAddr;
use std::sync::atomic::AtomicU32;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use bytes::Bytes;
use tokio::sync::Notify;

use crate::error::Error;
use crate::peer_id::PeerId;
use crate::wire::SegmentHeader;

/// A message being sent.
pub(super) struct OutMsg {
    pub(super) peer: PeerId,
    pub(super) addrs: Arc<Vec<SocketAddr>>,
    pub(super) msg_id: u64,
    pub(super) tag: u64,
    pub(super) data: Bytes,
    pub(super) state: Mutex<OutState>,
    pub(super) done: Notify,
    /// Segments of it a connection writer is writing right now (reading `data`). `send` does
    /// not return before this is 0, so a caller may reuse the memory behind `data` at once.
    pub(super) writing: AtomicU32,
    pub(super) idle: Notify,
}

pub(super) struct OutState {
    pub(super) acked: Vec<bool>,
    pub(super) remaining: usize,
    pub(super) failed: Option<Error>,
    /// Set when `send` returned or was dropped: queued segments of it are skipped.
    pub(super) finished: bool,
    pub(super) last_progress: Instant,
    /// Unacknowledged segments at which a `Handed::Tail` signal fires (0: none waits).
    pub(super) tail: usize,
}

impl OutMsg {
    /// Marks segment `index` acknowledged; true the first time.
    pub(super) fn ack(&self, index: usize) -> bool {
        let mut st = self.state.lock().expect("msg lock");
        if st.acked[index] {
            return false;
        }
        st.acked[index] = true;
        st.remaining -= 1;
        st.last_progress = Instant::now();
        if st.remaining == 0 || st.remaining == st.tail {
            self.done.notify_waiters();
        }
        true
    }

    pub(super) fn fail(&self, e: Error) {
        let mut st = self.state.lock().expect("msg lock");
        if st.failed.is_none() && !st.finished {
            st.failed = Some(e);
            self.done.notify_waiters();
        }
    }

    /// Nothing more to do for segment `index`: acknowledged, or the message is over.
    pub(super) fn settled(&self, index: usize) -> bool {
        let st = self.state.lock().expect("msg lock");
        st.finished || st.failed.is_some() || st.acked[index]
    }

    pub(super) fn stalled_for(&self) -> Duration {
        self.state.lock().expect("msg lock").last_progress.elapsed()
    }
}

/// One segment of an outgoing message.
pub(super) struct Segment {
    pub(super) msg: Arc<OutMsg>,
    pub(super) index: usize,
    pub(super) offset: u64,
    pub(super) len: u32,
    /// The rail its message's shares put it on (see `striping::shares`); `None`: the rail
    /// scheduler picks. A rail that is out of service is passed over for the scheduler's pick.
    pub(super) rail: Option<usize>,
    pub(super) corrupt_replies: AtomicU32,
}

impl Segment {
    pub(super) fn header(&self, crc: u32) -> SegmentHeader {
        SegmentHeader {
            tag: self.msg.tag,
            msg_id: self.msg.msg_id,
            total: self.msg.data.len() as u64,
            offset: self.offset,
            len: self.len,
            crc,
        }
    }

    pub(super) fn payload(&self) -> Bytes {
        self.msg.data.slice(self.offset as usize..self.offset as usize + self.len as usize)
    }
}
