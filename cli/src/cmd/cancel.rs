//! `plexus cancel JOB`: cancels a job and prints its resulting state as `job <id> <state>`.

use std::process::ExitCode;

use plexus_proto::pb::CancelJobRequest;

use crate::args::JobRef;

use crate::{client, output};

pub async fn run(target: &crate::client::Target, job: &JobRef) -> anyhow::Result<ExitCode> {
    let mut client = client::connect(target).await?;
    let job = client::resolve_job(&mut client, job).await?;
    let status = client.cancel_job(CancelJobRequest { job_id: job.to_string() }).await?.into_inner();
    output::print(&output::job_final_line(&status))?;
    Ok(ExitCode::SUCCESS)
}
