//! Starting and stopping a coordinator: open the store, restore the core, start the engine,
//! serve gRPC until shutdown.

use std::future::Future;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;

use plexus_proto::pb::job_service_server::JobServiceServer;
use plexus_proto::pb::worker_service_server::WorkerServiceServer;
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use plexus_scheduler::core::{Core, CoreConfig};
use plexus_scheduler::gpu::topology::MscCosts;

use crate::auth::{Auth, Security};
use crate::engine;
use crate::engine::EngineHandle;
use crate::error::Error;
use crate::etcd::{Etcd, EtcdUrl};
use crate::gate::GateLayer;
use crate::ha::Role;
use crate::learned;
use crate::rpc::{JobApi, WorkerApi};
use crate::store::{SledStore, Spaces, Store, store_dir};

/// Largest gRPC message either way: the one policy of coordinator, workers and clients.
pub use plexus_proto::rules::MAX_MESSAGE;

/// How long a graceful shutdown waits for requests in flight. Every request the coordinator
/// serves is short once streams are closed; five seconds covers a slow log proxy.
const SHUTDOWN_GRACE: std::time::Duration = std::time::Duration::from_secs(5);

/// How a coordinator is started.
#[derive(Clone, Debug)]
pub struct Config {
    pub listen: SocketAddr,
    /// Where to serve HTTP (`/metrics`); `None`: nowhere.
    pub http: Option<SocketAddr>,
    pub data_dir: PathBuf,
    /// `Some`: the state lives in etcd, and this coordinator is one of an HA control plane
    /// (issue 19); `None`: in sled, in the data dir.
    pub etcd: Option<EtcdUrl>,
    /// The URL workers and clients reach this coordinator at (default: the bound address).
    pub advertise: Option<String>,
    /// The TTL of the leader's lease (etcd only).
    pub lease_ttl: std::time::Duration,
    pub placer: String,
    /// Seed of the placer's random choices, so runs repeat.
    pub seed: u64,
    pub core: CoreConfig,
    pub security: SecurityMode,
    /// The model-synchronisation cost of each level of the GPU topology tree (`--msc`), for GPU
    /// gang placement (issue 16); validated when parsed.
    pub msc: MscCosts,
    /// The largest working-dir archive taken (`--working-dir-limit`), and the room for all of
    /// them (`--working-dir-store`), in bytes.
    pub working_dir_limit: u64,
    pub working_dir_store: u64,
    /// Clients are shed while commands wait longer than this for the engine (`shed`; zero:
    /// never).
    pub shed_lag: std::time::Duration,
}

/// Whether the coordinator checks its callers.
#[derive(Clone, Debug)]
pub enum SecurityMode {
    /// Mutual TLS and tokens (the default). `names`: host names and addresses besides the
    /// fixed one to put in the coordinator's certificate. `join_dir`: a directory shared with
    /// workers (the compose cluster's volume) that gets `ca.pem` and `join.token` at every start.
    Secure { names: Vec<String>, join_dir: Option<PathBuf> },
    /// No TLS, no tokens: anyone who reaches the port runs commands on every worker. Only on a
    /// loopback address, unless `anywhere` (`--insecure-i-know`).
    Insecure { anywhere: bool },
}

impl SecurityMode {
    pub fn is_secure(&self) -> bool {
        matches!(self, SecurityMode::Secure { .. })
    }
}

/// How often an insecure coordinator says so in its log.
const INSECURE_WARNING_EVERY: std::time::Duration = std::time::Duration::from_secs(60);

/// The one owner of a coordinator's shutdown. Every task `run` spawns observes `stop` (the
/// signal, the HTTP server, the insecure warning, the engine's watcher) and is awaited before
/// `run` returns; leadership (with etcd) observes `step_down`, which is cancelled only once
/// serving is over, so requests in their grace period still reach an engine.
struct Shutdown {
    stop: CancellationToken,
    step_down: CancellationToken,
    tasks: TaskTracker,
}

impl Shutdown {
    fn new() -> Shutdown {
        Shutdown { stop: CancellationToken::new(), step_down: CancellationToken::new(), tasks: TaskTracker::new() }
    }

    /// Starts the shutdown when `signal` completes (or when something else starts it).
    fn on(&self, signal: impl Future<Output = ()> + Send + 'static) {
        let stop = self.stop.clone();
        self.tasks.spawn(async move {
            tokio::select! {
                () = signal => tracing::info!("shutting down"),
                () = stop.cancelled() => {}
            }
            stop.cancel();
        });
    }

    /// Logs that the coordinator runs with `--insecure`, every [`INSECURE_WARNING_EVERY`], until
    /// the shutdown.
    fn warn_insecure(&self, addr: SocketAddr) {
        let stop = self.stop.clone();
        self.tasks.spawn(async move {
            loop {
                tracing::warn!(%addr, "running with --insecure: no TLS and no tokens; anyone who reaches this address can run commands on every worker");
                tokio::select! {
                    () = tokio::time::sleep(INSECURE_WARNING_EVERY) => {}
                    () = stop.cancelled() => return,
                }
            }
        });
    }

    /// Shuts the coordinator down when the engine thread ends by itself (a storage failure);
    /// the returned task yields the thread's outcome.
    fn watch_engine(&self, thread: EngineThread) -> tokio::task::JoinHandle<Result<(), Error>> {
        let stop = self.stop.clone();
        tokio::task::spawn_blocking(move || {
            let r = thread.join();
            if !stop.is_cancelled() {
                tracing::error!("engine stopped; shutting down");
                stop.cancel();
            }
            r.unwrap_or_else(|_| Err(Error::Engine("the engine thread panicked".into())))
        })
    }

    /// Ends every task: after serving, leadership steps down (stopping its engine and giving
    /// the lease back, so a standby leads at once), and every spawned task is awaited.
    async fn finish(self) {
        self.stop.cancel();
        self.step_down.cancel();
        self.tasks.close();
        self.tasks.wait().await;
    }
}

type EngineThread = std::thread::JoinHandle<Result<(), Error>>;

/// Where the state lives, opened: its namespaces, and the sled store or the etcd connection.
struct Opened {
    spaces: Spaces,
    sled: Option<SledStore>,
    etcd: Option<Etcd>,
}

/// Opens the store: sled in the data dir, or etcd (issue 19), whose coordinators share one CA.
async fn open_store(config: &Config) -> Result<Opened, Error> {
    match &config.etcd {
        None => {
            let (store, applied) = SledStore::open(&store_dir(&config.data_dir))?;
            for m in &applied {
                tracing::info!(to = m.to, name = m.name, records = m.records, "migration applied");
            }
            Ok(Opened { spaces: store.spaces()?, sled: Some(store), etcd: None })
        }
        Some(url) => {
            let url = url.clone();
            let etcd = tokio::task::spawn_blocking(move || Etcd::connect(&url))
                .await
                .map_err(|e| Error::Engine(e.to_string()))??;
            tracing::info!(store = %etcd.url(), "state in etcd");
            Ok(Opened { spaces: etcd.spaces(), sled: None, etcd: Some(etcd) })
        }
    }
}

/// The cluster's trust (`None` with `--insecure`): loaded or made once, its files written to the
/// data dir (and the join directory). With etcd, coordinators starting together make the CA
/// once, and check the schema, under etcd's start-up lock.
async fn open_security(config: &Config, opened: &Opened) -> Result<Option<Arc<Security>>, Error> {
    let etcd = opened.etcd.clone();
    let SecurityMode::Secure { names, join_dir } = &config.security else {
        if let Some(e) = etcd {
            tokio::task::spawn_blocking(move || e.locked("init", || e.check_version()))
                .await
                .map_err(|e| Error::Engine(e.to_string()))??;
        }
        return Ok(None);
    };
    let (store, names) = (opened.spaces.security_store(), names.clone());
    let open = move || match &etcd {
        Some(etcd) => etcd.locked("init", || {
            etcd.check_version()?;
            Security::open(store, &names, plexus_proto::now_ms())
        }),
        None => Security::open(store, &names, plexus_proto::now_ms()),
    };
    let (security, first) = tokio::task::spawn_blocking(open).await.map_err(|e| Error::Engine(e.to_string()))??;
    security.write_files(&config.data_dir, first.as_ref())?;
    if let Some(dir) = join_dir {
        security.write_join_files(&config.data_dir, dir)?;
    }
    Ok(Some(Arc::new(security)))
}

/// Serves HTTP (`/metrics`, the dashboard) until the shutdown, if asked to; the server's task
/// joins `shutdown`'s. A port that cannot be bound is logged, not fatal: the API still serves.
async fn start_http(
    config: &Config,
    handle: &EngineHandle,
    security: &Option<Arc<Security>>,
    role: &Arc<Role>,
    working_dirs: &Option<Arc<crate::working_dirs::WorkingDirs>>,
    shutdown: &Shutdown,
) {
    let Some(at) = config.http else { return };
    let stop = shutdown.stop.clone();
    let served = crate::http::serve(
        at,
        handle.clone(),
        security.clone(),
        Some(role.clone()),
        working_dirs.clone(),
        async move { stop.cancelled().await },
    )
    .await;
    match served {
        Ok((bound, task)) => {
            // After the "listening on" line, which some callers read alone before closing the
            // pipe: a closed stdout must not stop the coordinator.
            let _ =
                std::io::Write::write_fmt(&mut std::io::stdout(), format_args!("plexus-coordinator http on {bound}\n"));
            tracing::info!(%bound, "serving /metrics");
            // Awaited with the other tasks, but no longer than the grace period.
            shutdown.tasks.spawn(async move {
                let _ = tokio::time::timeout(SHUTDOWN_GRACE, task).await;
            });
        }
        // A second coordinator on one machine, or a port in use, should not stop the control
        // plane for want of metrics.
        Err(e) => {
            tracing::error!(%at, error = %e, "cannot serve HTTP (/metrics) there; pass --http ADDR (port 0: any free port) or --http none")
        }
    }
}

/// Starts leading: at once on a sled store (the engine's thread is returned), or by campaigning
/// on etcd in a task that leads, steps down and campaigns again until `step_down`.
fn start_leading(
    config: &Config,
    opened: Opened,
    term: &Arc<LeaderTerm>,
    handle: &EngineHandle,
    me: &str,
    addr: SocketAddr,
    shutdown: &Shutdown,
) -> Result<(Arc<Role>, Option<EngineThread>), Error> {
    match (opened.etcd, opened.sled) {
        (None, Some(store)) => {
            let (engine, thread) = term.start_on(Box::new(store), None)?;
            handle.replace(&engine);
            let role = Role::single(me.to_string(), format!("sled:{}", store_dir(&config.data_dir).display()));
            Ok((role, Some(thread)))
        }
        (Some(etcd), _) => {
            if config.advertise.is_none() && addr.ip().is_unspecified() {
                return Err(Error::Invalid(format!(
                    "with --store etcd:// every coordinator tells workers and clients where it is: pass --advertise URL (it listens on {addr}, which is no address to connect to)"
                )));
            }
            let role = Role::candidate(me.to_string(), etcd);
            let lead = crate::ha::lead(
                role.clone(),
                config.lease_ttl,
                handle.clone(),
                term.clone() as Arc<dyn crate::ha::Term>,
                shutdown.step_down.clone(),
            );
            shutdown.tasks.spawn(async move {
                if let Err(e) = lead.await {
                    tracing::error!(error = %e, "leadership stopped");
                }
            });
            Ok((role, None))
        }
        (None, None) => unreachable!("sled is opened when there is no etcd"),
    }
}

/// What a coordinator checks and makes before it opens its store: an insecure listener only on
/// loopback (unless told otherwise), a timing that keeps the lease contract, and an owner-only
/// data dir.
fn prepare(config: &Config) -> Result<(), Error> {
    if let SecurityMode::Insecure { anywhere: false } = config.security
        && !config.listen.ip().is_loopback()
    {
        return Err(Error::Invalid(format!(
            "--insecure lets anyone who reaches {} run commands on every worker, so it listens only on a loopback address; add --insecure-i-know to listen there anyway",
            config.listen
        )));
    }
    config.core.check()?;
    std::fs::create_dir_all(&config.data_dir)
        .map_err(|e| Error::Io(format!("creating data dir {}", config.data_dir.display()), e))?;
    // Owner-only: the CA's key, the tokens and the store are inside.
    if let Err(e) = std::fs::set_permissions(&config.data_dir, std::os::unix::fs::PermissionsExt::from_mode(0o700)) {
        tracing::warn!(dir = %config.data_dir.display(), error = %e, "cannot make the data dir owner-only (0700)");
    }
    Ok(())
}

/// Runs a coordinator until `shutdown` completes. Prints `plexus-coordinator listening on ADDR`
/// on stdout once it accepts connections (with `--listen 127.0.0.1:0` that is how a caller learns
/// the port).
pub async fn run(config: Config, shutdown: impl Future<Output = ()> + Send + 'static) -> Result<(), Error> {
    prepare(&config)?;
    let opened = open_store(&config).await?;
    let security = open_security(&config, &opened).await?;
    let store_access = crate::rpc::StoreAccess {
        dir: match &opened.etcd {
            Some(e) => e.url().to_string(),
            None => store_dir(&config.data_dir).display().to_string(),
        },
        schema_version: plexus_migrations::CURRENT,
        policy: opened.spaces.policy_store(),
        queues: Some(opened.spaces.queues.clone()),
    };
    let opened_archives = opened.spaces.archives.clone();
    // Tell the operator now, not at the first job, that the GPU costs were read.
    tracing::info!(msc = %config.msc, weights = %config.core.gpu_weights, "GPU topology costs and gang objective weights");

    let listener =
        TcpListener::bind(config.listen).await.map_err(|e| Error::Io(format!("binding {}", config.listen), e))?;
    let addr = listener.local_addr().map_err(|e| Error::Io("reading the bound address".into(), e))?;
    let me = match &config.advertise {
        Some(url) => url.clone(),
        None => format!("{}://{addr}", if config.security.is_secure() { "https" } else { "http" }),
    };
    let owner = Shutdown::new();
    let term =
        Arc::new(LeaderTerm { config: config.clone(), spaces: opened.spaces.clone(), security: security.clone() });
    let handle = EngineHandle::detached();
    let (role, engine_thread) = start_leading(&config, opened, &term, &handle, &me, addr, &owner)?;
    println!("plexus-coordinator listening on {addr}");
    tracing::info!(%addr, advertise = me, "listening");
    // Stop serving on shutdown, or when the engine stops by itself (a storage failure); with
    // etcd, an engine that stops means this coordinator is a standby again, not a shutdown.
    owner.on(shutdown);
    let engine = engine_thread.map(|t| owner.watch_engine(t));
    let working_dirs = Arc::new(crate::working_dirs::WorkingDirs::new(
        opened_archives,
        config.working_dir_limit,
        config.working_dir_store,
    ));
    start_http(&config, &handle, &security, &role, &Some(working_dirs.clone()), &owner).await;
    let job_api = JobApi::new(handle.clone())
        .with_store(store_access)
        .with_security(security.clone())
        .with_role(role.clone())
        .with_working_dirs(working_dirs.clone());
    let watch_streams = job_api.stream_stopper();
    let jobs =
        JobServiceServer::new(job_api).max_decoding_message_size(MAX_MESSAGE).max_encoding_message_size(MAX_MESSAGE);
    let worker_api = WorkerApi::new(handle.clone()).with_security(security.clone()).with_role(role.clone());
    let workers = WorkerServiceServer::new(worker_api.with_working_dirs(working_dirs))
        .max_decoding_message_size(MAX_MESSAGE)
        .max_encoding_message_size(MAX_MESSAGE);
    let mut builder = tonic::transport::Server::builder();
    match &security {
        Some(s) => builder = builder.tls_config(s.server_tls()).map_err(Error::Transport)?,
        None => owner.warn_insecure(addr),
    }
    let (stop, closer) = (owner.stop.clone(), handle.clone());
    let serve = builder
        .layer(GateLayer(crate::ha::LeaderGate::new(role.clone())))
        .layer(GateLayer(Auth::new(security)))
        .layer(GateLayer(crate::shed::Shed::new(handle.clone(), config.shed_lag)))
        .add_service(jobs)
        .add_service(workers)
        // TCP_NODELAY: assignments and replies are small messages; Nagle's algorithm with delayed
        // ACKs would hold each one back ~40 ms.
        .serve_with_incoming_shutdown(
            tonic::transport::server::TcpIncoming::from(listener).with_nodelay(Some(true)),
            async move {
                stop.cancelled().await;
                // Assignment and watch streams never end by themselves; end them so the
                // graceful shutdown has nothing to wait for.
                let _ = closer.call(|reply| crate::engine::Cmd::CloseStreams { reply }).await;
            },
        );
    // Requests in flight get a grace period once shutdown starts; past it they are dropped.
    let grace = async {
        owner.stop.cancelled().await;
        tokio::time::sleep(SHUTDOWN_GRACE).await;
    };
    let served = tokio::select! {
        r = serve => r,
        () = grace => {
            tracing::warn!("connections still open after {SHUTDOWN_GRACE:?}; stopping anyway");
            Ok(())
        }
    };
    // Watch streams still open (the grace period ran out) end now, and their tasks are awaited.
    watch_streams.stop().await;
    owner.finish().await;
    handle.stop();
    served.map_err(Error::Transport)?;
    match engine {
        None => Ok(()),
        Some(thread) => thread.await.map_err(|e| Error::Engine(e.to_string()))?,
    }
}

/// Starts an engine on a store: the placer, the state, the GPU learner, the estimates and the
/// queues' shares, loaded from it. Once for a sled store; at every term of leadership for etcd.
struct LeaderTerm {
    config: Config,
    spaces: Spaces,
    security: Option<Arc<Security>>,
}

impl LeaderTerm {
    fn start_on(
        &self,
        store: Box<dyn Store>,
        acting: Option<engine::Acting>,
    ) -> Result<(EngineHandle, EngineThread), Error> {
        let config = &self.config;
        let placer = learned::by_name(&config.placer, config.seed, Some(self.spaces.policy_store()))?;
        let started = std::time::Instant::now();
        let snapshot = store.load()?;
        let loaded = started.elapsed();
        let (jobs, workers) = (snapshot.jobs.len(), snapshot.workers.len());
        let subtasks = snapshot.subtasks.len();
        let mut core = Core::new(config.core.clone(), placer);
        // The store keeps every placement record: memory holds only unfinished subtasks' ones.
        core.spill_placements(true);
        match learned::LearnedGpu::open(Some(self.spaces.policy.clone()), config.seed) {
            Ok(gpu) => core.set_gpu_learner(Box::new(gpu)),
            Err(e) => {
                tracing::warn!(error = %e, "the GPU interference model cannot start; GPU sharing uses the contention model")
            }
        }
        core.restore(snapshot, plexus_proto::now_ms())?;
        core.set_estimates(crate::store::load_estimates(store.as_ref()));
        for (name, share) in crate::store::queue_shares(self.spaces.queues.as_ref())? {
            if let Err(e) = core.set_queue_share(&name, Some(share)) {
                tracing::warn!(queue = name, error = %e, "a stored queue share is not valid; ignored");
            }
        }
        tracing::info!(
            jobs,
            subtasks,
            workers,
            load_ms = loaded.as_millis() as u64,
            restore_ms = (started.elapsed() - loaded).as_millis() as u64,
            placer = core.placer_name(),
            estimates = core.estimates().revision(),
            "state restored"
        );
        Ok(engine::start_acting(core, store, plexus_proto::now_ms, config.http.is_some(), acting))
    }
}

impl crate::ha::Term for LeaderTerm {
    fn start(
        &self,
        store: crate::etcd::EtcdStore,
        acting: engine::Acting,
    ) -> Result<(EngineHandle, std::thread::JoinHandle<Result<(), Error>>), Error> {
        self.start_on(Box::new(store), Some(acting))
    }

    fn on_lead(&self) {
        if let Some(s) = &self.security
            && let Err(e) = s.reload_certs()
        {
            tracing::warn!(error = %e, "cannot reload the issued certificates; those known at start stay in force");
        }
    }
}
