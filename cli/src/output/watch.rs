//! What `plexus watch` prints as a job runs: a header, then one progress line per change in a
//! task group's counts.

use plexus_proto::pb;

use super::jobs::{job_phase, succeeded, total};
use crate::client::one_line;

/// What `watch` shows of one task group; a change in it is a new progress line.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct GroupCounts {
    pub replicas: u32,
    pub succeeded: u32,
    /// Assigned or running: placed on a worker.
    pub running: u32,
    pub failed: u32,
    pub cancelled: u32,
    /// Failed attempts, retried or not.
    pub failed_attempts: u32,
}

impl From<&pb::TaskGroupStatus> for GroupCounts {
    fn from(g: &pb::TaskGroupStatus) -> Self {
        GroupCounts {
            replicas: g.replicas,
            succeeded: g.succeeded,
            running: g.assigned + g.running,
            failed: g.failed,
            cancelled: g.cancelled,
            failed_attempts: g.failed_attempts,
        }
    }
}

impl GroupCounts {
    /// The bar message: `2 running, 0 failed` (`, 1 cancelled` and `, 3 failed attempts` only
    /// when there are some).
    pub fn message(&self) -> String {
        let mut s = format!("{} running, {} failed", self.running, self.failed);
        if self.cancelled > 0 {
            s.push_str(&format!(", {} cancelled", self.cancelled));
        }
        if self.failed_attempts > 0 {
            let plural = if self.failed_attempts == 1 { "" } else { "s" };
            s.push_str(&format!(", {} failed attempt{plural}", self.failed_attempts));
        }
        s
    }

    /// The plain-text progress line: `gen 8/8 succeeded, 0 running, 0 failed`.
    pub fn line(&self, task: &str) -> String {
        format!("{task} {}/{} succeeded, {}", self.succeeded, self.replicas, self.message())
    }
}

/// The header of `watch`: `job <id> (<name>) running: 3/8 subtasks succeeded`, or, while
/// nothing of it runs, `... pending (task train: ...): 0/8 subtasks succeeded`.
pub fn watch_header(job: &pb::JobStatus) -> String {
    let name = if job.name.is_empty() { String::new() } else { format!(" ({})", job.name) };
    let why = if job.phase_reason.is_empty() { String::new() } else { format!(" ({})", one_line(&job.phase_reason)) };
    format!("job {}{name} {}{why}: {}/{} subtasks succeeded", job.job_id, job_phase(job), succeeded(job), total(job))
}
