//! The collective endpoint: each member of a `communicator = true` gang gets a Unix socket in
//! its attempt's work dir (`$PLEXUS_COLLECTIVE_SOCKET`, owned by the task's uid, mode 0600) over
//! which its task asks for collectives that this worker runs over its data plane with the gang's
//! other members ([`ops`]). A connection proves itself with the attempt's secret
//! (`$PLEXUS_COLLECTIVE_SECRET`) first ([`wire`]).
//!
//! - **Order.** Requests from every connection of the attempt go into one queue, run one at a
//!   time in arrival order (every member must issue the same calls in the same order), each
//!   answered in order on its connection; a task may have many outstanding.
//! - **Bad use fails every member.** A request that does not check ([`wire::Header::check`]:
//!   unknown op or dtype, a size that does not split) or a `poison` the task sends (a dtype its
//!   client cannot send) fails this member and is sent to every other member's worker as a
//!   notice; a collective that fails (sizes that differ between members are caught by the
//!   communicator's header check) does too. From then on every op of the gang fails with that
//!   first error, which names the member.
//! - **Members that end.** When a member's task ends its worker sends the others a notice: a
//!   failed or killed task fails their pending and next ops at once; after a task that exited 0,
//!   an op that does not complete within [`STALL_TIMEOUT`] fails naming it (it cannot complete
//!   without that member; ops that it took part in before it ended complete as usual). A lost worker fails the others' sends after the data plane's stall
//!   timeout (also 30 s by default).
//!
//! - **Shared memory.** A connection may map shared regions (memfds the task created and sealed
//!   against shrinking, passed over the socket; [`plexus_collective::region`]) and name, in a
//!   request, where in one its payload is and where its result goes: the bytes then never cross
//!   the socket, and an allreduce of a 4- or 8-byte type reduces the region's bytes in place
//!   ([`shm`]). Sizes and offsets are checked against the mapping (a request that does not fit
//!   is a bad request, failing every member); a descriptor that is not such a memfd, or a
//!   region past the limits, is refused to that connection alone. Requests without a region
//!   carry their payload on the socket, as before.
//!
//! # Layout
//! - `wire` (`plexus_collective::wire`, shared with the Rust client): the frame format (pure);
//! - `elems`: 16-bit floats widened to f32, `mean`, local reductions;
//! - `ops`: the collectives on the data plane's communicator and exchanger;
//! - `serve`: the socket, its connections, the queue and the notices;
//! - `shm`: a connection's shared regions and running a request on one;
//! - `spec`: what an endpoint is opened with, and its constants.

pub mod elems;
pub mod ops;
mod serve;
mod shm;
mod spec;
pub use plexus_collective::wire;

pub use serve::GangEndpoint;
pub use spec::{SOCKET_NAME, STALL_TIMEOUT, Spec};

#[cfg(test)]
mod tests;
