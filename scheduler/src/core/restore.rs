//! Rebuilding the core from what the store kept: jobs, subtasks, workers and placements, then
//! the derived state (allocations, the ready queue, the jobs waiting for others), and the gangs
//! that were not bound rolled back.

use std::collections::HashMap;

use plexus_proto::{JobId, JobState, SubtaskState};

use super::job_table::Job;
use super::ledger::Devices;
use super::records::{Snapshot, Subtask};
use super::state::Core;
use crate::error::Error;

/// What a restored worker gets beyond the heartbeat timeout to register again with a new
/// leader: its reconnect back-off (at most 2 s) and a TLS set-up on a loaded machine. Without it
/// a worker that found the new leader a moment late was declared lost, and the attempts it had
/// finished but not yet reported were run again (seen as two completions of one subtask after an
/// etcd member's kill, `e2e/tests/ha.rs`). Waiting longer is always safe: a worker fences its
/// attempts on its own lease, never on the coordinator's timeout.
pub const RESTORE_GRACE_MS: u64 = 5_000;

impl Core {
    /// Rebuilds the state from stored records. Workers are not connected until they register
    /// again; each gets a full heartbeat timeout from `now` plus [`RESTORE_GRACE_MS`] to do so
    /// before it is declared lost.
    pub fn restore(&mut self, snap: Snapshot, now: u64) -> Result<(), Error> {
        self.restore_records(snap, now)?;
        self.rebuild_allocations(now);
        let unbound = self.drop_reservations();
        self.reindex_gated(now);
        self.roll_back_gangs(unbound, now);
        Ok(())
    }

    /// The stored records: jobs with their subtasks (checked against what the spec expands
    /// to), placements and workers.
    fn restore_records(&mut self, snap: Snapshot, now: u64) -> Result<(), Error> {
        let mut subtasks: HashMap<JobId, Vec<(u32, Subtask)>> = HashMap::new();
        for (job, idx, s) in snap.subtasks {
            subtasks.entry(job).or_default().push((idx, s));
        }
        for rec in snap.jobs {
            let mut subs = subtasks.remove(&rec.id).unwrap_or_default();
            subs.sort_by_key(|(i, _)| *i);
            let expected = rec.spec.total_subtasks();
            if subs.len() as u64 != expected || subs.iter().enumerate().any(|(i, (idx, _))| i as u32 != *idx) {
                return Err(Error::Restore(format!(
                    "job {}: store holds {} subtask records, the spec expands to {expected}",
                    rec.id,
                    subs.len()
                )));
            }
            self.jobs.insert(Job::new(rec, subs.into_iter().map(|(_, s)| s).collect()));
        }
        // Placement records are not restored: they are for `plexus explain`, which reads those of
        // earlier terms from the store ([`Core::explain_at`]), and for the placer's feedback, which
        // only this term's decisions await. So decision ids start again at 1: an attempt placed
        // before the restart reports no outcome to the placer, whose awaited decisions are new.
        for mut rec in snap.workers {
            rec.last_heartbeat = now.saturating_add(RESTORE_GRACE_MS);
            self.workers.restore(rec);
        }
        Ok(())
    }

    /// Derived state: allocations, and the ready queue in submission order.
    fn rebuild_allocations(&mut self, now: u64) {
        let order: Vec<JobId> = self.jobs.in_order().map(|j| j.record.id).collect();
        let mut ready = Vec::new();
        for id in order {
            let job = &self.jobs[&id];
            let running = job.record.state == JobState::Running;
            for (i, s) in job.subtasks.iter().enumerate() {
                if s.state.is_placed()
                    && let Some(mut w) = s.worker.and_then(|w| self.workers.get_mut(&w))
                {
                    let claim = job.claim(i as u32);
                    w.place((id, i as u32), claim, Devices::Exactly(&s.gpus));
                    self.fair_share.add(&job.record.spec.queue, claim.resources.cpu);
                }
                if running && s.state == SubtaskState::Ready {
                    if s.not_before > now {
                        self.ready.delay(s.not_before, id, i as u32);
                    } else {
                        ready.push((id, i as u32));
                    }
                }
            }
        }
        for (id, i) in ready {
            self.push_ready(id, i);
        }
    }

    /// Reservations of gangs that were not bound are rolled back: the workers they were on may
    /// not come back, and the gang reserves again from nothing (at once). Clears every
    /// member's reservation and returns the gangs that were reserving, for
    /// [`Core::roll_back_gangs`].
    fn drop_reservations(&mut self) -> Vec<(JobId, String)> {
        let unbound: Vec<(JobId, String)> = self
            .jobs
            .values()
            .flat_map(|j| {
                j.record
                    .gangs
                    .iter()
                    .filter(|(_, g)| g.bound_at == 0 && g.reserving_since > 0)
                    .map(move |(n, _)| (j.record.id, n.clone()))
            })
            .collect();
        let mut stray = Vec::new();
        for j in self.jobs.values_mut() {
            for (i, s) in j.subtasks.iter_mut().enumerate() {
                if s.reserved_on.take().is_some() {
                    // A sharing member's planned device goes with its reservation.
                    s.gpus.clear();
                    stray.push((j.record.id, i as u32));
                }
            }
        }
        for key in stray {
            self.out.subtasks.insert(key);
        }
        unbound
    }

    /// Jobs waiting for other jobs: indexed again, and settled if what they wait for ended.
    fn reindex_gated(&mut self, now: u64) {
        let gated: Vec<JobId> = self
            .jobs
            .values()
            .filter(|j| j.record.state == JobState::Running && !j.record.spec.after_jobs.is_empty())
            .map(|j| j.record.id)
            .collect();
        for id in gated {
            for a in self.jobs[&id].record.spec.after_jobs.clone() {
                self.jobs.wait_for(a, id);
            }
            self.settle_after(id, now);
        }
    }

    /// Marks each gang that was reserving as rolled back, to reserve again at once. Stored with
    /// the first round's commit.
    fn roll_back_gangs(&mut self, unbound: Vec<(JobId, String)>, now: u64) {
        for (job, name) in unbound {
            self.set_gang(job, &name, |g| {
                g.reserving_since = 0;
                g.rollbacks += 1;
                g.rolled_back_at = now;
                g.retry_at = now;
                g.reason = "the coordinator restarted before the gang was bound".into();
            });
        }
    }
}
