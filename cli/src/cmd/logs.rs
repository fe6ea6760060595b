//! `plexus logs JOB TASK [--rank R | --all-ranks] [--attempt N] [-f]`: the subtask's stdout
//! bytes to stdout and its stderr bytes to stderr, unchanged, so the output can be piped like the
//! task's own. `--follow` polls every half second and prints what is new until the subtask ends.

use std::io::{self, Write};
use std::process::ExitCode;
use std::time::Duration;

use plexus_proto::pb::{GetJobRequest, GetLogsRequest, GetLogsResponse, SubtaskState};

use crate::args::LogsArgs;
use crate::{client, output};

/// How often `--follow` asks for the logs again.
const FOLLOW_EVERY: Duration = Duration::from_millis(500);
/// How long `--follow` keeps trying to reach a coordinator that went away.
const FOLLOW_RECONNECT_FOR: Duration = Duration::from_secs(600);

pub async fn run(target: &crate::client::Target, args: &LogsArgs) -> anyhow::Result<ExitCode> {
    let mut client = client::connect(target).await?;
    let job = client::resolve_job(&mut client, &args.job).await?;
    let attempt = args.attempt.unwrap_or(0);
    if args.follow {
        return follow(target, &mut client, job, args, attempt).await;
    }
    let ranks: Vec<u32> = if args.all_ranks {
        let status = client.get_job(GetJobRequest { job_id: job.to_string(), subtasks: false }).await?.into_inner();
        let group = status
            .groups
            .iter()
            .find(|g| g.task == args.task)
            .ok_or_else(|| anyhow::anyhow!("job {job} has no task {:?}", args.task))?;
        (0..group.replicas).collect()
    } else {
        vec![args.rank]
    };
    for (n, &rank) in ranks.iter().enumerate() {
        let request = GetLogsRequest { job_id: job.to_string(), task: args.task.clone(), rank, attempt };
        let logs = match client.get_logs(request).await {
            Ok(r) => r.into_inner(),
            // With --all-ranks a replica that has not run yet is said, not fatal.
            Err(e) if args.all_ranks && e.code() == tonic::Code::NotFound => {
                header(n, &args.task, rank, &format!("({})", client::one_line(e.message())))?;
                continue;
            }
            Err(e) => return Err(e.into()),
        };
        if args.all_ranks {
            header(n, &args.task, rank, &format!("attempt {}", logs.attempt))?;
        }
        write_logs(&logs)?;
    }
    Ok(ExitCode::SUCCESS)
}

fn header(n: usize, task: &str, rank: u32, what: &str) -> anyhow::Result<()> {
    output::print(&format!("{}==> {task}/{rank} {what} <==\n", if n == 0 { "" } else { "\n" }))
}

fn write_logs(logs: &GetLogsResponse) -> anyhow::Result<()> {
    output::write_bytes(&mut io::stdout().lock(), &logs.stdout)?;
    output::write_bytes(&mut io::stderr().lock(), &logs.stderr)?;
    if logs.dropped_bytes > 0 {
        let newline = if logs.stderr.last().is_some_and(|&b| b != b'\n') { "\n" } else { "" };
        let _ = writeln!(
            io::stderr().lock(),
            "{newline}note: this attempt wrote more than its worker keeps of a log (--log-cap): {} bytes were dropped between the start and the latest part, where a line \"[plexus: N bytes dropped]\" stands",
            logs.dropped_bytes
        );
    }
    if logs.truncated {
        let mut err = io::stderr().lock();
        // The note goes on its own line even when the log's last line had no newline.
        let newline = if logs.stderr.last().is_some_and(|&b| b != b'\n') { "\n" } else { "" };
        let _ = writeln!(
            err,
            "{newline}note: only the tail of these logs was available (attempt {} on {})",
            logs.attempt,
            if logs.worker_id.is_empty() { "an unknown worker" } else { &logs.worker_id }
        );
    }
    Ok(())
}

fn is_final(state: i32) -> bool {
    matches!(
        SubtaskState::try_from(state),
        Ok(SubtaskState::Succeeded | SubtaskState::Failed | SubtaskState::Cancelled)
    )
}

/// Prints the new part of `now` after the `seen` bytes printed so far; a log that no longer
/// starts with what was printed (only its tail could be read) is printed from where they part.
fn new_part<'a>(seen: &mut Vec<u8>, now: &'a [u8]) -> &'a [u8] {
    let common = seen.iter().zip(now).take_while(|(a, b)| a == b).count();
    let fresh = if common == seen.len() { &now[common..] } else { now };
    seen.clear();
    seen.extend_from_slice(now);
    fresh
}

pub async fn follow(
    target: &crate::client::Target,
    client: &mut client::Client,
    job: plexus_proto::JobId,
    args: &LogsArgs,
    pinned: u32,
) -> anyhow::Result<ExitCode> {
    let (mut out_seen, mut err_seen) = (Vec::new(), Vec::new());
    let mut current: Option<u32> = None;
    let mut lost_since: Option<std::time::Instant> = None;
    loop {
        let request =
            GetLogsRequest { job_id: job.to_string(), task: args.task.clone(), rank: args.rank, attempt: pinned };
        let logs = match client.get_logs(request).await {
            Ok(r) => {
                lost_since = None;
                r.into_inner()
            }
            // Not run yet: wait for it.
            Err(e) if e.code() == tonic::Code::NotFound && e.message().contains("has not run yet") => {
                tokio::time::sleep(FOLLOW_EVERY).await;
                continue;
            }
            Err(e) if matches!(e.code(), tonic::Code::Unavailable | tonic::Code::Unknown | tonic::Code::Cancelled) => {
                let since = *lost_since.get_or_insert_with(std::time::Instant::now);
                if since.elapsed() > FOLLOW_RECONNECT_FOR {
                    return Err(e.into());
                }
                eprintln!(
                    "plexus: lost the coordinator at {} ({}); reconnecting",
                    target.url,
                    client::one_line(e.message())
                );
                tokio::time::sleep(FOLLOW_EVERY * 2).await;
                if let Ok(c) = client::connect(target).await {
                    *client = c;
                }
                continue;
            }
            Err(e) => return Err(e.into()),
        };
        if current != Some(logs.attempt) {
            if current.is_some() {
                output::print(&format!("\n==> {}/{} attempt {} <==\n", args.task, args.rank, logs.attempt))?;
            }
            current = Some(logs.attempt);
            out_seen.clear();
            err_seen.clear();
        }
        output::write_bytes(&mut io::stdout().lock(), new_part(&mut out_seen, &logs.stdout))?;
        output::write_bytes(&mut io::stderr().lock(), new_part(&mut err_seen, &logs.stderr))?;
        // Done once the attempt followed is over: the subtask ended, or (pinned) a later one began.
        if is_final(logs.state) && (logs.latest_attempt == logs.attempt || pinned != 0)
            || (pinned != 0 && logs.latest_attempt > pinned)
        {
            return Ok(ExitCode::SUCCESS);
        }
        tokio::time::sleep(FOLLOW_EVERY).await;
    }
}

#[cfg(test)]
mod tests {
    use super::new_part;

    #[test]
    fn only_what_is_new_is_printed() {
        let mut seen = Vec::new();
        assert_eq!(new_part(&mut seen, b"ab"), b"ab");
        assert_eq!(new_part(&mut seen, b"abcd"), b"cd");
        assert_eq!(new_part(&mut seen, b"abcd"), b"");
        // Only a tail could be read: printed from where it parts with what was printed.
        assert_eq!(new_part(&mut seen, b"xyz"), b"xyz");
    }
}
