//! A job file as written, before validation: the serde shapes of TOML and JSON job files, and
//! where in the text each task is declared (for errors that name their line).

use std::collections::{BTreeMap, HashMap};

use serde::Deserialize;

use super::model::Format;

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawJob {
    pub(super) name: Option<String>,
    pub(super) priority: Option<i64>,
    pub(super) queue: Option<String>,
    #[serde(default)]
    pub(super) after_jobs: Vec<String>,
    /// Constraints every task gets, below its own (a task's own test of a key wins).
    #[serde(default)]
    pub(super) constraints: BTreeMap<String, RawConstraint>,
    /// The directory shipped with the job (relative to the job file), which the client packs
    /// and uploads; and what of it is left out (gitignore-style globs).
    pub(super) working_dir: Option<serde_json::Value>,
    pub(super) excludes: Option<Vec<String>>,
    /// The Python environment (`python = { pip = [..] }`) and container image every task runs
    /// with unless it names its own.
    pub(super) python: Option<serde_json::Value>,
    pub(super) image: Option<serde_json::Value>,
    #[serde(alias = "tasks", default)]
    pub(super) task: Vec<RawTask>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawTask {
    pub(super) name: String,
    pub(super) command: Option<RawCommand>,
    pub(super) kind: Option<String>,
    pub(super) cpu: Option<f64>,
    pub(super) memory: Option<RawSize>,
    pub(super) gpu: Option<u32>,
    #[serde(default)]
    pub(super) after: Vec<String>,
    pub(super) replicas: Option<u32>,
    #[serde(default)]
    pub(super) inputs: Vec<String>,
    #[serde(default)]
    pub(super) outputs: Vec<String>,
    pub(super) max_retries: Option<u32>,
    pub(super) timeout: Option<RawDuration>,
    #[serde(default)]
    pub(super) env: BTreeMap<String, String>,
    pub(super) flops: Option<f64>,
    pub(super) on_failure: Option<String>,
    pub(super) retry_backoff: Option<RawDuration>,
    pub(super) dtype: Option<String>,
    pub(super) op: Option<String>,
    pub(super) root: Option<u32>,
    pub(super) algorithm: Option<String>,
    pub(super) schedule: Option<String>,
    pub(super) split: Option<String>,
    pub(super) counts: Option<Vec<Vec<u64>>>,
    pub(super) from_block: Option<i64>,
    pub(super) to_block: Option<i64>,
    pub(super) remap: Option<RawRemap>,
    pub(super) gpu_share: Option<bool>,
    pub(super) gpu_memory: Option<RawSize>,
    pub(super) gpu_util: Option<f64>,
    pub(super) model_size: Option<RawSize>,
    pub(super) min_members: Option<u32>,
    pub(super) gang_timeout: Option<RawDuration>,
    pub(super) gang: Option<String>,
    pub(super) communicator: Option<bool>,
    #[serde(default)]
    pub(super) constraints: BTreeMap<String, RawConstraint>,
    pub(super) sweep: Option<BTreeMap<String, serde_json::Value>>,
    pub(super) sweep_mode: Option<String>,
    pub(super) checkpoint: Option<String>,
    pub(super) python: Option<serde_json::Value>,
    pub(super) image: Option<serde_json::Value>,
}

/// One of `constraints = { key = "v" | "!=v" | true | false }`; anything else is kept as
/// `Other` so that validation can name the constraint.
#[derive(Deserialize)]
#[serde(untagged)]
pub(super) enum RawConstraint {
    Flag(bool),
    Text(String),
    Other(serde_json::Value),
}

/// `command = ["prog", "arg"]` (argv), or `command = "shell text"` run with `sh -c`.
#[derive(Deserialize)]
#[serde(untagged)]
pub(super) enum RawCommand {
    Argv(Vec<String>),
    Shell(String),
}

/// `memory = "512MiB"` or a number of bytes; anything else is kept as `Other` so that
/// validation can name the field (serde's untagged enums would only name the enum).
#[derive(Deserialize)]
#[serde(untagged)]
pub(super) enum RawSize {
    Bytes(u64),
    Text(String),
    Other(serde_json::Value),
}

/// `timeout = "90s"` / `"5m"` or a number of seconds; anything else is kept as `Other`, as
/// for [`RawSize`].
#[derive(Deserialize)]
#[serde(untagged)]
pub(super) enum RawDuration {
    Seconds(u64),
    Text(String),
    Other(serde_json::Value),
}

/// The line (1-based) of byte `offset` of `source`.
pub(super) fn line_of_offset(source: &str, offset: usize) -> usize {
    source.as_bytes()[..offset.min(source.len())].iter().filter(|&&b| b == b'\n').count() + 1
}

/// Lines (1-based) where each task name is declared, in file order, found in one pass over the
/// text. The parsers do not keep positions of values, so a declaration is found as `name = "x"`
/// (or `'x'`) in TOML, `"name": "x"` in JSON.
pub(super) fn task_name_lines(source: &str, format: Format) -> HashMap<&str, Vec<usize>> {
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

/// A redistribute's `remap = { a1 = .., b1 = .., a2 = .., b2 = .., iterations = .., len = .. }`
/// (the strides default to 1, the offsets to 0).
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawRemap {
    pub(super) a1: Option<i64>,
    pub(super) b1: Option<i64>,
    pub(super) a2: Option<i64>,
    pub(super) b2: Option<i64>,
    pub(super) iterations: Option<i64>,
    pub(super) len: Option<i64>,
}
