//! `plexus-coordinator`: parses arguments and runs the coordinator.

use std::net::SocketAddr;
use std::path::PathBuf;

use anyhow::Context;
use clap::{Parser, Subcommand};
use plexus_scheduler::core::CoreConfig;
use plexus_coordinator::{Config, run, server, store::SledStore};

#[derive(Parser)]
#[command(name = "plexus-coordinator", version, about = "The Plexus control plane")]
struct Args {
    /// Address to serve gRPC on (port 0 picks a free port, printed on stdout).
    #[arg(long, default_value = "127.0.0.1:50051")]
    listen: SocketAddr,
    /// Directory for durable state.
    #[arg(long, default_value = ".plexus/coordinator")]
    data_dir: PathBuf,
    /// Placement policy: least-loaded, round-robin, random, locality, or rl (the learned DQN).
    #[arg(long, default_value = "least-loaded")]
    placer: String,
    /// Seed for randomised placers.
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// Heartbeat interval asked of workers, in ms.
    #[arg(long, default_value_t = CoreConfig::default().heartbeat_interval_ms)]
    heartbeat_interval_ms: u64,
    /// A worker silent for longer than this (ms) is lost and its subtasks are placed again.
    #[arg(long, default_value_t = CoreConfig::default().heartbeat_timeout_ms)]
    heartbeat_timeout_ms: u64,
    #[command(subcommand)]
    command: Option<Command>,
}

#[derive(Subcommand)]
enum Command {
    /// Run pending migrations of the store (they also run at every start).
    Migrate {
        /// Only list the pending migrations.
        #[arg(long)]
        dry_run: bool,
    },
    /// The learned placer's weights, kept in the store.
    Policy {
        #[command(subcommand)]
        action: PolicyAction,
    },
}

#[derive(Subcommand)]
enum PolicyAction {
    /// Write the stored weights to a safetensors file.
    Export { file: PathBuf },
    /// Replace the stored weights with those of a safetensors file (made by `export`).
    Import { file: PathBuf },
}

fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    tracing_subscriber::fmt()
        .with_env_filter(tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| "info".into()))
        .with_writer(std::io::stderr)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .init();

    if let Some(Command::Migrate { dry_run }) = args.command {
        let dir = server::store_dir(&args.data_dir);
        if dry_run {
            let (version, pending) = SledStore::pending(&dir).with_context(|| format!("opening {}", dir.display()))?;
            match version {
                None => println!("store {}: new; it will be created at schema version {}", dir.display(), plexus_migrations::CURRENT),
                Some(v) => println!("store {}: schema version {v}, this binary uses {}", dir.display(), plexus_migrations::CURRENT),
            }
            if pending.is_empty() {
                println!("no pending migrations");
            }
            for m in pending {
                println!("pending: {} -> {}: {}", m.to - 1, m.to, m.name);
            }
        } else {
            let (_, applied) = SledStore::open(&dir).with_context(|| format!("opening {}", dir.display()))?;
            if applied.is_empty() {
                println!("no pending migrations");
            }
            for m in applied {
                println!("applied: {} -> {}: {} ({} records)", m.to - 1, m.to, m.name, m.records);
            }
        }
        return Ok(());
    }

    if let Some(Command::Policy { action }) = args.command {
        let dir = server::store_dir(&args.data_dir);
        let (store, _) = SledStore::open(&dir).with_context(|| format!("opening {}", dir.display()))?;
        let policy_store = store.policy_store();
        let config = plexus_policy::PolicyConfig { seed: args.seed, ..Default::default() };
        let mut policy = plexus_policy::DqnPolicy::new(config, Some(policy_store.clone())).context("starting the policy")?;
        match action {
            PolicyAction::Export { file } => {
                if policy_store.load_weights().map_err(anyhow::Error::msg)?.is_none() {
                    anyhow::bail!("the store at {} holds no learned weights yet (run with --placer rl first)", dir.display());
                }
                policy.export(&file).with_context(|| format!("writing {}", file.display()))?;
                println!("exported the learned placer's weights to {}", file.display());
            }
            PolicyAction::Import { file } => {
                policy.import(&file).with_context(|| format!("reading {}", file.display()))?;
                policy_store.save_weights(&policy.weights_bytes()?).map_err(anyhow::Error::msg)?;
                println!("imported {} into the store at {}", file.display(), dir.display());
            }
        }
        return Ok(());
    }

    let config = Config {
        listen: args.listen,
        data_dir: args.data_dir,
        placer: args.placer,
        seed: args.seed,
        core: CoreConfig { heartbeat_interval_ms: args.heartbeat_interval_ms, heartbeat_timeout_ms: args.heartbeat_timeout_ms },
    };
    let rt = tokio::runtime::Runtime::new().context("starting the tokio runtime")?;
    rt.block_on(run(config, shutdown_signal()))?;
    Ok(())
}

/// Ctrl-C or SIGTERM.
async fn shutdown_signal() {
    let mut term = match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
        Ok(s) => s,
        Err(e) => {
            tracing::warn!(error = %e, "cannot listen for SIGTERM; Ctrl-C only");
            let _ = tokio::signal::ctrl_c().await;
            return;
        }
    };
    tokio::select! {
        _ = tokio::signal::ctrl_c() => {}
        _ = term.recv() => {}
    }
}
