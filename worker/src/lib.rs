//! The Plexus worker: the agent on every node that registers with the coordinator, runs the
//! attempts placed on it, keeps an object cache, and serves objects and logs to its peers.
//!
//! # Layout
//! - [`config`]: the command line and the resolved [`Config`].
//! - [`error`]: the library's error type.
//! - [`layout`]: where everything lives under the data dir (the one place that builds paths).
//! - [`isolation`]: confining subtasks (a cgroup per attempt, v2 or v1, or a recorded process
//!   group), their cpu and memory limits, and killing what a previous process left running.
//! - [`node`]: capacity detection (cores, memory, GPUs via `nvidia-smi`, hostname), `--gpus`, and
//!   the CPU and GPU samplers.
//! - [`cache`]: the bounded, LRU-evicted object cache with pinning.
//! - [`logs`]: reading the tails of attempt logs.
//! - [`peer`]: the PeerService server (objects, logs) and the object-fetch client: objects move
//!   over the data plane ([`plexus_dataplane::Endpoint`], striped over the node's rails), with
//!   a gRPC stream as the fallback.
//! - [`attempts`]: which attempts this process knows, and the batched report queue.
//! - [`runner`]: running an assignment (built-in kinds and commands).
//! - [`session`]: the coordinator connection (register, assignments, heartbeats, reports) and
//!   its reconnect loop; it renews the [`lease`] and fences attempts when the lease runs out.
//! - [`lease`]: the worker's lease with its coordinator, on the boot clock.
//! - [`shim`]: each command attempt's supervisor, which kills it when the worker dies or its
//!   lease runs out.
//!
//! [`run`] ties these together: [`Worker::start`] locks the data dir, kills what a previous
//! process on it left running, then brings everything up; [`Worker::shutdown`] kills every
//! running attempt (its whole cgroup) and stops the servers.

pub mod attempts;
pub mod cache;
pub mod config;
pub mod container;
pub mod credentials;
pub mod error;
pub mod exchange;
pub mod gang_endpoint;
pub mod isolation;
pub mod layout;
pub mod lease;
pub mod logs;
pub mod metrics;
pub mod node;
pub mod peer;
pub mod python_env;
pub mod runner;
pub mod session;
pub mod shim;
pub mod tuning;
pub mod working_dir;

use std::future::Future;
use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;
use std::time::Duration;

use plexus_proto::{WorkerId, pb};
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;
use tracing::{info, warn};

pub use config::{Args, Config};
pub use error::{Error, Result};

use crate::attempts::Attempts;
use crate::cache::Cache;
use crate::isolation::{Isolation, TaskUsers};
use crate::layout::Layout;
use crate::node::{CpuSampler, GpuDevice, GpuSampler};
use crate::peer::PeerServer;
use crate::runner::{NodeGpus, Runner};
use crate::session::Session;

/// How long the PeerService may take to finish the transfers in progress at shutdown before it is
/// abandoned: a peer fetching a large object should not delay a SIGTERM for long.
const SERVER_STOP_TIMEOUT: Duration = Duration::from_secs(5);

/// How often the GPUs' load is sampled for the heartbeats: nvidia-smi takes tens of
/// milliseconds, and placement needs a GPU's load to within seconds, not to each heartbeat.
const GPU_SAMPLE_INTERVAL: Duration = Duration::from_secs(2);

/// A running worker. [`Worker::shutdown`] is how it should end; merely dropping it cancels
/// everything (attempt process groups are killed by their tasks) without waiting for it.
#[derive(Debug)]
pub struct Worker {
    _cancel_on_drop: tokio_util::sync::DropGuard,
    worker_id: WorkerId,
    session: String,
    peer_addr: String,
    local_addr: SocketAddr,
    shutdown: CancellationToken,
    attempt_tasks: TaskTracker,
    session_task: JoinHandle<()>,
    server_task: JoinHandle<Result<()>>,
    gpu_task: JoinHandle<()>,
    /// How attempts are confined; its parent cgroups are removed at shutdown.
    isolation: Arc<Isolation>,
    /// The data dir's lock, held for the life of the process (closing the file releases it).
    _lock: std::fs::File,
    /// The data-plane endpoint the session, the runner and the PeerService share; stopped and
    /// awaited last, when nothing uses it any more.
    rails: Arc<plexus_dataplane::Endpoint>,
    /// Where `/metrics` is served, if anywhere.
    metrics_addr: Option<SocketAddr>,
}

impl Worker {
    /// Locks the data dir, kills whatever a previous worker process on it left running, prepares
    /// it, opens the cache, binds the PeerService and starts talking to the coordinator (in the
    /// background; an unreachable coordinator is retried forever).
    pub async fn start(config: Config) -> Result<Worker> {
        let coordinator = config::normalise_urls("the coordinator URL", &config.coordinator, config.trust.insecure)?;
        let data_dir = std::path::absolute(&config.data_dir).map_err(Error::io("resolve", &config.data_dir))?;
        let layout = Layout::new(data_dir);
        std::fs::create_dir_all(layout.root()).map_err(Error::io("create", layout.root()))?;
        let users = task_users(&config, &layout)?;
        // Before anything in the dir is touched: a second worker on it must not clear the first
        // one's work dirs, or register with its id.
        let lock = lock_data_dir(&layout)?;
        let worker_id = load_or_create_worker_id(&layout)?;
        let isolation = {
            let (choice, id, records) = (config.isolation, worker_id.to_string(), layout.pid_records_dir());
            // Blocking: creating cgroups, and killing a previous process's leftovers, which waits
            // until they are gone. All of it before registering, so no attempt of this worker's
            // id ever runs twice on this node.
            tokio::task::spawn_blocking(move || {
                let iso = Isolation::setup(choice, &id, records)?;
                let reaped = iso.reap_leftovers();
                Ok::<_, Error>((iso, reaped))
            })
            .await??
        };
        let (isolation, reaped) = (Arc::new(isolation.0), isolation.1);
        if reaped > 0 {
            warn!(reaped, "killed processes that a previous worker process on this data dir left running");
        }
        if let Some(why) = isolation.fallback_reason() {
            warn!(
                reason = why,
                "no cgroup could be made: subtasks run as process groups, without cpu or memory limits, \
                 and a daemon that calls setsid escapes the kill at their end"
            );
        }
        match (isolation.mode(), isolation.fallback_reason()) {
            (isolation::Mode::ProcessGroup, None) => warn!(
                "subtasks run as process groups (--isolation process-group): without cpu or memory limits, \
                 and a daemon that calls setsid escapes the kill at their end"
            ),
            (isolation::Mode::ProcessGroup, Some(_)) => {}
            (mode, _) => isolation.gaps().iter().for_each(|gap| warn!(%mode, "not enforced: {gap}")),
        }
        match Worker::bring_up(config, coordinator, layout, lock, worker_id, Arc::clone(&isolation), users).await {
            Ok(w) => Ok(w),
            Err(e) => {
                close_isolation(&isolation).await;
                Err(e)
            }
        }
    }

    /// The rest of [`Worker::start`], once the data dir is locked and the isolation ready: the
    /// steps in order, each a function below.
    async fn bring_up(
        config: Config,
        coordinator: String,
        layout: Layout,
        lock: std::fs::File,
        worker_id: WorkerId,
        isolation: Arc<Isolation>,
        users: Arc<TaskUsers>,
    ) -> Result<Worker> {
        prepare_data_dir(&layout)?;
        // Before anything listens: a worker of a secure cluster serves peers only over TLS.
        let credentials = credentials::obtain(&config.trust, &layout, worker_id, &coordinator).await?;
        let session = uuid::Uuid::new_v4().to_string();
        let cache = Cache::open(layout.cache_dir(), config.cache_bytes)?;
        let (listener, local_addr) = bind_peer_listener(config.listen).await?;
        let peer_addr = match &config.advertise {
            Some(url) => url.clone(),
            None => default_advertise(local_addr, &config.rails, credentials.is_some()),
        };
        let rails = bind_rails(&config, credentials.is_some()).await?;
        let gpus_found = NodeGpusFound::detect(&config).await?;
        let mut capacity = node_capacity(&config, &gpus_found, &rails, &isolation);
        let (python_envs, containers) = code_runtimes(&config, &layout, worker_id, &users, &mut capacity).await?;
        info!(
            %worker_id, %session, peer_addr, data_dir = %layout.root().display(), cpus = capacity.cpus,
            memory = capacity.memory, gpus = ?gpus_found.offered_indices(), gpu_links = capacity.gpu_links.len(),
            labels = ?config.labels, gpus_present = gpus_found.detected, cache_bytes = capacity.cache_bytes,
            rails = ?capacity.rails, rail_scheduler = %config.rail_scheduler, isolation = %isolation.mode(),
            tasks_run_as = users.describe(), containers = containers.as_ref().map_or("none", |c| c.program()),
            "worker starting"
        );

        let shutdown = CancellationToken::new();
        let server = PeerServer::new(cache.clone(), layout.clone(), Arc::clone(&rails));
        let (server, coordinator_tls) = guard_pushes(server, credentials.as_ref(), &coordinator)?;
        let server_tls = credentials.as_ref().map(credentials::Credentials::peer_server_tls);
        let server_task = tokio::spawn(peer::serve(listener, server, server_tls, shutdown.child_token()));

        let (gpus, gpu_task) = sample_gpus(&gpus_found, &shutdown);

        // The rail scheduler's parameters, settable while the worker runs (`tuning`).
        tokio::spawn(tuning::watch(layout.rail_tuning_file(), shutdown.child_token()));
        let counters = Arc::new(metrics::Counters::default());
        let attempts = Attempts::new(shutdown.child_token());
        let lease = Arc::new(lease::Lease::new());
        let attempt_tasks = TaskTracker::new();
        let runner = Runner::new(
            layout.clone(),
            cache.clone(),
            Arc::clone(&attempts),
            attempt_tasks.clone(),
            Arc::clone(&rails),
            Arc::clone(&isolation),
            gpus_found.node_gpus(),
        )
        .with_peer_tls(credentials.as_ref().map(credentials::Credentials::peer_client_tls))
        .with_counters(Arc::clone(&counters))
        .with_task_users(users)
        .with_lease(Arc::clone(&lease), config.supervisor.clone())
        .with_log_cap(config.log_cap)
        .with_python_envs(python_envs)
        .with_containers(containers.map(Arc::new));
        let sources =
            metrics::Sources { counters, rails: Arc::clone(&rails), cache: cache.clone(), gpus: Arc::clone(&gpus) };
        let metrics_addr = serve_metrics(config.metrics, sources, &shutdown).await;
        let session_loop = Session {
            coordinators: Arc::new(session::Coordinators::new(&coordinator)),
            worker_id,
            session: session.clone(),
            peer_addr: peer_addr.clone(),
            capacity,
            attempts,
            cache,
            runner,
            cpu: CpuSampler::new(),
            gpus,
            isolation: isolation.mode().as_str(),
            rails: Arc::clone(&rails),
            tls: coordinator_tls,
            registered_file: layout.registered_file(),
            lease,
        };
        let session_task = tokio::spawn(session_loop.run(shutdown.child_token()));
        Ok(Worker {
            _cancel_on_drop: shutdown.clone().drop_guard(),
            worker_id,
            session,
            peer_addr,
            local_addr,
            shutdown,
            attempt_tasks,
            session_task,
            server_task,
            gpu_task,
            isolation,
            _lock: lock,
            rails,
            metrics_addr,
        })
    }

    pub fn worker_id(&self) -> WorkerId {
        self.worker_id
    }

    /// The session id sent with `Register`, new for every process.
    pub fn session(&self) -> &str {
        &self.session
    }

    /// The PeerService URL reported to the coordinator.
    pub fn peer_addr(&self) -> &str {
        &self.peer_addr
    }

    /// Where `/metrics` is served (`--metrics`), if anywhere.
    pub fn metrics_addr(&self) -> Option<SocketAddr> {
        self.metrics_addr
    }

    /// Where the PeerService is actually bound.
    pub fn local_addr(&self) -> SocketAddr {
        self.local_addr
    }

    /// Resolves when the PeerService has stopped on its own (which only an error makes it do).
    async fn server_stopped(&mut self) -> Result<()> {
        match (&mut self.server_task).await {
            Ok(Ok(())) => Err(Error::Config("the peer service stopped unexpectedly".into())),
            Ok(Err(e)) => Err(e),
            Err(e) => Err(Error::Join(e)),
        }
    }

    /// Kills every running attempt, all of its processes (the attempts report CANCELLED into a
    /// queue that is not sent any more), removes the worker's cgroups, stops talking to the
    /// coordinator, stops the PeerService, then stops the data-plane endpoint and waits for its
    /// tasks.
    pub async fn shutdown(self) -> Result<()> {
        info!("worker shutting down");
        self.shutdown.cancel();
        // Each attempt task kills its cgroup (or process group) when its token is cancelled.
        self.attempt_tasks.close();
        self.attempt_tasks.wait().await;
        close_isolation(&self.isolation).await;
        self.gpu_task.await?;
        self.session_task.await?;
        let mut server_task = self.server_task;
        match tokio::time::timeout(SERVER_STOP_TIMEOUT, &mut server_task).await {
            Ok(r) => r??,
            Err(_) => {
                warn!("the peer service did not stop in time; abandoning its connections");
                server_task.abort();
            }
        }
        self.rails.shutdown().await;
        info!("worker stopped");
        Ok(())
    }
}

/// Runs a worker until `shutdown` resolves (SIGTERM or Ctrl-C in the binary), then stops it.
pub async fn run(config: Config, shutdown: impl Future<Output = ()>) -> Result<()> {
    let mut worker = Worker::start(config).await?;
    let failure = tokio::select! {
        () = shutdown => None,
        e = worker.server_stopped() => Some(e),
    };
    match failure {
        None => worker.shutdown().await,
        Some(e) => {
            // The server task has already finished; stop the rest before reporting why.
            worker.shutdown.cancel();
            worker.attempt_tasks.close();
            worker.attempt_tasks.wait().await;
            close_isolation(&worker.isolation).await;
            let _ = worker.gpu_task.await;
            let _ = worker.session_task.await;
            worker.rails.shutdown().await;
            e
        }
    }
}

/// `http://<bound address>`, with an unspecified bind address (0.0.0.0, ::) replaced by the first
/// rail, because peers cannot connect to "any address".
fn default_advertise(bound: SocketAddr, rails: &[IpAddr], tls: bool) -> String {
    let mut addr = bound;
    if addr.ip().is_unspecified()
        && let Some(&ip) = rails.first()
    {
        addr.set_ip(ip);
    }
    format!("{}://{addr}", if tls { "https" } else { "http" })
}

/// Removes the worker's parent cgroups, off the async threads.
async fn close_isolation(isolation: &Arc<Isolation>) {
    let iso = Arc::clone(isolation);
    if let Err(e) = tokio::task::spawn_blocking(move || iso.close()).await {
        warn!(error = %e, "could not remove the worker's cgroups");
    }
}

/// Takes the data dir's lock (an exclusive `flock` on `DIR/lock`), held until the returned file
/// is closed, which the kernel does when the process ends however it ends. The holder's pid is
/// written into the file, for the error a second worker gets.
fn lock_data_dir(layout: &Layout) -> Result<std::fs::File> {
    use std::io::{Read as _, Seek as _, Write as _};
    let path = layout.lock_file();
    let mut file = std::fs::File::options()
        .read(true)
        .write(true)
        .create(true)
        .truncate(false)
        .open(&path)
        .map_err(Error::io("open", &path))?;
    match file.try_lock() {
        Ok(()) => {}
        Err(std::fs::TryLockError::WouldBlock) => {
            let mut text = String::new();
            let _ = file.read_to_string(&mut text);
            return Err(Error::DataDirLocked { dir: layout.root().to_path_buf(), pid: text.trim().parse().ok() });
        }
        Err(std::fs::TryLockError::Error(e)) => return Err(Error::Io { action: "lock", path, source: e }),
    }
    let written = file.set_len(0).and_then(|()| file.rewind()).and_then(|()| writeln!(file, "{}", std::process::id()));
    written.map_err(Error::io("write", &path))?;
    Ok(file)
}

/// Who subtasks run as (`--task-user`, `--task-uids`). Tasks under uids of their own must reach
/// their work dirs below the data dir: a directory above it that other users cannot search is
/// refused here, with what to do, rather than failing every task (the data dir itself the worker
/// makes searchable).
fn task_users(config: &Config, layout: &Layout) -> Result<Arc<TaskUsers>> {
    // SAFETY: geteuid has no preconditions.
    let euid = unsafe { libc::geteuid() };
    let users = TaskUsers::resolve(config.task_user, config.task_uids, euid)?
        .with_locks(std::path::Path::new(isolation::UID_LOCKS))?;
    if let Some(range) = users.uid_range() {
        let map = std::fs::read_to_string("/proc/self/uid_map").unwrap_or_default();
        if !map.is_empty() && !isolation::range_is_mapped(range, &map) {
            return Err(Error::Config(format!(
                "--task-uids {range}: not every uid of the range is mapped in this user namespace \
                 (/proc/self/uid_map: {:?}), so tasks could not take them; pass --task-uids within the \
                 mapped uids, or --task-user worker",
                map.split_whitespace().collect::<Vec<_>>().join(" ")
            )));
        }
        // The data dir itself is not checked: `prepare_data_dir` makes it 0711 whatever it was.
        let above = layout.root().parent().unwrap_or(layout.root());
        if let Some((dir, mode)) = isolation::unsearchable_ancestor(above) {
            return Err(Error::Config(format!(
                "tasks run as uids {range} (a uid per job: the worker runs as root), and they could not reach \
                 their work dirs under {}: {} is mode {mode:o}, which other users cannot search; \
                 make it searchable (chmod o+x {}), choose a data dir elsewhere, or run tasks as the worker's \
                 user (--task-user worker)",
                layout.root().display(),
                dir.display(),
                dir.display()
            )));
        }
    }
    Ok(Arc::new(users))
}

/// Creates the data dir's directories and clears what a previous process left half-done. The
/// data dir and the work root are searchable but not listable by others (tasks under their own
/// uids reach their work dirs through them); everything else is the worker's alone.
fn prepare_data_dir(layout: &Layout) -> Result<()> {
    use std::os::unix::fs::PermissionsExt;
    for dir in [layout.root().to_path_buf(), layout.cache_dir(), layout.logs_root(), layout.tls_dir()] {
        std::fs::create_dir_all(&dir).map_err(Error::io("create", &dir))?;
    }
    // Work dirs and partial downloads belong to attempts of an earlier process, which the
    // coordinator has to consider lost; nothing in them is worth keeping.
    for dir in [layout.work_root(), layout.tmp_dir()] {
        match std::fs::remove_dir_all(&dir) {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => warn!(dir = %dir.display(), error = %e, "could not clear a leftover directory"),
        }
        std::fs::create_dir_all(&dir).map_err(Error::io("create", &dir))?;
    }
    // Working dirs unpacked by an earlier process are read-only trees; fetched again when needed.
    working_dir::remove_tree(&layout.code_dir());
    std::fs::create_dir_all(layout.code_dir()).map_err(Error::io("create", &layout.code_dir()))?;
    let modes = [
        (layout.root().to_path_buf(), 0o711),
        (layout.work_root(), 0o711),
        (layout.code_dir(), 0o711),
        (layout.tls_dir(), 0o700),
        (layout.cache_dir(), 0o700),
        (layout.logs_root(), 0o700),
        (layout.tmp_dir(), 0o700),
        (layout.pid_records_dir(), 0o700),
        (layout.lock_file(), 0o600),
    ];
    for (path, mode) in modes {
        match std::fs::set_permissions(&path, std::fs::Permissions::from_mode(mode)) {
            Err(e) if e.kind() != std::io::ErrorKind::NotFound => {
                return Err(Error::Io { action: "set the mode of", path, source: e });
            }
            _ => {}
        }
    }
    // A marker a killed process left says nothing about this one.
    let _ = std::fs::remove_file(layout.registered_file());
    Ok(())
}

/// Reads `DIR/worker-id`, creating it with a fresh id the first time.
fn load_or_create_worker_id(layout: &Layout) -> Result<WorkerId> {
    let path = layout.worker_id_file();
    match std::fs::read_to_string(&path) {
        // An id that does not parse is an error, not a reason to become a different worker.
        Ok(text) => Ok(text.trim().parse::<WorkerId>()?),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            let id = WorkerId::random();
            // Write-then-rename, so a crash never leaves a half-written id behind.
            let tmp = path.with_extension("tmp");
            std::fs::write(&tmp, format!("{id}\n")).map_err(Error::io("write", &tmp))?;
            std::fs::rename(&tmp, &path).map_err(Error::io("write", &path))?;
            info!(worker_id = %id, "created a new worker id");
            Ok(id)
        }
        Err(e) => Err(Error::Io { action: "read", path, source: e }),
    }
}

/// Binds the PeerService's listener; returns it with the address it is bound to.
async fn bind_peer_listener(listen: SocketAddr) -> Result<(tokio::net::TcpListener, SocketAddr)> {
    let listener = tokio::net::TcpListener::bind(listen).await.map_err(|e| Error::Io {
        action: "bind the peer service to",
        path: listen.to_string().into(),
        source: e,
    })?;
    let local_addr = listener.local_addr().map_err(Error::io("read the bound address of", listen.to_string()))?;
    Ok((listener, local_addr))
}

/// Binds the data plane's rails. In a secure cluster the rail key arrives with the registration:
/// until then the rails refuse everything.
async fn bind_rails(config: &Config, secure: bool) -> Result<Arc<plexus_dataplane::Endpoint>> {
    let endpoint = plexus_dataplane::Endpoint::bind(plexus_dataplane::EndpointConfig {
        rails: config.rails.clone(),
        port: config.rail_port,
        scheduler: config.rail_scheduler,
        seg_max: config.seg_max,
        send_buffer: config.send_buffer,
        auth: if secure { plexus_dataplane::RailAuth::Pending } else { plexus_dataplane::RailAuth::Open },
        ..Default::default()
    })
    .await?;
    Ok(Arc::new(endpoint))
}

/// The node's GPUs as found at start: how many are present, which are offered (`--gpus`), and
/// the offered ones' links and NUMA nodes for the registration.
struct NodeGpusFound {
    /// How many GPUs the node has, offered or not.
    detected: usize,
    offered: Vec<GpuDevice>,
    links: Vec<pb::GpuLink>,
    numa: std::collections::HashMap<u32, u32>,
}

impl NodeGpusFound {
    async fn detect(config: &Config) -> Result<NodeGpusFound> {
        let detected = node::detect_gpus().await;
        let offered = config.gpus.apply(&detected)?;
        let (links, numa) = if offered.is_empty() { Default::default() } else { gpu_topology(&offered).await };
        Ok(NodeGpusFound { detected: detected.len(), offered, links, numa })
    }

    fn offered_indices(&self) -> Vec<u32> {
        self.offered.iter().map(|g| g.index).collect()
    }

    /// What the runner tells subtasks about the node's GPUs.
    fn node_gpus(&self) -> NodeGpus {
        NodeGpus { offered: self.offered_indices(), present: self.detected > 0 }
    }
}

/// The links and NUMA nodes of the offered GPUs from `nvidia-smi topo -m`; none when it fails
/// (the coordinator then counts every pair of GPUs as SYS).
async fn gpu_topology(offered: &[GpuDevice]) -> (Vec<pb::GpuLink>, std::collections::HashMap<u32, u32>) {
    let offered_indices: Vec<u32> = offered.iter().map(|g| g.index).collect();
    match node::detect_topology().await {
        Ok(topo) => {
            let missing: Vec<u32> =
                offered_indices.iter().copied().filter(|&d| !topo.gpus().iter().any(|g| g.index == d)).collect();
            if !missing.is_empty() {
                warn!(
                    ?missing,
                    "nvidia-smi topo -m does not list these offered GPUs; their links are unknown (counted as SYS)"
                );
            }
            node::topology_report(&topo, &offered_indices)
        }
        Err(e) => {
            warn!(error = %e, "no GPU topology: reporting no links (the coordinator counts every pair of GPUs as SYS)");
            Default::default()
        }
    }
}

/// The GPU sampler of the offered devices, and its task (which runs until `shutdown`).
fn sample_gpus(found: &NodeGpusFound, shutdown: &CancellationToken) -> (Arc<GpuSampler>, tokio::task::JoinHandle<()>) {
    let gpus = Arc::new(GpuSampler::new(&found.offered));
    let (g, stop) = (Arc::clone(&gpus), shutdown.child_token());
    let task = tokio::spawn(async move { g.run(GPU_SAMPLE_INTERVAL, stop).await });
    (gpus, task)
}

/// What runs jobs' code beside their commands: the Python environments (what an earlier run
/// built kept), and the container runtime, if one answers (then the node carries its label, and
/// containers an earlier run of this worker left are removed).
async fn code_runtimes(
    config: &Config,
    layout: &Layout,
    worker_id: WorkerId,
    users: &TaskUsers,
    capacity: &mut pb::NodeCapacity,
) -> Result<(python_env::PythonEnvs, Option<container::Containers>)> {
    let python_envs = python_env::PythonEnvs::new(
        layout.envs_dir(),
        config.python.clone(),
        config.python_envs_bytes,
        users.uid_range().is_some(),
    );
    python_envs.recover()?;
    let containers = container::Containers::detect(config.container_runtime, &worker_id.to_string()).await?;
    if let Some(c) = &containers {
        capacity.labels.insert(container::RUNTIME_LABEL.to_string(), c.program().to_string());
        c.remove_leftovers().await;
    }
    Ok((python_envs, containers))
}

/// What the worker registers as its capacity.
fn node_capacity(
    config: &Config,
    gpus: &NodeGpusFound,
    rails: &plexus_dataplane::Endpoint,
    isolation: &Isolation,
) -> pb::NodeCapacity {
    pb::NodeCapacity {
        cpus: config.cpus,
        memory: config.memory,
        gpus: gpus.offered.iter().map(GpuDevice::info).collect(),
        rails: rails.local_addrs().iter().map(ToString::to_string).collect(),
        cache_bytes: config.cache_bytes,
        hostname: node::hostname(),
        isolation: isolation.mode().as_str().to_string(),
        gpu_links: gpus.links.clone(),
        labels: config.labels.iter().map(|(k, v)| (k.clone(), v.clone())).collect(),
        gpu_numa: gpus.numa.clone(),
        max_attempts: config.max_attempts,
    }
}

/// In a secure cluster, pushes go only to rails the calling worker registered, as the
/// coordinators say ([`peer::PushGuard`]): the server gets a guard with one mutual-TLS channel
/// per coordinator, and the coordinator TLS config is returned for the session. An insecure
/// cluster's server is returned as it is.
fn guard_pushes(
    server: PeerServer,
    credentials: Option<&credentials::Credentials>,
    coordinator: &str,
) -> Result<(PeerServer, Option<tonic::transport::ClientTlsConfig>)> {
    let Some(c) = credentials else {
        return Ok((server, None));
    };
    let tls = c.coordinator_tls();
    let mut channels = Vec::new();
    for url in coordinator.split(',') {
        let channel = tonic::transport::Endpoint::from_shared(url.to_string())
            .map_err(Error::connect(url))?
            .tls_config(tls.clone())
            .map_err(Error::connect(url))?
            .connect_lazy();
        channels.push(channel);
    }
    Ok((server.with_push_guard(Arc::new(peer::PushGuard::new(channels))), Some(tls)))
}

/// Serves `/metrics` at `at` when asked to; the address bound, or `None`. A worker that cannot
/// serve its metrics still works: metrics are not worth refusing work for.
async fn serve_metrics(
    at: Option<SocketAddr>,
    sources: metrics::Sources,
    shutdown: &CancellationToken,
) -> Option<SocketAddr> {
    let at = at?;
    match metrics::serve(at, sources, shutdown.child_token()).await {
        Ok((bound, _task)) => {
            info!(%bound, "serving /metrics");
            Some(bound)
        }
        Err(e) => {
            warn!(%at, error = %e, "cannot serve /metrics there; pass --metrics ADDR (port 0: any free port) or --metrics none");
            None
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_worker_id_is_created_once_and_kept() {
        let dir = tempfile::tempdir().unwrap();
        let layout = Layout::new(dir.path());
        let first = load_or_create_worker_id(&layout).unwrap();
        assert_eq!(load_or_create_worker_id(&layout).unwrap(), first);
        let text = std::fs::read_to_string(layout.worker_id_file()).unwrap();
        assert!(text.starts_with("wkr-"));
        std::fs::write(layout.worker_id_file(), "job-00000000000000000000000000000000").unwrap();
        assert!(load_or_create_worker_id(&layout).is_err(), "a corrupt id is not silently replaced");
    }

    #[test]
    fn the_advertised_address_is_reachable() {
        let rails = vec!["10.1.2.3".parse().unwrap()];
        assert_eq!(default_advertise("127.0.0.1:7001".parse().unwrap(), &rails, false), "http://127.0.0.1:7001");
        assert_eq!(default_advertise("0.0.0.0:7001".parse().unwrap(), &rails, true), "https://10.1.2.3:7001");
        assert_eq!(
            default_advertise("[::]:7001".parse().unwrap(), &["::1".parse().unwrap()], false),
            "http://[::1]:7001"
        );
    }

    #[test]
    fn leftovers_are_cleared_at_start() {
        let dir = tempfile::tempdir().unwrap();
        let layout = Layout::new(dir.path());
        std::fs::create_dir_all(layout.work_root().join("job-x/t/0.1")).unwrap();
        std::fs::create_dir_all(layout.tmp_dir()).unwrap();
        std::fs::write(layout.tmp_dir().join("partial"), b"x").unwrap();
        std::fs::create_dir_all(layout.logs_root().join("j")).unwrap();
        prepare_data_dir(&layout).unwrap();
        assert!(std::fs::read_dir(layout.work_root()).unwrap().next().is_none());
        assert!(std::fs::read_dir(layout.tmp_dir()).unwrap().next().is_none());
        assert!(layout.logs_root().join("j").exists(), "logs stay");
    }

    #[test]
    fn a_data_dir_serves_one_worker_at_a_time() {
        let dir = tempfile::tempdir().unwrap();
        let layout = Layout::new(dir.path());
        let first = lock_data_dir(&layout).unwrap();
        let e = lock_data_dir(&layout).unwrap_err();
        assert!(matches!(e, Error::DataDirLocked { pid: Some(p), .. } if p == std::process::id()), "{e:?}");
        let text = e.to_string();
        assert!(
            text.contains(&dir.path().display().to_string()) && text.starts_with("another worker process"),
            "{text}"
        );
        drop(first);
        lock_data_dir(&layout).expect("free again once the holder is gone");
    }
}
