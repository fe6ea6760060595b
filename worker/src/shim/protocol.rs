//! The messages between a worker and an attempt's shim, and their parsing. Pure.

use serde::{Deserialize, Serialize};

use crate::isolation::KillTarget;

/// The first argument that makes the worker's executable a shim.
pub const SHIM_ARG: &str = "--plexus-attempt-shim";

/// What the shim runs and guards: the first line the worker writes.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Spec {
    /// The command and its arguments (checked by the worker: not empty, no NUL).
    pub argv: Vec<String>,
    /// The `cgroup.procs` files the command writes itself into before it executes.
    pub cgroups: Vec<String>,
    /// Everything to kill when the worker is gone or the lease has run out.
    pub kill: KillTarget,
    /// When the lease ends (boot-clock ms; `u64::MAX`: never).
    pub lease_end: u64,
    /// The uid (and gid) the command takes after joining its cgroups; `None`: the worker's.
    #[serde(default)]
    pub uid: Option<u32>,
    /// How long after the lease's end a frozen command is killed (ms; `None`: never): by then
    /// the coordinator has given the worker up (`crate::lease::frozen_limit`).
    #[serde(default)]
    pub frozen_limit_ms: Option<u64>,
}

/// A message from the shim to the worker.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Status {
    Pid(i32),
    Error(String),
    Fenced(String),
    /// The raw wait status (`ExitStatus::from_raw`).
    Exit(i32),
}

impl Status {
    /// The message as one line, newline included; newlines inside a text become spaces.
    pub fn to_line(&self) -> String {
        let flat = |t: &str| t.replace(['\n', '\r'], " ");
        match self {
            Status::Pid(p) => format!("pid {p}\n"),
            Status::Error(t) => format!("error {}\n", flat(t)),
            Status::Fenced(t) => format!("fenced {}\n", flat(t)),
            Status::Exit(s) => format!("exit {s}\n"),
        }
    }

    /// Parses one line (without its newline); `None` for anything else.
    pub fn parse(line: &str) -> Option<Status> {
        let (word, rest) = line.split_once(' ')?;
        match word {
            "pid" => rest.parse().ok().filter(|&p: &i32| p > 1).map(Status::Pid),
            "error" => Some(Status::Error(rest.to_string())),
            "fenced" => Some(Status::Fenced(rest.to_string())),
            "exit" => rest.parse().ok().map(Status::Exit),
            _ => None,
        }
    }
}

/// The renewal line: the lease now ends at `end`.
pub fn renew_line(end: u64) -> String {
    format!("renew {end}\n")
}

/// Parses a renewal line (without its newline).
pub fn parse_renew(line: &str) -> Option<u64> {
    line.strip_prefix("renew ")?.trim().parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn status_lines_round_trip_and_nonsense_is_refused() {
        for s in
            [Status::Pid(42), Status::Error("no such file".into()), Status::Fenced("lease".into()), Status::Exit(9)]
        {
            let line = s.to_line();
            assert_eq!(Status::parse(line.trim_end_matches('\n')), Some(s));
        }
        assert_eq!(Status::Error("a\nb".into()).to_line(), "error a b\n");
        for bad in ["", "pid", "pid x", "pid 1", "exit", "hello world"] {
            assert_eq!(Status::parse(bad), None, "{bad:?}");
        }
        assert_eq!(parse_renew(renew_line(7).trim_end()), Some(7));
        assert_eq!(parse_renew("renew"), None);
    }

    #[test]
    fn the_spec_is_one_json_line() {
        let spec = Spec {
            argv: vec!["sh".into(), "-c".into(), "echo 'a\nb'".into()],
            cgroups: vec!["/sys/fs/cgroup/x/cgroup.procs".into()],
            kill: KillTarget::V1 { freezer: Some("/f".into()), others: vec!["/m".into()] },
            lease_end: u64::MAX,
            uid: Some(200_000),
            frozen_limit_ms: Some(31_000),
        };
        let text = serde_json::to_string(&spec).unwrap();
        assert!(!text.contains('\n'));
        assert_eq!(serde_json::from_str::<Spec>(&text).unwrap(), spec);
    }
}
