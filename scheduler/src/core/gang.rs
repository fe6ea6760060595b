//! Gangs (seed 002's batch module): members that start together or not at all.
//!
//! A gang is the replicas of one task, or of several tasks of a job that name the same `gang`,
//! of which `min_members` (K) must be placed together; a collective is a gang of all its
//! members, placed on distinct workers and restarted whole.
//!
//! - **One head per queue.** In each round, walking the ready queue in priority-then-age order,
//!   the first unbound gang of each queue is its head; only heads reserve. Two gangs never hold
//!   partial reservations against each other (the deadlock of kube-batch#158 and of
//!   Coscheduling's Permit, scheduler-plugins#114/#117).
//! - **Reservations.** The head reserves members one by one on the best-scoring feasible worker
//!   (through the `Placer`, so `locality`, `rl` and `explain` apply): the member's request is
//!   set aside on that worker (`Worker::reserved`, `Subtask::reserved_on`), durable with the
//!   rest of the round's changes. When K are reserved the gang is bound: they are dispatched
//!   together, and the rest start as room appears. No member starts before (Volcano's partial
//!   starts, volcano#2462, cannot happen). Every check is per worker, never an aggregate
//!   (volcano#665).
//! - **Holding, then backfill.** While the head waits, it holds, for each member it still needs,
//!   a worker where that member will fit once running work ends — the ones expected to be ready
//!   first, by the `timeout`s of the attempts there — and as many spares while at most half of
//!   the other such workers are held; work after it in the order places only on other workers,
//!   or on a held one when its own `timeout` ends before the gang can expect that worker. Small
//!   tasks thus use what the gang cannot (Slurm's backfill around a reservation, with time
//!   limits as its estimates), and cannot starve it (kueue#8309).
//! - **Deadline.** If K are not reserved within `gang_timeout` of the first round the gang is its
//!   queue's head (reserved or not: a head that cannot reserve anything must not hold its queue
//!   forever), every reservation is released and the gang backs off (1 s doubling to 60 s) before it may be a
//!   head again, and says so; the next gang of the queue gets its turn. A worker lost, or a
//!   coordinator restart, before binding rolls the gang back too: no reservation leaks
//!   (kueue#14811).

use std::collections::HashMap;

use plexus_proto::{JobId, JobState, ObjectId, Resources, SubtaskState, WorkerId};

use super::gang_book::{GangBook, Hold, gang_backoff_ms};
use super::gpus::GpuPlan;
use super::ledger::Worker;
use super::lineage::{Availability, MAX_RERUNS};
use super::messages::{Assignment, CollectiveAssignment, InputLocation};
use super::placement::Placed;
use super::records::{GangState, PlacementRecord};
use super::state::Core;
use crate::spec::{GangSpec, TaskSpec};

impl Core {
    /// The tasks (indices) of job `job` in gang `name`.
    pub(super) fn gang_tasks(&self, job: JobId, name: &str) -> Vec<usize> {
        let Some(j) = self.jobs.get(&job) else { return Vec::new() };
        j.record
            .spec
            .tasks
            .iter()
            .enumerate()
            .filter(|(_, t)| t.gang.as_ref().is_some_and(|g| g.name == name))
            .map(|(i, _)| i)
            .collect()
    }

    /// Every member (subtask index) of gang `name`, task by task, rank by rank.
    pub(super) fn gang_member_idxs(&self, job: JobId, name: &str) -> Vec<u32> {
        let j = &self.jobs[&job];
        self.gang_tasks(job, name).into_iter().flat_map(|t| j.members(t)).collect()
    }

    /// One round's turn of an unbound gang (or a collective): true when it was placed.
    #[allow(clippy::too_many_arguments)]
    pub(super) fn schedule_gang(
        &mut self,
        job: JobId,
        t: usize,
        g: &GangSpec,
        queue: &str,
        now: u64,
        held: &mut GangBook,
    ) -> bool {
        if self.jobs[&job].record.spec.tasks[t].collective.is_some() && !self.restart_collective(job, t, now) {
            return false;
        }
        let state = self.jobs[&job].record.gangs.get(&g.name).cloned().unwrap_or_default();
        if state.retry_at > now || !held.take_head(queue) {
            // Not its queue's head this round (backing off, or another gang is ahead): only a
            // head holds reservations, so whatever it holds goes back, and its clock stops. Two
            // gangs holding part of what each needs would otherwise wait for each other forever.
            self.yield_gang(job, &g.name);
            return false;
        }
        let label = format!("gang {:?} of job {job}", g.name);
        let distinct = self.jobs[&job].record.spec.tasks[t].collective.is_some();
        // When the timeouts of what runs say when `min_members` will fit, and that is later:
        // reserve nothing yet (reservations would idle the cores until then), hold the workers
        // that will serve it, and let work that ends before then — and before a deadline from
        // now, so the gang never starts later than that after room is really there — use
        // them. The deadline's clock runs only once the gang reserves.
        if let Some((start, workers)) =
            self.planned_start(&self.jobs[&job].record.spec.tasks[t], g.min_members, distinct, now, held)
            && start > now
        {
            self.yield_gang(job, &g.name);
            self.jobs.get_mut(&job).expect("exists").planned.insert(g.name.clone(), start);
            let until = start.min(now.saturating_add(g.timeout_ms / 2));
            for wid in workers {
                held.hold(wid, Hold { label: label.clone(), until: Some(until) });
            }
            return false;
        }
        self.jobs.get_mut(&job).expect("exists").planned.remove(&g.name);
        // The deadline counts from the first round the gang is head, reserved or not: a head
        // that cannot reserve anything would otherwise hold its queue forever.
        if state.reserving_since == 0 {
            self.set_gang(job, &g.name, |s| s.reserving_since = now);
        } else if now >= state.reserving_since.saturating_add(g.timeout_ms) {
            let have = self
                .gang_member_idxs(job, &g.name)
                .iter()
                .filter(|&&i| self.jobs[&job].subtasks[i as usize].reserved_on.is_some())
                .count();
            let why = format!("deadline: {have} of {} members reserved within {} ms", g.min_members, g.timeout_ms);
            self.rollback_gang(job, &g.name, why, now);
            return false;
        }
        if distinct {
            if self.place_gang(job, t, now, held) {
                // A collective is bound each time it is placed whole (a restart places it anew).
                self.set_gang(job, &g.name, |s| {
                    s.reserving_since = 0;
                    s.bound_at = now;
                });
                return true;
            }
            let n = self.jobs[&job].record.spec.tasks[t].replicas;
            self.hold_for(&self.jobs[&job].record.spec.tasks[t], n, true, &label, now, held);
            return false;
        }
        match self.reserve_gang(job, g, now, held) {
            Some(needed) => {
                self.hold_for(&self.jobs[&job].record.spec.tasks[t], needed, false, &label, now, held);
                false
            }
            None => true,
        }
    }

    /// Reserves members of gang `g` until `min_members` hold one, then binds them. `None`: bound
    /// (now or before); `Some(n)`: still `n` members short.
    fn reserve_gang(&mut self, job: JobId, g: &GangSpec, now: u64, held: &GangBook) -> Option<u32> {
        let members = self.gang_member_idxs(job, &g.name);
        let mut reserved =
            members.iter().filter(|&&i| self.jobs[&job].subtasks[i as usize].reserved_on.is_some()).count() as u32;
        // A GPU gang's members go where seed 002's search puts the group (interference and
        // communication together), when it finds room for all it still needs now.
        let todo: Vec<u32> = members
            .iter()
            .copied()
            .filter(|&i| {
                let s = &self.jobs[&job].subtasks[i as usize];
                s.state == SubtaskState::Ready && s.reserved_on.is_none() && s.not_before <= now
            })
            .take(g.min_members.saturating_sub(reserved) as usize)
            .collect();
        if !todo.is_empty()
            && reserved + todo.len() as u32 >= g.min_members
            && let Some(plan) = self.plan_gpu_gang(job, &todo, held, false)
        {
            for (idx, wid, device, reason) in plan {
                let task = &self.jobs[&job].record.spec.tasks[self.jobs[&job].task_of(idx)];
                let (req, share) = (task.resources, task.shares_gpu().then(|| task.shared_gpu_memory()));
                let Some(w) = self.workers.get(&wid) else { break };
                let device_ok = match share {
                    Some(m) => w.shareable_gpus(m).contains(&device),
                    None => w.free_devices().contains(&device),
                };
                if !req.fits_in(&w.available()) || !device_ok {
                    break; // the rest reserve one by one below
                }
                let record = PlacementRecord {
                    decision: self.next_decision,
                    placer: "sfla".into(),
                    attempt: self.jobs[&job].subtasks[idx as usize].attempt + 1,
                    chosen: wid,
                    exploratory: false,
                    reason: format!("reserved for gang {:?}; {reason}", g.name),
                    decided_at: now,
                    candidates: Vec::new(),
                    omitted: 0,
                };
                self.next_decision += 1;
                self.jobs.get_mut(&job).expect("exists").subtasks[idx as usize].gpus = vec![device];
                self.reserve(job, idx, wid, record);
                reserved += 1;
            }
        }
        for &idx in &members {
            if reserved >= g.min_members {
                break;
            }
            let s = &self.jobs[&job].subtasks[idx as usize];
            if s.state != SubtaskState::Ready || s.reserved_on.is_some() || s.not_before > now {
                continue;
            }
            let note = format!("reserved for gang {:?} ({} of {} needed)", g.name, reserved + 1, g.min_members);
            match self.choose(job, idx, now, held, &note) {
                Ok((wid, record)) => {
                    self.reserve(job, idx, wid, record);
                    reserved += 1;
                }
                Err(Placed::NoRoom) => break,
                Err(_) => {}
            }
            if self.jobs[&job].record.state != JobState::Running {
                return Some(g.min_members.saturating_sub(reserved));
            }
        }
        if reserved < g.min_members {
            return Some(g.min_members - reserved);
        }
        // Bound: every reservation becomes an attempt, in one round.
        for idx in members {
            let s = &self.jobs[&job].subtasks[idx as usize];
            let Some(wid) = s.reserved_on else { continue };
            let record = self.jobs[&job].placements.get(&idx).cloned();
            // A sharing member keeps the device its reservation set memory aside on.
            let plan = self.jobs[&job].subtasks[idx as usize].gpus.clone();
            self.unreserve((job, idx));
            self.jobs.get_mut(&job).expect("exists").subtasks[idx as usize].gpus = plan;
            match record {
                Some(r) if r.chosen == wid => self.assign(job, idx, wid, r, now),
                _ => tracing::error!(%job, idx, "a reserved gang member has no matching placement record; left ready"),
            }
        }
        self.counters.gangs_bound += 1;
        self.set_gang(job, &g.name, |s| {
            s.bound_at = now;
            s.reserving_since = 0;
        });
        tracing::info!(%job, gang = g.name, min_members = g.min_members, "gang bound");
        None
    }

    /// Sets aside a member's request on `wid`.
    fn reserve(&mut self, job: JobId, idx: u32, wid: WorkerId, record: PlacementRecord) {
        let j = self.jobs.get_mut(&job).expect("exists");
        let claim = j.claim(idx);
        j.subtasks[idx as usize].reserved_on = Some(wid);
        self.counters.gang_reservations += 1;
        j.placements.insert(idx, record);
        let planned = j.subtasks[idx as usize].gpus.first().copied();
        if let Some(mut w) = self.workers.get_mut(&wid) {
            // A sharing member sets its memory aside on one device: the one planned for it (a
            // GPU gang's search), else the least shared.
            let device = w.reserve((job, idx), claim, planned);
            if claim.shared_memory.is_some() {
                self.jobs.get_mut(&job).expect("exists").subtasks[idx as usize].gpus = device;
            }
        }
        self.out.subtasks.insert((job, idx));
        self.out.placements.insert((job, idx));
    }

    /// Releases a member's reservation, if it holds one.
    pub(super) fn unreserve(&mut self, (job, idx): (JobId, u32)) {
        let Some(j) = self.jobs.get_mut(&job) else { return };
        let Some(wid) = j.subtasks[idx as usize].reserved_on.take() else { return };
        let claim = j.claim(idx);
        let planned = std::mem::take(&mut j.subtasks[idx as usize].gpus);
        if let Some(mut w) = self.workers.get_mut(&wid) {
            w.release((job, idx), claim, &planned);
        }
        self.out.subtasks.insert((job, idx));
    }

    /// A gang that is not its queue's head any more gives back what it reserved, without a
    /// back-off (it did nothing wrong): it starts again from nothing when it is head again.
    fn yield_gang(&mut self, job: JobId, name: &str) {
        let held = self
            .gang_member_idxs(job, name)
            .into_iter()
            .filter(|&i| self.jobs[&job].subtasks[i as usize].reserved_on.is_some())
            .collect::<Vec<_>>();
        for idx in held {
            self.unreserve((job, idx));
        }
        if self.jobs[&job].record.gangs.get(name).is_some_and(|s| s.reserving_since > 0) {
            self.set_gang(job, name, |s| s.reserving_since = 0);
        }
    }

    /// Releases every reservation of a gang, and backs it off before it may reserve again.
    pub(super) fn rollback_gang(&mut self, job: JobId, name: &str, reason: String, now: u64) {
        for idx in self.gang_member_idxs(job, name) {
            self.unreserve((job, idx));
        }
        let Some(j) = self.jobs.get(&job) else { return };
        let rollbacks = j.record.gangs.get(name).map_or(0, |s| s.rollbacks) + 1;
        self.counters.gang_rollbacks += 1;
        self.counters.gang_timeouts += u64::from(reason.starts_with("deadline"));
        let retry_at = now + gang_backoff_ms(rollbacks);
        tracing::info!(%job, gang = name, rollbacks, retry_in_ms = retry_at - now, reason, "gang rolled back");
        self.set_gang(job, name, |s| {
            s.reserving_since = 0;
            s.rollbacks = rollbacks;
            s.rolled_back_at = now;
            s.retry_at = retry_at;
            s.reason = reason;
        });
    }

    /// Changes a gang's state (made if absent) and marks the job for the store.
    pub(super) fn set_gang(&mut self, job: JobId, name: &str, f: impl FnOnce(&mut GangState)) {
        let Some(j) = self.jobs.get_mut(&job) else { return };
        let before = j.record.gangs.get(name).cloned();
        let s = j.record.gangs.entry(name.to_string()).or_default();
        f(s);
        if before.as_ref() != Some(s) {
            self.out.jobs.insert(job);
        }
    }

    /// Holds, for each member the head gang still needs, a worker where it will fit once
    /// running work ends: the workers expected to be ready first (by the `timeout`s of what runs
    /// there), then, for what cannot be estimated, the ones with the most free cores, with as
    /// many spares while at most half of the other workers that could take a member are held —
    /// without an estimate the first of several busy workers to free up serves the gang, while
    /// small work keeps flowing on the rest. (Holding one per member made gangs wait on a worker
    /// busy with a long task until their deadline: in the gang simulator, mean gang wait 183 s
    /// against strict FIFO's 70 s at 64 workers; with the spares, 71 s.) Each hold says when the
    /// gang can expect the worker, for backfill.
    fn hold_for(&self, task: &TaskSpec, needed: u32, distinct: bool, label: &str, now: u64, held: &mut GangBook) {
        let req = task.resources;
        let mut room: Vec<(WorkerId, Resources, Resources, Option<u64>)> = self
            .workers
            .values()
            .filter(|w| w.placeable() && !held.is_held(&w.id()) && w.record().capacity.admits(&task.constraints))
            .map(|w| {
                let mut reserved = Resources::default();
                for (j, i) in w.reserved() {
                    if let Some(job) = self.jobs.get(j) {
                        reserved.add(&job.record.spec.tasks[job.task_of(*i)].resources);
                    }
                }
                (
                    w.id(),
                    w.record().capacity.resources().minus(&reserved),
                    w.available(),
                    self.ready_at(w, w.available(), req, now),
                )
            })
            .collect();
        let eligible = room.iter().filter(|(_, cap, ..)| req.fits_in(cap)).count() as u32;
        let extra = eligible.saturating_sub(needed) / 2;
        let mut k = 0u32;
        while k < needed + needed.min(extra) {
            // Known ready times first, earliest first; then the most free cores.
            let best = room.iter_mut().filter(|(_, cap, ..)| req.fits_in(cap)).min_by(
                |(a, _, fa, ra), (b, _, fb, rb)| match (ra, rb) {
                    (Some(x), Some(y)) => x.cmp(y).then_with(|| a.cmp(b)),
                    (Some(_), None) => std::cmp::Ordering::Less,
                    (None, Some(_)) => std::cmp::Ordering::Greater,
                    (None, None) => fb.cpu.total_cmp(&fa.cpu).then_with(|| a.cmp(b)),
                },
            );
            let Some((wid, cap, free, ready)) = best else { return };
            k += 1;
            held.hold(*wid, Hold { label: label.to_string(), until: *ready });
            if distinct {
                *cap = Resources::default();
                cap.cpu = -1.0;
            } else {
                *cap = cap.minus(&req);
                *free = free.minus(&req);
                *ready = self.workers.get(wid).and_then(|w| self.ready_at(w, *free, req, now));
            }
        }
    }

    /// When `k` members asking `req` each (one per worker when `distinct`) will fit at once on
    /// workers not `held`, by the estimated ends of what runs there, and the workers to hold for
    /// them (with spares); `None` when that depends on an attempt without a timeout.
    fn planned_start(
        &self,
        task: &TaskSpec,
        k: u32,
        distinct: bool,
        now: u64,
        held: &GangBook,
    ) -> Option<(u64, Vec<WorkerId>)> {
        let req = task.resources;
        let mut slots: Vec<(u64, WorkerId)> = Vec::new();
        let eligible =
            |w: &&Worker| w.placeable() && !held.is_held(&w.id()) && w.record().capacity.admits(&task.constraints);
        for w in self.workers.values().filter(eligible) {
            if !req.fits_in(&w.record().capacity.resources()) {
                continue;
            }
            let mut free = w.available();
            // (At most as many members as it takes attempts: `max_attempts`, once work ends.)
            let bound = match w.record().capacity.max_attempts {
                0 => k,
                max => k.min(max),
            };
            for _ in 0..(if distinct { 1 } else { bound }) {
                let Some(at) = self.ready_at(w, free, req, now) else { break };
                slots.push((at, w.id()));
                free = free.minus(&req);
            }
        }
        if slots.len() < k as usize {
            return None;
        }
        slots.sort();
        let start = slots[k as usize - 1].0;
        // The workers of the first k slots, then as spares the next ones expected soonest, as
        // many as members while at most half of the other workers are held: time limits are
        // upper bounds, so another worker may well free up first, and the gang should get it.
        let mut workers: Vec<WorkerId> = Vec::new();
        for (_, w) in &slots[..k as usize] {
            if !workers.contains(w) {
                workers.push(*w);
            }
        }
        let mut others: Vec<WorkerId> = Vec::new();
        for (_, w) in &slots[k as usize..] {
            if !workers.contains(w) && !others.contains(w) {
                others.push(*w);
            }
        }
        let spares = (workers.len()).min(others.len() / 2);
        workers.extend(others.into_iter().take(spares));
        Some((start, workers))
    }

    /// When `req` will fit in `free` on `w`, by the estimated ends (`timeout` after the attempt started)
    /// of what is placed there, earliest first: `now` if it fits already, `None` when an
    /// attempt it must wait for has no timeout (or it never fits).
    fn ready_at(&self, w: &Worker, mut free: Resources, req: Resources, now: u64) -> Option<u64> {
        if req.fits_in(&free) {
            return Some(now);
        }
        if free == Resources::NO_ROOM {
            // Every attempt slot is taken: the first attempt to end gives one back, with what it
            // held.
            free = w.record().capacity.resources().minus(&w.allocated());
        }
        let mut ends: Vec<(u64, Resources)> = Vec::with_capacity(w.placed().len());
        for (j, i) in w.placed() {
            let job = self.jobs.get(j)?;
            let task = &job.record.spec.tasks[job.task_of(*i)];
            if task.timeout_ms == 0 {
                return None;
            }
            let s = &job.subtasks[*i as usize];
            let start = if s.started_at > 0 { s.started_at } else { s.assigned_at };
            ends.push((start.saturating_add(task.timeout_ms), task.resources));
        }
        ends.sort_by_key(|(end, _)| *end);
        for (end, res) in ends {
            free.add(&res);
            if req.fits_in(&free) {
                return Some(end.max(now));
            }
        }
        None
    }

    /// A collective with a member ready again (failed or lost) while others are placed or done:
    /// those placed are cancelled and made ready too, and those that completed run again (a
    /// re-run, as lineage recovery counts one), so the gang restarts whole with one
    /// communicator. Done at once, whether or not the gang may be placed now, so no member waits
    /// on a dead peer. False when the gang cannot run again (a completed member was re-run
    /// [`MAX_RERUNS`] times already): a member that had to run fails, under the task's
    /// `on_failure`.
    fn restart_collective(&mut self, job: JobId, t: usize, now: u64) -> bool {
        let j = &self.jobs[&job];
        let task = &j.record.spec.tasks[t];
        let (start, n) = (j.members(t).start, task.replicas);
        let members: Vec<u32> = (start..start + n).collect();
        let done: Vec<u32> =
            members.iter().copied().filter(|&i| j.subtasks[i as usize].state == SubtaskState::Succeeded).collect();
        if let Some(&spent) = done.iter().find(|&&i| j.subtasks[i as usize].reruns >= MAX_RERUNS) {
            // The member that has to run fails, under the task's `on_failure` (with `continue`
            // the gang ends and what depends on it is skipped).
            let rank = j.subtasks[spent as usize].rank;
            let waiting =
                members.iter().copied().find(|&i| j.subtasks[i as usize].state == SubtaskState::Ready).unwrap_or(spent);
            let msg = format!(
                "its collective's member {rank} completed but must run again with the gang, and it was re-run {MAX_RERUNS} times already"
            );
            self.give_up((job, waiting), now, msg);
            return false;
        }
        let active: Vec<u32> = members.iter().copied().filter(|&i| j.subtasks[i as usize].state.is_placed()).collect();
        for idx in active {
            self.stop_attempt((job, idx));
            self.requeue(job, idx, now, "gang restarted: another member has to run again".into());
        }
        for idx in done {
            self.rerun(job, idx, now, "re-run with its gang: another member has to run again".into());
        }
        true
    }

    /// Member `rank`'s input objects of collective task `t`: of each input, the producer replica
    /// of its rank, when the producer has one (a redistribute's members past the producer's
    /// replicas have none).
    pub(super) fn member_inputs(&self, job: JobId, t: usize, rank: u32) -> Vec<ObjectId> {
        let task = &self.jobs[&job].record.spec.tasks[t];
        let senders = task
            .collective
            .as_ref()
            .and_then(|c| c.exchange.as_ref())
            .and_then(|e| e.redistribute)
            .map_or(task.replicas, |r| r.senders);
        if rank >= senders {
            return Vec::new();
        }
        if matches!(task.work, crate::spec::Work::Command(_)) {
            // A command with `communicator = true` reads its inputs as any command does.
            let spec = &self.jobs[&job].record.spec;
            return task
                .inputs
                .iter()
                .flat_map(|i| {
                    let replicas = spec.tasks.iter().find(|p| p.name == i.task).map_or(1, |p| p.replicas);
                    i.rank.ranks(rank, replicas).map(|r| ObjectId {
                        job,
                        task: i.task.clone(),
                        rank: r,
                        name: i.output.clone(),
                    })
                })
                .collect();
        }
        task.inputs.iter().map(|i| ObjectId { job, task: i.task.clone(), rank, name: i.output.clone() }).collect()
    }

    /// Places every member of collective task `t` at once, each on its own worker, or none.
    ///
    /// A gang runs together or not at all: when some members are ready again (a failed or lost
    /// member) while others are still placed, those are cancelled and made ready first, so the
    /// whole gang is placed anew with one communicator. Members are placed where their input
    /// (the producer replica of the same rank) is resident when that worker has room, else on
    /// the feasible worker with the most free cores. False when the gang does not fit now (or
    /// cannot be re-run); nothing is then placed.
    pub(super) fn place_gang(&mut self, job: JobId, t: usize, now: u64, held: &GangBook) -> bool {
        if !self.restart_collective(job, t, now) {
            return false;
        }
        let j = &self.jobs[&job];
        let (start, n) = (j.members(t).start, j.record.spec.tasks[t].replicas);
        let members: Vec<u32> = (start..start + n).collect();
        if !self.gang_ready(job, &members, now) {
            return false;
        }
        let objects: Vec<Vec<ObjectId>> = (0..n).map(|rank| self.member_inputs(job, t, rank)).collect();
        match self.input_availability(job, objects.iter().flatten()) {
            Availability::Held => {}
            Availability::Unknown => return false,
            Availability::Lost(lost) => {
                self.recover_inputs(job, &members, &lost, now);
                return false;
            }
        }
        // GPU members go where seed 002's search puts the group, one per worker; when it finds
        // no room for them all, or they ask no GPU, near their inputs.
        let chosen = match self.plan_gpu_gang(job, &members, held, true) {
            Some(plan) => match self.gpu_gang_workers(job, plan, objects.clone()) {
                Some(chosen) => Some(chosen),
                None => self.choose_gang_workers(job, t, objects, held),
            },
            None => self.choose_gang_workers(job, t, objects, held),
        };
        let Some(chosen) = chosen else {
            return false;
        };
        self.dispatch_gang(job, t, chosen, now);
        true
    }

    /// A collective GPU gang's members on the workers and devices of its search's plan (one
    /// per worker), each device noted as the member's planned one for its dispatch.
    fn gpu_gang_workers(&mut self, job: JobId, plan: GpuPlan, objects: Vec<Vec<ObjectId>>) -> Option<Vec<Chosen>> {
        let workers: std::collections::HashSet<WorkerId> = plan.iter().map(|(_, w, ..)| *w).collect();
        if workers.len() != plan.len() {
            tracing::error!(%job, "a collective GPU plan put two members on one worker; placed near their inputs instead");
            return None;
        }
        let mut chosen: Vec<Chosen> = Vec::with_capacity(plan.len());
        for ((idx, wid, device, reason), objects) in plan.into_iter().zip(objects) {
            let inputs = self.sized_inputs(job, objects);
            self.jobs.get_mut(&job).expect("exists").subtasks[idx as usize].gpus = vec![device];
            chosen.push(Chosen { worker: wid, inputs, why: reason, placer: "sfla" });
        }
        Some(chosen)
    }

    /// A member's input objects with their sizes (0 when not known yet).
    fn sized_inputs(&self, job: JobId, objects: Vec<ObjectId>) -> Vec<(ObjectId, u64)> {
        let j = &self.jobs[&job];
        objects
            .into_iter()
            .map(|o| {
                let size = j
                    .task_index(&o.task)
                    .map(|p| &j.subtasks[(j.members(p).start + o.rank) as usize])
                    .and_then(|s| s.outputs.iter().find(|(name, _)| *name == o.name).map(|(_, sz)| *sz))
                    .unwrap_or(0);
                (o, size)
            })
            .collect()
    }

    /// Whether every member is ready, and none still waiting out a retry's back-off.
    fn gang_ready(&self, job: JobId, members: &[u32], now: u64) -> bool {
        let j = &self.jobs[&job];
        members.iter().all(|&i| {
            let s = &j.subtasks[i as usize];
            s.state == SubtaskState::Ready && s.not_before <= now
        })
    }

    /// One worker per member, each near its (first) input when the holder has room and otherwise
    /// the one with the most free cores, counting what earlier members took; `None` when some
    /// member fits nowhere, since a gang starts whole or not at all.
    fn choose_gang_workers(
        &self,
        job: JobId,
        t: usize,
        objects: Vec<Vec<ObjectId>>,
        held: &GangBook,
    ) -> Option<Vec<Chosen>> {
        let j = &self.jobs[&job];
        let req = j.record.spec.tasks[t].resources;
        let constraints = &j.record.spec.tasks[t].constraints;
        let mut free: HashMap<WorkerId, Resources> = self
            .workers
            .values()
            .filter(|w| w.placeable() && !held.is_held(&w.id()) && w.record().capacity.admits(constraints))
            .map(|w| (w.id(), w.available()))
            .collect();
        let mut chosen: Vec<Chosen> = Vec::with_capacity(objects.len());
        for objects in objects {
            let sized = self.sized_inputs(job, objects);
            let taken = |w: &WorkerId| chosen.iter().any(|c| c.worker == *w);
            // Near the member's (first) input when its holder has room.
            let holder = sized
                .first()
                .and_then(|(o, _)| self.workers.holders(o))
                .and_then(|h| h.iter().copied().find(|w| !taken(w) && free.get(w).is_some_and(|f| req.fits_in(f))));
            let (wid, why) = match holder {
                Some(w) => (w, "holds the member's input"),
                None => {
                    let best = free
                        .iter()
                        .filter(|(w, f)| !taken(w) && req.fits_in(f))
                        .max_by(|(a, fa), (b, fb)| fa.cpu.total_cmp(&fb.cpu).then_with(|| b.cmp(a)));
                    (*best?.0, "most free cores")
                }
            };
            if let Some(f) = free.get_mut(&wid) {
                f.cpu -= req.cpu;
                f.memory = f.memory.saturating_sub(req.memory);
                f.gpu = f.gpu.saturating_sub(req.gpu);
            }
            chosen.push(Chosen { worker: wid, inputs: sized, why: why.into(), placer: "gang" });
        }
        Some(chosen)
    }

    /// Dispatches every member to its chosen worker with one shared collective assignment: the
    /// members' rails in rank order and the generation's tag base.
    fn dispatch_gang(&mut self, job: JobId, t: usize, chosen: Vec<Chosen>, now: u64) {
        let j = &self.jobs[&job];
        let task = &j.record.spec.tasks[t];
        let (start, n, req) = (j.members(t).start, task.replicas, task.resources);
        let spec = task.collective.clone().expect("a collective task");
        let rails: Vec<Vec<String>> =
            chosen.iter().map(|c| self.workers[&c.worker].record().capacity.rails.clone()).collect();
        let generation = j.subtasks[start as usize].attempt + 1;
        // The gang's tag base: distinct per job, task and generation, with the low 32 bits free
        // for the communicator's own message numbering.
        let tag = gang_tag(job, t, generation);
        let task_name = task.name.clone();
        for (rank, Chosen { worker: wid, inputs: objects, why, placer }) in chosen.into_iter().enumerate() {
            let idx = start + rank as u32;
            let inputs: Vec<InputLocation> = objects
                .into_iter()
                .map(|(object, size)| InputLocation {
                    holders: self.holder_locations(&object),
                    digest: self.digest_of(&object),
                    object,
                    size,
                })
                .collect();
            let decision = self.next_decision;
            self.next_decision += 1;
            let attempt = self.begin_attempt(job, idx, wid, now);
            let task = &self.jobs[&job].record.spec.tasks[t];
            let record = PlacementRecord {
                decision,
                placer: placer.into(),
                attempt: attempt.attempt,
                chosen: wid,
                exploratory: false,
                reason: format!("member {rank} of {n} of collective {task_name:?}: {why}"),
                decided_at: now,
                candidates: Vec::new(),
                omitted: 0,
            };
            let collective = CollectiveAssignment { spec: spec.clone(), members: rails.clone(), tag };
            let assignment = Assignment::of(task, attempt, req, inputs, Some(collective));
            let assignment = self.with_resume((job, idx), assignment);
            self.dispatch((job, idx), wid, record, assignment, now);
        }
    }
}

/// A collective member's choice: its worker, its inputs with their sizes, why there, and the
/// placer that chose it (`gang`: near its inputs; `sfla`: seed 002's search for GPU members).
struct Chosen {
    worker: WorkerId,
    inputs: Vec<(ObjectId, u64)>,
    why: String,
    placer: &'static str,
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
