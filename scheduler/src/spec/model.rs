//! The validated model of a job file: what the core accepts and the store keeps ([`JobSpec`]).

use std::collections::BTreeMap;

use plexus_proto::{Algorithm, DType, ExchangeSchedule, ReduceOp, Resources, Split};
use serde::{Deserialize, Serialize};

use crate::error::SpecError;

/// Upper bounds that keep one job file from exhausting the coordinator's memory.
pub const MAX_REPLICAS: u32 = 100_000;
pub const MAX_SUBTASKS: u64 = 1_000_000;
/// The most retries a task may ask for. A retry is a new attempt with its own placement; past a
/// hundred, a task that keeps failing is not going to succeed, and an unbounded count turns a
/// broken command into a loop that occupies the cluster.
pub const MAX_RETRIES: u32 = 100;

/// Format of a job file.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum Format {
    Toml,
    Json,
}

impl Format {
    /// The format named by the request, else the file's extension, else TOML.
    pub fn infer(requested: &str, filename: &str) -> Result<Format, SpecError> {
        match requested.to_ascii_lowercase().as_str() {
            "toml" => Ok(Format::Toml),
            "json" => Ok(Format::Json),
            "" if filename.to_ascii_lowercase().ends_with(".json") => Ok(Format::Json),
            "" => Ok(Format::Toml),
            other => Err(SpecError::new(
                filename,
                None,
                format!("unknown job file format {other:?} (expected \"toml\" or \"json\")"),
            )),
        }
    }
}

/// What happens to the job when a subtask of a task fails past its retries.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum OnFailure {
    /// The job fails and everything still running is cancelled (the default).
    #[default]
    FailJob,
    /// The rest of the job runs: the tasks that depend on this one are skipped, and the job
    /// ends `completed-with-failures`.
    Continue,
}

impl OnFailure {
    pub const NAMES: &[&str] = &["fail-job", "continue"];
}

/// The first retry waits this long by default; each further retry waits twice as long as the one
/// before, up to [`MAX_RETRY_BACKOFF_MS`]. A second is long enough that a command failing at once
/// does not spin (a hundred retries take ~8 minutes, not a moment), short enough that a transient
/// failure costs little.
pub const DEFAULT_RETRY_BACKOFF_MS: u64 = 1_000;
/// The longest wait between two attempts, unless the first wait is already longer.
pub const MAX_RETRY_BACKOFF_MS: u64 = 5 * 60_000;

/// How long a subtask that has failed `failures` times waits before its next attempt: `base`,
/// doubling with every further failure, capped at [`MAX_RETRY_BACKOFF_MS`] (or `base` when that
/// is longer).
pub fn retry_delay_ms(base: u64, failures: u32) -> u64 {
    if base == 0 || failures == 0 {
        return 0;
    }
    let doubled = base.saturating_mul(1u64 << (failures - 1).min(40));
    doubled.min(MAX_RETRY_BACKOFF_MS.max(base))
}

/// What a subtask runs: a process, or a kind built into the worker.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Work {
    Command(Vec<String>),
    Kind(String),
}

/// An input: output `output` of the replicas of task `task` that `rank` selects.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct InputSpec {
    pub task: String,
    pub output: String,
    /// Which producer replicas: every one (`"gen/out"`), the consumer's own rank
    /// (`"gen/out[rank]"`) or one fixed rank (`"gen/out[0]"`). Jobs stored before selectors
    /// existed read as every one.
    #[serde(default, skip_serializing_if = "InputRank::is_all")]
    pub rank: InputRank,
}

/// Which replicas of the producer an input takes.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum InputRank {
    /// Every replica's object, in rank order.
    #[default]
    All,
    /// The object of the producer replica with the consumer's own rank.
    Same,
    /// The object of this one producer replica.
    Fixed(u32),
}

impl InputRank {
    pub fn is_all(&self) -> bool {
        *self == InputRank::All
    }

    /// The producer ranks that a consumer of rank `rank` reads, of a producer with `replicas`.
    pub fn ranks(self, rank: u32, replicas: u32) -> std::ops::Range<u32> {
        match self {
            InputRank::All => 0..replicas,
            InputRank::Same => rank..rank + 1,
            InputRank::Fixed(k) => k..k + 1,
        }
    }
}

/// One validated task of a job.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct TaskSpec {
    pub name: String,
    pub work: Work,
    pub resources: Resources,
    /// Tasks that must have fully succeeded first: the `after` list plus every task an input
    /// comes from, without duplicates, in file order.
    pub after: Vec<String>,
    pub replicas: u32,
    pub inputs: Vec<InputSpec>,
    pub outputs: Vec<String>,
    pub max_retries: u32,
    /// 0 = no timeout.
    pub timeout_ms: u64,
    pub env: BTreeMap<String, String>,
    /// Operation-count hint for the learned placer; `None` = let it estimate.
    pub flops: Option<f64>,
    /// Set for the collective kinds (`allreduce`, `reduce`, `alltoall`, `redistribute`), and for
    /// a command task with `communicator = true` (a gang of all its members, each given the
    /// collective endpoint; its element type and operator are then unused).
    #[serde(default)]
    pub collective: Option<CollectiveSpec>,
    /// What a failure past the retries does to the job.
    #[serde(default)]
    pub on_failure: OnFailure,
    /// The wait before the first retry (doubling after each further failure); 0 = none. Jobs
    /// stored before back-off existed read as 0.
    #[serde(default)]
    pub retry_backoff_ms: u64,
    /// Set when the task's replicas are (part of) a gang: `min_members`, `gang_timeout` or
    /// `gang` in the file, and always for the collective kinds (every member, the default
    /// deadline).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gang: Option<GangSpec>,
    /// What the task says of its GPU use (`gpu_share`, `gpu_memory`, `gpu_util`, `model_size`),
    /// for GPU sharing and the interference model (issue 16); `None` when it says nothing.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gpu_profile: Option<GpuProfile>,
    /// The labels a worker must (or must not) carry to run it (`constraints = {...}`); empty:
    /// any worker.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub constraints: Vec<super::constraints::Constraint>,
    /// Per-replica parameters (`sweep = {...}`), one row per replica; `None`: none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sweep: Option<super::sweep::Sweep>,
    /// `checkpoint = "<output>"`: one of the task's outputs that its command rewrites as it goes.
    /// When an attempt fails or is stopped, its worker keeps the file as it was left, and the
    /// subtask's next attempt (wherever it runs) gets it at `$PLEXUS_RESUME_FROM`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub checkpoint: Option<String>,
    /// The Python environment the command runs with (`python = {...}`, the task's or else the
    /// job's): the worker builds it once per node and puts it first on `PATH`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub python: Option<PythonEnv>,
    /// The container image the command runs in (`image = "name:tag"`, the task's or else the
    /// job's); placed only on workers with a container runtime.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub image: Option<String>,
}

/// A task's Python environment: its requirements, in order (a `requirements` file's lines, read
/// by the client at submit, then `pip`'s), each checked by
/// [`plexus_proto::runtime_env::check_requirement`].
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct PythonEnv {
    pub packages: Vec<String>,
}

/// A GPU task's own description of its GPU use.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub struct GpuProfile {
    /// `gpu_share = true`: its one GPU may be shared with other sharing tasks, as long as their
    /// `gpu_memory` fits the device. Such a task holds no whole device: its `resources.gpu` is
    /// 0 and its assignment still names the one device it runs on.
    pub share: bool,
    /// `gpu_memory`: the device memory it needs, bytes (required to share; 0 = not said).
    pub memory: u64,
    /// `gpu_util`: its GPU utilisation when alone, 0 < u ≤ 1, until one is measured.
    pub utilisation: Option<f64>,
    /// `model_size`: bytes it synchronises with its gang each iteration (0 = not said).
    pub model_bytes: u64,
}

impl TaskSpec {
    /// Whether its attempts run nothing at all (the built-in `noop`): such an attempt takes no
    /// slot of a worker's `--max-attempts`.
    pub fn runs_nothing(&self) -> bool {
        matches!(&self.work, Work::Kind(k) if k == "noop")
    }

    /// Whether the task shares its GPU (`gpu_share = true`).
    pub fn shares_gpu(&self) -> bool {
        self.gpu_profile.is_some_and(|p| p.share)
    }

    /// The device memory a sharing task needs on its GPU (0 for the others).
    pub fn shared_gpu_memory(&self) -> u64 {
        self.gpu_profile.filter(|p| p.share).map_or(0, |p| p.memory)
    }
}

/// A gang: members (the replicas of one task, or of several tasks of one job that name the same
/// `gang`) of which `min_members` start together or none does.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct GangSpec {
    /// Unique in its job: the `gang` field, else the task's name.
    pub name: String,
    /// How many members, over all the gang's tasks, must hold a reservation before any starts;
    /// the rest start as room appears.
    pub min_members: u32,
    /// The deadline for reaching `min_members`, counted from the gang's first reservation; then
    /// every reservation is rolled back and the gang retries after a back-off.
    pub timeout_ms: u64,
}

/// A gang's deadline when the file gives none (and a collective's): long enough for running
/// work to end on the workers it waits for, short enough that a gang that cannot fill lets
/// others go (YuniKorn's placeholders wait 15 minutes; most gangs here are smaller).
pub const DEFAULT_GANG_TIMEOUT_MS: u64 = 120_000;

/// The queue a job is in when its file names none.
pub const DEFAULT_QUEUE: &str = "default";

fn default_queue() -> String {
    DEFAULT_QUEUE.to_string()
}

/// What a collective task computes and how. Its input names, per member, the object of the
/// producer replica with the member's rank; its one output is the result.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct CollectiveSpec {
    /// The input objects are raw little-endian arrays of it. Stored by name (`"f32"`), as before
    /// it was an enum.
    pub dtype: DType,
    /// A reducing kind's operator (`sum` for the others, unused).
    pub op: ReduceOp,
    /// The rank that receives a `reduce`'s result (the others write an empty output).
    pub root: u32,
    /// `auto` (the data plane's cost model chooses per call, the default), `halving` (seed
    /// 003's pipelined recursive halving) or `ring`; a reducing kind's only.
    pub algorithm: Algorithm,
    /// Set for `alltoall` and `redistribute` (seed 004). Jobs stored before they existed have
    /// none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub exchange: Option<ExchangeSpec>,
}

/// An `alltoall`'s or a `redistribute`'s exchange.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ExchangeSpec {
    /// The order of the messages: `auto` (the cost model's choice, the default), `css`,
    /// `pairwise`, `shift`, `direct`, or a redistribute's `seed`.
    pub schedule: ExchangeSchedule,
    /// An `alltoall`'s cut of each input into N parts (`equal` for a `redistribute`, unused).
    pub split: Split,
    /// `split = counts`: elements sender i sends receiver j, row-major, N × N.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub counts: Vec<u64>,
    /// Set for a `redistribute`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub redistribute: Option<Redistribution>,
}

/// A `redistribute`: a 1-D array distributed cyclic(`from_block`) over the producer's `senders`
/// replicas becomes cyclic(`to_block`) over `receivers` members. The gang has
/// max(senders, receivers) members: those at or past `senders` have no input and only receive,
/// those at or past `receivers` only send and write an empty output.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Redistribution {
    pub senders: u32,
    pub from_block: u64,
    pub receivers: u32,
    pub to_block: u64,
    /// Seed 004's remapping after loop partitioning instead of a plain redistribution.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub remap: Option<Remap>,
}

/// The loop `for i in 0..iterations: A[a1·i + b1] = B[a2·i + b2]`: B is the senders' array
/// (cyclic(`from_block`)), A the receivers' (`len` elements, cyclic(`to_block`), zero where the
/// loop does not write).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Remap {
    pub a1: u64,
    pub b1: u64,
    pub a2: u64,
    pub b2: u64,
    pub iterations: u64,
    pub len: u64,
}

/// A validated job: tasks in file order, dependencies acyclic and resolved.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct JobSpec {
    pub name: String,
    pub tasks: Vec<TaskSpec>,
    /// Higher first; ties go to the older job. Jobs stored before priorities existed read as 0.
    #[serde(default)]
    pub priority: i64,
    /// The queue the job waits in: one gang at a time reserves per queue.
    #[serde(default = "default_queue")]
    pub queue: String,
    /// Jobs that must have succeeded before any task of this one starts (`after_jobs = [..]` in
    /// the file, or `plexus submit --after JOB`); if one fails or is cancelled, so is this one.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub after_jobs: Vec<plexus_proto::JobId>,
    /// The directory shipped with the job (`working_dir`, with its `excludes`): every command
    /// attempt runs in it, unpacked read-only. Jobs stored before it existed read as none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub working_dir: Option<WorkingDir>,
}

/// A job's `working_dir`: the path and excludes as the file states them (the client's to pack),
/// and the digest of the archive the client uploaded, which the coordinator sets at submit.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct WorkingDir {
    pub path: String,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub excludes: Vec<String>,
    /// BLAKE3 of the uploaded archive (`None` only between parsing and the coordinator's check).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub digest: Option<plexus_proto::Digest>,
    /// The archive's size in bytes.
    #[serde(default)]
    pub size: u64,
}

/// The most `excludes` a job may list, and the longest one.
pub const MAX_EXCLUDES: usize = 1_000;
pub const MAX_EXCLUDE_LEN: usize = 4_096;

/// The most jobs one job may wait for.
pub const MAX_AFTER_JOBS: usize = 64;

impl JobSpec {
    pub fn total_subtasks(&self) -> u64 {
        self.tasks.iter().map(|t| t.replicas as u64).sum()
    }

    pub fn task(&self, name: &str) -> Option<&TaskSpec> {
        self.tasks.iter().find(|t| t.name == name)
    }
}
