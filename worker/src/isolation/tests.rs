//! The isolation's tests: the pure parts on sample texts, the mechanism on this machine's cgroups
//! when it has writable ones (else those tests say they are skipped).

use std::collections::BTreeMap;
use std::path::Path;
use std::time::Duration;

use super::parse::optional_file;
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
    let stat =
        "4242 (my (odd) cmd) S 1 4242 4242 0 -1 4194560 100 0 0 0 1 2 0 0 20 0 1 0 987654 1234 56 18446744073709551615";
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
    assert_eq!("auto".parse::<Choice>().unwrap(), Choice::Auto);
    assert_eq!("cgroup-v1".parse::<Choice>().unwrap(), Choice::Only(Mode::CgroupV1));
    assert_eq!("process-group".parse::<Choice>().unwrap(), Choice::Only(Mode::ProcessGroup));
    assert!("docker".parse::<Choice>().unwrap_err().to_string().contains("unknown isolation \"docker\""));
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
    let e =
        Isolation::setup_with(Choice::Only(Mode::CgroupV1), "wkr-test", dir.path().join("procs"), &none).unwrap_err();
    assert!(e.to_string().starts_with("cannot use cgroup-v1 isolation: none of"), "{e}");
    let forced =
        Isolation::setup_with(Choice::Only(Mode::ProcessGroup), "wkr-test", dir.path().join("procs"), &none).unwrap();
    assert_eq!((forced.mode(), forced.fallback_reason()), (Mode::ProcessGroup, None));
}

/// A hierarchy that is a plain directory (not a cgroup file system) is not writable as one:
/// a v2 "mount" without subtree_control is refused, with the path in the reason.
#[test]
fn an_unusable_unified_hierarchy_is_named() {
    let dir = tempfile::tempdir().unwrap();
    let mounts = Mounts { unified: Some(dir.path().join("nope")), v1: BTreeMap::new() };
    let e =
        Isolation::setup_with(Choice::Only(Mode::CgroupV2), "wkr-test", dir.path().join("procs"), &mounts).unwrap_err();
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
        Backend::V1 { parents } => parents.iter().find(|(c, _)| *c == controller).map(|(_, p)| p.join(name).join(file)),
        Backend::ProcessGroup => None,
    }
}

#[test]
fn cgroups_get_the_limits_and_are_removed() {
    let dir = tempfile::tempdir().unwrap();
    let name = format!("test-{}", uuid::Uuid::new_v4());
    let Some(iso) = cgroups_or_skip("cgroups_get_the_limits_and_are_removed", &name, dir.path().join("procs")) else {
        return;
    };
    let c = iso.confine("job-x.t.0.1", &Limits::new(0.5, 64 << 20)).unwrap();
    assert_eq!(c.memory_limit(), Some(64 << 20));
    assert!(!c.procs_files().is_empty());
    let read = |controller, v1: &str, v2: &str| {
        let file = if iso.mode() == Mode::CgroupV2 { v2 } else { v1 };
        std::fs::read_to_string(cgroup_file(&iso, controller, "job-x.t.0.1", file).unwrap()).unwrap().trim().to_string()
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
        let q = std::fs::read_to_string(cgroup_file(&iso, "cpu", "job-x.t.0.2", "cpu.cfs_quota_us").unwrap()).unwrap();
        assert_eq!(q.trim(), "-1", "no cpu limit for a request of 0");
    }
    let dirs: Vec<PathBuf> =
        ["memory", "cpu", "freezer", "pids"].iter().filter_map(|c| cgroup_file(&iso, c, "job-x.t.0.1", "")).collect();
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
    let iso = Isolation::setup_with(Choice::Only(Mode::ProcessGroup), "wkr-test", records.clone(), &Mounts::default())
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

/// Starts a writer (a line every 10 ms into `file`) in its own process group, joining `procs`.
fn writer(file: &Path, procs: Vec<std::ffi::CString>) -> std::process::Child {
    use std::os::unix::process::CommandExt as _;
    let script = format!("while :; do echo x >> '{}'; sleep 0.01; done", file.display());
    let mut cmd = std::process::Command::new("sh");
    cmd.args(["-c", &script]).process_group(0);
    // SAFETY: join_cgroups only makes async-signal-safe system calls on memory prepared before.
    unsafe { cmd.pre_exec(move || join_cgroups(&procs)) };
    cmd.spawn().unwrap()
}

/// Freezes `target`, checks that the writer makes no progress, thaws it and checks that it
/// does again, then kills it (frozen once more: a kill reaches a frozen attempt).
fn freeze_stops_progress(target: &KillTarget, child: &mut std::process::Child, file: &Path) {
    use std::os::unix::process::ExitStatusExt as _;
    let len = || std::fs::metadata(file).map(|m| m.len()).unwrap_or(0);
    let grows = || {
        let before = len();
        (0..200).any(|_| {
            std::thread::sleep(Duration::from_millis(10));
            len() > before
        })
    };
    let pid = i32::try_from(child.id()).unwrap();
    assert!(grows(), "the writer runs");
    assert!(target.freeze(Some(pid), true));
    std::thread::sleep(Duration::from_millis(50));
    let frozen = len();
    std::thread::sleep(Duration::from_millis(300));
    assert_eq!(len(), frozen, "a frozen attempt makes no progress");
    assert!(target.freeze(Some(pid), false));
    assert!(grows(), "a thawed attempt goes on");
    assert!(target.freeze(Some(pid), true));
    target.kill(Some(pid));
    assert!(child.wait().unwrap().signal().is_some(), "killed while frozen");
}

#[test]
fn attempts_freeze_and_thaw_in_every_mode() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("progress");
    let mut child = writer(&file, Vec::new());
    freeze_stops_progress(&KillTarget::ProcessGroup, &mut child, &file);

    let name = format!("test-{}", uuid::Uuid::new_v4());
    let Some(iso) = cgroups_or_skip("attempts_freeze_and_thaw_in_every_mode", &name, dir.path().join("procs")) else {
        return;
    };
    let c = iso.confine("job-x.t.0.9", &Limits::new(0.0, 0)).unwrap();
    let procs = c.procs_files();
    let mut child = writer(&file, procs);
    freeze_stops_progress(&c.kill_target(), &mut child, &file);
    drop(c);
    iso.close();
}
