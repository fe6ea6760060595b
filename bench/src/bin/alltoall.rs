//! `alltoall`: the personalised all-to-all benchmark (issue 15, seed 004).
//!
//! N worker processes (this binary re-executed as `alltoall --worker …`), each with one
//! data-plane endpoint and one `Exchanger`, on loopback or (`--rig SPEC`) on the rail rig, rank h
//! in host h's namespace, where each host's link to a rail's switch is rate-limited, so two
//! senders to one receiver really share its link. For every world N, total size and table, each
//! schedule exchanges the same seeded bytes: the median over iterations of the slowest rank's
//! time, algBW (bytes sent to other ranks ÷ time), the speed-up over `shift`, and in the same run
//! Gloo's `all_to_all_single` on the same table (`../shared/anchors/gloo_collective.py`: its
//! spawn mode on loopback, one process per rank in host r's namespace on rail 0 on the rig,
//! since Gloo does not stripe) with the ratio ours ÷ Gloo. It ends with the targets
//! (`css` ≥ 1.3× faster than `shift` on skewed tables on the rig, `css` ≥ Gloo on every table),
//! each PASS or FAIL from the figures above it.
//!
//! The tables, each scaled so that the bytes crossing the network (the off-diagonal sum) are
//! the `--sizes` total, in whole f32 elements (Gloo's script rounds counts to elements):
//! * `uniform`: every rank sends every rank (itself included, a local copy) total / (N(N−1)).
//! * `skewed`: every sender spreads total / N over the N − 1 others with Zipf weights: its k-th
//!   receiver (k = 1 … N−1) in its own seeded random order of them gets a share ∝ 1/k^s
//!   (s = `--zipf`, 1.2). Different senders have different hot receivers, so the columns are
//!   uneven too: a receiver hot for two senders is where `shift`'s drifting steps collide.
//!   Nothing to itself.
//! * `block-cyclic`: redistributing an f32 array from cyclic(3) on N ranks to cyclic(5) on the
//!   same N ranks (`BlockCyclic::new(N, 3, N, 5)`, `Placement::Shared`: what stays on a rank is
//!   a local copy), as many periods as make the total. Besides the three schedules of every
//!   table it runs the seed's Algorithm 1 (`alg1`, where it applies: gcd(m, P) = 1 and
//!   Q / gcd(Q, n) = P with m = lcm(3, 5)/3 = 5 and n = 3, true for N ∈ {4, 8}, false for a
//!   multiple of 3 or 5, where it is left out) and Algorithm 2 (`alg2`).
//!
//! `shift`, `pairwise` and `css` run through `Exchanger::alltoallv` (the schedule is built inside
//! the timed call, as a caller gets it); `alg1`/`alg2` through `alltoallv_with`, computed
//! beforehand. `direct` is no schedule but a diagnostic: every message at once through the
//! endpoint's public `send`/`recv`, as Gloo's `all_to_all_single` posts them all at once, on our
//! transport; beside the schedules it separates what the steps cost from what the transport
//! costs. The table's `model` column is the schedule's cost as the seed counts it (the sum
//! over steps of the step's largest message) against `shift`'s: the speed-up if every step
//! lasted as long as its largest message at one rate. On the rig, `÷ link` is the time a rank's
//! link needs at the configured rates for the busiest rank's bytes (the larger of what it sends
//! and what it receives) ÷ the measured time: 1.0 is the wire's limit for any schedule.
//!
//! Every iteration of every rank checks every byte it received against the deterministic fill
//! (a hash of sender, receiver and offset); a wrong part fails the run on every rank.
//! Schedules take turns within each iteration, so a change of load on this shared machine
//! falls on all of them alike.
//!
//! Flags: `--worlds 4,8` `--sizes 64,256` (MiB crossing the network) `--tables
//! uniform,skewed,block-cyclic` `--schedules shift,pairwise,css,alg1,alg2,direct` `--iters 5` (timed,
//! after 2 warm-up) `--zipf 1.2` `--seed 4` `--no-gloo` `--rig SPEC` (e.g. `2gbit,500mbit`, as
//! root) `--rails-used 1,2` (on the rig: ours on the first k rails, each k in turn; default
//! every rail) `--auth open|key` (rails without / with the rail handshake; default `key`)
//! `--seg-max 1` (MiB, fractions allowed) `--sndbuf KiB` (SO_SNDBUF of the rail connections;
//! default: the kernel's autotuning).
//! The defaults took 4 minutes on loopback and 6 on a `2gbit,500mbit` rig on a 2-core machine
//! (Gloo's Python start-up, about 10 s per table, included); `--iters 20` gives steadier
//! medians at about three times the cost, `--rails-used 1,2` shows what striping adds.
//!
//! Workers learn each other's addresses through the parent: each prints `ADDRS <a>,<b>` on
//! stdout, the parent writes every rank's list back on their stdin, one line.

use std::io::BufRead;
use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use plexus_bench::gloo;
use plexus_dataplane::rig::Rig;
use plexus_dataplane::{
    BlockCyclic, CollectiveConfig, ComTable, Communicator, Endpoint, EndpointConfig, Exchanger, PeerId, Placement,
    ReduceOp, Schedule, ScheduleKind,
};

const MIB: usize = 1 << 20;
/// Untimed iterations first: connections are opened lazily and buffers faulted in.
const WARMUP: usize = 2;
/// Counts are whole f32 elements, as Gloo's script exchanges them.
const ELEM: u64 = 4;
/// The block-cyclic case: cyclic(FROM_BLOCK) on N ranks → cyclic(TO_BLOCK) on N ranks.
const FROM_BLOCK: u64 = 3;
const TO_BLOCK: u64 = 5;
/// The target for `css` over `shift` on skewed tables, on the rig.
const SKEW_TARGET: f64 = 1.3;
/// Longest a Gloo run may take before the bench kills it: its slowest table here (N = 8,
/// 256 MiB on a 500 Mbit/s-class rail, Python start-up included) takes under two minutes.
const GLOO_TIMEOUT: Duration = Duration::from_secs(600);

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum TableKind {
    Uniform,
    Skewed,
    BlockCyclic,
}

impl TableKind {
    const ALL: &'static [TableKind] = &[TableKind::Uniform, TableKind::Skewed, TableKind::BlockCyclic];

    fn name(self) -> &'static str {
        match self {
            TableKind::Uniform => "uniform",
            TableKind::Skewed => "skewed",
            TableKind::BlockCyclic => "block-cyclic",
        }
    }
}

impl std::str::FromStr for TableKind {
    type Err = String;

    fn from_str(s: &str) -> Result<TableKind, String> {
        TableKind::ALL
            .iter()
            .copied()
            .find(|t| t.name() == s)
            .ok_or_else(|| format!("unknown table {s:?} (uniform, skewed, block-cyclic)"))
    }
}

/// A schedule to measure: one the exchanger builds from the table, or one of the seed's two
/// for block-cyclic redistribution (given to `alltoallv_with`), or no schedule at all.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Sched {
    Kind(ScheduleKind),
    /// css with overlapped steps (`Exchanger::with_overlap`): a step's acknowledgements overlap
    /// the next step's transfer.
    CssOverlap,
    Alg1,
    Alg2,
    /// Not an exchanger's: every message at once through `Endpoint::send`/`recv`, what Gloo's
    /// `all_to_all_single` does, on our transport. It tells the cost of the steps from the
    /// cost of the transport.
    Direct,
}

impl Sched {
    const ALL: &'static [Sched] = &[
        Sched::Kind(ScheduleKind::Shift),
        Sched::Kind(ScheduleKind::Pairwise),
        Sched::Kind(ScheduleKind::Css),
        Sched::CssOverlap,
        Sched::Alg1,
        Sched::Alg2,
        Sched::Direct,
    ];

    fn name(self) -> &'static str {
        match self {
            Sched::Kind(k) => k.name(),
            Sched::CssOverlap => "css-ov",
            Sched::Alg1 => "alg1",
            Sched::Alg2 => "alg2",
            Sched::Direct => "direct",
        }
    }
}

impl std::str::FromStr for Sched {
    type Err = String;

    fn from_str(s: &str) -> Result<Sched, String> {
        Sched::ALL
            .iter()
            .copied()
            .find(|k| k.name() == s)
            .ok_or_else(|| format!("unknown schedule {s:?} (shift, pairwise, css, css-ov, alg1, alg2, direct)"))
    }
}

#[derive(Clone, Debug)]
struct Opts {
    worlds: Vec<usize>,
    sizes: Vec<usize>,
    tables: Vec<TableKind>,
    schedules: Vec<Sched>,
    iters: usize,
    zipf: f64,
    seed: u64,
    gloo: bool,
    /// The rail rig's rails (`--rig`), for the parent.
    rig: Option<String>,
    /// On the rig, how many rails ours uses, each in turn (`--rails-used`); empty: every rail.
    rails_used: Vec<usize>,
    /// Rail authentication (`--auth open|key`; default `key`, the product's).
    auth: String,
    /// The endpoints' largest segment (`--seg-max`, MiB, fractions allowed).
    seg_max: u64,
    /// SO_SNDBUF of the rail connections, bytes (`--sndbuf KiB`); none: the kernel's autotuning.
    sndbuf: Option<usize>,
    /// This worker's rail addresses (`--rails`, given by the parent); empty: 127.0.0.1.
    rails: Vec<IpAddr>,
    /// This worker's rail key, hex (`--rail-key`, given by the parent for `key`); none: open.
    rail_key: Option<String>,
}

/// The command line. `--worker R` (with `--rails` and `--rail-key`) is how the benchmark starts
/// its own rank processes; a person passes the other flags.
#[derive(Debug, clap::Parser)]
#[command(name = "alltoall", about = "Plexus all-to-all schedules side by side, with Gloo as the anchor")]
struct Cli {
    /// World sizes (ranks), comma-separated; each at least 2.
    #[arg(long, value_delimiter = ',', default_value = "4,8")]
    worlds: Vec<usize>,
    /// Total bytes exchanged per table, MiB, comma-separated.
    #[arg(long, value_delimiter = ',', default_value = "64,256")]
    sizes: Vec<usize>,
    /// Tables: uniform, skewed, block-cyclic.
    #[arg(long, value_delimiter = ',', default_value = "uniform,skewed,block-cyclic")]
    tables: Vec<TableKind>,
    /// Schedules: shift, pairwise, css, css-ov, alg1, alg2, direct.
    #[arg(long, value_delimiter = ',', default_value = "shift,pairwise,css,css-ov,alg1,alg2,direct")]
    schedules: Vec<Sched>,
    /// Timed iterations per schedule (after the warm-up).
    #[arg(long, default_value_t = 5, value_parser = clap::value_parser!(u64).range(1..))]
    iters: u64,
    /// The skewed table's Zipf exponent.
    #[arg(long, default_value_t = 1.2)]
    zipf: f64,
    #[arg(long, default_value_t = 4)]
    seed: u64,
    /// Leave out the Gloo anchor.
    #[arg(long = "no-gloo")]
    no_gloo: bool,
    /// Run on the rail rig with these rail rates (e.g. `1gbit,500mbit`).
    #[arg(long)]
    rig: Option<String>,
    /// On the rig, how many rails ours uses, each in turn, comma-separated (default: every rail).
    #[arg(long = "rails-used", value_delimiter = ',')]
    rails_used: Vec<usize>,
    /// Rail authentication: `key` (the product's) or `open`.
    #[arg(long, default_value = "key", value_parser = ["open", "key"])]
    auth: String,
    /// The endpoints' largest segment, MiB (fractions allowed; default: the endpoint's).
    #[arg(long = "seg-max", value_name = "MIB")]
    seg_max: Option<f64>,
    /// SO_SNDBUF of the rail connections, KiB (default: the kernel's autotuning).
    #[arg(long, value_name = "KIB")]
    sndbuf: Option<usize>,
    #[command(flatten)]
    world: plexus_bench::world::WorkerArgs,
}

impl Opts {
    /// The options and, for a worker process, its rank.
    fn parse() -> (Opts, Option<usize>) {
        use clap::{CommandFactory, Parser};
        let c = Cli::parse();
        if c.worlds.iter().any(|&n| n < 2) {
            Cli::command()
                .error(clap::error::ErrorKind::ValueValidation, "every world needs at least 2 ranks (--worlds)")
                .exit();
        }
        let opts = Opts {
            worlds: c.worlds,
            sizes: c.sizes,
            tables: c.tables,
            schedules: c.schedules,
            iters: c.iters as usize,
            zipf: c.zipf,
            seed: c.seed,
            gloo: !c.no_gloo,
            rig: c.rig,
            rails_used: c.rails_used,
            auth: c.auth,
            seg_max: c.seg_max.map_or(EndpointConfig::default().seg_max, |m| (m * MIB as f64) as u64),
            sndbuf: c.sndbuf.map(|k| k << 10),
            rails: c.world.rails,
            rail_key: c.world.rail_key,
        };
        (opts, c.world.worker)
    }

    /// What a worker needs to rebuild the same tables and run the same schedules.
    fn to_args(&self) -> Vec<String> {
        let join = |v: Vec<String>| v.join(",");
        let mut args = vec![
            "--sizes".into(),
            join(self.sizes.iter().map(|x| x.to_string()).collect()),
            "--tables".into(),
            join(self.tables.iter().map(|t| t.name().to_string()).collect()),
            "--schedules".into(),
            join(self.schedules.iter().map(|s| s.name().to_string()).collect()),
            "--iters".into(),
            self.iters.to_string(),
            "--zipf".into(),
            self.zipf.to_string(),
            "--seed".into(),
            self.seed.to_string(),
            "--seg-max".into(),
            (self.seg_max as f64 / MIB as f64).to_string(),
        ];
        if let Some(b) = self.sndbuf {
            args.extend(["--sndbuf".into(), (b >> 10).to_string()]);
        }
        args
    }
}

/// One table of one world and size, and the schedules measured on it.
struct Case {
    table: ComTable,
    schedules: Vec<(Sched, Schedule)>,
}

impl Case {
    /// The `kind` table for `n` ranks whose off-diagonal sum is (about, in whole elements)
    /// `total` bytes, with the schedules of `wanted` that apply to it.
    fn new(kind: TableKind, n: usize, total: u64, opts: &Opts) -> Case {
        let mut redistribution = None;
        let table = match kind {
            TableKind::Uniform => {
                let per = total / (n * (n - 1)) as u64 / ELEM * ELEM;
                ComTable::uniform(n, per).expect("n ≥ 2")
            }
            TableKind::Skewed => skewed(n, total, opts.zipf, opts.seed),
            TableKind::BlockCyclic => {
                let bc = BlockCyclic::new(n, FROM_BLOCK, n, TO_BLOCK).expect("valid parameters");
                let period = bc.table(Placement::Shared);
                let off: u64 = period.demands().iter().map(|d| d.2).sum();
                let periods = (total / (off * ELEM)).max(1);
                redistribution = Some(bc);
                period.scaled(periods * ELEM).expect("no overflow at these sizes")
            }
        };
        let schedules = opts
            .schedules
            .iter()
            .filter_map(|&s| {
                let built = match (s, &redistribution) {
                    (Sched::Kind(k), _) => Schedule::build(k, &table),
                    (Sched::CssOverlap, _) => Schedule::build(ScheduleKind::Css, &table),
                    // Its "schedule" is only for the table's columns: every pair in one step
                    // is no schedule, so shift's stands in (the model column says n/a).
                    (Sched::Direct, _) => Schedule::build(ScheduleKind::Shift, &table),
                    (Sched::Alg1, Some(bc)) => bc.algorithm1(Placement::Shared)?,
                    (Sched::Alg2, Some(bc)) => bc.algorithm2(Placement::Shared),
                    (_, None) => return None,
                };
                Some((s, built))
            })
            .collect();
        Case { table, schedules }
    }

    /// Bytes that cross the network.
    fn network_bytes(&self) -> u64 {
        self.table.demands().iter().map(|d| d.2).sum()
    }

    /// The most bytes one rank sends or receives over the network.
    fn busiest_rank(&self) -> u64 {
        let n = self.table.n();
        let mut load = vec![0u64; 2 * n];
        for (i, j, b) in self.table.demands() {
            load[i] += b;
            load[n + j] += b;
        }
        load.into_iter().max().unwrap_or(0)
    }
}

/// splitmix64's output function: a bijective mix of 64 bits.
fn mix(mut z: u64) -> u64 {
    z = z.wrapping_add(0x9e37_79b9_7f4a_7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// The skewed table (see the module documentation): sender i's k-th receiver in a seeded
/// random order of the others gets (total / N) · k^−s / Σ_k k^−s, in whole elements.
fn skewed(n: usize, total: u64, s: f64, seed: u64) -> ComTable {
    let weights: Vec<f64> = (1..n).map(|k| (k as f64).powf(-s)).collect();
    let sum: f64 = weights.iter().sum();
    let row = (total / n as u64) as f64;
    let mut rows = vec![vec![0u64; n]; n];
    for (i, r) in rows.iter_mut().enumerate() {
        // Fisher–Yates over the other ranks, from a stream seeded by (seed, n, i).
        let mut state = mix(seed ^ ((n as u64) << 32) ^ ((i as u64) << 48));
        let mut next = move || {
            state = mix(state);
            state
        };
        let mut order: Vec<usize> = (0..n).filter(|&j| j != i).collect();
        for k in (1..order.len()).rev() {
            order.swap(k, (next() % (k as u64 + 1)) as usize);
        }
        for (k, &j) in order.iter().enumerate() {
            r[j] = (row * weights[k] / sum) as u64 / ELEM * ELEM;
        }
    }
    ComTable::from_rows(&rows).expect("square")
}

/// The 8 bytes at word `k` of what `from` sends `to`: distinct for every (from, to, offset).
fn word(from: usize, to: usize, k: u64) -> [u8; 8] {
    mix(((from as u64) << 52) ^ ((to as u64) << 40) ^ k).to_le_bytes()
}

/// What rank `from` sends rank `to`: `len` bytes of the deterministic fill.
fn fill(from: usize, to: usize, len: usize) -> Bytes {
    let mut v = vec![0u8; len];
    for (k, c) in v.chunks_mut(8).enumerate() {
        c.copy_from_slice(&word(from, to, k as u64)[..c.len()]);
    }
    Bytes::from(v)
}

/// Checks every byte rank `me` received (one part per sender, in rank order) against the fill.
fn verify(me: usize, table: &ComTable, got: &[Bytes]) -> Result<(), String> {
    if got.len() != table.n() {
        return Err(format!("{} parts for {} senders", got.len(), table.n()));
    }
    for (from, part) in got.iter().enumerate() {
        let want = table.get(from, me);
        if part.len() as u64 != want {
            return Err(format!("{} bytes from rank {from}, {want} expected", part.len()));
        }
        if let Some(k) = part.chunks(8).enumerate().position(|(k, c)| c != &word(from, me, k as u64)[..c.len()]) {
            return Err(format!("the part from rank {from} differs at byte {}", 8 * k));
        }
    }
    Ok(())
}

fn main() {
    let (opts, worker_rank) = Opts::parse();
    if let Some(rank) = worker_rank {
        let rt = tokio::runtime::Runtime::new().expect("runtime");
        if let Err(e) = rt.block_on(worker(rank, opts)) {
            eprintln!("alltoall worker {rank}: {e}");
            std::process::exit(1);
        }
        return;
    }
    let started = Instant::now();
    let rig_rates: Vec<f64> =
        opts.rig.as_deref().map_or_else(Vec::new, |spec| spec.split(',').map(|r| rate_bits(r) / 8.0).collect());
    match &opts.rig {
        None => println!(
            "Plexus all-to-all on loopback, N worker processes (seed {}; Zipf s = {}; seg_max {} MiB, socket send buffer {}; {} iterations after {WARMUP} warm-up, schedules taking turns; median of the slowest rank; every byte checked)",
            opts.seed,
            opts.zipf,
            opts.seg_max as f64 / MIB as f64,
            sndbuf(&opts),
            opts.iters
        ),
        Some(spec) => {
            if let Some(why) = plexus_dataplane::rig::unavailable() {
                println!("alltoall --rig: cannot run here: {why}");
                std::process::exit(1);
            }
            if rig_rates.iter().any(|r| !r.is_finite() || *r <= 0.0) {
                eprintln!("alltoall: cannot read the rates of --rig {spec:?} (e.g. 2gbit,500mbit)");
                std::process::exit(2)
            }
            println!(
                "Plexus all-to-all on the rail rig ({spec}): rank h in host h's namespace, ours striped over its rails (weighted rail scheduler), Gloo on rail 0 (seed {}; Zipf s = {}; seg_max {} MiB, socket send buffer {}; {} iterations after {WARMUP} warm-up, schedules taking turns; median of the slowest rank; every byte checked)",
                opts.seed,
                opts.zipf,
                opts.seg_max as f64 / MIB as f64,
                sndbuf(&opts),
                opts.iters
            )
        }
    }
    println!(
        "machine: {} cores, load average {}",
        std::thread::available_parallelism().map_or(0, |n| n.get()),
        loadavg()
    );
    print_tables(&opts);
    let all_rails = rig_rates.len();
    let rails_used = if opts.rails_used.is_empty() { vec![all_rails] } else { opts.rails_used.clone() };
    if let Some(&bad) = rails_used.iter().find(|&&k| opts.rig.is_some() && (k == 0 || k > all_rails)) {
        eprintln!("alltoall: --rails-used {bad}: the rig has {all_rails} rails");
        std::process::exit(2)
    }
    let mut rows: Vec<Row> = Vec::new();
    let mut gloo_rows: Vec<GlooRow> = Vec::new();
    let mut failed = false;
    for &n in &opts.worlds {
        match &opts.rig {
            None => {
                let (rs, ok) = run_world(n, &opts, None);
                rows.extend(rs);
                failed |= !ok;
                if opts.gloo {
                    gloo_rows.extend(gloo_world(n, &opts, None));
                }
            }
            Some(spec) => {
                let rig = Rig::up(n, spec).unwrap_or_else(|e| {
                    eprintln!("alltoall --rig: {e}");
                    std::process::exit(1)
                });
                for &k in &rails_used {
                    let (rs, ok) = run_world(n, &opts, Some((&rig, k)));
                    rows.extend(rs);
                    failed |= !ok;
                }
                if opts.gloo {
                    gloo_rows.extend(gloo_world(n, &opts, Some(&rig)));
                }
                drop(rig);
            }
        }
    }
    print_results(&opts, &rows, &gloo_rows, &rig_rates);
    print_targets(&opts, &rows, &gloo_rows, all_rails);
    println!("total bench time {:.0} s", started.elapsed().as_secs_f64());
    if failed {
        println!("FAILED: a world's workers did not all finish (see their messages above)");
        std::process::exit(1);
    }
}

fn sndbuf(opts: &Opts) -> String {
    opts.sndbuf.map_or("autotuned".to_string(), |b| plexus_bench::size(b as u64))
}

/// tc's rate syntax ("2gbit", "500mbit", "100kbit", "1000bit", an optional ":delay" ignored)
/// in bits per second; NaN if unreadable.
fn rate_bits(spec: &str) -> f64 {
    let r = spec.split(':').next().unwrap_or("").trim().to_ascii_lowercase();
    for (suffix, scale) in [("gbit", 1e9), ("mbit", 1e6), ("kbit", 1e3), ("bit", 1.0)] {
        if let Some(v) = r.strip_suffix(suffix) {
            return v.parse::<f64>().map_or(f64::NAN, |v| v * scale);
        }
    }
    f64::NAN
}

/// Each table's shape and each schedule's steps and cost, before anything runs.
fn print_tables(opts: &Opts) {
    println!();
    println!(
        "tables (MiB crossing the network; busiest = the most one rank sends or receives) and schedules (steps; model = shift's Σ over steps of the largest message ÷ this one's; and this one's ÷ busiest, which no exchange on one link per rank can beat, steps or not):"
    );
    for &n in &opts.worlds {
        for &mib in &opts.sizes {
            for &t in &opts.tables {
                let c = Case::new(t, n, (mib * MIB) as u64, opts);
                let shift = Schedule::build(ScheduleKind::Shift, &c.table).cost(&c.table);
                let mut line = format!(
                    "  N={n} {mib:>4} MiB {:>12}: {:7.2} MiB, busiest {:6.2} MiB (mean {:6.2}), largest message {:6.2} MiB, Δ = {};",
                    t.name(),
                    c.network_bytes() as f64 / MIB as f64,
                    c.busiest_rank() as f64 / MIB as f64,
                    c.network_bytes() as f64 / n as f64 / MIB as f64,
                    c.table.demands().iter().map(|d| d.2).max().unwrap_or(0) as f64 / MIB as f64,
                    c.table.max_degree(),
                );
                for (s, sch) in c.schedules.iter().filter(|s| s.0 != Sched::Direct) {
                    let cost = sch.cost(&c.table).max(1) as f64;
                    line.push_str(&format!(
                        " {} {} steps {:.2}× ({:.2} busiest),",
                        s.name(),
                        sch.len(),
                        shift as f64 / cost,
                        cost / c.busiest_rank().max(1) as f64
                    ));
                }
                line.pop();
                println!("{line}");
            }
        }
    }
}

/// The machine's CPU time so far, (busy, total) in clock ticks, from /proc/stat.
fn cpu_ticks() -> (u64, u64) {
    let text = std::fs::read_to_string("/proc/stat").unwrap_or_default();
    let v: Vec<u64> =
        text.lines().next().unwrap_or("").split_whitespace().skip(1).filter_map(|x| x.parse().ok()).collect();
    let total: u64 = v.iter().sum();
    // idle and iowait are the 4th and 5th fields.
    let idle = v.get(3).copied().unwrap_or(0) + v.get(4).copied().unwrap_or(0);
    (total - idle, total)
}

fn loadavg() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .map(|s| s.split_whitespace().take(3).collect::<Vec<_>>().join(" "))
        .unwrap_or_else(|_| "?".into())
}

/// One of our measurements: (N, MiB, table, schedule, rails used) → median seconds.
struct Row {
    n: usize,
    mib: usize,
    table: TableKind,
    sched: Sched,
    /// On the rig, how many rails ours used; 0 on loopback.
    rails: usize,
    median: f64,
}

/// Gloo's `all_to_all_single` on one table.
struct GlooRow {
    n: usize,
    mib: usize,
    table: TableKind,
    median: f64,
    correct: bool,
}

/// Spawns `n` workers (on the rig, rank h in host h with its first `rails` rails), introduces
/// them, and collects rank 0's results; false if a worker failed. It says how busy the
/// machine's cores were meanwhile (whoever kept them busy): near 100 %, the exchanges were
/// bound by CPU, not by the links.
fn run_world(n: usize, opts: &Opts, rig: Option<(&Rig, usize)>) -> (Vec<Row>, bool) {
    let cpu0 = cpu_ticks();
    let key = plexus_bench::world::key(&opts.auth);
    let (children, mut readers) = plexus_bench::world::spawn(n, &opts.to_args(), key.as_deref(), rig);
    let rails = rig.map_or(0, |r| r.1);
    // A worker that fails (its exchange's abort could not reach a rank, or the network went
    // away) would leave the others waiting for it forever: the watchdog then ends them all, so
    // rank 0's stdout closes and the run goes on with what was measured.
    let children = Arc::new(std::sync::Mutex::new(children));
    let watchdog = {
        let children = children.clone();
        std::thread::spawn(move || {
            let mut ok = true;
            loop {
                let mut cs = children.lock().expect("children lock");
                let mut running = 0;
                for c in cs.iter_mut() {
                    match c.try_wait() {
                        Ok(Some(s)) => ok &= s.success(),
                        Ok(None) => running += 1,
                        Err(_) => ok = false,
                    }
                }
                if running == 0 {
                    return ok;
                }
                if !ok {
                    for c in cs.iter_mut() {
                        let _ = c.kill();
                        let _ = c.wait();
                    }
                    return false;
                }
                drop(cs);
                std::thread::sleep(Duration::from_millis(200));
            }
        })
    };
    let mut rows = Vec::new();
    for line in readers.swap_remove(0).lines() {
        let Ok(line) = line else { break };
        let f: Vec<&str> = line.split_whitespace().collect();
        if f.first() != Some(&"RESULT") || f.len() != 5 {
            continue;
        }
        let row = Row {
            n,
            mib: f[1].parse().expect("size"),
            table: f[2].parse().expect("table"),
            sched: f[3].parse().expect("schedule"),
            rails,
            median: f[4].parse().expect("median"),
        };
        eprintln!(
            "N={n} {} MiB {} {}{}: median {:.2} ms",
            row.mib,
            row.table.name(),
            row.sched.name(),
            if rails > 0 { format!(" ({rails} rails)") } else { String::new() },
            row.median * 1e3
        );
        rows.push(row);
    }
    let ok = watchdog.join().unwrap_or(false);
    if let Some((rig, _)) = rig
        && rig.hosts() > 1
        && !std::path::Path::new("/run/netns/plx-h1").exists()
    {
        println!(
            "N={n}: the rig's namespaces are gone: something else took the rig down during the run (another `rails-rig.sh up` or `down` on this machine)"
        );
    }
    let cpu1 = cpu_ticks();
    println!(
        "N={n}{}: the machine's cores were {:.0} % busy while the workers ran (load average now {})",
        if rails > 0 { format!(" on {rails} rails") } else { String::new() },
        100.0 * (cpu1.0 - cpu0.0) as f64 / (cpu1.1 - cpu0.1).max(1) as f64,
        loadavg()
    );
    (rows, ok)
}

/// Gloo's `all_to_all_single` on every table of world `n`: spawn mode on loopback, or one
/// process per rank on rail 0 of the rig.
fn gloo_world(n: usize, opts: &Opts, rig: Option<&Rig>) -> Vec<GlooRow> {
    let mut rows = Vec::new();
    for &mib in &opts.sizes {
        for &t in &opts.tables {
            let c = Case::new(t, n, (mib * MIB) as u64, opts);
            let path = std::env::temp_dir().join(format!(
                "plexus-alltoall-{}-{n}-{mib}-{}.json",
                std::process::id(),
                t.name()
            ));
            let rows_json: Vec<Vec<u64>> = (0..n).map(|i| c.table.row(i).to_vec()).collect();
            if let Err(e) = std::fs::write(&path, serde_json::to_string(&rows_json).expect("json")) {
                println!("gloo: cannot write {}: {e}", path.display());
                continue;
            }
            let job = gloo::Job {
                args: vec!["alltoall".into(), "--table".into(), path.to_string_lossy().into_owned()],
                env: vec![("WARMUP", WARMUP.to_string()), ("ITERS", opts.iters.to_string()), ("WORLDS", n.to_string())],
                timeout: GLOO_TIMEOUT,
            };
            eprintln!(
                "running Gloo all_to_all_single: N={n} {mib} MiB {} ({} {})",
                t.name(),
                gloo::python(),
                gloo::SCRIPT
            );
            let out = match rig {
                None => gloo::spawn_mode(&job),
                Some(rig) => gloo::on_rig(rig, &job),
            };
            let _ = std::fs::remove_file(&path);
            let got = out.and_then(|v| {
                let r = v.get(0).ok_or("no result row")?;
                let median = r["median_s"].as_f64().ok_or("no median_s")?;
                let total = r["total_bytes"].as_u64().ok_or("no total_bytes")?;
                if total != c.network_bytes() {
                    return Err(format!("Gloo exchanged {total} bytes, the table has {}", c.network_bytes()));
                }
                Ok(GlooRow { n, mib, table: t, median, correct: r["correct"].as_bool() == Some(true) })
            });
            match got {
                Ok(g) => {
                    eprintln!("Gloo N={n} {mib} MiB {}: median {:.2} ms", t.name(), g.median * 1e3);
                    rows.push(g)
                }
                Err(e) => println!("gloo: N={n} {mib} MiB {}: the anchor script did not run: {e}", t.name()),
            }
        }
    }
    rows
}

fn print_results(opts: &Opts, rows: &[Row], gloo_rows: &[GlooRow], rates: &[f64]) {
    let on_rig = !rates.is_empty();
    println!();
    println!(
        "{:>2} {:>8} {:>12} {:>6} {:>9} {:>5} {:>6} {:>10} {:>11} {:>11} {:>8}{}",
        "N",
        "size",
        "table",
        "rails",
        "schedule",
        "steps",
        "model",
        "median_ms",
        "algBW_GB/s",
        "shift÷this",
        "÷ gloo",
        if on_rig { format!(" {:>7}", "÷ link") } else { String::new() }
    );
    for &n in &opts.worlds {
        for &mib in &opts.sizes {
            for &t in &opts.tables {
                let c = Case::new(t, n, (mib * MIB) as u64, opts);
                let bytes = c.network_bytes() as f64;
                let shift_cost = Schedule::build(ScheduleKind::Shift, &c.table).cost(&c.table);
                let g = gloo_rows.iter().find(|g| g.n == n && g.mib == mib && g.table == t);
                // The wire's limit: the busiest rank's bytes at its link's rate.
                let link = |rate: f64| c.busiest_rank() as f64 / rate;
                for r in rows.iter().filter(|r| r.n == n && r.mib == mib && r.table == t) {
                    let Some((_, sch)) = c.schedules.iter().find(|s| s.0 == r.sched) else {
                        continue;
                    };
                    let shift = rows
                        .iter()
                        .find(|o| {
                            o.n == n
                                && o.mib == mib
                                && o.table == t
                                && o.rails == r.rails
                                && o.sched == Sched::Kind(ScheduleKind::Shift)
                        })
                        .map(|o| o.median);
                    println!(
                        "{:>2} {:>5}MiB {:>12} {:>6} {:>9} {:>5} {:>6} {:>10.2} {:>11.3} {:>11} {:>8}{}",
                        n,
                        mib,
                        t.name(),
                        if on_rig { r.rails.to_string() } else { "lo".into() },
                        r.sched.name(),
                        if r.sched == Sched::Direct { "1".into() } else { sch.len().to_string() },
                        if r.sched == Sched::Direct {
                            "n/a".into()
                        } else {
                            format!("{:.2}×", shift_cost as f64 / sch.cost(&c.table).max(1) as f64)
                        },
                        r.median * 1e3,
                        bytes / r.median / 1e9,
                        shift.map_or("n/a".into(), |s| format!("{:.2}×", s / r.median)),
                        g.map_or("n/a".into(), |g| format!("{:.2}×", g.median / r.median)),
                        if on_rig {
                            format!(" {:>7.2}", link(rates[..r.rails].iter().sum()) / r.median)
                        } else {
                            String::new()
                        }
                    );
                }
                if let Some(g) = g {
                    println!(
                        "{:>2} {:>5}MiB {:>12} {:>6} {:>9} {:>5} {:>6} {:>10.2} {:>11.3} {:>11} {:>8}{}",
                        n,
                        mib,
                        t.name(),
                        if on_rig { "rail 0" } else { "lo" },
                        "gloo",
                        "",
                        "",
                        g.median * 1e3,
                        bytes / g.median / 1e9,
                        "",
                        if g.correct { "" } else { "WRONG" },
                        if on_rig { format!(" {:>7.2}", link(rates[0]) / g.median) } else { String::new() }
                    );
                }
            }
        }
    }
}

/// The targets, each PASS or FAIL from the figures measured above.
fn print_targets(opts: &Opts, rows: &[Row], gloo_rows: &[GlooRow], all_rails: usize) {
    let on_rig = opts.rig.is_some();
    let find = |n: usize, mib: usize, t: TableKind, s: ScheduleKind| {
        rows.iter()
            .find(|r| r.n == n && r.mib == mib && r.table == t && r.rails == all_rails && r.sched == Sched::Kind(s))
            .map(|r| r.median)
    };
    let verdict = |ok: bool| if ok { "PASS" } else { "FAIL" };
    println!();
    println!(
        "targets of issue 15, from the medians above{}:",
        if on_rig { format!(" (ours on all {all_rails} rails)") } else { String::new() }
    );
    if opts.tables.contains(&TableKind::Skewed) {
        let (mut met, mut of) = (0, 0);
        println!(
            "  css ≥ {SKEW_TARGET}× faster than shift on skewed tables{}:",
            if on_rig { "" } else { " (the target is the rig's, where links are shared; on loopback no link is)" }
        );
        for &n in &opts.worlds {
            for &mib in &opts.sizes {
                if let (Some(shift), Some(css)) = (
                    find(n, mib, TableKind::Skewed, ScheduleKind::Shift),
                    find(n, mib, TableKind::Skewed, ScheduleKind::Css),
                ) {
                    let ok = shift / css >= SKEW_TARGET;
                    of += 1;
                    met += usize::from(ok);
                    println!(
                        "    N={n} {mib:>4} MiB: shift {:.2} ms ÷ css {:.2} ms = {:.2}× {}",
                        shift * 1e3,
                        css * 1e3,
                        shift / css,
                        verdict(ok)
                    );
                }
            }
        }
        println!("    met on {met} of {of}");
    }
    if !gloo_rows.is_empty() {
        let (mut met, mut of) = (0, 0);
        println!("  css ≥ Gloo's all_to_all_single on every table (Gloo time ÷ css time ≥ 1):");
        for g in gloo_rows {
            if let Some(css) = find(g.n, g.mib, g.table, ScheduleKind::Css) {
                let ok = g.median / css >= 1.0 && g.correct;
                of += 1;
                met += usize::from(ok);
                println!(
                    "    N={} {:>4} MiB {:>12}: Gloo {:.2} ms ÷ css {:.2} ms = {:.2}× {}{}",
                    g.n,
                    g.mib,
                    g.table.name(),
                    g.median * 1e3,
                    css * 1e3,
                    g.median / css,
                    verdict(ok),
                    if g.correct { "" } else { " (Gloo's result was wrong)" }
                );
            }
        }
        println!("    met on {met} of {of}");
    }
}

/// One worker process: bind, learn the group, run every (size, table, schedule), report from
/// rank 0.
async fn worker(rank: usize, opts: Opts) -> Result<(), String> {
    let (ep, ranks) =
        plexus_bench::world::join(&opts.rails, opts.seg_max, opts.sndbuf, opts.rail_key.as_deref()).await?;
    let n = ranks.len();
    // The exchanges use tags from 0, the barriers and the time reductions the next span, the
    // `direct` exchanges the one after (a tag per call).
    let x = Exchanger::new(ep.clone(), ranks.clone(), rank, 0).map_err(|e| e.to_string())?;
    // The same group with overlapped steps, in its own tag span.
    let xo = Exchanger::new(ep.clone(), ranks.clone(), rank, 3 << 56).map_err(|e| e.to_string())?.with_overlap(true);
    let comm = Communicator::new(ep.clone(), ranks.clone(), rank, 1 << 56, CollectiveConfig::default())
        .map_err(|e| e.to_string())?;
    let mut direct_tag = 2u64 << 56;
    let mut wrong = 0i32;
    for &mib in &opts.sizes {
        for &t in &opts.tables {
            let c = Case::new(t, n, (mib * MIB) as u64, &opts);
            let sends: Vec<Bytes> = (0..n).map(|j| fill(rank, j, c.table.get(rank, j) as usize)).collect();
            let mut times = vec![Vec::new(); c.schedules.len()];
            for it in 0..WARMUP + opts.iters {
                for (k, (s, schedule)) in c.schedules.iter().enumerate() {
                    barrier(&comm, wrong).await?;
                    let t0 = Instant::now();
                    let got = match s {
                        Sched::Kind(kind) => x.alltoallv(&c.table, sends.clone(), *kind).await,
                        Sched::CssOverlap => xo.alltoallv(&c.table, sends.clone(), ScheduleKind::Css).await,
                        Sched::Alg1 | Sched::Alg2 => x.alltoallv_with(&c.table, schedule, sends.clone()).await,
                        Sched::Direct => {
                            direct_tag += 1;
                            direct(&ep, &ranks, rank, &c.table, &sends, direct_tag).await
                        }
                    }
                    .map_err(|e| format!("{mib} MiB {} {}: {e}", t.name(), s.name()))?;
                    let dt = t0.elapsed().as_secs_f64();
                    if it >= WARMUP {
                        times[k].push(dt);
                    }
                    if let Err(e) = verify(rank, &c.table, &got) {
                        eprintln!("alltoall worker {rank}: {mib} MiB {} {} iteration {it}: {e}", t.name(), s.name());
                        wrong += 1;
                    }
                }
            }
            barrier(&comm, wrong).await?;
            for (k, (s, _)) in c.schedules.iter().enumerate() {
                // The slowest rank per iteration, as the Gloo script reports.
                let mut ts = std::mem::take(&mut times[k]);
                comm.allreduce_typed(&mut ts, ReduceOp::Max).await.map_err(|e| e.to_string())?;
                if rank == 0 {
                    let median = plexus_bench::median(&ts).expect("--iters is at least 1");
                    println!("RESULT {mib} {} {} {median}", t.name(), s.name());
                }
            }
        }
    }
    // Let the last acknowledgements go out before the process exits.
    tokio::time::sleep(Duration::from_millis(200)).await;
    Ok(())
}

/// The `direct` exchange: every send started at once, then every receive taken (the
/// endpoint's connection readers take in every message meanwhile, each into its own buffer);
/// done when all are received and every send acknowledged.
async fn direct(
    ep: &Arc<Endpoint>,
    ranks: &[Vec<SocketAddr>],
    me: usize,
    table: &ComTable,
    sends: &[Bytes],
    tag: u64,
) -> plexus_dataplane::Result<Vec<Bytes>> {
    let n = ranks.len();
    let mut sending = tokio::task::JoinSet::new();
    for j in (0..n).filter(|&j| j != me && table.get(me, j) > 0) {
        let (ep, addrs, data) = (ep.clone(), ranks[j].clone(), sends[j].clone());
        sending.spawn(async move { ep.send(&addrs, tag, data).await });
    }
    let mut got = Vec::with_capacity(n);
    for (j, addrs) in ranks.iter().enumerate() {
        got.push(if j == me {
            sends[me].clone()
        } else if table.get(j, me) > 0 {
            ep.recv(PeerId(addrs[0]), tag).await?.freeze()
        } else {
            Bytes::new()
        });
    }
    while let Some(r) = sending.join_next().await {
        r.map_err(|e| plexus_dataplane::Error::Peer(format!("send task: {e}")))??;
    }
    Ok(got)
}

/// Waits for every rank; fails on every rank if any has found wrong bytes so far.
async fn barrier(comm: &Communicator, wrong: i32) -> Result<(), String> {
    let mut b = [wrong];
    comm.allreduce_typed(&mut b, ReduceOp::Sum).await.map_err(|e| e.to_string())?;
    if b[0] > 0 {
        return Err(format!("{} received parts were wrong (see the ranks' messages)", b[0]));
    }
    Ok(())
}
