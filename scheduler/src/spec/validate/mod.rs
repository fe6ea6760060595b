//! The second stage of a job file: the raw shapes checked and resolved into a [`JobSpec`], one
//! concern per file — a task's own fields (`task`), its collective fields (`collective`), gangs
//! (`gang`), and the dependency graph (`graph`) — each error naming the file, and the line where
//! one can be found.

mod collective;
mod constraints;
mod gang;
mod graph;
mod runtime;
mod sweep;
mod task;

use std::collections::HashMap;

use plexus_proto::ids::{check_job_name, check_task_name};

use super::model::{DEFAULT_QUEUE, JobSpec, MAX_AFTER_JOBS, MAX_EXCLUDE_LEN, MAX_EXCLUDES, MAX_SUBTASKS, WorkingDir};
use super::raw::RawJob;
use crate::error::SpecError;
use graph::{declared_replicas, find_cycle};

/// How many tasks of a dependency cycle its error names; a longer cycle is cut with its length.
const CYCLE_NAMES: usize = 10;

/// A cycle (first name repeated at the end) as `a -> b -> a`, or, past [`CYCLE_NAMES`] tasks,
/// its first tasks and how many there are: a 3,000-task cycle must not make an error text too
/// large for any transport.
fn cycle_text(cycle: &[String]) -> String {
    let tasks = cycle.len() - 1;
    if tasks <= CYCLE_NAMES {
        return cycle.join(" -> ");
    }
    format!("{} -> ... ({tasks} tasks in the cycle)", cycle[..CYCLE_NAMES].join(" -> "))
}

/// Default resource request of a task that names none: one core, no memory reservation.
pub(super) const DEFAULT_CPU: f64 = 1.0;

/// The checks of one job file, with what they need to name the line of an error.
pub(super) struct Validator<'a> {
    pub(super) source: &'a str,
    pub(super) file: &'a str,
    /// Every line where a task name is declared, by name, in file order: built in one pass so
    /// that finding a task's line costs nothing per task (a per-task scan of the file made a
    /// 5,000-task file take seconds).
    pub(super) name_lines: HashMap<&'a str, Vec<usize>>,
}

impl Validator<'_> {
    pub(super) fn err(&self, line: Option<usize>, msg: impl Into<String>) -> SpecError {
        SpecError::new(self.file, line, msg)
    }

    /// Line of the `occurrence`-th (0-based) task named `name`.
    pub(super) fn task_line(&self, name: &str, occurrence: usize) -> Option<usize> {
        self.name_lines.get(name).and_then(|l| l.get(occurrence)).copied()
    }

    /// Line of the first quoted `value` at or after the line where task `task` is named. It scans
    /// the file, so it is only called to report an error.
    pub(super) fn value_line(&self, task: &str, value: &str) -> Option<usize> {
        let start = self.task_line(task, 0)?;
        let quoted = [format!("\"{value}\""), format!("'{value}'")];
        self.source
            .lines()
            .enumerate()
            .skip(start - 1)
            .find(|(_, l)| quoted.iter().any(|q| l.contains(q.as_str())))
            .map(|(i, _)| i + 1)
    }

    pub(super) fn validate(&self, raw: RawJob) -> Result<JobSpec, SpecError> {
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
            let mut task = self.task(t, &outputs_of, &replicas_of)?;
            task.constraints = self.constraints(t, &raw.constraints)?;
            (task.python, task.image) =
                self.runtime(t, &task.work, (&raw.python, &raw.image), &mut task.constraints)?;
            total += task.replicas as u64;
            if total > MAX_SUBTASKS {
                return Err(self
                    .err(self.task_line(&t.name, 0), format!("the job expands to more than {MAX_SUBTASKS} subtasks")));
            }
            tasks.push(task);
        }
        if let Some(cycle) = find_cycle(&tasks) {
            let line = self.task_line(&cycle[0], 0);
            return Err(self.err(line, format!("dependency cycle: {}", cycle_text(&cycle))));
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
        let working_dir = self.working_dir(raw.working_dir, raw.excludes)?;
        Ok(JobSpec { name, tasks, priority: raw.priority.unwrap_or(0), queue, after_jobs, working_dir })
    }

    /// `working_dir` (a non-empty path) and `excludes` (only with it, bounded in number and
    /// length). The directory itself is the client's to read; the coordinator sees its archive.
    fn working_dir(
        &self,
        path: Option<serde_json::Value>,
        excludes: Option<Vec<String>>,
    ) -> Result<Option<WorkingDir>, SpecError> {
        let excludes_err = |m: String| self.err(self.line_of_key("excludes"), format!("excludes: {m}"));
        let Some(path) = path else {
            return match excludes {
                Some(_) => Err(excludes_err("given without a working_dir".into())),
                None => Ok(None),
            };
        };
        let line = self.line_of_key("working_dir");
        let serde_json::Value::String(path) = path else {
            return Err(self.err(line, format!("working_dir = {path}: expected a directory path (e.g. \".\")")));
        };
        if path.trim().is_empty() || path.contains('\0') || path.len() > MAX_EXCLUDE_LEN {
            return Err(self.err(line, format!("working_dir {path:?}: expected a directory path (e.g. \".\")")));
        }
        let excludes = excludes.unwrap_or_default();
        if excludes.len() > MAX_EXCLUDES {
            return Err(excludes_err(format!("{} patterns; at most {MAX_EXCLUDES}", excludes.len())));
        }
        if let Some(bad) = excludes.iter().find(|e| e.is_empty() || e.len() > MAX_EXCLUDE_LEN || e.contains('\0')) {
            return Err(excludes_err(format!("{bad:?} is not a pattern (1 to {MAX_EXCLUDE_LEN} bytes, no NUL)")));
        }
        Ok(Some(WorkingDir { path, excludes, digest: None, size: 0 }))
    }

    /// Line of the first top-level `key = …` (for job-level fields), if any.
    pub(super) fn line_of_key(&self, key: &str) -> Option<usize> {
        self.source
            .lines()
            .position(|l| l.trim_start().strip_prefix(key).is_some_and(|r| r.trim_start().starts_with('=')))
            .map(|i| i + 1)
    }
}

pub(super) fn list_or_none(v: &[String]) -> String {
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
