//! What runs: jobs (DAGs of tasks) arriving over time, and the data objects they read.
//!
//! A workload is either drawn from a [`WorkloadConfig`] by a seeded generator
//! ([`Workload::generate`]) or read from a JSON-lines trace ([`Workload::from_jsonl`], in
//! `trace.rs`). Either way it is plain data; nothing here depends on a placer.

use plexus_proto::Resources;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

use crate::SimError;
use crate::config::{SimConfig, WorkloadConfig};

/// A data object that exists before any job runs (a dataset partition, a job's input file).
#[derive(Clone, Debug, PartialEq)]
pub struct DataObject {
    pub name: String,
    pub bytes: u64,
    /// The node whose slow memory holds the durable copy; the object also starts in that
    /// node's fast memory when it fits.
    pub home: usize,
}

/// One task of a job. Besides its `inputs`, a task reads the output of every dependency.
#[derive(Clone, Debug, PartialEq)]
pub struct Task {
    pub name: String,
    pub resources: Resources,
    /// Floating-point operations; run on the GPU if the task requests one, else on its cores.
    pub flops: f64,
    /// Indices into [`Workload::objects`].
    pub inputs: Vec<usize>,
    /// Indices of tasks of the same job that must finish first.
    pub deps: Vec<usize>,
    /// Bytes of the one output object the task writes (0: none).
    pub output_bytes: u64,
}

/// A DAG of tasks submitted at `arrival_us`.
#[derive(Clone, Debug, PartialEq)]
pub struct Job {
    pub name: String,
    pub arrival_us: u64,
    pub tasks: Vec<Task>,
}

/// The jobs and pre-existing data objects of one simulation.
#[derive(Clone, Debug, PartialEq, Default)]
pub struct Workload {
    pub objects: Vec<DataObject>,
    pub jobs: Vec<Job>,
}

impl Workload {
    pub fn tasks(&self) -> usize {
        self.jobs.iter().map(|j| j.tasks.len()).sum()
    }

    /// Draws `config.workload` for `config.cluster` from `config.seed`.
    ///
    /// Arrivals are Poisson, with the rate set from the drawn jobs' nominal work so that the
    /// offered load is `config.workload.load` (see [`WorkloadConfig::load`]).
    pub fn generate(config: &SimConfig) -> Result<Workload, SimError> {
        let nodes = config.cluster.node_specs()?;
        let w = &config.workload;
        if !crate::config::positive(w.load) {
            return Err(SimError::Config(format!("workload load {} must be positive", w.load)));
        }
        let mut g = Gen { rng: StdRng::seed_from_u64(config.seed), w, nodes: nodes.len(), objects: Vec::new() };

        // Hot datasets, their partitions homed on random nodes.
        let datasets: Vec<Vec<usize>> = (0..w.datasets)
            .map(|d| {
                let parts = g.int(w.partitions.0 as u64, w.partitions.1 as u64).max(1);
                (0..parts).map(|p| g.object(format!("ds{d:03}/part{p:02}"), w.partition_bytes)).collect()
            })
            .collect();
        // Zipf popularity: dataset k is chosen with weight 1 / (k + 1)^skew.
        let mut popularity = Vec::with_capacity(datasets.len());
        let mut total = 0.0;
        for k in 0..datasets.len() {
            total += 1.0 / ((k + 1) as f64).powf(w.popularity_skew);
            popularity.push(total);
        }

        let mut jobs = Vec::with_capacity(w.jobs);
        for j in 0..w.jobs {
            let data = !datasets.is_empty() && g.rng.random::<f64>() < w.data_share;
            jobs.push(if data {
                let u = g.rng.random::<f64>() * total;
                let d = popularity.partition_point(|&c| c < u).min(datasets.len() - 1);
                g.data_job(j, &datasets[d])
            } else {
                g.compute_job(j)
            });
        }

        // Nominal work: every task's cores × (compute on the reference engine + fetching all
        // its inputs, dependency outputs included, over the rack tier); GPU-seconds likewise.
        let objects = g.objects;
        let rack = &config.cluster.tiers.rack;
        let (mut core_seconds, mut gpu_seconds) = (0.0, 0.0);
        for job in &jobs {
            for t in &job.tasks {
                let in_bytes: u64 = t.inputs.iter().map(|&o| objects[o].bytes).sum::<u64>()
                    + t.deps.iter().map(|&d| job.tasks[d].output_bytes).sum::<u64>();
                let compute = if t.resources.gpu > 0 {
                    t.flops / (t.resources.gpu as f64 * w.reference_gpu_flops)
                } else {
                    t.flops / (t.resources.cpu.max(1.0) * w.reference_core_flops)
                };
                let run = compute + rack.transfer_us(in_bytes) as f64 / 1e6;
                core_seconds += t.resources.cpu * run;
                gpu_seconds += t.resources.gpu as f64 * run;
            }
        }
        // The busier of cores and GPUs is offered `load`.
        let cores: f64 = nodes.iter().map(|n| n.capacity.cpu).sum();
        let gpus: f64 = nodes.iter().map(|n| n.capacity.gpu as f64).sum();
        let busiest = (core_seconds / cores).max(if gpus > 0.0 { gpu_seconds / gpus } else { 0.0 });
        let mean_gap_s = busiest / w.load / jobs.len().max(1) as f64;
        let mut t = 0.0;
        for job in &mut jobs {
            // Exponential gaps by inversion; 1 - u is in (0, 1] so the log is finite.
            t += -(1.0 - g.rng.random::<f64>()).ln() * mean_gap_s;
            job.arrival_us = (t * 1e6).round() as u64;
        }
        Ok(Workload { objects, jobs })
    }
}

/// The generator's state: its random stream and the objects made so far.
struct Gen<'a> {
    rng: StdRng,
    w: &'a WorkloadConfig,
    nodes: usize,
    objects: Vec<DataObject>,
}

impl Gen<'_> {
    fn int(&mut self, lo: u64, hi: u64) -> u64 {
        if hi <= lo { lo } else { self.rng.random_range(lo..=hi) }
    }

    fn uniform(&mut self, (lo, hi): (f64, f64)) -> f64 {
        if hi <= lo { lo } else { self.rng.random_range(lo..hi) }
    }

    /// Log-uniform bytes: as many 256 MiB objects as 2 GiB ones, like real file sizes.
    fn bytes(&mut self, (lo, hi): (u64, u64)) -> u64 {
        if hi <= lo || lo == 0 {
            return hi.max(lo);
        }
        let x = self.rng.random_range((lo as f64).ln()..(hi as f64).ln());
        (x.exp().round() as u64).clamp(lo, hi)
    }

    fn object(&mut self, name: String, range: (u64, u64)) -> usize {
        let bytes = self.bytes(range);
        let home = self.rng.random_range(0..self.nodes);
        self.objects.push(DataObject { name, bytes, home });
        self.objects.len() - 1
    }

    fn cpu_task(&mut self, name: String, cpu: u32, core_seconds: (f64, f64), output: (u64, u64)) -> Task {
        // Whole operations, so that traces (JSON numbers) carry them exactly.
        let flops = (self.uniform(core_seconds) * self.w.reference_core_flops).round();
        Task {
            name,
            resources: Resources { cpu: cpu as f64, memory: cpu as u64 * self.w.memory_per_core, gpu: 0 },
            flops,
            inputs: Vec::new(),
            deps: Vec::new(),
            output_bytes: self.bytes(output),
        }
    }

    /// Maps over consecutive partitions of one dataset, then a reduce over the map outputs.
    fn data_job(&mut self, j: usize, parts: &[usize]) -> Job {
        let w = self.w;
        let maps = self.int(w.map_tasks.0 as u64, w.map_tasks.1 as u64).clamp(1, parts.len() as u64) as usize;
        let start = self.rng.random_range(0..parts.len());
        let mut tasks = Vec::with_capacity(maps + 1);
        for i in 0..maps {
            let cpu = self.int(w.map_cpu.0.into(), w.map_cpu.1.into()).max(1) as u32;
            let mut t = self.cpu_task(format!("map{i}"), cpu, w.map_core_seconds, w.map_output_bytes);
            t.inputs.push(parts[(start + i) % parts.len()]);
            if parts.len() > 1 && self.rng.random::<f64>() < w.second_partition {
                t.inputs.push(parts[(start + i + 1) % parts.len()]);
            }
            tasks.push(t);
        }
        let mut reduce =
            self.cpu_task("reduce".into(), 2, w.reduce_core_seconds, (w.map_output_bytes.0, w.map_output_bytes.0));
        reduce.deps = (0..maps).collect();
        tasks.push(reduce);
        Job { name: format!("data-{j:05}"), arrival_us: 0, tasks }
    }

    /// A small input, then a chain (each task after the previous) or a fan-out (every task
    /// after the first) of compute-heavy tasks, some of them on a GPU.
    fn compute_job(&mut self, j: usize) -> Job {
        let w = self.w;
        let input = self.object(format!("compute-{j:05}/input"), w.compute_input_bytes);
        let n = self.int(w.compute_tasks.0 as u64, w.compute_tasks.1 as u64).max(1) as usize;
        let chain = self.rng.random::<bool>();
        let mut tasks = Vec::with_capacity(n);
        for i in 0..n {
            let mut t = if self.rng.random::<f64>() < w.gpu_share {
                let flops = (self.uniform(w.gpu_seconds) * w.reference_gpu_flops).round();
                Task {
                    name: format!("train{i}"),
                    resources: Resources { cpu: 1.0, memory: 4 * w.memory_per_core, gpu: 1 },
                    flops,
                    inputs: Vec::new(),
                    deps: Vec::new(),
                    output_bytes: self.bytes(w.compute_output_bytes),
                }
            } else {
                let cpu = self.int(w.compute_cpu.0.into(), w.compute_cpu.1.into()).max(1) as u32;
                // No draw without streams, so the original workloads are drawn as before.
                let stream = w.stream_share > 0.0 && self.rng.random::<f64>() < w.stream_share;
                let kind = if stream { "stream" } else { "solve" };
                self.cpu_task(format!("{kind}{i}"), cpu, w.compute_core_seconds, w.compute_output_bytes)
            };
            if i == 0 {
                t.inputs.push(input);
            } else {
                t.deps.push(if chain { i - 1 } else { 0 });
            }
            tasks.push(t);
        }
        Job { name: format!("compute-{j:05}"), arrival_us: 0, tasks }
    }
}
