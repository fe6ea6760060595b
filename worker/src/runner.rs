//! Running attempts: validating an assignment, built-in kinds, and commands (inputs, process,
//! timeout, outputs, final report).
//!
//! An attempt of a command goes through these steps, each of which can end it:
//!
//! 1. Its work dir `DIR/work/<job>/<task>/<rank>.<attempt>/` is created with empty `in/` and `out/`.
//! 2. Inputs are materialised as `in/<task>/<rank>/<name>`: hard-linked from the cache (copied when
//!    linking fails), after fetching them from the first holder that can serve them when they are
//!    not cached. They stay pinned in the cache until the attempt's final report is built.
//! 3. Only now is RUNNING reported (with `started_at`), then the process is spawned in its own
//!    process group and its own confinement ([`crate::isolation`]: a cgroup with the cpu and
//!    memory requests as limits, or a recorded process group), with the environment of
//!    [`task_env`], stdout/stderr going to the log files.
//! 4. The process ends, times out, or is cancelled; in every case everything still in its cgroup
//!    (or process group) is then SIGKILLed, so that nothing a command started — background
//!    processes, daemons — outlives its attempt. A command that died while its cgroup counted an
//!    OOM kill failed with `killed: out of memory (limit …)`.
//! 5. On exit 0 every declared output must be a regular file in `out/`; they move into the cache.
//! 6. The final report carries the tails of the logs and the fetch/eviction accounting, and the
//!    work dir is removed (the logs stay).
//!
//! `exit_code` in reports: the process's exit code when it exited, `128 + N` when it was killed by
//! signal N (as a shell reports it), and -1 when no process ran (invalid assignment, input fetch
//! failure, spawn failure, cancelled while preparing).
//!
//! Built-in kinds are arms of the `match` in [`Runner::assign`]: `noop` succeeds at once without
//! a RUNNING report, a task or a process, because the control-plane benchmark pushes thousands of
//! them per second through each worker.

use std::net::SocketAddr;
use std::os::unix::process::ExitStatusExt;
use std::path::{Path, PathBuf};
use std::process::{ExitStatus, Stdio};
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use plexus_dataplane::{CollectiveConfig, Communicator, Exchanger};
use plexus_proto::ids::{check_output_name, check_task_name};
use plexus_proto::rules::{check_env_key, is_collective, parse_rails};
use plexus_proto::{Algorithm, AttemptRef, DType, ObjectId, ReduceOp, convert, now_ms, pb};
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;
use tracing::{debug, info, warn};

use crate::attempts::Attempts;
use crate::cache::{Cache, Pin};
use crate::error::{Error, Result};
use crate::exchange::Exchange;
use crate::isolation::{Confinement, Isolation, Limits, join_cgroups, kill_group};
use crate::layout::Layout;
use crate::logs::{REPORT_TAIL_BYTES, iteration_times, tail_or_empty};
use crate::peer;

/// `exit_code` of a report when no process ran.
pub const NO_EXIT_CODE: i32 = -1;

/// A validated assignment: a command, or a collective member.
#[derive(Debug, Clone)]
pub struct Work {
    pub attempt: AttemptRef,
    pub replicas: u32,
    /// The command; empty for a collective member.
    pub argv: Vec<String>,
    /// Set for the collective kinds: the member's part, run inside the worker.
    pub collective: Option<CollectiveWork>,
    /// `None`: no limit.
    pub timeout: Option<Duration>,
    pub inputs: Vec<Input>,
    pub outputs: Vec<String>,
    pub env: Vec<(String, String)>,
    /// Requested cores (the cgroup's cpu limit, and the thread count libraries are told).
    pub cpu: f64,
    /// Requested bytes (the cgroup's memory limit); 0 = none.
    pub memory: u64,
    /// The GPU device indices that are this attempt's alone.
    pub gpus: Vec<u32>,
}

/// A collective member's part: what it reduces and with whom.
#[derive(Debug, Clone)]
pub struct CollectiveWork {
    /// `None`: allreduce (every member writes the result); `Some(root)`: reduce to `root` (the
    /// other members write an empty output).
    pub root: Option<usize>,
    pub dtype: DType,
    pub op: ReduceOp,
    pub algorithm: Algorithm,
    /// Every member's data-plane rails, in rank order; this member is `attempt.rank`.
    pub members: Vec<Vec<SocketAddr>>,
    pub tag: u64,
    /// Set for `alltoall` and `redistribute`, which exchange rather than reduce.
    pub exchange: Option<Exchange>,
}

impl CollectiveWork {
    fn from_pb(kind: &str, rank: u32, c: Option<pb::Collective>) -> Result<CollectiveWork> {
        let invalid = |m: String| Error::InvalidAssignment(m);
        let c = c.ok_or_else(|| invalid(format!("a {kind} assignment without its communicator")))?;
        let members = c
            .members
            .iter()
            .enumerate()
            .map(|(r, m)| match parse_rails(&m.rails) {
                Ok(rails) if !rails.is_empty() => Ok(rails),
                Ok(_) => Err(invalid(format!("collective member {r} has no rails"))),
                Err(e) => Err(invalid(format!("collective member {r}: {e}"))),
            })
            .collect::<Result<Vec<_>>>()?;
        if rank as usize >= members.len() {
            return Err(invalid(format!("rank {rank} is not a member of a collective of {}", members.len())));
        }
        let root = match kind {
            "reduce" if c.root as usize >= members.len() => {
                return Err(invalid(format!(
                    "reduce root {} is not a member of a collective of {}",
                    c.root,
                    members.len()
                )));
            }
            "reduce" => Some(c.root as usize),
            _ => None,
        };
        // The names are parsed with the enums of `plexus_proto::collective`, which the data plane
        // re-exports: one spelling of each name across job files, coordinator, worker and wire.
        let named = |field: &'static str| move |source| Error::CollectiveName { field, source };
        let exchange = match kind {
            "alltoall" | "redistribute" => Some(Exchange::from_pb(kind, members.len(), &c)?),
            _ => None,
        };
        let reducing = exchange.is_none();
        Ok(CollectiveWork {
            root,
            dtype: c.dtype.parse().map_err(named("dtype"))?,
            op: if reducing { c.op.parse().map_err(named("op"))? } else { ReduceOp::Sum },
            algorithm: if reducing { c.algorithm.parse().map_err(named("algorithm"))? } else { Algorithm::Halving },
            members,
            tag: c.tag,
            exchange,
        })
    }
}

/// A validated input object and where it goes under `$PLEXUS_IN`.
#[derive(Debug, Clone)]
pub struct Input {
    pub id: ObjectId,
    pub task: String,
    pub rank: u32,
    pub name: String,
    /// Workers holding it, best first.
    pub holders: Vec<peer::Source>,
    /// Its size as the assignment gives it; 0 when the coordinator does not know it (it sends 0
    /// for an output whose size no report gave). A holder announcing another size is refused.
    pub size: u64,
}

impl Input {
    /// The size a holder must announce, when known.
    fn expected_size(&self) -> Option<u64> {
        (self.size > 0).then_some(self.size)
    }
}

impl Work {
    /// Checks everything in a command assignment that will become a path, an argument or an
    /// environment variable.
    pub fn from_pb(attempt: AttemptRef, mut a: pb::Assignment) -> Result<Work> {
        let invalid = |m: String| Err(Error::InvalidAssignment(m));
        let collective = if is_collective(&a.kind) {
            let c = CollectiveWork::from_pb(&a.kind, attempt.rank, a.collective.take())?;
            let inputs = c.exchange.as_ref().map_or(1, |x| x.inputs(attempt.rank as usize));
            if a.inputs.len() != inputs || a.outputs.len() != 1 {
                return invalid(format!(
                    "a {} member of rank {} needs {inputs} input(s) and one output, not {} and {}",
                    a.kind,
                    attempt.rank,
                    a.inputs.len(),
                    a.outputs.len()
                ));
            }
            Some(c)
        } else {
            match a.command.first() {
                None => return invalid("it has neither a command nor a built-in kind".into()),
                Some(p) if p.is_empty() => return invalid("the program name (command[0]) is empty".into()),
                Some(_) => {}
            }
            None
        };
        if let Some(arg) = a.command.iter().find(|s| s.contains('\0')) {
            return invalid(format!("command argument {arg:?} contains a NUL byte"));
        }
        let mut outputs: Vec<String> = Vec::with_capacity(a.outputs.len());
        for name in a.outputs {
            check_output_name(&name)?;
            if outputs.contains(&name) {
                return invalid(format!("output {name:?} is declared twice"));
            }
            outputs.push(name);
        }
        let mut inputs = Vec::with_capacity(a.inputs.len());
        for i in a.inputs {
            let id = convert::object_id("inputs.object_id", &i.object_id)?;
            // The layout under $PLEXUS_IN comes from the input's own task/rank/name; when the
            // coordinator leaves them empty, the object id's components are used.
            let (task, rank) = if i.task.is_empty() { (id.task.clone(), id.rank) } else { (i.task, i.rank) };
            let name = if i.name.is_empty() { id.name.clone() } else { i.name };
            check_task_name(&task)?;
            check_output_name(&name)?;
            // `sources` carries each holder's rails; a coordinator that sends only `holders`
            // gets the gRPC path. Rail addresses that do not parse are dropped with the rails
            // path for that holder, not the input.
            let holders = if i.sources.is_empty() {
                i.holders.into_iter().map(|peer_addr| peer::Source { peer_addr, rails: vec![] }).collect()
            } else {
                i.sources
                    .into_iter()
                    .map(|h| peer::Source { rails: parse_rails(&h.rails).unwrap_or_default(), peer_addr: h.peer_addr })
                    .collect()
            };
            inputs.push(Input { id, task, rank, name, holders, size: i.size });
        }
        let mut env: Vec<(String, String)> = a.env.into_iter().collect();
        env.sort();
        // The coordinator refuses these at submit; the worker checks again rather than trust
        // the network with what becomes its child's environment.
        for (k, _) in &env {
            check_env_key(k).map_err(Error::AssignmentRule)?;
        }
        if let Some((k, _)) = env.iter().find(|(_, v)| v.contains('\0')) {
            return invalid(format!("environment variable {k} contains a NUL byte"));
        }
        let res = a.resources.unwrap_or_default();
        if a.gpus.len() != res.gpu as usize {
            return invalid(format!(
                "it asks for {} GPUs but is given {} devices ({:?})",
                res.gpu,
                a.gpus.len(),
                a.gpus
            ));
        }
        if let Some(i) = a.gpus.iter().enumerate().find_map(|(n, g)| a.gpus[..n].contains(g).then_some(*g)) {
            return invalid(format!("GPU {i} is given twice"));
        }
        Ok(Work {
            attempt,
            replicas: a.replicas,
            argv: if collective.is_some() { Vec::new() } else { a.command },
            collective,
            timeout: (a.timeout_ms > 0).then(|| Duration::from_millis(a.timeout_ms)),
            inputs,
            outputs,
            env,
            cpu: if res.cpu.is_finite() && res.cpu > 0.0 { res.cpu } else { 0.0 },
            memory: res.memory,
            gpus: a.gpus,
        })
    }

    /// Checks the GPUs given against those this worker offers: the coordinator assigns only
    /// those, so another index is a confused coordinator, not a device to hand out.
    pub fn check_gpus(&self, node: &NodeGpus) -> Result<()> {
        match self.gpus.iter().find(|g| !node.offered.contains(g)) {
            None => Ok(()),
            Some(g) => {
                Err(Error::InvalidAssignment(format!("GPU {g} is not one this worker offers ({:?})", node.offered)))
            }
        }
    }
}

/// The node's GPUs as subtasks' environments need them.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct NodeGpus {
    /// The device indices this worker offers (`--gpus`), as nvidia-smi numbers them.
    pub offered: Vec<u32>,
    /// Whether the node has any GPU at all, offered or not: then every subtask is told which it
    /// may use, an empty list included, so one without GPUs cannot touch them.
    pub present: bool,
}

/// The variables a command runs with on top of the worker's own environment, in the order they
/// are applied (a later one wins), each key once:
///
/// 1. the job's `env`;
/// 2. `OMP_NUM_THREADS` and `MKL_NUM_THREADS` as the cpu request rounded up (at least 1), unless
///    the job's env sets them: thread pools sized for the whole machine would fight the cgroup's
///    cpu limit;
/// 3. when the attempt has GPUs or the node has any: `CUDA_VISIBLE_DEVICES` as its device indices
///    (empty without GPUs), `CUDA_DEVICE_ORDER=PCI_BUS_ID` so CUDA numbers devices as
///    nvidia-smi does; these override the job's env, as the device assignment is the
///    coordinator's, not the job's;
/// 4. `PLEXUS_GPUS` (the same indices, also without GPUs on the node) and the other `PLEXUS_*`.
pub fn task_env(work: &Work, gpus: &NodeGpus, in_dir: &Path, out_dir: &Path) -> Vec<(String, String)> {
    let mut env: Vec<(String, String)> = work.env.clone();
    let set = |env: &mut Vec<(String, String)>, k: &str, v: String| {
        env.retain(|(key, _)| key != k);
        env.push((k.to_string(), v));
    };
    let threads = (work.cpu.ceil() as u64).max(1).to_string();
    for k in ["OMP_NUM_THREADS", "MKL_NUM_THREADS"] {
        if !work.env.iter().any(|(key, _)| key == k) {
            set(&mut env, k, threads.clone());
        }
    }
    let devices = work.gpus.iter().map(u32::to_string).collect::<Vec<_>>().join(",");
    if !work.gpus.is_empty() || gpus.present {
        set(&mut env, "CUDA_VISIBLE_DEVICES", devices.clone());
        set(&mut env, "CUDA_DEVICE_ORDER", "PCI_BUS_ID".into());
    }
    let a = &work.attempt;
    set(&mut env, "PLEXUS_GPUS", devices);
    set(&mut env, "PLEXUS_JOB", a.job.to_string());
    set(&mut env, "PLEXUS_TASK", a.task.clone());
    set(&mut env, "PLEXUS_RANK", a.rank.to_string());
    set(&mut env, "PLEXUS_REPLICAS", work.replicas.to_string());
    set(&mut env, "PLEXUS_ATTEMPT", a.attempt.to_string());
    set(&mut env, "PLEXUS_OUT", out_dir.display().to_string());
    set(&mut env, "PLEXUS_IN", in_dir.display().to_string());
    env
}

/// Starts and cancels attempts. Cheap to clone.
#[derive(Clone, Debug)]
pub struct Runner {
    ctx: Arc<Ctx>,
}

#[derive(Debug)]
struct Ctx {
    layout: Layout,
    cache: Cache,
    attempts: Arc<Attempts>,
    /// Owns every attempt task; the worker waits on it at shutdown.
    tracker: TaskTracker,
    /// The data plane inputs are fetched over.
    rails: Arc<plexus_dataplane::Endpoint>,
    /// How commands are confined (cgroups or process groups).
    isolation: Arc<Isolation>,
    gpus: NodeGpus,
    /// This worker's certificate for fetching from peers (`None`: an insecure cluster).
    peer_tls: Option<tonic::transport::ClientTlsConfig>,
    /// What `/metrics` reports of the runner's work.
    counters: Arc<crate::metrics::Counters>,
}

/// Fetch and eviction accounting of one attempt.
#[derive(Debug, Default, Clone, Copy)]
struct Accounting {
    fetch_ms: u64,
    fetched_bytes: u64,
    evicted_bytes: u64,
}

/// How an attempt of a command ended, before the logs and accounting are added.
#[derive(Debug)]
struct Outcome {
    state: pb::SubtaskState,
    exit_code: i32,
    error: String,
    started_at: u64,
    outputs: Vec<pb::ObjectInfo>,
    /// The input that no holder could serve (the attempt failed before its task ran); empty
    /// otherwise.
    unfetched_input: String,
}

impl Outcome {
    /// A FAILED attempt; the report's `error` is the error's text.
    fn failed(error: Error, started_at: u64, exit_code: i32) -> Outcome {
        // Only when the holders could not serve it: a local failure (the cache could not take
        // the object) is this attempt's own.
        let unfetched_input = match &error {
            Error::FetchInput { object, source } if matches!(**source, Error::Holder { .. } | Error::NoHolder) => {
                object.to_string()
            }
            _ => String::new(),
        };
        Outcome {
            state: pb::SubtaskState::Failed,
            exit_code,
            error: error.to_string(),
            started_at,
            outputs: Vec::new(),
            unfetched_input,
        }
    }
}

/// A report of `state` for `attempt` with every other field empty.
pub fn report(attempt: &AttemptRef, state: pb::SubtaskState) -> pb::TaskReport {
    pb::TaskReport { attempt: Some(pb::AttemptRef::from(attempt)), state: state as i32, ..Default::default() }
}

impl Runner {
    pub fn new(
        layout: Layout,
        cache: Cache,
        attempts: Arc<Attempts>,
        tracker: TaskTracker,
        rails: Arc<plexus_dataplane::Endpoint>,
        isolation: Arc<Isolation>,
        gpus: NodeGpus,
    ) -> Runner {
        Runner {
            ctx: Arc::new(Ctx {
                layout,
                cache,
                attempts,
                tracker,
                rails,
                isolation,
                gpus,
                peer_tls: None,
                counters: Arc::default(),
            }),
        }
    }

    /// The same runner fetching inputs from peers over mutual TLS with `tls`. Call before any
    /// assignment (it needs the only reference to the shared context).
    /// Counts into `counters` (the worker's `/metrics`) instead of a private set.
    pub fn with_counters(mut self, counters: Arc<crate::metrics::Counters>) -> Runner {
        match Arc::get_mut(&mut self.ctx) {
            Some(ctx) => ctx.counters = counters,
            None => tracing::error!("Runner::with_counters called after the runner was shared; not applied"),
        }
        self
    }

    pub fn with_peer_tls(mut self, tls: Option<tonic::transport::ClientTlsConfig>) -> Runner {
        match Arc::get_mut(&mut self.ctx) {
            Some(ctx) => ctx.peer_tls = tls,
            None => tracing::error!("Runner::with_peer_tls called after the runner was shared; not applied"),
        }
        self
    }

    /// Starts an assignment unless its attempt is already known. Never blocks: commands run in
    /// tasks owned by the tracker; built-ins that finish at once are reported inline.
    pub fn assign(&self, a: pb::Assignment) {
        let attempt = match convert::attempt("attempt", a.attempt.as_ref()) {
            Ok(attempt) => attempt,
            Err(e) => {
                // Without a valid attempt there is nothing a report could refer to.
                warn!(error = %e, "ignoring an assignment with an invalid attempt");
                return;
            }
        };
        let attempts = &self.ctx.attempts;
        if !a.kind.is_empty() && !is_collective(&a.kind) {
            let now = now_ms();
            let r = match a.kind.as_str() {
                "noop" => pb::TaskReport {
                    started_at: now,
                    finished_at: now,
                    ..report(&attempt, pb::SubtaskState::Succeeded)
                },
                other => pb::TaskReport {
                    error: format!("unknown built-in kind {other:?}"),
                    exit_code: NO_EXIT_CODE,
                    finished_at: now,
                    ..report(&attempt, pb::SubtaskState::Failed)
                },
            };
            if !attempts.complete_at_once(&attempt, r) {
                debug!(%attempt, "ignoring an assignment of an attempt already known");
            }
            return;
        }
        let Some(cancel) = attempts.begin(&attempt) else {
            debug!(%attempt, "ignoring an assignment of an attempt already known");
            return;
        };
        let work = match Work::from_pb(attempt.clone(), a).and_then(|w| w.check_gpus(&self.ctx.gpus).map(|()| w)) {
            Ok(w) => w,
            Err(e) => {
                warn!(%attempt, error = %e, "refusing an invalid assignment");
                let r = pb::TaskReport {
                    error: e.to_string(),
                    exit_code: NO_EXIT_CODE,
                    finished_at: now_ms(),
                    ..report(&attempt, pb::SubtaskState::Failed)
                };
                attempts.finish(&attempt, r);
                return;
            }
        };
        let ctx = Arc::clone(&self.ctx);
        self.ctx.tracker.spawn(async move {
            let r = ctx.run_command(&work, &cancel).await;
            ctx.attempts.finish(&work.attempt, r);
        });
    }

    /// Cancels an attempt: its process group is killed and it reports CANCELLED. Cancelling an
    /// attempt that is not running (unknown, or already finished) does nothing.
    pub fn cancel(&self, a: &pb::AttemptRef) {
        match AttemptRef::try_from(a) {
            Ok(attempt) if self.ctx.attempts.cancel(&attempt) => info!(%attempt, "cancelling attempt"),
            Ok(attempt) => debug!(%attempt, "cancel of an attempt that is not running; ignored"),
            Err(e) => warn!(error = %e, "ignoring a cancel with an invalid attempt"),
        }
    }

    /// Runs a command attempt to its end and returns its final report (for tests; the worker
    /// goes through [`Runner::assign`]).
    #[cfg(test)]
    async fn run(&self, work: &Work, cancel: &CancellationToken) -> pb::TaskReport {
        self.ctx.run_command(work, cancel).await
    }
}

impl Ctx {
    async fn run_command(&self, work: &Work, cancel: &CancellationToken) -> pb::TaskReport {
        let a = &work.attempt;
        let workdir = self.layout.work_dir(a);
        let mut acct = Accounting::default();
        let mut pins = Vec::new();
        let outcome = self.execute(work, &workdir, cancel, &mut acct, &mut pins).await;
        let (out_log, err_log) = self.layout.log_files(a);
        let stdout_tail = tail_or_empty(&out_log, REPORT_TAIL_BYTES).await;
        let (iter_ms, iters) = iteration_times(&stdout_tail);
        let r = pb::TaskReport {
            exit_code: outcome.exit_code,
            error: outcome.error,
            started_at: outcome.started_at,
            finished_at: now_ms(),
            fetch_ms: acct.fetch_ms,
            fetched_bytes: acct.fetched_bytes,
            evicted_bytes: acct.evicted_bytes,
            outputs: outcome.outputs,
            unfetched_input: outcome.unfetched_input,
            stdout_tail,
            stderr_tail: tail_or_empty(&err_log, REPORT_TAIL_BYTES).await,
            iter_ms,
            iters,
            ..report(a, outcome.state)
        };
        drop(pins);
        remove_dir(workdir).await;
        let slot = match outcome.state {
            pb::SubtaskState::Succeeded => Some(0),
            pb::SubtaskState::Failed => Some(1),
            pb::SubtaskState::Cancelled => Some(2),
            _ => None,
        };
        if let Some(n) = slot {
            self.counters.attempts[n].fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        }
        match outcome.state {
            pb::SubtaskState::Succeeded => info!(attempt = %a, "attempt succeeded"),
            _ => info!(attempt = %a, state = ?outcome.state, error = %r.error, "attempt ended"),
        }
        r
    }

    async fn execute(
        &self,
        work: &Work,
        workdir: &Path,
        cancel: &CancellationToken,
        acct: &mut Accounting,
        pins: &mut Vec<Pin>,
    ) -> Outcome {
        let a = &work.attempt;
        let (in_dir, out_dir) = (workdir.join("in"), workdir.join("out"));
        if let Err(e) = prepare_work_dir(workdir, &in_dir, &out_dir).await {
            return Outcome::failed(e, 0, NO_EXIT_CODE);
        }
        let materialised = tokio::select! {
            biased;
            () = cancel.cancelled() => return self.cancelled(0, NO_EXIT_CODE),
            r = self.materialise(&work.inputs, &in_dir, acct, pins) => r,
        };
        if let Err(e) = materialised {
            return Outcome::failed(e, 0, NO_EXIT_CODE);
        }

        let started_at = now_ms();
        self.attempts.progress(
            a,
            pb::TaskReport {
                started_at,
                fetch_ms: acct.fetch_ms,
                fetched_bytes: acct.fetched_bytes,
                evicted_bytes: acct.evicted_bytes,
                ..report(a, pb::SubtaskState::Running)
            },
        );
        let (out_log, err_log) = self.layout.log_files(a);
        let (stdout, stderr) = match open_logs(&out_log, &err_log) {
            Ok(files) => files,
            Err(e) => return Outcome::failed(e, started_at, NO_EXIT_CODE),
        };
        if let Some(c) = &work.collective {
            let ran = self.collective(work, c, &in_dir, &out_dir, stdout, cancel).await;
            return match ran {
                Ok(()) => match self.collect_outputs(work, &out_dir, acct, pins) {
                    Ok(outputs) => Outcome {
                        state: pb::SubtaskState::Succeeded,
                        exit_code: 0,
                        error: String::new(),
                        started_at,
                        outputs,
                        unfetched_input: String::new(),
                    },
                    Err(e) => Outcome::failed(e, started_at, NO_EXIT_CODE),
                },
                Err(Error::Cancelled) => self.cancelled(started_at, NO_EXIT_CODE),
                Err(e) => Outcome::failed(e, started_at, NO_EXIT_CODE),
            };
        }
        let program = &work.argv[0];
        let mut confinement =
            match confine(&self.isolation, Layout::attempt_name(a), Limits::new(work.cpu, work.memory)).await {
                Ok(c) => c,
                Err(e) => return Outcome::failed(e, started_at, NO_EXIT_CODE),
            };
        let mut cmd = tokio::process::Command::new(program);
        cmd.args(&work.argv[1..])
            .current_dir(workdir)
            .envs(task_env(work, &self.gpus, &in_dir, &out_dir))
            .stdin(Stdio::null())
            .stdout(stdout)
            .stderr(stderr)
            // Its own process group, so that a timeout or cancel can signal everything it started
            // (and, without cgroups, so that a restarted worker can find it by its record).
            .process_group(0)
            // A backstop in case this future is dropped: the leader at least does not leak.
            .kill_on_drop(true);
        let cgroups = confinement.procs_files();
        if !cgroups.is_empty() {
            // SAFETY: `join_cgroups` only makes async-signal-safe system calls on memory prepared
            // before the fork, as code between fork and exec must.
            unsafe {
                cmd.pre_exec(move || join_cgroups(&cgroups));
            }
        }
        let mut child = match cmd.spawn() {
            Ok(c) => c,
            Err(source) => {
                release(confinement).await;
                return Outcome::failed(Error::Spawn { program: program.clone(), source }, started_at, NO_EXIT_CODE);
            }
        };
        // With process_group(0) the group id is the leader's pid.
        let pgid = child.id().and_then(|p| i32::try_from(p).ok());
        if let Some(pid) = pgid {
            confinement.started(pid);
        }
        debug!(attempt = %a, pid = ?pgid, isolation = %self.isolation.mode(), "process started");

        enum End {
            Exited,
            TimedOut,
            Cancelled,
        }
        let deadline = work.timeout.and_then(|t| Instant::now().checked_add(t));
        let (end, waited): (End, Option<std::io::Result<ExitStatus>>) = tokio::select! {
            s = child.wait() => (End::Exited, Some(s)),
            () = sleep_until(deadline) => (End::TimedOut, None),
            () = cancel.cancelled() => (End::Cancelled, None),
        };
        // On timeout or cancel this is the point; after a normal exit it removes whatever the
        // command left behind (background processes, daemons), so that nothing outlives its
        // attempt.
        if let Some(pgid) = pgid {
            kill_group(pgid);
        }
        let confinement = kill(confinement).await;
        let status = match waited {
            Some(s) => s,
            None => child.wait().await,
        };
        let failed = !matches!(&status, Ok(s) if s.success());
        let memory_limit = confinement.as_ref().and_then(Confinement::memory_limit);
        let oom = failed && confinement.as_ref().is_some_and(Confinement::oom_killed);
        if let Some(c) = confinement {
            release(c).await;
        }
        let status = match status {
            Ok(s) => s,
            Err(e) => return Outcome::failed(Error::Wait(e), started_at, NO_EXIT_CODE),
        };
        let exit_code = status.code().unwrap_or_else(|| 128 + status.signal().unwrap_or(0));
        match end {
            End::TimedOut => {
                let after = work.timeout.unwrap_or_default();
                Outcome::failed(Error::TimedOut { after }, started_at, exit_code)
            }
            End::Cancelled => self.cancelled(started_at, exit_code),
            End::Exited if status.success() => match self.collect_outputs(work, &out_dir, acct, pins) {
                Ok(outputs) => Outcome {
                    state: pb::SubtaskState::Succeeded,
                    exit_code,
                    error: String::new(),
                    started_at,
                    outputs,
                    unfetched_input: String::new(),
                },
                Err(e) => Outcome::failed(e, started_at, exit_code),
            },
            End::Exited => match memory_limit {
                Some(limit) if oom => Outcome::failed(Error::OutOfMemory { limit }, started_at, exit_code),
                _ => Outcome::failed(Error::Exit { status }, started_at, exit_code),
            },
        }
    }

    /// Runs a collective member: reads its input, joins the gang's communicator on this worker's
    /// data plane, and writes the result as its output. [`Error::Cancelled`] when cancelled.
    async fn collective(
        &self,
        work: &Work,
        c: &CollectiveWork,
        in_dir: &Path,
        out_dir: &Path,
        mut log: std::fs::File,
        cancel: &CancellationToken,
    ) -> Result<()> {
        use std::io::Write as _;
        if let Some(x) = &c.exchange {
            return self.exchange(work, c, x, in_dir, out_dir, log, cancel).await;
        }
        let a = &work.attempt;
        let input = &work.inputs[0];
        let output = &work.outputs[0];
        let data = read_input(input, in_dir).await?;
        if data.len() % c.dtype.size() != 0 {
            return Err(Error::InputShape { object: input.id.clone(), len: data.len(), dtype: c.dtype });
        }
        let cfg = CollectiveConfig { algorithm: c.algorithm, ..CollectiveConfig::default() };
        let comm = Communicator::new(Arc::clone(&self.rails), c.members.clone(), a.rank as usize, c.tag, cfg)
            .map_err(Error::Communicator)?;
        let kind = if c.root.is_some() { "reduce" } else { "allreduce" };
        let len = data.len();
        let started = std::time::Instant::now();
        let run = async {
            match c.root {
                None => comm.allreduce_bytes(Bytes::from(data), c.dtype, c.op).await.map(Some),
                Some(root) => comm.reduce_bytes(Bytes::from(data), root, c.dtype, c.op).await,
            }
        };
        let deadline = work.timeout.and_then(|t| Instant::now().checked_add(t));
        let result = tokio::select! {
            r = run => r.map_err(|source| Error::Collective { kind, source })?,
            () = sleep_until(deadline) => return Err(Error::TimedOut { after: work.timeout.unwrap_or_default() }),
            () = cancel.cancelled() => return Err(Error::Cancelled),
        };
        let took = started.elapsed();
        self.counters.collective(kind, len as u64, u64::try_from(took.as_micros()).unwrap_or(u64::MAX));
        let dest = out_dir.join(output);
        let written = result.as_ref().map_or(0, Bytes::len);
        tokio::fs::write(&dest, result.unwrap_or_default())
            .await
            .map_err(|source| Error::WriteOutput { name: output.clone(), source })?;
        let p = comm.last_profile();
        let members = c.members.len();
        // The member's log: what ran and where its time went, for `plexus logs`.
        let _ = writeln!(
            log,
            "{kind} {} {} over {members} members ({}), rank {}: {len} bytes in {:.3} ms, algBW {:.3} GB/s; \
             copy {:.3} ms, reduce {:.3} ms, wait {:.3} ms; sent {} B, received {} B; wrote {written} B",
            c.dtype,
            c.op,
            c.algorithm,
            a.rank,
            took.as_secs_f64() * 1e3,
            len as f64 / took.as_secs_f64().max(1e-9) / 1e9,
            p.copy.as_secs_f64() * 1e3,
            p.reduce.as_secs_f64() * 1e3,
            p.wait.as_secs_f64() * 1e3,
            p.bytes_sent,
            p.bytes_received,
        );
        Ok(())
    }

    /// Runs an `alltoall` or `redistribute` member ([`crate::exchange`]): reads its inputs,
    /// joins the gang's exchanger on this worker's data plane, writes what it received.
    #[allow(clippy::too_many_arguments)]
    async fn exchange(
        &self,
        work: &Work,
        c: &CollectiveWork,
        x: &Exchange,
        in_dir: &Path,
        out_dir: &Path,
        mut log: std::fs::File,
        cancel: &CancellationToken,
    ) -> Result<()> {
        use std::io::Write as _;
        let a = &work.attempt;
        let output = &work.outputs[0];
        let data = match work.inputs.first() {
            Some(input) => read_input(input, in_dir).await?,
            None => Vec::new(),
        };
        let split_file = match work.inputs.get(1) {
            Some(input) => Some(read_input(input, in_dir).await?),
            None => None,
        };
        let kind = x.kind();
        let exchanger = Exchanger::new(Arc::clone(&self.rails), c.members.clone(), a.rank as usize, c.tag)
            .map_err(Error::Communicator)?;
        let len = data.len();
        let started = std::time::Instant::now();
        let run =
            x.run(&exchanger, c.dtype, Bytes::from(data), work.inputs.first().map(|i| &i.id), split_file.as_deref());
        let deadline = work.timeout.and_then(|t| Instant::now().checked_add(t));
        let result = tokio::select! {
            r = run => r?,
            () = sleep_until(deadline) => return Err(Error::TimedOut { after: work.timeout.unwrap_or_default() }),
            () = cancel.cancelled() => return Err(Error::Cancelled),
        };
        let took = started.elapsed();
        self.counters.collective(kind, len as u64, u64::try_from(took.as_micros()).unwrap_or(u64::MAX));
        let written = result.len();
        tokio::fs::write(out_dir.join(output), result)
            .await
            .map_err(|source| Error::WriteOutput { name: output.clone(), source })?;
        let _ = writeln!(
            log,
            "{kind} {} {}, schedule {}, rank {}: sent {len} bytes, wrote {written} bytes in {:.3} ms",
            c.dtype,
            x.describe(c.members.len()),
            x.schedule,
            a.rank,
            took.as_secs_f64() * 1e3,
        );
        Ok(())
    }

    fn cancelled(&self, started_at: u64, exit_code: i32) -> Outcome {
        let why = if self.attempts.shutting_down() { "the worker shut down" } else { "cancelled by the coordinator" };
        Outcome {
            state: pb::SubtaskState::Cancelled,
            exit_code,
            error: why.into(),
            started_at,
            outputs: Vec::new(),
            unfetched_input: String::new(),
        }
    }

    /// Links every input into `in/<task>/<rank>/<name>`, fetching the ones not cached.
    async fn materialise(
        &self,
        inputs: &[Input],
        in_dir: &Path,
        acct: &mut Accounting,
        pins: &mut Vec<Pin>,
    ) -> Result<()> {
        for input in inputs {
            let dest = in_dir.join(&input.task).join(input.rank.to_string()).join(&input.name);
            let cached = match self.cache.pin(&input.id) {
                Some(pin) => match link_or_copy(&self.cache.path(&input.id), &dest) {
                    Ok(()) => {
                        self.counters.cache_hits.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                        Some(pin)
                    }
                    // Listed but its file is gone: forgotten, and fetched like any other.
                    Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                        drop(pin);
                        self.cache.forget(&input.id);
                        None
                    }
                    Err(source) => return Err(Error::PlaceInput { object: input.id.clone(), dest, source }),
                },
                None => None,
            };
            let pin = match cached {
                Some(pin) => pin,
                None => {
                    let pin = self.fetch(input, acct).await?;
                    link_or_copy(&self.cache.path(&input.id), &dest).map_err(|source| Error::PlaceInput {
                        object: input.id.clone(),
                        dest: dest.clone(),
                        source,
                    })?;
                    pin
                }
            };
            pins.push(pin);
        }
        Ok(())
    }

    /// Fetches an input from the first holder that can serve it, into the cache: over the data
    /// plane when the holder has rails, else (or when that fails) as a gRPC stream.
    async fn fetch(&self, input: &Input, acct: &mut Accounting) -> Result<Pin> {
        let started = std::time::Instant::now();
        let mut last_error = Error::NoHolder;
        let mut pin = None;
        for holder in &input.holders {
            let url = &holder.peer_addr;
            let mut fetched = None;
            if !holder.rails.is_empty() {
                let tmp = TempFile(self.layout.tmp_dir().join(uuid::Uuid::new_v4().to_string()));
                match peer::fetch_object_rails(
                    &self.rails,
                    self.peer_tls.as_ref(),
                    holder,
                    &input.id,
                    input.expected_size(),
                    &tmp.0,
                )
                .await
                {
                    Ok(f) => {
                        debug!(object = %input.id, holder = url, bytes = f.bytes, "fetched over the data plane");
                        fetched = Some((f, tmp));
                    }
                    Err(e) => {
                        warn!(object = %input.id, holder = url, error = %e, "data-plane fetch failed; trying gRPC");
                        last_error = Error::Holder { url: url.clone(), source: Box::new(e) };
                    }
                }
            }
            let (fetched, tmp) = match fetched {
                Some(f) => f,
                None => {
                    let tmp = TempFile(self.layout.tmp_dir().join(uuid::Uuid::new_v4().to_string()));
                    match peer::fetch_object(url, self.peer_tls.as_ref(), &input.id, input.expected_size(), &tmp.0)
                        .await
                    {
                        Ok(f) => (f, tmp),
                        Err(e) => {
                            debug!(object = %input.id, holder = url, error = %e, "fetch from holder failed");
                            last_error = Error::Holder { url: url.clone(), source: Box::new(e) };
                            continue;
                        }
                    }
                }
            };
            match self.cache.insert(&input.id, &tmp.0) {
                Ok(ins) => {
                    acct.fetched_bytes += fetched.bytes;
                    acct.evicted_bytes += ins.evicted_bytes;
                    self.counters.fetched_bytes.fetch_add(fetched.bytes, std::sync::atomic::Ordering::Relaxed);
                    self.counters.evicted_bytes.fetch_add(ins.evicted_bytes, std::sync::atomic::Ordering::Relaxed);
                    pin = Some(ins.pin);
                    break;
                }
                Err(e) => last_error = e,
            }
        }
        acct.fetch_ms += u64::try_from(started.elapsed().as_millis()).unwrap_or(u64::MAX);
        {
            use std::sync::atomic::Ordering::Relaxed;
            let c = &self.counters;
            c.fetch_us.fetch_add(u64::try_from(started.elapsed().as_micros()).unwrap_or(u64::MAX), Relaxed);
            match &pin {
                Some(_) => {
                    c.fetches.fetch_add(1, Relaxed);
                }
                None => {
                    c.fetch_failures.fetch_add(1, Relaxed);
                }
            }
        }
        pin.ok_or_else(|| Error::FetchInput { object: input.id.clone(), source: Box::new(last_error) })
    }

    /// Checks that every declared output was written, then moves them all into the cache.
    fn collect_outputs(
        &self,
        work: &Work,
        out_dir: &Path,
        acct: &mut Accounting,
        pins: &mut Vec<Pin>,
    ) -> Result<Vec<pb::ObjectInfo>> {
        // Check them all first, so a failed attempt leaves nothing in the cache.
        for name in &work.outputs {
            match std::fs::symlink_metadata(out_dir.join(name)) {
                Ok(m) if m.is_file() => {}
                Ok(_) => return Err(Error::OutputNotFile { name: name.clone() }),
                Err(_) => return Err(Error::OutputMissing { name: name.clone() }),
            }
        }
        let a = &work.attempt;
        let mut infos = Vec::with_capacity(work.outputs.len());
        for name in &work.outputs {
            let id = ObjectId { job: a.job, task: a.task.clone(), rank: a.rank, name: name.clone() };
            let ins = self
                .cache
                .insert(&id, &out_dir.join(name))
                .map_err(|e| Error::StoreOutput { name: name.clone(), source: Box::new(e) })?;
            acct.evicted_bytes += ins.evicted_bytes;
            self.counters.evicted_bytes.fetch_add(ins.evicted_bytes, std::sync::atomic::Ordering::Relaxed);
            infos.push(pb::ObjectInfo { object_id: id.to_string(), size: ins.size });
            pins.push(ins.pin);
        }
        Ok(infos)
    }
}

/// A partial download, removed when dropped (also when the attempt is cancelled mid-fetch). After
/// a successful insert the file has moved and the removal finds nothing.
struct TempFile(PathBuf);

impl Drop for TempFile {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}

async fn prepare_work_dir(workdir: &Path, in_dir: &Path, out_dir: &Path) -> Result<()> {
    // A leftover from a crashed earlier process must not leak files into this attempt.
    if tokio::fs::symlink_metadata(workdir).await.is_ok() {
        remove_dir(workdir.to_path_buf()).await;
    }
    for d in [in_dir, out_dir] {
        tokio::fs::create_dir_all(d).await.map_err(Error::io("create work dir", d))?;
    }
    Ok(())
}

fn open_logs(out: &Path, err: &Path) -> Result<(std::fs::File, std::fs::File)> {
    if let Some(dir) = out.parent() {
        std::fs::create_dir_all(dir).map_err(Error::io("create log dir", dir))?;
    }
    let o = std::fs::File::create(out).map_err(Error::io("create log file", out))?;
    let e = std::fs::File::create(err).map_err(Error::io("create log file", err))?;
    Ok((o, e))
}

fn link_or_copy(src: &Path, dest: &Path) -> std::io::Result<()> {
    if let Some(dir) = dest.parent() {
        std::fs::create_dir_all(dir)?;
    }
    if std::fs::symlink_metadata(dest).is_ok() {
        // The same input listed twice: it is already in place.
        return Ok(());
    }
    // A hard link costs nothing; across file systems (or where links are refused) copy instead.
    std::fs::hard_link(src, dest).or_else(|_| std::fs::copy(src, dest).map(|_| ()))
}

/// Removes a directory tree off the async threads; failures are logged, not fatal.
async fn remove_dir(dir: PathBuf) {
    let shown = dir.display().to_string();
    match tokio::task::spawn_blocking(move || std::fs::remove_dir_all(&dir)).await {
        Ok(Ok(())) => {}
        Ok(Err(e)) if e.kind() == std::io::ErrorKind::NotFound => {}
        Ok(Err(e)) => warn!(dir = shown, error = %e, "could not remove a work dir"),
        Err(e) => warn!(dir = shown, error = %e, "could not remove a work dir"),
    }
}

async fn sleep_until(deadline: Option<Instant>) {
    match deadline {
        Some(d) => tokio::time::sleep_until(d).await,
        None => std::future::pending().await,
    }
}

/// Creates an attempt's confinement (its cgroups and their limits), off the async threads.
async fn confine(isolation: &Arc<Isolation>, name: String, limits: Limits) -> Result<Confinement> {
    let iso = Arc::clone(isolation);
    tokio::task::spawn_blocking(move || iso.confine(&name, &limits)).await?
}

/// Kills everything in an attempt's confinement, off the async threads (it waits, for
/// milliseconds, until the processes are gone), and hands the confinement back.
async fn kill(c: Confinement) -> Option<Confinement> {
    let killed = tokio::task::spawn_blocking(move || {
        c.kill();
        c
    });
    match killed.await {
        Ok(c) => Some(c),
        Err(e) => {
            // The confinement was dropped with the task, which kills and removes it again.
            warn!(error = %e, "killing an attempt's processes failed");
            None
        }
    }
}

/// Removes an attempt's confinement (cgroups or pid record), off the async threads.
async fn release(c: Confinement) {
    if let Err(e) = tokio::task::spawn_blocking(move || c.release()).await {
        warn!(error = %e, "removing an attempt's cgroup failed");
    }
}

/// A collective member's input, as materialised in its work dir.
async fn read_input(input: &Input, in_dir: &Path) -> Result<Vec<u8>> {
    let path = in_dir.join(&input.task).join(input.rank.to_string()).join(&input.name);
    tokio::fs::read(&path).await.map_err(|source| Error::ReadInput { object: input.id.clone(), source })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::isolation::{Choice, Mode};
    use plexus_proto::JobId;
    use std::collections::HashMap;

    struct Fixture {
        _dir: tempfile::TempDir,
        layout: Layout,
        cache: Cache,
        attempts: Arc<Attempts>,
        runner: Runner,
        tracker: TaskTracker,
        rails: Arc<plexus_dataplane::Endpoint>,
    }

    /// A runner whose commands run as bare process groups (no cgroups needed).
    async fn fixture() -> Fixture {
        fixture_with(Choice::Only(Mode::ProcessGroup), NodeGpus::default()).await.0
    }

    /// A runner with the given isolation and GPUs; the isolation is returned too, to close it.
    async fn fixture_with(choice: Choice, gpus: NodeGpus) -> (Fixture, Arc<Isolation>) {
        let dir = tempfile::tempdir().unwrap();
        let layout = Layout::new(dir.path());
        std::fs::create_dir_all(layout.tmp_dir()).unwrap();
        let cache = Cache::open(layout.cache_dir(), 1 << 30).unwrap();
        let attempts = Attempts::new(CancellationToken::new());
        let tracker = TaskTracker::new();
        let rails = endpoint().await;
        // A worker name of its own per fixture, so tests running side by side never share cgroups.
        let name = format!("test-{}", uuid::Uuid::new_v4());
        let isolation = Arc::new(Isolation::setup(choice, &name, layout.pid_records_dir()).unwrap());
        let runner = Runner::new(
            layout.clone(),
            cache.clone(),
            attempts.clone(),
            tracker.clone(),
            rails.clone(),
            isolation.clone(),
            gpus,
        );
        (Fixture { _dir: dir, layout, cache, attempts, runner, tracker, rails }, isolation)
    }

    /// A data-plane endpoint on one loopback rail.
    async fn endpoint() -> Arc<plexus_dataplane::Endpoint> {
        Arc::new(plexus_dataplane::Endpoint::bind(Default::default()).await.unwrap())
    }

    fn grpc_only(url: &str) -> peer::Source {
        peer::Source { peer_addr: url.into(), rails: vec![] }
    }

    fn attempt(job: JobId, task: &str) -> AttemptRef {
        AttemptRef { job, task: task.into(), rank: 2, attempt: 1 }
    }

    fn sh(script: &str) -> Vec<String> {
        vec!["sh".into(), "-c".into(), script.into()]
    }

    fn work(a: &AttemptRef, argv: Vec<String>) -> Work {
        Work {
            attempt: a.clone(),
            replicas: 4,
            argv,
            collective: None,
            timeout: None,
            inputs: Vec::new(),
            outputs: Vec::new(),
            env: Vec::new(),
            cpu: 1.0,
            memory: 0,
            gpus: Vec::new(),
        }
    }

    fn state(r: &pb::TaskReport) -> pb::SubtaskState {
        pb::SubtaskState::try_from(r.state).unwrap()
    }

    /// Whether a process is gone (a zombie waiting for a non-reaping init counts as gone).
    fn process_gone(pid: i32) -> bool {
        match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
            Err(_) => true,
            Ok(stat) => stat.rsplit_once(')').is_some_and(|(_, rest)| rest.trim_start().starts_with('Z')),
        }
    }

    #[tokio::test]
    async fn commands_see_their_environment_and_outputs_go_to_the_cache() {
        let f = fixture().await;
        let a = attempt(JobId::random(), "gen");
        let mut w = work(
            &a,
            sh(r#"
            printf '%s %s %s %s %s %s' "$PLEXUS_JOB" "$PLEXUS_TASK" "$PLEXUS_RANK" "$PLEXUS_REPLICAS" "$PLEXUS_ATTEMPT" "$EXTRA" > "$PLEXUS_OUT/env"
            [ -d "$PLEXUS_IN" ] && [ -d ./in ] && [ -d ./out ] && printf ok > "$PLEXUS_OUT/checks"
            echo to-stdout; echo to-stderr >&2
        "#),
        );
        w.outputs = vec!["env".into(), "checks".into()];
        w.env = vec![("EXTRA".into(), "x y".into()), ("PLEXUS_RANK".into(), "overridden?".into())];
        let r = f.runner.run(&w, &CancellationToken::new()).await;
        assert_eq!(state(&r), pb::SubtaskState::Succeeded, "{}", r.error);
        assert_eq!(r.exit_code, 0);
        assert!(r.started_at > 0 && r.finished_at >= r.started_at);
        assert_eq!(r.stdout_tail, b"to-stdout\n");
        assert_eq!(r.stderr_tail, b"to-stderr\n");
        let expected = format!("{} gen 2 4 1 x y", a.job);
        let env_id = ObjectId { job: a.job, task: "gen".into(), rank: 2, name: "env".into() };
        assert_eq!(r.outputs[0], pb::ObjectInfo { object_id: env_id.to_string(), size: expected.len() as u64 });
        assert_eq!(std::fs::read_to_string(f.cache.path(&env_id)).unwrap(), expected);
        assert_eq!(r.outputs[1].size, 2, "the work dir checks passed");
        // The RUNNING report went out first; the work dir is gone, the logs stay.
        let batch = f.attempts.take_batch().unwrap();
        assert_eq!(batch.messages()[0].state, pb::SubtaskState::Running as i32);
        assert!(!f.layout.work_dir(&a).exists());
        let (out, _) = f.layout.log_files(&a);
        assert_eq!(std::fs::read(out).unwrap(), b"to-stdout\n");
    }

    #[tokio::test]
    async fn failures_are_reported_with_their_cause() {
        let f = fixture().await;
        let job = JobId::random();
        let cancel = CancellationToken::new();

        let r = f.runner.run(&work(&attempt(job, "a"), sh("echo bad >&2; exit 3")), &cancel).await;
        assert_eq!((state(&r), r.exit_code, r.error.as_str()), (pb::SubtaskState::Failed, 3, "exit code 3"));
        assert_eq!(r.stderr_tail, b"bad\n");

        let r = f.runner.run(&work(&attempt(job, "b"), sh("kill -9 $$")), &cancel).await;
        assert_eq!((state(&r), r.exit_code, r.error.as_str()), (pb::SubtaskState::Failed, 137, "killed by signal 9"));

        let mut w = work(&attempt(job, "c"), sh("touch \"$PLEXUS_OUT/one\""));
        w.outputs = vec!["one".into(), "two".into()];
        let r = f.runner.run(&w, &cancel).await;
        assert_eq!(state(&r), pb::SubtaskState::Failed);
        assert_eq!(r.error, "declared output \"two\" was not written");
        let one = ObjectId { job, task: "c".into(), rank: 2, name: "one".into() };
        assert!(!f.cache.contains(&one), "a failed attempt caches nothing");

        let mut w = work(&attempt(job, "d"), sh("ln -s /etc/passwd \"$PLEXUS_OUT/link\""));
        w.outputs = vec!["link".into()];
        let r = f.runner.run(&w, &cancel).await;
        assert_eq!(r.error, "declared output \"link\" is not a regular file");

        let r = f.runner.run(&work(&attempt(job, "e"), vec!["/no/such/program".into()]), &cancel).await;
        assert_eq!((state(&r), r.exit_code), (pb::SubtaskState::Failed, NO_EXIT_CODE));
        assert!(r.error.starts_with("could not start \"/no/such/program\": "), "{}", r.error);
        assert!(r.error.contains("No such file"), "{}", r.error);
    }

    #[tokio::test]
    async fn a_timeout_kills_the_whole_process_group() {
        let f = fixture().await;
        let a = attempt(JobId::random(), "slow");
        let pid_file = f.layout.root().join("bg.pid");
        let script = format!("sleep 100 & echo $! > '{}'; wait", pid_file.display());
        let mut w = work(&a, sh(&script));
        // Long enough that even a loaded machine has started the background sleep by then.
        w.timeout = Some(Duration::from_millis(1500));
        let r = f.runner.run(&w, &CancellationToken::new()).await;
        assert_eq!(state(&r), pb::SubtaskState::Failed);
        assert_eq!(r.error, "timed out after 1.5s");
        assert_eq!(r.exit_code, 128 + libc::SIGKILL);
        let bg: i32 = std::fs::read_to_string(&pid_file).unwrap().trim().parse().unwrap();
        // SIGKILL was sent to the group before we returned; wait (without a time bound that
        // matters) for the kernel to finish tearing the background sleep down.
        let mut tries = 0;
        while !process_gone(bg) && tries < 1000 {
            tokio::time::sleep(Duration::from_millis(10)).await;
            tries += 1;
        }
        assert!(process_gone(bg), "background process {bg} survived the timeout");
    }

    /// The timeout is measured on the runtime's clock: with the clock paused, an hour's limit is
    /// reached as soon as the runtime has nothing else to do, the clock jumping to the deadline
    /// while the process sleeps. (The test above keeps real time: it needs the shell to have
    /// started its background process before the limit.)
    #[tokio::test(start_paused = true)]
    async fn a_timeout_is_measured_on_the_runtime_clock() {
        let f = fixture().await;
        let mut w = work(&attempt(JobId::random(), "hour"), vec!["sleep".into(), "100000".into()]);
        w.timeout = Some(Duration::from_secs(3600));
        let started = Instant::now();
        let r = f.runner.run(&w, &CancellationToken::new()).await;
        assert_eq!(state(&r), pb::SubtaskState::Failed);
        assert_eq!(r.error, "timed out after 3600s");
        assert_eq!(r.exit_code, 128 + libc::SIGKILL);
        assert!(started.elapsed() >= Duration::from_secs(3600), "the limit was waited for on the runtime's clock");
    }

    #[test]
    fn env_keys_are_checked_with_the_shared_rule() {
        let a = attempt(JobId::random(), "env");
        let base =
            pb::Assignment { attempt: Some(pb::AttemptRef::from(&a)), command: sh("true"), ..Default::default() };
        let with_key =
            |k: &str| pb::Assignment { env: HashMap::from([(k.to_string(), "v".to_string())]), ..base.clone() };
        assert!(Work::from_pb(a.clone(), with_key("OMP_NUM_THREADS")).is_ok());
        for (key, text) in [
            ("PLEXUS_OUT", "invalid assignment: env key \"PLEXUS_OUT\" is reserved (PLEXUS_* are set by the worker)"),
            ("A=B", "invalid assignment: env key \"A=B\" is not a valid variable name"),
            ("", "invalid assignment: env key \"\" is not a valid variable name"),
        ] {
            assert_eq!(Work::from_pb(a.clone(), with_key(key)).unwrap_err().to_string(), text);
        }
    }

    #[tokio::test]
    async fn background_processes_do_not_outlive_a_successful_attempt() {
        let f = fixture().await;
        let a = attempt(JobId::random(), "leaky");
        let pid_file = f.layout.root().join("bg.pid");
        let script = format!("sleep 100 & echo $! > '{}'", pid_file.display());
        let r = f.runner.run(&work(&a, sh(&script)), &CancellationToken::new()).await;
        assert_eq!(state(&r), pb::SubtaskState::Succeeded, "{}", r.error);
        let bg: i32 = std::fs::read_to_string(&pid_file).unwrap().trim().parse().unwrap();
        let mut tries = 0;
        while !process_gone(bg) && tries < 1000 {
            tokio::time::sleep(Duration::from_millis(10)).await;
            tries += 1;
        }
        assert!(process_gone(bg), "background process {bg} survived its attempt");
    }

    #[tokio::test]
    async fn cancel_through_the_runner_kills_and_reports_cancelled() {
        let f = fixture().await;
        let a = attempt(JobId::random(), "long");
        let pid_file = f.layout.root().join("pid");
        let assignment = pb::Assignment {
            attempt: Some(pb::AttemptRef::from(&a)),
            replicas: 1,
            command: sh(&format!("echo $$ > '{}'; exec sleep 100", pid_file.display())),
            ..Default::default()
        };
        f.runner.assign(assignment.clone());
        // Wait for RUNNING, which comes right before the spawn.
        let mut seen = Vec::new();
        while !seen.iter().any(|r: &pb::TaskReport| r.state == pb::SubtaskState::Running as i32) {
            f.attempts.reports_ready().await;
            let batch = f.attempts.take_batch().unwrap();
            seen.extend(batch.messages());
            batch.ack();
        }
        assert_eq!(f.attempts.running().len(), 1);
        // A duplicate assignment of the same attempt is ignored.
        f.runner.assign(assignment);
        f.runner.cancel(&pb::AttemptRef::from(&a));
        f.tracker.close();
        f.tracker.wait().await;
        let batch = f.attempts.take_batch().unwrap();
        let msgs = batch.messages();
        assert_eq!(msgs.len(), 1, "{msgs:?}");
        assert_eq!(state(&msgs[0]), pb::SubtaskState::Cancelled);
        assert_eq!(msgs[0].error, "cancelled by the coordinator");
        assert!(f.attempts.running().is_empty());
        // The cancel may land before the shell has written its pid (the file is created empty by
        // the redirection first); check the process only when the pid was written.
        if let Ok(pid) = std::fs::read_to_string(&pid_file)
            && let Ok(pid) = pid.trim().parse()
        {
            assert!(process_gone(pid));
        }
    }

    fn env_of(work: &Work, gpus: &NodeGpus) -> HashMap<String, String> {
        let env = task_env(work, gpus, Path::new("/w/in"), Path::new("/w/out"));
        let map: HashMap<String, String> = env.iter().cloned().collect();
        assert_eq!(map.len(), env.len(), "each key once: {env:?}");
        map
    }

    #[test]
    fn thread_counts_follow_the_cpu_request_unless_the_job_sets_them() {
        let a = attempt(JobId::random(), "env");
        let mut w = work(&a, sh("true"));
        for (cpu, threads) in [(0.0, "1"), (0.5, "1"), (1.0, "1"), (2.5, "3"), (8.0, "8")] {
            w.cpu = cpu;
            let env = env_of(&w, &NodeGpus::default());
            assert_eq!(
                (env["OMP_NUM_THREADS"].as_str(), env["MKL_NUM_THREADS"].as_str()),
                (threads, threads),
                "cpu {cpu}"
            );
        }
        w.env = vec![("OMP_NUM_THREADS".into(), "16".into()), ("OTHER".into(), "x".into())];
        let env = env_of(&w, &NodeGpus::default());
        assert_eq!(
            (env["OMP_NUM_THREADS"].as_str(), env["MKL_NUM_THREADS"].as_str(), env["OTHER"].as_str()),
            ("16", "8", "x")
        );
        // The PLEXUS_* variables are the worker's, whatever the env says.
        w.env = vec![("PLEXUS_RANK".into(), "99".into())];
        let env = env_of(&w, &NodeGpus::default());
        assert_eq!(
            (env["PLEXUS_RANK"].as_str(), env["PLEXUS_OUT"].as_str(), env["PLEXUS_IN"].as_str()),
            ("2", "/w/out", "/w/in")
        );
        assert_eq!(env["PLEXUS_JOB"], a.job.to_string());
    }

    #[test]
    fn gpus_are_exposed_as_assigned_and_hidden_otherwise() {
        let a = attempt(JobId::random(), "gpu");
        let node = NodeGpus { offered: vec![0, 1, 2, 3], present: true };
        let mut w = work(&a, sh("true"));
        w.gpus = vec![1, 3];
        // The job's own value loses: the devices are the coordinator's to give.
        w.env = vec![
            ("CUDA_VISIBLE_DEVICES".into(), "0,1,2,3".into()),
            ("CUDA_DEVICE_ORDER".into(), "FASTEST_FIRST".into()),
        ];
        let env = env_of(&w, &node);
        assert_eq!(env["CUDA_VISIBLE_DEVICES"], "1,3");
        assert_eq!(env["PLEXUS_GPUS"], "1,3");
        assert_eq!(env["CUDA_DEVICE_ORDER"], "PCI_BUS_ID");

        // No GPUs on a node that has some: an empty list, so it can touch none.
        w.gpus = vec![];
        let env = env_of(&w, &node);
        assert_eq!((env["CUDA_VISIBLE_DEVICES"].as_str(), env["PLEXUS_GPUS"].as_str()), ("", ""));
        // A node offering none (`--gpus none`) still has devices to hide.
        let env = env_of(&w, &NodeGpus { offered: vec![], present: true });
        assert_eq!(env["CUDA_VISIBLE_DEVICES"], "");

        // A node without GPUs leaves CUDA alone (the job may set it for its own reasons).
        w.env = vec![("CUDA_VISIBLE_DEVICES".into(), "x".into())];
        let env = env_of(&w, &NodeGpus::default());
        assert_eq!(env["CUDA_VISIBLE_DEVICES"], "x");
        assert!(!env.contains_key("CUDA_DEVICE_ORDER"));
        assert_eq!(env["PLEXUS_GPUS"], "");
    }

    #[test]
    fn gpu_assignments_are_checked() {
        let a = attempt(JobId::random(), "gpu");
        let base = pb::Assignment {
            attempt: Some(pb::AttemptRef::from(&a)),
            command: sh("true"),
            resources: Some(pb::Resources { cpu: 0.5, memory: 64 << 20, gpu: 2 }),
            gpus: vec![2, 0],
            ..Default::default()
        };
        let w = Work::from_pb(a.clone(), base.clone()).unwrap();
        assert_eq!((w.cpu, w.memory, w.gpus.clone()), (0.5, 64 << 20, vec![2, 0]));
        let node = NodeGpus { offered: vec![0, 1, 2], present: true };
        assert!(w.check_gpus(&node).is_ok());
        let e = w.check_gpus(&NodeGpus { offered: vec![0, 1], present: true }).unwrap_err().to_string();
        assert_eq!(e, "invalid assignment: GPU 2 is not one this worker offers ([0, 1])");
        let e = Work::from_pb(a.clone(), pb::Assignment { gpus: vec![0], ..base.clone() }).unwrap_err().to_string();
        assert_eq!(e, "invalid assignment: it asks for 2 GPUs but is given 1 devices ([0])");
        let e = Work::from_pb(a.clone(), pb::Assignment { gpus: vec![1, 1], ..base.clone() }).unwrap_err().to_string();
        assert_eq!(e, "invalid assignment: GPU 1 is given twice");
        let w = Work::from_pb(a.clone(), pb::Assignment { resources: None, gpus: vec![], ..base }).unwrap();
        assert_eq!((w.cpu, w.memory), (0.0, 0), "no resources: no limits");
    }

    /// The assignment path (`Runner::assign`) refuses GPUs the worker does not offer.
    #[tokio::test]
    async fn an_attempt_given_a_gpu_the_worker_lacks_fails() {
        let (f, _iso) =
            fixture_with(Choice::Only(Mode::ProcessGroup), NodeGpus { offered: vec![0], present: true }).await;
        let a = attempt(JobId::random(), "gpu");
        f.runner.assign(pb::Assignment {
            attempt: Some(pb::AttemptRef::from(&a)),
            command: sh("true"),
            resources: Some(pb::Resources { cpu: 1.0, memory: 0, gpu: 1 }),
            gpus: vec![5],
            ..Default::default()
        });
        let msgs = f.attempts.take_batch().unwrap().messages();
        assert_eq!(state(&msgs[0]), pb::SubtaskState::Failed);
        assert_eq!(msgs[0].error, "invalid assignment: GPU 5 is not one this worker offers ([0])");
    }

    /// With cgroups, a daemon (setsid, so out of the process group) dies with its attempt:
    /// when the attempt is cancelled, and when it simply exits.
    #[tokio::test]
    async fn daemons_do_not_outlive_their_attempt() {
        let (f, iso) = fixture_with(Choice::Auto, NodeGpus::default()).await;
        let Some(_closing) = crate::isolation::tests::guard("daemons_do_not_outlive_their_attempt", &iso) else {
            return;
        };
        let job = JobId::random();
        for cancelled in [true, false] {
            let pid_file = f.layout.root().join(format!("daemon-{cancelled}"));
            let tail = if cancelled { "exec sleep 100" } else { "exit 0" };
            let script = format!(
                "setsid sh -c 'echo $$ > {}; exec sleep 100' & while [ ! -s {} ]; do sleep 0.01; done; {tail}",
                pid_file.display(),
                pid_file.display()
            );
            let w = work(&attempt(job, &format!("d{cancelled}")), sh(&script));
            let cancel = CancellationToken::new();
            let run = f.runner.run(&w, &cancel);
            let stop = async {
                let daemon = loop {
                    if let Some(pid) =
                        std::fs::read_to_string(&pid_file).ok().and_then(|t| t.trim().parse::<i32>().ok())
                    {
                        break pid;
                    }
                    tokio::time::sleep(Duration::from_millis(10)).await;
                };
                if cancelled {
                    cancel.cancel();
                }
                daemon
            };
            let (r, daemon) = tokio::join!(run, stop);
            let expected = if cancelled { pb::SubtaskState::Cancelled } else { pb::SubtaskState::Succeeded };
            assert_eq!(state(&r), expected, "{}", r.error);
            assert!(
                process_gone(daemon) || {
                    tokio::time::sleep(Duration::from_millis(200)).await;
                    process_gone(daemon)
                },
                "daemon {daemon} survived (cancelled: {cancelled})"
            );
        }
    }

    /// A command over its memory limit is killed by the kernel and reported as such, not as
    /// "killed by signal 9"; the same command under a larger limit succeeds.
    #[tokio::test]
    async fn memory_over_the_limit_is_reported_as_out_of_memory() {
        let (f, iso) = fixture_with(Choice::Auto, NodeGpus::default()).await;
        let Some(_closing) = crate::isolation::tests::guard("memory_over_the_limit_is_reported_as_out_of_memory", &iso)
        else {
            return;
        };
        let job = JobId::random();
        // tail keeps a line in memory until its end; /dev/zero has no newline.
        let mut w = work(&attempt(job, "hog"), sh("head -c 256M /dev/zero | tail > /dev/null"));
        w.memory = 64 << 20;
        let r = f.runner.run(&w, &CancellationToken::new()).await;
        assert_eq!(state(&r), pb::SubtaskState::Failed);
        assert_eq!(r.error, "killed: out of memory (limit 64 MiB)");
        let mut w = work(&attempt(job, "fits"), sh("head -c 16M /dev/zero | tail > /dev/null"));
        w.memory = 64 << 20;
        let r = f.runner.run(&w, &CancellationToken::new()).await;
        assert_eq!(state(&r), pb::SubtaskState::Succeeded, "{}", r.error);
        // A plain SIGKILL under a limit is still just that.
        let mut w = work(&attempt(job, "shot"), sh("kill -9 $$"));
        w.memory = 64 << 20;
        let r = f.runner.run(&w, &CancellationToken::new()).await;
        assert_eq!(r.error, "killed by signal 9");
    }

    #[tokio::test]
    async fn noop_and_unknown_kinds_finish_at_once() {
        let f = fixture().await;
        let job = JobId::random();
        let noop = attempt(job, "n");
        let weird = attempt(job, "w");
        let mk = |a: &AttemptRef, kind: &str| pb::Assignment {
            attempt: Some(pb::AttemptRef::from(a)),
            kind: kind.into(),
            ..Default::default()
        };
        f.runner.assign(mk(&noop, "noop"));
        f.runner.assign(mk(&noop, "noop"));
        f.runner.assign(mk(&weird, "teleport"));
        f.runner.assign(pb::Assignment { attempt: None, kind: "noop".into(), ..Default::default() });
        let batch = f.attempts.take_batch().unwrap();
        let msgs = batch.messages();
        assert_eq!(msgs.len(), 2, "the duplicate and the invalid one are ignored: {msgs:?}");
        assert_eq!(state(&msgs[0]), pb::SubtaskState::Succeeded);
        assert!(msgs[0].started_at > 0 && msgs[0].started_at == msgs[0].finished_at);
        assert_eq!(state(&msgs[1]), pb::SubtaskState::Failed);
        assert_eq!(msgs[1].error, "unknown built-in kind \"teleport\"");
        assert!(f.tracker.is_empty(), "no task was spawned");
    }

    #[tokio::test]
    async fn invalid_assignments_fail_with_a_reason() {
        let f = fixture().await;
        let a = attempt(JobId::random(), "bad");
        let base =
            pb::Assignment { attempt: Some(pb::AttemptRef::from(&a)), command: sh("true"), ..Default::default() };
        let cases = [
            pb::Assignment { command: vec![], ..base.clone() },
            pb::Assignment { outputs: vec!["../escape".into()], ..base.clone() },
            pb::Assignment { outputs: vec!["x".into(), "x".into()], ..base.clone() },
            pb::Assignment { env: HashMap::from([("A=B".into(), "c".into())]), ..base.clone() },
            pb::Assignment {
                inputs: vec![pb::InputObject { object_id: "../../etc/passwd".into(), ..Default::default() }],
                ..base.clone()
            },
        ];
        for (i, case) in cases.into_iter().enumerate() {
            let mut case = case;
            case.attempt = Some(pb::AttemptRef { attempt: i as u32, ..pb::AttemptRef::from(&a) });
            f.runner.assign(case);
        }
        let batch = f.attempts.take_batch().unwrap();
        let msgs = batch.messages();
        assert_eq!(msgs.len(), 5);
        for m in &msgs {
            assert_eq!(state(m), pb::SubtaskState::Failed, "{m:?}");
            assert!(!m.error.is_empty());
        }
        assert!(msgs[0].error.contains("neither a command nor a built-in kind"), "{}", msgs[0].error);
        assert!(msgs[2].error.contains("declared twice"), "{}", msgs[2].error);
    }

    #[tokio::test]
    async fn cached_inputs_are_linked_and_missing_ones_fail_the_attempt() {
        let f = fixture().await;
        let job = JobId::random();
        let mut inputs = Vec::new();
        for rank in 0..3u32 {
            let id = ObjectId { job, task: "gen".into(), rank, name: "numbers".into() };
            let src = f.layout.root().join("scratch");
            std::fs::write(&src, format!("{rank}\n")).unwrap();
            drop(f.cache.insert(&id, &src).unwrap());
            inputs.push(Input { id, task: "gen".into(), rank, name: "numbers".into(), holders: vec![], size: 2 });
        }
        let a = attempt(job, "sum");
        let mut w = work(&a, sh("cat \"$PLEXUS_IN\"/gen/*/numbers > \"$PLEXUS_OUT/all\""));
        w.inputs = inputs.clone();
        w.outputs = vec!["all".into()];
        let r = f.runner.run(&w, &CancellationToken::new()).await;
        assert_eq!(state(&r), pb::SubtaskState::Succeeded, "{}", r.error);
        assert_eq!((r.fetch_ms, r.fetched_bytes), (0, 0));
        let all = ObjectId { job, task: "sum".into(), rank: 2, name: "all".into() };
        assert_eq!(std::fs::read_to_string(f.cache.path(&all)).unwrap(), "0\n1\n2\n");

        let missing = ObjectId { job, task: "gen".into(), rank: 9, name: "numbers".into() };
        let mut w = work(&attempt(job, "sum2"), sh("true"));
        w.inputs = vec![Input {
            id: missing.clone(),
            task: "gen".into(),
            rank: 9,
            name: "numbers".into(),
            holders: vec![grpc_only("http://127.0.0.1:1")],
            size: 0,
        }];
        let r = f.runner.run(&w, &CancellationToken::new()).await;
        assert_eq!(state(&r), pb::SubtaskState::Failed);
        assert!(r.error.starts_with(&format!("could not fetch input {missing}: http://127.0.0.1:1: ")), "{}", r.error);
        assert_eq!(r.started_at, 0, "it never started");
        assert_eq!(r.unfetched_input, missing.to_string(), "the coordinator is told which input no holder served");

        // A cached input whose file was removed behind the worker's back is forgotten and
        // fetched like any other (here from nowhere): the report names it, and the worker's
        // object list stops listing it.
        let gone = inputs[1].id.clone();
        std::fs::remove_file(f.cache.path(&gone)).unwrap();
        let mut w = work(&attempt(job, "sum3"), sh("true"));
        w.inputs = vec![Input { holders: vec![grpc_only("http://127.0.0.1:1")], ..inputs[1].clone() }];
        let r = f.runner.run(&w, &CancellationToken::new()).await;
        assert_eq!(state(&r), pb::SubtaskState::Failed);
        assert_eq!(r.unfetched_input, gone.to_string(), "{}", r.error);
        assert!(!f.cache.contains(&gone));
        assert!(!f.cache.objects().iter().any(|o| o.object_id == gone.to_string()));
        // A task that fails for its own reasons names no input.
        let r = f.runner.run(&work(&attempt(job, "sum4"), sh("exit 3")), &CancellationToken::new()).await;
        assert_eq!((state(&r), r.unfetched_input.as_str()), (pb::SubtaskState::Failed, ""));
    }

    #[tokio::test]
    async fn inputs_are_fetched_from_a_peer_with_accounting() {
        // The producer: a second cache behind a real PeerService.
        let producer_dir = tempfile::tempdir().unwrap();
        let producer = Layout::new(producer_dir.path());
        let producer_cache = Cache::open(producer.cache_dir(), 1 << 30).unwrap();
        let job = JobId::random();
        let id = ObjectId { job, task: "gen".into(), rank: 5, name: "numbers".into() };
        let data = vec![7u8; 3_000_000];
        std::fs::write(producer.root().join("scratch"), &data).unwrap();
        drop(producer_cache.insert(&id, &producer.root().join("scratch")).unwrap());
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}", listener.local_addr().unwrap());
        let stop = CancellationToken::new();
        let producer_rails = endpoint().await;
        let server = tokio::spawn(peer::serve(
            listener,
            peer::PeerServer::new(producer_cache, producer, producer_rails.clone()),
            None,
            stop.clone(),
        ));

        let f = fixture().await;
        // A dead holder first: the next one must be tried. The live one has rails, so the object
        // comes over the data plane.
        let mut w =
            work(&attempt(job, "use"), sh("wc -c < \"$PLEXUS_IN/gen/5/numbers\" | tr -d ' ' > \"$PLEXUS_OUT/n\""));
        w.inputs = vec![Input {
            id: id.clone(),
            task: "gen".into(),
            rank: 5,
            name: "numbers".into(),
            holders: vec![
                grpc_only("http://127.0.0.1:1"),
                peer::Source { peer_addr: url, rails: producer_rails.local_addrs() },
            ],
            size: 3_000_000,
        }];
        w.outputs = vec!["n".into()];
        let r = f.runner.run(&w, &CancellationToken::new()).await;
        assert_eq!(state(&r), pb::SubtaskState::Succeeded, "{}", r.error);
        assert_eq!(r.fetched_bytes, 3_000_000);
        assert!(f.cache.contains(&id), "the fetched input stays cached");
        let n = ObjectId { job, task: "use".into(), rank: 2, name: "n".into() };
        assert_eq!(std::fs::read_to_string(f.cache.path(&n)).unwrap().trim(), "3000000");
        assert!(std::fs::read_dir(f.layout.tmp_dir()).unwrap().next().is_none(), "no partial downloads left");
        let got: u64 = f.rails.stats().rails.iter().map(|r| r.bytes_received).sum();
        assert!(got >= 3_000_000, "the object came over the data plane ({got} bytes received)");
        stop.cancel();
        server.await.unwrap().unwrap();
    }

    #[tokio::test]
    async fn evictions_count_against_the_attempt_that_caused_them() {
        let dir = tempfile::tempdir().unwrap();
        let layout = Layout::new(dir.path());
        std::fs::create_dir_all(layout.tmp_dir()).unwrap();
        let cache = Cache::open(layout.cache_dir(), 100).unwrap();
        let attempts = Attempts::new(CancellationToken::new());
        let isolation =
            Arc::new(Isolation::setup(Choice::Only(Mode::ProcessGroup), "test", layout.pid_records_dir()).unwrap());
        let runner = Runner::new(
            layout.clone(),
            cache.clone(),
            attempts,
            TaskTracker::new(),
            endpoint().await,
            isolation,
            NodeGpus::default(),
        );
        let job = JobId::random();
        let old = ObjectId { job, task: "old".into(), rank: 0, name: "x".into() };
        std::fs::write(layout.root().join("scratch"), [0u8; 80]).unwrap();
        drop(cache.insert(&old, &layout.root().join("scratch")).unwrap());
        let mut w = work(&attempt(job, "new"), sh("head -c 50 /dev/zero > \"$PLEXUS_OUT/y\""));
        w.outputs = vec!["y".into()];
        let r = runner.run(&w, &CancellationToken::new()).await;
        assert_eq!(state(&r), pb::SubtaskState::Succeeded, "{}", r.error);
        assert_eq!(r.evicted_bytes, 80);
        assert!(!cache.contains(&old));
    }

    /// An allreduce assignment for `rank` of a gang over `members`, reading `gen/<rank>/g`.
    fn member(job: JobId, rank: u32, kind: &str, members: &[Vec<std::net::SocketAddr>], dtype: &str) -> pb::Assignment {
        let a = AttemptRef { job, task: "sum".into(), rank, attempt: 1 };
        let id = ObjectId { job, task: "gen".into(), rank, name: "g".into() };
        pb::Assignment {
            attempt: Some(pb::AttemptRef::from(&a)),
            kind: kind.into(),
            replicas: members.len() as u32,
            inputs: vec![pb::InputObject { object_id: id.to_string(), ..Default::default() }],
            outputs: vec!["total".into()],
            collective: Some(pb::Collective {
                members: members
                    .iter()
                    .map(|m| pb::Member { rails: m.iter().map(ToString::to_string).collect() })
                    .collect(),
                // Each gang has its own tag space, as the coordinator gives it (a hash of job, task
                // and generation): the data plane refuses a second message under a tag that was
                // delivered to a posted receive, so two collectives must not share one.
                tag: gang_tag_of(job),
                dtype: dtype.into(),
                op: "sum".into(),
                root: 1,
                algorithm: "halving".into(),
                ..Default::default()
            }),
            ..Default::default()
        }
    }

    #[tokio::test]
    async fn collective_members_reduce_their_inputs_over_the_data_plane() {
        let (f0, f1) = (fixture().await, fixture().await);
        let job = JobId::random();
        let members = vec![f0.rails.local_addrs(), f1.rails.local_addrs()];
        for (rank, f) in [&f0, &f1].into_iter().enumerate() {
            let id = ObjectId { job, task: "gen".into(), rank: rank as u32, name: "g".into() };
            let values: Vec<u8> = (0..1000i32).flat_map(|i| (i * (rank as i32 + 1)).to_le_bytes()).collect();
            std::fs::write(f.layout.root().join("scratch"), values).unwrap();
            drop(f.cache.insert(&id, &f.layout.root().join("scratch")).unwrap());
        }
        for kind in ["allreduce", "reduce"] {
            let job = if kind == "reduce" {
                // A fresh job id keeps the two runs' attempts and outputs apart; same inputs.
                let j2 = JobId::random();
                for (rank, f) in [&f0, &f1].into_iter().enumerate() {
                    let from = ObjectId { job, task: "gen".into(), rank: rank as u32, name: "g".into() };
                    let to = ObjectId { job: j2, task: "gen".into(), rank: rank as u32, name: "g".into() };
                    std::fs::copy(f.cache.path(&from), f.layout.root().join("scratch")).unwrap();
                    drop(f.cache.insert(&to, &f.layout.root().join("scratch")).unwrap());
                }
                j2
            } else {
                job
            };
            let w0 = Work::from_pb(attempt_of(job, 0), member(job, 0, kind, &members, "i32")).unwrap();
            let w1 = Work::from_pb(attempt_of(job, 1), member(job, 1, kind, &members, "i32")).unwrap();
            let cancel = CancellationToken::new();
            let (r0, r1) = tokio::join!(f0.runner.run(&w0, &cancel), f1.runner.run(&w1, &cancel));
            for r in [&r0, &r1] {
                assert_eq!(state(r), pb::SubtaskState::Succeeded, "{kind}: {}", r.error);
            }
            let expect: Vec<u8> = (0..1000i32).flat_map(|i| (i * 3).to_le_bytes()).collect();
            let out = |f: &Fixture, rank| {
                std::fs::read(f.cache.path(&ObjectId { job, task: "sum".into(), rank, name: "total".into() })).unwrap()
            };
            if kind == "allreduce" {
                assert_eq!(out(&f0, 0), expect);
                assert_eq!(out(&f1, 1), expect);
            } else {
                assert!(out(&f0, 0).is_empty(), "only the root holds a reduce's result");
                assert_eq!(out(&f1, 1), expect);
            }
            let log = String::from_utf8_lossy(&r1.stdout_tail).to_string();
            assert!(log.starts_with(&format!("{kind} i32 sum over 2 members")), "{log}");
        }
    }

    fn gang_tag_of(job: JobId) -> u64 {
        u64::from(u32::from_le_bytes(job.as_bytes()[..4].try_into().unwrap()).max(1)) << 32
    }

    fn attempt_of(job: JobId, rank: u32) -> AttemptRef {
        AttemptRef { job, task: "sum".into(), rank, attempt: 1 }
    }

    #[test]
    fn bad_collective_assignments_are_refused_with_a_reason() {
        let job = JobId::random();
        let members = vec![vec!["127.0.0.1:1".parse().unwrap()], vec!["127.0.0.1:2".parse().unwrap()]];
        let err = |a: pb::Assignment| Work::from_pb(attempt_of(job, 0), a).unwrap_err().to_string();
        let ok = member(job, 0, "allreduce", &members, "f32");
        assert!(Work::from_pb(attempt_of(job, 0), ok.clone()).is_ok());
        assert!(err(member(job, 0, "allreduce", &members, "f16")).contains("unknown dtype \"f16\""));
        assert!(err(pb::Assignment { collective: None, ..ok.clone() }).contains("without its communicator"));
        assert!(err(pb::Assignment { outputs: vec![], ..ok.clone() }).contains("needs 1 input(s) and one output"));
        let mut one = ok.clone();
        one.collective.as_mut().unwrap().members.truncate(0);
        assert!(err(one).contains("rank 0 is not a member of a collective of 0"));
        let mut bad_rail = ok.clone();
        bad_rail.collective.as_mut().unwrap().members[1].rails = vec!["nowhere".into()];
        assert!(err(bad_rail).contains("collective member 1: rail address \"nowhere\""));
        let mut root = member(job, 0, "reduce", &members, "f32");
        root.collective.as_mut().unwrap().root = 2;
        assert!(err(root).contains("reduce root 2"));
    }
}
