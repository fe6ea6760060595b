//! `alltoall` / `alltoallv` over real endpoints on 127.0.0.1, N ranks as N tasks of one process:
//! every rank's result byte-identical to a sequential reference (what each sender made for it)
//! for N = 1..9, every schedule, awkward sizes (0, 1, 7 bytes, uneven and sparse tables,
//! messages of many segments); the packed, equal-block, given-schedule and gathered-table entry
//! points; errors on every rank instead of hangs when ranks disagree or a call is malformed;
//! tags shared with a communicator; a cancelled exchange leaves nothing posted.

mod common;
use common::{endpoints, on_all};
use std::sync::Arc;

use bytes::Bytes;
use plexus_dataplane::{
    BlockCyclic, CollectiveConfig, ComTable, Communicator, Error, Exchanger, Placement, ReduceOp, Schedule,
    ScheduleKind,
};

async fn group(n: usize) -> Vec<Arc<Exchanger>> {
    let eps = endpoints(n).await;
    let ranks: Vec<_> = eps.iter().map(|e| e.local_addrs()).collect();
    eps.into_iter().enumerate().map(|(r, ep)| Arc::new(Exchanger::new(ep, ranks.clone(), r, 0).unwrap())).collect()
}

/// The bytes rank `from` sends rank `to` in case `case`: seeded, different for every triple.
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

/// Rank `me`'s send buffers for `table` in case `case`.
fn sends(case: u64, table: &ComTable, me: usize) -> Vec<Bytes> {
    (0..table.n()).map(|j| payload(case, me, j, table.get(me, j))).collect()
}

/// Checks rank `me`'s result against what every sender made for it.
fn check(case: u64, table: &ComTable, me: usize, got: &[Bytes], what: &str) {
    assert_eq!(got.len(), table.n(), "{what}: one part per sender");
    for (i, part) in got.iter().enumerate() {
        let want = payload(case, i, me, table.get(i, me));
        assert!(
            part[..] == want[..],
            "{what}: rank {me}'s part from rank {i} differs ({} bytes, {} expected)",
            part.len(),
            want.len()
        );
    }
}

/// Tables for `n` ranks with awkward sizes: uneven (0, 1, 7 and larger, the diagonal too),
/// sparse, a single message, nothing at all, and equal blocks.
fn tables(n: usize, seed: u64) -> Vec<(&'static str, ComTable)> {
    let mut x = seed.wrapping_mul(0x2545_f491_4f6c_dd1d) | 1;
    let mut next = move || {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        x
    };
    let sizes = [0u64, 1, 7, 13, 100, 1031];
    vec![
        ("uneven", ComTable::from_fn(n, |_, _| sizes[next() as usize % sizes.len()]).unwrap()),
        ("sparse", ComTable::from_fn(n, |_, _| if next() % 3 == 0 { 1 + next() % 5000 } else { 0 }).unwrap()),
        ("one message", ComTable::from_fn(n, |i, j| if (i, j) == (n - 1, 0) { 7 } else { 0 }).unwrap()),
        ("nothing", ComTable::uniform(n, 0).unwrap()),
        ("equal", ComTable::uniform(n, 1).unwrap()),
    ]
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn alltoallv_matches_the_reference_for_n_1_to_9_and_every_schedule() {
    for n in 1..=9 {
        let xs = group(n).await;
        on_all(&xs, move |me, x| async move {
            let mut case = 0;
            for seed in 0..2 {
                for (name, table) in tables(n, seed + 10 * n as u64) {
                    for &kind in ScheduleKind::ALL {
                        case += 1;
                        let what = format!("{kind} {name} n={n} seed={seed}");
                        let got = x
                            .alltoallv(&table, sends(case, &table, me), kind)
                            .await
                            .unwrap_or_else(|e| panic!("{what}: rank {me}: {e}"));
                        check(case, &table, me, &got, &what);
                    }
                }
            }
        })
        .await;
    }
}

/// Messages of many segments (64 KiB each here), uneven, arrive whole; afterwards nothing is
/// left posted in any endpoint.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn messages_of_many_segments_arrive_whole() {
    let n = 4;
    let eps = endpoints(n).await;
    let ranks: Vec<_> = eps.iter().map(|e| e.local_addrs()).collect();
    let xs: Vec<Arc<Exchanger>> = eps
        .iter()
        .enumerate()
        .map(|(r, ep)| Arc::new(Exchanger::new(ep.clone(), ranks.clone(), r, 0).unwrap()))
        .collect();
    let table = ComTable::from_fn(n, |i, j| ((i * 7 + j * 3) % 5) as u64 * 150_001).unwrap();
    on_all(&xs, move |me, x| {
        let table = table.clone();
        async move {
            for (case, &kind) in ScheduleKind::ALL.iter().enumerate() {
                let got = x.alltoallv(&table, sends(case as u64, &table, me), kind).await.unwrap();
                check(case as u64, &table, me, &got, &format!("{kind} large"));
            }
        }
    })
    .await;
    for (r, ep) in eps.iter().enumerate() {
        assert_eq!(ep.posted_receives(), 0, "rank {r}");
        assert_eq!(ep.open_incoming(), 0, "rank {r}");
    }
}

/// With the seed's acknowledged steps on some ranks and the default handed steps on the others,
/// every schedule still delivers every byte, with large multi-segment messages.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn acked_and_handed_steps_deliver_the_same_bytes() {
    for n in [2, 3, 5, 8] {
        let eps = endpoints(n).await;
        let ranks: Vec<_> = eps.iter().map(|e| e.local_addrs()).collect();
        let xs: Vec<Arc<Exchanger>> = eps
            .iter()
            .enumerate()
            .map(|(r, ep)| {
                Arc::new(Exchanger::new(ep.clone(), ranks.clone(), r, 0).unwrap().with_acked_steps(r % 3 != 1))
            })
            .collect();
        on_all(&xs, move |me, x| async move {
            let mut case = 100;
            for (name, table) in tables(n, 77 + n as u64) {
                let big = table.scaled(3).unwrap();
                for t in [&table, &big] {
                    for &kind in ScheduleKind::ALL {
                        case += 1;
                        let what = format!("acked/handed {kind} {name} n={n}");
                        let got = x
                            .alltoallv(t, sends(case, t, me), kind)
                            .await
                            .unwrap_or_else(|e| panic!("{what}: rank {me}: {e}"));
                        check(case, t, me, &got, &what);
                    }
                }
            }
        })
        .await;
        for (r, ep) in eps.iter().enumerate() {
            assert_eq!(ep.posted_receives(), 0, "rank {r}");
        }
    }
}

/// The other entry points: equal blocks, one packed buffer, a schedule computed beforehand
/// (the block-cyclic Algorithms 1 and 2), and a table gathered from every rank's row.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn equal_blocks_packed_buffers_given_schedules_and_gathered_tables() {
    for n in [1, 2, 3, 5, 8] {
        let xs = group(n).await;
        on_all(&xs, move |me, x| async move {
            // Equal blocks of 0, 1, 7 and 1000 bytes.
            for (case, block) in [0u64, 1, 7, 1000].into_iter().enumerate() {
                let case = 100 + case as u64;
                let table = ComTable::uniform(n, block).unwrap();
                let mine: Vec<u8> = sends(case, &table, me).concat();
                for &kind in ScheduleKind::ALL {
                    let got = x.alltoall(Bytes::from(mine.clone()), kind).await.unwrap();
                    check(case, &table, me, &got, &format!("alltoall {kind} block {block}"));
                }
            }
            // One packed buffer with the counts of an uneven table.
            for (k, (name, table)) in tables(n, 7).into_iter().enumerate() {
                let case = 200 + k as u64;
                let packed = Bytes::from(sends(case, &table, me).concat());
                let got = x.alltoallv_packed(&table, packed, ScheduleKind::Css).await.unwrap();
                check(case, &table, me, &got, &format!("packed {name}"));
            }
            // A block-cyclic redistribution on the group's ranks, in bytes of 8-byte elements,
            // along the seed's schedules.
            for (k, (p, bx, q, by)) in [(n, 4, n, 3), (n, 2, n.div_ceil(2), 3), (1, 5, n, 2)].into_iter().enumerate() {
                let bc = BlockCyclic::new(p, bx, q, by).unwrap();
                let table = bc.table(Placement::Shared).scaled(8).unwrap();
                let mut schedules = vec![bc.algorithm2(Placement::Shared)];
                schedules.extend(bc.algorithm1(Placement::Shared));
                for (m, s) in schedules.iter().enumerate() {
                    let case = 300 + 10 * k as u64 + m as u64;
                    let got = x.alltoallv_with(&table, s, sends(case, &table, me)).await.unwrap();
                    check(case, &table, me, &got, &format!("block-cyclic {k} schedule {m}"));
                }
            }
            // Sizes nobody knew in advance: every rank's row, gathered.
            let row: Vec<u64> = (0..n).map(|j| ((me * 5 + j * 11) % 9) as u64).collect();
            let table = x.gather_table(&row).await.unwrap();
            assert_eq!(table.row(me), &row[..]);
            let got = x.alltoallv(&table, sends(400, &table, me), ScheduleKind::Css).await.unwrap();
            check(400, &table, me, &got, "gathered table");
        })
        .await;
    }
}

/// Ranks given different tables, or different schedules, all fail (none hangs), with the
/// difference named where it is seen; the group works again for the next call.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ranks_that_disagree_all_fail_instead_of_hanging() {
    for n in [2, 3, 5] {
        let xs = group(n).await;
        let results = on_all(&xs, move |me, x| async move {
            let mut t = ComTable::uniform(n, 10).unwrap();
            if me == n - 1 {
                t = ComTable::from_fn(n, |i, j| if (i, j) == (0, 1) { 11 } else { 10 }).unwrap();
            }
            let a = x.alltoallv(&t, sends(1, &t, me), ScheduleKind::Css).await;
            let t = ComTable::uniform(n, 3).unwrap();
            let kind = if me == 0 { ScheduleKind::Shift } else { ScheduleKind::Css };
            let b = x.alltoallv(&t, sends(2, &t, me), kind).await;
            let ok = x
                .alltoallv(&t, sends(3, &t, me), ScheduleKind::Pairwise)
                .await
                .map(|got| check(3, &t, me, &got, "after the failures"));
            (a.map(|_| ()), b.map(|_| ()), ok)
        })
        .await;
        let mut named = false;
        for (r, (a, b, ok)) in results.into_iter().enumerate() {
            for (what, res) in [("tables", a), ("schedules", b)] {
                let e = res.expect_err(&format!("n={n} rank {r}: different {what} must fail")).to_string();
                assert!(e.contains("different exchange") || e.contains("aborted"), "n={n} rank {r} {what}: {e}");
                named |= e.contains("different exchange");
            }
            ok.unwrap_or_else(|e| panic!("n={n} rank {r}: the next call failed: {e}"));
        }
        assert!(named, "n={n}: no rank said what differed");
    }
}

/// Malformed calls are refused with the problem named, never a panic; in a group, the other
/// ranks learn of it instead of waiting.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn malformed_calls_are_refused_with_the_problem_named() {
    let solo = group(1).await;
    let x = &solo[0];
    let t2 = ComTable::uniform(2, 4).unwrap();
    let e = x.alltoallv(&t2, vec![Bytes::new(); 2], ScheduleKind::Css).await.unwrap_err();
    assert!(matches!(e, Error::Config(_)) && e.to_string().contains("for 2 ranks, the group has 1"), "{e}");
    let t1 = ComTable::uniform(1, 4).unwrap();
    let e = x.alltoallv(&t1, vec![Bytes::from_static(b"abc")], ScheduleKind::Shift).await.unwrap_err().to_string();
    assert!(e.contains("rank 0 has 3 bytes") && e.contains("sends it 4"), "{e}");
    let e = x.alltoallv(&t1, vec![], ScheduleKind::Shift).await.unwrap_err().to_string();
    assert!(e.contains("0 send buffers for a group of 1"), "{e}");
    let e = x.alltoallv_packed(&t1, Bytes::from_static(b"abcde"), ScheduleKind::Css).await.unwrap_err().to_string();
    assert!(e.contains("adds up to 4 bytes, its buffer has 5"), "{e}");
    let e = x.gather_table(&[1, 2]).await.unwrap_err().to_string();
    assert!(e.contains("a row of 2 counts for a group of 1"), "{e}");
    let got = x.alltoall(Bytes::from_static(b"self"), ScheduleKind::Css).await.unwrap();
    assert_eq!(got, vec![Bytes::from_static(b"self")], "N = 1: the local copy");

    let n = 3;
    let xs = group(n).await;
    let results = on_all(&xs, move |me, x| async move {
        // Rank 1's buffer does not split into 3 blocks.
        let len = if me == 1 { 10 } else { 9 };
        let a = x.alltoall(Bytes::from(vec![0u8; len]), ScheduleKind::Shift).await;
        // A schedule that leaves out a message of the table.
        let t = ComTable::uniform(n, 2).unwrap();
        let short = Schedule::from_steps(n, vec![vec![(0, 1), (1, 2), (2, 0)]]).unwrap();
        let b = x.alltoallv_with(&t, &short, sends(5, &t, me)).await;
        (a.map(|_| ()), b.map(|_| ()))
    })
    .await;
    for (r, (a, b)) in results.into_iter().enumerate() {
        let e = a.unwrap_err().to_string();
        if r == 1 {
            assert!(e.contains("10 bytes does not split into 3 equal blocks"), "{e}");
        } else {
            assert!(e.contains("aborted by rank 1") && e.contains("10 bytes"), "rank {r}: {e}");
        }
        let e = b.unwrap_err().to_string();
        assert!(e.contains("never sends 0 → 2"), "rank {r}: {e}");
    }
}

/// An exchanger may share its tag base with a communicator of the same group: their calls,
/// running at the same time, keep to their own tags.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_exchanger_and_a_communicator_share_a_tag_base() {
    let n = 4;
    let eps = endpoints(n).await;
    let ranks: Vec<_> = eps.iter().map(|e| e.local_addrs()).collect();
    let pairs: Vec<Arc<(Exchanger, Communicator)>> = eps
        .iter()
        .enumerate()
        .map(|(r, ep)| {
            let x = Exchanger::new(ep.clone(), ranks.clone(), r, 7 << 56).unwrap();
            let c = Communicator::new(ep.clone(), ranks.clone(), r, 7 << 56, CollectiveConfig::default()).unwrap();
            Arc::new((x, c))
        })
        .collect();
    on_all(&pairs, move |me, xc| async move {
        let (x, c) = (&xc.0, &xc.1);
        for case in 0..5u64 {
            let t = ComTable::from_fn(n, |i, j| (i + 2 * j) as u64 * 333 + case).unwrap();
            let mut v: Vec<i64> = (0..5000).map(|i| i * (me as i64 + 1)).collect();
            let (got, reduced) = tokio::join!(
                x.alltoallv(&t, sends(case, &t, me), ScheduleKind::Css),
                c.allreduce_typed(&mut v, ReduceOp::Sum)
            );
            check(case, &t, me, &got.unwrap(), "alongside an allreduce");
            reduced.unwrap();
            let k: i64 = (1..=n as i64).sum();
            assert!(v.iter().enumerate().all(|(i, &s)| s == i as i64 * k));
        }
    })
    .await;
}

/// An exchange whose future is dropped while it waits for a peer that never joins leaves no
/// posted receive in the endpoint.
#[tokio::test]
async fn a_cancelled_exchange_withdraws_its_posts() {
    let eps = endpoints(3).await;
    let ranks: Vec<_> = eps.iter().map(|e| e.local_addrs()).collect();
    let x = Exchanger::new(eps[0].clone(), ranks, 0, 0).unwrap();
    let t = ComTable::uniform(3, 100).unwrap();
    let posted = async {
        while eps[0].posted_receives() < 2 {
            tokio::task::yield_now().await;
        }
    };
    tokio::select! {
        r = x.alltoallv(&t, sends(0, &t, 0), ScheduleKind::Css) => {
            panic!("the exchange ended without its peers: {:?}", r.err());
        }
        () = posted => {}
    }
    assert_eq!(eps[0].posted_receives(), 0, "the posts were withdrawn");
}

/// What lets an exchanger share a communicator's tag base: no step of any collective plan uses
/// a low tag at or above the exchanger's (`plan`'s phase bound keeps them below `0xFFFF_E000`).
#[test]
fn collective_plans_stay_below_the_exchangers_tags() {
    use plexus_dataplane::Algorithm;
    use plexus_dataplane::collective::alltoall::DATA_TAG;
    use plexus_dataplane::collective::{Kind, PlanParams, Step, plan::plan};
    for &algorithm in Algorithm::ALL {
        for (ranks, slices) in [(2, 16), (3, 8), (7, 4), (16, 2), (33, 1)] {
            for kind in [Kind::Allreduce, Kind::Reduce { root: ranks / 2 }] {
                for rank in 0..ranks {
                    let per_host = if ranks % 4 == 0 { 4 } else { 1 };
                    let p = PlanParams { ranks, rank, len: 1 << 12, slices, algorithm, kind, per_host };
                    for step in plan(&p) {
                        let (Step::Send { tag, .. } | Step::Recv { tag, .. }) = step;
                        assert!(u64::from(tag) < DATA_TAG, "{algorithm} {kind:?} n={ranks}: tag {tag:#x}");
                    }
                }
            }
        }
    }
}
