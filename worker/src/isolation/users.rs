//! Who a subtask runs as ([`TaskUsers`], `--task-user`, `--task-uids`).
//!
//! A worker that runs as root gives each job a uid of its own from a range (default
//! `200000-265535`, gid = uid, no supplementary groups), so a task cannot read the worker's data
//! dir, its key, its cache, or another job's work dirs, and cannot write the cache's files (they
//! belong to the worker and are read-only). The uid of a job is chosen from its id (the same job
//! gets the same uid on this worker while it has attempts here), probing onwards past uids that
//! another job running here holds, that another worker of this host holds (each held uid is
//! `flock`ed in [`UID_LOCKS`]), or that name an account of the system (`getpwuid`). The table of
//! who holds which uid lives in the worker; when a job's last attempt here ends, the uid is free
//! again.
//!
//! A worker that is not root cannot change users: its tasks run as its own user, which the
//! README's "Not protected" section spells out.
//!
//! The child takes its uid between `fork` and `exec`, after joining its cgroups (which needs
//! root): [`become_user`].

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use plexus_proto::JobId;
use tracing::{debug, warn};

use crate::error::{Error, Result};

/// `--task-user`: who subtasks run as.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum TaskUserChoice {
    /// A uid per job from `--task-uids` when the worker is root, else the worker's own user.
    #[default]
    Auto,
    /// The worker's own user (root included: no confinement by user).
    Worker,
    /// A uid per job from `--task-uids`; the worker must be root.
    Range,
}

impl std::str::FromStr for TaskUserChoice {
    type Err = String;
    fn from_str(s: &str) -> std::result::Result<TaskUserChoice, String> {
        match s {
            "auto" => Ok(TaskUserChoice::Auto),
            "worker" => Ok(TaskUserChoice::Worker),
            "range" => Ok(TaskUserChoice::Range),
            other => Err(format!("unknown task user {other:?} (expected auto, worker or range)")),
        }
    }
}

/// `--task-uids FIRST-LAST`: the uids jobs' tasks run as (inclusive).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct UidRange {
    pub first: u32,
    pub last: u32,
}

impl UidRange {
    /// The default range: 65,536 uids above those distributions give to accounts (and below
    /// the 524,288 systemd-nspawn starts its containers at).
    pub const DEFAULT: UidRange = UidRange { first: 200_000, last: 265_535 };

    /// How many uids the range holds.
    pub fn count(self) -> u64 {
        u64::from(self.last) - u64::from(self.first) + 1
    }

    /// Whether `uid` is in the range.
    pub fn contains(self, uid: u32) -> bool {
        (self.first..=self.last).contains(&uid)
    }
}

impl std::fmt::Display for UidRange {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}-{}", self.first, self.last)
    }
}

impl std::str::FromStr for UidRange {
    type Err = String;
    fn from_str(s: &str) -> std::result::Result<UidRange, String> {
        let shown: String = s.chars().take(40).collect();
        let Some((a, b)) = s.trim().split_once('-') else {
            return Err(format!("{shown:?} is not a uid range: expected FIRST-LAST, e.g. 200000-265535"));
        };
        let uid = |t: &str, which: &str| {
            let t = t.trim();
            t.parse::<u32>().map_err(|_| {
                let t: String = t.chars().take(20).collect();
                format!("{shown:?}: the {which} uid {t:?} is not a number")
            })
        };
        let (first, last) = (uid(a, "first")?, uid(b, "last")?);
        if first > last {
            return Err(format!("{shown:?}: the first uid {first} is above the last {last}"));
        }
        if first == 0 {
            return Err(format!("{shown:?}: the range holds uid 0, root; tasks must not run as root"));
        }
        if last == u32::MAX {
            return Err(format!("{shown:?}: uid {} is (uid_t)-1, which the kernel reads as \"no change\"", u32::MAX));
        }
        Ok(UidRange { first, last })
    }
}

/// Who this worker's subtasks run as, and which job holds which uid.
#[derive(Debug)]
pub struct TaskUsers {
    /// `None`: the worker's own user.
    range: Option<UidRange>,
    held: Mutex<Held>,
    /// Whether a uid is an account of the system (skipped); `getpwuid` unless a test says.
    named: fn(u32) -> bool,
    /// Where the workers of this host lock the uids they hold (`<dir>/<uid>`, `flock`), so
    /// that two workers on one host never give one uid to two jobs; `None`: this worker only.
    locks: Option<PathBuf>,
}

/// The host-wide directory of uid locks.
pub const UID_LOCKS: &str = "/run/plexus/task-uids";

#[derive(Debug, Default)]
struct Held {
    by_job: HashMap<JobId, Hold>,
    by_uid: HashMap<u32, JobId>,
}

/// A job's uid, how many of its attempts run here, and the host-wide lock on the uid.
#[derive(Debug)]
struct Hold {
    uid: u32,
    attempts: u32,
    _lock: Option<std::fs::File>,
}

impl TaskUsers {
    /// Tasks run as the worker's own user.
    pub fn worker() -> TaskUsers {
        TaskUsers { range: None, held: Mutex::default(), named: has_account, locks: None }
    }

    /// Tasks run as a uid per job from `range`.
    pub fn range(range: UidRange) -> TaskUsers {
        TaskUsers { range: Some(range), held: Mutex::default(), named: has_account, locks: None }
    }

    /// The same, locking each uid it hands out in `dir` (created, 0700), against the other
    /// workers of this host.
    pub fn with_locks(mut self, dir: &Path) -> Result<TaskUsers> {
        use std::os::unix::fs::PermissionsExt;
        if self.range.is_some() {
            std::fs::create_dir_all(dir).map_err(Error::io("create", dir))?;
            let private = std::fs::Permissions::from_mode(0o700);
            std::fs::set_permissions(dir, private).map_err(Error::io("set the mode of", dir))?;
            self.locks = Some(dir.to_path_buf());
        }
        Ok(self)
    }

    /// What `choice` means for a worker whose effective uid is `euid`.
    pub fn resolve(choice: TaskUserChoice, range: UidRange, euid: u32) -> Result<TaskUsers> {
        match (choice, euid) {
            (TaskUserChoice::Worker, _) | (TaskUserChoice::Auto, 1..) => Ok(TaskUsers::worker()),
            (TaskUserChoice::Range | TaskUserChoice::Auto, 0) => Ok(TaskUsers::range(range)),
            (TaskUserChoice::Range, _) => Err(Error::Config(format!(
                "--task-user range needs a worker running as root (this one runs as uid {euid}); \
                 use --task-user worker to run tasks as the worker's user"
            ))),
        }
    }

    /// The range tasks run in; `None` when they run as the worker's user.
    pub fn uid_range(&self) -> Option<UidRange> {
        self.range
    }

    /// How `plexus workers` and the start-up line say it.
    pub fn describe(&self) -> String {
        match self.range {
            Some(r) => format!("a uid per job from {r}"),
            None => "the worker's user".into(),
        }
    }

    /// The uid `job`'s task runs as, held until the returned guard (and every other of the same
    /// job) is dropped; `None` inside when tasks run as the worker's user. Fails when every uid
    /// of the range is held by another job running here.
    pub fn acquire(self: &Arc<TaskUsers>, job: JobId) -> Result<TaskUser> {
        let Some(range) = self.range else { return Ok(TaskUser { users: Arc::clone(self), job, uid: None }) };
        let mut held = self.held.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(h) = held.by_job.get_mut(&job) {
            h.attempts += 1;
            return Ok(TaskUser { users: Arc::clone(self), job, uid: Some(h.uid) });
        }
        let free = |uid: u32| {
            if held.by_uid.contains_key(&uid) || (self.named)(uid) {
                return None;
            }
            match &self.locks {
                None => Some((uid, None)),
                Some(dir) => lock_uid(dir, uid).map(|f| (uid, Some(f))),
            }
        };
        let Some((uid, lock)) = pick(range, preferred_offset(&job, range), free) else {
            return Err(Error::NoTaskUid { range: range.to_string(), jobs: held.by_job.len() });
        };
        held.by_job.insert(job, Hold { uid, attempts: 1, _lock: lock });
        held.by_uid.insert(uid, job);
        debug!(%job, uid, "task uid taken");
        Ok(TaskUser { users: Arc::clone(self), job, uid: Some(uid) })
    }

    fn release(&self, job: JobId) {
        let mut held = self.held.lock().unwrap_or_else(|p| p.into_inner());
        let Some(h) = held.by_job.get_mut(&job) else { return };
        h.attempts -= 1;
        if h.attempts > 0 {
            return;
        }
        if let Some(h) = held.by_job.remove(&job) {
            held.by_uid.remove(&h.uid);
            debug!(%job, uid = h.uid, "task uid released");
        }
    }

    /// The uids held now, by job (for tests).
    #[cfg(test)]
    fn held(&self) -> usize {
        self.held.lock().unwrap().by_job.len()
    }
}

/// A job's hold on its task uid for one attempt.
#[derive(Debug)]
pub struct TaskUser {
    users: Arc<TaskUsers>,
    job: JobId,
    uid: Option<u32>,
}

impl TaskUser {
    /// The uid (and gid, the same number) the task runs as; `None`: the worker's own.
    pub fn uid(&self) -> Option<u32> {
        self.uid
    }
}

impl Drop for TaskUser {
    fn drop(&mut self) {
        if self.uid.is_some() {
            self.users.release(self.job);
        }
    }
}

/// Where in the range a job's uid is looked for first: from the job id's last 8 bytes, so a job
/// gets the same uid on this worker each time it runs here (unless that uid is held).
fn preferred_offset(job: &JobId, range: UidRange) -> u64 {
    let b = job.as_bytes();
    let low = u64::from_be_bytes([b[8], b[9], b[10], b[11], b[12], b[13], b[14], b[15]]);
    low % range.count()
}

/// The first uid from `first + offset` onwards (wrapping round the range) that `free` takes.
fn pick<T>(range: UidRange, offset: u64, free: impl FnMut(u32) -> Option<T>) -> Option<T> {
    let len = range.count();
    (0..len).map(|i| (offset + i) % len).filter_map(|o| u32::try_from(u64::from(range.first) + o).ok()).find_map(free)
}

/// The lock of `uid` in `dir`, when no other worker of this host holds it.
fn lock_uid(dir: &Path, uid: u32) -> Option<std::fs::File> {
    let path = dir.join(uid.to_string());
    let file = std::fs::File::options().write(true).create(true).truncate(false).open(&path);
    match file {
        Ok(f) => f.try_lock().ok().map(|()| f),
        Err(e) => {
            warn!(path = %path.display(), error = %e, "cannot open a task uid's lock; skipping the uid");
            None
        }
    }
}

/// Whether `uid` names an account of this system (then a task must not run as it: it may own
/// files).
fn has_account(uid: u32) -> bool {
    let mut buf = vec![0u8; 4096];
    // SAFETY: an all-zero passwd is a valid value for getpwuid_r to fill.
    let mut pwd: libc::passwd = unsafe { std::mem::zeroed() };
    let mut result: *mut libc::passwd = std::ptr::null_mut();
    // SAFETY: every pointer is valid for the call, and `buf` for its length.
    let rc = unsafe { libc::getpwuid_r(uid, &mut pwd, buf.as_mut_ptr().cast(), buf.len(), &mut result) };
    rc == 0 && !result.is_null()
}

/// Takes `uid` (gid the same, no supplementary groups) and forbids gaining privileges again
/// (`PR_SET_NO_NEW_PRIVS`: a setuid program does not raise them). Runs in the forked child
/// before `exec`, after it joined its cgroups: system calls only.
pub fn become_user(uid: u32) -> std::io::Result<()> {
    // SAFETY: these calls take plain integers (and a null list of length 0).
    unsafe {
        if libc::setgroups(0, std::ptr::null()) != 0
            || libc::setgid(uid) != 0
            || libc::setuid(uid) != 0
            || libc::prctl(libc::PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0
        {
            return Err(std::io::Error::last_os_error());
        }
    }
    Ok(())
}

/// The first directory on the way to `dir` (itself included) that other users cannot search
/// (no `o+x`), with its mode: tasks under another uid could not reach their work dirs below it.
pub fn unsearchable_ancestor(dir: &Path) -> Option<(PathBuf, u32)> {
    use std::os::unix::fs::PermissionsExt;
    let dir = std::fs::canonicalize(dir).unwrap_or_else(|_| dir.to_path_buf());
    dir.ancestors().find_map(|d| {
        let mode = std::fs::metadata(d).ok()?.permissions().mode();
        (mode & 0o001 == 0).then(|| (d.to_path_buf(), mode & 0o7777))
    })
}

/// Whether every uid of `range` is mapped in this process's user namespace, from the text of
/// `/proc/self/uid_map` (`inside outside count` lines): a uid that is not cannot be taken
/// (`setuid` fails with EINVAL), as in a rootless container, which maps 65,536 uids or fewer.
pub fn range_is_mapped(range: UidRange, uid_map: &str) -> bool {
    let mut spans: Vec<(u64, u64)> = uid_map
        .lines()
        .filter_map(|l| {
            let mut f = l.split_whitespace().map(|w| w.parse::<u64>().ok());
            let (inside, _outside, count) = (f.next()??, f.next()??, f.next()??);
            Some((inside, inside + count))
        })
        .collect();
    spans.sort_unstable();
    // Walk the spans from the first uid on: the range is covered if they reach past its end.
    let mut next = u64::from(range.first);
    for (start, end) in spans {
        if start <= next && end > next {
            next = end;
        }
    }
    next > u64::from(range.last)
}

/// `chown` of `path` (not following a symlink) to `uid`:`uid`.
pub fn give_to(path: &Path, uid: u32) -> Result<()> {
    std::os::unix::fs::lchown(path, Some(uid), Some(uid)).map_err(Error::io("give to the task uid", path))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn job(low: u64) -> JobId {
        let mut b = [0u8; 16];
        b[8..].copy_from_slice(&low.to_be_bytes());
        JobId::from_bytes(b)
    }

    fn users(range: &str, named: fn(u32) -> bool) -> Arc<TaskUsers> {
        let mut u = TaskUsers::range(range.parse().unwrap());
        u.named = named;
        Arc::new(u)
    }

    #[test]
    fn uid_ranges_parse_and_bad_ones_are_named() {
        assert_eq!("200000-265535".parse::<UidRange>(), Ok(UidRange::DEFAULT));
        assert_eq!(" 7 - 7 ".parse::<UidRange>().map(UidRange::count), Ok(1));
        for (bad, says) in [
            ("200000", "\"200000\" is not a uid range: expected FIRST-LAST"),
            ("a-5", "the first uid \"a\" is not a number"),
            ("5-", "the last uid \"\" is not a number"),
            ("5--6", "the last uid \"-6\" is not a number"),
            ("9-8", "the first uid 9 is above the last 8"),
            ("0-100", "holds uid 0, root"),
            ("1-4294967295", "(uid_t)-1"),
            ("1-99999999999", "the last uid \"99999999999\" is not a number"),
        ] {
            let e = bad.parse::<UidRange>().unwrap_err();
            assert!(e.contains(says), "{bad}: {e}");
        }
        let long = format!("{}-1", "9".repeat(5000));
        assert!(long.parse::<UidRange>().unwrap_err().len() < 200, "a long input is not echoed whole");
    }

    #[test]
    fn a_range_must_be_mapped_in_the_user_namespace() {
        let r = UidRange::DEFAULT;
        assert!(range_is_mapped(r, "         0          0 4294967295\n"));
        assert!(!range_is_mapped(r, "0 100000 65536\n"), "a rootless container's map");
        assert!(range_is_mapped(UidRange { first: 10_000, last: 65_535 }, "0 100000 65536\n"));
        assert!(range_is_mapped(r, "0 0 210000\n210000 500000 100000\n"), "two adjoining spans");
        assert!(!range_is_mapped(r, "0 0 210000\n210001 500000 100000\n"), "a hole at 210000");
        assert!(!range_is_mapped(r, ""));
    }

    #[test]
    fn the_choice_follows_the_workers_user() {
        let r = UidRange::DEFAULT;
        assert_eq!(TaskUsers::resolve(TaskUserChoice::Auto, r, 0).unwrap().uid_range(), Some(r));
        assert_eq!(TaskUsers::resolve(TaskUserChoice::Auto, r, 1000).unwrap().uid_range(), None);
        assert_eq!(TaskUsers::resolve(TaskUserChoice::Worker, r, 0).unwrap().uid_range(), None);
        let e = TaskUsers::resolve(TaskUserChoice::Range, r, 1000).unwrap_err().to_string();
        assert!(e.contains("--task-user range needs a worker running as root") && e.contains("uid 1000"), "{e}");
        assert_eq!(
            "nobody".parse::<TaskUserChoice>().unwrap_err(),
            "unknown task user \"nobody\" (expected auto, worker or range)"
        );
    }

    #[test]
    fn a_job_keeps_its_uid_and_jobs_running_together_never_share_one() {
        let u = users("4000001000-4000001003", |_| false);
        // Jobs 1 and 5 prefer the same uid (…1001): the second probes on.
        let a1 = u.acquire(job(1)).unwrap();
        let b = u.acquire(job(5)).unwrap();
        assert_eq!((a1.uid(), b.uid()), (Some(4000001001), Some(4000001002)));
        // A second attempt of job 1 shares its uid; the uid stays held until both end.
        let a2 = u.acquire(job(1)).unwrap();
        assert_eq!(a2.uid(), Some(4000001001));
        drop(a1);
        let c = u.acquire(job(9)).unwrap();
        assert_eq!(c.uid(), Some(4000001003), "…1001 is still job 1's");
        drop(a2);
        assert_eq!(u.held(), 2);
        // Free again: job 1 gets its own uid back; a fourth job wraps round to …1000.
        assert_eq!(u.acquire(job(1)).unwrap().uid(), Some(4000001001));
        let d = u.acquire(job(3)).unwrap();
        assert_eq!(d.uid(), Some(4000001000));
        let e = u.acquire(job(2));
        drop((b, c, d));
        assert_eq!(e.unwrap().uid(), Some(4000001001));
    }

    #[test]
    fn two_workers_of_one_host_never_give_one_uid_to_two_jobs() {
        let dir = tempfile::tempdir().unwrap();
        let on_host = || {
            let mut u = TaskUsers::range("4000001000-4000001003".parse().unwrap()).with_locks(dir.path()).unwrap();
            u.named = |_| false;
            Arc::new(u)
        };
        let (w1, w2) = (on_host(), on_host());
        // Jobs 1 and 5 prefer the same uid; each on a worker of its own.
        let a = w1.acquire(job(1)).unwrap();
        let b = w2.acquire(job(5)).unwrap();
        assert_eq!((a.uid(), b.uid()), (Some(4000001001), Some(4000001002)));
        // The same job on both workers: each worker's own choice, never one the other holds.
        assert_eq!(w2.acquire(job(1)).unwrap().uid(), Some(4000001003));
        drop(a);
        assert_eq!(w2.acquire(job(1)).unwrap().uid(), Some(4000001001), "released by worker 1");
    }

    #[test]
    fn a_full_range_fails_the_attempt_and_accounts_are_skipped() {
        let u = users("4000001000-4000001001", |uid| uid == 4000001000);
        let a = u.acquire(job(0)).unwrap();
        assert_eq!(a.uid(), Some(4000001001), "…1000 is an account of the system");
        let e = u.acquire(job(1)).unwrap_err().to_string();
        assert!(e.contains("no free task uid in --task-uids 4000001000-4000001001") && e.contains("1 job"), "{e}");
        drop(a);
        assert_eq!(u.acquire(job(1)).unwrap().uid(), Some(4000001001));
        let w = Arc::new(TaskUsers::worker());
        assert_eq!(w.acquire(job(1)).unwrap().uid(), None);
    }
}
