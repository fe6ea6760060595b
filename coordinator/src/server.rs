//! Starting and stopping a coordinator: open the store, restore the core, start the engine,
//! serve gRPC until shutdown.

use std::future::Future;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;

use plexus_proto::pb::job_service_server::JobServiceServer;
use plexus_proto::pb::worker_service_server::WorkerServiceServer;
use tokio::net::TcpListener;

use plexus_scheduler::core::{Core, CoreConfig};
use plexus_scheduler::gpu::topology::MscCosts;

use crate::Error;
use crate::auth::{AuthLayer, Security};
use crate::engine;
use crate::engine::EngineHandle;
use crate::etcd::{Etcd, EtcdUrl};
use crate::ha::Role;
use crate::learned;
use crate::rpc::{JobApi, WorkerApi};
use crate::store::{SledStore, Spaces, Store};

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

/// Where the sled database lives inside the data dir.
pub fn store_dir(data_dir: &std::path::Path) -> PathBuf {
    data_dir.join("state.sled")
}

/// Runs a coordinator until `shutdown` completes. Prints `plexus-coordinator listening on ADDR`
/// on stdout once it accepts connections (with `--listen 127.0.0.1:0` that is how a caller learns
/// the port).
pub async fn run(config: Config, shutdown: impl Future<Output = ()> + Send + 'static) -> Result<(), Error> {
    if let SecurityMode::Insecure { anywhere: false } = config.security
        && !config.listen.ip().is_loopback()
    {
        return Err(Error::Invalid(format!(
            "--insecure lets anyone who reaches {} run commands on every worker, so it listens only on a loopback address; add --insecure-i-know to listen there anyway",
            config.listen
        )));
    }
    std::fs::create_dir_all(&config.data_dir)
        .map_err(|e| Error::Io(format!("creating data dir {}", config.data_dir.display()), e))?;
    // The store: sled in the data dir, or etcd (issue 19), whose coordinators share one CA.
    let (spaces, sled_store, etcd) = match &config.etcd {
        None => {
            let (store, applied) = SledStore::open(&store_dir(&config.data_dir))?;
            for m in &applied {
                tracing::info!(to = m.to, name = m.name, records = m.records, "migration applied");
            }
            (store.spaces()?, Some(store), None)
        }
        Some(url) => {
            let url = url.clone();
            let etcd = tokio::task::spawn_blocking(move || Etcd::connect(&url))
                .await
                .map_err(|e| Error::Engine(e.to_string()))??;
            tracing::info!(store = %etcd.url(), "state in etcd");
            (etcd.spaces(), None, Some(etcd))
        }
    };
    let security = match &config.security {
        SecurityMode::Secure { names, join_dir } => {
            let open = {
                let (store, names, etcd) = (spaces.security_store(), names.clone(), etcd.clone());
                move || match &etcd {
                    // Coordinators starting together make the CA once, and check the schema.
                    Some(etcd) => etcd.locked("init", || {
                        etcd.check_version()?;
                        Security::open(store, &names, plexus_proto::now_ms())
                    }),
                    None => Security::open(store, &names, plexus_proto::now_ms()),
                }
            };
            let (security, first) =
                tokio::task::spawn_blocking(open).await.map_err(|e| Error::Engine(e.to_string()))??;
            security.write_files(&config.data_dir, first.as_ref())?;
            if let Some(dir) = join_dir {
                security.write_join_files(&config.data_dir, dir)?;
            }
            Some(Arc::new(security))
        }
        SecurityMode::Insecure { .. } => {
            if let Some(etcd) = &etcd {
                let e = etcd.clone();
                tokio::task::spawn_blocking(move || e.locked("init", || e.check_version()))
                    .await
                    .map_err(|e| Error::Engine(e.to_string()))??;
            }
            None
        }
    };
    let store_access = crate::rpc::StoreAccess {
        dir: match &etcd {
            Some(e) => e.url().to_string(),
            None => store_dir(&config.data_dir).display().to_string(),
        },
        schema_version: plexus_migrations::CURRENT,
        policy: spaces.policy_store(),
        queues: Some(spaces.queues.clone()),
    };
    // Tell the operator now, not at the first job, that the GPU costs were read.
    tracing::info!(msc = %config.msc, "GPU topology costs");

    let listener =
        TcpListener::bind(config.listen).await.map_err(|e| Error::Io(format!("binding {}", config.listen), e))?;
    let addr = listener.local_addr().map_err(|e| Error::Io("reading the bound address".into(), e))?;
    let me = match &config.advertise {
        Some(url) => url.clone(),
        None => format!("{}://{addr}", if config.security.is_secure() { "https" } else { "http" }),
    };
    let term = Arc::new(LeaderTerm { config: config.clone(), spaces: spaces.clone(), security: security.clone() });
    let handle = EngineHandle::detached();
    let (role, leadership, engine_thread) = match (&etcd, sled_store) {
        (None, Some(store)) => {
            let (engine, thread) = term.start_on(Box::new(store))?;
            handle.replace(&engine);
            (Role::single(me.clone(), format!("sled:{}", store_dir(&config.data_dir).display())), None, Some(thread))
        }
        (Some(etcd), _) => {
            if config.advertise.is_none() && addr.ip().is_unspecified() {
                return Err(Error::Invalid(format!(
                    "with --store etcd:// every coordinator tells workers and clients where it is: pass --advertise URL (it listens on {addr}, which is no address to connect to)"
                )));
            }
            let role = Role::candidate(me.clone(), etcd.clone());
            let cancel = tokio_util::sync::CancellationToken::new();
            let task = tokio::spawn(crate::ha::lead(
                role.clone(),
                config.lease_ttl,
                handle.clone(),
                term.clone() as Arc<dyn crate::ha::Term>,
                cancel.clone(),
            ));
            (role, Some((cancel, task)), None)
        }
        (None, None) => unreachable!("sled is opened when there is no etcd"),
    };
    println!("plexus-coordinator listening on {addr}");
    tracing::info!(%addr, advertise = me, "listening");

    // Stop serving on shutdown, or when the engine stops by itself (a storage failure); with
    // etcd, an engine that stops means this coordinator is a standby again, not a shutdown.
    let (engine_done_tx, engine_done_rx) = tokio::sync::oneshot::channel::<()>();
    let engine_waiter = tokio::task::spawn_blocking(move || {
        let r = engine_thread.map(|t| t.join());
        if r.is_some() {
            let _ = engine_done_tx.send(());
        } else {
            // Held open until shutdown, so the select below never sees it end.
            std::mem::forget(engine_done_tx);
        }
        r
    });
    let (stopping_tx, stopping_rx) = tokio::sync::oneshot::channel::<()>();
    let closer = handle.clone();
    let closer_for_stop = handle.clone();
    let stop = async move {
        tokio::select! {
            _ = shutdown => tracing::info!("shutting down"),
            _ = engine_done_rx => tracing::error!("engine stopped; shutting down"),
        }
        // Assignment and watch streams never end by themselves; end them so the graceful
        // shutdown below has nothing to wait for.
        let _ = closer.call(|reply| crate::engine::Cmd::CloseStreams { reply }).await;
        let _ = stopping_tx.send(());
    };

    let http = match config.http {
        Some(at) => {
            let (tx, rx) = tokio::sync::oneshot::channel::<()>();
            match crate::http::serve(at, handle.clone(), security.clone(), Some(role.clone()), async move {
                let _ = rx.await;
            })
            .await
            {
                Ok((bound, task)) => {
                    // After the "listening on" line, which some callers read alone before
                    // closing the pipe: a closed stdout must not stop the coordinator.
                    let _ = std::io::Write::write_fmt(
                        &mut std::io::stdout(),
                        format_args!("plexus-coordinator http on {bound}\n"),
                    );
                    tracing::info!(%bound, "serving /metrics");
                    Some((tx, task))
                }
                // The API still serves: a second coordinator on one machine, or a port in use,
                // should not stop the control plane for want of metrics.
                Err(e) => {
                    tracing::error!(%at, error = %e, "cannot serve HTTP (/metrics) there; pass --http ADDR (port 0: any free port) or --http none");
                    None
                }
            }
        }
        None => None,
    };

    let job_api =
        JobApi::new(handle.clone()).with_store(store_access).with_security(security.clone()).with_role(role.clone());
    let watch_streams = job_api.stream_stopper();
    let jobs =
        JobServiceServer::new(job_api).max_decoding_message_size(MAX_MESSAGE).max_encoding_message_size(MAX_MESSAGE);
    let workers = WorkerServiceServer::new(WorkerApi::new(handle).with_security(security.clone()))
        .max_decoding_message_size(MAX_MESSAGE)
        .max_encoding_message_size(MAX_MESSAGE);
    let mut builder = tonic::transport::Server::builder();
    let warner = match &security {
        Some(s) => {
            builder = builder.tls_config(s.server_tls()).map_err(Error::Transport)?;
            None
        }
        None => Some(tokio::spawn(async move {
            loop {
                tracing::warn!(%addr, "running with --insecure: no TLS and no tokens; anyone who reaches this address can run commands on every worker");
                tokio::time::sleep(INSECURE_WARNING_EVERY).await;
            }
        })),
    };
    let serve = builder
        .layer(crate::ha::LeaderGate::new(role.clone()))
        .layer(AuthLayer::new(security))
        .add_service(jobs)
        .add_service(workers)
        // TCP_NODELAY: assignments and replies are small messages; Nagle's algorithm with delayed
        // ACKs would hold each one back ~40 ms.
        .serve_with_incoming_shutdown(
            tonic::transport::server::TcpIncoming::from(listener).with_nodelay(Some(true)),
            stop,
        );
    // Requests in flight get a grace period once shutdown starts; past it they are dropped.
    let grace = async {
        let _ = stopping_rx.await;
        tokio::time::sleep(SHUTDOWN_GRACE).await;
    };
    let served = tokio::select! {
        r = serve => r,
        _ = grace => {
            tracing::warn!("connections still open after {SHUTDOWN_GRACE:?}; stopping anyway");
            Ok(())
        }
    };
    if let Some(w) = warner {
        w.abort();
    }
    if let Some((stop_http, task)) = http {
        let _ = stop_http.send(());
        let _ = tokio::time::timeout(SHUTDOWN_GRACE, task).await;
    }
    // Watch streams still open (the grace period ran out) end now, and their tasks are awaited.
    watch_streams.stop().await;
    if let Some((cancel, task)) = leadership {
        // Steps down (stopping the engine) and gives the lease back, so a standby leads now.
        cancel.cancel();
        let _ = task.await;
    }
    closer_for_stop.stop();
    served.map_err(Error::Transport)?;
    match engine_waiter.await.map_err(|e| Error::Engine(e.to_string()))? {
        None => Ok(()),
        Some(Ok(r)) => r,
        Some(Err(_)) => Err(Error::Engine("the engine thread panicked".into())),
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
    ) -> Result<(EngineHandle, std::thread::JoinHandle<Result<(), Error>>), Error> {
        let config = &self.config;
        let placer = learned::by_name(&config.placer, config.seed, Some(self.spaces.policy_store()))?;
        let snapshot = store.load()?;
        let (jobs, workers) = (snapshot.jobs.len(), snapshot.workers.len());
        let mut core = Core::new(config.core.clone(), placer);
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
            workers,
            placer = core.placer_name(),
            estimates = core.estimates().revision(),
            "state restored"
        );
        Ok(engine::start_with(core, store, plexus_proto::now_ms, config.http.is_some()))
    }
}

impl crate::ha::Term for LeaderTerm {
    fn start(
        &self,
        store: crate::etcd::EtcdStore,
    ) -> Result<(EngineHandle, std::thread::JoinHandle<Result<(), Error>>), Error> {
        self.start_on(Box::new(store))
    }

    fn on_lead(&self) {
        if let Some(s) = &self.security
            && let Err(e) = s.reload_certs()
        {
            tracing::warn!(error = %e, "cannot reload the issued certificates; those known at start stay in force");
        }
    }
}
