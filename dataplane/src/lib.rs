//! Plexus's data plane: the worker-to-worker transport.
//!
//! # Layout
//! * [`wire`] — the wire format: handshake, segment header (tag, message id, offset, length,
//!   CRC-32C), replies. Pure encode/decode.
//! * [`segment`] — cutting a message into segments of at most `seg_max`.
//! * [`reassembly`] — the [`Reassembler`](reassembly::Reassembler): which ranges of an incoming
//!   message are held or being written; accepts any order, refuses overlaps.
//! * [`sched`] — the [`RailScheduler`](sched::RailScheduler) trait and the schedulers:
//!   round-robin, weighted, the seed's Q-learning and its `fresh` variant. Pure: time is a
//!   parameter.
//! * [`endpoint`] — the tokio transport that executes them: one listener and one TCP connection
//!   per rail and peer, per-rail FCFS send queues, acknowledgements, resends.
//! * [`collective`] — `reduce` and `allreduce` over a group of endpoints (seed 003's pipelined
//!   recursive halving, and the ring): a pure round/slice plan, executed on the transport.
//! * `shared_buf` — one allocation read and written by several tasks in ranges their protocol
//!   keeps exclusive: an incoming message's buffer, a collective's working buffer.
//! * [`error`] — the crate's one error enum.
//! * [`peer`] — a receiving peer in its own process (`plexus-rail-peer`), and [`rig`] — the
//!   `scripts/rails-rig.sh` namespaces driven from Rust, with a drop guard; both for tests and
//!   the `rails` benchmark.

pub mod collective;
pub mod endpoint;
pub mod error;
pub mod peer;
pub mod reassembly;
pub mod rig;
pub mod sched;
pub mod segment;
mod shared_buf;
pub mod wire;

pub use collective::{Algorithm, CollectiveConfig, Communicator, DType, Profile, ReduceOp};
pub use endpoint::{Endpoint, EndpointConfig, Faults, PeerAddrs, RailStats, Stats};
pub use error::{Error, Result};
pub use sched::SchedulerKind;
pub use wire::PeerId;
