//! The job table: every job in memory, in submission order, with the jobs that wait for each.
//!
//! Invariants kept here, behind private fields:
//! - The submission order lists every job exactly once, by its sequence number, and a new job's
//!   number is past every number stored.
//! - A job's per-task counts of subtasks by state equal its subtasks' states: only
//!   [`Job::set_state`] changes a subtask's state.

use std::collections::{BTreeMap, HashMap};
use std::ops::Range;

use plexus_proto::{JobId, SubtaskState};

use super::ledger::Claim;
use super::records::{GangState, JobRecord, PlacementRecord, Subtask, Transition};
use crate::error::Error;
use crate::spec::JobSpec;

/// A job in memory: its record, its subtasks (task by task, rank by rank) and derived indexes.
pub struct Job {
    pub(super) record: JobRecord,
    pub(super) subtasks: Vec<Subtask>,
    pub(super) placements: HashMap<u32, PlacementRecord>,
    /// Why tasks with ready subtasks are not placed (task index → reason), as of the last
    /// scheduling round: derived state, shown by `plexus status`, not stored.
    pub(super) waiting: BTreeMap<usize, String>,
    /// The `Core::worker_epoch` each `waiting` reason was worked out at: it is worked out again
    /// only when the workers changed, not every round (thousands of waiting tasks made that the
    /// bulk of a round).
    pub(super) waiting_epoch: BTreeMap<usize, u64>,
    /// Gangs at their queue's head whose start the time limits of what runs put later (gang →
    /// that time): they reserve nothing yet and hold the workers they will use. Derived.
    pub(super) planned: BTreeMap<String, u64>,
    /// Index of the first subtask of each task.
    offsets: Vec<u32>,
    /// counts[task][state as usize]: kept equal to the states of `subtasks` by
    /// [`Job::set_state`], the one place a subtask's state changes.
    counts: Vec<[u32; 7]>,
    /// Failed attempts per task (retried or not), for `plexus watch`.
    failed_attempts: Vec<u32>,
    /// Tasks that list each task in `after`.
    dependents: Vec<Vec<usize>>,
    /// Why the job waits for other jobs (`after_jobs` not all succeeded yet), as of the last
    /// time that was settled; `None` when it does not. Derived.
    pub(super) blocked: Option<String>,
}

fn state_index(s: SubtaskState) -> usize {
    s as usize
}

/// A gang of a job as `plexus status` shows it.
#[derive(Clone, Debug, PartialEq)]
pub struct GangView {
    pub name: String,
    pub tasks: Vec<String>,
    pub min_members: u32,
    pub members: u32,
    pub reserved: u32,
    pub timeout_ms: u64,
    pub phase: GangPhase,
    pub state: GangState,
}

/// Where a gang stands, for display.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum GangPhase {
    /// Not reserving: not at its queue's head yet, or not released.
    Waiting,
    /// Holding reservations until the deadline.
    Reserving {
        deadline: u64,
    },
    Bound {
        at: u64,
    },
    /// Rolled back, not reserving before `retry_at`.
    BackingOff {
        retry_at: u64,
    },
    /// At its queue's head, expected to start at `start` by the time limits of what runs on
    /// the workers it holds (open meanwhile to work that ends before).
    Planned {
        start: u64,
    },
}

impl GangPhase {
    pub fn as_str(self) -> &'static str {
        match self {
            GangPhase::Waiting => "waiting",
            GangPhase::Reserving { .. } => "reserving",
            GangPhase::Bound { .. } => "bound",
            GangPhase::BackingOff { .. } => "backing off",
            GangPhase::Planned { .. } => "planned",
        }
    }
}

impl Job {
    /// The job's gangs, in file order of their first task, as of `now`.
    pub fn gangs(&self, now: u64) -> Vec<GangView> {
        let mut out: Vec<GangView> = Vec::new();
        for (t, task) in self.record.spec.tasks.iter().enumerate() {
            let Some(g) = &task.gang else { continue };
            let range = self.offsets[t]..self.offsets[t] + task.replicas;
            let reserved = range.clone().filter(|&i| self.subtasks[i as usize].reserved_on.is_some()).count() as u32;
            if let Some(v) = out.iter_mut().find(|v| v.name == g.name) {
                v.tasks.push(task.name.clone());
                v.members += task.replicas;
                v.reserved += reserved;
                continue;
            }
            let state = self.record.gangs.get(&g.name).cloned().unwrap_or_default();
            // A collective is bound while every member is placed or done; one restarting (a member
            // ready again) waits to be placed whole anew.
            let whole = task.collective.is_none()
                || range.clone().all(|i| {
                    self.subtasks[i as usize].state.is_placed()
                        || self.subtasks[i as usize].state == SubtaskState::Succeeded
                });
            let phase = if state.bound_at > 0 && whole {
                GangPhase::Bound { at: state.bound_at }
            } else if state.retry_at > now {
                GangPhase::BackingOff { retry_at: state.retry_at }
            } else if state.reserving_since > 0 {
                GangPhase::Reserving { deadline: state.reserving_since.saturating_add(g.timeout_ms) }
            } else if let Some(&start) = self.planned.get(&g.name) {
                GangPhase::Planned { start }
            } else {
                GangPhase::Waiting
            };
            out.push(GangView {
                name: g.name.clone(),
                tasks: vec![task.name.clone()],
                min_members: g.min_members,
                members: task.replicas,
                reserved,
                timeout_ms: g.timeout_ms,
                phase,
                state,
            });
        }
        out
    }

    pub(super) fn new(record: JobRecord, subtasks: Vec<Subtask>) -> Job {
        let spec = &record.spec;
        let mut offsets = Vec::with_capacity(spec.tasks.len());
        let mut off = 0u32;
        for t in &spec.tasks {
            offsets.push(off);
            off += t.replicas;
        }
        let names: HashMap<&str, usize> = spec.tasks.iter().enumerate().map(|(i, t)| (t.name.as_str(), i)).collect();
        let mut dependents = vec![Vec::new(); spec.tasks.len()];
        for (i, t) in spec.tasks.iter().enumerate() {
            for a in &t.after {
                if let Some(&j) = names.get(a.as_str()) {
                    dependents[j].push(i);
                }
            }
        }
        let mut counts = vec![[0u32; 7]; spec.tasks.len()];
        for s in &subtasks {
            if let Some(&t) = names.get(s.task.as_str()) {
                counts[t][state_index(s.state)] += 1;
            }
        }
        let mut failed_attempts = vec![0u32; spec.tasks.len()];
        for s in &subtasks {
            if let Some(&t) = names.get(s.task.as_str()) {
                failed_attempts[t] += s.failures;
            }
        }
        let mut record = record;
        if record.started_at == 0 {
            // A record from before `started_at`: its subtasks say when the first one started.
            record.started_at = subtasks.iter().map(|s| s.started_at).filter(|&t| t > 0).min().unwrap_or(0);
        }
        Job {
            record,
            subtasks,
            blocked: None,
            placements: HashMap::new(),
            waiting: BTreeMap::new(),
            waiting_epoch: BTreeMap::new(),
            planned: BTreeMap::new(),
            offsets,
            counts,
            failed_attempts,
            dependents,
        }
    }

    pub fn id(&self) -> JobId {
        self.record.id
    }

    /// Why the job waits for other jobs to succeed first (`after_jobs`), if it does.
    pub fn blocked(&self) -> Option<&str> {
        self.blocked.as_deref()
    }

    /// The job's stored record (spec, state, gangs): read-only, only the core changes it.
    pub fn record(&self) -> &JobRecord {
        &self.record
    }

    /// Every subtask of the job, task by task, rank by rank.
    pub fn subtasks(&self) -> &[Subtask] {
        &self.subtasks
    }

    /// Where each placed subtask (by index) runs.
    pub fn placements(&self) -> &HashMap<u32, PlacementRecord> {
        &self.placements
    }

    /// Why task `task`'s ready subtasks are not placed, as of the last round; `None` when
    /// nothing of it waits.
    pub fn waiting_reason(&self, task: usize) -> Option<&str> {
        self.waiting.get(&task).map(String::as_str)
    }

    pub fn spec(&self) -> &JobSpec {
        &self.record.spec
    }

    pub fn task_index(&self, name: &str) -> Option<usize> {
        self.record.spec.tasks.iter().position(|t| t.name == name)
    }

    /// Index of a subtask, checking that the task and rank exist.
    pub fn subtask_index(&self, task: &str, rank: u32) -> Result<u32, Error> {
        let t = self.task_index(task).ok_or_else(|| Error::NoTask { job: self.id(), task: task.to_string() })?;
        let replicas = self.record.spec.tasks[t].replicas;
        if rank >= replicas {
            return Err(Error::NoRank { job: self.id(), task: task.to_string(), rank, replicas });
        }
        Ok(self.offsets[t] + rank)
    }

    /// Subtasks of task `t` per state, indexed like [`SubtaskState`].
    pub fn counts(&self, t: usize) -> [u32; 7] {
        self.counts[t]
    }

    pub(super) fn task_of(&self, idx: u32) -> usize {
        // offsets is sorted; the task is the last one starting at or before idx.
        self.offsets.partition_point(|&o| o <= idx) - 1
    }

    pub(super) fn task_done(&self, t: usize) -> bool {
        self.counts[t][state_index(SubtaskState::Succeeded)] == self.record.spec.tasks[t].replicas
    }

    pub(super) fn deps_done(&self, t: usize) -> bool {
        self.record.spec.tasks[t].after.iter().all(|a| self.task_index(a).is_some_and(|j| self.task_done(j)))
    }

    /// Failed attempts of task `t`'s subtasks so far, retried or not.
    pub fn failed_attempts(&self, t: usize) -> u32 {
        self.failed_attempts[t]
    }

    /// Subtasks that have ended (succeeded, failed or cancelled).
    pub fn ended(&self) -> u32 {
        self.counts
            .iter()
            .map(|c| {
                c[state_index(SubtaskState::Succeeded)]
                    + c[state_index(SubtaskState::Failed)]
                    + c[state_index(SubtaskState::Cancelled)]
            })
            .sum()
    }

    pub fn succeeded(&self) -> u32 {
        self.counts.iter().map(|c| c[state_index(SubtaskState::Succeeded)]).sum()
    }

    pub fn total(&self) -> u32 {
        self.subtasks.len() as u32
    }

    /// The subtasks of task `t`, by index.
    pub fn members(&self, t: usize) -> Range<u32> {
        self.offsets[t]..self.offsets[t] + self.record.spec.tasks[t].replicas
    }

    /// What an attempt of subtask `idx` holds on its worker: its task's request, and the device
    /// memory it sets aside when it shares a GPU.
    pub(super) fn claim(&self, idx: u32) -> Claim {
        let task = &self.record.spec.tasks[self.task_of(idx)];
        Claim {
            resources: task.resources,
            shared_memory: task.shares_gpu().then(|| task.shared_gpu_memory()),
            slot: !task.runs_nothing(),
        }
    }

    /// The tasks that list task `t` in `after`.
    pub(super) fn dependents(&self, t: usize) -> &[usize] {
        &self.dependents[t]
    }

    /// Counts a failed attempt of task `t`.
    pub(super) fn count_failure(&mut self, t: usize) {
        self.failed_attempts[t] += 1;
    }

    /// The one place a subtask changes state: keeps the counts and the history.
    pub(super) fn set_state(&mut self, idx: u32, state: SubtaskState, now: u64, note: String) {
        let t = self.task_of(idx);
        let s = &mut self.subtasks[idx as usize];
        self.counts[t][state_index(s.state)] -= 1;
        self.counts[t][state_index(state)] += 1;
        s.state = state;
        // A subtask cancelled with its job ends now (any end time it has is an earlier
        // attempt's); one that ends by a report already carries the worker's end time.
        if state == SubtaskState::Cancelled || (state.is_final() && s.finished_at == 0) {
            s.finished_at = now;
        }
        s.history.push(Transition { state, at: now, attempt: s.attempt, worker: s.worker, note });
    }
}

/// Every job by id, their submission order, and the jobs waiting for each.
pub struct JobTable {
    jobs: HashMap<JobId, Job>,
    /// Submission sequence number → job.
    order: BTreeMap<u64, JobId>,
    next_seq: u64,
    /// Job → running jobs that wait for it to succeed (`after_jobs`). Derived.
    after: HashMap<JobId, Vec<JobId>>,
}

impl Default for JobTable {
    fn default() -> Self {
        JobTable { jobs: HashMap::new(), order: BTreeMap::new(), next_seq: 1, after: HashMap::new() }
    }
}

impl JobTable {
    pub fn get(&self, id: &JobId) -> Option<&Job> {
        self.jobs.get(id)
    }

    pub fn get_mut(&mut self, id: &JobId) -> Option<&mut Job> {
        self.jobs.get_mut(id)
    }

    pub fn contains_key(&self, id: &JobId) -> bool {
        self.jobs.contains_key(id)
    }

    /// Every job, in no order.
    pub fn values(&self) -> impl Iterator<Item = &Job> {
        self.jobs.values()
    }

    pub fn values_mut(&mut self) -> impl Iterator<Item = &mut Job> {
        self.jobs.values_mut()
    }

    /// Every job, in submission order.
    pub fn in_order(&self) -> impl Iterator<Item = &Job> {
        self.order.values().filter_map(|id| self.jobs.get(id))
    }

    /// The sequence number the next job submitted gets.
    pub fn take_seq(&mut self) -> u64 {
        let seq = self.next_seq;
        self.next_seq += 1;
        seq
    }

    /// Adds a job (submitted, or restored with the sequence number it was stored with).
    pub fn insert(&mut self, job: Job) {
        let (id, seq) = (job.record.id, job.record.seq);
        self.next_seq = self.next_seq.max(seq + 1);
        self.order.insert(seq, id);
        self.jobs.insert(id, job);
    }

    /// Job `waiter` runs after job `first`.
    pub fn wait_for(&mut self, first: JobId, waiter: JobId) {
        self.after.entry(first).or_default().push(waiter);
    }

    /// What runs on a worker, for a placer that reads it (`Candidate::running`): the kind
    /// (`kind_key`) and cores of each attempt in `placed`.
    pub fn running_on(&self, placed: &std::collections::BTreeSet<super::ledger::AttemptKey>) -> Vec<(u64, f64)> {
        placed
            .iter()
            .filter_map(|(job, idx)| {
                let j = self.jobs.get(job)?;
                let t = j.record.spec.tasks.get(j.task_of(*idx))?;
                Some((super::signature::kind_key(t), t.resources.cpu))
            })
            .collect()
    }

    /// The jobs that wait for `first`, forgotten here: `first` has ended.
    pub fn take_waiters(&mut self, first: &JobId) -> Vec<JobId> {
        self.after.remove(first).unwrap_or_default()
    }
}

impl std::ops::Index<&JobId> for JobTable {
    type Output = Job;

    fn index(&self, id: &JobId) -> &Job {
        &self.jobs[id]
    }
}
