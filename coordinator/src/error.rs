//! The coordinator's one error enum, from start-up to a request. What a gRPC client sees of
//! each variant (its code and message) is decided in one place, [`crate::status`].

/// Everything that can go wrong in the coordinator, from start-up to a request.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The scheduling core refused a request (unknown job, finished job, unsatisfiable, …).
    #[error(transparent)]
    Scheduler(#[from] plexus_scheduler::Error),
    /// A request refused by the core, named by the job file it came from.
    #[error("{file}: {source}")]
    InFile { file: String, source: plexus_scheduler::Error },
    /// A message from the network that does not convert.
    #[error(transparent)]
    Convert(#[from] plexus_proto::ConvertError),
    /// A request that is well-formed but not acceptable (size limits, missing prerequisites).
    #[error("{0}")]
    Invalid(String),
    /// Something the request needs is not there (a worker that is not registered, a log that
    /// was not kept).
    #[error("{0}")]
    Unavailable(String),
    /// What the request would make exists already and may not be replaced (a worker id with a
    /// current certificate, claimed by a join with another key).
    #[error("{0}")]
    AlreadyExists(String),
    /// What the request names does not exist (a token id, an object no live worker holds).
    #[error("{0}")]
    NotFound(String),
    /// A bounded store is full of what live jobs still use.
    #[error("{0}")]
    Exhausted(String),
    /// The coordinator sheds load (`crate::shed`): refused before any work, to be retried after
    /// the given milliseconds.
    #[error("{0}")]
    Overloaded(String, u64),
    /// The call needs what a coordinator started with `--insecure` does not have (tokens,
    /// certificates).
    #[error("{0}")]
    Insecure(String),
    /// The caller did not prove who it is: no token, an unknown, revoked or expired one, or no
    /// worker certificate where one is needed.
    #[error("{0}")]
    Unauthenticated(String),
    /// The caller is known but may not make this call (a token's scope, a worker id that is
    /// not its certificate's).
    #[error("{0}")]
    PermissionDenied(String),
    /// This coordinator is a standby of an HA control plane: it does not act, and names the
    /// leader (`None`: none is elected yet) for the caller to follow.
    #[error("{}", standby_message(.me, .leader.as_deref()))]
    Standby { me: String, leader: Option<String> },
    /// A copy of an object relayed from a worker did not match the object's digest
    /// ([`plexus_proto::Error::DigestMismatch`]); the holder is treated as having lost it.
    #[error("{0}; that worker is treated as having lost it")]
    DigestMismatch(plexus_proto::Error),
    /// A queue's new share applies in memory but was not stored.
    #[error("the share of queue {queue:?} applies, but could not be stored (it lasts until a restart): {source}")]
    QueueNotStored { queue: String, source: Box<Error> },
    #[error("{0}: {1}")]
    Io(String, #[source] std::io::Error),
    /// What an administrative command was doing when `source` went wrong.
    #[error("{what}: {source}")]
    Context { what: String, source: Box<Error> },
    /// The running coordinator refused an administrative command (`what`).
    #[error("{what}: the running coordinator at {url} answered: {message}")]
    Remote { what: String, url: String, message: String },
    /// An administrative command found the store in use, and the coordinator holding it does
    /// not answer.
    #[error(
        "the store is held by another process, and no coordinator answers at {url} (pass --coordinator URL): {reason}"
    )]
    Unreachable { url: String, reason: String },
    /// A credential (the CA, a token) that could not be read or made.
    #[error(transparent)]
    Credentials(plexus_security::Error),
    /// The learned placer's store failed.
    #[error("the learned placer's store: {0}")]
    PolicyStore(plexus_policy::StoreError),
    /// etcd did not answer, or refused a request (not a fencing refusal).
    #[error("etcd: {0}")]
    Etcd(String),
    /// A write refused because this coordinator no longer leads (its election key is gone):
    /// it must stop acting and become a standby.
    #[error("this coordinator no longer leads: its write was refused by etcd (the lease on its election key expired)")]
    Fenced,
    #[error("sled: {0}")]
    Sled(#[from] sled::Error),
    #[error("schema: {0}")]
    Migration(#[from] plexus_migrations::MigrationError),
    #[error("record {key}: {reason}")]
    Corrupt { key: String, reason: String },
    #[error(
        "the store at {dir} is in use by another process (its lock was still held after {waited_ms} ms); stop that coordinator or choose another data directory"
    )]
    Locked { dir: String, waited_ms: u64 },
    #[error("starting the learned placer: {0}")]
    Policy(#[from] plexus_policy::PolicyError),
    /// A worker opened its assignment stream without a live registration.
    #[error("this worker session is not registered; call Register first")]
    NotRegistered,
    /// A stream ended because the coordinator is stopping.
    #[error("the coordinator is shutting down")]
    ShuttingDown,
    /// The engine thread stopped (shutdown or a storage failure).
    #[error("the coordinator engine has stopped")]
    EngineStopped,
    #[error("engine: {0}")]
    Engine(String),
    #[error("gRPC server: {0}")]
    Transport(#[source] tonic::transport::Error),
}

/// What a standby answers: which coordinator it is, and who leads if anyone does.
fn standby_message(me: &str, leader: Option<&str>) -> String {
    match leader {
        Some(l) => format!("this coordinator ({me}) is a standby; the leader is {l}"),
        None => format!("this coordinator ({me}) is a standby and no coordinator leads yet; try again shortly"),
    }
}
