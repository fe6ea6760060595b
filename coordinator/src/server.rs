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
use crate::learned;
use crate::rpc::{JobApi, WorkerApi};
use crate::store::{SledStore, Store};

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
    std::fs::create_dir_all(&config.data_dir).map_err(|e| Error::Io(format!("creating data dir {}", config.data_dir.display()), e))?;
    let (store, applied) = SledStore::open(&store_dir(&config.data_dir))?;
    let security = match &config.security {
        SecurityMode::Secure { names, join_dir } => {
            let (security, first) = Security::open(store.security_store()?, names, plexus_proto::now_ms())?;
            security.write_files(&config.data_dir, first.as_ref())?;
            if let Some(dir) = join_dir {
                security.write_join_files(&config.data_dir, dir)?;
            }
            Some(Arc::new(security))
        }
        SecurityMode::Insecure { .. } => None,
    };
    let policy_store = store.policy_store();
    let placer = learned::by_name(&config.placer, config.seed, Some(policy_store.clone()))?;
    let store_access = crate::rpc::StoreAccess {
        dir: store_dir(&config.data_dir).display().to_string(),
        schema_version: plexus_migrations::CURRENT,
        policy: policy_store,
        queues: store.queues_tree().map_err(|e| tracing::warn!(error = %e, "cannot open the queues tree; queue shares will not persist")).ok(),
    };
    for m in &applied {
        tracing::info!(to = m.to, name = m.name, records = m.records, "migration applied");
    }
    let snapshot = store.load()?;
    let (jobs, workers) = (snapshot.jobs.len(), snapshot.workers.len());
    let mut core = Core::new(config.core.clone(), placer);
    match learned::LearnedGpu::open(store.policy_tree(), config.seed) {
        Ok(gpu) => core.set_gpu_learner(Box::new(gpu)),
        Err(e) => tracing::warn!(error = %e, "the GPU interference model cannot start; GPU sharing uses the contention model"),
    }
    core.restore(snapshot, plexus_proto::now_ms())?;
    core.set_estimates(crate::store::load_estimates(&store));
    for (name, share) in store.queue_shares()? {
        if let Err(e) = core.set_queue_share(&name, Some(share)) {
            tracing::warn!(queue = name, error = e, "a stored queue share is not valid; ignored");
        }
    }
    tracing::info!(jobs, workers, placer = core.placer_name(), estimates = core.estimates().revision(), "state restored");
    // Not yet read by placement: GPU gang placement (issue 16, item 4) takes it from here.
    tracing::info!(msc = %config.msc, "GPU topology costs");

    let (handle, engine_thread) = engine::start_with(core, Box::new(store) as Box<dyn Store>, plexus_proto::now_ms, config.http.is_some());

    let listener = TcpListener::bind(config.listen).await.map_err(|e| Error::Io(format!("binding {}", config.listen), e))?;
    let addr = listener.local_addr().map_err(|e| Error::Io("reading the bound address".into(), e))?;
    println!("plexus-coordinator listening on {addr}");
    tracing::info!(%addr, "listening");

    // Stop serving on shutdown, or when the engine stops by itself (a storage failure).
    let (engine_done_tx, engine_done_rx) = tokio::sync::oneshot::channel::<()>();
    let engine_waiter = tokio::task::spawn_blocking(move || {
        let r = engine_thread.join();
        let _ = engine_done_tx.send(());
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
            match crate::http::serve(at, handle.clone(), security.clone(), async move {
                let _ = rx.await;
            })
            .await
            {
                Ok((bound, task)) => {
                    // After the "listening on" line, which some callers read alone before
                    // closing the pipe: a closed stdout must not stop the coordinator.
                    let _ = std::io::Write::write_fmt(&mut std::io::stdout(), format_args!("plexus-coordinator http on {bound}\n"));
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

    let job_api = JobApi::new(handle.clone()).with_store(store_access).with_security(security.clone());
    let watch_streams = job_api.stream_stopper();
    let jobs = JobServiceServer::new(job_api).max_decoding_message_size(MAX_MESSAGE).max_encoding_message_size(MAX_MESSAGE);
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
        .layer(AuthLayer::new(security))
        .add_service(jobs)
        .add_service(workers)
        // TCP_NODELAY: assignments and replies are small messages; Nagle's algorithm with delayed
        // ACKs would hold each one back ~40 ms.
        .serve_with_incoming_shutdown(tonic::transport::server::TcpIncoming::from(listener).with_nodelay(Some(true)), stop);
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
    closer_for_stop.stop();
    let engine_result = engine_waiter.await.map_err(|e| Error::Engine(e.to_string()))?;
    served.map_err(Error::Transport)?;
    match engine_result {
        Ok(r) => r,
        Err(_) => Err(Error::Engine("the engine thread panicked".into())),
    }
}
