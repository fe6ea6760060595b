//! `plexus submit --dry-run`: what a job would do if it were submitted now, worked out on the
//! core as it is and changing nothing — whether it would be refused (the same checks as a
//! submit), and for each task how many of its replicas would start at once and where, or why
//! they would wait; and what is ahead of it in its queue.
//!
//! Replicas are laid out greedily on the live, undrained workers' free room (each goes to the
//! worker with the most free cores that admits its constraints; a collective's members one per
//! worker),
//! root tasks sharing that room; a task that runs after others is shown as waiting for them. The
//! placer itself may choose other workers; the counts are what fits.

use plexus_proto::{JobState, Resources, SubtaskState, WorkerId};

use super::ledger::Worker;
use super::state::Core;
use crate::error::Error;
use crate::spec::{JobSpec, TaskSpec};

/// The most workers a task's plan names.
const SHOWN_WORKERS: usize = 4;
/// The most replicas one dry run lays out, all tasks together: each costs a pass over the live
/// workers on the engine's thread, so a job of 100,000 replicas on thousands of workers must not
/// hold it for long. Past it, a task's plan says how many it did not look at.
pub const MAX_LAID_OUT: u32 = 10_000;

/// What submitting a job now would do.
#[derive(Clone, Debug, PartialEq)]
pub struct DryRun {
    pub subtasks: u32,
    pub queue: String,
    pub priority: i64,
    pub tasks: Vec<TaskPlan>,
    /// Ready subtasks of other jobs that its queue would place first (a higher priority, or the
    /// same and older), and how many jobs they are of.
    pub ahead: u32,
    pub ahead_jobs: u32,
    /// Cores its root tasks ask for at once, and what the live workers offer in all.
    pub cores: f64,
    pub cluster_cores: f64,
}

/// One task of a dry run.
#[derive(Clone, Debug, PartialEq)]
pub struct TaskPlan {
    pub task: String,
    pub replicas: u32,
    pub resources: Resources,
    /// Replicas that would start now, and (some of) the workers they would go to.
    pub start_now: u32,
    pub workers: Vec<WorkerId>,
    /// Why the others (or all) would wait; empty when every replica would start.
    pub waits: String,
}

impl Core {
    /// What submitting `spec` now would do; the error a submit would answer when it would be
    /// refused. Nothing changes.
    pub fn dry_run(&self, spec: &JobSpec) -> Result<DryRun, Error> {
        if let Some(why) = self.unsatisfiable(spec) {
            return Err(Error::Unsatisfiable(why));
        }
        let blocked: Vec<String> = spec
            .after_jobs
            .iter()
            .filter(|a| self.jobs.get(a).map(|j| j.record.state) != Some(JobState::Succeeded))
            .map(ToString::to_string)
            .collect();
        let live: Vec<&Worker> = self.workers.values().filter(|w| w.placeable()).collect();
        // Free room per live worker, shared by the root tasks as they are laid out.
        let mut room: Vec<(WorkerId, Resources, &Worker)> = live.iter().map(|w| (w.id(), w.available(), *w)).collect();
        let mut tasks = Vec::with_capacity(spec.tasks.len());
        let mut budget = MAX_LAID_OUT;
        for t in &spec.tasks {
            let plan = if !blocked.is_empty() {
                waiting(t, format!("blocked: after job {} (after_jobs), not succeeded yet", blocked.join(", ")))
            } else if !t.after.is_empty() {
                waiting(t, format!("after task {}: starts when it succeeds", t.after.join(", ")))
            } else {
                self.lay_out(t, &mut room, &mut budget)
            };
            tasks.push(plan);
        }
        let (ahead, ahead_jobs) = self.ahead_of(spec);
        let roots = spec.tasks.iter().filter(|t| t.after.is_empty());
        Ok(DryRun {
            subtasks: spec.tasks.iter().map(|t| t.replicas).sum(),
            queue: spec.queue.clone(),
            priority: spec.priority,
            tasks,
            ahead,
            ahead_jobs,
            cores: roots.map(|t| t.resources.cpu * f64::from(t.replicas)).sum(),
            cluster_cores: live.iter().map(|w| f64::from(w.record().capacity.cpus)).sum(),
        })
    }

    /// Lays `t`'s replicas out on `room`, most free cores first, taking what they use; at most
    /// `budget` of them, which it spends.
    fn lay_out(&self, t: &TaskSpec, room: &mut [(WorkerId, Resources, &Worker)], budget: &mut u32) -> TaskPlan {
        let r = t.resources;
        let one_per_worker = t.collective.is_some();
        let mut used: Vec<WorkerId> = Vec::new();
        let mut start_now = 0;
        // At most what is left of the dry run's budget (each replica is a pass over the workers).
        let looked = t.replicas.min(*budget);
        *budget -= looked;
        for _ in 0..looked {
            let best = room
                .iter_mut()
                .filter(|(id, free, w)| {
                    r.fits_in(free)
                        && w.record().capacity.admits(&t.constraints)
                        && !(one_per_worker && used.contains(id))
                })
                .max_by(|a, b| a.1.cpu.total_cmp(&b.1.cpu).then(b.0.cmp(&a.0)));
            let Some((id, free, _)) = best else { break };
            free.sub(&r);
            start_now += 1;
            if !used.contains(id) {
                used.push(*id);
            }
        }
        let mut plan = waiting(t, String::new());
        plan.start_now = start_now;
        plan.workers = used.into_iter().take(SHOWN_WORKERS).collect();
        if looked < t.replicas && start_now == looked {
            plan.waits = format!(
                "the dry run laid out {looked} of its {} replicas (at most {MAX_LAID_OUT} per dry run); the rest were not looked at",
                t.replicas
            );
        } else if start_now < t.replicas {
            let min = t.gang.as_ref().map_or(0, |g| g.min_members);
            plan.waits = match self.constraints_unmet(t) {
                Some(why) => why,
                None if min > start_now => format!(
                    "its gang needs {min} members at once and {start_now} fit now: it would wait for room (cpu={} memory={} gpu={} each)",
                    r.cpu,
                    bytesize::ByteSize(r.memory).display().iec(),
                    r.gpu
                ),
                None => format!(
                    "{} would wait for room (cpu={} memory={} gpu={} each)",
                    t.replicas - start_now,
                    r.cpu,
                    bytesize::ByteSize(r.memory).display().iec(),
                    r.gpu
                ),
            };
        }
        plan
    }

    /// Ready subtasks, and their jobs, that `spec`'s queue would place before it: of running
    /// jobs in the same queue with a higher priority, or the same (they are older).
    fn ahead_of(&self, spec: &JobSpec) -> (u32, u32) {
        let (mut subtasks, mut jobs) = (0, 0);
        for j in self.jobs.values() {
            let r = &j.record;
            if r.state != JobState::Running || r.spec.queue != spec.queue || r.spec.priority < spec.priority {
                continue;
            }
            let ready: u32 = (0..r.spec.tasks.len()).map(|t| j.counts(t)[SubtaskState::Ready as usize]).sum();
            if ready > 0 {
                subtasks += ready;
                jobs += 1;
            }
        }
        (subtasks, jobs)
    }
}

fn waiting(t: &TaskSpec, waits: String) -> TaskPlan {
    TaskPlan {
        task: t.name.clone(),
        replicas: t.replicas,
        resources: t.resources,
        start_now: 0,
        workers: Vec::new(),
        waits,
    }
}
