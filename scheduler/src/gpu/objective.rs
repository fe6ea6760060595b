//! The objective seed 002 minimises when it places a gang on GPUs: `α·I(M) + β·C(M)`.
//!
//! A [`Problem`] is one gang (m members, each a [`TaskVector`]) and the candidate GPUs it may
//! go to (each with the tasks already on it and the room it has for this gang), the model
//! synchronisation cost `msc` between every two candidates, and the weights. An assignment is a
//! `Vec<usize>`: member i → candidate GPU `assignment[i]` (an index into [`Problem::gpus`]).
//!
//! - **Interference.** The task list of a GPU is its resident tasks followed by every member of
//!   the gang assigned to it: when several members share one GPU they slow each other down as
//!   much as the residents, so they are all part of that GPU's list. The model predicts a
//!   slowdown for each task of the list; `SD_i`, for member i on GPU g, is the mean of those
//!   predictions (n + 1 of them when i is the only member there, as in the seed; n + k with k
//!   members there, the same `SD` for all k). `I(M) = (1/m)·Σ_i SD_i`, a mean slowdown: 1 when
//!   nothing interferes.
//! - **Communication.** `C(M) = Σ_{i<j} msc(g_i, g_j)·muds_ij`. `muds_ij` is the data members i
//!   and j exchange per training iteration when the gang allreduces its gradients with the
//!   direct (pairwise) reduce-scatter + all-gather of seed 003: each member owns 1/m of the
//!   model, and sends every other member its part of that member's shard (B/m) and then its
//!   reduced shard (B/m), so `muds_ij = 2·B/m` bytes from i to j, `(B_i + B_j)/m` when the two
//!   model sizes differ. Per member that is `2(m−1)/m·B`, the volume of a ring allreduce, but
//!   spread over all pairs, so the cost does not depend on a ring order the search does not
//!   choose. Two members on one GPU cost `msc(g, g)` (0 from the topology: a local copy).
//! - **Normalisation.** `C` is in msc-units × bytes; it is divided by `C_ref`, the cost of the
//!   same gang with every pair over the costliest link among the candidates (or over
//!   [`Weights::msc_ref`] when set), so `C/C_ref` lies in [0, 1] whatever the units of msc and
//!   the model size: 1 is the worst spread the candidates allow, close to 0 a gang packed on
//!   NVLink. `I` lies in [1, ~2] (two busy trainers time-sharing a GPU each run about half as
//!   fast; Gandiva, AntMan). With the default `α = β = 1`, spreading the whole gang over the
//!   cluster's slowest links weighs as much as every member running twice as slow, which is the
//!   order of what data-parallel training loses going from NVLink to a cross-rack network for
//!   communication-heavy models. The reference depends on the candidate set; a caller comparing
//!   objectives across different candidate sets fixes `msc_ref`.
//!
//! Evaluation is cheap: the mean prediction of a GPU depends only on the GPU and on the multiset
//! of gang members on it, so it is cached under that key (members with equal task vectors are
//! one class, so an alike gang of 16 on 128 GPUs needs at most 128 × k model calls for groups of
//! up to k members, whatever the search).

use std::collections::HashMap;
use std::hash::{BuildHasherDefault, Hasher};

use super::{InterferenceModel, TaskVector};
use crate::error::Error;

/// A GPU a gang's members may go to.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct GpuCandidate {
    /// The tasks already running on it.
    pub resident: Vec<TaskVector>,
    /// GPU memory free for this gang's members, bytes: the members placed on it must fit.
    pub free_memory: u64,
    /// How many members of this gang it may take: 1 for exclusive use; more only when the
    /// members share GPUs (`gpu_share`); 0 for none.
    pub slots: usize,
}

/// The weights of `α·I + β·C/C_ref`.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Weights {
    /// α, the weight of the interference level `I` (a mean slowdown, ≥ 1).
    pub alpha: f64,
    /// β, the weight of the normalised communication cost `C/C_ref` (in [0, 1]).
    pub beta: f64,
    /// The msc `C_ref` is computed with; `None`: the largest msc between two candidates.
    pub msc_ref: Option<f64>,
}

impl Default for Weights {
    /// α = β = 1: see the module documentation for why these put `I` and `C` on one scale.
    fn default() -> Weights {
        Weights { alpha: 1.0, beta: 1.0, msc_ref: None }
    }
}

impl Weights {
    /// The keys [`Weights::parse`] reads.
    pub const KEYS: &'static [&'static str] = &["alpha", "beta"];

    /// `alpha=A,beta=B` (either may be left out and keeps its default of 1): finite, ≥ 0, and
    /// not both 0 (an objective that weighs nothing makes every placement equal).
    pub fn parse(s: &str) -> Result<Weights, Error> {
        let mut w = Weights::default();
        for (name, v) in super::settings::parse_numbers(s, Self::KEYS)? {
            if name == "alpha" {
                w.alpha = v;
            } else {
                w.beta = v;
            }
        }
        if w.alpha == 0.0 && w.beta == 0.0 {
            return Err(Error::GpuProblem("alpha and beta are both 0: the objective would weigh nothing".into()));
        }
        Ok(w)
    }
}

impl std::str::FromStr for Weights {
    type Err = Error;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Weights::parse(s)
    }
}

/// `alpha=1,beta=1`: what [`Weights::parse`] reads (`msc_ref` is not a setting).
impl std::fmt::Display for Weights {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "alpha={},beta={}", self.alpha, self.beta)
    }
}

/// One gang to place on a set of candidate GPUs. Immutable once built: the derived tables
/// (member classes, `muds`, `C_ref`) are computed in the constructor.
#[derive(Clone, Debug)]
pub struct Problem {
    members: Vec<TaskVector>,
    gpus: Vec<GpuCandidate>,
    /// n × n, row-major: msc between candidates a and b.
    msc: Vec<f64>,
    weights: Weights,
    /// Member i's class: members with equal task vectors share one, so groups of alike members
    /// share cache entries and the exhaustive search skips their permutations.
    class: Vec<u32>,
    /// One task vector per class.
    classes: Vec<TaskVector>,
    /// m × m, row-major: muds between members i and j (0 on the diagonal).
    muds: Vec<f64>,
    c_ref: f64,
}

impl Problem {
    /// A problem with `msc(a, b)` given as a function of two candidate indices (for example a
    /// closure over the cluster topology and the candidates' GPU ids); it is read once into a
    /// dense matrix.
    pub fn new(
        members: Vec<TaskVector>,
        gpus: Vec<GpuCandidate>,
        msc: impl Fn(usize, usize) -> f64,
        weights: Weights,
    ) -> Result<Problem, Error> {
        let n = gpus.len();
        let matrix = (0..n * n).map(|k| msc(k / n, k % n)).collect();
        Problem::with_msc_matrix(members, gpus, matrix, weights)
    }

    /// A problem with msc as a dense n × n row-major matrix over the candidates.
    pub fn with_msc_matrix(
        members: Vec<TaskVector>,
        gpus: Vec<GpuCandidate>,
        msc: Vec<f64>,
        weights: Weights,
    ) -> Result<Problem, Error> {
        let (m, n) = (members.len(), gpus.len());
        if m == 0 {
            return Err(Error::GpuProblem("the gang has no members".into()));
        }
        if msc.len() != n * n {
            return Err(Error::GpuProblem(format!(
                "msc has {} entries; {n} candidate GPUs need {n} × {n} = {}",
                msc.len(),
                n * n
            )));
        }
        if let Some(k) = msc.iter().position(|v| !v.is_finite() || *v < 0.0) {
            return Err(Error::GpuProblem(format!("msc({}, {}) = {} is not a finite cost ≥ 0", k / n, k % n, msc[k])));
        }
        for (name, w) in [("alpha", weights.alpha), ("beta", weights.beta), ("msc_ref", weights.msc_ref.unwrap_or(0.0))]
        {
            if !w.is_finite() || w < 0.0 {
                return Err(Error::GpuProblem(format!("weight {name} = {w} is not a finite number ≥ 0")));
            }
        }
        let mut reps: Vec<TaskVector> = Vec::new();
        let class = members
            .iter()
            .map(|t| match reps.iter().position(|r| r == t) {
                Some(c) => c as u32,
                None => {
                    reps.push(*t);
                    (reps.len() - 1) as u32
                }
            })
            .collect();
        let mut muds = vec![0.0; m * m];
        for i in 0..m {
            for j in 0..m {
                if i != j {
                    muds[i * m + j] = (members[i].model_bytes as f64 + members[j].model_bytes as f64) / m as f64;
                }
            }
        }
        let worst = (0..n * n).filter(|k| k / n != k % n).map(|k| msc[k]).fold(0.0, f64::max);
        let msc_ref = weights.msc_ref.unwrap_or(worst);
        let pairs: f64 = (0..m).flat_map(|i| (i + 1..m).map(move |j| (i, j))).map(|(i, j)| muds[i * m + j]).sum();
        Ok(Problem { members, gpus, msc, weights, class, classes: reps, muds, c_ref: pairs * msc_ref })
    }

    pub fn members(&self) -> &[TaskVector] {
        &self.members
    }

    pub fn gpus(&self) -> &[GpuCandidate] {
        &self.gpus
    }

    pub fn weights(&self) -> Weights {
        self.weights
    }

    pub fn msc(&self, a: usize, b: usize) -> f64 {
        self.msc[a * self.gpus.len() + b]
    }

    pub fn muds(&self, i: usize, j: usize) -> f64 {
        self.muds[i * self.members.len() + j]
    }

    /// `C_ref`, what `C` is divided by (0 when no communication costs anything).
    pub fn c_ref(&self) -> f64 {
        self.c_ref
    }

    /// Member i's class (equal task vectors, equal class), numbered from 0 in order of first
    /// appearance.
    pub fn class(&self, i: usize) -> u32 {
        self.class[i]
    }

    /// How many classes the members form.
    pub fn classes(&self) -> usize {
        self.classes.len()
    }

    /// Whether member i fits on candidate g beside `count` members taking `memory` bytes.
    pub(crate) fn fits(&self, i: usize, g: usize, count: usize, memory: u64) -> bool {
        let c = &self.gpus[g];
        count < c.slots && memory.saturating_add(self.members[i].gpu_memory) <= c.free_memory
    }

    /// Every member on an existing candidate, no candidate over its slots or its free memory.
    pub fn is_feasible(&self, assignment: &[usize]) -> bool {
        self.check(assignment).is_ok()
    }

    /// As [`Problem::is_feasible`], saying what is wrong.
    pub fn check(&self, assignment: &[usize]) -> Result<(), Error> {
        let (m, n) = (self.members.len(), self.gpus.len());
        if assignment.len() != m {
            return Err(Error::GpuProblem(format!("an assignment of {} members for a gang of {m}", assignment.len())));
        }
        let mut count = vec![0usize; n];
        let mut memory = vec![0u64; n];
        for (i, &g) in assignment.iter().enumerate() {
            if g >= n {
                return Err(Error::GpuProblem(format!("member {i} on GPU {g}, but there are {n} candidates")));
            }
            count[g] += 1;
            memory[g] = memory[g].saturating_add(self.members[i].gpu_memory);
        }
        for g in 0..n {
            let c = &self.gpus[g];
            if count[g] > c.slots || memory[g] > c.free_memory {
                return Err(Error::GpuProblem(format!(
                    "GPU {g} holds {} members needing {} bytes; it has {} slots and {} bytes free",
                    count[g], memory[g], c.slots, c.free_memory
                )));
            }
        }
        Ok(())
    }

    /// `C(M)`, not normalised.
    pub fn communication(&self, assignment: &[usize]) -> f64 {
        let m = self.members.len();
        let mut c = 0.0;
        for i in 0..m {
            for j in i + 1..m {
                c += self.msc(assignment[i], assignment[j]) * self.muds[i * m + j];
            }
        }
        c
    }

    /// `C/C_ref`.
    pub fn normalise(&self, communication: f64) -> f64 {
        if self.c_ref > 0.0 { communication / self.c_ref } else { 0.0 }
    }
}

/// An assignment's objective and its parts, for `plexus explain`.
#[derive(Clone, Debug, PartialEq)]
pub struct Breakdown {
    /// `SD_i` of each member: the mean predicted slowdown of its GPU's task list.
    pub slowdowns: Vec<f64>,
    /// `I(M)`, the mean of `slowdowns`.
    pub interference: f64,
    /// `C(M)`, in msc-units × bytes.
    pub communication: f64,
    /// `C(M)/C_ref`.
    pub communication_norm: f64,
    /// `α·I + β·C/C_ref`.
    pub objective: f64,
}

/// Evaluates assignments of one problem with one model, caching each GPU's mean prediction per
/// multiset of members on it. Searches take one; give each search its own to time it alone, or
/// share one to share its cache.
pub struct Evaluator<'a, M: InterferenceModel + ?Sized> {
    problem: &'a Problem,
    model: &'a M,
    /// `[gpu, sorted member classes…]` → mean prediction of that GPU's task list.
    cache: HashMap<Vec<u32>, f64, BuildHasherDefault<FxHasher>>,
    key: Vec<u32>,
    order: Vec<usize>,
    calls: u64,
    evaluations: u64,
}

impl<'a, M: InterferenceModel + ?Sized> Evaluator<'a, M> {
    pub fn new(problem: &'a Problem, model: &'a M) -> Evaluator<'a, M> {
        Evaluator {
            problem,
            model,
            cache: HashMap::default(),
            key: Vec::new(),
            order: Vec::new(),
            calls: 0,
            evaluations: 0,
        }
    }

    pub fn problem(&self) -> &'a Problem {
        self.problem
    }

    /// How many times the model was asked (cache misses).
    pub fn model_calls(&self) -> u64 {
        self.calls
    }

    /// How many whole assignments were evaluated.
    pub fn evaluations(&self) -> u64 {
        self.evaluations
    }

    /// The mean prediction (`SD`) of GPU g's task list when `members` of the gang are on it.
    pub fn group_sd(&mut self, g: usize, members: &[usize]) -> f64 {
        self.key.clear();
        self.key.push(g as u32);
        self.key.extend(members.iter().map(|&i| self.problem.class[i]));
        self.key[1..].sort_unstable();
        if let Some(&sd) = self.cache.get(&self.key[..]) {
            return sd;
        }
        let gpu = &self.problem.gpus[g];
        let mut tasks = Vec::with_capacity(gpu.resident.len() + members.len());
        tasks.extend_from_slice(&gpu.resident);
        tasks.extend(self.key[1..].iter().map(|&c| self.problem.classes[c as usize]));
        let predictions = self.model.predict(&tasks);
        self.calls += 1;
        debug_assert_eq!(predictions.len(), tasks.len(), "the interference model must predict one slowdown per task");
        let sd = if predictions.is_empty() {
            f64::INFINITY
        } else {
            predictions.iter().sum::<f64>() / predictions.len() as f64
        };
        self.cache.insert(self.key.clone(), sd);
        sd
    }

    /// `Σ_i SD_i` (m·I) of an assignment, visiting each GPU's group once; `each(i, sd)` sees
    /// every member's `SD`.
    fn interference_sum(&mut self, assignment: &[usize], mut each: impl FnMut(usize, f64)) -> f64 {
        let mut order = std::mem::take(&mut self.order);
        order.clear();
        order.extend(0..assignment.len());
        order.sort_unstable_by_key(|&i| assignment[i]);
        let mut sum = 0.0;
        let mut start = 0;
        while start < order.len() {
            let g = assignment[order[start]];
            let end = start + order[start..].iter().take_while(|&&i| assignment[i] == g).count();
            let sd = self.group_sd(g, &order[start..end]);
            for &i in &order[start..end] {
                each(i, sd);
            }
            sum += sd * (end - start) as f64;
            start = end;
        }
        self.order = order;
        sum
    }

    /// `α·I + β·C/C_ref` of a (feasible) assignment.
    pub fn objective(&mut self, assignment: &[usize]) -> f64 {
        self.evaluations += 1;
        let p = self.problem;
        let i = self.interference_sum(assignment, |_, _| ()) / p.members.len() as f64;
        let c = p.normalise(p.communication(assignment));
        p.weights.alpha * i + p.weights.beta * c
    }

    /// The objective and its parts.
    pub fn breakdown(&mut self, assignment: &[usize]) -> Breakdown {
        let p = self.problem;
        let mut slowdowns = vec![0.0; p.members.len()];
        let interference = self.interference_sum(assignment, |i, sd| slowdowns[i] = sd) / p.members.len() as f64;
        let communication = p.communication(assignment);
        let communication_norm = p.normalise(communication);
        let objective = p.weights.alpha * interference + p.weights.beta * communication_norm;
        Breakdown { slowdowns, interference, communication, communication_norm, objective }
    }
}

/// FxHash's rotate-xor-multiply. The cache's keys are a few small integers looked up thousands
/// of times per search; SipHash, the default, guards against chosen keys that nobody chooses
/// here and costs more than the rest of a lookup.
#[derive(Default)]
struct FxHasher(u64);

impl FxHasher {
    fn add(&mut self, word: u64) {
        self.0 = (self.0.rotate_left(5) ^ word).wrapping_mul(0x517c_c1b7_2722_0a95);
    }
}

impl Hasher for FxHasher {
    fn write(&mut self, bytes: &[u8]) {
        for chunk in bytes.chunks(8) {
            let mut word = [0u8; 8];
            word[..chunk.len()].copy_from_slice(chunk);
            self.add(u64::from_le_bytes(word));
        }
    }

    fn write_u32(&mut self, v: u32) {
        self.add(u64::from(v));
    }

    fn write_usize(&mut self, v: usize) {
        self.add(v as u64);
    }

    fn finish(&self) -> u64 {
        self.0
    }
}
