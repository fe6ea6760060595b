//! Tests that play a hostile peer against an endpoint over real loopback sockets: a raw TCP
//! client that speaks the wire format (`crate::wire`) and sends what no correct endpoint
//! sends. Each checks one bound of the receiving side (see `incoming`): what a peer may make
//! the endpoint allocate and hold, how many connections an address may have, how long what a
//! peer abandons is kept, and that a posted receive takes exactly one message.

use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use super::incoming::{Landed, MSG_COST, Posted};
use super::{Endpoint, EndpointConfig};
use crate::peer_id::PeerId;
use crate::rig::pattern;
use crate::shared_buf::SharedBuf;
use crate::wire::{FrameKind, HELLO_LEN, Hello, REPLY_BODY_LEN, Reply, ReplyStatus, SegmentHeader, checksum};

/// How long a test waits for something the endpoint does at once (a reply, a close).
const PROMPT: Duration = Duration::from_secs(5);

/// A peer id that no endpoint listens on: what the hostile client announces.
fn forged(n: u8) -> PeerId {
    PeerId(([10, 99, 0, n], 7000).into())
}

/// A raw rail connection that has done the handshake as `me`.
struct Raw(TcpStream);

impl Raw {
    async fn connect(to: &Endpoint, me: PeerId) -> Raw {
        Raw::try_connect(to, me).await.unwrap_or_else(|e| panic!("handshake with {:?} as {me}: {e}", to.id()))
    }

    async fn try_connect(to: &Endpoint, me: PeerId) -> std::io::Result<Raw> {
        let mut s = TcpStream::connect(to.local_addrs()[0]).await?;
        s.set_nodelay(true)?;
        s.write_all(&Hello { peer: me, rail: 0 }.encode()).await?;
        let mut b = [0u8; HELLO_LEN];
        tokio::time::timeout(PROMPT, s.read_exact(&mut b))
            .await
            .map_err(|_| std::io::Error::other("no hello back"))??;
        Hello::decode(&b).map_err(std::io::Error::other)?;
        Ok(Raw(s))
    }

    /// Writes one segment (write errors are left to the next `reply`, which sees the close).
    async fn segment(&mut self, tag: u64, msg_id: u64, total: u64, offset: u64, payload: &[u8]) {
        let h = SegmentHeader { tag, msg_id, total, offset, len: payload.len() as u32, crc: checksum(payload) };
        let _ = self.0.write_all(&h.encode()).await;
        let _ = self.0.write_all(payload).await;
    }

    /// The next reply, or `None` once the endpoint closed the connection.
    async fn reply(&mut self) -> Option<Reply> {
        let mut kind = [0u8; 1];
        let read =
            tokio::time::timeout(PROMPT, self.0.read_exact(&mut kind)).await.expect("a reply or a close, promptly");
        read.ok()?;
        assert_eq!(FrameKind::from_byte(kind[0]).unwrap(), FrameKind::Reply);
        let mut b = [0u8; REPLY_BODY_LEN];
        self.0.read_exact(&mut b).await.ok()?;
        Some(Reply::decode(&b).unwrap())
    }

    async fn status(&mut self) -> Option<ReplyStatus> {
        self.reply().await.map(|r| r.status)
    }

    /// Sends a whole message as one segment and returns the endpoint's answer.
    async fn message(&mut self, tag: u64, msg_id: u64, data: &[u8]) -> Option<ReplyStatus> {
        self.segment(tag, msg_id, data.len() as u64, 0, data).await;
        self.status().await
    }
}

async fn eventually(what: &str, mut cond: impl FnMut() -> bool) {
    let until = Instant::now() + PROMPT;
    while !cond() {
        assert!(Instant::now() < until, "not within {PROMPT:?}: {what}");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// A first segment announcing a 64 GiB message (the default `max_message`) makes the receiver
/// allocate one `alloc_ahead` step, not 64 GiB; a segment far beyond what arrived is put off
/// (busy), not allocated for; and the endpoint goes on serving.
#[tokio::test]
async fn a_first_segment_announcing_64_gib_allocates_only_a_step() {
    let cfg = EndpointConfig::default();
    let step = cfg.alloc_ahead;
    let b = Endpoint::bind(cfg).await.unwrap();
    let mut c = Raw::connect(&b, forged(1)).await;
    let seg = pattern(1 << 20, 1);
    c.segment(9, 1, 64 << 30, 0, &seg).await;
    assert_eq!(c.status().await, Some(ReplyStatus::Ok));
    let held = b.stats().open_bytes;
    assert_eq!(held, step + MSG_COST, "one step allocated, not 64 GiB");

    c.segment(9, 1, 64 << 30, 32 << 30, &seg).await;
    assert_eq!(c.status().await, Some(ReplyStatus::Busy));
    assert_eq!(b.stats().open_bytes, held, "nothing allocated for a far segment");
    assert_eq!(b.open_incoming(), 1);

    // The endpoint still serves a correct peer.
    let a = Endpoint::bind(EndpointConfig::default()).await.unwrap();
    let data = pattern(3 << 20, 2);
    let (sent, got) = tokio::join!(a.send(&b.local_addrs(), 4, data.clone()), b.recv(a.id(), 4));
    sent.unwrap();
    assert_eq!(got.unwrap(), data);
}

/// A message's buffer grows as its segments arrive, a step ahead; the segment that would take
/// its peer over `max_open_bytes_per_peer` is refused, the connection dropped and counted, and
/// so is one that would take all peers over `max_open_bytes` (a peer cannot escape its cap by
/// announcing new ids). Taking a message gives its bytes back.
#[tokio::test]
async fn a_peer_over_its_open_bytes_cap_is_dropped_and_counted() {
    const K: u64 = 1 << 10;
    let b = Endpoint::bind(EndpointConfig {
        alloc_ahead: 256 * K,
        max_open_bytes_per_peer: 1024 * K,
        max_open_bytes: 1536 * K,
        ..Default::default()
    })
    .await
    .unwrap();
    let (p, q) = (forged(1), forged(2));

    // p sends a 16 MiB message front to back, 128 KiB at a time.
    let mut c = Raw::connect(&b, p).await;
    let seg = pattern(128 * K as usize, 3);
    let mut arrived = 0;
    loop {
        c.segment(1, 1, 16 << 20, arrived, &seg).await;
        match c.status().await {
            Some(s) => assert_eq!(s, ReplyStatus::Ok),
            None => break,
        }
        arrived += 128 * K;
        let held = b.stats().open_bytes;
        assert!(held <= arrived + 256 * K + MSG_COST, "{held} bytes held after {arrived} arrived");
        assert!(arrived < 16 << 20, "never refused");
    }
    let st = b.stats();
    assert_eq!(st.dropped_over_budget, 1);
    assert!(st.open_bytes <= 1024 * K, "{}", st.open_bytes);
    assert!(arrived >= 512 * K, "refused only near the cap: {arrived}");
    let p_holds = st.open_bytes;

    // q stays under its own cap, but not all peers under theirs.
    let mut c = Raw::connect(&b, q).await;
    let big = pattern(600 * K as usize, 4);
    assert_eq!(c.message(2, 1, &big).await, Some(ReplyStatus::Ok));
    assert_eq!(b.stats().open_bytes, p_holds + 600 * K + MSG_COST);
    assert_eq!(c.message(2, 2, &pattern(200 * K as usize, 5)).await, None);
    assert_eq!(b.stats().dropped_over_budget, 2);

    // Taking q's message returns its bytes, and q may send again.
    assert_eq!(b.recv(q, 2).await.unwrap(), big);
    assert_eq!(b.stats().open_bytes, p_holds);
    let mut c = Raw::connect(&b, q).await;
    assert_eq!(c.message(2, 3, &pattern(200 * K as usize, 5)).await, Some(ReplyStatus::Ok));
}

/// An address with `max_conns_per_addr` connections gets no more: the next one is closed
/// before its handshake and counted; once one closes, a new one is accepted.
#[tokio::test]
async fn connections_over_the_cap_of_an_address_are_refused_and_counted() {
    let b = Endpoint::bind(EndpointConfig { max_conns_per_addr: 2, ..Default::default() }).await.unwrap();
    let mut first = Raw::connect(&b, forged(1)).await;
    let second = Raw::connect(&b, forged(2)).await;
    assert!(Raw::try_connect(&b, forged(3)).await.is_err(), "a third connection from 127.0.0.1 was served");
    assert_eq!(b.stats().refused_connections, 1);
    assert_eq!(first.message(1, 1, b"still served").await, Some(ReplyStatus::Ok));

    drop(second);
    // The endpoint notices the close when its reader next reads; then the slot is free.
    let until = Instant::now() + PROMPT;
    let third = loop {
        match Raw::try_connect(&b, forged(3)).await {
            Ok(c) => break c,
            Err(_) => assert!(Instant::now() < until, "the freed slot was never reused"),
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    drop(third);
}

/// What a peer abandons is dropped after its expiry and its memory returns: a half-received
/// message, a message under a tag nobody asks for, and a message whose segment stopped
/// half-way through its payload (whose connection, stuck inside it, is closed).
#[tokio::test]
async fn abandoned_half_messages_and_unclaimed_messages_expire() {
    let b = Endpoint::bind(EndpointConfig {
        // Long enough that nothing expires before the test has set everything up, even on a
        // loaded machine; short enough for a test.
        partial_expiry: Duration::from_secs(1),
        unclaimed_expiry: Duration::from_millis(1500),
        ..Default::default()
    })
    .await
    .unwrap();
    let p = forged(1);
    let seg = pattern(64 << 10, 6);
    let mut c = Raw::connect(&b, p).await;
    // The first of two segments.
    c.segment(1, 1, 128 << 10, 0, &seg).await;
    assert_eq!(c.status().await, Some(ReplyStatus::Ok));
    // A whole message under a tag nobody will ask for.
    assert_eq!(c.message(2, 2, &seg).await, Some(ReplyStatus::Ok));
    // A segment header, and 1 KiB of its 64 KiB.
    let mut stuck = Raw::connect(&b, p).await;
    let h = SegmentHeader { tag: 3, msg_id: 3, total: 128 << 10, offset: 0, len: 64 << 10, crc: checksum(&seg) };
    stuck.0.write_all(&h.encode()).await.unwrap();
    stuck.0.write_all(&seg[..1024]).await.unwrap();
    eventually("the stuck message opened", || b.open_incoming() == 2).await;
    assert!(b.stats().open_bytes >= 2 * (128 << 10) + (64 << 10));

    eventually("everything expired", || b.open_incoming() == 0 && b.stats().open_bytes == 0).await;
    let st = b.stats();
    assert_eq!((st.expired_partial, st.expired_unclaimed), (2, 1));
    assert_eq!(stuck.reply().await, None, "the stuck connection was closed");
    assert!(
        tokio::time::timeout(Duration::from_millis(100), b.recv(p, 2)).await.is_err(),
        "the unclaimed message is gone"
    );
    // The peer itself is still welcome.
    assert_eq!(c.message(4, 4, &seg).await, Some(ReplyStatus::Ok));
    assert_eq!(b.recv(p, 4).await.unwrap(), seg);
}

/// A (sender, tag) whose receive is posted takes one message. A second one — while the first
/// lands in the post, after it was delivered there, or while a first one that beat the post
/// waits to be taken — is refused, its connection dropped and counted, and none of its bytes
/// reach the posted memory. Tags that were not posted still carry any number of messages.
#[tokio::test]
async fn a_second_message_under_a_posted_tag_is_refused_and_never_lands() {
    const LEN: usize = 128 << 10;
    let b = Endpoint::bind(EndpointConfig::default()).await.unwrap();
    let p = forged(1);
    // Two posted ranges, between guard bands.
    let mut mem = vec![0xAAu8; 64];
    mem.extend_from_slice(&[0x11; LEN]);
    mem.extend_from_slice(&[0xBB; 64]);
    mem.extend_from_slice(&[0x22; LEN]);
    mem.extend_from_slice(&[0xCC; 64]);
    let buf = Arc::new(SharedBuf::from_vec(mem));
    let bytes = |from: usize, len: usize| -> Vec<u8> {
        // SAFETY: read only after the receives that write there were delivered or refused.
        unsafe { buf.range(from, len) }.to_vec()
    };
    let intruder = vec![0xEEu8; LEN];

    // Tag 5: the first message claims the post and is half-way in.
    let post = Posted { buf: buf.clone(), offset: 64, len: LEN, reduce: None };
    // SAFETY: the test reads the range only after the message was delivered.
    unsafe { b.post(p, 5, post) };
    let first = pattern(LEN, 7);
    let mut c = Raw::connect(&b, p).await;
    c.segment(5, 1, LEN as u64, 0, &first[..LEN / 2]).await;
    assert_eq!(c.status().await, Some(ReplyStatus::Ok));
    assert_eq!(b.posted_receives(), 0, "the first message claimed the post");

    let mut x = Raw::connect(&b, p).await;
    x.segment(5, 2, LEN as u64, 0, &intruder[..LEN / 2]).await;
    assert_eq!(x.status().await, None, "a second message while the first lands");
    assert_eq!(b.stats().dropped_duplicate_tag, 1);

    c.segment(5, 1, LEN as u64, (LEN / 2) as u64, &first[LEN / 2..]).await;
    assert_eq!(c.status().await, Some(ReplyStatus::Ok));
    assert!(matches!(b.recv_landed(p, 5).await.unwrap(), Landed::InPlace { .. }));
    assert_eq!(bytes(64, LEN), first);

    let mut x = Raw::connect(&b, p).await;
    assert_eq!(x.message(5, 3, &intruder).await, None, "a second message after the first was delivered to the post");
    assert_eq!(b.stats().dropped_duplicate_tag, 2);

    // Tag 6: the first message beats its post and waits to be taken; the post must not go to
    // a second one meanwhile (the receiver takes the first and brings it into place itself).
    let early = pattern(LEN, 8);
    assert_eq!(c.message(6, 4, &early).await, Some(ReplyStatus::Ok));
    let post = Posted { buf: buf.clone(), offset: 64 + LEN + 64, len: LEN, reduce: None };
    // SAFETY: as above.
    unsafe { b.post(p, 6, post) };
    let mut x = Raw::connect(&b, p).await;
    assert_eq!(x.message(6, 5, &intruder).await, None, "a second message while the first waits beside a post");
    assert_eq!(b.stats().dropped_duplicate_tag, 3);
    match b.recv_landed(p, 6).await.unwrap() {
        Landed::Fresh(m) => assert_eq!(m, early),
        Landed::InPlace { .. } => panic!("the early message landed in place"),
    }
    assert_eq!(b.posted_receives(), 0, "taking it withdrew the post");
    assert_eq!(bytes(64 + LEN + 64, LEN), vec![0x22; LEN]);
    assert_eq!(bytes(0, 64), vec![0xAA; 64]);
    assert_eq!(bytes(64 + LEN, 64), vec![0xBB; 64]);
    assert_eq!(bytes(64 + 2 * LEN + 64, 64), vec![0xCC; 64]);

    // Tag 7 was never posted: several messages under it, open at once, all delivered in the
    // order they completed, on the connection that has carried everything above.
    let (m1, m2) = (pattern(LEN, 9), pattern(LEN, 10));
    c.segment(7, 6, LEN as u64, 0, &m1[..LEN / 2]).await;
    assert_eq!(c.status().await, Some(ReplyStatus::Ok));
    assert_eq!(c.message(7, 7, &m2).await, Some(ReplyStatus::Ok));
    c.segment(7, 6, LEN as u64, (LEN / 2) as u64, &m1[LEN / 2..]).await;
    assert_eq!(c.status().await, Some(ReplyStatus::Ok));
    assert_eq!(b.recv(p, 7).await.unwrap(), m2);
    assert_eq!(b.recv(p, 7).await.unwrap(), m1);
    assert_eq!(b.stats().dropped_duplicate_tag, 3);
    assert_eq!(b.stats().open_bytes, 0);
}
