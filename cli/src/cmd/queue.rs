//! `plexus queue list|set NAME --share S|--clear`: queues' shares of the cluster's cores, over
//! the API (`SetQueue` takes an admin token; the coordinator checks the share and stores it).

use std::process::ExitCode;

use plexus_proto::pb;

use crate::args::QueueCommand;
use crate::{client, output};

pub async fn run(target: &crate::client::Target, cmd: &QueueCommand) -> anyhow::Result<ExitCode> {
    let mut c = client::connect(target).await?;
    let list = match cmd {
        QueueCommand::List => c.list_queues(pb::ListQueuesRequest {}).await?.into_inner(),
        QueueCommand::Set { name, share, clear } => {
            let req = pb::SetQueueRequest { name: name.clone(), share: share.unwrap_or(0.0), clear: *clear };
            c.set_queue(req).await?.into_inner()
        }
    };
    output::print(&queues_text(&list))?;
    Ok(ExitCode::SUCCESS)
}

/// One row per queue with a share: its share and the cores its placed attempts hold.
pub fn queues_text(list: &pb::QueueList) -> String {
    if list.queues.is_empty() {
        return "no queue has a share (every queue only orders its jobs)\n".to_string();
    }
    let mut t = output::Table::new(&["QUEUE", "SHARE", "CORES USED"]);
    for q in &list.queues {
        t.row(vec![q.name.clone(), format!("{:.3}", q.share), format!("{:.1}", q.used_cpu)]);
    }
    t.render()
}
