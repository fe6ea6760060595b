//! Several placers over the same workload, and the side-by-side table.
//!
//! Each [`Contender`] runs on its own [`EstimateMode`]. The coordinator's heuristics and the
//! learned placers see measured estimates (what a production coordinator can know: its own
//! estimator, fed as the run goes); `fastest-exact` is the coordinator's `fastest` on the
//! simulator's exact estimates, an oracle no production placer has, shown for how much the
//! estimates' errors cost. "vs best" and [`best_heuristic`] compare with the best heuristic on
//! measured estimates, never with an oracle.

use std::io::{self, Write};

use plexus_scheduler::placer::{HEURISTICS, Placer, heuristic};

use crate::SimError;
use crate::baseline::LocalityPlus;
use crate::config::{GIB, SimConfig};
use crate::engine::simulate_with;
use crate::estimates::EstimateMode;
use crate::report::Report;
use crate::workload::Workload;

/// A placer entered into a comparison under a display name.
pub struct Contender {
    pub name: String,
    pub placer: Box<dyn Placer>,
    /// A learning placer runs the warm-up workload first (with the same instance) and has its
    /// learning curve printed.
    pub learning: bool,
    /// Where its candidates' estimates come from.
    pub estimates: EstimateMode,
}

/// The row of the coordinator's `fastest` on the simulator's exact estimates.
pub const FASTEST_EXACT: &str = "fastest-exact";

impl Contender {
    /// The coordinator heuristic `name`, seeded with `seed`, on measured estimates.
    pub fn heuristic(name: &str, seed: u64) -> Option<Self> {
        Some(Contender {
            name: name.to_string(),
            placer: heuristic(name, seed)?,
            learning: false,
            estimates: EstimateMode::Measured,
        })
    }

    /// Every heuristic of [`HEURISTICS`], in that order, on measured estimates (only `fastest`
    /// reads them).
    pub fn heuristics(seed: u64) -> Vec<Self> {
        HEURISTICS.iter().filter_map(|n| Self::heuristic(n, seed)).collect()
    }

    /// Every coordinator heuristic, then the simulator's [`LocalityPlus`], then
    /// [`FASTEST_EXACT`]: the coordinator's `fastest` on exact estimates (the oracle; it decides
    /// as the simulator's [`crate::baseline::Fastest`] does). The baselines a learned placer is
    /// measured against.
    pub fn baselines(seed: u64) -> Vec<Self> {
        let mut v = Self::heuristics(seed);
        v.push(Contender {
            name: LocalityPlus::NAME.to_string(),
            placer: Box::new(LocalityPlus),
            learning: false,
            estimates: EstimateMode::Measured,
        });
        let fastest = heuristic("fastest", seed).expect("the coordinator has a fastest heuristic");
        v.push(Contender {
            name: FASTEST_EXACT.to_string(),
            placer: fastest,
            learning: false,
            estimates: EstimateMode::Exact,
        });
        v
    }

    /// A learning placer, on measured estimates (what it would see in production).
    pub fn learning(name: impl Into<String>, placer: Box<dyn Placer>) -> Self {
        Contender { name: name.into(), placer, learning: true, estimates: EstimateMode::Measured }
    }

    /// The same contender on `mode`'s estimates.
    pub fn on(self, mode: EstimateMode) -> Self {
        Contender { estimates: mode, ..self }
    }
}

/// One contender's result.
pub struct Run {
    pub name: String,
    pub learning: bool,
    pub estimates: EstimateMode,
    /// The warm-up run, for learning contenders when a warm-up workload was given.
    pub warmup: Option<Report>,
    pub report: Report,
    /// A learning placer's counters after the measured run (warm-up included): its record
    /// against its anchor among them.
    pub learned: Option<plexus_scheduler::placer::LearningStats>,
}

/// Runs every contender on `workload`, each from a fresh cluster, on its own estimates.
/// Learning contenders first run `warmup` (online: the same placer instance keeps what it
/// learned), with decision ids that continue into the measured run. Measured estimates start
/// empty in every run, the warm-up's and the measured one's alike, so a learner knows no more of
/// the cluster's speeds than a heuristic on the same run.
pub fn run_all(
    config: &SimConfig,
    workload: &Workload,
    warmup: Option<&Workload>,
    contenders: Vec<Contender>,
) -> Result<Vec<Run>, SimError> {
    let mut runs = Vec::with_capacity(contenders.len());
    for mut c in contenders {
        let mut first = 0;
        let mut warm = None;
        if let (true, Some(w)) = (c.learning, warmup) {
            let r = simulate_with(config, w, c.placer.as_mut(), 0, c.estimates)?;
            first = r.first_decision + r.placements;
            warm = Some(r);
        }
        let report = simulate_with(config, workload, c.placer.as_mut(), first, c.estimates)?;
        let learned = c.placer.learning();
        runs.push(Run { name: c.name, learning: c.learning, estimates: c.estimates, warmup: warm, report, learned });
    }
    Ok(runs)
}

/// The run with the lowest mean response among the non-learning ones on measured estimates (the
/// best a production heuristic did; the exact-estimate oracle is left out).
pub fn best_heuristic(runs: &[Run]) -> Option<&Run> {
    runs.iter()
        .filter(|r| !r.learning && r.estimates == EstimateMode::Measured)
        .min_by(|a, b| a.report.mean_response_ms().total_cmp(&b.report.mean_response_ms()))
}

/// Prints one row per run: task wait, task response (mean, p95), job response, utilisation of
/// cores, GPUs and fast memory, the share of input bytes found in fast memory, total fetch
/// time, evicted bytes, and mean response relative to the best heuristic on measured estimates
/// ([`best_heuristic`]; an oracle on exact estimates may be below 1). Then, for learning runs,
/// the learning curve.
pub fn print_table(out: &mut dyn Write, title: &str, runs: &[Run]) -> io::Result<()> {
    writeln!(out, "{title}")?;
    writeln!(
        out,
        "  {:<16} {:>8} {:>8} {:>8} {:>8} {:>5} {:>5} {:>5} {:>6} {:>5} {:>8} {:>9} {:>7}",
        "placer",
        "wait ms",
        "resp ms",
        "p95 ms",
        "job ms",
        "cpu%",
        "busy%",
        "gpu%",
        "cache%",
        "hit%",
        "fetch s",
        "evict GiB",
        "vs best"
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
    let curve =
        |r: &Report| r.windows.iter().map(|w| format!("{:.0}", w.mean_response_ms)).collect::<Vec<_>>().join(" ");
    for run in runs.iter().filter(|r| r.learning) {
        let per = run
            .report
            .windows
            .first()
            .or(run.warmup.as_ref().and_then(|w| w.windows.first()))
            .map(|w| w.tasks)
            .unwrap_or(0);
        writeln!(out, "  learning curve of {} (mean response ms per {per} completed tasks):", run.name)?;
        if let Some(w) = &run.warmup {
            writeln!(out, "    warm-up:  {}", curve(w))?;
        }
        writeln!(out, "    measured: {}", curve(&run.report))?;
        if let Some(b) = best_heuristic(runs) {
            writeln!(out, "    {} on the measured workload, for reference: {}", b.name, curve(&b.report))?;
        }
        if let Some(a) = run.learned.as_ref().and_then(|l| l.anchor.as_ref()) {
            writeln!(out, "    against its anchor (warm-up and measured): {}", anchor_line(a))?;
        }
    }
    Ok(())
}

/// An anchored learner's record in one line: how often it departed, explored, what the judged
/// departures gained against the anchor's estimates, and the guard's fall-backs.
pub fn anchor_line(a: &plexus_scheduler::placer::AnchorStats) -> String {
    let pct = |n: u64| if a.decisions == 0 { 0.0 } else { n as f64 * 100.0 / a.decisions as f64 };
    let gain = if a.anchor_ms > 0.0 { a.gain_ms * 100.0 / a.anchor_ms } else { 0.0 };
    format!(
        "departed in {} of {} decisions ({:.1} %), explored {} ({:.1} %), probed {}, kept {} proposals as controls, {} departures \
         judged gaining {:+.0} ms ({gain:+.1} % of fastest's estimates), guard fall-backs {}",
        a.departures,
        a.decisions,
        pct(a.departures),
        a.explored,
        pct(a.explored),
        a.probes,
        a.withheld,
        a.judged,
        a.gain_ms,
        a.fallbacks
    )
}

/// A few lines describing the cluster and workload, for the top of a benchmark's output.
pub fn describe(config: &SimConfig, workload: &Workload) -> String {
    let c = &config.cluster;
    let t = &c.tiers;
    let classes: Vec<String> = c
        .classes
        .iter()
        .map(|k| {
            let gpus =
                if k.gpus > 0 { format!(", {} GPUs @ {} TFLOP/s", k.gpus, k.gpu_flops / 1e12) } else { String::new() };
            format!(
                "{}×{} ({} cores @ {} GFLOP/s{gpus}, {} GiB fast memory)",
                k.weight,
                k.name,
                k.cores,
                k.core_flops / 1e9,
                k.cache_bytes / GIB
            )
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
    ) + &config.hidden.describe()
}
