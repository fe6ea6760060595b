//! Building a simulation: the cluster's nodes and their caches, the data objects (the
//! workload's and one output per task), the checks that the run can end, and the arrival events.
//! It is apart from the event loop because it runs once and is long; the loop never calls into
//! this file by path, so only this file imports its parent.

use std::collections::{BinaryHeap, VecDeque};

use plexus_proto::Resources;

use super::{Event, Integrals, Node, Object, Sim};
use crate::SimError;
use crate::cache::{Cache, Pin};
use crate::config::{NodeSpec, SimConfig};
use crate::report::{JobRecord, Utilisation};
use crate::workload::Workload;

impl<'a> Sim<'a> {
    pub(super) fn new(config: &'a SimConfig, workload: &'a Workload, first_decision: u64) -> Result<Self, SimError> {
        let specs = config.cluster.node_specs()?;
        config.hidden.validate()?;
        let mut objects = workload_objects(workload, specs.len())?;
        let (task_of, offsets) = index_tasks(workload, &specs)?;
        let total = task_of.len();
        let graph = TaskGraph::build(workload, &task_of, &offsets, &mut objects);
        let input_bytes = graph.inputs.iter().map(|ins| ins.iter().map(|&o| objects[o].bytes).sum()).collect();
        let nodes = place_objects(specs, &mut objects, workload.objects.len());

        let capacity = Utilisation {
            cpu: nodes.iter().map(|n| n.spec.capacity.cpu).sum(),
            busy: 0.0,
            gpu: nodes.iter().map(|n| n.spec.capacity.gpu as f64).sum(),
            memory: nodes.iter().map(|n| n.spec.capacity.memory as f64).sum(),
            cache: nodes.iter().map(|n| n.spec.cache_bytes as f64).sum(),
        };
        let in_use = Utilisation { cache: nodes.iter().map(|n| n.cache.used() as f64).sum(), ..Default::default() };
        let start = workload.jobs.iter().map(|j| j.arrival_us).min().unwrap_or(0);
        let integrals = Integrals { at_us: start, ..Default::default() };

        let mut sim = Sim {
            config,
            workload,
            nodes,
            objects,
            task_of,
            offsets,
            inputs: graph.inputs,
            input_bytes,
            output: graph.output,
            dependents: graph.dependents,
            pending_deps: graph.pending_deps,
            ready_at: vec![0; total],
            running: (0..total).map(|_| None).collect(),
            ready: VecDeque::new(),
            events: BinaryHeap::new(),
            seq: 0,
            now: start,
            capacity,
            in_use,
            integrals,
            window_start: integrals,
            window_responses: Vec::new(),
            next_decision: first_decision,
            first_decision,
            job_left: workload.jobs.iter().map(|j| j.tasks.len()).collect(),
            overtaken: vec![0; workload.jobs.iter().map(|j| j.tasks.len()).sum()],
            jobs: workload
                .jobs
                .iter()
                .map(|j| JobRecord { arrival_us: j.arrival_us, first_start_us: u64::MAX, finish_us: j.arrival_us })
                .collect(),
            done: Vec::with_capacity(total),
            windows: Vec::new(),
            measured: None,
        };
        for (j, job) in workload.jobs.iter().enumerate() {
            sim.push(job.arrival_us, Event::Arrive(j));
        }
        if let Some(first) = config.hidden.next_phase(start) {
            sim.push(first, Event::Phase);
        }
        Ok(sim)
    }
}

/// The workload's data objects, each checked to have its home among the cluster's `n` nodes.
fn workload_objects(workload: &Workload, n: usize) -> Result<Vec<Object>, SimError> {
    let mut objects: Vec<Object> = Vec::with_capacity(workload.objects.len() + workload.tasks());
    for o in &workload.objects {
        if o.home >= n {
            return Err(SimError::BadLocation { object: o.name.clone(), node: o.home, nodes: n });
        }
        objects.push(Object { bytes: o.bytes, home: o.home, holders: Vec::new() });
    }
    Ok(objects)
}

/// Each global task index's (job, task).
type TaskIndex = Vec<(usize, usize)>;

/// Every task as (job, task) in a global order, and each job's first index in it; fails on a
/// task that fits no node, or that names a dependency or an input that does not exist, since the
/// run could then never end.
fn index_tasks(workload: &Workload, specs: &[NodeSpec]) -> Result<(TaskIndex, Vec<usize>), SimError> {
    let fits_somewhere = |r: &Resources| specs.iter().any(|s| r.fits_in(&s.capacity));
    let mut task_of = Vec::new();
    let mut offsets = Vec::with_capacity(workload.jobs.len());
    for (j, job) in workload.jobs.iter().enumerate() {
        offsets.push(task_of.len());
        for (t, task) in job.tasks.iter().enumerate() {
            if !fits_somewhere(&task.resources) {
                let r = &task.resources;
                let needs = format!("{} cores, {} MiB, {} GPUs", r.cpu, r.memory >> 20, r.gpu);
                return Err(SimError::Unplaceable { job: job.name.clone(), task: task.name.clone(), needs });
            }
            if let Some(&bad) = task.deps.iter().find(|&&d| d >= job.tasks.len()) {
                return Err(SimError::Config(format!(
                    "job {:?} task {:?} depends on task #{bad}, which does not exist",
                    job.name, task.name
                )));
            }
            if let Some(&bad) = task.inputs.iter().find(|&&o| o >= workload.objects.len()) {
                return Err(SimError::Config(format!(
                    "job {:?} task {:?} reads object #{bad}, which does not exist",
                    job.name, task.name
                )));
            }
            task_of.push((j, t));
        }
    }
    Ok((task_of, offsets))
}

/// The tasks' data flow, by global task index: each task's output object, the objects it reads,
/// the tasks that depend on it and how many dependencies it waits for.
struct TaskGraph {
    output: Vec<Option<usize>>,
    inputs: Vec<Vec<usize>>,
    dependents: Vec<Vec<usize>>,
    pending_deps: Vec<usize>,
}

impl TaskGraph {
    /// Adds one output object per task that writes one to `objects`, and links each task to its
    /// dependencies' outputs.
    fn build(workload: &Workload, task_of: &[(usize, usize)], offsets: &[usize], objects: &mut Vec<Object>) -> Self {
        let total = task_of.len();
        // Output objects follow the workload's objects; they get a home when their task starts.
        let mut output = vec![None; total];
        for (g, &(j, t)) in task_of.iter().enumerate() {
            let bytes = workload.jobs[j].tasks[t].output_bytes;
            if bytes > 0 {
                output[g] = Some(objects.len());
                objects.push(Object { bytes, home: usize::MAX, holders: Vec::new() });
            }
        }
        let mut inputs = vec![Vec::new(); total];
        let mut dependents = vec![Vec::new(); total];
        let mut pending_deps = vec![0; total];
        for (g, &(j, t)) in task_of.iter().enumerate() {
            let task = &workload.jobs[j].tasks[t];
            let mut deps = task.deps.clone();
            deps.sort_unstable();
            deps.dedup();
            let mut ins: Vec<usize> = task.inputs.clone();
            for &d in &deps {
                let dg = offsets[j] + d;
                dependents[dg].push(g);
                ins.extend(output[dg]);
            }
            // Deduplicate, keeping first-mention order: an object read twice is fetched once.
            let mut seen = std::collections::HashSet::new();
            ins.retain(|o| seen.insert(*o));
            inputs[g] = ins;
            pending_deps[g] = deps.len();
        }
        TaskGraph { output, inputs, dependents, pending_deps }
    }
}

/// The cluster's nodes, with each of the first `initial` (workload) objects placed in its home's
/// fast memory.
fn place_objects(specs: Vec<NodeSpec>, objects: &mut [Object], initial: usize) -> Vec<Node> {
    let mut nodes: Vec<Node> = specs
        .into_iter()
        .map(|spec| Node {
            cache: Cache::new(spec.cache_bytes),
            spec,
            allocated: Resources::default(),
            busy: 0.0,
            assigned: 0,
            placed: Vec::new(),
            computing: Vec::new(),
            memory_demand: 0.0,
            sending: 0,
        })
        .collect();
    // Initial locations: each workload object starts in its home's fast memory if it fits
    // without evicting anything placed before it.
    for (o, obj) in objects.iter_mut().enumerate().take(initial) {
        let node = &mut nodes[obj.home];
        if node.cache.used() + obj.bytes <= node.spec.cache_bytes {
            node.cache.insert(o, obj.bytes, Pin::Unpinned);
            obj.holders.push(obj.home);
        }
    }
    nodes
}
