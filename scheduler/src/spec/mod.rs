//! Job files: parsing (TOML, or JSON) and validation into a [`JobSpec`].
//!
//! Everything a job file can get wrong is found here, before anything is stored: syntax, unknown
//! fields, duplicate task names, unknown dependencies, dependency cycles (named), inputs that no
//! task produces, malformed sizes and durations. Errors carry the file name and, where one can be
//! found, the line. Whether any worker can ever satisfy a request is checked later, by the core,
//! because only it knows the registered workers.
//!
//! # Layout, by stage
//! - `constraints`: which workers a task may run on, by their labels (model and matching).
//! - `model`: the validated [`JobSpec`] and its parts, what the core and the store use.
//! - `raw`: the file as written (the serde shapes) and where each task is declared in it.
//! - `sweep`: per-replica parameters (`sweep = { lr = [...] }`) and their expansion.
//! - `parse`: text to raw shapes, syntax errors with their line; then validation.
//! - `validate`: the raw shapes checked and resolved into a [`JobSpec`], one concern per file.

pub mod constraints;
mod model;
mod parse;
mod raw;
pub mod sweep;
mod validate;

pub use model::{
    CollectiveSpec, DEFAULT_GANG_TIMEOUT_MS, DEFAULT_QUEUE, DEFAULT_RETRY_BACKOFF_MS, ExchangeSpec, Format, GangSpec,
    GpuProfile, InputRank, InputSpec, JobSpec, MAX_AFTER_JOBS, MAX_EXCLUDE_LEN, MAX_EXCLUDES, MAX_REPLICAS,
    MAX_RETRIES, MAX_RETRY_BACKOFF_MS, MAX_SUBTASKS, OnFailure, Redistribution, Remap, TaskSpec, Work, WorkingDir,
    retry_delay_ms,
};
pub use parse::parse;

pub use crate::error::SpecError;

#[cfg(test)]
mod tests;
