//! A GPU training workload in simulated time (issue 16's job-completion-time benchmark): gangs
//! of data-parallel trainers arrive on a simulated GPU cluster, are placed by one of the GPU
//! searches of [`plexus_scheduler::gpu::search`], run a fixed number of synchronised iterations
//! and leave. The figure is each job's completion time (JCT: end − arrival, waiting included).
//!
//! # The model
//! - **The cluster** is a [`GpuCluster`] drawn from the workload's seed. Its resident tasks
//!   (inference services and single-GPU trainers) stay for the whole run; the GPUs they hold
//!   exclusively are never candidates.
//! - **A job** is a gang of `m` alike members of one training [`Kind`] (its profile gives the
//!   solo iteration time, the model size B and the GPU memory), a number of iterations, and
//!   `gpu_share`. A sharing gang may go on any GPU nobody holds exclusively, at most
//!   `members_per_gpu` of its members on one GPU, within the GPU's free memory; an exclusive gang
//!   only on GPUs with nothing on them, one member each, which it then holds until it ends.
//! - **Arrivals** are Poisson; the rate is set so that the offered work (Σ members × solo run
//!   time) is `load` × the GPUs not held by resident tasks × the time arrivals span.
//! - **Placement** is strict FIFO: when a job arrives or one ends, the head of the queue is
//!   placed if a feasible assignment exists — the placer's search on the cluster as it is then
//!   (resident tasks plus the members of running gangs), with the placer's model — then the next,
//!   until one does not fit; the rest wait. A job that would not fit even on the cluster with no
//!   gang running is never queued (it would block the queue forever); it is reported as
//!   unplaceable.
//! - **An iteration** of a running job takes
//!
//!   ```text
//!   iter_ms = max_i solo_ms · sd_i  +  max_i Σ_{j≠i} msc(g_i, g_j) · (2B/m) / BW₁ · 1000
//!   ```
//!
//!   `sd_i` is the ground truth's slowdown of member i among all the tasks on its GPU `g_i`
//!   (resident tasks, members of other gangs, and this gang's other members there; 1 alone):
//!   data-parallel members synchronise every iteration, so the slowest sets the pace. The second
//!   term is the gradient allreduce the objective's `muds` describes (each member sends 2B/m to
//!   every other, seed 003's direct reduce-scatter + all-gather): a member's transfers share its
//!   links, so its time is the sum over its peers, and the slowest member sets the pace. `BW₁`
//!   ([`MSC_UNIT_BYTES_PER_S`]) is the bandwidth that msc 1 stands for (NV2, see
//!   [`MscLevels`](super::MscLevels)); members on one GPU exchange for free (msc 0).
//!   Not modelled: compute overlapping communication, and contention between gangs on the
//!   network (only on GPUs).
//! - **Progress** is `1/iter_ms` iterations per ms between events; `iter_ms` is recomputed for
//!   every job sharing a GPU with a job that starts or ends, so a job runs slower while others
//!   share its GPUs and faster when they leave.
//!
//! Times are milliseconds of simulated time (f64). Nothing reads a clock; the only randomness is
//! the workload's seeded generator and the searches' seeds (the workload seed mixed with the job
//! id), so the same workload, truth and placer give the same report.

use std::collections::VecDeque;

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

use plexus_scheduler::gpu::objective::{Evaluator, GpuCandidate, Problem, Weights};
use plexus_scheduler::gpu::search::{self, SflaParams};
use plexus_scheduler::gpu::{InterferenceModel, TaskVector};

use super::cluster::{GpuCluster, GpuClusterConfig, gang};
use super::truth::{GroundTruth, Kind};
use crate::SimError;

/// The bandwidth msc 1 stands for, bytes per second: NV2 on a V100-generation machine
/// (≈ 50 GB/s, the unit [`MscLevels`](super::MscLevels) is relative to).
pub const MSC_UNIT_BYTES_PER_S: f64 = 50e9;

/// The cluster and the workload mix to draw.
#[derive(Clone, Debug, PartialEq)]
pub struct JctConfig {
    pub cluster: GpuClusterConfig,
    /// Jobs to draw.
    pub jobs: usize,
    /// Offered work ÷ (usable GPUs × the time arrivals span); see the module documentation.
    pub load: f64,
    /// Share of gangs that set `gpu_share`.
    pub share: f64,
    /// Gang sizes, one drawn uniformly per job (repeat a size to weigh it more).
    pub members: Vec<usize>,
    /// A job's solo run time (iterations × solo iteration time) in seconds, log-uniform in this
    /// range.
    pub solo_s: (f64, f64),
}

impl JctConfig {
    /// The benchmark's mix on `gpus` GPUs (the clusters of [`GpuClusterConfig::new`], about half
    /// the GPUs running resident tasks) at `load`: 200 gangs of 2, 4, 8 or 16 members, half of
    /// them sharing GPUs, each running 5 minutes to 1 hour alone — the short end of the training
    /// jobs of the traces Gandiva and Lucid replay (most jobs are short, a few long).
    pub fn new(gpus: usize, load: f64) -> JctConfig {
        JctConfig {
            cluster: GpuClusterConfig::new(gpus),
            jobs: 200,
            load,
            share: 0.5,
            members: vec![2, 4, 8, 16],
            solo_s: (300.0, 3_600.0),
        }
    }

    fn validate(&self) -> Result<(), SimError> {
        let bad = |m: String| Err(SimError::JctWorkload(m));
        if !(self.load.is_finite() && self.load > 0.0) {
            return bad(format!("load {} must be finite and > 0", self.load));
        }
        if !(0.0..=1.0).contains(&self.share) {
            return bad(format!("share {} must be in [0, 1]", self.share));
        }
        if self.members.is_empty() || self.members.contains(&0) {
            return bad(format!("gang sizes {:?}: at least one, each ≥ 1", self.members));
        }
        let (a, b) = self.solo_s;
        if !(a.is_finite() && b.is_finite() && a > 0.0 && b >= a) {
            return bad(format!("solo run time range {:?} s must be 0 < low ≤ high", self.solo_s));
        }
        if self.cluster.nodes.is_empty() {
            return bad("the cluster has no nodes".into());
        }
        Ok(())
    }
}

/// One gang of the workload.
#[derive(Clone, Debug, PartialEq)]
pub struct GangJob {
    /// Its index in [`JctWorkload::jobs`].
    pub id: usize,
    pub arrival_ms: f64,
    pub kind: Kind,
    pub members: usize,
    /// `gpu_share`: whether its members may share GPUs (with anything not held exclusively).
    pub share: bool,
    pub iterations: u64,
}

/// A cluster and the gangs that arrive on it, in arrival order.
#[derive(Clone, Debug, PartialEq)]
pub struct JctWorkload {
    pub cluster: GpuCluster,
    pub jobs: Vec<GangJob>,
    /// Seeds the searches (mixed with each job's id).
    pub seed: u64,
}

impl JctWorkload {
    /// Draws the cluster and the jobs from `seed`.
    pub fn generate(config: &JctConfig, seed: u64) -> Result<JctWorkload, SimError> {
        config.validate()?;
        let cluster = GpuCluster::generate(&config.cluster, seed);
        // A stream of its own, so the jobs do not change when the cluster's draws do.
        let mut rng = StdRng::seed_from_u64(seed ^ 0x6a63_745f_6a6f_6273);
        let usable = cluster.gpus.iter().filter(|g| !g.exclusive).count().max(1) as f64;
        let (a, b) = config.solo_s;
        // The mean of a log-uniform on [a, b].
        let mean_s = if b > a { (b - a) / (b / a).ln() } else { a };
        let mean_members = config.members.iter().sum::<usize>() as f64 / config.members.len() as f64;
        let per_ms = config.load * usable / (mean_members * mean_s * 1e3);
        let mut at = 0.0;
        let jobs = (0..config.jobs)
            .map(|id| {
                at += -(1.0 - rng.random::<f64>()).ln() / per_ms;
                let kind = Kind::TRAINING[rng.random_range(0..Kind::TRAINING.len())];
                let members = config.members[rng.random_range(0..config.members.len())];
                let share = rng.random::<f64>() < config.share;
                let solo_ms = a * (b / a).powf(rng.random::<f64>()) * 1e3;
                let iterations = ((solo_ms / kind.profile().solo_ms).round() as u64).max(1);
                GangJob { id, arrival_ms: at, kind, members, share, iterations }
            })
            .collect();
        Ok(JctWorkload { cluster, jobs, seed })
    }

    fn validate(&self) -> Result<(), SimError> {
        for (k, j) in self.jobs.iter().enumerate() {
            if j.id != k {
                return Err(SimError::JctWorkload(format!("job {k} has id {}; ids are the jobs' indices", j.id)));
            }
            if j.members == 0 || j.iterations == 0 || !(j.arrival_ms.is_finite() && j.arrival_ms >= 0.0) {
                return Err(SimError::JctWorkload(format!(
                    "job {k}: {} members, {} iterations, arrival {} ms",
                    j.members, j.iterations, j.arrival_ms
                )));
            }
            if k > 0 && j.arrival_ms < self.jobs[k - 1].arrival_ms {
                return Err(SimError::JctWorkload(format!(
                    "job {k} arrives at {} ms, before job {}",
                    j.arrival_ms,
                    k - 1
                )));
            }
        }
        Ok(())
    }
}

/// Which search a placer runs.
#[derive(Clone, Debug, PartialEq)]
pub enum Search {
    Sfla(SflaParams),
    Greedy,
    TopologyGreedy,
    Random,
}

/// A search with the interference model it consults.
pub struct Placer<'a> {
    pub name: String,
    pub search: Search,
    pub model: &'a dyn InterferenceModel,
    pub weights: Weights,
}

/// What happened to one placed job.
#[derive(Clone, Debug, PartialEq)]
pub struct JobOutcome {
    pub id: usize,
    pub arrival_ms: f64,
    pub start_ms: f64,
    pub end_ms: f64,
    /// The cluster GPU of each member.
    pub gpus: Vec<usize>,
    /// Its solo run time (iterations × solo iteration time, no communication), ms.
    pub solo_ms: f64,
}

impl JobOutcome {
    pub fn jct_ms(&self) -> f64 {
        self.end_ms - self.arrival_ms
    }
}

/// A run's outcomes, in the order the jobs ended.
#[derive(Clone, Debug, PartialEq)]
pub struct JctReport {
    pub placer: String,
    pub jobs: Vec<JobOutcome>,
    /// Jobs that would not fit even with no gang running (never queued).
    pub unplaceable: Vec<usize>,
    /// Searches run (one per placed job: a search runs only once the gang fits).
    pub searches: u64,
}

impl JctReport {
    fn mean(&self, f: impl Fn(&JobOutcome) -> f64) -> f64 {
        if self.jobs.is_empty() { 0.0 } else { self.jobs.iter().map(f).sum::<f64>() / self.jobs.len() as f64 }
    }

    pub fn mean_jct_ms(&self) -> f64 {
        self.mean(JobOutcome::jct_ms)
    }

    /// The 95th percentile of JCT (nearest rank).
    pub fn p95_jct_ms(&self) -> f64 {
        let mut v: Vec<f64> = self.jobs.iter().map(JobOutcome::jct_ms).collect();
        if v.is_empty() {
            return 0.0;
        }
        v.sort_by(f64::total_cmp);
        v[((0.95 * v.len() as f64).ceil() as usize).clamp(1, v.len()) - 1]
    }

    /// From the first arrival to the last end.
    pub fn makespan_ms(&self) -> f64 {
        let first = self.jobs.iter().map(|j| j.arrival_ms).fold(f64::INFINITY, f64::min);
        let last = self.jobs.iter().map(|j| j.end_ms).fold(0.0, f64::max);
        if self.jobs.is_empty() { 0.0 } else { last - first }
    }

    pub fn mean_wait_ms(&self) -> f64 {
        self.mean(|j| j.start_ms - j.arrival_ms)
    }

    /// Mean of (end − start) ÷ solo run time: what interference and synchronisation cost.
    pub fn mean_stretch(&self) -> f64 {
        self.mean(|j| (j.end_ms - j.start_ms) / j.solo_ms)
    }
}

/// A running job: iterations done by `since`, and the current iteration time.
#[derive(Clone, Debug)]
struct Run {
    gpus: Vec<usize>,
    start_ms: f64,
    done: f64,
    since: f64,
    iter_ms: f64,
}

/// The synchronisation part of an iteration of a gang of `kind` with a member on each of `gpus`,
/// ms: `max_i Σ_{j≠i} msc(g_i, g_j) · (2B/m) / BW₁` (see the module documentation).
pub fn sync_ms(cluster: &GpuCluster, kind: Kind, gpus: &[usize]) -> f64 {
    let m = gpus.len();
    let per_pair = 2.0 * kind.profile().model_bytes as f64 / m as f64;
    let worst =
        gpus.iter().map(|&a| gpus.iter().map(|&b| cluster.msc(a, b)).sum::<f64>() * per_pair).fold(0.0, f64::max);
    worst / MSC_UNIT_BYTES_PER_S * 1e3
}

/// The simulation's state.
struct Sim<'w> {
    w: &'w JctWorkload,
    truth: &'w GroundTruth,
    /// Per GPU, the running jobs with a member on it, once per member.
    on_gpu: Vec<Vec<usize>>,
    /// Per GPU, whether a resident or an exclusive gang holds it.
    held: Vec<bool>,
    runs: Vec<Option<Run>>,
    running: Vec<usize>,
}

impl Sim<'_> {
    fn device(&self) -> u64 {
        self.w.cluster.config.device_memory
    }

    /// The tasks on GPU g: its residents, then the members of running gangs.
    fn tasks(&self, g: usize) -> Vec<TaskVector> {
        let mut t = self.w.cluster.gpus[g].resident.clone();
        t.extend(self.on_gpu[g].iter().map(|&j| self.w.jobs[j].kind.task(self.device())));
        t
    }

    fn free_memory(&self, g: usize) -> u64 {
        self.device().saturating_sub(self.tasks(g).iter().map(|t| t.gpu_memory).sum())
    }

    /// The GPUs job j may use now, with how many of its members each can take.
    fn candidates(&self, j: usize, gangs_running: bool) -> Vec<(usize, usize)> {
        let job = &self.w.jobs[j];
        let memory = job.kind.profile().gpu_memory;
        let slots = if job.share { self.w.cluster.config.members_per_gpu } else { 1 };
        (0..self.w.cluster.gpus.len())
            .filter_map(|g| {
                let gpu = &self.w.cluster.gpus[g];
                let (held, others) =
                    if gangs_running { (self.held[g], !self.on_gpu[g].is_empty()) } else { (gpu.exclusive, false) };
                if held || (!job.share && (others || !gpu.resident.is_empty())) {
                    return None;
                }
                let free = if gangs_running { self.free_memory(g) } else { gpu.free_memory() };
                let k = slots.min((free / memory.max(1)) as usize);
                (k > 0).then_some((g, k))
            })
            .collect()
    }

    /// Places job j if it fits now: `None` when it does not.
    fn place(&self, j: usize, placer: &Placer<'_>) -> Result<Option<Vec<usize>>, SimError> {
        let job = &self.w.jobs[j];
        // Members are alike, so the gang fits exactly when the candidates' room adds up.
        let room = self.candidates(j, true);
        if room.iter().map(|&(_, k)| k).sum::<usize>() < job.members {
            return Ok(None);
        }
        let slots = if job.share { self.w.cluster.config.members_per_gpu } else { 1 };
        let ids: Vec<usize> = room.iter().map(|&(g, _)| g).collect();
        let gpus = ids
            .iter()
            .map(|&g| GpuCandidate { resident: self.tasks(g), free_memory: self.free_memory(g), slots })
            .collect();
        let cluster = &self.w.cluster;
        let fail = |error| SimError::Search { placer: placer.name.clone(), job: j, error };
        let problem = Problem::new(
            gang(job.kind, job.members, self.device()),
            gpus,
            |a, b| cluster.msc(ids[a], ids[b]),
            placer.weights,
        )
        .map_err(fail)?;
        let mut eval = Evaluator::new(&problem, placer.model);
        let seed = self.w.seed ^ (j as u64).wrapping_mul(0x9e37_79b9_7f4a_7c15);
        let found = match &placer.search {
            Search::Sfla(params) => search::sfla(&mut eval, params, seed),
            Search::Greedy => search::greedy(&mut eval),
            Search::TopologyGreedy => search::topology_greedy(&mut eval),
            Search::Random => search::random(&mut eval, seed),
        }
        .map_err(fail)?;
        problem.check(&found.assignment).map_err(fail)?;
        Ok(Some(found.assignment.iter().map(|&k| ids[k]).collect()))
    }

    /// Job j's iteration time as things stand (see the module documentation).
    fn iteration_ms(&self, j: usize, gpus: &[usize]) -> f64 {
        let job = &self.w.jobs[j];
        let p = job.kind.profile();
        let mut compute = 0.0f64;
        for (k, &g) in gpus.iter().enumerate() {
            if gpus[..k].contains(&g) {
                continue;
            }
            let tasks = self.tasks(g);
            let residents = self.w.cluster.gpus[g].resident.len();
            let at = residents
                + self.on_gpu[g].iter().position(|&o| o == j).expect("a member of a running job is on its GPU");
            compute = compute.max(p.solo_ms * self.truth.predict(&tasks)[at]);
        }
        compute + sync_ms(&self.w.cluster, job.kind, gpus)
    }

    fn end_ms(&self, j: usize) -> f64 {
        let r = self.runs[j].as_ref().expect("a running job has a run");
        r.since + (self.w.jobs[j].iterations as f64 - r.done).max(0.0) * r.iter_ms
    }

    /// Brings every running job sharing a GPU in `gpus` up to `now` and recomputes its
    /// iteration time.
    fn recompute(&mut self, gpus: &[usize], now: f64) {
        let mut affected: Vec<usize> = gpus.iter().flat_map(|&g| self.on_gpu[g].iter().copied()).collect();
        affected.sort_unstable();
        affected.dedup();
        for j in affected {
            let run = self.runs[j].as_ref().expect("a job on a GPU is running");
            let gpus = run.gpus.clone();
            let iter_ms = self.iteration_ms(j, &gpus);
            let r = self.runs[j].as_mut().expect("a job on a GPU is running");
            r.done += (now - r.since) / r.iter_ms;
            r.since = now;
            r.iter_ms = iter_ms;
        }
    }
}

/// Runs the workload with one placer; the ground truth decides how fast everything runs.
pub fn simulate(w: &JctWorkload, truth: &GroundTruth, placer: &Placer<'_>) -> Result<JctReport, SimError> {
    w.validate()?;
    let n = w.cluster.gpus.len();
    let mut sim = Sim {
        w,
        truth,
        on_gpu: vec![Vec::new(); n],
        held: w.cluster.gpus.iter().map(|g| g.exclusive).collect(),
        runs: vec![None; w.jobs.len()],
        running: Vec::new(),
    };
    let mut report = JctReport { placer: placer.name.clone(), jobs: Vec::new(), unplaceable: Vec::new(), searches: 0 };
    let mut queue: VecDeque<usize> = VecDeque::new();
    let mut next = 0;
    loop {
        // The running set is bounded by the cluster (every job holds a GPU), not by the queue.
        let ending =
            sim.running.iter().map(|&j| (sim.end_ms(j), j)).min_by(|a, b| a.0.total_cmp(&b.0).then(a.1.cmp(&b.1)));
        let arrival = w.jobs.get(next).map(|j| j.arrival_ms);
        // An end at the same time as an arrival goes first: it frees room.
        let now = match (arrival, ending) {
            (None, None) => break,
            (Some(t), e) if e.is_none_or(|(end, _)| t < end) => {
                let job = &w.jobs[next];
                let fits_alone = sim.candidates(next, false).iter().map(|&(_, k)| k).sum::<usize>() >= job.members;
                if fits_alone {
                    queue.push_back(next);
                } else {
                    report.unplaceable.push(next);
                }
                next += 1;
                t
            }
            (_, None) => unreachable!("an arrival with no end pending is taken above"),
            (_, Some((t, j))) => {
                let run = sim.runs[j].take().expect("an ending job is running");
                sim.running.retain(|&r| r != j);
                for &g in &run.gpus {
                    let at = sim.on_gpu[g].iter().position(|&o| o == j).expect("its member is there");
                    sim.on_gpu[g].remove(at);
                    sim.held[g] = w.cluster.gpus[g].exclusive;
                }
                sim.recompute(&run.gpus, t);
                let job = &w.jobs[j];
                report.jobs.push(JobOutcome {
                    id: j,
                    arrival_ms: job.arrival_ms,
                    start_ms: run.start_ms,
                    end_ms: t,
                    gpus: run.gpus,
                    solo_ms: job.iterations as f64 * job.kind.profile().solo_ms,
                });
                t
            }
        };
        while let Some(&j) = queue.front() {
            let Some(gpus) = sim.place(j, placer)? else { break };
            queue.pop_front();
            report.searches += 1;
            // Bring the jobs already there up to now before the newcomer slows them down.
            sim.recompute(&gpus, now);
            for &g in &gpus {
                sim.on_gpu[g].push(j);
                if !w.jobs[j].share {
                    sim.held[g] = true;
                }
            }
            sim.runs[j] = Some(Run { gpus: gpus.clone(), start_ms: now, done: 0.0, since: now, iter_ms: 1.0 });
            sim.running.push(j);
            sim.recompute(&gpus, now);
        }
    }
    debug_assert!(queue.is_empty(), "every queued job fits an empty cluster, so the queue drains");
    Ok(report)
}
