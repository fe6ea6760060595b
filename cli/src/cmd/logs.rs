//! `plexus logs JOB TASK [--rank R]`: the subtask's stdout bytes to stdout and its stderr bytes
//! to stderr, unchanged, so the output can be piped like the task's own.

use std::io::{self, Write};
use std::process::ExitCode;

use plexus_proto::pb::GetLogsRequest;

use crate::args::LogsArgs;
use crate::{client, output};

pub async fn run(target: &crate::client::Target, args: &LogsArgs) -> anyhow::Result<ExitCode> {
    let mut client = client::connect(target).await?;
    let job = client::resolve_job(&mut client, &args.job).await?;
    let request = GetLogsRequest { job_id: job.to_string(), task: args.task.clone(), rank: args.rank };
    let logs = client.get_logs(request).await?.into_inner();
    output::write_bytes(&mut io::stdout().lock(), &logs.stdout)?;
    output::write_bytes(&mut io::stderr().lock(), &logs.stderr)?;
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
    Ok(ExitCode::SUCCESS)
}
