//! The Plexus coordinator: the control plane.
//!
//! # Layout
//! - [`spec`]: job files (TOML/JSON) parsed and validated into a `JobSpec`.
//! - [`core`]: the pure scheduling core: DAG release, placement calls, retries, lost workers,
//!   reconciliation after restarts. No I/O, no clock.
//! - [`placer`]: the `Placer` trait, the heuristic placers, and the adapter to the learned
//!   placer of `plexus-policy` (`placer::learned`).
//! - [`store`]: durable state in sled (the only module that knows sled).
//! - [`engine`]: the thread that owns core and store: group commit, then replies and dispatch.
//! - [`convert`]: proto ↔ domain conversion for the coordinator.
//! - [`rpc`]: the tonic services (the only module that implements tonic service traits).
//! - [`server`]: start-up and shutdown.

pub mod convert;
pub mod core;
pub mod engine;
pub mod placer;
pub mod rpc;
pub mod server;
pub mod spec;
pub mod store;

pub use server::{Config, run};

/// Why the coordinator could not start or had to stop.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("{0}: {1}")]
    Io(String, #[source] std::io::Error),
    #[error("{0}")]
    Placer(String),
    #[error("store: {0}")]
    Store(#[from] store::StoreError),
    #[error("restoring state: {0}")]
    Restore(String),
    #[error("engine: {0}")]
    Engine(String),
    #[error("gRPC server: {0}")]
    Transport(#[source] tonic::transport::Error),
}
