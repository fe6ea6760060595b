//! Placement of single subtasks: the ready queue, candidates for the `Placer` (with their fetch
//! and compute estimates from the measured speeds, `estimates`), the decision's record for
//! `plexus explain`, and what is learnt when an attempt ends: the placer's feedback, and the
//! measured speeds.

use std::collections::{BTreeSet, HashMap, HashSet};

use plexus_proto::{AttemptRef, JobId, JobState, ObjectId, Resources, SubtaskState, WorkerId};

use super::estimates::work;
use super::features::{Features, with_estimates};
use super::gang_book::GangBook;
use super::job_table::Job;
use super::ledger::{Devices, ROOM_CORES};
use super::lineage::Availability;
use super::messages::{Assignment, HolderLocation, InputLocation};
use super::ready::OrderKey;
use super::records::{CandidateRecord, FetchPlan, PlacementRecord, explained};
use super::sample::{Admit, CANDIDATES_AT_MOST};
use super::signature::{kind_key, signature};
use super::state::Core;
use crate::placer::{Candidate, ORDER_WINDOW, Outcome, PlacementRequest, ReadyWork, bounded_order};
use crate::spec::TaskSpec;

/// Live holders of an input whose fetch is estimated for each candidate, and which are ranked
/// best-first for the worker an attempt goes to (the others follow in id order). Bounds a
/// candidate's cost to O(inputs) however widely an input is cached; 8 is more copies than most
/// objects have.
const RANKED_HOLDERS: usize = 8;

/// Whether two workers share a rack: `None` unless both carry a `rack` label.
fn same_rack(a: Option<&str>, b: Option<&str>) -> Option<bool> {
    Some(a? == b?)
}

/// The samples behind a candidate's fetch and compute estimates (`None`: a fallback).
type Samples = (Option<f64>, Option<f64>);

/// What a scheduling round has found so far.
struct Round {
    /// Each (job, task) with ready subtasks is judged once per round: placed, or why not.
    judged: HashMap<(JobId, usize), bool>,
    /// The gang heads of each queue, and the workers held for them.
    book: GangBook,
    /// With queue shares: the queues that have ready work this round.
    waiting_queues: HashSet<String>,
    /// Tasks stopped by their queue's share, and why.
    over: Vec<(JobId, usize, String)>,
    /// Requests that found no room this round: anything asking for as much waits too.
    full: Vec<(Resources, u64)>,
}

/// What one try to place a subtask came to.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Placed {
    Yes,
    /// No worker has room for it now (or only workers held for a gang ahead of it).
    NoRoom,
    /// Not now for another reason (its inputs are being located or made again).
    NotNow,
}

impl Core {
    pub(super) fn feedback(&mut self, (job, idx): (JobId, u32), wid: WorkerId, succeeded: bool) {
        if !self.placer.learns() {
            return;
        }
        let util = self.cluster_utilisation();
        let Some(j) = self.jobs.get(&job) else { return };
        let s = &j.subtasks[idx as usize];
        let Some(decision) = j.placements.get(&idx).filter(|p| p.attempt == s.attempt).map(|p| p.decision) else {
            return;
        };
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

    /// An attempt succeeded on `wid`: its run time and its fetch go into the measured speeds.
    /// Call before its worker is released.
    pub(super) fn learn_speeds(&mut self, (job, idx): (JobId, u32), wid: WorkerId) {
        let Some(j) = self.jobs.get(&job) else { return };
        let task = &j.record.spec.tasks[j.task_of(idx)];
        // A collective member's time is its gang's (and its inputs travel in the collective).
        if task.collective.is_some() {
            return;
        }
        let s = &j.subtasks[idx as usize];
        let (sig, kind, task_work, plan) =
            (signature(task), kind_key(task), work(task.flops, &task.resources), s.fetch_plan);
        // The worker starts its clock once the inputs are fetched: this is compute.
        let run = (s.started_at > 0 && s.finished_at >= s.started_at).then(|| (s.finished_at - s.started_at) as f64);
        let fetched = (s.fetched_bytes > 0 || s.fetch_ms > 0).then_some((s.fetched_bytes, s.fetch_ms));
        if let Some(ms) = run {
            self.estimates.observe_run_of(wid, sig, Some(kind), task_work, ms);
        }
        let Some((bytes, ms)) = fetched else { return };
        // An attempt dispatched without a plan (by a coordinator before this one) is counted as
        // fetched from the holder its inputs would come from now.
        let plan = plan.or_else(|| self.fetch_plan(wid, &self.ranked_inputs(job, idx, wid), false));
        if let Some(p) = plan.filter(|p| p.from != wid) {
            let relation = same_rack(self.rack_of(p.from), self.rack_of(wid));
            self.estimates.observe_fetch(p.from, wid, relation, p.objects.max(1), bytes, ms as f64);
        }
    }

    fn rack_of(&self, w: WorkerId) -> Option<&str> {
        self.workers.get(&w).and_then(|w| w.record().capacity.topology.rack())
    }

    /// The live holders of `o` in the order an attempt on `dst` should try them: the first
    /// [`RANKED_HOLDERS`] (in id order) by estimated fetch of `size` bytes to `dst`, least first,
    /// then the rest; holders without an estimate, and `dst` itself, keep their id order after
    /// the estimated ones. With nothing measured this is id order.
    pub(super) fn ranked_holders(&self, o: &ObjectId, size: u64, dst: WorkerId) -> Vec<WorkerId> {
        let Some(h) = self.workers.holders(o) else { return Vec::new() };
        let mut live: Vec<WorkerId> =
            h.iter().copied().filter(|w| self.workers.get(w).is_some_and(|w| w.record().alive)).collect();
        let n = live.len().min(RANKED_HOLDERS);
        if n > 1 && !self.estimates.is_empty() {
            let dst_rack = self.rack_of(dst);
            let cost = |h: &WorkerId| match *h == dst {
                true => f64::INFINITY,
                false => self
                    .estimates
                    .link(*h, dst, same_rack(self.rack_of(*h), dst_rack))
                    .map_or(f64::INFINITY, |l| l.fetch_ms(size)),
            };
            let mut keyed: Vec<(f64, WorkerId)> = live[..n].iter().map(|h| (cost(h), *h)).collect();
            // Stable: equal costs (and the unestimated) keep id order.
            keyed.sort_by(|a, b| a.0.total_cmp(&b.0));
            for (slot, (_, h)) in live[..n].iter_mut().zip(keyed) {
                *slot = h;
            }
        }
        live
    }

    /// What an attempt on `wid` reading `inputs` (each with its holders as its assignment lists
    /// them) is expected to fetch: the inputs `wid` does not hold (every input, when
    /// `skip_resident` is false), each from its first holder other than `wid`, counted as coming
    /// from the holder of most of those bytes (ties: the first met). `None` when nothing is
    /// fetched.
    fn fetch_plan(
        &self,
        wid: WorkerId,
        inputs: &[(ObjectId, u64, Vec<WorkerId>)],
        skip_resident: bool,
    ) -> Option<FetchPlan> {
        let w = self.workers.get(&wid)?;
        let mut from: Vec<(WorkerId, u64)> = Vec::new();
        let (mut objects, mut bytes) = (0u32, 0u64);
        for (o, size, holders) in inputs {
            if skip_resident && w.objects().contains_key(o) {
                continue;
            }
            let Some(h) = holders.iter().find(|h| **h != wid) else { continue };
            objects += 1;
            bytes += size;
            match from.iter_mut().find(|(f, _)| f == h) {
                Some(f) => f.1 += size,
                None => from.push((*h, *size)),
            }
        }
        let mut best: Option<(WorkerId, u64)> = None;
        for (h, b) in from {
            if best.is_none_or(|(_, bb)| b > bb) {
                best = Some((h, b));
            }
        }
        best.map(|(from, _)| FetchPlan { from, objects, bytes })
    }

    /// Places ready subtasks on connected workers with room: tasks in priority order (then
    /// oldest job first), each placed until a subtask does not fit. A gang that is not bound
    /// yet goes through [`Core::schedule_gang`]: only the first of each queue reserves, and the
    /// workers it still needs are held from everything after it in the order. The cost of a
    /// round grows with the tasks that have ready work and the placements made, not with the
    /// queue's depth: a task that finds no room ends its turn, and a later task asking for at
    /// least as much is not tried at all.
    pub fn schedule(&mut self, now: u64) {
        if self.ready.is_empty() {
            return;
        }
        if !self.workers.values().any(|w| w.live()) {
            let judged = self.ready.entries().map(|(key, _)| ((key.job, key.task as usize), false)).collect();
            self.explain_waiting(judged);
            return;
        }
        // With queue shares: the queues that have ready work this round (a queue over its
        // share waits only while another queue has work waiting).
        let waiting_queues: HashSet<String> = if self.fair_share.is_empty() {
            HashSet::new()
        } else {
            self.ready
                .keys()
                .into_iter()
                .filter_map(|k| self.jobs.get(&k.job).map(|j| j.record.spec.queue.clone()))
                .collect()
        };
        let mut round = Round {
            judged: HashMap::new(),
            book: GangBook::default(),
            waiting_queues,
            over: Vec::new(),
            full: Vec::new(),
        };
        let (keys, overtaken) = self.ordered_keys(now);
        for key in keys {
            self.judge_task(key, now, &mut round);
        }
        // A task left waiting in a round where later work went first counts it; one that left
        // the queue forgets.
        self.ready.count_overtaken(overtaken);
        self.explain_waiting(round.judged);
        for (job, t, why) in round.over {
            if let Some(j) = self.jobs.get_mut(&job) {
                j.waiting.insert(t, why);
                j.waiting_epoch.remove(&t);
            }
        }
    }

    /// One task's turn in a round: a gang's turn, or its ready subtasks placed until one does
    /// not fit; judged placed or not in `round`.
    fn judge_task(&mut self, key: OrderKey, now: u64, round: &mut Round) {
        let (job, t) = (key.job, key.task as usize);
        let Some(j) = self.jobs.get(&job).filter(|j| j.record.state == JobState::Running) else {
            self.ready.remove_task(&key);
            return;
        };
        let task = &j.record.spec.tasks[t];
        if !self.fair_share.is_empty()
            && let Some(why) = self.over_share(&j.record.spec.queue, task.resources.cpu, &round.waiting_queues)
        {
            round.judged.insert((job, t), false);
            round.over.push((job, t, why));
            return;
        }
        let gang = task
            .gang
            .clone()
            .filter(|g| task.collective.is_some() || j.record.gangs.get(&g.name).is_none_or(|s| s.bound_at == 0));
        if let Some(g) = gang {
            // Only a gang with a member still ready takes its turn (entries of members
            // placed since are dropped here).
            let set: BTreeSet<u32> = self
                .ready
                .take(&key)
                .into_iter()
                .filter(|&i| j.subtasks[i as usize].state == SubtaskState::Ready)
                .collect();
            let live = !set.is_empty();
            self.ready.put_back(key, set);
            if !live || !round.book.first_turn(job, &g.name) {
                return; // judged with the gang's first task
            }
            let queue = j.record.spec.queue.clone();
            let placed = self.schedule_gang(job, t, &g, &queue, now, &mut round.book);
            for gt in self.gang_tasks(job, &g.name) {
                round.judged.insert((job, gt), placed);
            }
            return;
        }
        let req = task.resources;
        // A longer (or no) timeout backfills nowhere a shorter one could not.
        let span = if task.timeout_ms == 0 { u64::MAX } else { task.timeout_ms };
        // (A `noop` takes no attempt slot, so a request that found every slot taken does not
        // speak for it.)
        if !task.runs_nothing()
            && round
                .full
                .iter()
                .any(|(f, fspan)| req.cpu >= f.cpu && req.memory >= f.memory && req.gpu >= f.gpu && span >= *fspan)
        {
            round.judged.insert((job, t), false);
            return;
        }
        let all = self.place_ready(key, (req, span), now, round);
        let seen = round.judged.entry((job, t)).or_insert(true);
        *seen &= all;
    }

    /// Places the ready subtasks of task `key` (asking `req` for up to `span` ms) until one does
    /// not fit; true when every one was placed.
    fn place_ready(&mut self, key: OrderKey, (req, span): (Resources, u64), now: u64, round: &mut Round) -> bool {
        let (job, t) = (key.job, key.task as usize);
        let mut set = self.ready.take(&key);
        let mut skipped = BTreeSet::new();
        let mut all = true;
        while let Some(idx) = set.pop_first() {
            let Some(j) = self.jobs.get(&job).filter(|j| j.record.state == JobState::Running) else {
                set.clear();
                break;
            };
            if j.subtasks[idx as usize].state != SubtaskState::Ready {
                continue; // stale entry
            }
            if !self.fair_share.is_empty()
                && let Some(why) = self.over_share(&j.record.spec.queue, req.cpu, &round.waiting_queues)
            {
                all = false;
                set.insert(idx);
                round.over.push((job, t, why));
                break;
            }
            match self.place(job, idx, now, &round.book) {
                Placed::Yes => {}
                Placed::NotNow => {
                    all = false;
                    // Still ready (its inputs are being located): it stays queued. Sent
                    // back to `Waiting` while lost inputs are made again: it leaves.
                    if self.jobs.get(&job).is_some_and(|j| j.subtasks[idx as usize].state == SubtaskState::Ready) {
                        skipped.insert(idx);
                    }
                }
                Placed::NoRoom => {
                    all = false;
                    set.insert(idx);
                    // (A sharing task may lack GPU memory, and a task with constraints room
                    // on the workers that meet them, which `full` cannot express: a task
                    // confined to a few full workers must not hold back those behind it.)
                    let partial =
                        |j: &Job| j.record.spec.tasks[t].shares_gpu() || !j.record.spec.tasks[t].constraints.is_empty();
                    if !self.jobs.get(&job).is_some_and(partial) {
                        round.full.push((req, span));
                    }
                    break;
                }
            }
        }
        set.extend(skipped);
        self.ready.put_back(key, set);
        all
    }

    /// The ready queue's task keys in the order this round considers them: queue order, except
    /// that a placer that chooses which work goes next (`Placer::orders_work`) reorders, among
    /// the first [`ORDER_WINDOW`] keys, each run of plain tasks of one priority (never across a
    /// gang, so a gang's holds still bind what queues after it); [`bounded_order`] puts tasks
    /// overtaken `MAX_OVERTAKEN` times first. Also the keys that work queued after them
    /// overtook this round.
    fn ordered_keys(&mut self, now: u64) -> (Vec<OrderKey>, Vec<OrderKey>) {
        let mut keys = self.ready.keys();
        let mut overtaken = Vec::new();
        if !self.placer.orders_work() || keys.len() < 2 {
            return (keys, overtaken);
        }
        let window = keys.len().min(ORDER_WINDOW);
        let plain = |c: &Core, k: &OrderKey| {
            c.jobs.get(&k.job).is_some_and(|j| {
                let t = &j.record.spec.tasks[k.task as usize];
                j.record.state == JobState::Running && t.gang.is_none() && t.collective.is_none()
            })
        };
        let mut start = 0;
        while start < window {
            if !plain(self, &keys[start]) {
                start += 1;
                continue;
            }
            let mut end = start + 1;
            while end < window && plain(self, &keys[end]) && keys[end].priority == keys[start].priority {
                end += 1;
            }
            if end - start >= 2 {
                let work: Vec<ReadyWork> = keys[start..end].iter().map(|k| self.ready_work(k, now)).collect();
                let answer = self.placer.order(&work);
                let order = bounded_order(&work, answer);
                let segment: Vec<OrderKey> = order.iter().map(|&i| keys[start + i]).collect();
                // Overtaken: a task placed after one that queued after it.
                let mut latest = 0usize;
                for &i in &order {
                    if i < latest {
                        overtaken.push(keys[start + i]);
                    }
                    latest = latest.max(i);
                }
                keys[start..end].copy_from_slice(&segment);
            }
            start = end;
        }
        (keys, overtaken)
    }

    /// What a reordering placer sees of a task with ready work.
    fn ready_work(&self, key: &OrderKey, now: u64) -> ReadyWork {
        let j = &self.jobs[&key.job];
        let t = key.task as usize;
        let task = &j.record.spec.tasks[t];
        let (sig, kind, task_work) = (signature(task), kind_key(task), work(task.flops, &task.resources));
        let total: u32 = j.record.spec.tasks.iter().map(|t| t.replicas).sum();
        let est_run_ms = self
            .workers
            .values()
            .filter(|w| w.live())
            .filter_map(|w| self.estimates.compute_of(w.id(), sig, Some(kind), task_work).map(|e| e.ms))
            .fold(None, |m: Option<f64>, e| Some(m.map_or(e, |m| m.min(e))));
        ReadyWork {
            job_age_ms: now.saturating_sub(j.record.submitted_at),
            ready: j.counts(t)[SubtaskState::Ready as usize],
            job_remaining: total.saturating_sub(j.ended()),
            est_run_ms,
            overtaken: self.ready.overtaken(key),
        }
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
        let epoch = self.workers.epoch();
        for ((job, t), _) in judged.into_iter().filter(|(_, all_placed)| !*all_placed) {
            let Some(j) = self.jobs.get(&job) else { continue };
            if j.waiting.contains_key(&t) && j.waiting_epoch.get(&t) == Some(&epoch) {
                continue; // the same workers: the same reason
            }
            let task = &j.record.spec.tasks[t];
            let reason = self
                .constraints_unmet(task)
                .or_else(|| self.unrunnable(task))
                .unwrap_or_else(|| format!("no live worker has room now for {}", fmt_res(&task.resources)));
            if let Some(j) = self.jobs.get_mut(&job) {
                j.waiting.insert(t, reason);
                j.waiting_epoch.insert(t, epoch);
            }
        }
    }

    /// The objects a subtask reads, with their sizes: the selected replicas' output of each
    /// input task (every replica by default).
    pub(super) fn inputs_of(&self, job: JobId, idx: u32) -> Vec<(ObjectId, u64)> {
        let j = &self.jobs[&job];
        let task = &j.record.spec.tasks[j.task_of(idx)];
        let mut inputs: Vec<(ObjectId, u64)> = Vec::new();
        for input in &task.inputs {
            let Some(t) = j.task_index(&input.task) else { continue };
            let producer = &j.record.spec.tasks[t];
            for rank in input.rank.ranks(j.subtasks[idx as usize].rank, producer.replicas) {
                let s = &j.subtasks[(j.members(t).start + rank) as usize];
                let size = s.outputs.iter().find(|(n, _)| *n == input.output).map(|(_, sz)| *sz).unwrap_or(0);
                inputs.push((ObjectId { job, task: input.task.clone(), rank, name: input.output.clone() }, size));
            }
        }
        inputs
    }

    /// Places one subtask, on a worker not held for a gang ahead of it.
    pub(super) fn place(&mut self, job: JobId, idx: u32, now: u64, held: &GangBook) -> Placed {
        match self.choose(job, idx, now, held, "") {
            Ok((wid, record)) => {
                self.assign(job, idx, wid, record, now);
                Placed::Yes
            }
            Err(p) => p,
        }
    }

    /// Picks a worker for one subtask through the `Placer`, among the connected workers with
    /// room that are not `held` (for a gang ahead of it), and the decision's record. `note`
    /// goes into the record's reason (a gang reservation says so).
    pub(super) fn choose(
        &mut self,
        job: JobId,
        idx: u32,
        now: u64,
        held: &GangBook,
        note: &str,
    ) -> Result<(WorkerId, PlacementRecord), Placed> {
        let inputs = self.inputs_of(job, idx);
        match self.input_availability(job, inputs.iter().map(|(o, _)| o)) {
            Availability::Held => {}
            Availability::Unknown => return Err(Placed::NotNow),
            Availability::Lost(lost) => {
                self.recover_inputs(job, &[idx], &lost, now);
                return Err(Placed::NotNow);
            }
        }
        let j = &self.jobs[&job];
        let task = &j.record.spec.tasks[j.task_of(idx)];
        let req = task.resources;
        self.counters.placement_tries += 1;
        let (candidates, samples) = self.candidates(task, &inputs, held, now);
        if !candidates.iter().any(|c| c.feasible) {
            return Err(Placed::NoRoom);
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
            kind: kind_key(task),
        };
        let decision = self.placer.place(&preq, &candidates);
        let Some(chosen) = candidates.get(decision.chosen).filter(|c| c.feasible) else {
            tracing::error!(
                placer = self.placer.name(),
                "placer chose an infeasible or missing candidate; subtask left ready"
            );
            return Err(Placed::NotNow);
        };
        let wid = chosen.worker;
        let reason = if note.is_empty() { decision.reason.clone() } else { format!("{note}; {}", decision.reason) };
        let kept = explained(&candidates, &decision);
        let mut names = None;
        let record = PlacementRecord {
            decision: decision_id,
            placer: self.placer.name().to_string(),
            attempt: j.subtasks[idx as usize].attempt + 1,
            chosen: wid,
            exploratory: decision.exploratory,
            reason,
            decided_at: now,
            omitted: (candidates.len() - kept.len()) as u32,
            candidates: kept
                .into_iter()
                .map(|i| (i, &candidates[i]))
                .map(|(i, c)| CandidateRecord {
                    worker: c.worker,
                    feasible: c.feasible,
                    score: decision.scores.get(i).copied().filter(|s| !s.is_nan()),
                    features: Features::shared(
                        with_estimates(
                            decision.features.as_ref().and_then(|f| f.get(i).cloned()).unwrap_or_else(|| c.features()),
                            c,
                            samples[i],
                        ),
                        &mut names,
                    ),
                    note: c.note.clone(),
                })
                .collect(),
        };
        Ok((wid, record))
    }

    /// Every live worker as a candidate for an attempt of `task` reading `inputs`: feasible or
    /// not (and why not), with its fetch and compute estimates and the samples behind them
    /// (`None`: derived from other workers or pairs).
    /// Each input's first live holders ([`RANKED_HOLDERS`]) with their racks.
    fn input_sources(&self, inputs: &[(ObjectId, u64)]) -> Vec<Vec<(WorkerId, Option<&str>)>> {
        inputs
            .iter()
            .map(|(o, _)| {
                self.workers.holders(o).map_or_else(Vec::new, |h| {
                    h.iter()
                        .filter_map(|w| self.workers.get(w))
                        .filter(|w| w.record().alive)
                        .take(RANKED_HOLDERS)
                        .map(|w| (w.id(), w.record().capacity.topology.rack()))
                        .collect()
                })
            })
            .collect()
    }

    fn candidates(
        &self,
        task: &TaskSpec,
        inputs: &[(ObjectId, u64)],
        held: &GangBook,
        now: u64,
    ) -> (Vec<Candidate>, Vec<Samples>) {
        let req = task.resources;
        let share = task.shares_gpu().then(|| task.shared_gpu_memory());
        // For the estimates: the task's signature, and each input's first live holders with
        // their racks, once per decision, so that each candidate costs O(inputs).
        let (sig, kind, task_work) = (signature(task), kind_key(task), work(task.flops, &task.resources));
        let sources = self.input_sources(inputs);
        let wants_running = self.placer.wants_running();

        let mut candidates = Vec::with_capacity(CANDIDATES_AT_MOST);
        // Per candidate, the samples behind its fetch and compute estimates (0: a fallback).
        let mut samples: Vec<Samples> = Vec::with_capacity(CANDIDATES_AT_MOST);
        // (A request of more than a sliver of a core fits only where the index has room.)
        let room = (req.cpu >= 2.0 * ROOM_CORES).then_some(!task.runs_nothing());
        let mut consider = self.consider(inputs, &task.constraints, room);
        while let Some(w) = consider.next() {
            let free = w.room(!task.runs_nothing());
            // A worker held for a gang ahead takes only work that ends before the gang needs it.
            let gang = held.hold_of(&w.id()).filter(|h| !h.admits(task.timeout_ms, now));
            let gpu_room = share.is_none_or(|m| !w.shareable_gpus(m).is_empty());
            // Silent past the timeout but not lost (evictions halted): nothing new goes there.
            let draining = w.record().draining || (self.halt.is_some() && self.is_silent(w.record(), now));
            // (The label test last: it is the dearest, and most workers of a full cluster fail
            // the room test before it.)
            let fits = req.fits_in(&free)
                && gpu_room
                && gang.is_none()
                && !draining
                && (consider.meets_constraints() || w.record().capacity.admits(&task.constraints));
            match consider.admit(fits) {
                Admit::Take => {}
                Admit::Skip => continue,
                Admit::Stop => break,
            }
            // (The rack is a label lookup: only when there are inputs to fetch.)
            let (id, rack) = (w.id(), if inputs.is_empty() { None } else { w.record().capacity.topology.rack() });
            let mut local = 0u64;
            // Each missing input from its best holder; unknown if any has no estimate.
            let mut fetch = Some(0.0);
            let mut fetch_samples: Option<f64> = None;
            for ((o, size), from) in inputs.iter().zip(&sources) {
                if w.objects().contains_key(o) {
                    local += size;
                    continue;
                }
                let Some(total) = fetch.as_mut() else { continue };
                let best = from
                    .iter()
                    .filter(|(h, _)| *h != id)
                    .filter_map(|(h, r)| self.estimates.link(*h, id, same_rack(*r, rack)))
                    .min_by(|a, b| a.fetch_ms(*size).total_cmp(&b.fetch_ms(*size)));
                match best {
                    Some(l) => {
                        *total += l.fetch_ms(*size);
                        fetch_samples = Some(fetch_samples.map_or(l.samples, |s: f64| s.min(l.samples)));
                    }
                    None => fetch = None,
                }
            }
            let compute = self.estimates.compute_of(id, sig, Some(kind), task_work);
            samples.push((fetch.and(fetch_samples), compute.map(|c| c.samples)));
            candidates.push(Candidate {
                worker: w.id(),
                feasible: fits,
                note: match gang {
                    _ if draining => "drained (plexus workers drain): takes no new work".to_string(),
                    Some(g) => match g.until {
                        Some(u) if task.timeout_ms > 0 => format!("held for {}, which is ahead in the queue and expects it in {} ms, before this task's timeout would end", g.label, u.saturating_sub(now)),
                        _ => format!("held for {}, which is ahead in the queue", g.label),
                    },
                    None if fits => String::new(),
                    None if !gpu_room => format!("no GPU with {} of memory free to share", bytesize::ByteSize(share.unwrap_or(0)).display().iec()),
                    None if w.free_slots() == 0 => format!("runs {} attempts, as many as it takes at once (--max-attempts)", w.record().capacity.max_attempts),
                    None => format!("needs {} free, has {}", fmt_res(&req), fmt_res(&free)),
                },
                capacity: w.record().capacity.resources(),
                // (What the placer sees: no room, without the sentinel's negative cores.)
                free: if w.free_slots() == 0 { Resources::default() } else { free },
                assigned: w.placed().len() as u32,
                cpu_utilisation: w.node().cpu_utilisation,
                local_input_bytes: local,
                cache_bytes: w.record().capacity.cache_bytes,
                cache_used: w.node().cache_used,
                est_fetch_ms: fetch,
                est_compute_ms: compute.map(|c| c.ms),
                recent_slowdown: self.estimates.slowdown(id),
                est_compute_own: compute.is_some_and(|c| c.own),
                est_compute_kind: compute.is_some_and(|c| c.of_kind),
                running: if wants_running { self.jobs.running_on(w.placed()) } else { Vec::new() },
            });
        }
        consider.finish(self);
        (candidates, samples)
    }

    /// A subtask's inputs with their sizes and their holders best-first for `wid`.
    fn ranked_inputs(&self, job: JobId, idx: u32, wid: WorkerId) -> Vec<(ObjectId, u64, Vec<WorkerId>)> {
        self.inputs_of(job, idx)
            .into_iter()
            .map(|(o, size)| {
                let holders = self.ranked_holders(&o, size, wid);
                (o, size, holders)
            })
            .collect()
    }

    /// Starts the next attempt of a subtask on `wid` as decided by `record`, and sends it.
    /// Each input's holders are listed best-first for `wid` (the worker tries them in order), and
    /// the attempt keeps its [`FetchPlan`], to which its measured fetch is attributed.
    pub(super) fn assign(&mut self, job: JobId, idx: u32, wid: WorkerId, record: PlacementRecord, now: u64) {
        let ranked = self.ranked_inputs(job, idx, wid);
        let plan = self.fetch_plan(wid, &ranked, true);
        let input_locations = ranked
            .into_iter()
            .map(|(object, size, holders)| InputLocation {
                holders: holders
                    .iter()
                    .filter_map(|h| self.workers.get(h))
                    .map(|w| HolderLocation {
                        worker: w.id(),
                        peer_addr: w.record().peer_addr.clone(),
                        rails: w.record().capacity.rails.clone(),
                    })
                    .collect(),
                digest: self.digest_of(&object),
                object,
                size,
            })
            .collect();
        let attempt = self.begin_attempt(job, idx, wid, now);
        self.jobs.get_mut(&job).expect("exists").subtasks[idx as usize].fetch_plan = plan;
        let j = &self.jobs[&job];
        let task = &j.record.spec.tasks[j.task_of(idx)];
        let assignment = Assignment::of(task, attempt, task.resources, input_locations, None);
        let assignment = self.with_resume((job, idx), assignment);
        self.dispatch((job, idx), wid, record, assignment, now);
    }

    /// Live workers holding `o`, with their rails: where an assignment's input can be fetched.
    pub(super) fn holder_locations(&self, o: &ObjectId) -> Vec<HolderLocation> {
        let Some(h) = self.workers.holders(o) else { return Vec::new() };
        h.iter()
            .filter_map(|w| self.workers.get(w))
            .filter(|w| w.record().alive)
            .map(|w| HolderLocation {
                worker: w.id(),
                peer_addr: w.record().peer_addr.clone(),
                rails: w.record().capacity.rails.clone(),
            })
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
        s.fetch_plan = None;
        s.stage.clear();
        AttemptRef { job, task: s.task.clone(), rank: s.rank, attempt: s.attempt }
    }

    /// Records a placement decided by [`Core::place`] or [`Core::place_gang`]: the subtask is
    /// `Assigned`, the worker's allocation grows, and the assignment goes out.
    pub(super) fn dispatch(
        &mut self,
        (job, idx): (JobId, u32),
        wid: WorkerId,
        record: PlacementRecord,
        mut assignment: Assignment,
        now: u64,
    ) {
        let claim = self.jobs[&job].claim(idx);
        let code = self.jobs[&job].record.spec.working_dir.as_ref();
        assignment.working_dir = code.and_then(|w| Some((w.digest?, w.size)));
        let planned = self.jobs[&job].subtasks[idx as usize].gpus.clone();
        // A sharing attempt joins one device with room for its memory: the one a gang's search
        // chose for it, else the least shared. A whole-device attempt gets the lowest free
        // indices (a GPU gang member the device its search planned, when that is still free).
        let gpus = self.workers.get_mut(&wid).expect("candidate exists").place(
            (job, idx),
            claim,
            Devices::Preferred(&planned),
        );
        assignment.gpus = gpus.clone();
        self.count_queue(job, idx, 1.0);
        if let (Some(_), Some(&g)) = (claim.shared_memory, gpus.first()) {
            self.jobs.get_mut(&job).expect("exists").subtasks[idx as usize].gpus = gpus.clone();
            self.met_on_gpu(wid, (job, idx), g);
        }
        let j = self.jobs.get_mut(&job).expect("exists");
        j.placements.insert(idx, record);
        j.subtasks[idx as usize].gpus = gpus;
        self.out.placements.insert((job, idx));
        self.set_state((job, idx), SubtaskState::Assigned, now, String::new());
        self.out.assignments.push((wid, assignment));
    }
}

pub(super) fn fmt_res(r: &Resources) -> String {
    format!("cpu={:.2} memory={} gpu={}", r.cpu, bytesize::ByteSize(r.memory).display().iec(), r.gpu)
}
