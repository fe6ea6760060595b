//! Confining subtasks, so that nothing a subtask starts outlives it or its worker.
//!
//! Every command attempt runs in a cgroup of its own, under a parent this worker owns:
//!
//! ```text
//! cgroup v2:  <cgroup2 mount>/plexus/<worker-id>/<job>.<task>.<rank>.<attempt>/
//! cgroup v1:  <mount of C>/plexus/<worker-id>/<job>.<task>.<rank>.<attempt>/   for C in freezer, memory, cpu, pids
//! ```
//!
//! The child joins its cgroup between `fork` and `exec` (it writes `0` to `cgroup.procs`), so
//! every process it ever starts is in it too: daemons that call `setsid` or fork twice leave
//! the process group, never the cgroup. Ending an attempt kills the whole cgroup (v2:
//! `cgroup.kill`, or freeze, SIGKILL every pid in `cgroup.procs`, thaw; v1: the same through the
//! freezer hierarchy) and removes it. The cpu and memory requests become limits (v2 `cpu.max`,
//! `memory.max`; v1 `cpu.cfs_quota_us`/`cpu.cfs_period_us`, `memory.limit_in_bytes`; a request
//! of 0 is no limit), and the memory controller's OOM-kill counter tells an attempt killed for
//! its memory from one that died of SIGKILL otherwise.
//!
//! Which mechanism ([`Mode`]): cgroup v2 when the unified hierarchy's root already delegates the
//! `memory` controller to its children (we never change a cgroup we did not create, the root
//! included); else cgroup v1 when one of the four v1 hierarchies is mounted and writable; else
//! (a container without a writable cgroup file system, a user without the rights) process
//! groups, with a pid record per attempt under the data dir (`DIR/procs/<attempt>`: the group id
//! and the leader's start time, so that a pid reused by an unrelated process is not killed).
//!
//! A worker that starts calls [`Isolation::reap_leftovers`] before it registers: it kills what a
//! previous process on the same data dir left running — every cgroup under its parent in every
//! hierarchy it can see (frozen, killed, thawed, removed), then every pid record — whatever mode
//! that process used.
//!
//! The parsing and the arithmetic ([`parse_mountinfo`], [`Limits`], [`oom_kills`],
//! [`v1_oom`], [`group_is_ours`]) are pure functions, tested on sample texts; the rest touches
//! `/sys/fs/cgroup` and `/proc`.
//!
//! # Layout
//! - `parse`: the pure parts (mount table, limits, OOM counters, pid records, `/proc` texts);
//! - `cgroup`: the mechanism on the file system (create, limit, kill, remove; process groups);
//! - `confinement`: one attempt's [`Confinement`];
//! - `users`: who a subtask runs as ([`TaskUsers`]: a uid per job when the worker is root);
//! - this file: [`Mode`], [`Choice`], and [`Isolation`], which chooses the mechanism, reaps
//!   leftovers and confines attempts. The other files never import this one.

mod cgroup;
mod confinement;
mod parse;
#[cfg(test)]
pub(crate) mod tests;
mod users;

use std::path::PathBuf;

use tracing::debug;

use crate::error::{Error, Result};

use cgroup::{fresh_dir, kill_v1, kill_v2, remove_tree, write_limit};
pub use cgroup::{join_cgroups, kill_group, stop_group};
pub use confinement::{Confinement, KillTarget};
pub use parse::{
    CPU_PERIOD_US, Limits, Mounts, PidRecord, V1_CONTROLLERS, group_is_ours, lists_controller, oom_kills,
    parse_mountinfo, parse_procs, stat_start_time, v1_oom,
};
pub use users::{
    TaskUser, TaskUserChoice, TaskUsers, UID_LOCKS, UidRange, become_user, give_to, range_is_mapped,
    unsearchable_ancestor,
};

/// The directory under each hierarchy's root that holds every worker's parent cgroup.
pub const PARENT: &str = "plexus";

/// How subtasks are confined on this worker, as `plexus workers` shows it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mode {
    CgroupV2,
    CgroupV1,
    ProcessGroup,
}

impl Mode {
    pub fn as_str(self) -> &'static str {
        match self {
            Mode::CgroupV2 => "cgroup-v2",
            Mode::CgroupV1 => "cgroup-v1",
            Mode::ProcessGroup => "process-group",
        }
    }
}

impl std::fmt::Display for Mode {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// What `--isolation` asks for: the best mechanism available, or one in particular.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum Choice {
    #[default]
    Auto,
    Only(Mode),
}

impl std::str::FromStr for Choice {
    type Err = Error;
    fn from_str(s: &str) -> Result<Choice> {
        match s {
            "auto" => Ok(Choice::Auto),
            "cgroup-v2" => Ok(Choice::Only(Mode::CgroupV2)),
            "cgroup-v1" => Ok(Choice::Only(Mode::CgroupV1)),
            "process-group" => Ok(Choice::Only(Mode::ProcessGroup)),
            other => Err(Error::UnknownIsolation { input: other.to_string() }),
        }
    }
}

/// This worker's confinement: how it runs subtasks, and where its cgroups (or pid records) live.
#[derive(Debug)]
pub struct Isolation {
    backend: Backend,
    /// `DIR/procs/`: the pid records of process-group attempts.
    records: PathBuf,
    /// Every hierarchy's `plexus/<worker-id>` that exists here, whatever the mode: where leftovers
    /// of a previous process may be. Freezer first among the v1 ones.
    leftover_parents: Vec<(Hierarchy, PathBuf)>,
    /// Why a cgroup mode was not used, for the start-up warning.
    fallback_reason: Option<String>,
}

/// The three implementations.
#[derive(Debug)]
enum Backend {
    /// `parent` is `<mount>/plexus/<worker-id>`, with `memory` (and `cpu`, `pids` when the root
    /// delegates them) enabled for its children.
    V2 {
        parent: PathBuf,
        cpu: bool,
    },
    /// (controller, `<mount>/plexus/<worker-id>`), freezer first when it is there.
    V1 {
        parents: Vec<(&'static str, PathBuf)>,
    },
    ProcessGroup,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Hierarchy {
    V2,
    V1(&'static str),
}

impl Isolation {
    /// Chooses and prepares the mechanism for worker `worker` (its parent cgroups are created
    /// now), reading the mounts from `/proc/self/mountinfo`. `records` is the pid-record dir.
    pub fn setup(choice: Choice, worker: &str, records: PathBuf) -> Result<Isolation> {
        let mounts = std::fs::read_to_string("/proc/self/mountinfo").map(|t| parse_mountinfo(&t)).unwrap_or_default();
        Isolation::setup_with(choice, worker, records, &mounts)
    }

    /// [`Isolation::setup`] on given mounts.
    pub fn setup_with(choice: Choice, worker: &str, records: PathBuf, mounts: &Mounts) -> Result<Isolation> {
        std::fs::create_dir_all(&records).map_err(Error::io("create", &records))?;
        let mut leftover_parents = Vec::new();
        if let Some(m) = &mounts.unified {
            leftover_parents.push((Hierarchy::V2, m.join(PARENT).join(worker)));
        }
        for c in V1_CONTROLLERS {
            if let Some(m) = mounts.v1.get(c) {
                leftover_parents.push((Hierarchy::V1(c), m.join(PARENT).join(worker)));
            }
        }
        let mut iso = Isolation { backend: Backend::ProcessGroup, records, leftover_parents, fallback_reason: None };
        let mut reasons = Vec::new();
        // v2 first, then v1: the first that can be set up (or only the one asked for).
        type Setup = fn(&Mounts, &str) -> Result<Backend>;
        for (mode, label, setup) in
            [(Mode::CgroupV2, "cgroup v2", setup_v2 as Setup), (Mode::CgroupV1, "cgroup v1", setup_v1 as Setup)]
        {
            if !(choice == Choice::Auto || choice == Choice::Only(mode)) {
                continue;
            }
            match setup(mounts, worker) {
                Ok(b) => {
                    iso.backend = b;
                    return Ok(iso);
                }
                Err(Error::Isolation { reason, .. }) if choice == Choice::Auto => {
                    reasons.push(format!("{label}: {reason}"))
                }
                Err(e) => return Err(e),
            }
        }
        if !reasons.is_empty() {
            iso.fallback_reason = Some(reasons.join("; "));
        }
        Ok(iso)
    }

    pub fn mode(&self) -> Mode {
        match self.backend {
            Backend::V2 { .. } => Mode::CgroupV2,
            Backend::V1 { .. } => Mode::CgroupV1,
            Backend::ProcessGroup => Mode::ProcessGroup,
        }
    }

    /// Why no cgroup mode is used, when auto-detection fell back to process groups.
    pub fn fallback_reason(&self) -> Option<&str> {
        self.fallback_reason.as_deref()
    }

    /// What of the requests this mode cannot enforce, for the start-up log (empty: all of it).
    pub fn gaps(&self) -> Vec<&'static str> {
        match &self.backend {
            Backend::V2 { cpu, .. } => {
                if *cpu {
                    vec![]
                } else {
                    vec!["cpu limits (the cpu controller is not delegated)"]
                }
            }
            Backend::V1 { parents } => {
                let has = |c| parents.iter().any(|(p, _)| *p == c);
                let mut gaps = Vec::new();
                if !has("memory") {
                    gaps.push("memory limits (no memory hierarchy)");
                }
                if !has("cpu") {
                    gaps.push("cpu limits (no cpu hierarchy)");
                }
                gaps
            }
            Backend::ProcessGroup => {
                vec!["cpu and memory limits", "killing processes that leave the process group (setsid)"]
            }
        }
    }

    /// Kills everything a previous worker process on this data dir left running and removes its
    /// cgroups and pid records. Returns how many processes (for pid records: process groups) were
    /// killed. Call before registering.
    pub fn reap_leftovers(&self) -> usize {
        let mut killed = 0;
        // Freezer first: its kill covers the other v1 hierarchies' processes, which are the same.
        for (h, parent) in &self.leftover_parents {
            let Ok(rd) = std::fs::read_dir(parent) else { continue };
            for e in rd.flatten() {
                if !e.file_type().is_ok_and(|t| t.is_dir()) {
                    continue;
                }
                let dir = e.path();
                killed += match h {
                    Hierarchy::V2 => kill_v2(&dir),
                    Hierarchy::V1("freezer") => kill_v1(Some(&dir), &[]),
                    Hierarchy::V1(_) => kill_v1(None, std::slice::from_ref(&dir)),
                };
                remove_tree(&dir);
            }
        }
        if let Ok(rd) = std::fs::read_dir(&self.records) {
            for e in rd.flatten() {
                let path = e.path();
                if let Some(r) = std::fs::read_to_string(&path).ok().as_deref().and_then(PidRecord::parse) {
                    let now = std::fs::read_to_string(format!("/proc/{}/stat", r.pgid))
                        .ok()
                        .as_deref()
                        .and_then(stat_start_time);
                    if group_is_ours(r, now) && kill_group(r.pgid) {
                        killed += 1;
                    }
                }
                let _ = std::fs::remove_file(&path);
            }
        }
        killed
    }

    /// Creates the confinement of one attempt (`name` is a single path component) with its
    /// limits. Dropping it kills whatever still runs in it and removes it.
    pub fn confine(&self, name: &str, limits: &Limits) -> Result<Confinement> {
        match &self.backend {
            Backend::V2 { parent, cpu } => {
                let dir = parent.join(name);
                fresh_dir(&dir)?;
                // Made before the limits are written: when writing one fails, dropping it removes
                // the cgroup again.
                let c = Confinement::v2(dir.clone(), limits.memory);
                for (file, value) in limits.v2_files() {
                    if file == "cpu.max" && !cpu {
                        continue;
                    }
                    write_limit(&dir, file, &value)?;
                }
                Ok(c)
            }
            Backend::V1 { parents } => {
                let mut dirs = Vec::with_capacity(parents.len());
                for (controller, parent) in parents {
                    let dir = parent.join(name);
                    fresh_dir(&dir)?;
                    dirs.push((*controller, dir));
                }
                let c = Confinement::v1(dirs.clone(), limits.memory);
                for (controller, file, value) in limits.v1_files() {
                    if let Some((_, dir)) = dirs.iter().find(|(c, _)| *c == controller) {
                        write_limit(dir, file, &value)?;
                    }
                }
                Ok(c)
            }
            Backend::ProcessGroup => Ok(Confinement::process_group(self.records.join(name))),
        }
    }

    /// Removes this worker's parent cgroups (in every hierarchy: a previous process may have used
    /// another mode), and the shared `plexus` parent when no other worker uses it (it is not
    /// empty otherwise, and the kernel refuses). At shutdown, after every attempt ended.
    pub fn close(&self) {
        for (_, p) in &self.leftover_parents {
            match std::fs::remove_dir(p) {
                Ok(()) => {}
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
                Err(e) => debug!(cgroup = %p.display(), error = %e, "could not remove the worker's cgroup"),
            }
            if let Some(shared) = p.parent() {
                let _ = std::fs::remove_dir(shared);
            }
        }
    }
}

/// Why `mode` cannot be used here, as the error [`Isolation::setup_with`] reports.
fn unavailable(mode: Mode, reason: impl Into<String>) -> Error {
    Error::Isolation { mode: mode.as_str(), reason: reason.into() }
}

fn setup_v2(mounts: &Mounts, worker: &str) -> Result<Backend> {
    let v2 = |reason: String| unavailable(Mode::CgroupV2, reason);
    let Some(mount) = &mounts.unified else { return Err(v2("no cgroup2 file system is mounted".into())) };
    let root_ctl = std::fs::read_to_string(mount.join("cgroup.subtree_control"))
        .map_err(|e| v2(format!("{}: {e}", mount.display())))?;
    if !lists_controller(&root_ctl, "memory") {
        return Err(v2(format!(
            "{} does not delegate the memory controller (cgroup.subtree_control: {:?})",
            mount.display(),
            root_ctl.trim()
        )));
    }
    let shared = mount.join(PARENT);
    let parent = shared.join(worker);
    std::fs::create_dir_all(&parent).map_err(|e| v2(format!("cannot create {}: {e}", parent.display())))?;
    // Our own cgroups hand the controllers on: a cgroup's children can use only what its
    // subtree_control enables. Neither holds a process, so the kernel allows it.
    let mut cpu = lists_controller(&root_ctl, "cpu");
    for dir in [&shared, &parent] {
        let ctl = dir.join("cgroup.subtree_control");
        std::fs::write(&ctl, "+memory").map_err(|e| v2(format!("cannot enable memory in {}: {e}", ctl.display())))?;
        cpu = cpu && std::fs::write(&ctl, "+cpu").is_ok();
        if lists_controller(&root_ctl, "pids") {
            let _ = std::fs::write(&ctl, "+pids");
        }
    }
    Ok(Backend::V2 { parent, cpu })
}

fn setup_v1(mounts: &Mounts, worker: &str) -> Result<Backend> {
    if mounts.v1.is_empty() {
        return Err(unavailable(Mode::CgroupV1, "none of the freezer, memory, cpu and pids hierarchies is mounted"));
    }
    let mut parents = Vec::new();
    let mut errors = Vec::new();
    for c in V1_CONTROLLERS {
        let Some(m) = mounts.v1.get(c) else { continue };
        let parent = m.join(PARENT).join(worker);
        match std::fs::create_dir_all(&parent) {
            Ok(()) => parents.push((c, parent)),
            Err(e) => errors.push(format!("cannot create {}: {e}", parent.display())),
        }
    }
    if parents.is_empty() {
        return Err(unavailable(Mode::CgroupV1, errors.join("; ")));
    }
    Ok(Backend::V1 { parents })
}
