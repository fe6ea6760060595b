//! `plexus`: the command-line client of Plexus, and `plexus up`, a local cluster in one command.
//!
//! Layout: [`args`] declares the command line, [`cmd`] has one module per subcommand,
//! [`client`] connects to the coordinator and renders errors, [`output`] formats tables and
//! JSON. This file only parses, dispatches, and turns the outcome into an exit code:
//! 0 success, 1 any failure (or a watched job that did not succeed), 2 usage errors (clap's).

mod args;
mod client;
mod cmd;
mod context;
mod output;
mod retry;

use std::io::Write;
use std::process::ExitCode;

use clap::Parser;

fn main() -> ExitCode {
    let cli = args::Cli::parse();
    if let args::Command::Completions { shell } = cli.command {
        // No coordinator involved: the script comes from the command line's own definition.
        return cmd::completions(shell);
    }
    if let args::Command::Context(c) = &cli.command {
        return cmd::context::run(c).unwrap_or_else(|e| fail(&client::render_error(&e, "")));
    }
    let mut sources = client::Sources {
        insecure: cli.insecure,
        ca_file: cli.ca.clone(),
        token_file: cli.token_file.clone(),
        token: std::env::var("PLEXUS_TOKEN").ok(),
    };
    let coordinator = match client::pick_coordinator(cli.coordinator.as_deref(), cli.context.as_deref(), &mut sources) {
        Ok(url) => url,
        Err(e) => return fail(&client::render_error(&e, cli.coordinator.as_deref().unwrap_or(""))),
    };
    // One thread is plenty for a client; `up` also relies on spawning children from the main
    // thread (see `cmd::up`).
    let runtime = match tokio::runtime::Builder::new_current_thread().enable_all().build() {
        Ok(rt) => rt,
        Err(e) => return fail(&format!("error: cannot start the async runtime: {e}")),
    };
    let target = match client::Target::resolve(&coordinator, &sources) {
        Ok(t) => t,
        Err(e) => return fail(&client::render_error(&e, &coordinator)),
    };
    match runtime.block_on(cmd::run(cli.command, &target)) {
        Ok(code) => code,
        Err(e) => fail(&client::render_error(&e, &target.url)),
    }
}

fn fail(line: &str) -> ExitCode {
    let _ = writeln!(std::io::stderr(), "{line}");
    ExitCode::FAILURE
}
