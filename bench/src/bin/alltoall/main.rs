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
//! (a hash of sender, receiver and offset), after a barrier that every rank reaches only once its
//! exchange is over (so no rank's check takes CPU from another's timed exchange); a wrong part
//! fails the run on every rank.
//! Schedules take turns within each iteration, so a change of load on this shared machine
//! falls on all of them alike.
//!
//! Flags: `--worlds 4,8` `--sizes 64,256` (MiB crossing the network) `--tables
//! uniform,skewed,block-cyclic` `--schedules shift,pairwise,css,alg1,alg2,direct` `--iters 5` (timed,
//! after 2 warm-up) `--zipf 1.2` `--seed 4` `--no-gloo` `--rig SPEC` (e.g. `2gbit,500mbit`, as
//! root) `--rails-used 1,2` (on the rig: ours on the first k rails, each k in turn; default
//! every rail) `--auth open|key` (rails without / with the rail handshake; default `key`)
//! `--seg-max 1` (MiB, fractions allowed) `--sndbuf KiB` (SO_SNDBUF of the rail connections;
//! default: the kernel's autotuning) `--loopback-sizes 1,4,16,64` (with `--rig`: afterwards, on
//! loopback, uniform tables of these MiB, `auto` against Gloo) `--loopback-worlds 4,8`.
//! `auto-sched` is `auto` with each message striped by the endpoint's rail scheduler instead of
//! by both ends' rail shares (what the receiver-aware shares change).
//!
//! Issue 30's run, in one invocation (as root; the rig's namespaces are fixed names, so no
//! other rig may be up meanwhile):
//! `alltoall --rig 2gbit,500mbit --worlds 4,8 --sizes 64 --schedules auto,auto-sched,css,shift
//! --rails-used 2,1 --loopback-sizes 1,4,16,64` — its last two tables are the issue's, with
//! PASS/FAIL per target.
//! The defaults took 4 minutes on loopback and 6 on a `2gbit,500mbit` rig on a 2-core machine
//! (Gloo's Python start-up, about 10 s per table, included); `--iters 20` gives steadier
//! medians at about three times the cost, `--rails-used 1,2` shows what striping adds.
//!
//! Workers learn each other's addresses through the parent: each prints `ADDRS <a>,<b>` on
//! stdout, the parent writes every rank's list back on their stdin, one line.
//!
//! # Layout
//! * `args`: the flags, the tables and schedules they name, and the flags a worker is given.
//! * `table`: the tables, the schedules built for them, and the fill every byte is checked against.
//! * `runs`: the parent's runs of one world: our worker processes, then Gloo's anchor.
//! * `worker`: one rank's process: every exchange timed and checked.
//! * `report`: the tables' shapes before the runs, the results table and the targets.
//! * `headline`: issue 30's tables — the defaults against one rail and Gloo on the rig, and
//!   against Gloo on loopback by size — with their targets.

mod args;
mod headline;
mod report;
mod runs;
mod table;
mod worker;

use std::time::{Duration, Instant};

use plexus_dataplane::rig::Rig;

use args::Opts;
use report::{print_results, print_tables, print_targets};
use runs::{GlooRow, Row, gloo_world, loadavg, run_world};
use worker::worker;

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
    let rig_rates = print_header(&opts);
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
    let lo = opts.loopback();
    let (lo_rows, lo_gloo, lo_ok) = loopback_part(&opts, &lo);
    failed |= !lo_ok;
    print_results(&opts, &rows, &gloo_rows, &rig_rates);
    print_targets(&opts, &rows, &gloo_rows, all_rails);
    if opts.rig.is_some() {
        headline::print_rig(&opts, &rows, &gloo_rows, all_rails);
    } else if opts.tables.contains(&args::TableKind::Uniform) && opts.schedules.contains(&args::Sched::Auto) {
        headline::print_loopback(&opts, &rows, &gloo_rows);
    }
    if !lo_rows.is_empty() {
        headline::print_loopback(&lo, &lo_rows, &lo_gloo);
    }
    println!("total bench time {:.0} s", started.elapsed().as_secs_f64());
    if failed {
        println!("FAILED: a world's workers did not all finish (see their messages above)");
        std::process::exit(1);
    }
}

/// Prints what the run is and the machine it runs on; returns the rig's rail rates (bytes/s; empty
/// on loopback). Exits on a rig that cannot run here or rates it cannot read.
fn print_header(opts: &Opts) -> Vec<f64> {
    let rig_rates: Vec<f64> =
        opts.rig.as_deref().map_or_else(Vec::new, |spec| spec.split(',').map(|r| rate_bits(r) / 8.0).collect());
    match &opts.rig {
        None => println!(
            "Plexus all-to-all on loopback, N worker processes (seed {}; Zipf s = {}; seg_max {} MiB, socket send buffer {}; {} iterations after {WARMUP} warm-up, schedules taking turns; median of the slowest rank; every byte checked)",
            opts.seed,
            opts.zipf,
            opts.seg_max as f64 / MIB as f64,
            sndbuf(opts),
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
                sndbuf(opts),
                opts.iters
            )
        }
    }
    println!(
        "machine: {} cores, load average {}",
        std::thread::available_parallelism().map_or(0, |n| n.get()),
        loadavg()
    );
    rig_rates
}

/// Issue 30's loopback part of a rig run (no rails to stripe, ours against Gloo by size): its
/// rows, Gloo's, and whether every world finished.
fn loopback_part(opts: &Opts, lo: &Opts) -> (Vec<Row>, Vec<GlooRow>, bool) {
    let (mut lo_rows, mut lo_gloo, mut ok) = (Vec::new(), Vec::new(), true);
    if opts.rig.is_some() && !lo.sizes.is_empty() {
        println!();
        println!("loopback part: worlds {:?}, sizes {:?} MiB, uniform, auto", lo.worlds, lo.sizes);
        for &n in &lo.worlds {
            let (rs, done) = run_world(n, lo, None);
            lo_rows.extend(rs);
            ok &= done;
            if lo.gloo {
                lo_gloo.extend(gloo_world(n, lo, None));
            }
        }
    }
    (lo_rows, lo_gloo, ok)
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
