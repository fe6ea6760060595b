//! The ground truth of GPU co-location: task kinds with their resource signatures, and a seeded
//! interference model the searches can use as an oracle and the learned MLP can be trained and
//! measured against.
//!
//! # The form
//! On one GPU, with `U = Σ_j u_j` (SM utilisation of each task alone) and `B = Σ_j b_j` (the
//! share of the device's DRAM bandwidth each uses alone), task i runs
//!
//! ```text
//! slowdown_i = max(1, U) + s_i·(κ_bw·b_i·(B − b_i) + κ_sm·u_i·(U − u_i))   [× ε_i when shared]
//! ```
//!
//! times slower than alone:
//! - `max(1, U)`: when the tasks together ask for more than the SMs give, the GPU time-slices
//!   and every task stretches by the oversubscription. Gandiva (Xiao et al., OSDI'18) packs
//!   jobs whose utilisations add up to under 100 % at little cost and sees two busy trainers on
//!   one GPU run at about half speed each; AntMan (Xiao et al., OSDI'20) and Lucid (Hu et al.,
//!   ASPLOS'23) report the same: low-utilisation jobs (small models, inference) share almost for
//!   free, busy ones do not.
//! - `κ_bw·b_i·(B − b_i)`: contention on DRAM bandwidth and L2 beyond SM time, pairwise, growing
//!   with both tasks' intensity (memory-bound kernels suffer most from co-runners; AntMan's and
//!   Lucid's "memory-intensive" jobs are the bad neighbours).
//! - `κ_sm·u_i·(U − u_i)`: what sharing SMs costs below saturation (scheduling, caches).
//! - `s_i`: the kind's sensitivity: latency-bound work (small-batch inference, LSTMs with many
//!   small kernels) feels contention more than large-batch convolutions.
//! - `ε_i = exp(σ·z)`, z a standard normal drawn from a hash of the seed, the task's signature
//!   and its co-runners' signatures: a fixed per-combination effect the analytic terms do not
//!   explain (so a learned model has something to learn beyond the form), the same every time
//!   the same kinds share a GPU. A task alone runs at exactly 1.
//! - More memory than the device has (which feasible placements never do) pages:
//!   `× (1 + 4·excess share)`.
//!
//! `b` and `s` are hidden from the task vector (which carries memory, utilisation, solo time,
//! model size and a signature hash): the model sees them only through the signature, as a
//! learned model would. A signature the table does not know is taken as `b = 0.6·u`, `s = 1`.
//!
//! [`GroundTruth::measure`] is what a worker would report: the truth times measurement noise.

use rand::Rng;

use plexus_scheduler::gpu::{InterferenceModel, TaskVector};

use crate::config::{GIB, MIB};

/// The kinds of GPU task the generator draws.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Kind {
    ResNet50,
    Vgg16,
    BertBase,
    Gpt2Small,
    Lstm,
    /// A ResNet-50 inference service (small batches).
    ServeResNet50,
    /// A BERT-base inference service.
    ServeBert,
}

/// What a kind asks of a GPU (a V100-class device, 32 GiB), per training iteration or request
/// batch. Utilisation, bandwidth and times are illustrative values of the right order for each
/// model, not measurements of one machine.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Profile {
    pub name: &'static str,
    pub gpu_memory: u64,
    /// SM utilisation alone, 0..=1 (in the task vector).
    pub utilisation: f64,
    /// Share of the device's DRAM bandwidth used alone, 0..=1 (hidden).
    pub bandwidth: f64,
    /// How much it feels contention (hidden).
    pub sensitivity: f64,
    pub solo_ms: f64,
    /// Parameters × 4 bytes: what a data-parallel member synchronises per iteration.
    pub model_bytes: u64,
    /// Whether it trains (a gang member) or serves (a resident service).
    pub trains: bool,
}

impl Kind {
    pub const ALL: [Kind; 7] = [
        Kind::ResNet50,
        Kind::Vgg16,
        Kind::BertBase,
        Kind::Gpt2Small,
        Kind::Lstm,
        Kind::ServeResNet50,
        Kind::ServeBert,
    ];
    /// The kinds that train (gang members, and single-GPU trainers resident on a GPU).
    pub const TRAINING: [Kind; 5] = [Kind::ResNet50, Kind::Vgg16, Kind::BertBase, Kind::Gpt2Small, Kind::Lstm];
    /// The inference services.
    pub const SERVICES: [Kind; 2] = [Kind::ServeResNet50, Kind::ServeBert];

    pub fn profile(self) -> Profile {
        let p = |name, mem_gib: u64, utilisation, bandwidth, sensitivity, solo_ms, params_m: u64, trains| Profile {
            name,
            gpu_memory: mem_gib * GIB,
            utilisation,
            bandwidth,
            sensitivity,
            solo_ms,
            model_bytes: params_m * 4 * MIB,
            trains,
        };
        match self {
            // Large-batch convolutions: busy SMs, moderate bandwidth.
            Kind::ResNet50 => p("resnet50", 12, 0.95, 0.45, 1.0, 85.0, 26, true),
            Kind::Vgg16 => p("vgg16", 14, 0.90, 0.55, 1.0, 140.0, 138, true),
            // Transformers: busy and bandwidth-hungry (attention, layer norms, optimiser).
            Kind::BertBase => p("bert-base", 10, 0.85, 0.60, 1.1, 180.0, 110, true),
            Kind::Gpt2Small => p("gpt2-small", 18, 0.90, 0.70, 1.1, 250.0, 124, true),
            // Many small kernels: leaves SMs idle, sensitive to time slicing.
            Kind::Lstm => p("lstm", 5, 0.45, 0.35, 1.3, 45.0, 36, true),
            // Small-batch services: light, latency-sensitive.
            Kind::ServeResNet50 => p("serve-resnet50", 3, 0.25, 0.15, 1.5, 8.0, 26, false),
            Kind::ServeBert => p("serve-bert", 4, 0.35, 0.25, 1.5, 12.0, 110, false),
        }
    }

    /// The kind's signature hash (FNV-1a of its name): stable across runs and builds.
    pub fn signature(self) -> u64 {
        self.profile()
            .name
            .bytes()
            .fold(0xcbf2_9ce4_8422_2325, |h, b| (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3))
    }

    pub fn from_signature(signature: u64) -> Option<Kind> {
        Kind::ALL.into_iter().find(|k| k.signature() == signature)
    }

    /// Its task vector on a device of `device_memory` bytes. Services synchronise nothing.
    pub fn task(self, device_memory: u64) -> TaskVector {
        let p = self.profile();
        TaskVector {
            gpu_memory: p.gpu_memory,
            device_memory,
            utilisation: p.utilisation,
            solo_ms: p.solo_ms,
            model_bytes: if p.trains { p.model_bytes } else { 0 },
            signature: self.signature(),
        }
    }
}

/// The ground-truth interference model (see the module documentation for its form).
#[derive(Clone, Debug, PartialEq)]
pub struct GroundTruth {
    /// Seeds the fixed per-combination effects `ε`.
    pub seed: u64,
    pub kappa_bw: f64,
    pub kappa_sm: f64,
    /// σ of the per-combination effect (log scale).
    pub sigma: f64,
    /// σ of [`GroundTruth::measure`]'s noise (log scale).
    pub noise: f64,
}

impl GroundTruth {
    /// κ_bw = 0.6 and κ_sm = 0.15 give two busy trainers about 2.1× each, a trainer beside a
    /// small service about 1.3×, two services about 1.04× (the published orders above);
    /// σ = 3 % per combination; 2 % measurement noise.
    pub fn new(seed: u64) -> GroundTruth {
        GroundTruth { seed, kappa_bw: 0.6, kappa_sm: 0.15, sigma: 0.03, noise: 0.02 }
    }

    /// Hidden bandwidth and sensitivity of a task.
    fn hidden(t: &TaskVector) -> (f64, f64) {
        match Kind::from_signature(t.signature) {
            Some(k) => (k.profile().bandwidth, k.profile().sensitivity),
            None => (0.6 * t.utilisation, 1.0),
        }
    }

    /// A noisy measurement of the slowdowns, as a worker would report them.
    pub fn measure(&self, tasks: &[TaskVector], rng: &mut impl Rng) -> Vec<f64> {
        self.predict(tasks)
            .into_iter()
            .map(|s| (s * (self.noise * normal(rng.random(), rng.random())).exp()).max(1.0))
            .collect()
    }
}

impl InterferenceModel for GroundTruth {
    fn predict(&self, tasks: &[TaskVector]) -> Vec<f64> {
        let hidden: Vec<(f64, f64)> = tasks.iter().map(GroundTruth::hidden).collect();
        let u: f64 = tasks.iter().map(|t| t.utilisation).sum();
        let b: f64 = hidden.iter().map(|h| h.0).sum();
        let memory: u64 = tasks.iter().map(|t| t.gpu_memory).sum();
        let device = tasks.iter().map(|t| t.device_memory).max().unwrap_or(0);
        let paging =
            if device > 0 && memory > device { 1.0 + 4.0 * (memory - device) as f64 / device as f64 } else { 1.0 };
        tasks
            .iter()
            .zip(&hidden)
            .enumerate()
            .map(|(i, (t, &(bi, si)))| {
                if tasks.len() == 1 {
                    return paging;
                }
                let contention =
                    si * (self.kappa_bw * bi * (b - bi) + self.kappa_sm * t.utilisation * (u - t.utilisation));
                (u.max(1.0) + contention) * self.effect(tasks, i).exp() * paging
            })
            .collect()
    }
}

impl GroundTruth {
    /// `σ·z` for task i among `tasks`: a hash of the seed, its signature and the sorted
    /// signatures of the others, so it does not depend on their order.
    fn effect(&self, tasks: &[TaskVector], i: usize) -> f64 {
        let mut others: Vec<u64> =
            tasks.iter().enumerate().filter(|(j, _)| *j != i).map(|(_, t)| t.signature).collect();
        others.sort_unstable();
        let mut h = mix(self.seed ^ mix(tasks[i].signature));
        for s in others {
            h = mix(h ^ s);
        }
        let (a, b) = (unit(h), unit(mix(h)));
        self.sigma * normal(a, b)
    }
}

/// splitmix64's finaliser.
fn mix(mut z: u64) -> u64 {
    z = z.wrapping_add(0x9e37_79b9_7f4a_7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// A hash to a uniform in [0, 1).
fn unit(h: u64) -> f64 {
    (h >> 11) as f64 / (1u64 << 53) as f64
}

/// A standard normal from two uniforms in [0, 1) (Box–Muller).
fn normal(a: f64, b: f64) -> f64 {
    (-2.0 * (1.0 - a).ln()).sqrt() * (std::f64::consts::TAU * b).cos()
}
