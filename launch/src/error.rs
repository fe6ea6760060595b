//! The crate's one error type. Every variant names what was being started and where to look.

use std::path::PathBuf;
use std::process::ExitStatus;
use std::time::Duration;

/// Everything that can go wrong while starting a local cluster.
#[derive(Debug, thiserror::Error)]
pub enum LaunchError {
    /// A program could not be started at all (missing, not executable, out of processes).
    #[error("cannot start {name} ({}): {source}", program.display())]
    Spawn { name: String, program: PathBuf, source: std::io::Error },

    /// A file or directory the cluster needs could not be made, opened, read or rotated.
    #[error("cannot {action} {}: {source}", path.display())]
    Io { action: &'static str, path: PathBuf, source: std::io::Error },

    /// A program that is searched for is neither next to the running one nor on PATH.
    #[error(
        "cannot find the {name} program: it is neither next to {exe} (in {here}) nor on PATH; build it with `cargo build -p {name}`"
    )]
    ProgramNotFound { name: String, exe: String, here: String },

    /// A coordinator exited before it printed its "listening on" line.
    #[error("{name} exited ({status}) before it listened; see {}", log.display())]
    ExitedEarly { name: String, status: ExitStatus, log: PathBuf },

    /// A coordinator printed no ready line of the kind `line` within `timeout`.
    #[error("{name} printed no {line:?} line within {timeout:?}; see {}", log.display())]
    NotReady { name: String, line: &'static str, timeout: Duration, log: PathBuf },

    /// A ready line named an address that is not `ip:port`.
    #[error("{name} printed {line:?}, which has no ip:port")]
    BadReadyLine { name: String, line: String },

    /// A tool the cluster needs (etcd) is not installed here. The one error a test may take as a
    /// reason to skip: see [`LaunchError::is_missing_tool`].
    #[error("{tool} is not installed ({reason}); `make deps` installs it")]
    MissingTool { tool: &'static str, reason: String },

    /// An installed tool did not work (`etcd --version` failed, a member never became healthy).
    #[error("{tool}: {reason}")]
    Tool { tool: &'static str, reason: String },
}

impl LaunchError {
    /// Whether this error only says a required tool is absent (so a test may skip), rather than
    /// that something installed failed (which must fail the test).
    pub fn is_missing_tool(&self) -> bool {
        matches!(self, LaunchError::MissingTool { .. })
    }

    pub(crate) fn io(action: &'static str, path: impl Into<PathBuf>) -> impl FnOnce(std::io::Error) -> LaunchError {
        let path = path.into();
        move |source| LaunchError::Io { action, path, source }
    }
}
