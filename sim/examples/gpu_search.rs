//! The GPU group placement searches on simulated clusters with the ground truth as the oracle
//! model: for 8, 32 and 128 GPUs and gangs of 2–16 members, each search's mean objective, its
//! gap to the exhaustive optimum where that is computable, its gain over greedy, and its run
//! time. (The benchmark binary, `bench --bin gpu-placement`, adds the learned model.)
//!
//! `cargo run --release -p plexus-sim --example gpu_search [seeds]`
use std::time::Instant;

use plexus_scheduler::gpu::objective::{Evaluator, Weights};
use plexus_scheduler::gpu::search::{self, Placement, SflaParams};
use plexus_sim::gpu::{GpuCluster, GpuClusterConfig, GroundTruth, Kind, gang};

type Search = fn(&mut Evaluator<'_, GroundTruth>, u64) -> Result<Placement, plexus_scheduler::Error>;

const SEARCHES: [(&str, Search); 7] = [
    ("sfla", |e, s| search::sfla(e, &SflaParams::default(), s)),
    ("sfla-seed-only", |e, s| search::sfla(e, &SflaParams::seed_only(), s)),
    ("greedy", |e, _| search::greedy(e)),
    ("topology-greedy", |e, _| search::topology_greedy(e)),
    ("random", |e, s| search::random(e, s)),
    ("exhaustive", |e, _| search::exhaustive(e, search::EXHAUSTIVE_LIMIT)),
    // Four times the frogs and iterations, twice the steps: does more search find better?
    ("sfla-4x", |e, s| {
        search::sfla(
            e,
            &SflaParams { min_frogs: 64, iterations: 64, local_steps: 8, memeplexes: 8, ..SflaParams::default() },
            s,
        )
    }),
];

fn main() {
    let seeds: u64 = std::env::args().nth(1).and_then(|s| s.parse().ok()).unwrap_or(10);
    let busy: f64 = std::env::args().nth(2).and_then(|s| s.parse().ok()).unwrap_or(0.5);
    println!(
        "{:>5} {:>7} {:<16} {:>9} {:>7} {:>7} {:>9} {:>10} {:>9} {:>9} {:>6}",
        "gpus", "members", "search", "objective", "I", "C/Cref", "gap-opt%", "vs-greedy%", "mean-ms", "max-ms", "calls"
    );
    for gpus in [8, 32, 128] {
        for members in [2, 4, 8, 16] {
            // (objective sum, gap sum, gap count, gain sum, time sum, time max, model calls, runs)
            let mut rows = vec![(0.0, 0.0, 0, 0.0, 0.0, 0.0f64, 0u64, 0u32); SEARCHES.len()];
            // (I sum, C/C_ref sum)
            let mut parts = vec![(0.0, 0.0); SEARCHES.len()];
            for seed in 0..seeds {
                let cluster = GpuCluster::generate(&GpuClusterConfig { busy, ..GpuClusterConfig::new(gpus) }, seed);
                let kind = Kind::TRAINING[seed as usize % Kind::TRAINING.len()];
                let truth = GroundTruth::new(seed);
                let (problem, _) = cluster
                    .problem(gang(kind, members, cluster.config.device_memory), true, Weights::default())
                    .expect("a well-formed problem");
                let mut found = Vec::new();
                for (k, (_, run)) in SEARCHES.iter().enumerate() {
                    let mut eval = Evaluator::new(&problem, &truth);
                    let start = Instant::now();
                    let result = run(&mut eval, seed);
                    let ms = start.elapsed().as_secs_f64() * 1e3;
                    if let Ok(p) = &result {
                        rows[k].4 += ms;
                        rows[k].5 = rows[k].5.max(ms);
                        rows[k].6 += eval.model_calls();
                        rows[k].7 += 1;
                        assert!(problem.is_feasible(&p.assignment));
                        let b = Evaluator::new(&problem, &truth).breakdown(&p.assignment);
                        parts[k].0 += b.interference;
                        parts[k].1 += b.communication_norm;
                    }
                    found.push(result.ok().map(|p| p.objective));
                }
                // Too little room for the gang on a small busy cluster: nothing to compare.
                let Some(greedy) = found[2] else { continue };
                let optimum = found[5];
                for (k, f) in found.iter().enumerate() {
                    let Some(f) = *f else { continue };
                    rows[k].0 += f;
                    rows[k].3 += 1.0 - f / greedy;
                    if let Some(o) = optimum {
                        rows[k].1 += f / o - 1.0;
                        rows[k].2 += 1;
                    }
                }
            }
            for (k, (name, _)) in SEARCHES.iter().enumerate() {
                let r = rows[k];
                if r.7 == 0 {
                    println!("{gpus:>5} {members:>7} {name:<16} {:>9}", "refused");
                    continue;
                }
                let n = f64::from(r.7);
                let gap = if r.2 > 0 { format!("{:.2}", 100.0 * r.1 / r.2 as f64) } else { "-".into() };
                println!(
                    "{gpus:>5} {members:>7} {name:<16} {:>9.4} {:>7.4} {:>7.4} {gap:>9} {:>10.1} {:>9.3} {:>9.3} {:>6.0}",
                    r.0 / n,
                    parts[k].0 / n,
                    parts[k].1 / n,
                    100.0 * r.3 / n,
                    r.4 / n,
                    r.5,
                    r.6 as f64 / n
                );
            }
        }
    }
}
