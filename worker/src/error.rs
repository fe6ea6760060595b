//! The library's one error type.
//!
//! Every fallible operation of the worker returns [`Error`]. Errors that concern a single attempt
//! (an input that cannot be fetched, a command that cannot be spawned) become the `error` text of
//! that attempt's FAILED report; errors that concern the whole worker (the data dir cannot be
//! created, the listen address cannot be bound) end [`crate::run`].

use std::path::PathBuf;

use plexus_proto::{ConvertError, IdError};

/// Everything that can go wrong in the worker.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// A file system operation failed; `path` names the file or directory involved.
    #[error("{action} {}: {source}", path.display())]
    Io { action: &'static str, path: PathBuf, source: std::io::Error },

    /// Something arrived from the network (or was found on disk) that is not a valid id or name.
    #[error(transparent)]
    Id(#[from] IdError),

    /// A proto message did not convert into a valid domain value.
    #[error(transparent)]
    Convert(#[from] ConvertError),

    /// An assignment that cannot be run as sent (e.g. neither a command nor a kind).
    #[error("invalid assignment: {0}")]
    InvalidAssignment(String),

    /// A command-line or configuration value is unusable.
    #[error("invalid configuration: {0}")]
    Config(String),

    /// A peer or coordinator URL could not be used to connect.
    #[error("cannot connect to {url}: {reason}")]
    Connect { url: String, reason: String },

    /// A gRPC call failed.
    #[error("{call} failed: {:?}: {}", status.code(), status.message())]
    Rpc { call: &'static str, status: Box<tonic::Status> },

    /// A gRPC call did not answer in time.
    #[error("{call} did not answer within {after:?}")]
    Timeout { call: &'static str, after: std::time::Duration },

    /// The coordinator does not know this worker's session and asked it to register again.
    #[error("the coordinator asked this worker to register again")]
    Reregister,

    /// The coordinator ended the assignment stream.
    #[error("the coordinator closed the assignment stream")]
    StreamClosed,

    /// A peer sent an object that does not match what it announced.
    #[error("object {object}: {reason}")]
    BadObject { object: String, reason: String },

    /// The data plane (the rail endpoint) failed: binding a rail, or a transfer.
    #[error("data plane: {0}")]
    Dataplane(#[from] plexus_dataplane::Error),

    /// The PeerService server failed.
    #[error("peer server: {0}")]
    Serve(#[source] tonic::transport::Error),

    /// A background task panicked or was aborted.
    #[error("background task failed: {0}")]
    Join(#[from] tokio::task::JoinError),
}

impl Error {
    /// Wraps an I/O error with what was being done and to which path.
    pub fn io(action: &'static str, path: impl Into<PathBuf>) -> impl FnOnce(std::io::Error) -> Error {
        let path = path.into();
        move |source| Error::Io { action, path, source }
    }

    /// A connection failure, with the whole cause chain: tonic's own message is just
    /// "transport error", the useful part ("Connection refused") is in its sources.
    pub fn connect(url: &str) -> impl FnOnce(tonic::transport::Error) -> Error {
        let url = url.to_string();
        move |e| {
            let mut reason = e.to_string();
            let mut last = reason.clone();
            let mut source = std::error::Error::source(&e);
            while let Some(s) = source {
                // hyper and tonic wrap some causes twice with the same message; say it once.
                let text = s.to_string();
                if text != last {
                    reason.push_str(": ");
                    reason.push_str(&text);
                    last = text;
                }
                source = s.source();
            }
            Error::Connect { url, reason }
        }
    }

    /// Wraps a gRPC status with the name of the call that returned it.
    pub fn rpc(call: &'static str) -> impl FnOnce(tonic::Status) -> Error {
        move |status| Error::Rpc { call, status: Box::new(status) }
    }
}

/// The library's result type.
pub type Result<T, E = Error> = std::result::Result<T, E>;
