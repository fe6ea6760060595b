//! GPU attempts and what the core learns from them (issue 16): a task's vector for the
//! interference model, which sharing attempts met on a device, and the runs handed to the GPU
//! learner when they end.
//!
//! Who met whom is approximate in one direction only: an attempt's peers are every sharing
//! attempt that was on its device at some moment of its run, so a peer that stayed briefly
//! counts as much as one that stayed throughout (the model learns an average over such mixes).

use std::collections::BTreeSet;

use plexus_proto::{JobId, WorkerId};

use super::gang_book::GangBook;
use super::ledger::Worker;
use super::signature::signature;
use super::state::Core;
use crate::gpu::TaskVector;
use crate::gpu::learner::{GpuLearner, GpuRun};
use crate::spec::TaskSpec;

impl Core {
    /// Replaces the GPU learner (the coordinator's learned model).
    pub fn set_gpu_learner(&mut self, learner: Box<dyn GpuLearner>) {
        self.gpu_learner = learner;
    }

    pub fn gpu_learner(&self) -> &dyn GpuLearner {
        self.gpu_learner.as_ref()
    }

    /// The vector of `task` on a device of `device_memory` bytes, with what was measured of its
    /// signature.
    pub fn task_vector(&self, task: &TaskSpec, device_memory: u64) -> TaskVector {
        let p = task.gpu_profile;
        let v = TaskVector {
            gpu_memory: p.map_or(0, |p| p.memory),
            device_memory,
            utilisation: p.and_then(|p| p.utilisation).unwrap_or(0.0),
            solo_ms: 0.0,
            model_bytes: p.map_or(0, |p| p.model_bytes),
            signature: signature(task),
        };
        self.gpu_learner.complete(v)
    }

    /// The memory of device `gpu` of worker `wid` (0 when unknown).
    pub(super) fn device_memory(&self, wid: WorkerId, gpu: u32) -> u64 {
        self.workers
            .get(&wid)
            .and_then(|w| w.record().capacity.gpus.iter().find(|g| g.index == gpu))
            .map_or(0, |g| g.memory)
    }

    /// A sharing attempt joined device `gpu` of `wid`: it and every sharing attempt already
    /// there have met.
    pub(super) fn met_on_gpu(&mut self, wid: WorkerId, key: (JobId, u32), gpu: u32) {
        let Some(w) = self.workers.get(&wid) else { return };
        let there: Vec<(JobId, u32)> = w
            .placed()
            .iter()
            .copied()
            .filter(|&p| p != key)
            .filter(|(j, i)| {
                self.jobs.get(j).is_some_and(|job| {
                    job.record.spec.tasks[job.task_of(*i)].shares_gpu()
                        && job.subtasks[*i as usize].gpus.first() == Some(&gpu)
                })
            })
            .collect();
        self.workers.get_mut(&wid).expect("exists").met(key, there);
    }

    /// A GPU attempt ended well on `wid`: its run goes to the learner. Call before its worker
    /// is released (its device is still recorded on the subtask).
    pub(super) fn learn_gpu_run(&mut self, (job, idx): (JobId, u32), wid: WorkerId) {
        let Some(j) = self.jobs.get(&job) else { return };
        let task = &j.record.spec.tasks[j.task_of(idx)];
        if task.resources.gpu == 0 && !task.shares_gpu() {
            return;
        }
        let s = &j.subtasks[idx as usize];
        let device = s.gpus.first().copied().unwrap_or(0);
        let memory = self.device_memory(wid, device);
        let (measured_ms, per_iteration) = if s.iter_ms > 0.0 {
            (s.iter_ms, true)
        } else {
            (s.finished_at.saturating_sub(s.started_at) as f64, false)
        };
        let peers: BTreeSet<(JobId, u32)> =
            self.workers.get(&wid).and_then(|w| w.gpu_peers().get(&(job, idx))).cloned().unwrap_or_default();
        let peers: Vec<TaskVector> = peers
            .into_iter()
            .filter_map(|(pj, pi)| {
                self.jobs.get(&pj).map(|pj| self.task_vector(&pj.record.spec.tasks[pj.task_of(pi)], memory))
            })
            .collect();
        let run = GpuRun { task: self.task_vector(task, memory), measured_ms, per_iteration, peers };
        self.gpu_learner.observe(&run);
    }
}

/// A GPU gang's members placed by the search: (member, worker, device, its decision's reason).
pub(super) type GpuPlan = Vec<(u32, WorkerId, u32, String)>;

impl Core {
    /// Plans where members `todo` of a GPU gang go (each asking one whole GPU, or one shared
    /// GPU), by seed 002's objective `α·I + β·C` (weights [`CoreConfig::gpu_weights`]) searched
    /// with SFLA over the GPUs of connected workers not `held`, with greedy's objective for
    /// comparison in every reason. `distinct`: at most one member per worker (a collective's
    /// members each run beside their own worker's data plane). `None` when the members are not
    /// all one GPU task, or no feasible assignment exists now (the caller falls back to its
    /// member-by-member placement).
    ///
    /// [`CoreConfig::gpu_weights`]: super::CoreConfig::gpu_weights
    pub(super) fn plan_gpu_gang(&self, job: JobId, todo: &[u32], held: &GangBook, distinct: bool) -> Option<GpuPlan> {
        use crate::gpu::objective::{Evaluator, Problem};
        use crate::gpu::search::{SflaParams, greedy, sfla};
        use crate::gpu::topology::ClusterTopology;

        let j = self.jobs.get(&job)?;
        let t = j.task_of(*todo.first()?);
        if todo.iter().any(|&i| j.task_of(i) != t) {
            return None;
        }
        let task = &j.record.spec.tasks[t];
        let share = task.shares_gpu().then(|| task.shared_gpu_memory());
        if share.is_none() && task.resources.gpu != 1 {
            return None;
        }
        let k = todo.len();
        let (places, cands) = self.gpu_candidates(task, k, held, distinct);
        if cands.is_empty() {
            return None;
        }
        let memory = places.first().map_or(0, |(w, g)| self.device_memory(*w, *g));
        let member = self.task_vector(task, memory);
        let topo = ClusterTopology::from_capacities(
            self.workers.values().map(|w| (w.id(), &w.record().capacity)),
            self.config.msc,
        );
        let index: Vec<usize> = places.iter().map(|(w, g)| topo.index_of(*w, *g).unwrap_or(usize::MAX)).collect();
        let msc = |a: usize, b: usize| match (index[a], index[b]) {
            (x, y) if x == usize::MAX || y == usize::MAX => topo.costs().sys,
            (x, y) => topo.msc(x, y),
        };
        let problem = Problem::new(vec![member; k], cands, msc, self.config.gpu_weights).ok()?;
        let mut eval = Evaluator::new(&problem, self.gpu_learner.as_ref());
        let seed = u64::from_le_bytes(job.as_bytes()[..8].try_into().unwrap_or_default()) ^ u64::from(todo[0]);
        let best = sfla(&mut eval, &SflaParams::default(), seed).ok()?;
        // The search's cost as work done (objective evaluations), not as time: the core reads
        // no clock, and a count is the same on every replay of the same decisions.
        let evaluations = eval.evaluations();
        let alternative = greedy(&mut eval).ok().map(|g| g.objective);
        let b = eval.breakdown(&best.assignment);
        let n = problem.gpus().len();
        Some(
            todo.iter()
                .zip(&best.assignment)
                .enumerate()
                .map(|(m, (&idx, &c))| {
                    let (wid, g) = places[c];
                    let reason = format!(
                        "GPU gang placed by SFLA over {n} candidate GPUs{} in {evaluations} objective evaluations: this member on GPU {g}, predicted slowdown {:.3} ({}); \
                         the group's I = {:.3}, C = {:.3} (normalised {:.3}), objective α·I + β·C = {:.3} (α = {}, β = {}); greedy's would be {}",
                        if distinct { " (one member per worker)" } else { "" },
                        b.slowdowns[m],
                        self.gpu_learner.name(),
                        b.interference,
                        b.communication,
                        b.communication_norm,
                        b.objective,
                        problem.weights().alpha,
                        problem.weights().beta,
                        alternative.map_or("infeasible".to_string(), |o| format!("{o:.3}")),
                    );
                    (idx, wid, g, reason)
                })
                .collect(),
        )
    }

    /// The GPUs a GPU gang's `k` members may go to, as (worker, device) places and the search's
    /// candidates in the same order: every free (or, for members sharing `share` bytes,
    /// shareable) device of a connected worker not `held`, with the sharing attempts already
    /// resident there, and members per worker bounded by its cores and memory. `distinct`: one
    /// device per worker, taking one member: its lowest free device (a free device has no
    /// residents, and every device of a node is as far from another node), or, for sharing
    /// members, its least shared device with room.
    fn gpu_candidates(
        &self,
        task: &TaskSpec,
        k: usize,
        held: &GangBook,
        distinct: bool,
    ) -> (Vec<(WorkerId, u32)>, Vec<crate::gpu::objective::GpuCandidate>) {
        let share = task.shares_gpu().then(|| task.shared_gpu_memory());
        let mut host = task.resources;
        host.gpu = 0;
        use crate::gpu::objective::GpuCandidate;

        // Candidate GPUs: (worker, device, candidate), members per worker bounded by its cores
        // and memory.
        let mut places: Vec<(WorkerId, u32)> = Vec::new();
        let mut cands: Vec<GpuCandidate> = Vec::new();
        let eligible =
            |w: &&Worker| w.placeable() && !held.is_held(&w.id()) && w.record().capacity.admits(&task.constraints);
        for w in self.workers.values().filter(eligible) {
            let mut free = w.available();
            free.gpu = 0;
            let mut fit = 0usize;
            let k = if distinct { k.min(1) } else { k };
            while fit < k && fit < w.free_slots() as usize && host.fits_in(&free) {
                free = free.minus(&host);
                fit += 1;
            }
            if fit == 0 {
                continue;
            }
            let mut devices: Vec<(u32, u64)> = match share {
                Some(memory) => w
                    .shareable_gpus(memory)
                    .into_iter()
                    .map(|g| {
                        let total = self.device_memory(w.id(), g);
                        let used = w.gpu_shared().get(&g).map_or(0, |s| s.0);
                        (g, if total == 0 { u64::MAX } else { total - used.min(total) })
                    })
                    .collect(),
                // (Every free device: a worker's cores bound how many members it takes, which a
                // plan that puts more there does not get: its reservations stop there.)
                None => w.free_devices().into_iter().take(w.available().gpu as usize).map(|g| (g, u64::MAX)).collect(),
            };
            if distinct {
                let sharers = |g: u32| w.gpu_shared().get(&g).map_or(0, |s| s.1);
                let best = devices.iter().copied().min_by_key(|&(g, free)| (sharers(g), std::cmp::Reverse(free), g));
                devices = best.into_iter().collect();
            }
            for (g, free_memory) in devices {
                let memory = self.device_memory(w.id(), g);
                let resident: Vec<TaskVector> = w
                    .placed()
                    .iter()
                    .filter_map(|(pj, pi)| {
                        let job = self.jobs.get(pj)?;
                        let pt = &job.record.spec.tasks[job.task_of(*pi)];
                        (pt.shares_gpu() && job.subtasks[*pi as usize].gpus.first() == Some(&g))
                            .then(|| self.task_vector(pt, memory))
                    })
                    .collect();
                places.push((w.id(), g));
                cands.push(GpuCandidate { resident, free_memory, slots: if share.is_some() { fit } else { 1 } });
            }
        }
        (places, cands)
    }
}
