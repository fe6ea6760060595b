//! GPU group placement benchmark (issue 16): seed 002's interference MLP trained online on
//! measurements of the simulator's ground truth, then the GPU searches with it on simulated
//! clusters, then a simulated GPU training workload placed by those searches. Three tables, in
//! one run:
//!
//! - **(a) the interference model.** Co-locations as the searches meet them (a GPU of a
//!   simulated cluster, its resident tasks, and one to three members of training gangs) are
//!   measured with the ground truth's noise and fed to `InterferenceMlp::observe`, with
//!   `train_steps` every [`TRAIN_EVERY`] samples. Its MAPE against the (noise-free) truth on
//!   held-out pairs and triples drawn the same way from another seed, along the way and at the
//!   end, against the untrained MLP and the scheduler's analytic `ContentionModel`.
//! - **(b) the searches.** On clusters of 8, 32 and 128 GPUs (8-GPU nodes, racks of 4) with a
//!   share of the GPUs already busy, for gangs of 2–16 alike members that share GPUs: each
//!   search's objective with the trained MLP as its model, the same assignment re-scored under
//!   the ground truth (what a placement actually costs), its gap to the exhaustive optimum where
//!   that is computable, its gain over greedy, and its run time. Rows marked `*` searched with
//!   the ground truth itself (an oracle model), to separate the search's error from the model's.
//! - **(c) job completion times.** `plexus_sim::gpu::jct`: Poisson arrivals of gangs on a
//!   simulated cluster, each placed (strict FIFO) by a search, iterations timed by the ground
//!   truth's slowdowns and the topology's synchronisation cost.
//!
//! Then the targets, PASS or FAIL from the figures measured above.
//!
//! `cargo run --release -p plexus-bench --bin gpu-placement [-- --seeds N --sizes 8,32,128
//! --members 2,4,8,16 --busy 0.5,0.75 --samples N --steps-per-sample K --truth-seed S
//! --jct-gpus 64,128 --jct-loads 0.2,0.4,0.7 --jct-seeds N --jct-jobs N --jct-share F --jct-busy F]`.
//! Everything is seeded: the figures are the same from run to run, but for the wall-clock
//! columns (search times in milliseconds, training and simulation seconds).

use std::error::Error;
use std::io::Write;
use std::time::Instant;

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

use plexus_policy::{InterferenceConfig, InterferenceMlp, Predictor, Sample};
use plexus_scheduler::gpu::learner::ContentionModel;
use plexus_scheduler::gpu::objective::{Evaluator, Problem, Weights};
use plexus_scheduler::gpu::search::{self, Placement, SflaParams};
use plexus_scheduler::gpu::{InterferenceModel, TaskVector};
use plexus_sim::gpu::jct::{self, JctConfig, JctReport, JctWorkload, Placer, Search};
use plexus_sim::gpu::{GpuCluster, GpuClusterConfig, GroundTruth, Kind, gang};

/// Samples observed between two calls of `train_steps`: the online schedule of a coordinator
/// that trains when a batch of GPU runs has been reported, not after each.
const TRAIN_EVERY: usize = 50;
/// Held-out groups of each size.
const HELD_OUT: usize = 500;
/// The training data's clusters use seeds from here on, the held-out groups this seed: never
/// a seed the searches are measured on.
const TRAINING_SEED: u64 = 10_000;
const HELD_OUT_SEED: u64 = 20_000;
/// The targets.
const GAP_TARGET: f64 = 0.02;
const GAIN_TARGET: f64 = 0.10;
const TIME_TARGET_MS: f64 = 50.0;
const JCT_TARGET: f64 = 0.15;

#[derive(Debug, clap::Parser)]
#[command(
    name = "gpu-placement",
    about = "GPU placement: the interference model, the search against exhaustive, and job completion times"
)]
struct Args {
    /// Seeds of the placement comparison.
    #[arg(long, default_value_t = 10)]
    seeds: u64,
    /// Cluster sizes, GPUs, comma-separated; multiples of 8 (8-GPU nodes).
    #[arg(long, value_delimiter = ',', default_value = "8,32,128", value_parser = multiple_of_8)]
    sizes: Vec<usize>,
    /// Gang sizes, comma-separated; each at least 1.
    #[arg(long, value_delimiter = ',', default_value = "2,4,8,16", value_parser = at_least_one)]
    members: Vec<usize>,
    /// Busy fractions of the cluster, comma-separated, in [0, 1].
    #[arg(long, value_delimiter = ',', default_value = "0.5,0.75", value_parser = fraction)]
    busy: Vec<f64>,
    /// Samples the interference model is fitted on; at least 1.
    #[arg(long, default_value_t = 4_000, value_parser = at_least_one)]
    samples: usize,
    #[arg(long = "steps-per-sample", default_value_t = 4)]
    steps_per_sample: usize,
    /// The seed of the ground truth the model is fitted to.
    #[arg(long = "truth-seed", default_value_t = 1)]
    truth_seed: u64,
    /// Cluster sizes of the completion-time runs, GPUs, comma-separated; multiples of 8.
    #[arg(long = "jct-gpus", value_delimiter = ',', default_value = "64,128", value_parser = multiple_of_8)]
    jct_gpus: Vec<usize>,
    /// Offered loads of the completion-time runs, comma-separated.
    #[arg(long = "jct-loads", value_delimiter = ',', default_value = "0.2,0.4,0.7")]
    jct_loads: Vec<f64>,
    #[arg(long = "jct-seeds", default_value_t = 8)]
    jct_seeds: u64,
    #[arg(long = "jct-jobs", default_value_t = 300)]
    jct_jobs: usize,
    /// The share of gang jobs in the completion-time runs, in [0, 1].
    #[arg(long = "jct-share", default_value_t = 0.5, value_parser = fraction)]
    jct_share: f64,
    /// The busy fraction of the completion-time runs, in [0, 1].
    #[arg(long = "jct-busy", default_value_t = 0.5, value_parser = fraction)]
    jct_busy: f64,
}

fn multiple_of_8(v: &str) -> Result<usize, String> {
    match v.trim().parse::<usize>() {
        Ok(g) if g > 0 && g % 8 == 0 => Ok(g),
        Ok(g) => Err(format!("{g}: a multiple of 8 (8-GPU nodes)")),
        Err(e) => Err(format!("{v}: {e}")),
    }
}

fn at_least_one(v: &str) -> Result<usize, String> {
    match v.trim().parse::<usize>() {
        Ok(n) if n >= 1 => Ok(n),
        Ok(n) => Err(format!("{n}: at least 1")),
        Err(e) => Err(format!("{v}: {e}")),
    }
}

fn fraction(v: &str) -> Result<f64, String> {
    match v.trim().parse::<f64>() {
        Ok(f) if (0.0..=1.0).contains(&f) => Ok(f),
        Ok(f) => Err(format!("{f}: a fraction in [0, 1]")),
        Err(e) => Err(format!("{v}: {e}")),
    }
}

// ---------------------------------------------------------------------------------------------
// (a) The interference model.

/// A co-location as a search meets one: a GPU of one of `clusters` (not held exclusively) with
/// its resident tasks, and one to three members of training gangs (each after the first of the
/// same gang as the one before half the time, so two members of one gang share a GPU too), as
/// many as fit in its memory. Never empty.
fn colocation(clusters: &[GpuCluster], rng: &mut StdRng) -> Vec<TaskVector> {
    loop {
        let cluster = &clusters[rng.random_range(0..clusters.len())];
        let gpu = &cluster.gpus[rng.random_range(0..cluster.gpus.len())];
        if gpu.exclusive {
            continue;
        }
        let mut tasks = gpu.resident.clone();
        let mut free = gpu.free_memory();
        let mut last: Option<Kind> = None;
        for _ in 0..rng.random_range(1..=3) {
            let kind = match last {
                Some(k) if rng.random::<f64>() < 0.5 => k,
                _ => Kind::TRAINING[rng.random_range(0..Kind::TRAINING.len())],
            };
            let t = kind.task(gpu.device_memory);
            if t.gpu_memory > free {
                break;
            }
            free -= t.gpu_memory;
            tasks.push(t);
            last = Some(kind);
        }
        if !tasks.is_empty() {
            return tasks;
        }
    }
}

/// The clusters co-locations are drawn from: one of 128 GPUs per busy fraction.
fn training_clusters(args: &Args, seed: u64) -> Vec<GpuCluster> {
    args.busy
        .iter()
        .enumerate()
        .map(|(k, &busy)| {
            GpuCluster::generate(&GpuClusterConfig { busy, ..GpuClusterConfig::new(128) }, seed + k as u64)
        })
        .collect()
}

/// Mean absolute percentage error of `model` against the noise-free truth, every task of every
/// group counted once, as a fraction.
fn mape(model: &dyn InterferenceModel, groups: &[Vec<TaskVector>], truth: &GroundTruth) -> f64 {
    let (mut sum, mut n) = (0.0, 0usize);
    for g in groups {
        for (p, y) in model.predict(g).iter().zip(truth.predict(g)) {
            sum += (p - y).abs() / y;
            n += 1;
        }
    }
    if n == 0 { 0.0 } else { sum / n as f64 }
}

/// One noisy measurement per group, as a model: the error of the data the MLP learns from.
struct OneMeasurement<'a> {
    truth: &'a GroundTruth,
    rng: std::cell::RefCell<StdRng>,
}

impl InterferenceModel for OneMeasurement<'_> {
    fn predict(&self, tasks: &[TaskVector]) -> Vec<f64> {
        self.truth.measure(tasks, &mut *self.rng.borrow_mut())
    }
}

struct Trained {
    predictor: Predictor,
    /// MAPE on held-out pairs and triples (fractions), for the targets' summary.
    pairs: f64,
    triples: f64,
}

fn train(args: &Args, truth: &GroundTruth, out: &mut impl Write) -> Result<Trained, Box<dyn Error>> {
    let mut rng = StdRng::seed_from_u64(TRAINING_SEED);
    let clusters = training_clusters(args, TRAINING_SEED);
    let mut held = StdRng::seed_from_u64(HELD_OUT_SEED);
    let held_clusters = training_clusters(args, HELD_OUT_SEED);
    let (mut alone, mut pairs, mut triples, mut drawn) = (Vec::new(), Vec::new(), Vec::new(), Vec::new());
    while alone.len() < HELD_OUT || pairs.len() < HELD_OUT || triples.len() < HELD_OUT {
        let g = colocation(&held_clusters, &mut held);
        match g.len() {
            1 if alone.len() < HELD_OUT => alone.push(g),
            2 if pairs.len() < HELD_OUT => pairs.push(g),
            3 if triples.len() < HELD_OUT => triples.push(g),
            _ => {}
        }
        if drawn.len() < HELD_OUT {
            drawn.push(colocation(&held_clusters, &mut held));
        }
    }
    let mut mlp = InterferenceMlp::new(InterferenceConfig { seed: args.truth_seed, ..InterferenceConfig::default() })?;
    let untrained = mlp.predictor().clone();
    writeln!(
        out,
        "== (a) interference MLP trained online on {} measurements of the ground truth (seed {}, {:.0} % noise), {} steps per sample, \
         trained every {TRAIN_EVERY}; MAPE against the noise-free truth on {HELD_OUT} held-out single tasks / pairs / triples / groups as drawn (1–5 tasks)",
        args.samples,
        args.truth_seed,
        100.0 * truth.noise,
        args.steps_per_sample
    )?;
    writeln!(
        out,
        "{:>8} {:>7} {:>9} {:>9} {:>11} {:>10} {:>8}",
        "samples", "steps", "alone %", "pairs %", "triples %", "drawn %", "train s"
    )?;
    let row = |out: &mut dyn Write, mlp: &InterferenceMlp, secs: f64| -> std::io::Result<()> {
        let p = mlp.predictor();
        let m = |g: &[Vec<TaskVector>]| 100.0 * mape(p, g, truth);
        writeln!(
            out,
            "{:>8} {:>7} {:>9.2} {:>9.2} {:>11.2} {:>10.2} {:>8.1}",
            mlp.observed(),
            mlp.steps(),
            m(&alone),
            m(&pairs),
            m(&triples),
            m(&drawn),
            secs
        )
    };
    row(out, &mlp, 0.0)?;
    let started = Instant::now();
    let mut next = 250;
    let mut pending = 0;
    for k in 1..=args.samples {
        let tasks = colocation(&clusters, &mut rng);
        let slowdowns = truth.measure(&tasks, &mut rng);
        mlp.observe(Sample { tasks, slowdowns, weight: 1.0 })?;
        pending += 1;
        if pending == TRAIN_EVERY || k == args.samples {
            mlp.train_steps(pending * args.steps_per_sample)?;
            pending = 0;
        }
        if k == args.samples || (k == next && pending == 0) {
            row(out, &mlp, started.elapsed().as_secs_f64())?;
            next *= 2;
        }
    }
    let contention = ContentionModel::default();
    let noise = OneMeasurement { truth, rng: std::cell::RefCell::new(StdRng::seed_from_u64(HELD_OUT_SEED + 1)) };
    writeln!(
        out,
        "\n{:<48} {:>9} {:>9} {:>11} {:>10}",
        "model (MAPE vs the truth)", "alone %", "pairs %", "triples %", "drawn %"
    )?;
    let models: [(&str, &dyn InterferenceModel); 4] = [
        ("MLP, untrained", &untrained),
        ("ContentionModel (analytic, scheduler's fallback)", &contention),
        ("MLP, trained", mlp.predictor()),
        ("one measurement (the data's noise floor)", &noise),
    ];
    for (name, m) in models {
        let e = |g: &[Vec<TaskVector>]| 100.0 * mape(m, g, truth);
        writeln!(out, "{name:<48} {:>9.2} {:>9.2} {:>11.2} {:>10.2}", e(&alone), e(&pairs), e(&triples), e(&drawn))?;
    }
    let trained = mlp.predictor().clone();
    Ok(Trained { pairs: mape(&trained, &pairs, truth), triples: mape(&trained, &triples, truth), predictor: trained })
}

// ---------------------------------------------------------------------------------------------
// (b) The searches.

#[derive(Clone, Copy, PartialEq)]
enum Algo {
    Sfla,
    Greedy,
    Topology,
    Random,
    Exhaustive,
}

/// The searches compared; `oracle`: with the ground truth as the model instead of the MLP.
const CONTENDERS: [(&str, Algo, bool); 8] = [
    ("sfla", Algo::Sfla, false),
    ("greedy", Algo::Greedy, false),
    ("topology-greedy", Algo::Topology, false),
    ("random", Algo::Random, false),
    ("exhaustive", Algo::Exhaustive, false),
    ("sfla*", Algo::Sfla, true),
    ("greedy*", Algo::Greedy, true),
    ("exhaustive*", Algo::Exhaustive, true),
];

fn index(name: &str) -> usize {
    CONTENDERS.iter().position(|c| c.0 == name).expect("a contender")
}

fn run<M: InterferenceModel + ?Sized>(
    p: &Problem,
    model: &M,
    algo: Algo,
    seed: u64,
) -> (Result<Placement, plexus_scheduler::Error>, f64) {
    let mut eval = Evaluator::new(p, model);
    let started = Instant::now();
    let found = match algo {
        Algo::Sfla => search::sfla(&mut eval, &SflaParams::default(), seed),
        Algo::Greedy => search::greedy(&mut eval),
        Algo::Topology => search::topology_greedy(&mut eval),
        Algo::Random => search::random(&mut eval, seed),
        Algo::Exhaustive => search::exhaustive(&mut eval, search::EXHAUSTIVE_LIMIT),
    };
    (found, started.elapsed().as_secs_f64() * 1e3)
}

/// One contender's figures over the instances of one (busy, GPUs, gang size).
#[derive(Default, Clone)]
struct Acc {
    model: Vec<f64>,
    truth: Vec<f64>,
    gap_model: Vec<f64>,
    gap_truth: Vec<f64>,
    gain_model: Vec<f64>,
    gain_truth: Vec<f64>,
    ms: Vec<f64>,
}

fn mean(v: &[f64]) -> f64 {
    if v.is_empty() { f64::NAN } else { v.iter().sum::<f64>() / v.len() as f64 }
}

fn max(v: &[f64]) -> f64 {
    v.iter().copied().fold(f64::NAN, f64::max)
}

fn median(v: &[f64]) -> f64 {
    plexus_bench::median(v).unwrap_or(f64::NAN)
}

fn pct(v: &[f64]) -> String {
    if v.is_empty() { "-".into() } else { format!("{:.2}/{:.2}", 100.0 * mean(v), 100.0 * max(v)) }
}

/// Every instance's figures, kept for the targets: (busy, gpus, members) → per contender.
type Results = Vec<((f64, usize, usize), Vec<Acc>)>;

fn searches(
    args: &Args,
    truth: &GroundTruth,
    mlp: &Predictor,
    out: &mut impl Write,
) -> Result<Results, Box<dyn Error>> {
    let mut results = Results::new();
    for &busy in &args.busy {
        writeln!(
            out,
            "\n== (b) searches, {:.0} % of GPUs busy (1–2 resident tasks, half of them inference services; a fifth of the busy GPUs held exclusively), \
             gangs sharing GPUs (≤ 2 members a GPU), {} seeds (cluster seed s, gang kind TRAINING[s mod 5]), α = β = 1",
            100.0 * busy,
            args.seeds
        )?;
        writeln!(
            out,
            "{:>5} {:>4} {:<16} {:>3} {:>9} {:>9} {:>13} {:>13} {:>10} {:>10} {:>8} {:>8}",
            "gpus",
            "m",
            "search",
            "n",
            "obj-model",
            "obj-true",
            "gap-model %",
            "gap-true %",
            "gain-mod %",
            "gain-tru %",
            "med ms",
            "max ms"
        )?;
        for &gpus in &args.sizes {
            for &members in &args.members {
                let acc = search_instances(args, truth, mlp, busy, gpus, members)?;
                print_search_row(out, gpus, members, &acc)?;
                results.push(((busy, gpus, members), acc));
            }
        }
    }
    writeln!(
        out,
        "\nobj-model: the objective α·I + β·C/C_ref under the model the search used (the MLP; * the truth); obj-true: the same assignment \
         under the ground truth. gap: to the exhaustive optimum of the search's own model (gap-model) and to the truth's optimum \
         (exhaustive*; gap-true), mean/max, where exhaustive enumeration is within {} assignments. gain: 1 − objective ÷ greedy's with \
         the same model, mean. ms: search wall time (release build, this machine), median and max.",
        search::EXHAUSTIVE_LIMIT
    )?;
    Ok(results)
}

/// Every contender's figures on `args.seeds` clusters of `gpus` GPUs (`busy` of them busy) and a
/// gang of `members`; the seeds where the gang fits no cluster are left out.
fn search_instances(
    args: &Args,
    truth: &GroundTruth,
    mlp: &Predictor,
    busy: f64,
    gpus: usize,
    members: usize,
) -> Result<Vec<Acc>, Box<dyn Error>> {
    let mut acc = vec![Acc::default(); CONTENDERS.len()];
    for seed in 0..args.seeds {
        let cluster = GpuCluster::generate(&GpuClusterConfig { busy, ..GpuClusterConfig::new(gpus) }, seed);
        let kind = Kind::TRAINING[seed as usize % Kind::TRAINING.len()];
        let (problem, _) =
            cluster.problem(gang(kind, members, cluster.config.device_memory), true, Weights::default())?;
        let found: Vec<_> = CONTENDERS
            .iter()
            .map(
                |&(_, algo, oracle)| {
                    if oracle { run(&problem, truth, algo, seed) } else { run(&problem, mlp, algo, seed) }
                },
            )
            .collect();
        // The gang does not fit this cluster: nothing to compare.
        if found[index("greedy")].0.is_err() {
            continue;
        }
        let scored: Vec<Option<(f64, f64, f64)>> = found
            .iter()
            .map(|(f, ms)| {
                f.as_ref().ok().map(|p| (p.objective, Evaluator::new(&problem, truth).objective(&p.assignment), *ms))
            })
            .collect();
        let true_optimum = scored[index("exhaustive*")].map(|s| s.1);
        for (k, &(_, _, oracle)) in CONTENDERS.iter().enumerate() {
            let Some((model, true_score, ms)) = scored[k] else { continue };
            let (greedy, optimum) =
                if oracle { (index("greedy*"), index("exhaustive*")) } else { (index("greedy"), index("exhaustive")) };
            let a = &mut acc[k];
            a.model.push(model);
            a.truth.push(true_score);
            a.ms.push(ms);
            if let Some((o, _, _)) = scored[optimum] {
                a.gap_model.push(model / o - 1.0);
            }
            if let Some(o) = true_optimum {
                a.gap_truth.push(true_score / o - 1.0);
            }
            let (gm, gt, _) = scored[greedy].expect("greedy fits");
            a.gain_model.push(1.0 - model / gm);
            a.gain_truth.push(1.0 - true_score / gt);
        }
    }
    Ok(acc)
}

/// One row per contender of [`searches`]' table.
fn print_search_row(out: &mut impl Write, gpus: usize, members: usize, acc: &[Acc]) -> Result<(), Box<dyn Error>> {
    for (k, (name, _, _)) in CONTENDERS.iter().enumerate() {
        let a = &acc[k];
        if a.model.is_empty() {
            let why = if acc[index("greedy")].model.is_empty() {
                "the gang fits no cluster"
            } else {
                "refused (too many assignments)"
            };
            writeln!(out, "{gpus:>5} {members:>4} {name:<16} {:>3} {why}", 0)?;
            continue;
        }
        writeln!(
            out,
            "{gpus:>5} {members:>4} {name:<16} {:>3} {:>9.4} {:>9.4} {:>13} {:>13} {:>10.2} {:>10.2} {:>8.3} {:>8.3}",
            a.model.len(),
            mean(&a.model),
            mean(&a.truth),
            pct(&a.gap_model),
            pct(&a.gap_truth),
            100.0 * mean(&a.gain_model),
            100.0 * mean(&a.gain_truth),
            median(&a.ms),
            max(&a.ms)
        )?;
    }
    Ok(())
}

// ---------------------------------------------------------------------------------------------
// (c) Job completion times.

/// Per (GPUs, load), per placer: the mean JCT of each seed.
type JctResults = Vec<((usize, f64), Vec<(String, Vec<f64>)>)>;

fn jcts(args: &Args, truth: &GroundTruth, mlp: &Predictor, out: &mut impl Write) -> Result<JctResults, Box<dyn Error>> {
    // (placer, the placer it is compared with)
    let placers = jct_placers(truth, mlp);
    let base = JctConfig::new(8, 1.0);
    writeln!(
        out,
        "\n== (c) JCT simulation: {:.0} % of GPUs busy with resident tasks, {} gangs of {:?} members ({:.0} % sharing GPUs) running {}–{} s alone, \
         Poisson arrivals, strict FIFO, {} seeds per row; * = placed with the ground truth as the model",
        100.0 * args.jct_busy,
        args.jct_jobs,
        base.members,
        100.0 * args.jct_share,
        base.solo_s.0,
        base.solo_s.1,
        args.jct_seeds
    )?;
    writeln!(
        out,
        "{:>5} {:>5} {:<16} {:>5} {:>10} {:>10} {:>11} {:>9} {:>8} {:>6} {:>10}  {:<40} {:>7}",
        "gpus",
        "load",
        "placer",
        "jobs",
        "mean JCT s",
        "p95 JCT s",
        "makespan s",
        "wait s",
        "stretch",
        "sync",
        "vs base %",
        "vs base % per seed",
        "wall s"
    )?;
    let mut results = JctResults::new();
    for &gpus in &args.jct_gpus {
        for &load in &args.jct_loads {
            let per = jct_runs(args, truth, &placers, gpus, load)?;
            let column = |k: usize, c: usize| per[k].0.iter().map(|v| v[c]).collect::<Vec<f64>>();
            for (k, (placer, base)) in placers.iter().enumerate() {
                let (vs, each) = match base {
                    Some(b) => {
                        let b = placers.iter().position(|(p, _)| p.name == *b).expect("a base placer");
                        let each: Vec<String> = column(k, 0)
                            .iter()
                            .zip(column(b, 0))
                            .map(|(x, y)| format!("{:.1}", 100.0 * (1.0 - x / y)))
                            .collect();
                        (format!("{:.1}", 100.0 * (1.0 - mean(&column(k, 0)) / mean(&column(b, 0)))), each.join(" "))
                    }
                    None => ("-".into(), String::new()),
                };
                writeln!(
                    out,
                    "{gpus:>5} {load:>5} {:<16} {:>5.0} {:>10.0} {:>10.0} {:>11.0} {:>9.0} {:>8.3} {:>6.3} {vs:>10}  {each:<40} {:>7.2}",
                    placer.name,
                    mean(&column(k, 5)),
                    mean(&column(k, 0)) / 1e3,
                    mean(&column(k, 1)) / 1e3,
                    mean(&column(k, 2)) / 1e3,
                    mean(&column(k, 3)) / 1e3,
                    mean(&column(k, 4)),
                    mean(&column(k, 6)),
                    per[k].1
                )?;
            }
            results.push((
                (gpus, load),
                placers.iter().enumerate().map(|(k, (p, _))| (p.name.clone(), column(k, 0))).collect(),
            ));
        }
    }
    writeln!(
        out,
        "\nJCT = end − arrival (waiting included); every figure is the mean over seeds of the run's figure: mean JCT, p95 JCT (nearest \
         rank), makespan (first arrival to last end), mean wait, stretch (mean (end − start) ÷ solo run time: what interference and \
         synchronisation cost); sync: the part of stretch that is synchronisation (mean iterations × sync ms at its placement ÷ solo \
         run time). load counts solo work; the placements' stretch of 2–3 makes the cluster saturate near load 0.3–0.4, so at 0.7 a backlog builds over the arrivals and waiting dominates \
         JCT. jobs: gangs placed (the others fit no placement even with no gang running, never queued). vs base: \
         1 − mean JCT ÷ the base's (greedy with the same model; greedy* against greedy: what the oracle model gives greedy). wall s: \
         the simulations' wall time, all seeds."
    )?;
    Ok(results)
}

/// The placers the JCT simulation compares, each with the placer it is compared with.
fn jct_placers(truth: &GroundTruth, mlp: &Predictor) -> Vec<(Placer<'static>, Option<&'static str>)> {
    let p = |name: &str, search, model: &'static dyn InterferenceModel| Placer {
        name: name.into(),
        search,
        model,
        weights: Weights::default(),
    };
    // A placer borrows its model for the benchmark's whole run; one leaked copy of each.
    let mlp: &'static Predictor = Box::leak(Box::new(mlp.clone()));
    let oracle: &'static GroundTruth = Box::leak(Box::new(truth.clone()));
    vec![
        (p("sfla", Search::Sfla(SflaParams::default()), mlp), Some("greedy")),
        (p("greedy", Search::Greedy, mlp), None),
        (p("topology-greedy", Search::TopologyGreedy, mlp), Some("greedy")),
        (p("random", Search::Random, mlp), Some("greedy")),
        (p("sfla*", Search::Sfla(SflaParams::default()), oracle), Some("greedy*")),
        (p("greedy*", Search::Greedy, oracle), Some("greedy")),
    ]
}

/// One placer's runs: per seed (mean JCT, p95, makespan, wait, stretch, jobs, sync), and the
/// simulations' wall time.
type PlacerRuns = (Vec<[f64; 7]>, f64);

/// Per placer of `placers`, its runs on `gpus` GPUs at `load`.
fn jct_runs(
    args: &Args,
    truth: &GroundTruth,
    placers: &[(Placer, Option<&str>)],
    gpus: usize,
    load: f64,
) -> Result<Vec<PlacerRuns>, Box<dyn Error>> {
    let mut per: Vec<PlacerRuns> = vec![(Vec::new(), 0.0); placers.len()];
    for seed in 0..args.jct_seeds {
        let config = JctConfig {
            cluster: GpuClusterConfig { busy: args.jct_busy, ..GpuClusterConfig::new(gpus) },
            jobs: args.jct_jobs,
            share: args.jct_share,
            ..JctConfig::new(gpus, load)
        };
        let w = JctWorkload::generate(&config, seed)?;
        for (k, (placer, _)) in placers.iter().enumerate() {
            let started = Instant::now();
            let r: JctReport = jct::simulate(&w, truth, placer)?;
            per[k].1 += started.elapsed().as_secs_f64();
            let sync = mean(
                &r.jobs
                    .iter()
                    .map(|o| {
                        w.jobs[o.id].iterations as f64 * jct::sync_ms(&w.cluster, w.jobs[o.id].kind, &o.gpus)
                            / o.solo_ms
                    })
                    .collect::<Vec<_>>(),
            );
            per[k].0.push([
                r.mean_jct_ms(),
                r.p95_jct_ms(),
                r.makespan_ms(),
                r.mean_wait_ms(),
                r.mean_stretch(),
                r.jobs.len() as f64,
                sync,
            ]);
        }
    }
    Ok(per)
}

// ---------------------------------------------------------------------------------------------

fn verdict(pass: bool) -> &'static str {
    if pass { "PASS" } else { "FAIL" }
}

fn main() -> Result<(), Box<dyn Error>> {
    let args = <Args as clap::Parser>::parse();
    let out = &mut std::io::stdout().lock();
    let truth = GroundTruth::new(args.truth_seed);
    let started = Instant::now();
    let trained = train(&args, &truth, out)?;
    let b = searches(&args, &truth, &trained.predictor, out)?;
    let c = jcts(&args, &truth, &trained.predictor, out)?;

    writeln!(out, "\n== targets (issue 16)")?;
    writeln!(
        out,
        "MLP trained: MAPE {:.2} % on held-out pairs, {:.2} % on triples (no target; reported)",
        100.0 * trained.pairs,
        100.0 * trained.triples
    )?;
    // SFLA within 2 % of the optimum on small instances (where exhaustive search is computable).
    let gaps = |name: &str, f: fn(&Acc) -> &Vec<f64>| -> Vec<f64> {
        b.iter().flat_map(|(_, acc)| f(&acc[index(name)]).clone()).collect()
    };
    for (what, v) in [
        ("sfla (MLP) vs the MLP's optimum", gaps("sfla", |a| &a.gap_model)),
        ("sfla* (truth) vs the truth's optimum", gaps("sfla*", |a| &a.gap_model)),
        (
            "stricter, the MLP's error included: sfla (MLP) re-scored vs the truth's optimum",
            gaps("sfla", |a| &a.gap_truth),
        ),
    ] {
        let pass = !v.is_empty() && max(&v) <= GAP_TARGET;
        writeln!(
            out,
            "[{}] SFLA within {:.0} % of the optimum on small instances — {what}: {} instances, gap mean {:.2} %, max {:.2} %",
            verdict(pass),
            100.0 * GAP_TARGET,
            v.len(),
            100.0 * mean(&v),
            100.0 * max(&v)
        )?;
    }
    // ≥ 10 % better objective than greedy on the 128-GPU cluster.
    for &busy in &args.busy {
        let on128: Vec<&Vec<Acc>> =
            b.iter().filter(|((bu, g, _), _)| *bu == busy && *g == 128).map(|(_, acc)| acc).collect();
        if on128.is_empty() {
            continue;
        }
        let pool = |name: &str, f: fn(&Acc) -> &Vec<f64>| -> Vec<f64> {
            on128.iter().flat_map(|acc| f(&acc[index(name)]).clone()).collect()
        };
        let (truth_gain, model_gain, oracle_gain) =
            (pool("sfla", |a| &a.gain_truth), pool("sfla", |a| &a.gain_model), pool("sfla*", |a| &a.gain_truth));
        writeln!(
            out,
            "[{}] SFLA ≥ {:.0} % better objective than greedy on 128 GPUs, {:.0} % busy: mean gain under the truth {:.2} % ({} instances; under the MLP {:.2} %; oracle sfla* vs greedy* {:.2} %)",
            verdict(mean(&truth_gain) >= GAIN_TARGET),
            100.0 * GAIN_TARGET,
            100.0 * busy,
            100.0 * mean(&truth_gain),
            truth_gain.len(),
            100.0 * mean(&model_gain),
            100.0 * mean(&oracle_gain)
        )?;
    }
    // SFLA < 50 ms for a 16-member gang on 128 GPUs.
    let times: Vec<f64> = b
        .iter()
        .filter(|((_, g, m), _)| *g == 128 && *m == 16)
        .flat_map(|(_, acc)| acc[index("sfla")].ms.clone())
        .collect();
    if !times.is_empty() {
        writeln!(
            out,
            "[{}] SFLA < {TIME_TARGET_MS:.0} ms for a 16-member gang on 128 GPUs (MLP model): median {:.2} ms, max {:.2} ms over {} searches",
            verdict(max(&times) < TIME_TARGET_MS),
            median(&times),
            max(&times),
            times.len()
        )?;
    }
    // ≥ 15 % lower mean JCT than greedy.
    for ((gpus, load), per) in &c {
        let of = |name: &str| mean(&per.iter().find(|(n, _)| n == name).expect("a placer").1);
        let gain = 1.0 - of("sfla") / of("greedy");
        writeln!(
            out,
            "[{}] SFLA ≥ {:.0} % lower mean JCT than greedy, {gpus} GPUs, load {load}: {:.1} % (mean JCT over {} seeds; oracle sfla* vs greedy* {:.1} %; topology-greedy vs greedy {:.1} %)",
            verdict(gain >= JCT_TARGET),
            100.0 * JCT_TARGET,
            100.0 * gain,
            args.jct_seeds,
            100.0 * (1.0 - of("sfla*") / of("greedy*")),
            100.0 * (1.0 - of("topology-greedy") / of("greedy"))
        )?;
    }
    writeln!(out, "\nwall time {:.1} s", started.elapsed().as_secs_f64())?;
    Ok(())
}
