//! `plexus workers [-o table|json]`: the workers the coordinator knows, alive or not.

use std::process::ExitCode;

use plexus_proto::pb::ListWorkersRequest;

use crate::args::{OutputFormat, WorkersArgs};
use crate::{client, output};

pub async fn run(target: &crate::client::Target, args: &WorkersArgs) -> anyhow::Result<ExitCode> {
    let mut client = client::connect(target).await?;
    let workers = client.list_workers(ListWorkersRequest {}).await?.into_inner().workers;
    let text = match args.output {
        OutputFormat::Table => output::workers_table(&workers, plexus_proto::now_ms()),
        OutputFormat::Json => output::json(&output::worker_list_view(&workers)),
    };
    output::print(&text)?;
    Ok(ExitCode::SUCCESS)
}
