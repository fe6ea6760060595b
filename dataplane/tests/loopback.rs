//! The transport on loopback rails (127.0.0.x), no privileges needed: delivery with every
//! scheduler, concurrency, corruption and a rail dying mid-message (by fault injection).

use std::net::IpAddr;
use std::time::{Duration, Instant};

use bytes::Bytes;
use plexus_dataplane::rig::pattern;
use plexus_dataplane::{Endpoint, EndpointConfig, Error, Faults, SchedulerKind};

// The e2e tests' wait for a state, shared by path (no dependency between the two crates).
#[path = "../../e2e/tests/support/wait.rs"]
mod wait;

fn rails(n: u8) -> Vec<IpAddr> {
    (1..=n).map(|i| IpAddr::from([127, 0, 0, i])).collect()
}

fn cfg(n: u8, scheduler: SchedulerKind) -> EndpointConfig {
    EndpointConfig { rails: rails(n), scheduler, seg_max: 256 << 10, queue_max: 4, ..Default::default() }
}

async fn pair(a: EndpointConfig, b: EndpointConfig) -> (Endpoint, Endpoint) {
    (Endpoint::bind(a).await.unwrap(), Endpoint::bind(b).await.unwrap())
}

#[tokio::test]
async fn every_scheduler_delivers_intact_over_three_rails() {
    for kind in SchedulerKind::ALL {
        let (a, b) = pair(cfg(3, kind), cfg(3, kind)).await;
        let data = pattern((8 << 20) + 12345, 1);
        let (sent, got) = tokio::join!(a.send(&b.local_addrs(), 7, data.clone()), b.recv(a.id(), 7));
        sent.unwrap();
        assert_eq!(got.unwrap(), data, "{kind}");
        let st = a.stats();
        assert_eq!(st.bytes_acked, data.len() as u64);
        assert_eq!(st.rails.iter().map(|r| r.bytes_sent).sum::<u64>(), data.len() as u64, "{kind}: no resends");
        if kind == SchedulerKind::RoundRobin {
            // 33 segments over 3 rails: 11 each.
            assert!(st.rails.iter().all(|r| r.segments_sent == 11), "{:?}", st.rails);
        }
        assert_eq!(b.stats().rails.iter().map(|r| r.bytes_received).sum::<u64>(), data.len() as u64);
        assert_eq!(b.open_incoming(), 0);
        a.shutdown().await;
        b.shutdown().await;
    }
}

#[tokio::test]
async fn one_rail_default_config_and_empty_and_tiny_messages() {
    let (a, b) = pair(EndpointConfig::default(), EndpointConfig::default()).await;
    assert_eq!(a.local_addrs().len(), 1);
    for (tag, len) in [(1, 0), (2, 1), (3, 4 << 20)] {
        let data = pattern(len, tag);
        a.send(&b.local_addrs(), tag, data.clone()).await.unwrap();
        assert_eq!(b.recv(a.id(), tag).await.unwrap(), data);
    }
}

#[tokio::test]
async fn concurrent_messages_in_both_directions_are_matched_by_sender_and_tag() {
    let (a, b) = pair(cfg(2, SchedulerKind::Weighted), cfg(2, SchedulerKind::QLearning)).await;
    let c = Endpoint::bind(cfg(2, SchedulerKind::RoundRobin)).await.unwrap();
    let mut sends = vec![];
    for tag in 0..6u64 {
        let (a2, b2) = (b.local_addrs(), a.local_addrs());
        let data = pattern(1 << 20 | tag as usize, tag);
        sends.push((a2, b2, tag, data));
    }
    let to_b = sends.iter().map(|(bb, _, tag, d)| a.send(bb, *tag, d.clone()));
    let to_a = sends.iter().map(|(_, aa, tag, d)| b.send(aa, *tag + 100, d.clone()));
    let c_to_b = c.send(&b.local_addrs(), 3, pattern(999, 99));
    let (r1, r2, r3) = tokio::join!(futures_join(to_b), futures_join(to_a), c_to_b);
    assert!(r1.into_iter().chain(r2).all(|r| r.is_ok()));
    r3.unwrap();
    // Receive in an order unrelated to sending; tag 3 arrived from both a and c.
    for (_, _, tag, d) in sends.iter().rev() {
        assert_eq!(&b.recv(a.id(), *tag).await.unwrap()[..], &d[..]);
        assert_eq!(&a.recv(b.id(), *tag + 100).await.unwrap()[..], &d[..]);
    }
    let (from, d) = b.recv_any(3).await.unwrap();
    assert_eq!(from, c.id());
    assert_eq!(d, pattern(999, 99));
}

/// Joins a set of futures without an extra dependency.
async fn futures_join<F: std::future::Future<Output = T>, T>(fs: impl Iterator<Item = F>) -> Vec<T> {
    let mut out = vec![];
    let handles: Vec<_> = fs.map(Box::pin).collect();
    for h in handles {
        out.push(h.await);
    }
    out
}

#[tokio::test]
async fn corrupted_segments_are_detected_and_sent_again() {
    let mut ca = cfg(2, SchedulerKind::RoundRobin);
    ca.faults = Faults { corrupt: vec![1, 5, 6], ..Default::default() };
    let (a, b) = pair(ca, cfg(2, SchedulerKind::RoundRobin)).await;
    let data = pattern(4 << 20, 5);
    let (sent, got) = tokio::join!(a.send(&b.local_addrs(), 1, data.clone()), b.recv(a.id(), 1));
    sent.unwrap();
    assert_eq!(got.unwrap(), data);
    assert_eq!(b.stats().corrupt_received, 3);
    assert_eq!(a.stats().resent, 3);
    assert_eq!(a.stats().bytes_acked, data.len() as u64);
}

#[tokio::test]
async fn a_segment_corrupted_every_time_fails_its_message() {
    let mut ca = cfg(1, SchedulerKind::RoundRobin);
    ca.max_attempts = 3;
    ca.faults = Faults { corrupt: (0..100).collect(), ..Default::default() };
    let (a, b) = pair(ca, cfg(1, SchedulerKind::RoundRobin)).await;
    let e = a.send(&b.local_addrs(), 1, pattern(1000, 1)).await.unwrap_err();
    assert!(matches!(e, Error::Corrupted { attempts: 3, offset: 0, .. }), "{e}");
}

#[tokio::test]
async fn a_rail_dying_mid_message_is_taken_out_and_its_segments_resent() {
    for kind in SchedulerKind::ALL {
        let mut ca = cfg(3, kind);
        ca.faults = Faults { kill_rail: Some((1, 1 << 20)), ..Default::default() };
        let (a, b) = pair(ca, cfg(3, kind)).await;
        let data = pattern(16 << 20, 9);
        let (sent, got) = tokio::join!(a.send(&b.local_addrs(), 4, data.clone()), b.recv(a.id(), 4));
        sent.unwrap();
        assert_eq!(got.unwrap(), data, "{kind}");
        let st = a.stats();
        assert_eq!(st.rails[1].failures, 1, "{kind}: {st:?}");
        assert!(st.resent >= 1, "{kind}: {st:?}");
        // The message is still counted once.
        assert_eq!(st.bytes_acked, data.len() as u64);
        // The rail comes back after its back-off (250 ms) and carries traffic again: messages
        // are sent, each delivered intact, until one of them travels partly on rail 1.
        let before = a.stats().rails[1].bytes_sent;
        let tag = std::cell::Cell::new(5);
        let (a, b) = (&a, &b);
        wait::until_async(&format!("{kind}: rail 1 back in service"), Duration::from_secs(20), || {
            let t = tag.replace(tag.get() + 1);
            async move {
                let more = pattern(8 << 20, t);
                let (sent, got) = tokio::join!(a.send(&b.local_addrs(), t, more.clone()), b.recv(a.id(), t));
                sent.unwrap();
                assert_eq!(got.unwrap(), more, "{kind}");
                (a.stats().rails[1].bytes_sent > before).then_some(())
            }
        })
        .await;
    }
}

#[tokio::test]
async fn a_peer_with_fewer_rails_is_reached_on_the_rails_both_have() {
    let (a, b) = pair(cfg(3, SchedulerKind::RoundRobin), cfg(1, SchedulerKind::RoundRobin)).await;
    let data = pattern(2 << 20, 3);
    let (sent, got) = tokio::join!(a.send(&b.local_addrs(), 1, data.clone()), b.recv(a.id(), 1));
    sent.unwrap();
    assert_eq!(got.unwrap(), data);
    let st = a.stats();
    assert_eq!(st.rails[0].bytes_sent, data.len() as u64);
    assert_eq!(st.rails[1].bytes_sent + st.rails[2].bytes_sent, 0);
}

#[tokio::test]
async fn sending_to_nobody_stalls_with_an_error_naming_the_peer() {
    let mut ca = cfg(2, SchedulerKind::RoundRobin);
    ca.stall_timeout = Duration::from_millis(800);
    ca.connect_timeout = Duration::from_millis(200);
    let a = Endpoint::bind(ca).await.unwrap();
    // Ports nobody listens on: bind and drop two listeners to find free ones.
    let gone = Endpoint::bind(cfg(2, SchedulerKind::RoundRobin)).await.unwrap();
    let addrs = gone.local_addrs();
    gone.shutdown().await;
    let e = a.send(&addrs, 1, pattern(1 << 20, 1)).await.unwrap_err();
    assert!(matches!(e, Error::Stalled { .. }), "{e}");
    assert!(e.to_string().contains(&addrs[0].to_string()), "{e}");
    assert!(a.stats().rails.iter().all(|r| r.failures >= 1));
}

/// A receive waiting for a peer that vanished (its process gone: connections closed, its
/// ports refusing) fails within the stall timeout, naming the peer, instead of waiting for ever;
/// a receive from a live peer that is merely silent keeps waiting.
#[tokio::test]
async fn a_receive_from_a_vanished_peer_fails_within_the_stall_timeout() {
    let mut ca = cfg(2, SchedulerKind::Weighted);
    ca.stall_timeout = Duration::from_millis(1500);
    let a = Endpoint::bind(ca).await.unwrap();
    let b = Endpoint::bind(cfg(2, SchedulerKind::Weighted)).await.unwrap();
    let silent = Endpoint::bind(cfg(2, SchedulerKind::Weighted)).await.unwrap();
    // One message first, so connections exist both ways; then b vanishes.
    let data = pattern(1 << 20, 5);
    let (sent, got) = tokio::join!(b.send(&a.local_addrs(), 1, data.clone()), a.recv(b.id(), 1));
    sent.unwrap();
    assert_eq!(got.unwrap(), data);
    let gone = b.id();
    b.shutdown().await;
    drop(b);
    let t = Instant::now();
    let e = a.recv(gone, 2).await.unwrap_err();
    assert!(matches!(e, Error::PeerGone { .. }), "{e}");
    assert!(e.to_string().contains(&gone.to_string()), "{e}");
    assert!(t.elapsed() < Duration::from_secs(5), "took {:?}", t.elapsed());
    // A live peer that sends nothing is not gone.
    let waited = tokio::time::timeout(Duration::from_secs(3), a.recv(silent.id(), 3)).await;
    assert!(waited.is_err(), "a receive from a live, silent peer ended: {waited:?}");
}

#[tokio::test]
async fn bad_configuration_and_peer_lists_are_refused() {
    let e = Endpoint::bind(EndpointConfig { k: 4, ..Default::default() }).await.err().unwrap();
    assert!(e.to_string().contains("k 4"), "{e}");
    let a = Endpoint::bind(EndpointConfig::default()).await.unwrap();
    let e = a.send(&[], 1, Bytes::new()).await.unwrap_err();
    assert!(matches!(e, Error::Peer(_)), "{e}");
}
