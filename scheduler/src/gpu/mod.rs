//! GPU group placement (issue 16, seed 002's GPU module): when a gang of GPU tasks is placed,
//! choose the GPUs that minimise `α·I(M) + β·C(M)`, where `I` is the group's interference level
//! (predicted slowdowns of the members and of the tasks already on their GPUs) and `C` the
//! model-synchronisation cost over the cluster's GPU topology.
//!
//! The pieces, each pure and testable alone:
//! - [`TaskVector`] and [`InterferenceModel`]: what the scheduler knows of a task that may share a
//!   GPU, and the contract of the model that predicts slowdowns from it (the learned MLP lives in
//!   `plexus-policy`, which links libtorch; this crate does not).
//! - `topology`: the cluster's GPU topology tree, from each worker's `nvidia-smi topo -m` link
//!   levels and its `rack` label, and `msc(i, j)` from it.
//! - [`objective`]: the objective `α·I(M) + β·C(M)` of a gang on candidate GPUs
//!   ([`objective::Problem`]), evaluated with a cache of the model's predictions
//!   ([`objective::Evaluator`]).
//! - [`search`]: the searches over assignments of a gang's members to GPUs
//!   (the seed's shuffled frog leaping, and greedy, topology-greedy, random and exhaustive).

use serde::{Deserialize, Serialize};

pub mod learner;
mod load;
pub mod objective;
mod polish;
pub mod search;
mod settings;
pub mod topology;

#[cfg(test)]
mod search_tests;

/// What the scheduler knows of a task that may share a GPU: the interference model's input.
/// Unknown measurements are 0.
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct TaskVector {
    /// The GPU memory it asked for (`gpu_memory`), bytes.
    pub gpu_memory: u64,
    /// The GPU memory of the device it runs on, bytes (so the model sees the fraction).
    pub device_memory: u64,
    /// Declared or measured GPU utilisation when it runs alone, 0..=1.
    pub utilisation: f64,
    /// Its measured solo run time (or iteration time, when it reports `plexus:iter_ms=`), ms.
    pub solo_ms: f64,
    /// Bytes it synchronises with its gang each iteration (its model size), 0 when unknown.
    pub model_bytes: u64,
    /// A hash of the task's signature (command or kind, resources): tasks of one signature
    /// behave alike.
    pub signature: u64,
}

/// Predicts how much tasks sharing one GPU slow each other down.
pub trait InterferenceModel {
    /// `tasks` share one GPU (the first n already there, and one candidate, in any order);
    /// returns each one's predicted slowdown (run time shared ÷ run time alone, ≥ 1), in order.
    fn predict(&self, tasks: &[TaskVector]) -> Vec<f64>;
}
