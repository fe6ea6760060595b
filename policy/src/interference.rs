//! The interference model of seed 002 (claim 3, issue 16 item 2): an MLP that predicts how much
//! tasks sharing one GPU slow each other down, trained online on measured slowdowns.
//!
//! # Features
//! A [`TaskVector`] becomes [`FEATURES`] numbers ([`task_features`], names in [`FEATURE_NAMES`]):
//!
//! | index | feature | form |
//! | --- | --- | --- |
//! | 0 | memory fraction | ln(1/1024 + gpu_memory / device_memory), the fraction clamped to [0, 1] and 0 when the device size is unknown |
//! | 1 | utilisation alone | clamped to [0, 1] |
//! | 2 | solo run (or iteration) time | ln(1 + ms) |
//! | 3 | model size | ln(1 + MiB) |
//! | 4–11 | signature bucket | one-hot of `mix(signature) mod 8`; all 0 for signature 0 (unknown) |
//!
//! Features 0–3 are standardised by a running [`Normaliser`] (Welford's mean and variance over
//! every observed task vector, persisted with the model); the one-hot is left as it is. The first
//! layer's eight columns for the buckets are a learned embedding of the signature by hash bucket
//! (a one-hot times a matrix is a row lookup): tasks of one signature share a learned offset,
//! and unrelated signatures that collide share it too, which costs accuracy, not correctness.
//!
//! # Architecture: n+1 vectors → n+1 slowdowns
//! The seed's MLP reads the n+1 task vectors sharing a GPU and answers n+1 slowdowns; its first
//! layer concatenates the vectors, which fixes n. We need any n (the tasks sharing a GPU vary
//! from placement to placement) and an answer that does not depend on the order the tasks are listed in, so the n+1 outputs
//! come from one shared MLP applied to each task's row ([`INPUTS`] numbers):
//!
//! `row_i = [own features_i | mean of the others' features (0 when alone) | n / 8 |
//!           Σ_all utilisation | Σ_all memory fraction]`
//!
//! The sums run over all n+1 tasks on raw (unstandardised) values: contention grows with the
//! total demand a GPU carries, which a mean and a count give only as a product, and ReLU layers
//! approximate a product poorly from few samples. The map is permutation-equivariant by
//! construction (permuting the tasks permutes the rows, and nothing else changes).
//!
//! The MLP is the seed's: `φ_l = ReLU(W_lᵀ φ_{l−1} + b_l)` for the hidden layers
//! ([`InterferenceConfig::hidden`], default 64, 64), then the output `ŷ = σ(hᵀ φ_L + b)` with the
//! seed's "mapping" σ chosen as `σ(x) = 1 + softplus(x)`, so a predicted slowdown is always > 1.
//!
//! # Loss (claim 3)
//! Claim 3 trains by gradient descent on the mean squared error between the predicted slowdown
//! vector ŷ_t and the measured z_t, with training-sample weights w_t and an L2 penalty of weight λ
//! on the weight matrices; its formula image is lost, its symbols survive: λ, w_t, and an m the
//! text calls the dimension of the task vector. We read m as the number of predicted elements, the
//! slowdown vectors' lengths summed over the batch (m = Σ_t (n_t + 1)), which makes the first term
//! the mean that "mean squared error" says (the 12 features' count would only rescale the loss):
//!
//! `L = (1/m) · Σ_t w_t · Σ_i (ŷ_ti − z_ti)²  +  λ · (Σ_l ‖W_l‖²_F + ‖h‖²)`
//!
//! With every w_t = 1 the first term is exactly the mean squared error over the predicted
//! elements. Biases are not penalised (the claim names the weight matrices). The update is plain
//! gradient descent on mini-batches ([`InterferenceConfig::batch`] samples drawn uniformly, with
//! replacement, from the replay buffer), learning rate [`InterferenceConfig::learning_rate`].
//!
//! # Training data
//! A [`Sample`] is what one measurement gives: the vectors of the tasks that shared a GPU, each
//! one's measured slowdown (run or iteration time shared ÷ alone, for its signature), and a weight
//! (e.g. the number of runs averaged into it). A sample may measure only some of its tasks (a
//! worker reports one task's run and the tasks beside it): the others still shape the measured
//! ones' rows, and only measured elements enter the loss and count in m. [`InterferenceMlp::observe`] adds it to a bounded
//! FIFO replay buffer; [`InterferenceMlp::train_steps`] makes gradient steps on it.
//!
//! # Inference
//! Predictions come from a [`Predictor`]: a plain-Rust copy of the weights and the normaliser,
//! refreshed after every training call and observation. A prediction makes no libtorch call: a
//! tch forward of 4 rows costs ~13 µs, mostly per-op overhead, against ~2 µs for the same
//! arithmetic here (release build, 2-core machine), and a search asks thousands of times. It is
//! `Clone + Send + Sync`, so it can be handed to a search on any thread. A test checks it against
//! the tch forward that training differentiates.
//!
//! # Persistence
//! [`InterferenceMlp::to_bytes`] / [`InterferenceMlp::from_bytes`]: one self-describing blob
//! (magic, version, configuration, counters, sampling state, normaliser, weights, the replay
//! buffer, an FNV-1a checksum) for the coordinator to keep under one key. The buffer dominates
//! its size: 48 bytes per buffered task and 8 per measured slowdown, ~0.5 MB for 4096 samples of
//! two tasks.
//! Anything malformed is an error naming what and where, never a panic.
//!
//! Seeded and deterministic: the weights are initialised from the configured seed by the crate's
//! own generator (not libtorch's global one), batches are drawn from a generator whose state is
//! persisted, and libtorch runs on the CPU with one intra-op thread (as the placement policy).

use std::collections::VecDeque;

use plexus_scheduler::gpu::{InterferenceModel, TaskVector};
use tch::nn::{self, OptimizerConfig};
use tch::{Device, Kind, Tensor};

use crate::PolicyError;

mod codec;

/// Number of signature buckets (the one-hot part of a task's features).
pub const BUCKETS: usize = 8;
/// Features standardised by the normaliser (0–3).
pub const NUMERIC: usize = 4;
/// Width of one task's feature vector.
pub const FEATURES: usize = NUMERIC + BUCKETS;
/// Width of one task's row into the MLP: own features, the others' mean, n / 8, and the two sums.
pub const INPUTS: usize = 2 * FEATURES + 3;
/// Tasks in one sample, at most (a GPU shared by more is not something we schedule).
pub const MAX_SHARE: usize = 64;

/// Names of the features, in order.
pub const FEATURE_NAMES: [&str; FEATURES] = [
    "mem_fraction_log",
    "utilisation",
    "solo_ms_log",
    "model_mib_log",
    "sig0",
    "sig1",
    "sig2",
    "sig3",
    "sig4",
    "sig5",
    "sig6",
    "sig7",
];

/// Floor added to the memory fraction before the logarithm: 1 MiB of a 1 GiB device, below
/// which differences in footprint do not matter for contention.
const MEM_FLOOR: f64 = 1.0 / 1024.0;
/// Divides n in the row: with the up to 8 tasks a GPU usually holds, n / 8 stays within [0, 1)
/// (more tasks only take it past 1).
const COUNT_SCALE: f32 = 8.0;
/// The output bias starts where σ gives 1.1: an untrained model predicts mild interference
/// instead of softplus(0) = +69 %.
const INITIAL_SLOWDOWN: f64 = 1.1;

/// A task vector as the network's features (see the module's table). Never NaN.
pub fn task_features(t: &TaskVector) -> [f32; FEATURES] {
    let mut f = [0f32; FEATURES];
    f[0] = (MEM_FLOOR + mem_fraction(t)).ln() as f32;
    f[1] = utilisation(t) as f32;
    f[2] = finite_nonneg(t.solo_ms).ln_1p() as f32;
    f[3] = (t.model_bytes as f64 / (1u64 << 20) as f64).ln_1p() as f32;
    if t.signature != 0 {
        f[NUMERIC + (mix64(t.signature) % BUCKETS as u64) as usize] = 1.0;
    }
    f
}

fn mem_fraction(t: &TaskVector) -> f64 {
    if t.device_memory == 0 { 0.0 } else { (t.gpu_memory as f64 / t.device_memory as f64).min(1.0) }
}

fn utilisation(t: &TaskVector) -> f64 {
    finite_nonneg(t.utilisation).min(1.0)
}

fn finite_nonneg(x: f64) -> f64 {
    if x.is_finite() && x > 0.0 { x } else { 0.0 }
}

/// splitmix64's finaliser: spreads a signature's bits so `mod BUCKETS` uses all of them.
fn mix64(mut z: u64) -> u64 {
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// The batch sampler's generator (splitmix64): its whole state is one u64, so it persists.
#[derive(Clone, Debug)]
struct SplitMix(u64);

impl SplitMix {
    fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        mix64(self.0)
    }
    /// Uniform in [0, n) (n > 0; the modulo bias is below 2⁻⁴⁰ for any buffer we keep).
    fn below(&mut self, n: usize) -> usize {
        (self.next_u64() % n as u64) as usize
    }
    /// Uniform in [−bound, bound).
    fn symmetric(&mut self, bound: f64) -> f32 {
        let u = (self.next_u64() >> 11) as f64 / (1u64 << 53) as f64;
        ((2.0 * u - 1.0) * bound) as f32
    }
}

/// Running mean and variance (Welford) of features 0–3 over every observed task vector.
/// With fewer than two vectors, or a feature that has not varied, that feature is only centred.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Normaliser {
    count: u64,
    mean: [f64; NUMERIC],
    m2: [f64; NUMERIC],
}

impl Normaliser {
    fn update(&mut self, f: &[f32; FEATURES]) {
        self.count += 1;
        for ((x, mean), m2) in f.iter().zip(&mut self.mean).zip(&mut self.m2) {
            let x = *x as f64;
            let d = x - *mean;
            *mean += d / self.count as f64;
            *m2 += d * (x - *mean);
        }
    }

    fn apply(&self, f: &mut [f32; FEATURES]) {
        for ((x, mean), m2) in f.iter_mut().zip(&self.mean).zip(&self.m2) {
            let var = if self.count > 1 { m2 / (self.count - 1) as f64 } else { 0.0 };
            // A feature that has barely varied keeps its scale (dividing by ~0 would blow it up).
            let sd = if var > 1e-6 { var.sqrt() } else { 1.0 };
            *x = ((*x as f64 - mean) / sd) as f32;
        }
    }

    /// Vectors seen so far.
    pub fn count(&self) -> u64 {
        self.count
    }
}

/// The MLP's rows of the first `wanted` of the tasks sharing one GPU (all of them take part in
/// the others' means and the sums), appended to `out` (`wanted` × [`INPUTS`]).
fn push_rows(tasks: &[TaskVector], wanted: usize, norm: &Normaliser, out: &mut Vec<f32>) {
    let k = tasks.len();
    let feats: Vec<[f32; FEATURES]> = tasks
        .iter()
        .map(|t| {
            let mut f = task_features(t);
            norm.apply(&mut f);
            f
        })
        .collect();
    let mut sum = [0f32; FEATURES];
    for f in &feats {
        for (s, x) in sum.iter_mut().zip(f) {
            *s += x;
        }
    }
    let util: f64 = tasks.iter().map(utilisation).sum();
    let mem: f64 = tasks.iter().map(mem_fraction).sum();
    let others = (k - 1) as f32;
    for f in feats.iter().take(wanted) {
        out.extend_from_slice(f);
        for (s, x) in sum.iter().zip(f) {
            out.push(if k > 1 { (s - x) / others } else { 0.0 });
        }
        out.push(others / COUNT_SCALE);
        out.push(util as f32);
        out.push(mem as f32);
    }
}

/// One measurement: tasks that shared a GPU, the measured slowdowns of the first of them (all,
/// or only some: a worker may report one task's run with the tasks that ran beside it, whose own
/// slowdowns arrive in their own samples), and the sample's weight.
#[derive(Clone, Debug, PartialEq)]
pub struct Sample {
    /// Every task that shared the GPU, the measured ones first.
    pub tasks: Vec<TaskVector>,
    /// `slowdowns[i]`: task i's run (or iteration) time shared ÷ its solo time, for i below
    /// `slowdowns.len()` (1 to `tasks.len()`); the tasks after those are context only.
    pub slowdowns: Vec<f64>,
    /// The sample's weight w_t in the loss (> 0), e.g. the number of runs averaged into it.
    pub weight: f64,
}

impl Sample {
    fn validate(&self) -> Result<(), PolicyError> {
        let k = self.tasks.len();
        if k == 0 || k > MAX_SHARE {
            return Err(PolicyError::Sample(format!("{k} tasks; a sample has 1 to {MAX_SHARE}")));
        }
        if self.slowdowns.is_empty() || self.slowdowns.len() > k {
            return Err(PolicyError::Sample(format!(
                "{} slowdowns for {k} tasks; a sample measures 1 to all of its tasks",
                self.slowdowns.len()
            )));
        }
        if let Some((i, s)) = self.slowdowns.iter().enumerate().find(|(_, s)| !(s.is_finite() && **s > 0.0)) {
            return Err(PolicyError::Sample(format!("slowdown {i} is {s}; it must be finite and > 0")));
        }
        if !(self.weight.is_finite() && self.weight > 0.0) {
            return Err(PolicyError::Sample(format!("weight is {}; it must be finite and > 0", self.weight)));
        }
        Ok(())
    }
}

/// Everything that shapes the model.
#[derive(Clone, Debug, PartialEq)]
pub struct InterferenceConfig {
    /// Widths of the hidden ReLU layers (1 to 8 layers, each 1 to 1024 wide).
    pub hidden: Vec<usize>,
    /// λ, the L2 weight of the loss.
    pub lambda: f64,
    /// The gradient-descent step.
    pub learning_rate: f64,
    /// Samples per gradient step.
    pub batch: usize,
    /// Replay buffer capacity in samples; the oldest goes first.
    pub capacity: usize,
    pub seed: u64,
}

impl Default for InterferenceConfig {
    fn default() -> Self {
        // Measured on the tests' synthetic ground truth (held-out MAPE, model seeds 11–13, 4,000
        // samples). Width: after 5,000 steps two layers of 32 reach 2.7–2.8 %, of 64 2.6–3.1 %, of
        // 128 2.3–2.6 %, three of 64 2.6–3.1 %; after 15,000, 32 wide 1.9 %, 64 wide 1.7–1.9 %.
        // 64 costs ~0.5 µs per predicted task. Step: 0.02 learns slower (3.6–4.3 % after 3,000
        // steps, against 3.3–3.8 % at 0.05); 0.1 and 0.2 are a little better on average, but their
        // error jumps to 6–9 % between evaluations, which a search asking at that moment would see.
        InterferenceConfig {
            hidden: vec![64, 64],
            lambda: 1e-4,
            learning_rate: 0.05,
            batch: 64,
            capacity: 4096,
            seed: 1,
        }
    }
}

impl InterferenceConfig {
    fn validate(&self) -> Result<(), PolicyError> {
        let bad = |m: String| Err(PolicyError::Config(m));
        if self.hidden.is_empty() || self.hidden.len() > 8 || self.hidden.iter().any(|&w| w == 0 || w > 1024) {
            return bad(format!("hidden layers {:?}: 1 to 8 layers of 1 to 1024", self.hidden));
        }
        if !(self.lambda.is_finite() && self.lambda >= 0.0) {
            return bad(format!("lambda {} must be finite and ≥ 0", self.lambda));
        }
        if !(self.learning_rate.is_finite() && self.learning_rate > 0.0) {
            return bad(format!("learning rate {} must be finite and > 0", self.learning_rate));
        }
        if self.batch == 0 || self.batch > 1 << 16 {
            return bad(format!("batch {} must be 1 to 65536", self.batch));
        }
        if self.capacity == 0 || self.capacity > 1 << 20 {
            return bad(format!("capacity {} must be 1 to 1048576", self.capacity));
        }
        Ok(())
    }

    /// (inputs, outputs) of each linear layer, the output layer last.
    fn shapes(&self) -> Vec<(usize, usize)> {
        let mut v = Vec::with_capacity(self.hidden.len() + 1);
        let mut i = INPUTS;
        for &w in &self.hidden {
            v.push((i, w));
            i = w;
        }
        v.push((i, 1));
        v
    }
}

/// One linear layer in plain numbers: `w` is `out × inp`, row-major (libtorch's layout).
#[derive(Clone, Debug, PartialEq)]
struct Dense {
    inp: usize,
    out: usize,
    w: Vec<f32>,
    b: Vec<f32>,
}

/// A [`Dense`] laid out for inference: `wt` is `inp × out` (transposed), so a layer is a sum of
/// input-scaled weight rows, each over contiguous outputs, which the compiler vectorises, and the
/// rows of zero inputs (ReLU's cut-offs, the one-hot's other buckets) are skipped.
#[derive(Clone, Debug, PartialEq)]
struct Layer {
    inp: usize,
    out: usize,
    wt: Vec<f32>,
    b: Vec<f32>,
}

impl Layer {
    fn of(d: &Dense) -> Layer {
        let mut wt = vec![0f32; d.inp * d.out];
        for o in 0..d.out {
            for i in 0..d.inp {
                wt[i * d.out + o] = d.w[o * d.inp + i];
            }
        }
        Layer { inp: d.inp, out: d.out, wt, b: d.b.clone() }
    }

    fn dense(&self) -> Dense {
        let mut w = vec![0f32; self.inp * self.out];
        for o in 0..self.out {
            for i in 0..self.inp {
                w[o * self.inp + i] = self.wt[i * self.out + o];
            }
        }
        Dense { inp: self.inp, out: self.out, w, b: self.b.clone() }
    }
}

/// The model's inference side: weights and normaliser as plain numbers. Cheap to clone, `Send +
/// Sync`, no libtorch.
#[derive(Clone, Debug, PartialEq)]
pub struct Predictor {
    layers: Vec<Layer>,
    norm: Normaliser,
}

impl Predictor {
    /// Slowdowns for the rows in `rows` (`INPUTS` each), appended to `out`.
    fn forward(&self, rows: &[f32], out: &mut Vec<f64>) {
        let widest = self.layers.iter().map(|l| l.out).max().unwrap_or(1);
        let mut a = vec![0f32; widest];
        let mut b = vec![0f32; widest];
        let last = self.layers.len() - 1;
        for row in rows.chunks_exact(INPUTS) {
            for (li, l) in self.layers.iter().enumerate() {
                let x: &[f32] = if li == 0 { row } else { &a[..l.inp] };
                let z = &mut b[..l.out];
                z.copy_from_slice(&l.b);
                for (&xi, w) in x.iter().zip(l.wt.chunks_exact(l.out)) {
                    if xi != 0.0 {
                        for (z, w) in z.iter_mut().zip(w) {
                            *z += xi * w;
                        }
                    }
                }
                if li != last {
                    for z in z.iter_mut() {
                        *z = z.max(0.0);
                    }
                }
                std::mem::swap(&mut a, &mut b);
            }
            out.push(sigma(a[0] as f64));
        }
    }

    /// Predicted slowdowns of several GPUs' task sets at once, one vector per set.
    pub fn predict_many(&self, groups: &[&[TaskVector]]) -> Vec<Vec<f64>> {
        let mut rows = Vec::new();
        groups
            .iter()
            .map(|g| {
                rows.clear();
                push_rows(g, g.len(), &self.norm, &mut rows);
                let mut out = Vec::with_capacity(g.len());
                self.forward(&rows, &mut out);
                out
            })
            .collect()
    }
}

impl InterferenceModel for Predictor {
    fn predict(&self, tasks: &[TaskVector]) -> Vec<f64> {
        if tasks.is_empty() {
            return Vec::new();
        }
        let mut rows = Vec::with_capacity(tasks.len() * INPUTS);
        push_rows(tasks, tasks.len(), &self.norm, &mut rows);
        let mut out = Vec::with_capacity(tasks.len());
        self.forward(&rows, &mut out);
        out
    }
}

/// The seed's output mapping σ: 1 + softplus, computed as libtorch does (linear past 20).
fn sigma(x: f64) -> f64 {
    1.0 + if x > 20.0 { x } else { x.exp().ln_1p() }
}

/// The inverse of [`sigma`], for the output bias's start.
fn sigma_inverse(y: f64) -> f64 {
    (y - 1.0).exp_m1().ln()
}

/// The interference model: the trainable MLP (libtorch), its replay buffer, and the
/// [`Predictor`] that answers predictions.
pub struct InterferenceMlp {
    config: InterferenceConfig,
    /// The trainable layers; their variables live in a `VarStore` that only the optimiser keeps.
    layers: Vec<nn::Linear>,
    opt: nn::Optimizer,
    norm: Normaliser,
    buffer: VecDeque<Sample>,
    rng: SplitMix,
    /// Samples ever observed, and gradient steps ever made (with every previous life's, after a
    /// reload).
    observed: u64,
    steps: u64,
    predictor: Predictor,
}

impl std::fmt::Debug for InterferenceMlp {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("InterferenceMlp")
            .field("config", &self.config)
            .field("buffer", &self.buffer.len())
            .field("observed", &self.observed)
            .field("steps", &self.steps)
            .finish()
    }
}

impl InterferenceMlp {
    /// A fresh model: He-uniform weights from `config.seed` for the hidden layers, a small
    /// uniform output layer, zero biases but the output's (which starts at σ⁻¹(1.1)).
    pub fn new(config: InterferenceConfig) -> Result<Self, PolicyError> {
        config.validate()?;
        // One intra-op thread, as the placement policy: the engine and training threads each keep
        // one core, and more threads would fight over small machines' cores for tiny matrices.
        tch::set_num_threads(1);
        let vs = nn::VarStore::new(Device::Cpu);
        let shapes = config.shapes();
        let root = vs.root();
        let layers: Vec<nn::Linear> = shapes
            .iter()
            .enumerate()
            // Zero here, overwritten below from our own generator: libtorch's global one is left
            // alone, so creating this model changes nothing for another model's seeded start.
            .map(|(i, &(inp, out))| {
                nn::linear(
                    &root / format!("l{i}"),
                    inp as i64,
                    out as i64,
                    nn::LinearConfig { ws_init: nn::Init::Const(0.0), bs_init: Some(nn::Init::Const(0.0)), bias: true },
                )
            })
            .collect();
        let mut rng = SplitMix(config.seed);
        let last = shapes.len() - 1;
        let dense: Vec<Dense> = shapes
            .iter()
            .enumerate()
            .map(|(i, &(inp, out))| {
                let bound = if i == last { 1.0 / (inp as f64).sqrt() } else { (6.0 / inp as f64).sqrt() };
                let w = (0..inp * out).map(|_| rng.symmetric(bound)).collect();
                let b = if i == last { vec![sigma_inverse(INITIAL_SLOWDOWN) as f32] } else { vec![0.0; out] };
                Dense { inp, out, w, b }
            })
            .collect();
        let opt = nn::Sgd::default().build(&vs, config.learning_rate)?;
        let mut m = InterferenceMlp {
            rng: SplitMix(mix64(config.seed ^ 0x5eed)),
            config,
            layers,
            opt,
            norm: Normaliser::default(),
            buffer: VecDeque::new(),
            observed: 0,
            steps: 0,
            predictor: Predictor { layers: Vec::new(), norm: Normaliser::default() },
        };
        m.load_dense(&dense)?;
        Ok(m)
    }

    pub fn config(&self) -> &InterferenceConfig {
        &self.config
    }

    /// The inference side as it is now (a copy to hand to another thread).
    pub fn predictor(&self) -> &Predictor {
        &self.predictor
    }

    pub fn normaliser(&self) -> &Normaliser {
        &self.norm
    }

    /// Samples in the replay buffer.
    pub fn buffered(&self) -> usize {
        self.buffer.len()
    }

    /// Samples ever observed.
    pub fn observed(&self) -> u64 {
        self.observed
    }

    /// Gradient steps ever made.
    pub fn steps(&self) -> u64 {
        self.steps
    }

    /// Adds a measured sample to the replay buffer (the oldest leaves when it is full) and its
    /// task vectors to the normaliser.
    pub fn observe(&mut self, sample: Sample) -> Result<(), PolicyError> {
        sample.validate()?;
        for t in &sample.tasks {
            self.norm.update(&task_features(t));
        }
        if self.buffer.len() >= self.config.capacity {
            self.buffer.pop_front();
        }
        self.buffer.push_back(sample);
        self.observed += 1;
        self.predictor.norm = self.norm.clone();
        Ok(())
    }

    /// `k` gradient steps, each on `batch` samples drawn uniformly (with replacement) from the
    /// replay buffer. Returns the loss of the last step's batch before its update; None when the
    /// buffer is empty (nothing is done).
    pub fn train_steps(&mut self, k: usize) -> Result<Option<f64>, PolicyError> {
        if self.buffer.is_empty() || k == 0 {
            return Ok(None);
        }
        let mut last = None;
        for _ in 0..k {
            let picks: Vec<usize> = (0..self.config.batch).map(|_| self.rng.below(self.buffer.len())).collect();
            let batch: Vec<&Sample> = picks.iter().map(|&i| &self.buffer[i]).collect();
            let loss = self.loss_tensor(&batch)?;
            self.opt.backward_step(&loss);
            last = Some(loss.double_value(&[]));
            self.steps += 1;
        }
        self.refresh_predictor()?;
        Ok(last)
    }

    /// The loss of claim 3 (see the module's docs) on `samples` with the current weights and
    /// normaliser; the value training descends.
    pub fn loss(&self, samples: &[Sample]) -> Result<f64, PolicyError> {
        if samples.is_empty() {
            return Ok(0.0);
        }
        for s in samples {
            s.validate()?;
        }
        let refs: Vec<&Sample> = samples.iter().collect();
        tch::no_grad(|| Ok(self.loss_tensor(&refs)?.double_value(&[])))
    }

    /// Mean absolute percentage error of the predictions on `samples` (every measured slowdown
    /// counts once; weights do not enter), as a fraction.
    pub fn mape(&self, samples: &[Sample]) -> f64 {
        let (mut sum, mut n) = (0.0, 0usize);
        for s in samples {
            for (p, y) in self.predictor.predict(&s.tasks).iter().zip(&s.slowdowns) {
                sum += (p - y).abs() / y;
                n += 1;
            }
        }
        if n == 0 { 0.0 } else { sum / n as f64 }
    }

    /// Predicted slowdowns of several GPUs' task sets, one vector per set.
    pub fn predict_many(&self, groups: &[&[TaskVector]]) -> Vec<Vec<f64>> {
        self.predictor.predict_many(groups)
    }

    /// The libtorch forward (what training differentiates): rows [R, INPUTS] → slowdowns [R].
    fn forward(&self, rows: &Tensor) -> Tensor {
        let last = self.layers.len() - 1;
        let mut x = rows.shallow_clone();
        for (i, l) in self.layers.iter().enumerate() {
            x = x.linear(&l.ws, l.bs.as_ref());
            if i < last {
                x = x.relu();
            }
        }
        x.squeeze_dim(-1).softplus() + 1.0
    }

    fn loss_tensor(&self, batch: &[&Sample]) -> Result<Tensor, PolicyError> {
        let mut rows = Vec::new();
        let mut targets = Vec::new();
        let mut weights = Vec::new();
        for s in batch {
            push_rows(&s.tasks, s.slowdowns.len(), &self.norm, &mut rows);
            targets.extend(s.slowdowns.iter().map(|&y| y as f32));
            weights.extend(std::iter::repeat_n(s.weight as f32, s.slowdowns.len()));
        }
        let m = targets.len();
        let rows = Tensor::f_from_slice(&rows)?.view([m as i64, INPUTS as i64]);
        let pred = self.forward(&rows);
        let z = Tensor::f_from_slice(&targets)?;
        let w = Tensor::f_from_slice(&weights)?;
        let data = (w * (pred - z).square()).sum(Kind::Float) / m as f64;
        let l2 = self
            .layers
            .iter()
            .map(|l| l.ws.square().sum(Kind::Float))
            .fold(Tensor::zeros([], (Kind::Float, Device::Cpu)), |a, b| a + b);
        Ok(data + l2 * self.config.lambda)
    }

    /// Copies plain weights into the libtorch layers and the predictor.
    fn load_dense(&mut self, dense: &[Dense]) -> Result<(), PolicyError> {
        tch::no_grad(|| -> Result<(), PolicyError> {
            for (l, d) in self.layers.iter_mut().zip(dense) {
                l.ws.f_copy_(&Tensor::f_from_slice(&d.w)?.view([d.out as i64, d.inp as i64]))?;
                if let Some(bs) = &mut l.bs {
                    bs.f_copy_(&Tensor::f_from_slice(&d.b)?)?;
                }
            }
            Ok(())
        })?;
        self.refresh_predictor()
    }

    /// Copies the libtorch layers' weights (and the normaliser) into the predictor.
    fn refresh_predictor(&mut self) -> Result<(), PolicyError> {
        let layers = self
            .layers
            .iter()
            .map(|l| {
                let (out, inp) = l.ws.size2()?;
                let (out, inp) = (out as usize, inp as usize);
                let mut w = vec![0f32; out * inp];
                l.ws.f_copy_data(&mut w, out * inp)?;
                let mut b = vec![0f32; out];
                if let Some(bs) = &l.bs {
                    bs.f_copy_data(&mut b, out)?;
                }
                Ok(Layer::of(&Dense { inp, out, w, b }))
            })
            .collect::<Result<Vec<_>, tch::TchError>>()?;
        self.predictor = Predictor { layers, norm: self.norm.clone() };
        Ok(())
    }
}

impl InterferenceModel for InterferenceMlp {
    fn predict(&self, tasks: &[TaskVector]) -> Vec<f64> {
        self.predictor.predict(tasks)
    }
}

#[cfg(test)]
mod tests;
