//! Collectives over the data plane: `reduce` and `allreduce` across a group of endpoints
//! (issue 5, seed 003).
//!
//! # Layout
//! * [`plan`] — the pure round/slice plan: which ranges each rank sends and receives, in which
//!   order, for the seed's pipelined recursive halving and for the ring. Tested exhaustively on
//!   symbolic data.
//! * [`DType`], [`ReduceOp`], [`Algorithm`] and the reduction kernels are `crate::elem`'s
//!   (the transport's posted reductions run the same kernels), re-exported here.
//! * `communicator` — the [`Communicator`]: each call validated, given its tag range, and run in
//!   one working buffer reused across calls; `config` — its [`CollectiveConfig`] and the
//!   [`Profile`] of a call.
//! * `executor` — the `Executor` that runs a plan on an [`Endpoint`](crate::Endpoint); `group`
//!   — the ranks it addresses, and the header and abort messages besides the plan's.
//! * [`schedule`], [`redistribution`], [`alltoall`] — personalised all-to-all exchange (seed
//!   004): contention-free schedules of a communication table (shift, pairwise, css) and of
//!   block-cyclic redistributions (the seed's Algorithms 1 and 2), pure; and the
//!   [`Exchanger`](alltoall::Exchanger) that runs them on an [`Endpoint`].
//!
//! How a collective runs: every rank computes its plan (the same parameters everywhere but its
//! rank), sends a small header describing the call to its right neighbour (so ranks that were
//! given different lengths, types, operators or algorithms fail with an error instead of
//! waiting forever), then walks the plan. A send step hands a zero-copy view of its range to the
//! collective's sender task and goes on at once. Each receive is posted to the endpoint as soon
//! as the steps before it that touch its range are complete, so the transport's connection
//! readers write its segments in place or reduce them into place as they arrive, while the next
//! segments are still on the wire and the sender keeps sending — communication and computation
//! genuinely overlap, at segment granularity. A rank that fails
//! tells every other rank (an abort message in the same tag space), so a failure anywhere ends
//! the collective everywhere.
//!
//! * [`cost`], [`meter`] — which algorithm a call runs (issue 30): an α–β model per peer fed
//!   with what the calls measured, every member's model agreed in one round, the cheapest
//!   predicted candidate chosen (`auto`, the default of jobs); a job may set one instead.
//! * `rails` — receiver-aware striping of an exchange's messages: the rates each can expect on
//!   each rail from both ends' measured rail rates and how many messages share each end.
//! * [`remap`] — seed 004's array remapping after loop partitioning (affine index maps).
//!
//! This file only declares the modules and re-exports; they import each other, never it.

mod agreed;
pub mod alltoall;
mod communicator;
mod config;
pub mod cost;
mod executor;
mod group;
mod landing;
pub mod meter;
pub mod plan;
mod rails;
pub mod redistribution;
pub mod remap;
pub mod schedule;
mod spare;

pub use crate::elem::{Algorithm, DType, Element, ReduceOp, reduce_from, reduce_into};
pub use communicator::{Choice, Communicator, TAG_SPAN};
pub use config::{CollectiveConfig, Profile};
pub use cost::{ExchangeAlgorithm, LinkModel, Links, Topology};
pub use meter::LinkMeter;
pub use plan::{Kind, MAX_SLICES, PlanParams, Step};
