//! Tests of the authenticated rail handshake (see `crate::auth`) over real loopback sockets:
//! endpoints with the same key, with different keys, waiting for their key, and open; and raw
//! TCP peers that play the hostile side of the handshake — the unauthenticated protocol,
//! garbage, silence, a wrong key — against an endpoint that requires the key, and against a
//! connecting endpoint. Each checks that the connection is dropped and counted and that
//! nothing it carried is delivered, and that a correct peer is still served.

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use bytes::Bytes;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

use super::{Endpoint, EndpointConfig};
use crate::auth::{self, ANSWER_LEN, OFFER_LEN, RailAuth, RailKey};
use crate::error::Error;
use crate::peer_id::PeerId;
use crate::rig::pattern;
use crate::wire::{FrameKind, HELLO_LEN, Hello, REPLY_BODY_LEN, Reply, ReplyStatus, SegmentHeader, checksum};

/// How long a test waits for something the endpoint does at once (a reply, a close).
const PROMPT: Duration = Duration::from_secs(5);
/// The handshake bound in these tests: short, so a silent peer's slot frees quickly.
const HANDSHAKE: Duration = Duration::from_millis(400);

fn key(b: u8) -> RailKey {
    RailKey::from_bytes(&[b; 32]).unwrap()
}

fn cfg(auth: RailAuth) -> EndpointConfig {
    EndpointConfig { auth, connect_timeout: HANDSHAKE, ..Default::default() }
}

async fn bind(auth: RailAuth) -> Endpoint {
    Endpoint::bind(cfg(auth)).await.unwrap()
}

/// A peer id that no endpoint listens on: what a raw client announces.
fn forged(n: u8) -> PeerId {
    PeerId(([10, 99, 0, n], 7000).into())
}

async fn eventually(what: &str, mut cond: impl FnMut() -> bool) {
    let until = Instant::now() + PROMPT;
    while !cond() {
        assert!(Instant::now() < until, "not within {PROMPT:?}: {what}");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// `a` sends one message to `b` and `b` receives it intact.
async fn exchange(a: &Endpoint, b: &Endpoint, tag: u64) {
    let data = pattern(3 << 20, tag);
    let (sent, got) = tokio::time::timeout(PROMPT, async {
        tokio::join!(a.send(&b.local_addrs(), tag, data.clone()), b.recv(a.id(), tag))
    })
    .await
    .expect("the exchange finished");
    sent.unwrap();
    assert_eq!(got.unwrap(), data);
}

/// Nothing reached `b`'s message code: no payload byte, no open message, nothing to take.
async fn nothing_delivered(b: &Endpoint) {
    let st = b.stats();
    assert_eq!(st.rails[0].bytes_received, 0, "payload bytes reached the reader");
    assert_eq!(b.open_incoming(), 0);
    assert!(tokio::time::timeout(Duration::from_millis(50), b.recv_any(1)).await.is_err(), "a message was delivered");
}

/// Reads (and drops) what the endpoint still sends until it closes the connection; false if it
/// keeps it open past `PROMPT`.
async fn closed_by_endpoint(s: &mut TcpStream) -> bool {
    let mut buf = [0u8; 4096];
    let until = tokio::time::Instant::now() + PROMPT;
    loop {
        match tokio::time::timeout_at(until, s.read(&mut buf)).await {
            Err(_) => return false,
            Ok(Ok(0) | Err(_)) => return true,
            Ok(Ok(_)) => {}
        }
    }
}

/// A raw client's connection, after the rail-key exchange under `key` (which the endpoint may
/// not accept: the caller finds out from what follows).
async fn authenticate(to: &Endpoint, key: &RailKey) -> std::io::Result<TcpStream> {
    let mut s = TcpStream::connect(to.local_addrs()[0]).await?;
    let nonce_c = [0x5a; 32];
    s.write_all(&auth::offer(&nonce_c)).await?;
    let mut answer = [0u8; ANSWER_LEN];
    s.read_exact(&mut answer).await?;
    // The endpoint's MAC is not checked: a hostile client would not either.
    let nonce_a: [u8; 32] = answer[..32].try_into().unwrap();
    s.write_all(&auth::proof(key, &nonce_c, &nonce_a)).await?;
    Ok(s)
}

/// The `Hello` exchange as `me`, then one whole message as one segment; the endpoint's reply
/// status, or `None` if it closed the connection instead.
async fn hello_and_message(s: &mut TcpStream, me: PeerId, tag: u64, data: &[u8]) -> Option<ReplyStatus> {
    s.write_all(&Hello { peer: me, rail: 0 }.encode()).await.ok()?;
    let mut b = [0u8; HELLO_LEN];
    tokio::time::timeout(PROMPT, s.read_exact(&mut b)).await.ok()?.ok()?;
    Hello::decode(&b).ok()?;
    let h = SegmentHeader {
        tag,
        msg_id: 1,
        total: data.len() as u64,
        offset: 0,
        len: data.len() as u32,
        crc: checksum(data),
    };
    s.write_all(&h.encode()).await.ok()?;
    s.write_all(data).await.ok()?;
    let mut kind = [0u8; 1];
    tokio::time::timeout(PROMPT, s.read_exact(&mut kind)).await.ok()?.ok()?;
    assert_eq!(FrameKind::from_byte(kind[0]).unwrap(), FrameKind::Reply);
    let mut r = [0u8; REPLY_BODY_LEN];
    s.read_exact(&mut r).await.ok()?;
    Some(Reply::decode(&r).unwrap().status)
}

/// Two endpoints with the same key exchange messages both ways; neither counts a failure. The
/// raw client that passes the exchange with the key is served too, which shows that the
/// hostile clients below fail for what they send, not because the raw client is wrong.
#[tokio::test]
async fn endpoints_with_the_same_key_exchange_messages() {
    let a = bind(RailAuth::Key(key(1))).await;
    let b = bind(RailAuth::Key(key(1))).await;
    exchange(&a, &b, 1).await;
    exchange(&b, &a, 2).await;
    assert_eq!((a.handshake_failures(), b.handshake_failures()), (0, 0));
    assert_eq!(a.stats().handshake_failures, 0);

    let mut s = authenticate(&b, &key(1)).await.unwrap();
    let data = pattern(100_000, 3);
    assert_eq!(hello_and_message(&mut s, forged(1), 5, &data).await, Some(ReplyStatus::Ok));
    assert_eq!(b.recv(forged(1), 5).await.unwrap(), data);
    assert_eq!(b.handshake_failures(), 0);
}

/// Endpoints with different keys cannot exchange a message, either way: the connecting side
/// finds the acceptor's MAC wrong and fails the send at once with a clear error, and both sides
/// count the dropped connection; nothing is delivered.
#[tokio::test]
async fn endpoints_with_different_keys_cannot_exchange_and_both_count_it() {
    let a = bind(RailAuth::Key(key(1))).await;
    let b = bind(RailAuth::Key(key(2))).await;
    for (from, to) in [(&a, &b), (&b, &a)] {
        let before = (from.handshake_failures(), to.handshake_failures());
        let started = Instant::now();
        let e = tokio::time::timeout(PROMPT, from.send(&to.local_addrs(), 1, pattern(1 << 20, 1)))
            .await
            .expect("the send failed promptly")
            .unwrap_err();
        assert!(matches!(e, Error::Handshake { .. }), "{e:?}");
        let text = e.to_string();
        assert!(text.contains("does not hold this cluster's rail key"), "{text}");
        assert!(text.contains(&to.local_addrs()[0].to_string()), "{text}");
        assert!(started.elapsed() < Duration::from_secs(2), "failed at once, not by stalling");
        assert_eq!(from.handshake_failures(), before.0 + 1);
        eventually("the acceptor counted the dropped connection", || to.handshake_failures() == before.1 + 1).await;
        nothing_delivered(to).await;
    }
}

/// Against an endpoint that requires the key, a raw client that speaks the unauthenticated
/// protocol (a `Hello` and a segment), sends garbage (a megabyte of it), stays silent, or does
/// the exchange with another key is dropped and counted, one failure each, and nothing it sent
/// is delivered; a silent one is dropped after the handshake bound. The endpoint still
/// serves a correct peer afterwards.
#[tokio::test]
async fn raw_clients_without_the_key_are_dropped_counted_and_never_delivered() {
    let b = bind(RailAuth::Key(key(1))).await;
    let addr = b.local_addrs()[0];
    let data = pattern(64 << 10, 4);
    let mut failures = 0;

    // The unauthenticated protocol: refused after its first five bytes, before any `Hello`
    // comes back, without waiting for the handshake bound.
    let started = Instant::now();
    let mut s = TcpStream::connect(addr).await.unwrap();
    assert_eq!(hello_and_message(&mut s, forged(1), 1, &data).await, None, "the unauthenticated protocol was served");
    assert!(started.elapsed() < HANDSHAKE / 2, "refused only after {:?}", started.elapsed());
    failures += 1;
    eventually("old protocol counted", || b.handshake_failures() == failures).await;

    // Garbage, a megabyte of it.
    let mut s = TcpStream::connect(addr).await.unwrap();
    let _ = s.write_all(&pattern(1 << 20, 5)).await;
    assert!(closed_by_endpoint(&mut s).await, "garbage kept open");
    failures += 1;
    eventually("garbage counted", || b.handshake_failures() == failures).await;

    // The right magic, then garbage where the proof goes.
    let mut s = TcpStream::connect(addr).await.unwrap();
    s.write_all(&auth::offer(&[1; 32])).await.unwrap();
    let mut answer = [0u8; ANSWER_LEN];
    s.read_exact(&mut answer).await.unwrap();
    let _ = s.write_all(&[0u8; 32]).await;
    assert!(closed_by_endpoint(&mut s).await, "a zero proof kept open");
    failures += 1;
    eventually("zero proof counted", || b.handshake_failures() == failures).await;

    // Silence: dropped once the handshake bound passes, not before.
    let started = Instant::now();
    let mut s = TcpStream::connect(addr).await.unwrap();
    assert!(closed_by_endpoint(&mut s).await, "a silent client kept open");
    let held = started.elapsed();
    assert!(held >= HANDSHAKE - Duration::from_millis(50) && held < HANDSHAKE * 5, "a silent client was held {held:?}");
    failures += 1;
    eventually("silence counted", || b.handshake_failures() == failures).await;

    // Another key: the proof fails, and the `Hello` and segment behind it are never read.
    let mut s = authenticate(&b, &key(2)).await.unwrap();
    assert_eq!(hello_and_message(&mut s, forged(2), 1, &data).await, None);
    failures += 1;
    eventually("wrong key counted", || b.handshake_failures() == failures).await;

    nothing_delivered(&b).await;
    assert_eq!(b.stats().refused_connections, 0);
    let a = bind(RailAuth::Key(key(1))).await;
    exchange(&a, &b, 9).await;
    assert_eq!(b.handshake_failures(), failures);
}

/// The per-address cap covers connections still in their handshake: silent clients fill it,
/// the next connection is refused (counted apart), and the slots free once the handshakes
/// time out.
#[tokio::test]
async fn silent_handshakes_hold_slots_of_the_address_cap_only_until_they_time_out() {
    let b = Endpoint::bind(EndpointConfig { max_conns_per_addr: 2, ..cfg(RailAuth::Key(key(1))) }).await.unwrap();
    let addr = b.local_addrs()[0];
    let mut silent = vec![];
    for _ in 0..2 {
        silent.push(TcpStream::connect(addr).await.unwrap());
    }
    // Let the endpoint accept both before the third arrives.
    tokio::time::sleep(Duration::from_millis(50)).await;
    let mut third = TcpStream::connect(addr).await.unwrap();
    assert!(closed_by_endpoint(&mut third).await);
    assert_eq!(b.stats().refused_connections, 1);
    for s in &mut silent {
        assert!(closed_by_endpoint(s).await);
    }
    eventually("both silent handshakes counted", || b.handshake_failures() == 2).await;
    let a = bind(RailAuth::Key(key(1))).await;
    exchange(&a, &b, 3).await;
}

/// A connecting endpoint facing a hostile acceptor: one that answers with a wrong MAC fails
/// the send at once with a clear error; one that accepts and stays silent is dropped after
/// the handshake bound; both count, and neither gets a byte of the message.
#[tokio::test]
async fn a_connector_drops_acceptors_that_answer_wrong_or_not_at_all() {
    let a = Endpoint::bind(EndpointConfig { stall_timeout: Duration::from_millis(1500), ..cfg(RailAuth::Key(key(1))) })
        .await
        .unwrap();

    // A wrong answer: its MAC under another key.
    let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let to: SocketAddr = l.local_addr().unwrap();
    let acceptor = tokio::spawn(async move {
        let (mut s, _) = l.accept().await.unwrap();
        let mut offer = [0u8; OFFER_LEN];
        s.read_exact(&mut offer).await.unwrap();
        let nonce_c: [u8; 32] = offer[5..].try_into().unwrap();
        s.write_all(&auth::answer(&key(2), &nonce_c, &[7; 32])).await.unwrap();
        let mut rest = vec![];
        let _ = s.read_to_end(&mut rest).await;
        rest
    });
    let e = a.send(&[to], 1, Bytes::from_static(b"secret")).await.unwrap_err();
    assert!(matches!(e, Error::Handshake { .. }), "{e:?}");
    assert_eq!(a.handshake_failures(), 1);
    assert!(acceptor.await.unwrap().is_empty(), "the connector sent something after a wrong answer");

    // Silence: every attempt times out in the handshake; the send stalls.
    let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let to: SocketAddr = l.local_addr().unwrap();
    let acceptor = tokio::spawn(async move {
        let mut got = vec![];
        let mut conns = vec![];
        loop {
            let (mut s, _) = match tokio::time::timeout(Duration::from_secs(3), l.accept()).await {
                Ok(r) => r.unwrap(),
                Err(_) => return got,
            };
            let mut offer = [0u8; OFFER_LEN];
            s.read_exact(&mut offer).await.unwrap();
            got.push(offer);
            conns.push(s);
        }
    });
    let e = a.send(&[to], 1, Bytes::from_static(b"secret")).await.unwrap_err();
    assert!(matches!(e, Error::Stalled { .. }), "{e:?}");
    assert!(a.handshake_failures() >= 2, "{}", a.handshake_failures());
    let offers = acceptor.await.unwrap();
    assert!(!offers.is_empty());
    for o in offers {
        assert_eq!(&o[..5], b"PLXA\x01", "only the offer, never the message");
    }
}

/// A `Pending` endpoint refuses everything: its own sends fail at once with "no rail key yet",
/// and every incoming connection (even one holding the right key) is dropped and counted. A
/// send to it that started before its key arrived goes through once it does; afterwards it
/// works both ways.
#[tokio::test]
async fn a_pending_endpoint_refuses_everything_until_it_gets_its_key() {
    let a = bind(RailAuth::Key(key(1))).await;
    let p = bind(RailAuth::Pending).await;

    let e = tokio::time::timeout(PROMPT, p.send(&a.local_addrs(), 1, pattern(1000, 1)))
        .await
        .expect("failed at once")
        .unwrap_err();
    assert!(matches!(e, Error::NoRailKey), "{e:?}");
    assert_eq!(e.to_string(), "no rail key yet: the worker has not registered with the coordinator");
    assert_eq!(p.handshake_failures(), 0, "no connection was made");
    assert_eq!(a.handshake_failures(), 0);

    let mut s = authenticate(&p, &key(1)).await.map(Some).unwrap_or(None);
    if let Some(s) = &mut s {
        assert!(closed_by_endpoint(s).await);
    }
    eventually("the keyed raw client counted", || p.handshake_failures() == 1).await;
    let mut s = TcpStream::connect(p.local_addrs()[0]).await.unwrap();
    assert_eq!(hello_and_message(&mut s, forged(1), 1, b"hi").await, None);
    eventually("the unauthenticated client counted", || p.handshake_failures() == 2).await;

    // A send from a keyed peer is refused (and retried) while the key is pending...
    let data = pattern(2 << 20, 2);
    let send = a.send(&p.local_addrs(), 3, data.clone());
    tokio::pin!(send);
    let waited = tokio::time::timeout(Duration::from_millis(600), &mut send).await;
    assert!(waited.is_err(), "delivered before the key arrived: {waited:?}");
    assert!(p.handshake_failures() >= 3);
    assert!(a.handshake_failures() >= 1);
    nothing_delivered(&p).await;

    // ...and delivered once it arrives.
    p.set_rail_key(key(1));
    let (sent, got) = tokio::time::timeout(PROMPT, async { tokio::join!(send, p.recv(a.id(), 3)) })
        .await
        .expect("delivered after the key arrived");
    sent.unwrap();
    assert_eq!(got.unwrap(), data);
    exchange(&p, &a, 4).await;
}

/// `Open` (the default) puts no byte of the handshake on the wire: what a connecting endpoint
/// sends first is its `Hello`, while a keyed one sends the offer. An open endpoint serves the
/// unauthenticated protocol as before, and an open and a keyed endpoint cannot talk.
#[tokio::test]
async fn an_open_endpoint_speaks_the_unauthenticated_protocol_as_before() {
    assert!(matches!(EndpointConfig::default().auth, RailAuth::Open));
    for (auth, first) in [(RailAuth::Open, &b"PLXD\x01"[..]), (RailAuth::Key(key(1)), &b"PLXA\x01"[..])] {
        let a = bind(auth).await;
        let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let to = l.local_addr().unwrap();
        let sent = tokio::spawn(async move {
            let _ = tokio::time::timeout(Duration::from_secs(1), a.send(&[to], 1, pattern(10, 1))).await;
        });
        let (mut s, _) = l.accept().await.unwrap();
        let mut b = [0u8; 5];
        s.read_exact(&mut b).await.unwrap();
        assert_eq!(&b, first);
        if first.starts_with(b"PLXD") {
            let mut rest = [0u8; HELLO_LEN - 5];
            s.read_exact(&mut rest).await.unwrap();
            let mut hello = [0u8; HELLO_LEN];
            hello[..5].copy_from_slice(&b);
            hello[5..].copy_from_slice(&rest);
            Hello::decode(&hello).unwrap();
        }
        drop(s);
        sent.await.unwrap();
    }

    let o = bind(RailAuth::Open).await;
    let mut s = TcpStream::connect(o.local_addrs()[0]).await.unwrap();
    assert_eq!(hello_and_message(&mut s, forged(1), 1, b"plain").await, Some(ReplyStatus::Ok));
    assert_eq!(&o.recv(forged(1), 1).await.unwrap()[..], b"plain");
    let o2 = bind(RailAuth::Open).await;
    exchange(&o, &o2, 2).await;
    assert_eq!(o.handshake_failures(), 0);

    // Open and keyed: the keyed acceptor refuses the open connector, the open acceptor the
    // keyed one's offer; both sends stall, and both acceptors count.
    let k = Endpoint::bind(EndpointConfig { stall_timeout: Duration::from_millis(1000), ..cfg(RailAuth::Key(key(1))) })
        .await
        .unwrap();
    let o3 = Endpoint::bind(EndpointConfig { stall_timeout: Duration::from_millis(1000), ..cfg(RailAuth::Open) })
        .await
        .unwrap();
    let e = o3.send(&k.local_addrs(), 1, pattern(10, 1)).await.unwrap_err();
    assert!(matches!(e, Error::Stalled { .. }), "{e:?}");
    assert!(k.handshake_failures() >= 1);
    let before = o3.handshake_failures();
    let e = k.send(&o3.local_addrs(), 1, pattern(10, 1)).await.unwrap_err();
    assert!(matches!(e, Error::Stalled { .. }), "{e:?}");
    assert!(o3.handshake_failures() > before);
    nothing_delivered(&k).await;
    nothing_delivered(&o3).await;
}

/// `set_rail_key` on an open endpoint turns authentication on for new connections and keeps
/// the ones already up; a new key replaces the old one the same way.
#[tokio::test]
async fn set_rail_key_applies_to_new_connections_and_keeps_established_ones() {
    let b = bind(RailAuth::Open).await;
    let mut old = TcpStream::connect(b.local_addrs()[0]).await.unwrap();
    assert_eq!(hello_and_message(&mut old, forged(1), 1, b"before").await, Some(ReplyStatus::Ok));
    b.set_rail_key(key(1));
    // The established connection still carries messages.
    let h = SegmentHeader { tag: 2, msg_id: 2, total: 5, offset: 0, len: 5, crc: checksum(b"after") };
    old.write_all(&h.encode()).await.unwrap();
    old.write_all(b"after").await.unwrap();
    let mut r = [0u8; 1 + REPLY_BODY_LEN];
    old.read_exact(&mut r).await.unwrap();
    assert_eq!(Reply::decode(r[1..].try_into().unwrap()).unwrap().status, ReplyStatus::Ok);
    assert_eq!(&b.recv(forged(1), 2).await.unwrap()[..], b"after");
    // A new unauthenticated one is refused.
    let mut s = TcpStream::connect(b.local_addrs()[0]).await.unwrap();
    assert_eq!(hello_and_message(&mut s, forged(2), 3, b"x").await, None);
    eventually("counted", || b.handshake_failures() == 1).await;

    // Rotation: a peer with the old key is refused, one with the new key served.
    let a1 = bind(RailAuth::Key(key(1))).await;
    exchange(&a1, &b, 4).await;
    b.set_rail_key(key(2));
    let a2 = bind(RailAuth::Key(key(1))).await;
    let e = a2.send(&b.local_addrs(), 5, pattern(10, 5)).await.unwrap_err();
    assert!(matches!(e, Error::Handshake { .. }), "{e:?}");
    let a3 = bind(RailAuth::Key(key(2))).await;
    exchange(&a3, &b, 6).await;
    // a1's connection, made under the old key, is still up.
    exchange(&a1, &b, 7).await;
}

/// An endpoint's `Debug`, and its configuration's, never show the key.
#[tokio::test]
async fn debug_output_never_shows_the_key() {
    let k = RailKey::from_bytes(&[0xc3; 32]).unwrap();
    let cfg = cfg(RailAuth::Key(k.clone()));
    let e = Endpoint::bind(cfg.clone()).await.unwrap();
    for s in [format!("{cfg:?}"), format!("{e:?}")] {
        assert!(s.contains("redacted"), "{s}");
        assert!(!s.contains("195, 195") && !s.contains("c3c3"), "{s}");
    }
}
