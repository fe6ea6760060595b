//! One attempt's confinement: its cgroup(s) or its pid record, what the runner asks of it
//! (the files its child joins, the kill at its end, whether it was OOM-killed), and its removal.

use std::ffi::CString;
use std::os::unix::ffi::OsStrExt;
use std::path::PathBuf;

use serde::{Deserialize, Serialize};
use tracing::{debug, warn};

use super::cgroup::{freeze_v1, freeze_v2, kill_group, kill_v1, kill_v2, remove_tree, stop_group};
use super::parse::{PidRecord, oom_kills, stat_start_time, v1_oom};

/// An attempt's cgroup(s), or its pid record. Dropping it kills every process still in it and
/// removes it.
#[derive(Debug)]
pub struct Confinement {
    kind: Kind,
    memory_limit: Option<u64>,
    released: bool,
}

#[derive(Debug)]
enum Kind {
    V2 {
        dir: PathBuf,
    },
    /// Freezer first when present.
    V1 {
        dirs: Vec<(&'static str, PathBuf)>,
    },
    ProcessGroup {
        record: PathBuf,
        pgid: Option<i32>,
    },
}

impl Confinement {
    /// A v2 cgroup at `dir`.
    pub(super) fn v2(dir: PathBuf, memory_limit: Option<u64>) -> Confinement {
        Confinement { kind: Kind::V2 { dir }, memory_limit, released: false }
    }

    /// v1 cgroups, (controller, dir), freezer first when present.
    pub(super) fn v1(dirs: Vec<(&'static str, PathBuf)>, memory_limit: Option<u64>) -> Confinement {
        Confinement { kind: Kind::V1 { dirs }, memory_limit, released: false }
    }

    /// A process group, recorded at `record` once it starts.
    pub(super) fn process_group(record: PathBuf) -> Confinement {
        Confinement { kind: Kind::ProcessGroup { record, pgid: None }, memory_limit: None, released: false }
    }

    /// The `cgroup.procs` files the child writes itself into before it executes the command
    /// (see [`join_cgroups`]); empty for a process group.
    pub fn procs_files(&self) -> Vec<CString> {
        let files: Vec<PathBuf> = match &self.kind {
            Kind::V2 { dir } => vec![dir.join("cgroup.procs")],
            Kind::V1 { dirs } => dirs.iter().map(|(_, d)| d.join("cgroup.procs")).collect(),
            Kind::ProcessGroup { .. } => vec![],
        };
        // Paths built from a mount point and validated names never hold a NUL byte.
        files.into_iter().filter_map(|p| CString::new(p.as_os_str().as_bytes()).ok()).collect()
    }

    /// The command started as group leader `pid`: a process group's record is written now, so
    /// that a restarted worker can find it.
    pub fn started(&mut self, pid: i32) {
        if let Kind::ProcessGroup { record, pgid } = &mut self.kind {
            *pgid = Some(pid);
            let start = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok().as_deref().and_then(stat_start_time);
            match start {
                Some(start) => {
                    if let Err(e) = std::fs::write(&*record, PidRecord { pgid: pid, start }.to_text()) {
                        warn!(record = %record.display(), error = %e, "could not write a pid record; a restarted worker will not find this attempt");
                    }
                }
                None => debug!(pid, "the process ended before its pid record was written"),
            }
        }
    }

    /// The attempt's cgroup path below each v1 hierarchy's root (`/plexus/<worker>/<attempt>`),
    /// for a container runtime's `--cgroup-parent`; `None` in the other modes (under cgroup v2
    /// a cgroup with processes, the runtime's client among them, cannot have children that
    /// controllers apply to).
    pub fn v1_path(&self) -> Option<String> {
        let Kind::V1 { dirs } = &self.kind else { return None };
        let (_, dir) = dirs.first()?;
        let mut parts: Vec<String> = dir.iter().rev().take(3).map(|p| p.to_string_lossy().into_owned()).collect();
        parts.reverse();
        Some(format!("/{}", parts.join("/")))
    }

    /// The memory limit, when there is one this mode enforces.
    pub fn memory_limit(&self) -> Option<u64> {
        match self.kind {
            Kind::ProcessGroup { .. } => None,
            _ => self.memory_limit,
        }
    }

    /// Kills every process in the confinement and waits (at most `KILL_WAIT`, 5 s) until they
    /// are gone. Blocking, for a few milliseconds: call it off the async threads.
    pub fn kill(&self) {
        let pgid = match &self.kind {
            Kind::ProcessGroup { pgid, .. } => *pgid,
            _ => None,
        };
        self.kill_target().kill(pgid);
    }

    /// What [`Confinement::kill`] kills, as data: for the attempt's supervisor
    /// ([`crate::shim`]), which kills it when the worker cannot.
    pub fn kill_target(&self) -> KillTarget {
        match &self.kind {
            Kind::V2 { dir } => KillTarget::V2 { dir: dir.clone() },
            Kind::V1 { dirs } => KillTarget::V1 {
                freezer: dirs.iter().find(|(c, _)| *c == "freezer").map(|(_, d)| d.clone()),
                others: dirs.iter().filter(|(c, _)| *c != "freezer").map(|(_, d)| d.clone()).collect(),
            },
            Kind::ProcessGroup { .. } => KillTarget::ProcessGroup,
        }
    }

    /// Whether the attempt's own memory limit was reached (cgroup v1: its peak usage at the
    /// limit, or a charge refused there): with a
    /// container made inside the attempt's cgroup, the kernel counts the OOM kill on the
    /// container's cgroup, which its runtime removes with it; the limit reached here, with the
    /// container's process killed, is that kill.
    pub fn memory_limit_reached(&self) -> bool {
        let Kind::V1 { dirs } = &self.kind else { return false };
        let Some((_, dir)) = dirs.iter().find(|(c, _)| *c == "memory") else { return false };
        let read = |f: &str| std::fs::read_to_string(dir.join(f)).ok().and_then(|t| t.trim().parse::<u64>().ok());
        // The peak at the limit (with swap accounting the memory + swap one, of the same bytes,
        // is reached, and the kernel may count no failure), or a charge refused at it.
        let peaked = |p: &str| {
            matches!((read(&format!("memory.{p}max_usage_in_bytes")), read(&format!("memory.{p}limit_in_bytes"))),
                (Some(max), Some(limit)) if max >= limit)
        };
        peaked("") || peaked("memsw.") || read("memory.failcnt").is_some_and(|n| n > 0)
    }

    /// Whether the kernel killed a process of this attempt for exceeding its memory limit.
    pub fn oom_killed(&self) -> bool {
        match &self.kind {
            Kind::V2 { dir } => std::fs::read_to_string(dir.join("memory.events"))
                .ok()
                .as_deref()
                .and_then(oom_kills)
                .is_some_and(|n| n > 0),
            Kind::V1 { dirs } => {
                let Some((_, dir)) = dirs.iter().find(|(c, _)| *c == "memory") else { return false };
                let Ok(ctl) = std::fs::read_to_string(dir.join("memory.oom_control")) else { return false };
                let failcnt =
                    std::fs::read_to_string(dir.join("memory.failcnt")).ok().and_then(|t| t.trim().parse().ok());
                v1_oom(&ctl, failcnt)
            }
            Kind::ProcessGroup { .. } => false,
        }
    }

    /// Kills what is left and removes the cgroups or the record (what dropping does; explicit so
    /// the caller can run it off the async threads).
    pub fn release(mut self) {
        self.release_now();
    }

    fn release_now(&mut self) {
        if self.released {
            return;
        }
        self.released = true;
        self.kill();
        match &self.kind {
            Kind::V2 { dir } => remove_tree(dir),
            Kind::V1 { dirs } => dirs.iter().for_each(|(_, d)| remove_tree(d)),
            Kind::ProcessGroup { record, .. } => {
                let _ = std::fs::remove_file(record);
            }
        }
    }
}

impl Drop for Confinement {
    fn drop(&mut self) {
        self.release_now();
    }
}

/// Everything in an attempt's confinement, as its supervisor is told it: the cgroup tree (v2), the
/// freezer and other v1 cgroups, or only the process group (whose id is the command's pid).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "mode", rename_all = "kebab-case")]
pub enum KillTarget {
    V2 { dir: PathBuf },
    V1 { freezer: Option<PathBuf>, others: Vec<PathBuf> },
    ProcessGroup,
}

impl KillTarget {
    /// SIGKILLs the process group `pgid` (the command's, when it started) and everything in the
    /// cgroups, and waits (at most 5 s) until they are gone. Blocking, for milliseconds.
    pub fn kill(&self, pgid: Option<i32>) {
        if let Some(pgid) = pgid {
            kill_group(pgid);
        }
        match self {
            KillTarget::V2 { dir } => {
                kill_v2(dir);
            }
            KillTarget::V1 { freezer, others } => {
                kill_v1(freezer.as_deref(), others);
            }
            KillTarget::ProcessGroup => {}
        }
    }

    /// Freezes (`on`) or thaws everything in the confinement: the v2 tree (`cgroup.freeze`), the
    /// v1 freezer cgroup (`freezer.state`), or, without either, the process group `pgid`
    /// (SIGSTOP / SIGCONT). A frozen attempt makes no progress and has no side effects; it can
    /// still be killed (SIGKILL reaches frozen and stopped processes). Blocking, for
    /// milliseconds. True if it took.
    pub fn freeze(&self, pgid: Option<i32>, on: bool) -> bool {
        match self {
            KillTarget::V2 { dir } => freeze_v2(dir, on),
            KillTarget::V1 { freezer: Some(f), .. } => freeze_v1(f, on),
            KillTarget::V1 { freezer: None, .. } | KillTarget::ProcessGroup => pgid.is_some_and(|p| stop_group(p, on)),
        }
    }
}
