//! The hierarchical allreduce over real endpoints: "hosts" are loopback addresses of their own
//! (127.0.0.1, 127.0.0.2, …: one address per host, as rails are on real machines), several
//! ranks on each. Every byte of the result is checked against the exact sum (integers), the
//! result is bitwise identical on every rank, `auto` sees the hosts and every rank agrees on
//! what it runs, and a job's explicit choice is kept.

mod common;
use common::{endpoints, on_all};
use std::net::IpAddr;
use std::sync::Arc;

use plexus_dataplane::{
    Algorithm, CollectiveConfig, Communicator, Endpoint, EndpointConfig, LinkMeter, ReduceOp, Topology,
};

/// `hosts` × `per_host` communicators, host h's ranks on 127.0.0.(h+1), numbered host by host.
async fn on_hosts(hosts: usize, per_host: usize, cfg: CollectiveConfig) -> Vec<Arc<Communicator>> {
    let mut eps = Vec::new();
    for h in 0..hosts {
        let ip: IpAddr = format!("127.0.0.{}", h + 1).parse().unwrap();
        for _ in 0..per_host {
            let c = EndpointConfig { rails: vec![ip], seg_max: 64 << 10, ..Default::default() };
            eps.push(Arc::new(Endpoint::bind(c).await.unwrap()));
        }
    }
    let ranks: Vec<_> = eps.iter().map(|e| e.local_addrs()).collect();
    eps.into_iter()
        .enumerate()
        .map(|(r, ep)| {
            let c = Communicator::new(ep, ranks.clone(), r, 0, cfg).unwrap();
            Arc::new(c.with_meter(Arc::new(LinkMeter::new())))
        })
        .collect()
}

/// Rank `rank`'s seeded input: `len` i64 over their whole range (sums wrap, exactly).
fn input(len: usize, case: u64, rank: usize) -> Vec<i64> {
    let mut x = (case << 20 ^ rank as u64).wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1;
    (0..len)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x as i64
        })
        .collect()
}

/// Runs explicit `algorithm` allreduces of awkward lengths and slice counts on `hosts` ×
/// `per_host` ranks and checks every element of every rank's result.
async fn every_byte(hosts: usize, per_host: usize, algorithm: Algorithm, slices: usize) {
    let n = hosts * per_host;
    let cfg = CollectiveConfig { algorithm, slices, ..Default::default() };
    let comms = on_hosts(hosts, per_host, cfg).await;
    assert_eq!(comms[0].topology(), Topology { hosts, per_host });
    let lens = [0usize, 1, n - 1, n + 1, 1031, 300_001];
    let results = on_all(&comms, move |rank, c| async move {
        let mut out = Vec::new();
        for (case, &len) in lens.iter().enumerate() {
            let mut v = input(len, case as u64, rank);
            c.allreduce_typed(&mut v, ReduceOp::Sum).await.unwrap_or_else(|e| panic!("rank {rank} len {len}: {e}"));
            let inputs: Vec<Vec<i64>> = (0..n).map(|r| input(len, case as u64, r)).collect();
            for (i, x) in v.iter().enumerate() {
                let want = inputs.iter().fold(0i64, |a, b| a.wrapping_add(b[i]));
                assert_eq!(*x, want, "{hosts}×{per_host} {algorithm} ×{slices} rank {rank} len {len} element {i}");
            }
            let choice = c.last_choice().expect("a choice");
            assert_eq!((choice.algorithm, choice.slices), (algorithm, slices));
            out.push(v);
        }
        out
    })
    .await;
    for r in 1..n {
        assert!(results[r] == results[0], "{hosts}×{per_host}: rank {r} differs from rank 0");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hierarchical_allreduce_delivers_every_byte_on_every_split_into_hosts() {
    // Two hosts (halving among leaders), three (the ring among leaders), one host (a gather
    // and the way back), and one rank per host (plain halving).
    for (hosts, per_host, slices) in [(2, 2, 4), (2, 3, 1), (3, 2, 4), (1, 3, 2), (3, 1, 4), (2, 2, 7)] {
        every_byte(hosts, per_host, Algorithm::Hierarchical, slices).await;
    }
}

/// `auto` on ranks that share hosts considers the hierarchical algorithm, says how it sees the
/// hosts, and every rank runs the same; an explicit `hierarchical` on ranks with a host each
/// is kept, and says it runs as halving.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn auto_sees_the_hosts_and_an_explicit_choice_is_kept() {
    let comms = on_hosts(2, 2, CollectiveConfig { algorithm: Algorithm::Auto, ..Default::default() }).await;
    let choices = on_all(&comms, |me, c| async move {
        let mut seen = Vec::new();
        for round in 0..3i64 {
            let mut v: Vec<i64> = (0..200_000).map(|k| (k * (me as i64 + 1)) ^ round).collect();
            c.allreduce_typed(&mut v, ReduceOp::Sum).await.unwrap();
            for (k, x) in v.iter().enumerate() {
                let want: i64 = (0..4i64).map(|r| (k as i64 * (r + 1)) ^ round).sum();
                assert_eq!(*x, want, "rank {me} element {k}");
            }
            seen.push(c.last_choice().expect("a choice"));
        }
        seen
    })
    .await;
    for (r, cs) in choices.iter().enumerate() {
        for (i, c) in cs.iter().enumerate() {
            assert_eq!((c.algorithm, c.slices), (choices[0][i].algorithm, choices[0][i].slices), "rank {r}");
            assert!(c.reason.contains("2 hosts × 2") && c.reason.contains("hierarchical ×"), "{}", c.reason);
        }
        assert!(cs[2].reason.contains("across hosts") && cs[2].reason.contains("within a host"), "{}", cs[2].reason);
    }
    // Endpoints on 127.0.0.1 alone are one host.
    let one: Vec<_> = endpoints(3).await.iter().map(|e| e.local_addrs()).collect();
    assert_eq!(Topology::of(&one), Topology { hosts: 1, per_host: 3 });
    let comms = on_hosts(3, 1, CollectiveConfig { algorithm: Algorithm::Hierarchical, ..Default::default() }).await;
    let reasons = on_all(&comms, |me, c| async move {
        let mut v = vec![me as f32; 1000];
        c.allreduce_typed(&mut v, ReduceOp::Sum).await.unwrap();
        assert!(v.iter().all(|&x| x == 3.0));
        c.last_choice().expect("a choice").reason
    })
    .await;
    assert!(
        reasons.iter().all(|r| r.contains("set by the configuration") && r.contains("runs as halving")),
        "{reasons:?}"
    );
}
