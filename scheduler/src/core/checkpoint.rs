//! Checkpoints across attempts (`checkpoint = "<output>"` in a job file).
//!
//! A task with a `checkpoint` output rewrites that file as it goes. When one of its attempts
//! fails or is stopped (a gang restarted whole, a timeout, a cancel), its worker keeps the file
//! as the attempt left it, in its cache, as object `<output>.attempt-<n>` of the subtask, and
//! reports it with the attempt's end; the core remembers the newest per subtask
//! ([`KeptCheckpoint`]) and gives the subtask's next attempt, wherever it is placed, that object
//! as an extra input marked `resume`: its worker fetches it over the data plane like any input
//! and the task finds it at `$PLEXUS_RESUME_FROM`.
//!
//! A report of a stopped gang member usually arrives after the gang was made ready again (so the
//! report itself is stale): its checkpoint is still taken, as long as the reporting worker is the
//! one that ran that attempt (its history says so) and nothing newer is kept. A checkpoint whose
//! worker is no longer alive is not handed on (the attempt starts without it); a subtask of a gang
//! whose checkpoint was lost with its worker can take a newer one from another member (the task
//! decides: its members share what they resume from over the collective endpoint).

use plexus_proto::{AttemptRef, Digest, ObjectId, WorkerId, ids::kept_checkpoint};

use super::messages::{Assignment, HolderLocation, InputLocation};
use super::records::KeptCheckpoint;
use super::state::Core;
use plexus_proto::JobId;

impl Core {
    /// Records the checkpoint `(object, size, digest)` that attempt `a` of subtask `key` left on
    /// `wid`, when `wid` ran that attempt, the object is that attempt's kept checkpoint, and
    /// nothing newer is kept.
    pub(super) fn keep_checkpoint(
        &mut self,
        key: (JobId, u32),
        a: &AttemptRef,
        wid: WorkerId,
        (object, size, digest): (ObjectId, u64, Option<Digest>),
    ) {
        let Some(job) = self.jobs.get_mut(&key.0) else { return };
        let Some(name) = job.record.spec.tasks[job.task_of(key.1)].checkpoint.clone() else { return };
        let s = &mut job.subtasks[key.1 as usize];
        let ran_it = s.history.iter().any(|t| t.attempt == a.attempt && t.worker == Some(wid));
        if object != kept_checkpoint(a, &name) || !ran_it {
            tracing::warn!(attempt = %a, %object, worker = %wid, "ignoring a checkpoint that is not this worker's of this attempt");
            return;
        }
        if s.kept.is_some_and(|k| k.attempt >= a.attempt) {
            return;
        }
        s.kept = Some(KeptCheckpoint { attempt: a.attempt, worker: wid, size, digest });
        self.out.subtasks.insert(key);
    }

    /// `assignment` (of subtask `key`'s new attempt) with its kept checkpoint as an input marked
    /// `resume`, when one is kept on a live worker.
    pub(super) fn with_resume(&self, key: (JobId, u32), mut assignment: Assignment) -> Assignment {
        let Some(job) = self.jobs.get(&key.0) else { return assignment };
        let (Some(name), Some(kept)) = (&assignment.checkpoint, job.subtasks[key.1 as usize].kept) else {
            return assignment;
        };
        let Some(w) = self.workers.get(&kept.worker).filter(|w| w.record().alive) else { return assignment };
        let from = AttemptRef { attempt: kept.attempt, ..assignment.attempt.clone() };
        let object = kept_checkpoint(&from, name);
        assignment.inputs.push(InputLocation {
            object: object.clone(),
            size: kept.size,
            digest: kept.digest,
            holders: vec![HolderLocation {
                worker: w.id(),
                peer_addr: w.record().peer_addr.clone(),
                rails: w.record().capacity.rails.clone(),
            }],
        });
        assignment.resume = Some(object);
        assignment
    }
}
