//! Personalised all-to-all exchange over the data plane (seed 004): `alltoall` and `alltoallv`,
//! run step by step along a contention-free [`Schedule`].
//!
//! How an exchange runs on one rank:
//! 1. The call is checked (the table is N × N for this group, there is one send buffer per
//!    rank and each is as long as the table says, a given schedule carries exactly the table);
//!    every rank computes the same schedule from the same table.
//! 2. One buffer for everything this rank will receive is allocated (the sum of its column of
//!    the table, its own part left out), and a receive is posted for each sender's range of it,
//!    so each message lands in place, straight from the connection readers. That buffer, the
//!    caller's send buffers and the transport's bounded queues are all the memory an exchange
//!    takes; a message that arrives before its post (its sender is ahead) is held by the
//!    endpoint under its usual per-peer caps and copied into place when taken.
//! 3. A small header describing the call (group size, schedule kind, fingerprints of table and
//!    schedule) goes to the right neighbour, and the left neighbour's is compared with ours
//!    before the first receive, so ranks that were given different tables or schedules fail
//!    instead of waiting forever.
//! 4. The rank walks its own steps ([`Schedule::rank_steps`]), with no global barrier: in each
//!    step it sends its message (striped by rail shares, see `rails`) while it waits for the one
//!    it receives, and starts the next step once both are done — the send *nearly* acknowledged
//!    (no more than its last segment on each rail it uses still unacknowledged, so the next
//!    step's first segments follow those on the wire with no round trip between them, while the
//!    receiver of this step is not yet sent a second message at full speed; the rest of its
//!    acknowledgements come while later steps run and are all awaited before the call returns,
//!    and a rail that fails meanwhile resends what is unacknowledged on the others), the
//!    receive delivered. Sends never wait for the receiver to reach the step (the transport
//!    accepts a message whenever it comes), so a schedule whose steps are matchings cannot
//!    deadlock: every rank finishes step k once every rank finished its steps before k.
//!    [`Exchanger::with_acked_steps`] restores the seed's pacing, a step ending only when its
//!    send is acknowledged (issue 30 measured it against the default).
//! 5. The result is one `Bytes` per sender, in rank order: views of the receive buffer, and this
//!    rank's own part, which never touches the network (the caller's bytes, shared, not copied).
//!
//! A rank that fails tells every other rank (an abort message under the call's tags), so a
//! failure anywhere ends the exchange everywhere; whichever way a call ends, the receives it
//! posted and no message claimed are withdrawn.
//!
//! Tags: calls on one [`Exchanger`] are numbered (bits 32..56 of the tag above `tag_base`, as in
//! [`Communicator`](super::Communicator)'s layout), and the low 32 bits are `0xFFFF_F000` to
//! `0xFFFF_F002` — the top phase of a collective plan's tag space, which
//! [`plan`](super::plan) never reaches (its step tags stay below `0xFFFF_F000`, and its header
//! and abort tags are `0xFFFF_FFFE`/`0xFFFF_FFFF`). So an exchanger may share its `tag_base`
//! with a communicator of the same group; two exchangers, or an exchanger and a communicator of
//! another group, need bases in different spans of 2⁵⁶.

use std::borrow::Cow;
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::time::{Duration, Instant};

use bytes::Bytes;
use tokio::task::JoinSet;

use super::agreed::{self, LastAgreed};
use super::cost::{self, ExchangeAlgorithm, LinkModel, Measured};
use super::landing::{Posts, Task, join, land};
use super::meter::{self, Agreed, LinkMeter};
use super::rails::{GroupRails, Sharing};
use super::schedule::{ComTable, Schedule, ScheduleKind};
use super::spare::Spares;
use crate::endpoint::{Endpoint, Landed, Posted};
use crate::error::{Error, Result};
use crate::peer_id::PeerId;
use crate::shared_buf::SharedBuf;

/// Calls are numbered modulo 2²⁴ (bits 32..56 of the tag).
const SEQ_MASK: u64 = (1 << 24) - 1;
/// The low 32 bits of an exchange's tags (see the module documentation).
pub const DATA_TAG: u64 = 0xFFFF_F000;
const HELLO: u64 = 0xFFFF_F001;
const ABORT: u64 = 0xFFFF_F002;
/// The round of an `auto` call in which every rank sends its link model to every other.
const AGREE: u64 = 0xFFFF_F003;
const HELLO_MAGIC: &[u8; 4] = b"PXA1";
const HELLO_LEN: usize = 4 + 4 + 4 + 8 + 8;
/// The header's schedule code for a schedule the caller gave.
const GIVEN: u8 = 0;
/// The header's code for a `direct` exchange (every message at once).
const DIRECT: u8 = 0xD1;
/// How long a failing rank tries to tell the others before returning its error: a live peer
/// acknowledges a tiny message in well under a millisecond; a dead one never will.
const ABORT_GRACE: Duration = Duration::from_secs(1);
/// The prefix of the error a rank reports when another rank aborted the exchange.
const ABORTED: &str = "exchange aborted";

/// A group of endpoints that run personalised all-to-all exchanges: ordered ranks, this rank, a
/// tag space.
///
/// Every rank must make the same calls in the same order, with the same table and schedule
/// (each call takes the next tags); calls on one exchanger run one at a time.
pub struct Exchanger {
    endpoint: Arc<Endpoint>,
    ranks: Vec<Vec<SocketAddr>>,
    ids: Vec<PeerId>,
    rank: usize,
    tag_base: u64,
    seq: AtomicU64,
    serial: tokio::sync::Mutex<()>,
    /// See [`Exchanger::with_acked_steps`].
    acked_steps: bool,
    /// See [`Exchanger::with_meter`].
    meter: Option<Arc<LinkMeter>>,
    /// See [`Exchanger::with_rail_shares`].
    rails: GroupRails,
    /// Receive buffers whose results were dropped, for the next call (see `spare`).
    spares: Arc<Spares>,
    /// What the last `auto` agreement round gave (see `agreed`).
    agreed: LastAgreed<(Vec<LinkModel>, Measured<4>)>,
}

/// What an exchange ran and why.
#[derive(Clone, Debug, PartialEq)]
pub struct Chosen {
    pub algorithm: ExchangeAlgorithm,
    pub reason: String,
}

/// One call, checked: what every rank exchanges, in which steps, and this rank's buffers.
struct Call<'a> {
    table: Cow<'a, ComTable>,
    schedule: Cow<'a, Schedule>,
    /// The schedule's kind for the header, `GIVEN` or `DIRECT`.
    kind: u8,
    /// Every message at once instead of the schedule's steps.
    direct: bool,
    /// What this rank sends each rank (its own part included), in rank order.
    sends: Vec<Bytes>,
}

impl<'a> Call<'a> {
    /// A call along the schedule of `kind` built for `table` now.
    fn built(table: &'a ComTable, kind: ScheduleKind, sends: Vec<Bytes>) -> Call<'a> {
        Call {
            table: Cow::Borrowed(table),
            schedule: Cow::Owned(Schedule::build(kind, table)),
            kind: kind.code(),
            direct: false,
            sends,
        }
    }
}

impl Exchanger {
    /// An exchanger over `ranks` (each rank's rail addresses, what its
    /// [`Endpoint::local_addrs`] returned), in which this endpoint is `rank`, using the tags
    /// `[tag_base, tag_base + 2⁵⁶)` (see the module documentation).
    pub fn new(endpoint: Arc<Endpoint>, ranks: Vec<Vec<SocketAddr>>, rank: usize, tag_base: u64) -> Result<Exchanger> {
        if ranks.is_empty() {
            return Err(Error::Config("an exchanger needs at least one rank".into()));
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
        Ok(Exchanger {
            endpoint,
            ranks,
            ids,
            rank,
            tag_base,
            seq: AtomicU64::new(0),
            serial: tokio::sync::Mutex::new(()),
            acked_steps: false,
            meter: None,
            rails: GroupRails::new(true),
            spares: Arc::default(),
            agreed: LastAgreed::new(),
        })
    }

    /// Reports each message's time to `meter` (and a direct exchange's rate), and decides
    /// [`alltoallv_chosen`](Self::alltoallv_chosen)'s `auto` from it.
    pub fn with_meter(mut self, meter: Arc<LinkMeter>) -> Exchanger {
        self.meter = Some(meter);
        self
    }

    /// With `acked`, a step ends only once its send is acknowledged (the seed's steps: a round
    /// trip between one step's last byte and the next step's first), instead of once no more
    /// than its last segment per rail is unacknowledged (the default). Ranks need not choose
    /// alike: only the pacing differs.
    pub fn with_acked_steps(mut self, acked: bool) -> Exchanger {
        self.acked_steps = acked;
        self
    }

    /// With `on` (the default), each message is striped by shares of the rates it can expect on
    /// each rail at both ends (see `rails`); off, by the endpoint's rail scheduler alone.
    pub fn with_rail_shares(mut self, on: bool) -> Exchanger {
        self.rails = GroupRails::new(on);
        self
    }

    pub fn rank(&self) -> usize {
        self.rank
    }

    pub fn size(&self) -> usize {
        self.ranks.len()
    }

    /// Every rank sends every rank (itself included) one equal block: `send` is N blocks in
    /// rank order, and every rank's `send` must be as long. Returns the block each rank sent
    /// this one, in rank order.
    pub async fn alltoall(&self, send: Bytes, kind: ScheduleKind) -> Result<Vec<Bytes>> {
        let n = self.size();
        self.run(|| {
            if !send.len().is_multiple_of(n) {
                return Err(Error::Config(format!(
                    "an alltoall buffer of {} bytes does not split into {n} equal blocks",
                    send.len()
                )));
            }
            let block = send.len() / n;
            let table = ComTable::uniform(n, block as u64)?;
            let sends = (0..n).map(|j| send.slice(j * block..(j + 1) * block)).collect();
            let schedule = Schedule::build(kind, &table);
            Ok(Call {
                table: Cow::Owned(table),
                schedule: Cow::Owned(schedule),
                kind: kind.code(),
                direct: false,
                sends,
            })
        })
        .await
    }

    /// Every rank i sends every rank j `table.get(i, j)` bytes, following the schedule `kind`
    /// builds from `table` (every rank must pass the same table and kind). `sends[j]` is what
    /// this rank sends rank j (its own part included), exactly as long as the table says.
    /// Returns what each rank sent this one, in rank order.
    pub async fn alltoallv(&self, table: &ComTable, sends: Vec<Bytes>, kind: ScheduleKind) -> Result<Vec<Bytes>> {
        self.run(|| {
            self.check_table(table)?;
            Ok(Call::built(table, kind, sends))
        })
        .await
    }

    /// [`alltoallv`](Self::alltoallv) with this rank's parts in one buffer, in rank order: the
    /// counts are this rank's row of `table`, and `send` must be their sum.
    pub async fn alltoallv_packed(&self, table: &ComTable, send: Bytes, kind: ScheduleKind) -> Result<Vec<Bytes>> {
        self.run(|| {
            self.check_table(table)?;
            let sends = self.split(table, &send)?;
            Ok(Call::built(table, kind, sends))
        })
        .await
    }

    /// [`alltoallv`](Self::alltoallv) along a schedule computed beforehand (a block-cyclic
    /// redistribution's Algorithm 1 or 2, or a `css` schedule reused across calls). It must
    /// carry exactly `table` ([`Schedule::check`]); every rank must pass the same.
    pub async fn alltoallv_with(&self, table: &ComTable, schedule: &Schedule, sends: Vec<Bytes>) -> Result<Vec<Bytes>> {
        self.run(|| {
            self.check_table(table)?;
            schedule.check(table)?;
            Ok(Call {
                table: Cow::Borrowed(table),
                schedule: Cow::Borrowed(schedule),
                kind: GIVEN,
                direct: false,
                sends,
            })
        })
        .await
    }

    /// [`alltoallv`](Self::alltoallv) along `how`, or with `None` along what the cost model
    /// predicts fastest for `table` from every rank's measured link model ([`cost`]; one
    /// round in which each rank sends its model to every other, a call of its own). Returns
    /// what each rank sent this one and what ran, with why. Every rank must pass the same.
    pub async fn alltoallv_chosen(
        &self,
        table: &ComTable,
        sends: Vec<Bytes>,
        how: Option<ExchangeAlgorithm>,
    ) -> Result<(Vec<Bytes>, Chosen)> {
        let (algorithm, schedule, reason) = match how {
            Some(a) => (a, None, format!("{a}: set by the job file")),
            None => {
                let busiest = cost::busiest(table);
                let (models, measured, reused) = self.agreed_for(busiest).await?;
                let (c, s) = cost::choose_alltoall_measured(table, &LinkModel::combine(&models), &measured);
                self.agreed.settle(c.settled);
                let rails = self.rails.describe(&self.endpoint.rail_rates());
                let ago = agreed::ago(reused);
                (c.algorithm, s, format!("{} chosen by the {}{ago}; {rails}", c.algorithm, c.reason))
            }
        };
        let started = Instant::now();
        let got = match (algorithm, schedule) {
            (ExchangeAlgorithm::Steps(k), Some(s)) => {
                self.run(|| {
                    self.check_table(table)?;
                    let schedule = Cow::Owned(s);
                    Ok(Call { table: Cow::Borrowed(table), schedule, kind: k.code(), direct: false, sends })
                })
                .await?
            }
            (ExchangeAlgorithm::Steps(k), None) => self.alltoallv(table, sends, k).await?,
            (ExchangeAlgorithm::Direct, _) => {
                self.run(|| {
                    self.check_table(table)?;
                    let schedule = Cow::Owned(Schedule::build(ScheduleKind::Shift, table));
                    Ok(Call { table: Cow::Borrowed(table), schedule, kind: DIRECT, direct: true, sends })
                })
                .await?
            }
        };
        if how.is_none()
            && let Some(m) = &self.meter
        {
            m.alltoall_ran(self.size(), cost::busiest(table), algorithm, started.elapsed().as_secs_f64());
        }
        Ok((got, Chosen { algorithm, reason }))
    }

    /// `send` cut into this rank's parts by its row of `table` (what
    /// [`alltoallv_packed`](Self::alltoallv_packed) sends).
    pub fn parts(&self, table: &ComTable, send: &Bytes) -> Result<Vec<Bytes>> {
        self.check_table(table)?;
        self.split(table, send)
    }

    /// Every rank's link model and the combination of every rank's measured figures for an
    /// `auto` call whose busiest member moves `busiest` bytes: the last agreed ones where they
    /// were agreed for this size class, settled on the fastest measured, and used fewer than
    /// `agreed::AGREE_EVERY` times; else agreed afresh.
    async fn agreed_for(&self, busiest: u64) -> Result<(Vec<LinkModel>, Measured<4>, Option<u32>)> {
        let class = meter::size_class(busiest);
        if let Some(((models, measured), ago)) = self.agreed.reuse(class) {
            return Ok((models, measured, Some(ago)));
        }
        let mine = self.meter.as_ref().map_or(Measured::NONE, |m| m.alltoall_measured(self.size(), busiest));
        let all = self.agree_models(mine).await?;
        let measured = Measured::combine(&all.iter().map(|a| a.measured).collect::<Vec<_>>());
        let models: Vec<LinkModel> = all.into_iter().map(|a| a.model).collect();
        self.agreed.store(class, (models.clone(), measured));
        Ok((models, measured, None))
    }

    /// Every rank's link model toward the group, in rank order, keeping every rank's rail rates
    /// (a call of its own: it takes the next tags; a rank that fails it aborts the others).
    async fn agree_models(&self, measured: Measured<4>) -> Result<Vec<Agreed>> {
        let peers: Vec<PeerId> = self.ids.iter().copied().filter(|&p| p != self.ids[self.rank]).collect();
        let model = self.meter.as_ref().map_or(LinkModel::PRIOR, |m| m.model(&peers));
        let mine = Agreed { model, rails: self.endpoint.rail_rates(), measured };
        if self.size() == 1 {
            return Ok(vec![mine]);
        }
        let _serial = self.serial.lock().await;
        let seq = self.seq.fetch_add(1, Relaxed) & SEQ_MASK;
        let base = self.tag_base.wrapping_add(seq << 32);
        let agree = meter::agree(&self.endpoint, &self.ranks, &self.ids, self.rank, base.wrapping_add(AGREE), mine);
        let result = tokio::select! {
            m = agree => m,
            a = self.endpoint.recv_any(base.wrapping_add(ABORT)) => a.and_then(|(peer, why)| {
                Err(Error::Peer(format!("{ABORTED} by {peer}: {}", String::from_utf8_lossy(&why))))
            }),
        };
        if let Err(e) = &result
            && !matches!(e, Error::Peer(m) if m.starts_with(ABORTED))
        {
            self.broadcast_abort(base, e).await;
        }
        let agreed = result?;
        self.rails.set_agreed(agreed.iter().map(|a| a.rails.clone()).collect());
        Ok(agreed)
    }

    /// Sends `data` to rank `to` under `tag` (see `rails`), dropping `handed` (when given)
    /// once no more than its last segment per rail is unacknowledged; ends when the message is
    /// acknowledged. Its time, from the call to the acknowledgement, goes to the meter.
    fn send_to(
        &self,
        to: usize,
        tag: u64,
        data: Bytes,
        sharing: &Sharing,
        handed: Option<tokio::sync::oneshot::Sender<()>>,
    ) -> impl Future<Output = Result<()>> + Send + 'static {
        let (meter, peer, bytes) = (self.meter.clone(), self.ids[to], data.len() as u64);
        let send = self.rails.send(self.endpoint.clone(), self.ranks[to].clone(), to, tag, data, sharing, handed);
        async move {
            let t = Instant::now();
            send.await?;
            if let Some(m) = &meter {
                m.message(peer, bytes, t.elapsed().as_secs_f64());
            }
            Ok(())
        }
    }

    /// The whole table from every rank's row: each rank passes what it will send each rank
    /// (N counts, its own included) and every rank gets the same N × N table, for a following
    /// [`alltoallv`](Self::alltoallv) whose sizes were not known in advance. One exchange of
    /// 8·N bytes per pair, shift schedule.
    pub async fn gather_table(&self, row: &[u64]) -> Result<ComTable> {
        let n = self.size();
        let got = self
            .run(|| {
                if row.len() != n {
                    return Err(Error::Config(format!("a row of {} counts for a group of {n} ranks", row.len())));
                }
                let table = ComTable::uniform(n, 8 * n as u64)?;
                let mine: Bytes = row.iter().flat_map(|c| c.to_le_bytes()).collect();
                let schedule = Schedule::build(ScheduleKind::Shift, &table);
                Ok(Call {
                    table: Cow::Owned(table),
                    schedule: Cow::Owned(schedule),
                    kind: ScheduleKind::Shift.code(),
                    direct: false,
                    sends: vec![mine; n],
                })
            })
            .await?;
        let rows: Vec<Vec<u64>> = got
            .iter()
            .map(|b| b.chunks_exact(8).map(|c| u64::from_le_bytes(c.try_into().expect("8 bytes"))).collect())
            .collect();
        ComTable::from_rows(&rows)
    }

    fn check_table(&self, table: &ComTable) -> Result<()> {
        if table.n() != self.size() {
            return Err(Error::Config(format!(
                "the communication table is for {} ranks, the group has {}",
                table.n(),
                self.size()
            )));
        }
        Ok(())
    }

    /// `send` cut into this rank's parts by its row of `table`.
    fn split(&self, table: &ComTable, send: &Bytes) -> Result<Vec<Bytes>> {
        let row = table.row(self.rank);
        let total: u128 = row.iter().map(|&c| u128::from(c)).sum();
        if total != send.len() as u128 {
            return Err(Error::Config(format!(
                "rank {}'s row of the table adds up to {total} bytes, its buffer has {}",
                self.rank,
                send.len()
            )));
        }
        let mut at = 0usize;
        Ok(row
            .iter()
            .map(|&c| {
                let part = send.slice(at..at + c as usize);
                at += c as usize;
                part
            })
            .collect())
    }

    /// Takes the next tags, prepares the call (an error there is the call's error, sent to the
    /// other ranks like any other, so none waits for this one) and runs it.
    async fn run<'a>(&self, prepare: impl FnOnce() -> Result<Call<'a>>) -> Result<Vec<Bytes>> {
        let _serial = self.serial.lock().await;
        let seq = self.seq.fetch_add(1, Relaxed) & SEQ_MASK;
        let base = self.tag_base.wrapping_add(seq << 32);
        let result = match prepare().and_then(|c| self.check_call(&c).map(|()| c)) {
            Ok(call) => self.execute(base, call).await,
            Err(e) => Err(e),
        };
        if let Err(e) = &result
            && self.size() > 1
            && !matches!(e, Error::Peer(m) if m.starts_with(ABORTED))
        {
            self.broadcast_abort(base, e).await;
        }
        result
    }

    fn check_call(&self, c: &Call<'_>) -> Result<()> {
        let n = self.size();
        if c.schedule.n() != n {
            return Err(Error::Config(format!("the schedule is for {} ranks, the group has {n}", c.schedule.n())));
        }
        if c.sends.len() != n {
            return Err(Error::Config(format!(
                "{} send buffers for a group of {n} ranks (one per rank, this one's included)",
                c.sends.len()
            )));
        }
        for (j, s) in c.sends.iter().enumerate() {
            let want = c.table.get(self.rank, j);
            if s.len() as u64 != want {
                return Err(Error::Config(format!(
                    "the buffer for rank {j} has {} bytes, the table says rank {} sends it {want}",
                    s.len(),
                    self.rank
                )));
            }
        }
        Ok(())
    }

    /// Where each sender's message lands in the receive buffer: `offsets[j]..offsets[j + 1]` is
    /// rank j's (empty for this rank's own), `offsets[n]` the buffer's length.
    fn receive_offsets(&self, table: &ComTable) -> Result<Vec<usize>> {
        let (n, me) = (self.size(), self.rank);
        let mut offsets = Vec::with_capacity(n + 1);
        let mut total = 0usize;
        for j in 0..n {
            offsets.push(total);
            if j != me {
                let len = usize::try_from(table.get(j, me)).map_err(|_| {
                    Error::Config(format!(
                        "rank {j} sends {} bytes, more than this machine can address",
                        table.get(j, me)
                    ))
                })?;
                total = total
                    .checked_add(len)
                    .ok_or_else(|| Error::Config("the bytes this rank receives overflow its address space".into()))?;
            }
        }
        offsets.push(total);
        Ok(offsets)
    }

    async fn execute(&self, base: u64, call: Call<'_>) -> Result<Vec<Bytes>> {
        let n = self.size();
        let me = self.rank;
        if n == 1 {
            return Ok(call.sends);
        }
        let offsets = self.receive_offsets(&call.table)?;
        let tag = base.wrapping_add(DATA_TAG);
        let (buf, mut posts) = self.post_receives(&offsets, tag)?;
        let hello = hello(n, &call);
        let (right, left) = ((me + 1) % n, (me + n - 1) % n);
        if call.direct {
            let hello_sent = {
                let (ep, addrs, h) = (self.endpoint.clone(), self.ranks[right].clone(), hello.clone());
                Task(tokio::spawn(async move { ep.send(&addrs, base.wrapping_add(HELLO), h).await }))
            };
            self.check_hello(left, base, &hello).await?;
            self.direct(&call, tag, base, &buf, &offsets, &mut posts).await?;
            join(hello_sent, "exchange header").await?;
            return Ok(self.results(&call, buf, &offsets));
        }
        let mut hello_sent = Task({
            let (ep, addrs, h) = (self.endpoint.clone(), self.ranks[right].clone(), hello.clone());
            tokio::spawn(async move { ep.send(&addrs, base.wrapping_add(HELLO), h).await })
        });
        let mut hello_checked = false;
        // Sends handed to the rails and not yet acknowledged, each ending with its message.
        let mut sending: JoinSet<Result<()>> = JoinSet::new();
        let sharing = Sharing::of(&call.table, me, false);
        for step in call.schedule.rank_steps(me) {
            if step.recv_from.is_some() && !hello_checked {
                self.check_hello(left, base, &hello).await?;
                hello_checked = true;
            }
            let recv = async {
                match step.recv_from {
                    Some(from) => self.recv_or_abort(from, tag, base).await.map(Some),
                    None => Ok(None),
                }
            };
            let send = async {
                let Some(to) = step.send_to else { return Ok(()) };
                let data = call.sends[to].clone();
                if self.acked_steps {
                    return self.send_to(to, tag, data, &sharing, None).await;
                }
                let (handed, nearly_done) = tokio::sync::oneshot::channel();
                sending.spawn(self.send_to(to, tag, data, &sharing, Some(handed)));
                // Dropped once only the last segment per rail is unacknowledged, or when the
                // send ended first (its error, if any, comes from `sending`).
                let _ = nearly_done.await;
                Ok(())
            };
            let ((), landed) = tokio::try_join!(send, recv)?;
            while let Some(done) = sending.try_join_next() {
                done.map_err(|e| Error::Peer(format!("exchange send task: {e}")))??;
            }
            if let (Some(from), Some(landed)) = (step.recv_from, landed) {
                posts.pending.retain(|&p| p != self.ids[from]);
                let range = offsets[from]..offsets[from + 1];
                land(&buf, from, range, landed).await?;
            }
        }
        while let Some(done) = sending.join_next().await {
            done.map_err(|e| Error::Peer(format!("exchange send task: {e}")))??;
        }
        if !hello_checked {
            self.check_hello(left, base, &hello).await?;
        }
        match (&mut hello_sent.0).await {
            Ok(r) => r?,
            Err(e) => return Err(Error::Peer(format!("exchange header task: {e}"))),
        }
        debug_assert!(posts.pending.is_empty(), "every receive was delivered");
        drop(posts);
        Ok(self.results(&call, buf, &offsets))
    }

    /// The receive buffer, and a receive posted for each sender's range of it.
    fn post_receives(&self, offsets: &[usize], tag: u64) -> Result<(Arc<SharedBuf>, Posts<'_>)> {
        let (n, me, total) = (self.size(), self.rank, offsets[self.size()]);
        let buf = Arc::new(
            self.spares
                .buffer(total)
                .ok_or_else(|| Error::Config(format!("cannot allocate {total} bytes for what this rank receives")))?,
        );
        let mut posts = Posts { endpoint: &self.endpoint, tag, pending: Vec::new() };
        for j in (0..n).filter(|&j| j != me && offsets[j + 1] > offsets[j]) {
            let post = Posted { buf: buf.clone(), offset: offsets[j], len: offsets[j + 1] - offsets[j], reduce: None };
            // SAFETY: the ranges of different senders are disjoint, and nothing else touches
            // this one until its message is delivered (or the post is withdrawn): the buffer
            // is read only after every receive was delivered.
            unsafe { self.endpoint.post(self.ids[j], tag, post) };
            posts.pending.push(self.ids[j]);
        }
        Ok((buf, posts))
    }

    /// Every message at once: all sends started, every receive taken as it completes, then
    /// every send awaited. The busiest direction's bytes over the time is the direct rate.
    async fn direct(
        &self,
        call: &Call<'_>,
        tag: u64,
        base: u64,
        buf: &Arc<SharedBuf>,
        offsets: &[usize],
        posts: &mut Posts<'_>,
    ) -> Result<()> {
        let (n, me) = (self.size(), self.rank);
        let started = Instant::now();
        let mut sends = JoinSet::new();
        let sharing = Sharing::of(&call.table, me, true);
        for to in (0..n).filter(|&j| j != me && !call.sends[j].is_empty()) {
            let (ep, addrs, data) = (self.endpoint.clone(), self.ranks[to].clone(), call.sends[to].clone());
            // Not timed one by one: messages sent together share the links (the rate of the
            // whole goes to the meter below).
            sends.spawn(self.rails.send(ep, addrs, to, tag, data, &sharing, None));
        }
        for from in (0..n).filter(|&j| j != me && offsets[j + 1] > offsets[j]) {
            let landed = self.recv_or_abort(from, tag, base).await?;
            posts.pending.retain(|&p| p != self.ids[from]);
            land(buf, from, offsets[from]..offsets[from + 1], landed).await?;
        }
        while let Some(r) = sends.join_next().await {
            r.map_err(|e| Error::Peer(format!("exchange send task: {e}")))??;
        }
        if let Some(m) = &self.meter {
            let sent: u64 = (0..n).filter(|&j| j != me).map(|j| call.sends[j].len() as u64).sum();
            let got = (offsets[n] - offsets[me + 1] + offsets[me]) as u64;
            m.direct(sent.max(got), started.elapsed().as_secs_f64());
        }
        Ok(())
    }

    /// The result: one `Bytes` per sender, views of the receive buffer, this rank's own part
    /// shared from its send buffer.
    fn results(&self, call: &Call<'_>, buf: Arc<SharedBuf>, offsets: &[usize]) -> Vec<Bytes> {
        let (n, me) = (self.size(), self.rank);
        // SAFETY: every receive was delivered: nothing writes the buffer any more, and each
        // sender's range was written by its message.
        let data = unsafe { self.spares.bytes(buf) };
        (0..n).map(|j| if j == me { call.sends[me].clone() } else { data.slice(offsets[j]..offsets[j + 1]) }).collect()
    }

    /// Receives the left neighbour's description of the call and compares it with ours.
    async fn check_hello(&self, left: usize, base: u64, mine: &Bytes) -> Result<()> {
        let got = self.recv_or_abort(left, base.wrapping_add(HELLO), base).await?;
        let Landed::Fresh(got) = got else {
            return Err(Error::Protocol("an exchange header landed in place".into()));
        };
        if got[..] != mine[..] {
            return Err(Error::Protocol(format!(
                "rank {left} started a different exchange: it has {}, this rank has {}",
                describe_hello(&got),
                describe_hello(mine)
            )));
        }
        Ok(())
    }

    /// The message `tag` from rank `from`, unless some rank aborts the exchange first.
    async fn recv_or_abort(&self, from: usize, tag: u64, base: u64) -> Result<Landed> {
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
        }
    }

    /// Tells every other rank this exchange failed, so none waits for us forever; gives up
    /// after `ABORT_GRACE` (a dead peer never acknowledges).
    async fn broadcast_abort(&self, base: u64, e: &Error) {
        let why = Bytes::from(format!("rank {}: {e}", self.rank));
        let mut sends = JoinSet::new();
        for r in (0..self.size()).filter(|&r| r != self.rank) {
            let (ep, addrs, why) = (self.endpoint.clone(), self.ranks[r].clone(), why.clone());
            sends.spawn(async move { ep.send(&addrs, base.wrapping_add(ABORT), why).await });
        }
        let _ = tokio::time::timeout(ABORT_GRACE, async { while sends.join_next().await.is_some() {} }).await;
    }
}

/// The call's description that each rank sends its right neighbour.
fn hello(n: usize, c: &Call<'_>) -> Bytes {
    let mut v = Vec::with_capacity(HELLO_LEN);
    v.extend_from_slice(HELLO_MAGIC);
    v.extend_from_slice(&(n as u32).to_le_bytes());
    v.extend_from_slice(&[c.kind, 0, 0, 0]);
    v.extend_from_slice(&c.table.fingerprint().to_le_bytes());
    v.extend_from_slice(&c.schedule.fingerprint().to_le_bytes());
    Bytes::from(v)
}

fn describe_hello(b: &[u8]) -> String {
    if b.len() != HELLO_LEN || &b[..4] != HELLO_MAGIC {
        return format!("an unreadable header of {} bytes", b.len());
    }
    let u64_at = |i: usize| u64::from_le_bytes(b[i..i + 8].try_into().expect("8 bytes"));
    let n = u32::from_le_bytes(b[4..8].try_into().expect("4 bytes"));
    let kind = match b[8] {
        GIVEN => "a given schedule".to_string(),
        DIRECT => "direct".to_string(),
        c => ScheduleKind::from_code(c).map_or_else(|| format!("schedule {c}"), |k| k.to_string()),
    };
    format!("an exchange among {n} ranks ({kind}, table {:016x}, schedule {:016x})", u64_at(12), u64_at(20))
}
