//! `plexus submit FILE [--set KEY=VALUE]... [--working-dir DIR] [--watch]`: sends a job file
//! (with `--set`s applied, [`super::set`]; a `python.requirements` file's lines put in its
//! place, [`super::requirements`]; its `working_dir` packed and uploaded first,
//! [`super::working_dir`]) to the coordinator, prints the job id alone
//! on stdout (so `JOB=$(plexus submit job.toml)` works), and optionally follows the job.

use std::path::Path;
use std::process::ExitCode;

use anyhow::Context;
use plexus_proto::JobId;
use plexus_proto::pb::SubmitJobRequest;

use crate::args::SubmitArgs;
use crate::{client, output};

pub async fn run(target: &crate::client::Target, args: &SubmitArgs) -> anyhow::Result<ExitCode> {
    let mut request = request_for(&args.file)?;
    let mut sets = args.set.clone();
    if let Some(dir) = &args.working_dir {
        sets.push(super::working_dir::override_for(dir)?);
    }
    request.source = super::set::apply(&request.source, &request.format, &sets)?;
    request.source = super::requirements::inline(&request.source, &request.format, &args.file)?;
    let mut client = client::connect(target).await?;
    for a in &args.after {
        request.after_jobs.push(client::resolve_job(&mut client, a).await?.to_string());
    }
    if args.dry_run {
        return dry_run(&mut client, request, &args.file).await;
    }
    if let Some(d) = super::working_dir::declared(&request.source, &request.format, &args.file) {
        request.working_dir = super::working_dir::upload(&mut client, &d).await?;
    }
    let response = client.submit_job(request).await?.into_inner();
    output::print(&format!("{}\n", response.job_id))?;
    if !args.watch && args.logs.is_none() {
        return Ok(ExitCode::SUCCESS);
    }
    let job: JobId = response
        .job_id
        .parse()
        .with_context(|| format!("the coordinator answered with a malformed job id {:?}", response.job_id))?;
    let Some((task, rank)) = args.logs.clone() else {
        return super::watch::watch_with(target, &mut client, job).await;
    };
    // The chosen subtask's output as it comes (`plexus logs -f`), beside a watch that prints
    // only the job's end (progress bars would write over the output).
    let logs = crate::args::LogsArgs {
        job: crate::args::JobRef(job.to_string()),
        task,
        rank,
        all_ranks: false,
        attempt: None,
        follow: true,
    };
    let t = target.clone();
    let follower = tokio::spawn(async move {
        let mut c = client::connect(&t).await?;
        super::logs::follow(&t, &mut c, job, &logs, 0).await
    });
    let last = super::watch::watch_quietly(target, &mut client, job).await;
    // The follower ends when its subtask does; what it has still to print comes before the end.
    if let Ok(Ok(Err(e))) = tokio::time::timeout(std::time::Duration::from_secs(10), follower).await {
        eprintln!(
            "plexus: following the logs: {}",
            client::render_error(&e, &target.url).trim_start_matches("error: ")
        );
    }
    super::watch::end(&last?)
}

/// `submit --dry-run`: the coordinator's plan for the job, printed; the working dir packed (so a
/// directory that cannot be is named now) but not uploaded.
async fn dry_run(client: &mut client::Client, mut request: SubmitJobRequest, file: &Path) -> anyhow::Result<ExitCode> {
    let code = match super::working_dir::declared(&request.source, &request.format, file) {
        Some(d) => Some(super::working_dir::pack_only(&d).await?),
        None => None,
    };
    request.dry_run = true;
    let response = client.submit_job(request).await?.into_inner();
    let plan =
        response.dry_run.context("the coordinator answered a dry run without its plan (an older coordinator?)")?;
    output::print(&output::dry_run_text(&plan, response.subtasks, code.as_deref()))?;
    Ok(ExitCode::SUCCESS)
}

/// `plexus resubmit JOB [--watch]`: the same job file again as a new job; prints the new id.
pub async fn resubmit(target: &crate::client::Target, args: &crate::args::ResubmitArgs) -> anyhow::Result<ExitCode> {
    let mut client = client::connect(target).await?;
    let old = client::resolve_job(&mut client, &args.job).await?;
    let response =
        client.resubmit_job(plexus_proto::pb::ResubmitJobRequest { job_id: old.to_string() }).await?.into_inner();
    output::print(&format!("{}\n", response.job_id))?;
    if !args.watch {
        return Ok(ExitCode::SUCCESS);
    }
    let job: JobId = response
        .job_id
        .parse()
        .with_context(|| format!("the coordinator answered with a malformed job id {:?}", response.job_id))?;
    super::watch::watch_with(target, &mut client, job).await
}

/// Reads the file and builds the request; the coordinator parses and checks the job.
fn request_for(path: &Path) -> anyhow::Result<SubmitJobRequest> {
    let source = std::fs::read_to_string(path).with_context(|| format!("cannot read job file {}", path.display()))?;
    Ok(SubmitJobRequest {
        source,
        format: format_of(path).to_string(),
        filename: path.display().to_string(),
        after_jobs: Vec::new(),
        working_dir: Vec::new(),
        dry_run: false,
    })
}

/// `json` for a `.json` file (any case), else `toml`.
fn format_of(path: &Path) -> &'static str {
    match path.extension().and_then(|e| e.to_str()) {
        Some(ext) if ext.eq_ignore_ascii_case("json") => "json",
        _ => "toml",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn format_follows_the_extension() {
        assert_eq!(format_of(Path::new("a/job.json")), "json");
        assert_eq!(format_of(Path::new("JOB.JSON")), "json");
        assert_eq!(format_of(Path::new("job.toml")), "toml");
        assert_eq!(format_of(Path::new("job")), "toml");
        assert_eq!(format_of(Path::new("json")), "toml");
    }

    #[test]
    fn request_carries_source_format_and_filename() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("j.json");
        std::fs::write(&path, "{\"name\": \"x\"}").unwrap();
        let r = request_for(&path).unwrap();
        assert_eq!(r.source, "{\"name\": \"x\"}");
        assert_eq!(r.format, "json");
        assert_eq!(r.filename, path.display().to_string());
    }

    #[test]
    fn unreadable_file_is_named() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("missing.toml");
        let err = request_for(&path).unwrap_err();
        let line = crate::client::render_error(&err, "http://x:1");
        assert!(line.starts_with(&format!("error: cannot read job file {}: ", path.display())), "{line}");
    }
}
