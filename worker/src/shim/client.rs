//! The worker's side of a shim: start it with the attempt's spec, learn the command's pid, renew
//! the lease while the command runs, and read how it ended.

use std::fs::File;
use std::os::fd::AsRawFd as _;
use std::os::unix::process::ExitStatusExt as _;
use std::path::Path;
use std::process::{ExitStatus, Stdio};

use tokio::io::{AsyncBufReadExt as _, AsyncWriteExt as _, BufReader, Lines};
use tokio::process::{Child, ChildStdin, ChildStdout};
use tokio::sync::watch;
use tracing::debug;

use super::protocol::{SHIM_ARG, Spec, Status, renew_line};

/// A running shim and its command.
#[derive(Debug)]
pub struct Supervisor {
    child: Child,
    control: ChildStdin,
    status: Lines<BufReader<ChildStdout>>,
    pid: i32,
    /// Why the shim killed the command, once it said so.
    fenced: Option<String>,
}

/// How a supervised command ended.
#[derive(Debug)]
pub struct Ended {
    pub status: ExitStatus,
    /// Set when the shim killed it (the worker died or its lease ran out): why.
    pub fenced: Option<String>,
}

impl Supervisor {
    /// Starts `program` (the worker's own executable) as the shim of `spec`, with `cwd` and
    /// `env` (added to the worker's, less the variables named in `remove`) for the command, and
    /// `logs` as its stdout and stderr; returns
    /// once the command has started, or with why it could not.
    pub async fn start<I, K, V>(
        program: &Path,
        spec: &Spec,
        cwd: &Path,
        env: I,
        remove: &[&str],
        logs: (File, File),
    ) -> std::io::Result<Supervisor>
    where
        I: IntoIterator<Item = (K, V)>,
        K: AsRef<std::ffi::OsStr>,
        V: AsRef<std::ffi::OsStr>,
    {
        let (out, err) = (logs.0.as_raw_fd(), logs.1.as_raw_fd());
        let mut cmd = tokio::process::Command::new(program);
        cmd.arg(SHIM_ARG)
            .current_dir(cwd)
            .envs(env)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            // Its own group: a Ctrl-C at the worker's terminal must not kill the supervisor.
            .process_group(0)
            .kill_on_drop(true);
        for k in remove {
            cmd.env_remove(k);
        }
        // SAFETY: between fork and exec only fcntl, dup2 and close, on descriptors that are open
        // in the parent (`logs` lives until `spawn` returns).
        unsafe {
            cmd.pre_exec(move || {
                // Copied above 9 first, so that placing one at 3 or 4 cannot close the other.
                let a = libc::fcntl(out, libc::F_DUPFD_CLOEXEC, 10);
                let b = libc::fcntl(err, libc::F_DUPFD_CLOEXEC, 10);
                if a < 0 || b < 0 || libc::dup2(a, 3) < 0 || libc::dup2(b, 4) < 0 {
                    return Err(std::io::Error::last_os_error());
                }
                libc::close(a);
                libc::close(b);
                Ok(())
            });
        }
        let mut child = cmd.spawn()?;
        drop(logs);
        let mut control = child.stdin.take().ok_or_else(|| std::io::Error::other("the supervisor has no stdin"))?;
        let stdout = child.stdout.take().ok_or_else(|| std::io::Error::other("the supervisor has no stdout"))?;
        let mut line = serde_json::to_string(spec).map_err(std::io::Error::other)?;
        line.push('\n');
        control.write_all(line.as_bytes()).await?;
        let mut status = BufReader::new(stdout).lines();
        let pid = loop {
            match status.next_line().await?.as_deref().map(Status::parse) {
                Some(Some(Status::Pid(pid))) => break pid,
                Some(Some(Status::Error(e))) => return Err(std::io::Error::other(e)),
                Some(_) => continue,
                None => {
                    let st = child.wait().await?;
                    return Err(std::io::Error::other(format!(
                        "the attempt's supervisor ended ({st}) before the command started"
                    )));
                }
            }
        };
        Ok(Supervisor { child, control, status, pid, fenced: None })
    }

    /// The command's pid (and process group id).
    pub fn pid(&self) -> i32 {
        self.pid
    }

    /// Waits until the command has ended, passing every renewal of the lease on to the shim.
    /// Cancel-safe: it can be raced against a timeout and called again after.
    pub async fn wait(&mut self, lease: &mut watch::Receiver<u64>) -> std::io::Result<Ended> {
        let mut renewing = true;
        loop {
            tokio::select! {
                line = self.status.next_line() => match line?.as_deref().map(Status::parse) {
                    Some(Some(Status::Exit(raw))) => {
                        // The shim exits right after; reap it.
                        let _ = self.child.wait().await;
                        return Ok(Ended { status: ExitStatus::from_raw(raw), fenced: self.fenced.take() });
                    }
                    Some(Some(Status::Fenced(why))) => self.fenced = Some(why),
                    Some(_) => {}
                    None => {
                        let st = self.child.wait().await?;
                        return Err(std::io::Error::other(format!(
                            "the attempt's supervisor ended ({st}) without saying how the command did"
                        )));
                    }
                },
                changed = lease.changed(), if renewing => match changed {
                    Ok(()) => {
                        let end = *lease.borrow_and_update();
                        // A shim that is gone tells through its status pipe, read above.
                        if let Err(e) = self.control.write_all(renew_line(end).as_bytes()).await {
                            debug!(pid = self.pid, error = %e, "could not renew an attempt's lease with its supervisor");
                        }
                    }
                    Err(_) => renewing = false,
                },
            }
        }
    }
}
