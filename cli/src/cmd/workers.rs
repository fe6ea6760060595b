//! `plexus workers [-o table|json]`: the workers the coordinator knows, alive or not; and
//! `plexus workers drain|undrain|remove WORKER`.

use std::process::ExitCode;

use plexus_proto::pb::ListWorkersRequest;

use crate::args::{OutputFormat, WorkersAction, WorkersArgs};
use crate::{client, output};

pub async fn run(target: &crate::client::Target, args: &WorkersArgs) -> anyhow::Result<ExitCode> {
    let mut client = client::connect(target).await?;
    if args.summary && args.action.is_none() {
        let listed = client.list_workers(ListWorkersRequest { summary_only: true, ..Default::default() }).await?;
        let s = listed.into_inner().summary.unwrap_or_default();
        let text = match args.output {
            OutputFormat::Json => output::json(&output::workers_summary_view(&s)),
            OutputFormat::Table | OutputFormat::Wide => output::workers_summary_line(&s),
        };
        output::print(&text)?;
        return Ok(ExitCode::SUCCESS);
    }
    let (workers, halt) = every_worker(&mut client, args.page_size).await?;
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
        OutputFormat::Table | OutputFormat::Wide => {
            let table = output::workers_table(&workers, plexus_proto::now_ms(), args.output == OutputFormat::Wide);
            if args.rails { format!("{table}\n{}", output::rails_table(&workers)) } else { table }
        }
        OutputFormat::Json => output::json(&output::worker_list_view(&workers)),
    };
    // Said first, in either format's place for a person: stderr keeps the JSON parseable.
    if let Some(h) = halt {
        eprintln!(
            "evictions halted: {} of {} workers missed their heartbeats at once; none is declared lost until they \
             heartbeat again (plexus-coordinator --max-lost-share)",
            h.silent, h.alive
        );
    }
    output::print(&text)?;
    Ok(ExitCode::SUCCESS)
}

/// Every worker, a page at a time, and whether evictions are halted (as of the last page).
async fn every_worker(
    client: &mut client::Client,
    page_size: u32,
) -> anyhow::Result<(Vec<plexus_proto::pb::WorkerInfo>, Option<plexus_proto::pb::EvictionHalt>)> {
    let mut workers = Vec::new();
    let mut page_token = String::new();
    loop {
        let page =
            client.list_workers(ListWorkersRequest { page_size, page_token, summary_only: false }).await?.into_inner();
        workers.extend(page.workers);
        if page.next_page_token.is_empty() {
            return Ok((workers, page.evictions_halted));
        }
        page_token = page.next_page_token;
    }
}

/// The worker `name` means: its full id, a unique prefix of it (with or without `wkr-`), or its
/// host name when one worker has it.
fn resolve_worker(workers: &[plexus_proto::pb::WorkerInfo], name: &str) -> anyhow::Result<String> {
    let named = client::Named { prefix: "wkr-", what: "worker", name: "host name", listed_by: "plexus workers" };
    let w = client::resolve_ref(workers, name, named, |w| {
        (&w.worker_id, w.capacity.as_ref().map_or("", |c| c.hostname.as_str()))
    })?;
    Ok(w.worker_id.clone())
}
