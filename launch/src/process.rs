//! One child process owned: started with its output in a log file, signalled, reaped, and
//! stopped (SIGTERM, a grace period, then SIGKILL) — at the latest when it is dropped, so no
//! caller can leak a coordinator or a worker.

use std::ffi::OsString;
use std::fs::{File, OpenOptions};
use std::io::{BufRead, BufReader};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdout, Command, ExitStatus, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use crate::LaunchError;

/// How often a stopping child is polled: short next to any grace period, long enough not to spin.
const POLL: Duration = Duration::from_millis(20);

/// What to start and how.
#[derive(Clone, Debug)]
pub struct Spec {
    /// The name the process is reported under (`coordinator`, `worker-2`).
    pub name: String,
    pub program: PathBuf,
    pub args: Vec<OsString>,
    pub env: Vec<(OsString, OsString)>,
    /// Where stdout and stderr go, appended to (a restart adds to the same file).
    pub log: PathBuf,
    /// Pipe stdout through [`Proc::lines`] (still copied into the log) instead of into the log.
    pub watch_stdout: bool,
    /// Run in a process group of its own, so a terminal's Ctrl-C reaches only the launcher,
    /// which then stops its children in order.
    pub own_group: bool,
    /// On Linux, SIGTERM the child should the spawning thread die without stopping it (killed
    /// with SIGKILL, say). Only for a launcher whose spawning thread lives as long as it does.
    pub die_with_parent: bool,
}

impl Spec {
    pub fn new(name: impl Into<String>, program: impl Into<PathBuf>, log: impl Into<PathBuf>) -> Spec {
        Spec {
            name: name.into(),
            program: program.into(),
            args: Vec::new(),
            env: Vec::new(),
            log: log.into(),
            watch_stdout: false,
            own_group: false,
            die_with_parent: false,
        }
    }
}

/// A running (or exited, not yet dropped) child process.
#[derive(Debug)]
pub struct Proc {
    name: String,
    log: PathBuf,
    child: Child,
    exit: Option<ExitStatus>,
    lines: Option<mpsc::Receiver<String>>,
}

/// Opens `path` for appending, creating it, owner-only (0600): a log names the cluster's files,
/// jobs and commands, which are nobody else's business.
pub(crate) fn append(path: &Path) -> Result<File, LaunchError> {
    use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
    let f = OpenOptions::new()
        .create(true)
        .append(true)
        .mode(0o600)
        .open(path)
        .map_err(LaunchError::io("open the log file", path))?;
    // `mode` applies only when the file is created; one left by an earlier version gets it too.
    f.set_permissions(std::fs::Permissions::from_mode(0o600))
        .map_err(LaunchError::io("restrict the log file", path))?;
    Ok(f)
}

impl Proc {
    pub fn spawn(spec: &Spec) -> Result<Proc, LaunchError> {
        let out = append(&spec.log)?;
        let err = out.try_clone().map_err(LaunchError::io("open the log file", &spec.log))?;
        let mut cmd = Command::new(&spec.program);
        cmd.args(&spec.args).envs(spec.env.iter().map(|(k, v)| (k, v))).stdin(Stdio::null()).stderr(err);
        if spec.watch_stdout {
            cmd.stdout(Stdio::piped());
        } else {
            cmd.stdout(out.try_clone().map_err(LaunchError::io("open the log file", &spec.log))?);
        }
        if spec.own_group {
            cmd.process_group(0);
        }
        #[cfg(target_os = "linux")]
        if spec.die_with_parent {
            let parent = std::process::id() as libc::pid_t;
            // SAFETY: runs in the forked child before exec and only makes async-signal-safe
            // calls (prctl, getppid, _exit), touching no memory shared with the parent.
            // PR_SET_PDEATHSIG fires when the spawning *thread* exits, hence the caveat on
            // `die_with_parent`.
            unsafe {
                cmd.pre_exec(move || {
                    if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGTERM as libc::c_ulong) != 0 {
                        return Err(std::io::Error::last_os_error());
                    }
                    // The parent may have died before prctl took effect.
                    if libc::getppid() != parent {
                        libc::_exit(1);
                    }
                    Ok(())
                });
            }
        }
        let mut child = cmd.spawn().map_err(|source| LaunchError::Spawn {
            name: spec.name.clone(),
            program: spec.program.clone(),
            source,
        })?;
        let lines = child.stdout.take().map(|stdout| copy_lines(stdout, out));
        Ok(Proc { name: spec.name.clone(), log: spec.log.clone(), child, exit: None, lines })
    }

    pub fn name(&self) -> &str {
        &self.name
    }

    pub fn log(&self) -> &Path {
        &self.log
    }

    /// The pid while the child is not reaped (it may be a zombie: the pid is still its own).
    pub fn pid(&self) -> Option<u32> {
        self.exit.is_none().then(|| self.child.id())
    }

    /// How it exited, once reaped.
    pub fn exit(&self) -> Option<ExitStatus> {
        self.exit
    }

    /// Sends `signal` (SIGSTOP, SIGCONT, SIGTERM…) unless the child has been reaped.
    pub fn signal(&self, signal: i32) -> std::io::Result<()> {
        let Some(pid) = self.pid() else { return Ok(()) };
        // SAFETY: kill(2) has no memory-safety preconditions; the pid is our own unreaped child's.
        if unsafe { libc::kill(pid as libc::pid_t, signal) } != 0 {
            return Err(std::io::Error::last_os_error());
        }
        Ok(())
    }

    /// Reaps the child if it has exited: its status the first time, `None` otherwise (also on
    /// every later call).
    pub fn reap(&mut self) -> Option<ExitStatus> {
        if self.exit.is_some() {
            return None;
        }
        let status = self.child.try_wait().ok().flatten()?;
        self.exit = Some(status);
        Some(status)
    }

    /// The next line the child wrote to stdout (with [`Spec::watch_stdout`]), waiting up to
    /// `timeout`; `None` past it or once stdout is closed.
    pub fn next_line(&self, timeout: Duration) -> Option<String> {
        self.lines.as_ref()?.recv_timeout(timeout).ok()
    }

    /// SIGKILL (after SIGCONT, so a stopped child dies at once) and reap.
    pub fn kill(&mut self) {
        if self.exit.is_none() {
            let _ = self.signal(libc::SIGCONT);
            let _ = self.child.kill();
            self.exit = self.child.wait().ok();
        }
    }

    /// SIGTERM and wait for the exit, however long it takes.
    pub fn terminate(&mut self) {
        if self.exit.is_none() {
            let _ = self.signal(libc::SIGTERM);
            self.exit = self.child.wait().ok();
        }
    }
}

impl Drop for Proc {
    fn drop(&mut self) {
        self.kill();
    }
}

/// SIGTERM to every running child, up to `grace` for all of them to exit, then SIGKILL to the
/// rest. Returns the names of those that had to be killed.
pub fn stop_all<'a>(procs: impl IntoIterator<Item = &'a mut Proc>, grace: Duration) -> Vec<String> {
    let mut procs: Vec<&mut Proc> = procs.into_iter().filter(|p| p.exit.is_none()).collect();
    for p in &procs {
        // SIGCONT first: a stopped child would not act on SIGTERM.
        let _ = p.signal(libc::SIGCONT);
        let _ = p.signal(libc::SIGTERM);
    }
    let deadline = Instant::now() + grace;
    loop {
        for p in procs.iter_mut() {
            p.reap();
        }
        if Instant::now() >= deadline || procs.iter().all(|p| p.exit.is_some()) {
            break;
        }
        std::thread::sleep(POLL);
    }
    let mut killed = Vec::new();
    for p in procs.iter_mut().filter(|p| p.exit.is_none()) {
        killed.push(p.name.clone());
        p.kill();
    }
    killed
}

/// Copies the child's stdout into its log, line by line, and hands every line to the launcher
/// too, on a thread that ends with the child's stdout. Reading on (rather than closing the pipe
/// after the ready lines) keeps a later write to stdout from failing in the child.
fn copy_lines(stdout: ChildStdout, mut log: File) -> mpsc::Receiver<String> {
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines().map_while(Result::ok) {
            let _ = std::io::Write::write_all(&mut log, format!("{line}\n").as_bytes());
            // The launcher may have stopped listening; the log still gets every line.
            let _ = tx.send(line);
        }
    });
    rx
}

#[cfg(test)]
mod tests {
    use std::os::unix::process::ExitStatusExt;

    use super::*;

    fn sh(name: &str, script: &str, log: PathBuf) -> Spec {
        let mut spec = Spec::new(name, "/bin/sh", log);
        spec.args = vec!["-c".into(), script.into()];
        spec
    }

    /// Polls until the child has exited; bounded so a bug fails the test instead of hanging it.
    fn reap_within(p: &mut Proc) -> Option<ExitStatus> {
        for _ in 0..1000 {
            if let Some(s) = p.reap() {
                return Some(s);
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        None
    }

    #[test]
    fn children_log_to_their_file_and_exits_are_reported_once() {
        let dir = tempfile::tempdir().unwrap();
        let log = dir.path().join("worker-1.log");
        let mut p = Proc::spawn(&sh("worker-1", "echo to-stdout; echo to-stderr >&2; exit 3", log.clone())).unwrap();
        let status = reap_within(&mut p).expect("the child exits");
        assert_eq!(status.code(), Some(3));
        assert_eq!(status.signal(), None);
        assert_eq!(p.reap(), None, "reported only once");
        assert_eq!(p.exit(), Some(status));
        assert_eq!(p.pid(), None, "a reaped child has no pid to signal");
        assert_eq!(std::fs::read_to_string(&log).unwrap(), "to-stdout\nto-stderr\n");
        assert_eq!(p.log(), log);
        assert_eq!(p.name(), "worker-1");
    }

    #[test]
    fn watched_stdout_is_handed_over_and_still_logged() {
        let dir = tempfile::tempdir().unwrap();
        let log = dir.path().join("c.log");
        let mut spec = sh("coordinator", "echo first; echo second; exec sleep 60", log.clone());
        spec.watch_stdout = true;
        let mut p = Proc::spawn(&spec).unwrap();
        assert_eq!(p.next_line(Duration::from_secs(10)).as_deref(), Some("first"));
        assert_eq!(p.next_line(Duration::from_secs(10)).as_deref(), Some("second"));
        assert_eq!(p.next_line(Duration::from_millis(50)), None, "nothing more yet");
        p.kill();
        assert_eq!(p.exit().and_then(|s| s.signal()), Some(libc::SIGKILL));
        assert_eq!(std::fs::read_to_string(&log).unwrap(), "first\nsecond\n");
    }

    #[test]
    fn stop_terminates_then_kills_stragglers() {
        let dir = tempfile::tempdir().unwrap();
        let mut polite = Proc::spawn(&sh("polite", "exec sleep 60", dir.path().join("polite.log"))).unwrap();
        // Ignores SIGTERM (the disposition survives exec), so only SIGKILL ends it. It says when
        // the trap is set: a SIGTERM before that would end it like the polite one.
        let log = dir.path().join("stubborn.log");
        let mut stubborn =
            Proc::spawn(&sh("stubborn", "trap '' TERM; echo ready; exec sleep 60", log.clone())).unwrap();
        for _ in 0..1000 {
            if std::fs::read_to_string(&log).unwrap_or_default() == "ready\n" {
                break;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        let killed = stop_all([&mut polite, &mut stubborn], Duration::from_millis(300));
        assert_eq!(killed, vec!["stubborn".to_string()]);
        let signals: Vec<Option<i32>> =
            [&polite, &stubborn].iter().map(|p| p.exit().and_then(|s| s.signal())).collect();
        assert_eq!(signals, vec![Some(libc::SIGTERM), Some(libc::SIGKILL)]);
    }

    #[test]
    fn a_stopped_child_is_killed_on_drop() {
        let dir = tempfile::tempdir().unwrap();
        let p = Proc::spawn(&sh("frozen", "exec sleep 60", dir.path().join("f.log"))).unwrap();
        let pid = p.pid().unwrap() as libc::pid_t;
        p.signal(libc::SIGSTOP).unwrap();
        drop(p);
        // Reaped by the drop: the pid no longer names a child of ours.
        // SAFETY: waitpid(2) with WNOHANG on a pid; no memory is shared.
        let rc = unsafe { libc::waitpid(pid, std::ptr::null_mut(), libc::WNOHANG) };
        assert_eq!(rc, -1, "the child was reaped by the drop");
    }

    #[test]
    fn a_program_that_cannot_start_is_named() {
        let dir = tempfile::tempdir().unwrap();
        let err = Proc::spawn(&Spec::new("worker-1", dir.path().join("nope"), dir.path().join("w.log"))).unwrap_err();
        assert!(err.to_string().starts_with("cannot start worker-1 ("), "{err}");
    }
}
