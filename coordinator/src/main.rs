//! `plexus-coordinator`: parses arguments and runs the coordinator.

use std::net::SocketAddr;
use std::path::PathBuf;

use anyhow::Context;
use clap::{Parser, Subcommand};
use plexus_coordinator::{Config, SecurityMode, auth, run, server, store::SledStore};
use plexus_proto::pb::job_service_client::JobServiceClient;
use plexus_scheduler::core::CoreConfig;
use plexus_scheduler::gpu::topology::MscCosts;
use plexus_security::tls::Bearer;
use tonic::service::interceptor::InterceptedService;

#[derive(Parser)]
#[command(name = "plexus-coordinator", version, about = "The Plexus control plane")]
struct Args {
    /// Address to serve gRPC on (port 0 picks a free port, printed on stdout).
    #[arg(long, default_value = "127.0.0.1:50051")]
    listen: SocketAddr,
    /// Address to serve HTTP on (`/metrics`, Prometheus text; with security on it needs a
    /// token, `Authorization: Bearer`), or `none`. Port 0 picks a free port, printed on stdout.
    #[arg(long, default_value = "127.0.0.1:8265", value_parser = parse_http)]
    http: HttpAddr,
    /// Directory for durable state (the sled store, the CA file and first tokens).
    #[arg(long, default_value = ".plexus/coordinator")]
    data_dir: PathBuf,
    /// Where the state lives: `sled` (in --data-dir, one coordinator) or
    /// `etcd://host:port[,host:port…][/prefix]` (default prefix /plexus): an HA control plane,
    /// where every coordinator on the same etcd campaigns and one leads.
    #[arg(long, env = "PLEXUS_STORE", default_value = "sled", value_parser = parse_store)]
    store: StoreArg,
    /// With etcd: the URL workers and clients reach this coordinator at, which the leader
    /// publishes and standbys hand out (default: the --listen address, with https:// or http://).
    #[arg(long, value_name = "URL")]
    advertise: Option<String>,
    /// With etcd: the leader's lease. A dead or paused leader is replaced after at most this
    /// long; a shorter TTL fails over sooner but deposes a leader that stalls (GC, swap, a slow
    /// disk under etcd) for that long.
    #[arg(long, default_value = "5s", value_parser = parse_ttl)]
    lease_ttl: std::time::Duration,
    /// Placement policy: least-loaded, round-robin, random, locality, fastest (least measured
    /// fetch + compute), or rl (the learned DQN).
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
    /// The model-synchronisation cost of each level of the GPU topology tree, for GPU gang
    /// placement: any of nvlink (per bonded link), pix (PIX/PXB), phb (PHB/NODE), sys, same-rack,
    /// cross-rack, as key=value pairs; the rest keep their defaults. Costs must be finite, ≥ 0,
    /// and not decrease in that order.
    #[arg(long, value_name = "KEY=COST,...", default_value_t = MscCosts::default())]
    msc: MscCosts,
    /// For `migrate --dry-run`, `policy export` and `token` while a coordinator runs on this
    /// data dir: its URL (default: the --listen address, 0.0.0.0 read as 127.0.0.1). These
    /// commands authenticate with the data dir's admin.token and ca.pem (or $PLEXUS_TOKEN).
    #[arg(long)]
    coordinator: Option<String>,
    /// Development only: no TLS and no tokens, so anyone who reaches the port runs commands on
    /// every worker. Refused on a non-loopback --listen address without --insecure-i-know.
    #[arg(long)]
    insecure: bool,
    /// With --insecure: listen on a non-loopback address anyway.
    #[arg(long, requires = "insecure")]
    insecure_i_know: bool,
    /// A host name or IP address clients use to reach the coordinator, added to its
    /// certificate (repeatable). Clients check the fixed name coordinator.plexus, so this is
    /// only needed by clients that check the address they dial.
    #[arg(long = "tls-san", value_name = "NAME")]
    tls_sans: Vec<String>,
    /// A directory shared with workers (the compose cluster's volume): ca.pem and join.token
    /// are copied there at every start, for workers to join with.
    #[arg(long, value_name = "DIR")]
    join_dir: Option<PathBuf>,
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
            let scheme = if self.insecure { "http" } else { "https" };
            format!("{scheme}://{addr}")
        })
    }
}

/// A client of the coordinator that runs on `data_dir`, authenticated as its admin: the CA and
/// the admin token from the data dir (`$PLEXUS_TOKEN` first), unless `--insecure`.
async fn admin_client(
    url: &str,
    data_dir: &std::path::Path,
    insecure: bool,
) -> anyhow::Result<JobServiceClient<InterceptedService<tonic::transport::Channel, Bearer>>> {
    let mut endpoint =
        tonic::transport::Endpoint::from_shared(url.to_string()).with_context(|| format!("{url} is not a URL"))?;
    let mut token = None;
    if !insecure {
        let ca = plexus_security::files::read(&data_dir.join(auth::CA_FILE), "reading the CA certificate")
            .map_err(anyhow::Error::msg)?;
        endpoint =
            endpoint.tls_config(plexus_security::tls::client(&ca, plexus_security::tls::COORDINATOR_NAME, None))?;
        let text = match std::env::var("PLEXUS_TOKEN") {
            Ok(t) if !t.trim().is_empty() => t,
            _ => plexus_security::files::read(
                &data_dir.join(auth::ADMIN_TOKEN_FILE),
                "reading the admin token (set PLEXUS_TOKEN to use another)",
            )
            .map_err(anyhow::Error::msg)?,
        };
        token = Some(plexus_security::Token::parse(&text).map_err(anyhow::Error::msg)?);
    }
    let channel = plexus_security::tls::connect_within(&endpoint, std::time::Duration::from_secs(5))
        .await
        .with_context(|| {
            format!(
                "the store is held by another process, and no coordinator answers at {url} (pass --coordinator URL)"
            )
        })?;
    Ok(JobServiceClient::with_interceptor(channel, Bearer::new(token.as_ref()))
        .max_decoding_message_size(plexus_proto::rules::MAX_MESSAGE))
}

type AdminClient = JobServiceClient<InterceptedService<tonic::transport::Channel, Bearer>>;

/// Asks the coordinator that holds the store; `what` names the command for the error.
fn ask_running<T>(
    args: &Args,
    what: &str,
    call: impl AsyncFnOnce(AdminClient) -> Result<T, tonic::Status>,
) -> anyhow::Result<T> {
    let url = args.coordinator_url();
    let rt =
        tokio::runtime::Builder::new_current_thread().enable_all().build().context("starting the tokio runtime")?;
    rt.block_on(async {
        let client = admin_client(&url, &args.data_dir, args.insecure).await.with_context(|| what.to_string())?;
        call(client)
            .await
            .map_err(|e| anyhow::anyhow!("{what}: the running coordinator at {url} answered: {}", e.message()))
    })
}

#[derive(Subcommand)]
enum Command {
    /// Run pending migrations of the store (they also run at every start); with `--to`, then
    /// copy the sled store in --data-dir into an empty etcd store.
    Migrate {
        /// Only list the pending migrations.
        #[arg(long)]
        dry_run: bool,
        /// Copy the state, the trust, the learned placer, the queues and the estimates into
        /// this etcd store (etcd://host:port[,…][/prefix]), which must hold no state yet.
        #[arg(long, value_name = "ETCD_URL", value_parser = parse_etcd)]
        to: Option<plexus_coordinator::etcd::EtcdUrl>,
    },
    /// The learned placer's weights, kept in the store.
    Policy {
        #[command(subcommand)]
        action: PolicyAction,
    },
    /// Bearer tokens: join tokens for workers (`--scope worker`) and user tokens. Works on the
    /// store directly, or through the running coordinator when it holds the store.
    Token {
        #[command(subcommand)]
        action: TokenAction,
    },
    /// Queues' shares of the cluster's cores: a queue over its share waits while another queue
    /// has work waiting. Works on the store, or through the running coordinator.
    Queue {
        #[command(subcommand)]
        action: QueueAction,
    },
}

#[derive(Subcommand)]
enum QueueAction {
    /// Give a queue a share of the cluster's cores (0 < share ≤ 1), or `--clear` it.
    Set {
        name: String,
        #[arg(long, required_unless_present = "clear")]
        share: Option<f64>,
        #[arg(long, conflicts_with = "share")]
        clear: bool,
    },
    /// Every queue with a share, and the cores its attempts hold.
    List,
}

#[derive(Subcommand)]
enum TokenAction {
    /// Make a token and print it (only its hash is kept: this is the one time it is shown).
    Create {
        /// read, submit, admin, or worker (a join token).
        #[arg(long, alias = "role", default_value = "worker")]
        scope: String,
        /// A label shown by `token list`.
        #[arg(long, default_value = "")]
        name: String,
        /// Expire after this long, e.g. 24h (default: never).
        #[arg(long, value_parser = humantime::parse_duration)]
        ttl: Option<std::time::Duration>,
    },
    /// List tokens (ids, scopes, names; never secrets).
    List,
    /// Revoke a token by its id: it stops working at once.
    Revoke { id: String },
    /// Revoke a worker's certificate: its next call is refused, and it must join again.
    RevokeWorker { worker_id: String },
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
    let url = url.as_str();
    if let Some(Command::Migrate { dry_run: false, to: Some(to) }) = &args.command {
        let dir = server::store_dir(&args.data_dir);
        let (store, applied) = SledStore::open_waiting(&dir, ADMIN_LOCK_WAIT)
            .with_context(|| format!("opening {} (stop its coordinator first)", dir.display()))?;
        for m in applied {
            println!("applied: {} -> {}: {} ({} records)", m.to - 1, m.to, m.name, m.records);
        }
        let copied = plexus_coordinator::etcd::copy_sled(&store, to)
            .with_context(|| format!("copying {} into {to}", dir.display()))?;
        println!("copied {} into {to}: {copied}", dir.display());
        println!("start the coordinators with --store {to}");
        return Ok(());
    }
    if let Some(Command::Migrate { dry_run, .. }) = &args.command {
        let dir = server::store_dir(&args.data_dir);
        if *dry_run {
            match SledStore::pending(&dir, ADMIN_LOCK_WAIT) {
                Ok((version, pending)) => {
                    match version {
                        None => println!(
                            "store {}: new; it will be created at schema version {}",
                            dir.display(),
                            plexus_migrations::CURRENT
                        ),
                        Some(v) => println!(
                            "store {}: schema version {v}, this binary uses {}",
                            dir.display(),
                            plexus_migrations::CURRENT
                        ),
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
                    let info = ask_running(&args, "migrate --dry-run", async |mut c| {
                        Ok(c.get_store_info(plexus_proto::pb::GetStoreInfoRequest {}).await?.into_inner())
                    })?;
                    println!(
                        "store {} (in use by the coordinator at {url}): schema version {}, this binary uses {}",
                        info.dir,
                        info.schema_version,
                        plexus_migrations::CURRENT
                    );
                    if info.schema_version == plexus_migrations::CURRENT {
                        println!("no pending migrations");
                    } else {
                        println!(
                            "the running coordinator's binary uses schema version {}; stop it to migrate to {}",
                            info.binary_version,
                            plexus_migrations::CURRENT
                        );
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
        let config = plexus_policy::PolicyConfig { seed: args.seed, ..plexus_policy::PolicyConfig::ours() };
        match SledStore::open_waiting(&dir, ADMIN_LOCK_WAIT) {
            Ok((store, _)) => {
                let policy_store = store.spaces()?.policy_store();
                let stored = policy_store.load_weights().map_err(anyhow::Error::msg)?;
                let mut policy =
                    plexus_policy::DqnPolicy::new(config, Some(policy_store.clone())).context("starting the policy")?;
                match action {
                    PolicyAction::Export { file } => {
                        export(&policy, file, stored.is_some(), &dir.display().to_string())?
                    }
                    PolicyAction::Import { file } => {
                        policy.import(file).with_context(|| format!("reading {}", file.display()))?;
                        policy_store.save_weights(&policy.weights_bytes()?).map_err(anyhow::Error::msg)?;
                        println!("imported {} into the store at {}", file.display(), dir.display());
                    }
                }
            }
            Err(plexus_coordinator::Error::Locked { .. }) => match action {
                PolicyAction::Export { file } => {
                    let weights = ask_running(&args, "policy export", async |mut c| {
                        Ok(c.export_policy(plexus_proto::pb::ExportPolicyRequest {}).await?.into_inner().weights)
                    })?;
                    // The policy is rebuilt here from the bytes the running coordinator stored.
                    let mem: std::sync::Arc<dyn plexus_policy::PolicyStore> =
                        std::sync::Arc::new(plexus_policy::MemPolicyStore::default());
                    if !weights.is_empty() {
                        mem.save_weights(&weights).map_err(anyhow::Error::msg)?;
                    }
                    let policy = plexus_policy::DqnPolicy::new(config, Some(mem)).context("starting the policy")?;
                    export(&policy, file, !weights.is_empty(), &format!("the coordinator at {url}"))?;
                }
                PolicyAction::Import { .. } => {
                    anyhow::bail!(
                        "the store at {} is in use by a running coordinator; stop it before importing weights (they are loaded at start)",
                        dir.display()
                    )
                }
            },
            Err(e) => return Err(anyhow::Error::new(e).context(format!("opening {}", dir.display()))),
        }
        return Ok(());
    }

    if let Some(Command::Token { action }) = &args.command {
        return token_command(&args, action);
    }
    if let Some(Command::Queue { action }) = &args.command {
        return queue_command(&args, action);
    }

    let security = if args.insecure {
        SecurityMode::Insecure { anywhere: args.insecure_i_know }
    } else {
        SecurityMode::Secure { names: args.tls_sans.clone(), join_dir: args.join_dir.clone() }
    };
    let config = Config {
        security,
        listen: args.listen,
        http: args.http.0,
        data_dir: args.data_dir,
        etcd: match args.store {
            StoreArg::Sled => None,
            StoreArg::Etcd(u) => Some(u),
        },
        advertise: args.advertise,
        lease_ttl: args.lease_ttl,
        placer: args.placer,
        seed: args.seed,
        core: CoreConfig {
            heartbeat_interval_ms: args.heartbeat_interval_ms,
            heartbeat_timeout_ms: args.heartbeat_timeout_ms,
            msc: args.msc.clone(),
        },
        msc: args.msc,
    };
    let rt = tokio::runtime::Runtime::new().context("starting the tokio runtime")?;
    rt.block_on(run(config, shutdown_signal()))?;
    Ok(())
}

/// `token create|list|revoke`: on the store when it is free, else through the running
/// coordinator.
fn token_command(args: &Args, action: &TokenAction) -> anyhow::Result<()> {
    let dir = server::store_dir(&args.data_dir);
    let now = plexus_proto::now_ms();
    let show = show_token;
    if let StoreArg::Etcd(url) = &args.store {
        // Every coordinator of an etcd store looks tokens up in etcd: change them there.
        let etcd = plexus_coordinator::etcd::Etcd::connect(url).with_context(|| format!("connecting to {url}"))?;
        let (security, first) =
            etcd.locked("init", || auth::Security::open(etcd.spaces().security_store(), &[], now))?;
        security.write_files(&args.data_dir, first.as_ref())?;
        return token_action(&security, action, now);
    }
    match SledStore::open_waiting(&dir, ADMIN_LOCK_WAIT) {
        Ok((store, _)) => {
            let (security, first) = auth::Security::open(store.spaces()?.security_store(), &[], now)?;
            security.write_files(&args.data_dir, first.as_ref())?;
            token_action(&security, action, now)?;
        }
        Err(plexus_coordinator::Error::Locked { .. }) => match action {
            TokenAction::Create { scope, name, ttl } => {
                let req = plexus_proto::pb::CreateTokenRequest {
                    scope: scope.clone(),
                    name: name.clone(),
                    ttl_ms: ttl.map(|d| d.as_millis() as u64).unwrap_or(0),
                };
                let r = ask_running(args, "token create", async |mut c| Ok(c.create_token(req).await?.into_inner()))?;
                println!("{}", r.token);
            }
            TokenAction::List => {
                for t in ask_running(args, "token list", async |mut c| {
                    Ok(c.list_tokens(plexus_proto::pb::ListTokensRequest {}).await?.into_inner().tokens)
                })? {
                    show(&t);
                }
            }
            TokenAction::Revoke { id } => {
                let req = plexus_proto::pb::RevokeTokenRequest { id: id.clone() };
                show(&ask_running(args, "token revoke", async |mut c| Ok(c.revoke_token(req).await?.into_inner()))?);
            }
            TokenAction::RevokeWorker { worker_id } => {
                let req = plexus_proto::pb::RevokeWorkerRequest { worker_id: worker_id.clone() };
                revoked_worker(
                    worker_id,
                    ask_running(args, "token revoke-worker", async |mut c| {
                        Ok(c.revoke_worker(req).await?.into_inner().revoked)
                    })?,
                );
            }
        },
        Err(e) => return Err(anyhow::Error::new(e).context(format!("opening {}", dir.display()))),
    }
    Ok(())
}

fn show_token(t: &plexus_proto::pb::TokenInfo) {
    let at = |ms: u64| {
        if ms == 0 {
            "-".to_string()
        } else {
            humantime::format_rfc3339_seconds(std::time::UNIX_EPOCH + std::time::Duration::from_millis(ms)).to_string()
        }
    };
    println!(
        "{}  {:<7} created {}  expires {}  revoked {}  {}",
        t.id,
        t.scope,
        at(t.created_ms),
        at(t.expires_ms),
        at(t.revoked_ms),
        t.name
    );
}

/// A token command on the store itself.
fn token_action(security: &auth::Security, action: &TokenAction, now: u64) -> anyhow::Result<()> {
    match action {
        TokenAction::Create { scope, name, ttl } => {
            let scope = scope.parse::<plexus_security::Scope>().map_err(anyhow::Error::msg)?;
            let ttl_ms = ttl.map(|d| d.as_millis() as u64).unwrap_or(0);
            let (token, _) = security.create_token(scope, name, ttl_ms, now)?;
            println!("{}", token.expose());
        }
        TokenAction::List => {
            for t in security.list_tokens()? {
                show_token(&t.info());
            }
        }
        TokenAction::Revoke { id } => show_token(&security.revoke(id, now)?.info()),
        TokenAction::RevokeWorker { worker_id } => {
            let worker = worker_id.parse::<plexus_proto::WorkerId>().map_err(anyhow::Error::msg)?;
            revoked_worker(worker_id, security.revoke_worker(worker)?);
        }
    }
    Ok(())
}

/// `queue set|list`: on the store when it is free (checked with the core's own rules), else
/// through the running coordinator, which applies it at once.
fn queue_command(args: &Args, action: &QueueAction) -> anyhow::Result<()> {
    let dir = server::store_dir(&args.data_dir);
    let show = |queues: &[plexus_proto::pb::QueueInfo]| {
        if queues.is_empty() {
            println!("no queue has a share (every queue only orders its jobs)");
        }
        for q in queues {
            println!("{:<24} share {:.3}  using {:.1} cores", q.name, q.share, q.used_cpu);
        }
    };
    let share = |s: &Option<f64>, clear: bool| if clear { None } else { *s };
    match SledStore::open_waiting(&dir, ADMIN_LOCK_WAIT) {
        Ok((store, _)) => {
            if let QueueAction::Set { name, share: s, clear } = action {
                let mut check = plexus_scheduler::core::Core::new(
                    Default::default(),
                    plexus_scheduler::placer::heuristic("least-loaded", 0).expect("a heuristic"),
                );
                check.set_queue_share(name, share(s, *clear)).map_err(anyhow::Error::msg)?;
                plexus_coordinator::store::set_queue_share(store.spaces()?.queues.as_ref(), name, share(s, *clear))?;
            }
            let queues: Vec<_> = plexus_coordinator::store::queue_shares(store.spaces()?.queues.as_ref())?
                .into_iter()
                .map(|(name, share)| plexus_proto::pb::QueueInfo { name, share, used_cpu: 0.0 })
                .collect();
            show(&queues);
        }
        Err(plexus_coordinator::Error::Locked { .. }) => {
            let queues = match action {
                QueueAction::Set { name, share: s, clear } => {
                    let req = plexus_proto::pb::SetQueueRequest {
                        name: name.clone(),
                        share: s.unwrap_or(0.0),
                        clear: *clear,
                    };
                    ask_running(args, "queue set", async |mut c| Ok(c.set_queue(req).await?.into_inner().queues))?
                }
                QueueAction::List => ask_running(args, "queue list", async |mut c| {
                    Ok(c.list_queues(plexus_proto::pb::ListQueuesRequest {}).await?.into_inner().queues)
                })?,
            };
            show(&queues);
        }
        Err(e) => return Err(anyhow::Error::new(e).context(format!("opening {}", dir.display()))),
    }
    Ok(())
}

fn revoked_worker(worker: &str, revoked: bool) {
    if revoked {
        println!("revoked the certificate of {worker}: it must join again with a join token");
    } else {
        println!("{worker} has no current certificate");
    }
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

/// `--store`: sled, or an etcd URL.
#[derive(Clone, Debug)]
enum StoreArg {
    Sled,
    Etcd(plexus_coordinator::etcd::EtcdUrl),
}

fn parse_store(s: &str) -> Result<StoreArg, String> {
    if s == "sled" || s.is_empty() {
        return Ok(StoreArg::Sled);
    }
    s.parse().map(StoreArg::Etcd).map_err(|e| format!("{e} (or `sled`, the default)"))
}

fn parse_etcd(s: &str) -> Result<plexus_coordinator::etcd::EtcdUrl, String> {
    s.parse()
}

fn parse_ttl(s: &str) -> Result<std::time::Duration, String> {
    let d = humantime::parse_duration(s).map_err(|e| format!("{e}: expected a duration such as 5s"))?;
    if d < std::time::Duration::from_secs(1) || d > std::time::Duration::from_secs(300) {
        return Err(format!("{s} is not a lease TTL: etcd leases count whole seconds, from 1s to 300s"));
    }
    if d.subsec_nanos() != 0 {
        return Err(format!("{s} is not a whole number of seconds (etcd leases count whole seconds)"));
    }
    Ok(d)
}

/// `--http`: an address, or `none`.
#[derive(Clone, Debug)]
struct HttpAddr(Option<SocketAddr>);

fn parse_http(s: &str) -> Result<HttpAddr, String> {
    if s == "none" {
        return Ok(HttpAddr(None));
    }
    s.parse()
        .map(|a| HttpAddr(Some(a)))
        .map_err(|e| format!("{e}: expected an address such as 127.0.0.1:8265, or none"))
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
