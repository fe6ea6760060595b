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
//!
//! Features 0–5 are the seed's six; 6–9 give the network the node state the heuristics use, so it
//! is never worse informed than the baselines it is compared with.

/// Width of one token.
pub const FEATURES: usize = 10;

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
];

/// What is known about the task being placed.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct TaskFeatures {
    pub system_utilisation: f64,
    pub flops: f64,
    pub input_bytes: u64,
    pub writes: bool,
}

/// What is known about one candidate node.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct NodeFeatures {
    pub feasible: bool,
    pub cache_bytes: u64,
    pub cache_used: u64,
    pub local_input_bytes: u64,
    pub cpu_load: f64,
    pub cpu_utilisation: f64,
    pub gpu_free: bool,
}

/// A decision's input: one token per candidate and which candidates are feasible.
#[derive(Clone, Debug, PartialEq)]
pub struct Observation {
    pub tokens: Vec<[f32; FEATURES]>,
    pub feasible: Vec<bool>,
}

impl Observation {
    pub fn build(task: &TaskFeatures, nodes: &[NodeFeatures]) -> Observation {
        let t = [
            clamp01(task.system_utilisation),
            ((1.0 + task.flops.max(0.0)).log10() / 15.0) as f32,
            log2_norm(task.input_bytes),
            if task.writes { 1.0 } else { 0.0 },
        ];
        let tokens = nodes
            .iter()
            .map(|n| {
                let free = n.cache_bytes.saturating_sub(n.cache_used);
                let cache_free = if n.cache_bytes == 0 { 0.0 } else { free as f64 / n.cache_bytes as f64 };
                let overlap = if task.input_bytes == 0 { 0.0 } else { n.local_input_bytes as f64 / task.input_bytes as f64 };
                [
                    t[0],
                    t[1].min(1.0),
                    t[2],
                    t[3],
                    clamp01(cache_free),
                    clamp01(overlap),
                    clamp01(n.cpu_load),
                    clamp01(n.cpu_utilisation),
                    log2_norm(free),
                    if n.gpu_free { 1.0 } else { 0.0 },
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

fn clamp01(x: f64) -> f32 {
    if x.is_finite() { x.clamp(0.0, 1.0) as f32 } else { 0.0 }
}

fn log2_norm(bytes: u64) -> f32 {
    (((1.0 + bytes as f64).log2()) / 40.0).min(1.0) as f32
}

/// An operation count for a task without a `flops` hint: a core-second of work per requested
/// core at 1 GFLOP/s, so bigger requests read as heavier tasks.
pub fn estimate_flops(cpu: f64, gpu: u32) -> f64 {
    1e9 * cpu.max(0.1) + 1e11 * gpu as f64
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn features_are_normalised() {
        let task = TaskFeatures { system_utilisation: 0.5, flops: 1e9, input_bytes: 1 << 30, writes: true };
        let nodes = vec![
            NodeFeatures { feasible: true, cache_bytes: 1 << 30, cache_used: 1 << 28, local_input_bytes: 1 << 29, cpu_load: 0.25, cpu_utilisation: 2.0, gpu_free: false },
            NodeFeatures { feasible: false, ..Default::default() },
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
        assert!(o.tokens.iter().flatten().all(|x| (0.0..=1.0).contains(x)));
        // No inputs: overlap is 0, not NaN.
        let o = Observation::build(&TaskFeatures::default(), &nodes);
        assert_eq!(o.tokens[0][5], 0.0);
    }
}
