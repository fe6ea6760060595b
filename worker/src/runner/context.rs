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
use crate::isolation::Isolation;
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
    /// How commands are confined (cgroups or process groups).
    pub(super) isolation: Arc<Isolation>,
    pub(super) gpus: NodeGpus,
    /// This worker's certificate for fetching from peers (`None`: an insecure cluster).
    pub(super) peer_tls: Option<tonic::transport::ClientTlsConfig>,
    /// What `/metrics` reports of the runner's work.
    pub(super) counters: Arc<crate::metrics::Counters>,
}

/// An attempt's work dir `DIR/work/<job>/<task>/<rank>.<attempt>/` and its `in/` and `out/`.
#[derive(Debug)]
pub(super) struct WorkDirs {
    pub(super) root: PathBuf,
    pub(super) input: PathBuf,
    pub(super) output: PathBuf,
}

impl WorkDirs {
    pub(super) fn new(root: PathBuf) -> WorkDirs {
        WorkDirs { input: root.join("in"), output: root.join("out"), root }
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
        }
    }
}

impl Ctx {
    /// A CANCELLED attempt, saying whether the coordinator or the worker's shutdown ended it.
    pub(super) fn cancelled(&self, started_at: u64, exit_code: i32) -> Outcome {
        let why = if self.attempts.shutting_down() { "the worker shut down" } else { "cancelled by the coordinator" };
        Outcome {
            state: pb::SubtaskState::Cancelled,
            exit_code,
            error: why.into(),
            started_at,
            outputs: Vec::new(),
            unfetched_input: String::new(),
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
