//! The mechanism on the file system: creating cgroups and writing their limits, killing every
//! process in a cgroup tree (v2 and v1), removing the trees, and killing a bare process group.
//! Blocking, for milliseconds: called off the async threads.

use std::ffi::CString;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use tracing::{debug, warn};

use crate::error::{Error, Result};

use super::parse::{optional_file, parse_procs};

/// How long killing a cgroup may wait for its processes to be gone. SIGKILL takes effect in
/// microseconds; a process stuck in uninterruptible sleep (a dead NFS server) can take longer,
/// and a worker must not hang on it: the cgroup is then left behind, with a warning, and removed
/// by the next start.
const KILL_WAIT: Duration = Duration::from_secs(5);
/// How long a v1 freeze may stay FREEZING before the pids are killed anyway (a task in
/// uninterruptible sleep cannot freeze; SIGKILL reaches it when it wakes).
const FREEZE_WAIT: Duration = Duration::from_millis(200);

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
pub(super) fn fresh_dir(dir: &Path) -> Result<()> {
    if dir.exists() {
        warn!(cgroup = %dir.display(), "a cgroup of this attempt exists already; killing what is in it");
        kill_v1(None, &[dir.to_path_buf()]);
        remove_tree(dir);
    }
    std::fs::create_dir(dir).map_err(Error::io("create the cgroup", dir))
}

pub(super) fn write_limit(dir: &Path, file: &str, value: &str) -> Result<()> {
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
pub(super) fn kill_v2(dir: &Path) -> usize {
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
pub(super) fn kill_v1(freezer: Option<&Path>, others: &[PathBuf]) -> usize {
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
pub(super) fn remove_tree(dir: &Path) {
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

/// Freezes (`on`) or thaws a v2 cgroup tree through `cgroup.freeze` (the kernel freezes the
/// descendants too), waiting briefly for `cgroup.events` to say it is frozen. True if written.
pub(super) fn freeze_v2(dir: &Path, on: bool) -> bool {
    if let Err(e) = std::fs::write(dir.join("cgroup.freeze"), if on { "1" } else { "0" }) {
        warn!(cgroup = %dir.display(), error = %e, on, "could not freeze or thaw a cgroup");
        return false;
    }
    let until = Instant::now() + FREEZE_WAIT;
    while on
        && Instant::now() < until
        && std::fs::read_to_string(dir.join("cgroup.events")).is_ok_and(|t| !t.lines().any(|l| l == "frozen 1"))
    {
        std::thread::sleep(Duration::from_millis(1));
    }
    true
}

/// Freezes (`on`) or thaws a v1 freezer cgroup (its children with it), waiting briefly for a
/// freeze to take hold (a task in uninterruptible sleep freezes when it wakes). True if written.
pub(super) fn freeze_v1(freezer: &Path, on: bool) -> bool {
    let state = freezer.join("freezer.state");
    if let Err(e) = std::fs::write(&state, if on { "FROZEN" } else { "THAWED" }) {
        warn!(cgroup = %freezer.display(), error = %e, on, "could not freeze or thaw a cgroup");
        return false;
    }
    let until = Instant::now() + FREEZE_WAIT;
    while on && Instant::now() < until && std::fs::read_to_string(&state).map(|s| s.trim() != "FROZEN").unwrap_or(false)
    {
        std::thread::sleep(Duration::from_millis(1));
    }
    true
}

/// Stops (`on`: SIGSTOP) or continues (SIGCONT) a process group. True if it was signalled.
pub fn stop_group(pgid: i32, on: bool) -> bool {
    if pgid <= 1 {
        return false;
    }
    // SAFETY: killpg has no memory-safety preconditions.
    unsafe { libc::killpg(pgid, if on { libc::SIGSTOP } else { libc::SIGCONT }) == 0 }
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
