//! Baselines tuned in the simulator, proposed for the coordinator but not (yet) there.
//!
//! `examples/tune_locality.rs` compares tie-breaking rules for the locality placer on every
//! benchmark workload. Two findings:
//! * The coordinator's `locality` scores `bytes × 1e12 + load / 1e9` as one `f64`. Whenever the
//!   resident bytes are non-zero the load term is far below the sum's rounding step (the ulp of
//!   1e21 is ~2.6e5), so ties among nodes holding the same bytes go to the lowest worker id,
//!   not to the least loaded one; only "nobody holds anything" ties are broken by load.
//! * Comparing lexicographically and breaking ties by the most free cores (in absolute terms,
//!   not as a share) does best of the rules tried: 2.7 % lower mean response on average over
//!   the 18 benchmark workloads, and lower on every one (0.93–0.99×). Fixing only the rounding
//!   (ties by least-loaded's score) gains 1 % and is worse on some workloads; breaking ties by
//!   free fast memory gains about as little. Free cores win because a larger node is likelier
//!   to keep room for the next task that wants its data and, in the default cluster, has
//!   faster cores.
//!
//! `fastest` is the heuristic a topology-aware scheduler would write once candidates carry
//! estimates (the simulator's exact ones: fetch time from each input's cheapest copy over the
//! tiers, compute time on the node's engines): the node where the task would finish soonest.
//! The coordinator's `fastest` (`plexus_scheduler::placer::Fastest`) was written after it and
//! decides alike wherever every candidate has estimates; the comparison now runs the
//! coordinator's, as `fastest` on measured estimates and `fastest-exact` on exact ones
//! ([`crate::compare::Contender::baselines`]). This one stays for tests and experiments.

use std::cmp::Ordering;

use plexus_scheduler::placer::{Candidate, Decision, PlacementRequest, Placer};

/// The first feasible candidate that no later feasible one is `better` than (`usize::MAX` when
/// none is feasible, which the simulator never asks).
fn first_best(candidates: &[Candidate], better: impl Fn(&Candidate, &Candidate) -> bool) -> usize {
    let mut chosen = usize::MAX;
    for (i, c) in candidates.iter().enumerate().filter(|(_, c)| c.feasible) {
        if chosen == usize::MAX || better(c, &candidates[chosen]) {
            chosen = i;
        }
    }
    chosen
}

/// Most input bytes resident, then most free cores; ties to the earliest candidate (lowest
/// worker id). Compared as a pair, so both terms count.
pub struct LocalityPlus;

impl LocalityPlus {
    pub const NAME: &'static str = "locality+";

    fn key(c: &Candidate) -> (u64, f64) {
        (c.local_input_bytes, c.free.cpu)
    }
}

impl Placer for LocalityPlus {
    fn name(&self) -> &'static str {
        Self::NAME
    }

    fn place(&mut self, _req: &PlacementRequest, candidates: &[Candidate]) -> Decision {
        let chosen = first_best(candidates, |a, b| Self::key(a).partial_cmp(&Self::key(b)) == Some(Ordering::Greater));
        // Scores are ranks: 1 for the choice, lower for worse keys, NaN for infeasible nodes.
        let scores = candidates
            .iter()
            .map(|c| {
                if !c.feasible {
                    f64::NAN
                } else {
                    let better = candidates
                        .iter()
                        .filter(|o| o.feasible && Self::key(o).partial_cmp(&Self::key(c)) == Some(Ordering::Greater))
                        .count();
                    1.0 / (1.0 + better as f64)
                }
            })
            .collect();
        Decision {
            chosen,
            scores,
            exploratory: false,
            reason: "most input bytes resident, then most free cores".into(),
            features: None,
        }
    }
}

/// Least estimated fetch + compute ([`Candidate::est_fetch_ms`] + [`Candidate::est_compute_ms`]);
/// ties (and candidates without estimates, which compare equal) by the locality key: most input
/// bytes resident, then most free cores; then the earliest candidate.
pub struct Fastest;

impl Fastest {
    pub const NAME: &'static str = "fastest";

    fn est(c: &Candidate) -> f64 {
        c.est_fetch_ms.unwrap_or(0.0) + c.est_compute_ms.unwrap_or(0.0)
    }

    /// Whether `a` is strictly better than `b`.
    fn better(a: &Candidate, b: &Candidate) -> bool {
        match Self::est(a).partial_cmp(&Self::est(b)) {
            Some(Ordering::Less) => true,
            Some(Ordering::Equal) => LocalityPlus::key(a).partial_cmp(&LocalityPlus::key(b)) == Some(Ordering::Greater),
            _ => false,
        }
    }
}

impl Placer for Fastest {
    fn name(&self) -> &'static str {
        Self::NAME
    }

    fn place(&mut self, _req: &PlacementRequest, candidates: &[Candidate]) -> Decision {
        let chosen = first_best(candidates, Self::better);
        // Scores: minus the estimate (higher is better), NaN for infeasible nodes.
        let scores = candidates.iter().map(|c| if c.feasible { -Self::est(c) } else { f64::NAN }).collect();
        Decision {
            chosen,
            scores,
            exploratory: false,
            reason: "least estimated fetch + compute, then most input bytes resident, then most free cores".into(),
            features: None,
        }
    }
}
