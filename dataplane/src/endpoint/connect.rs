//! Connections and the handshake: the connection to a peer on a rail, opened lazily (bound to
//! the local rail address, so the traffic leaves through that rail's NIC); the accept loop of
//! each rail's listener (at most `max_conns_per_addr` connections from one address at once);
//! the `Hello` exchange both sides start with; and the start of a connection's reader and
//! writer tasks.

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::Ordering::Relaxed;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpSocket, TcpStream};
use tokio::sync::mpsc;
use tracing::{debug, warn};

use super::conn::Conn;
use super::state::{Health, InboundSlot, Inner, POLL};
use crate::error::{Error, Result};
use crate::peer_id::PeerId;
use crate::wire::{HELLO_LEN, Hello};

impl Inner {
    /// The connection to `peer` on `rail`, opened if there is none.
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
        let stream = tokio::time::timeout(self.cfg.connect_timeout, self.connect(peer, rail, addr))
            .await
            .map_err(|_| Error::Peer(format!("connecting rail {rail} to {addr} timed out")))??;
        Ok(self.start_conn(stream, peer, rail, None))
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
                    self.tasks.spawn(async move {
                        let r = tokio::time::timeout(
                            inner.cfg.connect_timeout,
                            inner.handshake(rail, stream),
                        )
                        .await;
                        match r {
                            Ok(Ok((stream, peer))) => {
                                inner.start_conn(stream, peer, rail, Some(slot));
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
        self.tasks
            .spawn(self.clone().reader(conn.clone(), rd, slot));
        debug!(%peer, rail, conn = conn.id, "rail connection up");
        conn
    }
}

/// Reads the peer's half of the rail handshake.
async fn read_hello(stream: &mut TcpStream) -> Result<Hello> {
    let mut b = [0u8; HELLO_LEN];
    stream.read_exact(&mut b).await?;
    Hello::decode(&b)
}
