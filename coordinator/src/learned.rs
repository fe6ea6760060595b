//! The learned placer (`--placer rl`): seed 001's DQN policy from `plexus-policy`, fed the same
//! candidates the heuristics see. This adapter only translates: Q-values become scores,
//! outcomes become reward inputs (the policy reads the candidates itself). [`by_name`] builds
//! any placer, heuristic or learned, from its `--placer` name.

use std::collections::BTreeMap;
use std::sync::Arc;

use plexus_policy::features::NAMES;
use plexus_policy::{DqnPolicy, Observation, PolicyConfig, PolicyError, PolicyStore, RewardInputs, TaskFeatures};
use plexus_scheduler::placer::{Candidate, Decision, HEURISTICS, Outcome, PlacementRequest, Placer, heuristic};

use crate::Error;

/// Every name accepted by `--placer`: the heuristics, and `rl`.
pub const PLACERS: &[&str] = &["least-loaded", "round-robin", "random", "locality", "rl"];

/// Builds a placer by name: a heuristic, or `rl`, the learned policy, persisting through `store`.
pub fn by_name(name: &str, seed: u64, store: Option<Arc<dyn PolicyStore>>) -> Result<Box<dyn Placer>, Error> {
    debug_assert!(HEURISTICS.iter().all(|h| PLACERS.contains(h)));
    if name == "rl" {
        let config = PolicyConfig { seed, ..PolicyConfig::default() };
        return Ok(Box::new(Learned::new(config, store)?));
    }
    heuristic(name, seed).ok_or_else(|| Error::Scheduler(plexus_scheduler::Error::UnknownPlacer { name: name.to_string(), known: PLACERS.join(", ") }))
}

pub struct Learned {
    policy: DqnPolicy,
    /// Decision → the least estimated run among its feasible candidates, for decisions whose
    /// candidates carried estimates and whose outcome has not arrived (the reward's per-decision
    /// scale, see `RewardInputs::best_est_ms`).
    best_est: BTreeMap<u64, f64>,
}

/// Decisions whose best estimate is kept while their outcome is awaited, at most; the oldest go
/// first (their attempts were lost), so memory stays bounded.
const MAX_AWAITED: usize = 100_000;

impl Learned {
    pub fn new(config: PolicyConfig, store: Option<Arc<dyn PolicyStore>>) -> Result<Self, PolicyError> {
        Ok(Learned { policy: DqnPolicy::new(config, store)?, best_est: BTreeMap::new() })
    }

    /// The least estimated fetch + compute among the feasible candidates, when every feasible
    /// one has both estimates.
    pub fn best_estimate(candidates: &[Candidate]) -> Option<f64> {
        let mut best: Option<f64> = None;
        for c in candidates.iter().filter(|c| c.feasible) {
            let e = c.est_run_ms()?;
            best = Some(best.map_or(e, |b| b.min(e)));
        }
        best
    }

    pub fn policy(&self) -> &DqnPolicy {
        &self.policy
    }

    pub fn policy_mut(&mut self) -> &mut DqnPolicy {
        &mut self.policy
    }

    /// The observation of one decision, as the policy sees it.
    pub fn observation(req: &PlacementRequest, candidates: &[Candidate]) -> Observation {
        Observation::build(&TaskFeatures::of(req, candidates), candidates)
    }
}

impl Placer for Learned {
    fn name(&self) -> &'static str {
        "rl"
    }

    fn place(&mut self, req: &PlacementRequest, candidates: &[Candidate]) -> Decision {
        let obs = Self::observation(req, candidates);
        if let Some(b) = Self::best_estimate(candidates) {
            self.best_est.insert(req.decision, b);
            while self.best_est.len() > MAX_AWAITED {
                self.best_est.pop_first();
            }
        }
        let features = obs.tokens.iter().map(|t| NAMES.iter().zip(t).map(|(n, v)| (n.to_string(), *v as f64)).collect()).collect();
        match self.policy.decide(req.decision, obs) {
            Some(c) => Decision {
                chosen: c.index,
                scores: c.q.iter().map(|&q| if q.is_finite() { q as f64 } else { f64::NAN }).collect(),
                exploratory: c.exploratory,
                reason: if c.exploratory {
                    "exploration: a random feasible candidate other than the highest Q-value".into()
                } else {
                    "highest Q-value".into()
                },
                features: Some(features),
            },
            None => Decision { chosen: usize::MAX, scores: vec![f64::NAN; candidates.len()], exploratory: false, reason: "no feasible candidate".into(), features: Some(features) },
        }
    }

    fn observe(&mut self, o: &Outcome) {
        let inputs = RewardInputs {
            utilisation: o.cluster_utilisation,
            fetch_ms: o.fetch_ms as f64,
            evicted_bytes: o.evicted_bytes,
            run_ms: o.run_ms as f64,
            best_est_ms: self.best_est.remove(&o.decision),
        };
        self.policy.observe(o.decision, &inputs);
    }
}
