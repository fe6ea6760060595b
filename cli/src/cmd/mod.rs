//! One module per subcommand; [`run`] dispatches a parsed command line to it. Each command
//! returns the process exit code it wants, or an error that `main` prints as one line (exit 1).

use std::process::ExitCode;

use crate::args::Command;
use crate::client::Target;

pub mod cancel;
pub mod context;
pub mod explain;
pub mod get;
pub mod logs;
pub mod queue;
pub mod requirements;
pub mod set;
pub mod status;
pub mod submit;
pub mod token;
pub mod up;
pub mod watch;
pub mod workers;
pub mod working_dir;

/// Runs one command against the coordinator `target` (`up` starts its own and ignores it).
pub async fn run(command: Command, target: &Target) -> anyhow::Result<ExitCode> {
    match command {
        Command::Token(t) => token::run(target, t).await,
        Command::Up(a) => up::run(&a).await,
        Command::Submit(a) => submit::run(target, &a).await,
        Command::Status(a) => status::run(target, &a).await,
        Command::Resubmit(a) => submit::resubmit(target, &a).await,
        Command::Watch(a) => watch::run(target, &a.job).await,
        Command::Logs(a) => logs::run(target, &a).await,
        Command::Get(a) => get::run(target, &a).await,
        Command::Cancel(a) => cancel::run(target, &a.job).await,
        Command::Workers(a) => workers::run(target, &a).await,
        Command::Coordinators(args) => status::coordinators(target, args.output).await,
        Command::Explain(a) => explain::run(target, &a).await,
        Command::Completions { shell } => Ok(completions(shell)),
        Command::Context(c) => context::run(&c),
        Command::Queue(q) => queue::run(target, &q).await,
    }
}

/// Prints the completion script for `shell` (no coordinator involved).
pub fn completions(shell: clap_complete::Shell) -> ExitCode {
    clap_complete::generate(
        shell,
        &mut <crate::args::Cli as clap::CommandFactory>::command(),
        "plexus",
        &mut std::io::stdout(),
    );
    ExitCode::SUCCESS
}
