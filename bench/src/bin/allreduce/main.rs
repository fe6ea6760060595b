//! `allreduce`: the allreduce benchmark (issue 5, seed 003; issue 30's targets), Plexus with
//! the defaults a job gets (`auto`: the cost model picks halving, ring or hierarchical and the
//! pipeline depth; the `weighted` rail scheduler; segments and socket buffers sized from
//! measured rates) against Gloo in the same run, f32 sum, median over iterations of the
//! slowest rank, every byte of every rank's first result checked against the exact sum.
//!
//! One run prints four tables (each can be left out with `--skip`):
//! * **rig** — on the rail rig (`scripts/rails-rig.sh`, as root; `--rig`, default
//!   `2gbit,500mbit`), rank h in host h's namespace, N = `--worlds`, sizes `--sizes`: Plexus
//!   over every rail (the headline) and over rail 0 alone, Gloo on rail 0
//!   (`../shared/anchors/gloo_collective.py`, one process per rank in its host's namespace;
//!   Gloo does not stripe), the fraction of the summed rails' bound, and PASS/FAIL per target:
//!   ≥ 0.95 of the bound, ≥ 1.2× Gloo, two rails ≥ one rail;
//! * **three rails** — the same worlds on `--rig3` (default `1500mbit,750mbit,250mbit`), every
//!   rail, against the bound (≥ 0.95);
//! * **latency** — `--small-sizes` (4 KiB … 1 MiB) on the first rig, every rail, against Gloo
//!   on rail 0: no slower than Gloo;
//! * **loopback** — N = `--loop-worlds` worker processes on 127.0.0.1 (no rails to stripe),
//!   `--loop-sizes` ≥ 1 MiB, against Gloo on loopback: ≥ 1.0×.
//!
//! busBW = algBW · 2(N−1)/N (the nccl-tests convention): what each rank sends, per second. On
//! the rig no allreduce's busBW can exceed the sum of a rank's rail rates (every byte a rank
//! sends leaves through its rails, each shaped at its rate), so that sum is the bound. Where
//! rank 0's time went is printed for the largest size of every table (the transport's
//! reductions run as segments arrive, inside `wait`). `cpu` is the share of this machine's
//! cores busy (`/proc/stat`: everything but idle and I/O wait, the kernel's network stack and
//! the rig's shaping included) while rank 0 ran its timed calls: near 100 %, the row measured
//! this machine's CPU, not the links.
//!
//! Workers learn each other's addresses through the parent: each prints `ADDRS <a>,<b>` on
//! stdout, the parent writes every rank's list back on their stdin, one line.

mod report;
mod worker;

use std::time::{Duration, Instant};

use plexus_dataplane::Algorithm;
use plexus_dataplane::collective::Profile;
use plexus_dataplane::rig::Rig;

use report::{GlooRow, Row};

const MIB: u64 = 1 << 20;
/// Untimed iterations first: connections are opened lazily, buffers faulted in, and `auto`
/// learns the links.
const WARMUP: usize = 3;

/// The command line. `--worker R` (with `--rails` and `--rail-key`) is how the benchmark starts
/// its own rank processes; a person passes the other flags.
#[derive(Debug, clap::Parser)]
#[command(name = "allreduce", about = "Plexus allreduce with its defaults against Gloo: rail rig, latency, loopback")]
pub struct Cli {
    /// World sizes (ranks) on the rigs, comma-separated.
    #[arg(long, value_delimiter = ',', default_value = "2,4,8")]
    worlds: Vec<usize>,
    /// Buffer sizes on the rigs (suffix k, m or g: KiB, MiB, GiB; none: MiB).
    #[arg(long, value_delimiter = ',', default_value = "16m,64m,256m", value_parser = parse_size)]
    sizes: Vec<u64>,
    /// The latency table's sizes, on the first rig.
    #[arg(long = "small-sizes", value_delimiter = ',', default_value = "4k,16k,64k,256k,1m", value_parser = parse_size)]
    small_sizes: Vec<u64>,
    /// World sizes on loopback.
    #[arg(long = "loop-worlds", value_delimiter = ',', default_value = "2,4,8")]
    loop_worlds: Vec<usize>,
    /// Buffer sizes on loopback.
    #[arg(long = "loop-sizes", value_delimiter = ',', default_value = "1m,16m,64m,256m", value_parser = parse_size)]
    loop_sizes: Vec<u64>,
    /// Timed iterations per size of 1 MiB and more (after the warm-up); at least 1.
    #[arg(long, default_value_t = 5, value_parser = clap::value_parser!(u64).range(1..))]
    iters: u64,
    /// Timed iterations per size below 1 MiB.
    #[arg(long = "small-iters", default_value_t = 30, value_parser = clap::value_parser!(u64).range(1..))]
    small_iters: u64,
    /// The rig of the main and latency tables.
    #[arg(long, default_value = "2gbit,500mbit")]
    rig: String,
    /// The three-rail rig.
    #[arg(long, default_value = "1500mbit,750mbit,250mbit")]
    rig3: String,
    /// Tables to leave out: rig, rig3, latency, loopback.
    #[arg(long, value_delimiter = ',', value_parser = ["rig", "rig3", "latency", "loopback"])]
    skip: Vec<String>,
    /// The algorithm (default: `auto`, a job's default); halving, ring or hierarchical to
    /// measure one.
    #[arg(long, default_value = "auto")]
    algorithm: Algorithm,
    /// Slices a buffer is cut into (default: the cost model's, or the collective's).
    #[arg(long)]
    slices: Option<usize>,
    /// Slices in flight per peer (default: the collective's send window).
    #[arg(long)]
    window: Option<usize>,
    /// The endpoints' largest segment, MiB (fractions allowed; default: the endpoint's).
    #[arg(long = "seg-max", value_name = "MIB")]
    seg_max: Option<f64>,
    /// SO_SNDBUF of the rail connections, KiB (default: sized from each rail's measured rate).
    #[arg(long, value_name = "KIB")]
    sndbuf: Option<usize>,
    /// Rails without the handshake (`open`) instead of the product's `key`.
    #[arg(long, default_value = "key", value_parser = ["open", "key"])]
    auth: String,
    /// Leave out Gloo.
    #[arg(long = "no-gloo")]
    no_gloo: bool,
    /// A worker's buffer sizes in bytes (given by the parent).
    #[arg(long = "bytes", value_delimiter = ',', hide = true)]
    bytes: Vec<u64>,
    #[command(flatten)]
    world: plexus_bench::world::WorkerArgs,
}

/// `4k`, `16m`, `1g`, `64` (MiB): bytes.
fn parse_size(s: &str) -> Result<u64, String> {
    let t = s.trim().to_ascii_lowercase();
    let (num, unit) = match t.chars().last() {
        Some('k') => (&t[..t.len() - 1], 1u64 << 10),
        Some('m') => (&t[..t.len() - 1], 1 << 20),
        Some('g') => (&t[..t.len() - 1], 1 << 30),
        _ => (&t[..], 1 << 20),
    };
    let v: f64 = num.parse().map_err(|_| format!("size {s:?}: a number with k, m or g"))?;
    let b = (v * unit as f64) as u64 / 4 * 4;
    if b == 0 || !v.is_finite() || v > 64.0 * (1u64 << 30) as f64 / unit as f64 {
        return Err(format!("size {s:?} must be at least 4 bytes and at most 64 GiB"));
    }
    Ok(b)
}

impl Cli {
    /// The flags a worker gets for `sizes`.
    fn worker_args(&self, sizes: &[u64]) -> Vec<String> {
        let join = |v: &[u64]| v.iter().map(|x| x.to_string()).collect::<Vec<_>>().join(",");
        let mut a = vec![
            "--bytes".into(),
            join(sizes),
            "--iters".into(),
            self.iters.to_string(),
            "--small-iters".into(),
            self.small_iters.to_string(),
            "--algorithm".into(),
            self.algorithm.name().into(),
        ];
        for (flag, v) in [
            ("--slices", self.slices.map(|s| s.to_string())),
            ("--window", self.window.map(|s| s.to_string())),
            ("--seg-max", self.seg_max.map(|s| s.to_string())),
            ("--sndbuf", self.sndbuf.map(|s| s.to_string())),
        ] {
            if let Some(v) = v {
                a.extend([flag.to_string(), v]);
            }
        }
        a
    }

    fn iters_for(&self, bytes: u64) -> usize {
        if bytes < MIB { self.small_iters as usize } else { self.iters as usize }
    }
}

fn main() {
    let cli = <Cli as clap::Parser>::parse();
    if let Some(rank) = cli.world.worker {
        let rt = tokio::runtime::Runtime::new().expect("runtime");
        if let Err(e) = rt.block_on(worker::run(rank, cli)) {
            eprintln!("allreduce worker {rank}: {e}");
            std::process::exit(1);
        }
        return;
    }
    let started = Instant::now();
    println!(
        "Plexus allreduce, f32 sum, {} ({} iterations ≥ 1 MiB, {} below, after {WARMUP} warm-up; median of the slowest rank; every byte of each rank's first result checked)",
        if cli.algorithm == Algorithm::Auto {
            "the defaults a job gets (auto)".to_string()
        } else {
            cli.algorithm.to_string()
        },
        cli.iters,
        cli.small_iters
    );
    println!(
        "machine: {} cores, load average {} (shared with other work: figures are noisy)",
        std::thread::available_parallelism().map_or(0, |n| n.get()),
        loadavg()
    );
    let mut rep = report::Report::default();
    let rigs_wanted = !cli.skip.iter().any(|s| s == "rig") || !cli.skip.iter().any(|s| s == "latency");
    if rigs_wanted || !cli.skip.iter().any(|s| s == "rig3") {
        if let Some(why) = plexus_dataplane::rig::unavailable() {
            println!("rig tables: cannot run here: {why}");
        } else {
            if rigs_wanted {
                main_rig(&cli, &mut rep);
            }
            if !cli.skip.iter().any(|s| s == "rig3") {
                three_rails(&cli, &mut rep);
            }
        }
    }
    if !cli.skip.iter().any(|s| s == "loopback") {
        loopback(&cli, &mut rep);
    }
    rep.print(&cli);
    println!("total bench time {:.0} s", started.elapsed().as_secs_f64());
}

/// The rig table and the latency table: for every N, Plexus on every rail (small and large
/// sizes in one world), on rail 0 alone, and Gloo on rail 0.
fn main_rig(cli: &Cli, rep: &mut report::Report) {
    let rails = cli.rig.split(',').count();
    let big = if cli.skip.iter().any(|s| s == "rig") { vec![] } else { cli.sizes.clone() };
    let small = if cli.skip.iter().any(|s| s == "latency") { vec![] } else { cli.small_sizes.clone() };
    let all: Vec<u64> = small.iter().chain(&big).copied().collect();
    rep.bound = rig_bound(&cli.rig);
    for &n in &cli.worlds {
        let rig = up(n, &cli.rig);
        rep.rig.extend(run_world(n, cli, &all, Some((&rig, rails)), "all rails"));
        if !big.is_empty() {
            rep.rig.extend(run_world(n, cli, &big, Some((&rig, 1)), "rail 0"));
        }
        if !cli.no_gloo {
            for (sizes, iters) in [(&small, cli.small_iters), (&big, cli.iters)] {
                if !sizes.is_empty() {
                    rep.gloo_rig.extend(gloo_on_rig(&rig, sizes, iters));
                }
            }
        }
    }
}

/// The three-rail table: every rail, against the bound.
fn three_rails(cli: &Cli, rep: &mut report::Report) {
    let rails = cli.rig3.split(',').count();
    rep.bound3 = rig_bound(&cli.rig3);
    for &n in &cli.worlds {
        let rig = up(n, &cli.rig3);
        rep.rig3.extend(run_world(n, cli, &cli.sizes, Some((&rig, rails)), "all rails"));
    }
}

fn loopback(cli: &Cli, rep: &mut report::Report) {
    for &n in &cli.loop_worlds {
        rep.looped.extend(run_world(n, cli, &cli.loop_sizes, None, "loopback"));
    }
    if !cli.no_gloo {
        let mibs = mib_list(&cli.loop_sizes);
        let worlds = cli.loop_worlds.iter().map(|x| x.to_string()).collect::<Vec<_>>().join(",");
        let job = plexus_bench::gloo::Job {
            args: vec!["allreduce".into()],
            env: vec![
                ("WARMUP", WARMUP.to_string()),
                ("ITERS", cli.iters.to_string()),
                ("SIZES_MIB", mibs),
                ("WORLDS", worlds),
            ],
            timeout: Duration::from_secs(900),
        };
        eprintln!("running Gloo on loopback ({} {})", plexus_bench::gloo::python(), plexus_bench::gloo::SCRIPT);
        match plexus_bench::gloo::spawn_mode(&job) {
            Ok(v) => rep.gloo_loop = gloo_rows(&v, None),
            Err(e) => println!("gloo on loopback: the anchor script did not run: {e}"),
        }
    }
}

fn up(n: usize, spec: &str) -> Rig {
    Rig::up(n, spec).unwrap_or_else(|e| {
        eprintln!("allreduce: the rig {spec} with {n} hosts: {e}");
        std::process::exit(1)
    })
}

/// The summed rate of a rig's rails, bytes/s (`2gbit:1ms,500mbit` → 312.5e6).
fn rig_bound(spec: &str) -> f64 {
    spec.split(',')
        .map(|r| {
            let r = r.split(':').next().unwrap_or("").to_ascii_lowercase();
            let (num, mult) = if let Some(x) = r.strip_suffix("gbit") {
                (x, 1e9)
            } else if let Some(x) = r.strip_suffix("mbit") {
                (x, 1e6)
            } else if let Some(x) = r.strip_suffix("kbit") {
                (x, 1e3)
            } else {
                (r.strip_suffix("bit").unwrap_or(&r), 1.0)
            };
            num.parse::<f64>().unwrap_or(f64::NAN) * mult / 8.0
        })
        .sum()
}

fn mib_list(sizes: &[u64]) -> String {
    sizes.iter().map(|&b| format!("{}", b as f64 / MIB as f64)).collect::<Vec<_>>().join(",")
}

fn loadavg() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .map(|s| s.split_whitespace().take(3).collect::<Vec<_>>().join(" "))
        .unwrap_or_else(|_| "?".into())
}

/// Spawns `n` workers (on the rig, rank h in host h with its first `rails` rails), introduces
/// them, and collects rank 0's report lines.
fn run_world(n: usize, cli: &Cli, sizes: &[u64], rig: Option<(&Rig, usize)>, label: &str) -> Vec<Row> {
    use std::io::BufRead;
    let key = plexus_bench::world::key(&cli.auth);
    let (children, mut readers) = plexus_bench::world::spawn(n, &cli.worker_args(sizes), key.as_deref(), rig);
    let mut rows = Vec::new();
    for line in readers.swap_remove(0).lines() {
        let line = line.expect("worker stdout");
        let f: Vec<&str> = line.split_whitespace().collect();
        if f.first() != Some(&"RESULT") {
            continue;
        }
        let num = |i: usize| f[i].parse::<f64>().expect("number");
        let d = |i: usize| Duration::from_secs_f64(num(i));
        let row = Row {
            n,
            bytes: num(1) as u64,
            median: num(2),
            ran: format!("{} ×{}", f[3], f[4]),
            profile: Profile {
                total: d(5),
                wait: d(6),
                reduce: d(7),
                reduced_bytes: num(8) as u64,
                copy: d(9),
                copied_bytes: num(10) as u64,
                drain: d(11),
                ..Profile::default()
            },
            label: label.to_string(),
            busy: num(12),
        };
        eprintln!("N={n} {label} {}: {} median {:.3} ms", plexus_bench::size(row.bytes), row.ran, row.median * 1e3);
        rows.push(row);
    }
    let mut failed = false;
    for mut c in children {
        failed |= !matches!(c.wait(), Ok(s) if s.success());
    }
    if failed || rows.len() != sizes.len() {
        println!("N={n} {label}: a worker failed (see stderr); {} of {} sizes measured", rows.len(), sizes.len());
    }
    rows
}

/// Gloo's allreduce on the rig, rail 0, one process per rank in its host's namespace.
fn gloo_on_rig(rig: &Rig, sizes: &[u64], iters: u64) -> Vec<GlooRow> {
    let n = rig.hosts();
    let job = plexus_bench::gloo::Job {
        args: vec!["allreduce".into()],
        env: vec![("WARMUP", WARMUP.to_string()), ("ITERS", iters.to_string()), ("SIZES_MIB", mib_list(sizes))],
        // A failed rank leaves the others waiting for it.
        timeout: Duration::from_secs(900),
    };
    eprintln!("running Gloo on rail 0 of the rig: N={n}");
    match plexus_bench::gloo::on_rig(rig, &job) {
        Ok(v) => gloo_rows(&v, Some(n)),
        Err(e) => {
            println!("gloo: N={n} on the rig: the anchor script did not run: {e}");
            Vec::new()
        }
    }
}

/// The anchor's JSON rows: (N, bytes, median seconds), wrong results left out (and said).
fn gloo_rows(v: &serde_json::Value, world: Option<usize>) -> Vec<GlooRow> {
    v.as_array()
        .map(|a| {
            a.iter()
                .filter_map(|r| {
                    let n = world.or(r["world"].as_u64().map(|w| w as usize))?;
                    let bytes = (r["mib"].as_f64()? * MIB as f64) as u64 / 4 * 4;
                    if r["correct"].as_bool() != Some(true) {
                        println!("gloo: N={n} {} was wrong; left out", plexus_bench::size(bytes));
                        return None;
                    }
                    Some(GlooRow { n, bytes, median: r["median_s"].as_f64()? })
                })
                .collect()
        })
        .unwrap_or_default()
}
