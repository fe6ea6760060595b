//! What a member's endpoint is opened with, and its constants.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

/// How long a pending op may wait after another member's task exited 0 before it fails: the
/// data plane's default stall timeout.
pub const STALL_TIMEOUT: Duration = Duration::from_secs(30);

/// The socket's file name in the attempt's work dir.
pub const SOCKET_NAME: &str = "collective.sock";

/// What a member's endpoint is opened with.
pub struct Spec {
    pub rails: Arc<plexus_dataplane::Endpoint>,
    /// Every member's rails, in rank order.
    pub members: Vec<Vec<SocketAddr>>,
    pub rank: usize,
    /// The gang's tag base (its generation's).
    pub tag: u64,
    pub socket: PathBuf,
    /// The task's uid, which gets the socket (`None`: the worker's own user).
    pub uid: Option<u32>,
    pub secret: String,
    /// The worker's link meter (one across jobs, as its collective tasks use): what the gang's
    /// `auto` allreduce decides from.
    pub meter: Arc<plexus_dataplane::LinkMeter>,
}
