//! Exchanges striped by rail shares (issue 30) over real endpoints with two loopback rails each
//! (127.0.0.1 and 127.0.0.2): every byte arrives exact whether a message goes by shares or by
//! the rail scheduler, by steps or all at once; once both rails are measured an `auto` call says
//! it striped by both ends' shares; and a message too small for a second rail to pay for
//! itself goes whole on one rail, where the rail scheduler would have split it.

// Only `on_all` of it: these endpoints have two rails, `common::endpoints`' one.
#[allow(dead_code)]
mod common;
use common::on_all;
use std::net::IpAddr;
use std::sync::Arc;

use bytes::Bytes;
use plexus_dataplane::{ComTable, Endpoint, EndpointConfig, ExchangeAlgorithm, Exchanger, LinkMeter, ScheduleKind};

fn payload(case: u64, from: usize, to: usize, len: u64) -> Bytes {
    let mut x = ((case << 32) ^ ((from as u64) << 16) ^ to as u64).wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1;
    (0..len)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x as u8
        })
        .collect()
}

struct Member {
    endpoint: Arc<Endpoint>,
    x: Exchanger,
}

async fn members(n: usize, shares: bool) -> Vec<Arc<Member>> {
    let mut eps = Vec::new();
    for _ in 0..n {
        let cfg = EndpointConfig {
            rails: vec![IpAddr::from([127, 0, 0, 1]), IpAddr::from([127, 0, 0, 2])],
            seg_max: 64 << 10,
            ..Default::default()
        };
        eps.push(Arc::new(Endpoint::bind(cfg).await.unwrap()));
    }
    let ranks: Vec<_> = eps.iter().map(|e| e.local_addrs()).collect();
    eps.into_iter()
        .enumerate()
        .map(|(r, endpoint)| {
            let x = Exchanger::new(endpoint.clone(), ranks.clone(), r, 0)
                .unwrap()
                .with_meter(Arc::new(LinkMeter::new()))
                .with_rail_shares(shares);
            Arc::new(Member { endpoint, x })
        })
        .collect()
}

/// Runs one exchange of `table` on member `me` and checks every byte it received.
async fn exchange(m: &Member, me: usize, case: u64, table: &ComTable, how: Option<ExchangeAlgorithm>) -> String {
    let n = table.n();
    let sends = (0..n).map(|j| payload(case, me, j, table.get(me, j))).collect();
    let (got, chosen) = m.x.alltoallv_chosen(table, sends, how).await.unwrap();
    for (i, part) in got.iter().enumerate() {
        assert!(part[..] == payload(case, i, me, table.get(i, me))[..], "case {case}: rank {me}'s part from {i}");
    }
    chosen.reason
}

fn sent(ep: &Endpoint) -> Vec<u64> {
    ep.stats().rails.iter().map(|r| r.bytes_sent).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn exchanges_by_rail_shares_deliver_every_byte_and_keep_small_messages_whole() {
    let n = 3;
    for shares in [true, false] {
        let ms = members(n, shares).await;
        let reasons = on_all(&ms, move |me, m| async move {
            // Large messages, every way: both rails get measured, and carry bytes.
            let big = ComTable::from_fn(n, |i, j| (1 + (i + 2 * j) % 3) as u64 * (384 << 10) + 8 * i as u64).unwrap();
            let mut case = 0;
            let mut reasons = Vec::new();
            for how in [
                None,
                Some(ExchangeAlgorithm::Steps(ScheduleKind::Css)),
                Some(ExchangeAlgorithm::Direct),
                Some(ExchangeAlgorithm::Steps(ScheduleKind::Shift)),
                None,
            ] {
                case += 1;
                reasons.push(exchange(&m, me, case, &big, how).await);
            }
            assert!(m.endpoint.rail_rates().iter().all(Option::is_some), "both rails measured");
            // Messages of 100 KiB: half of one on the other rail (50 KiB) is under MIN_SHARE, so
            // with shares each goes whole on one rail; every rail's bytes are whole messages (plus
            // the call's 28-byte header to the right neighbour).
            let small = ComTable::from_fn(n, |i, j| if i == j { 0 } else { 100 << 10 }).unwrap();
            for how in [Some(ExchangeAlgorithm::Steps(ScheduleKind::Css)), Some(ExchangeAlgorithm::Direct)] {
                case += 1;
                let (before, resent) = (sent(&m.endpoint), m.endpoint.stats().resent);
                exchange(&m, me, case, &small, how).await;
                let by_rail: Vec<u64> = sent(&m.endpoint).iter().zip(&before).map(|(a, b)| a - b).collect();
                // A segment resent after a busy reply (its receiver had not posted yet and held
                // its cap of early bytes) is counted twice: the rails' bytes say nothing then.
                if m.endpoint.stats().resent != resent {
                    continue;
                }
                assert_eq!(by_rail.iter().sum::<u64>(), 2 * (100 << 10) + 28, "rank {me}: {by_rail:?}");
                if shares {
                    assert!(by_rail.iter().all(|b| b % (100 << 10) <= 28), "rank {me} {how:?}: {by_rail:?}");
                }
            }
            reasons
        })
        .await;
        for (me, r) in reasons.iter().enumerate() {
            // The last `auto` call knew every rank's rates from the first one's agreement.
            let last = r.last().unwrap();
            if shares {
                assert!(last.contains("striped by shares of both ends' measured rail rates"), "rank {me}: {last}");
                assert!(last.contains("every rank's as agreed"), "rank {me}: {last}");
            } else {
                assert!(last.contains("the rail scheduler's own striping"), "rank {me}: {last}");
            }
        }
    }
}
