//! One module per subcommand; [`run`] dispatches a parsed command line to it. Each command
//! returns the process exit code it wants, or an error that `main` prints as one line (exit 1).

use std::process::ExitCode;

use crate::args::Command;

pub mod cancel;
pub mod explain;
pub mod logs;
pub mod status;
pub mod submit;
pub mod up;
pub mod watch;
pub mod workers;

/// Runs one command against the coordinator at `url` (`up` starts its own and ignores `url`).
pub async fn run(command: Command, url: &str) -> anyhow::Result<ExitCode> {
    match command {
        Command::Up(a) => up::run(&a).await,
        Command::Submit(a) => submit::run(url, &a).await,
        Command::Status(a) => status::run(url, &a).await,
        Command::Watch(a) => watch::run(url, a.job).await,
        Command::Logs(a) => logs::run(url, &a).await,
        Command::Cancel(a) => cancel::run(url, a.job).await,
        Command::Workers(a) => workers::run(url, &a).await,
        Command::Explain(a) => explain::run(url, &a).await,
    }
}
