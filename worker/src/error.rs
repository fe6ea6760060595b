//! The library's one error type, and the one place it becomes a gRPC status.
//!
//! Every fallible operation of the worker returns [`Error`]. Errors that concern a single attempt
//! (an input that cannot be fetched, a command that cannot be spawned) become the `error` text of
//! that attempt's FAILED report; errors that concern the whole worker (the data dir cannot be
//! created, the listen address cannot be bound) end [`crate::run`]; errors of a PeerService
//! request become its `Status` through `impl From<Error> for Status` below, which picks the code.

use std::os::unix::process::ExitStatusExt;
use std::path::PathBuf;
use std::process::ExitStatus;
use std::time::Duration;

use plexus_proto::{ObjectId, human_bytes};

/// Everything that can go wrong in the worker.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// A file system operation failed; `path` names the file or directory involved.
    #[error("{action} {}: {source}", path.display())]
    Io { action: &'static str, path: PathBuf, source: std::io::Error },

    /// Something arrived from the network (or was found on disk) that breaks the contract: not
    /// a valid id or name, a proto message that does not convert into a valid domain value, or
    /// one of the rules shared with the coordinator (`plexus_proto::rules`), e.g. too many rail
    /// addresses or one that is not `ip:port`.
    #[error(transparent)]
    Proto(#[from] plexus_proto::Error),

    /// An assignment that cannot be run as sent (e.g. neither a command nor a kind).
    #[error("invalid assignment: {0}")]
    InvalidAssignment(String),

    /// An assignment that breaks one of the shared rules (e.g. an env key the coordinator would
    /// have refused at submit: the worker does not trust the network).
    #[error("invalid assignment: {0}")]
    AssignmentRule(#[source] plexus_proto::Error),

    /// A collective assignment whose dtype, op or algorithm is not one of the names in
    /// `plexus_proto::collective`.
    #[error("invalid assignment: collective {field}: {source}")]
    CollectiveName { field: &'static str, source: plexus_proto::Error },

    /// A `PushObject` request without a client certificate: only a worker of the cluster may
    /// ask for a push.
    #[error("PushObject needs a worker's certificate")]
    PushUnauthenticated,

    /// The coordinator could not say which worker a `PushObject` caller is (`reason`: what the
    /// last coordinator asked answered).
    #[error("cannot check the caller of PushObject with the coordinator: {reason}")]
    PushUnchecked { reason: String },

    /// A `PushObject` to rails the calling worker did not register: pushes go only to the
    /// caller's own rails, so no worker can make another send data anywhere.
    #[error(
        "PushObject to rails {rails:?}: not all of them are registered by the calling worker {worker}; pushes go only to the caller's own rails"
    )]
    PushRefused { rails: Vec<String>, worker: String },

    /// This worker was given no coordinator to ask.
    #[error("no coordinator to ask")]
    NoCoordinator,

    /// The job's working dir could not be fetched or unpacked (`digest`: its archive's).
    #[error("working_dir {digest}: {reason}")]
    WorkingDir { digest: String, reason: String },

    /// The task's image is not on this worker and could not be pulled, or there is no runtime.
    #[error("image {image:?}: {reason}")]
    Image { image: String, reason: String },

    /// The task's Python environment could not be built (the installer's own words).
    #[error("python environment: {reason}")]
    PythonEnv { reason: String },

    /// A `PushObject` request that names no rail to push to.
    #[error("PushObject needs the requester's rail addresses")]
    NoRequesterRails,

    /// A command-line or configuration value is unusable.
    #[error("invalid configuration: {0}")]
    Config(String),

    /// Another worker process holds the data dir's lock: two workers on one data dir would share
    /// one worker id and evict each other.
    #[error(
        "another worker process{} holds the data dir {} (its lock file {} is locked); a data dir serves one worker at a time",
        pid.map(|p| format!(" (pid {p})")).unwrap_or_default(), dir.display(), dir.join("lock").display()
    )]
    DataDirLocked { dir: PathBuf, pid: Option<u32> },

    /// The isolation asked for with `--isolation` cannot be had here; `reason` says why.
    #[error("cannot use {mode} isolation: {reason}")]
    Isolation { mode: &'static str, reason: String },

    /// `--isolation` names no mechanism this worker knows.
    #[error("unknown isolation {input:?} (expected auto, cgroup-v2, cgroup-v1 or process-group)")]
    UnknownIsolation { input: String },

    /// `--gpus` given empty.
    #[error("expected all, none or device indices such as 0,2")]
    NoGpuSelection,

    /// A part of `--gpus` that is not a device index.
    #[error("{part:?} is not a GPU index (expected all, none or indices such as 0,2)")]
    NotAGpuIndex { part: String },

    /// A device index `--gpus` lists more than once.
    #[error("GPU {index} is listed twice")]
    GpuListedTwice { index: u32 },

    /// A device index `--gpus` lists that this node does not have (`have`: those nvidia-smi lists).
    #[error("--gpus: this node has no GPU {index} (nvidia-smi lists: {})", index_list(have))]
    NoSuchGpu { index: u32, have: Vec<u32> },

    /// `--metrics` that is neither an address nor `none`.
    #[error("{source}: expected an address such as 127.0.0.1:9265, or none")]
    MetricsAddr { source: std::net::AddrParseError },

    /// The GPU topology command (`nvidia-smi topo -m`) could not be run, read or waited for
    /// (`action`: "cannot run", "reading", "waiting for").
    #[error("{action} {command}: {source}")]
    TopologyIo { action: &'static str, command: String, source: std::io::Error },

    /// The GPU topology command printed more than the worker reads.
    #[error("{command} printed more than {max} bytes")]
    TopologyTooLong { command: String, max: usize },

    /// The GPU topology command ended unsuccessfully.
    #[error("{command} failed ({status})")]
    TopologyFailed { command: String, status: ExitStatus },

    /// The GPU topology command did not end within its limit (it was killed).
    #[error("{command} did not answer within {after:?}")]
    TopologyTimeout { command: String, after: Duration },

    /// The GPU topology command's output is not a topology matrix.
    #[error("cannot read {command}: {source}")]
    TopologyOutput { command: String, source: plexus_proto::Error },

    /// A size on the command line (`--cache`, `--memory`, …) that does not parse.
    #[error("invalid size {input:?}: {reason}")]
    Size { input: String, reason: String },

    /// A peer or coordinator URL could not be used to connect.
    #[error("cannot connect to {url}: {reason}")]
    Connect { url: String, reason: String },

    /// A gRPC call failed.
    #[error("{call} failed: {:?}: {}", status.code(), status.message())]
    Rpc { call: &'static str, status: Box<tonic::Status> },

    /// A gRPC call did not answer in time.
    #[error("{call} did not answer within {after:?}")]
    Timeout { call: &'static str, after: Duration },

    /// The coordinator does not know this worker's session and asked it to register again.
    #[error("the coordinator asked this worker to register again")]
    Reregister,

    /// The coordinator ended the assignment stream.
    #[error("the coordinator closed the assignment stream")]
    StreamClosed,

    /// A peer asked for an object this worker does not hold.
    #[error("object {object} is not in the cache of this worker")]
    ObjectNotFound { object: ObjectId },

    /// A peer asked for the logs of an attempt this worker has none of.
    #[error("this worker has no logs for attempt {attempt}")]
    NoLogs { attempt: plexus_proto::AttemptRef },

    /// Reading a cached object from the local disk failed (`action` is e.g. "cannot open").
    #[error("{action} object {object}: {source}")]
    ObjectIo { action: &'static str, object: ObjectId, source: std::io::Error },

    /// An object does not fit the object cache's bound even with every object no running attempt
    /// uses evicted: refused rather than kept over the bound.
    #[error(
        "object {object} is {} and this worker's object cache holds at most {} (--cache), {} of it used by running attempts: give the worker a larger --cache, or make the object smaller",
        bytesize::ByteSize(*size).display().iec(),
        bytesize::ByteSize(*capacity).display().iec(),
        bytesize::ByteSize(*pinned).display().iec()
    )]
    CacheFull { object: String, size: u64, capacity: u64, pinned: u64 },

    /// A peer sent an object that does not match what it announced.
    #[error("object {object}: {reason}")]
    BadObject { object: String, reason: String },

    /// A holder announced an object of another size than the assignment said it has: refused
    /// before anything is written, so a hostile or stale holder cannot fill the disk.
    #[error("object {object}: holder {holder} announced {announced} bytes, but the assignment says it has {expected}")]
    SizeMismatch { object: ObjectId, holder: String, announced: u64, expected: u64 },

    /// A holder sent more bytes of an object than it announced (which, when the assignment gave
    /// the size, is that size); the transfer was cut off there, before writing the excess.
    #[error("object {object}: holder {holder} sent more than the {announced} bytes it announced; cut off")]
    TooMuchData { object: ObjectId, holder: String, announced: u64 },

    /// A holder sent an object whose bytes do not hash to the digest its producer reported
    /// ([`plexus_proto::Error::DigestMismatch`], naming the object, the holder and both
    /// digests): the copy is refused, and the holder reported as having lost it.
    #[error("{0}")]
    DigestMismatch(plexus_proto::Error),

    /// This worker is already serving as many requests of a kind as it allows at once, and none
    /// finished within the wait.
    #[error(
        "this worker is busy: {limit} {call} requests are already being served and none finished within {waited:?}; try another holder or later"
    )]
    Busy { call: &'static str, limit: usize, waited: Duration },

    /// The data plane (the rail endpoint) failed: binding a rail, or a transfer.
    #[error("data plane: {0}")]
    Dataplane(#[from] plexus_dataplane::Error),

    /// Pushing an object to a peer over the data plane failed. (Boxed: the object id and the
    /// data plane's error together would double the size of every `Result` in the crate.)
    #[error("sending object {object} over the data plane: {source}")]
    Push { object: ObjectId, source: Box<plexus_dataplane::Error> },

    /// No holder of an input could serve it; `source` is why the last one tried failed.
    #[error("could not fetch input {object}: {source}")]
    FetchInput { object: ObjectId, source: Box<Error> },

    /// An assignment listed an input without any worker holding it.
    #[error("no holder was given")]
    NoHolder,

    /// One holder of an input could not serve it.
    #[error("{url}: {source}")]
    Holder { url: String, source: Box<Error> },

    /// An input could not be linked (or copied) into the attempt's work dir.
    #[error("could not place input {object} at {}: {source}", dest.display())]
    PlaceInput { object: ObjectId, dest: PathBuf, source: std::io::Error },

    /// A collective member's input could not be read from its work dir.
    #[error("could not read input {object}: {source}")]
    ReadInput { object: ObjectId, source: std::io::Error },

    /// A collective member's input is not a whole number of elements of its dtype.
    #[error("input {object} has {len} bytes, not a whole number of {dtype} elements ({} bytes each)", dtype.size())]
    InputShape { object: ObjectId, len: usize, dtype: plexus_proto::DType },

    /// An `alltoall`'s or `redistribute`'s input does not fit what the job declared (its split,
    /// its counts, its layout); the text names the field.
    #[error("{0}")]
    ExchangeInput(String),

    /// The collective's communicator could not be formed from the assignment's members.
    #[error("could not form the communicator: {0}")]
    Communicator(#[source] plexus_dataplane::Error),

    /// The collective (`allreduce` or `reduce`) itself failed.
    #[error("{kind} failed: {source}")]
    Collective { kind: &'static str, source: plexus_dataplane::Error },

    /// A declared output was not written by the attempt.
    #[error("declared output {name:?} was not written")]
    OutputMissing { name: String },

    /// A declared output is something other than a regular file (a link, a directory).
    #[error("declared output {name:?} is not a regular file")]
    OutputNotFile { name: String },

    /// A collective member's output could not be written into its work dir.
    #[error("could not write output {name:?}: {source}")]
    WriteOutput { name: String, source: std::io::Error },

    /// A declared output could not be moved into the cache.
    #[error("could not move output {name:?} into the cache: {source}")]
    StoreOutput { name: String, source: Box<Error> },

    /// The attempt's command could not be started.
    #[error("could not start {program:?}: {source}")]
    Spawn { program: String, source: std::io::Error },

    /// Waiting for the attempt's process failed.
    #[error("could not wait for the process: {0}")]
    Wait(#[source] std::io::Error),

    /// The attempt's command ended unsuccessfully: a non-zero exit code, or a signal.
    #[error("{}", exit_text(*status))]
    Exit { status: ExitStatus },

    /// The kernel killed a process of the attempt for exceeding its memory limit (its cgroup's
    /// OOM-kill count went up), rather than it dying of SIGKILL for another reason.
    #[error("killed: out of memory (limit {})", human_bytes(*limit))]
    OutOfMemory { limit: u64 },

    /// The attempt ran past its `timeout_ms`.
    #[error("timed out after {after:?}")]
    TimedOut { after: Duration },

    /// The attempt was cancelled (by the coordinator, or because the worker shuts down).
    #[error("cancelled")]
    Cancelled,

    /// Every uid of `--task-uids` is held by another job running on this worker (or names an
    /// account of the system): the attempt cannot get a uid of its own.
    #[error(
        "no free task uid in --task-uids {range}: {jobs} job(s) running here hold the rest (or they name accounts of the system)"
    )]
    NoTaskUid { range: String, jobs: usize },

    /// The PeerService server failed.
    #[error("peer server: {0}")]
    Serve(#[source] tonic::transport::Error),

    /// A background task panicked or was aborted.
    #[error("background task failed: {0}")]
    Join(#[from] tokio::task::JoinError),
}

/// How a process that did not succeed ended, as a shell would say it.
fn exit_text(status: ExitStatus) -> String {
    match (status.code(), status.signal()) {
        (Some(code), _) => format!("exit code {code}"),
        (None, Some(sig)) => format!("killed by signal {sig}"),
        (None, None) => format!("ended with {status}"),
    }
}

impl Error {
    /// Wraps an I/O error with what was being done and to which path.
    pub fn io(action: &'static str, path: impl Into<PathBuf>) -> impl FnOnce(std::io::Error) -> Error {
        let path = path.into();
        move |source| Error::Io { action, path, source }
    }

    /// Wraps an I/O error on a cached object with what was being done.
    pub fn object_io(action: &'static str, object: &ObjectId) -> impl FnOnce(std::io::Error) -> Error {
        let object = object.clone();
        move |source| Error::ObjectIo { action, object, source }
    }

    /// A connection failure, with the whole cause chain: tonic's own message is just
    /// "transport error", the useful part ("Connection refused") is in its sources.
    pub fn connect<E: std::error::Error>(url: &str) -> impl FnOnce(E) -> Error {
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

    /// The gRPC code this error is answered with when it ends a PeerService request: what the
    /// caller asked for is absent (NOT_FOUND), the request itself is wrong (INVALID_ARGUMENT), the
    /// data plane or another service failed (UNAVAILABLE), this worker is at a limit on what it
    /// serves at once (RESOURCE_EXHAUSTED: the caller may try another holder), the caller may
    /// not ask for it (UNAUTHENTICATED without a certificate, PERMISSION_DENIED for a push to
    /// rails that are not its own), or this worker
    /// failed locally (INTERNAL). Every variant is listed, so a new one has to choose.
    pub fn code(&self) -> tonic::Code {
        use tonic::Code;
        match self {
            Error::ObjectNotFound { .. } | Error::NoLogs { .. } => Code::NotFound,
            Error::Proto(_)
            | Error::InvalidAssignment(_)
            | Error::AssignmentRule(_)
            | Error::CollectiveName { .. }
            | Error::NoRequesterRails
            | Error::Config(_)
            | Error::UnknownIsolation { .. }
            | Error::NoGpuSelection
            | Error::NotAGpuIndex { .. }
            | Error::GpuListedTwice { .. }
            | Error::NoSuchGpu { .. }
            | Error::MetricsAddr { .. }
            | Error::Size { .. } => Code::InvalidArgument,
            Error::DataDirLocked { .. } => Code::FailedPrecondition,
            Error::PushUnauthenticated => Code::Unauthenticated,
            Error::PushUnchecked { .. } | Error::PushRefused { .. } => Code::PermissionDenied,
            Error::OutOfMemory { .. } | Error::Busy { .. } | Error::NoTaskUid { .. } | Error::CacheFull { .. } => {
                Code::ResourceExhausted
            }
            Error::Dataplane(_)
            | Error::Push { .. }
            | Error::Connect { .. }
            | Error::NoCoordinator
            | Error::WorkingDir { .. }
            | Error::PythonEnv { .. }
            | Error::Image { .. }
            | Error::Reregister
            | Error::StreamClosed
            | Error::Communicator(_)
            | Error::Collective { .. } => Code::Unavailable,
            // Another service's answer keeps its code: a peer's NOT_FOUND stays NOT_FOUND.
            Error::Rpc { status, .. } => status.code(),
            Error::Timeout { .. } | Error::TimedOut { .. } => Code::DeadlineExceeded,
            Error::Cancelled => Code::Cancelled,
            Error::FetchInput { source, .. } | Error::Holder { source, .. } => source.code(),
            Error::NoHolder => Code::NotFound,
            Error::DigestMismatch(_) => Code::DataLoss,
            Error::Io { .. }
            | Error::ObjectIo { .. }
            | Error::BadObject { .. }
            | Error::SizeMismatch { .. }
            | Error::TooMuchData { .. }
            | Error::PlaceInput { .. }
            | Error::ReadInput { .. }
            | Error::InputShape { .. }
            | Error::ExchangeInput(_)
            | Error::OutputMissing { .. }
            | Error::OutputNotFile { .. }
            | Error::WriteOutput { .. }
            | Error::StoreOutput { .. }
            | Error::Spawn { .. }
            | Error::Wait(_)
            | Error::Isolation { .. }
            | Error::TopologyIo { .. }
            | Error::TopologyTooLong { .. }
            | Error::TopologyFailed { .. }
            | Error::TopologyTimeout { .. }
            | Error::TopologyOutput { .. }
            | Error::Exit { .. }
            | Error::Serve(_)
            | Error::Join(_) => Code::Internal,
        }
    }
}

/// The one place a worker error becomes a gRPC status: the code from [`Error::code`], the
/// message the error's text.
impl From<Error> for tonic::Status {
    fn from(e: Error) -> tonic::Status {
        tonic::Status::new(e.code(), e.to_string())
    }
}

/// Device indices as a list people read: `0, 1, 2`, or `none`.
fn index_list(indices: &[u32]) -> String {
    if indices.is_empty() {
        return "none".to_string();
    }
    indices.iter().map(u32::to_string).collect::<Vec<_>>().join(", ")
}

/// The library's result type.
pub type Result<T, E = Error> = std::result::Result<T, E>;

#[cfg(test)]
mod tests {
    use super::*;
    use plexus_proto::JobId;

    #[test]
    fn each_kind_of_failure_gets_its_code_and_keeps_its_text() {
        let object = ObjectId { job: JobId::random(), task: "gen".into(), rank: 0, name: "x".into() };
        let cases = [
            (Error::ObjectNotFound { object: object.clone() }, tonic::Code::NotFound),
            (Error::Proto(plexus_proto::Error::TooManyRails { count: 65, max: 64 }), tonic::Code::InvalidArgument),
            (Error::PushUnauthenticated, tonic::Code::Unauthenticated),
            (Error::PushUnchecked { reason: "no coordinator to ask".into() }, tonic::Code::PermissionDenied),
            (
                Error::PushRefused { rails: vec!["10.0.0.1:7000".into()], worker: "wkr-1".into() },
                tonic::Code::PermissionDenied,
            ),
            (Error::NoRequesterRails, tonic::Code::InvalidArgument),
            (
                Error::Push { object: object.clone(), source: Box::new(plexus_dataplane::Error::Shutdown) },
                tonic::Code::Unavailable,
            ),
            (
                Error::object_io("cannot open", &object)(std::io::ErrorKind::PermissionDenied.into()),
                tonic::Code::Internal,
            ),
            (
                Error::Busy { call: "PushObject", limit: 4, waited: Duration::from_secs(30) },
                tonic::Code::ResourceExhausted,
            ),
        ];
        for (e, code) in cases {
            let text = e.to_string();
            let status = tonic::Status::from(e);
            assert_eq!((status.code(), status.message()), (code, text.as_str()));
        }
        assert_eq!(
            Error::ObjectNotFound { object: object.clone() }.to_string(),
            format!("object {object} is not in the cache of this worker")
        );
        assert_eq!(
            Error::Proto(plexus_proto::Error::TooManyRails { count: 65, max: 64 }).to_string(),
            "65 rail addresses; at most 64"
        );
        assert_eq!(Error::PushUnauthenticated.to_string(), "PushObject needs a worker's certificate");
        assert_eq!(
            Error::PushRefused { rails: vec!["10.0.0.1:7000".into()], worker: "wkr-1".into() }.to_string(),
            "PushObject to rails [\"10.0.0.1:7000\"]: not all of them are registered by the calling worker wkr-1; \
             pushes go only to the caller's own rails"
        );
    }

    #[test]
    fn byte_counts_read_as_people_write_them() {
        assert_eq!(human_bytes(64 << 20), "64.0 MiB");
        assert_eq!(human_bytes(3 << 29), "1.5 GiB");
        assert_eq!(human_bytes(1 << 40), "1.0 TiB");
        assert_eq!(human_bytes(1536), "1.5 KiB");
        assert_eq!(human_bytes(100), "100 B");
        assert_eq!(Error::OutOfMemory { limit: 64 << 20 }.to_string(), "killed: out of memory (limit 64.0 MiB)");
    }
}
