//! Job files: parsing (TOML, or JSON) and validation into a [`JobSpec`].
//!
//! Everything a job file can get wrong is found here, before anything is stored: syntax, unknown
//! fields, duplicate task names, unknown dependencies, dependency cycles (named), inputs that no
//! task produces, malformed sizes and durations. Errors carry the file name and, where one can be
//! found, the line. Whether any worker can ever satisfy a request is checked later, by the core,
//! because only it knows the registered workers.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::fmt;
use std::time::Duration;

use plexus_proto::ids::{check_job_name, check_output_name, check_task_name};
use plexus_proto::rules::{
    self, BUILTIN_KINDS, COLLECTIVE_KINDS, MAX_COUNTS_MEMBERS, MAX_REDISTRIBUTE_BLOCK, REDUCING_KINDS,
};
use plexus_proto::{Algorithm, DType, ExchangeSchedule, ReduceOp, Resources, Split};
use serde::{Deserialize, Serialize};

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

/// A job file that cannot be accepted: the payload of [`crate::Error::Spec`], kept as a struct so
/// the file, line and message can be read apart.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub struct SpecError {
    pub file: String,
    pub line: Option<usize>,
    pub message: String,
}

impl SpecError {
    fn new(file: &str, line: Option<usize>, message: impl Into<String>) -> Self {
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
    /// Set for the collective kinds (`allreduce`, `reduce`, `alltoall`, `redistribute`).
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
    /// `halving` (seed 003's pipelined recursive halving) or `ring`; a reducing kind's only.
    pub algorithm: Algorithm,
    /// Set for `alltoall` and `redistribute` (seed 004). Jobs stored before they existed have
    /// none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub exchange: Option<ExchangeSpec>,
}

/// An `alltoall`'s or a `redistribute`'s exchange.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ExchangeSpec {
    /// The order of the messages (default `css`).
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
}

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

// ---- the file as written ----------------------------------------------------------------

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawJob {
    name: Option<String>,
    priority: Option<i64>,
    queue: Option<String>,
    #[serde(default)]
    after_jobs: Vec<String>,
    #[serde(alias = "tasks", default)]
    task: Vec<RawTask>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawTask {
    name: String,
    command: Option<RawCommand>,
    kind: Option<String>,
    cpu: Option<f64>,
    memory: Option<RawSize>,
    gpu: Option<u32>,
    #[serde(default)]
    after: Vec<String>,
    replicas: Option<u32>,
    #[serde(default)]
    inputs: Vec<String>,
    #[serde(default)]
    outputs: Vec<String>,
    max_retries: Option<u32>,
    timeout: Option<RawDuration>,
    #[serde(default)]
    env: BTreeMap<String, String>,
    flops: Option<f64>,
    on_failure: Option<String>,
    retry_backoff: Option<RawDuration>,
    dtype: Option<String>,
    op: Option<String>,
    root: Option<u32>,
    algorithm: Option<String>,
    schedule: Option<String>,
    split: Option<String>,
    counts: Option<Vec<Vec<u64>>>,
    from_block: Option<i64>,
    to_block: Option<i64>,
    gpu_share: Option<bool>,
    gpu_memory: Option<RawSize>,
    gpu_util: Option<f64>,
    model_size: Option<RawSize>,
    min_members: Option<u32>,
    gang_timeout: Option<RawDuration>,
    gang: Option<String>,
}

/// `command = ["prog", "arg"]` (argv), or `command = "shell text"` run with `sh -c`.
#[derive(Deserialize)]
#[serde(untagged)]
enum RawCommand {
    Argv(Vec<String>),
    Shell(String),
}

/// `memory = "512MiB"` or a number of bytes.
#[derive(Deserialize)]
#[serde(untagged)]
enum RawSize {
    Bytes(u64),
    Text(String),
}

/// `timeout = "90s"` / `"5m"` or a number of seconds.
#[derive(Deserialize)]
#[serde(untagged)]
enum RawDuration {
    Seconds(u64),
    Text(String),
}

/// Default resource request of a task that names none: one core, no memory reservation.
const DEFAULT_CPU: f64 = 1.0;

/// Parses and validates a job file.
pub fn parse(source: &str, format: Format, filename: &str) -> Result<JobSpec, SpecError> {
    let raw: RawJob = match format {
        Format::Toml => toml::from_str(source).map_err(|e| {
            let line = e.span().map(|s| line_of_offset(source, s.start));
            SpecError::new(filename, line, e.message().trim().to_string())
        })?,
        Format::Json => serde_json::from_str(source).map_err(|e| {
            let line = (e.line() > 0).then_some(e.line());
            // serde_json appends " at line L column C"; the line is already in our prefix.
            let msg = e.to_string();
            let msg = msg.rsplit_once(" at line ").map(|(m, _)| m.to_string()).unwrap_or(msg);
            SpecError::new(filename, line, msg)
        })?,
    };
    Validator { source, file: filename, name_lines: task_name_lines(source, format) }.validate(raw)
}

struct Validator<'a> {
    source: &'a str,
    file: &'a str,
    /// Every line where a task name is declared, by name, in file order: built in one pass so
    /// that finding a task's line costs nothing per task (a per-task scan of the file made a
    /// 5,000-task file take seconds).
    name_lines: HashMap<&'a str, Vec<usize>>,
}

impl Validator<'_> {
    fn err(&self, line: Option<usize>, msg: impl Into<String>) -> SpecError {
        SpecError::new(self.file, line, msg)
    }

    /// Line of the `occurrence`-th (0-based) task named `name`.
    fn task_line(&self, name: &str, occurrence: usize) -> Option<usize> {
        self.name_lines.get(name).and_then(|l| l.get(occurrence)).copied()
    }

    /// Line of the first quoted `value` at or after the line where task `task` is named. It scans
    /// the file, so it is only called to report an error.
    fn value_line(&self, task: &str, value: &str) -> Option<usize> {
        let start = self.task_line(task, 0)?;
        let quoted = [format!("\"{value}\""), format!("'{value}'")];
        self.source
            .lines()
            .enumerate()
            .skip(start - 1)
            .find(|(_, l)| quoted.iter().any(|q| l.contains(q.as_str())))
            .map(|(i, _)| i + 1)
    }

    fn validate(&self, raw: RawJob) -> Result<JobSpec, SpecError> {
        if raw.task.is_empty() {
            return Err(self.err(None, "the job has no tasks (add at least one [[task]] table)"));
        }
        // A job name is printed in tables and terminals: it follows the task-name rules, so no
        // control characters or escapes reach anyone's screen.
        let name = match raw.name {
            Some(n) => {
                check_job_name(&n).map_err(|e| self.err(None, e.to_string()))?;
                n
            }
            None => default_job_name(self.file),
        };

        // Names first: every later check refers to tasks by name.
        let mut seen: HashMap<&str, usize> = HashMap::new();
        for t in &raw.task {
            let n = seen.entry(t.name.as_str()).or_insert(0);
            *n += 1;
            if *n == 2 {
                return Err(self.err(self.task_line(&t.name, 1), format!("duplicate task name {:?}", t.name)));
            }
            check_task_name(&t.name).map_err(|e| self.err(self.task_line(&t.name, 0), e.to_string()))?;
        }
        let outputs_of: HashMap<&str, &Vec<String>> = raw.task.iter().map(|t| (t.name.as_str(), &t.outputs)).collect();
        // A collective without `replicas` has one member per producer replica; resolved through
        // chains of collectives (whose producers are resolved first: there are no cycles among
        // inputs once validation passes, and a chain deeper than the task count is one).
        let replicas_of = declared_replicas(&raw.task);

        let mut tasks = Vec::with_capacity(raw.task.len());
        let mut total: u64 = 0;
        for t in &raw.task {
            let task = self.task(t, &outputs_of, &replicas_of)?;
            total += task.replicas as u64;
            if total > MAX_SUBTASKS {
                return Err(self
                    .err(self.task_line(&t.name, 0), format!("the job expands to more than {MAX_SUBTASKS} subtasks")));
            }
            tasks.push(task);
        }
        if let Some(cycle) = find_cycle(&tasks) {
            let line = self.task_line(&cycle[0], 0);
            return Err(self.err(line, format!("dependency cycle: {}", cycle.join(" -> "))));
        }
        self.gangs(&raw.task, &mut tasks)?;
        let queue = match raw.queue {
            Some(q) => {
                check_task_name(&q).map_err(|e| self.err(self.line_of_key("queue"), format!("queue {q:?}: {e}")))?;
                q
            }
            None => DEFAULT_QUEUE.to_string(),
        };
        if raw.after_jobs.len() > MAX_AFTER_JOBS {
            return Err(self.err(
                self.line_of_key("after_jobs"),
                format!("after_jobs lists {} jobs; at most {MAX_AFTER_JOBS}", raw.after_jobs.len()),
            ));
        }
        let mut after_jobs = Vec::with_capacity(raw.after_jobs.len());
        for (i, j) in raw.after_jobs.iter().enumerate() {
            let id: plexus_proto::JobId = j.parse().map_err(|e| {
                self.err(
                    self.line_of_key("after_jobs"),
                    format!(
                        "after_jobs[{i}] = {j:?}: {e} (a job id; `plexus submit --after` also takes names and prefixes)"
                    ),
                )
            })?;
            if !after_jobs.contains(&id) {
                after_jobs.push(id);
            }
        }
        Ok(JobSpec { name, tasks, priority: raw.priority.unwrap_or(0), queue, after_jobs })
    }

    fn task(
        &self,
        t: &RawTask,
        outputs_of: &HashMap<&str, &Vec<String>>,
        replicas_of: &HashMap<&str, u32>,
    ) -> Result<TaskSpec, SpecError> {
        let line = self.task_line(&t.name, 0);
        let at = |msg: String| self.err(line, format!("task {:?}: {msg}", t.name));

        let work = match (&t.command, &t.kind) {
            (Some(_), Some(_)) => return Err(at("set either `command` or `kind`, not both".into())),
            (None, None) => return Err(at("needs a `command` (argv or shell text) or a built-in `kind`".into())),
            (Some(RawCommand::Argv(argv)), None) => {
                if argv.is_empty() || argv[0].is_empty() {
                    return Err(at("`command` must not be empty".into()));
                }
                Work::Command(argv.clone())
            }
            (Some(RawCommand::Shell(text)), None) => {
                if text.trim().is_empty() {
                    return Err(at("`command` must not be empty".into()));
                }
                Work::Command(vec!["sh".into(), "-c".into(), text.clone()])
            }
            (None, Some(kind)) => {
                if !BUILTIN_KINDS.contains(&kind.as_str()) {
                    return Err(at(format!("unknown kind {kind:?} (built-in kinds: {})", BUILTIN_KINDS.join(", "))));
                }
                Work::Kind(kind.clone())
            }
        };

        let cpu = t.cpu.unwrap_or(DEFAULT_CPU);
        if !cpu.is_finite() || cpu < 0.0 {
            return Err(at(format!("cpu = {cpu} is not a non-negative number")));
        }
        let memory = match &t.memory {
            None => 0,
            Some(RawSize::Bytes(b)) => *b,
            Some(RawSize::Text(s)) => s
                .trim()
                .parse::<bytesize::ByteSize>()
                .map(|b| b.as_u64())
                .map_err(|e| at(format!("memory: {s:?} is not a size ({e})")))?,
        };
        let replicas = t.replicas.unwrap_or(1);
        if replicas == 0 || replicas > MAX_REPLICAS {
            return Err(at(format!("replicas = {replicas} is out of range (1..={MAX_REPLICAS})")));
        }
        let timeout_ms = match &t.timeout {
            None => 0,
            Some(RawDuration::Seconds(0)) => return Err(at("timeout must be positive".into())),
            Some(RawDuration::Seconds(s)) => s.saturating_mul(1000),
            Some(RawDuration::Text(s)) => {
                let d: Duration = humantime::parse_duration(s).map_err(|e| at(format!("timeout {s:?}: {e}")))?;
                if d.is_zero() {
                    return Err(at("timeout must be positive".into()));
                }
                d.as_millis().max(1) as u64
            }
        };
        let on_failure = match t.on_failure.as_deref() {
            None | Some("fail-job") => OnFailure::FailJob,
            Some("continue") => OnFailure::Continue,
            Some(v) => return Err(at(format!("on_failure = {v:?} is not one of {}", OnFailure::NAMES.join(", ")))),
        };
        let retry_backoff_ms = match &t.retry_backoff {
            None => DEFAULT_RETRY_BACKOFF_MS,
            Some(RawDuration::Seconds(s)) => s.saturating_mul(1000),
            Some(RawDuration::Text(s)) => {
                humantime::parse_duration(s).map_err(|e| at(format!("retry_backoff {s:?}: {e}")))?.as_millis() as u64
            }
        };
        if retry_backoff_ms > 24 * 3_600_000 {
            return Err(at(format!("retry_backoff of {retry_backoff_ms} ms is longer than a day")));
        }
        if let Some(f) = t.flops
            && (!f.is_finite() || f < 0.0)
        {
            return Err(at(format!("flops = {f} is not a non-negative number")));
        }

        let size = |field: &str, v: &Option<RawSize>| -> Result<Option<u64>, SpecError> {
            match v {
                None => Ok(None),
                Some(RawSize::Bytes(b)) => Ok(Some(*b)),
                Some(RawSize::Text(s)) => s
                    .trim()
                    .parse::<bytesize::ByteSize>()
                    .map(|b| Some(b.as_u64()))
                    .map_err(|e| at(format!("{field}: {s:?} is not a size ({e})"))),
            }
        };
        let gpu_memory = size("gpu_memory", &t.gpu_memory)?;
        let model_size = size("model_size", &t.model_size)?;
        let share = t.gpu_share.unwrap_or(false);
        let mut gpu = t.gpu.unwrap_or(0);
        let gpu_profile = if share || gpu_memory.is_some() || t.gpu_util.is_some() || model_size.is_some() {
            if share {
                match (t.gpu, gpu_memory) {
                    (Some(g), _) if g != 1 => return Err(at(format!("gpu_share = true shares one GPU; gpu = {g} asks for {g} whole devices"))),
                    (_, None | Some(0)) => return Err(at("gpu_share = true needs `gpu_memory`, the device memory the task needs (e.g. gpu_memory = \"10GiB\")".into())),
                    _ => {}
                }
                gpu = 0;
            } else if gpu == 0 {
                let field = if gpu_memory.is_some() {
                    "gpu_memory"
                } else if t.gpu_util.is_some() {
                    "gpu_util"
                } else {
                    "model_size"
                };
                return Err(at(format!(
                    "`{field}` describes GPU use; the task asks for no GPU (set gpu = 1, or gpu_share = true)"
                )));
            }
            if let Some(u) = t.gpu_util
                && !(u.is_finite() && u > 0.0 && u <= 1.0)
            {
                return Err(at(format!("gpu_util = {u} is not a utilisation in (0, 1]")));
            }
            if gpu_memory.is_some_and(|m| m > rules::MAX_NODE_BYTES) {
                return Err(at("gpu_memory is larger than any GPU".into()));
            }
            Some(GpuProfile {
                share,
                memory: gpu_memory.unwrap_or(0),
                utilisation: t.gpu_util,
                model_bytes: model_size.unwrap_or(0),
            })
        } else {
            None
        };

        let max_retries = t.max_retries.unwrap_or(0);
        if max_retries > MAX_RETRIES {
            return Err(at(format!("max_retries = {max_retries} is out of range (0..={MAX_RETRIES})")));
        }
        if let Work::Command(argv) = &work
            && let Some(i) = argv.iter().position(|a| a.contains('\0'))
        {
            return Err(at(format!("command argument {i} contains a NUL byte, which no process can receive")));
        }
        if let Some(k) = t.env.iter().find(|(_, v)| v.contains('\0')).map(|(k, _)| k) {
            return Err(at(format!("env {k:?}: the value contains a NUL byte, which no process can receive")));
        }
        let spec_bytes = match &work {
            Work::Command(argv) => argv.iter().map(String::len).sum::<usize>(),
            Work::Kind(k) => k.len(),
        } + t.env.iter().map(|(k, v)| k.len() + v.len()).sum::<usize>();
        if spec_bytes > rules::MAX_TASK_SPEC_BYTES {
            return Err(at(format!(
                "command and env take {spec_bytes} bytes; at most {} KiB per task (put large data in an input object)",
                rules::MAX_TASK_SPEC_BYTES >> 10
            )));
        }

        let mut outs = BTreeSet::new();
        for o in &t.outputs {
            check_output_name(o)
                .map_err(|e| self.err(self.value_line(&t.name, o), format!("task {:?}: {e}", t.name)))?;
            if !outs.insert(o.as_str()) {
                return Err(
                    self.err(self.value_line(&t.name, o), format!("task {:?}: output {o:?} is listed twice", t.name))
                );
            }
        }

        let mut after: Vec<String> = Vec::new();
        for dep in &t.after {
            let dline = || self.value_line(&t.name, dep);
            if dep == &t.name {
                return Err(self.err(dline(), format!("dependency cycle: {0} -> {0}", t.name)));
            }
            if !outputs_of.contains_key(dep.as_str()) {
                return Err(self.err(dline(), format!("task {:?}: unknown dependency {dep:?} in `after`", t.name)));
            }
            if !after.contains(dep) {
                after.push(dep.clone());
            }
        }

        let mut inputs = Vec::new();
        for input in &t.inputs {
            let iline = || self.value_line(&t.name, input);
            let Some((task, output)) = input.split_once('/') else {
                return Err(
                    self.err(iline(), format!("task {:?}: input {input:?} must be written <task>/<output>", t.name))
                );
            };
            let (output, rank) = match output.split_once('[') {
                None => (output, InputRank::All),
                Some((o, sel)) => {
                    let bad = || {
                        self.err(iline(), format!("task {:?}: input {input:?}: a rank selector is [rank] (the consumer's own) or [N] (one replica)", t.name))
                    };
                    let sel = sel.strip_suffix(']').ok_or_else(bad)?;
                    let rank =
                        if sel == "rank" { InputRank::Same } else { InputRank::Fixed(sel.parse().map_err(|_| bad())?) };
                    (o, rank)
                }
            };
            if task == t.name {
                return Err(self.err(iline(), format!("task {:?}: input {input:?} is its own output", t.name)));
            }
            let Some(produced) = outputs_of.get(task) else {
                return Err(self
                    .err(iline(), format!("task {:?}: input {input:?}: no task named {task:?} produces it", t.name)));
            };
            if !produced.iter().any(|o| o == output) {
                return Err(self.err(
                    iline(),
                    format!(
                        "task {:?}: input {input:?}: task {task:?} has no output {output:?} (its outputs: {})",
                        t.name,
                        list_or_none(produced)
                    ),
                ));
            }
            let producers = replicas_of.get(task).copied().unwrap_or(1);
            match rank {
                InputRank::Fixed(k) if k >= producers => {
                    return Err(self.err(iline(), format!("task {:?}: input {input:?}: task {task:?} has {producers} replica(s), so there is no rank {k}", t.name)));
                }
                InputRank::Same if replicas > producers => {
                    return Err(self.err(
                        iline(),
                        format!("task {:?}: input {input:?}: it has {replicas} replicas but task {task:?} has {producers}; [rank] needs a producer replica for every rank", t.name),
                    ));
                }
                _ => {}
            }
            if !after.iter().any(|a| a == task) {
                after.push(task.to_string());
            }
            inputs.push(InputSpec { task: task.to_string(), output: output.to_string(), rank });
        }

        for k in t.env.keys() {
            rules::check_env_key(k).map_err(|e| at(e.to_string()))?;
        }

        let collective = self.collective(t, &work, replicas, &inputs, replicas_of)?;
        let replicas = match &collective {
            Some(c) => match c.exchange.as_ref().and_then(|e| e.redistribute) {
                Some(r) => r.senders.max(r.receivers),
                None => replicas_of.get(inputs[0].task.as_str()).copied().unwrap_or(replicas),
            },
            None => replicas,
        };

        Ok(TaskSpec {
            name: t.name.clone(),
            work,
            resources: Resources { cpu, memory, gpu },
            after,
            replicas,
            inputs,
            outputs: t.outputs.clone(),
            max_retries,
            timeout_ms,
            env: t.env.clone(),
            flops: t.flops,
            collective,
            on_failure,
            retry_backoff_ms,
            gang: None,
            gpu_profile,
        })
    }

    /// Line of the first top-level `key = …` (for job-level fields), if any.
    fn line_of_key(&self, key: &str) -> Option<usize> {
        self.source
            .lines()
            .position(|l| l.trim_start().strip_prefix(key).is_some_and(|r| r.trim_start().starts_with('=')))
            .map(|i| i + 1)
    }

    /// Resolves `min_members`, `gang_timeout` and `gang` into each task's [`GangSpec`]: tasks
    /// naming one gang must become ready together (the same `after`), and agree on what they
    /// both set; `min_members` counts over all of them. Collectives are gangs of all their
    /// members and take none of these fields.
    fn gangs(&self, raw: &[RawTask], tasks: &mut [TaskSpec]) -> Result<(), SpecError> {
        // Gang name → the indices of its tasks, in file order.
        let mut members: Vec<(String, Vec<usize>)> = Vec::new();
        for (i, t) in raw.iter().enumerate() {
            let at = |msg: String| self.err(self.task_line(&t.name, 0), format!("task {:?}: {msg}", t.name));
            let asks = t.min_members.is_some() || t.gang_timeout.is_some() || t.gang.is_some();
            if tasks[i].collective.is_some() {
                if asks {
                    return Err(at("a collective is already a gang of all its members; `min_members`, `gang_timeout` and `gang` are not for it".into()));
                }
                let n = tasks[i].replicas;
                tasks[i].gang =
                    Some(GangSpec { name: tasks[i].name.clone(), min_members: n, timeout_ms: DEFAULT_GANG_TIMEOUT_MS });
                continue;
            }
            if !asks {
                continue;
            }
            let name = t.gang.clone().unwrap_or_else(|| t.name.clone());
            check_task_name(&name).map_err(|e| at(format!("gang {name:?}: {e}")))?;
            match members.iter_mut().find(|(n, _)| *n == name) {
                Some((_, v)) => v.push(i),
                None => members.push((name, vec![i])),
            }
        }
        for (name, idx) in members {
            let first = &raw[idx[0]];
            let line = self.task_line(&first.name, 0);
            let at = |msg: String| self.err(line, format!("gang {name:?}: {msg}"));
            if let Some(other) = tasks.iter().find(|t| t.name == name && !idx.iter().any(|&i| tasks[i].name == t.name))
            {
                return Err(at(format!(
                    "is also the name of task {:?}, which is not in it; name the gang differently",
                    other.name
                )));
            }
            let after = |i: usize| tasks[i].after.iter().collect::<std::collections::BTreeSet<_>>();
            if let Some(&odd) = idx.iter().find(|&&i| after(i) != after(idx[0])) {
                return Err(at(format!(
                    "its tasks do not become ready together: {:?} waits for {:?}, {:?} for {:?} (give them the same `after` and inputs)",
                    tasks[idx[0]].name, tasks[idx[0]].after, tasks[odd].name, tasks[odd].after
                )));
            }
            let total: u32 = idx.iter().map(|&i| tasks[i].replicas).sum();
            let mut min = None;
            let mut timeout = None;
            for &i in &idx {
                let t = &raw[i];
                if let Some(k) = t.min_members {
                    if min.is_some_and(|m| m != k) {
                        return Err(at(format!("its tasks set different min_members ({} and {k})", min.unwrap_or(0))));
                    }
                    min = Some(k);
                }
                if let Some(d) = &t.gang_timeout {
                    let ms = match d {
                        RawDuration::Seconds(s) => s.saturating_mul(1000),
                        RawDuration::Text(s) => humantime::parse_duration(s)
                            .map_err(|e| at(format!("gang_timeout {s:?}: {e}")))?
                            .as_millis() as u64,
                    };
                    if ms == 0 || ms > 24 * 3_600_000 {
                        return Err(at(format!("gang_timeout must be between 1 ms and a day, not {ms} ms")));
                    }
                    if timeout.is_some_and(|m| m != ms) {
                        return Err(at("its tasks set different gang_timeout".into()));
                    }
                    timeout = Some(ms);
                }
            }
            let min_members = min.unwrap_or(total);
            if min_members < 1 || min_members > total {
                return Err(at(format!(
                    "min_members = {min_members} is out of range (1..={total}, the gang's replicas)"
                )));
            }
            let gang =
                GangSpec { name: name.clone(), min_members, timeout_ms: timeout.unwrap_or(DEFAULT_GANG_TIMEOUT_MS) };
            for &i in &idx {
                tasks[i].gang = Some(gang.clone());
            }
        }
        Ok(())
    }

    /// Checks the fields of a collective kind (and that other tasks, and the other collective
    /// kinds, use none of its fields).
    fn collective(
        &self,
        t: &RawTask,
        work: &Work,
        replicas: u32,
        inputs: &[InputSpec],
        replicas_of: &HashMap<&str, u32>,
    ) -> Result<Option<CollectiveSpec>, SpecError> {
        let at = |msg: String| self.err(self.task_line(&t.name, 0), format!("task {:?}: {msg}", t.name));
        let fields = [
            ("dtype", t.dtype.is_some()),
            ("op", t.op.is_some()),
            ("root", t.root.is_some()),
            ("algorithm", t.algorithm.is_some()),
            ("schedule", t.schedule.is_some()),
            ("split", t.split.is_some()),
            ("counts", t.counts.is_some()),
            ("from_block", t.from_block.is_some()),
            ("to_block", t.to_block.is_some()),
        ];
        let set = |names: &[&str]| fields.iter().find(|(n, set)| *set && names.contains(n)).map(|(n, _)| *n);
        let kind = match work {
            Work::Kind(k) if rules::is_collective(k) => k.as_str(),
            _ => {
                if let Some(first) = fields.iter().find(|(_, set)| *set).map(|(n, _)| n) {
                    return Err(at(format!(
                        "`{first}` is only for the collective kinds ({})",
                        COLLECTIVE_KINDS.join(", ")
                    )));
                }
                return Ok(None);
            }
        };
        let a_kind = if kind.starts_with('a') { format!("an {kind}") } else { format!("a {kind}") };
        // Which fields belong to which kind.
        let (foreign, owner): (&[&str], &str) = match kind {
            "allreduce" | "reduce" => {
                (&["schedule", "split", "counts", "from_block", "to_block"], "alltoall and redistribute")
            }
            "alltoall" => (&["op", "root", "algorithm", "from_block", "to_block"], "the other collective kinds"),
            _ => (&["op", "root", "algorithm", "split", "counts"], "the other collective kinds"),
        };
        if let Some(f) = set(foreign) {
            return Err(at(format!("`{f}` is not a field of {a_kind} (it belongs to {owner})")));
        }
        // Only the names themselves are accepted in a job file (not the data plane's aliases).
        fn pick<T: std::str::FromStr>(
            at: &dyn Fn(String) -> SpecError,
            kind: &str,
            field: &str,
            value: &Option<String>,
            allowed: &[&str],
            default: Option<T>,
        ) -> Result<T, SpecError> {
            match (value.as_deref(), default) {
                (Some(v), _) if allowed.contains(&v) => {
                    v.parse().map_err(|_| at(format!("{field} = {v:?} is not one of {}", allowed.join(", "))))
                }
                (Some(v), _) => Err(at(format!("{field} = {v:?} is not one of {}", allowed.join(", ")))),
                (None, Some(d)) => Ok(d),
                (None, None) => Err(at(format!("{kind} needs `{field}` (one of {})", allowed.join(", ")))),
            }
        }
        let split = match (kind, &t.counts) {
            ("alltoall", Some(_)) => pick(&at, &a_kind, "split", &t.split, &["counts"], Some(Split::Counts))?,
            ("alltoall", None) => pick(&at, &a_kind, "split", &t.split, Split::NAMES, Some(Split::Equal))?,
            _ => Split::Equal,
        };
        if split == Split::Counts && t.counts.is_none() {
            return Err(at(
                "split = \"counts\" needs a `counts` table (counts[i][j]: elements member i sends member j)".into(),
            ));
        }
        if split == Split::File {
            if inputs.len() != 2 {
                return Err(at(format!(
                    "split = \"file\" takes two inputs, the data and the split file of the same producer (e.g. inputs = [\"p/data\", \"p/split\"]); it has {}",
                    inputs.len()
                )));
            }
            if inputs[1].task != inputs[0].task {
                return Err(at(format!(
                    "split = \"file\": the split file must come from the data's producer {:?}, not {:?}",
                    inputs[0].task, inputs[1].task
                )));
            }
        } else if inputs.len() != 1 {
            let what = if REDUCING_KINDS.contains(&kind) {
                "the object each member reduces"
            } else {
                "the object each member sends"
            };
            return Err(at(format!(
                "{a_kind} takes exactly one input, {what} (e.g. inputs = [\"grads/grad\"]); it has {}",
                inputs.len()
            )));
        }
        if t.outputs.len() != 1 {
            return Err(at(format!("{a_kind} writes exactly one output, its result; it declares {}", t.outputs.len())));
        }
        if inputs.iter().any(|i| !i.rank.is_all()) {
            return Err(at(format!(
                "{a_kind} member already reads its own rank's object; write its input without a [..] selector"
            )));
        }
        let producer = inputs[0].task.as_str();
        let members = replicas_of.get(producer).copied().unwrap_or(1);
        if t.replicas.is_some() && replicas != members && kind != "redistribute" {
            return Err(at(format!(
                "replicas = {replicas}, but {a_kind} has one member per replica of {producer:?}, which has {members}"
            )));
        }
        let dtype: DType = pick(&at, &a_kind, "dtype", &t.dtype, DType::NAMES, None)?;
        if REDUCING_KINDS.contains(&kind) {
            let op = pick(&at, &a_kind, "op", &t.op, ReduceOp::NAMES, Some(ReduceOp::Sum))?;
            let algorithm = pick(&at, &a_kind, "algorithm", &t.algorithm, Algorithm::NAMES, Some(Algorithm::Halving))?;
            let root = match (kind, t.root) {
                ("allreduce", Some(_)) => {
                    return Err(at(
                        "`root` is only for a reduce (an allreduce leaves the result on every member)".into()
                    ));
                }
                (_, Some(r)) if r >= members => {
                    return Err(at(format!("root = {r} is not a member's rank (0..{members})")));
                }
                (_, r) => r.unwrap_or(0),
            };
            return Ok(Some(CollectiveSpec { dtype, op, root, algorithm, exchange: None }));
        }
        let schedules: &[&str] =
            if kind == "redistribute" { ExchangeSchedule::NAMES } else { &["css", "shift", "pairwise"] };
        let schedule = pick(&at, &a_kind, "schedule", &t.schedule, schedules, Some(ExchangeSchedule::Css))?;
        let mut counts = Vec::new();
        if let Some(table) = &t.counts {
            let n = members as usize;
            if n > MAX_COUNTS_MEMBERS {
                return Err(at(format!(
                    "a `counts` table is for at most {MAX_COUNTS_MEMBERS} members; this alltoall has {n} (use split = \"file\")"
                )));
            }
            if table.len() != n {
                return Err(at(format!(
                    "counts has {} rows; it needs one per member ({n}, the replicas of {producer:?})",
                    table.len()
                )));
            }
            if let Some((i, row)) = table.iter().enumerate().find(|(_, r)| r.len() != n) {
                return Err(at(format!("counts[{i}] has {} entries; it needs one per member ({n})", row.len())));
            }
            let limit = rules::MAX_NODE_BYTES / dtype.size() as u64;
            if let Some((i, _)) = table
                .iter()
                .enumerate()
                .find(|(_, r)| r.iter().try_fold(0u64, |a, &c| a.checked_add(c)).is_none_or(|sum| sum > limit))
            {
                return Err(at(format!("counts[{i}] adds up to more elements than any input can hold")));
            }
            counts = table.concat();
        }
        let redistribute = if kind == "redistribute" {
            let block = |field: &str, v: Option<i64>| match v {
                None => Err(at(format!("a redistribute needs `{field}`, the block size in elements"))),
                Some(b) if b <= 0 => Err(at(format!("{field} = {b}: a block size must be at least 1 element"))),
                Some(b) if b as u64 > MAX_REDISTRIBUTE_BLOCK => Err(at(format!(
                    "{field} = {b} is larger than the largest block ({MAX_REDISTRIBUTE_BLOCK} elements)"
                ))),
                Some(b) => Ok(b as u64),
            };
            let from_block = block("from_block", t.from_block)?;
            let to_block = block("to_block", t.to_block)?;
            let receivers = t.replicas.unwrap_or(members);
            Some(Redistribution { senders: members, from_block, receivers, to_block })
        } else {
            None
        };
        let exchange = ExchangeSpec { schedule, split, counts, redistribute };
        Ok(Some(CollectiveSpec {
            dtype,
            op: ReduceOp::Sum,
            root: 0,
            algorithm: Algorithm::Halving,
            exchange: Some(exchange),
        }))
    }
}

/// Each task's replica count: as declared, or for a collective kind without `replicas`, its
/// input producer's (followed through chains of collectives; a cycle resolves to 1 and is
/// reported by the cycle check).
fn declared_replicas<'a>(tasks: &'a [RawTask]) -> HashMap<&'a str, u32> {
    let by_name: HashMap<&'a str, &'a RawTask> = tasks.iter().map(|t| (t.name.as_str(), t)).collect();
    fn resolve(by_name: &HashMap<&str, &RawTask>, t: &RawTask, depth: usize) -> u32 {
        if depth > by_name.len() {
            return 1;
        }
        let collective = t.kind.as_deref().is_some_and(rules::is_collective);
        let producer = t.inputs.first().and_then(|i| i.split_once('/')).and_then(|(p, _)| by_name.get(p));
        match (t.replicas, collective, producer) {
            // A redistribute's gang is max(P, Q): its producer's replicas and its own.
            (r, true, Some(p)) if t.kind.as_deref() == Some("redistribute") => {
                let senders = resolve(by_name, p, depth + 1);
                r.unwrap_or(senders).max(senders)
            }
            (Some(r), _, _) => r,
            (None, true, Some(p)) => resolve(by_name, p, depth + 1),
            _ => 1,
        }
    }
    tasks.iter().map(|t| (t.name.as_str(), resolve(&by_name, t, 0))).collect()
}

fn list_or_none(v: &[String]) -> String {
    if v.is_empty() { "none".into() } else { v.join(", ") }
}

/// A job without a `name` is named after its file, with every character a name may not hold
/// replaced by `-` (so the default always passes [`check_job_name`]).
fn default_job_name(file: &str) -> String {
    let base = file.rsplit('/').next().unwrap_or(file);
    let stem = base.rsplit_once('.').map(|(s, _)| s).unwrap_or(base);
    if stem.is_empty() {
        return "job".into();
    }
    let mut name: String = stem
        .chars()
        .take(64)
        .map(|c| if c.is_ascii_alphanumeric() || c == '_' || c == '-' { c } else { '-' })
        .collect();
    if !name.starts_with(|c: char| c.is_ascii_alphanumeric() || c == '_') {
        name.insert(0, '_');
        name.truncate(64);
    }
    if check_job_name(&name).is_ok() { name } else { "job".into() }
}

fn line_of_offset(source: &str, offset: usize) -> usize {
    source.as_bytes()[..offset.min(source.len())].iter().filter(|&&b| b == b'\n').count() + 1
}

/// Lines (1-based) where each task name is declared, in file order, found in one pass over the
/// text. The parsers do not keep positions of values, so a declaration is found as `name = "x"`
/// (or `'x'`) in TOML, `"name": "x"` in JSON.
fn task_name_lines(source: &str, format: Format) -> HashMap<&str, Vec<usize>> {
    // The job's own `name = ...` is a top-level key, which also matches in TOML; a task's
    // declaration follows a `[[task]]` header, so lines before the first table are skipped.
    let first_table = match format {
        Format::Toml => source.lines().position(|l| l.trim_start().starts_with('[')).unwrap_or(usize::MAX),
        Format::Json => 0,
    };
    let mut lines: HashMap<&str, Vec<usize>> = HashMap::new();
    for (i, line) in source.lines().enumerate() {
        if format == Format::Toml && i < first_table {
            continue;
        }
        let rest = line.trim_start();
        let after_key = match format {
            Format::Toml => rest.strip_prefix("name").and_then(|r| r.trim_start().strip_prefix('=')),
            Format::Json => rest.find("\"name\"").and_then(|p| rest[p + 6..].trim_start().strip_prefix(':')),
        };
        let Some(value) = after_key.map(str::trim_start) else { continue };
        let Some(quote) = value.chars().next().filter(|c| *c == '"' || *c == '\'') else { continue };
        if let Some(end) = value[1..].find(quote) {
            lines.entry(&value[1..1 + end]).or_default().push(i + 1);
        }
    }
    lines
}

/// Finds a dependency cycle and returns it as task names, first name repeated at the end.
///
/// A depth-first search with an explicit stack: a valid job may be a chain of 10,000 tasks, and
/// recursion that deep overflows a thread's stack.
fn find_cycle(tasks: &[TaskSpec]) -> Option<Vec<String>> {
    let index: HashMap<&str, usize> = tasks.iter().enumerate().map(|(i, t)| (t.name.as_str(), i)).collect();
    // 0 = unvisited, 1 = on the current path, 2 = done.
    let mut mark = vec![0u8; tasks.len()];
    // The current path: (task, index of the next dependency to look at).
    let mut path: Vec<(usize, usize)> = Vec::new();
    for root in 0..tasks.len() {
        if mark[root] != 0 {
            continue;
        }
        mark[root] = 1;
        path.push((root, 0));
        while let Some(&mut (i, ref mut next)) = path.last_mut() {
            let Some(dep) = tasks[i].after.get(*next) else {
                mark[i] = 2;
                path.pop();
                continue;
            };
            *next += 1;
            let j = index[dep.as_str()];
            match mark[j] {
                1 => {
                    let start = path.iter().position(|&(p, _)| p == j).unwrap_or(0);
                    // The path runs from dependents to dependencies; print it in run order.
                    let mut names: Vec<String> =
                        path[start..].iter().rev().map(|&(p, _)| tasks[p].name.clone()).collect();
                    names.push(names[0].clone());
                    return Some(names);
                }
                0 => {
                    mark[j] = 1;
                    path.push((j, 0));
                }
                _ => {}
            }
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    fn toml(src: &str) -> Result<JobSpec, SpecError> {
        parse(src, Format::Toml, "job.toml")
    }

    const FAN: &str = r#"
name = "fan"

[[task]]
name = "gen"
command = ["sh", "-c", "echo $PLEXUS_RANK > $PLEXUS_OUT/numbers"]
replicas = 8
outputs = ["numbers"]
memory = "64MiB"
timeout = "30s"
max_retries = 2

[[task]]
name = "sum"
command = "cat $PLEXUS_IN/gen/*/numbers | paste -sd+ | bc > $PLEXUS_OUT/total"
inputs = ["gen/numbers"]
outputs = ["total"]
cpu = 0.5
"#;

    #[test]
    fn parses_a_fan_out_fan_in_job() {
        let j = toml(FAN).unwrap();
        assert_eq!(j.name, "fan");
        assert_eq!(j.total_subtasks(), 9);
        let gen_task = &j.tasks[0];
        assert_eq!(gen_task.replicas, 8);
        assert_eq!(gen_task.resources, Resources { cpu: 1.0, memory: 64 << 20, gpu: 0 });
        assert_eq!(gen_task.timeout_ms, 30_000);
        assert_eq!(gen_task.max_retries, 2);
        let sum = &j.tasks[1];
        assert_eq!(sum.after, vec!["gen".to_string()], "an input implies a dependency");
        assert_eq!(
            sum.work,
            Work::Command(vec![
                "sh".into(),
                "-c".into(),
                "cat $PLEXUS_IN/gen/*/numbers | paste -sd+ | bc > $PLEXUS_OUT/total".into()
            ])
        );
        assert_eq!(sum.inputs, vec![InputSpec { task: "gen".into(), output: "numbers".into(), rank: InputRank::All }]);
    }

    #[test]
    fn json_is_accepted_too() {
        let src = r#"{"name": "j", "tasks": [{"name": "a", "kind": "noop", "replicas": 3, "cpu": 0}]}"#;
        let j = parse(src, Format::Json, "j.json").unwrap();
        assert_eq!(j.tasks[0].work, Work::Kind("noop".into()));
        assert_eq!(j.tasks[0].resources.cpu, 0.0);
    }

    #[test]
    fn bad_toml_names_the_line() {
        let e = toml("name = \"x\"\n[[task]]\nname = \"a\"\ncommand = [\"true\"\n").unwrap_err();
        assert_eq!(e.line, Some(4), "{e}");
        assert!(e.to_string().starts_with("job.toml:4:"), "{e}");
    }

    #[test]
    fn unknown_field_is_rejected_with_its_line() {
        let e = toml("[[task]]\nname = \"a\"\ncommand = [\"true\"]\ncpus = 2\n").unwrap_err();
        assert!(e.message.contains("unknown field `cpus`"), "{e}");
        assert_eq!(e.line, Some(4));
    }

    #[test]
    fn duplicate_task_names_point_at_the_second() {
        let e = toml("[[task]]\nname = \"a\"\nkind = \"noop\"\n[[task]]\nname = \"a\"\nkind = \"noop\"\n").unwrap_err();
        assert_eq!(e.message, "duplicate task name \"a\"");
        assert_eq!(e.line, Some(5));
    }

    #[test]
    fn unknown_dependency() {
        let e = toml("[[task]]\nname = \"a\"\nkind = \"noop\"\nafter = [\"b\"]\n").unwrap_err();
        assert_eq!(e.message, "task \"a\": unknown dependency \"b\" in `after`");
        assert_eq!(e.line, Some(4));
    }

    #[test]
    fn cycles_are_named() {
        let src = "[[task]]\nname = \"a\"\nkind = \"noop\"\nafter = [\"c\"]\n[[task]]\nname = \"b\"\nkind = \"noop\"\nafter = [\"a\"]\n[[task]]\nname = \"c\"\nkind = \"noop\"\nafter = [\"b\"]\n";
        let e = toml(src).unwrap_err();
        assert!(e.message.starts_with("dependency cycle: "), "{e}");
        // Every member appears and the cycle closes on its first name.
        let names: Vec<&str> = e.message["dependency cycle: ".len()..].split(" -> ").collect();
        assert_eq!(names.len(), 4);
        assert_eq!(names[0], names[3]);
        for n in ["a", "b", "c"] {
            assert!(names.contains(&n));
        }
        let self_loop = toml("[[task]]\nname = \"a\"\nkind = \"noop\"\nafter = [\"a\"]\n").unwrap_err();
        assert_eq!(self_loop.message, "dependency cycle: a -> a");
    }

    #[test]
    fn collectives_take_one_member_per_producer_replica() {
        let producer = "[[task]]\nname = \"g\"\ncommand = \"true\"\nreplicas = 4\noutputs = [\"x\"]\n";
        let j = toml(&format!("{producer}[[task]]\nname = \"s\"\nkind = \"allreduce\"\ninputs = [\"g/x\"]\noutputs = [\"y\"]\ndtype = \"f32\"\n")).unwrap();
        let s = &j.tasks[1];
        assert_eq!(s.replicas, 4);
        assert_eq!(
            s.collective,
            Some(CollectiveSpec {
                dtype: DType::F32,
                op: ReduceOp::Sum,
                root: 0,
                algorithm: Algorithm::Halving,
                exchange: None
            })
        );
        assert_eq!(j.total_subtasks(), 8);
        let r = toml(&format!(
            "{producer}[[task]]\nname = \"r\"\nkind = \"reduce\"\ninputs = [\"g/x\"]\noutputs = [\"y\"]\ndtype = \"i64\"\nop = \"max\"\nroot = 3\nalgorithm = \"ring\"\nreplicas = 4\n"
        ))
        .unwrap();
        assert_eq!(
            r.tasks[1].collective.as_ref().map(|c| (c.op.name(), c.root, c.algorithm.name())),
            Some(("max", 3, "ring"))
        );

        let bad = |task: &str| toml(&format!("{producer}[[task]]\nname = \"s\"\n{task}")).unwrap_err().message;
        let ar = "kind = \"allreduce\"\noutputs = [\"y\"]\n";
        assert!(bad(&format!("{ar}inputs = [\"g/x\"]\n")).contains("needs `dtype`"));
        assert!(
            bad(&format!("{ar}inputs = [\"g/x\"]\ndtype = \"f16\"\n"))
                .contains("dtype = \"f16\" is not one of f32, f64, i32, i64")
        );
        assert!(bad(&format!("{ar}inputs = [\"g/x\"]\ndtype = \"f32\"\nop = \"avg\"\n")).contains("op = \"avg\""));
        assert!(
            bad(&format!("{ar}inputs = [\"g/x\"]\ndtype = \"f32\"\nroot = 1\n"))
                .contains("`root` is only for a reduce")
        );
        assert!(
            bad(&format!("{ar}inputs = [\"g/x\"]\ndtype = \"f32\"\nreplicas = 3\n"))
                .contains("one member per replica of \"g\", which has 4")
        );
        assert!(bad(&format!("{ar}dtype = \"f32\"\n")).contains("exactly one input"));
        assert!(
            bad("kind = \"reduce\"\ninputs = [\"g/x\"]\noutputs = [\"y\"]\ndtype = \"f32\"\nroot = 4\n")
                .contains("root = 4 is not a member's rank")
        );
        assert!(bad("kind = \"reduce\"\ninputs = [\"g/x\"]\ndtype = \"f32\"\n").contains("exactly one output"));
        assert!(bad("command = \"true\"\ndtype = \"f32\"\n").contains("`dtype` is only for the collective kinds"));
    }

    #[test]
    fn alltoall_and_redistribute_are_gangs_with_their_own_fields() {
        let producer = "[[task]]\nname = \"g\"\ncommand = \"true\"\nreplicas = 4\noutputs = [\"x\", \"split\"]\n";
        let job = |task: &str| toml(&format!("{producer}[[task]]\nname = \"s\"\noutputs = [\"y\"]\n{task}"));
        let a = job("kind = \"alltoall\"\ninputs = [\"g/x\"]\ndtype = \"i32\"\n").unwrap();
        let s = &a.tasks[1];
        let x = s.collective.as_ref().and_then(|c| c.exchange.clone()).expect("an exchange");
        assert_eq!((s.replicas, x.schedule, x.split), (4, ExchangeSchedule::Css, Split::Equal));
        assert_eq!(s.gang.as_ref().map(|g| g.min_members), Some(4), "a gang of all its members");
        let t = job("kind = \"alltoall\"\ninputs = [\"g/x\"]\ndtype = \"f64\"\nschedule = \"shift\"\ncounts = [[1,2,3,4],[0,0,0,0],[5,5,5,5],[9,0,0,1]]\n").unwrap();
        let x = t.tasks[1].collective.as_ref().and_then(|c| c.exchange.clone()).unwrap();
        assert_eq!((x.split, x.schedule, x.counts.len(), x.counts[8]), (Split::Counts, ExchangeSchedule::Shift, 16, 5));
        let f =
            job("kind = \"alltoall\"\ninputs = [\"g/x\", \"g/split\"]\ndtype = \"i64\"\nsplit = \"file\"\n").unwrap();
        assert_eq!(f.tasks[1].inputs.len(), 2);

        // A redistribute's gang is max(P, Q).
        let r = job("kind = \"redistribute\"\ninputs = [\"g/x\"]\ndtype = \"f32\"\nfrom_block = 3\nto_block = 5\nreplicas = 6\n").unwrap();
        let red =
            r.tasks[1].collective.as_ref().and_then(|c| c.exchange.as_ref()).and_then(|x| x.redistribute).unwrap();
        assert_eq!(
            (r.tasks[1].replicas, red),
            (6, Redistribution { senders: 4, from_block: 3, receivers: 6, to_block: 5 })
        );
        let r = job("kind = \"redistribute\"\ninputs = [\"g/x\"]\ndtype = \"f32\"\nfrom_block = 3\nto_block = 5\nreplicas = 2\nschedule = \"seed\"\n").unwrap();
        assert_eq!(r.tasks[1].replicas, 4);
        // A collective over a redistribute's output has one member per member of its gang.
        let chained = toml(&format!(
            "{producer}[[task]]\nname = \"r\"\nkind = \"redistribute\"\ninputs = [\"g/x\"]\noutputs = [\"y\"]\ndtype = \"f32\"\nfrom_block = 1\nto_block = 2\nreplicas = 7\n\
             [[task]]\nname = \"s\"\nkind = \"allreduce\"\ninputs = [\"r/y\"]\noutputs = [\"z\"]\ndtype = \"f32\"\n"
        ))
        .unwrap();
        assert_eq!(chained.tasks[2].replicas, 7);

        let bad = |task: &str| job(task).unwrap_err().message;
        let a2a = "kind = \"alltoall\"\ninputs = [\"g/x\"]\ndtype = \"i32\"\n";
        let red = "kind = \"redistribute\"\ninputs = [\"g/x\"]\ndtype = \"i32\"\n";
        for (task, want) in [
            (format!("{a2a}counts = [[1,2,3,4],[1,2,3,4]]\n"), "counts has 2 rows; it needs one per member (4"),
            (format!("{a2a}counts = [[1,2,3,4],[1,2,3],[1,2,3,4],[1,2,3,4]]\n"), "counts[1] has 3 entries"),
            (format!("{a2a}split = \"counts\"\n"), "split = \"counts\" needs a `counts` table"),
            (format!("{a2a}split = \"equal\"\ncounts = [[1]]\n"), "split = \"equal\" is not one of counts"),
            (format!("{a2a}split = \"file\"\n"), "split = \"file\" takes two inputs"),
            (format!("{a2a}split = \"thirds\"\n"), "split = \"thirds\" is not one of equal, counts, file"),
            (format!("{a2a}schedule = \"seed\"\n"), "schedule = \"seed\" is not one of css, shift, pairwise"),
            (format!("{a2a}op = \"sum\"\n"), "`op` is not a field of an alltoall"),
            (format!("{a2a}from_block = 2\n"), "`from_block` is not a field of an alltoall"),
            (format!("{a2a}replicas = 2\n"), "one member per replica of \"g\", which has 4"),
            ("kind = \"alltoall\"\ninputs = [\"g/x\"]\n".to_string(), "needs `dtype`"),
            (format!("{red}to_block = 5\n"), "a redistribute needs `from_block`"),
            (format!("{red}from_block = 5\n"), "a redistribute needs `to_block`"),
            (format!("{red}from_block = 0\nto_block = 5\n"), "from_block = 0: a block size must be at least 1 element"),
            (format!("{red}from_block = 2\nto_block = -5\n"), "to_block = -5: a block size must be at least 1 element"),
            (
                format!("{red}from_block = 2\nto_block = 99999999999\n"),
                "to_block = 99999999999 is larger than the largest block",
            ),
            (
                format!("{red}from_block = 2\nto_block = 2\nsplit = \"equal\"\n"),
                "`split` is not a field of a redistribute",
            ),
            (
                format!("{red}from_block = 2\nto_block = 2\nalgorithm = \"ring\"\n"),
                "`algorithm` is not a field of a redistribute",
            ),
            (
                "kind = \"allreduce\"\ninputs = [\"g/x\"]\ndtype = \"i32\"\nschedule = \"css\"\n".to_string(),
                "`schedule` is not a field of an allreduce",
            ),
            ("command = \"true\"\nfrom_block = 3\n".to_string(), "`from_block` is only for the collective kinds"),
        ] {
            let e = bad(&task);
            assert!(e.contains(want), "{task}: {e}");
        }
        let e = toml(&format!("{producer}[[task]]\nname = \"h\"\ncommand = \"true\"\noutputs = [\"s\"]\n[[task]]\nname = \"s\"\noutputs = [\"y\"]\nkind = \"alltoall\"\ninputs = [\"g/x\", \"h/s\"]\ndtype = \"i32\"\nsplit = \"file\"\n"))
            .unwrap_err()
            .message;
        assert!(e.contains("the split file must come from the data's producer \"g\", not \"h\""), "{e}");
    }

    #[test]
    fn gpu_sharing_and_profile_fields_are_checked() {
        let one = |extra: &str| toml(&format!("[[task]]\nname = \"t\"\ncommand = \"true\"\n{extra}"));
        let t = one("gpu_share = true\ngpu_memory = \"10GiB\"\ngpu_util = 0.6\nmodel_size = \"100MiB\"\n").unwrap();
        let task = &t.tasks[0];
        assert_eq!(task.resources.gpu, 0, "a sharing task holds no whole device");
        assert!(task.shares_gpu());
        assert_eq!(
            task.gpu_profile,
            Some(GpuProfile { share: true, memory: 10 << 30, utilisation: Some(0.6), model_bytes: 100 << 20 })
        );
        let t = one("gpu = 2\nmodel_size = 1000\n").unwrap();
        assert_eq!((t.tasks[0].resources.gpu, t.tasks[0].shares_gpu(), t.tasks[0].shared_gpu_memory()), (2, false, 0));
        assert_eq!(one("gpu = 1\n").unwrap().tasks[0].gpu_profile, None);
        for (extra, want) in [
            ("gpu_share = true\n", "gpu_share = true needs `gpu_memory`"),
            ("gpu_share = true\ngpu = 2\ngpu_memory = \"1GiB\"\n", "gpu_share = true shares one GPU; gpu = 2"),
            ("gpu_memory = \"1GiB\"\n", "`gpu_memory` describes GPU use; the task asks for no GPU"),
            ("gpu = 1\ngpu_util = 1.5\n", "gpu_util = 1.5 is not a utilisation in (0, 1]"),
            ("gpu = 1\ngpu_util = 0\n", "gpu_util = 0 is not a utilisation"),
            ("gpu = 1\ngpu_memory = \"lots\"\n", "gpu_memory: \"lots\" is not a size"),
        ] {
            let e = one(extra).unwrap_err().message;
            assert!(e.contains(want), "{extra}: {e}");
        }
    }

    #[test]
    fn inputs_must_be_produced() {
        let e = toml("[[task]]\nname = \"a\"\nkind = \"noop\"\ninputs = [\"x/y\"]\n").unwrap_err();
        assert!(e.message.contains("no task named \"x\" produces it"), "{e}");
        let e = toml("[[task]]\nname = \"g\"\nkind = \"noop\"\noutputs = [\"o\"]\n[[task]]\nname = \"a\"\nkind = \"noop\"\ninputs = [\"g/p\"]\n").unwrap_err();
        assert!(e.message.contains("task \"g\" has no output \"p\" (its outputs: o)"), "{e}");
        assert_eq!(e.line, Some(8));
        let e = toml("[[task]]\nname = \"a\"\nkind = \"noop\"\ninputs = [\"nos\"]\n").unwrap_err();
        assert!(e.message.contains("must be written <task>/<output>"), "{e}");
    }

    #[test]
    fn other_mistakes() {
        let cases = [
            ("[[task]]\nname = \"a\"\n", "needs a `command`"),
            ("[[task]]\nname = \"a\"\nkind = \"noop\"\ncommand = [\"x\"]\n", "not both"),
            ("[[task]]\nname = \"a\"\ncommand = []\n", "must not be empty"),
            ("[[task]]\nname = \"a\"\nkind = \"frobnicate\"\n", "unknown kind \"frobnicate\""),
            ("[[task]]\nname = \"a\"\nkind = \"noop\"\nreplicas = 0\n", "replicas = 0 is out of range"),
            ("[[task]]\nname = \"a\"\nkind = \"noop\"\nmemory = \"lots\"\n", "is not a size"),
            ("[[task]]\nname = \"a\"\nkind = \"noop\"\ntimeout = \"soon\"\n", "timeout \"soon\""),
            ("[[task]]\nname = \"a\"\nkind = \"noop\"\ncpu = -1\n", "not a non-negative number"),
            ("[[task]]\nname = \"a/b\"\nkind = \"noop\"\n", "invalid task name"),
            ("[[task]]\nname = \"a\"\nkind = \"noop\"\noutputs = [\"o\", \"o\"]\n", "listed twice"),
            ("[[task]]\nname = \"a\"\nkind = \"noop\"\nenv = { PLEXUS_RANK = \"1\" }\n", "reserved"),
            ("name = \"x\"\n", "no tasks"),
        ];
        for (src, want) in cases {
            let e = toml(src).unwrap_err();
            assert!(e.message.contains(want), "{src:?}: got {e}");
        }
    }

    #[test]
    fn json_errors_have_lines() {
        let e =
            parse("{\n\"tasks\": [\n{\"name\": \"a\", \"kind\": \"noop\", \"bogus\": 1}\n]}", Format::Json, "j.json")
                .unwrap_err();
        assert!(e.message.contains("unknown field `bogus`"), "{e}");
        assert_eq!(e.line, Some(3));
    }

    #[test]
    fn format_inference() {
        assert_eq!(Format::infer("", "a.JSON").unwrap(), Format::Json);
        assert_eq!(Format::infer("", "a.toml").unwrap(), Format::Toml);
        assert_eq!(Format::infer("json", "a.toml").unwrap(), Format::Json);
        assert!(Format::infer("yaml", "a").is_err());
    }

    /// A chain of `n` tasks as JSON, listed dependants-first (the order that made a recursive
    /// cycle check recurse `n` deep), closed into a cycle when asked.
    fn reversed_chain(n: usize, cycle: bool) -> String {
        let tasks: Vec<String> = (0..n)
            .rev()
            .map(|i| {
                let after = if i > 0 {
                    format!("[\"t{}\"]", i - 1)
                } else if cycle {
                    format!("[\"t{}\"]", n - 1)
                } else {
                    "[]".into()
                };
                format!("{{\"name\": \"t{i}\", \"command\": [\"true\"], \"after\": {after}}}")
            })
            .collect();
        format!("{{\"name\": \"chain\", \"tasks\": [\n{}\n]}}", tasks.join(",\n"))
    }

    #[test]
    fn a_ten_thousand_task_chain_listed_backwards_is_checked_without_recursion() {
        // Run on a thread with a small stack: a recursive walk of 10,000 tasks would overflow it.
        let check = std::thread::Builder::new()
            .stack_size(256 << 10)
            .spawn(|| {
                let ok = parse(&reversed_chain(10_000, false), Format::Json, "chain.json").map(|j| j.tasks.len());
                let cyclic = parse(&reversed_chain(10_000, true), Format::Json, "chain.json").map(|j| j.tasks.len());
                (ok, cyclic)
            })
            .unwrap()
            .join()
            .expect("the check did not overflow its stack");
        assert_eq!(check.0, Ok(10_000));
        let e = check.1.unwrap_err();
        assert!(e.message.starts_with("dependency cycle: "), "{e}");
        assert_eq!(e.message.matches(" -> ").count(), 10_000, "every task of the ring is named once, the first twice");
    }

    #[test]
    fn task_lines_are_found_for_every_task_of_a_large_file() {
        // Lines come from one pass over the file; the last task's error still names its line.
        let mut src = String::new();
        for i in 0..5_000 {
            src.push_str(&format!("[[task]]\nname = \"t{i}\"\ncommand = [\"true\"]\n"));
        }
        src.push_str("[[task]]\nname = \"last\"\ncommand = [\"true\"]\nafter = [\"nope\"]\n");
        let e = toml(&src).unwrap_err();
        assert_eq!(e.line, Some(15_004), "{e}");
        assert!(e.message.contains("unknown dependency \"nope\""), "{e}");
    }

    #[test]
    fn job_names_follow_the_task_name_rules() {
        for bad in ["evil\u{1b}[31mred", "two\nlines", "nul\u{0}", "", "a b"] {
            let src = format!(
                "name = {}\n[[task]]\nname = \"a\"\ncommand = [\"true\"]\n",
                serde_json::to_string(bad).unwrap()
            );
            let e = toml(&src).unwrap_err();
            assert!(e.message.contains("invalid job name"), "{bad:?}: {e}");
        }
        // A default name made from an odd file name is cleaned, not refused.
        let j = parse("[[task]]\nname = \"a\"\ncommand = [\"true\"]\n", Format::Toml, "dir/my job.v2.toml").unwrap();
        assert_eq!(j.name, "my-job-v2");
        let j = parse("[[task]]\nname = \"a\"\ncommand = [\"true\"]\n", Format::Toml, ".toml").unwrap();
        assert_eq!(j.name, "job");
    }

    #[test]
    fn nul_bytes_huge_commands_and_endless_retries_are_refused_at_submit() {
        let task = |extra: &str| format!("[[task]]\nname = \"a\"\n{extra}\n");
        let e = toml(&task("command = [\"echo\", \"a\\u0000b\"]")).unwrap_err();
        assert!(e.message.contains("command argument 1 contains a NUL byte"), "{e}");
        let e = toml(&task("command = [\"true\"]\nenv = { X = \"a\\u0000\" }")).unwrap_err();
        assert!(e.message.contains("env \"X\"") && e.message.contains("NUL"), "{e}");
        let big = "x".repeat(rules::MAX_TASK_SPEC_BYTES + 1);
        let e = toml(&task(&format!("command = \"echo {big}\""))).unwrap_err();
        assert!(e.message.contains("at most 1024 KiB per task"), "{}", &e.message[..200.min(e.message.len())]);
        let e = toml(&task(&format!(
            "command = [\"true\"]\nenv = {{ BIG = \"{}\" }}",
            "y".repeat(rules::MAX_TASK_SPEC_BYTES)
        )))
        .unwrap_err();
        assert!(e.message.contains("per task"), "{}", &e.message[..200.min(e.message.len())]);
        let e = toml(&task("command = [\"false\"]\nmax_retries = 4294967295")).unwrap_err();
        assert!(e.message.contains("max_retries = 4294967295 is out of range (0..=100)"), "{e}");
        assert_eq!(toml(&task("command = [\"false\"]\nmax_retries = 100")).unwrap().tasks[0].max_retries, 100);
    }

    #[test]
    fn failure_policy_and_back_off_are_parsed_and_checked() {
        let t = |extra: &str| toml(&format!("[[task]]\nname = \"a\"\ncommand = [\"true\"]\n{extra}\n"));
        let d = t("").unwrap();
        assert_eq!(
            (d.tasks[0].on_failure, d.tasks[0].retry_backoff_ms),
            (OnFailure::FailJob, DEFAULT_RETRY_BACKOFF_MS)
        );
        let c = t("on_failure = \"continue\"\nretry_backoff = \"250ms\"").unwrap();
        assert_eq!((c.tasks[0].on_failure, c.tasks[0].retry_backoff_ms), (OnFailure::Continue, 250));
        assert_eq!(t("retry_backoff = 0").unwrap().tasks[0].retry_backoff_ms, 0);
        let e = t("on_failure = \"ignore\"").unwrap_err();
        assert!(e.message.contains("on_failure = \"ignore\" is not one of fail-job, continue"), "{e}");
        let e = t("retry_backoff = \"soon\"").unwrap_err();
        assert!(e.message.contains("retry_backoff \"soon\""), "{e}");
        assert!(t("retry_backoff = \"2days\"").unwrap_err().message.contains("longer than a day"));
    }

    #[test]
    fn per_rank_inputs_are_parsed_and_checked_against_the_producer() {
        let producer = "[[task]]\nname = \"prep\"\ncommand = [\"true\"]\nreplicas = 4\noutputs = [\"shard\"]\n";
        let job =
            |consumer: &str| toml(&format!("{producer}[[task]]\nname = \"train\"\ncommand = [\"true\"]\n{consumer}\n"));
        let j = job("replicas = 4\ninputs = [\"prep/shard[rank]\", \"prep/shard[0]\", \"prep/shard\"]").unwrap();
        let ranks: Vec<InputRank> = j.tasks[1].inputs.iter().map(|i| i.rank).collect();
        assert_eq!(ranks, vec![InputRank::Same, InputRank::Fixed(0), InputRank::All]);
        assert!(j.tasks[1].inputs.iter().all(|i| i.output == "shard"));
        assert_eq!(j.tasks[1].after, vec!["prep".to_string()]);
        assert_eq!(InputRank::Same.ranks(2, 4), 2..3);
        assert_eq!(InputRank::Fixed(0).ranks(2, 4), 0..1);
        assert_eq!(InputRank::All.ranks(2, 4), 0..4);

        let e = job("replicas = 5\ninputs = [\"prep/shard[rank]\"]").unwrap_err();
        assert!(e.message.contains("it has 5 replicas but task \"prep\" has 4"), "{e}");
        assert_eq!(e.line, Some(10), "{e}");
        let e = job("inputs = [\"prep/shard[4]\"]").unwrap_err();
        assert!(e.message.contains("task \"prep\" has 4 replica(s), so there is no rank 4"), "{e}");
        for bad in ["prep/shard[", "prep/shard[r]", "prep/shard[-1]", "prep/shard[rank"] {
            let e = job(&format!("inputs = [{bad:?}]")).unwrap_err();
            assert!(e.message.contains("a rank selector is [rank]"), "{bad}: {e}");
        }
        let e = job("inputs = [\"prep/nope[rank]\"]").unwrap_err();
        assert!(e.message.contains("has no output \"nope\""), "{e}");
        // Stored jobs without a selector read as every replica.
        let old: InputSpec = serde_json::from_str("{\"task\": \"a\", \"output\": \"b\"}").unwrap();
        assert_eq!(old.rank, InputRank::All);
        assert_eq!(serde_json::to_string(&old).unwrap(), "{\"task\":\"a\",\"output\":\"b\"}");
    }
}
