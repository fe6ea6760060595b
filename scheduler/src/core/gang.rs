//! Gangs: the members of a collective task placed all at once on distinct workers, or none,
//! and restarted whole.

use std::collections::HashMap;

use plexus_proto::{JobId, JobState, ObjectId, Resources, SubtaskState, WorkerId};

use super::lineage::Availability;
use super::{Assignment, CollectiveAssignment, Core, InputLocation, PlacementRecord};

impl Core {
    /// Places every member of collective task `t` at once, each on its own worker, or none.
    ///
    /// A gang runs together or not at all: when some members are ready again (a failed or lost
    /// member) while others are still placed, those are cancelled and made ready first, so the
    /// whole gang is placed anew with one communicator. Members are placed where their input
    /// (the producer replica of the same rank) is resident when that worker has room, else on
    /// the feasible worker with the most free cores. False when the gang does not fit now (or
    /// cannot be rerun); nothing is then placed.
    pub(super) fn place_gang(&mut self, job: JobId, t: usize, now: u64) -> bool {
        let j = &self.jobs[&job];
        let task = &j.record.spec.tasks[t];
        let (start, n) = (j.offsets[t], task.replicas);
        let members: Vec<u32> = (start..start + n).collect();

        if let Some(&done) = members.iter().find(|&&i| j.subtasks[i as usize].state == SubtaskState::Succeeded) {
            // A member that completed cannot join a new communicator; its result stands alone.
            let (name, rank) = (task.name.clone(), j.subtasks[done as usize].rank);
            let msg = format!("collective {name:?}: member {rank} completed but other members must run again; a partial gang cannot be rerun");
            self.finish_job(job, JobState::Failed, msg, now);
            return false;
        }
        let active: Vec<u32> = members.iter().copied().filter(|&i| j.subtasks[i as usize].state.is_placed()).collect();
        for idx in active {
            self.stop_attempt((job, idx));
            self.requeue(job, idx, now, "gang restarted: another member has to run again".into());
        }

        let j = &self.jobs[&job];
        let task = &j.record.spec.tasks[t];
        // Every member ready, and none still waiting out a retry's back-off.
        if members.iter().any(|&i| j.subtasks[i as usize].state != SubtaskState::Ready || j.subtasks[i as usize].not_before > now) {
            return false;
        }
        let req = task.resources;
        let input = &task.inputs[0];
        let objects: Vec<ObjectId> = (0..n).map(|rank| ObjectId { job, task: input.task.clone(), rank, name: input.output.clone() }).collect();
        match self.input_availability(job, objects.iter()) {
            Availability::Held => {}
            Availability::Unknown => return false,
            Availability::Lost(lost) => {
                self.recover_inputs(job, &members, &lost, now);
                return false;
            }
        }
        let j = &self.jobs[&job];
        let task = &j.record.spec.tasks[t];
        let input = &task.inputs[0];
        let producer = j.task_index(&input.task);
        let mut free: HashMap<WorkerId, Resources> =
            self.workers.values().filter(|w| w.connected && w.record.alive).map(|w| (w.record.id, w.free())).collect();
        let mut chosen: Vec<(WorkerId, ObjectId, u64, &'static str)> = Vec::with_capacity(members.len());
        for rank in 0..n {
            let size = producer
                .map(|p| &j.subtasks[(j.offsets[p] + rank) as usize])
                .and_then(|s| s.outputs.iter().find(|(o, _)| *o == input.output).map(|(_, sz)| *sz))
                .unwrap_or(0);
            let object = ObjectId { job, task: input.task.clone(), rank, name: input.output.clone() };
            let taken = |w: &WorkerId| chosen.iter().any(|(c, ..)| c == w);
            let holder = self.holders.get(&object).and_then(|h| {
                h.iter().copied().find(|w| !taken(w) && free.get(w).is_some_and(|f| req.fits_in(f)))
            });
            let (wid, why) = match holder {
                Some(w) => (w, "holds the member's input"),
                None => {
                    let best = free
                        .iter()
                        .filter(|(w, f)| !taken(w) && req.fits_in(f))
                        .max_by(|(a, fa), (b, fb)| fa.cpu.total_cmp(&fb.cpu).then_with(|| b.cmp(a)));
                    match best {
                        Some((w, _)) => (*w, "most free cores"),
                        None => return false,
                    }
                }
            };
            if let Some(f) = free.get_mut(&wid) {
                f.cpu -= req.cpu;
                f.memory = f.memory.saturating_sub(req.memory);
                f.gpu = f.gpu.saturating_sub(req.gpu);
            }
            chosen.push((wid, object, size, why));
        }

        let spec = task.collective.clone().expect("a collective task");
        let rails: Vec<Vec<String>> = chosen.iter().map(|(w, ..)| self.workers[w].record.capacity.rails.clone()).collect();
        let generation = j.subtasks[start as usize].attempt + 1;
        // The gang's tag base: distinct per job, task and generation, with the low 32 bits free
        // for the communicator's own message numbering.
        let tag = gang_tag(job, t, generation);
        let task_name = task.name.clone();
        for (rank, (wid, object, size, why)) in chosen.into_iter().enumerate() {
            let idx = start + rank as u32;
            let holders = self.holder_locations(&object);
            let decision = self.next_decision;
            self.next_decision += 1;
            let attempt = self.begin_attempt(job, idx, wid, now);
            let task = &self.jobs[&job].record.spec.tasks[t];
            let record = PlacementRecord {
                decision,
                placer: "gang".into(),
                attempt: attempt.attempt,
                chosen: wid,
                exploratory: false,
                reason: format!("member {rank} of {n} of collective {task_name:?}: {why}"),
                decided_at: now,
                candidates: Vec::new(),
            };
            let collective = CollectiveAssignment { spec: spec.clone(), members: rails.clone(), tag };
            let assignment = Assignment::of(task, attempt, req, vec![InputLocation { object, size, holders }], Some(collective));
            self.dispatch((job, idx), wid, record, assignment, now);
        }
        true
    }
}

/// A collective gang's tag base: a 32-bit FNV-1a hash of (job, task, generation) in the high
/// half, so concurrent gangs on the same workers use disjoint tags and a rerun never matches a
/// message of the gang before it.
fn gang_tag(job: JobId, task: usize, generation: u32) -> u64 {
    let mut h: u32 = 0x811c_9dc5;
    for b in job.to_string().bytes().chain((task as u64).to_le_bytes()).chain(generation.to_le_bytes()) {
        h ^= u32::from(b);
        h = h.wrapping_mul(0x0100_0193);
    }
    // Never 0: the high half of a random object-fetch tag is rarely 0, and 0 is easy to confuse.
    u64::from(h.max(1)) << 32
}
