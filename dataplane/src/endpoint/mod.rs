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
//! Bounds: what a peer may cost the receiver is limited (see `incoming`): a message's buffer
//! grows as it arrives, at most `alloc_ahead` ahead; a peer's half-received and untaken
//! messages stay under `max_open_bytes_per_peer` (all peers under `max_open_bytes`); an address
//! has at most `max_conns_per_addr` connections accepted; the reaper drops messages idle past
//! `partial_expiry` / `unclaimed_expiry`; and a second message under a posted (sender, tag) is
//! refused. A refused segment closes its connection, counted in [`Stats`].
//!
//! Authentication: with a rail key ([`RailAuth::Key`]), every connection, in and out, starts
//! with the handshake of [`auth`](crate::auth), which proves that both ends hold the key
//! before a frame is read; a connection that fails it, or does not finish it within
//! `connect_timeout`, is dropped and counted ([`Endpoint::handshake_failures`]). It
//! authenticates a connection's start, not each byte after it: an on-path attacker who can
//! hijack an established TCP connection is out of scope (see [`auth`](crate::auth)). A
//! `send` to a peer that proves it holds another key fails with [`Error::Handshake`]; one made
//! while the endpoint waits for its key ([`RailAuth::Pending`]) fails with
//! [`Error::NoRailKey`]. [`RailAuth::Open`], the default, adds no byte to the wire.
//!
//! Failures: a connection that errors, closes, or has unacknowledged segments and no reply for
//! `rail_timeout` is closed; its rail is out of service for that peer for a back-off (250 ms,
//! doubling to 4 s); every segment it had not had acknowledged is scheduled again on the rails
//! still up. After the back-off the rail is offered to the scheduler again and reconnected
//! lazily by the next segment that picks it.
//!
//! Every task is spawned on the endpoint's `TaskTracker` and stops on its `CancellationToken`;
//! [`Endpoint::shutdown`] cancels and awaits them all, dropping the endpoint cancels them.
//!
//! # Layout
//! * this module — the [`Endpoint`] API: `bind`, `send`, `recv`/`recv_any`, the crate-internal
//!   posted receives, counters, `shutdown`.
//! * `state` — `Inner`, what the endpoint's tasks share: scheduler state and send queues,
//!   per-peer rail health, connections, counters, the cancellation token and task tracker.
//! * `outgoing` — the record of a message being sent and of its segments.
//! * `conn` — the record of one rail connection: writer channels, segments in flight.
//! * `send` — the send path: cutting, scheduling, per-rail drains, the connection writer.
//! * `connect` — connections and the handshake: lazy connect, accept loops, the rail-key
//!   exchange and `Hello`.
//! * `receive` — the connection reader: segments into reassembly or posted memory, replies.
//! * `health` — failed connections, rail back-off, the watchdog.
//! * `incoming` — reassembly, posted receives and the mailbox `recv` matches on, with the
//!   bounds on what a peer may hold there.
//! * `reaper` — the task that expires idle incoming messages.
//! * `config`, `stats` — [`EndpointConfig`] and [`Stats`].
//!
//! Children import only siblings (shared types are in `state`, `outgoing`, `conn`), never this
//! module, so no file imports a module that imports it back (`tests/module_graph.rs`).

mod config;
mod conn;
mod connect;
mod health;
#[cfg(test)]
mod hostile;
#[cfg(test)]
mod hostile_auth;
mod incoming;
mod outgoing;
mod pacing;
mod reaper;
mod receive;
mod send;
mod state;
mod stats;

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::Ordering::Relaxed;

use bytes::{Bytes, BytesMut};
use tokio::net::TcpListener;

pub use config::{EndpointConfig, Faults};
pub(crate) use incoming::{Landed, Posted};
use state::Inner;
pub use stats::{RailStats, Stats};

use crate::auth::{RailAuth, RailKey};
use crate::error::{Error, Result};
use crate::peer_id::PeerId;
use crate::striping;

/// A peer's rail addresses, in rail order (what its [`Endpoint::local_addrs`] returned).
pub type PeerAddrs = [SocketAddr];

/// One end of the data plane: listens on every rail, sends and receives tagged messages.
pub struct Endpoint {
    inner: Arc<Inner>,
}

impl Endpoint {
    /// Binds one listener per rail and starts the endpoint's tasks.
    pub async fn bind(cfg: EndpointConfig) -> Result<Endpoint> {
        let cfg = cfg.validated()?;
        let mut listeners = Vec::with_capacity(cfg.rails.len());
        for (rail, ip) in cfg.rails.iter().enumerate() {
            let addr = SocketAddr::new(*ip, cfg.port);
            let l = TcpListener::bind(addr).await.map_err(|source| Error::Bind { rail, addr, source })?;
            listeners.push(l);
        }
        let local: Vec<SocketAddr> = listeners.iter().map(|l| l.local_addr()).collect::<std::io::Result<_>>()?;
        let inner = Arc::new(Inner::new(cfg, local));
        for (rail, l) in listeners.into_iter().enumerate() {
            inner.tasks.spawn(inner.clone().accept_loop(rail, l));
            inner.tasks.spawn(inner.clone().drain(rail));
        }
        inner.tasks.spawn(inner.clone().watchdog());
        inner.tasks.spawn(inner.clone().reaper());
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
    pub fn scheduler(&self) -> striping::SchedulerKind {
        self.inner.cfg.scheduler
    }

    /// Sends `data` to the peer listening on `peer` (its rail addresses), tagged `tag`, and
    /// returns once the peer acknowledged every segment. Many sends may run at once, to one
    /// peer or many. Dropping the future abandons the message (the peer never delivers it).
    ///
    /// The peer's addresses are copied when this is called, so the future borrows only `self`.
    pub fn send(&self, peer: &PeerAddrs, tag: u64, data: Bytes) -> impl Future<Output = Result<()>> + Send + '_ {
        let peer = peer.to_vec();
        async move { self.inner.send_message(peer, tag, data, None, None).await }
    }

    /// Like [`send`](Self::send), and drops `handed` as soon as every segment of the message
    /// waits in a rail's send queue (or the send ended), before the acknowledgements: a caller
    /// that keeps the wire busy starts its next message then, so no round trip separates two
    /// messages, while it still learns from the returned future when the data was delivered.
    pub(crate) fn send_handed(
        &self,
        peer: &PeerAddrs,
        tag: u64,
        data: Bytes,
        handed: tokio::sync::oneshot::Sender<()>,
    ) -> impl Future<Output = Result<()>> + Send + '_ {
        let peer = peer.to_vec();
        async move { self.inner.send_message(peer, tag, data, Some(send::Handed::Queued(handed)), None).await }
    }

    /// Like [`send`](Self::send), striped by shares instead of by the rail scheduler: `rates`
    /// is what this message can expect on each rail (bytes/s, in rail order), both ends
    /// considered — see [`striping::shares::message_rates`]. Each rail carries a share of the
    /// message in proportion to its rate, so all finish together, and a rail whose share would
    /// be too small to pay for itself ([`striping::shares::MIN_SHARE`]) carries none; the
    /// segments' rails are fixed before the first is queued. A rail out of service is passed
    /// over, its segments going where the scheduler picks; rails past the peer's (or this
    /// endpoint's) last are ignored.
    pub fn send_at_rates(
        &self,
        peer: &PeerAddrs,
        tag: u64,
        data: Bytes,
        rates: Vec<f64>,
    ) -> impl Future<Output = Result<()>> + Send + '_ {
        let peer = peer.to_vec();
        async move { self.inner.send_message(peer, tag, data, None, Some(rates)).await }
    }

    /// [`send_at_rates`](Self::send_at_rates) with `rates`, [`send`](Self::send) without, and
    /// drops `handed` (when given) once at most the last segment of each rail the message uses
    /// is unacknowledged: an exchange's step is done with its send then, its last round trip
    /// overlapping the next step's first segments.
    pub(crate) fn send_striped(
        &self,
        peer: &PeerAddrs,
        tag: u64,
        data: Bytes,
        rates: Option<Vec<f64>>,
        handed: Option<tokio::sync::oneshot::Sender<()>>,
    ) -> impl Future<Output = Result<()>> + Send + '_ {
        let peer = peer.to_vec();
        let handed = handed.map(send::Handed::Tail);
        async move { self.inner.send_message(peer, tag, data, handed, rates).await }
    }

    /// The next message tagged `tag` from `from`, waiting for one. Messages with the same
    /// sender and tag are delivered in the order they completed.
    ///
    /// Fails with [`Error::PeerGone`] if `from` looks gone for `stall_timeout` meanwhile (no
    /// connection to or from it, and none can be opened).
    pub async fn recv(&self, from: PeerId, tag: u64) -> Result<BytesMut> {
        let landed = self.recv_landed(from, tag).await?;
        fresh(from, tag, landed)
    }

    /// The next message tagged `tag` from any peer, with its sender.
    pub async fn recv_any(&self, tag: u64) -> Result<(PeerId, BytesMut)> {
        let (peer, landed) = self.inner.incoming.recv(None, tag, &self.inner.cancel).await?;
        self.inner.counters.messages_received.fetch_add(1, Relaxed);
        Ok((peer, fresh(peer, tag, landed)?))
    }

    /// Like [`recv`](Self::recv), for a message that may have been posted.
    pub(crate) async fn recv_landed(&self, from: PeerId, tag: u64) -> Result<Landed> {
        let (_, landed) = tokio::select! {
            r = self.inner.incoming.recv(Some(from), tag, &self.inner.cancel) => r?,
            e = self.inner.peer_lost(from) => return Err(e),
        };
        self.inner.counters.messages_received.fetch_add(1, Relaxed);
        Ok(landed)
    }

    /// Posts a receive: see [`Incoming::post`](incoming::Incoming::post).
    ///
    /// # Safety
    /// As [`Incoming::post`](incoming::Incoming::post): nothing else touches the posted bytes
    /// until the message was delivered (in place, or in its own buffer, which withdraws the
    /// post) or [`unpost`](Self::unpost) returned true.
    pub(crate) unsafe fn post(&self, from: PeerId, tag: u64, post: Posted) {
        // SAFETY: forwarded contract.
        unsafe { self.inner.incoming.post(from, tag, post) }
    }

    /// Withdraws a post; see [`Incoming::unpost`](incoming::Incoming::unpost).
    pub(crate) fn unpost(&self, from: PeerId, tag: u64) -> bool {
        self.inner.incoming.unpost(from, tag)
    }

    /// Every rail's delivery rate as measured from acknowledgements, bytes/s, in rail order;
    /// `None` for a rail that has carried nothing yet. The transport sizes segments and socket
    /// buffers from these; a scheduler or a cost model may read them too.
    pub fn rail_rates(&self) -> Vec<Option<f64>> {
        self.inner.rail_rates()
    }

    /// A snapshot of the endpoint's counters.
    pub fn stats(&self) -> Stats {
        Stats { open_bytes: self.inner.incoming.open_bytes(), ..self.inner.counters.snapshot() }
    }

    /// Sets the rail key: from now on every new connection, in and out, must pass the handshake
    /// under it. Turns a [`RailAuth::Pending`] endpoint into a working one, replaces the key of
    /// a [`RailAuth::Key`] one, and turns authentication on for a [`RailAuth::Open`] one.
    /// Connections already established are kept (they passed the handshake of their time).
    pub fn set_rail_key(&self, key: RailKey) {
        *self.inner.auth.write().expect("auth lock") = RailAuth::Key(key);
    }

    /// Rail connections dropped because they failed the handshake or did not finish it within
    /// `connect_timeout`, incoming and outgoing (also in [`Stats::handshake_failures`]).
    pub fn handshake_failures(&self) -> u64 {
        self.inner.counters.handshake_failures.load(Relaxed)
    }

    /// Messages partly received and not yet complete.
    pub fn open_incoming(&self) -> usize {
        self.inner.incoming.open()
    }

    /// Receives posted (by a collective) and not yet claimed by an arriving message: 0 when no
    /// collective is running, since a collective withdraws its own when it ends, however it
    /// ends (for tests and diagnostics).
    pub fn posted_receives(&self) -> usize {
        self.inner.incoming.posted()
    }

    /// Stops every task of the endpoint and waits for them; pending calls fail with `Shutdown`,
    /// and so do calls made afterwards. Takes `&self` so that an owner sharing the endpoint
    /// (`Arc<Endpoint>`) can await it too.
    pub async fn shutdown(&self) {
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
            .field("auth", &*self.inner.auth.read().expect("auth lock"))
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
        Landed::InPlace { .. } => {
            Err(Error::Protocol(format!("message tag {tag:#x} from {from} was posted; take it with recv_landed")))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rig::pattern;
    use std::net::IpAddr;
    use std::time::{Duration, Instant};

    fn cfg(faults: Faults) -> EndpointConfig {
        EndpointConfig {
            rails: (1..=3).map(|i| IpAddr::from([127, 0, 0, i])).collect(),
            scheduler: striping::SchedulerKind::Weighted,
            seg_max: 256 << 10,
            queue_max: 4,
            faults,
            ..Default::default()
        }
    }

    /// A posted reduction: every segment is verified before it touches the receiver's memory,
    /// so a segment corrupted on the wire (and resent) is reduced in exactly once, and the
    /// result is `op(remote, local)` element for element. A message that arrives before its
    /// post lands in its own buffer instead, and taking it withdraws the post.
    #[tokio::test]
    async fn posted_receives_land_in_place_and_reduce_only_verified_segments() {
        use crate::elem::{DType, ReduceOp};
        use crate::shared_buf::SharedBuf;
        let a = Endpoint::bind(cfg(Faults { corrupt: vec![1, 5], ..Default::default() })).await.unwrap();
        let b = Endpoint::bind(cfg(Faults::default())).await.unwrap();
        let n = 300_000; // i64 elements: 2.4 MB, ten segments of 256 KiB
        let remote: Vec<u8> = (0..n as i64).flat_map(|x| (3 * x).to_le_bytes()).collect();
        let local: Vec<u8> = (0..n as i64).flat_map(|x| (x - 7).to_le_bytes()).collect();
        // The posted range sits between two guard bands that must stay untouched.
        let mut mem = vec![0xAAu8; 64];
        mem.extend_from_slice(&local);
        mem.extend_from_slice(&[0xBB; 64]);
        let buf = Arc::new(SharedBuf::from_vec(mem));
        let post = Posted { buf: buf.clone(), offset: 64, len: local.len(), reduce: Some((DType::I64, ReduceOp::Sum)) };
        // SAFETY: nothing else touches the buffer until the message is delivered.
        unsafe { b.post(a.id(), 7, post) };
        let (sent, landed) = tokio::join!(a.send(&b.local_addrs(), 7, Bytes::from(remote)), b.recv_landed(a.id(), 7));
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
        let late = Posted { buf: buf.clone(), offset: 0, len: data.len(), reduce: None };
        // SAFETY: as above.
        unsafe { b.post(a.id(), 8, late) };
        match b.recv_landed(a.id(), 8).await.unwrap() {
            Landed::Fresh(m) => assert_eq!(m, data),
            Landed::InPlace { .. } => panic!("a message complete before its post landed in place"),
        }
        assert!(!b.unpost(a.id(), 8), "taking the message withdrew the post that came too late");
        assert_eq!(b.posted_receives(), 0);
    }

    /// A message sent at rates goes over the rails by the shares those rates give, every byte
    /// exact: 3:1 over rails 0 and 1 (rail 2 at rate 0 carries nothing), and a message too small
    /// for the slower rail to pay for itself goes on the faster alone, whichever rail that is.
    /// With no rate for a rail the peer lacks, the shares are over the rails both ends have.
    #[tokio::test]
    async fn sends_at_rates_stripe_by_their_shares() {
        use crate::striping::shares::{MIN_SHARE, rail_shares};
        let a = Endpoint::bind(cfg(Faults::default())).await.unwrap();
        let b = Endpoint::bind(cfg(Faults::default())).await.unwrap();
        let sent = |e: &Endpoint| -> Vec<u64> { e.stats().rails.iter().map(|r| r.bytes_sent).collect() };
        let cases: [(usize, Vec<f64>, Vec<u64>); 3] = [
            (4 << 20, vec![3e8, 1e8, 0.0], rail_shares(4 << 20, &[3e8, 1e8, 0.0], MIN_SHARE)),
            (100 << 10, vec![1e8, 3e8, 3e8], vec![0, 100 << 10, 0]),
            (3 << 20, vec![2e8, 2e8, 1e8], rail_shares(3 << 20, &[2e8, 2e8, 1e8], MIN_SHARE)),
        ];
        for (tag, (len, rates, want)) in cases.into_iter().enumerate() {
            let before = sent(&a);
            let data = pattern(len, tag as u64);
            let (s, got) = tokio::join!(
                a.send_at_rates(&b.local_addrs(), tag as u64, data.clone(), rates.clone()),
                b.recv(a.id(), tag as u64)
            );
            s.unwrap();
            assert_eq!(got.unwrap(), data, "case {tag}");
            let by_rail: Vec<u64> = sent(&a).iter().zip(&before).map(|(x, y)| x - y).collect();
            assert_eq!(by_rail, want, "case {tag}: rates {rates:?}");
        }
        assert_eq!(a.stats().resent, 0);
        // A peer with only the first two rails: rail 2's rate is ignored.
        let two = Endpoint::bind(EndpointConfig {
            rails: cfg(Faults::default()).rails[..2].to_vec(),
            ..cfg(Faults::default())
        })
        .await
        .unwrap();
        let before = sent(&a);
        let data = pattern(2 << 20, 9);
        let (s, got) = tokio::join!(
            a.send_at_rates(&two.local_addrs(), 9, data.clone(), vec![1e8, 1e8, 1e9]),
            two.recv(a.id(), 9)
        );
        s.unwrap();
        assert_eq!(got.unwrap(), data);
        let by_rail: Vec<u64> = sent(&a).iter().zip(&before).map(|(x, y)| x - y).collect();
        assert_eq!(by_rail, [1 << 20, 1 << 20, 0]);
    }

    /// The schedulers' unacknowledged bytes go back to zero on every rail once everything is
    /// acknowledged, including the segments lost with a connection that died mid-message: a
    /// leak would make `weighted` see a phantom backlog on that rail forever.
    #[tokio::test]
    async fn in_flight_bytes_return_to_zero_after_a_rail_dies() {
        let a = Endpoint::bind(cfg(Faults { kill_rail: Some((1, 1 << 20)), ..Default::default() })).await.unwrap();
        let b = Endpoint::bind(cfg(Faults::default())).await.unwrap();
        for (tag, seed) in [(1, 3), (2, 4)] {
            let data = pattern(8 << 20, seed);
            let (sent, got) = tokio::join!(a.send(&b.local_addrs(), tag, data.clone()), b.recv(a.id(), tag));
            sent.unwrap();
            assert_eq!(got.unwrap(), data);
        }
        assert_eq!(a.stats().rails[1].failures, 1);
        let in_flight = || -> Vec<u64> { a.inner.in_flight.iter().map(|f| f.load(Relaxed)).collect() };
        // A duplicate copy of a resent segment may still be answered after `send` returned.
        for _ in 0..100 {
            if in_flight().iter().all(|&f| f == 0) {
                break;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        assert_eq!(in_flight(), [0, 0, 0]);
        // And what the scheduler sees of the queues is empty too.
        let views = a.inner.sched.lock().unwrap().views(b.id(), 3, Instant::now(), &a.inner.in_flight);
        assert!(views.iter().all(|v| v.backlog_bytes() == 0 && v.queued == 0), "{views:?}");
    }
}
