//! The one place where proto types become domain types and back.
//!
//! Everything arriving from the network is checked here: an id with the wrong prefix, a name
//! with a path separator or an unknown enum value becomes an [`Error`] naming the field,
//! never a panic.

use crate::domain::{JobState, Resources, SubtaskState};
use crate::error::Error;
use crate::ids::{AttemptRef, JobId, ObjectId, WorkerId, check_task_name};
use crate::pb;

/// The old name of the crate's error for proto messages, kept for the crates that still name
/// it: the same type as [`Error`].
pub type ConvertError = Error;

/// A proto message that does not make a valid domain value is the caller's mistake: every error
/// of this crate becomes INVALID_ARGUMENT, with its text.
impl From<Error> for tonic::Status {
    fn from(e: Error) -> Self {
        tonic::Status::invalid_argument(e.to_string())
    }
}

/// A field that holds an invalid id or name.
fn field(field: &'static str) -> impl FnOnce(Error) -> Error {
    move |source| Error::Field { field, source: Box::new(source) }
}

pub fn job_id(field: &'static str, s: &str) -> Result<JobId, Error> {
    s.parse().map_err(self::field(field))
}

pub fn worker_id(field: &'static str, s: &str) -> Result<WorkerId, Error> {
    s.parse().map_err(self::field(field))
}

pub fn object_id(field: &'static str, s: &str) -> Result<ObjectId, Error> {
    s.parse().map_err(self::field(field))
}

impl TryFrom<&pb::AttemptRef> for AttemptRef {
    type Error = Error;
    fn try_from(p: &pb::AttemptRef) -> Result<Self, Error> {
        check_task_name(&p.task).map_err(field("attempt.task"))?;
        Ok(AttemptRef {
            job: job_id("attempt.job_id", &p.job_id)?,
            task: p.task.clone(),
            rank: p.rank,
            attempt: p.attempt,
        })
    }
}

impl From<&AttemptRef> for pb::AttemptRef {
    fn from(a: &AttemptRef) -> Self {
        pb::AttemptRef { job_id: a.job.to_string(), task: a.task.clone(), rank: a.rank, attempt: a.attempt }
    }
}

/// Converts an optional attempt field, naming it when absent.
pub fn attempt(field: &'static str, p: Option<&pb::AttemptRef>) -> Result<AttemptRef, Error> {
    AttemptRef::try_from(p.ok_or(Error::Missing(field))?)
}

impl From<SubtaskState> for pb::SubtaskState {
    fn from(s: SubtaskState) -> Self {
        match s {
            SubtaskState::Waiting => pb::SubtaskState::Waiting,
            SubtaskState::Ready => pb::SubtaskState::Ready,
            SubtaskState::Assigned => pb::SubtaskState::Assigned,
            SubtaskState::Running => pb::SubtaskState::Running,
            SubtaskState::Succeeded => pb::SubtaskState::Succeeded,
            SubtaskState::Failed => pb::SubtaskState::Failed,
            SubtaskState::Cancelled => pb::SubtaskState::Cancelled,
        }
    }
}

/// Decodes a subtask state sent as its proto number.
pub fn subtask_state(field: &'static str, v: i32) -> Result<SubtaskState, Error> {
    Ok(match pb::SubtaskState::try_from(v) {
        Ok(pb::SubtaskState::Waiting) => SubtaskState::Waiting,
        Ok(pb::SubtaskState::Ready) => SubtaskState::Ready,
        Ok(pb::SubtaskState::Assigned) => SubtaskState::Assigned,
        Ok(pb::SubtaskState::Running) => SubtaskState::Running,
        Ok(pb::SubtaskState::Succeeded) => SubtaskState::Succeeded,
        Ok(pb::SubtaskState::Failed) => SubtaskState::Failed,
        Ok(pb::SubtaskState::Cancelled) => SubtaskState::Cancelled,
        _ => return Err(Error::Invalid { field, reason: format!("unknown subtask state {v}") }),
    })
}

impl From<JobState> for pb::JobState {
    fn from(s: JobState) -> Self {
        match s {
            JobState::Running => pb::JobState::Running,
            JobState::Succeeded => pb::JobState::Succeeded,
            JobState::Failed => pb::JobState::Failed,
            JobState::Cancelled => pb::JobState::Cancelled,
            JobState::CompletedWithFailures => pb::JobState::CompletedWithFailures,
        }
    }
}

/// Decodes a job state sent as its proto number.
pub fn job_state(field: &'static str, v: i32) -> Result<JobState, Error> {
    Ok(match pb::JobState::try_from(v) {
        Ok(pb::JobState::Running) => JobState::Running,
        Ok(pb::JobState::Succeeded) => JobState::Succeeded,
        Ok(pb::JobState::Failed) => JobState::Failed,
        Ok(pb::JobState::Cancelled) => JobState::Cancelled,
        Ok(pb::JobState::CompletedWithFailures) => JobState::CompletedWithFailures,
        _ => return Err(Error::Invalid { field, reason: format!("unknown job state {v}") }),
    })
}

impl From<&Resources> for pb::Resources {
    fn from(r: &Resources) -> Self {
        pb::Resources { cpu: r.cpu, memory: r.memory, gpu: r.gpu }
    }
}

impl TryFrom<&pb::Resources> for Resources {
    type Error = Error;
    fn try_from(p: &pb::Resources) -> Result<Self, Error> {
        if !p.cpu.is_finite() || p.cpu < 0.0 {
            return Err(Error::Invalid {
                field: "resources.cpu",
                reason: format!("{} is not a non-negative number", p.cpu),
            });
        }
        Ok(Resources { cpu: p.cpu, memory: p.memory, gpu: p.gpu })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn attempt_round_trip_and_rejects_bad_fields() {
        let a = AttemptRef { job: JobId::random(), task: "gen".into(), rank: 2, attempt: 1 };
        let p = pb::AttemptRef::from(&a);
        assert_eq!(AttemptRef::try_from(&p).unwrap(), a);
        let bad = pb::AttemptRef { task: "../etc".into(), ..p.clone() };
        assert!(AttemptRef::try_from(&bad).unwrap_err().to_string().contains("attempt.task"));
        let bad = pb::AttemptRef { job_id: "nope".into(), ..p };
        assert!(AttemptRef::try_from(&bad).unwrap_err().to_string().contains("attempt.job_id"));
        assert!(attempt("x", None).unwrap_err().to_string().contains("x is missing"));
    }

    #[test]
    fn states_round_trip_and_unknown_numbers_fail() {
        for s in [
            SubtaskState::Waiting,
            SubtaskState::Ready,
            SubtaskState::Assigned,
            SubtaskState::Running,
            SubtaskState::Succeeded,
            SubtaskState::Failed,
            SubtaskState::Cancelled,
        ] {
            assert_eq!(subtask_state("s", pb::SubtaskState::from(s) as i32).unwrap(), s);
        }
        assert!(subtask_state("s", 99).is_err());
        assert!(subtask_state("s", 0).is_err());
        for s in [JobState::Running, JobState::Succeeded, JobState::Failed, JobState::Cancelled] {
            assert_eq!(job_state("j", pb::JobState::from(s) as i32).unwrap(), s);
        }
    }

    #[test]
    fn resources_reject_negative_cpu() {
        assert!(Resources::try_from(&pb::Resources { cpu: -1.0, memory: 0, gpu: 0 }).is_err());
        assert!(Resources::try_from(&pb::Resources { cpu: f64::NAN, memory: 0, gpu: 0 }).is_err());
    }
}
