//! The crate's one error type.

use std::net::SocketAddr;

use crate::wire::PeerId;

/// Everything that can go wrong in the data plane, with the input that was wrong.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The endpoint configuration is unusable (names the field).
    #[error("invalid data-plane configuration: {0}")]
    Config(String),
    /// A rail listener could not be bound.
    #[error("cannot bind rail {rail} on {addr}: {source}")]
    Bind {
        rail: usize,
        addr: SocketAddr,
        source: std::io::Error,
    },
    /// The peer address list is empty, or names a peer this endpoint cannot reach.
    #[error("bad peer address list: {0}")]
    Peer(String),
    /// A frame from the network did not decode; the connection that sent it is closed.
    #[error("protocol error: {0}")]
    Protocol(String),
    /// A segment was resent too often because its checksum kept failing at the receiver.
    #[error(
        "segment at offset {offset} of message {msg_id} to {peer} failed its checksum {attempts} times"
    )]
    Corrupted {
        peer: PeerId,
        msg_id: u64,
        offset: u64,
        attempts: u32,
    },
    /// No acknowledgement arrived for a whole `stall_timeout` while a message was outstanding:
    /// every rail to the peer is down or the peer is gone.
    #[error(
        "message {msg_id} to {peer} made no progress for {secs:.1} s (every rail down or peer gone)"
    )]
    Stalled {
        peer: PeerId,
        msg_id: u64,
        secs: f64,
    },
    /// The endpoint was shut down while the call was waiting.
    #[error("endpoint shut down")]
    Shutdown,
    /// An I/O error outside a rail connection (connection failures are handled, not returned).
    #[error("I/O error: {0}")]
    Io(#[from] std::io::Error),
}

/// The crate's result type.
pub type Result<T, E = Error> = std::result::Result<T, E>;
