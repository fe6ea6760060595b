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
                meter: Arc::default(),
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
    let h = Header { id: 1, op: Op::Allreduce.code(), dtype: 42, reduce: 0, flags: 0, root: 0, counts: 0, len: 8 };
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

/// A connection that speaks the wire format by hand, as a hostile task might.
struct Raw {
    s: std::os::unix::net::UnixStream,
    next: u64,
}

impl Raw {
    fn connect(socket: &std::path::Path, secret: &str) -> Raw {
        use std::io::Write;
        let mut s = std::os::unix::net::UnixStream::connect(socket).unwrap();
        s.write_all(&[&plexus_collective::wire::HELLO_MAGIC[..], secret.as_bytes()].concat()).unwrap();
        let mut r = Raw { s, next: 1 };
        assert!(r.reply().0, "hello accepted");
        r
    }

    /// The next reply: ok, whether its result is in a region, and its body (or result length).
    fn reply(&mut self) -> (bool, bool, String) {
        use plexus_collective::wire::{REPLY_LEN, Reply};
        use std::io::Read;
        let mut h = [0u8; REPLY_LEN];
        self.s.read_exact(&mut h).unwrap();
        let r = Reply::decode(&h);
        if r.shared {
            return (r.ok, true, r.len.to_string());
        }
        let mut body = vec![0u8; r.len as usize];
        self.s.read_exact(&mut body).unwrap();
        (r.ok, false, String::from_utf8_lossy(&body).into_owned())
    }

    /// A map request for region `n`, with `fd` attached (or none); its answer.
    fn map(&mut self, n: u32, fd: Option<std::os::fd::RawFd>) -> (bool, bool, String) {
        use plexus_collective::wire::Header;
        use std::io::Write;
        let h = Header { id: self.next, op: Op::Map.code(), dtype: 0, reduce: 0, flags: 0, root: n, counts: 0, len: 0 };
        self.next += 1;
        match fd {
            Some(fd) => {
                let sent =
                    plexus_collective::region::send_with_fd(std::os::fd::AsRawFd::as_raw_fd(&self.s), &h.encode(), fd)
                        .unwrap();
                assert_eq!(sent, h.encode().len());
            }
            None => self.s.write_all(&h.encode()).unwrap(),
        }
        self.reply()
    }

    /// An f32 allreduce of `len` bytes whose payload is at `at`.
    fn shared_allreduce(&mut self, len: u64, at: plexus_collective::wire::SharedRef) -> (bool, bool, String) {
        use plexus_collective::wire::{FLAG_SHARED, Header};
        use std::io::Write;
        let h = Header {
            id: self.next,
            op: Op::Allreduce.code(),
            dtype: Elem::F32.code(),
            reduce: Reduce::Sum.code(),
            flags: FLAG_SHARED,
            root: 0,
            counts: 0,
            len,
        };
        self.next += 1;
        self.s.write_all(&[&h.encode()[..], &at.encode()[..]].concat()).unwrap();
        self.reply()
    }
}

/// A memfd of `size` bytes, sealed against shrinking when `seal`.
fn memfd(size: i64, seal: bool) -> std::os::fd::OwnedFd {
    use std::os::fd::{AsRawFd, FromRawFd};
    let raw = unsafe { libc::memfd_create(c"t".as_ptr(), libc::MFD_CLOEXEC | libc::MFD_ALLOW_SEALING) };
    let fd = unsafe { std::os::fd::OwnedFd::from_raw_fd(raw) };
    assert_eq!(unsafe { libc::ftruncate(fd.as_raw_fd(), size) }, 0);
    if seal {
        assert_eq!(unsafe { libc::fcntl(fd.as_raw_fd(), libc::F_ADD_SEALS, libc::F_SEAL_SHRINK) }, 0);
    }
    fd
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn regions_that_are_not_sealed_memfds_of_a_sane_size_are_refused_to_that_connection() {
    use std::os::fd::AsRawFd;
    let dir = tempfile::tempdir().unwrap();
    let g = gang(2, dir.path(), 17 << 32).await;
    let (s0, k0) = (g[0].1.clone(), g[0].2.clone());
    let refusals = tokio::task::spawn_blocking(move || {
        let mut r = Raw::connect(&s0, &k0);
        let file = std::fs::File::open("/proc/self/exe").unwrap();
        let big = memfd(plexus_collective::wire::MAX_REGION as i64 + 4096, true);
        vec![
            r.map(0, None),
            r.map(0, Some(file.as_raw_fd())),
            r.map(0, Some(memfd(4096, false).as_raw_fd())),
            r.map(0, Some(memfd(0, true).as_raw_fd())),
            r.map(0, Some(big.as_raw_fd())),
            r.map(16, Some(memfd(4096, true).as_raw_fd())),
            r.map(3, Some(memfd(4096, true).as_raw_fd())),
        ]
    })
    .await
    .unwrap();
    let expect = [
        "no file descriptor came with the request",
        "not a memfd",
        "not sealed against shrinking",
        "a region of 0 bytes",
        "a region of 8589938688 bytes",
        "region 16 is not one of 0..16",
    ];
    for (got, want) in refusals.iter().zip(expect) {
        assert!(!got.0 && got.2.contains(want), "{got:?} should name {want:?}");
    }
    assert!(refusals[6].0, "a sealed memfd of 4 KiB maps: {:?}", refusals[6]);
    // The refusals were that connection's: the gang still works.
    let sums = each(&g, |c| {
        let mut v = vec![1.0f32; 3];
        c.allreduce(&mut v, Reduce::Sum).map(|()| v)
    })
    .await;
    for s in sums {
        assert_eq!(s.unwrap(), vec![2.0; 3]);
    }
    for (e, ..) in g {
        e.close(None).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_shared_request_that_does_not_fit_its_region_fails_every_member_naming_it() {
    use plexus_collective::wire::SharedRef;
    use std::os::fd::AsRawFd;
    let dir = tempfile::tempdir().unwrap();
    for (case, at, len, want) in [
        (0u64, SharedRef { region: 0, in_off: 4090, out_off: 0, out_cap: 8 }, 8u64, "at offset 4090 does not fit"),
        (1, SharedRef { region: 0, in_off: u64::MAX - 3, out_off: 0, out_cap: 8 }, 8, "does not fit shared region 0"),
        (2, SharedRef { region: 0, in_off: 0, out_off: 4092, out_cap: 8 }, 8, "result's 8 bytes at offset 4092"),
        (3, SharedRef { region: 5, in_off: 0, out_off: 0, out_cap: 8 }, 8, "shared region 5 is not mapped"),
        (4, SharedRef { region: 0, in_off: 0, out_off: 8, out_cap: 4 }, 8, "do not fit the 4 bytes"),
    ] {
        let g = gang(2, dir.path(), (19 + case) << 32).await;
        let (s0, k0) = (g[0].1.clone(), g[0].2.clone());
        let (s1, k1) = (g[1].1.clone(), g[1].2.clone());
        let bad = tokio::task::spawn_blocking(move || {
            let mut r = Raw::connect(&s0, &k0);
            let fd = memfd(4096, true);
            assert!(r.map(0, Some(fd.as_raw_fd())).0);
            r.shared_allreduce(len, at)
        });
        let good = tokio::task::spawn_blocking(move || {
            Client::connect(&s1, &k1).unwrap().allreduce(&mut [1.0f32, 2.0], Reduce::Sum).unwrap_err().to_string()
        });
        let (bad, good) = (bad.await.unwrap(), good.await.unwrap());
        assert!(!bad.0 && bad.2.contains(want), "case {case}: {bad:?} should name {want:?}");
        assert!(good.contains("member 0 of the gang"), "case {case}: the other member fails too: {good}");
        for (e, ..) in g {
            e.close(None).await;
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn every_operation_without_shared_memory_and_through_it_agree() {
    let dir = tempfile::tempdir().unwrap();
    let g = gang(3, dir.path(), 31 << 32).await;
    let sockets: Vec<_> = g.iter().map(|(_, s, k)| (s.clone(), k.clone())).collect();
    let runs: Vec<_> = sockets
        .into_iter()
        .map(|(s, k)| {
            tokio::task::spawn_blocking(move || {
                let mut copying = Client::connect_copying(&s, &k).unwrap();
                let mut shared = Client::connect(&s, &k).unwrap();
                let me = copying.rank() as f32;
                let mut out = Vec::new();
                // 1 MiB and 3 elements, alternately through each connection (one queue serves both).
                for n in [3usize, 1 << 18] {
                    let mut a: Vec<f32> = (0..n).map(|i| me + i as f32).collect();
                    let mut b = a.clone();
                    copying.allreduce(&mut a, Reduce::Mean).unwrap();
                    shared.allreduce(&mut b, Reduce::Mean).unwrap();
                    let mut ga = vec![0f32; 3 * n];
                    let mut gb = vec![0f32; 3 * n];
                    copying.allgather(&mut ga, &a).unwrap();
                    shared.allgather(&mut gb, &b).unwrap();
                    out.push((a, b, ga, gb));
                }
                out
            })
        })
        .collect();
    for r in runs {
        for (a, b, ga, gb) in r.await.unwrap() {
            assert_eq!(a, b);
            assert_eq!(a[0], 1.0, "the mean of 0, 1, 2");
            assert_eq!(ga, gb);
            assert_eq!(ga.len(), 3 * a.len());
        }
    }
    for (e, ..) in g {
        e.close(None).await;
    }
}
