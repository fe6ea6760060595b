//! `plexus explain JOB TASK [--rank R] [-o table|json]`: why the placer put the subtask's latest
//! attempt where it did, with every candidate it considered.

use std::process::ExitCode;

use plexus_proto::pb::ExplainPlacementRequest;

use crate::args::{ExplainArgs, OutputFormat};
use crate::{client, output};

pub async fn run(target: &crate::client::Target, args: &ExplainArgs) -> anyhow::Result<ExitCode> {
    let mut client = client::connect(target).await?;
    let job = client::resolve_job(&mut client, &args.job).await?;
    let request = ExplainPlacementRequest { job_id: job.to_string(), task: args.task.clone(), rank: args.rank };
    let explanation = client.explain_placement(request).await?.into_inner();
    let text = match args.output {
        OutputFormat::Table | OutputFormat::Wide => {
            output::explain_text(&explanation, plexus_proto::now_ms(), args.output == OutputFormat::Wide)
        }
        OutputFormat::Json => output::json(&output::explain_view(&explanation)),
    };
    output::print(&text)?;
    Ok(ExitCode::SUCCESS)
}
