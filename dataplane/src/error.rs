//! The crate's one error type.

use std::net::SocketAddr;

use crate::peer_id::PeerId;

/// Everything that can go wrong in the data plane, with the input that was wrong.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The endpoint configuration is unusable (names the field).
    #[error("invalid data-plane configuration: {0}")]
    Config(String),
    /// A rail listener could not be bound.
    #[error("cannot bind rail {rail} on {addr}: {source}")]
    Bind { rail: usize, addr: SocketAddr, source: std::io::Error },
    /// The peer address list is empty, or names a peer this endpoint cannot reach.
    #[error("bad peer address list: {0}")]
    Peer(String),
    /// A frame from the network did not decode; the connection that sent it is closed.
    #[error("protocol error: {0}")]
    Protocol(String),
    /// A segment was resent too often because its checksum kept failing at the receiver.
    #[error("segment at offset {offset} of message {msg_id} to {peer} failed its checksum {attempts} times")]
    Corrupted { peer: PeerId, msg_id: u64, offset: u64, attempts: u32 },
    /// No acknowledgement arrived for a whole `stall_timeout` while a message was outstanding:
    /// every rail to the peer is down or the peer is gone.
    #[error("message {msg_id} to {peer} made no progress for {secs:.1} s (every rail down or peer gone)")]
    Stalled { peer: PeerId, msg_id: u64, secs: f64 },
    /// A receive waited for a message from a peer that was unreachable for a whole
    /// `stall_timeout`: no connection to or from it on any rail, and none could be opened.
    #[error("peer {peer} is gone: unreachable on every rail for {secs:.1} s")]
    PeerGone { peer: PeerId, secs: f64 },
    /// A segment that lies outside its message. This and the next two are why a segment is
    /// refused by the message's reassembly: a correct sender never produces them, and the
    /// transport closes the connection that sent one.
    #[error("segment [{offset}, +{len}) lies outside the message's {total} bytes")]
    SegmentOutOfBounds { offset: u64, len: u64, total: u64 },
    /// A segment that partly overlaps data already received or being received.
    #[error("segment [{offset}, +{len}) partly overlaps data already received or being received")]
    SegmentOverlap { offset: u64, len: u64 },
    /// A segment without a byte.
    #[error("empty segment in a message of {total} bytes")]
    EmptySegment { total: u64 },
    /// A rail key that is not exactly 32 bytes long.
    #[error("a rail key is exactly 32 bytes, got {0}")]
    BadRailKey(usize),
    /// The endpoint requires the rail key ([`RailAuth::Pending`](crate::auth::RailAuth::Pending))
    /// and has none yet, so it cannot open a rail connection.
    #[error("no rail key yet: the worker has not registered with the coordinator")]
    NoRailKey,
    /// A rail connection's peer failed the rail handshake in a way only a peer without this
    /// endpoint's rail key does (its MAC was wrong): the message is failed, not retried.
    #[error("rail handshake with {addr} (rail {rail}) failed: {reason}")]
    Handshake { addr: SocketAddr, rail: usize, reason: String },
    /// The endpoint was shut down while the call was waiting.
    #[error("endpoint shut down")]
    Shutdown,
    /// An I/O error outside a rail connection (connection failures are handled, not returned).
    #[error("I/O error: {0}")]
    Io(#[from] std::io::Error),
    /// A rail scheduler name that is not one of
    /// [`SchedulerKind::ALL`](crate::striping::SchedulerKind::ALL).
    #[error("unknown rail scheduler {got:?} (one of: {expected})")]
    UnknownScheduler { got: String, expected: String },
    /// A command-line argument of the peer process (`plexus-rail-peer`, `rails --serve`) that
    /// does not parse; the text names the argument.
    #[cfg(feature = "rig")]
    #[error("{0}")]
    Usage(String),
    /// `scripts/rails-rig.sh` could not be started.
    #[cfg(feature = "rig")]
    #[error("rails-rig.sh: {0}")]
    RigStart(#[source] std::io::Error),
    /// `scripts/rails-rig.sh` failed: its arguments and what it wrote to stderr.
    #[cfg(feature = "rig")]
    #[error("rails-rig.sh {args}: {stderr}")]
    Rig { args: String, stderr: String },
    /// A peer process (see `peer`, with the `rig` feature) did not follow its stdout protocol; the text
    /// says what it said or did instead.
    #[cfg(feature = "rig")]
    #[error("{0}")]
    PeerProcess(String),
}

/// A collective parameter's name (dtype, reduce op, algorithm) that is not one of its names: a
/// configuration error, with the text of the contract's error (which names the value and the
/// expected ones).
impl From<plexus_proto::Error> for Error {
    fn from(e: plexus_proto::Error) -> Error {
        Error::Config(e.to_string())
    }
}

/// The crate's result type.
pub type Result<T, E = Error> = std::result::Result<T, E>;
