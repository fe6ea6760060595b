//! A deterministic cluster simulator that measures placers (issue 3).
//!
//! It runs any [`Placer`](plexus_scheduler::placer::Placer) — the coordinator's heuristics,
//! or the learned placer of the `policy` crate — over the same jobs on the same simulated
//! cluster and reports wait, response and utilisation side by side. Same configuration, same
//! workload and same placer give the same report: time is simulated (integer microseconds),
//! randomness comes only from seeded generators, and nothing runs on another thread.
//!
//! # Layout
//! - [`config`]: the cluster (node classes, racks, memory tiers, eviction bandwidth) and the
//!   workload mix, with the benchmark's defaults ([`SimConfig::new`]).
//! - [`hidden`]: effects on run time that per-worker speeds do not show (interference between
//!   co-located tasks, drifting node speeds, per-kind affinity, shared links), for the
//!   [`Mix::BLIND`] workloads (issue 34, item 2).
//! - [`workload`]: jobs as DAGs of tasks and the data objects they read;
//!   [`Workload::generate`] draws one from a seed.
//! - `trace`: [`Workload::from_jsonl`] / [`Workload::to_jsonl`], JSON-lines replay.
//! - `cache`: a node's fast memory, an LRU cache with pinning.
//! - [`engine`]: the discrete-event loop, [`simulate`] (the model is described there), and
//!   [`simulate_with`], which picks where candidates' estimates come from.
//! - [`estimates`]: [`EstimateMode`]: the simulator's exact estimates (an oracle), or the
//!   coordinator's own estimator (`plexus_scheduler::core::estimates`) fed online with what the
//!   simulated workers report, as production placers see them (issue 17, item 4).
//! - [`report`]: what a run measured ([`Report`]) and its summary figures.
//! - [`baseline`]: `locality+`, the locality placer with the tie-breaking tuned here.
//! - [`compare`]: [`run_all`] over several [`Contender`]s, each on its own [`EstimateMode`],
//!   with an optional online warm-up, and [`print_table`].
//! - [`gangs`]: gang scheduling (issue 14): the scheduling core itself driven in simulated
//!   time, against a naive scheduler and strict FIFO, on seeded workloads of gangs and small
//!   tasks.
//! - [`gpu`]: GPU group placement (issue 16): a seeded ground-truth interference model, task
//!   kinds, and simulated GPU clusters (NVLink and PCIe nodes in racks) with busy GPUs.

pub mod baseline;
mod cache;
pub mod compare;
pub mod config;
pub mod engine;
mod error;
pub mod estimates;
pub mod gangs;
pub mod gpu;
pub mod hidden;
pub mod report;
mod trace;
pub mod workload;

pub use compare::{Contender, Run, best_heuristic, describe, print_table, run_all};
pub use config::{ClusterConfig, GIB, MIB, Mix, NodeClass, NodeSpec, SimConfig, Tier, Tiers, WorkloadConfig};
pub use engine::{response_bound_ms, simulate, simulate_from, simulate_with};
pub use error::SimError;
pub use estimates::EstimateMode;
pub use hidden::Hidden;
pub use report::{JobRecord, Report, TaskRecord, Utilisation, Window};
pub use workload::{DataObject, Job, Task, Workload};

/// The placement interface being measured, re-exported so users need not name the
/// coordinator crate.
pub use plexus_scheduler::placer;
