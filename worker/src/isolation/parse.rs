//! The pure parts of the isolation: the mount table, limits as cgroup files, OOM counters, pid
//! records and `/proc` texts, each a function of its input, tested on sample texts.

use std::collections::BTreeMap;
use std::path::PathBuf;

/// The cfs period for cpu limits: the kernel's default, 100 ms. The quota is the request's share
/// of it, so a task asking for 0.5 cores runs at most 50 ms of every 100 ms.
pub const CPU_PERIOD_US: u64 = 100_000;
/// The kernel refuses quotas below 1 ms.
const MIN_CPU_QUOTA_US: u64 = 1_000;

/// The v1 controllers a subtask's cgroup joins, freezer first: it is the one killing goes through.
pub const V1_CONTROLLERS: [&str; 4] = ["freezer", "memory", "cpu", "pids"];

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
pub(super) fn optional_file(name: &str) -> bool {
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
