//! The learned placers: seed 001's DQN policy from `plexus-policy`, fed the same candidates the
//! heuristics see. This adapter only translates: Q-values become scores, outcomes become reward
//! inputs (the policy reads the candidates itself). [`by_name`] builds any placer, heuristic or
//! learned, from its `--placer` name:
//! * `rl` — ours: the policy anchored on `fastest` (`plexus_scheduler::anchor`: it departs from
//!   fastest's choice only within a budget, and a guard takes it back to fastest when its
//!   departures measure worse), with our departures in learning (`PolicyConfig::ours()`, every
//!   feature), and the learned correction of the estimates (`plexus_policy::correction`)
//!   proposing the worker its corrected estimates put first (`propose`); `Learned::ordering`
//!   (which ready work goes next) is left off, as measured;
//! * `rl-seed` — the seed's configuration: its six features, its 512-wide network, its
//!   1,024/128/1,024 schedule and reward, ε-greedy over every feasible worker, no anchor.

use std::collections::BTreeMap;
use std::sync::Arc;

use plexus_policy::correction::{Context, Correction, PROBE_REACH};
use plexus_policy::features::NAMES;
use plexus_policy::{
    DqnPolicy, NetConfig, Observation, PolicyConfig, PolicyError, PolicyStore, RewardInputs, TaskFeatures,
};
use plexus_scheduler::anchor::{AnchorConfig, Guard, Kind};
use plexus_scheduler::placer::{
    Candidate, Decision, Fastest, HEURISTICS, LearningStats, MAX_DECISION_TIMES, Outcome, PlacementRequest, Placer,
    ReadyWork, heuristic, shortest_remaining_first,
};
use rand::SeedableRng;
use rand::rngs::StdRng;

use crate::error::Error;

/// Every name accepted by `--placer`: the heuristics, `rl` and `rl-seed`.
pub const PLACERS: &[&str] = &["least-loaded", "round-robin", "random", "locality", "fastest", "rl", "rl-seed"];

/// Whether `--placer NAME` is a learned placer (its policy page, metrics and store).
pub fn is_learned(name: &str) -> bool {
    name == "rl" || name == "rl-seed"
}

/// Builds a placer by name: a heuristic, or a learned policy persisting through `store`.
pub fn by_name(name: &str, seed: u64, store: Option<Arc<dyn PolicyStore>>) -> Result<Box<dyn Placer>, Error> {
    debug_assert!(HEURISTICS.iter().all(|h| PLACERS.contains(h)));
    match name {
        // Ours: the departures on, anchored on fastest. It does not choose which work goes next
        // (`ordering`): with the anchor, shortest-remaining-first cost 1.035 × fastest's mean
        // response on locality-heavy work in the simulator, 0.994 × without it (16 nodes).
        "rl" => {
            let config = PolicyConfig { seed, ..PolicyConfig::ours() };
            Ok(Box::new(Learned::new(config, store)?.anchored(AnchorConfig::default())))
        }
        "rl-seed" => Ok(Box::new(Learned::new(Learned::seed_config(seed), store)?.seed_features())),
        _ => heuristic(name, seed).ok_or_else(|| {
            Error::Scheduler(plexus_scheduler::Error::UnknownPlacer {
                name: name.to_string(),
                known: PLACERS.join(", "),
            })
        }),
    }
}

/// The learned placer `placer`'s record in words, for `plexus explain`: its decisions and
/// training steps, and for the anchored one how often it departed from fastest, what the judged
/// departures gained, and the guard's state. Empty for a heuristic.
pub fn summary(placer: &str, l: Option<&LearningStats>) -> String {
    let Some(l) = l.filter(|_| is_learned(placer)) else { return String::new() };
    let mut s = format!("{placer}: {} decisions, {} training steps", l.decisions, l.training_steps);
    if let Some(a) = &l.anchor {
        let share = if a.decisions == 0 { 0.0 } else { a.departures as f64 * 100.0 / a.decisions as f64 };
        s.push_str(&format!("; departed from fastest in {} ({share:.1} %)", a.departures));
        if a.withheld > 0 {
            s.push_str(&format!(", kept {} of its proposals as controls", a.withheld));
        }
        if a.probes > 0 {
            s.push_str(&format!(", probed {} times a worker that had not run the kind of work", a.probes));
        }
        if a.judged > 0 {
            let gain = if a.anchor_ms > 0.0 { a.gain_ms * 100.0 / a.anchor_ms } else { 0.0 };
            s.push_str(&format!(
                ", the {} judged gaining {:+.0} ms ({gain:+.1} % of fastest's estimate)",
                a.judged, a.gain_ms
            ));
        }
        match &a.holding {
            Some(why) => s.push_str(&format!("; the guard holds it to fastest: {why}")),
            None => s.push_str("; the guard trusts it"),
        }
    }
    s
}

pub struct Learned {
    policy: DqnPolicy,
    name: &'static str,
    /// Decision → the least estimated run among its feasible candidates, for decisions whose
    /// candidates carried estimates and whose outcome has not arrived (the reward's per-decision
    /// scale, see `RewardInputs::best_est_ms`).
    best_est: BTreeMap<u64, f64>,
    /// Whether it chooses which ready work goes next (shortest remaining job first on the
    /// measured estimates, `Placer::order`); off is the seed's placer, which only picks nodes.
    order_work: bool,
    /// The anchor on `fastest` and its guard (`rl`); `None`: the policy decides alone.
    guard: Option<Guard>,
    /// Only the seed's six features are seen (`rl-seed`).
    seed_only: bool,
    /// The learned correction of the estimates whose choice the anchored placer proposes
    /// (`rl`; `plexus_policy::correction`).
    correction: Option<Correction>,
    /// The anchored placer's exploration draws.
    rng: StdRng,
    exploratory: u64,
    /// Experiences per training step.
    step_every: u64,
    /// Seconds each decision took since metrics last read them.
    decision_seconds: Vec<f64>,
}

/// Decisions whose best estimate is kept while their outcome is awaited, at most; the oldest go
/// first (their attempts were lost), so memory stays bounded.
const MAX_AWAITED: usize = 100_000;

impl Learned {
    pub fn new(config: PolicyConfig, store: Option<Arc<dyn PolicyStore>>) -> Result<Self, PolicyError> {
        let (rng, step_every) = (StdRng::seed_from_u64(config.seed ^ 0xa5c4), config.buffer as u64);
        Ok(Learned {
            policy: DqnPolicy::new(config, store)?,
            name: "rl",
            best_est: BTreeMap::new(),
            order_work: false,
            guard: None,
            seed_only: false,
            correction: None,
            rng,
            exploratory: 0,
            step_every,
            decision_seconds: Vec::new(),
        })
    }

    /// The seed's configuration (`rl-seed`): its network (d = 512), schedule (1,024 / 128 /
    /// 1,024) and reward, ε = 0.05 over every feasible worker.
    pub fn seed_config(seed: u64) -> PolicyConfig {
        PolicyConfig { seed, net: NetConfig::seed(), ..PolicyConfig::default() }
    }

    /// Turns the choice of which work goes next on or off (off by default: the seed's placer).
    pub fn ordering(mut self, on: bool) -> Self {
        self.order_work = on;
        self
    }

    /// Anchors the policy on `fastest` (what `rl` runs), with the learned correction of the
    /// estimates proposing departures.
    pub fn anchored(mut self, config: AnchorConfig) -> Self {
        self.guard = Some(Guard::new(config));
        self.correction = Some(Correction::new());
        self
    }

    /// Turns the learned correction's proposals off (the anchored DQN alone), to measure what
    /// each brings.
    pub fn without_correction(mut self) -> Self {
        self.correction = None;
        self
    }

    /// Shows the policy only the seed's six features, and names it `rl-seed`.
    pub fn seed_features(mut self) -> Self {
        self.seed_only = true;
        self.name = "rl-seed";
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

    /// The anchored decision: fastest's choice, or the learner's within the guard's budget.
    fn anchored_choice(&mut self, req: &PlacementRequest, candidates: &[Candidate], obs: Observation) -> Decision {
        let anchor = Fastest.place(req, candidates).chosen;
        let q = self.policy.score(&obs);
        let scores: Vec<f64> = q.iter().map(|&v| if v.is_finite() { f64::from(v) } else { f64::NAN }).collect();
        let trained = self.policy.trained();
        let contexts: Vec<Context> = self
            .correction
            .as_mut()
            .map_or_else(Vec::new, |c| candidates.iter().map(|n| c.context(req.resources.cpu, n)).collect());
        let proposal = self.correction.as_ref().and_then(|c| propose(c, req, candidates, anchor, &contexts));
        let probe = match (&proposal, &self.correction) {
            (None, Some(c)) => c.probe(req.kind, candidates, anchor),
            _ => None,
        };
        let guard = self.guard.as_mut().expect("anchored_choice runs with a guard");
        let a = match probe {
            Some(p) => {
                let c = self.correction.as_mut().expect("a probe comes from the correction");
                c.probed(req.kind, candidates[p].worker);
                guard.probe(p, probe_reason(&candidates[p], &candidates[anchor]))
            }
            None => guard.decide_with(req.decision, candidates, anchor, &scores, trained, proposal, &mut self.rng),
        };
        if let (Some(c), Some(ctx), Some(est)) =
            (self.correction.as_mut(), contexts.get(a.chosen), candidates.get(a.chosen).and_then(|n| n.est_compute_ms))
        {
            c.remember(req.decision, req.kind, ctx.clone(), est);
        }
        self.policy.commit(req.decision, obs, a.chosen);
        let exploratory = matches!(a.kind, Kind::Explored | Kind::Probed);
        Decision { chosen: a.chosen, scores, exploratory, reason: a.reason, features: None }
    }
}

impl Placer for Learned {
    fn name(&self) -> &'static str {
        self.name
    }

    fn place(&mut self, req: &PlacementRequest, candidates: &[Candidate]) -> Decision {
        let mut obs = Self::observation(req, candidates);
        if self.seed_only {
            obs = obs.seed_only();
        }
        if let Some(b) = Self::best_estimate(candidates) {
            self.best_est.insert(req.decision, b);
            while self.best_est.len() > MAX_AWAITED {
                self.best_est.pop_first();
            }
        }
        let features: Vec<Vec<(String, f64)>> =
            obs.tokens.iter().map(|t| NAMES.iter().zip(t).map(|(n, v)| (n.to_string(), *v as f64)).collect()).collect();
        let started = std::time::Instant::now();
        let decision = if self.guard.is_some() {
            Some(self.anchored_choice(req, candidates, obs))
        } else {
            self.policy.decide(req.decision, obs).map(|c| Decision {
                chosen: c.index,
                scores: c.q.iter().map(|&q| if q.is_finite() { q as f64 } else { f64::NAN }).collect(),
                exploratory: c.exploratory,
                reason: if c.exploratory {
                    "exploration: a random feasible candidate other than the highest Q-value".into()
                } else {
                    "highest Q-value".into()
                },
                features: None,
            })
        };
        if self.decision_seconds.len() < MAX_DECISION_TIMES {
            self.decision_seconds.push(started.elapsed().as_secs_f64());
        }
        let mut d = decision.unwrap_or_else(|| Decision {
            chosen: usize::MAX,
            scores: vec![f64::NAN; candidates.len()],
            exploratory: false,
            reason: "no feasible candidate".into(),
            features: None,
        });
        self.exploratory += u64::from(d.exploratory);
        d.features = Some(features);
        d
    }

    fn orders_work(&self) -> bool {
        self.order_work
    }

    fn wants_running(&self) -> bool {
        self.correction.is_some()
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
            curve: s.curve.lock().unwrap_or_else(|p| p.into_inner()).points().to_vec(),
            step_every: self.step_every,
            anchor: self.guard.as_ref().map(Guard::stats),
        })
    }

    fn order(&mut self, work: &[ReadyWork]) -> Option<Vec<usize>> {
        if self.order_work { shortest_remaining_first(work) } else { None }
    }

    fn observe(&mut self, o: &Outcome) {
        // The reward's run time is the attempt's whole run: its fetch and its compute.
        let took_ms = o.fetch_ms.saturating_add(o.run_ms);
        let inputs = RewardInputs {
            utilisation: o.cluster_utilisation,
            fetch_ms: o.fetch_ms as f64,
            evicted_bytes: o.evicted_bytes,
            run_ms: took_ms as f64,
            best_est_ms: self.best_est.remove(&o.decision),
        };
        if let Some(g) = &mut self.guard {
            g.observe(o.decision, took_ms as f64, o.succeeded);
        }
        if let Some(c) = self.correction.as_mut().filter(|_| o.succeeded) {
            c.observe(o.decision, o.run_ms as f64);
        }
        self.policy.observe(o.decision, &inputs);
    }
}

/// A proposal must be estimated, corrected, this much faster than the anchor's choice.
const PROPOSAL_MARGIN: f64 = 0.15;

/// Why a probe went to `there` rather than to fastest's choice `anchor`, for `plexus explain`.
fn probe_reason(there: &Candidate, anchor: &Candidate) -> String {
    format!(
        "this worker has not run this kind of work, so its estimate comes from its speed over other work, to \
         which fastest is blind; one task of a kind goes to each such worker estimated at most {PROBE_REACH} × \
         fastest's choice, once: estimated {:.0} ms here, {:.0} ms for fastest's choice",
        there.est_run_ms().unwrap_or(f64::NAN),
        anchor.est_run_ms().unwrap_or(f64::NAN)
    )
}

/// The learned correction's choice, where it differs from `anchor` by more than the margin:
/// the least corrected fetch + compute among the feasible candidates (each candidate's compute
/// estimate times its learnt factor), with why. `None` without an estimate for every feasible
/// candidate, or where the correction agrees with fastest.
fn propose(
    c: &Correction,
    req: &PlacementRequest,
    candidates: &[Candidate],
    anchor: usize,
    contexts: &[Context],
) -> Option<(usize, String)> {
    let mut corrected = vec![f64::INFINITY; candidates.len()];
    for (i, n) in candidates.iter().enumerate().filter(|(_, n)| n.feasible) {
        corrected[i] = n.est_fetch_ms?.max(0.0) + n.est_compute_ms?.max(0.0) * c.factor(req.kind, contexts.get(i)?);
    }
    let best = (0..candidates.len()).min_by(|&a, &b| corrected[a].total_cmp(&corrected[b]).then(a.cmp(&b)))?;
    let there = *corrected.get(anchor)?;
    (best != anchor && corrected[best] < there * (1.0 - PROPOSAL_MARGIN)).then(|| {
        (
            best,
            format!(
                "the learned correction of the estimates (what runs beside it, its class of node, its recent \
                 slowdown) puts it at {:.0} ms against {there:.0} ms for fastest's choice, estimated {:.0} ms",
                corrected[best],
                candidates[anchor].est_run_ms().unwrap_or(f64::NAN)
            ),
        )
    })
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

#[cfg(test)]
mod placer_tests {
    use super::*;
    use plexus_proto::{Resources, WorkerId};
    use plexus_scheduler::placer::Outcome;

    fn cand(n: u8, est_ms: f64) -> Candidate {
        // Estimated from the worker's runs of the kind: nothing for `rl` to probe.
        Candidate {
            est_fetch_ms: Some(0.0),
            est_compute_ms: Some(est_ms),
            est_compute_kind: true,
            ..Candidate::example(n)
        }
    }

    fn req(decision: u64) -> PlacementRequest {
        PlacementRequest {
            decision,
            job_age_ms: 0,
            resources: Resources { cpu: 1.0, memory: 0, gpu: 0 },
            input_bytes: 1 << 20,
            flops: None,
            writes: true,
            kind: 0,
        }
    }

    fn outcome(decision: u64, run_ms: u64) -> Outcome {
        Outcome {
            decision,
            worker: WorkerId::from_bytes([0; 16]),
            succeeded: true,
            wait_ms: 0,
            run_ms,
            fetch_ms: 0,
            fetched_bytes: 0,
            evicted_bytes: 0,
            cluster_utilisation: 0.5,
        }
    }

    /// From its first decision `rl` places as fastest does, or explores only among workers
    /// estimated within the slack: never the far ones, whatever its fresh weights score.
    #[test]
    fn rl_starts_where_fastest_is_and_explores_only_near_it() {
        let mut p = by_name("rl", 3, None).unwrap();
        assert_eq!(p.name(), "rl");
        // Worker 2 is fastest (100 ms), worker 1 near (120 ms), workers 3 and 4 far.
        let c = vec![cand(1, 120.0), cand(2, 100.0), cand(3, 400.0), cand(4, 900.0)];
        let (mut followed, mut explored) = (0, 0);
        for id in 0..300 {
            let d = p.place(&req(id), &c);
            match d.chosen {
                1 => {
                    followed += 1;
                    assert!(!d.exploratory && d.reason.starts_with("as fastest"), "{}", d.reason);
                }
                0 => {
                    explored += 1;
                    assert!(d.exploratory && d.reason.starts_with("exploration"), "{}", d.reason);
                }
                far => panic!("decision {id} went to far worker {far}: {}", d.reason),
            }
            assert_eq!(d.features.as_ref().map(Vec::len), Some(4));
            p.observe(&outcome(id, 100));
        }
        assert!(followed > 250 && explored > 0, "followed {followed}, explored {explored}");
        let l = p.learning().unwrap();
        let a = l.anchor.clone().expect("rl is anchored");
        assert_eq!((a.decisions, a.departures, a.explored), (300, 0, explored));
        assert_eq!(l.step_every, 256);
        let s = summary("rl", Some(&l));
        assert!(s.contains("300 decisions") && s.contains("departed from fastest in 0") && s.contains("trusts"), "{s}");
        assert_eq!(summary("fastest", Some(&l)), "", "a heuristic has no learner line");
    }

    /// `rl` learns from outcomes what fastest's estimates miss (here: tasks of one kind run
    /// three times as long beside another kind) and departs from fastest's choice for it, a
    /// tenth of its proposals kept at random as controls; `explain` says why.
    #[test]
    fn rl_departs_where_its_correction_finds_fastests_choice_crowded() {
        let mut p = by_name("rl", 3, None).unwrap();
        assert!(p.wants_running() && !Fastest.wants_running());
        let crowded = |n, est| Candidate { running: vec![(9, 4.0)], est_compute_own: true, ..cand(n, est) };
        let calm = |n, est| Candidate { est_compute_own: true, ..cand(n, est) };
        let r = |d| PlacementRequest { kind: 5, ..req(d) };
        // Alone, a crowded worker takes 300 ms for an estimated 100, a calm one 100.
        for id in 0..200 {
            let c = if id % 2 == 0 { vec![crowded(1, 100.0)] } else { vec![calm(2, 100.0)] };
            assert_eq!(p.place(&r(id), &c).chosen, 0);
            p.observe(&outcome(id, if id % 2 == 0 { 300 } else { 100 }));
        }
        // Fastest now takes the crowded worker (100 < 150 ms); rl mostly does not.
        let c = vec![crowded(1, 100.0), calm(2, 150.0)];
        assert_eq!(Fastest.place(&r(0), &c).chosen, 0);
        let (mut departed, mut controls) = (0, 0);
        for id in 200..300 {
            let d = p.place(&r(id), &c);
            if d.chosen == 1 {
                departed += 1;
                assert!(d.reason.contains("learned correction"), "{}", d.reason);
            } else if d.reason.contains("control") {
                controls += 1;
            }
            p.observe(&outcome(id, if d.chosen == 0 { 300 } else { 150 }));
        }
        assert!(departed >= 75 && controls >= 3, "departed {departed}, controls {controls}");
        let a = p.learning().unwrap().anchor.unwrap();
        assert_eq!((a.withheld, a.fallbacks), (controls, 0));
        // Another kind has learnt nothing: placed as fastest.
        let d = p.place(&PlacementRequest { kind: 6, ..req(400) }, &c);
        assert_eq!(d.chosen, 0, "{}", d.reason);
        // Without the correction the anchored learner does not depart here.
        let mut q = Learned::new(PolicyConfig { seed: 3, ..PolicyConfig::ours() }, None)
            .unwrap()
            .anchored(AnchorConfig { epsilon: 0.0, ..AnchorConfig::default() })
            .without_correction();
        assert!(!q.wants_running());
        assert_eq!(q.place(&r(1), &c).chosen, 0);
    }

    /// A worker that has not run a kind of work is estimated by its speed over other work, to
    /// which fastest is blind: `rl` sends one task of the kind there (a probe) when it is
    /// estimated within `PROBE_REACH` × fastest's choice, once per worker and kind, never past
    /// the reach; `explain` and the stats say so.
    #[test]
    fn rl_probes_each_worker_blind_to_a_kind_once_within_the_reach() {
        let mut p = by_name("rl", 3, None).unwrap();
        let blind = |n, est| Candidate { est_compute_kind: false, ..cand(n, est) };
        // Worker 1 has run the kind (100 ms); 2 and 3 have not and are within the reach; 4 is
        // past it.
        let c = vec![
            Candidate { est_compute_kind: true, est_compute_own: true, ..cand(1, 100.0) },
            blind(2, 150.0),
            blind(3, 190.0),
            blind(4, 260.0),
        ];
        let r = |d| PlacementRequest { kind: 7, ..req(d) };
        let mut probed = Vec::new();
        for id in 0..200 {
            let d = p.place(&r(id), &c);
            if d.reason.starts_with("probe:") {
                assert!(d.exploratory && d.reason.contains("not run this kind"), "{}", d.reason);
                probed.push(d.chosen);
            }
            assert_ne!(d.chosen, 3, "past the reach: {}", d.reason);
            p.observe(&outcome(id, 100));
        }
        assert_eq!(probed, [1, 2], "the nearest first, each once");
        // Another kind probes them again.
        assert!(p.place(&PlacementRequest { kind: 8, ..req(500) }, &c).reason.starts_with("probe:"));
        let l = p.learning().unwrap();
        assert_eq!(l.anchor.as_ref().unwrap().probes, 3);
        assert!(summary("rl", Some(&l)).contains("probed 3 times"), "{}", summary("rl", Some(&l)));
    }

    /// `rl-seed` is the seed's configuration: only the seed's six features, no anchor, its
    /// schedule (a training step every 1,024 experiences).
    #[test]
    fn rl_seed_sees_only_the_seeds_features_and_decides_alone() {
        let mut p = by_name("rl-seed", 3, None).unwrap();
        assert_eq!(p.name(), "rl-seed");
        let c = vec![cand(1, 120.0), cand(2, 100.0)];
        let d = p.place(&req(1), &c);
        let f = d.features.unwrap();
        for token in &f {
            assert!(token[plexus_policy::features::SEED_FEATURES..].iter().all(|(_, v)| *v == 0.0), "{token:?}");
            assert_ne!(token[2].1, 0.0, "the task's input size is one of the seed's features");
        }
        let l = p.learning().unwrap();
        assert!(l.anchor.is_none());
        assert_eq!(l.step_every, 1024);
        assert!(!summary("rl-seed", Some(&l)).contains("fastest"));
        assert!(by_name("rl-sed", 3, None).is_err_and(|e| e.to_string().contains("rl-seed")));
    }
}
