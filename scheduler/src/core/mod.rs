//! The scheduling core: jobs, subtasks, workers and every state transition between them.
//!
//! Pure: no I/O, no clock (every call takes `now` in ms), no tonic, no sled. Calls mutate the
//! in-memory state and record what changed in an [`Outbox`]: records to persist, assignments and
//! cancellations to send. The engine persists the outbox's records *before* it acts on the rest
//! or answers anyone, which is what makes every acknowledged change durable.
//!
//! Invariants kept here:
//! - A subtask's `attempt` grows by one on every placement; a report about any other attempt,
//!   or from a worker that does not hold it, is stale and ignored. So a subtask is completed at
//!   most once, however often a worker repeats itself.
//! - A worker's `allocated` resources are exactly the sum of the requests of the attempts placed
//!   on it and of the gang members reserved there, and only feasible placements are made (the
//!   worker ledger, `ledger`, keeps the first behind its private fields).
//! - A subtask is released (`Waiting` → `Ready`) only when every task in its `after` list has
//!   fully succeeded.

//!
//! # Layout
//! [`Core`] (`state`) coordinates parts that each own one invariant behind private fields:
//! - `ledger`: the worker ledger — [`Worker`]s, what attempts hold on each (only `reserve`,
//!   `release`, `place` and `free` change that), the holders of each object, the workers' epoch.
//! - `job_table`: the job table — [`Job`]s in submission order, each keeping its per-state
//!   counts equal to its subtasks' states, and the jobs waiting for each.
//! - `ready`: the ready queue, in priority-then-age order, one entry per task, with the retries
//!   waiting out a back-off and the rounds each task was overtaken.
//! - `gang_book`: one round's gang book — one head per queue, the workers held for heads.
//! - `fair_share`: the queues' shares and the cores each queue holds.
//!
//! What the core does, by stage (each an `impl Core` over those parts):
//! - `jobs`: submission, reports of attempts, retries, DAG release, the end of a job.
//! - `workers`: registration and reconciliation, heartbeats, held objects, lost workers.
//! - `placement`: a scheduling round, and single-subtask placement through the
//!   [`Placer`](crate::placer::Placer).
//! - `gang`: gangs — reservations, binding, holding workers for the head gang, deadlines and
//!   rollbacks — and collectives placed all at once, or none.
//! - `checkpoint`: the checkpoints failed attempts left, kept and handed to the next attempt.
//! - `gpus`: GPU attempts, the GPU gang search, and what the GPU learner is told.
//! - `restore`: the state rebuilt from the store's records.
//! - [`liveness`]: silent workers declared lost, evictions halted when too many fall silent at
//!   once, and the grace period after the coordinator's own stall.
//!
//! And the values they trade in:
//! - [`records`]: what the store keeps (jobs, subtasks, workers, placement decisions).
//! - [`messages`]: what crosses the boundary: registrations and reports in, assignments and the
//!   [`Outbox`] out.
//! - [`config`]: the core's configuration and its counters.
//! - `signature`: tasks' signatures, the key of what is measured of them.
//! - [`lineage`]: lost inputs recomputed by re-running their producers.
//! - [`estimates`]: measured compute and fetch speeds (issue 17), learnt from succeeded attempts
//!   and read by placement for each candidate's estimates.

mod checkpoint;
pub mod config;
pub mod dry_run;
pub mod estimates;
mod eviction;
mod explain;
mod fair_share;
pub mod features;
mod gang;
mod gang_book;
mod gpus;
mod job_table;
mod jobs;
mod ledger;
pub mod lineage;
pub mod liveness;
pub mod messages;
mod placement;
mod ready;
pub mod records;
mod restore;
mod sample;
mod signature;
mod state;
pub mod timing;
mod workers;

pub use config::{CoreConfig, Counters, MIN_FENCE_MARGIN_MS};
pub use eviction::{EvictionGuard, EvictionHalt, may_evict};
pub use explain::Explained;
pub use job_table::{GangPhase, GangView, Job};
pub use ledger::{AttemptKey, Worker};
pub use messages::{
    Assignment, BadCopy, CollectiveAssignment, HolderLocation, InputLocation, NodeReport, Outbox, RailCounter,
    Registration, Report,
};
pub use records::{
    AttemptFailure, CandidateRecord, Capacity, FetchPlan, GpuRecord, JobRecord, KeptCheckpoint, PlacementRecord,
    Snapshot, Subtask, Transition, WorkerRecord,
};
pub use signature::{FieldHash, signature};
pub use state::Core;

#[cfg(test)]
mod gang_tests;
#[cfg(test)]
mod tests;
