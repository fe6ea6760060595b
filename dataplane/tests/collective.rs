//! Collectives over real endpoints on 127.0.0.1, N ranks as N tasks of one process: results
//! against a sequential reference for every dtype, operator and algorithm, N = 1..9 and awkward
//! lengths; allreduce bitwise identical on every rank; reduce to every root; errors instead of
//! hangs when ranks disagree.
//!
//! Float tolerance: the collective reduces in a different association than the sequential
//! reference, so a float `sum` may differ by rounding: at most N·ε·Σ|xᵢ| per element (ε the
//! type's machine epsilon), and `prod` by N·ε·|reference|; `min`, `max` and every integer
//! result must match exactly.

mod common;
use common::{endpoints, on_all};
use std::sync::Arc;
use std::time::Duration;

use plexus_dataplane::collective::reduce_into;
use plexus_dataplane::{Algorithm, CollectiveConfig, Communicator, DType, Endpoint, EndpointConfig, Error, ReduceOp};

async fn group(n: usize, cfg: CollectiveConfig) -> Vec<Arc<Communicator>> {
    let eps = endpoints(n).await;
    let ranks: Vec<_> = eps.iter().map(|e| e.local_addrs()).collect();
    eps.into_iter()
        .enumerate()
        .map(|(r, ep)| Arc::new(Communicator::new(ep, ranks.clone(), r, 0, cfg).unwrap()))
        .collect()
}

/// Seeded input of rank `rank` for case `case`: `len` elements. Floats in ±[0.5, 2) (positive
/// for prod, so products stay finite), integers over their whole range (they wrap).
fn input(dtype: DType, op: ReduceOp, len: usize, case: u64, rank: usize) -> Vec<u8> {
    let mut x = (case << 20 ^ rank as u64).wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1;
    let mut next = move || {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        x
    };
    let mut out = Vec::with_capacity(len * dtype.size());
    for _ in 0..len {
        let r = next();
        let f = 0.5 + (r >> 11) as f64 / (1u64 << 53) as f64 * 1.5;
        let f = if op != ReduceOp::Prod && r & 1 == 1 { -f } else { f };
        match dtype {
            DType::F32 => out.extend_from_slice(&(f as f32).to_le_bytes()),
            DType::F64 => out.extend_from_slice(&f.to_le_bytes()),
            DType::I32 => out.extend_from_slice(&(r as i32).to_le_bytes()),
            DType::I64 => out.extend_from_slice(&(r as i64).to_le_bytes()),
        }
    }
    out
}

fn floats(dtype: DType, b: &[u8]) -> Vec<f64> {
    match dtype {
        DType::F32 => b.chunks_exact(4).map(|c| f64::from(f32::from_le_bytes(c.try_into().unwrap()))).collect(),
        _ => b.chunks_exact(8).map(|c| f64::from_le_bytes(c.try_into().unwrap())).collect(),
    }
}

/// Checks `got` against the sequential reduction of every rank's input.
fn check(dtype: DType, op: ReduceOp, len: usize, case: u64, n: usize, got: &[u8], what: &str) {
    let inputs: Vec<Vec<u8>> = (0..n).map(|r| input(dtype, op, len, case, r)).collect();
    let mut want = inputs[0].clone();
    for x in &inputs[1..] {
        reduce_into(dtype, op, &mut want, x);
    }
    assert_eq!(got.len(), want.len(), "{what}: length");
    if matches!(dtype, DType::I32 | DType::I64) || matches!(op, ReduceOp::Min | ReduceOp::Max) {
        assert!(got == want, "{what}: differs from the sequential reference");
        return;
    }
    let eps = if dtype == DType::F32 { f64::from(f32::EPSILON) } else { f64::EPSILON };
    let (g, w) = (floats(dtype, got), floats(dtype, &want));
    let abs: Vec<Vec<f64>> = inputs.iter().map(|x| floats(dtype, x)).collect();
    for i in 0..len {
        let scale = match op {
            ReduceOp::Sum => abs.iter().map(|x| x[i].abs()).sum::<f64>(),
            _ => w[i].abs(),
        };
        let tol = n as f64 * eps * scale;
        assert!((g[i] - w[i]).abs() <= tol, "{what}: element {i} is {} , reference {} (tolerance {tol})", g[i], w[i]);
    }
}

fn lens(n: usize) -> Vec<usize> {
    let mut v = vec![0, 1, n.saturating_sub(1), n + 1, 13, 1031];
    v.sort_unstable();
    v.dedup();
    v
}

/// Every dtype, op and awkward length on one group: each rank checks its result and returns
/// it, and the results must be bitwise identical across ranks.
async fn allreduce_everything(n: usize, cfg: CollectiveConfig) {
    let comms = group(n, cfg).await;
    let results = on_all(&comms, move |rank, c| async move {
        let mut out = Vec::new();
        let mut case = 0u64;
        for &dtype in DType::ALL {
            for &op in ReduceOp::ALL {
                for len in lens(n) {
                    case += 1;
                    let mut buf = input(dtype, op, len, case, rank);
                    c.allreduce(&mut buf, dtype, op)
                        .await
                        .unwrap_or_else(|e| panic!("{:?} n={n} rank {rank} {dtype} {op} len {len}: {e}", cfg));
                    let what = format!("{:?} n={n} rank {rank} {dtype} {op} len {len}", cfg);
                    check(dtype, op, len, case, n, &buf, &what);
                    out.push(buf);
                }
            }
        }
        out
    })
    .await;
    for (r, res) in results.iter().enumerate() {
        for (i, b) in res.iter().enumerate() {
            assert!(*b == results[0][i], "{cfg:?} n={n}: rank {r} case {i} is not bitwise identical to rank 0");
        }
    }
}

fn cfg(algorithm: Algorithm, slices: usize) -> CollectiveConfig {
    CollectiveConfig { algorithm, slices, ..Default::default() }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn halving_allreduce_matches_the_reference_for_n_1_to_9() {
    for n in 1..=9 {
        allreduce_everything(n, cfg(Algorithm::Halving, 4)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ring_allreduce_matches_the_reference_for_n_1_to_9() {
    for n in 1..=9 {
        allreduce_everything(n, cfg(Algorithm::Ring, 4)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn odd_slice_counts_and_one_slice_still_reduce_correctly() {
    for (n, slices) in [(3, 1), (5, 3), (6, 2), (7, 5)] {
        allreduce_everything(n, cfg(Algorithm::Halving, slices)).await;
        allreduce_everything(n, cfg(Algorithm::Ring, slices)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reduce_reaches_every_root_and_leaves_other_buffers_alone() {
    for &algorithm in Algorithm::ALL {
        for n in [1, 2, 3, 5, 6, 8] {
            let comms = group(n, cfg(algorithm, 2)).await;
            on_all(&comms, move |rank, c| async move {
                let mut case = 1000;
                for root in 0..n {
                    for (dtype, op) in [
                        (DType::F32, ReduceOp::Sum),
                        (DType::I64, ReduceOp::Prod),
                        (DType::F64, ReduceOp::Max),
                        (DType::I32, ReduceOp::Min),
                    ] {
                        for len in [0, 1, 3 * n + 1, 517] {
                            case += 1;
                            let orig = input(dtype, op, len, case, rank);
                            let mut buf = orig.clone();
                            c.reduce(&mut buf, root, dtype, op).await.unwrap();
                            let what = format!("{algorithm} reduce n={n} root={root} {dtype} {op} len {len}");
                            if rank == root {
                                check(dtype, op, len, case, n, &buf, &what);
                            } else {
                                assert!(buf == orig, "{what}: rank {rank}'s buffer changed");
                            }
                        }
                    }
                }
            })
            .await;
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn larger_buffers_and_the_owned_and_typed_entry_points() {
    for &algorithm in Algorithm::ALL {
        for n in [2, 3, 4] {
            let comms = group(n, cfg(algorithm, 4)).await;
            let results = on_all(&comms, move |rank, c| async move {
                // 1 MiB + 4 bytes of f32: several segments per slice, a length not a multiple of
                // anything.
                let len = (1 << 18) + 1;
                let data = input(DType::F32, ReduceOp::Sum, len, 7, rank);
                let out = c.allreduce_bytes(data.into(), DType::F32, ReduceOp::Sum).await.unwrap();
                check(DType::F32, ReduceOp::Sum, len, 7, n, &out, &format!("{algorithm} n={n} bytes"));
                let p = c.last_profile();
                assert!(p.bytes_sent > 0 && p.total > Duration::ZERO, "{p:?}");
                let mut typed: Vec<i64> = (0..1000).map(|i| i * (rank as i64 + 1)).collect();
                c.allreduce_typed(&mut typed, ReduceOp::Sum).await.unwrap();
                let k: i64 = (1..=n as i64).sum();
                assert!(typed.iter().enumerate().all(|(i, &v)| v == i as i64 * k));
                out
            })
            .await;
            assert!(results.iter().all(|r| *r == results[0]), "{algorithm} n={n}: ranks differ");
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ranks_with_different_lengths_all_fail_instead_of_hanging() {
    for &algorithm in Algorithm::ALL {
        for n in [2, 3, 5] {
            let comms = group(n, cfg(algorithm, 2)).await;
            let results = on_all(&comms, move |rank, c| async move {
                let len = if rank == n - 1 { 101 } else { 100 };
                let mut buf = vec![0u8; len * 4];
                c.allreduce(&mut buf, DType::F32, ReduceOp::Sum).await
            })
            .await;
            for (r, res) in results.iter().enumerate() {
                let e = res.as_ref().expect_err("mismatched lengths must fail");
                let msg = e.to_string();
                assert!(msg.contains("101") || msg.contains("aborted"), "{algorithm} n={n} rank {r}: {msg}");
            }
            // The group is still usable afterwards: the next collective has its own tags.
            let ok = on_all(&comms, |_, c| async move {
                let mut v = vec![1i32; 10];
                c.allreduce_typed(&mut v, ReduceOp::Sum).await.map(|_| v)
            })
            .await;
            for v in ok {
                assert_eq!(v.unwrap(), vec![n as i32; 10], "{algorithm} n={n}");
            }
        }
    }
}

#[tokio::test]
async fn bad_inputs_are_refused_with_the_value_named() {
    let comms = group(1, CollectiveConfig::default()).await;
    let c = &comms[0];
    let mut seven = vec![0u8; 7];
    let e = c.allreduce(&mut seven, DType::F32, ReduceOp::Sum).await.unwrap_err();
    assert!(matches!(e, Error::Config(_)) && e.to_string().contains("7 bytes"), "{e}");
    let e = c.reduce(&mut [0u8; 8], 3, DType::I64, ReduceOp::Max).await.unwrap_err();
    assert!(e.to_string().contains("root 3"), "{e}");
    let e = "bf16".parse::<DType>().unwrap_err();
    assert!(e.to_string().contains("bf16"), "{e}");
    let ep = Arc::new(Endpoint::bind(EndpointConfig::default()).await.unwrap());
    let other = Arc::new(Endpoint::bind(EndpointConfig::default()).await.unwrap());
    let addrs = vec![ep.local_addrs(), other.local_addrs()];
    let e = Communicator::new(ep.clone(), addrs.clone(), 1, 0, CollectiveConfig::default()).err().unwrap();
    assert!(e.to_string().contains("rank 1 is listed"), "{e}");
    let bad = CollectiveConfig { slices: 0, ..Default::default() };
    let e = Communicator::new(ep, addrs, 0, 0, bad).err().unwrap();
    assert!(e.to_string().contains("slices 0"), "{e}");
}
