//! Learned placement: the dual-thread DQN policy of seed 001 on tch (libtorch); the seed, our
//! readings of it and our departures are in docs/seeds/001-learned-placement.md.
//!
//! # Layout
//! - [`features`]: the observation (one token per candidate node) and its normalisation.
//! - [`reward`]: the reward of claims 8–10 from measured fetch latency, eviction and utilisation.
//! - [`buffer`]: the experience buffer (dedupe on insert, removal on sample) and its codec.
//! - [`correction`]: the learned correction of the run-time estimates that the `rl` placer
//!   departs from `fastest` by: neighbours, node classes, recent slowdowns (issue 34).
//! - [`net`]: the Transformer Q-network and the criticality loss.
//! - `error`: [`PolicyError`], the crate's one error type.
//! - [`agent`]: the decision side, the training thread, weight sync and persistence.
//! - [`interference`]: seed 002's interference model, an MLP predicting the slowdowns of tasks
//!   sharing a GPU (`plexus_scheduler::gpu::InterferenceModel`), trained online, persisted as bytes.
//!
//! Only this crate knows tch. It knows nothing of the coordinator: it reads the scheduler's
//! placement contract (`plexus_scheduler::placer::Candidate` and `PlacementRequest`) directly, and
//! persists through the [`agent::PolicyStore`] trait.

pub mod agent;
pub mod buffer;
pub mod correction;
mod error;
pub mod features;
pub mod interference;
pub mod net;
pub mod reward;

pub use agent::{Choice, DqnPolicy, MemPolicyStore, PolicyConfig, PolicyStore, StoreError};
pub use error::PolicyError;
pub use features::{Observation, TaskFeatures};
pub use interference::{InterferenceConfig, InterferenceMlp, Predictor, Sample};
pub use net::NetConfig;
pub use reward::{RewardConfig, RewardInputs};
