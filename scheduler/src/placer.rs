//! Placement: which worker runs a subtask.
//!
//! The core builds, for every ready subtask, a [`PlacementRequest`] and one [`Candidate`] per
//! live worker (feasible or not, so explanations can say why a node was ruled out) and asks the
//! [`Placer`] to choose among the feasible ones. Placers are pure: no I/O, no clock; randomness
//! comes from a seeded generator so runs repeat. The learned placer of seed 001 implements the
//! same trait in the coordinator (`plexus_coordinator::learned`, over the `policy` crate).

use plexus_proto::{Resources, WorkerId};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

/// What is being placed.
#[derive(Clone, Debug)]
pub struct PlacementRequest {
    /// Unique per decision; the [`Outcome`] of the placed attempt carries the same id, so a
    /// learning placer can pair its decisions with their rewards.
    pub decision: u64,
    pub job_age_ms: u64,
    pub resources: Resources,
    /// Total bytes of the subtask's inputs.
    pub input_bytes: u64,
    /// Operation-count hint from the job file.
    pub flops: Option<f64>,
    /// Whether the subtask writes outputs (a "write" request in seed 001's terms).
    pub writes: bool,
    /// What the subtask runs, hashed without its requests (`core::kind_key`: its command or
    /// kind), so that what is learnt of one kind of work carries across its requests and jobs;
    /// 0 where unknown.
    pub kind: u64,
}

/// One worker as seen for one decision.
#[derive(Clone, Debug)]
pub struct Candidate {
    pub worker: WorkerId,
    pub feasible: bool,
    /// Why it is not feasible.
    pub note: String,
    pub capacity: Resources,
    pub free: Resources,
    /// Attempts placed on it and not finished.
    pub assigned: u32,
    pub cpu_utilisation: f64,
    /// Bytes of this subtask's inputs already in its cache.
    pub local_input_bytes: u64,
    pub cache_bytes: u64,
    pub cache_used: u64,
    /// Estimated milliseconds to bring the subtask's inputs that are not in this worker's fast
    /// memory to it, from each object's cheapest source. The cluster simulator knows them
    /// exactly; the coordinator estimates them from measured fetches (`core::estimates`), and
    /// leaves `None` until some fetch was measured (`Some(0.0)` when nothing is to be fetched).
    pub est_fetch_ms: Option<f64>,
    /// Estimated milliseconds of compute for the subtask on this worker: the simulator's engine
    /// speeds, or the coordinator's measured run times (`None` until the same work, or work with
    /// a `flops` hint, has run somewhere).
    pub est_compute_ms: Option<f64>,
    /// How much slower than estimated this worker's latest attempts ran (measured ÷ estimated
    /// compute, recency-weighted: `core::estimates::Estimates::slowdown`); `None` until one was
    /// compared. What `fastest` does not look at: a worker that slowed down since its speeds
    /// were measured (co-tenants, memory-bound neighbours, throttling).
    pub recent_slowdown: Option<f64>,
    /// Whether `est_compute_ms` comes from this work's own runs on this worker
    /// (`core::estimates::Estimate::own`), not from the worker's speed over other work.
    pub est_compute_own: bool,
    /// Whether `est_compute_ms` comes from this worker's runs of this kind of work (its own runs
    /// of the work, or its rate over the kind: `core::estimates::Estimate::of_kind`), not only
    /// from its speed over other kinds: where it does not, `fastest` is blind to a worker fast
    /// or slow at this kind (`plexus_policy::correction::Correction::probe`).
    pub est_compute_kind: bool,
    /// What runs there: the (`PlacementRequest::kind`, cores) of each attempt placed on it and
    /// not finished. Filled only for a placer whose [`Placer::wants_running`] is true (the
    /// learned placer's correction reads it); empty otherwise, so the heuristics' decisions
    /// cost nothing more.
    pub running: Vec<(u64, f64)>,
}

impl Candidate {
    /// An idle feasible worker for tests and examples: id `n` (its last byte), 4 cores, 1 GiB of
    /// memory and of cache, all free; nothing placed or resident; no estimates. Change the
    /// fields a case needs with `Candidate { .., ..Candidate::example(n) }`.
    pub fn example(n: u8) -> Candidate {
        let mut b = [0u8; 16];
        b[15] = n;
        Candidate {
            worker: WorkerId::from_bytes(b),
            feasible: true,
            note: String::new(),
            capacity: Resources { cpu: 4.0, memory: 1 << 30, gpu: 0 },
            free: Resources { cpu: 4.0, memory: 1 << 30, gpu: 0 },
            assigned: 0,
            cpu_utilisation: 0.0,
            local_input_bytes: 0,
            cache_bytes: 1 << 30,
            cache_used: 0,
            est_fetch_ms: None,
            est_compute_ms: None,
            recent_slowdown: None,
            est_compute_own: false,
            est_compute_kind: false,
            running: Vec::new(),
        }
    }

    /// Fraction of its cores already promised to placed attempts.
    pub fn cpu_load(&self) -> f64 {
        if self.capacity.cpu <= 0.0 { 0.0 } else { 1.0 - self.free.cpu / self.capacity.cpu }
    }

    /// Estimated fetch + compute, when both are known.
    pub fn est_run_ms(&self) -> Option<f64> {
        Some(self.est_fetch_ms?.max(0.0) + self.est_compute_ms?.max(0.0))
    }

    /// Named features shown by `plexus explain`.
    pub fn features(&self) -> Vec<(String, f64)> {
        vec![
            ("free_cpu".into(), self.free.cpu),
            ("free_memory_mib".into(), self.free.memory as f64 / (1 << 20) as f64),
            ("free_gpu".into(), self.free.gpu as f64),
            ("assigned".into(), self.assigned as f64),
            ("cpu_utilisation".into(), self.cpu_utilisation),
            ("local_input_mib".into(), self.local_input_bytes as f64 / (1 << 20) as f64),
            ("cache_free_mib".into(), self.cache_bytes.saturating_sub(self.cache_used) as f64 / (1 << 20) as f64),
        ]
        .into_iter()
        .chain(self.est_fetch_ms.map(|v| ("est_fetch_ms".to_string(), v)))
        .chain(self.est_compute_ms.map(|v| ("est_compute_ms".to_string(), v)))
        .chain(self.recent_slowdown.map(|v| ("recent_slowdown".to_string(), v)))
        .collect()
    }
}

/// A placer's choice, with what it saw: one score per candidate (higher is better, `NaN` for
/// infeasible ones), and for learned placers the features it scored and whether it explored.
#[derive(Clone, Debug)]
pub struct Decision {
    pub chosen: usize,
    pub scores: Vec<f64>,
    pub exploratory: bool,
    pub reason: String,
    /// Per-candidate features, if the placer scored others than [`Candidate::features`].
    pub features: Option<Vec<Vec<(String, f64)>>>,
}

/// What was measured when a placed attempt ended; learned placers turn it into a reward.
#[derive(Clone, Debug)]
pub struct Outcome {
    /// The [`PlacementRequest::decision`] this is the outcome of.
    pub decision: u64,
    pub worker: WorkerId,
    pub succeeded: bool,
    pub wait_ms: u64,
    /// Compute: from the inputs being in place to the attempt's end (the worker starts its
    /// clock once they are fetched).
    pub run_ms: u64,
    /// Bringing the inputs in; fetch + run is what [`Candidate::est_run_ms`] estimates.
    pub fetch_ms: u64,
    pub fetched_bytes: u64,
    pub evicted_bytes: u64,
    pub cluster_utilisation: f64,
}

/// Chooses a worker for a subtask. `place` is called only with at least one feasible candidate
/// and must return one of them.
pub trait Placer: Send {
    fn name(&self) -> &'static str;
    fn place(&mut self, req: &PlacementRequest, candidates: &[Candidate]) -> Decision;
    /// Feedback about an earlier decision; heuristics ignore it.
    fn observe(&mut self, _outcome: &Outcome) {}
    /// Whether [`Placer::observe`] uses what it is given: false lets the core skip building
    /// each outcome (the cluster's utilisation in it is a pass over every worker, which at
    /// 5,000 workers cost more than the decision itself). The heuristics say false.
    fn learns(&self) -> bool {
        true
    }
    /// Which work goes next: the order in which to consider `work` (given in queue order), as
    /// a permutation of its indices; `None` keeps queue order (every heuristic). Only called
    /// when [`Placer::orders_work`] is true. The caller passes tasks of one priority with no
    /// gang between them, at most [`ORDER_WINDOW`], and applies [`bounded_order`]: whatever a
    /// placer answers, no task is overtaken more than [`MAX_OVERTAKEN`] times.
    fn order(&mut self, _work: &[ReadyWork]) -> Option<Vec<usize>> {
        None
    }
    /// A learning placer's counters for metrics (and the decision times measured since the
    /// last call, which it then forgets); `None` for heuristics.
    fn learning(&mut self) -> Option<LearningStats> {
        None
    }
    /// Whether [`Placer::order`] may answer anything but queue order (so callers skip building
    /// [`ReadyWork`] for placers that never reorder).
    fn orders_work(&self) -> bool {
        false
    }
    /// Whether the placer reads [`Candidate::running`]; false (every heuristic) lets the core
    /// skip listing what runs on each candidate.
    fn wants_running(&self) -> bool {
        false
    }
}

/// What a learning placer reports for metrics.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct LearningStats {
    pub decisions: u64,
    pub exploratory: u64,
    /// Experiences sent to training, and training steps completed.
    pub experiences: u64,
    pub training_steps: u64,
    /// The latest training loss, once a step ran.
    pub loss: Option<f64>,
    /// Seconds each decision took since the last report (at most [`MAX_DECISION_TIMES`]).
    pub decision_seconds: Vec<f64>,
    /// The training loss by training step, from the first step (thinned evenly past a few
    /// hundred points).
    pub curve: Vec<(u64, f64)>,
    /// Experiences per training step (the buffer a step waits for).
    pub step_every: u64,
    /// An anchored learner's record against its anchor (`fastest`); `None` for a learner that
    /// decides alone (`rl-seed`).
    pub anchor: Option<AnchorStats>,
}

/// An anchored learner's record against its anchor (`fastest`, see [`crate::anchor`]), for
/// metrics, `explain` and the dashboard.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct AnchorStats {
    /// Decisions taken with the anchor present.
    pub decisions: u64,
    /// Greedy departures from the anchor's choice, and how many were judged (outcome known).
    pub departures: u64,
    pub judged: u64,
    /// Σ over judged departures of (the anchor's choice's calibrated estimate − what the
    /// departure took), ms: positive when departing gained.
    pub gain_ms: f64,
    /// Σ of the anchor's calibrated estimates over judged departures, ms (the scale of `gain_ms`).
    pub anchor_ms: f64,
    pub explored: u64,
    /// The learner's proposals kept as the anchor's choice at random, as controls
    /// (`anchor::Kind::Withheld`).
    pub withheld: u64,
    /// Times the guard fell back to the anchor.
    pub fallbacks: u64,
    /// Probes: decisions sent, within the learner's stated budget, to a worker that had not run
    /// that kind of work (`anchor::Kind::Probed`).
    pub probes: u64,
    /// While the guard holds the learner back: why, in words.
    pub holding: Option<String>,
}

/// Decision times a learning placer keeps between two reports; later ones are not timed.
pub const MAX_DECISION_TIMES: usize = 65_536;

/// A task with ready subtasks, as a placer that chooses which work goes next sees it.
#[derive(Clone, Debug, PartialEq)]
pub struct ReadyWork {
    /// How long its job has existed.
    pub job_age_ms: u64,
    /// Its subtasks ready now.
    pub ready: u32,
    /// Subtasks of its job that have not ended (ready, waiting or running), this task's included.
    pub job_remaining: u32,
    /// The least estimated run of one of its subtasks on any live worker (measured speeds), when
    /// known.
    pub est_run_ms: Option<f64>,
    /// Rounds in which work queued after it went first while it was left waiting.
    pub overtaken: u32,
}

/// Tasks at the head of the ready queue a placer may reorder (the rest keep queue order).
pub const ORDER_WINDOW: usize = 32;

/// Rounds a task may be overtaken (work queued after it considered first while it is left
/// waiting) before it takes its queue-order place again ahead of all later work: the bound that
/// keeps a reordering placer from starving any job.
pub const MAX_OVERTAKEN: u32 = 16;

/// The order to consider `work` in (given in queue order), from a placer's answer: the tasks
/// overtaken [`MAX_OVERTAKEN`] times or more first, in queue order; then the others in the
/// placer's order. An answer that is not a permutation of `0..work.len()` is ignored (queue
/// order), so a wrong placer cannot lose or duplicate work.
pub fn bounded_order(work: &[ReadyWork], answer: Option<Vec<usize>>) -> Vec<usize> {
    let n = work.len();
    let mut order: Vec<usize> = match answer {
        Some(a)
            if a.len() == n && {
                let mut seen = vec![false; n];
                a.iter().all(|&i| i < n && !std::mem::replace(&mut seen[i], true))
            } =>
        {
            a
        }
        _ => (0..n).collect(),
    };
    // Stable: the starved keep queue order among themselves, the rest the placer's.
    order.sort_by_key(|&i| if work[i].overtaken >= MAX_OVERTAKEN { (0, i) } else { (1, 0) });
    order
}

/// Shortest remaining job first, on the measured estimates: each task scored by its job's
/// remaining subtasks × the estimated run of one of its subtasks (a task without an estimate
/// takes the mean of the known ones), least first, queue order among equals; `None` (queue
/// order) when no task has an estimate. The learned placer's choice of which work goes next
/// (Decima's lever: finishing short jobs first cuts the mean completion time the most).
pub fn shortest_remaining_first(work: &[ReadyWork]) -> Option<Vec<usize>> {
    let known: Vec<f64> = work.iter().filter_map(|w| w.est_run_ms).filter(|e| e.is_finite()).collect();
    if known.is_empty() {
        return None;
    }
    let mean = known.iter().sum::<f64>() / known.len() as f64;
    let score = |w: &ReadyWork| {
        f64::from(w.job_remaining.max(1)) * w.est_run_ms.filter(|e| e.is_finite()).unwrap_or(mean).max(0.0)
    };
    let mut order: Vec<usize> = (0..work.len()).collect();
    order.sort_by(|&a, &b| score(&work[a]).total_cmp(&score(&work[b])).then(a.cmp(&b)));
    Some(order)
}

/// Names accepted by `--placer` for the heuristics.
pub const HEURISTICS: &[&str] = &["least-loaded", "round-robin", "random", "locality", "fastest"];

/// Builds a heuristic placer by name, seeded.
pub fn heuristic(name: &str, seed: u64) -> Option<Box<dyn Placer>> {
    Some(match name {
        "least-loaded" => Box::new(LeastLoaded),
        "round-robin" => Box::new(RoundRobin::default()),
        "random" => Box::new(RandomPlacer::new(seed)),
        "locality" | "data-locality" => Box::new(Locality),
        "fastest" => Box::new(Fastest),
        _ => return None,
    })
}

fn best_by(candidates: &[Candidate], score: impl Fn(&Candidate) -> f64) -> (usize, Vec<f64>) {
    let scores: Vec<f64> = candidates.iter().map(|c| if c.feasible { score(c) } else { f64::NAN }).collect();
    let mut best = usize::MAX;
    for (i, s) in scores.iter().enumerate() {
        // Strictly greater, so ties go to the earliest candidate: deterministic.
        if !s.is_nan() && (best == usize::MAX || *s > scores[best]) {
            best = i;
        }
    }
    (best, scores)
}

/// Least-loaded: the feasible worker with the lowest share of its cores promised, then the
/// fewest placed attempts (so zero-cpu subtasks still spread), then the lowest measured
/// utilisation.
pub struct LeastLoaded;

impl LeastLoaded {
    fn score(c: &Candidate) -> f64 {
        -(c.cpu_load() * 1e6 + c.assigned as f64 * 10.0 + c.cpu_utilisation)
    }
}

impl Placer for LeastLoaded {
    fn learns(&self) -> bool {
        false
    }

    fn name(&self) -> &'static str {
        "least-loaded"
    }
    fn place(&mut self, _req: &PlacementRequest, candidates: &[Candidate]) -> Decision {
        let (chosen, scores) = best_by(candidates, Self::score);
        Decision {
            chosen,
            scores,
            exploratory: false,
            reason: "lowest promised cpu share, then fewest placed attempts".into(),
            features: None,
        }
    }
}

/// Round-robin over the feasible workers, by worker id order (the core sorts candidates).
#[derive(Default)]
pub struct RoundRobin {
    last: Option<WorkerId>,
}

impl Placer for RoundRobin {
    fn learns(&self) -> bool {
        false
    }

    fn name(&self) -> &'static str {
        "round-robin"
    }
    fn place(&mut self, _req: &PlacementRequest, candidates: &[Candidate]) -> Decision {
        // The next feasible worker after the last one chosen, wrapping around.
        let after = |c: &Candidate| self.last.is_none_or(|l| c.worker > l);
        let chosen = candidates
            .iter()
            .position(|c| c.feasible && after(c))
            .or_else(|| candidates.iter().position(|c| c.feasible))
            .unwrap_or(usize::MAX);
        let scores = candidates
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
        if let Some(c) = candidates.get(chosen) {
            self.last = Some(c.worker);
        }
        Decision {
            chosen,
            scores,
            exploratory: false,
            reason: "next feasible worker in id order".into(),
            features: None,
        }
    }
}

/// Uniformly random among the feasible workers, from a seeded generator.
pub struct RandomPlacer {
    rng: StdRng,
}

impl RandomPlacer {
    pub fn new(seed: u64) -> Self {
        RandomPlacer { rng: StdRng::seed_from_u64(seed) }
    }
}

impl Placer for RandomPlacer {
    fn learns(&self) -> bool {
        false
    }

    fn name(&self) -> &'static str {
        "random"
    }
    fn place(&mut self, _req: &PlacementRequest, candidates: &[Candidate]) -> Decision {
        let feasible: Vec<usize> = (0..candidates.len()).filter(|&i| candidates[i].feasible).collect();
        let chosen = if feasible.is_empty() { usize::MAX } else { feasible[self.rng.random_range(0..feasible.len())] };
        let scores = candidates
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
        Decision {
            chosen,
            scores,
            exploratory: false,
            reason: "uniformly random feasible worker".into(),
            features: None,
        }
    }
}

/// Data locality: the feasible worker already holding the most input bytes; ties (notably "no
/// worker holds any input") go to the most free cores, then the fewest placed attempts (so
/// zero-cpu subtasks still spread). The key is compared as a tuple: folding it into one float
/// loses the tie-break to rounding once resident bytes are large, and then every tie went to the
/// lowest worker id (found in the simulator, which measured the tuple rule at 0.93–0.99× the
/// mean response of the folded one). The tie-break is what makes this an honest baseline.
pub struct Locality;

impl Locality {
    fn key(c: &Candidate) -> (u64, f64, i64) {
        (c.local_input_bytes, c.free.cpu, -(c.assigned as i64))
    }
}

impl Placer for Locality {
    fn learns(&self) -> bool {
        false
    }

    fn name(&self) -> &'static str {
        "locality"
    }
    fn place(&mut self, _req: &PlacementRequest, candidates: &[Candidate]) -> Decision {
        let better =
            |a: &Candidate, b: &Candidate| Self::key(a).partial_cmp(&Self::key(b)) == Some(std::cmp::Ordering::Greater);
        let mut chosen = usize::MAX;
        for (i, c) in candidates.iter().enumerate().filter(|(_, c)| c.feasible) {
            if chosen == usize::MAX || better(c, &candidates[chosen]) {
                chosen = i;
            }
        }
        // Scores are ranks: 1 for the best key, 1/2 for the next, … (NaN for infeasible).
        let scores = candidates
            .iter()
            .map(|c| {
                if !c.feasible {
                    f64::NAN
                } else {
                    1.0 / (1.0 + candidates.iter().filter(|o| o.feasible && better(o, c)).count() as f64)
                }
            })
            .collect();
        Decision {
            chosen,
            scores,
            exploratory: false,
            reason: "most input bytes already resident, then most free cores, then fewest attempts".into(),
            features: None,
        }
    }
}

/// Fastest: the feasible worker where the subtask is estimated to be done soonest, the least
/// [`Candidate::est_fetch_ms`] + [`Candidate::est_compute_ms`] (the coordinator's measured
/// estimates, `core::estimates`; the simulator's exact ones there). Ties go to the most input
/// bytes resident, then the most free cores, then the earliest candidate: the simulator's
/// `fastest` rule, so both decide alike on the same estimates. When a feasible candidate has no
/// estimate (nothing like the subtask has run yet, or no fetch was ever measured) it places as
/// [`LeastLoaded`], and says so.
pub struct Fastest;

impl Fastest {
    /// Whether `a` is strictly better than `b`, both with estimates.
    fn better(a: &Candidate, b: &Candidate, ea: f64, eb: f64) -> bool {
        match ea.partial_cmp(&eb) {
            Some(std::cmp::Ordering::Less) => true,
            Some(std::cmp::Ordering::Equal) => {
                (a.local_input_bytes, a.free.cpu).partial_cmp(&(b.local_input_bytes, b.free.cpu))
                    == Some(std::cmp::Ordering::Greater)
            }
            _ => false,
        }
    }
}

impl Placer for Fastest {
    fn learns(&self) -> bool {
        false
    }

    fn name(&self) -> &'static str {
        "fastest"
    }
    fn place(&mut self, req: &PlacementRequest, candidates: &[Candidate]) -> Decision {
        let estimates: Option<Vec<f64>> =
            candidates.iter().map(|c| if c.feasible { c.est_run_ms() } else { Some(f64::NAN) }).collect();
        let Some(est) = estimates else {
            let mut d = LeastLoaded.place(req, candidates);
            d.reason = format!("no estimate for every feasible worker yet, so as least-loaded: {}", d.reason);
            return d;
        };
        let mut chosen = usize::MAX;
        for (i, c) in candidates.iter().enumerate().filter(|(_, c)| c.feasible) {
            if chosen == usize::MAX || Self::better(c, &candidates[chosen], est[i], est[chosen]) {
                chosen = i;
            }
        }
        // Scores: minus the estimate (higher is better), NaN for infeasible workers.
        let scores = est.iter().map(|e| -e).collect();
        Decision {
            chosen,
            scores,
            exploratory: false,
            reason: "least estimated fetch + compute, then most input bytes resident, then most free cores".into(),
            features: None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn work(job_remaining: u32, est: Option<f64>, overtaken: u32) -> ReadyWork {
        ReadyWork { job_age_ms: 0, ready: 1, job_remaining, est_run_ms: est, overtaken }
    }

    #[test]
    fn shortest_remaining_first_scores_remaining_subtasks_times_estimate() {
        // Scores: 3 × 100 = 300, 1 × 500 = 500, 2 × (mean of 100, 500, 50 = 216.67) = 433.3,
        // 10 × 50 = 500 (ties with the second: queue order).
        let w = [work(3, Some(100.0), 0), work(1, Some(500.0), 0), work(2, None, 0), work(10, Some(50.0), 0)];
        assert_eq!(shortest_remaining_first(&w), Some(vec![0, 2, 1, 3]));
        assert_eq!(
            shortest_remaining_first(&[work(1, None, 0), work(2, None, 0)]),
            None,
            "nothing measured: queue order"
        );
    }

    #[test]
    fn bounded_order_puts_the_starved_first_and_ignores_a_wrong_answer() {
        let w = [work(1, None, 0), work(1, None, MAX_OVERTAKEN), work(1, None, 3), work(1, None, MAX_OVERTAKEN + 4)];
        assert_eq!(
            bounded_order(&w, Some(vec![3, 2, 1, 0])),
            vec![1, 3, 2, 0],
            "starved in queue order, then the placer's"
        );
        assert_eq!(bounded_order(&w, None), vec![1, 3, 0, 2]);
        for bad in [vec![0, 1, 2], vec![0, 0, 1, 2], vec![0, 1, 2, 9]] {
            assert_eq!(bounded_order(&w, Some(bad.clone())), vec![1, 3, 0, 2], "{bad:?} is not a permutation");
        }
    }

    fn cand(n: u8, free_cpu: f64, assigned: u32, local: u64) -> Candidate {
        Candidate {
            free: Resources { cpu: free_cpu, memory: 1 << 30, gpu: 0 },
            assigned,
            local_input_bytes: local,
            ..Candidate::example(n)
        }
    }

    fn req() -> PlacementRequest {
        PlacementRequest {
            decision: 0,
            job_age_ms: 0,
            resources: Resources { cpu: 1.0, memory: 0, gpu: 0 },
            input_bytes: 0,
            flops: None,
            writes: false,
            kind: 0,
        }
    }

    #[test]
    fn least_loaded_prefers_free_cores_then_fewer_attempts() {
        let c = vec![cand(1, 1.0, 3, 0), cand(2, 3.0, 1, 0), cand(3, 3.0, 0, 0)];
        assert_eq!(LeastLoaded.place(&req(), &c).chosen, 2);
    }

    #[test]
    fn infeasible_candidates_are_never_chosen() {
        let mut c = vec![cand(1, 4.0, 0, 0), cand(2, 1.0, 2, 0)];
        c[0].feasible = false;
        for mut p in HEURISTICS.iter().map(|n| heuristic(n, 7).unwrap()) {
            for _ in 0..20 {
                let d = p.place(&req(), &c);
                assert_eq!(d.chosen, 1, "{}", p.name());
                assert!(d.scores[0].is_nan());
            }
        }
    }

    #[test]
    fn round_robin_cycles_in_id_order() {
        let c = vec![cand(1, 4.0, 0, 0), cand(2, 4.0, 0, 0), cand(3, 4.0, 0, 0)];
        let mut rr = RoundRobin::default();
        let picks: Vec<usize> = (0..5).map(|_| rr.place(&req(), &c).chosen).collect();
        assert_eq!(picks, vec![0, 1, 2, 0, 1]);
    }

    #[test]
    fn locality_prefers_resident_inputs_and_breaks_ties_by_load() {
        let c = vec![cand(1, 4.0, 0, 0), cand(2, 1.0, 3, 500), cand(3, 4.0, 0, 100)];
        assert_eq!(Locality.place(&req(), &c).chosen, 1);
        let c = vec![cand(1, 1.0, 3, 0), cand(2, 4.0, 0, 0)];
        assert_eq!(Locality.place(&req(), &c).chosen, 1, "with no resident input it acts as least-loaded");
        // Equal (large) resident bytes: the freer node wins, whatever its id.
        let c = vec![cand(1, 0.5, 6, 3 << 30), cand(2, 3.5, 1, 3 << 30)];
        assert_eq!(Locality.place(&req(), &c).chosen, 1);
    }

    #[test]
    fn fastest_takes_the_least_estimated_fetch_plus_compute() {
        let est = |mut c: Candidate, fetch: f64, compute: f64| {
            c.est_fetch_ms = Some(fetch);
            c.est_compute_ms = Some(compute);
            c
        };
        // 10 + 50 beats 0 + 70 (local data, slow node) and 40 + 30 (fast node, far data).
        let c = vec![
            est(cand(1, 4.0, 0, 100), 0.0, 70.0),
            est(cand(2, 4.0, 0, 0), 10.0, 50.0),
            est(cand(3, 4.0, 0, 0), 40.0, 30.0),
        ];
        let d = Fastest.place(&req(), &c);
        assert_eq!(d.chosen, 1);
        assert_eq!(d.scores, vec![-70.0, -60.0, -70.0]);
        // The best estimate on an infeasible worker does not count.
        let mut c2 = c.clone();
        c2[1].feasible = false;
        let d = Fastest.place(&req(), &c2);
        assert_eq!(d.chosen, 0, "tied at 70: more input bytes resident");
        assert!(d.scores[1].is_nan());
        // Equal estimates and resident bytes: the most free cores, then the earliest.
        let c = vec![
            est(cand(1, 1.0, 0, 0), 5.0, 5.0),
            est(cand(2, 3.0, 0, 0), 5.0, 5.0),
            est(cand(3, 3.0, 0, 0), 5.0, 5.0),
        ];
        assert_eq!(Fastest.place(&req(), &c).chosen, 1);
    }

    #[test]
    fn fastest_without_estimates_places_as_least_loaded() {
        let with = |mut c: Candidate| {
            c.est_fetch_ms = Some(0.0);
            c.est_compute_ms = Some(1.0);
            c
        };
        // Worker 3 would be fastest, but worker 2 has no compute estimate: least-loaded decides.
        let mut c = vec![with(cand(1, 1.0, 3, 0)), cand(2, 3.0, 1, 0), with(cand(3, 2.0, 0, 0))];
        c[1].est_fetch_ms = Some(0.0);
        let d = Fastest.place(&req(), &c);
        assert_eq!(d.chosen, LeastLoaded.place(&req(), &c).chosen);
        assert_eq!(d.chosen, 1);
        assert!(d.reason.starts_with("no estimate"), "{}", d.reason);
        // An infeasible worker without estimates does not matter.
        c[1].feasible = false;
        let d = Fastest.place(&req(), &c);
        assert_eq!(d.chosen, 2);
        assert!(d.reason.starts_with("least estimated"), "{}", d.reason);
    }

    #[test]
    fn random_is_seeded() {
        let c: Vec<Candidate> = (1..=8).map(|n| cand(n, 4.0, 0, 0)).collect();
        let run = |seed| {
            let mut p = RandomPlacer::new(seed);
            (0..32).map(|_| p.place(&req(), &c).chosen).collect::<Vec<_>>()
        };
        assert_eq!(run(3), run(3));
        assert_ne!(run(3), run(4));
    }
}
