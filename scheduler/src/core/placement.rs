//! Placement of single subtasks: the ready queue, candidates for the `Placer`, the decision's
//! record for `plexus explain`, and the placer's feedback when an attempt ends.

use std::collections::{HashMap, HashSet, VecDeque};

use plexus_proto::{AttemptRef, JobId, JobState, ObjectId, Resources, SubtaskState, WorkerId};

use super::lineage::Availability;
use super::{Assignment, CandidateRecord, Core, HolderLocation, InputLocation, PlacementRecord};
use crate::Error;
use crate::placer::{Candidate, Outcome, PlacementRequest};

impl Core {
    pub(super) fn feedback(&mut self, (job, idx): (JobId, u32), wid: WorkerId, succeeded: bool) {
        let util = self.cluster_utilisation();
        let Some(j) = self.jobs.get(&job) else { return };
        let s = &j.subtasks[idx as usize];
        let Some(decision) = j.placements.get(&idx).filter(|p| p.attempt == s.attempt).map(|p| p.decision) else { return };
        let outcome = Outcome {
            decision,
            worker: wid,
            succeeded,
            wait_ms: s.started_at.saturating_sub(s.ready_at),
            run_ms: s.finished_at.saturating_sub(s.started_at),
            fetch_ms: s.fetch_ms,
            fetched_bytes: s.fetched_bytes,
            evicted_bytes: s.evicted_bytes,
            cluster_utilisation: util,
        };
        self.placer.observe(&outcome);
    }

    /// Places ready subtasks on connected workers with room, oldest job first.
    pub fn schedule(&mut self, now: u64) {
        if self.ready.is_empty() {
            return;
        }
        // Each (job, task) with ready subtasks is judged once per round: placed, or why not.
        let mut judged: HashMap<(JobId, usize), bool> = HashMap::new();
        if !self.workers.values().any(|w| w.connected && w.record.alive) {
            for &(job, idx) in &self.ready {
                if let Some(t) = self.jobs.get(&job).map(|j| j.task_of(idx)) {
                    judged.insert((job, t), false);
                }
            }
            self.explain_waiting(judged);
            return;
        }
        let mut deferred = VecDeque::new();
        // Gangs that could not be placed this round: their other members wait without retrying.
        let mut gangs_waiting: HashSet<(JobId, usize)> = HashSet::new();
        let n = self.ready.len();
        for _ in 0..n {
            let Some((job, idx)) = self.ready.pop_front() else { break };
            let Some(j) = self.jobs.get(&job) else { continue };
            if j.record.state != JobState::Running || j.subtasks[idx as usize].state != SubtaskState::Ready {
                continue; // stale queue entry
            }
            let t = j.task_of(idx);
            let placed = if j.record.spec.tasks[t].collective.is_some() {
                !gangs_waiting.contains(&(job, t)) && self.place_gang(job, t, now)
            } else {
                self.place(job, idx, now)
            };
            let seen = judged.entry((job, t)).or_insert(true);
            // Not placed and still ready: it waits for room. (A subtask sent back to `Waiting`
            // while its lost inputs are made again, or failed for good, leaves the queue.)
            let still_ready = self.jobs.get(&job).is_some_and(|j| j.record.state == JobState::Running && j.subtasks[idx as usize].state == SubtaskState::Ready);
            if !placed && still_ready {
                *seen = false;
                if self.jobs.get(&job).is_some_and(|j| j.record.spec.tasks[t].collective.is_some()) {
                    gangs_waiting.insert((job, t));
                }
                deferred.push_back((job, idx));
            }
        }
        deferred.append(&mut self.ready);
        self.ready = deferred;
        self.explain_waiting(judged);
    }

    /// Records why each judged task that has subtasks left waiting is not placed: no set of live
    /// workers can ever run it (the reason names what is missing), or none has room now. A task
    /// whose every ready subtask was placed has no reason.
    fn explain_waiting(&mut self, judged: HashMap<(JobId, usize), bool>) {
        for ((job, t), _) in judged.iter().filter(|(_, all_placed)| **all_placed) {
            if let Some(j) = self.jobs.get_mut(job) {
                j.waiting.remove(t);
            }
        }
        for ((job, t), _) in judged.into_iter().filter(|(_, all_placed)| !*all_placed) {
            let Some(j) = self.jobs.get(&job) else { continue };
            let task = &j.record.spec.tasks[t];
            let reason = self.unrunnable(task).unwrap_or_else(|| format!("no live worker has room now for {}", fmt_res(&task.resources)));
            if let Some(j) = self.jobs.get_mut(&job) {
                j.waiting.insert(t, reason);
            }
        }
    }

    /// Places one subtask; false if no worker has room now.
    pub(super) fn place(&mut self, job: JobId, idx: u32, now: u64) -> bool {
        let j = &self.jobs[&job];
        let task = &j.record.spec.tasks[j.task_of(idx)];
        let req = task.resources;

        // Inputs: the selected replicas' output of each input task (every replica by default).
        let mut inputs: Vec<(ObjectId, u64)> = Vec::new();
        for input in &task.inputs {
            let Some(t) = j.task_index(&input.task) else { continue };
            let producer = &j.record.spec.tasks[t];
            for rank in input.rank.ranks(j.subtasks[idx as usize].rank, producer.replicas) {
                let s = &j.subtasks[(j.offsets[t] + rank) as usize];
                let size = s.outputs.iter().find(|(n, _)| *n == input.output).map(|(_, sz)| *sz).unwrap_or(0);
                inputs.push((ObjectId { job, task: input.task.clone(), rank, name: input.output.clone() }, size));
            }
        }
        match self.input_availability(job, inputs.iter().map(|(o, _)| o)) {
            Availability::Held => {}
            Availability::Unknown => return false,
            Availability::Lost(lost) => {
                self.recover_inputs(job, &[idx], &lost, now);
                return false;
            }
        }

        let mut candidates = Vec::new();
        for w in self.workers.values().filter(|w| w.connected && w.record.alive) {
            let free = w.free();
            let fits = req.fits_in(&free);
            let local: u64 = inputs.iter().filter(|(o, _)| w.objects.contains_key(o)).map(|(_, s)| *s).sum();
            candidates.push(Candidate {
                worker: w.record.id,
                feasible: fits,
                note: if fits { String::new() } else { format!("needs {} free, has {}", fmt_res(&req), fmt_res(&free)) },
                capacity: w.record.capacity.resources(),
                free,
                assigned: w.placed.len() as u32,
                cpu_utilisation: w.node.cpu_utilisation,
                local_input_bytes: local,
                cache_bytes: w.record.capacity.cache_bytes,
                cache_used: w.node.cache_used,
                // The coordinator knows neither the network between workers nor their engine
                // speeds, so it estimates neither (the simulator does).
                est_fetch_ms: None,
                est_compute_ms: None,
            });
        }
        if !candidates.iter().any(|c| c.feasible) {
            return false;
        }
        let decision_id = self.next_decision;
        self.next_decision += 1;
        let preq = PlacementRequest {
            decision: decision_id,
            job_age_ms: now.saturating_sub(j.record.submitted_at),
            resources: req,
            input_bytes: inputs.iter().map(|(_, s)| *s).sum(),
            flops: task.flops,
            writes: !task.outputs.is_empty(),
        };
        let decision = self.placer.place(&preq, &candidates);
        let Some(chosen) = candidates.get(decision.chosen).filter(|c| c.feasible) else {
            tracing::error!(placer = self.placer.name(), "placer chose an infeasible or missing candidate; subtask left ready");
            return false;
        };
        let wid = chosen.worker;

        let record = PlacementRecord {
            decision: decision_id,
            placer: self.placer.name().to_string(),
            attempt: j.subtasks[idx as usize].attempt + 1,
            chosen: wid,
            exploratory: decision.exploratory,
            reason: decision.reason.clone(),
            decided_at: now,
            candidates: candidates
                .iter()
                .enumerate()
                .map(|(i, c)| CandidateRecord {
                    worker: c.worker,
                    feasible: c.feasible,
                    score: decision.scores.get(i).copied().filter(|s| !s.is_nan()),
                    features: decision.features.as_ref().and_then(|f| f.get(i).cloned()).unwrap_or_else(|| c.features()),
                    note: c.note.clone(),
                })
                .collect(),
        };

        let input_locations = inputs
            .into_iter()
            .map(|(o, size)| InputLocation { holders: self.holder_locations(&o), object: o, size })
            .collect();

        let attempt = self.begin_attempt(job, idx, wid, now);
        let j = &self.jobs[&job];
        let task = &j.record.spec.tasks[j.task_of(idx)];
        let assignment = Assignment::of(task, attempt, req, input_locations, None);
        self.dispatch((job, idx), wid, record, assignment, now);
        true
    }

    /// Live workers holding `o`, with their rails: where an assignment's input can be fetched.
    pub(super) fn holder_locations(&self, o: &ObjectId) -> Vec<HolderLocation> {
        let Some(h) = self.holders.get(o) else { return Vec::new() };
        h.iter()
            .filter_map(|w| self.workers.get(w))
            .filter(|w| w.record.alive)
            .map(|w| HolderLocation { peer_addr: w.record.peer_addr.clone(), rails: w.record.capacity.rails.clone() })
            .collect()
    }

    /// Starts the next attempt of a subtask on `wid`: a new attempt number, outcome fields
    /// cleared. Returns the attempt.
    pub(super) fn begin_attempt(&mut self, job: JobId, idx: u32, wid: WorkerId, now: u64) -> AttemptRef {
        let s = &mut self.jobs.get_mut(&job).expect("exists").subtasks[idx as usize];
        s.attempt += 1;
        s.worker = Some(wid);
        s.assigned_at = now;
        s.started_at = 0;
        s.finished_at = 0;
        s.exit_code = 0;
        s.error.clear();
        AttemptRef { job, task: s.task.clone(), rank: s.rank, attempt: s.attempt }
    }

    /// Records a placement decided by [`Core::place`] or [`Core::place_gang`]: the subtask is
    /// `Assigned`, the worker's allocation grows, and the assignment goes out.
    pub(super) fn dispatch(&mut self, (job, idx): (JobId, u32), wid: WorkerId, record: PlacementRecord, mut assignment: Assignment, now: u64) {
        let req = assignment.resources;
        let w = self.workers.get_mut(&wid).expect("candidate exists");
        // A worker's GPUs are individual devices: the attempt gets the lowest free indices. The
        // count fits (the placement was feasible, and allocated.gpu counts exactly the devices
        // in gpus_used), so this finds them.
        let gpus = w.free_gpus(req.gpu).unwrap_or_default();
        w.gpus_used.extend(gpus.iter().copied());
        w.allocated.add(&req);
        w.placed.insert((job, idx));
        assignment.gpus = gpus.clone();
        let j = self.jobs.get_mut(&job).expect("exists");
        j.placements.insert(idx, record);
        j.subtasks[idx as usize].gpus = gpus;
        self.out.placements.insert((job, idx));
        self.set_state((job, idx), SubtaskState::Assigned, now, String::new());
        self.out.assignments.push((wid, assignment));
    }

    /// What was decided for a subtask's latest placement.
    pub fn explain(&self, job: JobId, task: &str, rank: u32) -> Result<&PlacementRecord, Error> {
        let j = self.jobs.get(&job).ok_or(Error::NoJob(job))?;
        let idx = j.subtask_index(task, rank)?;
        j.placements
            .get(&idx)
            .ok_or_else(|| Error::NotPlaced(format!("task {task:?} rank {rank} of job {job} has not been placed yet ({})", j.subtasks[idx as usize].state.as_str())))
    }
}

fn fmt_res(r: &Resources) -> String {
    format!("cpu={:.2} memory={} gpu={}", r.cpu, bytesize::ByteSize(r.memory).display().iec(), r.gpu)
}
