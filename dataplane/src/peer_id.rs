//! [`PeerId`], the identity of an endpoint, on its own so that both the error type and the wire
//! format can name a peer without importing each other.

use std::net::SocketAddr;

/// A stable peer identity: the address of the peer's rail-0 listener. Both sides of a
/// connection announce theirs in the handshake, so an accepted connection can be reused for
/// sending back to the peer that opened it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct PeerId(pub SocketAddr);

impl std::fmt::Display for PeerId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.0.fmt(f)
    }
}
