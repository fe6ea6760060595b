//! `plexus-coordinator`: parses arguments, then runs the coordinator ([`plexus_coordinator::run`])
//! or one of its administrative commands ([`plexus_coordinator::admin`]).

use std::net::SocketAddr;
use std::path::PathBuf;

use anyhow::Context;
use clap::Parser;
use plexus_coordinator::admin::{self, Admin};
use plexus_coordinator::etcd::EtcdUrl;
use plexus_coordinator::{Config, Error, SecurityMode, run};
use plexus_scheduler::core::{CoreConfig, EvictionGuard};
use plexus_scheduler::gpu::objective::Weights;
use plexus_scheduler::gpu::topology::MscCosts;

/// mimalloc, not glibc's malloc: the engine allocates per decision (candidates, records, their
/// JSON) and the gRPC threads free much of it; under glibc, `malloc` and `free` took 43 % of the
/// engine thread's CPU at 5,000 workers (issue 35's fleet, `perf`).
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

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
    /// fetch + compute), rl (the learned DQN, anchored on fastest) or rl-seed (the seed's own
    /// configuration of it).
    #[arg(long, default_value = "least-loaded")]
    placer: String,
    /// Seed for randomised placers.
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// Heartbeat interval asked of workers, in ms.
    #[arg(long, default_value_t = CoreConfig::default().heartbeat_interval_ms)]
    heartbeat_interval_ms: u64,
    /// A worker silent for longer than this (ms) is lost and its subtasks are placed again. Must
    /// be at least the worker lease plus 500 ms.
    #[arg(long, default_value_t = CoreConfig::default().heartbeat_timeout_ms)]
    heartbeat_timeout_ms: u64,
    /// The lease sent to workers (ms): a worker whose heartbeats go unanswered this long kills its
    /// running attempts, before the coordinator places them again (default: two thirds of the
    /// heartbeat timeout; at least two heartbeat intervals).
    #[arg(long)]
    worker_lease_ms: Option<u64>,
    /// The most heartbeats a second the workers may send together: past it (1,000 workers at the
    /// default 500 ms interval) the interval, lease and timeout are stretched alike, in steps of
    /// 1.5×, and workers learn the new timing from their next heartbeat, as Nomad bounds its
    /// heartbeat rate. 0: the configured timing at any cluster size.
    #[arg(long, default_value_t = CoreConfig::default().max_heartbeats_per_sec)]
    max_heartbeats_per_sec: u64,
    /// When more than this share of the workers miss their heartbeats at once, none is declared
    /// lost: evictions halt (logged, `plexus_evictions_halted`, `plexus workers`) until they
    /// heartbeat again, as Kubernetes stops evicting from a fully disrupted zone. 1: never halt.
    #[arg(long, default_value_t = EvictionGuard::default().max_lost_share)]
    max_lost_share: f64,
    /// ... only in a cluster of at least this many alive workers.
    #[arg(long, default_value_t = EvictionGuard::default().min_workers)]
    halt_min_workers: usize,
    /// The model-synchronisation cost of each level of the GPU topology tree, for GPU gang
    /// placement: any of nvlink (per bonded link), pix (PIX/PXB), phb (PHB/NODE), sys, same-rack,
    /// cross-rack, as key=value pairs; the rest keep their defaults. Costs must be finite, ≥ 0,
    /// and not decrease in that order.
    #[arg(long, value_name = "KEY=COST,...", default_value_t = MscCosts::default())]
    msc: MscCosts,
    /// The weights of seed 002's objective `alpha·I + beta·C/C_ref` for GPU gangs: I is the
    /// predicted interference (a mean slowdown, 1 when nothing interferes), C/C_ref the gang's
    /// communication cost normalised to [0, 1]. Raise beta to pack communication-heavy gangs
    /// closer; raise alpha to keep them off busy GPUs. Finite, ≥ 0, not both 0.
    #[arg(long, value_name = "alpha=A,beta=B", default_value_t = Weights::default())]
    gpu_weights: Weights,
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
    /// The largest working-dir archive a job may upload (compressed), e.g. 100MiB. A larger one
    /// is refused at submit, naming `working_dir` and this limit.
    #[arg(long, value_name = "SIZE", default_value = "100MiB", value_parser = parse_size)]
    working_dir_limit: u64,
    /// The room for every working-dir archive together, e.g. 1GiB: archives no unfinished job
    /// holds are removed, oldest first, to make room; past that an upload is refused.
    #[arg(long, value_name = "SIZE", default_value = "1000MiB", value_parser = parse_size)]
    working_dir_store: u64,
    /// When commands wait longer than this (ms) for the engine, clients' requests are refused
    /// with RESOURCE_EXHAUSTED (workers' heartbeats, registrations and reports never are), so
    /// the coordinator does not fall behind on its workers. 0: never refuse.
    #[arg(long, default_value_t = plexus_coordinator::shed::DEFAULT_LAG_MS)]
    shed_lag_ms: u64,
    #[command(subcommand)]
    command: Option<admin::Command>,
}

impl Args {
    /// The coordinator administrative commands ask when the store is in use: --coordinator, or
    /// the --listen address (0.0.0.0 read as 127.0.0.1).
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

    fn etcd(&self) -> Option<EtcdUrl> {
        match &self.store {
            StoreArg::Sled => None,
            StoreArg::Etcd(u) => Some(u.clone()),
        }
    }
}

fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    tracing_subscriber::fmt()
        .with_env_filter(tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| "info".into()))
        .with_writer(std::io::stderr)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .init();

    if let Some(command) = &args.command {
        let target = Admin {
            data_dir: args.data_dir.clone(),
            etcd: args.etcd(),
            coordinator: args.coordinator_url(),
            insecure: args.insecure,
            seed: args.seed,
        };
        return Ok(admin::run(&target, command)?);
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
        etcd: args.etcd(),
        data_dir: args.data_dir,
        advertise: args.advertise,
        lease_ttl: args.lease_ttl,
        placer: args.placer,
        seed: args.seed,
        core: CoreConfig {
            heartbeat_interval_ms: args.heartbeat_interval_ms,
            heartbeat_timeout_ms: args.heartbeat_timeout_ms,
            lease_ms: args.worker_lease_ms.unwrap_or(CoreConfig::default_lease_ms(args.heartbeat_timeout_ms)),
            eviction: EvictionGuard { max_lost_share: args.max_lost_share, min_workers: args.halt_min_workers },
            msc: args.msc,
            gpu_weights: args.gpu_weights,
            max_heartbeats_per_sec: args.max_heartbeats_per_sec,
        },
        msc: args.msc,
        working_dir_limit: args.working_dir_limit,
        working_dir_store: args.working_dir_store,
        shed_lag: std::time::Duration::from_millis(args.shed_lag_ms),
    };
    let rt = tokio::runtime::Runtime::new().context("starting the tokio runtime")?;
    rt.block_on(run(config, shutdown_signal()))?;
    Ok(())
}

/// `--working-dir-limit` and `--working-dir-store`: a size such as `100MiB`, or bytes.
fn parse_size(s: &str) -> Result<u64, Error> {
    s.parse::<bytesize::ByteSize>().map(|b| b.as_u64()).map_err(|e| Error::Invalid(format!("{s:?} is not a size: {e}")))
}

/// `--store`: sled, or an etcd URL.
#[derive(Clone, Debug)]
enum StoreArg {
    Sled,
    Etcd(EtcdUrl),
}

fn parse_store(s: &str) -> Result<StoreArg, Error> {
    if s == "sled" || s.is_empty() {
        return Ok(StoreArg::Sled);
    }
    s.parse().map(StoreArg::Etcd).map_err(|e| Error::Invalid(format!("{e} (or `sled`, the default)")))
}

fn parse_ttl(s: &str) -> Result<std::time::Duration, Error> {
    let d = humantime::parse_duration(s).map_err(|e| Error::Invalid(format!("{e}: expected a duration such as 5s")))?;
    if d < std::time::Duration::from_secs(1) || d > std::time::Duration::from_secs(300) {
        return Err(Error::Invalid(format!(
            "{s} is not a lease TTL: etcd leases count whole seconds, from 1s to 300s"
        )));
    }
    if d.subsec_nanos() != 0 {
        return Err(Error::Invalid(format!("{s} is not a whole number of seconds (etcd leases count whole seconds)")));
    }
    Ok(d)
}

/// `--http`: an address, or `none`.
#[derive(Clone, Debug)]
struct HttpAddr(Option<SocketAddr>);

fn parse_http(s: &str) -> Result<HttpAddr, Error> {
    if s == "none" {
        return Ok(HttpAddr(None));
    }
    s.parse()
        .map(|a| HttpAddr(Some(a)))
        .map_err(|e| Error::Invalid(format!("{e}: expected an address such as 127.0.0.1:8265, or none")))
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
