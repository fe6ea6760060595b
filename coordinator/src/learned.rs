//! The learned placer (`--placer rl`): seed 001's DQN policy from `plexus-policy`, fed the same
//! candidates the heuristics see. This adapter only translates: Q-values become scores,
//! outcomes become reward inputs (the policy reads the candidates itself). [`by_name`] builds
//! any placer, heuristic or learned, from its `--placer` name.

use std::collections::BTreeMap;
use std::sync::Arc;

use plexus_policy::features::NAMES;
use plexus_policy::{DqnPolicy, Observation, PolicyConfig, PolicyError, PolicyStore, RewardInputs, TaskFeatures};
use plexus_scheduler::placer::{
    Candidate, Decision, HEURISTICS, LearningStats, MAX_DECISION_TIMES, Outcome, PlacementRequest, Placer, ReadyWork,
    heuristic, shortest_remaining_first,
};

use crate::error::Error;

/// Every name accepted by `--placer`: the heuristics, and `rl`.
pub const PLACERS: &[&str] = &["least-loaded", "round-robin", "random", "locality", "fastest", "rl"];

/// Builds a placer by name: a heuristic, or `rl`, the learned policy, persisting through `store`.
pub fn by_name(name: &str, seed: u64, store: Option<Arc<dyn PolicyStore>>) -> Result<Box<dyn Placer>, Error> {
    debug_assert!(HEURISTICS.iter().all(|h| PLACERS.contains(h)));
    if name == "rl" {
        // Ours, not the seed's: the departures on, and the choice of which work goes next.
        let config = PolicyConfig { seed, ..PolicyConfig::ours() };
        return Ok(Box::new(Learned::new(config, store)?.ordering(true)));
    }
    heuristic(name, seed).ok_or_else(|| {
        Error::Scheduler(plexus_scheduler::Error::UnknownPlacer { name: name.to_string(), known: PLACERS.join(", ") })
    })
}

pub struct Learned {
    policy: DqnPolicy,
    /// Decision → the least estimated run among its feasible candidates, for decisions whose
    /// candidates carried estimates and whose outcome has not arrived (the reward's per-decision
    /// scale, see `RewardInputs::best_est_ms`).
    best_est: BTreeMap<u64, f64>,
    /// Whether it chooses which ready work goes next (shortest remaining job first on the
    /// measured estimates, `Placer::order`); off is the seed's placer, which only picks nodes.
    order_work: bool,
    exploratory: u64,
    /// Seconds each decision took since metrics last read them.
    decision_seconds: Vec<f64>,
}

/// Decisions whose best estimate is kept while their outcome is awaited, at most; the oldest go
/// first (their attempts were lost), so memory stays bounded.
const MAX_AWAITED: usize = 100_000;

impl Learned {
    pub fn new(config: PolicyConfig, store: Option<Arc<dyn PolicyStore>>) -> Result<Self, PolicyError> {
        Ok(Learned {
            policy: DqnPolicy::new(config, store)?,
            best_est: BTreeMap::new(),
            order_work: false,
            exploratory: 0,
            decision_seconds: Vec::new(),
        })
    }

    /// Turns the choice of which work goes next on or off (off by default: the seed's placer).
    pub fn ordering(mut self, on: bool) -> Self {
        self.order_work = on;
        self
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
        let features =
            obs.tokens.iter().map(|t| NAMES.iter().zip(t).map(|(n, v)| (n.to_string(), *v as f64)).collect()).collect();
        let started = std::time::Instant::now();
        let choice = self.policy.decide(req.decision, obs);
        if self.decision_seconds.len() < MAX_DECISION_TIMES {
            self.decision_seconds.push(started.elapsed().as_secs_f64());
        }
        self.exploratory += u64::from(choice.as_ref().is_some_and(|c| c.exploratory));
        match choice {
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
            None => Decision {
                chosen: usize::MAX,
                scores: vec![f64::NAN; candidates.len()],
                exploratory: false,
                reason: "no feasible candidate".into(),
                features: Some(features),
            },
        }
    }

    fn orders_work(&self) -> bool {
        self.order_work
    }

    fn learning(&mut self) -> Option<LearningStats> {
        use std::sync::atomic::Ordering::Relaxed;
        let s = self.policy.stats();
        Some(LearningStats {
            decisions: self.policy.decisions(),
            exploratory: self.exploratory,
            experiences: s.experiences.load(Relaxed),
            training_steps: s.training_steps.load(Relaxed),
            loss: (s.training_steps.load(Relaxed) > 0).then(|| s.last_loss_micro.load(Relaxed) as f64 / 1e6),
            decision_seconds: std::mem::take(&mut self.decision_seconds),
        })
    }

    fn order(&mut self, work: &[ReadyWork]) -> Option<Vec<usize>> {
        if self.order_work { shortest_remaining_first(work) } else { None }
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

/// The GPU learner (issue 16): seed 002's interference MLP from `plexus-policy`, fed the
/// slowdowns the core measures (a shared run's time ÷ its signature's solo time), with the solo
/// times, persisted in the store's `policy` tree (keys `interference` and `gpu-solo`). Until the
/// MLP has learnt from [`MIN_SAMPLES`] shared runs it predicts with the analytic
/// [`ContentionModel`], whose guess is better than an untrained network's.
pub struct LearnedGpu {
    mlp: plexus_policy::InterferenceMlp,
    fallback: ContentionModel,
    tree: Option<crate::store::SharedKv>,
    /// Runs observed since the last save.
    unsaved: u32,
}

use plexus_scheduler::gpu::learner::{ContentionModel, GpuLearner, GpuRun, SoloTimes};
use plexus_scheduler::gpu::{InterferenceModel, TaskVector};

/// Shared runs the MLP learns from before its predictions are used.
pub const MIN_SAMPLES: u64 = 64;
/// Training steps after each shared run.
const STEPS_PER_SAMPLE: usize = 8;
/// Runs between saves of the model (a crash loses at most this much learning).
const SAVE_EVERY: u32 = 16;
const MODEL_KEY: &[u8] = b"interference";
const SOLO_KEY: &[u8] = b"gpu-solo";

impl LearnedGpu {
    /// The learner, restored from `tree` when it holds one (a corrupt value is logged and
    /// replaced by a fresh model, like the placement policy's weights).
    pub fn open(tree: Option<crate::store::SharedKv>, seed: u64) -> Result<LearnedGpu, plexus_policy::PolicyError> {
        let config = plexus_policy::InterferenceConfig { seed, ..plexus_policy::InterferenceConfig::default() };
        let stored = tree.as_ref().and_then(|t| t.get(MODEL_KEY).ok().flatten());
        let mlp = match stored.map(|b| plexus_policy::InterferenceMlp::from_bytes(&b)) {
            Some(Ok(m)) => m,
            Some(Err(e)) => {
                tracing::warn!(error = %e, "the stored interference model cannot be read; starting a new one");
                plexus_policy::InterferenceMlp::new(config)?
            }
            None => plexus_policy::InterferenceMlp::new(config)?,
        };
        let solo = tree
            .as_ref()
            .and_then(|t| t.get(SOLO_KEY).ok().flatten())
            .and_then(|b| SoloTimes::from_bytes(&b))
            .unwrap_or_default();
        Ok(LearnedGpu { mlp, fallback: ContentionModel { solo }, tree, unsaved: 0 })
    }

    pub fn model(&self) -> &plexus_policy::InterferenceMlp {
        &self.mlp
    }

    fn save(&mut self) {
        if let Some(t) = &self.tree {
            let r =
                t.put(MODEL_KEY, &self.mlp.to_bytes()).and_then(|_| t.put(SOLO_KEY, &self.fallback.solo.to_bytes()));
            if let Err(e) = r {
                tracing::warn!(error = %e, "could not save the interference model");
            }
        }
        self.unsaved = 0;
    }
}

impl InterferenceModel for LearnedGpu {
    fn predict(&self, tasks: &[TaskVector]) -> Vec<f64> {
        // A task alone on its GPU is not slowed, by definition (the MLP's 1 + softplus only
        // approaches 1: its largest error was on lone tasks, 5.6 % MAPE in the benchmark).
        if tasks.len() == 1 {
            return vec![1.0];
        }
        if self.mlp.observed() >= MIN_SAMPLES { self.mlp.predict(tasks) } else { self.fallback.predict(tasks) }
    }
}

impl GpuLearner for LearnedGpu {
    fn observe(&mut self, run: &GpuRun) {
        let task = self.fallback.complete(run.task);
        let Some(slowdown) = self.fallback.solo.record(run) else {
            self.unsaved += 1;
            if self.unsaved >= SAVE_EVERY {
                self.save();
            }
            return;
        };
        // The measured task first, its co-runners as context (a partial sample).
        let mut tasks = vec![task];
        tasks.extend(run.peers.iter().map(|p| self.fallback.complete(*p)));
        let sample = plexus_policy::Sample { tasks, slowdowns: vec![slowdown], weight: 1.0 };
        match self.mlp.observe(sample).and_then(|()| self.mlp.train_steps(STEPS_PER_SAMPLE)) {
            Ok(loss) => tracing::debug!(slowdown, ?loss, observed = self.mlp.observed(), "interference model trained"),
            Err(e) => tracing::warn!(error = %e, "interference sample refused"),
        }
        self.unsaved += 1;
        if self.unsaved >= SAVE_EVERY {
            self.save();
        }
    }

    fn complete(&self, v: TaskVector) -> TaskVector {
        self.fallback.complete(v)
    }

    fn name(&self) -> &str {
        if self.mlp.observed() >= MIN_SAMPLES { "interference-mlp" } else { "contention (the MLP is still learning)" }
    }
}

#[cfg(test)]
mod gpu_tests {
    use super::*;

    fn v(sig: u64, u: f64) -> TaskVector {
        TaskVector {
            gpu_memory: 8 << 30,
            device_memory: 80 << 30,
            utilisation: u,
            solo_ms: 0.0,
            model_bytes: 100 << 20,
            signature: sig,
        }
    }

    /// Solo runs teach solo times, shared runs train the MLP, which takes over after
    /// MIN_SAMPLES, and everything survives a reopen of the store with identical predictions.
    #[test]
    fn the_gpu_learner_learns_from_runs_and_persists_in_the_policy_tree() {
        let dir = tempfile::tempdir().unwrap();
        let db = sled::open(dir.path()).unwrap();
        let tree: crate::store::SharedKv =
            std::sync::Arc::new(crate::store::SledKv::new(db.open_tree("policy").unwrap(), false));
        let mut l = LearnedGpu::open(Some(tree.clone()), 7).unwrap();
        assert!(l.name().starts_with("contention"));
        for sig in 1..=4u64 {
            l.observe(&GpuRun {
                task: v(sig, 0.2 * sig as f64),
                measured_ms: 10.0 * sig as f64,
                per_iteration: true,
                peers: vec![],
            });
        }
        assert_eq!(l.complete(v(3, 0.6)).solo_ms, 30.0);
        for i in 0..(MIN_SAMPLES + 16) {
            let (a, b) = (1 + i % 4, 1 + (i / 4) % 4);
            // The truth: slowdown = 1 + u_a·u_b.
            let (ua, ub) = (0.2 * a as f64, 0.2 * b as f64);
            let run = GpuRun {
                task: v(a, ua),
                measured_ms: 10.0 * a as f64 * (1.0 + ua * ub),
                per_iteration: true,
                peers: vec![v(b, ub)],
            };
            l.observe(&run);
        }
        assert_eq!(l.name(), "interference-mlp");
        let probe = [l.complete(v(4, 0.8)), l.complete(v(3, 0.6))];
        let before = l.predict(&probe);
        assert!(before.iter().all(|s| s.is_finite() && *s >= 1.0), "{before:?}");
        l.save();
        drop(l);
        let back = LearnedGpu::open(Some(tree.clone()), 7).unwrap();
        assert_eq!(back.predict(&probe), before);
        assert_eq!(back.complete(v(3, 0.6)).solo_ms, 30.0);
        // A corrupt value is replaced, not fatal.
        tree.put(MODEL_KEY, b"garbage").unwrap();
        let fresh = LearnedGpu::open(Some(tree), 7).unwrap();
        assert!(fresh.name().starts_with("contention"));
    }
}
