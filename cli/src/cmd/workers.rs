//! `plexus workers [-o table|json]`: the workers the coordinator knows, alive or not; and
//! `plexus workers drain|undrain|remove WORKER`.

use std::process::ExitCode;

use plexus_proto::pb::ListWorkersRequest;

use crate::args::{OutputFormat, WorkersAction, WorkersArgs};
use crate::{client, output};

pub async fn run(target: &crate::client::Target, args: &WorkersArgs) -> anyhow::Result<ExitCode> {
    let mut client = client::connect(target).await?;
    let workers = client.list_workers(ListWorkersRequest {}).await?.into_inner().workers;
    if let Some(action) = &args.action {
        let (name, verb) = match action {
            WorkersAction::Drain { worker } => (worker, "drained"),
            WorkersAction::Undrain { worker } => (worker, "undrained"),
            WorkersAction::Remove { worker } => (worker, "removed"),
        };
        let id = resolve_worker(&workers, name)?;
        match action {
            WorkersAction::Drain { .. } | WorkersAction::Undrain { .. } => {
                let undrain = matches!(action, WorkersAction::Undrain { .. });
                client.drain_worker(plexus_proto::pb::DrainWorkerRequest { worker_id: id.clone(), undrain }).await?;
            }
            WorkersAction::Remove { .. } => {
                client.remove_worker(plexus_proto::pb::RemoveWorkerRequest { worker_id: id.clone() }).await?;
            }
        }
        output::print(&format!("worker {id} {verb}\n"))?;
        return Ok(ExitCode::SUCCESS);
    }
    let text = match args.output {
        OutputFormat::Table => output::workers_table(&workers, plexus_proto::now_ms()),
        OutputFormat::Json => output::json(&output::worker_list_view(&workers)),
    };
    output::print(&text)?;
    Ok(ExitCode::SUCCESS)
}

/// The worker `name` means: its full id, a unique prefix of it (with or without `wkr-`), or its
/// host name when one worker has it.
fn resolve_worker(workers: &[plexus_proto::pb::WorkerInfo], name: &str) -> anyhow::Result<String> {
    let hex = name.strip_prefix("wkr-").unwrap_or(name).to_ascii_lowercase();
    let by_id = !hex.is_empty() && hex.chars().all(|c| c.is_ascii_hexdigit());
    let matches: Vec<&plexus_proto::pb::WorkerInfo> = workers
        .iter()
        .filter(|w| {
            w.worker_id == name
                || (by_id && w.worker_id.strip_prefix("wkr-").is_some_and(|h| h.starts_with(&hex)))
                || w.capacity.as_ref().is_some_and(|c| c.hostname == name)
        })
        .collect();
    match matches.as_slice() {
        [one] => Ok(one.worker_id.clone()),
        [] => anyhow::bail!("no worker matches {name:?}: neither a prefix of a worker id nor a worker's host name (`plexus workers` lists them)"),
        many => anyhow::bail!("{name:?} matches {} workers: {}; give more of the id", many.len(), many.iter().map(|w| w.worker_id.as_str()).collect::<Vec<_>>().join(", ")),
    }
}
