//! [`LocalCluster`]: coordinators and workers on this machine as child processes, each with its
//! own data directory under one directory and its log beside them. Built with [`Builder`];
//! owns every process it starts and stops them all when dropped.
//!
//! Layout under the cluster's directory: `coordinator/` (or `coordinator-<i>/` when there are
//! several), `worker-<n>/`, and the logs `<name>.log` (in the log directory, by default the same
//! one). The first coordinator's directory holds the cluster CA (`ca.pem`) and the first tokens
//! (`admin.token`, `join.token`), which it writes before it listens.

use std::ffi::OsString;
use std::net::{IpAddr, SocketAddr};
use std::path::{Path, PathBuf};
use std::process::ExitStatus;
use std::time::{Duration, Instant};

use crate::process::{Proc, Spec, stop_all};
use crate::ready::{self, Line};
use crate::{LaunchError, programs};

/// How long a coordinator may take to print its ready lines: it opens its store (and on etcd
/// joins the election) first, which on a loaded 2-core CI machine takes seconds, not minutes.
const READY_TIMEOUT: Duration = Duration::from_secs(30);
/// How long workers (and, with [`Builder::terminate_coordinators`], coordinators) get between
/// SIGTERM and SIGKILL: a worker kills its subtasks' process groups in that time.
const STOP_GRACE: Duration = Duration::from_secs(3);
/// How often a starting coordinator's exit is checked while its ready lines are awaited.
const POLL: Duration = Duration::from_millis(50);

/// Where the coordinators keep their state.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub enum Store {
    /// Each coordinator's own sled database in its data directory (one coordinator).
    #[default]
    Sled,
    /// An etcd cluster, `etcd://host:port,…` (passed on as `--store`): several coordinators,
    /// one of which leads.
    Etcd(String),
}

/// Where a coordinator serves its HTTP side (dashboard, `/metrics`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Http {
    /// Not at all (`--http none`).
    #[default]
    Off,
    /// On any free port of 127.0.0.1, as the coordinator reports it.
    AnyPort,
    /// On this port of 127.0.0.1.
    Port(u16),
}

/// How one worker is started where it differs from the others (see
/// [`LocalCluster::start_worker_with`]).
#[derive(Clone, Debug, Default)]
pub struct WorkerLaunch {
    /// A command the worker runs under: its first word is the program started, the rest its
    /// arguments, then the worker program and the worker's arguments (e.g. `sh -c 'echo $$ >
    /// cgroup.procs; exec "$@"' sh ip netns exec NS`).
    pub prefix: Vec<OsString>,
    /// Arguments for this worker only, after the common ones.
    pub args: Vec<OsString>,
    /// The coordinators' URLs (comma-separated) to give it instead of every coordinator's.
    pub coordinators: Option<String>,
}

/// A process of the cluster that exited, as [`LocalCluster::reap`] reports it.
#[derive(Clone, Debug)]
pub struct Exited {
    pub name: String,
    pub status: ExitStatus,
    pub log: PathBuf,
}

/// How a [`LocalCluster`] is started. Every setting has the product's default where the
/// binaries have one (a flag left unset is not passed on).
#[derive(Clone, Debug)]
pub struct Builder {
    dir: PathBuf,
    log_dir: Option<PathBuf>,
    coordinator_program: Option<PathBuf>,
    worker_program: Option<PathBuf>,
    store: Store,
    coordinators: usize,
    workers: usize,
    first_worker: usize,
    insecure: bool,
    listen_ip: IpAddr,
    port: u16,
    http: Http,
    placer: Option<String>,
    heartbeat_timeout_ms: Option<u64>,
    lease_ttl_s: Option<u64>,
    advertise: Vec<String>,
    coordinator_args: Vec<OsString>,
    cpus: Option<u32>,
    cache: Option<String>,
    rails: Vec<IpAddr>,
    worker_args: Vec<OsString>,
    worker_env: Vec<(OsString, OsString)>,
    rust_log: Option<String>,
    keep_logs: usize,
    own_groups: bool,
    die_with_parent: bool,
    terminate_coordinators: bool,
    grace: Duration,
}

impl Builder {
    /// A cluster of one coordinator on sled and no workers, its data under `dir`.
    pub fn new(dir: impl Into<PathBuf>) -> Builder {
        Builder {
            dir: dir.into(),
            log_dir: None,
            coordinator_program: None,
            worker_program: None,
            store: Store::Sled,
            coordinators: 1,
            workers: 0,
            first_worker: 0,
            insecure: false,
            listen_ip: IpAddr::V4(std::net::Ipv4Addr::LOCALHOST),
            port: 0,
            http: Http::Off,
            placer: None,
            heartbeat_timeout_ms: None,
            lease_ttl_s: None,
            advertise: Vec::new(),
            coordinator_args: Vec::new(),
            cpus: None,
            cache: None,
            rails: Vec::new(),
            worker_args: Vec::new(),
            worker_env: Vec::new(),
            rust_log: None,
            keep_logs: 0,
            own_groups: false,
            die_with_parent: false,
            terminate_coordinators: false,
            grace: STOP_GRACE,
        }
    }

    /// Where the logs go (default: the cluster's directory).
    pub fn log_dir(mut self, dir: impl Into<PathBuf>) -> Self {
        self.log_dir = Some(dir.into());
        self
    }

    /// Both programs from `dir` (default: next to the running program, else on PATH).
    pub fn bin_dir(mut self, dir: &Path) -> Self {
        self.coordinator_program = Some(dir.join(programs::COORDINATOR));
        self.worker_program = Some(dir.join(programs::WORKER));
        self
    }

    pub fn coordinator_program(mut self, program: impl Into<PathBuf>) -> Self {
        self.coordinator_program = Some(program.into());
        self
    }

    pub fn worker_program(mut self, program: impl Into<PathBuf>) -> Self {
        self.worker_program = Some(program.into());
        self
    }

    pub fn store(mut self, store: Store) -> Self {
        self.store = store;
        self
    }

    pub fn coordinators(mut self, n: usize) -> Self {
        self.coordinators = n;
        self
    }

    pub fn workers(mut self, n: usize) -> Self {
        self.workers = n;
        self
    }

    /// The number in the first worker's name (`worker-<n>`): 0 unless told (`plexus up` counts
    /// from 1).
    pub fn number_workers_from(mut self, first: usize) -> Self {
        self.first_worker = first;
        self
    }

    /// No TLS and no tokens (`--insecure` everywhere). Default: secure, as the product is.
    pub fn insecure(mut self, insecure: bool) -> Self {
        self.insecure = insecure;
        self
    }

    /// The address the coordinators' gRPC side listens on (default 127.0.0.1): another, for
    /// workers in a network namespace of their own to reach them over a veth.
    pub fn listen_ip(mut self, ip: IpAddr) -> Self {
        self.listen_ip = ip;
        self
    }

    /// The first coordinator's port on 127.0.0.1 (default 0: any free one, as it reports).
    pub fn port(mut self, port: u16) -> Self {
        self.port = port;
        self
    }

    pub fn http(mut self, http: Http) -> Self {
        self.http = http;
        self
    }

    pub fn placer(mut self, placer: Option<impl Into<String>>) -> Self {
        self.placer = placer.map(Into::into);
        self
    }

    pub fn heartbeat_timeout_ms(mut self, ms: u64) -> Self {
        self.heartbeat_timeout_ms = Some(ms);
        self
    }

    /// The leader's lease on etcd, whole seconds (`--lease-ttl Ns`).
    pub fn lease_ttl_s(mut self, s: u64) -> Self {
        self.lease_ttl_s = Some(s);
        self
    }

    /// `--advertise` of coordinator i, where given (default: its listening URL).
    pub fn advertise(mut self, urls: Vec<String>) -> Self {
        self.advertise = urls;
        self
    }

    /// Extra arguments for every coordinator, after the launcher's own.
    pub fn coordinator_args<S: Into<OsString>>(mut self, args: impl IntoIterator<Item = S>) -> Self {
        self.coordinator_args.extend(args.into_iter().map(Into::into));
        self
    }

    pub fn cpus(mut self, cpus: Option<u32>) -> Self {
        self.cpus = cpus;
        self
    }

    pub fn cache(mut self, cache: Option<impl Into<String>>) -> Self {
        self.cache = cache.map(Into::into);
        self
    }

    /// The data-plane rails of every worker (each passed on as `--rail`).
    pub fn rails(mut self, rails: &[IpAddr]) -> Self {
        self.rails = rails.to_vec();
        self
    }

    /// Extra arguments for every worker, after the launcher's own.
    pub fn worker_args<S: Into<OsString>>(mut self, args: impl IntoIterator<Item = S>) -> Self {
        self.worker_args.extend(args.into_iter().map(Into::into));
        self
    }

    /// Extra environment for every worker (e.g. a `PATH` with a fake `nvidia-smi` first).
    pub fn worker_env<K: Into<OsString>, V: Into<OsString>>(mut self, env: impl IntoIterator<Item = (K, V)>) -> Self {
        self.worker_env.extend(env.into_iter().map(|(k, v)| (k.into(), v.into())));
        self
    }

    /// `RUST_LOG` for every process (default: inherited).
    pub fn rust_log(mut self, filter: impl Into<String>) -> Self {
        self.rust_log = Some(filter.into());
        self
    }

    /// Keep this many earlier runs' logs (`x.log.1` the run before, …) instead of appending to
    /// one log across runs.
    pub fn keep_logs(mut self, n: usize) -> Self {
        self.keep_logs = n;
        self
    }

    /// Run every child in a process group of its own, so a terminal's Ctrl-C reaches only the
    /// launcher, and (on Linux) SIGTERM them should the launcher's thread die without stopping
    /// them. For a launcher that is a program of its own (`plexus up`), not a library in a test.
    pub fn detach_from_terminal(mut self) -> Self {
        self.own_groups = true;
        self.die_with_parent = true;
        self
    }

    /// Stop coordinators with SIGTERM and the grace period, as workers (default: SIGKILL, which
    /// is all a test's coordinator needs).
    pub fn terminate_coordinators(mut self, yes: bool) -> Self {
        self.terminate_coordinators = yes;
        self
    }

    /// How long children get between SIGTERM and SIGKILL when the cluster stops (default 3 s).
    pub fn stop_grace(mut self, grace: Duration) -> Self {
        self.grace = grace;
        self
    }

    /// The cluster, with its directories made and nothing started.
    pub fn build(self) -> Result<LocalCluster, LaunchError> {
        let log_dir = self.log_dir.clone().unwrap_or_else(|| self.dir.clone());
        for d in [&self.dir, &log_dir] {
            std::fs::create_dir_all(d).map_err(LaunchError::io("create the directory", d))?;
        }
        // A log directory of its own is owner-only (0700), as each log is (0600). The cluster's
        // directory is not: the workers' tasks may run as other users under it.
        if log_dir != self.dir {
            std::fs::set_permissions(&log_dir, std::os::unix::fs::PermissionsExt::from_mode(0o700))
                .map_err(LaunchError::io("restrict the log directory", &log_dir))?;
        }
        let coordinator_program = match &self.coordinator_program {
            Some(p) => p.clone(),
            None => programs::find(programs::COORDINATOR)?,
        };
        let worker_program = match &self.worker_program {
            Some(p) => Some(p.clone()),
            None if self.workers > 0 => Some(programs::find(programs::WORKER)?),
            None => None,
        };
        let coordinators = (0..self.coordinators)
            .map(|i| Coordinator { proc: None, port: if i == 0 { self.port } else { 0 }, url: None, http: None })
            .collect();
        let workers = (0..self.workers).map(|_| None).collect();
        Ok(LocalCluster { config: self, log_dir, coordinator_program, worker_program, coordinators, workers })
    }

    /// The cluster, with every coordinator started (one after the other, so the first makes the
    /// CA and the first tokens) and then every worker. It does not wait for the workers to
    /// register: that takes a client of the coordinator, which the caller has.
    pub fn start(self) -> Result<LocalCluster, LaunchError> {
        let mut c = self.build()?;
        c.start_coordinators()?;
        c.start_workers()?;
        Ok(c)
    }
}

struct Coordinator {
    proc: Option<Proc>,
    /// Kept across restarts, so clients and workers find a restarted coordinator again.
    port: u16,
    url: Option<String>,
    http: Option<SocketAddr>,
}

/// Coordinators and workers on this machine. Dropping it stops them: workers first (SIGTERM,
/// then SIGKILL after the grace period), then whatever cgroups a killed worker left, then the
/// coordinators.
pub struct LocalCluster {
    config: Builder,
    log_dir: PathBuf,
    coordinator_program: PathBuf,
    worker_program: Option<PathBuf>,
    coordinators: Vec<Coordinator>,
    workers: Vec<Option<Proc>>,
}

impl LocalCluster {
    pub fn builder(dir: impl Into<PathBuf>) -> Builder {
        Builder::new(dir)
    }

    pub fn dir(&self) -> &Path {
        &self.config.dir
    }

    pub fn log_dir(&self) -> &Path {
        &self.log_dir
    }

    pub fn insecure(&self) -> bool {
        self.config.insecure
    }

    fn coordinator_name(&self, i: usize) -> String {
        if self.coordinators.len() == 1 { "coordinator".to_string() } else { format!("coordinator-{i}") }
    }

    fn worker_name(&self, i: usize) -> String {
        format!("worker-{}", self.config.first_worker + i)
    }

    pub fn coordinator_dir(&self, i: usize) -> PathBuf {
        self.config.dir.join(self.coordinator_name(i))
    }

    pub fn coordinator_log(&self, i: usize) -> PathBuf {
        self.log_dir.join(format!("{}.log", self.coordinator_name(i)))
    }

    pub fn worker_dir(&self, i: usize) -> PathBuf {
        self.config.dir.join(self.worker_name(i))
    }

    pub fn worker_log(&self, i: usize) -> PathBuf {
        self.log_dir.join(format!("{}.log", self.worker_name(i)))
    }

    /// The cluster CA, which the first coordinator writes into its directory.
    pub fn ca_file(&self) -> PathBuf {
        self.coordinator_dir(0).join("ca.pem")
    }

    /// The first admin token, written on the first coordinator's first start.
    pub fn admin_token_file(&self) -> PathBuf {
        self.coordinator_dir(0).join("admin.token")
    }

    /// The workers' join token, written on the first coordinator's first start.
    pub fn join_token_file(&self) -> PathBuf {
        self.coordinator_dir(0).join("join.token")
    }

    /// The number of coordinator slots.
    pub fn coordinator_count(&self) -> usize {
        self.coordinators.len()
    }

    /// The number of worker slots (started or not).
    pub fn worker_count(&self) -> usize {
        self.workers.len()
    }

    /// Coordinator `i`'s URL (`https://ip:port`, `http://` when insecure), once it has listened.
    pub fn url(&self, i: usize) -> Option<&str> {
        self.coordinators.get(i)?.url.as_deref()
    }

    /// Every known coordinator URL, in order.
    pub fn urls(&self) -> Vec<String> {
        self.coordinators.iter().filter_map(|c| c.url.clone()).collect()
    }

    /// Coordinator `i`'s HTTP address, when it serves one.
    pub fn http(&self, i: usize) -> Option<SocketAddr> {
        self.coordinators.get(i)?.http
    }

    pub fn coordinator_pid(&self, i: usize) -> Option<u32> {
        self.coordinators.get(i)?.proc.as_ref()?.pid()
    }

    pub fn worker_pid(&self, i: usize) -> Option<u32> {
        self.workers.get(i)?.as_ref()?.pid()
    }

    /// The arguments coordinator `i` is started with.
    fn coordinator_args(&self, i: usize) -> Vec<OsString> {
        let c = &self.config;
        let mut args: Vec<OsString> = Vec::new();
        if c.insecure {
            args.push("--insecure".into());
        }
        if let Store::Etcd(url) = &c.store {
            args.extend(["--store".into(), url.into()]);
        }
        let http = match c.http {
            Http::Off => "none".to_string(),
            Http::AnyPort => "127.0.0.1:0".to_string(),
            Http::Port(p) => format!("127.0.0.1:{p}"),
        };
        args.extend([
            "--listen".into(),
            SocketAddr::new(c.listen_ip, self.coordinators[i].port).to_string().into(),
            "--http".into(),
            http.into(),
            "--data-dir".into(),
            self.coordinator_dir(i).into(),
        ]);
        if let Some(p) = &c.placer {
            args.extend(["--placer".into(), p.into()]);
        }
        if let Some(ms) = c.heartbeat_timeout_ms {
            args.extend(["--heartbeat-timeout-ms".into(), ms.to_string().into()]);
        }
        if let Some(s) = c.lease_ttl_s {
            args.extend(["--lease-ttl".into(), format!("{s}s").into()]);
        }
        args.extend(c.coordinator_args.iter().cloned());
        if let Some(a) = c.advertise.get(i) {
            args.extend(["--advertise".into(), a.into()]);
        }
        args
    }

    /// The arguments worker `i` is started with, given the coordinators' URLs.
    fn worker_args(&self, i: usize, coordinators: &str) -> Vec<OsString> {
        let c = &self.config;
        let mut args: Vec<OsString> =
            vec!["--coordinator".into(), coordinators.into(), "--data-dir".into(), self.worker_dir(i).into()];
        if c.insecure {
            args.push("--insecure".into());
        } else {
            args.extend([
                "--ca".into(),
                self.ca_file().into(),
                "--join-token-file".into(),
                self.join_token_file().into(),
            ]);
        }
        if let Some(n) = c.cpus {
            args.extend(["--cpus".into(), n.to_string().into()]);
        }
        if let Some(s) = &c.cache {
            args.extend(["--cache".into(), s.into()]);
        }
        for r in &c.rails {
            args.extend(["--rail".into(), r.to_string().into()]);
        }
        args.extend(c.worker_args.iter().cloned());
        args
    }

    fn spec(&self, name: String, program: PathBuf, log: PathBuf) -> Result<Spec, LaunchError> {
        if self.config.keep_logs > 0 {
            rotate(&log, self.config.keep_logs).map_err(LaunchError::io("rotate the previous run's log", &log))?;
        }
        let mut spec = Spec::new(name, program, log);
        spec.own_group = self.config.own_groups;
        spec.die_with_parent = self.config.die_with_parent;
        if let Some(filter) = &self.config.rust_log {
            spec.env.push(("RUST_LOG".into(), filter.into()));
        }
        Ok(spec)
    }

    /// Starts every coordinator, one after the other.
    pub fn start_coordinators(&mut self) -> Result<(), LaunchError> {
        (0..self.coordinators.len()).try_for_each(|i| self.start_coordinator(i))
    }

    /// Starts (or restarts, on its port and data directory) coordinator `i`, and waits for its
    /// ready lines: "listening on", and "http on" when it serves HTTP.
    pub fn start_coordinator(&mut self, i: usize) -> Result<(), LaunchError> {
        self.coordinators[i].proc = None;
        let mut spec =
            self.spec(self.coordinator_name(i), self.coordinator_program.clone(), self.coordinator_log(i))?;
        spec.args = self.coordinator_args(i);
        spec.watch_stdout = true;
        let proc = Proc::spawn(&spec)?;
        let want_http = self.config.http != Http::Off;
        let (proc, addr, http) = wait_ready(proc, want_http, READY_TIMEOUT)?;
        let scheme = if self.config.insecure { "http" } else { "https" };
        let c = &mut self.coordinators[i];
        c.proc = Some(proc);
        c.port = addr.port();
        c.url = Some(format!("{scheme}://{addr}"));
        c.http = http;
        Ok(())
    }

    /// Starts every worker, each given every coordinator's URL.
    pub fn start_workers(&mut self) -> Result<(), LaunchError> {
        (0..self.workers.len()).try_for_each(|i| self.start_worker(i))
    }

    /// Starts (or restarts) worker `i`, given every coordinator's URL.
    pub fn start_worker(&mut self, i: usize) -> Result<(), LaunchError> {
        self.start_worker_with(i, &WorkerLaunch::default())
    }

    /// Starts (or restarts) worker `i`, as `launch` says it differs from the others.
    pub fn start_worker_with(&mut self, i: usize, launch: &WorkerLaunch) -> Result<(), LaunchError> {
        self.workers[i] = None;
        let program = match &self.worker_program {
            Some(p) => p.clone(),
            None => {
                let p = programs::find(programs::WORKER)?;
                self.worker_program = Some(p.clone());
                p
            }
        };
        let coordinators = launch.coordinators.clone().unwrap_or_else(|| self.urls().join(","));
        let mut args = self.worker_args(i, &coordinators);
        args.extend(launch.args.iter().cloned());
        let mut spec = match launch.prefix.split_first() {
            Some((first, rest)) => {
                let mut spec = self.spec(self.worker_name(i), first.into(), self.worker_log(i))?;
                spec.args = rest.iter().cloned().chain([program.into_os_string()]).chain(args).collect();
                spec
            }
            None => {
                let mut spec = self.spec(self.worker_name(i), program, self.worker_log(i))?;
                spec.args = args;
                spec
            }
        };
        spec.env.extend(self.config.worker_env.iter().cloned());
        self.workers[i] = Some(Proc::spawn(&spec)?);
        Ok(())
    }

    /// Starts one more worker; returns its index.
    pub fn add_worker(&mut self) -> Result<usize, LaunchError> {
        self.add_worker_with(&WorkerLaunch::default())
    }

    /// Starts one more worker as `launch` says; returns its index.
    pub fn add_worker_with(&mut self, launch: &WorkerLaunch) -> Result<usize, LaunchError> {
        self.workers.push(None);
        let i = self.workers.len() - 1;
        self.start_worker_with(i, launch)?;
        Ok(i)
    }

    /// `kill -9` coordinator `i` (a stopped one is continued first, so it dies at once).
    pub fn kill_coordinator(&mut self, i: usize) {
        self.coordinators[i].proc = None;
    }

    /// Stops coordinator `i` with SIGTERM (a clean shutdown) and waits for it.
    pub fn terminate_coordinator(&mut self, i: usize) {
        if let Some(mut p) = self.coordinators[i].proc.take() {
            p.terminate();
        }
    }

    /// Sends `signal` (SIGSTOP, SIGCONT) to coordinator `i`, if it runs.
    pub fn signal_coordinator(&self, i: usize, signal: i32) -> std::io::Result<()> {
        self.coordinators[i].proc.as_ref().map_or(Ok(()), |p| p.signal(signal))
    }

    /// `kill -9` worker `i` (its subtasks' processes are left to die on their own).
    pub fn kill_worker(&mut self, i: usize) {
        self.workers[i] = None;
    }

    /// Sends `signal` (SIGSTOP: a host that hangs rather than dies) to worker `i`, if it runs.
    pub fn signal_worker(&self, i: usize, signal: i32) -> std::io::Result<()> {
        self.workers[i].as_ref().map_or(Ok(()), |p| p.signal(signal))
    }

    /// The processes that exited since the last call.
    pub fn reap(&mut self) -> Vec<Exited> {
        let procs =
            self.coordinators.iter_mut().filter_map(|c| c.proc.as_mut()).chain(self.workers.iter_mut().flatten());
        procs
            .filter_map(|p| {
                let status = p.reap()?;
                Some(Exited { name: p.name().to_string(), status, log: p.log().to_path_buf() })
            })
            .collect()
    }

    /// Whether every process started has exited (and been reaped).
    pub fn all_exited(&self) -> bool {
        let procs = self.coordinators.iter().filter_map(|c| c.proc.as_ref()).chain(self.workers.iter().flatten());
        procs.into_iter().all(|p| p.exit().is_some())
    }

    /// Stops every worker (SIGTERM, the grace period, SIGKILL) and removes whatever cgroups
    /// they left. Returns the names of those that had to be killed.
    pub fn stop_workers(&mut self) -> Vec<String> {
        let killed = stop_all(self.workers.iter_mut().flatten(), self.config.grace);
        self.workers.iter_mut().for_each(|w| *w = None);
        // A worker killed with `kill -9` (and not restarted) leaves its cgroups, and maybe
        // processes in them, until its next start; there may be none.
        for i in 0..self.workers.len() {
            let id = std::fs::read_to_string(self.worker_dir(i).join("worker-id")).unwrap_or_default();
            crate::remove_worker_cgroups(id.trim());
        }
        killed
    }

    /// Stops the whole cluster, workers first. Returns the names of the processes that did not
    /// stop within the grace period and were killed.
    pub fn stop(&mut self) -> Vec<String> {
        let mut killed = self.stop_workers();
        if self.config.terminate_coordinators {
            killed.extend(stop_all(self.coordinators.iter_mut().filter_map(|c| c.proc.as_mut()), self.config.grace));
        }
        // Dropping a process kills and reaps it (a no-op for one that has exited).
        self.coordinators.iter_mut().for_each(|c| c.proc = None);
        killed
    }
}

impl Drop for LocalCluster {
    fn drop(&mut self) {
        self.stop();
    }
}

/// Reads `proc`'s stdout until its ready lines came: "listening on", and "http on" when
/// `want_http`. Fails when it exits first, prints a malformed ready line, or takes past
/// `timeout`; the process is killed then (it is dropped).
fn wait_ready(
    mut proc: Proc,
    want_http: bool,
    timeout: Duration,
) -> Result<(Proc, SocketAddr, Option<SocketAddr>), LaunchError> {
    let deadline = Instant::now() + timeout;
    let (mut addr, mut http) = (None, None);
    loop {
        if let (Some(a), true) = (addr, http.is_some() || !want_http) {
            return Ok((proc, a, http));
        }
        match proc.next_line(POLL).as_deref().map(|l| (l, ready::parse(l))) {
            Some((_, Line::Listening(a))) => addr = Some(a),
            Some((_, Line::Http(a))) => http = Some(a),
            Some((line, Line::Malformed)) => {
                return Err(LaunchError::BadReadyLine { name: proc.name().to_string(), line: line.to_string() });
            }
            Some((_, Line::Other)) => {}
            None => {
                if let Some(status) = proc.reap() {
                    return Err(LaunchError::ExitedEarly {
                        name: proc.name().to_string(),
                        status,
                        log: proc.log().to_path_buf(),
                    });
                }
            }
        }
        if Instant::now() >= deadline {
            let line = if addr.is_none() { ready::LISTENING.trim() } else { ready::HTTP.trim() };
            return Err(LaunchError::NotReady {
                name: proc.name().to_string(),
                line,
                timeout,
                log: proc.log().to_path_buf(),
            });
        }
    }
}

/// Moves `log` to `log.1`, `log.1` to `log.2`, … keeping `keep` old ones (the oldest is dropped).
/// A missing file is not an error: there was no earlier run.
fn rotate(log: &Path, keep: usize) -> std::io::Result<()> {
    let numbered = |n: usize| {
        let mut name = log.as_os_str().to_owned();
        name.push(format!(".{n}"));
        PathBuf::from(name)
    };
    if keep == 0 || !log.exists() {
        return Ok(());
    }
    match std::fs::remove_file(numbered(keep)) {
        Err(e) if e.kind() != std::io::ErrorKind::NotFound => return Err(e),
        _ => {}
    }
    for n in (1..keep).rev() {
        match std::fs::rename(numbered(n), numbered(n + 1)) {
            Err(e) if e.kind() != std::io::ErrorKind::NotFound => return Err(e),
            _ => {}
        }
    }
    std::fs::rename(log, numbered(1))
}

#[cfg(test)]
mod tests {
    use std::os::unix::fs::PermissionsExt;

    use super::*;

    #[test]
    fn logs_of_earlier_runs_are_rotated_not_truncated() {
        let dir = tempfile::tempdir().unwrap();
        let log = dir.path().join("coordinator.log");
        rotate(&log, 2).unwrap(); // nothing yet: nothing to do
        for run in 1..=4 {
            rotate(&log, 2).unwrap();
            std::fs::write(&log, format!("run {run}")).unwrap();
        }
        let read = |p: &str| std::fs::read_to_string(dir.path().join(p)).ok();
        assert_eq!(read("coordinator.log").as_deref(), Some("run 4"));
        assert_eq!(read("coordinator.log.1").as_deref(), Some("run 3"));
        assert_eq!(read("coordinator.log.2").as_deref(), Some("run 2"));
        assert_eq!(read("coordinator.log.3"), None, "only two earlier runs are kept");
    }

    fn os(v: &[&str]) -> Vec<OsString> {
        v.iter().map(OsString::from).collect()
    }

    /// A cluster whose programs are never run (the command lines are only looked at).
    fn plan(b: Builder) -> LocalCluster {
        b.coordinator_program("/nonexistent/c").worker_program("/nonexistent/w").build().unwrap()
    }

    #[test]
    fn coordinator_command_line() {
        let d = tempfile::tempdir().unwrap();
        let dir = d.path().join(".plexus");
        let c = plan(LocalCluster::builder(&dir).port(50051).http(Http::Port(8265)));
        let data = dir.join("coordinator").into_os_string().into_string().unwrap();
        assert_eq!(
            c.coordinator_args(0),
            os(&["--listen", "127.0.0.1:50051", "--http", "127.0.0.1:8265", "--data-dir", &data])
        );
        let c = plan(
            LocalCluster::builder(&dir)
                .port(7)
                .http(Http::Port(8))
                .placer(Some("learned"))
                .heartbeat_timeout_ms(3000)
                .coordinator_args(["--x"]),
        );
        assert_eq!(
            c.coordinator_args(0),
            os(&[
                "--listen",
                "127.0.0.1:7",
                "--http",
                "127.0.0.1:8",
                "--data-dir",
                &data,
                "--placer",
                "learned",
                "--heartbeat-timeout-ms",
                "3000",
                "--x"
            ])
        );
    }

    #[test]
    fn coordinators_on_etcd_are_numbered_and_advertise_what_they_are_told() {
        let d = tempfile::tempdir().unwrap();
        let c = plan(
            LocalCluster::builder(d.path())
                .store(Store::Etcd("etcd://127.0.0.1:2379".into()))
                .coordinators(2)
                .insecure(true)
                .lease_ttl_s(2)
                .advertise(vec!["https://a:1".into()]),
        );
        let data = |i: usize| d.path().join(format!("coordinator-{i}")).into_os_string().into_string().unwrap();
        let want = |i: usize| {
            let mut v = os(&[
                "--insecure",
                "--store",
                "etcd://127.0.0.1:2379",
                "--listen",
                "127.0.0.1:0",
                "--http",
                "none",
                "--data-dir",
                &data(i),
                "--lease-ttl",
                "2s",
            ]);
            if i == 0 {
                v.extend(os(&["--advertise", "https://a:1"]));
            }
            v
        };
        assert_eq!(c.coordinator_args(0), want(0));
        assert_eq!(c.coordinator_args(1), want(1));
        assert_eq!(c.coordinator_log(1), d.path().join("coordinator-1.log"));
        assert_eq!(c.ca_file(), d.path().join("coordinator-0").join("ca.pem"), "the first coordinator's CA");
    }

    #[test]
    fn worker_command_line() {
        let d = tempfile::tempdir().unwrap();
        let p = |s: &str| d.path().join(s).into_os_string().into_string().unwrap();
        let c = plan(LocalCluster::builder(d.path()).workers(2).number_workers_from(1).log_dir(d.path().join("logs")));
        assert_eq!(
            c.worker_args(1, "https://127.0.0.1:50051"),
            os(&[
                "--coordinator",
                "https://127.0.0.1:50051",
                "--data-dir",
                &p("worker-2"),
                "--ca",
                &p("coordinator/ca.pem"),
                "--join-token-file",
                &p("coordinator/join.token")
            ])
        );
        assert_eq!(c.worker_log(0), d.path().join("logs").join("worker-1.log"));
        let c = plan(
            LocalCluster::builder(d.path())
                .workers(1)
                .cpus(Some(4))
                .cache(Some("256MiB"))
                .rails(&["127.0.0.2".parse().unwrap(), "127.0.0.3".parse().unwrap()])
                .worker_args(["--metrics", "none"]),
        );
        assert_eq!(
            c.worker_args(0, "https://127.0.0.1:9"),
            os(&[
                "--coordinator",
                "https://127.0.0.1:9",
                "--data-dir",
                &p("worker-0"),
                "--ca",
                &p("coordinator/ca.pem"),
                "--join-token-file",
                &p("coordinator/join.token"),
                "--cpus",
                "4",
                "--cache",
                "256MiB",
                "--rail",
                "127.0.0.2",
                "--rail",
                "127.0.0.3",
                "--metrics",
                "none"
            ])
        );
        let c = plan(LocalCluster::builder(d.path()).workers(1).insecure(true));
        assert_eq!(
            c.worker_args(0, "http://127.0.0.1:9"),
            os(&["--coordinator", "http://127.0.0.1:9", "--data-dir", &p("worker-0"), "--insecure"])
        );
    }

    /// A stand-in coordinator: a shell script that prints `lines` and then sleeps.
    fn fake_coordinator(dir: &Path, script: &str) -> PathBuf {
        let p = dir.join("fake-coordinator");
        std::fs::write(&p, format!("#!/bin/sh\n{script}\n")).unwrap();
        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o755)).unwrap();
        p
    }

    #[test]
    fn the_ready_lines_give_the_urls_and_a_restart_keeps_the_port() {
        let d = tempfile::tempdir().unwrap();
        let prog = fake_coordinator(
            d.path(),
            "echo starting; echo 'plexus-coordinator listening on 127.0.0.1:4242'; \
             echo 'plexus-coordinator http on 127.0.0.1:8265'; exec sleep 60",
        );
        let mut c =
            LocalCluster::builder(d.path().join("c")).coordinator_program(&prog).http(Http::AnyPort).build().unwrap();
        c.start_coordinators().unwrap();
        assert_eq!(c.url(0), Some("https://127.0.0.1:4242"));
        assert_eq!(c.http(0), Some("127.0.0.1:8265".parse().unwrap()));
        assert!(c.coordinator_args(0).contains(&OsString::from("127.0.0.1:4242")), "the port is kept");
        let pid = c.coordinator_pid(0).unwrap();
        c.start_coordinator(0).unwrap();
        assert_ne!(c.coordinator_pid(0), Some(pid), "a restart is a new process");
        assert!(c.reap().is_empty());
        c.kill_coordinator(0);
        assert!(c.all_exited());
        let log = std::fs::read_to_string(c.coordinator_log(0)).unwrap();
        assert_eq!(log.matches("starting").count(), 2, "stdout is logged, restarts append: {log}");
    }

    #[test]
    fn a_coordinator_that_exits_or_stays_silent_is_named() {
        let d = tempfile::tempdir().unwrap();
        let dies = fake_coordinator(d.path(), "echo cannot open the store >&2; exit 4");
        let mut c = LocalCluster::builder(d.path().join("c")).coordinator_program(&dies).build().unwrap();
        let err = c.start_coordinators().unwrap_err().to_string();
        assert!(err.starts_with("coordinator exited (exit status: 4) before it listened; see "), "{err}");

        let silent = d.path().join("silent");
        std::fs::create_dir(&silent).unwrap();
        let prog = fake_coordinator(&silent, "exec sleep 60");
        let c = LocalCluster::builder(d.path().join("s")).coordinator_program(&prog).build().unwrap();
        let proc = Proc::spawn(&{
            let mut s = Spec::new("coordinator", &prog, c.coordinator_log(0));
            s.watch_stdout = true;
            s
        })
        .unwrap();
        let err = wait_ready(proc, false, Duration::from_millis(200)).unwrap_err().to_string();
        assert!(err.starts_with("coordinator printed no \"plexus-coordinator listening on\" line within"), "{err}");
    }

    #[test]
    fn workers_run_under_a_prefix_with_their_own_arguments_and_stop_first() {
        let d = tempfile::tempdir().unwrap();
        let prog = fake_coordinator(d.path(), "echo 'plexus-coordinator listening on 127.0.0.1:1'; exec sleep 60");
        // The "worker" echoes its command line: the prefix runs it through `env`.
        let mut c = LocalCluster::builder(d.path().join("c"))
            .coordinator_program(&prog)
            .worker_program("/bin/echo")
            .insecure(true)
            .workers(1)
            .build()
            .unwrap();
        c.start_coordinators().unwrap();
        let launch =
            WorkerLaunch { prefix: os(&["/usr/bin/env"]), args: os(&["--rail", "127.0.0.2"]), coordinators: None };
        c.start_worker_with(0, &launch).unwrap();
        let mut exited = Vec::new();
        for _ in 0..500 {
            exited.extend(c.reap());
            if !exited.is_empty() {
                break;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        assert_eq!(exited.len(), 1);
        assert_eq!(exited[0].name, "worker-0");
        assert!(exited[0].status.success());
        let log = std::fs::read_to_string(c.worker_log(0)).unwrap();
        let want = format!(
            "--coordinator http://127.0.0.1:1 --data-dir {} --insecure --rail 127.0.0.2\n",
            c.worker_dir(0).display()
        );
        assert_eq!(log, want);
        assert!(!c.all_exited(), "the coordinator still runs");
        assert!(c.stop().is_empty(), "nothing had to be killed");
        assert_eq!(c.coordinator_pid(0), None, "stopped with the cluster");
    }
}
