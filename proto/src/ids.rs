//! Typed ids and structured names.
//!
//! `JobId` and `WorkerId` wrap a uuid and print as `job-<32 hex>` / `wkr-<32 hex>`; parsing checks
//! the prefix, so a worker id pasted where a job id belongs is refused with a clear message.
//! Task and output names are restricted to characters that are safe in paths and object ids.

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Deserializer, Serialize, Serializer};
use uuid::Uuid;

use crate::error::Error;

/// The old name of the crate's error for ids and names, kept for the crates that still name it:
/// the same type as [`Error`].
pub type IdError = Error;

macro_rules! typed_id {
    ($name:ident, $prefix:literal, $what:literal) => {
        #[doc = concat!("A ", $what, " id: a uuid printed as `", $prefix, "<32 hex digits>`.")]
        #[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
        pub struct $name(Uuid);

        impl $name {
            pub const PREFIX: &'static str = $prefix;

            /// A fresh random id.
            pub fn random() -> Self {
                $name(Uuid::new_v4())
            }

            pub fn from_uuid(u: Uuid) -> Self {
                $name(u)
            }

            pub fn from_bytes(b: [u8; 16]) -> Self {
                $name(Uuid::from_bytes(b))
            }

            pub fn as_bytes(&self) -> &[u8; 16] {
                self.0.as_bytes()
            }

            pub fn uuid(&self) -> Uuid {
                self.0
            }
        }

        impl fmt::Display for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                write!(f, "{}{}", $prefix, self.0.simple())
            }
        }

        impl fmt::Debug for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                fmt::Display::fmt(self, f)
            }
        }

        impl FromStr for $name {
            type Err = Error;
            fn from_str(s: &str) -> Result<Self, Error> {
                let s = s.trim();
                let Some(rest) = s.strip_prefix($prefix) else {
                    return Err(Error::id($what, s, concat!("expected the prefix \"", $prefix, "\"")));
                };
                if rest.len() != 32 || !rest.bytes().all(|b| b.is_ascii_hexdigit()) {
                    return Err(Error::id($what, s, concat!("expected \"", $prefix, "\" and 32 hex digits")));
                }
                Uuid::parse_str(rest).map($name).map_err(|e| Error::id($what, s, e.to_string()))
            }
        }

        impl Serialize for $name {
            fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
                s.collect_str(self)
            }
        }

        impl<'de> Deserialize<'de> for $name {
            fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
                let s = String::deserialize(d)?;
                s.parse().map_err(serde::de::Error::custom)
            }
        }
    };
}

typed_id!(JobId, "job-", "job");
typed_id!(WorkerId, "wkr-", "worker");

/// Checks a task name: 1–64 characters of `[A-Za-z0-9_-]`, starting with a letter or digit.
pub fn check_task_name(s: &str) -> Result<(), Error> {
    check_name(Name::Task, s)
}

/// Checks a job name: the task-name rules (1–64 characters of `[A-Za-z0-9_-]`, starting with a
/// letter, digit or underscore), because job names are printed in tables and terminals.
pub fn check_job_name(s: &str) -> Result<(), Error> {
    check_name(Name::Job, s)
}

/// Checks an output name: 1–128 characters of `[A-Za-z0-9_.-]`, not starting with a dot.
pub fn check_output_name(s: &str) -> Result<(), Error> {
    check_name(Name::Output, s)
}

/// The two kinds of names, which differ in length and in whether dots are allowed.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Name {
    Task,
    Job,
    Output,
}

fn check_name(kind: Name, s: &str) -> Result<(), Error> {
    let (what, max, dots) = match kind {
        Name::Task => ("task name", 64, false),
        Name::Job => ("job name", 64, false),
        Name::Output => ("output name", 128, true),
    };
    if s.is_empty() {
        return Err(Error::id(what, s, "must not be empty"));
    }
    if s.len() > max {
        return Err(Error::id(what, s, format!("longer than {max} characters")));
    }
    if !s.as_bytes()[0].is_ascii_alphanumeric() && s.as_bytes()[0] != b'_' {
        return Err(Error::id(what, s, "must start with a letter, digit or underscore"));
    }
    if let Some(c) = s.chars().find(|&c| !(c.is_ascii_alphanumeric() || c == '_' || c == '-' || (dots && c == '.'))) {
        let allowed = if dots { "letters, digits, '_', '-' and '.'" } else { "letters, digits, '_' and '-'" };
        return Err(Error::id(what, s, format!("character {c:?} is not allowed (only {allowed})")));
    }
    Ok(())
}

/// One subtask: replica `rank` of task `task` of a job.
#[derive(Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Debug, Serialize, Deserialize)]
pub struct SubtaskKey {
    pub job: JobId,
    pub task: String,
    pub rank: u32,
}

impl fmt::Display for SubtaskKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}/{}", self.job, self.task, self.rank)
    }
}

/// One attempt of one subtask. Every placement of a subtask is a new attempt, so a report about
/// an older attempt is recognised as stale.
#[derive(Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Debug, Serialize, Deserialize)]
pub struct AttemptRef {
    pub job: JobId,
    pub task: String,
    pub rank: u32,
    pub attempt: u32,
}

impl AttemptRef {
    pub fn subtask(&self) -> SubtaskKey {
        SubtaskKey { job: self.job, task: self.task.clone(), rank: self.rank }
    }
}

impl fmt::Display for AttemptRef {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}/{}#{}", self.job, self.task, self.rank, self.attempt)
    }
}

/// A data object: output `name` of replica `rank` of task `task`. Text form
/// `<job>/<task>/<rank>/<name>`; the same path names it in a worker's cache.
#[derive(Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Debug, Serialize, Deserialize)]
pub struct ObjectId {
    pub job: JobId,
    pub task: String,
    pub rank: u32,
    pub name: String,
}

impl fmt::Display for ObjectId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}/{}/{}", self.job, self.task, self.rank, self.name)
    }
}

impl FromStr for ObjectId {
    type Err = Error;
    fn from_str(s: &str) -> Result<Self, Error> {
        let parts: Vec<&str> = s.split('/').collect();
        let [job, task, rank, name] = parts.as_slice() else {
            return Err(Error::id("object id", s, "expected <job>/<task>/<rank>/<name>"));
        };
        let job: JobId = job.parse()?;
        check_task_name(task)?;
        let rank: u32 =
            rank.parse().map_err(|_| Error::id("object id", s, format!("rank {rank:?} is not a number")))?;
        check_output_name(name)?;
        Ok(ObjectId { job, task: task.to_string(), rank, name: name.to_string() })
    }
}

/// The longest `checkpoint` output name: its kept copies' names ([`kept_checkpoint`]) must
/// still be output names (at most 128 characters).
pub const MAX_CHECKPOINT_NAME: usize = 100;

/// The object id under which a worker keeps the `checkpoint` output a failed or stopped attempt
/// left: `<job>/<task>/<rank>/<output>.attempt-<n>` (one per attempt, so copies of different
/// attempts never share a name).
pub fn kept_checkpoint(a: &AttemptRef, output: &str) -> ObjectId {
    ObjectId { job: a.job, task: a.task.clone(), rank: a.rank, name: format!("{output}.attempt-{}", a.attempt) }
}

/// Whether `name` is a kept copy's name of checkpoint output `output` (`<output>.attempt-<n>`),
/// and of which attempt.
pub fn kept_checkpoint_attempt(name: &str, output: &str) -> Option<u32> {
    let n = name.strip_prefix(output)?.strip_prefix(".attempt-")?;
    if n.is_empty() || !n.bytes().all(|b| b.is_ascii_digit()) || (n.len() > 1 && n.starts_with('0')) {
        return None;
    }
    n.parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kept_checkpoints_are_named_by_attempt() {
        let a = AttemptRef { job: JobId::random(), task: "train".into(), rank: 2, attempt: 7 };
        let o = kept_checkpoint(&a, "ckpt");
        assert_eq!(o.name, "ckpt.attempt-7");
        assert_eq!(o.to_string().parse::<ObjectId>().unwrap(), o);
        assert_eq!(kept_checkpoint_attempt("ckpt.attempt-7", "ckpt"), Some(7));
        for bad in [
            "ckpt",
            "ckpt.attempt-",
            "ckpt.attempt-07",
            "ckpt.attempt-x",
            "other.attempt-1",
            "ckpt.attempt-99999999999",
        ] {
            assert_eq!(kept_checkpoint_attempt(bad, "ckpt"), None, "{bad}");
        }
        let long = "c".repeat(MAX_CHECKPOINT_NAME);
        let a = AttemptRef { attempt: u32::MAX, ..a };
        check_output_name(&kept_checkpoint(&a, &long).name).unwrap();
    }

    #[test]
    fn ids_round_trip_and_check_prefix() {
        let j = JobId::random();
        let text = j.to_string();
        assert!(text.starts_with("job-") && text.len() == 36);
        assert_eq!(text.parse::<JobId>().unwrap(), j);
        let err = text.replace("job-", "wkr-").parse::<JobId>().unwrap_err();
        assert!(err.to_string().contains("expected the prefix \"job-\""), "{err}");
        let w = WorkerId::random();
        assert_eq!(w.to_string().parse::<WorkerId>().unwrap(), w);
        assert!("wkr-xyz".parse::<WorkerId>().is_err());
    }

    #[test]
    fn names_are_checked() {
        assert!(check_task_name("gen-1_a").is_ok());
        assert!(check_task_name("").is_err());
        assert!(check_task_name("a/b").unwrap_err().to_string().contains("'/'"));
        assert!(check_task_name("x.y").is_err());
        assert!(check_output_name("numbers.bin").is_ok());
        assert!(check_output_name(".hidden").is_err());
        assert!(check_output_name("..").is_err());
    }

    #[test]
    fn object_ids_round_trip() {
        let o = ObjectId { job: JobId::random(), task: "gen".into(), rank: 3, name: "numbers".into() };
        assert_eq!(o.to_string().parse::<ObjectId>().unwrap(), o);
        assert!("x/gen/3/n".parse::<ObjectId>().is_err());
        let bad = format!("{}/gen/three/n", o.job);
        assert!(bad.parse::<ObjectId>().unwrap_err().to_string().contains("not a number"));
        let traversal = format!("{}/gen/3/..", o.job);
        assert!(traversal.parse::<ObjectId>().is_err());
    }
}
