//! Workers: registration (and reconciliation after either side restarted), heartbeats, the
//! objects they hold, loss after missed heartbeats, and the resources attempts hold on them.

use std::collections::HashSet;

use plexus_proto::{AttemptRef, JobId, ObjectId, SubtaskState, WorkerId};

use super::messages::{NodeReport, Registration};
use super::records::WorkerRecord;
use super::state::Core;
use crate::error::Error;

/// How often, at most, [`Core::tick`] looks for silent workers (ms of the core's clock).
pub const EVICT_EVERY_MS: u64 = 50;

impl Core {
    /// Registers a worker or re-registers it after a restart of either side.
    ///
    /// If the worker process is new (another session), every attempt placed on its previous
    /// process is lost and placed again. If it is the same process (the coordinator restarted or
    /// the connection broke), placed attempts it does not list in `known` never reached it and are
    /// placed again, and attempts it lists that are no longer current are cancelled on it.
    ///
    /// Returns whether this is the same process, still alive here (never declared lost): then
    /// none of its known attempts was placed elsewhere, and a worker whose lease ran out may
    /// thaw them (ARCHITECTURE.md, "Liveness and fencing").
    pub fn register(&mut self, reg: Registration, now: u64) -> bool {
        let id = reg.worker;
        let same_process = self.workers.get(&id).is_some_and(|w| w.record().session == reg.session);
        let resumed = same_process && self.workers.get(&id).is_some_and(|w| w.record().alive);
        let known: HashSet<&AttemptRef> = reg.known.iter().collect();

        if let Some(w) = self.workers.get(&id) {
            let placed: Vec<(JobId, u32)> = w.placed().iter().copied().collect();
            for (job, idx) in placed {
                let Some(s) = self.jobs.get(&job).map(|j| &j.subtasks[idx as usize]) else { continue };
                let current = AttemptRef { job, task: s.task.clone(), rank: s.rank, attempt: s.attempt };
                if !same_process {
                    self.requeue(job, idx, now, "worker restarted".into());
                } else if !known.contains(&current) {
                    self.requeue(job, idx, now, "assignment never reached the worker".into());
                }
            }
        }
        // Attempts the worker runs that we no longer want there.
        for a in &reg.known {
            let wanted = self.jobs.get(&a.job).and_then(|j| {
                let idx = j.subtask_index(&a.task, a.rank).ok()?;
                let s = &j.subtasks[idx as usize];
                (s.attempt == a.attempt && s.worker == Some(id) && s.state.is_placed()).then_some(())
            });
            if wanted.is_none() {
                self.out.cancels.push((id, a.clone()));
            }
        }

        let registered_at = self.workers.get(&id).map(|w| w.record().registered_at).unwrap_or(now);
        let draining = self.workers.get(&id).is_some_and(|w| w.record().draining);
        // The same process may hold a longer lease than the timing it is told now (`timing.rs`).
        let told = self.timing.current().heartbeat_timeout_ms;
        let timeout_ms = match self.workers.get(&id) {
            Some(w) if same_process => w.record().timeout_ms.max(told),
            _ => told,
        };
        let record = WorkerRecord {
            id,
            session: reg.session,
            peer_addr: reg.peer_addr,
            capacity: reg.capacity,
            alive: true,
            registered_at,
            last_heartbeat: now,
            draining,
            timeout_ms,
        };
        self.workers.register(record);
        self.out.workers.insert(id);
        self.workers.update_node(id, reg.state);
        resumed
    }

    /// Drains (`on`) or undrains a worker: while drained nothing new is placed on it (gangs do not
    /// count on it either); what runs there finishes. Durable.
    pub fn drain_worker(&mut self, id: WorkerId, on: bool) -> Result<(), Error> {
        if self.workers.set_draining(id, on)? {
            self.out.workers.insert(id);
        }
        Ok(())
    }

    /// Forgets a lost worker (`plexus workers remove`): its record is deleted and the objects it
    /// was last known to hold are no longer looked for there. A live worker is refused: drain and
    /// stop it first (it would register again anyway).
    pub fn remove_worker(&mut self, id: WorkerId) -> Result<(), Error> {
        self.workers.remove(id)?;
        self.out.workers.remove(&id);
        self.out.removed_workers.insert(id);
        Ok(())
    }

    /// A heartbeat; false if the worker must register again (unknown, or another session). Its
    /// answer carries [`Core::timing`].
    pub fn heartbeat(&mut self, id: WorkerId, session: &str, node: NodeReport, now: u64) -> bool {
        if !self.workers.heartbeat(id, session, now) {
            return false;
        }
        // Its answer tells the worker the timing of now; a longer timeout than it was told
        // before is stored before the answer leaves (the outbox is committed first).
        if self.workers.raise_timeout(id, self.timing.current().heartbeat_timeout_ms) {
            self.out.workers.insert(id);
        }
        self.workers.update_node(id, node);
        true
    }

    /// Declares workers whose heartbeats stopped lost and places their attempts again (unless
    /// evictions halt, `liveness.rs`), and makes retries whose back-off is over ready.
    pub fn tick(&mut self, now: u64) {
        for (job, idx) in self.ready.due(now) {
            self.push_ready(job, idx);
        }
        // The silent workers are looked for at most every EVICT_EVERY_MS: it is a pass over
        // every worker, and the engine ticks at every round — thousands a second when 5,000
        // workers heartbeat (issue 35), against timeouts of seconds.
        if now < self.evicted_at || now >= self.evicted_at.saturating_add(EVICT_EVERY_MS) {
            self.evicted_at = now;
            self.evict_silent(now);
        }
    }

    pub(super) fn lose_worker(&mut self, id: WorkerId, now: u64) {
        let Some(w) = self.workers.get(&id) else { return };
        let placed: Vec<(JobId, u32)> = w.placed().iter().copied().collect();
        // A gang that had a reservation there is rolled back whole: it was not bound.
        let reserved: Vec<(JobId, u32)> = w.reserved().iter().copied().collect();
        tracing::warn!(worker = %id, "worker missed its heartbeats; declared lost");
        let gone = self.workers.lose(id).unwrap_or_default();
        self.out.workers.insert(id);
        for (job, idx) in reserved {
            let gang = self
                .jobs
                .get(&job)
                .and_then(|j| j.record.spec.tasks[j.task_of(idx)].gang.as_ref().map(|g| g.name.clone()));
            match gang {
                Some(name) => {
                    self.rollback_gang(job, &name, format!("worker {id} was lost before the gang was bound"), now)
                }
                None => self.unreserve((job, idx)),
            }
        }
        for (job, idx) in placed {
            self.requeue(job, idx, now, format!("worker {id} lost"));
        }
        self.requeue_fetchers_of(&gone, id, now);
    }

    /// Attempts on other workers that are still fetching their inputs (assigned, not yet
    /// running) where one of them is in `gone` (its last holder, `from`, was just lost): left
    /// alone they would wait out their fetch timeouts (a minute against a host that hangs
    /// rather than refuses) before reporting the input unfetched. They are placed again now,
    /// uncounted, and placing them remakes the input (`lineage.rs`).
    fn requeue_fetchers_of(&mut self, gone: &HashSet<ObjectId>, from: WorkerId, now: u64) {
        if gone.is_empty() {
            return;
        }
        let jobs: HashSet<JobId> = gone.iter().map(|o| o.job).collect();
        let fetching: Vec<(JobId, u32)> = self
            .workers
            .values()
            .filter(|w| w.record().alive)
            .flat_map(|w| w.placed().iter().copied())
            .filter(|&(job, idx)| {
                jobs.contains(&job)
                    && self.jobs.get(&job).is_some_and(|j| j.subtasks[idx as usize].state == SubtaskState::Assigned)
            })
            .collect();
        for (job, idx) in fetching {
            let j = &self.jobs[&job];
            let (t, rank) = (j.task_of(idx), j.subtasks[idx as usize].rank);
            if j.subtasks[idx as usize].state != SubtaskState::Assigned {
                continue; // restarted with its gang by an earlier one of the list
            }
            // What the attempt was sent to fetch: a collective member its own rank's inputs only.
            let collective = j.record.spec.tasks[t].collective.is_some();
            let inputs: Vec<ObjectId> = if collective {
                self.member_inputs(job, t, rank)
            } else {
                self.inputs_of(job, idx).into_iter().map(|(o, _)| o).collect()
            };
            let Some(o) = inputs.into_iter().find(|o| gone.contains(o)) else { continue };
            self.stop_attempt((job, idx));
            self.requeue(job, idx, now, format!("its input {o} was lost with worker {from} while being fetched"));
            if collective {
                self.restart_gang(
                    (job, idx),
                    now,
                    now,
                    format!("gang restarted: member {rank}'s input {o} was lost with worker {from}"),
                );
            }
        }
    }

    /// Frees the resources an attempt held on a worker.
    pub(super) fn release_worker(&mut self, (job, idx): (JobId, u32), wid: WorkerId) {
        let Some(j) = self.jobs.get_mut(&job) else { return };
        let claim = j.claim(idx);
        let gpus = std::mem::take(&mut j.subtasks[idx as usize].gpus);
        if self.workers.get_mut(&wid).is_some_and(|mut w| w.free((job, idx), claim, &gpus)) {
            self.count_queue(job, idx, -1.0);
        }
    }
}
