//! `allreduce`: the collective benchmark (issue 5, seed 003).
//!
//! N worker processes on loopback (this binary re-executed as `allreduce --worker …`), each
//! with one data-plane endpoint; for each algorithm (seed 003's pipelined halving, the ring)
//! and size, f32 sum of seeded data: median over iterations of the slowest rank's time, algBW
//! and busBW (busBW = algBW · 2(N−1)/N, the nccl-tests convention), and in the same run Gloo's
//! figures from `../shared/anchors/gloo_allreduce.py` with the ratio ours ÷ Gloo. For the
//! largest size it also prints where rank 0's time went (copy, reduce, wait).
//!
//! Flags: `--worlds 2,4` `--sizes 1,16,64,256` (MiB) `--iters 10` `--slices 4` `--window 1`
//! `--seg-max 1` (MiB) `--no-gloo`.
//!
//! Workers learn each other's addresses through the parent: each prints `ADDRS <a>,<b>` on
//! stdout, the parent writes every rank's list back on their stdin, one line.

use std::io::{BufRead, BufReader, Write};
use std::net::{IpAddr, SocketAddr};
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use plexus_dataplane::collective::Profile;
use plexus_dataplane::{
    Algorithm, CollectiveConfig, Communicator, DType, Endpoint, EndpointConfig, ReduceOp,
};

const MIB: usize = 1 << 20;
/// Untimed iterations first: connections are opened lazily and buffers faulted in.
const WARMUP: usize = 3;
const SEED: u64 = 3;
const GLOO: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/../../shared/anchors/gloo_allreduce.py"
);

#[derive(Clone, Debug)]
struct Opts {
    worlds: Vec<usize>,
    sizes: Vec<usize>,
    iters: usize,
    slices: usize,
    window: usize,
    seg_max: u64,
    gloo: bool,
    algorithms: Vec<Algorithm>,
}

fn parse_list<T: std::str::FromStr>(s: &str, flag: &str) -> Vec<T> {
    s.split(',')
        .map(|x| {
            x.trim().parse().unwrap_or_else(|_| {
                eprintln!("allreduce: bad value {x:?} for {flag}");
                std::process::exit(2)
            })
        })
        .collect()
}

impl Opts {
    fn parse(args: &[String]) -> Opts {
        let mut o = Opts {
            worlds: vec![2, 4],
            sizes: vec![1, 16, 64, 256],
            iters: 10,
            slices: CollectiveConfig::default().slices,
            window: CollectiveConfig::default().send_window,
            seg_max: EndpointConfig::default().seg_max,
            gloo: true,
            algorithms: Algorithm::ALL.to_vec(),
        };
        let mut it = args.iter();
        while let Some(a) = it.next() {
            let mut val = || {
                it.next().cloned().unwrap_or_else(|| {
                    eprintln!("allreduce: {a} needs a value");
                    std::process::exit(2)
                })
            };
            match a.as_str() {
                "--worlds" => o.worlds = parse_list(&val(), a),
                "--sizes" => o.sizes = parse_list(&val(), a),
                "--iters" => o.iters = parse_list(&val(), a)[0],
                "--slices" => o.slices = parse_list(&val(), a)[0],
                "--window" => o.window = parse_list(&val(), a)[0],
                "--seg-max" => o.seg_max = parse_list::<u64>(&val(), a)[0] * MIB as u64,
                "--algorithms" => o.algorithms = parse_list(&val(), a),
                "--no-gloo" => o.gloo = false,
                _ => {
                    eprintln!("allreduce: unknown flag {a}");
                    std::process::exit(2)
                }
            }
        }
        o
    }

    fn to_args(&self) -> Vec<String> {
        let join = |v: &[usize]| {
            v.iter()
                .map(|x| x.to_string())
                .collect::<Vec<_>>()
                .join(",")
        };
        vec![
            "--sizes".into(),
            join(&self.sizes),
            "--iters".into(),
            self.iters.to_string(),
            "--slices".into(),
            self.slices.to_string(),
            "--window".into(),
            self.window.to_string(),
            "--seg-max".into(),
            (self.seg_max / MIB as u64).to_string(),
            "--algorithms".into(),
            self.algorithms
                .iter()
                .map(|a| a.name())
                .collect::<Vec<_>>()
                .join(","),
        ]
    }
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    if args.first().map(String::as_str) == Some("--worker") {
        let rank: usize = parse_list(&args[1], "--worker")[0];
        let opts = Opts::parse(&args[2..]);
        let rt = tokio::runtime::Runtime::new().expect("runtime");
        if let Err(e) = rt.block_on(worker(rank, opts)) {
            eprintln!("allreduce worker {rank}: {e}");
            std::process::exit(1);
        }
        return;
    }
    let opts = Opts::parse(&args);
    println!(
        "Plexus collectives: allreduce f32 sum on loopback, N worker processes (seed {SEED}; slices {}, send window {}, seg_max {} MiB, {} iterations after {WARMUP} warm-up, median of the slowest rank)",
        opts.slices,
        opts.window,
        opts.seg_max / MIB as u64,
        opts.iters
    );
    println!(
        "machine: {} cores",
        std::thread::available_parallelism().map_or(0, |n| n.get())
    );
    let started = Instant::now();
    let mut ours: Vec<Row> = Vec::new();
    for &n in &opts.worlds {
        ours.extend(run_world(n, &opts));
    }
    let gloo = if opts.gloo { gloo(&opts) } else { Vec::new() };
    println!();
    println!(
        "{:>2} {:>8} {:>9} {:>10} {:>11} {:>11} {:>12} {:>8}",
        "N", "size", "algorithm", "median_ms", "algBW_GB/s", "busBW_GB/s", "gloo_busBW", "÷ gloo"
    );
    for r in &ours {
        let g = gloo
            .iter()
            .find(|g| g.0 == r.n && g.1 == r.mib)
            .map(|g| g.2);
        println!(
            "{:>2} {:>5}MiB {:>9} {:>10.2} {:>11.3} {:>11.3} {:>12} {:>8}",
            r.n,
            r.mib,
            r.algorithm.name(),
            r.median * 1e3,
            r.alg_bw() / 1e9,
            r.bus_bw() / 1e9,
            g.map_or("n/a".into(), |g| format!("{:.3}", g / 1e9)),
            g.map_or("n/a".into(), |g| format!("{:.2}×", r.bus_bw() / g)),
        );
    }
    if let Some(&mib) = opts.sizes.iter().max() {
        println!();
        println!(
            "where rank 0's time goes at {mib} MiB (one iteration; parts overlap the transport, which runs beside them):"
        );
        for r in ours.iter().filter(|r| r.mib == mib) {
            let p = &r.profile;
            let ms = |d: Duration| d.as_secs_f64() * 1e3;
            println!(
                "  N={} {:>8}: total {:7.2} ms = wait {:7.2} + reduce {:6.2} ({:.2} GB/s) + copy {:6.2} ({} MiB) + final drain {:5.2} + other {:5.2}",
                r.n,
                r.algorithm.name(),
                ms(p.total),
                ms(p.wait),
                ms(p.reduce),
                p.reduced_bytes as f64 / p.reduce.as_secs_f64().max(1e-9) / 1e9,
                ms(p.copy),
                p.copied_bytes / MIB as u64,
                ms(p.drain),
                ms(p.total.saturating_sub(p.wait + p.reduce + p.copy + p.drain)),
            );
        }
    }
    println!("total bench time {:.0} s", started.elapsed().as_secs_f64());
}

struct Row {
    n: usize,
    mib: usize,
    algorithm: Algorithm,
    median: f64,
    profile: Profile,
}

impl Row {
    fn alg_bw(&self) -> f64 {
        (self.mib * MIB) as f64 / self.median
    }
    fn bus_bw(&self) -> f64 {
        self.alg_bw() * 2.0 * (self.n - 1) as f64 / self.n as f64
    }
}

/// Spawns `n` workers, introduces them, and collects rank 0's report lines.
fn run_world(n: usize, opts: &Opts) -> Vec<Row> {
    let exe = std::env::current_exe().expect("own path");
    let mut children: Vec<Child> = (0..n)
        .map(|r| {
            Command::new(&exe)
                .arg("--worker")
                .arg(r.to_string())
                .args(opts.to_args())
                .stdin(Stdio::piped())
                .stdout(Stdio::piped())
                .stderr(Stdio::inherit())
                .spawn()
                .expect("spawn worker")
        })
        .collect();
    let mut readers: Vec<_> = children
        .iter_mut()
        .map(|c| BufReader::new(c.stdout.take().expect("piped")))
        .collect();
    let mut addrs = Vec::new();
    for rd in &mut readers {
        let mut line = String::new();
        rd.read_line(&mut line).expect("worker stdout");
        let a = line
            .trim()
            .strip_prefix("ADDRS ")
            .unwrap_or_else(|| panic!("worker said {line:?} instead of its addresses"));
        addrs.push(a.to_string());
    }
    let all = addrs.join(";");
    for c in &mut children {
        let stdin = c.stdin.as_mut().expect("piped");
        writeln!(stdin, "{all}").expect("worker stdin");
    }
    let mut rows = Vec::new();
    for line in readers.swap_remove(0).lines() {
        let line = line.expect("worker stdout");
        let f: Vec<&str> = line.split_whitespace().collect();
        if f.first() != Some(&"RESULT") {
            continue;
        }
        let num = |i: usize| f[i].parse::<f64>().expect("number");
        let d = |i: usize| Duration::from_secs_f64(num(i));
        rows.push(Row {
            n,
            algorithm: f[1].parse().expect("algorithm"),
            mib: num(2) as usize,
            median: num(3),
            profile: Profile {
                total: d(4),
                wait: d(5),
                reduce: d(6),
                reduced_bytes: num(7) as u64,
                copy: d(8),
                copied_bytes: num(9) as u64,
                drain: d(10),
                ..Profile::default()
            },
        });
        eprintln!("N={n} {} {} MiB: median {:.2} ms", f[1], f[2], num(3) * 1e3);
    }
    for mut c in children {
        let _ = c.wait();
    }
    rows
}

/// One worker process: bind, learn the group, run every (algorithm, size), report from rank 0.
async fn worker(rank: usize, opts: Opts) -> Result<(), String> {
    let cfg = EndpointConfig {
        rails: vec![IpAddr::from([127, 0, 0, 1])],
        seg_max: opts.seg_max,
        ..Default::default()
    };
    let ep = Arc::new(Endpoint::bind(cfg).await.map_err(|e| e.to_string())?);
    let mine: Vec<String> = ep.local_addrs().iter().map(|a| a.to_string()).collect();
    println!("ADDRS {}", mine.join(","));
    let mut line = String::new();
    std::io::stdin()
        .read_line(&mut line)
        .map_err(|e| e.to_string())?;
    let ranks: Vec<Vec<SocketAddr>> = line
        .trim()
        .split(';')
        .map(|r| {
            r.split(',')
                .map(|a| a.parse().map_err(|e| format!("{a}: {e}")))
                .collect()
        })
        .collect::<Result<_, String>>()?;
    let n = ranks.len();
    for (i, &algorithm) in opts.algorithms.iter().enumerate() {
        let comm = Communicator::new(
            ep.clone(),
            ranks.clone(),
            rank,
            (i as u64) << 56,
            CollectiveConfig {
                algorithm,
                slices: opts.slices,
                send_window: opts.window,
            },
        )
        .map_err(|e| e.to_string())?;
        for &mib in &opts.sizes {
            // Like Gloo's in-place tensor, one buffer is reduced again and again: each result
            // (unique, so the collective assembles it in the input's own memory) is the next
            // input. Small integers in f32 stay exact through the warm-up check.
            let mut data = seeded(mib * MIB / 4, rank);
            let mut times = Vec::new();
            let mut profile = Profile::default();
            for it in 0..WARMUP + opts.iters {
                // Barrier: a one-element allreduce.
                let mut b = [0i32];
                comm.allreduce_typed(&mut b, ReduceOp::Sum)
                    .await
                    .map_err(|e| e.to_string())?;
                let t = Instant::now();
                let out = comm
                    .allreduce_bytes(data, DType::F32, ReduceOp::Sum)
                    .await
                    .map_err(|e| e.to_string())?;
                let dt = t.elapsed().as_secs_f64();
                if it >= WARMUP {
                    times.push(dt);
                    profile = comm.last_profile();
                }
                if it == 0 {
                    check(&out, mib * MIB / 4, n)?;
                }
                data = out;
            }
            // The slowest rank per iteration, as the Gloo script reports.
            comm.allreduce_typed(&mut times, ReduceOp::Max)
                .await
                .map_err(|e| e.to_string())?;
            times.sort_by(f64::total_cmp);
            let median = times[times.len() / 2];
            if rank == 0 {
                let s = |d: Duration| d.as_secs_f64();
                println!(
                    "RESULT {} {mib} {median} {} {} {} {} {} {} {}",
                    algorithm.name(),
                    s(profile.total),
                    s(profile.wait),
                    s(profile.reduce),
                    profile.reduced_bytes,
                    s(profile.copy),
                    profile.copied_bytes,
                    s(profile.drain),
                );
            }
        }
    }
    // Let the last acknowledgements go out before the process exits.
    tokio::time::sleep(Duration::from_millis(200)).await;
    let _ = n;
    Ok(())
}

/// Rank `rank`'s input: small integers as f32, so every sum is exact and checkable.
fn seeded(len: usize, rank: usize) -> Bytes {
    let raw = plexus_dataplane::rig::pattern(len, SEED ^ (rank as u64 + 1) << 32);
    let mut v = Vec::with_capacity(len * 4);
    for b in raw.iter() {
        v.extend_from_slice(&f32::from(*b % 16).to_le_bytes());
    }
    Bytes::from(v)
}

fn check(out: &[u8], len: usize, n: usize) -> Result<(), String> {
    let inputs: Vec<Bytes> = (0..n).map(|r| seeded(len, r)).collect();
    for i in (0..len).step_by(len / 1000 + 1) {
        let want: f32 = inputs
            .iter()
            .map(|x| f32::from_le_bytes(x[i * 4..i * 4 + 4].try_into().expect("4 bytes")))
            .sum();
        let got = f32::from_le_bytes(out[i * 4..i * 4 + 4].try_into().expect("4 bytes"));
        if got != want {
            return Err(format!("element {i}: {got}, expected {want}"));
        }
    }
    Ok(())
}

/// Gloo's figures from the anchor script, in the same run: (N, MiB, busBW bytes/s).
fn gloo(opts: &Opts) -> Vec<(usize, usize, f64)> {
    let python = std::env::var("HOME").map_or_else(
        |_| "python3".to_string(),
        |h| format!("{h}/.cache/plexus/torch-2.13.0/bin/python"),
    );
    let out = std::env::temp_dir().join(format!("plexus-gloo-{}.json", std::process::id()));
    let join = |v: &[usize]| {
        v.iter()
            .map(|x| x.to_string())
            .collect::<Vec<_>>()
            .join(",")
    };
    eprintln!("running Gloo: {python} {GLOO}");
    let status = Command::new(&python)
        .arg(GLOO)
        .arg("--json")
        .arg(&out)
        .env("WORLDS", join(&opts.worlds))
        .env("SIZES_MIB", join(&opts.sizes))
        .stdout(Stdio::inherit())
        .status();
    if !matches!(status, Ok(s) if s.success()) {
        println!("gloo: the anchor script did not run ({status:?})");
        return Vec::new();
    }
    let text = std::fs::read_to_string(&out).unwrap_or_default();
    let _ = std::fs::remove_file(&out);
    let v: serde_json::Value = serde_json::from_str(&text).unwrap_or_default();
    v.as_array()
        .map(|a| {
            a.iter()
                .filter_map(|r| {
                    Some((
                        r["world"].as_u64()? as usize,
                        r["mib"].as_u64()? as usize,
                        r["busbw_MBps"].as_f64()? * 1e6,
                    ))
                })
                .collect()
        })
        .unwrap_or_default()
}
