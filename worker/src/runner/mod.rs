//! Running attempts: validating an assignment, built-in kinds, and commands (inputs, process,
//! timeout, outputs, final report).
//!
//! An attempt of a command goes through these steps, each of which can end it:
//!
//! 1. The job's task uid is taken ([`crate::isolation::TaskUsers`]: a uid per job when the worker
//!    is root), and its work dir `DIR/work/<job>/<task>/<rank>.<attempt>/` is created with empty
//!    `in/`, `out/` and `tmp/`, all the worker's (0700) until the inputs are in place; then the
//!    work dir, `out/` and `tmp/` are given to the task uid (a command's: a collective runs no
//!    process), and `in/` stays the worker's.
//! 2. Inputs are materialised as `in/<task>/<rank>/<name>`, read-only to the task: hard links of
//!    the cache's files when the task runs under a uid of its own (the worker owns them, mode
//!    0444: the task can neither write nor chmod them), else reflinked or copied, so that the
//!    cache's inode is never the task's to change. Inputs not cached are fetched first from the
//!    first holder that can serve them; they stay pinned in the cache until the attempt's final
//!    report is built.
//! 3. Only now is RUNNING reported (with `started_at`), then the process is spawned in its own
//!    process group and its own confinement ([`crate::isolation`]: a cgroup with the cpu and
//!    memory requests as limits, or a recorded process group), as the task uid (taken after the
//!    child joined its cgroups), with the environment of [`task_env`], stdout/stderr going to the
//!    log files.
//! 4. The process ends, times out, or is cancelled; in every case everything still in its cgroup
//!    (or process group) is then SIGKILLed, so that nothing a command started — background
//!    processes, daemons — outlives its attempt. A command that died while its cgroup counted an
//!    OOM kill failed with `killed: out of memory (limit …)`.
//! 5. On exit 0 every declared output is first moved out of the task's reach (into `DIR/tmp/`),
//!    then must be a regular file; they become the worker's, read-only, and move into the cache.
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
//!
//! # Layout
//! One file per stage, each an `impl` of the runner's shared context on its own:
//! - `validation`: an assignment becomes a [`Work`] (every path, argument and variable checked);
//! - `environment`: the GPUs an attempt may use, and [`task_env`];
//! - `fetch`: inputs fetched into the cache and linked into the work dir;
//! - `command`: the process, its confinement, its timeout and its end;
//! - `collective` and `exchange`: the collective kinds, run inside the worker;
//! - `outputs`: declared outputs checked and moved into the cache;
//! - `attempt`: the stages in order, and the final report;
//! - `context`: what the stages share (the context, the work dirs, the accounting, the outcome).
//!
//! The stages import `context` and each other, never this file, which declares them, re-exports
//! the public types and holds [`Runner`].

mod attempt;
mod collective;
mod command;
mod context;
mod environment;
mod exchange;
mod fetch;
mod gang;
mod outputs;
mod validation;

#[cfg(test)]
mod tests;

use std::sync::Arc;

use plexus_proto::rules::is_collective;
use plexus_proto::{AttemptRef, convert, now_ms, pb};
#[cfg(test)]
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;
use tracing::{debug, info, warn};

use crate::attempts::Attempts;
use crate::cache::Cache;
use crate::isolation::{Isolation, TaskUsers};
use crate::layout::Layout;

use context::Ctx;
pub use context::{NO_EXIT_CODE, report};
pub use environment::{NodeGpus, task_env};
pub use validation::{CollectiveWork, GangWork, Input, Work};

/// Starts and cancels attempts. Cheap to clone.
#[derive(Clone, Debug)]
pub struct Runner {
    ctx: Arc<Ctx>,
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
                cache,
                attempts,
                tracker,
                rails,
                meter: Arc::default(),
                isolation,
                gpus,
                peer_tls: None,
                counters: Arc::default(),
                users: Arc::new(TaskUsers::worker()),
                lease: Arc::new(crate::lease::Lease::unlimited()),
                supervisor: None,
                log_cap: crate::logs::DEFAULT_LOG_CAP,
                working_dirs: crate::working_dir::WorkingDirs::new(layout.code_dir()),
                python_envs: crate::python_env::PythonEnvs::new(
                    layout.envs_dir(),
                    "python3".into(),
                    crate::python_env::DEFAULT_MAX_BYTES,
                    false,
                ),
                containers: None,
                layout,
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

    /// The same runner running commands as `users` says (a uid per job, or the worker's user;
    /// by default the worker's). Call before any assignment.
    pub fn with_task_users(mut self, users: Arc<TaskUsers>) -> Runner {
        match Arc::get_mut(&mut self.ctx) {
            Some(ctx) => ctx.users = users,
            None => tracing::error!("Runner::with_task_users called after the runner was shared; not applied"),
        }
        self
    }

    /// The same runner holding its attempts to `lease` ([`crate::lease`]), each command run by a
    /// supervisor (`program`, the worker's own executable, in shim mode: [`crate::shim`]). Without
    /// this (the runner's unit tests), commands run as the worker's children, with no lease.
    /// Call before any assignment.
    pub fn with_lease(mut self, lease: Arc<crate::lease::Lease>, program: std::path::PathBuf) -> Runner {
        match Arc::get_mut(&mut self.ctx) {
            Some(ctx) => {
                ctx.lease = lease;
                ctx.supervisor = Some(program);
            }
            None => tracing::error!("Runner::with_lease called after the runner was shared; not applied"),
        }
        self
    }

    /// Keeps each attempt's stdout and stderr within `cap` bytes (`--log-cap`).
    /// The same runner building Python environments with `envs`. Call before any assignment.
    pub fn with_python_envs(mut self, envs: crate::python_env::PythonEnvs) -> Runner {
        match Arc::get_mut(&mut self.ctx) {
            Some(ctx) => ctx.python_envs = envs,
            None => tracing::error!("Runner::with_python_envs called after the runner was shared; not applied"),
        }
        self
    }

    /// The same runner running `image` tasks with `containers`. Call before any assignment.
    pub fn with_containers(mut self, containers: Option<Arc<crate::container::Containers>>) -> Runner {
        match Arc::get_mut(&mut self.ctx) {
            Some(ctx) => ctx.containers = containers,
            None => tracing::error!("Runner::with_containers called after the runner was shared; not applied"),
        }
        self
    }

    pub fn with_log_cap(mut self, cap: u64) -> Runner {
        match Arc::get_mut(&mut self.ctx) {
            Some(ctx) => ctx.log_cap = cap,
            None => tracing::error!("Runner::with_log_cap called after the runner was shared; not applied"),
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

    /// Fetches working dirs through `client` (the session's connection, as `worker`) from now on.
    pub fn set_coordinator(
        &self,
        client: pb::worker_service_client::WorkerServiceClient<tonic::transport::Channel>,
        worker: plexus_proto::WorkerId,
    ) {
        self.ctx.working_dirs.set_coordinator(client, worker);
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
        // Without a supervisor nothing can freeze it when the lease runs out (`crate::lease`).
        if is_collective(&a.kind) || self.ctx.supervisor.is_none() {
            attempts.mark_in_worker(&attempt);
        }
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
