//! `plexus status [JOB] [-o table|json] [--subtasks]`: the job list, or one job in detail.

use std::process::ExitCode;

use plexus_proto::pb::{GetJobRequest, ListJobsRequest};

use crate::args::{OutputFormat, StatusArgs};
use crate::output::Detail;
use crate::{client, output};

pub async fn run(target: &crate::client::Target, args: &StatusArgs) -> anyhow::Result<ExitCode> {
    let mut client = client::connect(target).await?;
    let now = plexus_proto::now_ms();
    let text = match args.job {
        None => {
            let jobs = client.list_jobs(ListJobsRequest {}).await?.into_inner().jobs;
            match args.output {
                OutputFormat::Table => output::jobs_table(&jobs, now),
                OutputFormat::Json => output::json(&output::job_list_view(&jobs)),
            }
        }
        Some(job) => {
            // JSON always carries the subtasks: a script should not need a second call.
            let detail = match (args.output, args.subtasks) {
                (OutputFormat::Json, _) | (OutputFormat::Table, true) => Detail::WithSubtasks,
                (OutputFormat::Table, false) => Detail::Summary,
            };
            let request = GetJobRequest { job_id: job.to_string(), subtasks: detail == Detail::WithSubtasks };
            let status = client.get_job(request).await?.into_inner();
            match args.output {
                OutputFormat::Table => output::job_detail(&status, detail, now),
                OutputFormat::Json => output::json(&output::job_view(&status, detail)),
            }
        }
    };
    output::print(&text)?;
    Ok(ExitCode::SUCCESS)
}
