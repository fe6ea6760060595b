//! `plexus get JOB TASK[/RANK[/OUTPUT]] [-o DIR]`: downloads outputs from whichever live worker
//! holds them (the coordinator relays the stream) into `DIR/TASK/RANK/OUTPUT`, checking each
//! one's size and digest, and prints a line per file.
//!
//! A copy whose bytes do not hash to the digest its attempt reported is never put in place: the
//! coordinator's relay ends the stream with DATA_LOSS (and treats that holder as having lost
//! the object), and this command checks the digest itself too. It then asks again, so another
//! holder serves it; with none left it fails, naming the object, the holder and both digests.

use std::io::Write;
use std::process::ExitCode;

use anyhow::Context;
use plexus_proto::pb::{GetJobRequest, GetObjectRequest};
use plexus_proto::{Digest, Verifier};

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
                let digest = Digest::from_field("outputs.digest", &o.digest)?;
                wanted.push((o.object_id.clone(), s.rank, name, o.size, digest));
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
    for (object_id, rank, name, size, digest) in wanted {
        // Task and output names are checked to be safe path components when a job is accepted.
        let dest = args.dir.join(&sel.task).join(rank.to_string()).join(&name);
        if let Some(parent) = dest.parent() {
            std::fs::create_dir_all(parent).with_context(|| format!("cannot create {}", parent.display()))?;
        }
        // Beside it under a name no output can have (output names never start with a dot), and
        // removed if the download fails.
        let tmp = dest.with_file_name(format!(".{name}.plexus-partial"));
        if let Err(e) = download_checked(&mut client, &object_id, (size, digest), &tmp).await {
            let _ = std::fs::remove_file(&tmp);
            return Err(e);
        }
        std::fs::rename(&tmp, &dest).with_context(|| format!("cannot move {} into place", tmp.display()))?;
        output::print(&format!("{} ({})\n", dest.display(), output::human_bytes(size)))?;
    }
    Ok(ExitCode::SUCCESS)
}

/// How many copies of one object are tried: each one found bad is dropped by the coordinator,
/// so the next try meets another holder.
const COPIES_TRIED: usize = 3;

/// Downloads object `object_id` into `tmp`, asking again while copies turn out not to match the
/// object's digest. When no holder is left after a bad copy, the bad copy is the error.
async fn download_checked(
    client: &mut client::Client,
    object_id: &str,
    expected: (u64, Option<Digest>),
    tmp: &std::path::Path,
) -> anyhow::Result<()> {
    let mut bad: Option<anyhow::Error> = None;
    for _ in 0..COPIES_TRIED {
        match download(client, object_id, expected, tmp).await {
            Ok(()) => return Ok(()),
            Err(e) if is_bad_copy(&e) => bad = Some(e),
            Err(e) => {
                let gone = e.downcast_ref::<tonic::Status>().is_some_and(|s| s.code() == tonic::Code::NotFound);
                return match bad {
                    Some(b) if gone => {
                        let text = match b.downcast_ref::<tonic::Status>() {
                            Some(s) => s.message().to_string(),
                            None => format!("{b:#}"),
                        };
                        Err(anyhow::anyhow!("{text}; no other live worker holds {object_id}"))
                    }
                    _ => Err(e),
                };
            }
        }
    }
    Err(bad.expect("every try found a bad copy"))
}

/// A copy that did not match its digest: found by the relay (DATA_LOSS) or here.
fn is_bad_copy(e: &anyhow::Error) -> bool {
    e.downcast_ref::<tonic::Status>().is_some_and(|s| s.code() == tonic::Code::DataLoss)
        || matches!(e.downcast_ref::<plexus_proto::Error>(), Some(plexus_proto::Error::DigestMismatch { .. }))
}

/// Writes object `object_id` (`size` bytes whose digest is `digest`, when known) into `tmp`,
/// checking its size and digest as it arrives.
async fn download(
    client: &mut client::Client,
    object_id: &str,
    (size, digest): (u64, Option<Digest>),
    tmp: &std::path::Path,
) -> anyhow::Result<()> {
    let mut file = std::fs::File::create(tmp).with_context(|| format!("cannot write {}", tmp.display()))?;
    let mut stream = client.get_object(GetObjectRequest { object_id: object_id.to_string() }).await?.into_inner();
    let mut written = 0u64;
    let mut verifier = Verifier::new(digest);
    let mut holder = String::from("the worker the coordinator relayed");
    while let Some(chunk) = stream.message().await? {
        if !chunk.holder.is_empty() {
            holder = format!("worker {}", chunk.holder);
        }
        written += chunk.data.len() as u64;
        if written > size {
            anyhow::bail!("{object_id}: the holder sent more than its {size} bytes");
        }
        verifier.update(&chunk.data);
        file.write_all(&chunk.data).with_context(|| format!("cannot write {}", tmp.display()))?;
    }
    if written != size {
        anyhow::bail!("{object_id}: got {written} of its {size} bytes");
    }
    verifier.finish(object_id, &holder)?;
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
