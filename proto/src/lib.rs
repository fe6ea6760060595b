//! The Plexus contract shared by the coordinator, workers and the CLI.
//!
//! # Layout
//! - [`pb`]: the generated gRPC types, clients and servers (`proto/plexus.proto`).
//! - [`ids`]: typed ids (`JobId`, `WorkerId`) with a checked, prefixed text form, and the
//!   structured names of subtasks, attempts and data objects.
//! - [`domain`]: the small domain enums and structs that every crate shares.
//! - [`convert`]: the one place where proto types become domain types and back.

pub mod convert;
pub mod domain;
pub mod ids;

/// Generated from `proto/plexus.proto`.
#[allow(clippy::all, missing_docs)]
pub mod pb {
    tonic::include_proto!("plexus.v1");
}

pub use convert::ConvertError;
pub use domain::{JobState, Resources, SubtaskState};
pub use ids::{AttemptRef, IdError, JobId, ObjectId, SubtaskKey, WorkerId};

/// Milliseconds since the Unix epoch, the time unit of the whole contract.
pub fn now_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_millis() as u64)
        .unwrap_or(0)
}
