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

use std::collections::BTreeMap;
use std::ffi::CString;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use tracing::{debug, warn};

use crate::error::{Error, Result};

/// The directory under each hierarchy's root that holds every worker's parent cgroup.
pub const PARENT: &str = "plexus";

/// The cfs period for cpu limits: the kernel's default, 100 ms. The quota is the request's share
/// of it, so a task asking for 0.5 cores runs at most 50 ms of every 100 ms.
pub const CPU_PERIOD_US: u64 = 100_000;
/// The kernel refuses quotas below 1 ms.
const MIN_CPU_QUOTA_US: u64 = 1_000;

/// How long killing a cgroup may wait for its processes to be gone. SIGKILL takes effect in
/// microseconds; a process stuck in uninterruptible sleep (a dead NFS server) can take longer,
/// and a worker must not hang on it: the cgroup is then left behind, with a warning, and removed
/// by the next start.
const KILL_WAIT: Duration = Duration::from_secs(5);
/// How long a v1 freeze may stay FREEZING before the pids are killed anyway (a task in
/// uninterruptible sleep cannot freeze; SIGKILL reaches it when it wakes).
const FREEZE_WAIT: Duration = Duration::from_millis(200);

/// The v1 controllers a subtask's cgroup joins, freezer first: it is the one killing goes through.
pub const V1_CONTROLLERS: [&str; 4] = ["freezer", "memory", "cpu", "pids"];

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
    type Err = String;
    fn from_str(s: &str) -> std::result::Result<Choice, String> {
        match s {
            "auto" => Ok(Choice::Auto),
            "cgroup-v2" => Ok(Choice::Only(Mode::CgroupV2)),
            "cgroup-v1" => Ok(Choice::Only(Mode::CgroupV1)),
            "process-group" => Ok(Choice::Only(Mode::ProcessGroup)),
            other => Err(format!("unknown isolation {other:?} (expected auto, cgroup-v2, cgroup-v1 or process-group)")),
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Pure parts
// ---------------------------------------------------------------------------------------------

/// The cgroup file systems mounted here, from `/proc/self/mountinfo`.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Mounts {
    /// Where the unified (v2) hierarchy is mounted, if it is.
    pub unified: Option<PathBuf>,
    /// v1 controller name → where its hierarchy is mounted (the first mount of each).
    pub v1: BTreeMap<String, PathBuf>,
}

/// Parses `/proc/self/mountinfo`: `ID PARENT MAJ:MIN ROOT MOUNTPOINT OPTS [TAGS...] - FSTYPE
/// SOURCE SUPEROPTS`. v1 hierarchies name their controllers in the super options
/// (`rw,cpu,cpuacct`); `name=systemd` and other named hierarchies have none we use. Lines that do
/// not have that shape are skipped.
pub fn parse_mountinfo(text: &str) -> Mounts {
    let mut m = Mounts::default();
    for line in text.lines() {
        let Some((left, right)) = line.split_once(" - ") else { continue };
        let Some(point) = left.split(' ').nth(4) else { continue };
        let mut right = right.split(' ');
        let (Some(fstype), Some(_source), Some(superopts)) = (right.next(), right.next(), right.next()) else {
            continue;
        };
        let point = PathBuf::from(unescape_mount_path(point));
        match fstype {
            "cgroup2" => {
                m.unified.get_or_insert(point);
            }
            "cgroup" => {
                for opt in superopts.split(',') {
                    if V1_CONTROLLERS.contains(&opt) {
                        m.v1.entry(opt.to_string()).or_insert_with(|| point.clone());
                    }
                }
            }
            _ => {}
        }
    }
    m
}

/// mountinfo writes space, tab, newline and backslash in paths as `\040`-style octal escapes.
fn unescape_mount_path(s: &str) -> String {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'\\' && i + 3 < b.len() && b[i + 1..i + 4].iter().all(|c| (b'0'..=b'7').contains(c)) {
            let v = (b[i + 1] - b'0') as u32 * 64 + (b[i + 2] - b'0') as u32 * 8 + (b[i + 3] - b'0') as u32;
            if let Ok(v) = u8::try_from(v) {
                out.push(v);
                i += 4;
                continue;
            }
        }
        out.push(b[i]);
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// Whether a whitespace-separated controller list (`cgroup.controllers`,
/// `cgroup.subtree_control`) names `controller`.
pub fn lists_controller(list: &str, controller: &str) -> bool {
    list.split_whitespace().any(|c| c == controller)
}

/// The limits a subtask's requests become.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub struct Limits {
    /// CPU time per [`CPU_PERIOD_US`], in µs; `None`: no limit (a request of 0 cores).
    pub cpu_quota_us: Option<u64>,
    /// Bytes; `None`: no limit (a request of 0).
    pub memory: Option<u64>,
}

impl Limits {
    /// From a request of `cpu` cores (fractions allowed) and `memory` bytes.
    pub fn new(cpu: f64, memory: u64) -> Limits {
        let cpu_quota_us = (cpu.is_finite() && cpu > 0.0).then(|| {
            let quota = (cpu * CPU_PERIOD_US as f64).ceil();
            // Past u64 the request is absurd anyway; saturate rather than wrap.
            if quota >= u64::MAX as f64 { u64::MAX } else { (quota as u64).max(MIN_CPU_QUOTA_US) }
        });
        Limits { cpu_quota_us, memory: (memory > 0).then_some(memory) }
    }

    /// The files of a v2 cgroup to write, in order. Nothing for an unlimited resource (a new
    /// cgroup starts unlimited). Swap is capped at 0 with a memory limit, so the limit is what
    /// the task gets, not the limit plus the swap (the file is absent without swap; skipped then).
    pub fn v2_files(&self) -> Vec<(&'static str, String)> {
        let mut v = Vec::new();
        if let Some(q) = self.cpu_quota_us {
            v.push(("cpu.max", format!("{q} {CPU_PERIOD_US}")));
        }
        if let Some(m) = self.memory {
            v.push(("memory.max", m.to_string()));
            v.push(("memory.swap.max", "0".to_string()));
        }
        v
    }

    /// The files of v1 cgroups to write, in order, as (controller, file, value). The period goes
    /// before the quota; `memory.memsw.limit_in_bytes` (memory + swap, present only with swap
    /// accounting) after the memory limit, since it may never be below it.
    pub fn v1_files(&self) -> Vec<(&'static str, &'static str, String)> {
        let mut v = Vec::new();
        if let Some(q) = self.cpu_quota_us {
            v.push(("cpu", "cpu.cfs_period_us", CPU_PERIOD_US.to_string()));
            v.push(("cpu", "cpu.cfs_quota_us", q.to_string()));
        }
        if let Some(m) = self.memory {
            v.push(("memory", "memory.limit_in_bytes", m.to_string()));
            v.push(("memory", "memory.memsw.limit_in_bytes", m.to_string()));
        }
        v
    }
}

/// Files that may be missing without that being an error (swap accounting is optional).
fn optional_file(name: &str) -> bool {
    matches!(name, "memory.swap.max" | "memory.memsw.limit_in_bytes")
}

/// The `oom_kill N` count of a v2 `memory.events` or a v1 `memory.oom_control` (kernels since
/// 4.13), or `None` when the text has no such line.
pub fn oom_kills(text: &str) -> Option<u64> {
    text.lines().find_map(|l| {
        let mut it = l.split_whitespace();
        (it.next() == Some("oom_kill")).then(|| it.next()?.parse().ok()).flatten()
    })
}

/// Whether a v1 memory cgroup saw an OOM kill: its `oom_kill` count when the kernel keeps one;
/// on older kernels, that it is under OOM now or ever failed to charge at its limit
/// (`memory.failcnt`), which is as close as they say.
pub fn v1_oom(oom_control: &str, failcnt: Option<u64>) -> bool {
    match oom_kills(oom_control) {
        Some(n) => n > 0,
        None => {
            let under = oom_control.lines().any(|l| l.split_whitespace().collect::<Vec<_>>() == ["under_oom", "1"]);
            under || failcnt.is_some_and(|n| n > 0)
        }
    }
}

/// A pid record of an attempt run as a bare process group.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PidRecord {
    /// The group id, which is the leader's pid.
    pub pgid: i32,
    /// The leader's start time (clock ticks after boot, field 22 of `/proc/<pid>/stat`).
    pub start: u64,
}

impl PidRecord {
    pub fn to_text(self) -> String {
        format!("{} {}\n", self.pgid, self.start)
    }

    pub fn parse(text: &str) -> Option<PidRecord> {
        let mut it = text.split_whitespace();
        let pgid = it.next()?.parse().ok()?;
        let start = it.next()?.parse().ok()?;
        (pgid > 1 && it.next().is_none()).then_some(PidRecord { pgid, start })
    }
}

/// Whether process group `r.pgid` is still the recorded attempt's, given the start time of the
/// process whose pid is `r.pgid` now (`None`: there is none). Linux never hands out a pid that is
/// still some group's id, so: the leader itself alive (same start time) — ours; no process with
/// that pid — any process still in the group is the attempt's (the pid stays reserved while the
/// group lives); a process with that pid but another start time — the group died and the pid
/// was reused, so nothing in that group is ours.
pub fn group_is_ours(r: PidRecord, leader_start_now: Option<u64>) -> bool {
    match leader_start_now {
        None => true,
        Some(t) => t == r.start,
    }
}

/// The start time (field 22) from the text of `/proc/<pid>/stat`. The command name (field 2) may
/// hold spaces and parentheses, so fields are counted after its last `)`.
pub fn stat_start_time(stat: &str) -> Option<u64> {
    let (_, rest) = stat.rsplit_once(')')?;
    rest.split_whitespace().nth(19)?.parse().ok()
}

/// The pids listed in a `cgroup.procs` (or `tasks`) file. Never 0, 1 or this process: those are
/// not ours to kill, whatever a file says.
pub fn parse_procs(text: &str) -> Vec<i32> {
    let me = std::process::id() as i32;
    text.lines().filter_map(|l| l.trim().parse::<i32>().ok()).filter(|&p| p > 1 && p != me).collect()
}

// ---------------------------------------------------------------------------------------------
// The mechanism
// ---------------------------------------------------------------------------------------------

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
        let unavailable = |mode: Mode, reason: String| Error::Isolation { mode: mode.as_str(), reason };
        let mut reasons = Vec::new();
        // v2 first, then v1: the first that can be set up (or only the one asked for).
        type Setup = fn(&Mounts, &str) -> std::result::Result<Backend, String>;
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
                Err(reason) if choice == Choice::Auto => reasons.push(format!("{label}: {reason}")),
                Err(reason) => return Err(unavailable(mode, reason)),
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
                let c =
                    Confinement { kind: Kind::V2 { dir: dir.clone() }, memory_limit: limits.memory, released: false };
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
                let c = Confinement { kind: Kind::V1 { dirs }, memory_limit: limits.memory, released: false };
                if let Kind::V1 { dirs } = &c.kind {
                    for (controller, file, value) in limits.v1_files() {
                        if let Some((_, dir)) = dirs.iter().find(|(c, _)| *c == controller) {
                            write_limit(dir, file, &value)?;
                        }
                    }
                }
                Ok(c)
            }
            Backend::ProcessGroup => Ok(Confinement {
                kind: Kind::ProcessGroup { record: self.records.join(name), pgid: None },
                memory_limit: None,
                released: false,
            }),
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

fn setup_v2(mounts: &Mounts, worker: &str) -> std::result::Result<Backend, String> {
    let Some(mount) = &mounts.unified else { return Err("no cgroup2 file system is mounted".into()) };
    let root_ctl = std::fs::read_to_string(mount.join("cgroup.subtree_control"))
        .map_err(|e| format!("{}: {e}", mount.display()))?;
    if !lists_controller(&root_ctl, "memory") {
        return Err(format!(
            "{} does not delegate the memory controller (cgroup.subtree_control: {:?})",
            mount.display(),
            root_ctl.trim()
        ));
    }
    let shared = mount.join(PARENT);
    let parent = shared.join(worker);
    std::fs::create_dir_all(&parent).map_err(|e| format!("cannot create {}: {e}", parent.display()))?;
    // Our own cgroups hand the controllers on: a cgroup's children can use only what its
    // subtree_control enables. Neither holds a process, so the kernel allows it.
    let mut cpu = lists_controller(&root_ctl, "cpu");
    for dir in [&shared, &parent] {
        let ctl = dir.join("cgroup.subtree_control");
        std::fs::write(&ctl, "+memory").map_err(|e| format!("cannot enable memory in {}: {e}", ctl.display()))?;
        cpu = cpu && std::fs::write(&ctl, "+cpu").is_ok();
        if lists_controller(&root_ctl, "pids") {
            let _ = std::fs::write(&ctl, "+pids");
        }
    }
    Ok(Backend::V2 { parent, cpu })
}

fn setup_v1(mounts: &Mounts, worker: &str) -> std::result::Result<Backend, String> {
    if mounts.v1.is_empty() {
        return Err("none of the freezer, memory, cpu and pids hierarchies is mounted".into());
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
        return Err(errors.join("; "));
    }
    Ok(Backend::V1 { parents })
}

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

    /// The memory limit, when there is one this mode enforces.
    pub fn memory_limit(&self) -> Option<u64> {
        match self.kind {
            Kind::ProcessGroup { .. } => None,
            _ => self.memory_limit,
        }
    }

    /// Kills every process in the confinement and waits (at most [`KILL_WAIT`]) until they are
    /// gone. Blocking, for a few milliseconds: call it off the async threads.
    pub fn kill(&self) {
        match &self.kind {
            Kind::V2 { dir } => {
                kill_v2(dir);
            }
            Kind::V1 { dirs } => {
                let freezer = dirs.iter().find(|(c, _)| *c == "freezer").map(|(_, d)| d.as_path());
                let others: Vec<PathBuf> =
                    dirs.iter().filter(|(c, _)| *c != "freezer").map(|(_, d)| d.clone()).collect();
                kill_v1(freezer, &others);
            }
            Kind::ProcessGroup { pgid, .. } => {
                if let Some(pgid) = pgid {
                    kill_group(*pgid);
                }
            }
        }
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

/// Joins the cgroups whose `cgroup.procs` files are given: writes `0` (this process) to each.
/// Runs in the forked child before `exec`, so it only makes system calls (no allocation, no
/// locks): `open`, `write`, `close`.
pub fn join_cgroups(files: &[CString]) -> std::io::Result<()> {
    for f in files {
        // SAFETY: `f` is a valid NUL-terminated path; the buffer is one valid byte.
        unsafe {
            let fd = libc::open(f.as_ptr(), libc::O_WRONLY | libc::O_CLOEXEC);
            if fd < 0 {
                return Err(std::io::Error::last_os_error());
            }
            let n = libc::write(fd, b"0".as_ptr().cast(), 1);
            let err = (n != 1).then(std::io::Error::last_os_error);
            libc::close(fd);
            if let Some(e) = err {
                return Err(e);
            }
        }
    }
    Ok(())
}

/// Creates an attempt's cgroup; one left by an earlier process under the same name is emptied
/// and removed first.
fn fresh_dir(dir: &Path) -> Result<()> {
    if dir.exists() {
        warn!(cgroup = %dir.display(), "a cgroup of this attempt exists already; killing what is in it");
        kill_v1(None, &[dir.to_path_buf()]);
        remove_tree(dir);
    }
    std::fs::create_dir(dir).map_err(Error::io("create the cgroup", dir))
}

fn write_limit(dir: &Path, file: &str, value: &str) -> Result<()> {
    let path = dir.join(file);
    match std::fs::write(&path, value) {
        Ok(()) => Ok(()),
        Err(e) if optional_file(file) && e.kind() == std::io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(Error::Io { action: "set the limit", path, source: e }),
    }
}

/// `dir` and every cgroup below it, parents before children (an explicit stack: a task could
/// nest cgroups deeply).
fn tree(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        if let Ok(rd) = std::fs::read_dir(&d) {
            for e in rd.flatten() {
                if e.file_type().is_ok_and(|t| t.is_dir()) {
                    stack.push(e.path());
                }
            }
        }
        out.push(d);
    }
    out
}

/// Every pid in `dir`'s tree.
fn procs_in(dirs: &[PathBuf]) -> Vec<i32> {
    let mut pids = Vec::new();
    for d in dirs {
        if let Ok(t) = std::fs::read_to_string(d.join("cgroup.procs")) {
            pids.extend(parse_procs(&t));
        }
    }
    pids.sort_unstable();
    pids.dedup();
    pids
}

fn sigkill(pid: i32) -> bool {
    // SAFETY: kill(2) has no memory-safety preconditions; `pid` > 1 (parse_procs).
    unsafe { libc::kill(pid, libc::SIGKILL) == 0 }
}

/// Kills a v2 cgroup's tree: `cgroup.kill` where the kernel has it (5.14), else freeze, kill
/// every pid, thaw; until it is empty. Returns how many processes were killed.
fn kill_v2(dir: &Path) -> usize {
    let deadline = Instant::now() + KILL_WAIT;
    let mut signalled = std::collections::BTreeSet::new();
    let mut pause = Duration::from_millis(1);
    loop {
        let dirs = tree(dir);
        let pids = procs_in(&dirs);
        if pids.is_empty() {
            return signalled.len();
        }
        if std::fs::write(dir.join("cgroup.kill"), "1").is_ok() {
            signalled.extend(pids.iter().copied());
        } else {
            let frozen = std::fs::write(dir.join("cgroup.freeze"), "1").is_ok();
            // A v2 frozen process still dies of SIGKILL; freezing keeps it from forking meanwhile.
            signalled.extend(pids.iter().copied().filter(|&p| sigkill(p)));
            if frozen {
                let _ = std::fs::write(dir.join("cgroup.freeze"), "0");
            }
        }
        if Instant::now() >= deadline {
            warn!(cgroup = %dir.display(), left = pids.len(), "processes survived SIGKILL; leaving the cgroup for the next start");
            return signalled.len();
        }
        std::thread::sleep(pause);
        pause = (pause * 2).min(Duration::from_millis(50));
    }
}

/// Kills a v1 attempt's processes: through the freezer cgroup when there is one (freeze, SIGKILL
/// every pid, thaw: a frozen process cannot fork, and dies when thawed), then whatever the other
/// hierarchies still list; until all are empty. Returns how many processes were killed.
fn kill_v1(freezer: Option<&Path>, others: &[PathBuf]) -> usize {
    let deadline = Instant::now() + KILL_WAIT;
    let mut signalled = std::collections::BTreeSet::new();
    let mut pause = Duration::from_millis(1);
    loop {
        let mut all = Vec::new();
        if let Some(f) = freezer {
            let dirs = tree(f);
            let pids = procs_in(&dirs);
            if !pids.is_empty() {
                let state = f.join("freezer.state");
                let frozen = std::fs::write(&state, "FROZEN").is_ok();
                if frozen {
                    let until = Instant::now() + FREEZE_WAIT;
                    while Instant::now() < until
                        && std::fs::read_to_string(&state).map(|s| s.trim() != "FROZEN").unwrap_or(false)
                    {
                        std::thread::sleep(Duration::from_millis(1));
                    }
                }
                // Listed again once frozen: nothing can have forked since.
                let pids = procs_in(&dirs);
                signalled.extend(pids.iter().copied().filter(|&p| sigkill(p)));
                if frozen {
                    let _ = std::fs::write(&state, "THAWED");
                }
                all.extend(pids);
            }
        }
        for d in others {
            let pids = procs_in(&tree(d));
            signalled.extend(pids.iter().copied().filter(|&p| sigkill(p)));
            all.extend(pids);
        }
        if all.is_empty() {
            return signalled.len();
        }
        if Instant::now() >= deadline {
            warn!(left = all.len(), "processes survived SIGKILL; leaving their cgroups for the next start");
            return signalled.len();
        }
        std::thread::sleep(pause);
        pause = (pause * 2).min(Duration::from_millis(50));
    }
}

/// Removes a cgroup tree, children first (a cgroup directory is removed with rmdir, never by
/// deleting its files). A cgroup whose processes are still exiting is busy for a moment: retried
/// briefly.
fn remove_tree(dir: &Path) {
    for d in tree(dir).into_iter().rev() {
        let mut tries = 0;
        loop {
            match std::fs::remove_dir(&d) {
                Ok(()) => break,
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => break,
                Err(e) if tries < 50 => {
                    debug!(cgroup = %d.display(), error = %e, "cgroup busy; retrying");
                    tries += 1;
                    std::thread::sleep(Duration::from_millis(10));
                }
                Err(e) => {
                    warn!(cgroup = %d.display(), error = %e, "could not remove a cgroup");
                    break;
                }
            }
        }
    }
}

/// SIGKILLs a process group; a group that is already gone is fine. True if it was signalled.
pub fn kill_group(pgid: i32) -> bool {
    if pgid <= 1 {
        // killpg(0 or 1) would hit our own group or be meaningless; never do that.
        return false;
    }
    // SAFETY: killpg has no memory-safety preconditions.
    let rc = unsafe { libc::killpg(pgid, libc::SIGKILL) };
    if rc != 0 {
        let e = std::io::Error::last_os_error();
        if e.raw_os_error() != Some(libc::ESRCH) {
            warn!(pgid, error = %e, "could not kill a process group");
        }
        return false;
    }
    true
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    /// This machine's kind of mountinfo: cgroup v1 controllers each on its own hierarchy, plus an
    /// empty cgroup2 mount (the "hybrid" layout).
    const HYBRID: &str = "\
31 23 0:28 / /sys/fs/cgroup rw,relatime - tmpfs tmpfs rw,mode=755
32 31 0:29 / /sys/fs/cgroup/cpu rw,relatime - cgroup cgroup rw,cpu
33 31 0:30 / /sys/fs/cgroup/cpuacct rw,relatime - cgroup cgroup rw,cpuacct
35 31 0:32 / /sys/fs/cgroup/memory rw,relatime - cgroup cgroup rw,memory
37 31 0:34 / /sys/fs/cgroup/freezer rw,relatime - cgroup cgroup rw,freezer
39 31 0:36 / /sys/fs/cgroup/pids rw,relatime - cgroup cgroup rw,pids
40 31 0:37 / /sys/fs/cgroup/systemd rw,relatime - cgroup cgroup rw,name=systemd
41 31 0:38 / /sys/fs/cgroup/unified rw,relatime - cgroup2 cgroup2 rw
";

    /// A systemd host on the unified hierarchy alone.
    const UNIFIED: &str = "\
22 1 0:21 / /sys rw,nosuid,nodev,noexec,relatime shared:7 - sysfs sysfs rw
26 22 0:23 / /sys/fs/cgroup rw,nosuid,nodev,noexec,relatime shared:9 - cgroup2 cgroup2 rw,nsdelegate,memory_recursiveprot
";

    /// Debian's old layout: cpu and cpuacct on one hierarchy, a mount point with a space.
    const COMBINED: &str = "\
25 18 0:22 / /sys/fs/cgroup/cpu,cpuacct rw,nosuid - cgroup cgroup rw,cpu,cpuacct
26 18 0:23 / /sys/fs/cgroup/my\\040memory rw,nosuid shared:8 master:2 - cgroup cgroup rw,memory
garbage
27 18 0:24 / /proc rw - proc proc rw
";

    #[test]
    fn mountinfo_shows_which_hierarchies_exist() {
        let m = parse_mountinfo(HYBRID);
        assert_eq!(m.unified, Some(PathBuf::from("/sys/fs/cgroup/unified")));
        let v1: Vec<(&str, &str)> = m.v1.iter().map(|(c, p)| (c.as_str(), p.to_str().unwrap())).collect();
        assert_eq!(
            v1,
            [
                ("cpu", "/sys/fs/cgroup/cpu"),
                ("freezer", "/sys/fs/cgroup/freezer"),
                ("memory", "/sys/fs/cgroup/memory"),
                ("pids", "/sys/fs/cgroup/pids")
            ]
        );

        let m = parse_mountinfo(UNIFIED);
        assert_eq!((m.unified, m.v1.len()), (Some(PathBuf::from("/sys/fs/cgroup")), 0));

        let m = parse_mountinfo(COMBINED);
        assert_eq!(m.unified, None);
        assert_eq!(m.v1["cpu"], PathBuf::from("/sys/fs/cgroup/cpu,cpuacct"));
        assert_eq!(m.v1["memory"], PathBuf::from("/sys/fs/cgroup/my memory"), "octal escapes are decoded");
        assert!(!m.v1.contains_key("cpuacct") && !m.v1.contains_key("freezer"));

        assert_eq!(parse_mountinfo(""), Mounts::default());
    }

    #[test]
    fn controller_lists_are_matched_by_word() {
        assert!(lists_controller("cpuset cpu io memory pids\n", "memory"));
        assert!(lists_controller("cpuset cpu io memory pids\n", "cpu"));
        assert!(!lists_controller("cpuset io\n", "cpu"), "cpuset is not cpu");
        assert!(!lists_controller("", "memory"));
    }

    #[test]
    fn requests_become_limits() {
        assert_eq!(Limits::new(0.0, 0), Limits { cpu_quota_us: None, memory: None }, "0 is no limit");
        assert_eq!(Limits::new(1.0, 64 << 20), Limits { cpu_quota_us: Some(100_000), memory: Some(64 << 20) });
        assert_eq!(Limits::new(0.5, 0).cpu_quota_us, Some(50_000));
        assert_eq!(Limits::new(2.5, 0).cpu_quota_us, Some(250_000));
        assert_eq!(Limits::new(0.333333, 0).cpu_quota_us, Some(33_334), "rounded up, never below the request");
        assert_eq!(Limits::new(0.001, 0).cpu_quota_us, Some(1_000), "the kernel's minimum quota");
        assert_eq!(Limits::new(f64::NAN, 0).cpu_quota_us, None);
        assert_eq!(Limits::new(-1.0, 0).cpu_quota_us, None);

        let l = Limits::new(1.5, 64 << 20);
        assert_eq!(
            l.v2_files(),
            [
                ("cpu.max", "150000 100000".to_string()),
                ("memory.max", "67108864".to_string()),
                ("memory.swap.max", "0".to_string())
            ]
        );
        assert_eq!(
            l.v1_files(),
            [
                ("cpu", "cpu.cfs_period_us", "100000".to_string()),
                ("cpu", "cpu.cfs_quota_us", "150000".to_string()),
                ("memory", "memory.limit_in_bytes", "67108864".to_string()),
                ("memory", "memory.memsw.limit_in_bytes", "67108864".to_string()),
            ]
        );
        assert!(Limits::new(0.0, 0).v2_files().is_empty() && Limits::new(0.0, 0).v1_files().is_empty());
        assert!(
            optional_file("memory.swap.max")
                && optional_file("memory.memsw.limit_in_bytes")
                && !optional_file("memory.max")
        );
    }

    #[test]
    fn oom_kills_are_read_from_either_version() {
        let v2 = "low 0\nhigh 0\nmax 12\noom 1\noom_kill 1\noom_group_kill 0\n";
        assert_eq!(oom_kills(v2), Some(1));
        assert_eq!(
            oom_kills("low 0\nhigh 0\nmax 0\noom 0\noom_kill 0\noom_group_kill 3\n"),
            Some(0),
            "group kills are another line"
        );
        let v1 = "oom_kill_disable 0\nunder_oom 0\noom_kill 2\n";
        assert_eq!(oom_kills(v1), Some(2));
        assert!(v1_oom(v1, Some(0)));
        assert!(
            !v1_oom("oom_kill_disable 0\nunder_oom 0\noom_kill 0\n", Some(5)),
            "failcnt alone is only reclaim when the kernel counts kills"
        );
        // Kernels before 4.13 have no oom_kill line.
        let old = "oom_kill_disable 0\nunder_oom 0\n";
        assert_eq!(oom_kills(old), None);
        assert!(!v1_oom(old, Some(0)));
        assert!(v1_oom(old, Some(3)));
        assert!(v1_oom("oom_kill_disable 0\nunder_oom 1\n", None));
        assert!(!v1_oom("", None));
    }

    #[test]
    fn pid_records_round_trip_and_reused_pids_are_spared() {
        let r = PidRecord { pgid: 4242, start: 987_654 };
        assert_eq!(PidRecord::parse(&r.to_text()), Some(r));
        assert_eq!(PidRecord::parse("1 5"), None, "never init");
        assert_eq!(PidRecord::parse("x 5"), None);
        assert_eq!(PidRecord::parse("42"), None);
        assert_eq!(PidRecord::parse("42 5 6"), None);
        assert!(group_is_ours(r, Some(987_654)), "the leader itself");
        assert!(group_is_ours(r, None), "the leader is gone; its group id is still reserved");
        assert!(!group_is_ours(r, Some(1_000_000)), "the pid now belongs to another process");
    }

    #[test]
    fn start_times_come_from_after_the_command_name() {
        let stat = "4242 (my (odd) cmd) S 1 4242 4242 0 -1 4194560 100 0 0 0 1 2 0 0 20 0 1 0 987654 1234 56 18446744073709551615";
        assert_eq!(stat_start_time(stat), Some(987_654));
        assert_eq!(stat_start_time("4242 (x) S 1"), None);
        let me = std::fs::read_to_string("/proc/self/stat").unwrap();
        assert!(stat_start_time(&me).is_some_and(|t| t > 0));
    }

    #[test]
    fn proc_lists_never_name_init_or_ourselves() {
        let me = std::process::id();
        assert_eq!(parse_procs(&format!("0\n1\n{me}\n17\n\nx\n18\n")), [17, 18]);
    }

    #[test]
    fn choices_parse_by_name() {
        assert_eq!("auto".parse::<Choice>(), Ok(Choice::Auto));
        assert_eq!("cgroup-v1".parse::<Choice>(), Ok(Choice::Only(Mode::CgroupV1)));
        assert_eq!("process-group".parse::<Choice>(), Ok(Choice::Only(Mode::ProcessGroup)));
        assert!("docker".parse::<Choice>().unwrap_err().contains("unknown isolation \"docker\""));
        assert_eq!(Mode::CgroupV2.to_string(), "cgroup-v2");
    }

    #[test]
    fn without_cgroups_it_falls_back_to_process_groups_and_says_why() {
        let dir = tempfile::tempdir().unwrap();
        let none = Mounts::default();
        let iso = Isolation::setup_with(Choice::Auto, "wkr-test", dir.path().join("procs"), &none).unwrap();
        assert_eq!(iso.mode(), Mode::ProcessGroup);
        let why = iso.fallback_reason().unwrap();
        assert!(
            why.contains("cgroup v2: no cgroup2 file system is mounted") && why.contains("cgroup v1: none of"),
            "{why}"
        );
        let e = Isolation::setup_with(Choice::Only(Mode::CgroupV1), "wkr-test", dir.path().join("procs"), &none)
            .unwrap_err();
        assert!(e.to_string().starts_with("cannot use cgroup-v1 isolation: none of"), "{e}");
        let forced =
            Isolation::setup_with(Choice::Only(Mode::ProcessGroup), "wkr-test", dir.path().join("procs"), &none)
                .unwrap();
        assert_eq!((forced.mode(), forced.fallback_reason()), (Mode::ProcessGroup, None));
    }

    /// A hierarchy that is a plain directory (not a cgroup file system) is not writable as one:
    /// a v2 "mount" without subtree_control is refused, with the path in the reason.
    #[test]
    fn an_unusable_unified_hierarchy_is_named() {
        let dir = tempfile::tempdir().unwrap();
        let mounts = Mounts { unified: Some(dir.path().join("nope")), v1: BTreeMap::new() };
        let e = Isolation::setup_with(Choice::Only(Mode::CgroupV2), "wkr-test", dir.path().join("procs"), &mounts)
            .unwrap_err();
        assert!(e.to_string().contains(&dir.path().join("nope").display().to_string()), "{e}");
    }

    /// Real cgroups for worker `name`, or `None` after saying on stderr that `test` is skipped
    /// because none can be made here.
    pub(crate) fn cgroups_or_skip(test: &str, name: &str, records: PathBuf) -> Option<Closing> {
        let iso = Isolation::setup(Choice::Auto, name, records).unwrap();
        if iso.mode() == Mode::ProcessGroup {
            use std::io::Write as _;
            let why = iso.fallback_reason().unwrap_or("no cgroup").to_string();
            let _ = writeln!(std::io::stderr(), "SKIPPED {test}: no cgroup can be made here ({why})");
            return None;
        }
        Some(Closing(iso))
    }

    /// For tests that got their isolation elsewhere: `None` (and the test is reported skipped)
    /// when it is not a cgroup one, else a guard that removes its cgroups when the test ends.
    pub(crate) fn guard<'a>(test: &str, iso: &'a Isolation) -> Option<CloseOnDrop<'a>> {
        if iso.mode() == Mode::ProcessGroup {
            use std::io::Write as _;
            let why = iso.fallback_reason().unwrap_or("no cgroup").to_string();
            let _ = writeln!(std::io::stderr(), "SKIPPED {test}: no cgroup can be made here ({why})");
            return None;
        }
        Some(CloseOnDrop(iso))
    }

    pub(crate) struct CloseOnDrop<'a>(&'a Isolation);

    impl Drop for CloseOnDrop<'_> {
        fn drop(&mut self) {
            self.0.reap_leftovers();
            self.0.close();
        }
    }

    /// A test's cgroups, killed and removed when the test ends, failed or not.
    pub(crate) struct Closing(pub Isolation);

    impl std::ops::Deref for Closing {
        type Target = Isolation;
        fn deref(&self) -> &Isolation {
            &self.0
        }
    }

    impl Drop for Closing {
        fn drop(&mut self) {
            self.0.reap_leftovers();
            self.0.close();
        }
    }

    /// Where `file` of the attempt cgroup `name` is for `controller` (v1) or in the one v2 cgroup.
    fn cgroup_file(iso: &Isolation, controller: &str, name: &str, file: &str) -> Option<PathBuf> {
        match &iso.backend {
            Backend::V2 { parent, .. } => Some(parent.join(name).join(file)),
            Backend::V1 { parents } => {
                parents.iter().find(|(c, _)| *c == controller).map(|(_, p)| p.join(name).join(file))
            }
            Backend::ProcessGroup => None,
        }
    }

    #[test]
    fn cgroups_get_the_limits_and_are_removed() {
        let dir = tempfile::tempdir().unwrap();
        let name = format!("test-{}", uuid::Uuid::new_v4());
        let Some(iso) = cgroups_or_skip("cgroups_get_the_limits_and_are_removed", &name, dir.path().join("procs"))
        else {
            return;
        };
        let c = iso.confine("job-x.t.0.1", &Limits::new(0.5, 64 << 20)).unwrap();
        assert_eq!(c.memory_limit(), Some(64 << 20));
        assert!(!c.procs_files().is_empty());
        let read = |controller, v1: &str, v2: &str| {
            let file = if iso.mode() == Mode::CgroupV2 { v2 } else { v1 };
            std::fs::read_to_string(cgroup_file(&iso, controller, "job-x.t.0.1", file).unwrap())
                .unwrap()
                .trim()
                .to_string()
        };
        if iso.mode() == Mode::CgroupV2 {
            assert_eq!(read("memory", "", "memory.max"), "67108864");
            assert_eq!(read("cpu", "", "cpu.max"), "50000 100000");
        } else {
            assert_eq!(read("memory", "memory.limit_in_bytes", ""), "67108864");
            assert_eq!(read("cpu", "cpu.cfs_quota_us", ""), "50000");
            assert_eq!(read("cpu", "cpu.cfs_period_us", ""), "100000");
        }
        assert!(!c.oom_killed());
        let unlimited = iso.confine("job-x.t.0.2", &Limits::new(0.0, 0)).unwrap();
        if iso.mode() == Mode::CgroupV1 {
            let q =
                std::fs::read_to_string(cgroup_file(&iso, "cpu", "job-x.t.0.2", "cpu.cfs_quota_us").unwrap()).unwrap();
            assert_eq!(q.trim(), "-1", "no cpu limit for a request of 0");
        }
        let dirs: Vec<PathBuf> = ["memory", "cpu", "freezer", "pids"]
            .iter()
            .filter_map(|c| cgroup_file(&iso, c, "job-x.t.0.1", ""))
            .collect();
        assert!(dirs.iter().all(|d| d.exists()));
        drop(c);
        drop(unlimited);
        assert!(dirs.iter().all(|d| !d.exists()), "dropping a confinement removes its cgroups");
        iso.close();
        assert!(iso.leftover_parents.iter().all(|(_, p)| !p.exists()), "close removes the worker's parents");
    }

    /// What a worker killed with `kill -9` leaves: a cgroup with a process in it (here one that
    /// started a daemon with setsid). The next start kills both and removes the cgroup.
    #[test]
    fn a_restart_kills_what_the_previous_process_left_in_its_cgroups() {
        use std::os::unix::process::CommandExt;
        let dir = tempfile::tempdir().unwrap();
        let name = format!("test-{}", uuid::Uuid::new_v4());
        let test = "a_restart_kills_what_the_previous_process_left_in_its_cgroups";
        let Some(iso) = cgroups_or_skip(test, &name, dir.path().join("procs")) else { return };
        let c = iso.confine("job-x.t.0.1", &Limits::default()).unwrap();
        let files = c.procs_files();
        let pid_file = dir.path().join("daemon");
        let script = format!("setsid sh -c 'echo $$ > {}; exec sleep 60' & exec sleep 60", pid_file.display());
        let mut cmd = std::process::Command::new("sh");
        cmd.args(["-c", &script]).process_group(0);
        // SAFETY: join_cgroups only makes system calls on memory prepared before the fork.
        unsafe { cmd.pre_exec(move || join_cgroups(&files)) };
        let mut child = cmd.spawn().unwrap();
        let daemon = wait_for_pid(&pid_file);
        std::mem::forget(c);
        std::mem::forget(iso);

        let again = Closing(Isolation::setup(Choice::Auto, &name, dir.path().join("procs")).unwrap());
        assert_eq!(again.reap_leftovers(), 2, "the command and its daemon");
        use std::os::unix::process::ExitStatusExt;
        assert_eq!(child.wait().unwrap().signal(), Some(libc::SIGKILL));
        assert!(process_gone(daemon), "the daemon {daemon} survived");
        let left = |p: &Path| {
            std::fs::read_dir(p)
                .map(|rd| rd.flatten().filter(|e| e.file_type().is_ok_and(|t| t.is_dir())).count())
                .unwrap_or(0)
        };
        assert!(again.leftover_parents.iter().all(|(_, p)| left(p) == 0), "the attempt's cgroups are removed");
    }

    pub(crate) fn wait_for_pid(file: &Path) -> i32 {
        for _ in 0..1000 {
            if let Some(pid) = std::fs::read_to_string(file).ok().and_then(|t| t.trim().parse().ok()) {
                return pid;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        panic!("no pid in {}", file.display());
    }

    /// Gone, or a zombie waiting for an init that does not reap (a dead process all the same).
    pub(crate) fn process_gone(pid: i32) -> bool {
        for _ in 0..500 {
            match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
                Err(_) => return true,
                Ok(stat) if stat.rsplit_once(')').is_some_and(|(_, rest)| rest.trim_start().starts_with('Z')) => {
                    return true;
                }
                Ok(_) => std::thread::sleep(Duration::from_millis(10)),
            }
        }
        false
    }

    /// Process-group leftovers: a record of a live group is killed at the next start; a record
    /// whose pid now belongs to another process is only removed.
    #[test]
    fn process_group_leftovers_are_killed_from_their_records() {
        use std::os::unix::process::{CommandExt, ExitStatusExt};
        let dir = tempfile::tempdir().unwrap();
        let records = dir.path().join("procs");
        let iso =
            Isolation::setup_with(Choice::Only(Mode::ProcessGroup), "wkr-test", records.clone(), &Mounts::default())
                .unwrap();
        let mut child = std::process::Command::new("sleep").arg("30").process_group(0).spawn().unwrap();
        let pid = child.id() as i32;
        let mut c = iso.confine("job-x.t.0.1", &Limits::new(1.0, 1 << 20)).unwrap();
        assert!(c.procs_files().is_empty() && c.memory_limit().is_none());
        c.started(pid);
        // The worker "dies": the record stays behind.
        std::mem::forget(c);
        let text = std::fs::read_to_string(records.join("job-x.t.0.1")).unwrap();
        assert_eq!(PidRecord::parse(&text).map(|r| r.pgid), Some(pid));
        // A stale record naming this test process's pid with a wrong start time.
        let me = std::process::id() as i32;
        std::fs::write(records.join("stale"), PidRecord { pgid: me, start: 1 }.to_text()).unwrap();

        let again =
            Isolation::setup_with(Choice::Only(Mode::ProcessGroup), "wkr-test", records.clone(), &Mounts::default())
                .unwrap();
        assert_eq!(again.reap_leftovers(), 1);
        let status = child.wait().unwrap();
        assert_eq!(status.signal(), Some(libc::SIGKILL));
        assert!(std::fs::read_dir(&records).unwrap().next().is_none(), "records are removed");
    }
}
