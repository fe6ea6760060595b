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
//! - [`hardware`]: what a worker offers ([`hardware::Capacity`]), read by the core and the GPU
//!   topology alike.
//! - [`anchor`]: the learned placer's anchor (it departs from `fastest` only within a budget) and
//!   its guard (back to `fastest` when departures measure worse).
//! - [`placer`]: the [`placer::Placer`] trait with its `Candidate`/`PlacementRequest`/`Outcome`
//!   contract, and the heuristic placers. The learned placer implements the same trait in the
//!   coordinator, over `plexus-policy`.
//! - [`Error`]: the one error type of the crate.

pub mod anchor;
pub mod core;
pub mod error;
pub mod gpu;
pub mod hardware;
pub mod placer;
pub mod spec;

pub use error::{Error, SpecError};
