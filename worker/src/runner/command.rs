//! The command stage: the attempt's process spawned in its own process group and confinement
//! ([`crate::isolation`]) under its supervisor ([`crate::shim`], which kills it when the worker
//! dies or its lease runs out), waited for until it exits, times out or is cancelled, and then
//! everything still in its confinement killed, so that nothing it started outlives it.

use std::os::unix::process::ExitStatusExt;
use std::process::{ExitStatus, Stdio};
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::watch;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use tracing::{debug, warn};

use crate::error::{Error, Result};
use crate::isolation::{Confinement, Isolation, Limits, become_user, join_cgroups, kill_group};
use crate::layout::Layout;
use crate::lease::{Lease, boot_ms};
use crate::shim::{Spec, Supervisor};

use super::context::{Ctx, NO_EXIT_CODE, Outcome, WorkDirs};
use super::environment::{WORKER_ONLY_ENV, account_env, code_env, task_env};
use super::validation::Work;
use crate::container::{RunSpec, container_env, remove_cgroup_leftovers};

/// How a command's process ended.
pub(super) enum ProcessEnd {
    /// It exited with status 0 (`exit_code`): its outputs are collected next.
    Succeeded { exit_code: i32 },
    /// It ended any other way, or never started: the outcome says how.
    Ended(Outcome),
}

/// The attempt's process: its supervisor's command, or the worker's own child.
enum Process {
    Supervised(Supervisor),
    Child(tokio::process::Child),
}

impl Process {
    /// The command's pid, which is its process group's id.
    fn pid(&self) -> Option<i32> {
        match self {
            Process::Supervised(s) => Some(s.pid()),
            Process::Child(c) => c.id().and_then(|p| i32::try_from(p).ok()),
        }
    }

    /// Waits for the command's end (renewing its supervisor's lease meanwhile): its status, and
    /// why its supervisor killed it, if it did. Cancel-safe.
    async fn wait(&mut self, lease: &mut watch::Receiver<u64>) -> std::io::Result<(ExitStatus, Option<String>)> {
        match self {
            Process::Supervised(s) => s.wait(lease).await.map(|e| (e.status, e.fenced)),
            Process::Child(c) => c.wait().await.map(|s| (s, None)),
        }
    }
}

/// Why the wait for the process ended.
enum End {
    Exited,
    TimedOut,
    Cancelled,
}

impl Ctx {
    /// Runs the attempt's command with `logs` (stdout, stderr) to its end.
    pub(super) async fn run_process(
        &self,
        work: &Work,
        dirs: &WorkDirs,
        logs: (std::fs::File, std::fs::File),
        cancel: &CancellationToken,
        started_at: u64,
    ) -> ProcessEnd {
        let a = &work.attempt;
        let failed = |e: Error, exit_code: i32| ProcessEnd::Ended(Outcome::failed(e, started_at, exit_code));
        // Nothing starts while the lease has run out: its supervisor would freeze it at once, or
        // the coordinator may have given the worker up already (`crate::lease`).
        tokio::select! {
            biased;
            () = cancel.cancelled() => return ProcessEnd::Ended(self.cancelled(a, started_at, NO_EXIT_CODE)),
            () = self.lease.live() => {}
        }
        let mut confinement =
            match confine(&self.isolation, Layout::attempt_name(a), Limits::new(work.cpu, work.memory)).await {
                Ok(c) => c,
                Err(e) => return failed(e, NO_EXIT_CODE),
            };
        let mut process = match self.start(work, dirs, logs, &confinement).await {
            Ok(p) => p,
            Err(e) => {
                release(confinement).await;
                return failed(e, NO_EXIT_CODE);
            }
        };
        // With process_group(0) the group id is the leader's pid.
        let pgid = process.pid();
        if let Some(pid) = pgid {
            confinement.started(pid);
        }
        debug!(attempt = %a, pid = ?pgid, isolation = %self.isolation.mode(), "process started");

        let mut lease = self.lease.subscribe();
        // Biased, cancel first: a worker that kills its frozen attempts (the coordinator gave it
        // up) and then registers again must not pass the new lease on to them before the kill.
        let (end, waited) = tokio::select! {
            biased;
            () = cancel.cancelled() => (End::Cancelled, None),
            s = process.wait(&mut lease) => (End::Exited, Some(s)),
            () = run_for(work.timeout, &self.lease) => (End::TimedOut, None),
        };
        // On timeout or cancel this is the point; after a normal exit it removes whatever the
        // command left behind (background processes, daemons), so that nothing outlives its
        // attempt.
        if let Some(pgid) = pgid {
            kill_group(pgid);
        }
        let confinement = kill(confinement).await;
        if let (Some(image), Some(containers)) = (&work.image, &self.containers) {
            // Its client is gone; the container goes too, if it has not (no cgroup parent held it).
            containers.remove(&container_name(a)).await;
            debug!(attempt = %a, image, "container removed");
        }
        let cgroup_path = confinement.as_ref().and_then(Confinement::v1_path).filter(|_| work.image.is_some());
        let waited = match waited {
            Some(s) => s,
            None => process.wait(&mut lease).await,
        };
        let unsuccessful = !matches!(&waited, Ok((s, _)) if s.success());
        let memory_limit = confinement.as_ref().and_then(Confinement::memory_limit);
        // A container's main process killed (the client exits 137) at the attempt's limit.
        let container_killed = work.image.is_some() && matches!(&waited, Ok((s, _)) if s.code() == Some(137));
        let oom = unsuccessful
            && confinement.as_ref().is_some_and(|c| c.oom_killed() || (container_killed && c.memory_limit_reached()));
        if let Some(c) = confinement {
            release(c).await;
        }
        if let Some(path) = cgroup_path {
            // What the runtime made of the attempt's path in the hierarchies the worker leaves alone.
            tokio::task::spawn_blocking(move || remove_cgroup_leftovers(&path)).await.ok();
        }
        let (status, fenced) = match waited {
            Ok(s) => s,
            Err(e) => return failed(Error::Wait(e), NO_EXIT_CODE),
        };
        let exit_code = status.code().unwrap_or_else(|| 128 + status.signal().unwrap_or(0));
        match (end, fenced) {
            // The supervisor killed it: the worker died or its lease ran out.
            (_, Some(why)) => ProcessEnd::Ended(Outcome::fenced(why, started_at, exit_code)),
            (End::TimedOut, None) => failed(Error::TimedOut { after: work.timeout.unwrap_or_default() }, exit_code),
            (End::Cancelled, None) => ProcessEnd::Ended(self.cancelled(a, started_at, exit_code)),
            (End::Exited, None) if status.success() => ProcessEnd::Succeeded { exit_code },
            (End::Exited, None) => match memory_limit {
                Some(limit) if oom => failed(Error::OutOfMemory { limit }, exit_code),
                _ => failed(Error::Exit { status }, exit_code),
            },
        }
    }

    /// Starts the command: under its supervisor ([`crate::shim`]) when the runner has one, else
    /// as the worker's own child.
    async fn start(
        &self,
        work: &Work,
        dirs: &WorkDirs,
        logs: (std::fs::File, std::fs::File),
        confinement: &Confinement,
    ) -> Result<Process> {
        let launch = self.launch(work, dirs, confinement);
        let Some(program) = &self.supervisor else {
            return self.spawn(work, dirs, logs, confinement, launch).map(Process::Child);
        };
        let spec = Spec {
            argv: launch.argv,
            cgroups: confinement.procs_files().iter().map(|f| f.to_string_lossy().into_owned()).collect(),
            kill: confinement.kill_target(),
            lease_end: self.lease.end(),
            uid: launch.uid,
            frozen_limit_ms: self.lease.frozen_limit_ms(),
        };
        Supervisor::start(program, &spec, dirs.cwd(), launch.env, &WORKER_ONLY_ENV, logs)
            .await
            .map(Process::Supervised)
            .map_err(|source| Error::Spawn { program: work.argv[0].clone(), source })
    }

    /// Starts the command as the worker's child in the work dir with its environment, in its own
    /// process group, joining its cgroups (if any) and then taking the task uid (if any) between
    /// fork and exec.
    fn spawn(
        &self,
        work: &Work,
        dirs: &WorkDirs,
        (stdout, stderr): (std::fs::File, std::fs::File),
        confinement: &Confinement,
        launch: Launch,
    ) -> Result<tokio::process::Child> {
        let program = &launch.argv[0];
        let mut cmd = tokio::process::Command::new(program);
        cmd.args(&launch.argv[1..])
            .current_dir(dirs.cwd())
            .envs(launch.env)
            .stdin(Stdio::null())
            .stdout(stdout)
            .stderr(stderr)
            // Its own process group, so that a timeout or cancel can signal everything it started
            // (and, without cgroups, so that a restarted worker can find it by its record).
            .process_group(0)
            // A backstop in case this future is dropped: the leader at least does not leak.
            .kill_on_drop(true);
        for k in WORKER_ONLY_ENV {
            cmd.env_remove(k);
        }
        let cgroups = confinement.procs_files();
        let uid = launch.uid;
        if !cgroups.is_empty() || uid.is_some() {
            // SAFETY: `join_cgroups` and `become_user` only make async-signal-safe system calls
            // on memory prepared before the fork, as code between fork and exec must. The
            // cgroups are joined first: writing `cgroup.procs` takes root.
            unsafe {
                cmd.pre_exec(move || {
                    join_cgroups(&cgroups)?;
                    match uid {
                        Some(uid) => become_user(uid),
                        None => Ok(()),
                    }
                });
            }
        }
        cmd.spawn().map_err(|source| Error::Spawn { program: work.argv[0].clone(), source })
    }

    /// What the attempt's process runs, as whom and with which variables: its command under
    /// the task uid, or, for an `image` task, the runtime's client running the command in a
    /// container (as the worker's user, who may talk to the runtime; the container runs as the
    /// task uid).
    fn launch(&self, work: &Work, dirs: &WorkDirs, confinement: &Confinement) -> Launch {
        let mut env = task_env(work, &self.gpus, &dirs.input, &dirs.output);
        env.extend(code_env(work, dirs.cwd.as_deref(), dirs.python.as_ref().map(|p| p.dir.as_path())));
        env.extend(account_env(work, &dirs.root, &dirs.tmp, dirs.uid));
        let (Some(image), Some(containers)) = (&work.image, &self.containers) else {
            return Launch { argv: work.argv.clone(), uid: dirs.uid, env };
        };
        let env = container_env(env, &work.gpus);
        let name = container_name(&work.attempt);
        let spec = RunSpec {
            name: &name,
            image,
            argv: &work.argv,
            root: &dirs.root,
            input: &dirs.input,
            working_dir: dirs.cwd.as_deref(),
            uid: dirs.uid,
            cgroup_parent: confinement.v1_path(),
            cpu: work.cpu,
            memory: work.memory,
            gpus: &work.gpus,
            env_keys: env.iter().map(|(k, _)| k.clone()).collect(),
        };
        let argv = containers.run_argv(&spec);
        Launch { argv, uid: None, env }
    }
}

/// What an attempt's process runs ([`Ctx::launch`]).
struct Launch {
    argv: Vec<String>,
    /// The uid the process takes (`None`: the worker's).
    uid: Option<u32>,
    env: Vec<(String, String)>,
}

/// The container of an attempt: its name is unique on the node.
fn container_name(a: &plexus_proto::AttemptRef) -> String {
    format!("plexus-{}", Layout::attempt_name(a))
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

/// Waits until the attempt has run for `timeout` (for ever without one), not counting the time
/// it spent frozen while the worker's lease had run out ([`Lease::lapsed_ms`]): a task that was
/// frozen through a pause of its worker or coordinator gets its whole time once thawed.
async fn run_for(timeout: Option<Duration>, lease: &Lease) {
    let Some(timeout) = timeout else { return std::future::pending().await };
    let start = Instant::now();
    let frozen_before = lease.lapsed_ms(boot_ms());
    loop {
        let frozen = Duration::from_millis(lease.lapsed_ms(boot_ms()).saturating_sub(frozen_before));
        let Some(deadline) = start.checked_add(timeout.saturating_add(frozen)) else {
            return std::future::pending().await;
        };
        if Instant::now() >= deadline {
            return;
        }
        // Woken at the deadline, or sooner to look again while frozen time still accrues.
        tokio::time::sleep_until(deadline.min(Instant::now() + Duration::from_secs(1))).await;
    }
}

/// Removes an attempt's confinement (cgroups or pid record), off the async threads.
async fn release(c: Confinement) {
    if let Err(e) = tokio::task::spawn_blocking(move || c.release()).await {
        warn!(error = %e, "removing an attempt's cgroup failed");
    }
}
