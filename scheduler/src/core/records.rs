//! The records the store keeps: jobs, subtasks, workers and placement decisions, as they are
//! serialised.

use plexus_proto::{Digest, JobId, JobState, SubtaskState, WorkerId};
use serde::{Deserialize, Serialize};

pub use crate::hardware::{Capacity, GpuRecord};
use crate::placer::{Candidate, Decision};
use crate::spec::JobSpec;

/// A job as stored. Its subtasks are stored separately (one record each), so that a state change
/// of one subtask rewrites one small record, not the whole job.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct JobRecord {
    pub id: JobId,
    /// Submission order, for FIFO scheduling across jobs.
    pub seq: u64,
    pub spec: JobSpec,
    pub state: JobState,
    pub submitted_at: u64,
    pub finished_at: u64,
    pub error: String,
    /// Each gang of the job that has started reserving, been bound or rolled back, by name.
    /// Stored with the job, in the same commit as the reservations, so a restart sees both.
    #[serde(default, skip_serializing_if = "std::collections::BTreeMap::is_empty")]
    pub gangs: std::collections::BTreeMap<String, GangState>,
    /// When the first of its subtasks started running (0: none has yet): the end of its time
    /// queued and the start of its time run. Records from before it existed read as 0, and the
    /// job table derives it from their subtasks.
    #[serde(default, skip_serializing_if = "is_zero_u64")]
    pub started_at: u64,
}

/// Where a gang stands: reserving (since `reserving_since`), bound (`bound_at`), or rolled
/// back and waiting to try again (`retry_at`).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct GangState {
    /// When its first current reservation was made (0: it holds none); the deadline counts
    /// from here.
    #[serde(default)]
    pub reserving_since: u64,
    /// When `min_members` members were bound and dispatched (0: not yet). Members beyond the
    /// minimum then start as room appears.
    #[serde(default)]
    pub bound_at: u64,
    /// Times every reservation was rolled back.
    #[serde(default)]
    pub rollbacks: u32,
    #[serde(default)]
    pub rolled_back_at: u64,
    /// Not before this time does it reserve again (exponential back-off after a rollback).
    #[serde(default)]
    pub retry_at: u64,
    /// Why the last rollback happened.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub reason: String,
}

/// One state change of a subtask, kept in its history.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Transition {
    pub state: SubtaskState,
    pub at: u64,
    pub attempt: u32,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub worker: Option<WorkerId>,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub note: String,
}

/// A subtask as stored and as held in memory.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Subtask {
    pub task: String,
    pub rank: u32,
    pub state: SubtaskState,
    /// 0 until first placed; +1 on every placement.
    pub attempt: u32,
    /// Failed attempts (a lost worker does not count).
    pub failures: u32,
    pub worker: Option<WorkerId>,
    pub ready_at: u64,
    pub assigned_at: u64,
    pub started_at: u64,
    pub finished_at: u64,
    pub exit_code: i32,
    pub error: String,
    pub fetch_ms: u64,
    pub fetched_bytes: u64,
    pub evicted_bytes: u64,
    /// (output name, size) of a succeeded attempt.
    pub outputs: Vec<(String, u64)>,
    /// The content digest of each output of a succeeded attempt, by output name, as the worker
    /// that ran it reported: what every copy is checked against. Empty in records from before
    /// digests, and for outputs of workers that sent none.
    #[serde(default, skip_serializing_if = "std::collections::BTreeMap::is_empty")]
    pub digests: std::collections::BTreeMap<String, Digest>,
    pub stdout_tail: String,
    pub stderr_tail: String,
    pub history: Vec<Transition>,
    /// A retry waiting out its back-off is not placed before this time (ms); 0 = at once.
    #[serde(default)]
    pub not_before: u64,
    /// Every failed attempt, oldest first (at most `max_retries + 1`, which is bounded).
    #[serde(default)]
    pub failed_attempts: Vec<AttemptFailure>,
    /// The GPU device indices of the worker that the current attempt holds (as many as it asked
    /// for); empty when it holds none.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub gpus: Vec<u32>,
    /// Times the subtask ran again after succeeding, to recompute outputs lost with a worker
    /// (not failures).
    #[serde(default)]
    pub reruns: u32,
    /// The worker holding a reservation for this `Ready` gang member (resources set aside, not
    /// yet dispatched).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reserved_on: Option<WorkerId>,
    /// The latest attempt's median iteration time as it printed it (`plexus:iter_ms=`), ms;
    /// 0 = none.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub iter_ms: f64,
    /// Where the current attempt's missing inputs were expected to come from when it was
    /// dispatched: what its measured fetch is attributed to (`core::estimates`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fetch_plan: Option<FetchPlan>,
    /// Attempts placed again, uncounted, because no holder could serve one of their inputs
    /// (at most [`super::lineage::MAX_UNFETCHED_REQUEUES`] per run; past that such a failure
    /// counts). Back to 0 when the subtask is re-run after a success.
    #[serde(default, skip_serializing_if = "is_zero_u32")]
    pub unfetched_requeues: u32,
    /// The newest `checkpoint` output a failed or stopped attempt left, kept on the worker that
    /// ran it: what the next attempt resumes from (`core::checkpoint`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kept: Option<KeptCheckpoint>,
    /// What the current attempt is doing before it runs (`pulling image python:3.11`, `building
    /// the python environment`), as its worker reported; empty otherwise.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub stage: String,
}

/// A checkpoint a failed or stopped attempt left: object `<output>.attempt-<attempt>` of the
/// subtask, on `worker`.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub struct KeptCheckpoint {
    pub attempt: u32,
    pub worker: WorkerId,
    pub size: u64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub digest: Option<Digest>,
}

fn is_zero_u64(v: &u64) -> bool {
    *v == 0
}

fn is_zero_u32(v: &u32) -> bool {
    *v == 0
}

/// The inputs an attempt was expected to fetch when it was dispatched: how many and how many
/// bytes, and the holder it would fetch most of those bytes from (the first holder its
/// assignment lists for each).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct FetchPlan {
    pub from: WorkerId,
    pub objects: u32,
    pub bytes: u64,
}

fn is_zero(v: &f64) -> bool {
    *v == 0.0
}

/// A failed attempt of a subtask, as `plexus status` shows it.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct AttemptFailure {
    pub attempt: u32,
    pub worker: Option<WorkerId>,
    pub exit_code: i32,
    pub error: String,
    pub finished_at: u64,
}

/// A worker as stored.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct WorkerRecord {
    pub id: WorkerId,
    /// The worker process's session; a different one on re-registration means it restarted.
    pub session: String,
    pub peer_addr: String,
    pub capacity: Capacity,
    pub alive: bool,
    pub registered_at: u64,
    pub last_heartbeat: u64,
    /// Drained (`plexus workers drain`): nothing new is placed on it; what runs there finishes.
    /// Kept across re-registration and restarts.
    #[serde(default)]
    pub draining: bool,
    /// The longest heartbeat timeout this session was told (ms; 0: the configured one): the
    /// coordinator waits at least this long before declaring it lost, since the worker may hold
    /// a lease that long (`timing.rs`). Stored whenever it grows, so a new leader waits as long.
    #[serde(default)]
    pub timeout_ms: u64,
}

/// One candidate as recorded for `plexus explain`.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct CandidateRecord {
    pub worker: WorkerId,
    pub feasible: bool,
    pub score: Option<f64>,
    pub features: super::features::Features,
    pub note: String,
}

/// The latest placement decision of a subtask, stored for `plexus explain`.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct PlacementRecord {
    /// The decision id given to the placer (see `PlacementRequest::decision`).
    #[serde(default)]
    pub decision: u64,
    pub placer: String,
    pub attempt: u32,
    pub chosen: WorkerId,
    pub exploratory: bool,
    pub reason: String,
    pub decided_at: u64,
    /// The chosen worker and the best others, at most [`MAX_EXPLAINED`] (issue 35: every
    /// candidate of every decision was stored, ~150 KB a placement at 1,000 workers, which made
    /// writing them most of the engine's time).
    pub candidates: Vec<CandidateRecord>,
    /// Candidates considered and not kept in `candidates`.
    #[serde(default)]
    pub omitted: u32,
}

/// Candidates a placement record keeps: the chosen one, then the best others by the placer's
/// score, and a few of those that could not run it (why not). 32 at first; 16 since issue 35's
/// fleet runs: records are kept in memory for every subtask, and a deep queue's grew the
/// coordinator by ~5 KB a subtask at 32.
pub const MAX_EXPLAINED: usize = 16;
/// Of those, the places kept for candidates that could not run the task (when there are more
/// candidates than the record keeps and any could not), so `plexus explain` still shows why not.
pub const INFEASIBLE_EXPLAINED: usize = 4;

/// The candidates a placement record keeps, in their order: the chosen one, the feasible others
/// best first by the placer's score (higher is better; `fastest`'s is minus its estimate), and up
/// to [`INFEASIBLE_EXPLAINED`] infeasible ones (more when too few are feasible to fill the
/// record), at most [`MAX_EXPLAINED`] in all.
pub(super) fn explained(candidates: &[Candidate], decision: &Decision) -> Vec<usize> {
    if candidates.len() <= MAX_EXPLAINED {
        return (0..candidates.len()).collect();
    }
    let score = |i: usize| decision.scores.get(i).copied().filter(|s| !s.is_nan()).unwrap_or(f64::NEG_INFINITY);
    let others = (0..candidates.len()).filter(|&i| i != decision.chosen);
    let (mut feasible, infeasible): (Vec<usize>, Vec<usize>) = others.partition(|&i| candidates[i].feasible);
    feasible.sort_by(|&a, &b| score(b).total_cmp(&score(a)).then(a.cmp(&b)));
    let room = MAX_EXPLAINED - 1;
    let feasible_kept = feasible.len().min(room - INFEASIBLE_EXPLAINED.min(infeasible.len()));
    let mut kept: Vec<usize> = std::iter::once(decision.chosen)
        .filter(|&c| c < candidates.len())
        .chain(feasible.into_iter().take(feasible_kept))
        .chain(infeasible.into_iter().take(room - feasible_kept))
        .collect();
    kept.sort_unstable();
    kept
}

/// What is loaded from the store at start: every record but the placement records (see
/// [`super::Explained`]).
#[derive(Default, Debug)]
pub struct Snapshot {
    pub jobs: Vec<JobRecord>,
    pub subtasks: Vec<(JobId, u32, Subtask)>,
    pub workers: Vec<WorkerRecord>,
}
