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
    /// For `migrate --dry-run` and `policy export` while a coordinator runs on this data dir:
    /// its URL (default: http:// and the --listen address, 0.0.0.0 read as 127.0.0.1).
    #[arg(long)]
    coordinator: Option<String>,
    #[command(subcommand)]
    command: Option<Command>,
}

/// How long an administrative command waits for the store's lock before asking the running
/// coordinator instead: a coordinator holds it for its whole life, so waiting longer gains
/// nothing, while a coordinator that is just exiting lets go within this.
const ADMIN_LOCK_WAIT: std::time::Duration = std::time::Duration::from_millis(500);

impl Args {
    fn coordinator_url(&self) -> String {
        self.coordinator.clone().unwrap_or_else(|| {
            let mut addr = self.listen;
            if addr.ip().is_unspecified() {
                addr.set_ip(std::net::Ipv4Addr::LOCALHOST.into());
            }
            format!("http://{addr}")
        })
    }
}

/// Asks the coordinator that holds the store; `what` names the command for the error.
fn ask_running<T>(url: &str, what: &str, call: impl AsyncFnOnce(plexus_proto::pb::job_service_client::JobServiceClient<tonic::transport::Channel>) -> Result<T, tonic::Status>) -> anyhow::Result<T> {
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().context("starting the tokio runtime")?;
    rt.block_on(async {
        let client = plexus_proto::pb::job_service_client::JobServiceClient::connect(url.to_string())
            .await
            .with_context(|| format!("the store is held by another process, and no coordinator answers at {url} (pass --coordinator URL) for {what}"))?
            .max_decoding_message_size(plexus_proto::rules::MAX_MESSAGE);
        call(client).await.map_err(|e| anyhow::anyhow!("{what}: the running coordinator at {url} answered: {}", e.message()))
    })
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

    let url = args.coordinator_url();
    if let Some(Command::Migrate { dry_run }) = &args.command {
        let dir = server::store_dir(&args.data_dir);
        if *dry_run {
            match SledStore::pending(&dir, ADMIN_LOCK_WAIT) {
                Ok((version, pending)) => {
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
                }
                Err(plexus_coordinator::Error::Locked { .. }) => {
                    // The running coordinator migrated its store when it started.
                    let info = ask_running(&url, "migrate --dry-run", async |mut c| Ok(c.get_store_info(plexus_proto::pb::GetStoreInfoRequest {}).await?.into_inner()))?;
                    println!("store {} (in use by the coordinator at {url}): schema version {}, this binary uses {}", info.dir, info.schema_version, plexus_migrations::CURRENT);
                    if info.schema_version == plexus_migrations::CURRENT {
                        println!("no pending migrations");
                    } else {
                        println!("the running coordinator's binary uses schema version {}; stop it to migrate to {}", info.binary_version, plexus_migrations::CURRENT);
                    }
                }
                Err(e) => return Err(anyhow::Error::new(e).context(format!("opening {}", dir.display()))),
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

    if let Some(Command::Policy { action }) = &args.command {
        let dir = server::store_dir(&args.data_dir);
        let config = plexus_policy::PolicyConfig { seed: args.seed, ..Default::default() };
        match SledStore::open_waiting(&dir, ADMIN_LOCK_WAIT) {
            Ok((store, _)) => {
                let policy_store = store.policy_store();
                let stored = policy_store.load_weights().map_err(anyhow::Error::msg)?;
                let mut policy = plexus_policy::DqnPolicy::new(config, Some(policy_store.clone())).context("starting the policy")?;
                match action {
                    PolicyAction::Export { file } => export(&policy, file, stored.is_some(), &dir.display().to_string())?,
                    PolicyAction::Import { file } => {
                        policy.import(file).with_context(|| format!("reading {}", file.display()))?;
                        policy_store.save_weights(&policy.weights_bytes()?).map_err(anyhow::Error::msg)?;
                        println!("imported {} into the store at {}", file.display(), dir.display());
                    }
                }
            }
            Err(plexus_coordinator::Error::Locked { .. }) => match action {
                PolicyAction::Export { file } => {
                    let weights = ask_running(&url, "policy export", async |mut c| Ok(c.export_policy(plexus_proto::pb::ExportPolicyRequest {}).await?.into_inner().weights))?;
                    // The policy is rebuilt here from the bytes the running coordinator stored.
                    let mem: std::sync::Arc<dyn plexus_policy::PolicyStore> = std::sync::Arc::new(plexus_policy::MemPolicyStore::default());
                    if !weights.is_empty() {
                        mem.save_weights(&weights).map_err(anyhow::Error::msg)?;
                    }
                    let policy = plexus_policy::DqnPolicy::new(config, Some(mem)).context("starting the policy")?;
                    export(&policy, file, !weights.is_empty(), &format!("the coordinator at {url}"))?;
                }
                PolicyAction::Import { .. } => {
                    anyhow::bail!("the store at {} is in use by a running coordinator; stop it before importing weights (they are loaded at start)", dir.display())
                }
            },
            Err(e) => return Err(anyhow::Error::new(e).context(format!("opening {}", dir.display()))),
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

/// Writes the policy's weights as safetensors; without stored weights (no training step has run
/// yet) they are the initial, seeded ones, and the note says so.
fn export(policy: &plexus_policy::DqnPolicy, file: &std::path::Path, trained: bool, from: &str) -> anyhow::Result<()> {
    policy.export(file).with_context(|| format!("writing {}", file.display()))?;
    if trained {
        println!("exported the learned placer's weights from {from} to {}", file.display());
    } else {
        println!(
            "exported the learned placer's initial weights to {}: {from} holds no trained weights yet (the first training step comes after {} decisions with --placer rl)",
            file.display(),
            plexus_policy::PolicyConfig::default().buffer
        );
    }
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
