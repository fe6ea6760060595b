//! The one error type of the crate: every refusal of the core, of a job file, of a GPU
//! placement problem and of a stored table is a variant of [`Error`], and each names the input it
//! refused. A job file's errors carry their location in [`SpecError`], the payload of
//! [`Error::Spec`], so that callers can read the file, line and message apart.

use std::fmt;

use plexus_proto::{JobId, JobState, WorkerId};

/// Why the scheduling core refused a request or could not restore its state.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum Error {
    /// A job file that cannot be accepted (file, line, message).
    #[error(transparent)]
    Spec(#[from] SpecError),
    #[error("no job {0}")]
    NoJob(JobId),
    #[error("job {job} has no task {task:?}")]
    NoTask { job: JobId, task: String },
    #[error("task {task:?} of job {job} has {replicas} replica(s); rank {rank} does not exist")]
    NoRank { job: JobId, task: String, rank: u32, replicas: u32 },
    #[error("job {job} has already {}", state.as_str())]
    JobFinished { job: JobId, state: JobState },
    /// No set of live workers could ever run the job.
    #[error("{0}")]
    Unsatisfiable(String),
    #[error("job {0} already exists")]
    Duplicate(JobId),
    #[error("{0}")]
    NotPlaced(String),
    /// Stored records that do not make a consistent state.
    #[error("restoring state: {0}")]
    Restore(String),
    #[error("no worker {0}")]
    NoWorker(WorkerId),
    /// A worker that cannot be removed in its state (alive).
    #[error("{0}")]
    WorkerBusy(String),
    /// A placer name that is not known.
    #[error("unknown placer {name:?} (known: {known})")]
    UnknownPlacer { name: String, known: String },
    /// A queue name that is not letters, digits, '-' and '_', or too long.
    #[error("queue name {name:?}: letters, digits, '-' and '_', at most {max}")]
    QueueName { name: String, max: usize },
    #[error("share {share} of queue {queue:?} is not in (0, 1]")]
    QueueShare { queue: String, share: f64 },
    /// A GPU placement problem that is malformed (sizes that do not match, negative costs or
    /// weights).
    #[error("gpu placement problem: {0}")]
    GpuProblem(String),
    /// No feasible assignment of a GPU gang was found.
    #[error("no feasible assignment of {members} members to {gpus} candidate GPUs: {why}")]
    Infeasible { members: usize, gpus: usize, why: String },
    /// The exhaustive search would enumerate more assignments than its limit.
    #[error("exhaustive search over {count} assignments refused (limit {limit})")]
    TooLarge { count: u128, limit: u64 },
    /// A `key=value` setting (`--msc`, `--gpu-weights`) entry that is not `key=value`.
    #[error("{entry:?} is not key=value (keys: {keys})", keys = keys.join(", "))]
    MscSyntax { entry: String, keys: &'static [&'static str] },
    #[error("unknown key {key:?} (keys: {keys})", keys = keys.join(", "))]
    MscUnknownKey { key: String, keys: &'static [&'static str] },
    #[error("{0} is given twice")]
    MscDuplicate(String),
    #[error("{key} = {value:?} is not a finite number ≥ 0")]
    NotACost { key: &'static str, value: String },
    #[error(
        "{higher} = {higher_cost} is less than {lower} = {lower_cost}: costs must not decrease with distance (nvlink ≤ pix ≤ phb ≤ sys ≤ same-rack ≤ cross-rack)"
    )]
    MscDecreasing { lower: &'static str, lower_cost: f64, higher: &'static str, higher_cost: f64 },
    /// Worker-protocol timings that break the liveness contract (heartbeat interval, timeout,
    /// lease).
    #[error("{0}")]
    Timing(String),
    /// Stored measured speeds in a format this version does not read.
    #[error("stored estimates have format {found}, this coordinator reads format {expected}")]
    EstimatesFormat { found: u32, expected: u32 },
}

/// A job file that cannot be accepted: the payload of [`crate::Error::Spec`], kept as a struct so
/// the file, line and message can be read apart.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub struct SpecError {
    pub file: String,
    pub line: Option<usize>,
    pub message: String,
}

impl SpecError {
    pub(crate) fn new(file: &str, line: Option<usize>, message: impl Into<String>) -> Self {
        SpecError { file: file.to_string(), line, message: message.into() }
    }
}

impl fmt::Display for SpecError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.line {
            Some(l) => write!(f, "{}:{}: {}", self.file, l, self.message),
            None => write!(f, "{}: {}", self.file, self.message),
        }
    }
}
