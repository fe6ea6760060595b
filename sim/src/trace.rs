//! JSON-lines traces: one job (or one data object) per line, so a recorded or hand-written
//! workload can be replayed.
//!
//! ```text
//! {"object":"events/1","bytes":268435456,"node":0}
//! {"job":"etl-1","arrival_ms":0,"tasks":[
//!   {"name":"scan","cpu":4,"flops":8e10,"inputs":[{"object":"events/0","bytes":536870912,"node":3}],"output_bytes":67108864},
//!   {"name":"sum","deps":["scan"],"cpu":1,"flops":1e9}]}
//! ```
//! (one line in a file). Task fields besides `name` are optional: `deps` (names of tasks of the
//! same job), `cpu` (cores, default 1), `memory` (bytes), `gpu` (devices), `flops`, `inputs`
//! (objects that exist before the job: a name, its size and the node that holds it), and
//! `output_bytes` (the task's one output, read by the tasks that depend on it). An object may
//! appear on many lines — that is how jobs share data — but always with the same size and
//! node. A line with an `object` field instead of `job` declares an object before any job
//! reads it (data that exists but may never be read still fills fast memory at its node);
//! objects enter fast memory at their node in the order they are first named. Blank lines are
//! skipped. Every mistake is reported with its line number.

use std::collections::HashMap;
use std::io::{BufRead, Write};

use plexus_proto::Resources;
use serde::{Deserialize, Serialize};

use crate::SimError;
use crate::workload::{DataObject, Job, Task, Workload};

#[derive(Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct JobLine {
    job: String,
    arrival_ms: f64,
    tasks: Vec<TaskLine>,
}

#[derive(Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct TaskLine {
    name: String,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    deps: Vec<String>,
    #[serde(default = "one_core")]
    cpu: f64,
    #[serde(default)]
    memory: u64,
    #[serde(default)]
    gpu: u32,
    #[serde(default)]
    flops: f64,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    inputs: Vec<InputLine>,
    #[serde(default)]
    output_bytes: u64,
}

fn one_core() -> f64 {
    1.0
}

/// An input of a task, or (as a line of its own) an object declared up front.
#[derive(Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct InputLine {
    object: String,
    bytes: u64,
    node: usize,
}

impl Workload {
    /// Reads a JSON-lines trace. Node indices are checked against a cluster only when the
    /// workload is simulated.
    pub fn from_jsonl(reader: impl BufRead) -> Result<Workload, SimError> {
        let mut w = Workload::default();
        // Object name → (index, line that declared it).
        let mut objects: HashMap<String, (usize, usize)> = HashMap::new();
        let mut job_lines: HashMap<String, usize> = HashMap::new();
        for (i, line) in reader.lines().enumerate() {
            let line_no = i + 1;
            let line = line.map_err(|source| SimError::Read { line: line_no, source })?;
            if line.trim().is_empty() {
                continue;
            }
            let err = |message: String| SimError::Trace { line: line_no, message };
            let value: serde_json::Value = serde_json::from_str(&line).map_err(|e| err(e.to_string()))?;
            if value.get("object").is_some() && value.get("job").is_none() {
                let o: InputLine = serde_json::from_value(value).map_err(|e| err(e.to_string()))?;
                declare(&mut w, &mut objects, &o, line_no)?;
                continue;
            }
            let parsed: JobLine = serde_json::from_value(value).map_err(|e| err(e.to_string()))?;
            if parsed.job.is_empty() {
                return Err(err("job name is empty".into()));
            }
            if let Some(prev) = job_lines.insert(parsed.job.clone(), line_no) {
                return Err(err(format!("job {:?} already appeared on line {prev}", parsed.job)));
            }
            if !(parsed.arrival_ms.is_finite() && parsed.arrival_ms >= 0.0) {
                return Err(err(format!("job {:?}: arrival_ms must be a non-negative number", parsed.job)));
            }
            if parsed.tasks.is_empty() {
                return Err(err(format!("job {:?} has no tasks", parsed.job)));
            }
            let mut index: HashMap<&str, usize> = HashMap::new();
            for (k, t) in parsed.tasks.iter().enumerate() {
                if t.name.is_empty() {
                    return Err(err(format!("job {:?}: task #{k} has an empty name", parsed.job)));
                }
                if index.insert(&t.name, k).is_some() {
                    return Err(err(format!("job {:?}: duplicate task name {:?}", parsed.job, t.name)));
                }
            }
            let mut tasks = Vec::with_capacity(parsed.tasks.len());
            for t in &parsed.tasks {
                let at = |m: String| err(format!("job {:?} task {:?}: {m}", parsed.job, t.name));
                if !(t.cpu.is_finite() && t.cpu >= 0.0) {
                    return Err(at(format!("cpu {} must be a non-negative number", t.cpu)));
                }
                if !(t.flops.is_finite() && t.flops >= 0.0) {
                    return Err(at(format!("flops {} must be a non-negative number", t.flops)));
                }
                let mut deps = Vec::with_capacity(t.deps.len());
                for d in &t.deps {
                    match index.get(d.as_str()) {
                        Some(&k) if d == &t.name => return Err(at(format!("depends on itself (deps[{k}])"))),
                        Some(&k) => deps.push(k),
                        None => return Err(at(format!("unknown dependency {d:?}"))),
                    }
                }
                let mut inputs = Vec::with_capacity(t.inputs.len());
                for input in &t.inputs {
                    let o = declare(&mut w, &mut objects, input, line_no).map_err(|e| match e {
                        SimError::Trace { message, .. } => at(message),
                        other => other,
                    })?;
                    inputs.push(o);
                }
                tasks.push(Task {
                    name: t.name.clone(),
                    resources: Resources { cpu: t.cpu, memory: t.memory, gpu: t.gpu },
                    flops: t.flops,
                    inputs,
                    deps,
                    output_bytes: t.output_bytes,
                });
            }
            if let Some(cycle) = find_cycle(&tasks) {
                let names: Vec<&str> = cycle.iter().map(|&k| tasks[k].name.as_str()).collect();
                return Err(err(format!("job {:?}: dependency cycle {}", parsed.job, names.join(" -> "))));
            }
            w.jobs.push(Job { name: parsed.job, arrival_us: (parsed.arrival_ms * 1e3).round() as u64, tasks });
        }
        Ok(w)
    }

    /// Writes the workload as a JSON-lines trace that [`Workload::from_jsonl`] reads back to an
    /// equal workload (object names must be unique, as generated ones are): every object first,
    /// then the jobs.
    pub fn to_jsonl(&self, mut out: impl Write) -> std::io::Result<()> {
        for o in &self.objects {
            serde_json::to_writer(&mut out, &InputLine { object: o.name.clone(), bytes: o.bytes, node: o.home })?;
            out.write_all(b"\n")?;
        }
        for job in &self.jobs {
            let line = JobLine {
                job: job.name.clone(),
                arrival_ms: job.arrival_us as f64 / 1e3,
                tasks: job
                    .tasks
                    .iter()
                    .map(|t| TaskLine {
                        name: t.name.clone(),
                        deps: t.deps.iter().map(|&d| job.tasks[d].name.clone()).collect(),
                        cpu: t.resources.cpu,
                        memory: t.resources.memory,
                        gpu: t.resources.gpu,
                        flops: t.flops,
                        inputs: t
                            .inputs
                            .iter()
                            .map(|&o| InputLine {
                                object: self.objects[o].name.clone(),
                                bytes: self.objects[o].bytes,
                                node: self.objects[o].home,
                            })
                            .collect(),
                        output_bytes: t.output_bytes,
                    })
                    .collect(),
            };
            serde_json::to_writer(&mut out, &line)?;
            out.write_all(b"\n")?;
        }
        Ok(())
    }
}

/// The index of object `o`, declaring it on first mention; a later mention must agree.
fn declare(
    w: &mut Workload,
    objects: &mut HashMap<String, (usize, usize)>,
    o: &InputLine,
    line: usize,
) -> Result<usize, SimError> {
    if o.object.is_empty() {
        return Err(SimError::Trace { line, message: "an object has an empty name".into() });
    }
    match objects.get(&o.object) {
        Some(&(i, declared)) => {
            let prev = &w.objects[i];
            if prev.bytes != o.bytes || prev.home != o.node {
                let message = format!(
                    "object {:?} is {} bytes on node {} here but {} bytes on node {} on line {declared}",
                    o.object, o.bytes, o.node, prev.bytes, prev.home
                );
                return Err(SimError::Trace { line, message });
            }
            Ok(i)
        }
        None => {
            w.objects.push(DataObject { name: o.object.clone(), bytes: o.bytes, home: o.node });
            objects.insert(o.object.clone(), (w.objects.len() - 1, line));
            Ok(w.objects.len() - 1)
        }
    }
}

/// A dependency cycle, as task indices with the first repeated at the end (`a -> b -> a`).
fn find_cycle(tasks: &[Task]) -> Option<Vec<usize>> {
    // 0 = unvisited, 1 = on the current path, 2 = done.
    fn visit(k: usize, tasks: &[Task], state: &mut [u8], path: &mut Vec<usize>) -> Option<Vec<usize>> {
        state[k] = 1;
        path.push(k);
        for &d in &tasks[k].deps {
            if state[d] == 1 {
                let from = path.iter().position(|&p| p == d).expect("on the path");
                let mut cycle = path[from..].to_vec();
                cycle.push(d);
                return Some(cycle);
            }
            if state[d] == 0
                && let Some(c) = visit(d, tasks, state, path)
            {
                return Some(c);
            }
        }
        path.pop();
        state[k] = 2;
        None
    }
    let mut state = vec![0u8; tasks.len()];
    (0..tasks.len()).find_map(|k| if state[k] == 0 { visit(k, tasks, &mut state, &mut Vec::new()) } else { None })
}
