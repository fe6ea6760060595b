//! The Plexus contract shared by the coordinator, workers and the CLI.
//!
//! # Layout
//! - [`pb`]: the generated gRPC types, clients and servers (`proto/plexus.proto`).
//! - [`ids`]: typed ids (`JobId`, `WorkerId`) with a checked, prefixed text form, and the
//!   structured names of subtasks, attempts and data objects.
//! - [`digest`]: objects' content digests (BLAKE3) and the running check of a copy.
//! - [`domain`]: the small domain enums and structs that every crate shares.
//! - [`collective`]: the collective kinds' element types, operators and algorithms, named once.
//! - [`rules`]: validation rules both the coordinator and the worker apply (env keys, collective
//!   kinds, rail limits).
//! - [`topology`]: GPU link levels, the parser of `nvidia-smi topo -m`, and worker labels.
//! - [`convert`]: the one place where proto types become domain types and back.
//! - [`error`]: the crate's one error enum; each variant names the input it refused.
//!
//! `pb` and `convert` are behind the default `grpc` feature; without it this crate is pure (no
//! tonic, no prost), which is how the scheduling core and the data plane depend on it.

pub mod collective;
#[cfg(feature = "grpc")]
pub mod convert;
pub mod digest;
pub mod domain;
pub mod error;
pub mod ids;
pub mod rules;
pub mod runtime_env;
pub mod topology;

/// Generated from `proto/plexus.proto`.
#[cfg(feature = "grpc")]
#[allow(clippy::all, missing_docs)]
pub mod pb {
    tonic::include_proto!("plexus.v1");
}

pub use collective::{Algorithm, DType, ExchangeSchedule, ReduceOp, Split};
#[cfg(feature = "grpc")]
pub use convert::ConvertError;
pub use digest::{Digest, Verifier};
pub use domain::{JobState, Resources, SubtaskState};
pub use error::{Error, Result};
pub use ids::{AttemptRef, IdError, JobId, ObjectId, SubtaskKey, WorkerId};

/// A byte count as Plexus shows it to people, in binary units (`bytesize`'s IEC style): `100 B`,
/// `1.5 KiB`, `64.0 MiB`. The CLI's tables and the worker's reports both say sizes through it.
pub fn human_bytes(bytes: u64) -> String {
    bytesize::ByteSize(bytes).display().iec().to_string()
}

/// Milliseconds since the Unix epoch, the time unit of the whole contract.
pub fn now_ms() -> u64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.as_millis() as u64).unwrap_or(0)
}
