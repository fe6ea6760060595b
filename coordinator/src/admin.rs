//! The coordinator's administrative commands: `plexus-coordinator migrate | policy | token |
//! queue`. Each acts on the store when it is free, and asks the running coordinator that holds
//! it otherwise (authenticated with the data dir's admin token and CA). The binary only parses
//! its arguments into an [`Admin`] and a [`Command`] and calls [`run`].
//!
//! Tokens are made, listed and revoked with the logic `plexus token` uses too
//! (`plexus_security::tokens`): the same default scope, the same parsing, the same output.

use std::path::{Path, PathBuf};
use std::time::Duration;

use plexus_proto::pb;
use plexus_proto::pb::job_service_client::JobServiceClient;
use plexus_security::Scope;
use plexus_security::tls::Bearer;
use plexus_security::tokens::{self, TokenInfo};
use tonic::service::interceptor::InterceptedService;

use crate::auth;
use crate::error::Error;
use crate::etcd::{Etcd, EtcdUrl};
use crate::store::{SledStore, store_dir};

/// How long an administrative command waits for the store's lock before asking the running
/// coordinator instead: a coordinator holds it for its whole life, so waiting longer gains
/// nothing, while a coordinator that is just exiting lets go within this.
const ADMIN_LOCK_WAIT: Duration = Duration::from_millis(500);

/// How long connecting to the running coordinator may take: it is on this host or near it.
const CONNECT_WITHIN: Duration = Duration::from_secs(5);

/// Where an administrative command acts.
#[derive(Clone, Debug)]
pub struct Admin {
    /// The coordinator's data dir: its sled store, CA and admin token.
    pub data_dir: PathBuf,
    /// `Some`: the state lives in this etcd store, not in the data dir's sled.
    pub etcd: Option<EtcdUrl>,
    /// The URL of the coordinator that holds the store, asked when the store is in use.
    pub coordinator: String,
    /// The coordinator runs with `--insecure`: plaintext, no token.
    pub insecure: bool,
    /// The learned placer's seed (for `policy export` of untrained weights).
    pub seed: u64,
}

/// An administrative command.
#[derive(clap::Subcommand, Clone, Debug)]
pub enum Command {
    /// Run pending migrations of the store (they also run at every start); with `--to`, then
    /// copy the sled store in --data-dir into an empty etcd store.
    Migrate {
        /// Only list the pending migrations.
        #[arg(long)]
        dry_run: bool,
        /// Copy the state, the trust, the learned placer, the queues and the estimates into
        /// this etcd store (etcd://host:port[,…][/prefix]), which must hold no state yet.
        #[arg(long, value_name = "ETCD_URL", value_parser = parse_etcd)]
        to: Option<EtcdUrl>,
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

fn parse_etcd(s: &str) -> Result<EtcdUrl, Error> {
    s.parse()
}

#[derive(clap::Subcommand, Clone, Debug)]
pub enum QueueAction {
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

#[derive(clap::Subcommand, Clone, Debug)]
pub enum TokenAction {
    /// Make a token and print it (only its hash is kept: this is the one time it is shown).
    Create {
        #[arg(
            long,
            alias = "role",
            default_value = tokens::DEFAULT_SCOPE_NAME,
            value_parser = tokens::scope,
            help = tokens::SCOPE_HELP
        )]
        scope: Scope,
        /// A label shown by `token list`.
        #[arg(long, default_value = "")]
        name: String,
        /// Expire after this long, e.g. 24h (default: never).
        #[arg(long, value_parser = humantime::parse_duration)]
        ttl: Option<Duration>,
    },
    /// List tokens (ids, scopes, names; never secrets).
    List,
    /// Revoke a token by its id: it stops working at once.
    Revoke { id: String },
    /// Revoke a worker's certificate: its next call is refused, and it must join again.
    RevokeWorker { worker_id: String },
}

#[derive(clap::Subcommand, Clone, Debug)]
pub enum PolicyAction {
    /// Write the stored weights to a safetensors file.
    Export { file: PathBuf },
    /// Replace the stored weights with those of a safetensors file (made by `export`).
    Import { file: PathBuf },
}

/// Runs `command`, printing what it did on stdout.
pub fn run(admin: &Admin, command: &Command) -> Result<(), Error> {
    match command {
        Command::Migrate { dry_run: false, to: Some(to) } => copy_to_etcd(admin, to),
        Command::Migrate { dry_run: true, .. } => migrate_dry_run(admin),
        Command::Migrate { dry_run: false, to: None } => migrate(admin),
        Command::Policy { action } => policy(admin, action),
        Command::Token { action } => token(admin, action),
        Command::Queue { action } => queue(admin, action),
    }
}

/// `what` failed because of `source`.
fn context(what: impl Into<String>) -> impl FnOnce(Error) -> Error {
    let what = what.into();
    move |source| Error::Context { what, source: Box::new(source) }
}

type AdminClient = JobServiceClient<InterceptedService<tonic::transport::Channel, Bearer>>;

/// A client of the coordinator that runs on the data dir, authenticated as its admin: the CA and
/// the admin token from the data dir (`$PLEXUS_TOKEN` first), unless `--insecure`.
async fn admin_client(admin: &Admin) -> Result<AdminClient, Error> {
    let url = &admin.coordinator;
    let mut endpoint = tonic::transport::Endpoint::from_shared(url.to_string())
        .map_err(|e| Error::Invalid(format!("{url} is not a URL: {e}")))?;
    let mut token = None;
    if !admin.insecure {
        let ca = plexus_security::files::read(&admin.data_dir.join(auth::CA_FILE), "reading the CA certificate")
            .map_err(Error::Credentials)?;
        endpoint = endpoint
            .tls_config(plexus_security::tls::client(&ca, plexus_security::tls::COORDINATOR_NAME, None))
            .map_err(Error::Transport)?;
        let text = match std::env::var("PLEXUS_TOKEN") {
            Ok(t) if !t.trim().is_empty() => t,
            _ => plexus_security::files::read(
                &admin.data_dir.join(auth::ADMIN_TOKEN_FILE),
                "reading the admin token (set PLEXUS_TOKEN to use another)",
            )
            .map_err(Error::Credentials)?,
        };
        token = Some(plexus_security::Token::parse(&text).map_err(Error::Credentials)?);
    }
    let channel = plexus_security::tls::connect_within(&endpoint, CONNECT_WITHIN)
        .await
        .map_err(|e| Error::Unreachable { url: url.clone(), reason: e.to_string() })?;
    Ok(JobServiceClient::with_interceptor(channel, Bearer::new(token.as_ref()))
        .max_decoding_message_size(plexus_proto::rules::MAX_MESSAGE))
}

/// Asks the coordinator that holds the store; `what` names the command for the error.
fn ask_running<T>(
    admin: &Admin,
    what: &str,
    call: impl AsyncFnOnce(AdminClient) -> Result<T, tonic::Status>,
) -> Result<T, Error> {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| Error::Io("starting the tokio runtime".into(), e))?;
    rt.block_on(async {
        let client = admin_client(admin).await.map_err(context(what))?;
        call(client).await.map_err(|e| Error::Remote {
            what: what.to_string(),
            url: admin.coordinator.clone(),
            message: e.message().to_string(),
        })
    })
}

/// Opens the data dir's sled store, waiting briefly for a coordinator that is exiting.
fn open_sled(dir: &Path) -> Result<Option<SledStore>, Error> {
    match SledStore::open_waiting(dir, ADMIN_LOCK_WAIT) {
        Ok((store, _)) => Ok(Some(store)),
        Err(Error::Locked { .. }) => Ok(None),
        Err(e) => Err(context(format!("opening {}", dir.display()))(e)),
    }
}

fn print_applied(applied: &[plexus_migrations::Applied]) {
    for m in applied {
        println!("applied: {} -> {}: {} ({} records)", m.to - 1, m.to, m.name, m.records);
    }
}

/// `migrate --to etcd://…`: migrates the sled store, then copies it into an empty etcd store.
fn copy_to_etcd(admin: &Admin, to: &EtcdUrl) -> Result<(), Error> {
    let dir = store_dir(&admin.data_dir);
    let (store, applied) = SledStore::open_waiting(&dir, ADMIN_LOCK_WAIT)
        .map_err(context(format!("opening {} (stop its coordinator first)", dir.display())))?;
    print_applied(&applied);
    let copied = crate::etcd::copy_sled(&store, to).map_err(context(format!("copying {} into {to}", dir.display())))?;
    println!("copied {} into {to}: {copied}", dir.display());
    println!("start the coordinators with --store {to}");
    Ok(())
}

fn migrate(admin: &Admin) -> Result<(), Error> {
    let dir = store_dir(&admin.data_dir);
    let (_, applied) = SledStore::open(&dir).map_err(context(format!("opening {}", dir.display())))?;
    if applied.is_empty() {
        println!("no pending migrations");
    }
    print_applied(&applied);
    Ok(())
}

fn migrate_dry_run(admin: &Admin) -> Result<(), Error> {
    let dir = store_dir(&admin.data_dir);
    let current = plexus_migrations::CURRENT;
    match SledStore::pending(&dir, ADMIN_LOCK_WAIT) {
        Ok((version, pending)) => {
            match version {
                None => println!("store {}: new; it will be created at schema version {current}", dir.display()),
                Some(v) => println!("store {}: schema version {v}, this binary uses {current}", dir.display()),
            }
            if pending.is_empty() {
                println!("no pending migrations");
            }
            for m in pending {
                println!("pending: {} -> {}: {}", m.to - 1, m.to, m.name);
            }
        }
        Err(Error::Locked { .. }) => {
            // The running coordinator migrated its store when it started.
            let info = ask_running(admin, "migrate --dry-run", async |mut c| {
                Ok(c.get_store_info(pb::GetStoreInfoRequest {}).await?.into_inner())
            })?;
            println!(
                "store {} (in use by the coordinator at {}): schema version {}, this binary uses {current}",
                info.dir, admin.coordinator, info.schema_version
            );
            if info.schema_version == current {
                println!("no pending migrations");
            } else {
                println!(
                    "the running coordinator's binary uses schema version {}; stop it to migrate to {current}",
                    info.binary_version
                );
            }
        }
        Err(e) => return Err(context(format!("opening {}", dir.display()))(e)),
    }
    Ok(())
}

fn policy(admin: &Admin, action: &PolicyAction) -> Result<(), Error> {
    let dir = store_dir(&admin.data_dir);
    let config = plexus_policy::PolicyConfig { seed: admin.seed, ..plexus_policy::PolicyConfig::ours() };
    let Some(store) = open_sled(&dir)? else {
        return match action {
            PolicyAction::Export { file } => {
                let weights = ask_running(admin, "policy export", async |mut c| {
                    Ok(c.export_policy(pb::ExportPolicyRequest {}).await?.into_inner().weights)
                })?;
                // The policy is rebuilt here from the bytes the running coordinator stored.
                let mem: std::sync::Arc<dyn plexus_policy::PolicyStore> =
                    std::sync::Arc::new(plexus_policy::MemPolicyStore::default());
                if !weights.is_empty() {
                    mem.save_weights(&weights).map_err(Error::PolicyStore)?;
                }
                let policy = plexus_policy::DqnPolicy::new(config, Some(mem))?;
                export(&policy, file, !weights.is_empty(), &format!("the coordinator at {}", admin.coordinator))
            }
            PolicyAction::Import { .. } => Err(Error::Invalid(format!(
                "the store at {} is in use by a running coordinator; stop it before importing weights (they are loaded at start)",
                dir.display()
            ))),
        };
    };
    let policy_store = store.spaces()?.policy_store();
    let stored = policy_store.load_weights().map_err(Error::PolicyStore)?;
    let mut policy = plexus_policy::DqnPolicy::new(config, Some(policy_store.clone()))?;
    match action {
        PolicyAction::Export { file } => export(&policy, file, stored.is_some(), &dir.display().to_string()),
        PolicyAction::Import { file } => {
            policy.import(file).map_err(|e| context(format!("reading {}", file.display()))(e.into()))?;
            policy_store.save_weights(&policy.weights_bytes()?).map_err(Error::PolicyStore)?;
            println!("imported {} into the store at {}", file.display(), dir.display());
            Ok(())
        }
    }
}

/// Writes the policy's weights as safetensors; without stored weights (no training step has run
/// yet) they are the initial, seeded ones, and the note says so.
fn export(policy: &plexus_policy::DqnPolicy, file: &Path, trained: bool, from: &str) -> Result<(), Error> {
    policy.export(file).map_err(|e| context(format!("writing {}", file.display()))(e.into()))?;
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

/// `token create|list|revoke|revoke-worker`: on the store when it is free (with etcd, always:
/// every coordinator looks tokens up there), else through the running coordinator.
fn token(admin: &Admin, action: &TokenAction) -> Result<(), Error> {
    let now = plexus_proto::now_ms();
    if let Some(url) = &admin.etcd {
        let etcd = Etcd::connect(url).map_err(context(format!("connecting to {url}")))?;
        let (security, first) =
            etcd.locked("init", || auth::Security::open(etcd.spaces().security_store(), &[], now))?;
        security.write_files(&admin.data_dir, first.as_ref())?;
        return token_on_store(&security, action, now);
    }
    if let Some(store) = open_sled(&store_dir(&admin.data_dir))? {
        let (security, first) = auth::Security::open(store.spaces()?.security_store(), &[], now)?;
        security.write_files(&admin.data_dir, first.as_ref())?;
        return token_on_store(&security, action, now);
    }
    match action {
        TokenAction::Create { scope, name, ttl } => {
            let req =
                pb::CreateTokenRequest { scope: scope.to_string(), name: name.clone(), ttl_ms: tokens::ttl_ms(*ttl) };
            let r = ask_running(admin, "token create", async |mut c| Ok(c.create_token(req).await?.into_inner()))?;
            println!("{}", r.token);
        }
        TokenAction::List => {
            let list = ask_running(admin, "token list", async |mut c| {
                Ok(c.list_tokens(pb::ListTokensRequest {}).await?.into_inner().tokens)
            })?;
            let list: Vec<TokenInfo> = list.iter().map(TokenInfo::from).collect();
            print!("{}", tokens::table(&list, now));
        }
        TokenAction::Revoke { id } => {
            let req = pb::RevokeTokenRequest { id: id.clone() };
            let t = ask_running(admin, "token revoke", async |mut c| Ok(c.revoke_token(req).await?.into_inner()))?;
            print!("{}", tokens::revoked(&TokenInfo::from(&t)));
        }
        TokenAction::RevokeWorker { worker_id } => {
            let req = pb::RevokeWorkerRequest { worker_id: worker_id.clone() };
            let revoked = ask_running(admin, "token revoke-worker", async |mut c| {
                Ok(c.revoke_worker(req).await?.into_inner().revoked)
            })?;
            revoked_worker(worker_id, revoked);
        }
    }
    Ok(())
}

/// A token command on the store itself.
fn token_on_store(security: &auth::Security, action: &TokenAction, now: u64) -> Result<(), Error> {
    match action {
        TokenAction::Create { scope, name, ttl } => {
            let (token, _) = security.create_token(*scope, name, tokens::ttl_ms(*ttl), now)?;
            println!("{}", token.expose());
        }
        TokenAction::List => {
            let list: Vec<TokenInfo> = security.list_tokens()?.iter().map(auth::TokenRecord::info).collect();
            print!("{}", tokens::table(&list, now));
        }
        TokenAction::Revoke { id } => print!("{}", tokens::revoked(&security.revoke(id, now)?.info())),
        TokenAction::RevokeWorker { worker_id } => {
            let worker = worker_id
                .parse::<plexus_proto::WorkerId>()
                .map_err(|e| Error::Invalid(format!("{worker_id:?} is not a worker id: {e}")))?;
            revoked_worker(worker_id, security.revoke_worker(worker)?);
        }
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

/// `queue set|list`: on the store when it is free (checked with the core's own rules), else
/// through the running coordinator, which applies it at once.
fn queue(admin: &Admin, action: &QueueAction) -> Result<(), Error> {
    let show = |queues: &[(String, f64, f64)]| {
        if queues.is_empty() {
            println!("no queue has a share (every queue only orders its jobs)");
        }
        for (name, share, used) in queues {
            println!("{name:<24} share {share:.3}  using {used:.1} cores");
        }
    };
    let share = |s: &Option<f64>, clear: bool| if clear { None } else { *s };
    let Some(store) = open_sled(&store_dir(&admin.data_dir))? else {
        let queues = match action {
            QueueAction::Set { name, share: s, clear } => {
                let req = pb::SetQueueRequest { name: name.clone(), share: s.unwrap_or(0.0), clear: *clear };
                ask_running(admin, "queue set", async |mut c| Ok(c.set_queue(req).await?.into_inner().queues))?
            }
            QueueAction::List => ask_running(admin, "queue list", async |mut c| {
                Ok(c.list_queues(pb::ListQueuesRequest {}).await?.into_inner().queues)
            })?,
        };
        show(&queues.into_iter().map(|q| (q.name, q.share, q.used_cpu)).collect::<Vec<_>>());
        return Ok(());
    };
    let spaces = store.spaces()?;
    if let QueueAction::Set { name, share: s, clear } = action {
        // The core's own check of a share, so the store never holds one it would refuse.
        let mut check = plexus_scheduler::core::Core::new(
            Default::default(),
            plexus_scheduler::placer::heuristic("least-loaded", 0).expect("a heuristic"),
        );
        check.set_queue_share(name, share(s, *clear)).map_err(|e| Error::Invalid(e.to_string()))?;
        crate::store::set_queue_share(spaces.queues.as_ref(), name, share(s, *clear))?;
    }
    let queues = crate::store::queue_shares(spaces.queues.as_ref())?;
    show(&queues.into_iter().map(|(name, share)| (name, share, 0.0)).collect::<Vec<_>>());
    Ok(())
}
