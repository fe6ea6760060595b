//! Jobs and subtasks: submission, cancellation, reports of attempts, retries, DAG release and
//! the end of a job. Every subtask state change goes through `Core::set_state`.

use std::collections::HashSet;

use plexus_proto::{AttemptRef, JobId, JobState, ObjectId, SubtaskState, WorkerId};

use super::job_table::Job;
use super::ledger::Worker;
use super::messages::Report;
use super::records::{AttemptFailure, JobRecord, Subtask, Transition};
use super::state::Core;
use crate::error::Error;
use crate::spec::constraints::Labels;
use crate::spec::{JobSpec, OnFailure, TaskSpec, retry_delay_ms};

/// The longest stage text kept from a worker's report.
const MAX_STAGE_CHARS: usize = 200;

impl Core {
    /// Why no set of live workers could ever run some task of `spec`, if that is so. With no
    /// worker registered yet nothing can be judged, and the job waits for workers; a worker that
    /// was lost does not count (it may never come back).
    pub fn unsatisfiable(&self, spec: &JobSpec) -> Option<String> {
        if self.workers.is_empty() {
            return None;
        }
        spec.tasks
            .iter()
            .find_map(|t| self.unknown_label(t).or_else(|| self.unrunnable(t)))
            .or_else(|| self.gang_too_big(spec))
    }

    /// A constraint of `t` that only a worker carrying its label can meet (`key = "v"`, `key =
    /// true`), on a label no registered worker, live or lost, has ever carried: a typo, or a
    /// cluster that has no such nodes.
    fn unknown_label(&self, t: &TaskSpec) -> Option<String> {
        let c = t
            .constraints
            .iter()
            .filter(|c| c.needs_label())
            .find(|c| !self.workers.values().any(|w| w.record().capacity.has(&c.key)))?;
        if c.key == plexus_proto::runtime_env::RUNTIME_LABEL
            && let Some(image) = &t.image
        {
            return Some(format!(
                "task {:?}: image {image:?}: no worker has a container runtime (Docker or Podman; a worker with one carries the label {}=docker or =podman)",
                t.name, c.key
            ));
        }
        let mut known: Vec<&str> = self
            .workers
            .values()
            .flat_map(|w| w.record().capacity.topology.labels.keys().map(String::as_str))
            .collect();
        known.sort_unstable();
        known.dedup();
        known.truncate(16);
        Some(format!(
            "task {:?}: constraint {c}: no worker has ever carried the label {:?} (labels seen: {})",
            t.name,
            c.key,
            if known.is_empty() { "none".to_string() } else { known.join(", ") }
        ))
    }

    /// Why no live worker may run `t` by its constraints, if that is so: the constraints, and the
    /// values the live workers carry of the labels they test.
    pub(super) fn constraints_unmet(&self, t: &TaskSpec) -> Option<String> {
        if t.constraints.is_empty() {
            return None;
        }
        let alive: Vec<&Worker> = self.workers.values().filter(|w| w.record().alive).collect();
        if alive.iter().any(|w| w.record().capacity.admits(&t.constraints)) {
            return None;
        }
        let mut seen: Vec<String> = Vec::new();
        for c in &t.constraints {
            let mut values: Vec<&str> = alive
                .iter()
                .filter_map(|w| w.record().capacity.topology.labels.get(&c.key).map(String::as_str))
                .collect();
            values.sort_unstable();
            values.dedup();
            values.truncate(8);
            if !values.is_empty() {
                seen.push(format!("{}: {}", c.key, values.join(", ")));
            }
        }
        Some(format!(
            "task {:?} requires {}: none of the {} live worker(s) meets it{}",
            t.name,
            crate::spec::constraints::describe(&t.constraints),
            alive.len(),
            if seen.is_empty() { String::new() } else { format!(" (live workers carry {})", seen.join("; ")) }
        ))
    }

    /// Why a gang of `spec` cannot ever have `min_members` members placed at once on the live
    /// workers, checked per worker (first-fit by size, largest members first), if that is so.
    fn gang_too_big(&self, spec: &JobSpec) -> Option<String> {
        let alive: Vec<&Worker> = self.workers.values().filter(|w| w.record().alive).collect();
        let mut names: Vec<&str> = spec
            .tasks
            .iter()
            .filter(|t| t.collective.is_none())
            .filter_map(|t| t.gang.as_ref().map(|g| g.name.as_str()))
            .collect();
        names.dedup();
        for name in names {
            let tasks: Vec<&TaskSpec> =
                spec.tasks.iter().filter(|t| t.gang.as_ref().is_some_and(|g| g.name == name)).collect();
            let k = tasks[0].gang.as_ref().map_or(0, |g| g.min_members);
            let mut members: Vec<plexus_proto::Resources> =
                tasks.iter().flat_map(|t| std::iter::repeat_n(t.resources, t.replicas as usize)).collect();
            members.sort_by(|a, b| b.cpu.total_cmp(&a.cpu).then(b.memory.cmp(&a.memory)).then(b.gpu.cmp(&a.gpu)));
            // Each live worker's capacity, and how many attempts it takes at once.
            let mut room: Vec<(plexus_proto::Resources, u32)> = alive
                .iter()
                .map(|w| {
                    let slots = match w.record().capacity.max_attempts {
                        0 => u32::MAX,
                        n => n,
                    };
                    (w.record().capacity.resources(), slots)
                })
                .collect();
            let mut fit = 0u32;
            for m in &members {
                if fit >= k {
                    break;
                }
                if let Some((r, slots)) = room.iter_mut().find(|(r, slots)| *slots > 0 && m.fits_in(r)) {
                    r.sub(m);
                    *slots -= 1;
                    fit += 1;
                }
            }
            if fit < k {
                return Some(format!(
                    "gang {name:?} needs {k} members placed at once, and the {} live worker(s) can hold at most {fit} of them together",
                    alive.len()
                ));
            }
        }
        None
    }

    /// Why task `t` cannot run on the live workers whatever they are running now, if that is so.
    pub(super) fn unrunnable(&self, t: &TaskSpec) -> Option<String> {
        let alive: Vec<&Worker> = self.workers.values().filter(|w| w.record().alive).collect();
        let r = &t.resources;
        if alive.is_empty() {
            return Some(format!(
                "task {:?} needs a live worker, and none of the {} registered worker(s) is alive",
                t.name,
                self.workers.len()
            ));
        }
        if !alive.iter().any(|w| r.fits_in(&w.record().capacity.resources())) {
            let max_cpu = alive.iter().map(|w| w.record().capacity.cpus).max().unwrap_or(0);
            let max_mem = alive.iter().map(|w| w.record().capacity.memory).max().unwrap_or(0);
            let max_gpu = alive.iter().map(|w| w.record().capacity.gpus.len()).max().unwrap_or(0);
            return Some(format!(
                "task {:?} asks for cpu={}, memory={}, gpu={} but no live worker can ever offer that (largest: cpu={max_cpu}, memory={}, gpu={max_gpu})",
                t.name,
                r.cpu,
                bytesize::ByteSize(r.memory).display().iec(),
                r.gpu,
                bytesize::ByteSize(max_mem).display().iec(),
            ));
        }
        if t.shares_gpu() {
            let m = t.shared_gpu_memory();
            if !alive.iter().any(|w| w.record().capacity.gpus.iter().any(|g| g.memory == 0 || g.memory >= m)) {
                let largest = alive.iter().flat_map(|w| w.record().capacity.gpus.iter().map(|g| g.memory)).max();
                return Some(format!(
                    "task {:?} shares a GPU with gpu_memory = {} but no live worker has a GPU that large ({})",
                    t.name,
                    bytesize::ByteSize(m).display().iec(),
                    largest.map_or("no live worker has a GPU".to_string(), |l| format!(
                        "largest: {}",
                        bytesize::ByteSize(l).display().iec()
                    )),
                ));
            }
        }
        if t.collective.is_some() {
            let able = alive.iter().filter(|w| r.fits_in(&w.record().capacity.resources())).count();
            if able < t.replicas as usize {
                return Some(format!(
                    "needs {} workers for gang {:?} (a collective of {} members, one per worker, each able to fit cpu={} memory={} gpu={}), {able} alive",
                    t.replicas,
                    t.name,
                    t.replicas,
                    r.cpu,
                    bytesize::ByteSize(r.memory).display().iec(),
                    r.gpu,
                ));
            }
        }
        None
    }

    /// Accepts a validated job; returns its number of subtasks.
    pub fn submit(&mut self, id: JobId, spec: JobSpec, now: u64) -> Result<u32, Error> {
        if self.jobs.contains_key(&id) {
            return Err(Error::Duplicate(id));
        }
        if let Some(why) = self.unsatisfiable(&spec) {
            return Err(Error::Unsatisfiable(why));
        }
        for a in &spec.after_jobs {
            match self.jobs.get(a).map(|j| j.record.state) {
                None => return Err(Error::Unsatisfiable(format!("after_jobs: no job {a}"))),
                Some(s) if s.is_final() && s != JobState::Succeeded => {
                    return Err(Error::Unsatisfiable(format!(
                        "after_jobs: job {a} has already {}; this job would never start",
                        s.as_str()
                    )));
                }
                _ => {}
            }
        }
        let seq = self.jobs.take_seq();
        let mut subtasks = Vec::with_capacity(spec.total_subtasks() as usize);
        for t in &spec.tasks {
            for rank in 0..t.replicas {
                subtasks.push(Subtask {
                    task: t.name.clone(),
                    rank,
                    state: SubtaskState::Waiting,
                    attempt: 0,
                    failures: 0,
                    worker: None,
                    ready_at: 0,
                    assigned_at: 0,
                    started_at: 0,
                    finished_at: 0,
                    exit_code: 0,
                    error: String::new(),
                    fetch_ms: 0,
                    fetched_bytes: 0,
                    evicted_bytes: 0,
                    outputs: Vec::new(),
                    digests: Default::default(),
                    stdout_tail: String::new(),
                    stderr_tail: String::new(),
                    history: vec![Transition {
                        state: SubtaskState::Waiting,
                        at: now,
                        attempt: 0,
                        worker: None,
                        note: String::new(),
                    }],
                    not_before: 0,
                    failed_attempts: Vec::new(),
                    kept: None,
                    stage: String::new(),
                    gpus: Vec::new(),
                    reruns: 0,
                    reserved_on: None,
                    iter_ms: 0.0,
                    fetch_plan: None,
                    unfetched_requeues: 0,
                });
            }
        }
        let n = subtasks.len() as u32;
        let record = JobRecord {
            id,
            seq,
            spec,
            state: JobState::Running,
            submitted_at: now,
            finished_at: 0,
            error: String::new(),
            gangs: Default::default(),
            started_at: 0,
        };
        let job = Job::new(record, subtasks);
        for i in 0..n {
            self.out.subtasks.insert((id, i));
        }
        let after = job.record.spec.after_jobs.clone();
        self.jobs.insert(job);
        self.out.jobs.insert(id);
        for a in after {
            self.jobs.wait_for(a, id);
        }
        self.settle_after(id, now);
        Ok(n)
    }

    /// Releases the root tasks of job `id` once every job it runs after has succeeded (at once
    /// when it waits for none); fails it when one of them ended otherwise; else says what it
    /// waits for.
    pub(super) fn settle_after(&mut self, id: JobId, now: u64) {
        let Some(j) = self.jobs.get(&id).filter(|j| j.record.state == JobState::Running) else { return };
        let mut pending = Vec::new();
        for a in &j.record.spec.after_jobs {
            match self.jobs.get(a).map(|p| p.record.state) {
                Some(JobState::Succeeded) => {}
                Some(JobState::Running) => pending.push(a.to_string()),
                Some(other) => {
                    let why = format!("job {a}, which this job runs after (after_jobs), {}", other.as_str());
                    self.finish_job(id, JobState::Failed, why, now);
                    return;
                }
                // Forgotten since (it was there at submission): it cannot succeed any more.
                None => {
                    self.finish_job(
                        id,
                        JobState::Failed,
                        format!("job {a}, which this job runs after (after_jobs), is gone"),
                        now,
                    );
                    return;
                }
            }
        }
        let roots: Vec<usize> =
            (0..j.record.spec.tasks.len()).filter(|&t| j.record.spec.tasks[t].after.is_empty()).collect();
        if pending.is_empty() {
            let j = self.jobs.get_mut(&id).expect("exists");
            j.blocked = None;
            for t in &roots {
                j.waiting.remove(t);
            }
            // Released already (before a restart)? Only waiting subtasks move.
            for t in roots {
                if self.jobs[&id].counts(t)[SubtaskState::Waiting as usize] > 0 {
                    self.release_task(id, t, now);
                }
            }
        } else {
            let why = format!("after job {} (after_jobs), not finished yet", pending.join(", "));
            let j = self.jobs.get_mut(&id).expect("exists");
            j.blocked = Some(why.clone());
            for t in roots {
                j.waiting.insert(t, why.clone());
            }
        }
    }

    /// Cancels a running job: pending subtasks are cancelled, running ones killed.
    pub fn cancel(&mut self, id: JobId, now: u64) -> Result<(), Error> {
        let job = self.jobs.get(&id).ok_or(Error::NoJob(id))?;
        if job.record.state.is_final() {
            return Err(Error::JobFinished { job: id, state: job.record.state });
        }
        self.finish_job(id, JobState::Cancelled, "cancelled by request".into(), now);
        Ok(())
    }

    /// Applies a worker's reports. Returns false if the worker must register again first.
    pub fn report(&mut self, id: WorkerId, session: &str, reports: Vec<Report>, now: u64) -> bool {
        match self.workers.get(&id) {
            Some(w) if w.connected() && w.record().session == session => {}
            _ => return false,
        }
        for mut r in reports {
            for b in std::mem::take(&mut r.bad_copies) {
                self.bad_copy(b.holder, &b.object, &format!("worker {id} fetching it"));
            }
            self.apply_report(id, r, now);
        }
        true
    }

    pub(super) fn apply_report(&mut self, wid: WorkerId, mut r: Report, now: u64) {
        let (Some(a), Some(state)) = (r.attempt, r.state) else { return };
        let Some(job) = self.jobs.get_mut(&a.job) else { return };
        let Ok(idx) = job.subtask_index(&a.task, a.rank) else { return };
        if let Some(c) = r.checkpoint.take().filter(|_| matches!(state, SubtaskState::Failed | SubtaskState::Cancelled))
        {
            self.keep_checkpoint((a.job, idx), &a, wid, c);
        }
        let Some(job) = self.jobs.get_mut(&a.job) else { return };
        let s = &job.subtasks[idx as usize];
        if s.attempt != a.attempt || s.worker != Some(wid) || !s.state.is_placed() {
            tracing::debug!(attempt = %a, "stale report ignored");
            return;
        }
        let key = (a.job, idx);
        match state {
            SubtaskState::Assigned if s.state == SubtaskState::Assigned => {
                let stage: String = r.stage.chars().take(MAX_STAGE_CHARS).collect();
                if job.subtasks[idx as usize].stage != stage {
                    job.subtasks[idx as usize].stage = stage;
                    self.out.subtasks.insert(key);
                }
            }
            SubtaskState::Running if s.state == SubtaskState::Assigned => {
                let st = &mut job.subtasks[idx as usize];
                st.stage.clear();
                st.started_at = if r.started_at > 0 { r.started_at } else { now };
                if job.record.started_at == 0 {
                    // The job's first subtask to run: its time queued ends here.
                    job.record.started_at = job.subtasks[idx as usize].started_at;
                    self.out.jobs.insert(a.job);
                }
                self.set_state(key, SubtaskState::Running, now, String::new());
            }
            SubtaskState::Succeeded | SubtaskState::Failed | SubtaskState::Cancelled => {
                {
                    let st = &mut job.subtasks[idx as usize];
                    if r.started_at > 0 {
                        st.started_at = r.started_at;
                    }
                    st.finished_at = if r.finished_at > 0 { r.finished_at } else { now };
                    st.stage.clear();
                    if st.started_at > 0 && (job.record.started_at == 0 || st.started_at < job.record.started_at) {
                        // An attempt whose RUNNING report this coordinator never saw.
                        job.record.started_at = st.started_at;
                        self.out.jobs.insert(a.job);
                    }
                    st.exit_code = r.exit_code;
                    st.error = r.error.clone();
                    st.fetch_ms = r.fetch_ms;
                    st.fetched_bytes = r.fetched_bytes;
                    st.evicted_bytes = r.evicted_bytes;
                    st.stdout_tail = r.stdout_tail;
                    st.stderr_tail = r.stderr_tail;
                    st.iter_ms = r.iter_ms;
                }
                // An input no holder could serve is the holder's fault, not this placement's.
                if r.unfetched_input.is_none() {
                    self.feedback(key, wid, state == SubtaskState::Succeeded);
                }
                match state {
                    SubtaskState::Succeeded => self.succeed(key, wid, (r.outputs, r.digests), now),
                    SubtaskState::Failed => match r.unfetched_input {
                        Some(o) => self.input_unfetched(key, o, now, r.error),
                        None => self.fail_attempt(key, now, r.error),
                    },
                    // Workers cancel only what we asked them to; any other cancellation (the
                    // worker shutting down, or fencing an attempt when its lease ran out) is not
                    // the task's fault: place it again, saying why.
                    _ => {
                        let note = match r.error.as_str() {
                            "" => "cancelled on the worker".to_string(),
                            why => format!("cancelled on the worker: {why}"),
                        };
                        self.requeue(key.0, key.1, now, note)
                    }
                }
            }
            _ => {}
        }
    }

    /// A succeeded attempt: its outputs (with their digests, by output name) are kept, and
    /// what depends on its task is released once the task is done.
    pub(super) fn succeed(
        &mut self,
        key: (JobId, u32),
        wid: WorkerId,
        (outputs, digests): (Vec<(ObjectId, u64)>, std::collections::BTreeMap<String, plexus_proto::Digest>),
        now: u64,
    ) {
        self.learn_gpu_run(key, wid);
        self.learn_speeds(key, wid);
        self.release_worker(key, wid);
        let Some(job) = self.jobs.get_mut(&key.0) else { return };
        let s = &mut job.subtasks[key.1 as usize];
        s.outputs = outputs.iter().map(|(o, size)| (o.name.clone(), *size)).collect();
        s.digests = digests.into_iter().filter(|(name, _)| s.outputs.iter().any(|(n, _)| n == name)).collect();
        self.workers.add_objects(wid, outputs);
        self.set_state(key, SubtaskState::Succeeded, now, String::new());
        let job = &self.jobs[&key.0];
        let t = job.task_of(key.1);
        if job.task_done(t) {
            for d in job.dependents(t).to_vec() {
                if self.jobs[&key.0].deps_done(d) {
                    self.release_task(key.0, d, now);
                }
            }
        }
        self.finish_if_done(key.0, now);
    }

    /// Ends a job whose every subtask has ended: `Succeeded`, or `CompletedWithFailures` when some
    /// failed (or were skipped) under `on_failure = "continue"`.
    pub(super) fn finish_if_done(&mut self, id: JobId, now: u64) {
        let Some(job) = self.jobs.get(&id) else { return };
        if job.record.state.is_final() || job.ended() < job.total() {
            return;
        }
        if job.succeeded() == job.total() {
            self.finish_job(id, JobState::Succeeded, String::new(), now);
        } else {
            let error = job.record.error.clone();
            self.finish_job(id, JobState::CompletedWithFailures, error, now);
        }
    }

    /// Records a failed attempt, then retries it after its back-off, or — past `max_retries` —
    /// applies the task's `on_failure`: fail the job, or skip what depends on the task and let
    /// the rest run.
    pub(super) fn fail_attempt(&mut self, key: (JobId, u32), now: u64, error: String) {
        let Some(job) = self.jobs.get_mut(&key.0) else { return };
        let t = job.task_of(key.1);
        let spec = &job.record.spec.tasks[t];
        let (max_retries, backoff, collective) = (spec.max_retries, spec.retry_backoff_ms, spec.collective.is_some());
        job.count_failure(t);
        let s = &mut job.subtasks[key.1 as usize];
        s.failures += 1;
        s.failed_attempts.push(AttemptFailure {
            attempt: s.attempt,
            worker: s.worker,
            exit_code: s.exit_code,
            error: error.clone(),
            finished_at: s.finished_at,
        });
        let (failures, task, rank) = (s.failures, s.task.clone(), s.rank);
        if failures <= max_retries {
            let at = now + retry_delay_ms(backoff, failures);
            let wait = if at > now { format!(" in {} ms", at - now) } else { String::new() };
            self.requeue_at(
                key.0,
                key.1,
                now,
                at,
                format!("attempt failed ({error}); retry {failures} of {max_retries}{wait}"),
            );
            if collective {
                // The gang restarts whole: the members still placed stop now (a failure that is
                // not theirs, so not counted) and wait out the same back-off.
                self.restart_gang(key, now, at, format!("gang restarted: member {rank} failed"));
            }
            return;
        }
        let attempts = if failures == 1 { "1 attempt".to_string() } else { format!("{failures} attempts") };
        self.fail_for_good(
            key,
            now,
            error.clone(),
            format!("task {task:?} rank {rank} failed after {attempts}: {error}"),
        );
    }

    /// Fails a subtask that cannot run, without an attempt (its input is lost for good).
    pub(super) fn give_up(&mut self, key: (JobId, u32), now: u64, error: String) {
        let Some(s) = self.jobs.get(&key.0).map(|j| &j.subtasks[key.1 as usize]) else { return };
        let why = format!("task {:?} rank {} cannot run: {error}", s.task, s.rank);
        self.fail_for_good(key, now, error, why);
    }

    /// Marks a subtask `Failed` for good and applies its task's `on_failure`; `why` is the job's
    /// error.
    pub(super) fn fail_for_good(&mut self, key: (JobId, u32), now: u64, error: String, why: String) {
        let Some(job) = self.jobs.get(&key.0) else { return };
        let t = job.task_of(key.1);
        let (on_failure, collective) =
            (job.record.spec.tasks[t].on_failure, job.record.spec.tasks[t].collective.is_some());
        let rank = job.subtasks[key.1 as usize].rank;
        let wid = job.subtasks[key.1 as usize].worker.filter(|_| job.subtasks[key.1 as usize].state.is_placed());
        if let Some(w) = wid {
            self.release_worker(key, w);
        }
        self.set_state(key, SubtaskState::Failed, now, error);
        match on_failure {
            OnFailure::FailJob => self.finish_job(key.0, JobState::Failed, why, now),
            OnFailure::Continue => {
                let job = self.jobs.get_mut(&key.0).expect("exists");
                if job.record.error.is_empty() {
                    job.record.error = why;
                    self.out.jobs.insert(key.0);
                }
                if collective {
                    self.end_gang(key, now, format!("gang member {rank} failed"));
                }
                self.skip_dependants(key.0, t, now);
                self.finish_if_done(key.0, now);
            }
        }
    }

    /// Stops the other members of the gang of subtask `key` that are placed, and makes them
    /// ready again at `at` (with the failed member), without counting a failure.
    pub(super) fn restart_gang(&mut self, key: (JobId, u32), now: u64, at: u64, note: String) {
        for idx in self.gang_members(key) {
            if self.jobs[&key.0].subtasks[idx as usize].state.is_placed() {
                self.stop_attempt((key.0, idx));
                self.requeue_at(key.0, idx, now, at, note.clone());
            }
        }
    }

    /// Ends the other members of the gang of subtask `key`: a gang cannot complete without one
    /// of its members.
    fn end_gang(&mut self, key: (JobId, u32), now: u64, note: String) {
        let members = self.gang_members(key);
        self.cancel_subtasks(key.0, members, now, &note);
    }

    /// Asks the worker running subtask `key`'s current attempt to stop it and frees what the
    /// attempt holds there; nothing when the subtask is not placed.
    pub(super) fn stop_attempt(&mut self, (job, idx): (JobId, u32)) {
        let Some(s) = self.jobs.get(&job).map(|j| &j.subtasks[idx as usize]) else { return };
        let Some(w) = s.worker.filter(|_| s.state.is_placed()) else { return };
        let a = AttemptRef { job, task: s.task.clone(), rank: s.rank, attempt: s.attempt };
        self.out.cancels.push((w, a));
        self.release_worker((job, idx), w);
    }

    /// Cancels every subtask of `idxs` that has not ended (stopping placed attempts), noting why.
    fn cancel_subtasks(&mut self, job: JobId, idxs: impl IntoIterator<Item = u32>, now: u64, note: &str) {
        for idx in idxs {
            if self.jobs[&job].subtasks[idx as usize].state.is_final() {
                continue;
            }
            self.stop_attempt((job, idx));
            self.set_state((job, idx), SubtaskState::Cancelled, now, note.to_string());
        }
    }

    /// The other subtasks of the task of `key`.
    fn gang_members(&self, key: (JobId, u32)) -> Vec<u32> {
        let j = &self.jobs[&key.0];
        j.members(j.task_of(key.1)).filter(|&i| i != key.1).collect()
    }

    /// Cancels, as skipped, every subtask of the tasks that depend on task `t`, directly or
    /// through others (an explicit stack: dependency chains may be thousands deep).
    fn skip_dependants(&mut self, job: JobId, t: usize, now: u64) {
        let failed = self.jobs[&job].record.spec.tasks[t].name.clone();
        let mut stack = self.jobs[&job].dependents(t).to_vec();
        let mut seen = HashSet::new();
        while let Some(d) = stack.pop() {
            if !seen.insert(d) {
                continue;
            }
            let j = &self.jobs[&job];
            stack.extend(j.dependents(d).iter().copied());
            let members = j.members(d);
            self.cancel_subtasks(job, members, now, &format!("skipped: task {failed:?} failed"));
        }
    }

    /// Takes an attempt off its worker and makes the subtask ready for a new attempt at once.
    pub(super) fn requeue(&mut self, job: JobId, idx: u32, now: u64, note: String) {
        self.requeue_at(job, idx, now, now, note);
    }

    /// Takes an attempt off its worker and makes the subtask ready for a new attempt, placed no
    /// sooner than `at`.
    pub(super) fn requeue_at(&mut self, job: JobId, idx: u32, now: u64, at: u64, note: String) {
        let Some(j) = self.jobs.get(&job) else { return };
        let s = &j.subtasks[idx as usize];
        if s.state.is_final() {
            return;
        }
        if let Some(w) = s.worker {
            self.release_worker((job, idx), w);
        }
        if self.jobs[&job].record.state.is_final() {
            return;
        }
        let j = self.jobs.get_mut(&job).expect("checked above");
        let s = &mut j.subtasks[idx as usize];
        s.worker = None;
        s.ready_at = at.max(now);
        s.not_before = if at > now { at } else { 0 };
        self.set_state((job, idx), SubtaskState::Ready, now, note);
        if at > now {
            self.ready.delay(at, job, idx);
        } else {
            self.push_ready(job, idx);
        }
    }

    pub(super) fn release_task(&mut self, job: JobId, t: usize, now: u64) {
        let Some(j) = self.jobs.get(&job) else { return };
        for idx in j.members(t) {
            if self.jobs[&job].subtasks[idx as usize].state == SubtaskState::Waiting {
                self.jobs.get_mut(&job).expect("exists").subtasks[idx as usize].ready_at = now;
                self.set_state((job, idx), SubtaskState::Ready, now, String::new());
                self.push_ready(job, idx);
            }
        }
    }

    pub(super) fn finish_job(&mut self, id: JobId, state: JobState, error: String, now: u64) {
        let Some(job) = self.jobs.get(&id) else { return };
        let all = 0..job.total();
        self.cancel_subtasks(id, all, now, "");
        let job = self.jobs.get_mut(&id).expect("exists");
        job.waiting.clear();
        job.waiting_epoch.clear();
        job.record.state = state;
        job.record.finished_at = now;
        job.record.error = error;
        self.out.jobs.insert(id);
        // Jobs that run after this one: released, or failed with it. Worked off as a list, not
        // by recursion, so a long chain of jobs failing one after another cannot overflow the
        // stack.
        let dependents = self.jobs.take_waiters(&id);
        self.to_settle.extend(dependents);
        if !self.settling {
            self.settling = true;
            while let Some(d) = self.to_settle.pop() {
                self.settle_after(d, now);
            }
            self.settling = false;
        }
    }

    /// The one place a subtask changes state: keeps counts and history, marks it dirty.
    pub(super) fn set_state(&mut self, (job, idx): (JobId, u32), state: SubtaskState, now: u64, note: String) {
        // A reservation belongs to a ready member: whatever else it becomes, it is released.
        if state != SubtaskState::Ready {
            self.unreserve((job, idx));
        }
        let Some(j) = self.jobs.get_mut(&job) else { return };
        j.set_state(idx, state, now, note);
        // One placed in this round is still to be written: it stays until the next placement.
        if self.spill && state.is_final() && !self.out.placements.contains(&(job, idx)) {
            j.placements.remove(&idx);
        }
        self.out.subtasks.insert((job, idx));
    }
}
