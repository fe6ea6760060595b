//! Decision latency of the learned placer: p50/p99 of `DqnPolicy::decide` at 16 and 64
//! candidate nodes, measured while the training thread is training, for several network widths
//! (the default, and the seed's 512/4). The target is p99 < 1 ms on this machine.
//!
//! `cargo run --release -p plexus-bench --bin policy-latency`

use std::sync::atomic::Ordering;
use std::time::Instant;

use plexus_bench::percentile;
use plexus_policy::{
    DqnPolicy, NetConfig, Observation, PolicyConfig, RewardInputs, TaskFeatures,
};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

const WARMUP: u64 = 1_500;
const MEASURED: u64 = 4_000;

fn observation(rng: &mut StdRng, n: usize) -> Observation {
    let task = TaskFeatures {
        system_utilisation: rng.random_range(0.0..1.0),
        flops: rng.random_range(1e6..1e12),
        input_bytes: rng.random_range(0..1u64 << 32),
        writes: rng.random_bool(0.5),
    };
    let nodes: Vec<_> = (0..n)
        .map(|_| {
            let feasible = rng.random_bool(0.8);
            let cache_used = rng.random_range(0..8u64 << 30);
            let local = rng.random_range(0..1u64 << 30);
            let (load, util, gpu) = (rng.random_range(0.0..1.0), rng.random_range(0.0..1.0), rng.random_bool(0.2));
            let est = (rng.random_range(0.0..5000.0), rng.random_range(0.0..5000.0));
            plexus_policy::features::candidate(feasible, 8 << 30, cache_used, local, load, util, gpu, Some(est))
        })
        .collect();
    let mut o = Observation::build(&task, &nodes);
    o.feasible[0] = true;
    o
}

fn main() {
    let configs = [
        ("default d=64 h=4 ff=128", NetConfig::default()),
        (
            "d=128 h=4 ff=256",
            NetConfig {
                d_model: 128,
                ff: 256,
                ..NetConfig::default()
            },
        ),
        ("seed d=512 h=4 ff=2048", NetConfig::seed()),
    ];
    println!(
        "learned placer decision latency (decide(): features → Q-values → ε-greedy), CPU, 1 intra-op thread, training thread running"
    );
    println!(
        "{:<26} {:>6} {:>9} {:>9} {:>9} {:>15}",
        "network", "nodes", "p50_us", "p99_us", "max_us", "train_steps"
    );
    for (name, net) in configs {
        for n in [16usize, 64] {
            // Small syncs so the inference network really is swapped during the measurement.
            let config = PolicyConfig {
                net: net.clone(),
                device: Some(tch::Device::Cpu),
                ..PolicyConfig::default()
            };
            let mut p = DqnPolicy::new(config, None).expect("policy");
            let mut rng = StdRng::seed_from_u64(7);
            let mut lat = Vec::with_capacity(MEASURED as usize);
            let steps_before_measure;
            for id in 0..WARMUP + MEASURED {
                let o = observation(&mut rng, n);
                let t0 = Instant::now();
                let c = p.decide(id, o).expect("a feasible node");
                let dt = t0.elapsed();
                if id >= WARMUP {
                    lat.push(dt.as_micros() as u64);
                }
                p.observe(
                    id,
                    &RewardInputs {
                        utilisation: rng.random_range(0.0..1.0),
                        fetch_ms: if c.index % 3 == 0 { 0.0 } else { 80.0 },
                        evicted_bytes: 0,
                        run_ms: rng.random_range(100.0..5000.0),
                        best_est_ms: Some(100.0),
                    },
                );
            }
            steps_before_measure = p.stats().training_steps.load(Ordering::Relaxed);
            lat.sort_unstable();
            println!(
                "{:<26} {:>6} {:>9} {:>9} {:>9} {:>15}",
                name,
                n,
                percentile(&lat, 50.0),
                percentile(&lat, 99.0),
                lat.last().copied().unwrap_or(0),
                steps_before_measure
            );
        }
    }
    println!(
        "(train_steps: training steps the training thread completed during the run; each is 8 batches of 128)"
    );
}
