//! The endpoint with real data-plane endpoints on loopback and real Unix sockets, driven by the
//! Rust client (`plexus-collective`) from blocking threads, as a task would.

use std::sync::Arc;

use plexus_collective::{Client, Elem, Error as ClientError, Op, Reduce};
use plexus_dataplane::{Endpoint, EndpointConfig};

use super::serve::GangEndpoint;
use super::spec::Spec;

/// `n` members' endpoints on this host, each with its socket in `dir`.
async fn gang(n: usize, dir: &std::path::Path, tag: u64) -> Vec<(GangEndpoint, std::path::PathBuf, String)> {
    let mut rails = Vec::new();
    for _ in 0..n {
        let cfg = EndpointConfig { rails: vec!["127.0.0.1".parse().unwrap()], ..Default::default() };
        rails.push(Arc::new(Endpoint::bind(cfg).await.unwrap()));
    }
    let members: Vec<_> = rails.iter().map(|r| r.local_addrs()).collect();
    rails
        .into_iter()
        .enumerate()
        .map(|(rank, r)| {
            let socket = dir.join(format!("m{rank}.sock"));
            let secret = format!("{:032x}", rank + 1);
            let spec = Spec {
                rails: r,
                members: members.clone(),
                rank,
                tag,
                socket: socket.clone(),
                uid: None,
                secret: secret.clone(),
            };
            (GangEndpoint::open(spec).unwrap(), socket, secret)
        })
        .collect()
}

/// Runs `f(client)` for every member at once on blocking threads; their results in rank order.
async fn each<T: Send + 'static>(
    members: &[(GangEndpoint, std::path::PathBuf, String)],
    f: impl Fn(&mut Client) -> T + Send + Sync + 'static,
) -> Vec<T> {
    let f = Arc::new(f);
    let runs: Vec<_> = members
        .iter()
        .map(|(_, socket, secret)| {
            let (socket, secret, f) = (socket.clone(), secret.clone(), Arc::clone(&f));
            tokio::task::spawn_blocking(move || f(&mut Client::connect(&socket, &secret).unwrap()))
        })
        .collect();
    let mut out = Vec::new();
    for r in runs {
        out.push(r.await.unwrap());
    }
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn every_operation_over_three_members() {
    let dir = tempfile::tempdir().unwrap();
    let g = gang(3, dir.path(), 7 << 32).await;
    let out = each(&g, |c| {
        let r = c.rank() as f32;
        let mut sum = vec![r, 1.0, 2.0 * r];
        c.allreduce(&mut sum, Reduce::Sum).unwrap();
        let mut mean = vec![r as f64 * 3.0];
        c.allreduce(&mut mean, Reduce::Mean).unwrap();
        let mut max = vec![c.rank() as i64 * 10];
        c.allreduce(&mut max, Reduce::Max).unwrap();
        let mut red = vec![c.rank() as i32 + 1];
        c.reduce(&mut red, 1, Reduce::Prod).unwrap();
        let mut b = vec![c.rank() as i32; 5];
        c.broadcast(&mut b, 2).unwrap();
        let mut all = vec![0i64; 3];
        c.allgather(&mut all, &[c.rank() as i64 + 100]).unwrap();
        let mut rs = vec![0f32; 2];
        c.reduce_scatter(&mut rs, &[1.0, 2.0, 3.0, 4.0, 5.0, 6.0], Reduce::Sum).unwrap();
        let mut a2a = vec![0u8; 3];
        let me = c.rank() as u8;
        c.alltoall(&mut a2a, &[me * 10, me * 10 + 1, me * 10 + 2]).unwrap();
        // Member i sends j bytes of value i to member j.
        let counts: Vec<usize> = (0..3).collect();
        let send: Vec<u8> = counts.iter().flat_map(|&j| std::iter::repeat_n(me, j)).collect();
        let v = c.alltoallv(&send, &counts).unwrap();
        c.barrier().unwrap();
        (sum, mean, max, red, b, all, rs, a2a, v)
    })
    .await;
    for (rank, (sum, mean, max, red, b, all, rs, a2a, v)) in out.into_iter().enumerate() {
        assert_eq!(sum, vec![3.0, 3.0, 6.0]);
        assert_eq!(mean, vec![3.0]);
        assert_eq!(max, vec![20]);
        assert_eq!(red, if rank == 1 { vec![6] } else { vec![rank as i32 + 1] }, "only the root has the product");
        assert_eq!(b, vec![2; 5]);
        assert_eq!(all, vec![100, 101, 102]);
        assert_eq!(rs, vec![3.0 * (2 * rank + 1) as f32, 3.0 * (2 * rank + 2) as f32]);
        assert_eq!(a2a, vec![rank as u8, 10 + rank as u8, 20 + rank as u8]);
        assert_eq!(v, vec![vec![0u8; rank], vec![1u8; rank], vec![2u8; rank]]);
    }
    for (e, ..) in g {
        e.close(None).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn bf16_sums_in_f32_and_requests_pipeline() {
    let dir = tempfile::tempdir().unwrap();
    let g = gang(2, dir.path(), 9 << 32).await;
    let out = each(&g, |c| {
        // 128 + 130 = 258 is a bf16 (its 8 bits of mantissa hold it), summed in f32.
        let x: u16 = half::bf16::from_f32(if c.rank() == 0 { 128.0 } else { 130.0 }).to_bits();
        let ids: Vec<u64> = (0..8)
            .map(|_| c.submit(Op::Allreduce, Elem::Bf16, Reduce::Sum, 0, &[], &x.to_le_bytes()).unwrap())
            .collect();
        ids.into_iter().map(|id| c.finish(id).unwrap()).collect::<Vec<_>>()
    })
    .await;
    for results in out {
        for r in results {
            assert_eq!(half::bf16::from_le_bytes([r[0], r[1]]).to_f32(), 258.0);
        }
    }
    for (e, ..) in g {
        e.close(None).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn bad_use_fails_every_member_naming_it() {
    let dir = tempfile::tempdir().unwrap();
    let g = gang(2, dir.path(), 11 << 32).await;
    // Sizes that differ between members.
    let out = each(&g, |c| {
        let mut v = vec![1.0f32; 4 + c.rank()];
        let first = c.allreduce(&mut v, Reduce::Sum).unwrap_err().to_string();
        let next = c.barrier().unwrap_err().to_string();
        (first, next)
    })
    .await;
    for (first, next) in &out {
        assert!(first.contains("member"), "{first}");
        assert_eq!(first, next, "the gang's first failure stays: {next}");
    }
    for (e, ..) in g {
        e.close(None).await;
    }

    // An unsupported dtype on one member: the other's op fails too, naming it.
    let g = gang(2, dir.path(), 13 << 32).await;
    let (s0, k0) = (g[0].1.clone(), g[0].2.clone());
    let (s1, k1) = (g[1].1.clone(), g[1].2.clone());
    let bad = tokio::task::spawn_blocking(move || raw_bad_dtype(&s0, &k0));
    let good = tokio::task::spawn_blocking(move || {
        Client::connect(&s1, &k1).unwrap().allreduce(&mut [1.0f64], Reduce::Sum).unwrap_err().to_string()
    });
    for e in [bad.await.unwrap(), good.await.unwrap()] {
        assert!(e.contains("member 0 of the gang made a bad request") && e.contains("dtype code 42"), "{e}");
    }
    for (e, ..) in g {
        e.close(None).await;
    }
}

/// Sends an allreduce with dtype code 42 (which no client sends) and returns the error text.
fn raw_bad_dtype(socket: &std::path::Path, secret: &str) -> String {
    use plexus_collective::wire::{HELLO_MAGIC, Header, REPLY_LEN, Reply};
    use std::io::{Read, Write};
    let mut s = std::os::unix::net::UnixStream::connect(socket).unwrap();
    s.write_all(&[&HELLO_MAGIC[..], secret.as_bytes()].concat()).unwrap();
    let read = |s: &mut std::os::unix::net::UnixStream| {
        let mut h = [0u8; REPLY_LEN];
        s.read_exact(&mut h).unwrap();
        let r = Reply::decode(&h);
        let mut body = vec![0u8; r.len as usize];
        s.read_exact(&mut body).unwrap();
        (r.ok, String::from_utf8_lossy(&body).into_owned())
    };
    assert!(read(&mut s).0, "hello accepted");
    let h = Header { id: 1, op: Op::Allreduce.code(), dtype: 42, reduce: 0, root: 0, counts: 0, len: 8 };
    s.write_all(&h.encode()).unwrap();
    s.write_all(&[0; 8]).unwrap();
    let (ok, text) = read(&mut s);
    assert!(!ok);
    text
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_member_that_fails_fails_the_others_pending_op_and_a_wrong_secret_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let mut g = gang(2, dir.path(), 15 << 32).await;
    let (socket, secret) = (g[1].1.clone(), g[1].2.clone());
    let wrong = Client::connect(&socket, &"0".repeat(32)).err().unwrap();
    assert!(wrong.to_string().contains("not this attempt's secret"), "{wrong}");
    let pending = tokio::task::spawn_blocking(move || {
        let mut c = Client::connect(&socket, &secret).unwrap();
        c.allreduce(&mut [1.0f32], Reduce::Sum).unwrap_err()
    });
    tokio::time::sleep(std::time::Duration::from_millis(300)).await;
    let (dead, ..) = g.remove(0);
    let started = std::time::Instant::now();
    dead.close(Some("exit status: 137 (killed by signal 9)".into())).await;
    let e = pending.await.unwrap();
    assert!(matches!(e, ClientError::Failed(_)));
    assert!(e.to_string().contains("member 0 of the gang failed: exit status: 137"), "{e}");
    assert!(started.elapsed() < std::time::Duration::from_secs(5), "at once, not after a timeout");
    for (e, ..) in g {
        e.close(None).await;
    }
}
