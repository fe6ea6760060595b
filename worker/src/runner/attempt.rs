//! An attempt from start to report: the stages in order (work dir, inputs, RUNNING, the command
//! or the collective, outputs), then the final report with the logs' tails and the accounting,
//! and the work dir removed.

use std::path::{Path, PathBuf};

use plexus_proto::{now_ms, pb};
use tokio_util::sync::CancellationToken;
use tracing::{info, warn};

use crate::cache::Pin;
use crate::error::{Error, Result};
use crate::logs::{REPORT_TAIL_BYTES, iteration_times, tail_or_empty};

use super::command::ProcessEnd;
use super::context::{Accounting, Ctx, NO_EXIT_CODE, Outcome, WorkDirs, report};
use super::validation::Work;

impl Ctx {
    /// Runs a command (or collective) attempt to its end and returns its final report.
    pub(super) async fn run_command(&self, work: &Work, cancel: &CancellationToken) -> pb::TaskReport {
        let a = &work.attempt;
        let dirs = WorkDirs::new(self.layout.work_dir(a));
        let mut acct = Accounting::default();
        let mut pins = Vec::new();
        let outcome = self.execute(work, &dirs, cancel, &mut acct, &mut pins).await;
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
            bad_copies: acct.bad_copies,
            stdout_tail,
            stderr_tail: tail_or_empty(&err_log, REPORT_TAIL_BYTES).await,
            iter_ms,
            iters,
            ..report(a, outcome.state)
        };
        drop(pins);
        remove_dir(dirs.root).await;
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
        dirs: &WorkDirs,
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
            () = cancel.cancelled() => return self.cancelled(0, NO_EXIT_CODE),
            r = self.materialise(&work.inputs, dirs, acct, pins) => r,
        };
        if let Err(e) = materialised {
            return Outcome::failed(e, 0, NO_EXIT_CODE);
        }

        let started_at = now_ms();
        self.report_running(work, started_at, acct);
        let (out_log, err_log) = self.layout.log_files(a);
        let (stdout, stderr) = match open_logs(&out_log, &err_log) {
            Ok(files) => files,
            Err(e) => return Outcome::failed(e, started_at, NO_EXIT_CODE),
        };
        // The exit code a success reports, and the one a failure to store the outputs reports:
        // a collective runs no process, so it has none of its own to report when that fails.
        let (exit_code, failed_exit_code) = match &work.collective {
            Some(c) => match self.collective(work, c, dirs, stdout, cancel).await {
                Ok(()) => (0, NO_EXIT_CODE),
                Err(Error::Cancelled) => return self.cancelled(started_at, NO_EXIT_CODE),
                Err(e) => return Outcome::failed(e, started_at, NO_EXIT_CODE),
            },
            None => match self.run_process(work, dirs, (stdout, stderr), cancel, started_at).await {
                ProcessEnd::Succeeded { exit_code } => (exit_code, exit_code),
                ProcessEnd::Ended(outcome) => return outcome,
            },
        };
        match self.collect_outputs(work, &dirs.output, acct, pins).await {
            Ok(outputs) => Outcome::succeeded(started_at, exit_code, outputs),
            Err(e) => Outcome::failed(e, started_at, failed_exit_code),
        }
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

async fn prepare_work_dir(dirs: &WorkDirs) -> Result<()> {
    // A leftover from a crashed earlier process must not leak files into this attempt.
    if tokio::fs::symlink_metadata(dirs.root()).await.is_ok() {
        remove_dir(dirs.root().to_path_buf()).await;
    }
    for d in [&dirs.input, &dirs.output] {
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
