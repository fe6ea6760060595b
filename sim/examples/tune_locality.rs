//! Tuning the locality baseline: the coordinator's `locality` against variants of its
//! tie-breaking, on every benchmark workload (3 seeds × 16/64 nodes × 3 mixes). Prints each
//! variant's mean task response relative to the coordinator's rule.
//!
//! `cargo run --release -p plexus-sim --example tune_locality`
use std::cmp::Ordering;

use plexus_sim::placer::{Candidate, Decision, PlacementRequest, Placer};
use plexus_sim::*;

/// The feasible candidate with the greatest key, compared lexicographically (no float sums, so
/// no term is lost to rounding); ties to the earliest.
fn pick_lex<K: PartialOrd>(cands: &[Candidate], key: impl Fn(&Candidate) -> K) -> Decision {
    let mut best: Option<(usize, K)> = None;
    for (i, c) in cands.iter().enumerate().filter(|(_, c)| c.feasible) {
        let k = key(c);
        if best.as_ref().is_none_or(|(_, b)| k.partial_cmp(b) == Some(Ordering::Greater)) {
            best = Some((i, k));
        }
    }
    let chosen = best.map(|(i, _)| i).unwrap_or(usize::MAX);
    let scores = cands
        .iter()
        .enumerate()
        .map(|(i, c)| {
            if !c.feasible {
                f64::NAN
            } else if i == chosen {
                1.0
            } else {
                0.0
            }
        })
        .collect();
    Decision { chosen, scores, exploratory: false, reason: String::new(), features: None }
}

/// `LocalityPlus` ignores the request.
static DUMMY: PlacementRequest = PlacementRequest {
    decision: 0,
    job_age_ms: 0,
    resources: plexus_proto::Resources { cpu: 0.0, memory: 0, gpu: 0 },
    input_bytes: 0,
    flops: None,
    writes: false,
    kind: 0,
};

fn ll(c: &Candidate) -> f64 {
    -(c.cpu_load() * 1e6 + c.assigned as f64 * 10.0 + c.cpu_utilisation)
}
fn free_cache(c: &Candidate) -> u64 {
    c.cache_bytes.saturating_sub(c.cache_used)
}

struct Variant(&'static str, fn(&[Candidate]) -> Decision);
impl Placer for Variant {
    fn name(&self) -> &'static str {
        self.0
    }
    fn place(&mut self, _r: &PlacementRequest, c: &[Candidate]) -> Decision {
        (self.1)(c)
    }
}

fn main() {
    // Also run plexus_sim::baseline::LocalityPlus, to check it matches its variant here.
    let variants: Vec<Variant> = vec![
        Variant("locality+", |c| plexus_sim::baseline::LocalityPlus.place(&DUMMY, c)),
        // The coordinator's intent, without its rounding: bytes, then least-loaded.
        Variant("bytes>least-loaded", |c| pick_lex(c, |x| (x.local_input_bytes, ll(x)))),
        // The rule adopted as `locality+` (plexus_sim::baseline::LocalityPlus).
        Variant("bytes>free-cores", |c| pick_lex(c, |x| (x.local_input_bytes, x.free.cpu))),
        Variant("bytes>free-cache", |c| pick_lex(c, |x| (x.local_input_bytes, free_cache(x), ll(x)))),
        Variant("bytes>free-cores>cache", |c| pick_lex(c, |x| (x.local_input_bytes, x.free.cpu, free_cache(x)))),
        Variant("bytes>idle-share>cores", |c| pick_lex(c, |x| (x.local_input_bytes, -x.cpu_load(), x.free.cpu))),
    ];
    let mut sums = vec![0.0; variants.len() + 1];
    let mut count = 0;
    for mix in Mix::ORIGINAL {
        for nodes in [16, 64] {
            for seed in 1..=3 {
                let config = SimConfig::new(nodes, mix, seed);
                let w = Workload::generate(&config).unwrap();
                let base = simulate(&config, &w, placer::heuristic("locality", seed).unwrap().as_mut())
                    .unwrap()
                    .mean_response_ms();
                let ll = simulate(&config, &w, placer::heuristic("least-loaded", seed).unwrap().as_mut())
                    .unwrap()
                    .mean_response_ms();
                print!("{:<15} {nodes:>3} s{seed}: locality {base:.0} ms; least-loaded {:.3}", mix.name(), ll / base);
                sums[0] += ll / base;
                for (i, v) in variants.iter().enumerate() {
                    let mut p = Variant(v.0, v.1);
                    let r = simulate(&config, &w, &mut p).unwrap().mean_response_ms() / base;
                    print!("  {} {r:.3}", v.0);
                    sums[i + 1] += r;
                }
                println!();
                count += 1;
            }
        }
    }
    println!("mean over workloads, relative to the coordinator's locality: least-loaded {:.3}", sums[0] / count as f64);
    for (i, v) in variants.iter().enumerate() {
        println!("  {:<24} {:.3}", v.0, sums[i + 1] / count as f64);
    }
}
