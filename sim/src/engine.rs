//! The discrete-event loop: arrivals, compute starts and completions in time order, a ready
//! queue scanned after every instant, the placer asked for each task that some node has room
//! for, and told the outcome when the task ends.
//!
//! # The model
//! * A task holds its requested cores, memory and GPUs on one node from start to finish.
//! * At start it brings in every input (its dataset objects and its dependencies' outputs) that
//!   is not in the node's fast memory, one after another, each from its cheapest source: the
//!   node's own slow memory if the node is the object's home (local tier), else any node holding
//!   it in fast memory, or its home, over the rack or remote tier:
//!   `fetch = Σ (latency_tier + bytes / bandwidth_tier)`.
//!   Fetched objects enter the node's fast memory, and so does the task's output (its home
//!   becomes this node); inserting evicts least-recently-used unpinned objects, and what a
//!   running task reads or writes is pinned.
//! * `run = fetch + evicted_bytes / eviction_bandwidth + compute`, with
//!   `compute = flops / (gpus × gpu_flops)` for a task that requests GPUs and
//!   `flops / (max(cores, 1) × core_flops)` otherwise. Cores count as busy (measured
//!   utilisation) only during `compute`.
//! * Bandwidth is not shared: concurrent fetches do not slow each other down, unless the
//!   configuration's hidden effects (`crate::hidden`, the [`Mix::BLIND`](crate::Mix::BLIND)
//!   workloads) say so: with shared links, a fetch from a node that `k` others read from moves
//!   its bytes `k + 1` times slower (fixed when the task starts); with interference or drift a
//!   task's compute speed changes while it runs (the node's memory-bound neighbours come and
//!   go, its drift phase turns), its remaining work is followed through each change, and its
//!   compute time is what it took; a node class's affinity for a kind scales its engines.
//! * The ready queue is scanned in FIFO order after each instant's events (a placer that
//!   chooses which work goes next reorders its first `ORDER_WINDOW` tasks, with the core's
//!   starvation bound); a task no node has
//!   room for stays queued and later tasks may pass it, as in `Core::schedule`.
//! * Wait = ready → start (a job's first tasks are ready at its arrival, the others when their
//!   last dependency finishes); response = ready → finish.
//! * Every candidate carries estimates, from one of two sources ([`EstimateMode`], see
//!   `estimates.rs`). Exact (the oracle, [`simulate`]'s default): `est_fetch_ms`, exactly the
//!   fetch `start` would charge on that node at that instant, and `est_compute_ms`, its compute
//!   there; eviction is not estimated (it depends on LRU order). Measured
//!   ([`simulate_with`]): the coordinator's own estimator (`core::estimates`), empty at the
//!   start of the run and fed at each finish with what the task's worker would report (its
//!   compute time, and its fetch from other nodes credited to the node that supplied most of
//!   it), read for each candidate as `Core::choose` reads it (`None` while nothing comparable
//!   was measured). The mode changes what placers see, never what the engine charges.
//!
//! Nothing here reads a clock or draws a random number: the report is a function of the
//! configuration, the workload and the placer.

use std::cmp::Reverse;
use std::collections::{BinaryHeap, VecDeque};

use plexus_proto::Resources;
use plexus_scheduler::placer::{Candidate, ORDER_WINDOW, Outcome, PlacementRequest, Placer, ReadyWork, bounded_order};

use crate::SimError;
use crate::cache::Cache;
use crate::config::{NodeSpec, SimConfig};
use crate::estimates::{self, EstimateMode, FetchSample, FetchTally, Measured};
use crate::report::{JobRecord, Report, TaskRecord, Utilisation, Window};
use crate::workload::{Task, Workload};

mod data;
mod hidden;
mod setup;

/// Runs `workload` on `config.cluster` with `placer`, numbering decisions from 0.
pub fn simulate(config: &SimConfig, workload: &Workload, placer: &mut dyn Placer) -> Result<Report, SimError> {
    simulate_from(config, workload, placer, 0)
}

/// Like [`simulate`], numbering decisions from `first_decision`, so that a placer that runs
/// several workloads in turn (a warm-up, then the measured one) never sees an id twice.
pub fn simulate_from(
    config: &SimConfig,
    workload: &Workload,
    placer: &mut dyn Placer,
    first_decision: u64,
) -> Result<Report, SimError> {
    simulate_with(config, workload, placer, first_decision, EstimateMode::Exact)
}

/// Like [`simulate_from`], with candidates' estimates from `mode`: exact, or measured by a
/// fresh instance of the coordinator's estimator fed as the run goes.
pub fn simulate_with(
    config: &SimConfig,
    workload: &Workload,
    placer: &mut dyn Placer,
    first_decision: u64,
    mode: EstimateMode,
) -> Result<Report, SimError> {
    let mut sim = Sim::new(config, workload, first_decision)?;
    if mode == EstimateMode::Measured {
        sim.measured = Some(Measured::new(
            sim.nodes.iter().map(|n| n.spec.worker).collect(),
            sim.nodes.iter().map(|n| n.spec.rack).collect(),
        ));
    }
    sim.run(placer)
}

struct Node {
    spec: NodeSpec,
    allocated: Resources,
    /// Cores of tasks that are computing (not fetching).
    busy: f64,
    assigned: u32,
    /// The (kind, cores) of each task placed here and not finished, by task
    /// (`Candidate::running`).
    placed: Vec<(usize, u64, f64)>,
    cache: Cache,
    /// Tasks computing here, when run times can change while they compute (`Hidden::varies`).
    computing: Vec<usize>,
    /// Cores of the memory-bound tasks among them (`Hidden::interference`).
    memory_demand: f64,
    /// Fetches reading from this node now (`Hidden::shared_links`).
    sending: u32,
}

impl Node {
    fn free(&self) -> Resources {
        self.spec.capacity.minus(&self.allocated)
    }
}

struct Object {
    bytes: u64,
    home: usize,
    /// Nodes holding it in fast memory, ascending.
    holders: Vec<usize>,
}

struct Running {
    node: usize,
    decision: u64,
    start_us: u64,
    /// Objects this task pinned in the node's fast memory.
    pinned: Vec<usize>,
    fetch_us: u64,
    evict_us: u64,
    compute_us: u64,
    fetched_bytes: u64,
    evicted_bytes: u64,
    hit_bytes: u64,
    busy_integral_at_start: f64,
    /// What the worker reports of its fetch from other nodes (measured estimates only).
    fetch_sample: Option<FetchSample>,
    /// Nodes it fetches from, counted in their `sending` until its fetch ends.
    sources: Vec<usize>,
    /// When it started computing, and (when run times vary) its remaining work in microseconds
    /// at full speed, its speed since `since`, and the generation of its pending finish event.
    compute_at: u64,
    work_left: f64,
    rate: f64,
    since: u64,
    generation: u32,
}

/// Events at the same time are handled in the order they were scheduled.
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Event {
    Arrive(usize),
    /// The task has its inputs and starts computing.
    Compute(usize),
    /// The task ends, unless its run time changed since (the generation is then stale).
    Finish(usize, u32),
    /// A drift period ends (`Hidden::drift`).
    Phase,
}

/// Time integrals of allocated resources, for utilisation over any span.
#[derive(Clone, Copy, Default)]
struct Integrals {
    at_us: u64,
    cpu: f64,
    busy: f64,
    gpu: f64,
    memory: f64,
    cache: f64,
}

struct Sim<'a> {
    config: &'a SimConfig,
    workload: &'a Workload,
    nodes: Vec<Node>,
    objects: Vec<Object>,
    /// Global task index → (job, task).
    task_of: Vec<(usize, usize)>,
    /// Job → global index of its first task.
    offsets: Vec<usize>,
    /// Global task → objects it reads (datasets, then dependency outputs), deduplicated.
    inputs: Vec<Vec<usize>>,
    input_bytes: Vec<u64>,
    /// Global task → its output object.
    output: Vec<Option<usize>>,
    dependents: Vec<Vec<usize>>,
    pending_deps: Vec<usize>,
    ready_at: Vec<u64>,
    running: Vec<Option<Running>>,
    ready: VecDeque<usize>,
    events: BinaryHeap<Reverse<(u64, u64, Event)>>,
    seq: u64,
    now: u64,
    capacity: Utilisation,
    in_use: Utilisation,
    integrals: Integrals,
    window_start: Integrals,
    window_responses: Vec<u64>,
    next_decision: u64,
    first_decision: u64,
    job_left: Vec<usize>,
    /// Passes in which a reordering placer put later work before each task while it waited.
    overtaken: Vec<u32>,
    jobs: Vec<JobRecord>,
    done: Vec<TaskRecord>,
    windows: Vec<Window>,
    /// The coordinator's estimator, in [`EstimateMode::Measured`].
    measured: Option<Measured>,
}

impl<'a> Sim<'a> {
    fn push(&mut self, at: u64, event: Event) {
        self.events.push(Reverse((at, self.seq, event)));
        self.seq += 1;
    }

    fn run(mut self, placer: &mut dyn Placer) -> Result<Report, SimError> {
        while let Some(Reverse((t, _, event))) = self.events.pop() {
            // Neither moves time: a finish whose task was retimed since, nor a phase's end once
            // every task is done.
            let stale = match event {
                Event::Finish(g, generation) => self.running[g].as_ref().is_none_or(|r| r.generation != generation),
                Event::Phase => self.done.len() == self.task_of.len(),
                _ => false,
            };
            if stale {
                continue;
            }
            self.advance(t);
            self.handle(event, placer);
            while let Some(Reverse((t2, _, _))) = self.events.peek() {
                if *t2 != t {
                    break;
                }
                let Reverse((_, _, e)) = self.events.pop().expect("peeked");
                self.handle(e, placer);
            }
            self.schedule(placer)?;
        }
        if self.done.len() < self.task_of.len() {
            return Err(SimError::Stuck { at_us: self.now, unfinished: self.task_of.len() - self.done.len() });
        }
        let start_us = self.workload.jobs.iter().map(|j| j.arrival_us).min().unwrap_or(0);
        let utilisation = self
            .utilisation_between(&Integrals { at_us: start_us, ..Default::default() }, (self.now - start_us) as f64);
        // Jobs without tasks start and finish at arrival.
        for j in &mut self.jobs {
            if j.first_start_us == u64::MAX {
                j.first_start_us = j.arrival_us;
            }
        }
        Ok(Report {
            placer: placer.name().to_string(),
            tasks: self.done,
            jobs: self.jobs,
            utilisation,
            windows: self.windows,
            first_decision: self.first_decision,
            placements: self.next_decision - self.first_decision,
            start_us,
            end_us: self.now,
        })
    }

    /// Moves time to `t`, accumulating what was in use since the last event.
    fn advance(&mut self, t: u64) {
        let dt = t.saturating_sub(self.integrals.at_us) as f64;
        let i = &mut self.integrals;
        i.cpu += self.in_use.cpu * dt;
        i.busy += self.in_use.busy * dt;
        i.gpu += self.in_use.gpu * dt;
        i.memory += self.in_use.memory * dt;
        i.cache += self.in_use.cache * dt;
        i.at_us = i.at_us.max(t);
        self.now = i.at_us;
    }

    fn utilisation_between(&self, from: &Integrals, span_us: f64) -> Utilisation {
        let share = |now: f64, then: f64, cap: f64| {
            if span_us <= 0.0 || cap <= 0.0 { 0.0 } else { (now - then) / (cap * span_us) }
        };
        let (i, c) = (&self.integrals, &self.capacity);
        Utilisation {
            cpu: share(i.cpu, from.cpu, c.cpu),
            busy: share(i.busy, from.busy, c.cpu),
            gpu: share(i.gpu, from.gpu, c.gpu),
            memory: share(i.memory, from.memory, c.memory),
            cache: share(i.cache, from.cache, c.cache),
        }
    }

    fn handle(&mut self, event: Event, placer: &mut dyn Placer) {
        match event {
            Event::Arrive(j) => {
                for t in 0..self.workload.jobs[j].tasks.len() {
                    let g = self.offsets[j] + t;
                    if self.pending_deps[g] == 0 {
                        self.ready_at[g] = self.now;
                        self.ready.push_back(g);
                    }
                }
            }
            Event::Compute(g) => self.compute(g),
            Event::Finish(g, generation) => {
                if self.running[g].as_ref().is_some_and(|r| r.generation == generation) {
                    self.finish(g, placer)
                }
            }
            Event::Phase => self.phase(),
        }
    }

    /// Task `g` has its inputs and starts computing: its cores count as busy, the nodes it
    /// fetched from send one fetch fewer, and where run times vary its end is set from now on.
    fn compute(&mut self, g: usize) {
        let cpu = self.resources(g).cpu;
        let r = self.running[g].as_mut().expect("computing tasks are running");
        let n = r.node;
        r.compute_at = self.now;
        for s in std::mem::take(&mut r.sources) {
            self.nodes[s].sending -= 1;
        }
        self.nodes[n].busy += cpu;
        self.in_use.busy += cpu;
        if self.config.hidden.varies() {
            self.begin_compute(g);
        }
    }

    /// A placer that chooses which work goes next (`Placer::order`) reorders the first
    /// [`ORDER_WINDOW`] ready tasks, with the core's starvation bound ([`bounded_order`]); the
    /// tasks overtaken are returned, to be counted if they are still waiting after the pass.
    fn order_ready(&mut self, placer: &mut dyn Placer) -> Vec<usize> {
        if !placer.orders_work() || self.ready.len() < 2 {
            return Vec::new();
        }
        let n = self.ready.len().min(ORDER_WINDOW);
        let window: Vec<usize> = self.ready.iter().take(n).copied().collect();
        let work: Vec<ReadyWork> = window
            .iter()
            .map(|&g| {
                let (j, t) = self.task_of[g];
                let task = &self.workload.jobs[j].tasks[t];
                let sig = estimates::signature(task);
                let est_run_ms = self
                    .nodes
                    .iter()
                    .filter_map(|node| match &self.measured {
                        Some(m) => {
                            m.compute_ms(node.spec.index, sig, estimates::kind_key(task), estimates::work_of(task))
                        }
                        None => Some(self.base_compute_us(g, node.spec.index) as f64 / 1e3),
                    })
                    .fold(None, |m: Option<f64>, e| Some(m.map_or(e, |m| m.min(e))));
                ReadyWork {
                    job_age_ms: (self.now - self.workload.jobs[j].arrival_us) / 1000,
                    ready: 1,
                    job_remaining: self.job_left[j] as u32,
                    est_run_ms,
                    overtaken: self.overtaken[g],
                }
            })
            .collect();
        let answer = placer.order(&work);
        let order = bounded_order(&work, answer);
        let mut overtaken = Vec::new();
        let mut latest = 0usize;
        for &i in &order {
            if i < latest {
                overtaken.push(window[i]);
            }
            latest = latest.max(i);
        }
        for (slot, &i) in order.iter().enumerate() {
            self.ready[slot] = window[i];
        }
        overtaken
    }

    /// One pass over the ready queue in FIFO order (or the placer's, see [`Sim::order_ready`]);
    /// tasks that fit nowhere keep their place.
    fn schedule(&mut self, placer: &mut dyn Placer) -> Result<(), SimError> {
        let overtaken = self.order_ready(placer);
        let result = self.schedule_pass(placer);
        for g in overtaken {
            if self.running[g].is_none() && self.ready.contains(&g) {
                self.overtaken[g] += 1;
            }
        }
        result
    }

    fn schedule_pass(&mut self, placer: &mut dyn Placer) -> Result<(), SimError> {
        let mut deferred = VecDeque::new();
        let mut room = self.largest_free();
        while let Some(g) = self.ready.pop_front() {
            let req = self.resources(g);
            // Cheap pre-check: no node has that much of some resource free.
            if req.cpu > room.cpu + 1e-9
                || req.memory > room.memory
                || req.gpu > room.gpu
                || !self.try_place(g, placer)?
            {
                deferred.push_back(g);
            } else {
                room = self.largest_free();
            }
        }
        self.ready = deferred;
        Ok(())
    }

    /// The most of each resource that any one node has free.
    fn largest_free(&self) -> Resources {
        let mut r = Resources::default();
        for n in &self.nodes {
            let f = n.free();
            r.cpu = r.cpu.max(f.cpu);
            r.memory = r.memory.max(f.memory);
            r.gpu = r.gpu.max(f.gpu);
        }
        r
    }

    fn resources(&self, g: usize) -> Resources {
        let (j, t) = self.task_of[g];
        self.workload.jobs[j].tasks[t].resources
    }

    /// Asks the placer; false if no node has room.
    fn try_place(&mut self, g: usize, placer: &mut dyn Placer) -> Result<bool, SimError> {
        let (j, t) = self.task_of[g];
        let task = &self.workload.jobs[j].tasks[t];
        let req = task.resources;
        // Measured estimates: each input's first holders (fast memory or home) in index order,
        // once per decision, as `Core::choose` lists them.
        let sources: Vec<Vec<usize>> = match self.measured {
            Some(_) => self.inputs[g].iter().map(|&o| self.sources(o)).collect(),
            None => Vec::new(),
        };
        let sig = estimates::signature(task);
        let wants_running = placer.wants_running();
        let candidates: Vec<Candidate> = self
            .nodes
            .iter()
            .map(|n| {
                let free = n.free();
                let feasible = req.fits_in(&free);
                let local = self.inputs[g]
                    .iter()
                    .filter(|&&o| {
                        self.objects[o].home == n.spec.index
                            || self.objects[o].holders.binary_search(&n.spec.index).is_ok()
                    })
                    .map(|&o| self.objects[o].bytes)
                    .sum();
                // (The exact estimate is the node's own by definition.)
                let compute = match &self.measured {
                    Some(m) => m.compute(n.spec.index, sig, estimates::kind_key(task), estimates::work_of(task)),
                    None => Some(plexus_scheduler::core::estimates::Estimate {
                        ms: self.exact_compute_ms(g, n.spec.index),
                        samples: 0.0,
                        own: true,
                        of_kind: true,
                    }),
                };
                Candidate {
                    worker: n.spec.worker,
                    feasible,
                    note: if feasible {
                        String::new()
                    } else {
                        format!(
                            "needs {} cpu {} MiB {} gpu, has {} cpu {} MiB {} gpu free",
                            req.cpu,
                            req.memory >> 20,
                            req.gpu,
                            free.cpu,
                            free.memory >> 20,
                            free.gpu
                        )
                    },
                    capacity: n.spec.capacity,
                    free,
                    assigned: n.assigned,
                    // Measured utilisation: cores computing, not cores held while fetching.
                    cpu_utilisation: if n.spec.capacity.cpu > 0.0 { n.busy / n.spec.capacity.cpu } else { 0.0 },
                    local_input_bytes: local,
                    cache_bytes: n.spec.cache_bytes,
                    cache_used: n.cache.used(),
                    est_fetch_ms: self.est_fetch_ms(g, n, &sources),
                    est_compute_ms: compute.map(|c| c.ms),
                    recent_slowdown: self.measured.as_ref().and_then(|m| m.slowdown(n.spec.index)),
                    est_compute_own: compute.is_some_and(|c| c.own),
                    est_compute_kind: compute.is_some_and(|c| c.of_kind),
                    running: if wants_running { n.placed.iter().map(|p| (p.1, p.2)).collect() } else { Vec::new() },
                }
            })
            .collect();
        if !candidates.iter().any(|c| c.feasible) {
            return Ok(false);
        }
        let decision = self.next_decision;
        self.next_decision += 1;
        let request = PlacementRequest {
            decision,
            job_age_ms: (self.now - self.workload.jobs[j].arrival_us) / 1000,
            resources: req,
            input_bytes: self.input_bytes[g],
            flops: Some(task.flops),
            writes: task.output_bytes > 0,
            kind: estimates::kind_key(task),
        };
        let chosen = placer.place(&request, &candidates).chosen;
        if !candidates.get(chosen).is_some_and(|c| c.feasible) {
            return Err(SimError::InfeasibleChoice { placer: placer.name().to_string(), decision, chosen });
        }
        self.start(g, chosen, decision);
        Ok(true)
    }

    fn start(&mut self, g: usize, n: usize, decision: u64) {
        let (j, t) = self.task_of[g];
        let task = &self.workload.jobs[j].tasks[t];
        let cache_before = self.nodes[n].cache.used();

        // Pin what is already in fast memory first, so fetching the rest cannot evict it.
        let mut pinned = Vec::new();
        let mut missing = Vec::new();
        let mut hit_bytes = 0;
        for &o in &self.inputs[g] {
            if self.nodes[n].cache.pin(o) {
                pinned.push(o);
                hit_bytes += self.objects[o].bytes;
            } else {
                missing.push(o);
            }
        }
        let (mut fetch_us, mut fetched_bytes, mut evicted_bytes) = (0, 0, 0);
        let mut tally = FetchTally::default();
        let mut sources = Vec::new();
        for o in missing {
            let (us, from) = self.fetch_source(o, n);
            fetch_us += us;
            if from != n {
                tally.add(from, self.objects[o].bytes, us);
                if self.config.hidden.shared_links && !sources.contains(&from) {
                    sources.push(from);
                }
            }
            fetched_bytes += self.objects[o].bytes;
            evicted_bytes += self.cache_insert(n, o, &mut pinned);
        }
        if let Some(o) = self.output[g] {
            self.objects[o].home = n;
            evicted_bytes += self.cache_insert(n, o, &mut pinned);
        }
        let evict_us = (evicted_bytes as f64 * 1e6 / self.config.cluster.eviction_bytes_per_s).ceil() as u64;
        let compute_us = self.base_compute_us(g, n);
        for &s in &sources {
            self.nodes[s].sending += 1;
        }

        let node = &mut self.nodes[n];
        node.allocated.add(&task.resources);
        node.assigned += 1;
        node.placed.push((g, estimates::kind_key(task), task.resources.cpu));
        self.in_use.cpu += task.resources.cpu;
        self.in_use.gpu += task.resources.gpu as f64;
        self.in_use.memory += task.resources.memory as f64;
        self.in_use.cache += node.cache.used() as f64 - cache_before as f64;
        let job = &mut self.jobs[j];
        job.first_start_us = job.first_start_us.min(self.now);

        self.running[g] = Some(Running {
            node: n,
            decision,
            start_us: self.now,
            pinned,
            fetch_us,
            evict_us,
            compute_us,
            fetched_bytes,
            evicted_bytes,
            hit_bytes,
            busy_integral_at_start: self.integrals.busy,
            fetch_sample: if self.measured.is_some() { tally.sample() } else { None },
            sources,
            compute_at: 0,
            work_left: 0.0,
            rate: 1.0,
            since: 0,
            generation: 0,
        });
        let computing = self.now + fetch_us + evict_us;
        if computing == self.now {
            self.compute(g);
        } else {
            self.push(computing, Event::Compute(g));
        }
        // Where run times vary, `compute` sets the end once the task computes.
        if !self.config.hidden.varies() {
            self.push(computing + compute_us, Event::Finish(g, 0));
        }
    }

    fn finish(&mut self, g: usize, placer: &mut dyn Placer) {
        if self.config.hidden.varies() {
            self.end_compute(g);
        }
        let r = self.running[g].take().expect("a finish event follows a start");
        let (j, t) = self.task_of[g];
        let task = &self.workload.jobs[j].tasks[t];
        let node = &mut self.nodes[r.node];
        node.allocated.sub(&task.resources);
        node.assigned -= 1;
        node.placed.retain(|p| p.0 != g);
        for &o in &r.pinned {
            node.cache.unpin(o);
        }
        node.busy -= task.resources.cpu;
        self.in_use.cpu -= task.resources.cpu;
        self.in_use.busy -= task.resources.cpu;
        self.in_use.gpu -= task.resources.gpu as f64;
        self.in_use.memory -= task.resources.memory as f64;

        let run_us = self.now - r.start_us;
        // The measured utilisation over the task's run, as a worker would sample it: the share
        // of all cores computing (fetching holds cores but does not use them).
        let cluster_utilisation = if run_us > 0 {
            (self.integrals.busy - r.busy_integral_at_start) / (self.capacity.cpu * run_us as f64)
        } else {
            self.in_use.busy / self.capacity.cpu
        };
        let record = TaskRecord {
            job: j,
            task: t,
            node: r.node,
            decision: r.decision,
            ready_us: self.ready_at[g],
            start_us: r.start_us,
            finish_us: self.now,
            fetch_us: r.fetch_us,
            evict_us: r.evict_us,
            compute_us: r.compute_us,
            fetched_bytes: r.fetched_bytes,
            evicted_bytes: r.evicted_bytes,
            hit_bytes: r.hit_bytes,
        };
        // What the worker reports to the coordinator's estimator (measured estimates).
        if let Some(m) = self.measured.as_mut() {
            m.observe(
                r.node,
                (estimates::signature(task), estimates::kind_key(task)),
                estimates::work_of(task),
                r.compute_us,
                r.fetch_sample,
            );
        }
        let ms = |us: u64| (us + 500) / 1000;
        placer.observe(&Outcome {
            decision: r.decision,
            worker: self.nodes[r.node].spec.worker,
            succeeded: true,
            wait_ms: ms(record.wait_us()),
            // Compute only, as a worker reports it (its clock starts once the inputs are in).
            run_ms: ms(run_us.saturating_sub(r.fetch_us)),
            fetch_ms: ms(r.fetch_us),
            fetched_bytes: r.fetched_bytes,
            evicted_bytes: r.evicted_bytes,
            cluster_utilisation,
        });

        self.job_left[j] -= 1;
        if self.job_left[j] == 0 {
            self.jobs[j].finish_us = self.now;
        }
        for i in 0..self.dependents[g].len() {
            let d = self.dependents[g][i];
            self.pending_deps[d] -= 1;
            if self.pending_deps[d] == 0 {
                self.ready_at[d] = self.now;
                self.ready.push_back(d);
            }
        }

        self.window_responses.push(record.response_us());
        self.done.push(record);
        if self.window_responses.len() == self.config.window.max(1) {
            let span = (self.now - self.window_start.at_us) as f64;
            let n = self.window_responses.len();
            self.windows.push(Window {
                end_us: self.now,
                tasks: n,
                mean_response_ms: self.window_responses.iter().sum::<u64>() as f64 / n as f64 / 1e3,
                utilisation: self.utilisation_between(&self.window_start, span),
            });
            self.window_responses.clear();
            self.window_start = self.integrals;
        }
    }
}

/// Compute time of `task` on `node`: on its GPUs if it requests any, else on its cores (at
/// least one core's worth: a fractional request is not slowed down), `speed` times as fast (the
/// node class's affinity for the task's kind, `Hidden::affinity`; 1 without one).
fn compute_us(task: &Task, node: &NodeSpec, speed: f64) -> u64 {
    let rate = if task.resources.gpu > 0 {
        task.resources.gpu as f64 * node.gpu_flops
    } else {
        task.resources.cpu.max(1.0) * node.core_flops
    };
    let rate = if speed == 1.0 { rate } else { rate * speed };
    if task.flops <= 0.0 || rate <= 0.0 { 0 } else { (task.flops * 1e6 / rate).ceil() as u64 }
}

/// A lower bound on any placer's mean task response for `workload` on `config.cluster`, in
/// milliseconds: every task on the fastest node class that could hold it, with no wait, no
/// fetch and no eviction. What a placer can gain over another is bounded by how far that one
/// is above this.
pub fn response_bound_ms(config: &SimConfig, workload: &Workload) -> Result<f64, SimError> {
    let specs = config.cluster.node_specs()?;
    let (mut sum, mut n) = (0u128, 0u64);
    for job in &workload.jobs {
        for task in &job.tasks {
            let best = specs
                .iter()
                .filter(|s| task.resources.fits_in(&s.capacity))
                .map(|s| {
                    let class = &config.cluster.classes[s.class].name;
                    compute_us(task, s, config.hidden.affinity(class, estimates::kind(&task.name)))
                })
                .min()
                .ok_or_else(|| SimError::Unplaceable {
                    job: job.name.clone(),
                    task: task.name.clone(),
                    needs: format!("{:?}", task.resources),
                })?;
            sum += best as u128;
            n += 1;
        }
    }
    Ok(if n == 0 { 0.0 } else { sum as f64 / n as f64 / 1e3 })
}
