//! Connections and the handshake: the connection to a peer on a rail, opened lazily (bound to
//! the local rail address, so the traffic leaves through that rail's NIC); the accept loop of
//! each rail's listener (at most `max_conns_per_addr` connections from one address at once,
//! handshakes included); the handshake both sides start with — with a rail key, the
//! authentication of [`auth`](crate::auth), then the `Hello` exchange — bounded by
//! `connect_timeout`; and the start of a connection's reader and writer tasks. A connection
//! that fails its handshake is dropped and counted (`Stats::handshake_failures`), and logged
//! at most once a second.

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::Ordering::Relaxed;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpSocket, TcpStream};
use tokio::sync::mpsc;
use tracing::{debug, warn};

use super::conn::Conn;
use super::state::{Health, InboundSlot, Inner, POLL};
use crate::auth::{self, ANSWER_LEN, MAC_LEN, NONCE_LEN, OFFER_PREFIX_LEN, RailAuth, RailKey};
use crate::error::{Error, Result};
use crate::peer_id::PeerId;
use crate::wire::{HELLO_LEN, Hello};

impl Inner {
    /// The connection to `peer` on `rail`, opened if there is none. Fails at once with
    /// [`Error::NoRailKey`] while the endpoint waits for its rail key, and with
    /// [`Error::Handshake`] if the peer proved it does not hold our key.
    pub(super) async fn connection(
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
        let key = match self.rail_auth() {
            RailAuth::Pending => return Err(Error::NoRailKey),
            RailAuth::Open => None,
            RailAuth::Key(k) => Some(k),
        };
        // One deadline for connecting and the handshake together.
        let deadline = tokio::time::Instant::now() + self.cfg.connect_timeout;
        let mut stream = tokio::time::timeout_at(deadline, self.dial(rail, addr))
            .await
            .map_err(|_| Error::Peer(format!("connecting rail {rail} to {addr} timed out")))??;
        // The peer accepted: from here on, what fails is the handshake.
        let greeted = tokio::time::timeout_at(deadline, self.greet(&mut stream, peer, rail, addr, key.as_ref())).await;
        let e = match greeted {
            Ok(Ok(())) => return Ok(self.start_conn(stream, peer, rail, None)),
            Ok(Err(e)) => e,
            Err(_) => Error::Peer(format!(
                "the rail handshake with {addr} (rail {rail}) took longer than {:?}",
                self.cfg.connect_timeout
            )),
        };
        self.handshake_failed(addr, rail, "outgoing", &e);
        Err(e)
    }

    /// A TCP connection to `addr` from this endpoint's address on `rail`.
    async fn dial(&self, rail: usize, addr: SocketAddr) -> Result<TcpStream> {
        let sock = if addr.is_ipv4() { TcpSocket::new_v4()? } else { TcpSocket::new_v6()? };
        // Bound to the local rail address, so the traffic leaves through that rail's NIC.
        sock.bind(SocketAddr::new(self.cfg.rails[rail], 0))?;
        let stream = sock.connect(addr).await?;
        stream.set_nodelay(true)?;
        Ok(stream)
    }

    /// The connecting side of the handshake: with a key, offer a nonce, check the acceptor's
    /// MAC, and send ours together with our `Hello`; then read the peer's `Hello`, which must
    /// be `peer`'s on `rail`.
    async fn greet(
        &self,
        stream: &mut TcpStream,
        peer: PeerId,
        rail: usize,
        addr: SocketAddr,
        key: Option<&RailKey>,
    ) -> Result<()> {
        let closed = |e: std::io::Error| closed_in_handshake(e, addr, rail);
        let mut first = Vec::with_capacity(MAC_LEN + HELLO_LEN);
        if let Some(key) = key {
            let nonce_c = auth::nonce(&self.rng)?;
            stream.write_all(&auth::offer(&nonce_c)).await.map_err(closed)?;
            let mut answer = [0u8; ANSWER_LEN];
            stream.read_exact(&mut answer).await.map_err(closed)?;
            let nonce_a = auth::check_answer(key, &nonce_c, &answer).map_err(|e| Error::Handshake {
                addr,
                rail,
                reason: e.to_string(),
            })?;
            first.extend_from_slice(&auth::proof(key, &nonce_c, &nonce_a));
        }
        first.extend_from_slice(&self.hello(rail).encode());
        stream.write_all(&first).await.map_err(closed)?;
        let h = read_hello(stream).await.map_err(|e| match e {
            Error::Io(e) => closed(e),
            e => e,
        })?;
        if h.peer != peer || usize::from(h.rail) != rail {
            return Err(Error::Peer(format!(
                "{addr} answered as {} rail {}, but rail {rail} of {peer} was expected",
                h.peer, h.rail
            )));
        }
        Ok(())
    }

    pub(super) async fn accept_loop(self: Arc<Self>, rail: usize, listener: TcpListener) {
        loop {
            let accepted = tokio::select! {
                r = listener.accept() => r,
                _ = self.cancel.cancelled() => return,
            };
            match accepted {
                Ok((stream, from)) => {
                    let Some(slot) = self.inbound_slot(from.ip()) else {
                        // Debug, not warn: a flood would otherwise flood the log too.
                        self.counters.refused_connections.fetch_add(1, Relaxed);
                        debug!(%from, rail, "refused a rail connection: its address has max_conns_per_addr already");
                        drop(stream);
                        continue;
                    };
                    let inner = self.clone();
                    // The slot lives until the connection's reader ends, or this task if the
                    // handshake fails: connections in handshake count against the cap too.
                    self.tasks.spawn(async move {
                        let r = tokio::time::timeout(inner.cfg.connect_timeout, inner.handshake(rail, stream)).await;
                        match r {
                            Ok(Ok((stream, peer))) => {
                                inner.start_conn(stream, peer, rail, Some(slot));
                            }
                            Ok(Err(e)) => inner.handshake_failed(from, rail, "incoming", &e),
                            Err(_) => inner.handshake_failed(
                                from,
                                rail,
                                "incoming",
                                &Error::Peer(format!(
                                    "the rail handshake took longer than {:?}",
                                    inner.cfg.connect_timeout
                                )),
                            ),
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

    /// Counts a connection dropped in its handshake, and logs it (at most once a second).
    fn handshake_failed(&self, remote: SocketAddr, rail: usize, side: &'static str, e: &Error) {
        self.counters.handshake_failures.fetch_add(1, Relaxed);
        if let Some(unlogged) = self.refusals.admit() {
            warn!(%remote, rail, side, error = %e, unlogged, "rail connection failed its handshake; dropped");
        }
    }

    /// This endpoint's `Hello` on `rail`.
    fn hello(&self, rail: usize) -> Hello {
        Hello { peer: self.id, rail: rail as u16 }
    }

    /// The accepting side of the handshake: with a key, the authentication (see
    /// [`challenge`](Self::challenge)); then the peer's `Hello` and ours. Refuses every
    /// connection while the endpoint waits for its key.
    async fn handshake(&self, rail: usize, mut stream: TcpStream) -> Result<(TcpStream, PeerId)> {
        stream.set_nodelay(true)?;
        match self.rail_auth() {
            RailAuth::Pending => return Err(Error::NoRailKey),
            RailAuth::Open => {}
            RailAuth::Key(key) => self.challenge(&mut stream, &key).await?,
        }
        let h = read_hello(&mut stream).await?;
        if usize::from(h.rail) != rail {
            return Err(Error::Protocol(format!(
                "peer {} connected to rail {rail} announcing rail {}",
                h.peer, h.rail
            )));
        }
        stream.write_all(&self.hello(rail).encode()).await?;
        // A peer that reaches us on this rail shows the rail works: offer it to the scheduler.
        let mut st = self.sched.lock().expect("sched lock");
        let m = st.queues.len();
        st.health(h.peer, m)[rail] = Health::default();
        Ok((stream, h.peer))
    }

    /// The acceptor's part of the rail-key exchange: read the offer (its magic and version
    /// first, so a peer speaking anything else is refused after five bytes), answer with our
    /// nonce and MAC, and check the connector's proof. Reads fixed sizes only.
    async fn challenge(&self, stream: &mut TcpStream, key: &RailKey) -> Result<()> {
        let mut prefix = [0u8; OFFER_PREFIX_LEN];
        stream.read_exact(&mut prefix).await?;
        auth::check_offer_prefix(&prefix)?;
        let mut nonce_c = [0u8; NONCE_LEN];
        stream.read_exact(&mut nonce_c).await?;
        let nonce_a = auth::nonce(&self.rng)?;
        stream.write_all(&auth::answer(key, &nonce_c, &nonce_a)).await?;
        let mut proof = [0u8; MAC_LEN];
        stream.read_exact(&mut proof).await?;
        auth::check_proof(key, &nonce_c, &nonce_a, &proof)
    }

    /// Registers a connected, handshaken stream and starts its reader and writer; an accepted
    /// one's `slot` lives as long as its reader.
    fn start_conn(
        self: &Arc<Self>,
        stream: TcpStream,
        peer: PeerId,
        rail: usize,
        slot: Option<InboundSlot>,
    ) -> Arc<Conn> {
        if let Some(n) = self.cfg.send_buffer
            && let Err(e) = socket2::SockRef::from(&stream).set_send_buffer_size(n)
        {
            warn!(%peer, rail, error = %e, "could not set the socket send buffer");
        }
        if let Err(e) = socket2::SockRef::from(&stream).set_tcp_keepalive(&keepalive()) {
            warn!(%peer, rail, error = %e, "could not turn on TCP keepalive");
        }
        let (rd, wr) = stream.into_split();
        let (reply_tx, reply_rx) = mpsc::unbounded_channel();
        // Capacity 1: the drain waits for each write anyway; the writer never holds more than
        // the segment it is writing.
        let (seg_tx, seg_rx) = mpsc::channel(1);
        let conn = Arc::new(Conn::new(
            self.next_conn.fetch_add(1, Relaxed),
            peer,
            rail,
            reply_tx,
            seg_tx,
            self.cancel.child_token(),
        ));
        self.conns.lock().expect("conns lock").insert((peer, rail), conn.clone());
        self.live.lock().expect("live lock").insert(conn.id, conn.clone());
        self.tasks.spawn(self.clone().writer(conn.clone(), wr, reply_rx, seg_rx));
        self.tasks.spawn(self.clone().reader(conn.clone(), rd, slot));
        debug!(%peer, rail, conn = conn.id, "rail connection up");
        conn
    }
}

/// The error for a connection the peer closed (or reset) during the handshake: what a peer
/// that waits for its rail key, holds another, or runs without authentication does.
fn closed_in_handshake(e: std::io::Error, addr: SocketAddr, rail: usize) -> Error {
    use std::io::ErrorKind::{BrokenPipe, ConnectionReset, UnexpectedEof};
    if matches!(e.kind(), UnexpectedEof | ConnectionReset | BrokenPipe) {
        Error::Peer(format!(
            "{addr} (rail {rail}) closed the connection during the rail handshake: it may be waiting for its rail key, hold another one, or disagree on authentication (--insecure on one side only)"
        ))
    } else {
        Error::Io(e)
    }
}

/// Reads the peer's `Hello`.
async fn read_hello(stream: &mut TcpStream) -> Result<Hello> {
    let mut b = [0u8; HELLO_LEN];
    stream.read_exact(&mut b).await?;
    Hello::decode(&b)
}

/// TCP keepalive of every rail connection: an idle connection whose link was cut (no data in
/// flight, so neither TCP's retransmissions nor the watchdog notice) is closed by the kernel
/// after about 5 s without an answer to its probes, so a receive waiting on the peer behind it
/// sees it gone (see `health`). A live peer's kernel answers the probes whatever its process is
/// doing, so a slow peer is never mistaken for a dead one.
fn keepalive() -> socket2::TcpKeepalive {
    socket2::TcpKeepalive::new()
        .with_time(std::time::Duration::from_secs(2))
        .with_interval(std::time::Duration::from_secs(1))
        .with_retries(3)
}
