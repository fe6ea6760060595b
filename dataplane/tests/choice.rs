//! The algorithm a call runs (issue 30), over real endpoints on 127.0.0.1: `auto` calls agree
//! on one algorithm on every rank (each rank's own measurements, one model for all), say why,
//! learn from what they measured, and deliver the same bytes as any fixed algorithm; an
//! override wins; `direct` exchanges (every message at once) match the reference.

mod common;
use common::{endpoints, on_all};
use std::sync::Arc;

use bytes::Bytes;
use plexus_dataplane::{
    Algorithm, CollectiveConfig, ComTable, Communicator, ExchangeAlgorithm, Exchanger, LinkMeter, ReduceOp,
    ScheduleKind,
};

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

async fn exchangers(n: usize) -> Vec<Arc<Exchanger>> {
    let eps = endpoints(n).await;
    let ranks: Vec<_> = eps.iter().map(|e| e.local_addrs()).collect();
    eps.into_iter()
        .enumerate()
        .map(|(r, ep)| {
            Arc::new(Exchanger::new(ep, ranks.clone(), r, 0).unwrap().with_meter(Arc::new(LinkMeter::new())))
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn direct_and_auto_exchanges_deliver_every_byte_and_every_rank_chooses_alike() {
    for n in [1, 2, 3, 5] {
        let xs = exchangers(n).await;
        let choices = on_all(&xs, move |me, x| async move {
            let mut chosen = Vec::new();
            let mut case = 0;
            for table in [
                ComTable::from_fn(n, |i, j| ((i * 7 + j * 3) % 5) as u64 * 40_000).unwrap(),
                ComTable::uniform(n, 100).unwrap(),
                ComTable::uniform(n, 0).unwrap(),
            ] {
                for how in
                    [Some(ExchangeAlgorithm::Direct), None, None, Some(ExchangeAlgorithm::Steps(ScheduleKind::Css))]
                {
                    case += 1;
                    let sends = (0..n).map(|j| payload(case, me, j, table.get(me, j))).collect();
                    let (got, c) = x.alltoallv_chosen(&table, sends, how).await.unwrap();
                    for (i, part) in got.iter().enumerate() {
                        assert!(
                            part[..] == payload(case, i, me, table.get(i, me))[..],
                            "case {case} rank {me} from {i}"
                        );
                    }
                    match how {
                        Some(a) => assert!(c.algorithm == a && c.reason.contains("set by the job file"), "{c:?}"),
                        None if n > 1 => assert!(c.reason.contains("chosen by the cost model"), "{c:?}"),
                        None => {}
                    }
                    chosen.push(c);
                }
            }
            chosen
        })
        .await;
        for r in 1..n {
            let names = |v: &Vec<plexus_dataplane::Chosen>| v.iter().map(|c| c.algorithm).collect::<Vec<_>>();
            assert_eq!(names(&choices[r]), names(&choices[0]), "rank {r} chose otherwise, n = {n}");
        }
    }
}

async fn communicators(n: usize, algorithm: Algorithm) -> Vec<Arc<Communicator>> {
    let eps = endpoints(n).await;
    let ranks: Vec<_> = eps.iter().map(|e| e.local_addrs()).collect();
    let cfg = CollectiveConfig { algorithm, ..CollectiveConfig::default() };
    eps.into_iter()
        .enumerate()
        .map(|(r, ep)| {
            let c = Communicator::new(ep, ranks.clone(), r, 0, cfg).unwrap();
            Arc::new(c.with_meter(Arc::new(LinkMeter::new())))
        })
        .collect()
}

/// An `auto` allreduce sums correctly, every rank runs the same algorithm and depth, the
/// second call decides from what the first measured, and a fixed algorithm is kept as given.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn auto_allreduce_agrees_learns_and_an_override_wins() {
    for n in [3, 4] {
        let comms = communicators(n, Algorithm::Auto).await;
        let choices = on_all(&comms, move |me, c| async move {
            let mut seen = Vec::new();
            for round in 0..2 {
                let mut v: Vec<i64> = (0..300_000).map(|k| (k * (me as i64 + 1)) ^ round).collect();
                c.allreduce_typed(&mut v, ReduceOp::Sum).await.unwrap();
                for (k, x) in v.iter().enumerate().step_by(997) {
                    let want: i64 = (0..n as i64).map(|r| (k as i64 * (r + 1)) ^ round).sum();
                    assert_eq!(*x, want, "rank {me} element {k}");
                }
                seen.push(c.last_choice().expect("a choice"));
            }
            seen
        })
        .await;
        for r in 0..n {
            assert_eq!(
                choices[r].iter().map(|c| (c.algorithm, c.slices)).collect::<Vec<_>>(),
                choices[0].iter().map(|c| (c.algorithm, c.slices)).collect::<Vec<_>>(),
                "rank {r}, n = {n}"
            );
            assert!(
                choices[r][0].reason.contains("chosen by the cost model") && choices[r][0].reason.contains("prior")
            );
            assert!(choices[r][1].reason.contains("samples)"), "learned from the first call: {}", choices[r][1].reason);
        }
    }
    let comms = communicators(3, Algorithm::Ring).await;
    let reasons = on_all(&comms, |me, c| async move {
        let mut v = vec![me as f32; 1000];
        c.allreduce_typed(&mut v, ReduceOp::Sum).await.unwrap();
        assert!(v.iter().all(|&x| x == 3.0));
        c.last_choice().expect("a choice")
    })
    .await;
    assert!(reasons.iter().all(|c| c.algorithm == Algorithm::Ring && c.reason.contains("set by the configuration")));
}

/// Once `auto` has measured every candidate and settled on the fastest, the calls after it
/// decide from the figures agreed then (saying how many calls ago) instead of agreeing every
/// call, every rank alike and in the same calls; sums stay exact; and a call of another size
/// class agrees afresh. The same holds for an exchanger's `auto`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn settled_auto_calls_reuse_the_agreed_figures_on_every_rank_alike() {
    let n = 3;
    let comms = communicators(n, Algorithm::Auto).await;
    let reasons = on_all(&comms, move |me, c| async move {
        let mut seen = Vec::new();
        for round in 0..40i64 {
            let len = if round == 39 { 5_000 } else { 200_000 };
            let mut v: Vec<i64> = (0..len).map(|k| k * (me as i64 + 1) + round).collect();
            c.allreduce_typed(&mut v, ReduceOp::Sum).await.unwrap();
            let k = len - 1;
            assert_eq!(v[k as usize], (0..n as i64).map(|r| k * (r + 1) + round).sum::<i64>(), "round {round}");
            let ch = c.last_choice().expect("a choice");
            seen.push((ch.algorithm, ch.slices, ch.reason));
        }
        seen
    })
    .await;
    for r in 1..n {
        let plain = |v: &Vec<(Algorithm, usize, String)>| {
            v.iter().map(|(a, s, why)| (*a, *s, why.contains("calls ago"))).collect::<Vec<_>>()
        };
        assert_eq!(plain(&reasons[r]), plain(&reasons[0]), "rank {r} decided otherwise");
    }
    let reused = reasons[0].iter().filter(|(_, _, why)| why.contains("calls ago")).count();
    assert!(reused >= 10, "settled calls reuse the agreed figures: {reused} of 40 did");
    assert!(reasons[0][..39].iter().any(|(_, _, why)| why.contains("the fastest measured")));
    assert!(!reasons[0][39].2.contains("calls ago"), "another size class agrees afresh: {}", reasons[0][39].2);

    let xs = exchangers(n).await;
    let reasons = on_all(&xs, move |me, x| async move {
        let table = ComTable::uniform(n, 300_000).unwrap();
        let mut seen = Vec::new();
        for case in 0..30u64 {
            let sends = (0..n).map(|j| payload(case, me, j, table.get(me, j))).collect();
            let (got, c) = x.alltoallv_chosen(&table, sends, None).await.unwrap();
            for (i, part) in got.iter().enumerate() {
                assert!(part[..] == payload(case, i, me, table.get(i, me))[..], "case {case} rank {me} from {i}");
            }
            seen.push((c.algorithm, c.reason.contains("calls ago")));
        }
        seen
    })
    .await;
    for r in 1..n {
        assert_eq!(reasons[r], reasons[0], "rank {r} decided otherwise");
    }
    assert!(reasons[0].iter().filter(|(_, ago)| *ago).count() >= 5, "{:?}", reasons[0]);
}
