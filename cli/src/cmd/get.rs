//! `plexus get JOB TASK[/RANK[/OUTPUT]] [-o DIR]`: downloads outputs from whichever live worker
//! holds them (the coordinator relays the stream) into `DIR/TASK/RANK/OUTPUT`, checking each
//! one's size, and prints a line per file.

use std::io::Write;
use std::process::ExitCode;

use anyhow::Context;
use plexus_proto::pb::{GetJobRequest, GetObjectRequest};

use crate::args::GetArgs;
use crate::{client, output};

/// What `TASK[/RANK[/OUTPUT]]` selects.
#[derive(Debug, PartialEq)]
struct Selection {
    task: String,
    rank: Option<u32>,
    output: Option<String>,
}

fn selection(s: &str) -> anyhow::Result<Selection> {
    let mut parts = s.split('/');
    let task = parts
        .next()
        .filter(|t| !t.is_empty())
        .ok_or_else(|| anyhow::anyhow!("{s:?}: expected TASK, TASK/RANK or TASK/RANK/OUTPUT"))?;
    let rank = match parts.next() {
        None => None,
        Some(r) => Some(r.parse::<u32>().with_context(|| format!("{s:?}: the rank {r:?} is not a number"))?),
    };
    let output = parts.next().map(str::to_string);
    if parts.next().is_some() || output.as_deref() == Some("") {
        anyhow::bail!("{s:?}: expected TASK, TASK/RANK or TASK/RANK/OUTPUT");
    }
    Ok(Selection { task: task.to_string(), rank, output })
}

pub async fn run(target: &crate::client::Target, args: &GetArgs) -> anyhow::Result<ExitCode> {
    let sel = selection(&args.what)?;
    let mut client = client::connect(target).await?;
    let job = client::resolve_job(&mut client, &args.job).await?;
    let status = client.get_job(GetJobRequest { job_id: job.to_string(), subtasks: true }).await?.into_inner();
    if !status.groups.iter().any(|g| g.task == sel.task) {
        let tasks: Vec<&str> = status.groups.iter().map(|g| g.task.as_str()).collect();
        anyhow::bail!("job {job} has no task {:?} (its tasks: {})", sel.task, tasks.join(", "));
    }
    let mut wanted = Vec::new();
    for s in status.subtasks.iter().filter(|s| s.task == sel.task && sel.rank.is_none_or(|r| r == s.rank)) {
        for o in &s.outputs {
            let name = o.object_id.rsplit('/').next().unwrap_or_default().to_string();
            if sel.output.as_ref().is_none_or(|n| *n == name) {
                wanted.push((o.object_id.clone(), s.rank, name, o.size));
            }
        }
    }
    if wanted.is_empty() {
        anyhow::bail!(
            "nothing to get: no finished subtask of {} matches {:?} (outputs exist once a subtask has succeeded)",
            job,
            args.what
        );
    }
    for (object_id, rank, name, size) in wanted {
        // Task and output names are checked to be safe path components when a job is accepted.
        let dest = args.dir.join(&sel.task).join(rank.to_string()).join(&name);
        if let Some(parent) = dest.parent() {
            std::fs::create_dir_all(parent).with_context(|| format!("cannot create {}", parent.display()))?;
        }
        // Beside it under a name no output can have (output names never start with a dot), and
        // removed if the download fails.
        let tmp = dest.with_file_name(format!(".{name}.plexus-partial"));
        if let Err(e) = download(&mut client, &object_id, size, &tmp).await {
            let _ = std::fs::remove_file(&tmp);
            return Err(e);
        }
        std::fs::rename(&tmp, &dest).with_context(|| format!("cannot move {} into place", tmp.display()))?;
        output::print(&format!("{} ({})\n", dest.display(), output::human_bytes(size)))?;
    }
    Ok(ExitCode::SUCCESS)
}

/// Writes object `object_id` (`size` bytes) into `tmp`, checking its size.
async fn download(
    client: &mut client::Client,
    object_id: &str,
    size: u64,
    tmp: &std::path::Path,
) -> anyhow::Result<()> {
    let mut file = std::fs::File::create(tmp).with_context(|| format!("cannot write {}", tmp.display()))?;
    let mut stream = client.get_object(GetObjectRequest { object_id: object_id.to_string() }).await?.into_inner();
    let mut written = 0u64;
    while let Some(chunk) = stream.message().await? {
        written += chunk.data.len() as u64;
        if written > size {
            anyhow::bail!("{object_id}: the holder sent more than its {size} bytes");
        }
        file.write_all(&chunk.data).with_context(|| format!("cannot write {}", tmp.display()))?;
    }
    if written != size {
        anyhow::bail!("{object_id}: got {written} of its {size} bytes");
    }
    file.sync_all().ok();
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn selections() {
        assert_eq!(selection("gen").unwrap(), Selection { task: "gen".into(), rank: None, output: None });
        assert_eq!(selection("gen/3").unwrap(), Selection { task: "gen".into(), rank: Some(3), output: None });
        assert_eq!(
            selection("gen/3/blob").unwrap(),
            Selection { task: "gen".into(), rank: Some(3), output: Some("blob".into()) }
        );
        for bad in ["", "/1", "gen/x", "gen/1/", "gen/1/a/b"] {
            assert!(selection(bad).is_err(), "{bad:?}");
        }
    }
}
