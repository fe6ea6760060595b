//! Gang benchmark (issue 14): the scheduling core's gangs ("ours": the real `Core` driven in
//! simulated time) against a naive scheduler (members placed one by one as room appears, no
//! reservation) and strict FIFO (the head starts whole before anything behind it), on the
//! same seeded workloads of training-like gangs (2–16 members of 1–8 cores) and many small
//! one-core tasks, for several cluster sizes and loads × seeds. Then the targets,
//! PASS or FAIL per workload, and what the simulator cost.
//!
//! `cargo run --release -p plexus-bench --bin gangs [-- --seeds N --configs 16:0.7,16:0.9,64:0.9
//! --window S --timeout-ms MS --placer NAME --every-round true]`. A configuration is
//! `workers:load` (8-core workers; load = offered core-seconds ÷ the cluster's over the arrival
//! window). All figures are simulated time and identical from run to run; only the cost lines
//! at the end are wall-clock.

use std::error::Error;
use std::io::Write;
use std::time::Duration;

use plexus_sim::gangs::{self, Comparison, GangConfig, GangWorkload, Options};

#[derive(Debug, clap::Parser)]
#[command(
    name = "gangs",
    about = "Gangs in simulated time: the scheduling core against a naive scheduler and strict FIFO"
)]
struct Args {
    /// Seeds per configuration.
    #[arg(long, default_value_t = 3, value_parser = clap::value_parser!(u64).range(1..))]
    seeds: u64,
    /// Configurations, `workers:load` comma-separated.
    #[arg(long, value_delimiter = ',', value_parser = parse_config, default_value = "16:0.7,16:0.9,64:0.9")]
    configs: Vec<(u32, f64)>,
    /// The workload's arrival window, seconds (default: the simulator's).
    #[arg(long = "window")]
    window_s: Option<u64>,
    /// The gang reservation timeout, ms (default: the simulator's).
    #[arg(long = "timeout-ms")]
    timeout_ms: Option<u64>,
    /// The placer under the gangs.
    #[arg(long, default_value = "least-loaded", value_parser = clap::builder::PossibleValuesParser::new(plexus_sim::placer::HEURISTICS))]
    placer: String,
    /// Check the invariants after every scheduling round (`true`/`false`).
    #[arg(long = "every-round", default_value_t = false, action = clap::ArgAction::Set)]
    every_round: bool,
}

/// One `workers:load` configuration.
fn parse_config(c: &str) -> Result<(u32, f64), String> {
    let (w, l) = c.split_once(':').ok_or_else(|| format!("{c}: expected workers:load"))?;
    Ok((w.parse().map_err(|e| format!("{c}: {e}"))?, l.parse().map_err(|e| format!("{c}: {e}"))?))
}

fn main() -> Result<(), Box<dyn Error>> {
    let args = <Args as clap::Parser>::parse();
    // The placer is one of the simulator's names, checked by the parser.
    let placer = plexus_sim::placer::HEURISTICS.iter().copied().find(|h| *h == args.placer).unwrap_or("least-loaded");
    let opts = Options { every_round: args.every_round, placer, ..Options::default() };
    let out = &mut std::io::stdout().lock();
    let mut failed = Vec::new();
    let mut costs = Vec::new();
    for &(workers, load) in &args.configs {
        costs.push(run_config(out, &args, &opts, (workers, load), &mut failed)?);
    }
    writeln!(
        out,
        "\nnaive stops at its first deadlock: its waits count the items started by then, its utilisation the run up to then.\n\
         util% = work done (cores × time of items with all members running) ÷ (cores × makespan); held% counts every started \
         member's cores; resv% = cores set aside by ours' gang reservations, idle."
    )?;
    writeln!(out, "\nsimulator cost (wall clock, this machine):")?;
    for c in &costs {
        writeln!(out, "  {c}")?;
    }
    if failed.is_empty() {
        writeln!(out, "\nevery target met on every workload")?;
    } else {
        writeln!(out, "\ntargets not all met on: {}", failed.join(", "))?;
    }
    Ok(())
}

/// One `workers:load` configuration over every seed: its workloads, each seed's comparison
/// (a workload that misses a target goes into `failed`), the means; returns its cost line.
fn run_config(
    out: &mut impl Write,
    args: &Args,
    opts: &Options,
    (workers, load): (u32, f64),
    failed: &mut Vec<String>,
) -> Result<String, Box<dyn Error>> {
    let mut config = GangConfig::new(workers, load);
    if let Some(w) = args.window_s {
        config.window_s = w;
    }
    if let Some(t) = args.timeout_ms {
        config.gang_timeout_ms = t;
    }
    writeln!(
        out,
        "\n== {workers} workers × {} cores, load {load}: arrivals over {} s; gangs of {}–{} members × {:?} cores for {}–{} s ({:.0}% of the work), gang_timeout {} ms; small tasks 1 core for {}–{} s; placer {}",
        config.cores,
        config.window_s,
        config.members.0,
        config.members.1,
        config.member_cores,
        config.gang_s.0,
        config.gang_s.1,
        config.gang_share * 100.0,
        config.gang_timeout_ms,
        config.small_s.0,
        config.small_s.1,
        args.placer,
    )?;
    let mut runs: Vec<(GangWorkload, Comparison)> = Vec::new();
    for seed in 1..=args.seeds {
        let w = GangWorkload::generate(&config, seed)?;
        let c = gangs::compare(&w, opts)?;
        runs.push((w, c));
    }
    for (w, _) in &runs {
        writeln!(
            out,
            "seed {}: {} gangs, {} small tasks, offered load {:.2}",
            w.seed,
            w.gangs().count(),
            w.smalls().count(),
            w.offered_load()
        )?;
    }
    gangs::print_header(&mut *out)?;
    for (w, c) in &runs {
        if !gangs::print_comparison(&mut *out, &format!("{}", w.seed), w, c)? {
            failed.push(format!("{workers}:{load} seed {}", w.seed));
        }
    }
    print_means(out, &runs)?;
    let total = |k: usize| runs.iter().map(|(_, c)| c.wall[k]).sum::<Duration>();
    let items: usize = runs.iter().map(|(w, _)| w.items.len()).sum();
    let rounds = |k: usize| runs.iter().map(|(_, c)| [c.ours.rounds, c.naive.rounds, c.fifo.rounds][k]).sum::<u64>();
    Ok(format!(
        "{workers:>3} workers, load {load}: {items} items over {} seeds; ours {:.2} s ({} rounds), naive {:.2} s ({} rounds), strict-fifo {:.2} s ({} rounds)",
        runs.len(),
        total(0).as_secs_f64(),
        rounds(0),
        total(1).as_secs_f64(),
        rounds(1),
        total(2).as_secs_f64(),
        rounds(2),
    ))
}

/// Means over the seeds, one row per figure, one column per scheduler.
fn print_means(out: &mut impl Write, runs: &[(GangWorkload, Comparison)]) -> Result<(), Box<dyn Error>> {
    let mean = |f: &dyn Fn(&Comparison) -> [f64; 3]| -> [f64; 3] {
        let mut s = [0.0; 3];
        for (_, c) in runs {
            for (a, b) in s.iter_mut().zip(f(c)) {
                *a += b / runs.len() as f64;
            }
        }
        s
    };
    let gw = mean(&|c| [c.ours.mean_gang_wait_s(), c.naive.mean_gang_wait_s(), c.fifo.mean_gang_wait_s()]);
    let sw = mean(&|c| [c.ours.mean_small_wait_s(), c.naive.mean_small_wait_s(), c.fifo.mean_small_wait_s()]);
    let ut = mean(&|c| [c.ours.utilisation(), c.naive.utilisation(), c.fifo.utilisation()]);
    let ps = mean(&|c| [c.ours.partial_starts as f64, c.naive.partial_starts as f64, c.fifo.partial_starts as f64]);
    let dl = mean(&|c| [c.ours.deadlocks() as f64, c.naive.deadlocks() as f64, c.fifo.deadlocks() as f64]);
    writeln!(out, "mean over {} seeds: {:<14} {:>14} {:>14} {:>14}", runs.len(), "", "ours", "naive", "strict-fifo")?;
    for (name, v, scale, unit) in [
        ("partial starts", ps, 1.0, ""),
        ("deadlocks", dl, 1.0, ""),
        ("gang wait", gw, 1.0, " s"),
        ("small wait", sw, 1.0, " s"),
        ("utilisation", ut, 100.0, " %"),
    ] {
        writeln!(
            out,
            "{:>20} {name:<14} {:>12.2}{unit:2} {:>12.2}{unit:2} {:>12.2}{unit:2}",
            "",
            v[0] * scale,
            v[1] * scale,
            v[2] * scale
        )?;
    }
    Ok(())
}
