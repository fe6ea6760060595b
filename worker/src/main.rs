//! The `plexus-worker` binary: parses the command line, sets up logging, and runs the worker
//! until SIGTERM or Ctrl-C; or, started by a worker with `--plexus-attempt-shim`, supervises one
//! attempt ([`plexus_worker::shim`]).

use std::io::IsTerminal;

use anyhow::Context;
use clap::Parser;
use tracing_subscriber::EnvFilter;

fn main() -> anyhow::Result<()> {
    // An attempt's supervisor: the same executable, started by the worker, no runtime.
    if std::env::args_os().nth(1).is_some_and(|a| a == plexus_worker::shim::SHIM_ARG) {
        std::process::exit(plexus_worker::shim::main());
    }
    tokio::runtime::Runtime::new().context("cannot start the async runtime")?.block_on(worker())
}

async fn worker() -> anyhow::Result<()> {
    let args = plexus_worker::Args::parse();
    tracing_subscriber::fmt()
        .with_env_filter(EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new("info")))
        .with_writer(std::io::stderr)
        // Colours only for a person at a terminal, not in log files.
        .with_ansi(std::io::stderr().is_terminal())
        .init();
    let config = args.into_config().context("invalid command line")?;
    let mut sigterm = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
        .context("cannot listen for SIGTERM")?;
    let shutdown = async move {
        tokio::select! {
            _ = sigterm.recv() => tracing::info!("SIGTERM received"),
            r = tokio::signal::ctrl_c() => match r {
                Ok(()) => tracing::info!("Ctrl-C received"),
                // Without a Ctrl-C handler the worker still stops on SIGTERM.
                Err(e) => {
                    tracing::warn!(error = %e, "cannot listen for Ctrl-C");
                    std::future::pending::<()>().await;
                }
            },
        }
    };
    plexus_worker::run(config, shutdown).await.context("worker failed")
}
