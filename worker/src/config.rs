//! The worker's configuration: the command line ([`Args`]) and the resolved [`Config`].
//!
//! `Args` is what clap parses; [`Args::into_config`] fills in the defaults that need the machine
//! (core count, memory size) so that the rest of the worker only ever sees a complete `Config`.

use std::collections::BTreeMap;
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::path::PathBuf;

use bytesize::ByteSize;
use clap::Parser;
use plexus_dataplane::SchedulerKind;
use plexus_proto::topology::{self, parse_label};

use crate::error::{Error, Result};
use crate::isolation::{Choice, TaskUserChoice, UidRange};
use crate::node::{self, GpuSelection};

/// The default object cache bound: large enough for typical intermediate data, small enough not to
/// fill a laptop's disk by surprise.
pub const DEFAULT_CACHE_BYTES: u64 = 1 << 30;

/// The Plexus worker agent: runs subtasks placed on this node by the coordinator.
#[derive(Debug, Clone, Parser)]
#[command(name = "plexus-worker", version, about)]
pub struct Args {
    /// URL of the coordinator's gRPC endpoint, e.g. https://10.0.0.5:7070; with an HA control
    /// plane, every coordinator's, separated by commas (the worker follows the leader).
    #[arg(long, env = "PLEXUS_COORDINATOR")]
    pub coordinator: String,

    /// Directory for the worker id, the object cache, work directories and logs.
    #[arg(long, env = "PLEXUS_DATA_DIR")]
    pub data_dir: PathBuf,

    /// IP address of a network rail of this node (repeatable, in rail order). The data plane
    /// listens on each, and objects move between workers striped over all of them (rail i to
    /// the peer's rail i). Default: 127.0.0.1.
    #[arg(long = "rail")]
    pub rails: Vec<IpAddr>,

    /// Data-plane port on every rail; 0 lets each rail take a free port.
    #[arg(long, default_value_t = 0)]
    pub rail_port: u16,

    /// How segments are spread over the rails: round-robin, weighted, q-learning or
    /// q-learning-fresh.
    #[arg(long, default_value = "weighted")]
    pub rail_scheduler: SchedulerKind,

    /// Largest data-plane segment, e.g. 1MiB (a multiple of 8 bytes, at most 256 MiB). On slow
    /// rails smaller segments (e.g. 256KiB) balance a message over the rails more finely.
    #[arg(long, value_parser = parse_size, default_value = "1MiB")]
    pub seg_max: u64,

    /// Fixed size of each data-plane connection's kernel send buffer (SO_SNDBUF), e.g. 128KiB.
    /// Default: sized by the data plane from each rail's measured rate (about 0.5 ms of it), so
    /// acknowledgements do not queue behind megabytes of data on a slow rail.
    #[arg(long, value_parser = parse_size)]
    pub sndbuf: Option<u64>,

    /// Cores offered to subtasks. Default: the number of cores available to this process.
    #[arg(long)]
    pub cpus: Option<u32>,

    /// The most attempts run at once, whatever they ask for (a task with cpu = 0 takes no core):
    /// the coordinator places within it. Default: 4 per offered core, at least 8.
    #[arg(long)]
    pub max_attempts: Option<u32>,

    /// The most bytes kept of each attempt's stdout and of its stderr, e.g. 64MiB: past it the
    /// start and the latest part are kept, with a line saying how much was dropped between.
    #[arg(long, value_parser = parse_size, default_value = "64MiB")]
    pub log_cap: u64,

    /// Memory offered to subtasks, e.g. 512MiB, 4GiB or a byte count. Default: MemTotal.
    #[arg(long, value_parser = parse_size)]
    pub memory: Option<u64>,

    /// Bound of the object cache, e.g. 512MiB, 4GiB or a byte count.
    #[arg(long, value_parser = parse_size, default_value = "1GiB")]
    pub cache: u64,

    /// The interpreter that Python environments (`python = {...}` in a job file) are built
    /// with. Tasks under uids of their own must be able to run it (not one under a /root that
    /// others cannot search).
    #[arg(long, default_value = "python3")]
    pub python: String,

    /// Bound of the Python environments kept on this node, all together, e.g. 8GiB: past it the
    /// least recently used ones that no attempt holds are removed.
    #[arg(long, value_parser = parse_size, default_value = "8GiB")]
    pub python_envs: u64,

    /// The container runtime that runs tasks with an `image`: auto (Docker if its daemon
    /// answers, else Podman, else none), docker, podman or none. A worker with one carries the
    /// label container-runtime=docker (or podman).
    #[arg(long, value_enum, default_value = "auto")]
    pub container_runtime: crate::container::RuntimeChoice,

    /// Where the PeerService gRPC server binds.
    #[arg(long, default_value = "127.0.0.1:0")]
    pub listen: SocketAddr,

    /// Where to serve `/metrics` (Prometheus text, unauthenticated: counts and rail addresses,
    /// no job ids), or `none`. Default: loopback, any free port (logged as "serving /metrics").
    #[arg(long, default_value = "127.0.0.1:0", value_parser = parse_metrics)]
    pub metrics: MetricsAddr,

    /// The PeerService URL reported to the coordinator. Default: http://<bound address>.
    #[arg(long)]
    pub advertise: Option<String>,

    /// GPUs offered to subtasks: all (those nvidia-smi lists), none, or device indices as
    /// nvidia-smi numbers them, e.g. 0,2.
    #[arg(long, value_parser = node::parse_gpu_selection, default_value = "all")]
    pub gpus: GpuSelection,

    /// A label of this node, key=value (repeatable), e.g. --label rack=r1: `rack` places the
    /// node in a rack of the cluster's GPU topology. Keys and values: 1-63 characters of A-Z,
    /// a-z, 0-9, '.', '_' and '-', starting with a letter or digit; at most 32 labels.
    // Checked in `into_config`, not by clap, whose errors repeat a bad value whole and raw.
    #[arg(long = "label", value_name = "KEY=VALUE")]
    pub labels: Vec<String>,

    /// How subtasks are confined: auto (cgroup v2, else cgroup v1, else process groups),
    /// cgroup-v2, cgroup-v1 or process-group.
    #[arg(long, default_value = "auto")]
    pub isolation: Choice,

    /// Who subtasks run as: auto (a uid of its own per job from --task-uids when the worker runs
    /// as root, else the worker's user), range (the same; the worker must be root) or worker
    /// (the worker's own user, root included).
    #[arg(long, default_value = "auto")]
    pub task_user: TaskUserChoice,

    /// The uids (gid = uid) a root worker runs jobs' subtasks as, FIRST-LAST: one per job
    /// running here. Uids that name an account of the system are skipped.
    #[arg(long, default_value = "200000-265535", value_name = "FIRST-LAST")]
    pub task_uids: UidRange,

    /// The cluster CA's certificate (ca.pem in the coordinator's data dir): the coordinator is
    /// checked against it when joining. Needed until the worker has joined.
    #[arg(long, env = "PLEXUS_CA", value_name = "FILE")]
    pub ca: Option<PathBuf>,

    /// A file holding a join token (`plexus-coordinator token create --scope worker`), used
    /// once, to obtain this worker's certificate. `PLEXUS_JOIN_TOKEN` may hold the token itself.
    #[arg(long, env = "PLEXUS_JOIN_TOKEN_FILE", value_name = "FILE")]
    pub join_token_file: Option<PathBuf>,

    /// Development only, for a coordinator run with --insecure: no TLS, no certificate, no rail
    /// handshake.
    #[arg(long)]
    pub insecure: bool,
}

/// Parses a size such as `512MiB`, `4GiB`, `1.5GB` or `1000000` (bytes).
pub fn parse_size(s: &str) -> Result<u64> {
    let s = s.trim();
    if s.is_empty() {
        return Err(Error::Size { input: String::new(), reason: "a size must not be empty".into() });
    }
    s.parse::<ByteSize>().map(|b| b.as_u64()).map_err(|reason| Error::Size { input: s.to_string(), reason })
}

/// Accepts `host:port` as shorthand for `https://host:port` (`http://` when `insecure`) and
/// checks that the result is a URL a gRPC client can connect to, with the scheme that matches.
/// [`normalise_url`] of each URL of a comma-separated list (the coordinators of an HA control
/// plane), joined again with commas.
pub fn normalise_urls(what: &str, s: &str, insecure: bool) -> Result<String> {
    let urls = s.split(',').map(|u| normalise_url(what, u, insecure)).collect::<Result<Vec<_>>>()?;
    Ok(urls.join(","))
}

pub fn normalise_url(what: &str, s: &str, insecure: bool) -> Result<String> {
    let s = s.trim();
    if s.is_empty() {
        return Err(Error::Config(format!("{what} must not be empty")));
    }
    let scheme = if insecure { "http" } else { "https" };
    let url = if s.contains("://") { s.to_string() } else { format!("{scheme}://{s}") };
    match (insecure, url.split("://").next()) {
        (false, Some("http")) => {
            return Err(Error::Config(format!(
                "{what} {s:?} is plaintext http, and this worker uses TLS: write https://, or pass --insecure (development only)"
            )));
        }
        (true, Some("https")) => {
            return Err(Error::Config(format!("{what} {s:?} is https, and --insecure turns TLS off: write http://")));
        }
        _ => {}
    }
    tonic::transport::Endpoint::from_shared(url.clone())
        .map_err(|e| Error::Config(format!("{what} {s:?} is not a usable URL: {e}")))?;
    Ok(url)
}

/// The complete configuration of one worker process.
#[derive(Debug, Clone)]
pub struct Config {
    /// URL of the coordinator's WorkerService.
    pub coordinator: String,
    /// Root of everything the worker stores on disk (see the crate docs for the layout).
    pub data_dir: PathBuf,
    /// Network rail addresses, in rail order; never empty.
    pub rails: Vec<IpAddr>,
    /// Data-plane port on every rail (0: any).
    pub rail_port: u16,
    pub rail_scheduler: SchedulerKind,
    pub seg_max: u64,
    /// SO_SNDBUF of data-plane connections, bytes (`None`: sized from measured rail rates).
    pub send_buffer: Option<usize>,
    /// Cores offered to subtasks.
    pub cpus: u32,
    /// The most attempts run at once (reported to the coordinator, which places within it).
    pub max_attempts: u32,
    /// The most bytes kept of each attempt's stdout, and of its stderr.
    pub log_cap: u64,
    /// Memory offered to subtasks, in bytes.
    pub memory: u64,
    /// Bound of the object cache, in bytes.
    pub cache_bytes: u64,
    /// The interpreter Python environments are built with, and their bound in bytes.
    pub python: String,
    pub python_envs_bytes: u64,
    /// Which container runtime runs `image` tasks.
    pub container_runtime: crate::container::RuntimeChoice,
    /// Where the PeerService server binds.
    pub listen: SocketAddr,
    /// Where `/metrics` is served; `None`: nowhere.
    pub metrics: Option<SocketAddr>,
    /// The PeerService URL to report; `None` derives it from the bound address.
    pub advertise: Option<String>,
    /// Which of the node's GPUs are offered.
    pub gpus: GpuSelection,
    /// The node's labels (`--label`), checked.
    pub labels: BTreeMap<String, String>,
    /// How subtasks are confined.
    pub isolation: Choice,
    /// Who subtasks run as, and the uids of `--task-uids`.
    pub task_user: TaskUserChoice,
    pub task_uids: UidRange,
    /// TLS and the join token, or `--insecure`.
    pub trust: crate::credentials::TrustConfig,
    /// The program each command attempt runs under ([`crate::shim`]): this worker's own
    /// executable, [`SELF_EXE`]; a process that embeds the worker names the `plexus-worker` binary.
    pub supervisor: PathBuf,
}

/// The running executable, even when its file was replaced on disk since it started.
pub const SELF_EXE: &str = "/proc/self/exe";

/// `--metrics`: an address, or `none`.
#[derive(Clone, Debug, PartialEq)]
pub struct MetricsAddr(pub Option<SocketAddr>);

fn parse_metrics(s: &str) -> Result<MetricsAddr> {
    if s == "none" {
        return Ok(MetricsAddr(None));
    }
    s.parse().map(|a| MetricsAddr(Some(a))).map_err(|source| Error::MetricsAddr { source })
}

impl Config {
    /// A configuration with the machine's defaults, for the given coordinator and data dir.
    /// Insecure (no TLS, `http://`): what in-process tests against an insecure coordinator
    /// use; the binary is secure unless `--insecure` is given.
    pub fn new(coordinator: impl Into<String>, data_dir: impl Into<PathBuf>) -> Config {
        Config {
            coordinator: coordinator.into(),
            data_dir: data_dir.into(),
            rails: vec![default_rail()],
            rail_port: 0,
            rail_scheduler: SchedulerKind::Weighted,
            seg_max: 1 << 20,
            send_buffer: None,
            cpus: node::available_cpus(),
            max_attempts: default_max_attempts(node::available_cpus()),
            log_cap: crate::logs::DEFAULT_LOG_CAP,
            memory: node::total_memory().unwrap_or(0),
            cache_bytes: DEFAULT_CACHE_BYTES,
            python: "python3".into(),
            python_envs_bytes: crate::python_env::DEFAULT_MAX_BYTES,
            container_runtime: crate::container::RuntimeChoice::Auto,
            listen: SocketAddr::from(([127, 0, 0, 1], 0)),
            metrics: None,
            advertise: None,
            gpus: GpuSelection::All,
            labels: BTreeMap::new(),
            isolation: Choice::Auto,
            task_user: TaskUserChoice::Auto,
            task_uids: UidRange::DEFAULT,
            trust: crate::credentials::TrustConfig { insecure: true, ..Default::default() },
            supervisor: PathBuf::from(SELF_EXE),
        }
    }
}

/// The default of `--max-attempts`: 4 per offered core, at least 8 (tasks that mostly wait, and
/// gangs whose members run side by side, need more attempts than cores).
pub fn default_max_attempts(cpus: u32) -> u32 {
    cpus.saturating_mul(4).max(8)
}

fn default_rail() -> IpAddr {
    IpAddr::V4(Ipv4Addr::LOCALHOST)
}

impl Args {
    /// Resolves the defaults that depend on the machine and checks what clap cannot.
    pub fn into_config(self) -> Result<Config> {
        let coordinator = normalise_urls("--coordinator", &self.coordinator, self.insecure)?;
        let advertise = self.advertise.map(|a| normalise_url("--advertise", &a, self.insecure)).transpose()?;
        let join_token =
            match (&self.join_token_file, std::env::var("PLEXUS_JOIN_TOKEN").ok().filter(|t| !t.trim().is_empty())) {
                (Some(p), _) => Some(std::fs::read_to_string(p).map_err(|e| {
                    Error::Config(format!("cannot read the join token --join-token-file {}: {e}", p.display()))
                })?),
                (None, t) => t,
            };
        let trust = crate::credentials::TrustConfig { insecure: self.insecure, ca_file: self.ca.clone(), join_token };
        let memory = match self.memory {
            Some(m) => m,
            None => node::total_memory()
                .ok_or_else(|| Error::Config("cannot read MemTotal from /proc/meminfo; pass --memory".into()))?,
        };
        let cpus = match self.cpus {
            Some(0) => return Err(Error::Config("--cpus must be at least 1".into())),
            Some(n) => n,
            None => node::available_cpus(),
        };
        let max_attempts = match self.max_attempts {
            Some(0) => return Err(Error::Config("--max-attempts must be at least 1".into())),
            Some(n) => n,
            None => default_max_attempts(cpus),
        };
        if self.log_cap < 4096 {
            return Err(Error::Config(format!("--log-cap {}: must be at least 4KiB", self.log_cap)));
        }
        let rails = if self.rails.is_empty() { vec![default_rail()] } else { self.rails };
        if let Some(ip) = rails.iter().find(|ip| ip.is_unspecified()) {
            return Err(Error::Config(format!(
                "--rail {ip} is not a usable rail: peers connect to a rail's address, so it must be a concrete one"
            )));
        }
        if self.seg_max == 0
            || self.seg_max > u64::from(plexus_dataplane::wire::MAX_SEGMENT_LEN)
            || !self.seg_max.is_multiple_of(8)
        {
            return Err(Error::Config(format!(
                "--seg-max {}: must be a multiple of 8 bytes between 8 and {} (the data plane's largest segment)",
                self.seg_max,
                plexus_dataplane::wire::MAX_SEGMENT_LEN
            )));
        }
        if self.labels.len() > topology::MAX_LABELS {
            return Err(Error::Config(format!(
                "{} --label flags; at most {}",
                self.labels.len(),
                topology::MAX_LABELS
            )));
        }
        let mut labels = BTreeMap::new();
        for label in &self.labels {
            let (key, value) = parse_label(label).map_err(|e| Error::Config(format!("--label: {e}")))?;
            if key == crate::container::RUNTIME_LABEL {
                return Err(Error::Config(format!(
                    "--label {key}: set by the worker itself from the runtime it finds (--container-runtime)"
                )));
            }
            if labels.contains_key(&key) {
                return Err(Error::Config(format!("--label {key} is given twice")));
            }
            labels.insert(key, value);
        }
        let send_buffer = match self.sndbuf {
            None => None,
            Some(n) if (4096..=1 << 30).contains(&n) => Some(n as usize),
            Some(n) => return Err(Error::Config(format!("--sndbuf {n}: must be between 4KiB and 1GiB"))),
        };
        Ok(Config {
            coordinator,
            data_dir: self.data_dir,
            rails,
            rail_port: self.rail_port,
            rail_scheduler: self.rail_scheduler,
            seg_max: self.seg_max,
            send_buffer,
            cpus,
            max_attempts,
            log_cap: self.log_cap,
            memory,
            cache_bytes: self.cache,
            python: self.python,
            python_envs_bytes: self.python_envs,
            container_runtime: self.container_runtime,
            listen: self.listen,
            metrics: self.metrics.0,
            advertise,
            gpus: self.gpus,
            labels,
            isolation: self.isolation,
            task_user: self.task_user,
            task_uids: self.task_uids,
            trust,
            supervisor: PathBuf::from(SELF_EXE),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_parse_with_binary_and_decimal_units() {
        assert_eq!(parse_size("512MiB").ok(), Some(512 * 1024 * 1024));
        assert_eq!(parse_size("4GiB").ok(), Some(4 * 1024 * 1024 * 1024));
        assert_eq!(parse_size("1000000").ok(), Some(1_000_000));
        assert_eq!(parse_size("2GB").ok(), Some(2_000_000_000));
        assert_eq!(parse_size(" 1 KiB ").ok(), Some(1024));
        assert!(parse_size("").is_err());
        assert!(parse_size("lots").is_err());
        assert!(parse_size("12 parsecs").is_err());
    }

    #[test]
    fn args_fill_in_defaults() {
        let args = Args::try_parse_from([
            "plexus-worker",
            "--coordinator",
            "https://127.0.0.1:7000",
            "--data-dir",
            "/tmp/x",
            "--memory",
            "512MiB",
        ])
        .unwrap();
        let c = args.into_config().unwrap();
        assert_eq!(c.rails, vec![default_rail()]);
        assert_eq!((c.rail_port, c.rail_scheduler, c.seg_max), (0, SchedulerKind::Weighted, 1 << 20));
        assert_eq!(c.cache_bytes, 1 << 30);
        assert_eq!(c.memory, 512 << 20);
        assert!(c.cpus >= 1);
        assert_eq!(c.listen, "127.0.0.1:0".parse().unwrap());
        assert_eq!(c.advertise, None);
        assert_eq!((c.gpus, c.isolation), (GpuSelection::All, Choice::Auto));
    }

    #[test]
    fn gpus_and_isolation_are_parsed_and_checked() {
        let parse = |extra: &[&str]| {
            let mut v = vec!["plexus-worker", "--coordinator=x", "--data-dir=/d", "--memory=1"];
            v.extend_from_slice(extra);
            Args::try_parse_from(v).map(|a| a.into_config().unwrap())
        };
        assert_eq!(parse(&["--gpus", "0,2"]).unwrap().gpus, GpuSelection::Only(vec![0, 2]));
        assert_eq!(parse(&["--gpus=none"]).unwrap().gpus, GpuSelection::None);
        let e = parse(&["--gpus=0,x"]).unwrap_err().to_string();
        assert!(e.contains("\"x\" is not a GPU index"), "{e}");
        assert_eq!(
            parse(&["--isolation=process-group"]).unwrap().isolation,
            Choice::Only(crate::isolation::Mode::ProcessGroup)
        );
        let e = parse(&["--isolation=chroot"]).unwrap_err().to_string();
        assert!(e.contains("unknown isolation \"chroot\""), "{e}");
        let c = parse(&[]).unwrap();
        assert_eq!((c.task_user, c.task_uids), (TaskUserChoice::Auto, UidRange::DEFAULT));
        let c = parse(&["--task-user=worker", "--task-uids=5000-5999"]).unwrap();
        assert_eq!((c.task_user, c.task_uids), (TaskUserChoice::Worker, UidRange { first: 5000, last: 5999 }));
        let e = parse(&["--task-uids=5999-5000"]).unwrap_err().to_string();
        assert!(e.contains("--task-uids") && e.contains("the first uid 5999 is above the last 5000"), "{e}");
        let e = parse(&["--task-user=nobody"]).unwrap_err().to_string();
        assert!(e.contains("--task-user") && e.contains("unknown task user \"nobody\""), "{e}");
    }

    #[test]
    fn labels_are_parsed_and_checked() {
        let parse = |extra: &[&str]| {
            let mut v = vec!["plexus-worker", "--coordinator=x", "--data-dir=/d", "--memory=1"];
            v.extend_from_slice(extra);
            Args::try_parse_from(v).map_err(|e| e.to_string()).and_then(|a| a.into_config().map_err(|e| e.to_string()))
        };
        let c = parse(&["--label", "rack=r1", "--label=zone=eu-1"]).unwrap();
        assert_eq!(
            c.labels,
            BTreeMap::from([("rack".to_string(), "r1".to_string()), ("zone".to_string(), "eu-1".to_string())])
        );
        assert!(parse(&[]).unwrap().labels.is_empty());
        let e = parse(&["--label", "rack"]).unwrap_err();
        assert!(e.contains("expected key=value"), "{e}");
        let e = parse(&["--label", "rack=r 1"]).unwrap_err();
        assert!(e.contains("the value must be"), "{e}");
        let e = parse(&["--label", "=r1"]).unwrap_err();
        assert!(e.contains("the key must be"), "{e}");
        let huge = format!("rack={}", "r".repeat(1 << 20));
        let e = parse(&["--label", &huge]).unwrap_err();
        assert!(e.contains("(1048581 characters)") && e.len() < 1000, "not echoed whole: {} bytes", e.len());
        let e = parse(&["--label", "rack=r1", "--label", "rack=r2"]).unwrap_err();
        assert!(e.contains("--label rack is given twice"), "{e}");
        let many: Vec<String> = (0..33).map(|i| format!("--label=k{i}=v")).collect();
        let e = parse(&many.iter().map(String::as_str).collect::<Vec<_>>()).unwrap_err();
        assert!(e.contains("33 --label flags; at most 32"), "{e}");
    }

    #[test]
    fn args_take_repeated_rails_and_sizes() {
        let args = Args::try_parse_from([
            "plexus-worker",
            "--coordinator=https://c:1",
            "--data-dir=/d",
            "--rail=10.0.0.1",
            "--rail=10.0.1.1",
            "--cpus=3",
            "--memory=1000000",
            "--cache=4GiB",
            "--listen=0.0.0.0:7001",
            "--advertise=https://node1:7001",
        ])
        .unwrap();
        let c = args.into_config().unwrap();
        assert_eq!(c.rails, vec!["10.0.0.1".parse::<IpAddr>().unwrap(), "10.0.1.1".parse().unwrap()]);
        assert_eq!((c.cpus, c.memory, c.cache_bytes), (3, 1_000_000, 4 << 30));
        assert_eq!((c.max_attempts, c.log_cap), (12, 64 << 20), "4 attempts per core; 64 MiB of each log");
        let more = |extra: &[&str]| {
            let mut v = vec!["plexus-worker", "--coordinator=x", "--data-dir=/d", "--memory=1", "--cpus=1"];
            v.extend_from_slice(extra);
            Args::try_parse_from(v).unwrap().into_config().map_err(|e| e.to_string())
        };
        assert_eq!(more(&[]).unwrap().max_attempts, 8, "at least 8");
        assert_eq!(
            more(&["--max-attempts=2", "--log-cap=1MiB"]).map(|c| (c.max_attempts, c.log_cap)),
            Ok((2, 1 << 20))
        );
        assert!(more(&["--max-attempts=0"]).unwrap_err().contains("--max-attempts must be at least 1"));
        assert!(more(&["--log-cap=100"]).unwrap_err().contains("--log-cap 100: must be at least 4KiB"));
        assert_eq!(c.advertise.as_deref(), Some("https://node1:7001"));
        assert!(!c.trust.insecure, "secure unless --insecure");
        assert!(Args::try_parse_from(["plexus-worker", "--coordinator=x", "--data-dir=/d", "--cache=huge"]).is_err());
        let short =
            Args::try_parse_from(["plexus-worker", "--coordinator=10.0.0.5:7000", "--data-dir=/d", "--memory=1"]);
        assert_eq!(short.unwrap().into_config().unwrap().coordinator, "https://10.0.0.5:7000");
        let insecure = Args::try_parse_from([
            "plexus-worker",
            "--coordinator=10.0.0.5:7000",
            "--data-dir=/d",
            "--memory=1",
            "--insecure",
        ]);
        assert_eq!(insecure.unwrap().into_config().unwrap().coordinator, "http://10.0.0.5:7000");
        let plain = Args::try_parse_from(["plexus-worker", "--coordinator=http://c:1", "--data-dir=/d", "--memory=1"]);
        let e = plain.unwrap().into_config().unwrap_err().to_string();
        assert!(e.contains("plaintext http") && e.contains("--insecure"), "{e}");
        let bad = Args::try_parse_from(["plexus-worker", "--coordinator=http://a b", "--data-dir=/d", "--memory=1"]);
        assert!(bad.unwrap().into_config().is_err());
        let zero =
            Args::try_parse_from(["plexus-worker", "--coordinator=x", "--data-dir=/d", "--cpus=0", "--memory=1"]);
        assert!(zero.unwrap().into_config().is_err());
        // Rails are IP addresses, concrete ones; the scheduler is one of the data plane's.
        assert!(Args::try_parse_from(["plexus-worker", "--coordinator=x", "--data-dir=/d", "--rail=eth0"]).is_err());
        let any =
            Args::try_parse_from(["plexus-worker", "--coordinator=x", "--data-dir=/d", "--rail=0.0.0.0", "--memory=1"]);
        let e = any.unwrap().into_config().unwrap_err().to_string();
        assert!(e.contains("--rail 0.0.0.0"), "{e}");
        let e = Args::try_parse_from(["plexus-worker", "--coordinator=x", "--data-dir=/d", "--rail-scheduler=fastest"])
            .unwrap_err();
        assert!(e.to_string().contains("unknown rail scheduler"), "{e}");
        let q = Args::try_parse_from([
            "plexus-worker",
            "--coordinator=x",
            "--data-dir=/d",
            "--memory=1",
            "--rail-scheduler=q-learning",
            "--rail-port=7100",
            "--seg-max=4MiB",
        ]);
        let c = q.unwrap().into_config().unwrap();
        assert_eq!((c.rail_port, c.rail_scheduler, c.seg_max), (7100, SchedulerKind::QLearning, 4 << 20));
        assert_eq!(c.send_buffer, None, "the kernel's autotuning unless asked");
    }

    #[test]
    fn rail_tuning_flags_are_checked_and_named() {
        let parse = |extra: &[&str]| {
            let mut v = vec!["plexus-worker", "--coordinator=x", "--data-dir=/d", "--memory=1"];
            v.extend_from_slice(extra);
            Args::try_parse_from(v).unwrap().into_config()
        };
        let c = parse(&["--seg-max=256KiB", "--sndbuf=128KiB"]).unwrap();
        assert_eq!((c.seg_max, c.send_buffer), (256 << 10, Some(128 << 10)));
        for (flag, name) in [
            ("--seg-max=1001", "--seg-max 1001"),
            ("--seg-max=0", "--seg-max 0"),
            ("--seg-max=1GiB", "--seg-max"),
            ("--sndbuf=100", "--sndbuf 100"),
            ("--sndbuf=2GiB", "--sndbuf"),
        ] {
            let e = parse(&[flag]).unwrap_err().to_string();
            assert!(e.contains(name), "{flag}: {e}");
        }
    }
}
