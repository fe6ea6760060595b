//! The scheduling core of Plexus: pure, with no I/O and no clock.
//!
//! This crate is what the coordinator decides with and what the cluster simulator replays. It
//! depends on no tokio, tonic, sled or tch — "the core does no I/O" is a fact of its
//! `Cargo.toml`, not only a rule (`e2e/tests/architecture.rs` checks the dependency tree).
//!
//! # Layout
//! - [`spec`]: job files (TOML/JSON) parsed and validated into a [`spec::JobSpec`].
//! - [`core`]: the state machine: jobs, subtasks, workers, placement and gangs. Calls take `now`
//!   and record what changed in an [`core::Outbox`]; the coordinator's engine persists it.
//! - [`placer`]: the [`placer::Placer`] trait with its `Candidate`/`PlacementRequest`/`Outcome`
//!   contract, and the heuristic placers. The learned placer implements the same trait in the
//!   coordinator, over `plexus-policy`.
//! - [`Error`]: the one error type of the crate.

pub mod core;
pub mod gpu;
pub mod placer;
pub mod spec;

use plexus_proto::{JobId, JobState, WorkerId};

pub use spec::SpecError;

/// Why the scheduling core refused a request or could not restore its state.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum Error {
    /// A job file that cannot be accepted (file, line, message).
    #[error(transparent)]
    Spec(#[from] SpecError),
    #[error("no job {0}")]
    NoJob(JobId),
    #[error("job {job} has no task {task:?}")]
    NoTask { job: JobId, task: String },
    #[error("task {task:?} of job {job} has {replicas} replica(s); rank {rank} does not exist")]
    NoRank { job: JobId, task: String, rank: u32, replicas: u32 },
    #[error("job {job} has already {}", state.as_str())]
    JobFinished { job: JobId, state: JobState },
    /// No set of live workers could ever run the job.
    #[error("{0}")]
    Unsatisfiable(String),
    #[error("job {0} already exists")]
    Duplicate(JobId),
    #[error("{0}")]
    NotPlaced(String),
    /// Stored records that do not make a consistent state.
    #[error("restoring state: {0}")]
    Restore(String),
    #[error("no worker {0}")]
    NoWorker(WorkerId),
    /// A worker that cannot be removed in its state (alive).
    #[error("{0}")]
    WorkerBusy(String),
    /// A placer name that is not known.
    #[error("unknown placer {name:?} (known: {known})")]
    UnknownPlacer { name: String, known: String },
}
