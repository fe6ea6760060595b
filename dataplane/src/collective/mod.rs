//! Collectives over the data plane: `reduce` and `allreduce` across a group of endpoints
//! (issue 5, seed 003).
//!
//! # Layout
//! * [`plan`] — the pure round/slice plan: which ranges each rank sends and receives, in which
//!   order, for the seed's pipelined recursive halving and for the ring. Tested exhaustively on
//!   symbolic data.
//! * [`DType`], [`ReduceOp`], [`Algorithm`] and the reduction kernels are `crate::elem`'s
//!   (the transport's posted reductions run the same kernels), re-exported here.
//! * this module — the [`Communicator`] and the `Executor` that runs a plan on an
//!   [`Endpoint`], in one working buffer.
//! * [`schedule`], [`redistribution`], [`alltoall`] — personalised all-to-all exchange (seed
//!   004): contention-free schedules of a communication table (shift, pairwise, css) and of
//!   block-cyclic redistributions (the seed's Algorithms 1 and 2), pure; and the
//!   [`Exchanger`](alltoall::Exchanger) that runs them on an [`Endpoint`].
//!
//! How a collective runs: every rank computes its plan (the same parameters everywhere but its
//! rank), sends a small header describing the call to its right neighbour (so ranks that were
//! given different lengths, types, operators or algorithms fail with an error instead of
//! waiting forever), then walks the plan. A send step hands a zero-copy view of its range to the
//! collective's sender task and goes on at once. Each receive is posted to the endpoint as soon
//! as the steps before it that touch its range are complete, so the transport's connection
//! readers write its segments in place or reduce them into place as they arrive, while the next
//! segments are still on the wire and the sender keeps sending — communication and computation
//! genuinely overlap, at segment granularity. A rank that fails
//! tells every other rank (an abort message in the same tag space), so a failure anywhere ends
//! the collective everywhere.

pub mod alltoall;
pub mod plan;
pub mod redistribution;
pub mod schedule;

use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use bytes::{Bytes, BytesMut};
use tokio::sync::{mpsc, watch};
use tokio::task::{JoinHandle, JoinSet};

pub use crate::elem::{Algorithm, DType, Element, ReduceOp, reduce_from, reduce_into};
pub use plan::{Kind, MAX_SLICES, PlanParams, Step};

use crate::elem::{from_bytes, to_bytes};
use crate::endpoint::{Endpoint, Landed, Posted};
use crate::error::{Error, Result};
use crate::peer_id::PeerId;
use crate::shared_buf::SharedBuf;

/// Tags a communicator uses: `[tag_base, tag_base + TAG_SPAN)`. Bits 32..56 number the
/// collective (wrapping), bits 0..32 the message within it. Give each communicator that may
/// share an endpoint with another a base in its own span, e.g. `group << 56`.
/// The low 32 bits `0xFFFF_F000..` are left to `alltoall::Exchanger`, which may share a
/// `tag_base` with a communicator: `plan.rs`'s phase limit keeps collectives below them (a test
/// in `dataplane/tests/alltoall.rs` checks it).
pub const TAG_SPAN: u64 = 1 << 56;
const SEQ_MASK: u64 = (1 << 24) - 1;
/// Step tags of the plan stay below these two (see `plan::MAX_PHASE`).
const HELLO: u64 = 0xFFFF_FFFE;
const ABORT: u64 = 0xFFFF_FFFF;
const HELLO_MAGIC: &[u8; 4] = b"PXC1";
const HELLO_LEN: usize = 4 + 8 + 4 + 4 + 4 + 4;
/// Reductions of at least this many bytes run on a blocking thread, so the runtime's workers
/// stay free for the transport; smaller ones cost less than the hand-over (~10 µs).
const BLOCKING_MIN: usize = 64 << 10;
/// How long a failing rank tries to tell the others before returning its error: a live peer
/// acknowledges a tiny message in well under a millisecond; a dead one never will.
const ABORT_GRACE: Duration = Duration::from_secs(1);

/// How a communicator runs its collectives. Every rank must use the same values.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CollectiveConfig {
    pub algorithm: Algorithm,
    /// Slices per message range: the depth of the pipeline between exchange and reduction. A
    /// power of two lets every send be a zero-copy slice (slices nest across rounds). The seed
    /// uses 2; the default is 4 by the `allreduce` benchmark at 64 MiB on loopback (N = 2: 4
    /// slices 91 ms, 8 slices 102–135 ms, 2 slices 105–144 ms, 1 slice 157 ms, on a shared
    /// 2-core machine whose run-to-run noise was ±20 %): one slice loses the overlap of
    /// reduction with exchange, more slices add per-message acknowledgement gaps.
    pub slices: usize,
    /// Messages of one collective in flight at once from this rank. 1 keeps them in plan
    /// order on the wire, so the receiver gets slice s complete before slice s+1 starts and
    /// can reduce it while s+1 arrives; more lets slices interleave segment by segment.
    pub send_window: usize,
}

impl Default for CollectiveConfig {
    fn default() -> Self {
        CollectiveConfig { algorithm: Algorithm::Halving, slices: 4, send_window: 1 }
    }
}

/// Where one collective's time went, as this rank saw it. The parts overlap the transport's own
/// work (which runs on other tasks), so they need not add up to `total`.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Profile {
    pub total: Duration,
    /// User-space copies: the caller's buffer into a sendable one, sends spanning several
    /// pieces, and the result back into the caller's buffer.
    pub copy: Duration,
    pub copied_bytes: u64,
    /// Reduction kernels.
    pub reduce: Duration,
    pub reduced_bytes: u64,
    /// Waiting for a message that had not arrived yet: communication not hidden behind work.
    pub wait: Duration,
    /// Waiting at the end for the last sends to be acknowledged.
    pub drain: Duration,
    pub bytes_sent: u64,
    pub bytes_received: u64,
    pub messages_sent: u64,
}

/// A group of endpoints that run collectives together: ordered ranks, this rank, a tag space.
///
/// Every rank must call the same collectives in the same order (each call takes the next tag
/// range); calls on one communicator run one at a time.
pub struct Communicator {
    endpoint: Arc<Endpoint>,
    ranks: Arc<Vec<Vec<SocketAddr>>>,
    ids: Vec<PeerId>,
    rank: usize,
    tag_base: u64,
    cfg: CollectiveConfig,
    seq: AtomicU64,
    serial: tokio::sync::Mutex<()>,
    profile: Mutex<Profile>,
    /// The allocation the last `allreduce`/`reduce` copied the caller's buffer into.
    scratch: Mutex<Vec<u8>>,
}

impl Communicator {
    /// A communicator over `ranks` (each rank's rail addresses, what its
    /// [`Endpoint::local_addrs`] returned), in which this endpoint is `rank`.
    pub fn new(
        endpoint: Arc<Endpoint>,
        ranks: Vec<Vec<SocketAddr>>,
        rank: usize,
        tag_base: u64,
        cfg: CollectiveConfig,
    ) -> Result<Communicator> {
        if ranks.is_empty() {
            return Err(Error::Config("a communicator needs at least one rank".into()));
        }
        if rank >= ranks.len() {
            return Err(Error::Config(format!("rank {rank} is outside a group of {}", ranks.len())));
        }
        if let Some(r) = ranks.iter().position(|a| a.is_empty()) {
            return Err(Error::Config(format!("rank {r} has no rail address")));
        }
        if ranks[rank][0] != endpoint.id().0 {
            return Err(Error::Config(format!(
                "rank {rank} is listed at {} but this endpoint is {}",
                ranks[rank][0],
                endpoint.id()
            )));
        }
        let ids: Vec<PeerId> = ranks.iter().map(|a| PeerId(a[0])).collect();
        for (i, id) in ids.iter().enumerate() {
            if let Some(j) = ids[..i].iter().position(|x| x == id) {
                return Err(Error::Config(format!("ranks {j} and {i} are both {id}")));
            }
        }
        if !(1..=MAX_SLICES).contains(&cfg.slices) {
            return Err(Error::Config(format!("slices {} must be in 1..={MAX_SLICES}", cfg.slices)));
        }
        if cfg.send_window == 0 {
            return Err(Error::Config("send_window must be at least 1".into()));
        }
        Ok(Communicator {
            endpoint,
            ranks: Arc::new(ranks),
            ids,
            rank,
            tag_base,
            cfg,
            seq: AtomicU64::new(0),
            serial: tokio::sync::Mutex::new(()),
            profile: Mutex::new(Profile::default()),
            scratch: Mutex::new(Vec::new()),
        })
    }

    pub fn rank(&self) -> usize {
        self.rank
    }

    pub fn size(&self) -> usize {
        self.ranks.len()
    }

    pub fn config(&self) -> CollectiveConfig {
        self.cfg
    }

    /// Where the last collective's time went on this rank.
    pub fn last_profile(&self) -> Profile {
        *self.profile.lock().expect("profile lock")
    }

    /// Replaces `buf` (raw little-endian `dtype` elements) with the element-wise reduction of
    /// every rank's buffer, bitwise identical on every rank.
    pub async fn allreduce(&self, buf: &mut [u8], dtype: DType, op: ReduceOp) -> Result<()> {
        let t = Instant::now();
        let work = self.copy_in(buf);
        let copy_in = t.elapsed();
        let work = self.run(Kind::Allreduce, work, dtype, op).await?;
        let t = Instant::now();
        // SAFETY: the collective is over and succeeded: every send returned (no writer reads
        // the buffer) and every posted message was delivered or withdrawn (none writes it).
        buf.copy_from_slice(unsafe { work.range(0, work.len()) });
        self.reclaim(work).await;
        self.add_copy(copy_in + t.elapsed(), 2 * buf.len() as u64);
        Ok(())
    }

    /// The caller's buffer copied into the working buffer the last call left behind: reusing
    /// memory that is already mapped costs a plain memcpy, where fresh memory costs a page
    /// fault per 4 KiB (measured: 64 MiB into fresh memory took several times longer than into
    /// reused memory on the benchmark machine).
    fn copy_in(&self, buf: &[u8]) -> Arc<SharedBuf> {
        let mut v = std::mem::take(&mut *self.scratch.lock().expect("scratch lock"));
        v.clear();
        v.extend_from_slice(buf);
        Arc::new(SharedBuf::from_vec(v))
    }

    /// Keeps the working buffer's allocation for the next call if nothing else holds it any
    /// more (a message still landing in it after a failure, say, keeps it alive elsewhere).
    async fn reclaim(&self, work: Arc<SharedBuf>) {
        if let Ok(w) = sole_owner(work).await {
            // SAFETY: we hold the only reference.
            *self.scratch.lock().expect("scratch lock") = unsafe { w.take() };
        }
    }

    /// Reduces every rank's `buf` into the root's `buf`; the other ranks' buffers are left
    /// unchanged.
    pub async fn reduce(&self, buf: &mut [u8], root: usize, dtype: DType, op: ReduceOp) -> Result<()> {
        let t = Instant::now();
        let work = self.copy_in(buf);
        let copy_in = t.elapsed();
        let work = self.run(Kind::Reduce { root }, work, dtype, op).await?;
        let t = Instant::now();
        let mut copied = buf.len();
        if self.rank == root {
            // SAFETY: as in `allreduce`: the collective is over.
            buf.copy_from_slice(unsafe { work.range(0, work.len()) });
            copied += buf.len();
        }
        self.reclaim(work).await;
        self.add_copy(copy_in + t.elapsed(), copied as u64);
        Ok(())
    }

    /// [`allreduce`](Self::allreduce) on an owned buffer. When the caller passed the only
    /// reference to `data`, the collective runs in `data`'s own memory and the result is that
    /// memory: no copy at all. Else `data` is copied first.
    pub async fn allreduce_bytes(&self, data: Bytes, dtype: DType, op: ReduceOp) -> Result<Bytes> {
        let work = self.own(data);
        let work = self.run(Kind::Allreduce, work, dtype, op).await?;
        Ok(self.result_bytes(work).await)
    }

    /// [`reduce`](Self::reduce) on an owned buffer: the result at the root, `None` elsewhere.
    pub async fn reduce_bytes(&self, data: Bytes, root: usize, dtype: DType, op: ReduceOp) -> Result<Option<Bytes>> {
        let work = self.own(data);
        let work = self.run(Kind::Reduce { root }, work, dtype, op).await?;
        if self.rank != root {
            return Ok(None);
        }
        Ok(Some(self.result_bytes(work).await))
    }

    /// `data`'s allocation as the working buffer, if `data` is its only reference; else a copy.
    fn own(&self, data: Bytes) -> Arc<SharedBuf> {
        let len = data.len();
        let v = match data.try_into_mut() {
            Ok(m) => Vec::from(m),
            Err(data) => {
                let t = Instant::now();
                let v = data.to_vec();
                self.add_copy(t.elapsed(), len as u64);
                v
            }
        };
        Arc::new(SharedBuf::from_vec(v))
    }

    /// The finished working buffer as `Bytes`: its own allocation when nothing else holds it
    /// (the usual case), else a copy.
    async fn result_bytes(&self, work: Arc<SharedBuf>) -> Bytes {
        match sole_owner(work).await {
            // SAFETY: we hold the only reference.
            Ok(w) => Bytes::from(unsafe { w.take() }),
            Err(work) => {
                let t = Instant::now();
                // SAFETY: the collective is over: nothing writes the buffer.
                let out = Bytes::copy_from_slice(unsafe { work.range(0, work.len()) });
                self.add_copy(t.elapsed(), out.len() as u64);
                out
            }
        }
    }

    /// [`allreduce`](Self::allreduce) on a typed slice.
    pub async fn allreduce_typed<T: Element>(&self, buf: &mut [T], op: ReduceOp) -> Result<()> {
        let mut raw = to_bytes(buf);
        self.allreduce(&mut raw, T::DTYPE, op).await?;
        from_bytes(&raw, buf);
        Ok(())
    }

    /// [`reduce`](Self::reduce) on a typed slice.
    pub async fn reduce_typed<T: Element>(&self, buf: &mut [T], root: usize, op: ReduceOp) -> Result<()> {
        let mut raw = to_bytes(buf);
        self.reduce(&mut raw, root, T::DTYPE, op).await?;
        if self.rank == root {
            from_bytes(&raw, buf);
        }
        Ok(())
    }

    fn add_copy(&self, d: Duration, bytes: u64) {
        let mut p = self.profile.lock().expect("profile lock");
        p.copy += d;
        p.copied_bytes += bytes;
        p.total += d;
    }

    /// Validates the call, runs its plan on `work` (in place), and records the profile.
    async fn run(&self, kind: Kind, work: Arc<SharedBuf>, dtype: DType, op: ReduceOp) -> Result<Arc<SharedBuf>> {
        let _serial = self.serial.lock().await;
        let n = self.ranks.len();
        let size = dtype.size();
        if !work.len().is_multiple_of(size) {
            return Err(Error::Config(format!(
                "a {dtype} buffer of {} bytes is not a whole number of {size}-byte elements",
                work.len()
            )));
        }
        if let Kind::Reduce { root } = kind
            && root >= n
        {
            return Err(Error::Config(format!("root {root} is outside a group of {n}")));
        }
        let seq = self.seq.fetch_add(1, Relaxed) & SEQ_MASK;
        let base = self.tag_base.wrapping_add(seq << 32);
        let params = PlanParams {
            ranks: n,
            rank: self.rank,
            len: work.len() / size,
            slices: self.cfg.slices,
            algorithm: self.cfg.algorithm,
            kind,
        };
        let started = Instant::now();
        let mut prof = Profile::default();
        let result = if n == 1 {
            Ok(())
        } else {
            let mut ex = Executor {
                comm: self,
                base,
                work: work.clone(),
                dtype,
                op,
                steps: plan::plan(&params),
                hello: hello(&params, dtype, op),
                posted: Vec::new(),
            };
            let r = ex.execute(&mut prof).await;
            // Withdraws the posts no message claimed; dropping `run`'s future mid-way does the
            // same (see `Drop for Executor`).
            drop(ex);
            r
        };
        prof.total = started.elapsed();
        *self.profile.lock().expect("profile lock") = prof;
        result.map(|()| work)
    }

    /// Receives the left neighbour's description of the call and compares it with ours.
    async fn check_hello(
        &self,
        left: usize,
        base: u64,
        mine: &Bytes,
        sender: &mut JoinHandle<Result<()>>,
        prof: &mut Profile,
    ) -> Result<()> {
        let t = Instant::now();
        let got = self.recv_or_abort(left, base.wrapping_add(HELLO), base, sender).await?;
        prof.wait += t.elapsed();
        let Landed::Fresh(got) = got else {
            return Err(Error::Protocol("a collective header landed in place".into()));
        };
        if got[..] != mine[..] {
            return Err(Error::Protocol(format!(
                "rank {left} started a different collective: it has {}, this rank has {}",
                describe_hello(&got),
                describe_hello(mine)
            )));
        }
        Ok(())
    }

    /// The message `tag` from rank `from`, unless some rank aborts the collective or our sender
    /// fails first.
    async fn recv_or_abort(
        &self,
        from: usize,
        tag: u64,
        base: u64,
        sender: &mut JoinHandle<Result<()>>,
    ) -> Result<Landed> {
        tokio::select! {
            m = self.endpoint.recv_landed(self.ids[from], tag) => m,
            a = self.endpoint.recv_any(base.wrapping_add(ABORT)) => {
                let (peer, why) = a?;
                let who = self.ids.iter().position(|id| *id == peer)
                    .map_or_else(|| peer.to_string(), |r| format!("rank {r}"));
                Err(Error::Peer(format!(
                    "{ABORTED} by {who}: {}",
                    String::from_utf8_lossy(&why)
                )))
            }
            s = &mut *sender => Err(match s {
                Ok(Err(e)) => e,
                Ok(Ok(())) => Error::Protocol("the collective's sender stopped early".into()),
                Err(e) => Error::Peer(format!("collective sender task: {e}")),
            }),
        }
    }

    /// Tells every other rank this collective failed, so none waits for us forever; gives up
    /// after `ABORT_GRACE` (a dead peer never acknowledges).
    async fn broadcast_abort(&self, base: u64, e: &Error) {
        let why = Bytes::from(format!("rank {}: {e}", self.rank));
        let mut sends = JoinSet::new();
        for r in (0..self.ranks.len()).filter(|&r| r != self.rank) {
            let (ep, addrs, why) = (self.endpoint.clone(), self.ranks[r].clone(), why.clone());
            sends.spawn(async move { ep.send(&addrs, base.wrapping_add(ABORT), why).await });
        }
        let _ = tokio::time::timeout(ABORT_GRACE, async { while sends.join_next().await.is_some() {} }).await;
    }
}

/// The prefix of the error a rank reports when another rank aborted the collective.
const ABORTED: &str = "collective aborted";

/// One collective in progress on one rank: walks its plan over the working buffer.
///
/// Memory discipline (what makes the `unsafe` accesses to `work` sound). Sends read ranges of
/// `work` through zero-copy views; posted receives write ranges of it from the transport's
/// tasks, and reduce into them. The executor
/// * takes a send's view only when it reaches the send in plan order, after every earlier
///   receive was delivered, so the range holds its final value and nothing writes it;
/// * posts receive j only once every earlier step whose range overlaps j's is complete: earlier
///   receives delivered, earlier sends returned by the endpoint (which returns only when no
///   connection writer reads the message any more); until receive j is delivered, no later
///   step touches its range, because the executor waits for j before going on;
/// * for a message that arrived before its post (it landed in its own buffer), waits for the
///   same sends before copying or reducing it into `work` itself.
///
/// So every byte of `work` is, at any moment, either read by any number of sends or written by
/// exactly one receive.
struct Executor<'a> {
    comm: &'a Communicator,
    base: u64,
    work: Arc<SharedBuf>,
    dtype: DType,
    op: ReduceOp,
    steps: Vec<Step>,
    /// The call's description, sent to the right neighbour first.
    hello: Bytes,
    /// Receives posted (their step indices), to withdraw the unclaimed ones at the end.
    posted: Vec<usize>,
}

/// For every receive step: the last earlier send and the last earlier receive whose ranges
/// overlap its own. Sweeps the plan once over an interval map of "who touched this range
/// last", so it stays O(steps · log) even with thousands of slices.
fn dependencies(steps: &[Step]) -> Vec<(Option<usize>, Option<usize>)> {
    // start → (end, last send, last receive), non-overlapping intervals.
    let mut map: std::collections::BTreeMap<usize, (usize, Option<usize>, Option<usize>)> =
        std::collections::BTreeMap::new();
    let mut deps = vec![(None, None); steps.len()];
    for (i, step) in steps.iter().enumerate() {
        let (range, is_recv) = match step {
            Step::Send { range, .. } => (range.clone(), false),
            Step::Recv { range, .. } => (range.clone(), true),
        };
        if range.is_empty() {
            continue;
        }
        // Cut the intervals that straddle the range's ends, so it is covered by whole ones.
        for at in [range.start, range.end] {
            if let Some((&s, &(e, ls, lr))) = map.range(..at).next_back()
                && e > at
            {
                map.insert(s, (at, ls, lr));
                map.insert(at, (e, ls, lr));
            }
        }
        let inside: Vec<usize> = map.range(range.start..range.end).map(|(&s, _)| s).collect();
        let (mut ls, mut lr) = (None, None);
        for s in &inside {
            let (_, a, b) = map[s];
            ls = ls.max(a);
            lr = lr.max(b);
        }
        if is_recv {
            deps[i] = (ls, lr);
        }
        // The range now belongs to step i; the gaps between old intervals get it too.
        let mut cur = range.start;
        let mut fill = Vec::new();
        for s in &inside {
            let (e, a, b) = map[s];
            if *s > cur {
                fill.push((cur, *s));
            }
            let (a, b) = if is_recv { (a, Some(i)) } else { (Some(i), b) };
            map.insert(*s, (e, a, b));
            cur = e;
        }
        if cur < range.end {
            fill.push((cur, range.end));
        }
        for (s, e) in fill {
            let v = if is_recv { (e, ls, Some(i)) } else { (e, Some(i), lr) };
            map.insert(s, v);
        }
    }
    deps
}

impl Executor<'_> {
    async fn execute(&mut self, prof: &mut Profile) -> Result<()> {
        let comm = self.comm;
        let n = comm.ranks.len();
        let size = self.dtype.size();
        let (tx, rx) = mpsc::unbounded_channel();
        let (done_tx, mut sends_done) = watch::channel(0usize);
        let mut sender = SenderTask(tokio::spawn(sender_loop(
            comm.endpoint.clone(),
            comm.ranks.clone(),
            rx,
            comm.cfg.send_window,
            done_tx,
        )));
        let hello = self.hello.clone();
        let right = (comm.rank + 1) % n;
        let left = (comm.rank + n - 1) % n;
        let _ = tx.send((usize::MAX, right, self.base.wrapping_add(HELLO), hello.clone()));
        let deps = dependencies(&self.steps);
        // Receives not posted yet, in plan order; the next one to consider first.
        let mut unposted: Vec<usize> =
            (0..self.steps.len()).filter(|&j| matches!(self.steps[j], Step::Recv { .. })).collect();
        let mut recvs_done: Option<usize> = None;
        self.post_ready(&mut unposted, &deps, 0, recvs_done);
        let mut hello_checked = false;

        let outcome: Result<()> = async {
            for i in 0..self.steps.len() {
                match self.steps[i].clone() {
                    Step::Send { to, tag, range } => {
                        // SAFETY: see `Executor`: every earlier receive was delivered and no
                        // later one touching this range is posted before this send returns.
                        let bytes = unsafe { self.work.view(range.start * size..range.end * size) };
                        prof.bytes_sent += bytes.len() as u64;
                        prof.messages_sent += 1;
                        // The sender only stops early on an error, which the next receive
                        // reports.
                        let _ = tx.send((i, to, self.base.wrapping_add(u64::from(tag)), bytes));
                    }
                    Step::Recv { from, tag, range, reduce } => {
                        if !hello_checked {
                            comm.check_hello(left, self.base, &hello, &mut sender.0, prof).await?;
                            hello_checked = true;
                        }
                        let t = Instant::now();
                        let landed = loop {
                            tokio::select! {
                                biased;
                                m = comm.recv_or_abort(from, self.base.wrapping_add(u64::from(tag)), self.base, &mut sender.0) => break m?,
                                Ok(()) = sends_done.changed() => {
                                    let w = *sends_done.borrow_and_update();
                                    self.post_ready(&mut unposted, &deps, w, recvs_done);
                                }
                            }
                        };
                        prof.wait += t.elapsed();
                        let want = range.len() * size;
                        let start = range.start * size;
                        prof.bytes_received += want as u64;
                        match landed {
                            Landed::InPlace { reduce: took } => {
                                if reduce {
                                    prof.reduce += took;
                                    prof.reduced_bytes += want as u64;
                                }
                            }
                            Landed::Fresh(msg) => {
                                self.comm.endpoint.unpost(self.comm.ids[from], self.base.wrapping_add(u64::from(tag)));
                                if msg.len() != want {
                                    return Err(Error::Protocol(format!(
                                        "rank {from} sent {} bytes for elements {}..{} (tag {tag:#x}), this rank expected {want}: do all ranks pass buffers of the same length?",
                                        msg.len(),
                                        range.start,
                                        range.end
                                    )));
                                }
                                // It arrived before its post: bring it into place here, once
                                // the sends that read its range are done.
                                if let Some(d) = deps[i].0 {
                                    while *sends_done.borrow() <= d {
                                        if sends_done.changed().await.is_err() {
                                            break;
                                        }
                                    }
                                }
                                let t = Instant::now();
                                let took = land(self.work.clone(), start, msg, reduce.then_some((self.dtype, self.op))).await?;
                                if reduce {
                                    prof.reduce += took;
                                    prof.reduced_bytes += want as u64;
                                } else {
                                    prof.copy += t.elapsed();
                                    prof.copied_bytes += want as u64;
                                }
                            }
                        }
                        recvs_done = Some(i);
                        let w = *sends_done.borrow();
                        self.post_ready(&mut unposted, &deps, w, recvs_done);
                    }
                }
            }
            if !hello_checked {
                comm.check_hello(left, self.base, &hello, &mut sender.0, prof).await?;
            }
            Ok(())
        }
        .await;

        drop(tx);
        match outcome {
            Ok(()) => {
                let t = Instant::now();
                let sent = (&mut sender.0).await;
                prof.drain = t.elapsed();
                match sent {
                    Ok(r) => r,
                    Err(e) => Err(Error::Peer(format!("collective sender task: {e}"))),
                }
            }
            Err(e) => {
                sender.0.abort();
                if !matches!(&e, Error::Peer(m) if m.starts_with(ABORTED)) {
                    comm.broadcast_abort(self.base, &e).await;
                }
                Err(e)
            }
        }
    }

    /// Posts every receive, in plan order, whose dependencies are complete: sends before step
    /// `sends_done` returned, receives up to `recvs_done` delivered.
    fn post_ready(
        &mut self,
        unposted: &mut Vec<usize>,
        deps: &[(Option<usize>, Option<usize>)],
        sends_done: usize,
        recvs_done: Option<usize>,
    ) {
        let size = self.dtype.size();
        let comm = self.comm;
        unposted.retain(|&j| {
            // A receive already delivered (its message beat its post and was taken from its
            // own buffer) is never posted: a post made now would lend its range, which later
            // steps use, to whatever message arrives next under its tag.
            if recvs_done.is_some_and(|r| j <= r) {
                return false;
            }
            let (ls, lr) = deps[j];
            let ready = ls.is_none_or(|s| s < sends_done) && lr.is_none_or(|r| Some(r) <= recvs_done);
            if !ready {
                return true;
            }
            let Step::Recv { from, tag, range, reduce } = &self.steps[j] else {
                return false;
            };
            if range.is_empty() {
                return false;
            }
            let post = Posted {
                buf: self.work.clone(),
                offset: range.start * size,
                len: range.len() * size,
                reduce: reduce.then_some((self.dtype, self.op)),
            };
            // SAFETY: see `Executor`: every earlier step touching this range is complete, and
            // no later one starts before this receive is delivered (or withdrawn at the end).
            unsafe { comm.endpoint.post(comm.ids[*from], self.base.wrapping_add(u64::from(*tag)), post) };
            self.posted.push(j);
            false
        });
    }

    /// Withdraws the posts no message claimed (the collective failed, or a message arrived
    /// before its post).
    fn withdraw_posts(&mut self) {
        for j in self.posted.drain(..) {
            if let Step::Recv { from, tag, .. } = &self.steps[j] {
                self.comm.endpoint.unpost(self.comm.ids[*from], self.base.wrapping_add(u64::from(*tag)));
            }
        }
    }
}

/// Whichever way the collective ends — finished, failed, or its future dropped mid-way (the
/// caller's timeout, a cancelled task) — the receives it posted and no message claimed are
/// withdrawn from the endpoint: each holds the working buffer, and a stale post would keep it
/// alive for as long as the endpoint lives. (A post a message already claimed is left to that
/// message, which holds its own reference to the buffer until it is delivered.) The sender task
/// is aborted by its own guard, `SenderTask`.
impl Drop for Executor<'_> {
    fn drop(&mut self) {
        self.withdraw_posts();
    }
}

/// Aborts the sender task when the collective ends early (its owner is the executor).
struct SenderTask(JoinHandle<Result<()>>);

impl Drop for SenderTask {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// Sends the executor's messages in order, at most `window` at once; stops at the first error.
/// Publishes on `done` the first step index whose send has not returned yet (every send of an
/// earlier step has); the header (index `usize::MAX`) is not counted.
async fn sender_loop(
    ep: Arc<Endpoint>,
    ranks: Arc<Vec<Vec<SocketAddr>>>,
    mut rx: mpsc::UnboundedReceiver<(usize, usize, u64, Bytes)>,
    window: usize,
    done: watch::Sender<usize>,
) -> Result<()> {
    let mut inflight = JoinSet::new();
    // Steps sent and not yet returned, in order; and those that returned out of order.
    let mut pending: std::collections::VecDeque<usize> = std::collections::VecDeque::new();
    let mut finished: std::collections::BTreeSet<usize> = std::collections::BTreeSet::new();
    let mut issued_to = 0usize;
    let mut settle = |step: usize, pending: &mut std::collections::VecDeque<usize>, issued_to: usize| {
        if step != usize::MAX {
            finished.insert(step);
        }
        while let Some(&f) = pending.front()
            && finished.remove(&f)
        {
            pending.pop_front();
        }
        let w = pending.front().copied().unwrap_or(issued_to);
        done.send_if_modified(|v| {
            let changed = *v != w;
            *v = w;
            changed
        });
    };
    loop {
        tokio::select! {
            biased;
            Some(r) = inflight.join_next(), if !inflight.is_empty() => {
                let step = flatten(r)?;
                settle(step, &mut pending, issued_to);
            }
            m = rx.recv(), if inflight.len() < window => {
                let Some((step, to, tag, data)) = m else { break };
                if step != usize::MAX {
                    pending.push_back(step);
                    issued_to = step + 1;
                }
                let (ep, ranks) = (ep.clone(), ranks.clone());
                inflight.spawn(async move { ep.send(&ranks[to], tag, data).await.map(|()| step) });
            }
        }
    }
    while let Some(r) = inflight.join_next().await {
        let step = flatten(r)?;
        settle(step, &mut pending, issued_to);
    }
    Ok(())
}

fn flatten(r: std::result::Result<Result<usize>, tokio::task::JoinError>) -> Result<usize> {
    r.map_err(|e| Error::Peer(format!("collective send task: {e}")))?
}

/// The buffer itself once this is its last `Arc`. When a collective ends, a transport task
/// may still hold a view of it for a moment (a connection's drain task drops its copy of the
/// last segment only when it next runs, which can be after the acknowledgement arrived), so
/// this waits up to 50 ms for such holders before giving up (measured: without the wait, one
/// 256 MiB allreduce in six paid a 147 ms copy into fresh memory).
async fn sole_owner(mut work: Arc<SharedBuf>) -> std::result::Result<SharedBuf, Arc<SharedBuf>> {
    let until = Instant::now() + Duration::from_millis(50);
    loop {
        match Arc::try_unwrap(work) {
            Ok(w) => return Ok(w),
            Err(w) if Instant::now() >= until => return Err(w),
            Err(w) => {
                work = w;
                tokio::time::sleep(Duration::from_micros(200)).await;
            }
        }
    }
}

/// Brings a message that arrived in its own buffer into `work` at byte `start`: reduces it in
/// (`dst = op(msg, dst)`, the order a posted reduction uses) or copies it; large ones on a
/// blocking thread, so the runtime's workers stay free for the transport. Returns the time the
/// work itself took.
async fn land(
    work: Arc<SharedBuf>,
    start: usize,
    msg: BytesMut,
    reduce: Option<(DType, ReduceOp)>,
) -> Result<Duration> {
    let len = msg.len();
    let job = move || {
        let t = Instant::now();
        // SAFETY: the executor waited for every step touching this range (see `Executor`).
        let dst = unsafe { work.range_mut(start, msg.len()) };
        match reduce {
            Some((dtype, op)) => reduce_from(dtype, op, dst, &msg),
            None => dst.copy_from_slice(&msg),
        }
        t.elapsed()
    };
    if len < BLOCKING_MIN {
        return Ok(job());
    }
    tokio::task::spawn_blocking(job).await.map_err(|e| Error::Peer(format!("reduction task: {e}")))
}

/// The call's description that each rank sends its right neighbour.
fn hello(p: &PlanParams, dtype: DType, op: ReduceOp) -> Bytes {
    let mut v = Vec::with_capacity(HELLO_LEN);
    v.extend_from_slice(HELLO_MAGIC);
    v.extend_from_slice(&(p.len as u64).to_le_bytes());
    v.extend_from_slice(&[dtype.code(), op.code(), p.algorithm.code(), 0]);
    let root = match p.kind {
        Kind::Allreduce => u32::MAX,
        Kind::Reduce { root } => root as u32,
    };
    v.extend_from_slice(&root.to_le_bytes());
    v.extend_from_slice(&(p.slices as u32).to_le_bytes());
    v.extend_from_slice(&(p.ranks as u32).to_le_bytes());
    Bytes::from(v)
}

fn describe_hello(b: &[u8]) -> String {
    if b.len() != HELLO_LEN || &b[..4] != HELLO_MAGIC {
        return format!("an unreadable header of {} bytes", b.len());
    }
    let u32_at = |i: usize| u32::from_le_bytes([b[i], b[i + 1], b[i + 2], b[i + 3]]);
    let mut len = [0u8; 8];
    len.copy_from_slice(&b[4..12]);
    let root = u32_at(16);
    format!(
        "{} {} elements of {} by {} ({}, {} slices, {} ranks)",
        if root == u32::MAX { "allreduce of".to_string() } else { format!("reduce to rank {root} of") },
        u64::from_le_bytes(len),
        DType::from_code(b[12]).map_or("?", DType::name),
        ReduceOp::from_code(b[13]).map_or("?", ReduceOp::name),
        Algorithm::from_code(b[14]).map_or("?", Algorithm::name),
        u32_at(20),
        u32_at(24),
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::endpoint::EndpointConfig;

    /// A collective whose future is dropped while it waits for a peer that never sends (a
    /// caller's timeout, a cancelled task) leaves no posted receive in the endpoint, and
    /// nothing there keeps its working buffer alive.
    #[tokio::test]
    async fn a_cancelled_collective_withdraws_its_posts_and_releases_its_buffer() {
        let a = Arc::new(Endpoint::bind(EndpointConfig::default()).await.unwrap());
        // Rank 1's endpoint acknowledges what rank 0 sends but never joins the collective.
        let b = Endpoint::bind(EndpointConfig::default()).await.unwrap();
        let ranks = vec![a.local_addrs(), b.local_addrs()];
        let comm = Communicator::new(a.clone(), ranks, 0, 0, CollectiveConfig::default()).unwrap();
        let work = Arc::new(SharedBuf::from_vec(vec![0u8; 1 << 20]));

        let posted = async {
            while a.posted_receives() == 0 {
                tokio::task::yield_now().await;
            }
        };
        tokio::select! {
            r = comm.run(Kind::Allreduce, work.clone(), DType::F32, ReduceOp::Sum) => {
                panic!("the collective ended without its peer: {:?}", r.err());
            }
            () = posted => {}
        }
        // The collective's future is dropped here, mid-way, with its receives posted.
        assert_eq!(a.posted_receives(), 0, "the cancelled collective's posts were withdrawn");

        // The sends it had started are abandoned; the transport lets go of their views of the
        // buffer once their segments are answered (real sockets: this waits for I/O, not for a
        // timeout).
        let deadline = Instant::now() + Duration::from_secs(10);
        while Arc::strong_count(&work) > 1 && Instant::now() < deadline {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        assert_eq!(Arc::strong_count(&work), 1, "nothing but the test holds the working buffer");
        assert_eq!(a.posted_receives(), 0);
        b.shutdown().await;
    }
}
