//! `allreduce`: the collective benchmark (issue 5, seed 003).
//!
//! N worker processes on loopback (this binary re-executed as `allreduce --worker …`), each
//! with one data-plane endpoint; for each algorithm (seed 003's pipelined halving, the ring)
//! and size, f32 sum of seeded data: median over iterations of the slowest rank's time, algBW
//! and busBW (busBW = algBW · 2(N−1)/N, the nccl-tests convention), and in the same run Gloo's
//! figures from `../shared/anchors/gloo_allreduce.py` with the ratio ours ÷ Gloo. For the
//! largest size it also prints where rank 0's time went (copy, reduce, wait).
//!
//! It also measures, in the same run, how many bytes per second loopback TCP carries on this
//! machine (one stream, sender and receiver on their own threads): every byte an allreduce
//! sends crosses loopback once, all N ranks share the machine's cores, and a rank sends
//! 2(N−1)/N of the buffer, so no TCP implementation's busBW can exceed capacity ÷ N. The table
//! prints that bound beside ours and Gloo's.
//!
//! `--rig 2gbit,500mbit` instead runs every world on the rail rig (`scripts/rails-rig.sh`, as
//! root): rank h in host h's namespace, first with only rail 0, then with every rail (the
//! `weighted` scheduler stripes each message), and prints the gain of all rails over one, and
//! beside it Gloo's busBW on rail 0 (`../shared/anchors/gloo_collective.py` in rank mode, rank h
//! in host h's namespace; Gloo does not stripe) with ours ÷ Gloo.
//!
//! Flags: `--worlds 2,4` `--sizes 1,16,64,256` (MiB) `--iters 10` `--slices 4` `--window 1`
//! `--seg-max 1` (MiB, fractions allowed) `--algorithms halving,ring` `--no-gloo` `--rig SPEC`
//! `--auth open,key` (rails without / with the rail handshake, side by side; default `key`)
//! `--sndbuf KiB` (SO_SNDBUF of the rail connections; default: sized by the transport from each
//! rail's measured rate).
//!
//! Workers learn each other's addresses through the parent: each prints `ADDRS <a>,<b>` on
//! stdout, the parent writes every rank's list back on their stdin, one line.

use std::io::BufRead;
use std::net::IpAddr;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use bytes::Bytes;
use plexus_dataplane::collective::Profile;
use plexus_dataplane::rig::Rig;
use plexus_dataplane::{Algorithm, CollectiveConfig, Communicator, DType, EndpointConfig, ReduceOp};

const MIB: usize = 1 << 20;
/// Untimed iterations first: connections are opened lazily and buffers faulted in.
const WARMUP: usize = 3;
const SEED: u64 = 3;
const GLOO: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../../shared/anchors/gloo_allreduce.py");

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
    /// The rail rig's rails (`--rig`), for the parent.
    rig: Option<String>,
    /// This worker's rail addresses (`--rails`, given by the parent); empty: 127.0.0.1.
    rails: Vec<IpAddr>,
    /// SO_SNDBUF of the rail connections, KiB (`--sndbuf`); none: sized from measured rates.
    sndbuf: Option<usize>,
    /// Rail authentication modes to measure (`--auth open,key`; default `key`, the product's).
    auth: Vec<String>,
    /// This worker's rail key, hex (`--rail-key`, given by the parent for `key`); none: open.
    rail_key: Option<String>,
}

/// The command line. `--worker R` (with `--rails` and `--rail-key`) is how the benchmark starts
/// its own rank processes; a person passes the other flags.
#[derive(Debug, clap::Parser)]
#[command(name = "allreduce", about = "Plexus allreduce algorithms side by side, with Gloo as the anchor")]
struct Cli {
    /// World sizes (ranks), comma-separated.
    #[arg(long, value_delimiter = ',', default_value = "2,4")]
    worlds: Vec<usize>,
    /// Buffer sizes, MiB, comma-separated.
    #[arg(long, value_delimiter = ',', default_value = "1,16,64,256")]
    sizes: Vec<usize>,
    /// Timed iterations per algorithm and size (after the warm-up); at least 1.
    #[arg(long, default_value_t = 10, value_parser = clap::value_parser!(u64).range(1..))]
    iters: u64,
    /// Slices a buffer is cut into (default: the collective's).
    #[arg(long)]
    slices: Option<usize>,
    /// Slices in flight per peer (default: the collective's send window).
    #[arg(long)]
    window: Option<usize>,
    /// The endpoints' largest segment, MiB (fractions allowed; default: the endpoint's).
    #[arg(long = "seg-max", value_name = "MIB")]
    seg_max: Option<f64>,
    /// Algorithms: halving, ring.
    #[arg(long, value_delimiter = ',', default_value = "halving,ring")]
    algorithms: Vec<Algorithm>,
    /// Leave out the Gloo anchor.
    #[arg(long = "no-gloo")]
    no_gloo: bool,
    /// Run every world on the rail rig with these rail rates (e.g. `2gbit,500mbit`).
    #[arg(long)]
    rig: Option<String>,
    /// Rail authentication modes, side by side: `open` and/or `key` (the product's).
    #[arg(long, value_delimiter = ',', default_value = "key", value_parser = ["open", "key"])]
    auth: Vec<String>,
    /// SO_SNDBUF of the rail connections, KiB (default: sized from each rail's measured rate).
    #[arg(long, value_name = "KIB")]
    sndbuf: Option<usize>,
    #[command(flatten)]
    world: plexus_bench::world::WorkerArgs,
}

impl Opts {
    /// The options and, for a worker process, its rank.
    fn parse() -> (Opts, Option<usize>) {
        let c = <Cli as clap::Parser>::parse();
        let opts = Opts {
            worlds: c.worlds,
            sizes: c.sizes,
            iters: c.iters as usize,
            slices: c.slices.unwrap_or(CollectiveConfig::default().slices),
            window: c.window.unwrap_or(CollectiveConfig::default().send_window),
            seg_max: c.seg_max.map_or(EndpointConfig::default().seg_max, |m| (m * MIB as f64) as u64),
            gloo: !c.no_gloo,
            algorithms: c.algorithms,
            rig: c.rig,
            rails: c.world.rails,
            sndbuf: c.sndbuf.map(|k| k << 10),
            auth: c.auth,
            rail_key: c.world.rail_key,
        };
        (opts, c.world.worker)
    }

    fn to_args(&self) -> Vec<String> {
        let join = |v: &[usize]| v.iter().map(|x| x.to_string()).collect::<Vec<_>>().join(",");
        let mut args: Vec<String> = vec![
            "--sizes".into(),
            join(&self.sizes),
            "--iters".into(),
            self.iters.to_string(),
            "--slices".into(),
            self.slices.to_string(),
            "--window".into(),
            self.window.to_string(),
            "--seg-max".into(),
            (self.seg_max as f64 / MIB as f64).to_string(),
            "--algorithms".into(),
            self.algorithms.iter().map(|a| a.name()).collect::<Vec<_>>().join(","),
        ];
        if let Some(b) = self.sndbuf {
            args.extend(["--sndbuf".into(), (b >> 10).to_string()]);
        }
        args
    }
}

fn main() {
    let (opts, worker_rank) = Opts::parse();
    if let Some(rank) = worker_rank {
        let rt = tokio::runtime::Runtime::new().expect("runtime");
        if let Err(e) = rt.block_on(worker(rank, opts)) {
            eprintln!("allreduce worker {rank}: {e}");
            std::process::exit(1);
        }
        return;
    }
    if let Some(spec) = opts.rig.clone() {
        rig_main(&opts, &spec);
        return;
    }
    println!(
        "Plexus collectives: allreduce f32 sum on loopback, N worker processes (seed {SEED}; slices {}, send window {}, seg_max {} MiB, {} iterations after {WARMUP} warm-up, median of the slowest rank)",
        opts.slices,
        opts.window,
        opts.seg_max as f64 / MIB as f64,
        opts.iters
    );
    println!(
        "machine: {} cores, load average {}",
        std::thread::available_parallelism().map_or(0, |n| n.get()),
        loadavg()
    );
    let started = Instant::now();
    let capacity = tcp_capacity();
    println!(
        "loopback TCP capacity (best of 3 one-stream runs, measured now): {:.2} GB/s, so busBW ≤ {:.2} GB/s ÷ N for any TCP allreduce here",
        capacity / 1e9,
        capacity / 1e9
    );
    let mut ours: Vec<Row> = Vec::new();
    for &n in &opts.worlds {
        for auth in &opts.auth {
            let mut rows = run_world(n, &opts, None, auth);
            for r in &mut rows {
                r.label = auth.clone();
            }
            ours.extend(rows);
        }
    }
    let gloo = if opts.gloo { gloo(&opts) } else { Vec::new() };
    println!();
    println!(
        "{:>2} {:>8} {:>9} {:>5} {:>10} {:>11} {:>11} {:>12} {:>8} {:>11} {:>8} {:>8}",
        "N",
        "size",
        "algorithm",
        "rails",
        "median_ms",
        "algBW_GB/s",
        "busBW_GB/s",
        "gloo_busBW",
        "÷ gloo",
        "TCP bound",
        "÷ bound",
        "gloo ÷"
    );
    for r in &ours {
        let g = gloo.iter().find(|g| g.0 == r.n && g.1 == r.mib).map(|g| g.2);
        let bound = capacity / r.n as f64;
        println!(
            "{:>2} {:>5}MiB {:>9} {:>5} {:>10.2} {:>11.3} {:>11.3} {:>12} {:>8} {:>11.3} {:>8.2} {:>8}",
            r.n,
            r.mib,
            r.algorithm.name(),
            r.label,
            r.median * 1e3,
            r.alg_bw() / 1e9,
            r.bus_bw() / 1e9,
            g.map_or("n/a".into(), |g| format!("{:.3}", g / 1e9)),
            g.map_or("n/a".into(), |g| format!("{:.2}×", r.bus_bw() / g)),
            bound / 1e9,
            r.bus_bw() / bound,
            g.map_or("n/a".into(), |g| format!("{:.2}", g / bound)),
        );
    }
    if opts.auth.len() == 2 {
        // The handshake costs one round trip per connection, in the untimed warm-up; this is
        // the check that nothing per byte crept in.
        println!();
        println!("busBW with the rail handshake (key) ÷ without (open), same N, size and algorithm:");
        for k in ours.iter().filter(|r| r.label == "key") {
            if let Some(o) =
                ours.iter().find(|o| o.label == "open" && o.n == k.n && o.mib == k.mib && o.algorithm == k.algorithm)
            {
                println!("  N={} {:>4} MiB {:>9}: {:.3}", k.n, k.mib, k.algorithm.name(), k.bus_bw() / o.bus_bw());
            }
        }
    }
    if let Some(&mib) = opts.sizes.iter().max() {
        print_profiles(&ours, mib);
    }
    println!("total bench time {:.0} s", started.elapsed().as_secs_f64());
}

fn print_profiles(rows: &[Row], mib: usize) {
    println!();
    println!(
        "where rank 0's time goes at {mib} MiB (one iteration). Reductions run in the transport's connection readers, as each verified segment arrives, so they lie inside 'wait':"
    );
    for r in rows.iter().filter(|r| r.mib == mib) {
        let p = &r.profile;
        let ms = |d: Duration| d.as_secs_f64() * 1e3;
        println!(
            "  N={} {:>8} {:>7}: total {:7.2} ms = wait {:7.2} (of which reducing {:6.2}, {:.2} GB/s) + copy {:6.2} ({} MiB) + final drain {:5.2} + other {:5.2}",
            r.n,
            r.algorithm.name(),
            r.label,
            ms(p.total),
            ms(p.wait),
            ms(p.reduce),
            p.reduced_bytes as f64 / p.reduce.as_secs_f64().max(1e-9) / 1e9,
            ms(p.copy),
            p.copied_bytes / MIB as u64,
            ms(p.drain),
            ms(p.total.saturating_sub(p.wait + p.copy + p.drain)),
        );
    }
}

/// `--rig`: every world on the rail rig, with rail 0 alone and then with every rail.
fn rig_main(opts: &Opts, spec: &str) {
    if let Some(why) = plexus_dataplane::rig::unavailable() {
        println!("allreduce --rig: cannot run here: {why}");
        std::process::exit(1);
    }
    let rails = spec.split(',').count();
    println!(
        "Plexus collectives on the rail rig ({spec}): allreduce f32 sum, rank h in host h's namespace, weighted rail scheduler (seed {SEED}; slices {}, send window {}, seg_max {} MiB, socket send buffer {}, {} iterations after {WARMUP} warm-up, median of the slowest rank)",
        opts.slices,
        opts.window,
        opts.seg_max as f64 / MIB as f64,
        opts.sndbuf.map_or("sized from measured rates".to_string(), |b| plexus_bench::size(b as u64)),
        opts.iters
    );
    let started = Instant::now();
    let mut rows = Vec::new();
    let mut gloo = Vec::new();
    for &n in &opts.worlds {
        let rig = Rig::up(n, spec).unwrap_or_else(|e| {
            eprintln!("allreduce --rig: {e}");
            std::process::exit(1)
        });
        for used in [1, rails] {
            let mut rs = run_world(n, opts, Some((&rig, used)), opts.auth.last().map_or("key", String::as_str));
            for r in &mut rs {
                r.label = format!("{used} rail{}", if used == 1 { "" } else { "s" });
            }
            rows.extend(rs);
        }
        if opts.gloo {
            gloo.extend(gloo_on_rig(&rig, opts));
        }
        drop(rig);
    }
    println!();
    println!(
        "{:>2} {:>8} {:>9} {:>8} {:>10} {:>11} {:>11} {:>14} {:>12} {:>8}",
        "N",
        "size",
        "algorithm",
        "rails",
        "median_ms",
        "algBW_GB/s",
        "busBW_GB/s",
        "gain ÷ 1 rail",
        "gloo_busBW",
        "÷ gloo"
    );
    for r in &rows {
        let one = rows
            .iter()
            .find(|o| o.n == r.n && o.mib == r.mib && o.algorithm == r.algorithm && o.label == "1 rail")
            .map_or(f64::NAN, |o| o.median);
        let g = gloo.iter().find(|g| g.0 == r.n && g.1 == r.mib).map(|g| g.2);
        println!(
            "{:>2} {:>5}MiB {:>9} {:>8} {:>10.2} {:>11.3} {:>11.3} {:>13.2}× {:>12} {:>8}",
            r.n,
            r.mib,
            r.algorithm.name(),
            r.label,
            r.median * 1e3,
            r.alg_bw() / 1e9,
            r.bus_bw() / 1e9,
            one / r.median,
            g.map_or("n/a".into(), |g| format!("{:.3}", g / 1e9)),
            g.map_or("n/a".into(), |g| format!("{:.2}×", r.bus_bw() / g)),
        );
    }
    if opts.gloo {
        println!(
            "gloo_busBW: Gloo's allreduce (../shared/anchors/gloo_collective.py, one process per rank in its host's namespace) on rail 0 alone, since Gloo does not stripe; ÷ gloo is our busBW ÷ that."
        );
    }
    if let Some(&mib) = opts.sizes.iter().max() {
        print_profiles(&rows, mib);
    }
    println!("total bench time {:.0} s", started.elapsed().as_secs_f64());
}

/// Bytes per second one loopback TCP stream carries here, sender and receiver each on its own
/// thread (so both cores work, as they do for the collectives): the best of three 1 s runs.
fn tcp_capacity() -> f64 {
    use std::io::{Read, Write as _};
    let mut best: f64 = 0.0;
    for _ in 0..3 {
        let l = std::net::TcpListener::bind("127.0.0.1:0").expect("bind loopback");
        let addr = l.local_addr().expect("local addr");
        let sink = std::thread::spawn(move || {
            let (mut s, _) = l.accept().expect("accept");
            let mut buf = vec![0u8; MIB];
            let mut n = 0u64;
            loop {
                match s.read(&mut buf) {
                    Ok(0) | Err(_) => return n,
                    Ok(k) => n += k as u64,
                }
            }
        });
        let mut s = std::net::TcpStream::connect(addr).expect("connect loopback");
        let buf = vec![1u8; MIB];
        let t = Instant::now();
        while t.elapsed() < Duration::from_secs(1) {
            s.write_all(&buf).expect("write loopback");
        }
        drop(s);
        let n = sink.join().expect("sink thread");
        best = best.max(n as f64 / t.elapsed().as_secs_f64());
    }
    best
}

fn loadavg() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .map(|s| s.split_whitespace().take(3).collect::<Vec<_>>().join(" "))
        .unwrap_or_else(|_| "?".into())
}

struct Row {
    n: usize,
    mib: usize,
    algorithm: Algorithm,
    median: f64,
    profile: Profile,
    /// Which configuration (the rig's rail count), for the rig table.
    label: String,
}

impl Row {
    fn alg_bw(&self) -> f64 {
        (self.mib * MIB) as f64 / self.median
    }
    fn bus_bw(&self) -> f64 {
        self.alg_bw() * 2.0 * (self.n - 1) as f64 / self.n as f64
    }
}

/// Spawns `n` workers (on the rig, rank h in host h with its first `rails` rails), introduces
/// them, and collects rank 0's report lines.
fn run_world(n: usize, opts: &Opts, rig: Option<(&Rig, usize)>, auth: &str) -> Vec<Row> {
    let key = plexus_bench::world::key(auth);
    let (children, mut readers) = plexus_bench::world::spawn(n, &opts.to_args(), key.as_deref(), rig);
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
            label: String::new(),
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
    let (ep, ranks) =
        plexus_bench::world::join(&opts.rails, opts.seg_max, opts.sndbuf, opts.rail_key.as_deref()).await?;
    let n = ranks.len();
    for (i, &algorithm) in opts.algorithms.iter().enumerate() {
        let comm = Communicator::new(
            ep.clone(),
            ranks.clone(),
            rank,
            (i as u64) << 56,
            CollectiveConfig { algorithm, slices: opts.slices, send_window: opts.window },
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
                comm.allreduce_typed(&mut b, ReduceOp::Sum).await.map_err(|e| e.to_string())?;
                let t = Instant::now();
                let out = comm.allreduce_bytes(data, DType::F32, ReduceOp::Sum).await.map_err(|e| e.to_string())?;
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
            comm.allreduce_typed(&mut times, ReduceOp::Max).await.map_err(|e| e.to_string())?;
            let median = plexus_bench::median(&times).expect("at least one timed iteration");
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
    if rank == 0 {
        let rates: Vec<String> =
            ep.rail_rates().iter().map(|r| r.map_or("-".into(), |r| format!("{:.3}", r / 1e9))).collect();
        eprintln!("rank 0's rails as the transport measured them, GB/s: {}", rates.join(", "));
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
        let want: f32 =
            inputs.iter().map(|x| f32::from_le_bytes(x[i * 4..i * 4 + 4].try_into().expect("4 bytes"))).sum();
        let got = f32::from_le_bytes(out[i * 4..i * 4 + 4].try_into().expect("4 bytes"));
        if got != want {
            return Err(format!("element {i}: {got}, expected {want}"));
        }
    }
    Ok(())
}

/// Gloo's figures from the anchor script, in the same run: (N, MiB, busBW bytes/s).
fn gloo(opts: &Opts) -> Vec<(usize, usize, f64)> {
    let python = std::env::var("HOME")
        .map_or_else(|_| "python3".to_string(), |h| format!("{h}/.cache/plexus/torch-2.13.0/bin/python"));
    let out = std::env::temp_dir().join(format!("plexus-gloo-{}.json", std::process::id()));
    let join = |v: &[usize]| v.iter().map(|x| x.to_string()).collect::<Vec<_>>().join(",");
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
                    Some((r["world"].as_u64()? as usize, r["mib"].as_u64()? as usize, r["busbw_MBps"].as_f64()? * 1e6))
                })
                .collect()
        })
        .unwrap_or_default()
}

/// Gloo's allreduce on the rig, rail 0, one process per rank in its host's namespace, every
/// size: (N, MiB, busBW bytes/s).
fn gloo_on_rig(rig: &Rig, opts: &Opts) -> Vec<(usize, usize, f64)> {
    let n = rig.hosts();
    let join = |v: &[usize]| v.iter().map(|x| x.to_string()).collect::<Vec<_>>().join(",");
    let job = plexus_bench::gloo::Job {
        args: vec!["allreduce".into()],
        env: vec![("WARMUP", WARMUP.to_string()), ("ITERS", opts.iters.to_string()), ("SIZES_MIB", join(&opts.sizes))],
        // A failed rank leaves the others waiting for it. At N = 2 on a 2 Gbit/s rail the whole
        // run (four sizes up to 256 MiB, 13 iterations each, Python start-up included) took
        // about 25 s here; larger worlds and slower rails take a few times that.
        timeout: Duration::from_secs(900),
    };
    eprintln!(
        "running Gloo on rail 0 of the rig: N={n} ({} {})",
        plexus_bench::gloo::python(),
        plexus_bench::gloo::SCRIPT
    );
    let v = match plexus_bench::gloo::on_rig(rig, &job) {
        Ok(v) => v,
        Err(e) => {
            println!("gloo: N={n} on the rig: the anchor script did not run: {e}");
            return Vec::new();
        }
    };
    v.as_array()
        .map(|a| {
            a.iter()
                .filter_map(|r| {
                    if r["correct"].as_bool() != Some(true) {
                        println!("gloo: N={n} {} MiB on the rig: Gloo's result was wrong", r["mib"]);
                        return None;
                    }
                    Some((n, r["mib"].as_f64()? as usize, r["busbw_GBps"].as_f64()? * 1e9))
                })
                .collect()
        })
        .unwrap_or_default()
}
