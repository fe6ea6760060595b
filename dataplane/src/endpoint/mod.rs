//! The tokio transport: an [`Endpoint`] sends and receives tagged messages over several rails.
//!
//! How a message travels:
//! 1. [`Endpoint::send`] cuts it into segments of at most `seg_max` and, segment by segment, asks the rail scheduler for a rail with a snapshot of every
//!    rail (up for this peer or not, segments and bytes queued, bytes unacknowledged). A
//!    segment joins that rail's FCFS send queue; if the queue already holds `queue_max`, the
//!    sender waits for it to drain (the seed's step 8.1: the decision stands).
//! 2. One drain task per rail takes the head of its queue (the scheduler is told: `departed`),
//!    finds or opens the connection to the segment's peer on that rail, and hands the segment
//!    to the connection's writer, waiting until the socket took it all ("the NIC has room").
//!    The writer computes the segment's CRC-32C just before writing it (so the kernel copies a
//!    payload that is still in cache) and writes header and payload in one system call.
//! 3. The receiver's connection reader reserves the segment's range in the message's
//!    reassembly, reads the payload from the socket straight into the message buffer (checking
//!    the CRC piece by piece as it arrives), and replies on the same connection: ok, corrupt,
//!    or busy. A receive posted in advance (crate-internal, for collectives) lends the
//!    message's buffer instead: the payload lands in the receiver's memory, or is read into
//!    the connection's scratch buffer, verified, and reduced into the receiver's memory
//!    segment by segment, while the next segments are still on the wire.
//! 4. An ok reply tells the scheduler (`delivered`) and counts the segment acknowledged; a
//!    corrupt one sends the segment again through the scheduler; when every segment is
//!    acknowledged, `send` returns. The receiver hands the complete message to `recv`.
//!
//! Failures: a connection that errors, closes, or has unacknowledged segments and no reply for
//! `rail_timeout` is closed; its rail is out of service for that peer for a back-off (250 ms,
//! doubling to 4 s); every segment it had not had acknowledged is scheduled again on the rails
//! still up. After the back-off the rail is offered to the scheduler again and reconnected
//! lazily by the next segment that picks it.
//!
//! Every task is spawned on the endpoint's `TaskTracker` and stops on its `CancellationToken`;
//! [`Endpoint::shutdown`] cancels and awaits them all, dropping the endpoint cancels them.

mod config;
mod incoming;
mod stats;

use std::collections::{HashMap, VecDeque};
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering::Relaxed};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use bytes::{Bytes, BytesMut};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::net::tcp::{OwnedReadHalf, OwnedWriteHalf};
use tokio::net::{TcpListener, TcpSocket, TcpStream};
use tokio::sync::{Notify, mpsc, oneshot};
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;
use tracing::{debug, warn};

pub use config::{EndpointConfig, Faults};
use incoming::{Admission, Incoming};
pub(crate) use incoming::{Landed, Posted};
use stats::Counters;
pub use stats::{RailStats, Stats};

use crate::collective::reduce_from;
use crate::error::{Error, Result};
use crate::sched::{self, RailScheduler, RailView, SchedulerParams};
use crate::segment::cut;
use crate::wire::{
    Checksum, FrameKind, HELLO_LEN, Hello, PeerId, REPLY_BODY_LEN, Reply, ReplyStatus,
    SEGMENT_BODY_LEN, SegmentHeader, checksum,
};

/// How often waits re-check rail health and the watchdog looks for silent connections. 100 ms
/// is small next to `rail_timeout` (seconds) and costs nothing measurable.
const POLL: Duration = Duration::from_millis(100);
/// A segment answered "busy" is retried after this long: enough for the racing original (a
/// segment being read on another rail) to finish on any rail faster than ~1 Gbit/s per 4 MiB.
const BUSY_RETRY: Duration = Duration::from_millis(30);
/// First back-off of a failed rail. Short, so a connection reset on a healthy link costs little.
const BACKOFF_FIRST: Duration = Duration::from_millis(250);
/// Longest back-off: a rail that stays cut is probed at most this often, and each probe delays
/// the segments queued on it by at most `connect_timeout`.
const BACKOFF_MAX: Duration = Duration::from_secs(4);
/// Read buffer of a connection. Payloads at least this large bypass it and go straight from the
/// socket into the message buffer; headers and replies are parsed from it.
const READ_BUF: usize = 64 << 10;
/// A payload is read from the socket and checksummed in pieces of at most this many bytes, so
/// the checksum reads each piece from cache right after the kernel wrote it there.
const CHECK_PIECE: usize = 256 << 10;

/// A peer's rail addresses, in rail order (what its [`Endpoint::local_addrs`] returned).
pub type PeerAddrs = [SocketAddr];

/// One end of the data plane: listens on every rail, sends and receives tagged messages.
pub struct Endpoint {
    inner: Arc<Inner>,
}

struct Inner {
    cfg: EndpointConfig,
    id: PeerId,
    local: Vec<SocketAddr>,
    start: Instant,
    sched: Mutex<SchedState>,
    /// Wakes rail i's drain task: its queue got a segment.
    rail_ready: Vec<Notify>,
    /// Wakes senders waiting on rail i's full queue.
    rail_space: Vec<Notify>,
    /// Bytes on rail i's connections written (or being written) and not yet answered: what the
    /// schedulers see as [`RailView::in_flight_bytes`]. Added before a segment is tracked on a
    /// connection, subtracted when it leaves the connection's in-flight map (reply or close).
    in_flight: Vec<AtomicU64>,
    /// The connection used to send to (peer, rail).
    conns: Mutex<HashMap<(PeerId, usize), Arc<Conn>>>,
    /// Every live connection, for the watchdog (an accepted connection may be live without being
    /// the one in `conns`).
    live: Mutex<HashMap<u64, Arc<Conn>>>,
    outgoing: Mutex<HashMap<u64, Arc<OutMsg>>>,
    incoming: Incoming,
    counters: Counters,
    next_msg: AtomicU64,
    next_conn: AtomicU64,
    kill_fired: AtomicBool,
    cancel: CancellationToken,
    tasks: TaskTracker,
}

struct SchedState {
    sched: Box<dyn RailScheduler>,
    queues: Vec<VecDeque<Queued>>,
    health: HashMap<PeerId, Vec<Health>>,
}

struct Queued {
    seg: Arc<Segment>,
    entered: Duration,
}

#[derive(Clone, Copy, Debug, Default)]
struct Health {
    down_until: Option<Instant>,
    failures: u32,
}

impl Health {
    fn is_up(&self, now: Instant) -> bool {
        self.down_until.is_none_or(|t| now >= t)
    }
}

impl SchedState {
    fn health(&mut self, peer: PeerId, rails: usize) -> &mut Vec<Health> {
        self.health
            .entry(peer)
            .or_insert_with(|| vec![Health::default(); rails])
    }

    /// Rails usable towards `peer` (up, and present on both sides), with their backlogs.
    fn views(
        &mut self,
        peer: PeerId,
        peer_rails: usize,
        now: Instant,
        in_flight: &[AtomicU64],
    ) -> Vec<RailView> {
        let m = self.queues.len();
        let queued: Vec<(usize, u64)> = self
            .queues
            .iter()
            .map(|q| (q.len(), q.iter().map(|q| u64::from(q.seg.len)).sum()))
            .collect();
        let health = self.health(peer, m);
        (0..m)
            .map(|i| RailView {
                up: i < peer_rails && health[i].is_up(now),
                queued: queued[i].0,
                queued_bytes: queued[i].1,
                in_flight_bytes: in_flight[i].load(Relaxed),
            })
            .collect()
    }
}

/// A message being sent.
struct OutMsg {
    peer: PeerId,
    addrs: Arc<Vec<SocketAddr>>,
    msg_id: u64,
    tag: u64,
    data: Bytes,
    state: Mutex<OutState>,
    done: Notify,
    /// Segments of it a connection writer is writing right now (reading `data`). `send` does
    /// not return before this is 0, so a caller may reuse the memory behind `data` at once.
    writing: AtomicU32,
    idle: Notify,
}

struct OutState {
    acked: Vec<bool>,
    remaining: usize,
    failed: Option<Error>,
    /// Set when `send` returned or was dropped: queued segments of it are skipped.
    finished: bool,
    last_progress: Instant,
}

impl OutMsg {
    /// Marks segment `index` acknowledged; true the first time.
    fn ack(&self, index: usize) -> bool {
        let mut st = self.state.lock().expect("msg lock");
        if st.acked[index] {
            return false;
        }
        st.acked[index] = true;
        st.remaining -= 1;
        st.last_progress = Instant::now();
        if st.remaining == 0 {
            self.done.notify_waiters();
        }
        true
    }

    fn fail(&self, e: Error) {
        let mut st = self.state.lock().expect("msg lock");
        if st.failed.is_none() && !st.finished {
            st.failed = Some(e);
            self.done.notify_waiters();
        }
    }

    /// Nothing more to do for segment `index`: acknowledged, or the message is over.
    fn settled(&self, index: usize) -> bool {
        let st = self.state.lock().expect("msg lock");
        st.finished || st.failed.is_some() || st.acked[index]
    }

    fn stalled_for(&self) -> Duration {
        self.state.lock().expect("msg lock").last_progress.elapsed()
    }
}

/// One segment of an outgoing message.
struct Segment {
    msg: Arc<OutMsg>,
    index: usize,
    offset: u64,
    len: u32,
    corrupt_replies: AtomicU32,
}

impl Segment {
    fn header(&self, crc: u32) -> SegmentHeader {
        SegmentHeader {
            tag: self.msg.tag,
            msg_id: self.msg.msg_id,
            total: self.msg.data.len() as u64,
            offset: self.offset,
            len: self.len,
            crc,
        }
    }

    fn payload(&self) -> Bytes {
        self.msg
            .data
            .slice(self.offset as usize..self.offset as usize + self.len as usize)
    }
}

/// One TCP connection of one rail to one peer, used in both directions.
struct Conn {
    id: u64,
    peer: PeerId,
    rail: usize,
    replies: mpsc::UnboundedSender<Reply>,
    segs: mpsc::Sender<(Arc<Segment>, oneshot::Sender<()>)>,
    inflight: Mutex<Inflight>,
    dead: CancellationToken,
}

/// Segments written on a connection and not yet answered.
struct Inflight {
    closed: bool,
    map: HashMap<(u64, u64), (Arc<Segment>, Duration)>,
    last_progress: Instant,
}

impl Conn {
    /// Records a segment about to be written; false if the connection is already closed.
    fn track(&self, seg: Arc<Segment>, sent_at: Duration) -> bool {
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

    fn untrack(&self, msg_id: u64, offset: u64) -> Option<(Arc<Segment>, Duration)> {
        let mut f = self.inflight.lock().expect("inflight lock");
        f.last_progress = Instant::now();
        f.map.remove(&(msg_id, offset))
    }

    fn silent_for(&self) -> Option<Duration> {
        let f = self.inflight.lock().expect("inflight lock");
        (!f.closed && !f.map.is_empty()).then(|| f.last_progress.elapsed())
    }

    /// Closes the connection once; returns the segments that were in flight on it.
    fn close(&self) -> Option<Vec<Arc<Segment>>> {
        let mut f = self.inflight.lock().expect("inflight lock");
        if f.closed {
            return None;
        }
        f.closed = true;
        self.dead.cancel();
        Some(f.map.drain().map(|(_, (s, _))| s).collect())
    }

    /// Hands a segment to the writer and waits until the socket took all of it.
    async fn transmit(&self, seg: Arc<Segment>) -> bool {
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

impl Endpoint {
    /// Binds one listener per rail and starts the endpoint's tasks.
    pub async fn bind(cfg: EndpointConfig) -> Result<Endpoint> {
        let cfg = cfg.validated()?;
        let m = cfg.rails.len();
        let mut listeners = Vec::with_capacity(m);
        for (rail, ip) in cfg.rails.iter().enumerate() {
            let addr = SocketAddr::new(*ip, cfg.port);
            let l = TcpListener::bind(addr)
                .await
                .map_err(|source| Error::Bind { rail, addr, source })?;
            listeners.push(l);
        }
        let local: Vec<SocketAddr> = listeners
            .iter()
            .map(|l| l.local_addr())
            .collect::<std::io::Result<_>>()?;
        let params = SchedulerParams {
            rails: m,
            seg_max: cfg.seg_max,
            queue_max: cfg.queue_max,
            bandwidth: cfg.bandwidth,
            k: cfg.k,
            seed: cfg.seed,
        };
        let inner = Arc::new(Inner {
            id: PeerId(local[0]),
            local,
            start: Instant::now(),
            sched: Mutex::new(SchedState {
                sched: sched::build(cfg.scheduler, &params),
                queues: (0..m).map(|_| VecDeque::new()).collect(),
                health: HashMap::new(),
            }),
            rail_ready: (0..m).map(|_| Notify::new()).collect(),
            rail_space: (0..m).map(|_| Notify::new()).collect(),
            in_flight: (0..m).map(|_| AtomicU64::new(0)).collect(),
            conns: Mutex::new(HashMap::new()),
            live: Mutex::new(HashMap::new()),
            outgoing: Mutex::new(HashMap::new()),
            incoming: Incoming::default(),
            counters: Counters::new(m),
            next_msg: AtomicU64::new(0),
            next_conn: AtomicU64::new(0),
            kill_fired: AtomicBool::new(false),
            cancel: CancellationToken::new(),
            tasks: TaskTracker::new(),
            cfg,
        });
        for (rail, l) in listeners.into_iter().enumerate() {
            inner.tasks.spawn(inner.clone().accept_loop(rail, l));
            inner.tasks.spawn(inner.clone().drain(rail));
        }
        inner.tasks.spawn(inner.clone().watchdog());
        Ok(Endpoint { inner })
    }

    /// This endpoint's identity (the address of its rail-0 listener).
    pub fn id(&self) -> PeerId {
        self.inner.id
    }

    /// The listening address of every rail, in rail order: what peers pass to `send`.
    pub fn local_addrs(&self) -> Vec<SocketAddr> {
        self.inner.local.clone()
    }

    /// The configured scheduler.
    pub fn scheduler(&self) -> sched::SchedulerKind {
        self.inner.cfg.scheduler
    }

    /// Sends `data` to the peer listening on `peer` (its rail addresses), tagged `tag`, and
    /// returns once the peer acknowledged every segment. Many sends may run at once, to one
    /// peer or many. Dropping the future abandons the message (the peer never delivers it).
    ///
    /// The peer's addresses are copied when this is called, so the future borrows only `self`.
    pub fn send(
        &self,
        peer: &PeerAddrs,
        tag: u64,
        data: Bytes,
    ) -> impl Future<Output = Result<()>> + Send + '_ {
        let peer = peer.to_vec();
        async move { self.send_to(peer, tag, data).await }
    }

    async fn send_to(&self, peer: Vec<SocketAddr>, tag: u64, data: Bytes) -> Result<()> {
        let inner = &self.inner;
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
        let pieces: Vec<(u64, u64)> = cut(total, inner.cfg.seg_max).collect();
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
            }),
            done: Notify::new(),
            writing: AtomicU32::new(0),
            idle: Notify::new(),
        });
        inner
            .outgoing
            .lock()
            .expect("outgoing lock")
            .insert(msg.msg_id, msg.clone());
        let _guard = Finish { inner, msg: &msg };
        for (index, (offset, len)) in pieces.into_iter().enumerate() {
            let seg = Arc::new(Segment {
                msg: msg.clone(),
                index,
                offset,
                len: len as u32,
                corrupt_replies: AtomicU32::new(0),
            });
            inner.schedule(seg).await?;
        }
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
            }
            let idle = msg.stalled_for();
            if idle >= inner.cfg.stall_timeout {
                return Err(Error::Stalled {
                    peer: msg.peer,
                    msg_id: msg.msg_id,
                    secs: idle.as_secs_f64(),
                });
            }
            tokio::select! {
                _ = notified => {}
                _ = tokio::time::sleep(inner.cfg.stall_timeout - idle) => {}
                _ = inner.cancel.cancelled() => return Err(Error::Shutdown),
            }
        }
        // A copy of a segment that was resent (its first connection failed) may still be
        // being written after the other copy was acknowledged: wait until no writer reads the
        // data any more.
        loop {
            let idle = msg.idle.notified();
            tokio::pin!(idle);
            idle.as_mut().enable();
            if msg.writing.load(std::sync::atomic::Ordering::Acquire) == 0 {
                break;
            }
            tokio::select! {
                _ = idle => {}
                _ = tokio::time::sleep(POLL) => {}
                _ = inner.cancel.cancelled() => return Err(Error::Shutdown),
            }
        }
        inner.counters.messages_sent.fetch_add(1, Relaxed);
        Ok(())
    }

    /// The next message tagged `tag` from `from`, waiting for one. Messages with the same
    /// sender and tag are delivered in the order they completed.
    pub async fn recv(&self, from: PeerId, tag: u64) -> Result<BytesMut> {
        let landed = self.recv_landed(from, tag).await?;
        fresh(from, tag, landed)
    }

    /// The next message tagged `tag` from any peer, with its sender.
    pub async fn recv_any(&self, tag: u64) -> Result<(PeerId, BytesMut)> {
        let (peer, landed) = self
            .inner
            .incoming
            .recv(None, tag, &self.inner.cancel)
            .await?;
        self.inner.counters.messages_received.fetch_add(1, Relaxed);
        Ok((peer, fresh(peer, tag, landed)?))
    }

    /// Like [`recv`](Self::recv), for a message that may have been posted.
    pub(crate) async fn recv_landed(&self, from: PeerId, tag: u64) -> Result<Landed> {
        let (_, landed) = self
            .inner
            .incoming
            .recv(Some(from), tag, &self.inner.cancel)
            .await?;
        self.inner.counters.messages_received.fetch_add(1, Relaxed);
        Ok(landed)
    }

    /// Posts a receive: see [`Incoming::post`].
    ///
    /// # Safety
    /// As [`Incoming::post`]: nothing else touches the posted bytes until the message was
    /// delivered or [`unpost`](Self::unpost) returned true.
    pub(crate) unsafe fn post(&self, from: PeerId, tag: u64, post: Posted) {
        // SAFETY: forwarded contract.
        unsafe { self.inner.incoming.post(from, tag, post) }
    }

    /// Withdraws a post; see [`Incoming::unpost`].
    pub(crate) fn unpost(&self, from: PeerId, tag: u64) -> bool {
        self.inner.incoming.unpost(from, tag)
    }

    /// A snapshot of the endpoint's counters.
    pub fn stats(&self) -> Stats {
        self.inner.counters.snapshot()
    }

    /// Messages partly received and not yet complete.
    pub fn open_incoming(&self) -> usize {
        self.inner.incoming.open()
    }

    /// Stops every task of the endpoint and waits for them; pending calls fail with `Shutdown`.
    pub async fn shutdown(self) {
        self.inner.cancel.cancel();
        self.inner.tasks.close();
        self.inner.tasks.wait().await;
    }
}

impl std::fmt::Debug for Endpoint {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Endpoint")
            .field("rails", &self.inner.local)
            .field("scheduler", &self.inner.cfg.scheduler)
            .finish_non_exhaustive()
    }
}

impl Drop for Endpoint {
    fn drop(&mut self) {
        self.inner.cancel.cancel();
        self.inner.tasks.close();
    }
}

/// A message taken by the public `recv`, which never posts.
fn fresh(from: PeerId, tag: u64, landed: Landed) -> Result<BytesMut> {
    match landed {
        Landed::Fresh(data) => Ok(data),
        Landed::InPlace { .. } => Err(Error::Protocol(format!(
            "message tag {tag:#x} from {from} was posted; take it with recv_landed"
        ))),
    }
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
        self.inner
            .outgoing
            .lock()
            .expect("outgoing lock")
            .remove(&self.msg.msg_id);
    }
}

impl Inner {
    fn now(&self) -> Duration {
        self.start.elapsed()
    }

    fn check_stall(&self, msg: &OutMsg) -> Result<()> {
        let idle = msg.stalled_for();
        if idle >= self.cfg.stall_timeout {
            return Err(Error::Stalled {
                peer: msg.peer,
                msg_id: msg.msg_id,
                secs: idle.as_secs_f64(),
            });
        }
        Ok(())
    }

    /// Appends `seg` to rail `a`'s send queue and wakes its writer, if the queue has room.
    fn enqueue_if_room(&self, st: &mut SchedState, a: usize, seg: &Arc<Segment>) -> bool {
        if st.queues[a].len() >= self.cfg.queue_max {
            return false;
        }
        st.queues[a].push_back(Queued {
            seg: seg.clone(),
            entered: self.now(),
        });
        self.rail_ready[a].notify_one();
        true
    }

    /// Puts a segment on the send queue of the rail the scheduler picks.
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
                    let a = st.sched.pick(&views, u64::from(seg.len), self.now());
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
    fn reschedule(self: &Arc<Self>, seg: Arc<Segment>, after: Duration) {
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
    async fn drain(self: Arc<Self>, rail: usize) {
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
                self.fail_conn(&conn, "write failed".into(), true);
            }
        }
    }

    /// The connection to `peer` on `rail`, opened if there is none.
    async fn connection(
        self: &Arc<Self>,
        peer: PeerId,
        rail: usize,
        addrs: &[SocketAddr],
    ) -> Result<Arc<Conn>> {
        if let Some(c) = self.conns.lock().expect("conns lock").get(&(peer, rail))
            && !c.dead.is_cancelled()
        {
            return Ok(c.clone());
        }
        let addr = addrs[rail];
        let stream = tokio::time::timeout(self.cfg.connect_timeout, self.connect(peer, rail, addr))
            .await
            .map_err(|_| Error::Peer(format!("connecting rail {rail} to {addr} timed out")))??;
        Ok(self.start_conn(stream, peer, rail))
    }

    async fn connect(&self, peer: PeerId, rail: usize, addr: SocketAddr) -> Result<TcpStream> {
        let sock = if addr.is_ipv4() {
            TcpSocket::new_v4()?
        } else {
            TcpSocket::new_v6()?
        };
        // Bound to the local rail address, so the traffic leaves through that rail's NIC.
        sock.bind(SocketAddr::new(self.cfg.rails[rail], 0))?;
        let mut stream = sock.connect(addr).await?;
        stream.set_nodelay(true)?;
        self.send_hello(&mut stream, rail).await?;
        let h = read_hello(&mut stream).await?;
        if h.peer != peer || usize::from(h.rail) != rail {
            return Err(Error::Peer(format!(
                "{addr} answered as {} rail {}, but rail {rail} of {peer} was expected",
                h.peer, h.rail
            )));
        }
        Ok(stream)
    }

    async fn accept_loop(self: Arc<Self>, rail: usize, listener: TcpListener) {
        loop {
            let accepted = tokio::select! {
                r = listener.accept() => r,
                _ = self.cancel.cancelled() => return,
            };
            match accepted {
                Ok((stream, from)) => {
                    let inner = self.clone();
                    self.tasks.spawn(async move {
                        let r = tokio::time::timeout(
                            inner.cfg.connect_timeout,
                            inner.handshake(rail, stream),
                        )
                        .await;
                        match r {
                            Ok(Ok((stream, peer))) => {
                                inner.start_conn(stream, peer, rail);
                            }
                            Ok(Err(e)) => {
                                warn!(%from, rail, error = %e, "refused a rail connection")
                            }
                            Err(_) => warn!(%from, rail, "rail handshake timed out"),
                        }
                    });
                }
                Err(e) => {
                    // Out of file descriptors and the like: wait instead of spinning.
                    warn!(rail, error = %e, "accept failed");
                    tokio::select! {
                        _ = tokio::time::sleep(POLL) => {}
                        _ = self.cancel.cancelled() => return,
                    }
                }
            }
        }
    }

    /// Announces this endpoint and the rail `stream` belongs to (both sides of the handshake).
    async fn send_hello(&self, stream: &mut TcpStream, rail: usize) -> Result<()> {
        let hello = Hello {
            peer: self.id,
            rail: rail as u16,
        };
        stream.write_all(&hello.encode()).await?;
        Ok(())
    }

    async fn handshake(&self, rail: usize, mut stream: TcpStream) -> Result<(TcpStream, PeerId)> {
        stream.set_nodelay(true)?;
        let h = read_hello(&mut stream).await?;
        if usize::from(h.rail) != rail {
            return Err(Error::Protocol(format!(
                "peer {} connected to rail {rail} announcing rail {}",
                h.peer, h.rail
            )));
        }
        self.send_hello(&mut stream, rail).await?;
        // A peer that reaches us on this rail shows the rail works: offer it to the scheduler.
        let mut st = self.sched.lock().expect("sched lock");
        let m = st.queues.len();
        st.health(h.peer, m)[rail] = Health::default();
        Ok((stream, h.peer))
    }

    /// Registers a connected, handshaken stream and starts its reader and writer.
    fn start_conn(self: &Arc<Self>, stream: TcpStream, peer: PeerId, rail: usize) -> Arc<Conn> {
        if let Some(n) = self.cfg.send_buffer
            && let Err(e) = socket2::SockRef::from(&stream).set_send_buffer_size(n)
        {
            warn!(%peer, rail, error = %e, "could not set the socket send buffer");
        }
        let (rd, wr) = stream.into_split();
        let (reply_tx, reply_rx) = mpsc::unbounded_channel();
        // Capacity 1: the drain waits for each write anyway; the writer never holds more than
        // the segment it is writing.
        let (seg_tx, seg_rx) = mpsc::channel(1);
        let conn = Arc::new(Conn {
            id: self.next_conn.fetch_add(1, Relaxed),
            peer,
            rail,
            replies: reply_tx,
            segs: seg_tx,
            inflight: Mutex::new(Inflight {
                closed: false,
                map: HashMap::new(),
                last_progress: Instant::now(),
            }),
            dead: self.cancel.child_token(),
        });
        self.conns
            .lock()
            .expect("conns lock")
            .insert((peer, rail), conn.clone());
        self.live
            .lock()
            .expect("live lock")
            .insert(conn.id, conn.clone());
        self.tasks
            .spawn(self.clone().writer(conn.clone(), wr, reply_rx, seg_rx));
        self.tasks.spawn(self.clone().reader(conn.clone(), rd));
        debug!(%peer, rail, conn = conn.id, "rail connection up");
        conn
    }

    /// Closes a connection and sends its unanswered segments again on the other rails.
    /// `hurt` says whether the rail should go out of service (not for a clean close by the
    /// peer with nothing in flight).
    fn fail_conn(self: &Arc<Self>, conn: &Arc<Conn>, why: String, hurt: bool) {
        let Some(segs) = conn.close() else { return };
        let lost: u64 = segs.iter().map(|s| u64::from(s.len)).sum();
        self.in_flight[conn.rail].fetch_sub(lost, Relaxed);
        {
            let mut conns = self.conns.lock().expect("conns lock");
            if conns
                .get(&(conn.peer, conn.rail))
                .is_some_and(|c| c.id == conn.id)
            {
                conns.remove(&(conn.peer, conn.rail));
            }
        }
        self.live.lock().expect("live lock").remove(&conn.id);
        if hurt || !segs.is_empty() {
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
    fn rail_down(self: &Arc<Self>, peer: PeerId, rail: usize) {
        self.counters.rails[rail].failures.fetch_add(1, Relaxed);
        let stranded: Vec<Arc<Segment>> = {
            let mut st = self.sched.lock().expect("sched lock");
            let m = st.queues.len();
            let h = &mut st.health(peer, m)[rail];
            h.failures += 1;
            let backoff = BACKOFF_FIRST
                .saturating_mul(1 << (h.failures - 1).min(8))
                .min(BACKOFF_MAX);
            h.down_until = Some(Instant::now() + backoff);
            let q = std::mem::take(&mut st.queues[rail]);
            let (gone, keep): (Vec<_>, Vec<_>) =
                q.into_iter().partition(|q| q.seg.msg.peer == peer);
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
    async fn watchdog(self: Arc<Self>) {
        loop {
            tokio::select! {
                _ = tokio::time::sleep(POLL) => {}
                _ = self.cancel.cancelled() => return,
            }
            let conns: Vec<Arc<Conn>> = self
                .live
                .lock()
                .expect("live lock")
                .values()
                .cloned()
                .collect();
            for c in conns {
                if let Some(silent) = c.silent_for()
                    && silent >= self.cfg.rail_timeout
                {
                    self.fail_conn(
                        &c,
                        format!("no reply for {:.1} s", silent.as_secs_f64()),
                        true,
                    );
                }
            }
        }
    }

    async fn writer(
        self: Arc<Self>,
        conn: Arc<Conn>,
        mut wr: OwnedWriteHalf,
        mut replies: mpsc::UnboundedReceiver<Reply>,
        mut segs: mpsc::Receiver<(Arc<Segment>, oneshot::Sender<()>)>,
    ) {
        let work = async {
            let mut buf = Vec::with_capacity(1 + REPLY_BODY_LEN);
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
                        self.write_segment(&conn, &mut wr, &seg).await?;
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
            self.fail_conn(&conn, e.to_string(), true);
        }
    }

    async fn write_segment(
        &self,
        conn: &Conn,
        wr: &mut OwnedWriteHalf,
        seg: &Segment,
    ) -> Result<()> {
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
            return Err(Error::Io(std::io::Error::other(
                "fault injection: rail killed",
            )));
        }
        Ok(())
    }

    async fn reader(self: Arc<Self>, conn: Arc<Conn>, rd: OwnedReadHalf) {
        let mut rd = BufReader::with_capacity(READ_BUF, rd);
        let mut scratch = Vec::new();
        let r = tokio::select! {
            r = self.read_loop(&conn, &mut rd, &mut scratch) => r,
            _ = conn.dead.cancelled() => return,
        };
        if let Err((e, hurt)) = r {
            self.fail_conn(&conn, e.to_string(), hurt);
        }
    }

    /// Reads frames until the connection fails. The error says whether that hurt the rail
    /// (anything but a clean close at a frame boundary).
    async fn read_loop(
        self: &Arc<Self>,
        conn: &Arc<Conn>,
        rd: &mut BufReader<OwnedReadHalf>,
        scratch: &mut Vec<u8>,
    ) -> Result<(), (Error, bool)> {
        loop {
            let kind = match rd.read_u8().await {
                Ok(k) => k,
                Err(e) if e.kind() == std::io::ErrorKind::UnexpectedEof => {
                    return Err((Error::Protocol("connection closed by peer".into()), false));
                }
                Err(e) => return Err((e.into(), true)),
            };
            let hurt = |e: Error| (e, true);
            match FrameKind::from_byte(kind).map_err(hurt)? {
                FrameKind::Segment => {
                    let mut b = [0u8; SEGMENT_BODY_LEN];
                    rd.read_exact(&mut b).await.map_err(|e| hurt(e.into()))?;
                    let h = SegmentHeader::decode(&b).map_err(hurt)?;
                    self.receive_segment(conn, h, rd, scratch)
                        .await
                        .map_err(hurt)?;
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
        self.counters.rails[conn.rail]
            .bytes_received
            .fetch_add(len, Relaxed);
        let status = match self.incoming.admit(conn.peer, conn.id, &h)? {
            Admission::Fresh { buf, at, reduce } => {
                let mut guard = Reservation {
                    incoming: &self.incoming,
                    peer: conn.peer,
                    h,
                    armed: true,
                };
                let n = h.len as usize;
                let mut took = Duration::ZERO;
                let ok = match reduce {
                    None => {
                        // SAFETY: `admit` reserved exactly this range for us (of a buffer of
                        // our own, or of posted memory nothing else touches meanwhile); the
                        // slice is dropped before the guard commits or aborts it.
                        let dst = unsafe { buf.range_mut(at, n) };
                        read_checked(rd, dst).await? == h.crc
                    }
                    Some((dtype, op)) => {
                        if scratch.len() < n {
                            scratch.resize(n, 0);
                        }
                        let ok = read_checked(rd, &mut scratch[..n]).await? == h.crc;
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
            Admission::Busy(holder) => {
                skip(rd, len).await?;
                // A sender resends a segment only after giving up on the copy it sent before
                // (its connection timed out or failed), so the connection still receiving that
                // copy is dead at the sender, though maybe not yet here (a cut link tells the
                // receiver nothing). Close it: that releases the range, and the retry after
                // the busy reply finds it free.
                let stale = self.live.lock().expect("live lock").get(&holder).cloned();
                if let Some(stale) = stale {
                    self.fail_conn(
                        &stale,
                        "superseded by a resend on another rail".into(),
                        true,
                    );
                }
                ReplyStatus::Busy
            }
        };
        // The writer may be gone if the connection is closing; the sender then resends.
        let _ = conn.replies.send(Reply {
            msg_id: h.msg_id,
            offset: h.offset,
            status,
        });
        Ok(())
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
                    st.sched
                        .delivered(conn.rail, u64::from(seg.len), sent_at, self.now());
                    let m = st.queues.len();
                    st.health(conn.peer, m)[conn.rail].failures = 0;
                }
                if seg.msg.ack(seg.index) {
                    self.counters
                        .bytes_acked
                        .fetch_add(u64::from(seg.len), Relaxed);
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

/// Counts a segment write in progress on its message, for as long as it lives.
struct Writing<'a>(&'a OutMsg);

impl<'a> Writing<'a> {
    fn start(msg: &'a OutMsg) -> Writing<'a> {
        msg.writing
            .fetch_add(1, std::sync::atomic::Ordering::AcqRel);
        Writing(msg)
    }
}

impl Drop for Writing<'_> {
    fn drop(&mut self) {
        if self
            .0
            .writing
            .fetch_sub(1, std::sync::atomic::Ordering::AcqRel)
            == 1
        {
            self.0.idle.notify_waiters();
        }
    }
}

/// Writes a segment's header and payload, in as few system calls as the socket allows (one,
/// when it has room for both).
async fn write_all_vectored(
    wr: &mut OwnedWriteHalf,
    header: &[u8],
    payload: &[u8],
) -> std::io::Result<()> {
    let mut done = 0;
    let total = header.len() + payload.len();
    while done < total {
        let n = if done < header.len() {
            let bufs = [
                std::io::IoSlice::new(&header[done..]),
                std::io::IoSlice::new(payload),
            ];
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

/// Fills `dst` from the socket, checksumming it piece by piece while each piece is in cache;
/// returns the CRC-32C of all of it.
async fn read_checked<R: AsyncRead + Unpin>(rd: &mut R, dst: &mut [u8]) -> std::io::Result<u32> {
    let mut crc = Checksum::new();
    for piece in dst.chunks_mut(CHECK_PIECE) {
        rd.read_exact(piece).await?;
        crc.update(piece);
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

/// Reads the peer's half of the rail handshake.
async fn read_hello(stream: &mut TcpStream) -> Result<Hello> {
    let mut b = [0u8; HELLO_LEN];
    stream.read_exact(&mut b).await?;
    Hello::decode(&b)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rig::pattern;
    use std::net::IpAddr;

    fn cfg(faults: Faults) -> EndpointConfig {
        EndpointConfig {
            rails: (1..=3).map(|i| IpAddr::from([127, 0, 0, i])).collect(),
            scheduler: sched::SchedulerKind::Weighted,
            seg_max: 256 << 10,
            queue_max: 4,
            faults,
            ..Default::default()
        }
    }

    /// A posted reduction: every segment is verified before it touches the receiver's memory,
    /// so a segment corrupted on the wire (and resent) is reduced in exactly once, and the
    /// result is `op(remote, local)` element for element. A message that arrives before its
    /// post lands in its own buffer instead, and the post stays unclaimed.
    #[tokio::test]
    async fn posted_receives_land_in_place_and_reduce_only_verified_segments() {
        use crate::collective::{DType, ReduceOp};
        use crate::shared_buf::SharedBuf;
        let a = Endpoint::bind(cfg(Faults {
            corrupt: vec![1, 5],
            ..Default::default()
        }))
        .await
        .unwrap();
        let b = Endpoint::bind(cfg(Faults::default())).await.unwrap();
        let n = 300_000; // i64 elements: 2.4 MB, ten segments of 256 KiB
        let remote: Vec<u8> = (0..n as i64).flat_map(|x| (3 * x).to_le_bytes()).collect();
        let local: Vec<u8> = (0..n as i64).flat_map(|x| (x - 7).to_le_bytes()).collect();
        // The posted range sits between two guard bands that must stay untouched.
        let mut mem = vec![0xAAu8; 64];
        mem.extend_from_slice(&local);
        mem.extend_from_slice(&[0xBB; 64]);
        let buf = Arc::new(SharedBuf::from_vec(mem));
        let post = Posted {
            buf: buf.clone(),
            offset: 64,
            len: local.len(),
            reduce: Some((DType::I64, ReduceOp::Sum)),
        };
        // SAFETY: nothing else touches the buffer until the message is delivered.
        unsafe { b.post(a.id(), 7, post) };
        let (sent, landed) = tokio::join!(
            a.send(&b.local_addrs(), 7, Bytes::from(remote)),
            b.recv_landed(a.id(), 7)
        );
        sent.unwrap();
        assert!(matches!(landed.unwrap(), Landed::InPlace { .. }));
        assert!(!b.unpost(a.id(), 7), "the message claimed the post");
        assert_eq!(b.stats().corrupt_received, 2);
        let got = unsafe { buf.range(0, buf.len()) };
        assert!(got[..64].iter().all(|&x| x == 0xAA));
        assert!(got[64 + local.len()..].iter().all(|&x| x == 0xBB));
        for (i, c) in got[64..64 + local.len()].chunks_exact(8).enumerate() {
            let v = i64::from_le_bytes(c.try_into().unwrap());
            assert_eq!(v, 3 * i as i64 + (i as i64 - 7), "element {i}");
        }

        // Arrived first: its own buffer, and the late post is left for `unpost`.
        let data = pattern(100_000, 9);
        a.send(&b.local_addrs(), 8, data.clone()).await.unwrap();
        let late = Posted {
            buf: buf.clone(),
            offset: 0,
            len: data.len(),
            reduce: None,
        };
        // SAFETY: as above.
        unsafe { b.post(a.id(), 8, late) };
        match b.recv_landed(a.id(), 8).await.unwrap() {
            Landed::Fresh(m) => assert_eq!(m, data),
            Landed::InPlace { .. } => panic!("a message complete before its post landed in place"),
        }
        assert!(b.unpost(a.id(), 8));
    }

    /// The schedulers' unacknowledged bytes go back to zero on every rail once everything is
    /// acknowledged, including the segments lost with a connection that died mid-message: a
    /// leak would make `weighted` see a phantom backlog on that rail forever.
    #[tokio::test]
    async fn in_flight_bytes_return_to_zero_after_a_rail_dies() {
        let a = Endpoint::bind(cfg(Faults {
            kill_rail: Some((1, 1 << 20)),
            ..Default::default()
        }))
        .await
        .unwrap();
        let b = Endpoint::bind(cfg(Faults::default())).await.unwrap();
        for (tag, seed) in [(1, 3), (2, 4)] {
            let data = pattern(8 << 20, seed);
            let (sent, got) = tokio::join!(
                a.send(&b.local_addrs(), tag, data.clone()),
                b.recv(a.id(), tag)
            );
            sent.unwrap();
            assert_eq!(got.unwrap(), data);
        }
        assert_eq!(a.stats().rails[1].failures, 1);
        let in_flight =
            || -> Vec<u64> { a.inner.in_flight.iter().map(|f| f.load(Relaxed)).collect() };
        // A duplicate copy of a resent segment may still be answered after `send` returned.
        for _ in 0..100 {
            if in_flight().iter().all(|&f| f == 0) {
                break;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        assert_eq!(in_flight(), [0, 0, 0]);
        // And what the scheduler sees of the queues is empty too.
        let views =
            a.inner
                .sched
                .lock()
                .unwrap()
                .views(b.id(), 3, Instant::now(), &a.inner.in_flight);
        assert!(
            views
                .iter()
                .all(|v| v.backlog_bytes() == 0 && v.queued == 0),
            "{views:?}"
        );
    }
}
