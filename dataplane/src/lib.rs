//! Plexus's data plane: the worker-to-worker transport.
//!
//! # Layout
//! * [`peer_id`] — [`PeerId`], an endpoint's identity (its rail-0 listening address).
//! * [`wire`] — the wire format: handshake, segment header (tag, message id, offset, length,
//!   CRC-32C), replies. Pure encode/decode.
//! * [`auth`] — the cluster's [`RailKey`], an endpoint's [`RailAuth`] mode, and the messages of
//!   the authenticated rail handshake (HMAC-SHA256 over both sides' nonces, one round trip) that
//!   proves both ends of a connection hold the key before anything else is read. It
//!   authenticates a connection's start, not each byte: see the module for what it does not
//!   protect. Pure: the endpoint does the I/O.
//! * [`elem`] — element arithmetic below both the transport and the collectives: [`DType`],
//!   [`ReduceOp`], [`Algorithm`] (defined once in `plexus_proto::collective`), the typed API's
//!   `Element`, and the reduction kernels a posted reduction and the executor both run.
//! * [`segment`] — cutting a message into segments of at most `seg_max`.
//! * [`reassembly`] — the [`Reassembler`](reassembly::Reassembler): which ranges of an incoming
//!   message are held or being written; accepts any order, refuses overlaps.
//! * [`striping`] — how a message is striped over the rails: the
//!   [`RailScheduler`](striping::RailScheduler) trait and the rail schedulers (round-robin,
//!   weighted, the seed's Q-learning and its `fresh` variant), which pick the rail of each
//!   segment. Pure: time is a parameter. (Named for what they do, apart from the
//!   `plexus-scheduler` crate, which places tasks on workers.)
//! * [`endpoint`] — the tokio transport that executes them: one listener and one TCP connection
//!   per rail and peer, per-rail FCFS send queues, acknowledgements, resends.
//! * [`collective`] — `reduce` and `allreduce` over a group of endpoints (seed 003's pipelined
//!   recursive halving, and the ring): a pure round/slice plan, executed on the transport; and
//!   `alltoall`/`alltoallv` (seed 004): contention-free schedules, pure, run by an `Exchanger`.
//! * `shared_buf` — one allocation read and written by several tasks in ranges their protocol
//!   keeps exclusive: an incoming message's buffer, a collective's working buffer.
//! * [`error`] — the crate's one error enum.
//! * `peer` — a receiving peer in its own process (`plexus-rail-peer`), and `rig` — the
//!   `scripts/rails-rig.sh` namespaces driven from Rust, with a drop guard, and deterministic
//!   test data; both test and benchmark support, compiled only with the `rig` feature (the
//!   crate's own tests and the benchmarks turn it on; the worker does not ship them).
//!
//! Modules depend on each other in one direction only, each only on modules of the groups
//! before its own: `peer_id`; `error`; `segment`, `reassembly`, `shared_buf`; `wire`, `elem`,
//! `striping`, `rig`, `auth`; `endpoint`; `collective`, `peer`. Inside `endpoint/`, `collective/` and
//! `striping/` a file imports its siblings, never its `mod.rs`. `tests/module_graph.rs` checks
//! both and names any cycle.

pub mod auth;
pub mod collective;
pub mod elem;
pub mod endpoint;
pub mod error;
#[cfg(feature = "rig")]
pub mod peer;
pub mod peer_id;
pub mod reassembly;
#[cfg(feature = "rig")]
pub mod rig;
pub mod segment;
mod shared_buf;
pub mod striping;
pub mod wire;

pub use auth::{RailAuth, RailKey};
pub use collective::alltoall::{Chosen, Exchanger};
pub use collective::redistribution::{BlockCyclic, CyclicLayout, Placement};
pub use collective::remap::AffineRemap;
pub use collective::schedule::{ComTable, Schedule, ScheduleKind};
pub use collective::{
    Choice, CollectiveConfig, Communicator, ExchangeAlgorithm, LinkMeter, LinkModel, Links, Profile, Topology,
};
pub use elem::{Algorithm, DType, ReduceOp};
pub use endpoint::{Endpoint, EndpointConfig, Faults, PeerAddrs, RailStats, Stats};
pub use error::{Error, Result};
pub use peer_id::PeerId;
pub use shared_buf::MappedBytes;
pub use striping::SchedulerKind;
