//! What the engine answers about one subtask: the record of its latest placement (from memory,
//! or from the store for one placed before this coordinator started) and where its logs are.

use plexus_proto::JobId;
use plexus_scheduler::Error as SchedulerError;
use plexus_scheduler::core::{Core, Explained};

use crate::store::Store;
use crate::view::Explanation;

/// Where to find the logs of a subtask's latest attempt.
pub struct LogSource {
    pub attempt: u32,
    pub worker: String,
    /// The worker's peer URL if it is alive.
    pub peer_addr: Option<String>,
    pub attempt_ref: plexus_proto::AttemptRef,
    pub stdout_tail: String,
    pub stderr_tail: String,
    /// The subtask's state and current attempt now.
    pub state: plexus_proto::SubtaskState,
    pub latest_attempt: u32,
}

/// A subtask's latest placement record: from memory, or from the store when it was placed
/// before this coordinator started (restoring does not load placement records).
pub(crate) fn explained(
    core: &Core,
    store: &dyn Store,
    job: JobId,
    task: &str,
    rank: u32,
) -> Result<Explanation, SchedulerError> {
    let idx = match core.explain_at(job, task, rank)? {
        Explained::Here(p) => return Ok(p.clone()),
        Explained::Stored(idx) => idx,
    };
    match store.placement(job, idx) {
        Ok(Some(p)) => Ok(p),
        Ok(None) => Err(SchedulerError::NotPlaced(format!(
            "task {task:?} rank {rank} of job {job} was placed before this coordinator started, and the store \
             holds no record of that placement"
        ))),
        Err(e) => Err(SchedulerError::NotPlaced(format!(
            "task {task:?} rank {rank} of job {job}: its placement record could not be read from the store: {e}"
        ))),
    }
}

pub(crate) fn log_source(
    core: &Core,
    job: JobId,
    task: &str,
    rank: u32,
    wanted: u32,
) -> Result<LogSource, SchedulerError> {
    let j = core.job(job).ok_or(SchedulerError::NoJob(job))?;
    let idx = j.subtask_index(task, rank)?;
    let s = &j.subtasks()[idx as usize];
    let (w, attempt) = if wanted == 0 {
        // The latest attempt that reached a worker: the current one, or (after a requeue) the one
        // before it, whose logs are the most recent there are.
        let Some(found) = s
            .worker
            .map(|w| (w, s.attempt))
            .or_else(|| s.history.iter().rev().find_map(|t| t.worker.map(|w| (w, t.attempt))))
        else {
            return Err(SchedulerError::NotPlaced(format!(
                "task {task:?} rank {rank} of job {job} has not run yet ({})",
                s.state.as_str()
            )));
        };
        found
    } else {
        let on = if wanted == s.attempt { s.worker } else { None }
            .or_else(|| s.failed_attempts.iter().find(|f| f.attempt == wanted).and_then(|f| f.worker))
            .or_else(|| s.history.iter().rev().find(|t| t.attempt == wanted).and_then(|t| t.worker));
        match on {
            Some(w) => (w, wanted),
            None => {
                return Err(SchedulerError::NotPlaced(format!(
                    "task {task:?} rank {rank} of job {job} has no attempt {wanted} that reached a worker (its latest is {})",
                    s.attempt
                )));
            }
        }
    };
    let latest = attempt == s.attempt || s.worker.is_none();
    let peer = core.worker(w).filter(|w| w.record().alive).map(|w| w.record().peer_addr.clone());
    Ok(LogSource {
        attempt,
        worker: w.to_string(),
        peer_addr: peer,
        attempt_ref: plexus_proto::AttemptRef { job, task: task.to_string(), rank, attempt },
        // The kept tails are the latest attempt's.
        stdout_tail: if latest { s.stdout_tail.clone() } else { String::new() },
        stderr_tail: if latest { s.stderr_tail.clone() } else { String::new() },
        state: s.state,
        latest_attempt: s.attempt,
    })
}
