//! The executor: one collective in progress on one rank, walking its plan over the working
//! buffer on the transport — sends handed to a sender task, receives posted as soon as the steps
//! before them that touch their range are complete, messages that beat their post brought into
//! place by hand.

use std::net::SocketAddr;
use std::ops::Range;
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::{Bytes, BytesMut};
use tokio::sync::{mpsc, watch};
use tokio::task::{JoinHandle, JoinSet};

use crate::elem::{DType, ReduceOp, reduce_from};
use crate::endpoint::{Endpoint, Landed, Posted};
use crate::error::{Error, Result};
use crate::peer_id::PeerId;
use crate::shared_buf::SharedBuf;

use super::config::Profile;
use super::group::{ABORTED, Group, HELLO, hello};
use super::plan::{self, PlanParams, Step};

/// Reductions of at least this many bytes run on a blocking thread, so the runtime's workers
/// stay free for the transport; smaller ones cost less than the hand-over (~10 µs).
const BLOCKING_MIN: usize = 64 << 10;

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
pub(super) struct Executor<'a> {
    group: &'a Group,
    /// Sends in flight at once (`CollectiveConfig::send_window`).
    send_window: usize,
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

/// A receive step of the plan, as the executor handles it.
struct Recv {
    from: usize,
    tag: u32,
    range: Range<usize>,
    reduce: bool,
}

/// What the walk over the plan keeps besides the executor itself.
struct Walk {
    /// For every receive step, the last earlier send and receive touching its range.
    deps: Vec<(Option<usize>, Option<usize>)>,
    /// Receives not posted yet, in plan order; the next one to consider first.
    unposted: Vec<usize>,
    /// The last receive step delivered.
    recvs_done: Option<usize>,
    /// From the sender task: the first step whose send has not returned yet.
    sends_done: watch::Receiver<usize>,
    /// The left neighbour, whose header is checked before the first receive.
    left: usize,
    hello_checked: bool,
}

impl<'a> Executor<'a> {
    /// The executor of one call: the plan of `params` over `work`, in the tag range at `base`.
    pub(super) fn new(
        group: &'a Group,
        send_window: usize,
        base: u64,
        work: Arc<SharedBuf>,
        dtype: DType,
        op: ReduceOp,
        params: &PlanParams,
    ) -> Executor<'a> {
        Executor {
            group,
            send_window,
            base,
            work,
            dtype,
            op,
            steps: plan::plan(params),
            hello: hello(params, dtype, op),
            posted: Vec::new(),
        }
    }
}

impl Executor<'_> {
    /// Runs the plan to its end: the sender task started, the header sent, the plan walked,
    /// then the last sends drained, or on failure every other rank told.
    pub(super) async fn execute(&mut self, prof: &mut Profile) -> Result<()> {
        let comm = self.group;
        let n = comm.ranks.len();
        let (tx, rx) = mpsc::unbounded_channel();
        let (done_tx, sends_done) = watch::channel(0usize);
        let mut sender = SenderTask(tokio::spawn(sender_loop(
            Peers {
                ep: comm.endpoint.clone(),
                ranks: comm.ranks.clone(),
                ids: comm.ids.clone(),
                meter: comm.meter.clone(),
            },
            rx,
            self.send_window,
            done_tx,
        )));
        let right = (comm.rank + 1) % n;
        let _ = tx.send((usize::MAX, right, self.base.wrapping_add(HELLO), self.hello.clone()));
        let mut walk = Walk {
            deps: dependencies(&self.steps),
            unposted: (0..self.steps.len()).filter(|&j| matches!(self.steps[j], Step::Recv { .. })).collect(),
            recvs_done: None,
            sends_done,
            left: (comm.rank + n - 1) % n,
            hello_checked: false,
        };
        self.post_ready(&mut walk.unposted, &walk.deps, 0, walk.recvs_done);

        let outcome = self.walk(&tx, &mut walk, &mut sender, prof).await;

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

    /// Walks the plan in order: a send hands a zero-copy view of its range to the sender task
    /// and goes on at once; a receive waits for its message and brings it into place.
    async fn walk(
        &mut self,
        tx: &mpsc::UnboundedSender<(usize, usize, u64, Bytes)>,
        walk: &mut Walk,
        sender: &mut SenderTask,
        prof: &mut Profile,
    ) -> Result<()> {
        let size = self.dtype.size();
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
                    self.receive(i, &Recv { from, tag, range, reduce }, walk, sender, prof).await?;
                }
            }
        }
        if !walk.hello_checked {
            self.group.check_hello(walk.left, self.base, &self.hello, &mut sender.0, prof).await?;
        }
        Ok(())
    }

    /// Receive step `i`: checks the left neighbour's header first (once), waits for the
    /// message while posting the receives that become ready, and accounts for where it landed.
    async fn receive(
        &mut self,
        i: usize,
        r: &Recv,
        walk: &mut Walk,
        sender: &mut SenderTask,
        prof: &mut Profile,
    ) -> Result<()> {
        let comm = self.group;
        if !walk.hello_checked {
            comm.check_hello(walk.left, self.base, &self.hello, &mut sender.0, prof).await?;
            walk.hello_checked = true;
        }
        let tag = self.base.wrapping_add(u64::from(r.tag));
        let t = Instant::now();
        let landed = loop {
            tokio::select! {
                biased;
                m = comm.recv_or_abort(r.from, tag, self.base, &mut sender.0) => break m?,
                Ok(()) = walk.sends_done.changed() => {
                    let w = *walk.sends_done.borrow_and_update();
                    self.post_ready(&mut walk.unposted, &walk.deps, w, walk.recvs_done);
                }
            }
        };
        prof.wait += t.elapsed();
        let want = r.range.len() * self.dtype.size();
        prof.bytes_received += want as u64;
        match landed {
            Landed::InPlace { reduce: took } => {
                if r.reduce {
                    prof.reduce += took;
                    prof.reduced_bytes += want as u64;
                }
            }
            Landed::Fresh(msg) => self.bring_into_place(i, r, msg, walk, prof).await?,
        }
        walk.recvs_done = Some(i);
        let w = *walk.sends_done.borrow();
        self.post_ready(&mut walk.unposted, &walk.deps, w, walk.recvs_done);
        Ok(())
    }

    /// A message of receive step `i` that arrived before its post (it landed in its own
    /// buffer): brought into `work` here, once the sends that read its range are done.
    async fn bring_into_place(
        &self,
        i: usize,
        r: &Recv,
        msg: BytesMut,
        walk: &mut Walk,
        prof: &mut Profile,
    ) -> Result<()> {
        let size = self.dtype.size();
        let (want, start) = (r.range.len() * size, r.range.start * size);
        self.group.endpoint.unpost(self.group.ids[r.from], self.base.wrapping_add(u64::from(r.tag)));
        if msg.len() != want {
            return Err(Error::Protocol(format!(
                "rank {} sent {} bytes for elements {}..{} (tag {:#x}), this rank expected {want}: do all ranks pass buffers of the same length?",
                r.from,
                msg.len(),
                r.range.start,
                r.range.end,
                r.tag
            )));
        }
        if let Some(d) = walk.deps[i].0 {
            while *walk.sends_done.borrow() <= d {
                if walk.sends_done.changed().await.is_err() {
                    break;
                }
            }
        }
        let t = Instant::now();
        let took = land(self.work.clone(), start, msg, r.reduce.then_some((self.dtype, self.op))).await?;
        if r.reduce {
            prof.reduce += took;
            prof.reduced_bytes += want as u64;
        } else {
            prof.copy += t.elapsed();
            prof.copied_bytes += want as u64;
        }
        Ok(())
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
        let comm = self.group;
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
                self.group.endpoint.unpost(self.group.ids[*from], self.base.wrapping_add(u64::from(*tag)));
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

/// Where the sender task sends, and where it reports each message's time.
struct Peers {
    ep: Arc<Endpoint>,
    ranks: Arc<Vec<Vec<SocketAddr>>>,
    ids: Vec<PeerId>,
    meter: Option<Arc<super::meter::LinkMeter>>,
}

/// Sends the executor's messages in order, at most `window` at once still being handed to the
/// rails (a message whose segments all wait in rail queues no longer counts: the next one
/// follows it on the wire without waiting for its acknowledgements); stops at the first error.
/// Publishes on `done` the first step index whose send has not returned yet (every send of an
/// earlier step has); the header (index `usize::MAX`) is not counted.
async fn sender_loop(
    peers: Peers,
    mut rx: mpsc::UnboundedReceiver<(usize, usize, u64, Bytes)>,
    window: usize,
    done: watch::Sender<usize>,
) -> Result<()> {
    let mut inflight = JoinSet::new();
    // Steps (not the header) whose sends have not returned: a send that starts with none of
    // them is the link's alone, so its time is a sample for the cost model.
    let mut steps_inflight = 0usize;
    // Sends whose segments are not all queued on the rails yet: `window` bounds these, so the
    // next message starts as soon as the previous one is handed over, not when it is
    // acknowledged (which `inflight` and `done` still track).
    let mut handing: JoinSet<()> = JoinSet::new();
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
                if step != usize::MAX {
                    steps_inflight -= 1;
                }
                settle(step, &mut pending, issued_to);
            }
            Some(_) = handing.join_next(), if !handing.is_empty() => {}
            m = rx.recv(), if handing.len() < window => {
                let Some((step, to, tag, data)) = m else { break };
                if step != usize::MAX {
                    pending.push_back(step);
                    issued_to = step + 1;
                }
                let (ep, ranks) = (peers.ep.clone(), peers.ranks.clone());
                let meter = (steps_inflight == 0 && step != usize::MAX).then(|| peers.meter.clone()).flatten();
                if step != usize::MAX {
                    steps_inflight += 1;
                }
                let (id, bytes) = (peers.ids[to], data.len() as u64);
                let (handed, hand_rx) = tokio::sync::oneshot::channel();
                handing.spawn(async move {
                    let _ = hand_rx.await;
                });
                inflight.spawn(async move {
                    let t = Instant::now();
                    ep.send_handed(&ranks[to], tag, data, handed).await?;
                    if let Some(m) = meter {
                        m.message(id, bytes, t.elapsed().as_secs_f64());
                    }
                    Ok(step)
                });
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
