//! What every stage of an attempt shares: the runner's context ([`Ctx`]), the attempt's work
//! dirs, its accounting, and how it ended ([`Outcome`]).

use std::path::{Path, PathBuf};
use std::sync::Arc;

use plexus_proto::{AttemptRef, pb};
use tokio::time::Instant;
use tokio_util::task::TaskTracker;

use crate::attempts::Attempts;
use crate::cache::Cache;
use crate::error::Error;
use crate::isolation::{Isolation, TaskUsers};
use crate::layout::Layout;

use super::environment::NodeGpus;

/// `exit_code` of a report when no process ran.
pub const NO_EXIT_CODE: i32 = -1;

/// The runner's shared context: what every attempt's stages read.
#[derive(Debug)]
pub(super) struct Ctx {
    pub(super) layout: Layout,
    pub(super) cache: Cache,
    pub(super) attempts: Arc<Attempts>,
    /// Owns every attempt task; the worker waits on it at shutdown.
    pub(super) tracker: TaskTracker,
    /// The data plane inputs are fetched over.
    pub(super) rails: Arc<plexus_dataplane::Endpoint>,
    /// What this worker's collectives measured of its links: what their cost model decides
    /// from (kept across jobs).
    pub(super) meter: Arc<plexus_dataplane::LinkMeter>,
    /// How commands are confined (cgroups or process groups).
    pub(super) isolation: Arc<Isolation>,
    pub(super) gpus: NodeGpus,
    /// This worker's certificate for fetching from peers (`None`: an insecure cluster).
    pub(super) peer_tls: Option<tonic::transport::ClientTlsConfig>,
    /// What `/metrics` reports of the runner's work.
    pub(super) counters: Arc<crate::metrics::Counters>,
    /// Who commands run as.
    pub(super) users: Arc<TaskUsers>,
    /// The worker's lease with its coordinator: no command runs past its end.
    pub(super) lease: Arc<crate::lease::Lease>,
    /// The supervisor program (the worker's executable) each command runs under; `None`: the
    /// command is the worker's own child (the runner's unit tests).
    pub(super) supervisor: Option<std::path::PathBuf>,
    /// The most bytes kept of each attempt's stdout, and of its stderr (`--log-cap`).
    pub(super) log_cap: u64,
    /// Jobs' working dirs, fetched and unpacked once per archive.
    pub(super) working_dirs: crate::working_dir::WorkingDirs,
    /// Python environments, built once per requirements list.
    pub(super) python_envs: crate::python_env::PythonEnvs,
    /// The container runtime that runs `image` tasks, if the worker has one.
    pub(super) containers: Option<Arc<crate::container::Containers>>,
}

/// An attempt's work dir `DIR/work/<job>/<task>/<rank>.<attempt>/` and its `in/`, `out/` and
/// `tmp/` (the task's `TMPDIR`), and the uid the task runs as (`None`: the worker's).
#[derive(Debug)]
pub(super) struct WorkDirs {
    pub(super) root: PathBuf,
    /// Where the command runs: the job's unpacked working dir, or else `root`.
    pub(super) cwd: Option<PathBuf>,
    pub(super) input: PathBuf,
    pub(super) output: PathBuf,
    pub(super) tmp: PathBuf,
    pub(super) uid: Option<u32>,
    /// The Python environment the command runs with, held (not evicted) until the attempt ends.
    pub(super) python: Option<crate::python_env::Held>,
}

impl WorkDirs {
    pub(super) fn new(root: PathBuf, uid: Option<u32>) -> WorkDirs {
        WorkDirs {
            input: root.join("in"),
            output: root.join("out"),
            tmp: root.join("tmp"),
            root,
            uid,
            cwd: None,
            python: None,
        }
    }

    /// The command's working directory.
    pub(super) fn cwd(&self) -> &Path {
        self.cwd.as_deref().unwrap_or(&self.root)
    }

    /// Where an input lives under `in/`: `<task>/<rank>/<name>`.
    pub(super) fn input_path(&self, task: &str, rank: u32, name: &str) -> PathBuf {
        self.input.join(task).join(rank.to_string()).join(name)
    }

    pub(super) fn root(&self) -> &Path {
        &self.root
    }
}

/// Fetch and eviction accounting of one attempt, and the copies of its inputs found bad.
#[derive(Debug, Default, Clone)]
pub(super) struct Accounting {
    pub(super) fetch_ms: u64,
    pub(super) fetched_bytes: u64,
    pub(super) evicted_bytes: u64,
    /// Copies that holders served and that did not match their digest, for the report.
    pub(super) bad_copies: Vec<pb::BadCopy>,
}

/// How an attempt of a command ended, before the logs and accounting are added.
#[derive(Debug)]
pub(super) struct Outcome {
    pub(super) state: pb::SubtaskState,
    pub(super) exit_code: i32,
    pub(super) error: String,
    pub(super) started_at: u64,
    pub(super) outputs: Vec<pb::ObjectInfo>,
    /// The input that no holder could serve (the attempt failed before its task ran); empty
    /// otherwise.
    pub(super) unfetched_input: String,
    /// A failed or stopped attempt's kept `checkpoint` output.
    pub(super) checkpoint: Option<pb::ObjectInfo>,
}

impl Outcome {
    /// A SUCCEEDED attempt with its outputs.
    pub(super) fn succeeded(started_at: u64, exit_code: i32, outputs: Vec<pb::ObjectInfo>) -> Outcome {
        Outcome {
            state: pb::SubtaskState::Succeeded,
            exit_code,
            error: String::new(),
            started_at,
            outputs,
            unfetched_input: String::new(),
            checkpoint: None,
        }
    }

    /// A FAILED attempt; the report's `error` is the error's text.
    pub(super) fn failed(error: Error, started_at: u64, exit_code: i32) -> Outcome {
        // Only when the holders could not serve it: a local failure (the cache could not take
        // the object) is this attempt's own.
        let unfetched_input = match &error {
            Error::FetchInput { object, source } if matches!(**source, Error::Holder { .. } | Error::NoHolder) => {
                object.to_string()
            }
            _ => String::new(),
        };
        Outcome {
            state: pb::SubtaskState::Failed,
            exit_code,
            error: error.to_string(),
            started_at,
            outputs: Vec::new(),
            unfetched_input,
            checkpoint: None,
        }
    }
}

impl Ctx {
    /// A CANCELLED attempt, saying whether the coordinator, the worker's shutdown or fencing
    /// ([`crate::lease`]) ended it.
    pub(super) fn cancelled(&self, a: &AttemptRef, started_at: u64, exit_code: i32) -> Outcome {
        let why = match self.attempts.fenced(a) {
            Some(why) => why,
            None if self.attempts.shutting_down() => "the worker shut down".into(),
            None => "cancelled by the coordinator".into(),
        };
        Outcome::fenced(why, started_at, exit_code)
    }
}

impl Outcome {
    /// A CANCELLED attempt that ended for `why` (not the task's doing: the coordinator places it
    /// again, uncounted, unless it asked for the cancel).
    pub(super) fn fenced(why: String, started_at: u64, exit_code: i32) -> Outcome {
        Outcome {
            state: pb::SubtaskState::Cancelled,
            exit_code,
            error: why,
            started_at,
            outputs: Vec::new(),
            unfetched_input: String::new(),
            checkpoint: None,
        }
    }
}

/// A report of `state` for `attempt` with every other field empty.
pub fn report(attempt: &AttemptRef, state: pb::SubtaskState) -> pb::TaskReport {
    pb::TaskReport { attempt: Some(pb::AttemptRef::from(attempt)), state: state as i32, ..Default::default() }
}

/// Waits until `deadline`, or forever without one (an attempt without a timeout).
pub(super) async fn sleep_until(deadline: Option<Instant>) {
    match deadline {
        Some(d) => tokio::time::sleep_until(d).await,
        None => std::future::pending().await,
    }
}
