//! The Plexus coordinator: the control plane's I/O around the pure scheduling core.
//!
//! The decisions themselves — job files, the DAG and gang state machine, placement — live in
//! `plexus-scheduler`, which does no I/O. This crate gives them durability, a clock, a network
//! and a learned placer.
//!
//! # Layout
//! - [`auth`]: the cluster CA, tokens, and the layer that checks every call's caller.
//! - [`store`]: durable state in sled (the only module that opens sled), and the [`store::Kv`]
//!   namespaces (security, policy, queues, archives) on either store.
//! - [`etcd`]: the same state in etcd (the only module that knows etcd): a log of rounds and
//!   snapshots, fenced writes.
//! - [`ha`]: leader election, the standby's gate, and following the leader.
//! - [`engine`]: the thread that owns core and store: group commit, then replies and dispatch.
//! - [`view`]: what the engine answers with: owned snapshots of jobs, workers, queues and work
//!   batches, in domain types.
//! - [`convert`]: proto ↔ domain conversion for the coordinator (requests in, views out).
//! - [`rpc`]: the tonic services (the only module that implements tonic service traits); each
//!   handler returns the crate's [`Error`].
//! - [`working_dirs`]: the archives of jobs' working dirs: uploads checked and kept
//!   (content-addressed, bounded, held by unfinished jobs), fetches by workers.
//! - [`relay`]: `GetObject`'s relay of a holder's stream, checked against the object's digest.
//! - [`error`]: [`Error`], the crate's one error enum; [`status`]: the one place an [`Error`]
//!   becomes a `tonic::Status`.
//! - [`learned`]: the adapter from the `Placer` trait to the learned policy of `plexus-policy`,
//!   and [`learned::by_name`], which builds any placer from its `--placer` name.
//! - [`server`]: start-up and shutdown.
//! - [`admin`]: the administrative commands (`migrate`, `policy`, `token`, `queue`) the binary
//!   runs, on the store or through the running coordinator.

pub mod admin;
pub mod auth;
mod commit;
pub mod convert;
pub mod engine;
pub mod error;
pub mod etcd;
pub mod gate;
pub mod ha;
pub mod http;
pub mod learned;
mod lookup;
pub mod metrics;
pub mod queue;
pub mod relay;
pub mod rpc;
pub mod server;
pub mod shed;
pub mod status;
pub mod store;
mod submission;
pub mod view;
pub mod working_dirs;

pub use error::Error;
pub use server::{Config, SecurityMode, run};
