//! Lineage re-execution: an input whose every holder is lost is made again by re-running the
//! subtask that produced it, as Ray does, instead of failing its consumer.
//!
//! The check runs when a consumer is about to be placed. Each lost object's producer subtask goes
//! from `Succeeded` back to `Ready` (a re-run, counted apart from failures), and the consumer goes
//! back to `Waiting`: when the producer succeeds again its task is done again and the usual DAG
//! release makes the consumer ready. A producer whose own inputs are gone meets the same check
//! when it is placed, so recovery walks back through the lineage as far as it must, one
//! scheduling round per level, without recursion. A producer that is a member of a completed
//! collective cannot run alone (its peers' processes, and the communicator, are gone): every
//! member that completed runs again with it, and the gang is placed whole, as on its first run.
//! Like every lineage re-run this assumes a task makes the same outputs from the same inputs.
//! Recovery gives up — failing the consumer, under its task's `on_failure`, with an error naming
//! the object and the worker that held it — only when a producer (or, for a collective, one of
//! its members) was re-run [`MAX_RERUNS`] times already.

use plexus_proto::{Digest, JobId, ObjectId, SubtaskState, WorkerId};

use super::state::Core;

/// Whether a subtask's inputs can be fetched now.
pub enum Availability {
    /// Every input has a live holder.
    Held,
    /// Some input's holder has not registered again yet since a coordinator restart: wait.
    Unknown,
    /// These inputs have no live holder and none can come back: make them again.
    Lost(Vec<ObjectId>),
}

/// The most times one subtask's attempt is placed again, uncounted, after no holder could serve
/// one of its inputs. Past this the holders are alive and listed but keep failing to serve it
/// (a network cut between workers), and such a failure counts like any other.
pub const MAX_UNFETCHED_REQUEUES: u32 = 3;

/// The most times one subtask is re-run to recover lost outputs. Each re-run follows the loss of
/// a worker; past this many the cluster is losing workers faster than the work can finish.
pub const MAX_RERUNS: u32 = 10;

impl Core {
    /// Where the inputs of a subtask stand: every one held by a live worker, some that may still
    /// be (their producer's worker is alive but has not registered again since the coordinator
    /// restarted, so what it holds is not known yet), or some lost.
    pub(super) fn input_availability<'a>(
        &self,
        job: JobId,
        inputs: impl Iterator<Item = &'a ObjectId>,
    ) -> Availability {
        let mut lost = Vec::new();
        for o in inputs {
            let live = |w: &plexus_proto::WorkerId| self.workers.get(w).is_some_and(|w| w.record().alive);
            if self.workers.holders(o).is_some_and(|h| h.iter().any(live)) {
                continue;
            }
            let producer_worker = self
                .jobs
                .get(&job)
                .and_then(|j| j.subtask_index(&o.task, o.rank).ok().and_then(|p| j.subtasks[p as usize].worker));
            if producer_worker.and_then(|w| self.workers.get(&w)).is_some_and(|w| w.record().alive && !w.connected()) {
                return Availability::Unknown;
            }
            lost.push(o.clone());
        }
        if lost.is_empty() { Availability::Held } else { Availability::Lost(lost) }
    }

    /// Starts recovering the lost inputs of the subtasks `consumers` (one subtask, or a gang's
    /// members): re-runs their producers and sends the consumers back to `Waiting`, or gives up
    /// on the first consumer when a producer cannot be re-run.
    pub(super) fn recover_inputs(&mut self, job: JobId, consumers: &[u32], lost: &[ObjectId], now: u64) {
        for o in lost {
            let Some(j) = self.jobs.get(&job) else { return };
            let Ok(p) = j.subtask_index(&o.task, o.rank) else { continue };
            let producer = &j.subtasks[p as usize];
            let held_by = producer.worker.map_or_else(|| "an unknown worker".to_string(), |w| format!("worker {w}"));
            match producer.state {
                SubtaskState::Succeeded => {
                    let t = j.task_of(p);
                    // A collective's member runs again only with every member that completed.
                    let again: Vec<u32> = if j.record.spec.tasks[t].collective.is_some() {
                        j.members(t).filter(|&i| j.subtasks[i as usize].state == SubtaskState::Succeeded).collect()
                    } else {
                        vec![p]
                    };
                    if let Some(&spent) = again.iter().find(|&&i| j.subtasks[i as usize].reruns >= MAX_RERUNS) {
                        let whom = if spent == p {
                            "it".to_string()
                        } else {
                            format!("member {} of its collective", j.subtasks[spent as usize].rank)
                        };
                        let error = format!(
                            "input {o} was lost with {held_by}, and its producer cannot be re-run: {whom} was re-run {MAX_RERUNS} times already"
                        );
                        self.give_up((job, consumers[0]), now, error);
                        return;
                    }
                    for i in again {
                        let note = if i == p {
                            format!("re-run: its output {o} was lost with {held_by}")
                        } else {
                            format!("re-run with its collective: {o} was lost with {held_by}")
                        };
                        self.rerun(job, i, now, note);
                    }
                }
                // Already being made again (another consumer found it lost first).
                SubtaskState::Waiting | SubtaskState::Ready | SubtaskState::Assigned | SubtaskState::Running => {}
                SubtaskState::Failed | SubtaskState::Cancelled => {
                    let error = format!(
                        "input {o} was lost with {held_by}, and its producer {} ended {}",
                        producer.task,
                        producer.state.as_str()
                    );
                    self.give_up((job, consumers[0]), now, error);
                    return;
                }
            }
        }
        for &c in consumers {
            let s = &self.jobs[&job].subtasks[c as usize];
            if s.state == SubtaskState::Ready {
                let note = format!("waiting: input {} is being made again", lost[0]);
                self.set_state((job, c), SubtaskState::Waiting, now, note);
            }
        }
    }

    /// An attempt that failed before its task ran because no holder could serve input `o`: the
    /// holder died or lost the object after the attempt was placed (a consumer placed in the
    /// seconds before a dead worker is declared lost). It is not the task's failure: the
    /// attempt is placed again, uncounted, once a heartbeat timeout has passed, by when a dead
    /// holder is declared lost and a holder that lost the file has said so; placing it then
    /// meets [`Core::input_availability`], which remakes the input if no one holds it. At most
    /// [`MAX_UNFETCHED_REQUEUES`] times per run of the subtask, then it counts as a failure; an
    /// object that is not one of the task's inputs counts at once. A collective
    /// member's gang restarts with it.
    pub(super) fn input_unfetched(&mut self, key: (JobId, u32), o: ObjectId, now: u64, error: String) {
        let Some(j) = self.jobs.get(&key.0) else { return };
        let t = j.task_of(key.1);
        let spec = &j.record.spec.tasks[t];
        let s = &j.subtasks[key.1 as usize];
        let an_input = o.job == key.0 && spec.inputs.iter().any(|i| i.task == o.task && i.output == o.name);
        if !an_input || s.unfetched_requeues >= MAX_UNFETCHED_REQUEUES {
            return self.fail_attempt(key, now, error);
        }
        let (collective, rank) = (spec.collective.is_some(), s.rank);
        let j = self.jobs.get_mut(&key.0).expect("exists");
        j.subtasks[key.1 as usize].unfetched_requeues += 1;
        let at = now.saturating_add(self.timing.current().heartbeat_timeout_ms);
        let note = format!(
            "input {o} could not be fetched ({error}); placed again in {} ms, once its holders are known (not a failure)",
            at - now
        );
        self.requeue_at(key.0, key.1, now, at, note);
        if collective {
            self.restart_gang(key, now, at, format!("gang restarted: member {rank} could not fetch its input {o}"));
        }
    }

    /// A copy of `object` that `holder` served did not match the object's digest (`found_by`
    /// says who hashed it): the holder is treated as having lost the object. It is no longer
    /// listed as a holder, even while its reports still list it, so a consumer fetches from
    /// another holder or, with none left, the producer is re-run (`input_availability`).
    pub fn bad_copy(&mut self, holder: WorkerId, object: &ObjectId, found_by: &str) {
        self.counters.digest_mismatches += 1;
        let held = self.workers.distrust(holder, object);
        tracing::warn!(%object, %holder, found_by, held, "a copy did not match its digest; the holder is treated as having lost it");
    }

    /// The digest the producer of `o` reported for it, if the object is one of a succeeded
    /// subtask's outputs and the digest is known.
    pub fn digest_of(&self, o: &ObjectId) -> Option<Digest> {
        let j = self.jobs.get(&o.job)?;
        let idx = j.subtask_index(&o.task, o.rank).ok()?;
        let s = &j.subtasks[idx as usize];
        (s.state == SubtaskState::Succeeded).then(|| s.digests.get(&o.name).copied()).flatten()
    }

    /// Makes a succeeded subtask ready again to recompute its outputs.
    pub(super) fn rerun(&mut self, job: JobId, idx: u32, now: u64, note: String) {
        let j = self.jobs.get_mut(&job).expect("exists");
        let s = &mut j.subtasks[idx as usize];
        s.reruns += 1;
        // The bound on uncounted re-placements is per run, not per lifetime.
        s.unfetched_requeues = 0;
        s.outputs.clear();
        s.digests.clear();
        s.worker = None;
        s.ready_at = now;
        s.not_before = 0;
        self.set_state((job, idx), SubtaskState::Ready, now, note);
        self.push_ready(job, idx);
    }
}
