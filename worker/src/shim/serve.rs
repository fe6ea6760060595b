//! The shim process: reads its spec, starts the command, then waits with `poll(2)` on three
//! things at once — its stdin (renewals; end-of-file: the worker is gone), the command (a pidfd),
//! and the lease's end — and reports how the command ended. At the lease's end it freezes the
//! command's confinement; a later renewal thaws it, and the worker's death kills it, and so does
//! staying frozen past the spec's `frozen_limit_ms` (the coordinator has given the worker up). Synchronous
//! and single-threaded: no runtime, so a shim costs a process and a few hundred KiB.

use std::ffi::CString;
use std::fs::File;
use std::io::Write as _;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::os::unix::process::{CommandExt as _, ExitStatusExt as _};
use std::process::{Child, Command, Stdio};

use crate::isolation::{become_user, join_cgroups};
use crate::lease::{UNLIMITED, boot_ms};

use super::protocol::{Spec, Status, parse_renew};

/// How long one wait may last at most: the boot clock is read again after it, so a machine that
/// was suspended finds its lease expired soon after it wakes.
const MAX_WAIT_MS: u64 = 1_000;
/// Without a pidfd (kernels before 5.3), how often the command is looked at.
const POLL_CHILD_MS: u64 = 50;

/// The shim's entry point (`plexus-worker --plexus-attempt-shim`); returns the exit code.
pub fn main() -> i32 {
    match run() {
        Ok(()) => 0,
        Err(e) => {
            eprintln!("plexus attempt supervisor: {e}");
            send(&Status::Error(e));
            1
        }
    }
}

fn run() -> Result<(), String> {
    let mut stdin = LineReader { fd: 0, buf: Vec::new(), eof: false };
    let spec = loop {
        if let Some(line) = stdin.next_line() {
            break serde_json::from_str::<Spec>(&line).map_err(|e| format!("an unreadable spec: {e}"))?;
        }
        if stdin.fill().map_err(|e| format!("reading the spec: {e}"))? == 0 {
            return Err("the worker closed the pipe before sending the spec".into());
        }
    };
    let mut child = spawn(&spec)?;
    let pid = i32::try_from(child.id()).map_err(|_| "a pid out of range".to_string())?;
    send(&Status::Pid(pid));
    let pidfd = pidfd_open(pid);
    let mut lease_end = spec.lease_end;
    let mut frozen = false;
    loop {
        let now = boot_ms();
        let lapsed = lease_end != UNLIMITED && now >= lease_end;
        if lapsed != frozen {
            // Frozen at the lease's end (no progress, no side effects: the coordinator may place
            // the attempt elsewhere once it gives the worker up); thawed by a renewal, which the
            // worker sends only once the coordinator has confirmed the attempt is still its own.
            let what = if lapsed { "the lease ran out without a renewal; freezing" } else { "renewed; thawing" };
            eprintln!("plexus attempt supervisor (command pid {pid}): {what} the attempt");
            spec.kill.freeze(Some(pid), lapsed);
            frozen = lapsed;
        }
        // Frozen past the limit: the coordinator has given the worker up and placed the attempt
        // elsewhere, so no renewal can come for it; a worker that never gets back would keep it
        // frozen for ever.
        if let Some(limit) = spec.frozen_limit_ms.filter(|_| frozen)
            && now >= lease_end.saturating_add(limit)
        {
            let why = format!(
                "fenced: frozen for {:.1} s after the worker's lease ran out, past the coordinator's timeout (it \
                 gave the worker up and placed the attempt elsewhere)",
                (now - lease_end) as f64 / 1000.0
            );
            fence(&spec, pid, why);
            break;
        }
        let mut wait = if frozen { MAX_WAIT_MS } else { lease_end.saturating_sub(now).min(MAX_WAIT_MS) };
        if pidfd.is_none() {
            wait = wait.min(POLL_CHILD_MS);
        }
        let mut fds = [
            libc::pollfd { fd: 0, events: libc::POLLIN, revents: 0 },
            libc::pollfd { fd: pidfd.as_ref().map_or(-1, AsRawFd::as_raw_fd), events: libc::POLLIN, revents: 0 },
        ];
        // SAFETY: `fds` is a valid array of two pollfds; a negative fd is ignored by poll(2).
        let rc = unsafe { libc::poll(fds.as_mut_ptr(), 2, i32::try_from(wait).unwrap_or(i32::MAX)) };
        if rc < 0 {
            let e = std::io::Error::last_os_error();
            if e.kind() == std::io::ErrorKind::Interrupted {
                continue;
            }
            return Err(format!("poll: {e}"));
        }
        if fds[1].revents != 0 || (pidfd.is_none() && child.try_wait().ok().flatten().is_some()) {
            break;
        }
        if fds[0].revents != 0 {
            match stdin.fill() {
                Ok(n) if n > 0 => {
                    while let Some(line) = stdin.next_line() {
                        if let Some(end) = parse_renew(&line) {
                            lease_end = end;
                        }
                    }
                }
                // End of file (or a broken pipe): the worker is gone.
                _ => {
                    fence(&spec, pid, "fenced: the worker died (its end of the supervisor's pipe closed)".into());
                    break;
                }
            }
        }
    }
    let status = child.wait().map_err(|e| format!("waiting for the command: {e}"))?;
    send(&Status::Exit(status.into_raw()));
    Ok(())
}

/// Says why, then kills the command's process group and everything in its cgroups.
fn fence(spec: &Spec, pid: i32, why: String) {
    eprintln!("plexus attempt supervisor (command pid {pid}): {why}; killing the attempt");
    send(&Status::Fenced(why));
    spec.kill.kill(Some(pid));
}

/// Starts the command: stdout and stderr from file descriptors 3 and 4, its own process group,
/// the attempt's cgroups joined and then its uid taken between fork and exec, and killed if the
/// shim dies.
fn spawn(spec: &Spec) -> Result<Child, String> {
    let program = spec.argv.first().ok_or("an empty command")?;
    let out = log_fd(3)?;
    let err = log_fd(4)?;
    let cgroups: Vec<CString> = spec.cgroups.iter().filter_map(|p| CString::new(p.as_bytes()).ok()).collect();
    // SAFETY: getpid has no preconditions.
    let shim = unsafe { libc::getpid() };
    let uid = spec.uid;
    let mut cmd = Command::new(program);
    cmd.args(&spec.argv[1..]).stdin(Stdio::null()).stdout(out).stderr(err).process_group(0);
    // SAFETY: between fork and exec this makes only async-signal-safe system calls (prctl,
    // getppid, `join_cgroups`'s open/write/close, `become_user`'s setgroups/setgid/setuid/prctl)
    // on memory prepared before the fork. The cgroups are joined first: that takes root.
    unsafe {
        cmd.pre_exec(move || {
            join_cgroups(&cgroups)?;
            if let Some(uid) = uid {
                become_user(uid)?;
            }
            // After the uid change: changing credentials clears the parent-death signal.
            if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            // The shim died before the line above: nobody would kill this process later.
            if libc::getppid() != shim {
                return Err(std::io::Error::other("the attempt's supervisor is gone"));
            }
            Ok(())
        });
    }
    cmd.spawn().map_err(|e| format!("cannot start {program:?}: {e}"))
}

/// A log file the worker passed as descriptor `fd`, made close-on-exec (the command gets it as
/// its stdout or stderr, not as an extra descriptor).
fn log_fd(fd: RawFd) -> Result<File, String> {
    // SAFETY: fcntl on any integer is safe; it fails with EBADF on a closed descriptor.
    if unsafe { libc::fcntl(fd, libc::F_SETFD, libc::FD_CLOEXEC) } != 0 {
        return Err(format!("the worker passed no log file as descriptor {fd}"));
    }
    // SAFETY: `fd` is open (checked above) and nothing else in this process owns it.
    Ok(unsafe { File::from_raw_fd(fd) })
}

/// A pidfd of the command, to poll for its end; `None` where the kernel has none.
fn pidfd_open(pid: i32) -> Option<OwnedFd> {
    // SAFETY: pidfd_open takes a pid and flags and returns a new descriptor or -1.
    let fd = unsafe { libc::syscall(libc::SYS_pidfd_open, pid, 0) };
    let fd = RawFd::try_from(fd).ok().filter(|&fd| fd >= 0)?;
    // SAFETY: the kernel just returned this descriptor to us alone.
    Some(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// Writes one message to the worker; a worker that is gone is not an error here.
fn send(status: &Status) {
    let mut out = std::io::stdout().lock();
    let _ = out.write_all(status.to_line().as_bytes());
    let _ = out.flush();
}

/// Lines read from a descriptor with single `read(2)` calls, so a `poll` in between tells when
/// more is there.
struct LineReader {
    fd: RawFd,
    buf: Vec<u8>,
    eof: bool,
}

impl LineReader {
    /// One `read`: how many bytes came (0: end of file).
    fn fill(&mut self) -> std::io::Result<usize> {
        if self.eof {
            return Ok(0);
        }
        let mut chunk = [0u8; 4096];
        loop {
            // SAFETY: `chunk` is a valid writable buffer of its length.
            let n = unsafe { libc::read(self.fd, chunk.as_mut_ptr().cast(), chunk.len()) };
            if n < 0 {
                let e = std::io::Error::last_os_error();
                if e.kind() == std::io::ErrorKind::Interrupted {
                    continue;
                }
                return Err(e);
            }
            let n = usize::try_from(n).unwrap_or(0);
            self.eof = n == 0;
            self.buf.extend_from_slice(&chunk[..n]);
            return Ok(n);
        }
    }

    /// The next complete line, without its newline.
    fn next_line(&mut self) -> Option<String> {
        let at = self.buf.iter().position(|&b| b == b'\n')?;
        let line: Vec<u8> = self.buf.drain(..=at).collect();
        Some(String::from_utf8_lossy(&line[..at]).into_owned())
    }
}
