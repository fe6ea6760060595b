//! The observation of seed 001, as numbers a network can read.
//!
//! One token per candidate node: the task's features (the same in every token) followed by the
//! node's. All features are normalised to roughly [0, 1] so no input dominates by its units.
//!
//! | index | feature | normalisation |
//! | --- | --- | --- |
//! | 0 | system utilisation (promised cores / all cores) | already a fraction |
//! | 1 | task operation count (flops hint, else estimate) | log10(1 + flops) / 15 |
//! | 2 | task input data size | log2(1 + bytes) / 40 |
//! | 3 | request type: writes outputs (1) or only reads (0) | 0 or 1 |
//! | 4 | node: free fast memory (cache) | fraction of its cache |
//! | 5 | node: overlap of the task's inputs with resident data | resident input bytes / input bytes |
//! | 6 | node: promised cpu share | fraction |
//! | 7 | node: measured cpu utilisation | fraction |
//! | 8 | node: free fast memory in bytes | log2(1 + bytes) / 40 |
//! | 9 | node: has a GPU free | 0 or 1 |
//! | 10 | node: estimated fetch time of the task's inputs not in its fast memory | ms / (ms + 1 s) |
//! | 11 | node: estimated compute time of the task on its engines | ms / (ms + 1 s) |
//! | 12 | node: estimated fetch + compute above the best candidate's | excess / (best + 1 s), ≤ 1 |
//! | 13 | node: bytes its fast memory would have to evict for the missing inputs | fraction of its cache |
//! | 14 | node: the estimates (10–12) are known | 0 or 1 |
//!
//! Features 0–5 are the seed's six; 6–9 give the network the node state the heuristics use, so it
//! is never worse informed than the baselines it is compared with. 10–14 are our addition (not
//! the seed's): the seed's observation says how much of a task's input a node holds, but not what
//! the rest costs to bring there (same rack or across the spine) nor how fast the node's engines
//! are, and without them the network can only learn "most resident bytes", which is the locality
//! heuristic. The estimates come from the caller ([`Candidate::est_fetch_ms`],
//! [`Candidate::est_compute_ms`]); where it has none they are 0 and feature 14 says so. Feature
//! 12 is the only one that compares candidates with each other (over the feasible ones): the
//! attention layers could learn that comparison, but online, with a few thousand decisions, a
//! network learns a per-token feature far sooner than an argmin across tokens.
//!
//! The compute estimate in 11 and 12 is corrected by how much slower than estimated the node's
//! latest tasks ran ([`Candidate::recent_slowdown`], bounded to [0.5, 4]; issue 34, item 2): the
//! measured means lag a node that slowed down since (memory-bound neighbours, a co-tenant, a
//! throttled CPU), and `fastest` ranks by them alone. Where no slowdown is known the features
//! are the estimates as given.

use plexus_scheduler::placer::{Candidate, PlacementRequest};

/// Width of one token.
pub const FEATURES: usize = 15;

/// Names of the token features, in order, for `plexus explain`.
pub const NAMES: [&str; FEATURES] = [
    "system_util",
    "task_flops",
    "task_input",
    "task_writes",
    "node_cache_free",
    "node_overlap",
    "node_cpu_load",
    "node_cpu_util",
    "node_cache_free_bytes",
    "node_gpu_free",
    "node_fetch_est",
    "node_compute_est",
    "node_finish_excess",
    "node_evict_est",
    "node_estimates_known",
];

/// Time scale of the estimate features: a 1 s estimate reads as 0.5.
const EST_SCALE_MS: f64 = 1000.0;

/// What is known about the task being placed.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct TaskFeatures {
    pub system_utilisation: f64,
    pub flops: f64,
    pub input_bytes: u64,
    pub writes: bool,
}

impl TaskFeatures {
    /// The task side of a decision: the request, and the share of the candidates' cores already
    /// promised (the seed's system utilisation).
    pub fn of(req: &PlacementRequest, candidates: &[Candidate]) -> TaskFeatures {
        let (used, total) = candidates
            .iter()
            .fold((0.0, 0.0), |(u, t), c| (u + (c.capacity.cpu - c.free.cpu).max(0.0), t + c.capacity.cpu));
        TaskFeatures {
            system_utilisation: if total > 0.0 { used / total } else { 0.0 },
            flops: req.flops.unwrap_or_else(|| estimate_flops(req.resources.cpu, req.resources.gpu)),
            input_bytes: req.input_bytes,
            writes: req.writes,
        }
    }
}

/// A decision's input: one token per candidate and which candidates are feasible.
#[derive(Clone, Debug, PartialEq)]
pub struct Observation {
    pub tokens: Vec<[f32; FEATURES]>,
    pub feasible: Vec<bool>,
}

/// The seed's own features: the first six of a token ([`Observation::seed_only`]).
pub const SEED_FEATURES: usize = 6;

impl Observation {
    /// The observation with only the seed's six features (`--placer rl-seed`): every other
    /// feature reads 0, so the network sees what the seed's network sees.
    pub fn seed_only(mut self) -> Observation {
        for t in &mut self.tokens {
            t[SEED_FEATURES..].fill(0.0);
        }
        self
    }

    /// One token per candidate, in the candidates' order: the scheduler's [`Candidate`] is read
    /// directly, so the policy sees exactly what the heuristics see.
    pub fn build(task: &TaskFeatures, nodes: &[Candidate]) -> Observation {
        let t = [
            clamp01(task.system_utilisation),
            ((1.0 + task.flops.max(0.0)).log10() / 15.0) as f32,
            log2_norm(task.input_bytes),
            if task.writes { 1.0 } else { 0.0 },
        ];
        // The best estimate among feasible candidates, for feature 12.
        let best = nodes.iter().filter(|n| n.feasible).filter_map(corrected_run_ms).fold(f64::INFINITY, f64::min);
        let tokens = nodes
            .iter()
            .map(|n| {
                let free = n.cache_bytes.saturating_sub(n.cache_used);
                let cache_free = if n.cache_bytes == 0 { 0.0 } else { free as f64 / n.cache_bytes as f64 };
                let overlap =
                    if task.input_bytes == 0 { 0.0 } else { n.local_input_bytes as f64 / task.input_bytes as f64 };
                let missing = task.input_bytes.saturating_sub(n.local_input_bytes);
                let evict =
                    if n.cache_bytes == 0 { 0.0 } else { missing.saturating_sub(free) as f64 / n.cache_bytes as f64 };
                let excess = match corrected_run_ms(n) {
                    Some(e) if best.is_finite() => (e - best).max(0.0) / (best + EST_SCALE_MS),
                    _ => 0.0,
                };
                [
                    t[0],
                    t[1].min(1.0),
                    t[2],
                    t[3],
                    clamp01(cache_free),
                    clamp01(overlap),
                    clamp01(n.cpu_load()),
                    clamp01(n.cpu_utilisation),
                    log2_norm(free),
                    if n.free.gpu > 0 { 1.0 } else { 0.0 },
                    n.est_fetch_ms.map_or(0.0, time_norm),
                    corrected_compute_ms(n).map_or(0.0, time_norm),
                    clamp01(excess),
                    clamp01(evict),
                    if n.est_run_ms().is_some() { 1.0 } else { 0.0 },
                ]
            })
            .collect();
        Observation { tokens, feasible: nodes.iter().map(|n| n.feasible).collect() }
    }

    pub fn len(&self) -> usize {
        self.tokens.len()
    }

    pub fn is_empty(&self) -> bool {
        self.tokens.is_empty()
    }
}

/// The node's compute estimate times its recent slowdown, when it has one.
fn corrected_compute_ms(n: &Candidate) -> Option<f64> {
    let ms = n.est_compute_ms?;
    Some(match n.recent_slowdown {
        Some(s) if s.is_finite() => ms * s.clamp(0.5, 4.0),
        _ => ms,
    })
}

/// [`Candidate::est_run_ms`] with the corrected compute estimate.
fn corrected_run_ms(n: &Candidate) -> Option<f64> {
    Some(n.est_fetch_ms?.max(0.0) + corrected_compute_ms(n)?.max(0.0))
}

fn clamp01(x: f64) -> f32 {
    if x.is_finite() { x.clamp(0.0, 1.0) as f32 } else { 0.0 }
}

/// Milliseconds to [0, 1): ms / (ms + 1 s), monotone, so orderings survive.
fn time_norm(ms: f64) -> f32 {
    let ms = if ms.is_finite() { ms.max(0.0) } else { 0.0 };
    (ms / (ms + EST_SCALE_MS)) as f32
}

fn log2_norm(bytes: u64) -> f32 {
    (((1.0 + bytes as f64).log2()) / 40.0).min(1.0) as f32
}

/// An operation count for a task without a `flops` hint: a core-second of work per requested
/// core at 1 GFLOP/s, so bigger requests read as heavier tasks.
pub fn estimate_flops(cpu: f64, gpu: u32) -> f64 {
    1e9 * cpu.max(0.1) + 1e11 * gpu as f64
}

/// A candidate with the node features the observation reads, for tests and benchmarks that make
/// up nodes: capacity 100 cores, so `cpu_load` is exact to two decimals; `gpu_free` gives it one
/// free GPU.
#[allow(clippy::too_many_arguments)]
pub fn candidate(
    feasible: bool,
    cache_bytes: u64,
    cache_used: u64,
    local_input_bytes: u64,
    cpu_load: f64,
    cpu_utilisation: f64,
    gpu_free: bool,
    est: Option<(f64, f64)>,
) -> Candidate {
    use plexus_proto::{Resources, WorkerId};
    let gpu = u32::from(gpu_free);
    Candidate {
        worker: WorkerId::from_bytes([0; 16]),
        feasible,
        note: String::new(),
        capacity: Resources { cpu: 100.0, memory: 0, gpu },
        free: Resources { cpu: 100.0 * (1.0 - cpu_load), memory: 0, gpu },
        assigned: 0,
        cpu_utilisation,
        local_input_bytes,
        cache_bytes,
        cache_used,
        est_fetch_ms: est.map(|e| e.0),
        est_compute_ms: est.map(|e| e.1),
        recent_slowdown: None,
        est_compute_own: false,
        est_compute_kind: false,
        running: Vec::new(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn features_are_normalised() {
        let task = TaskFeatures { system_utilisation: 0.5, flops: 1e9, input_bytes: 1 << 30, writes: true };
        let nodes = vec![
            candidate(true, 1 << 30, 1 << 28, 1 << 29, 0.25, 2.0, false, None),
            candidate(false, 0, 0, 0, 0.0, 0.0, false, None),
        ];
        let o = Observation::build(&task, &nodes);
        assert_eq!(o.len(), 2);
        assert_eq!(o.feasible, vec![true, false]);
        let a = o.tokens[0];
        assert_eq!(a[0], 0.5);
        assert!((a[1] - (1e9f64 + 1.0).log10() as f32 / 15.0).abs() < 1e-6);
        assert!((a[2] - 30.0 / 40.0).abs() < 1e-3);
        assert_eq!(a[3], 1.0);
        assert_eq!(a[4], 0.75);
        assert_eq!(a[5], 0.5);
        assert_eq!(a[7], 1.0, "utilisation is clamped");
        // Half the input (512 MiB) is missing and 768 MiB of cache is free: nothing to evict.
        assert_eq!(a[13], 0.0);
        assert_eq!(&a[10..13], &[0.0, 0.0, 0.0], "no estimates: zeros");
        assert_eq!(a[14], 0.0, "and the flag says they are unknown");
        assert!(o.tokens.iter().flatten().all(|x| (0.0..=1.0).contains(x)));
        // No inputs: overlap is 0, not NaN.
        let o = Observation::build(&TaskFeatures::default(), &nodes);
        assert_eq!(o.tokens[0][5], 0.0);
    }

    #[test]
    fn estimates_are_normalised_and_compared_among_feasible_candidates() {
        let task = TaskFeatures { system_utilisation: 0.5, flops: 1e9, input_bytes: 2 << 30, writes: false };
        let node = |feasible, fetch: f64, compute: f64, cache_used: u64| {
            candidate(feasible, 1 << 30, cache_used, 0, 0.0, 0.0, false, Some((fetch, compute)))
        };
        let nodes = vec![
            node(true, 1000.0, 1000.0, 0),
            node(true, 0.0, 1000.0, 1 << 29),
            // Infeasible and faster than everyone: it must not set the best.
            node(false, 0.0, 0.0, 0),
        ];
        let o = Observation::build(&task, &nodes);
        let (a, b, c) = (o.tokens[0], o.tokens[1], o.tokens[2]);
        assert_eq!((a[10], a[11]), (0.5, 0.5), "1 s reads as 0.5");
        assert_eq!(b[10], 0.0);
        // The best feasible estimate is b's 1 s; a's excess is 1 s / (1 s + 1 s).
        assert_eq!((a[12], b[12], c[12]), (0.5, 0.0, 0.0));
        // 2 GiB missing, 1 GiB free in a, 512 MiB free in b: evict 1 GiB (all of a's cache,
        // clamped) and 1.5 GiB (clamped).
        assert_eq!((a[13], b[13]), (1.0, 1.0));
        assert!(o.tokens.iter().all(|t| t[14] == 1.0));
        // With 1.5 GiB of the 2 GiB resident, a must evict nothing (1 GiB free).
        let o = Observation::build(&task, &[Candidate { local_input_bytes: 3 << 29, ..node(true, 0.0, 0.0, 0) }]);
        assert_eq!(o.tokens[0][13], 0.0);
        assert_eq!(o.tokens[0][12], 0.0, "a lone candidate is the best");
    }

    #[test]
    fn a_node_that_ran_slower_than_estimated_reads_as_slower() {
        let task = TaskFeatures { system_utilisation: 0.5, flops: 1e9, input_bytes: 0, writes: false };
        let node = |slowdown: Option<f64>| Candidate {
            recent_slowdown: slowdown,
            ..candidate(true, 1 << 30, 0, 0, 0.0, 0.0, false, Some((0.0, 500.0)))
        };
        // Both estimated at 0.5 s; the first ran three times slower lately: 1.5 s, 1 s behind.
        let o = Observation::build(&task, &[node(Some(3.0)), node(Some(1.0)), node(None)]);
        let (a, b, c) = (o.tokens[0], o.tokens[1], o.tokens[2]);
        assert_eq!(a[11], 0.6);
        assert!((b[11] - 1.0 / 3.0).abs() < 1e-6 && b[11] == c[11]);
        assert!((a[12] - 1000.0 / 1500.0).abs() < 1e-6);
        assert_eq!((b[12], c[12]), (0.0, 0.0));
        // Bounded: a wild ratio counts as four times, a NaN not at all.
        let o = Observation::build(&task, &[node(Some(1e9)), node(Some(f64::NAN))]);
        assert_eq!((o.tokens[0][11], o.tokens[1][11]), (2000.0 / 3000.0, 1.0 / 3.0));
    }
}
