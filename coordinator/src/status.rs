//! The one place a coordinator [`Error`] becomes a `tonic::Status`: the code says what kind of
//! failure it is (the caller's mistake, something missing, a state conflict, a refusal, the
//! server's trouble), the message says which input. Handlers return [`Error`]; the tower layers
//! in front of them (the auth check, the standby's gate), which answer before any handler runs,
//! turn their refusal into a response with [`status`] too.

use plexus_scheduler::Error as SchedulerError;
use tonic::Status;

use crate::error::Error;

/// The metadata key of a standby's refusal that holds the leader's URL, which workers and
/// clients follow.
pub const LEADER_METADATA: &str = "plexus-leader";

/// The longest message a status carries. It travels in an HTTP/2 header (`grpc-message`,
/// percent-encoded, up to three bytes per byte), and a header block past the peer's limit (16 KiB
/// by default) is refused as a protocol error, which a client reports as an unreachable server.
pub const MAX_MESSAGE_BYTES: usize = 4 << 10;

/// `msg` cut to [`MAX_MESSAGE_BYTES`] at a character boundary, saying how much was cut.
pub fn bounded(msg: String) -> String {
    if msg.len() <= MAX_MESSAGE_BYTES {
        return msg;
    }
    let mut end = MAX_MESSAGE_BYTES - 64;
    while !msg.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}... ({} more bytes of this error cut)", &msg[..end], msg.len() - end)
}

/// The status a client sees for `e`.
pub fn status(e: impl Into<Error>) -> Status {
    let e = e.into();
    let msg = bounded(e.to_string());
    match &e {
        Error::Scheduler(s) | Error::InFile { source: s, .. } => match s {
            SchedulerError::NoWorker(_)
            | SchedulerError::NoJob(_)
            | SchedulerError::NoTask { .. }
            | SchedulerError::NoRank { .. }
            | SchedulerError::NotPlaced(_) => Status::not_found(msg),
            SchedulerError::JobFinished { .. } | SchedulerError::WorkerBusy(_) => Status::failed_precondition(msg),
            SchedulerError::Duplicate(_) => Status::already_exists(msg),
            SchedulerError::Spec(_)
            | SchedulerError::Unsatisfiable(_)
            | SchedulerError::UnknownPlacer { .. }
            | SchedulerError::QueueName { .. }
            | SchedulerError::QueueShare { .. }
            | SchedulerError::MscSyntax { .. }
            | SchedulerError::MscUnknownKey { .. }
            | SchedulerError::MscDuplicate(_)
            | SchedulerError::NotACost { .. }
            | SchedulerError::Timing(_)
            | SchedulerError::MscDecreasing { .. } => Status::invalid_argument(msg),
            SchedulerError::Restore(_)
            | SchedulerError::GpuProblem(_)
            | SchedulerError::Infeasible { .. }
            | SchedulerError::TooLarge { .. }
            | SchedulerError::EstimatesFormat { .. } => Status::internal(msg),
        },
        Error::Convert(_) | Error::Invalid(_) => Status::invalid_argument(msg),
        Error::NotFound(_) => Status::not_found(msg),
        Error::Exhausted(_) => Status::resource_exhausted(msg),
        Error::Overloaded(_, retry_ms) => {
            let mut st = Status::resource_exhausted(msg);
            st.metadata_mut().insert(plexus_proto::rules::RETRY_PUSHBACK_METADATA, (*retry_ms).into());
            st
        }
        Error::AlreadyExists(_) => Status::already_exists(msg),
        Error::DigestMismatch(_) => Status::data_loss(msg),
        Error::Unauthenticated(_) => Status::unauthenticated(msg),
        Error::PermissionDenied(_) => Status::permission_denied(msg),
        Error::Insecure(_) | Error::NotRegistered => Status::failed_precondition(msg),
        Error::Standby { leader, .. } => {
            let mut st = Status::unavailable(msg);
            if let Some(v) = leader.as_deref().and_then(|l| l.parse().ok()) {
                st.metadata_mut().insert(LEADER_METADATA, v);
            }
            st
        }
        Error::Unavailable(_)
        | Error::EngineStopped
        | Error::ShuttingDown
        | Error::Etcd(_)
        | Error::Fenced
        | Error::Remote { .. }
        | Error::Unreachable { .. } => Status::unavailable(msg),
        Error::QueueNotStored { .. }
        | Error::Context { .. }
        | Error::Credentials(_)
        | Error::PolicyStore(_)
        | Error::Io(..)
        | Error::Sled(_)
        | Error::Migration(_)
        | Error::Corrupt { .. }
        | Error::Locked { .. }
        | Error::Policy(_)
        | Error::Engine(_)
        | Error::Transport(_) => Status::internal(msg),
    }
}

impl From<Error> for Status {
    fn from(e: Error) -> Self {
        status(e)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Any message, however long, fits a header a client accepts: cut, and said so.
    #[test]
    fn a_long_message_is_cut_and_says_so() {
        let s = status(Error::Invalid("é".repeat(100_000)));
        assert_eq!(s.code(), tonic::Code::InvalidArgument);
        assert!(s.message().len() <= MAX_MESSAGE_BYTES, "{}", s.message().len());
        assert!(s.message().ends_with("more bytes of this error cut)"), "{}", &s.message()[4000..]);
        assert_eq!(bounded("short".into()), "short");
    }

    /// A standby's refusal names the leader in its message and in the metadata clients follow.
    #[test]
    fn a_standby_names_its_leader_in_the_metadata() {
        let s = status(Error::Standby { me: "http://b:1".into(), leader: Some("http://a:1".into()) });
        assert_eq!(s.code(), tonic::Code::Unavailable);
        assert_eq!(s.message(), "this coordinator (http://b:1) is a standby; the leader is http://a:1");
        assert_eq!(s.metadata().get(LEADER_METADATA).unwrap(), "http://a:1");
        let s = status(Error::Standby { me: "http://b:1".into(), leader: None });
        assert!(s.message().contains("no coordinator leads yet"), "{}", s.message());
        assert!(s.metadata().get(LEADER_METADATA).is_none());
    }
}
