//! `plexus explain`: where the record of a subtask's latest placement is.

use plexus_proto::JobId;

use super::records::PlacementRecord;
use super::state::Core;
use crate::error::Error;

/// Where a subtask's latest placement record is (see [`Core::explain_at`]).
#[derive(Debug)]
pub enum Explained<'a> {
    /// Decided by this core: kept in memory.
    Here(&'a PlacementRecord),
    /// Decided before this core was restored (a restart, a new leader): only in the store, under
    /// this subtask index. Restoring does not read placement records (issue 35: ~6 KB a subtask,
    /// most of a restart's time and a takeover's).
    Stored(u32),
}

impl Core {
    /// What was decided for a subtask's latest placement, when this core decided it.
    pub fn explain(&self, job: JobId, task: &str, rank: u32) -> Result<&PlacementRecord, Error> {
        match self.explain_at(job, task, rank)? {
            Explained::Here(p) => Ok(p),
            Explained::Stored(_) => Err(Error::NotPlaced(format!(
                "task {task:?} rank {rank} of job {job} was placed before this coordinator started: \
                 its record is in the store"
            ))),
        }
    }

    /// Where the record of a subtask's latest placement is: in memory when this core decided it,
    /// else (placed before a restart or a takeover) only in the store, which
    /// [`Core::restore`] does not load.
    pub fn explain_at(&self, job: JobId, task: &str, rank: u32) -> Result<Explained<'_>, Error> {
        let j = self.jobs.get(&job).ok_or(Error::NoJob(job))?;
        let idx = j.subtask_index(task, rank)?;
        if let Some(p) = j.placements.get(&idx) {
            return Ok(Explained::Here(p));
        }
        let s = &j.subtasks[idx as usize];
        if s.attempt > 0 {
            return Ok(Explained::Stored(idx));
        }
        Err(Error::NotPlaced(format!(
            "task {task:?} rank {rank} of job {job} has not been placed yet ({})",
            s.state.as_str()
        )))
    }
}
