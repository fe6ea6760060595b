//! `plexus watch JOB`: follows `WatchJob` until the job ends. On a terminal it draws one
//! progress bar per task group; otherwise (CI logs, pipes) it prints a plain line whenever a
//! group's counts change. Either way the last stdout line is `job <id> <state>[: <error>]`, and
//! the exit code is 0 only if the job succeeded. A coordinator that goes away before the job
//! ends (a restart, `kill -9`, a dropped connection) is reconnected to with back-off, said on
//! stderr, for up to ten minutes.

use std::collections::HashMap;
use std::io::IsTerminal;
use std::process::ExitCode;
use std::time::Duration;

use indicatif::{MultiProgress, ProgressBar, ProgressDrawTarget, ProgressStyle};
use plexus_proto::pb::{JobStatus, WatchJobRequest};
use plexus_proto::{JobId, JobState, convert};

use crate::client::{self, Client};
use crate::output::{self, GroupCounts};

pub async fn run(target: &crate::client::Target, job: &crate::args::JobRef) -> anyhow::Result<ExitCode> {
    let mut client = client::connect(target).await?;
    let job = client::resolve_job(&mut client, job).await?;
    watch_with(target, &mut client, job).await
}

/// The first wait before reconnecting to a coordinator that went away, doubled after each failed
/// try up to [`RECONNECT_MAX`].
const RECONNECT_FIRST: Duration = Duration::from_millis(200);
const RECONNECT_MAX: Duration = Duration::from_secs(5);
/// How long the watch keeps trying without reaching the coordinator before it gives up.
const RECONNECT_FOR: Duration = Duration::from_secs(600);

/// Whether a failed call or stream may succeed against the coordinator once it is back (a
/// restart, a dropped connection), as opposed to an answer (no such job, no permission).
fn retryable(status: &tonic::Status) -> bool {
    matches!(
        status.code(),
        tonic::Code::Unavailable | tonic::Code::Unknown | tonic::Code::Cancelled | tonic::Code::Aborted
    )
}

/// Follows `job` on an existing connection (`submit --watch` reuses its own). When the
/// coordinator goes away before the job ends (restarted, killed, the connection dropped), it
/// says so on stderr and reconnects with back-off for up to [`RECONNECT_FOR`].
pub async fn watch_with(target: &crate::client::Target, client: &mut Client, job: JobId) -> anyhow::Result<ExitCode> {
    let view =
        if std::io::stdout().is_terminal() { View::Bars(Bars::default()) } else { View::Lines(Lines::default()) };
    let last = watch_in(target, client, job, view).await?;
    end(&last)
}

/// Prints the job's last line (and its failure's stderr) and gives the exit code: 0 only if it
/// succeeded.
pub fn end(last: &JobStatus) -> anyhow::Result<ExitCode> {
    output::print(&output::job_final_line(last))?;
    let state = convert::job_state("state", last.state).ok();
    Ok(if state == Some(JobState::Succeeded) { ExitCode::SUCCESS } else { ExitCode::FAILURE })
}

/// [`watch_with`] printing nothing, to the job's end: its last status (`submit --logs`, where the
/// task's own output shows meanwhile and the caller prints the end after it).
pub async fn watch_quietly(
    target: &crate::client::Target,
    client: &mut Client,
    job: JobId,
) -> anyhow::Result<JobStatus> {
    watch_in(target, client, job, View::Quiet).await
}

async fn watch_in(
    target: &crate::client::Target,
    client: &mut Client,
    job: JobId,
    mut view: View,
) -> anyhow::Result<JobStatus> {
    let mut last: Option<JobStatus> = None;
    let mut wait = RECONNECT_FIRST;
    let mut lost_since: Option<std::time::Instant> = None;
    'watching: loop {
        let why = match client.watch_job(WatchJobRequest { job_id: job.to_string() }).await {
            Ok(stream) => {
                let mut stream = stream.into_inner();
                if lost_since.take().is_some() {
                    eprintln_quiet("plexus: reconnected; watching again");
                }
                wait = RECONNECT_FIRST;
                loop {
                    match stream.message().await {
                        Ok(Some(status)) => {
                            view.update(&status)?;
                            last = Some(status);
                        }
                        Ok(None)
                            if last.as_ref().is_some_and(|l| {
                                convert::job_state("state", l.state).is_ok_and(|s| s != JobState::Running)
                            }) =>
                        {
                            break 'watching;
                        }
                        Ok(None) => break "the coordinator ended the watch before the job finished".to_string(),
                        Err(status) if retryable(&status) => break client::one_line(status.message()),
                        Err(status) => {
                            view.finish();
                            return Err(status.into());
                        }
                    }
                }
            }
            Err(status) if retryable(&status) => client::one_line(status.message()),
            Err(status) => {
                view.finish();
                return Err(status.into());
            }
        };
        // Lost: reconnect with back-off, for a bounded time.
        let since = *lost_since.get_or_insert_with(std::time::Instant::now);
        loop {
            if since.elapsed() > RECONNECT_FOR {
                view.finish();
                anyhow::bail!(
                    "lost the coordinator at {} for {} s while watching {job} ({why}); the job may still be running: plexus watch {job}",
                    target.url,
                    RECONNECT_FOR.as_secs()
                );
            }
            eprintln_quiet(&format!(
                "plexus: lost the coordinator at {} ({why}); reconnecting in {:.1} s",
                target.url,
                wait.as_secs_f64()
            ));
            tokio::time::sleep(wait).await;
            wait = (wait * 2).min(RECONNECT_MAX);
            match client::connect(target).await {
                Ok(c) => {
                    *client = c;
                    continue 'watching;
                }
                Err(e) => eprintln_quiet(&format!(
                    "plexus: {}",
                    client::render_error(&e, &target.url).trim_start_matches("error: ")
                )),
            }
        }
    }
    view.finish();
    let Some(last) = last else {
        anyhow::bail!("the coordinator ended the watch of {job} without sending its status");
    };
    Ok(last)
}

fn eprintln_quiet(line: &str) {
    use std::io::Write;
    let _ = writeln!(std::io::stderr(), "{line}");
}

enum View {
    Bars(Bars),
    Lines(Lines),
    /// Nothing but the last line.
    Quiet,
}

impl View {
    fn update(&mut self, status: &JobStatus) -> anyhow::Result<()> {
        match self {
            View::Bars(b) => b.update(status),
            View::Lines(l) => {
                let text: String = l.lines_for(status).into_iter().map(|line| line + "\n").collect();
                if !text.is_empty() {
                    output::print(&text)?;
                }
            }
            View::Quiet => {}
        }
        Ok(())
    }

    fn finish(&mut self) {
        if let View::Bars(b) = self {
            b.finish();
        }
    }
}

/// Plain-text progress: the header once, then a line per group whose counts changed.
#[derive(Default)]
struct Lines {
    started: bool,
    groups: HashMap<String, GroupCounts>,
}

impl Lines {
    fn lines_for(&mut self, status: &JobStatus) -> Vec<String> {
        let mut lines = Vec::new();
        if !self.started {
            self.started = true;
            lines.push(output::watch_header(status));
        }
        for g in &status.groups {
            let counts = GroupCounts::from(g);
            if self.groups.get(&g.task) != Some(&counts) {
                lines.push(counts.line(&g.task));
                self.groups.insert(g.task.clone(), counts);
            }
        }
        lines
    }
}

/// Terminal progress: a spinner header and one bar per task group, drawn on stdout.
#[derive(Default)]
struct Bars {
    multi: Option<MultiProgress>,
    header: Option<ProgressBar>,
    bars: HashMap<String, ProgressBar>,
    prefix_width: usize,
}

impl Bars {
    fn update(&mut self, status: &JobStatus) {
        let multi = self.multi.get_or_insert_with(|| MultiProgress::with_draw_target(ProgressDrawTarget::stdout()));
        let header = self.header.get_or_insert_with(|| {
            let bar = multi.add(ProgressBar::new_spinner());
            if let Ok(style) = ProgressStyle::with_template("{spinner} {msg} [{elapsed}]") {
                bar.set_style(style);
            }
            bar.enable_steady_tick(Duration::from_millis(120));
            bar
        });
        header.set_message(output::watch_header(status));
        if self.prefix_width == 0 {
            // Sized from the first snapshot, which lists every group, so the bars line up.
            self.prefix_width = status.groups.iter().map(|g| g.task.len()).max().unwrap_or(1);
        }
        for g in &status.groups {
            let counts = GroupCounts::from(g);
            let width = self.prefix_width;
            let bar = self.bars.entry(g.task.clone()).or_insert_with(|| {
                let bar = multi.add(ProgressBar::new(u64::from(g.replicas)));
                // The ETA is indicatif's, from the rate at which the group's subtasks succeeded
                // so far (their measured run times, at the parallelism they got).
                let template =
                    format!("  {{prefix:<{width}}} [{{bar:30.green/white}}] {{pos}}/{{len}} eta {{eta}} {{msg}}");
                if let Ok(style) = ProgressStyle::with_template(&template) {
                    bar.set_style(style.progress_chars("##-"));
                }
                bar.set_prefix(g.task.clone());
                bar
            });
            bar.set_length(u64::from(counts.replicas));
            bar.set_position(u64::from(counts.succeeded));
            bar.set_message(counts.message());
        }
    }

    /// Stops drawing and leaves the bars as they are (`finish()` would fill them to 100%).
    fn finish(&mut self) {
        if let Some(header) = &self.header {
            header.abandon();
        }
        for bar in self.bars.values() {
            bar.abandon();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use plexus_proto::pb;

    fn snapshot(gen_counts: [u32; 3], state: pb::JobState) -> JobStatus {
        let [running, succeeded, failed] = gen_counts;
        JobStatus {
            job_id: "job-00000000000000000000000000000001".into(),
            name: "demo".into(),
            state: state as i32,
            groups: vec![
                pb::TaskGroupStatus {
                    task: "gen".into(),
                    replicas: 8,
                    running,
                    succeeded,
                    failed,
                    ..Default::default()
                },
                pb::TaskGroupStatus { task: "sum".into(), replicas: 1, waiting: 1, ..Default::default() },
            ],
            total_subtasks: 9,
            ..Default::default()
        }
    }

    #[test]
    fn plain_lines_only_on_change() {
        let mut l = Lines::default();
        let first = l.lines_for(&snapshot([0, 0, 0], pb::JobState::Running));
        assert_eq!(
            first,
            vec![
                "job job-00000000000000000000000000000001 (demo) running: 0/9 subtasks succeeded",
                "gen 0/8 succeeded, 0 running, 0 failed",
                "sum 0/1 succeeded, 0 running, 0 failed",
            ]
        );
        assert!(l.lines_for(&snapshot([0, 0, 0], pb::JobState::Running)).is_empty());
        assert_eq!(
            l.lines_for(&snapshot([3, 5, 0], pb::JobState::Running)),
            vec!["gen 5/8 succeeded, 3 running, 0 failed"]
        );
        assert_eq!(
            l.lines_for(&snapshot([0, 8, 0], pb::JobState::Running)),
            vec!["gen 8/8 succeeded, 0 running, 0 failed"]
        );
    }

    #[test]
    fn bars_update_without_a_terminal() {
        // Drawing goes to a hidden target here; this checks the bookkeeping, not the pixels.
        let mut b =
            Bars { multi: Some(MultiProgress::with_draw_target(ProgressDrawTarget::hidden())), ..Default::default() };
        b.update(&snapshot([2, 3, 1], pb::JobState::Running));
        b.update(&snapshot([0, 7, 1], pb::JobState::Failed));
        b.finish();
        let gen_bar = &b.bars["gen"];
        assert_eq!((gen_bar.position(), gen_bar.length()), (7, Some(8)));
        assert_eq!(gen_bar.message(), "0 running, 1 failed");
        assert_eq!(b.bars.len(), 2);
    }
}
