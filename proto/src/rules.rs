//! Validation rules that both sides of the contract apply: the coordinator when it accepts a job
//! file or a registration, the worker when it takes an assignment or a peer's request. Each rule
//! is written here once so the two sides cannot drift apart.

use std::net::SocketAddr;

use crate::error::Error;

/// Built-in task kinds the workers know. A kind runs inside the worker, not as a process.
pub const BUILTIN_KINDS: &[&str] = &["noop", "allreduce", "reduce", "alltoall", "redistribute"];

/// The collective kinds: their members are placed together, one per replica of the task that
/// produces their input (a `redistribute`: max(P, Q)), and exchange data over the workers' data
/// plane.
pub const COLLECTIVE_KINDS: &[&str] = &["allreduce", "reduce", "alltoall", "redistribute"];

/// The collective kinds that reduce (`op`, `algorithm`, and `root` for a reduce).
pub const REDUCING_KINDS: &[&str] = &["allreduce", "reduce"];

/// The most members of an `alltoall` whose `counts` table is written in the job file: the
/// table has N² entries and travels in every member's assignment.
pub const MAX_COUNTS_MEMBERS: usize = 256;

/// The largest `from_block` / `to_block` of a `redistribute`, in elements: far beyond any real
/// block, and small enough that one period's table (seed 004) is cheap to compute.
pub const MAX_REDISTRIBUTE_BLOCK: u64 = 1 << 24;

/// Whether `kind` is one of the [`COLLECTIVE_KINDS`].
/// The prefix of the line a collective member writes in its log saying which algorithm or
/// schedule ran and why; `plexus explain` shows the rest of that line.
pub const COLLECTIVE_LINE: &str = "plexus:collective ";

/// What a collective member's log says ran and why (the last such line), if it says.
pub fn collective_line(log: &str) -> Option<&str> {
    log.lines().rev().find_map(|l| l.strip_prefix(COLLECTIVE_LINE))
}

pub fn is_collective(kind: &str) -> bool {
    COLLECTIVE_KINDS.contains(&kind)
}

/// The prefix of the variables the worker sets for a subtask; a job may not set them.
pub const RESERVED_ENV_PREFIX: &str = "PLEXUS_";

/// The most bytes a task's command and environment may take, checked when a job is submitted,
/// counted as `execve` counts them: each argv string and `KEY=VALUE` entry with its NUL and its
/// pointer ([`exec_bytes`]). Linux refuses an `execve` whose strings pass a quarter of the stack
/// limit (2 MiB at the usual 8 MiB): half of that is left to the variables the worker sets, and
/// every assignment of the task carries them within a gRPC message ([`MAX_MESSAGE`]). Data
/// belongs in input objects.
pub const MAX_TASK_SPEC_BYTES: usize = 1 << 20;

/// The longest one argv string or one `KEY=VALUE` env entry may be: Linux's `MAX_ARG_STRLEN`
/// (32 pages, 128 KiB, counting the NUL) less its NUL; `execve` fails with E2BIG past it.
pub const MAX_ARG_BYTES: usize = (128 << 10) - 1;

/// What one string of `len` bytes takes of the `execve` limit: itself, its NUL and its pointer.
pub fn exec_bytes(len: usize) -> usize {
    len + 1 + size_of::<usize>()
}

/// The largest gRPC message either side sends or accepts, the one size policy of coordinator,
/// workers and clients: a status of a 100,000-subtask job is ~10 MiB.
pub const MAX_MESSAGE: usize = 64 << 20;

/// The metadata key of a refusal that may be retried, and after how many milliseconds: gRPC's
/// own (`grpc-retry-pushback-ms`, honoured by grpc-core's retry policy, so the Python client's
/// channel follows it). A coordinator shedding load sets it on its `RESOURCE_EXHAUSTED`; the
/// CLI and the Python client retry such a refusal, and only such a one.
pub const RETRY_PUSHBACK_METADATA: &str = "grpc-retry-pushback-ms";

/// The most rail addresses a worker may register or a peer may name in one request.
pub const MAX_RAILS: usize = 64;
/// The longest rail address text accepted (an `ip:port`, with room to spare).
pub const MAX_RAIL_ADDR_LEN: usize = 256;

/// The largest node a worker may register: bounds that no real machine reaches, so a capacity
/// beyond them is a bug or an attack, and refused before it can skew placement or overflow a sum.
pub const MAX_NODE_CPUS: u32 = 16_384;
/// 1 PiB: also the bound of a node's cache and of one GPU's memory.
pub const MAX_NODE_BYTES: u64 = 1 << 50;
pub const MAX_NODE_GPUS: usize = 256;
/// Hostnames and GPU model names.
pub const MAX_NAME_LEN: usize = 256;

/// An environment variable name a job may set: not empty, no `=` or NUL (which cannot be in a
/// process's environment), and not one the worker reserves.
pub fn check_env_key(k: &str) -> Result<(), Error> {
    if k.is_empty() || k.contains('=') || k.contains('\0') {
        return Err(Error::EnvKey(k.to_string()));
    }
    if k.starts_with(RESERVED_ENV_PREFIX) {
        return Err(Error::ReservedEnvKey(k.to_string()));
    }
    Ok(())
}

/// The longest sweep parameter key (`sweep = { key = [...] }`).
pub const MAX_PARAM_KEY_LEN: usize = 32;
/// The longest sweep parameter value, as text.
pub const MAX_PARAM_VALUE_LEN: usize = 256;
/// The most parameters one replica has.
pub const MAX_PARAMS: usize = 16;

/// Whether `key` may name a sweep parameter: 1 to [`MAX_PARAM_KEY_LEN`] letters, digits and
/// '_', starting with a letter (it becomes part of an environment variable's name,
/// [`param_env_name`]).
pub fn param_key_ok(key: &str) -> bool {
    (1..=MAX_PARAM_KEY_LEN).contains(&key.len())
        && key.bytes().next().is_some_and(|b| b.is_ascii_alphabetic())
        && key.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_')
}

/// The environment variable a sweep parameter is given to its task as: `PLEXUS_PARAM_` and the
/// key in upper case.
pub fn param_env_name(key: &str) -> String {
    format!("PLEXUS_PARAM_{}", key.to_ascii_uppercase())
}

/// Parses rail addresses from the network, naming the first bad one.
pub fn parse_rails(list: &[String]) -> Result<Vec<SocketAddr>, Error> {
    if list.len() > MAX_RAILS {
        return Err(Error::TooManyRails { count: list.len(), max: MAX_RAILS });
    }
    list.iter()
        .map(|r| r.parse::<SocketAddr>().map_err(|_| Error::RailAddr(r.chars().take(MAX_RAIL_ADDR_LEN).collect())))
        .collect()
}

/// Whether a registered list of rail addresses is within the limits (count and length); their
/// syntax is checked by whoever dials them, with [`parse_rails`].
pub fn rails_within_limits(list: &[String]) -> bool {
    list.len() <= MAX_RAILS && list.iter().all(|r| r.len() <= MAX_RAIL_ADDR_LEN)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn env_keys_are_checked_and_named() {
        assert_eq!(check_env_key("OMP_NUM_THREADS"), Ok(()));
        assert_eq!(check_env_key("A=B").unwrap_err().to_string(), "env key \"A=B\" is not a valid variable name");
        assert!(matches!(check_env_key(""), Err(Error::EnvKey(_))));
        assert!(matches!(check_env_key("X\0"), Err(Error::EnvKey(_))));
        assert!(check_env_key("PLEXUS_OUT").unwrap_err().to_string().contains("reserved"));
    }

    #[test]
    fn rails_are_parsed_within_limits() {
        assert_eq!(parse_rails(&["127.0.0.1:9000".into()]).unwrap().len(), 1);
        assert_eq!(parse_rails(&["nope".into()]), Err(Error::RailAddr("nope".into())));
        let many: Vec<String> = (0..=MAX_RAILS).map(|i| format!("127.0.0.1:{}", 9000 + i)).collect();
        assert_eq!(parse_rails(&many), Err(Error::TooManyRails { count: MAX_RAILS + 1, max: MAX_RAILS }));
        assert!(!rails_within_limits(&many));
        assert!(!rails_within_limits(&["x".repeat(MAX_RAIL_ADDR_LEN + 1)]));
        assert!(rails_within_limits(&many[..MAX_RAILS]));
    }
}
