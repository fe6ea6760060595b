//! What `SubmitJob` does with a parsed job beside the plumbing: the request's `after_jobs` added
//! to the file's (bounded), and with `dry_run` the engine's plan for it (`Core::dry_run`, which
//! changes nothing) as the answer, or the same refusal a submit would get, named with its file.

use plexus_proto::pb;
use plexus_scheduler::spec::JobSpec;

use crate::convert;
use crate::engine::{Cmd, EngineHandle};
use crate::error::Error;

/// Adds the request's `after` (job ids, `--after`) to `spec`'s `after_jobs`, once each, within
/// their bound.
pub fn add_after_jobs(spec: &mut JobSpec, after: &[String], filename: &str) -> Result<(), Error> {
    for (i, a) in after.iter().enumerate() {
        let a =
            plexus_proto::convert::job_id("job_id", a).map_err(|e| Error::Invalid(format!("after_jobs[{i}]: {e}")))?;
        if !spec.after_jobs.contains(&a) {
            spec.after_jobs.push(a);
        }
    }
    if spec.after_jobs.len() > plexus_scheduler::spec::MAX_AFTER_JOBS {
        return Err(Error::Invalid(format!(
            "{filename}: runs after {} jobs; at most {}",
            spec.after_jobs.len(),
            plexus_scheduler::spec::MAX_AFTER_JOBS
        )));
    }
    Ok(())
}

/// The plan for `spec` (from `filename`): no job id, its subtask count, the plan.
pub async fn dry_run(engine: &EngineHandle, spec: JobSpec, filename: String) -> Result<pb::SubmitJobResponse, Error> {
    let plan = engine.call(|reply| Cmd::DryRun { spec, reply }).await?;
    let plan = plan.map_err(|source| Error::InFile { file: filename, source })?;
    Ok(pb::SubmitJobResponse { job_id: String::new(), subtasks: plan.subtasks, dry_run: Some(convert::dry_run(&plan)) })
}
