//! The tables printed at the end: per placer, against the targets, the learning curve, where
//! the maps went and what the coordinator learnt of the workers.

use std::collections::HashMap;
use std::time::Duration;

use plexus_bench::percentile;

use crate::args::Opts;
use crate::run::{Breakdown, PlacerRun};
use crate::stream::Plan;
use crate::{SHAPES, TARGET_VS_LEAST_LOADED, TARGET_VS_LOCALITY};

pub(crate) fn mean(v: &[u64]) -> Option<f64> {
    (!v.is_empty()).then(|| v.iter().sum::<u64>() as f64 / v.len() as f64)
}

/// Measured (post-warm-up) completion times, sorted.
pub(crate) fn measured(r: &PlacerRun, warmup: usize) -> Vec<u64> {
    let mut v: Vec<u64> = r.jobs.iter().skip(warmup).filter_map(|j| j.jct_ms).collect();
    v.sort_unstable();
    v
}

pub(crate) fn fmt(v: Option<f64>, digits: usize) -> String {
    v.map_or_else(|| "-".into(), |v| format!("{v:.digits$}"))
}

pub(crate) fn report(o: &Opts, runs: &[PlacerRun], rig_note: &str, plans: &[Plan], total: Duration) {
    let n = o.quotas.len();
    println!();
    println!(
        "placement-live: seed {}, {} worker processes offering {} cores each (every task asks for 1), CPU quotas {} % of a core",
        o.seed,
        n,
        o.slots,
        o.quotas.iter().map(|q| format!("{q:.0}")).collect::<Vec<_>>().join(" / ")
    );
    println!("  rails: {rig_note}");
    let counts = SHAPES.map(|s| plans.iter().filter(|p| p.shape == s).count());
    println!(
        "  stream: {} jobs ({} warm-up + {} measured), Poisson arrivals, mean gap {} ms, over {:.0} s; shapes (MB, maps, hash passes) {}",
        plans.len(),
        o.warmup,
        o.jobs,
        o.interval_ms,
        plans.last().map_or(0.0, |p| p.at.as_secs_f64()),
        SHAPES.iter().zip(counts).map(|(s, c)| format!("{s:?} x{c}")).collect::<Vec<_>>().join(", ")
    );
    println!(
        "  job completion time (JCT) = coordinator's finished_at - submitted_at; mean and p95 over the measured jobs"
    );
    println!();
    let stats = print_jct(o, runs);
    print_ratios(&stats);
    print_learning_curve(o, runs, plans.len());
    print_breakdown(o, runs);
    print_map_placement(o, runs);
    print_learnt(runs);
    print_failures(runs);
    println!("whole run: {:.0} s", total.as_secs_f64());
    let _ = n;
}

/// The table per placer: measured jobs, failures, mean and p95 JCT, the warm-up's mean and the
/// wall time; returns each placer's (mean, p95) for the ratios.
fn print_jct<'a>(o: &Opts, runs: &'a [PlacerRun]) -> HashMap<&'a str, (Option<f64>, Option<f64>)> {
    println!(
        "{:<14} {:>6} {:>7} {:>10} {:>10} {:>14} {:>8}",
        "placer", "jobs", "failed", "mean_ms", "p95_ms", "warmup_mean_ms", "wall_s"
    );
    let mut stats: HashMap<&str, (Option<f64>, Option<f64>)> = HashMap::new();
    for r in runs {
        let m = measured(r, o.warmup);
        let failed = r.jobs.iter().filter(|j| j.jct_ms.is_none()).count();
        let warm: Vec<u64> = r.jobs.iter().take(o.warmup).filter_map(|j| j.jct_ms).collect();
        let (mn, p95) = (mean(&m), (!m.is_empty()).then(|| percentile(&m, 95.0) as f64));
        stats.insert(&r.placer, (mn, p95));
        println!(
            "{:<14} {:>6} {:>7} {:>10} {:>10} {:>14} {:>8.0}{}",
            r.placer,
            m.len(),
            failed,
            fmt(mn, 0),
            fmt(p95, 0),
            fmt(mean(&warm), 0),
            r.wall.as_secs_f64(),
            r.error.as_ref().map_or(String::new(), |e| format!("  ERROR: {}", e.lines().next().unwrap_or("")))
        );
    }
    stats
}

/// The ratios of `rl` and `fastest` against `least-loaded` and `locality`, each against its target.
fn print_ratios(stats: &HashMap<&str, (Option<f64>, Option<f64>)>) {
    println!();
    println!("{:<26} {:>8} {:>8} {:>8}  result (mean, p95)", "ratio", "mean", "p95", "target");
    for (a, b, target) in [
        ("rl", "least-loaded", TARGET_VS_LEAST_LOADED),
        ("fastest", "least-loaded", TARGET_VS_LEAST_LOADED),
        ("rl", "locality", TARGET_VS_LOCALITY),
        ("fastest", "locality", TARGET_VS_LOCALITY),
    ] {
        let (Some(sa), Some(sb)) = (stats.get(a), stats.get(b)) else { continue };
        let ratio = |x: Option<f64>, y: Option<f64>| Some(x? / y?);
        let (rm, rp) = (ratio(sa.0, sb.0), ratio(sa.1, sb.1));
        let verdict = |r: Option<f64>| r.map_or("-", |r| if r <= target { "PASS" } else { "FAIL" });
        println!(
            "{:<26} {:>8} {:>8} {:>8}  {}, {}",
            format!("{a} / {b}"),
            fmt(rm, 2),
            fmt(rp, 2),
            format!("<= {target:.2}"),
            verdict(rm),
            verdict(rp)
        );
    }
}

/// Mean JCT per block of `--block` jobs in submission order, warm-up included.
fn print_learning_curve(o: &Opts, runs: &[PlacerRun], total_jobs: usize) {
    println!();
    println!("learning curve: mean JCT (ms) per block of {} jobs in submission order (w = warm-up block)", o.block);
    print!("{:<10}", "jobs");
    for r in runs {
        print!(" {:>13}", r.placer);
    }
    println!();
    let mut b = 0;
    while b * o.block < total_jobs {
        let (lo, hi) = (b * o.block, ((b + 1) * o.block).min(total_jobs));
        let label = format!(
            "{}-{}{}",
            lo + 1,
            hi,
            if hi <= o.warmup {
                " w"
            } else if lo < o.warmup {
                " w/m"
            } else {
                ""
            }
        );
        print!("{label:<10}");
        for r in runs {
            let v: Vec<u64> = r.jobs[lo..hi].iter().filter_map(|j| j.jct_ms).collect();
            print!(" {:>13}", fmt(mean(&v), 0));
        }
        println!();
        b += 1;
    }
}

/// Where the time went in the measured jobs, stage by stage.
fn print_breakdown(o: &Opts, runs: &[PlacerRun]) {
    println!();
    println!(
        "where the time went (means over the measured jobs, ms): gen = ready -> done; map stage = gen done -> last map done;"
    );
    println!(
        "per map: wait = ready -> started less the fetch, fetch, run; reduce stage = last map done -> reduce done, of which fetch"
    );
    println!(
        "{:<14} {:>7} {:>10} {:>9} {:>10} {:>8} {:>13} {:>13}",
        "placer", "gen", "map_stage", "map_wait", "map_fetch", "map_run", "reduce_stage", "reduce_fetch"
    );
    for r in runs {
        let b: Vec<Breakdown> = r.breakdown.iter().skip(o.warmup).flatten().copied().collect();
        if b.is_empty() {
            continue;
        }
        let m = |f: &dyn Fn(&Breakdown) -> f64| b.iter().map(f).sum::<f64>() / b.len() as f64;
        println!(
            "{:<14} {:>7.0} {:>10.0} {:>9.0} {:>10.0} {:>8.0} {:>13.0} {:>13.0}",
            r.placer,
            m(&|x| x.produce as f64),
            m(&|x| x.map_stage as f64),
            m(&|x| x.map_wait),
            m(&|x| x.map_fetch),
            m(&|x| x.map_run),
            m(&|x| x.reduce_stage as f64),
            m(&|x| x.reduce_fetch as f64)
        );
    }
}

/// Each worker's share of the map subtasks, their mean run time, and the bytes fetched.
fn print_map_placement(o: &Opts, runs: &[PlacerRun]) {
    println!();
    println!("where the map subtasks ran: share of all maps (mean map run ms) per worker; fetched MB into each worker");
    print!("{:<14}", "placer");
    for (i, q) in o.quotas.iter().enumerate() {
        let rail = if !o.rig {
            String::new()
        } else if o.slow.contains(&i) {
            format!(",{}", o.slow_rate)
        } else {
            format!(",{}", o.fast_rate)
        };
        print!(" {:>22}", format!("w{i} ({q:.0}%{rail})"));
    }
    println!(" {:>10}", "fetched_MB");
    for r in runs {
        let maps: u32 = r.workers.iter().map(|w| w.maps).sum();
        print!("{:<14}", r.placer);
        for w in &r.workers {
            let share = if maps == 0 { 0.0 } else { 100.0 * w.maps as f64 / maps as f64 };
            let run = if w.maps == 0 { "-".to_string() } else { format!("{}", w.map_run_ms / w.maps as u64) };
            print!(" {:>22}", format!("{share:.0}% ({run} ms)"));
        }
        println!(" {:>10.0}", r.workers.iter().map(|w| w.fetched_bytes).sum::<u64>() as f64 / (1u64 << 20) as f64);
    }
}

/// What the coordinator learnt of each worker, and its cgroup's throttling.
fn print_learnt(runs: &[PlacerRun]) {
    println!();
    println!(
        "what the coordinator learnt by the end (relative_speed: cluster mean run time / the worker's, > 1 faster; fetch MB/s into it), and cgroup throttling"
    );
    for r in runs {
        print!("{:<14}", r.placer);
        for (i, w) in r.workers.iter().enumerate() {
            let thr = w.throttled.map_or("-".to_string(), |(_, ms)| format!("{:.0}s", ms / 1000.0));
            print!(
                "  w{i}: speed {} fetch {} thr {thr}",
                fmt((w.relative_speed > 0.0).then_some(w.relative_speed), 2),
                fmt((w.fetch_bytes_per_ms > 0.0).then(|| w.fetch_bytes_per_ms * 1000.0 / (1u64 << 20) as f64), 0)
            );
        }
        println!();
    }
}

/// The first failures and the run error of each placer.
fn print_failures(runs: &[PlacerRun]) {
    for r in runs {
        let failures: Vec<String> = r
            .jobs
            .iter()
            .enumerate()
            .filter_map(|(i, j)| j.failure.as_ref().map(|f| format!("job {}: {f}", i + 1)))
            .collect();
        if !failures.is_empty() {
            println!(
                "{} failures under {}: {}",
                failures.len(),
                r.placer,
                failures.iter().take(5).cloned().collect::<Vec<_>>().join("; ")
            );
        }
        if let Some(e) = &r.error {
            println!("{}: {e}", r.placer);
        }
    }
}
