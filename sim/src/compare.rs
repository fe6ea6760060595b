//! Several placers over the same workload, and the side-by-side table.

use std::io::{self, Write};

use plexus_scheduler::placer::{heuristic, Placer, HEURISTICS};

use crate::baseline::{Fastest, LocalityPlus};
use crate::config::{SimConfig, GIB};
use crate::engine::simulate_from;
use crate::report::Report;
use crate::workload::Workload;
use crate::SimError;

/// A placer entered into a comparison under a display name.
pub struct Contender {
    pub name: String,
    pub placer: Box<dyn Placer>,
    /// A learning placer runs the warm-up workload first (with the same instance) and has its
    /// learning curve printed.
    pub learning: bool,
}

impl Contender {
    /// The coordinator heuristic `name`, seeded with `seed`.
    pub fn heuristic(name: &str, seed: u64) -> Option<Self> {
        Some(Contender { name: name.to_string(), placer: heuristic(name, seed)?, learning: false })
    }

    /// Every heuristic of [`HEURISTICS`], in that order, but the coordinator's `fastest`: the
    /// simulator gives it its exact estimates, which makes it the simulator's own [`Fastest`]
    /// (in [`Contender::baselines`]); until the simulator feeds placers measured estimates
    /// (issue 17, item 4) it would be a second copy of that row.
    pub fn heuristics(seed: u64) -> Vec<Self> {
        HEURISTICS.iter().filter(|n| **n != Fastest::NAME).filter_map(|n| Self::heuristic(n, seed)).collect()
    }

    /// Every coordinator heuristic, then the simulator's [`LocalityPlus`] and [`Fastest`]: the
    /// baselines a learned placer is measured against.
    pub fn baselines(seed: u64) -> Vec<Self> {
        let mut v = Self::heuristics(seed);
        v.push(Contender { name: LocalityPlus::NAME.to_string(), placer: Box::new(LocalityPlus), learning: false });
        v.push(Contender { name: Fastest::NAME.to_string(), placer: Box::new(Fastest), learning: false });
        v
    }

    pub fn learning(name: impl Into<String>, placer: Box<dyn Placer>) -> Self {
        Contender { name: name.into(), placer, learning: true }
    }
}

/// One contender's result.
pub struct Run {
    pub name: String,
    pub learning: bool,
    /// The warm-up run, for learning contenders when a warm-up workload was given.
    pub warmup: Option<Report>,
    pub report: Report,
}

/// Runs every contender on `workload`, each from a fresh cluster. Learning contenders first run
/// `warmup` (online: the same placer instance keeps what it learned), with decision ids that
/// continue into the measured run.
pub fn run_all(config: &SimConfig, workload: &Workload, warmup: Option<&Workload>, contenders: Vec<Contender>) -> Result<Vec<Run>, SimError> {
    let mut runs = Vec::with_capacity(contenders.len());
    for mut c in contenders {
        let mut first = 0;
        let mut warm = None;
        if let (true, Some(w)) = (c.learning, warmup) {
            let r = simulate_from(config, w, c.placer.as_mut(), 0)?;
            first = r.first_decision + r.placements;
            warm = Some(r);
        }
        let report = simulate_from(config, workload, c.placer.as_mut(), first)?;
        runs.push(Run { name: c.name, learning: c.learning, warmup: warm, report });
    }
    Ok(runs)
}

/// The run with the lowest mean response among the non-learning ones.
pub fn best_heuristic(runs: &[Run]) -> Option<&Run> {
    runs.iter().filter(|r| !r.learning).min_by(|a, b| a.report.mean_response_ms().total_cmp(&b.report.mean_response_ms()))
}

/// Prints one row per run: task wait, task response (mean, p95), job response, utilisation of
/// cores, GPUs and fast memory, the share of input bytes found in fast memory, total fetch
/// time, evicted bytes, and mean response relative to the best heuristic. Then, for learning
/// runs, the learning curve.
pub fn print_table(out: &mut dyn Write, title: &str, runs: &[Run]) -> io::Result<()> {
    writeln!(out, "{title}")?;
    writeln!(
        out,
        "  {:<16} {:>8} {:>8} {:>8} {:>8} {:>5} {:>5} {:>5} {:>6} {:>5} {:>8} {:>9} {:>7}",
        "placer", "wait ms", "resp ms", "p95 ms", "job ms", "cpu%", "busy%", "gpu%", "cache%", "hit%", "fetch s", "evict GiB", "vs best"
    )?;
    let best = best_heuristic(runs).map(|r| r.report.mean_response_ms());
    for run in runs {
        let r = &run.report;
        let u = &r.utilisation;
        let vs = best.map(|b| format!("{:.2}", r.mean_response_ms() / b)).unwrap_or_default();
        writeln!(
            out,
            "  {:<16} {:>8.0} {:>8.0} {:>8.0} {:>8.0} {:>5.1} {:>5.1} {:>5.1} {:>6.1} {:>5.1} {:>8.0} {:>9.0} {:>7}",
            run.name,
            r.mean_wait_ms(),
            r.mean_response_ms(),
            r.p95_response_ms(),
            r.mean_job_response_ms(),
            u.cpu * 100.0,
            u.busy * 100.0,
            u.gpu * 100.0,
            u.cache * 100.0,
            r.hit_ratio() * 100.0,
            r.fetch_s(),
            r.evicted_bytes() as f64 / GIB as f64,
            vs,
        )?;
    }
    // Windows fill up as load builds and drains, so a learning curve is shown beside the best
    // baseline's windows on the same measured workload: compare them window by window.
    let curve = |r: &Report| r.windows.iter().map(|w| format!("{:.0}", w.mean_response_ms)).collect::<Vec<_>>().join(" ");
    for run in runs.iter().filter(|r| r.learning) {
        let per = run.report.windows.first().or(run.warmup.as_ref().and_then(|w| w.windows.first())).map(|w| w.tasks).unwrap_or(0);
        writeln!(out, "  learning curve of {} (mean response ms per {per} completed tasks):", run.name)?;
        if let Some(w) = &run.warmup {
            writeln!(out, "    warm-up:  {}", curve(w))?;
        }
        writeln!(out, "    measured: {}", curve(&run.report))?;
        if let Some(b) = best_heuristic(runs) {
            writeln!(out, "    {} on the measured workload, for reference: {}", b.name, curve(&b.report))?;
        }
    }
    Ok(())
}

/// A few lines describing the cluster and workload, for the top of a benchmark's output.
pub fn describe(config: &SimConfig, workload: &Workload) -> String {
    let c = &config.cluster;
    let t = &c.tiers;
    let classes: Vec<String> = c
        .classes
        .iter()
        .map(|k| {
            let gpus = if k.gpus > 0 { format!(", {} GPUs @ {} TFLOP/s", k.gpus, k.gpu_flops / 1e12) } else { String::new() };
            format!("{}×{} ({} cores @ {} GFLOP/s{gpus}, {} GiB fast memory)", k.weight, k.name, k.cores, k.core_flops / 1e9, k.cache_bytes / GIB)
        })
        .collect();
    let data_bytes: u64 = workload.objects.iter().map(|o| o.bytes).sum();
    let span_s = workload.jobs.iter().map(|j| j.arrival_us).max().unwrap_or(0) as f64 / 1e6;
    format!(
        "cluster: {} nodes in {} racks; every {} nodes: {}\n\
         tiers: fast memory 0; local slow {} µs + {:.1} GB/s; same rack {} µs + {:.2} GB/s; remote {} µs + {:.3} GB/s; eviction {:.1} GB/s\n\
         workload: {} jobs, {} tasks, {} objects ({:.0} GiB), arrivals over {:.0} s, offered load {:.0}%, data-heavy share {:.0}%",
        c.nodes,
        c.racks,
        c.classes.iter().map(|k| k.weight).sum::<u32>(),
        classes.join(", "),
        t.local.latency_us,
        t.local.bytes_per_s / 1e9,
        t.rack.latency_us,
        t.rack.bytes_per_s / 1e9,
        t.remote.latency_us,
        t.remote.bytes_per_s / 1e9,
        c.eviction_bytes_per_s / 1e9,
        workload.jobs.len(),
        workload.tasks(),
        workload.objects.len(),
        data_bytes as f64 / GIB as f64,
        span_s,
        config.workload.load * 100.0,
        config.workload.data_share * 100.0,
    )
}
