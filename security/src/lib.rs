//! The trust of a Plexus cluster, shared by the coordinator, the worker and the CLI.
//!
//! - [`pki`]: the cluster CA (made once by the coordinator, kept in its store), the
//!   certificates it issues (the coordinator's, and one per worker whose identity is the worker
//!   id), and the fingerprints by which the coordinator recognises a worker's certificate.
//! - [`token`]: bearer tokens — their text form, their hash (the only thing stored), and the
//!   [`token::Scope`] each one carries.
//! - [`names`]: the fixed names certificates hold and are checked against, shared by [`pki`]
//!   (which writes them) and [`tls`] (which expects them), so neither imports the other.
//! - [`tls`]: the tonic TLS settings every component uses.
//! - [`files`]: credential files written owner-only (mode 0600) and atomically.
//! - [`tokens`]: the token commands' shared logic — the default scope, reading a scope and a
//!   lifetime, the list and revocation as printed — used by `plexus token` and
//!   `plexus-coordinator token` alike.
//!
//! Nothing here opens a socket or a store: the coordinator keeps the CA and the token hashes in
//! sled, the worker keeps its certificate in its data dir.

pub mod files;
pub mod names;
pub mod pki;
pub mod tls;
pub mod token;
pub mod tokens;

pub use pki::{ClusterCa, Fingerprint, Issued, WorkerKey};
pub use token::{Scope, Token};

/// Everything that can go wrong making or reading credentials, or connecting with them.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("certificate: {0}")]
    Certificate(String),
    #[error("{0}")]
    Token(String),
    /// A call's `authorization` header that is not `Bearer <token>`; the text says what is wrong.
    #[error("the authorization header {0}")]
    Authorization(&'static str),
    #[error("{what} {path}: {source}")]
    Io { what: &'static str, path: String, source: std::io::Error },
    /// A connection that did not come up within [`tls::connect_within`]'s limit.
    #[error("no answer within {0:?} (TCP connect, TLS handshake and HTTP/2 set-up did not complete together)")]
    ConnectTimedOut(std::time::Duration),
    /// A connection that failed; transparent, so a caller walking the sources sees tonic's cause
    /// chain as it was.
    #[error(transparent)]
    Transport(#[from] tonic::transport::Error),
}

impl From<rcgen::Error> for Error {
    fn from(e: rcgen::Error) -> Error {
        Error::Certificate(e.to_string())
    }
}

/// `n` bytes from the operating system's random source.
pub fn random_bytes<const N: usize>() -> [u8; N] {
    use ring::rand::SecureRandom;
    let mut out = [0u8; N];
    ring::rand::SystemRandom::new().fill(&mut out).expect("the operating system's random source failed");
    out
}
