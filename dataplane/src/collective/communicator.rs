//! The [`Communicator`]: a group of endpoints that run `reduce` and `allreduce` together, each
//! call validated, given its own tag range, and run by an [`Executor`](super::executor) in one
//! working buffer reused across calls.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use bytes::Bytes;

use crate::elem::{DType, Element, ReduceOp, from_bytes, to_bytes};
use crate::endpoint::Endpoint;
use crate::error::{Error, Result};
use crate::peer_id::PeerId;
use crate::shared_buf::{MappedBytes, SharedBuf};

use super::agreed::{self, LastAgreed};
use super::config::{CollectiveConfig, Profile};
use super::cost::{self, LinkModel, Links, Measured, Topology};
use super::executor::Executor;
use super::group::{ABORT, AGREE, Group};
use super::meter::{self, LinkMeter};
use super::plan::{Kind, MAX_SLICES, PlanParams};
use super::spare::sole_owner;

/// Tags a communicator uses: `[tag_base, tag_base + TAG_SPAN)`. Bits 32..56 number the
/// collective (wrapping), bits 0..32 the message within it. Give each communicator that may
/// share an endpoint with another a base in its own span, e.g. `group << 56`.
/// The low 32 bits `0xFFFF_F000..` are left to `alltoall::Exchanger`, which may share a
/// `tag_base` with a communicator: `plan.rs`'s phase limit keeps collectives below them (a test
/// in `dataplane/tests/alltoall.rs` checks it).
pub const TAG_SPAN: u64 = 1 << 56;
const SEQ_MASK: u64 = (1 << 24) - 1;

/// A group of endpoints that run collectives together: ordered ranks, this rank, a tag space.
///
/// Every rank must call the same collectives in the same order (each call takes the next tag
/// range); calls on one communicator run one at a time.
pub struct Communicator {
    group: Group,
    tag_base: u64,
    cfg: CollectiveConfig,
    seq: AtomicU64,
    serial: tokio::sync::Mutex<()>,
    profile: Mutex<Profile>,
    /// The working buffer the last `allreduce`/`reduce` copied the caller's buffer into, for the
    /// next call (see `copy_in`).
    scratch: Mutex<Option<Arc<SharedBuf>>>,
    /// What the last call ran and why.
    choice: Mutex<Option<Choice>>,
    /// How the members sit on hosts (from their rail addresses).
    topology: Topology,
    /// What the last `auto` agreement round gave (see `agreed`).
    agreed: LastAgreed<(Links, Measured)>,
}

/// The algorithm and pipeline depth a call ran, and why: the cost model's choice (an `auto`
/// configuration) or the configuration's.
#[derive(Clone, Debug, PartialEq)]
pub struct Choice {
    pub algorithm: crate::elem::Algorithm,
    pub slices: usize,
    pub reason: String,
    /// Whether the cost model chose (`auto`): then the call's time is measured for the next
    /// choices (`LinkMeter::allreduce_ran`).
    pub auto: bool,
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
        let topology = Topology::of(&ranks);
        Ok(Communicator {
            topology,
            group: Group { endpoint, ranks: Arc::new(ranks), ids, rank, meter: None },
            tag_base,
            cfg,
            seq: AtomicU64::new(0),
            serial: tokio::sync::Mutex::new(()),
            profile: Mutex::new(Profile::default()),
            agreed: LastAgreed::new(),
            scratch: Mutex::new(None),
            choice: Mutex::new(None),
        })
    }

    /// Reports every message's time to `meter` and, with [`Algorithm::Auto`], decides from it
    /// (see [`cost`]). Without a meter an `auto` call decides from the prior.
    ///
    /// [`Algorithm::Auto`]: crate::elem::Algorithm::Auto
    pub fn with_meter(mut self, meter: Arc<LinkMeter>) -> Communicator {
        self.group.meter = Some(meter);
        self
    }

    /// What the last call ran and why (`None` before the first).
    pub fn last_choice(&self) -> Option<Choice> {
        self.choice.lock().expect("choice lock").clone()
    }

    pub fn rank(&self) -> usize {
        self.group.rank
    }

    pub fn size(&self) -> usize {
        self.group.ranks.len()
    }

    pub fn config(&self) -> CollectiveConfig {
        self.cfg
    }

    /// How the members sit on hosts, as their rail addresses say.
    pub fn topology(&self) -> Topology {
        self.topology
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
        self.reclaim(work);
        self.add_copy(copy_in + t.elapsed(), 2 * buf.len() as u64);
        Ok(())
    }

    /// [`allreduce`](Self::allreduce) in the caller's own memory (`buf`, a task's shared
    /// region): the collective works there directly (sends read it, receptions land and reduce
    /// in it), with no copy in or out. Returns once nothing of the call touches the memory any
    /// more (on success; see [`MappedBytes::new`] after a failure).
    pub async fn allreduce_mapped(&self, buf: &MappedBytes, dtype: DType, op: ReduceOp) -> Result<()> {
        let work = Arc::new(buf.shared());
        let work = self.run(Kind::Allreduce, work, dtype, op).await?;
        // Every send returned and every post was claimed or withdrawn; views of the buffer that
        // queued segments still hold go as their writes complete.
        let _ = sole_owner(work).await;
        Ok(())
    }

    /// The caller's buffer copied into the working buffer the last call left behind: reusing
    /// memory that is already mapped costs a plain memcpy, where fresh memory costs a page
    /// fault per 4 KiB (measured: 64 MiB into fresh memory took several times longer than into
    /// reused memory on the benchmark machine). A transport task that still held a view of it
    /// when the last call returned has let go by now, as a rule; if not, fresh memory.
    fn copy_in(&self, buf: &[u8]) -> Arc<SharedBuf> {
        let last = self.scratch.lock().expect("scratch lock").take();
        let mut v = match last.map(Arc::try_unwrap) {
            // SAFETY: we hold the only reference, and every byte of it was written.
            Some(Ok(w)) => unsafe { w.take() },
            _ => Vec::new(),
        };
        v.clear();
        v.extend_from_slice(buf);
        Arc::new(SharedBuf::from_vec(v))
    }

    /// Keeps the working buffer for the next call, without waiting for transport tasks that
    /// may hold a view of it a moment longer (a message still landing in it after a failure
    /// keeps it from being reused).
    fn reclaim(&self, work: Arc<SharedBuf>) {
        *self.scratch.lock().expect("scratch lock") = Some(work);
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
        if self.group.rank == root {
            // SAFETY: as in `allreduce`: the collective is over.
            buf.copy_from_slice(unsafe { work.range(0, work.len()) });
            copied += buf.len();
        }
        self.reclaim(work);
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
        if self.group.rank != root {
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
        if self.group.rank == root {
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
        let n = self.group.ranks.len();
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
        let started = Instant::now();
        let choice = self.choose(base, work.len() as u64).await?;
        // The call's own time, without the agreement round, is what `auto` compares.
        let ran_from = Instant::now();
        let params = PlanParams {
            ranks: n,
            rank: self.group.rank,
            len: work.len() / size,
            slices: choice.slices,
            algorithm: choice.algorithm,
            kind,
            per_host: self.topology.per_host,
        };
        let auto = choice.auto;
        *self.choice.lock().expect("choice lock") = Some(choice);
        let mut prof = Profile::default();
        let result = if n == 1 {
            Ok(())
        } else {
            let mut ex = Executor::new(&self.group, self.cfg.send_window, base, work.clone(), dtype, op, &params);
            let r = ex.execute(&mut prof).await;
            // Withdraws the posts no message claimed; dropping `run`'s future mid-way does the
            // same (see `Drop for Executor`).
            drop(ex);
            r
        };
        prof.total = started.elapsed();
        if let Some(m) = &self.group.meter
            && result.is_ok()
        {
            m.reduced(prof.reduced_bytes, prof.reduce.as_secs_f64());
            if auto && kind == Kind::Allreduce {
                m.allreduce_ran(n, work.len() as u64, params.algorithm, ran_from.elapsed().as_secs_f64());
            }
        }
        *self.profile.lock().expect("profile lock") = prof;
        result.map(|()| work)
    }

    /// The algorithm and depth of a call of `bytes`: the configuration's, or with
    /// `Algorithm::Auto` the cost model's from every member's link model (one round in which
    /// each member sends its model to every other, under the call's tags).
    async fn choose(&self, base: u64, bytes: u64) -> Result<Choice> {
        use crate::elem::Algorithm;
        let t = self.topology;
        if self.cfg.algorithm != Algorithm::Auto {
            let set = format!("{} ×{}: set by the configuration (the job file)", self.cfg.algorithm, self.cfg.slices);
            let reason = if self.cfg.algorithm == Algorithm::Hierarchical && t.per_host == 1 {
                format!(
                    "{set}; with {t} (or hosts of different sizes, or not numbered host by host) it runs as halving"
                )
            } else {
                set
            };
            return Ok(Choice { algorithm: self.cfg.algorithm, slices: self.cfg.slices, reason, auto: false });
        }
        let (links, measured, reused) = self.agreed_for(base, bytes).await?;
        let c = cost::choose_allreduce_measured(t, bytes, &links, &measured);
        self.agreed.settle(c.settled);
        Ok(Choice {
            algorithm: c.algorithm,
            slices: c.slices,
            reason: format!("{} ×{} chosen by the {}{}", c.algorithm, c.slices, c.reason, agreed::ago(reused)),
            auto: true,
        })
    }

    /// Every member's links and measured figures, combined, for an `auto` call of `bytes`: the
    /// last agreed ones where they were agreed for this size class, settled on the fastest
    /// measured, and used fewer than `agreed::AGREE_EVERY` times; else agreed afresh (one round in
    /// which each member sends its models and figures to every other, under the call's tags).
    async fn agreed_for(&self, base: u64, bytes: u64) -> Result<(Links, Measured, Option<u32>)> {
        let class = meter::size_class(bytes);
        if let Some(((links, measured), ago)) = self.agreed.reuse(class) {
            return Ok((links, measured, Some(ago)));
        }
        let (n, t, g) = (self.size(), self.topology, &self.group);
        // Toward the members on other hosts and on this one.
        let host = g.rank / t.per_host;
        let (mut remote, mut local) = (Vec::new(), Vec::new());
        for (r, &p) in g.ids.iter().enumerate().filter(|&(r, _)| r != g.rank) {
            if r / t.per_host == host { local.push(p) } else { remote.push(p) }
        }
        let (mine, corr) = match &g.meter {
            Some(m) => ([m.model(&remote), m.model(&local)], m.allreduce_measured(n, bytes)),
            None => ([LinkModel::PRIOR; 2], Measured::NONE),
        };
        let models = if n == 1 {
            vec![(mine.to_vec(), corr)]
        } else {
            let agree = meter::agree_many(&g.endpoint, &g.ranks, &g.ids, g.rank, base.wrapping_add(AGREE), &mine, corr);
            tokio::select! {
                m = agree => m?,
                a = g.endpoint.recv_any(base.wrapping_add(ABORT)) => {
                    let (peer, why) = a?;
                    return Err(Error::Peer(format!("{} by {peer}: {}", super::group::ABORTED, String::from_utf8_lossy(&why))));
                }
            }
        };
        let links: Vec<Links> = models.iter().map(|(m, _)| Links { remote: m[0], local: m[1] }).collect();
        let links = Links::combine(&links);
        let measured = Measured::combine(&models.iter().map(|(_, c)| *c).collect::<Vec<_>>());
        self.agreed.store(class, (links, measured));
        Ok((links, measured, None))
    }
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
