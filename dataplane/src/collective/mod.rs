//! Collectives over the data plane: `reduce` and `allreduce` across a group of endpoints
//! (issue 5, seed 003).
//!
//! # Layout
//! * [`plan`] — the pure round/slice plan: which ranges each rank sends and receives, in which
//!   order, for the seed's pipelined recursive halving and for the ring. Tested exhaustively on
//!   symbolic data.
//! * [`ops`] — [`DType`], [`ReduceOp`], [`Algorithm`] (parsed from their names) and the
//!   reduction kernels over raw little-endian bytes.
//! * `rope` — the working buffer as immutable pieces, so sends are zero-copy slices and each
//!   reduction writes into the buffer its message arrived in.
//! * this module — the [`Communicator`] and the executor that runs a plan on an
//!   [`Endpoint`].
//!
//! How a collective runs: every rank computes its plan (the same parameters everywhere but its
//! rank), sends a small header describing the call to its right neighbour (so ranks that were
//! given different lengths, types, operators or algorithms fail with an error instead of
//! waiting forever), then walks the plan. A send step hands a slice of the rope to the
//! collective's sender task and goes on at once; a receive step waits for its message and
//! reduces it on a blocking thread while the transport keeps receiving the next slices and the
//! sender keeps sending — communication and computation genuinely overlap. A rank that fails
//! tells every other rank (an abort message in the same tag space), so a failure anywhere ends
//! the collective everywhere.

pub mod ops;
pub mod plan;
mod rope;

use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use bytes::{Bytes, BytesMut};
use tokio::sync::mpsc;
use tokio::task::{JoinHandle, JoinSet};

pub use ops::{Algorithm, DType, Element, ReduceOp, reduce_into};
pub use plan::{Kind, MAX_SLICES, PlanParams, Step};
use rope::Rope;

use crate::endpoint::Endpoint;
use crate::error::{Error, Result};
use crate::wire::PeerId;

/// Tags a communicator uses: `[tag_base, tag_base + TAG_SPAN)`. Bits 32..56 number the
/// collective (wrapping), bits 0..32 the message within it. Give each communicator that may
/// share an endpoint with another a base in its own span, e.g. `group << 56`.
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
        CollectiveConfig {
            algorithm: Algorithm::Halving,
            slices: 4,
            send_window: 1,
        }
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
            return Err(Error::Config(
                "a communicator needs at least one rank".into(),
            ));
        }
        if rank >= ranks.len() {
            return Err(Error::Config(format!(
                "rank {rank} is outside a group of {}",
                ranks.len()
            )));
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
            return Err(Error::Config(format!(
                "slices {} must be in 1..={MAX_SLICES}",
                cfg.slices
            )));
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
        let data = self.copy_in(buf);
        let copy_in = t.elapsed();
        let rope = self.run(Kind::Allreduce, data.clone(), dtype, op).await?;
        let t = Instant::now();
        let copied = rope.write_to(buf, Some(&data));
        drop(rope);
        self.reclaim(data);
        self.add_copy(copy_in + t.elapsed(), (buf.len() + copied) as u64);
        Ok(())
    }

    /// The caller's buffer as sendable bytes, copied into the scratch buffer the last call
    /// left behind: reusing memory that is already mapped costs a plain memcpy, where fresh
    /// memory costs a page fault per 4 KiB (measured: 64 MiB into fresh memory took several
    /// times longer than into reused memory on the benchmark machine).
    fn copy_in(&self, buf: &[u8]) -> Bytes {
        let mut v = std::mem::take(&mut *self.scratch.lock().expect("scratch lock"));
        v.clear();
        v.extend_from_slice(buf);
        Bytes::from(v)
    }

    /// Keeps `data`'s allocation for the next call if nothing else holds it any more.
    fn reclaim(&self, data: Bytes) {
        if let Ok(m) = data.try_into_mut() {
            *self.scratch.lock().expect("scratch lock") = Vec::from(m);
        }
    }

    /// Reduces every rank's `buf` into the root's `buf`; the other ranks' buffers are left
    /// unchanged.
    pub async fn reduce(
        &self,
        buf: &mut [u8],
        root: usize,
        dtype: DType,
        op: ReduceOp,
    ) -> Result<()> {
        let t = Instant::now();
        let data = self.copy_in(buf);
        let copy_in = t.elapsed();
        let rope = self
            .run(Kind::Reduce { root }, data.clone(), dtype, op)
            .await?;
        let t = Instant::now();
        let copied = if self.rank == root {
            rope.write_to(buf, Some(&data))
        } else {
            0
        };
        drop(rope);
        self.reclaim(data);
        self.add_copy(copy_in + t.elapsed(), (buf.len() + copied) as u64);
        Ok(())
    }

    /// [`allreduce`](Self::allreduce) on an owned buffer: no copy in; the result is assembled
    /// (one copy) into `data`'s own allocation when the caller passed the only reference to it
    /// (its memory is already mapped), else into a new one.
    pub async fn allreduce_bytes(&self, data: Bytes, dtype: DType, op: ReduceOp) -> Result<Bytes> {
        let rope = self.run(Kind::Allreduce, data.clone(), dtype, op).await?;
        let t = Instant::now();
        let (out, copied) = rope.into_bytes_reusing(data);
        self.add_copy(t.elapsed(), copied as u64);
        Ok(out)
    }

    /// [`reduce`](Self::reduce) on an owned buffer: the result at the root, `None` elsewhere.
    pub async fn reduce_bytes(
        &self,
        data: Bytes,
        root: usize,
        dtype: DType,
        op: ReduceOp,
    ) -> Result<Option<Bytes>> {
        let rope = self.run(Kind::Reduce { root }, data, dtype, op).await?;
        if self.rank != root {
            return Ok(None);
        }
        let t = Instant::now();
        let (out, copied) = rope.into_bytes();
        self.add_copy(t.elapsed(), copied as u64);
        Ok(Some(out))
    }

    /// [`allreduce`](Self::allreduce) on a typed slice.
    pub async fn allreduce_typed<T: Element>(&self, buf: &mut [T], op: ReduceOp) -> Result<()> {
        let mut raw = to_bytes(buf);
        self.allreduce(&mut raw, T::DTYPE, op).await?;
        from_bytes(&raw, buf);
        Ok(())
    }

    /// [`reduce`](Self::reduce) on a typed slice.
    pub async fn reduce_typed<T: Element>(
        &self,
        buf: &mut [T],
        root: usize,
        op: ReduceOp,
    ) -> Result<()> {
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

    /// Validates the call, runs its plan, and records the profile.
    async fn run(&self, kind: Kind, data: Bytes, dtype: DType, op: ReduceOp) -> Result<Rope> {
        let _serial = self.serial.lock().await;
        let n = self.ranks.len();
        let size = dtype.size();
        if !data.len().is_multiple_of(size) {
            return Err(Error::Config(format!(
                "a {dtype} buffer of {} bytes is not a whole number of {size}-byte elements",
                data.len()
            )));
        }
        if let Kind::Reduce { root } = kind
            && root >= n
        {
            return Err(Error::Config(format!(
                "root {root} is outside a group of {n}"
            )));
        }
        let seq = self.seq.fetch_add(1, Relaxed) & SEQ_MASK;
        let base = self.tag_base.wrapping_add(seq << 32);
        let params = PlanParams {
            ranks: n,
            rank: self.rank,
            len: data.len() / size,
            slices: self.cfg.slices,
            algorithm: self.cfg.algorithm,
            kind,
        };
        let started = Instant::now();
        let mut prof = Profile::default();
        let rope = Rope::new(data);
        let result = if n == 1 {
            Ok(rope)
        } else {
            self.execute(&params, base, rope, dtype, op, &mut prof)
                .await
        };
        prof.total = started.elapsed();
        *self.profile.lock().expect("profile lock") = prof;
        result
    }

    async fn execute(
        &self,
        params: &PlanParams,
        base: u64,
        mut rope: Rope,
        dtype: DType,
        op: ReduceOp,
        prof: &mut Profile,
    ) -> Result<Rope> {
        let n = self.ranks.len();
        let size = dtype.size();
        let steps = plan::plan(params);
        let (tx, rx) = mpsc::unbounded_channel();
        let mut sender = SenderTask(tokio::spawn(sender_loop(
            self.endpoint.clone(),
            self.ranks.clone(),
            rx,
            self.cfg.send_window,
        )));
        let hello = hello(params, dtype, op);
        let right = (self.rank + 1) % n;
        let left = (self.rank + n - 1) % n;
        let _ = tx.send((right, base.wrapping_add(HELLO), hello.clone()));
        let mut hello_checked = false;

        let outcome: Result<()> = async {
            for step in steps {
                match step {
                    Step::Send { to, tag, range } => {
                        let t = Instant::now();
                        let (bytes, copied) = rope.take(range.start * size..range.end * size);
                        if copied {
                            prof.copy += t.elapsed();
                            prof.copied_bytes += bytes.len() as u64;
                        }
                        prof.bytes_sent += bytes.len() as u64;
                        prof.messages_sent += 1;
                        // The sender only stops early on an error, which the next receive
                        // reports.
                        let _ = tx.send((to, base.wrapping_add(u64::from(tag)), bytes));
                    }
                    Step::Recv { from, tag, range, reduce } => {
                        if !hello_checked {
                            self.check_hello(left, base, &hello, &mut sender.0, prof).await?;
                            hello_checked = true;
                        }
                        let t = Instant::now();
                        let msg = self
                            .recv_or_abort(from, base.wrapping_add(u64::from(tag)), base, &mut sender.0)
                            .await?;
                        prof.wait += t.elapsed();
                        let want = range.len() * size;
                        if msg.len() != want {
                            return Err(Error::Protocol(format!(
                                "rank {from} sent {} bytes for elements {}..{} (tag {tag:#x}), this rank expected {want}: do all ranks pass buffers of the same length?",
                                msg.len(),
                                range.start,
                                range.end
                            )));
                        }
                        prof.bytes_received += want as u64;
                        let start = range.start * size;
                        let msg = if reduce {
                            let parts = rope.parts(start..start + want);
                            let (msg, took) = reduce_parts(dtype, op, start, msg, parts).await?;
                            prof.reduce += took;
                            prof.reduced_bytes += want as u64;
                            msg
                        } else {
                            msg
                        };
                        rope.put(start, msg.freeze());
                    }
                }
            }
            if !hello_checked {
                self.check_hello(left, base, &hello, &mut sender.0, prof).await?;
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
                    Ok(r) => r?,
                    Err(e) => return Err(Error::Peer(format!("collective sender task: {e}"))),
                }
                Ok(rope)
            }
            Err(e) => {
                sender.0.abort();
                if !matches!(&e, Error::Peer(m) if m.starts_with(ABORTED)) {
                    self.broadcast_abort(base, &e).await;
                }
                Err(e)
            }
        }
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
        let got = self
            .recv_or_abort(left, base.wrapping_add(HELLO), base, sender)
            .await?;
        prof.wait += t.elapsed();
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
    ) -> Result<BytesMut> {
        tokio::select! {
            m = self.endpoint.recv(self.ids[from], tag) => m,
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
        let _ = tokio::time::timeout(ABORT_GRACE, async {
            while sends.join_next().await.is_some() {}
        })
        .await;
    }
}

/// The prefix of the error a rank reports when another rank aborted the collective.
const ABORTED: &str = "collective aborted";

/// Aborts the sender task when the collective ends early (its owner is the executor).
struct SenderTask(JoinHandle<Result<()>>);

impl Drop for SenderTask {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// Sends the executor's messages in order, at most `window` at once; stops at the first error.
async fn sender_loop(
    ep: Arc<Endpoint>,
    ranks: Arc<Vec<Vec<SocketAddr>>>,
    mut rx: mpsc::UnboundedReceiver<(usize, u64, Bytes)>,
    window: usize,
) -> Result<()> {
    let mut inflight = JoinSet::new();
    while let Some((to, tag, data)) = rx.recv().await {
        while inflight.len() >= window {
            if let Some(r) = inflight.join_next().await {
                flatten(r)?;
            }
        }
        let (ep, ranks) = (ep.clone(), ranks.clone());
        inflight.spawn(async move { ep.send(&ranks[to], tag, data).await });
    }
    while let Some(r) = inflight.join_next().await {
        flatten(r)?;
    }
    Ok(())
}

fn flatten(r: std::result::Result<Result<()>, tokio::task::JoinError>) -> Result<()> {
    r.map_err(|e| Error::Peer(format!("collective send task: {e}")))?
}

/// Reduces the local `parts` (byte offsets in the buffer) into `msg`, which holds the range
/// starting at byte `start`; large reductions on a blocking thread.
async fn reduce_parts(
    dtype: DType,
    op: ReduceOp,
    start: usize,
    mut msg: BytesMut,
    parts: Vec<(usize, Bytes)>,
) -> Result<(BytesMut, Duration)> {
    let bytes: usize = parts.iter().map(|(_, b)| b.len()).sum();
    let work = move || {
        let t = Instant::now();
        for (s, b) in &parts {
            let at = s - start;
            reduce_into(dtype, op, &mut msg[at..at + b.len()], b);
        }
        (msg, t.elapsed())
    };
    if bytes < BLOCKING_MIN {
        return Ok(work());
    }
    tokio::task::spawn_blocking(work)
        .await
        .map_err(|e| Error::Peer(format!("reduction task: {e}")))
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
    let name = |all: &[&'static str], i: u8| all.get(usize::from(i)).copied().unwrap_or("?");
    let root = u32_at(16);
    format!(
        "{} {} elements of {} by {} ({}, {} slices, {} ranks)",
        if root == u32::MAX {
            "allreduce of".to_string()
        } else {
            format!("reduce to rank {root} of")
        },
        u64::from_le_bytes(len),
        name(&["f32", "f64", "i32", "i64"], b[12]),
        name(&["sum", "min", "max", "prod"], b[13]),
        name(&["halving", "ring"], b[14]),
        u32_at(20),
        u32_at(24),
    )
}

fn to_bytes<T: Element>(buf: &[T]) -> Vec<u8> {
    let n = T::DTYPE.size();
    let mut raw = vec![0u8; buf.len() * n];
    for (x, c) in buf.iter().zip(raw.chunks_exact_mut(n)) {
        x.to_le(c);
    }
    raw
}

fn from_bytes<T: Element>(raw: &[u8], buf: &mut [T]) {
    let n = T::DTYPE.size();
    for (x, c) in buf.iter_mut().zip(raw.chunks_exact(n)) {
        *x = T::from_le(c);
    }
}
