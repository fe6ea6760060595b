//! A task's own fields: what it runs, what it asks for, its limits and failure policy, its GPU
//! use, its outputs, and what it runs after and reads.

use std::collections::{BTreeSet, HashMap};
use std::time::Duration;

use plexus_proto::Resources;
use plexus_proto::ids::check_output_name;
use plexus_proto::rules::{self, BUILTIN_KINDS};

use super::{DEFAULT_CPU, Validator, list_or_none};
use crate::error::SpecError;
use crate::spec::model::{
    CollectiveSpec, DEFAULT_RETRY_BACKOFF_MS, GpuProfile, InputRank, InputSpec, MAX_REPLICAS, MAX_RETRIES, OnFailure,
    TaskSpec, Work,
};
use crate::spec::raw::{RawCommand, RawDuration, RawSize, RawTask};

/// A task's timeout and failure policy, as checked.
struct Limits {
    timeout_ms: u64,
    on_failure: OnFailure,
    retry_backoff_ms: u64,
}

impl Validator<'_> {
    /// An error about task `t`, at the line where it is named.
    pub(super) fn at(&self, t: &RawTask, msg: String) -> SpecError {
        self.err(self.task_line(&t.name, 0), format!("task {:?}: {msg}", t.name))
    }

    pub(super) fn task(
        &self,
        t: &RawTask,
        outputs_of: &HashMap<&str, &Vec<String>>,
        replicas_of: &HashMap<&str, u32>,
    ) -> Result<TaskSpec, SpecError> {
        let at = |msg: String| self.at(t, msg);
        let work = self.work(t)?;
        let cpu = t.cpu.unwrap_or(DEFAULT_CPU);
        if !cpu.is_finite() || cpu < 0.0 {
            return Err(at(format!("cpu = {cpu} is not a non-negative number")));
        }
        let memory = self.size(t, "memory", &t.memory)?.unwrap_or(0);
        let sweep = self.sweep(t)?;
        let replicas = sweep.as_ref().map_or(t.replicas.unwrap_or(1), |s| s.rows.len() as u32);
        if replicas == 0 || replicas > MAX_REPLICAS {
            return Err(at(format!("replicas = {replicas} is out of range (1..={MAX_REPLICAS})")));
        }
        let limits = self.limits(t)?;
        if let Some(f) = t.flops
            && (!f.is_finite() || f < 0.0)
        {
            return Err(at(format!("flops = {f} is not a non-negative number")));
        }
        let (gpu, gpu_profile) = self.gpu(t)?;
        let max_retries = t.max_retries.unwrap_or(0);
        if max_retries > MAX_RETRIES {
            return Err(at(format!("max_retries = {max_retries} is out of range (0..={MAX_RETRIES})")));
        }
        self.payload(t, &work)?;
        self.outputs(t)?;
        self.checkpoint(t, &work)?;
        let mut after = self.after(t, outputs_of)?;
        let inputs = self.inputs(t, outputs_of, replicas_of, replicas, &mut after)?;
        for k in t.env.keys() {
            rules::check_env_key(k).map_err(|e| at(e.to_string()))?;
        }

        let collective = match (self.collective(t, &work, replicas, &inputs, replicas_of)?, t.communicator) {
            (None, Some(true)) => Some(self.communicator(t, &work)?),
            (Some(_), Some(_)) => {
                return Err(at("`communicator` is for command tasks (a collective kind already is one)".into()));
            }
            (c, _) => c,
        };
        if sweep.is_some() && collective.is_some() {
            return Err(at(
                "a sweep's replicas are independent runs with their own parameters; a collective or `communicator = true` task's members are one gang".into(),
            ));
        }
        let replicas = match &collective {
            // A `communicator = true` command keeps its own replicas (it may read no input).
            Some(_) if matches!(work, Work::Command(_)) => replicas,
            Some(c) => match c.exchange.as_ref().and_then(|e| e.redistribute) {
                Some(r) => r.senders.max(r.receivers),
                None => replicas_of.get(inputs[0].task.as_str()).copied().unwrap_or(replicas),
            },
            None => replicas,
        };

        Ok(TaskSpec {
            name: t.name.clone(),
            work,
            resources: Resources { cpu, memory, gpu },
            after,
            replicas,
            inputs,
            outputs: t.outputs.clone(),
            max_retries,
            timeout_ms: limits.timeout_ms,
            env: t.env.clone(),
            flops: t.flops,
            collective,
            on_failure: limits.on_failure,
            retry_backoff_ms: limits.retry_backoff_ms,
            gang: None,
            gpu_profile,
            constraints: Vec::new(),
            sweep,
            checkpoint: t.checkpoint.clone(),
            python: None,
            image: None,
        })
    }

    /// A command task with `communicator = true`: its replicas are a gang of all its members, one
    /// per worker, placed and restarted whole like a collective's, and each member is given the
    /// collective endpoint (`$PLEXUS_COLLECTIVE_SOCKET`). Its [`CollectiveSpec`]'s element type
    /// and operator are unused: each call over the endpoint names its own.
    fn communicator(&self, t: &RawTask, work: &Work) -> Result<CollectiveSpec, SpecError> {
        if !matches!(work, Work::Command(_)) {
            return Err(
                self.at(t, "`communicator = true` is for command tasks (a collective kind already is one)".into())
            );
        }
        Ok(CollectiveSpec {
            dtype: plexus_proto::DType::F32,
            op: plexus_proto::ReduceOp::Sum,
            root: 0,
            algorithm: plexus_proto::Algorithm::Halving,
            exchange: None,
        })
    }

    /// What the task runs: a command (argv, or shell text run with `sh -c`) or a built-in kind.
    fn work(&self, t: &RawTask) -> Result<Work, SpecError> {
        let at = |msg: String| self.at(t, msg);
        Ok(match (&t.command, &t.kind) {
            (Some(_), Some(_)) => return Err(at("set either `command` or `kind`, not both".into())),
            (None, None) => return Err(at("needs a `command` (argv or shell text) or a built-in `kind`".into())),
            (Some(RawCommand::Argv(argv)), None) => {
                if argv.is_empty() || argv[0].is_empty() {
                    return Err(at("`command` must not be empty".into()));
                }
                Work::Command(argv.clone())
            }
            (Some(RawCommand::Shell(text)), None) => {
                if text.trim().is_empty() {
                    return Err(at("`command` must not be empty".into()));
                }
                Work::Command(vec!["sh".into(), "-c".into(), text.clone()])
            }
            (None, Some(kind)) => {
                if !BUILTIN_KINDS.contains(&kind.as_str()) {
                    return Err(at(format!("unknown kind {kind:?} (built-in kinds: {})", BUILTIN_KINDS.join(", "))));
                }
                Work::Kind(kind.clone())
            }
        })
    }

    /// A size field (`"512MiB"` or a number of bytes), if given.
    fn size(&self, t: &RawTask, field: &str, v: &Option<RawSize>) -> Result<Option<u64>, SpecError> {
        match v {
            None => Ok(None),
            Some(RawSize::Bytes(b)) => Ok(Some(*b)),
            Some(RawSize::Text(s)) => s
                .trim()
                .parse::<bytesize::ByteSize>()
                .map(|b| Some(b.as_u64()))
                .map_err(|e| self.at(t, format!("{field}: {s:?} is not a size ({e})"))),
            Some(RawSize::Other(v)) => {
                Err(self
                    .at(t, format!("{field} = {v} is not a size (a whole number of bytes, or text like \"512MiB\")")))
            }
        }
    }

    /// A duration field (`"90s"` or a whole number of seconds) in milliseconds.
    pub(super) fn duration_ms(&self, t: &RawTask, field: &str, v: &RawDuration) -> Result<u64, SpecError> {
        match v {
            RawDuration::Seconds(s) => Ok(s.saturating_mul(1000)),
            RawDuration::Text(s) => humantime::parse_duration(s)
                .map(|d: Duration| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
                .map_err(|e| self.at(t, format!("{field} {s:?}: {e}"))),
            RawDuration::Other(v) => Err(self
                .at(t, format!("{field} = {v} is not a duration (a whole number of seconds, or text like \"90s\")"))),
        }
    }

    /// The timeout, the failure policy and the back-off between retries.
    fn limits(&self, t: &RawTask) -> Result<Limits, SpecError> {
        let at = |msg: String| self.at(t, msg);
        let timeout_ms = match &t.timeout {
            None => 0,
            Some(d) => {
                let zero = match d {
                    RawDuration::Seconds(s) => *s == 0,
                    RawDuration::Text(s) => humantime::parse_duration(s).is_ok_and(|d| d.is_zero()),
                    RawDuration::Other(_) => false,
                };
                if zero {
                    return Err(at("timeout must be positive".into()));
                }
                // Text below a millisecond rounds up: a timeout is never zero by accident.
                self.duration_ms(t, "timeout", d)?.max(1)
            }
        };
        let on_failure = match t.on_failure.as_deref() {
            None | Some("fail-job") => OnFailure::FailJob,
            Some("continue") => OnFailure::Continue,
            Some(v) => return Err(at(format!("on_failure = {v:?} is not one of {}", OnFailure::NAMES.join(", ")))),
        };
        let retry_backoff_ms = match &t.retry_backoff {
            None => DEFAULT_RETRY_BACKOFF_MS,
            Some(d) => self.duration_ms(t, "retry_backoff", d)?,
        };
        if retry_backoff_ms > 24 * 3_600_000 {
            return Err(at(format!("retry_backoff of {retry_backoff_ms} ms is longer than a day")));
        }
        Ok(Limits { timeout_ms, on_failure, retry_backoff_ms })
    }

    /// The whole GPUs it asks for, and its GPU profile (sharing one GPU, its memory, its
    /// utilisation, its model size) when it describes one.
    fn gpu(&self, t: &RawTask) -> Result<(u32, Option<GpuProfile>), SpecError> {
        let at = |msg: String| self.at(t, msg);
        let gpu_memory = self.size(t, "gpu_memory", &t.gpu_memory)?;
        let model_size = self.size(t, "model_size", &t.model_size)?;
        let share = t.gpu_share.unwrap_or(false);
        let mut gpu = t.gpu.unwrap_or(0);
        if !(share || gpu_memory.is_some() || t.gpu_util.is_some() || model_size.is_some()) {
            return Ok((gpu, None));
        }
        if share {
            match (t.gpu, gpu_memory) {
                (Some(g), _) if g != 1 => {
                    return Err(at(format!("gpu_share = true shares one GPU; gpu = {g} asks for {g} whole devices")));
                }
                (_, None | Some(0)) => return Err(at("gpu_share = true needs `gpu_memory`, the device memory the task needs (e.g. gpu_memory = \"10GiB\")".into())),
                _ => {}
            }
            gpu = 0;
        } else if gpu == 0 {
            let field = if gpu_memory.is_some() {
                "gpu_memory"
            } else if t.gpu_util.is_some() {
                "gpu_util"
            } else {
                "model_size"
            };
            return Err(at(format!(
                "`{field}` describes GPU use; the task asks for no GPU (set gpu = 1, or gpu_share = true)"
            )));
        }
        if let Some(u) = t.gpu_util
            && !(u.is_finite() && u > 0.0 && u <= 1.0)
        {
            return Err(at(format!("gpu_util = {u} is not a utilisation in (0, 1]")));
        }
        if gpu_memory.is_some_and(|m| m > rules::MAX_NODE_BYTES) {
            return Err(at("gpu_memory is larger than any GPU".into()));
        }
        let profile = GpuProfile {
            share,
            memory: gpu_memory.unwrap_or(0),
            utilisation: t.gpu_util,
            model_bytes: model_size.unwrap_or(0),
        };
        Ok((gpu, Some(profile)))
    }

    /// What reaches the worker's process: no NUL byte (no process can receive one), and a
    /// command and environment of a bounded size.
    fn payload(&self, t: &RawTask, work: &Work) -> Result<(), SpecError> {
        let at = |msg: String| self.at(t, msg);
        if let Work::Command(argv) = work
            && let Some(i) = argv.iter().position(|a| a.contains('\0'))
        {
            return Err(at(format!("command argument {i} contains a NUL byte, which no process can receive")));
        }
        if let Some(k) = t.env.iter().find(|(_, v)| v.contains('\0')).map(|(k, _)| k) {
            return Err(at(format!("env {k:?}: the value contains a NUL byte, which no process can receive")));
        }
        let args: &[String] = match work {
            Work::Command(argv) => argv,
            Work::Kind(_) => &[],
        };
        let env_entry = |k: &String, v: &String| k.len() + 1 + v.len();
        let spec_bytes = args.iter().map(|a| rules::exec_bytes(a.len())).sum::<usize>()
            + t.env.iter().map(|(k, v)| rules::exec_bytes(env_entry(k, v))).sum::<usize>();
        if spec_bytes > rules::MAX_TASK_SPEC_BYTES {
            return Err(at(format!(
                "command and env take {spec_bytes} bytes (with each string's NUL and pointer, as execve counts them); \
                 at most {} KiB per task (put large data in an input object)",
                rules::MAX_TASK_SPEC_BYTES >> 10
            )));
        }
        let over = |len: usize| len > rules::MAX_ARG_BYTES;
        if let Some(i) = args.iter().position(|a| over(a.len())) {
            return Err(at(format!(
                "command argument {i} is {} bytes; the OS refuses an argument over {} bytes (put large data in an input object)",
                args[i].len(),
                rules::MAX_ARG_BYTES
            )));
        }
        if let Some((k, v)) = t.env.iter().find(|(k, v)| over(env_entry(k, v))) {
            return Err(at(format!(
                "env {k:?} is {} bytes as KEY=VALUE; the OS refuses an environment entry over {} bytes (put large data in an input object)",
                env_entry(k, v),
                rules::MAX_ARG_BYTES
            )));
        }
        Ok(())
    }

    /// Output names: valid, and each listed once.
    fn outputs(&self, t: &RawTask) -> Result<(), SpecError> {
        let mut outs = BTreeSet::new();
        for o in &t.outputs {
            check_output_name(o)
                .map_err(|e| self.err(self.value_line(&t.name, o), format!("task {:?}: {e}", t.name)))?;
            if !outs.insert(o.as_str()) {
                return Err(
                    self.err(self.value_line(&t.name, o), format!("task {:?}: output {o:?} is listed twice", t.name))
                );
            }
        }
        Ok(())
    }

    /// `checkpoint`: one of the command task's own outputs, short enough that its kept copies'
    /// names (`<name>.attempt-<n>`) are output names, and no other output named like one.
    fn checkpoint(&self, t: &RawTask, work: &Work) -> Result<(), SpecError> {
        let Some(c) = &t.checkpoint else { return Ok(()) };
        let at = |msg: String| self.err(self.value_line(&t.name, c), format!("task {:?}: {msg}", t.name));
        if !matches!(work, Work::Command(_)) {
            return Err(at("`checkpoint` is for command tasks".into()));
        }
        if !t.outputs.contains(c) {
            return Err(at(format!("checkpoint {c:?} is not one of its outputs (add it to `outputs`)")));
        }
        if c.len() > plexus_proto::ids::MAX_CHECKPOINT_NAME {
            return Err(at(format!(
                "checkpoint {c:?} is longer than {} characters",
                plexus_proto::ids::MAX_CHECKPOINT_NAME
            )));
        }
        if let Some(o) = t.outputs.iter().find(|o| plexus_proto::ids::kept_checkpoint_attempt(o, c).is_some()) {
            return Err(at(format!("output {o:?} is named like a kept copy of checkpoint {c:?} (<name>.attempt-<n>)")));
        }
        Ok(())
    }

    /// The tasks of `after`: known, not itself, each once.
    fn after(&self, t: &RawTask, outputs_of: &HashMap<&str, &Vec<String>>) -> Result<Vec<String>, SpecError> {
        let mut after: Vec<String> = Vec::new();
        for dep in &t.after {
            let dline = || self.value_line(&t.name, dep);
            if dep == &t.name {
                return Err(self.err(dline(), format!("dependency cycle: {0} -> {0}", t.name)));
            }
            if !outputs_of.contains_key(dep.as_str()) {
                return Err(self.err(dline(), format!("task {:?}: unknown dependency {dep:?} in `after`", t.name)));
            }
            if !after.contains(dep) {
                after.push(dep.clone());
            }
        }
        Ok(after)
    }

    /// The inputs, `<task>/<output>` with an optional rank selector, each made by a task that
    /// declares that output and has the replicas the selector needs; each producer joins
    /// `after`.
    fn inputs(
        &self,
        t: &RawTask,
        outputs_of: &HashMap<&str, &Vec<String>>,
        replicas_of: &HashMap<&str, u32>,
        replicas: u32,
        after: &mut Vec<String>,
    ) -> Result<Vec<InputSpec>, SpecError> {
        let mut inputs = Vec::new();
        for input in &t.inputs {
            let iline = || self.value_line(&t.name, input);
            let Some((task, output)) = input.split_once('/') else {
                return Err(
                    self.err(iline(), format!("task {:?}: input {input:?} must be written <task>/<output>", t.name))
                );
            };
            let (output, rank) = match output.split_once('[') {
                None => (output, InputRank::All),
                Some((o, sel)) => {
                    let bad = || {
                        self.err(iline(), format!("task {:?}: input {input:?}: a rank selector is [rank] (the consumer's own) or [N] (one replica)", t.name))
                    };
                    let sel = sel.strip_suffix(']').ok_or_else(bad)?;
                    let rank =
                        if sel == "rank" { InputRank::Same } else { InputRank::Fixed(sel.parse().map_err(|_| bad())?) };
                    (o, rank)
                }
            };
            if task == t.name {
                return Err(self.err(iline(), format!("task {:?}: input {input:?} is its own output", t.name)));
            }
            let Some(produced) = outputs_of.get(task) else {
                return Err(self
                    .err(iline(), format!("task {:?}: input {input:?}: no task named {task:?} produces it", t.name)));
            };
            if !produced.iter().any(|o| o == output) {
                return Err(self.err(
                    iline(),
                    format!(
                        "task {:?}: input {input:?}: task {task:?} has no output {output:?} (its outputs: {})",
                        t.name,
                        list_or_none(produced)
                    ),
                ));
            }
            let producers = replicas_of.get(task).copied().unwrap_or(1);
            match rank {
                InputRank::Fixed(k) if k >= producers => {
                    return Err(self.err(iline(), format!("task {:?}: input {input:?}: task {task:?} has {producers} replica(s), so there is no rank {k}", t.name)));
                }
                InputRank::Same if replicas > producers => {
                    return Err(self.err(
                        iline(),
                        format!("task {:?}: input {input:?}: it has {replicas} replicas but task {task:?} has {producers}; [rank] needs a producer replica for every rank", t.name),
                    ));
                }
                _ => {}
            }
            if !after.iter().any(|a| a == task) {
                after.push(task.to_string());
            }
            inputs.push(InputSpec { task: task.to_string(), output: output.to_string(), rank });
        }
        Ok(inputs)
    }
}
