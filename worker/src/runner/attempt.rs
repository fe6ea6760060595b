//! An attempt from start to report: the stages in order (work dir, inputs, RUNNING, the command
//! or the collective, outputs), then the final report with the logs' tails and the accounting,
//! and the work dir removed.

use std::path::{Path, PathBuf};

use plexus_proto::{now_ms, pb};
use tokio_util::sync::CancellationToken;
use tracing::{info, warn};

use crate::cache::Pin;
use crate::error::{Error, Result};
use crate::isolation::{TaskUser, give_to};
use crate::logs::{Capture, REPORT_TAIL_BYTES, capture, iteration_times, tail_or_empty};

use super::command::ProcessEnd;
use super::context::{Accounting, Ctx, NO_EXIT_CODE, Outcome, WorkDirs, report};
use super::validation::Work;

impl Ctx {
    /// Runs a command (or collective) attempt to its end and returns its final report.
    pub(super) async fn run_command(&self, work: &Work, cancel: &CancellationToken) -> pb::TaskReport {
        let a = &work.attempt;
        // The job's uid is held until the work dir is gone.
        let (user, refused) = match self.users.acquire(a.job) {
            Ok(u) => (Some(u), None),
            Err(e) => (None, Some(e)),
        };
        let mut dirs = WorkDirs::new(self.layout.work_dir(a), user.as_ref().and_then(TaskUser::uid));
        let mut acct = Accounting::default();
        let mut pins = Vec::new();
        let outcome = match refused {
            Some(e) => Outcome::failed(e, 0, NO_EXIT_CODE),
            None => self.execute(work, &mut dirs, cancel, &mut acct, &mut pins).await,
        };
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
            checkpoint: outcome.checkpoint,
            bad_copies: acct.bad_copies,
            stdout_tail,
            stderr_tail: tail_or_empty(&err_log, REPORT_TAIL_BYTES).await,
            iter_ms,
            iters,
            ..report(a, outcome.state)
        };
        drop(pins);
        remove_dir(dirs.root).await;
        if let Err(e) = tokio::task::spawn_blocking(move || drop(user)).await {
            warn!(attempt = %a, error = %e, "releasing the task uid failed");
        }
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

    /// The stages of an attempt, each of which can end it.
    async fn execute(
        &self,
        work: &Work,
        dirs: &mut WorkDirs,
        cancel: &CancellationToken,
        acct: &mut Accounting,
        pins: &mut Vec<Pin>,
    ) -> Outcome {
        let a = &work.attempt;
        if let Err(e) = prepare_work_dir(dirs).await {
            return Outcome::failed(e, 0, NO_EXIT_CODE);
        }
        let materialised = tokio::select! {
            biased;
            () = cancel.cancelled() => return self.cancelled(a, 0, NO_EXIT_CODE),
            r = self.materialise(&work.inputs, dirs, acct, pins) => r,
        };
        if let Err(e) = materialised {
            return Outcome::failed(e, 0, NO_EXIT_CODE);
        }
        if let Some(r) = &work.resume {
            // The checkpoint to resume from: an attempt that cannot have it runs without it.
            let fetched = tokio::select! {
                biased;
                () = cancel.cancelled() => return self.cancelled(a, 0, NO_EXIT_CODE),
                r = self.materialise(std::slice::from_ref(r), dirs, acct, pins) => r,
            };
            if let Err(e) = fetched {
                warn!(attempt = %a, error = %e, "running without the checkpoint to resume from");
            }
        }
        let code = tokio::select! {
            biased;
            () = cancel.cancelled() => return self.cancelled(a, 0, NO_EXIT_CODE),
            r = self.prepare_code(work, dirs) => r,
        };
        if let Err(e) = code {
            return Outcome::failed(e, 0, NO_EXIT_CODE);
        }
        let dirs = &*dirs;
        if work.collective.is_none()
            && let Err(e) = hand_over(dirs)
        {
            return Outcome::failed(e, 0, NO_EXIT_CODE);
        }

        let started_at = now_ms();
        self.report_running(work, started_at, acct);
        let (out_log, err_log) = self.layout.log_files(a);
        let (stdout, stderr) = match open_logs(&out_log, &err_log, self.log_cap) {
            Ok(captures) => captures,
            Err(e) => return Outcome::failed(e, started_at, NO_EXIT_CODE),
        };
        let (out_file, err_file) = match (stdout.writer.try_clone(), stderr.writer.try_clone()) {
            (Ok(o), Ok(e)) => (o, e),
            (Err(e), _) | (_, Err(e)) => {
                return Outcome::failed(Error::io("open log pipe", &out_log)(e), started_at, NO_EXIT_CODE);
            }
        };
        // The exit code a success reports, and the one a failure to store the outputs reports:
        // a collective runs no process, so it has none of its own to report when that fails.
        let ran = match &work.collective {
            Some(c) => match self.collective(work, c, dirs, out_file, cancel).await {
                Ok(()) => Ok((0, NO_EXIT_CODE)),
                Err(Error::Cancelled) => Err(self.cancelled(a, started_at, NO_EXIT_CODE)),
                Err(e) => Err(Outcome::failed(e, started_at, NO_EXIT_CODE)),
            },
            None => match self.run_member(work, dirs, (out_file, err_file), cancel, started_at).await {
                ProcessEnd::Succeeded { exit_code } => Ok((exit_code, exit_code)),
                ProcessEnd::Ended(outcome) => Err(outcome),
            },
        };
        // Everything written is in the log files before their tails are read for the report.
        tokio::join!(stdout.finish(&out_log), stderr.finish(&err_log));
        let (exit_code, failed_exit_code) = match ran {
            Ok(codes) => codes,
            Err(mut outcome) => {
                outcome.checkpoint = self.keep_checkpoint(work, &dirs.output, dirs.uid, acct, pins).await;
                return outcome;
            }
        };
        match self.collect_outputs(work, &dirs.output, dirs.uid, acct, pins).await {
            Ok(outputs) => Outcome::succeeded(started_at, exit_code, outputs),
            Err(e) => Outcome::failed(e, started_at, failed_exit_code),
        }
    }

    /// What the command runs with beside its inputs, each once per node: the job's working dir
    /// (the command's cwd), the task's Python environment (a build that fails fails the attempt
    /// here, with the installer's words, before the command runs), its image (pulled unless
    /// present). The attempt's stage says what it waits for.
    async fn prepare_code(&self, work: &Work, dirs: &mut WorkDirs) -> Result<()> {
        if work.collective.is_some() {
            return Ok(());
        }
        if let Some((digest, size)) = work.working_dir {
            dirs.cwd = Some(self.working_dirs.get(digest, size).await?);
        }
        if !work.python.is_empty() {
            self.report_stage(work, "preparing the python environment");
            dirs.python = Some(self.python_envs.get(&work.python).await?);
        }
        if let Some(image) = &work.image {
            let Some(containers) = &self.containers else {
                let reason = "this worker has no container runtime (--container-runtime)".to_string();
                return Err(Error::Image { image: image.clone(), reason });
            };
            containers.ensure(image, || self.report_stage(work, &format!("pulling image {image}"))).await?;
        }
        Ok(())
    }

    /// Reports what the attempt is doing before it runs (`plexus status --subtasks` shows it
    /// beside ASSIGNED).
    fn report_stage(&self, work: &Work, stage: &str) {
        let a = &work.attempt;
        self.attempts.progress(a, pb::TaskReport { stage: stage.to_string(), ..report(a, pb::SubtaskState::Assigned) });
    }

    /// Reports RUNNING, with `started_at` and the inputs' fetch accounting: only once every
    /// input is in place, so the time spent fetching is not counted as running.
    fn report_running(&self, work: &Work, started_at: u64, acct: &Accounting) {
        let a = &work.attempt;
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
    }
}

/// Creates the work dir with empty `in/`, `out/` and `tmp/`, the worker's and 0700 until
/// [`hand_over`]; `in/` and what is placed in it stay the worker's.
async fn prepare_work_dir(dirs: &WorkDirs) -> Result<()> {
    use std::os::unix::fs::PermissionsExt;
    // A leftover from a crashed earlier process must not leak files into this attempt.
    if tokio::fs::symlink_metadata(dirs.root()).await.is_ok() {
        remove_dir(dirs.root().to_path_buf()).await;
    }
    for d in [&dirs.input, &dirs.output, &dirs.tmp] {
        tokio::fs::create_dir_all(d).await.map_err(Error::io("create work dir", d))?;
    }
    for d in [&dirs.root, &dirs.output, &dirs.tmp] {
        let private = std::fs::Permissions::from_mode(0o700);
        tokio::fs::set_permissions(d, private).await.map_err(Error::io("set the mode of", d))?;
    }
    Ok(())
}

/// Gives the work dir, `out/` and `tmp/` to the task's uid, once the inputs are in place: until
/// then no process of that uid can enter, so none can swap `in/` for a link while the worker
/// writes there. (A collective runs no process: its dirs stay the worker's.)
fn hand_over(dirs: &WorkDirs) -> Result<()> {
    if let Some(uid) = dirs.uid {
        for d in [&dirs.root, &dirs.output, &dirs.tmp] {
            give_to(d, uid)?;
        }
    }
    Ok(())
}

/// The attempt's stdout and stderr, each through a pipe into its log file kept within `cap`.
fn open_logs(out: &Path, err: &Path, cap: u64) -> Result<(Capture, Capture)> {
    if let Some(dir) = out.parent() {
        std::fs::create_dir_all(dir).map_err(Error::io("create log dir", dir))?;
    }
    let o = capture(out, cap).map_err(Error::io("create log file", out))?;
    let e = capture(err, cap).map_err(Error::io("create log file", err))?;
    Ok((o, e))
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
