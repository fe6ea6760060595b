//! The Plexus coordinator: the control plane's I/O around the pure scheduling core.
//!
//! The decisions themselves — job files, the DAG and gang state machine, placement — live in
//! `plexus-scheduler`, which does no I/O. This crate gives them durability, a clock, a network
//! and a learned placer.
//!
//! # Layout
//! - [`auth`]: the cluster CA, tokens, and the layer that checks every call's caller.
//! - [`store`]: durable state in sled (the only module that opens sled), and the [`store::Kv`]
//!   namespaces (security, policy, queues) on either store.
//! - [`etcd`]: the same state in etcd (the only module that knows etcd): a log of rounds and
//!   snapshots, fenced writes.
//! - [`ha`]: leader election, the standby's gate, and following the leader.
//! - [`engine`]: the thread that owns core and store: group commit, then replies and dispatch.
//! - [`convert`]: proto ↔ domain conversion for the coordinator.
//! - [`rpc`]: the tonic services (the only module that implements tonic service traits), and
//!   [`rpc::status`], the one place an [`Error`] becomes a `tonic::Status`.
//! - [`learned`]: the adapter from the `Placer` trait to the learned policy of `plexus-policy`,
//!   and [`learned::by_name`], which builds any placer from its `--placer` name.
//! - [`server`]: start-up and shutdown.

pub mod auth;
pub mod convert;
pub mod dashboard;
pub mod engine;
pub mod etcd;
pub mod ha;
pub mod http;
pub mod learned;
pub mod metrics;
pub mod rpc;
pub mod server;
pub mod store;

pub use server::{Config, SecurityMode, run};

/// Everything that can go wrong in the coordinator, from start-up to a request.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The scheduling core refused a request (unknown job, finished job, unsatisfiable, …).
    #[error(transparent)]
    Scheduler(#[from] plexus_scheduler::Error),
    /// A request refused by the core, named by the job file it came from.
    #[error("{file}: {source}")]
    InFile { file: String, source: plexus_scheduler::Error },
    /// A message from the network that does not convert.
    #[error(transparent)]
    Convert(#[from] plexus_proto::ConvertError),
    /// A request that is well-formed but not acceptable (size limits, missing prerequisites).
    #[error("{0}")]
    Invalid(String),
    /// Something the request needs is not there (a worker that is not registered, a log that
    /// was not kept).
    #[error("{0}")]
    Unavailable(String),
    #[error("{0}: {1}")]
    Io(String, #[source] std::io::Error),
    /// etcd did not answer, or refused a request (not a fencing refusal).
    #[error("etcd: {0}")]
    Etcd(String),
    /// A write refused because this coordinator no longer leads (its election key is gone):
    /// it must stop acting and become a standby.
    #[error("this coordinator no longer leads: its write was refused by etcd (the lease on its election key expired)")]
    Fenced,
    #[error("sled: {0}")]
    Sled(#[from] sled::Error),
    #[error("schema: {0}")]
    Migration(#[from] plexus_migrations::MigrationError),
    #[error("record {key}: {reason}")]
    Corrupt { key: String, reason: String },
    #[error(
        "the store at {dir} is in use by another process (its lock was still held after {waited_ms} ms); stop that coordinator or choose another data directory"
    )]
    Locked { dir: String, waited_ms: u64 },
    #[error("starting the learned placer: {0}")]
    Policy(#[from] plexus_policy::PolicyError),
    /// A worker opened its assignment stream without a live registration.
    #[error("this worker session is not registered; call Register first")]
    NotRegistered,
    /// A stream ended because the coordinator is stopping.
    #[error("the coordinator is shutting down")]
    ShuttingDown,
    /// The engine thread stopped (shutdown or a storage failure).
    #[error("the coordinator engine has stopped")]
    EngineStopped,
    #[error("engine: {0}")]
    Engine(String),
    #[error("gRPC server: {0}")]
    Transport(#[source] tonic::transport::Error),
}
