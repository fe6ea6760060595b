//! A harness that runs a real Plexus cluster on loopback: the `plexus-coordinator`,
//! `plexus-worker` and `plexus` binaries as child processes, each with its own data dir under one
//! temporary directory, talking gRPC over 127.0.0.1 ports. Tests and benchmarks use it to check
//! behaviour the way a user sees it.
//!
//! The processes are started, watched and stopped by the one launcher, `plexus_launch::
//! LocalCluster`; this crate adds what needs a client of the coordinator (waiting for workers,
//! submitting, reading jobs) and the CLI run against the cluster.
//!
//! The binaries are found next to the running executable (`target/<profile>/`), so build them
//! first (`cargo build --workspace --bins`, which `make test` does), or point `PLEXUS_BIN_DIR`
//! at them.

pub mod chaos;
pub mod etcd;
pub mod ha;

use std::path::PathBuf;
use std::process::{Command, Output};
use std::time::{Duration, Instant};

use plexus_launch::{Http, LocalCluster};
use plexus_proto::pb;
use plexus_proto::pb::job_service_client::JobServiceClient;
use plexus_security::tls::Bearer;
use tonic::service::interceptor::InterceptedService;

pub use plexus_launch::remove_worker_cgroups;

/// Makes `dir` writable by the cluster's tasks, as `/tmp` is (sticky: none removes another's
/// files). A root worker runs tasks as uids of their own; they must reach their work dirs under
/// the cluster's directory, and tests have them write markers there.
pub fn open_to_tasks(dir: &std::path::Path) {
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o1777)).expect("chmod of a test dir");
}

/// Where the Plexus binaries are.
pub fn bin_dir() -> PathBuf {
    if let Ok(d) = std::env::var("PLEXUS_BIN_DIR") {
        return PathBuf::from(d);
    }
    let exe = std::env::current_exe().expect("the path of the running test binary");
    for dir in exe.ancestors().skip(1) {
        if dir.join("plexus-coordinator").exists() {
            return dir.to_path_buf();
        }
    }
    panic!(
        "plexus-coordinator not found next to {}: run `cargo build --workspace --bins` first (or set PLEXUS_BIN_DIR)",
        exe.display()
    );
}

/// How a test cluster is started.
#[derive(Clone, Debug)]
pub struct ClusterConfig {
    pub workers: usize,
    pub cpus_per_worker: u32,
    pub heartbeat_timeout_ms: u64,
    pub placer: String,
    pub cache: String,
    /// `RUST_LOG` for the children.
    pub log: String,
    /// Extra arguments for every worker (e.g. `--rail` addresses).
    pub worker_args: Vec<String>,
    /// Extra arguments for the coordinator (`--http none` turns its HTTP side and metrics off).
    pub coordinator_args: Vec<String>,
    /// Extra environment for every worker (e.g. a `PATH` with a fake `nvidia-smi` first).
    pub worker_env: Vec<(String, String)>,
    /// Run everything with `--insecure` (no TLS, no tokens). Default: secure, as the product
    /// is: workers join with the coordinator's join token, clients use its admin token.
    pub insecure: bool,
    /// How long workers get between SIGTERM and SIGKILL when the cluster stops (they kill their
    /// subtasks' process groups in that time).
    pub stop_grace: Duration,
    /// Where the coordinator's gRPC side listens (default 127.0.0.1; another address for workers
    /// in a network namespace of their own).
    pub listen_ip: std::net::IpAddr,
}

impl Default for ClusterConfig {
    fn default() -> Self {
        ClusterConfig {
            workers: 3,
            cpus_per_worker: 2,
            // The product default: long enough that a loaded 2-core CI machine does not lose workers.
            heartbeat_timeout_ms: 3_000,
            placer: "least-loaded".into(),
            cache: "256MiB".into(),
            log: "info".into(),
            worker_args: vec![],
            coordinator_args: vec![],
            worker_env: vec![],
            insecure: false,
            stop_grace: Duration::from_secs(3),
            listen_ip: std::net::IpAddr::V4(std::net::Ipv4Addr::LOCALHOST),
        }
    }
}

pub struct Cluster {
    pub config: ClusterConfig,
    pub dir: tempfile::TempDir,
    pub bin: PathBuf,
    pub url: String,
    /// The coordinator's HTTP side (`/metrics`), `http://ADDR`.
    pub http: Option<String>,
    /// The cluster CA (PEM) and the admin token, read from the coordinator's data dir.
    pub ca: Option<String>,
    pub admin_token: Option<String>,
    /// The processes, started and stopped by the one launcher.
    launch: LocalCluster,
    rt: tokio::runtime::Runtime,
}

/// Where the coordinator serves HTTP, as `--http` in `args` says (taken out of them), by default
/// on any free port.
fn http_of(args: &[String]) -> (Http, Vec<String>) {
    let Some(at) = args.iter().position(|a| a == "--http") else { return (Http::AnyPort, args.to_vec()) };
    let value = args.get(at + 1).map(String::as_str).unwrap_or_default();
    let http = match value {
        "none" => Http::Off,
        v => match v.parse::<std::net::SocketAddr>().map(|a| a.port()) {
            Ok(0) => Http::AnyPort,
            Ok(p) => Http::Port(p),
            Err(e) => panic!("the harness serves HTTP on 127.0.0.1 only: `--http {v}` ({e})"),
        },
    };
    let rest = args.iter().enumerate().filter(|(i, _)| *i != at && *i != at + 1).map(|(_, a)| a.clone()).collect();
    (http, rest)
}

impl Cluster {
    /// Starts a coordinator and the configured workers and waits until all workers are alive.
    pub fn start(config: ClusterConfig) -> Cluster {
        let dir = tempfile::Builder::new().prefix("plexus-e2e-").tempdir().expect("a temp dir");
        open_to_tasks(dir.path());
        let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().expect("a tokio runtime");
        let bin = bin_dir();
        let (http, coordinator_args) = http_of(&config.coordinator_args);
        let launch = LocalCluster::builder(dir.path())
            .bin_dir(&bin)
            .insecure(config.insecure)
            .listen_ip(config.listen_ip)
            .placer(Some(&config.placer))
            .heartbeat_timeout_ms(config.heartbeat_timeout_ms)
            .http(http)
            .coordinator_args(coordinator_args)
            .workers(config.workers)
            .cpus(Some(config.cpus_per_worker))
            .cache(Some(&config.cache))
            .worker_args(&config.worker_args)
            .worker_env(config.worker_env.clone())
            .rust_log(&config.log)
            .stop_grace(config.stop_grace)
            .build()
            .unwrap_or_else(|e| panic!("preparing the cluster in {}: {e}", dir.path().display()));
        let mut c =
            Cluster { config, dir, bin, url: String::new(), http: None, ca: None, admin_token: None, launch, rt };
        c.start_coordinator();
        for i in 0..c.config.workers {
            c.start_worker(i);
        }
        c.wait_workers_alive(c.config.workers);
        c
    }

    pub fn path(&self, p: &str) -> PathBuf {
        self.dir.path().join(p)
    }

    /// A directory `p` of the cluster's that its tasks may write in (markers, ledgers): a root
    /// worker runs them as uids of their own, to whom the test's own directories are closed.
    pub fn task_dir(&self, p: &str) -> PathBuf {
        let dir = self.path(p);
        std::fs::create_dir_all(&dir).expect("a task dir");
        open_to_tasks(&dir);
        dir
    }

    /// Starts (or restarts, on the same data dir and port) the coordinator.
    pub fn start_coordinator(&mut self) {
        if let Err(e) = self.launch.start_coordinator(0) {
            panic!("coordinator did not start: {e}; log:\n{}", self.coordinator_log());
        }
        self.url = self.launch.url(0).expect("a started coordinator's URL").to_string();
        self.http = self.launch.http(0).map(|a| format!("http://{a}"));
        if !self.config.insecure {
            // Written before the coordinator listens (the token files on its first start only).
            self.ca = Some(std::fs::read_to_string(self.ca_file()).expect("the coordinator's ca.pem"));
            self.admin_token = Some(
                std::fs::read_to_string(self.admin_token_file())
                    .expect("the coordinator's admin.token")
                    .trim()
                    .to_string(),
            );
        }
    }

    /// The CA certificate the coordinator wrote into its data dir.
    pub fn ca_file(&self) -> PathBuf {
        self.launch.ca_file()
    }

    /// The first admin token, written on the coordinator's first start.
    pub fn admin_token_file(&self) -> PathBuf {
        self.launch.admin_token_file()
    }

    /// The join token for workers, written on the coordinator's first start.
    pub fn join_token_file(&self) -> PathBuf {
        self.launch.join_token_file()
    }

    /// A channel to the coordinator as a client sees it: TLS checked against the cluster CA
    /// (none when insecure).
    pub fn channel(&self) -> Result<tonic::transport::Channel, tonic::transport::Error> {
        let mut endpoint =
            tonic::transport::Endpoint::from_shared(self.url.clone())?.connect_timeout(Duration::from_secs(2));
        if let Some(ca) = &self.ca {
            endpoint =
                endpoint.tls_config(plexus_security::tls::client(ca, plexus_security::tls::COORDINATOR_NAME, None))?;
        }
        self.rt.block_on(endpoint.connect())
    }

    /// A JobService client presenting `token` (none: no authorization header).
    pub fn client_with(
        &self,
        token: Option<&str>,
    ) -> JobServiceClient<InterceptedService<tonic::transport::Channel, Bearer>> {
        let token = token.map(|t| plexus_security::Token::parse(t).expect("a well-formed token"));
        JobServiceClient::with_interceptor(
            self.channel().expect("connecting to the coordinator"),
            Bearer::new(token.as_ref()),
        )
        .max_decoding_message_size(64 << 20)
    }

    /// Runs `f` on the harness's runtime (for calls made with [`Cluster::client_with`]).
    pub fn block_on<F: std::future::Future>(&self, f: F) -> F::Output {
        self.rt.block_on(f)
    }

    /// The coordinator's process id, while it runs.
    pub fn coordinator_pid(&self) -> Option<u32> {
        self.launch.coordinator_pid(0)
    }

    pub fn coordinator_log(&self) -> String {
        std::fs::read_to_string(self.launch.coordinator_log(0)).unwrap_or_default()
    }

    pub fn worker_dir(&self, i: usize) -> PathBuf {
        self.launch.worker_dir(i)
    }

    /// Starts (or restarts) worker `i`.
    pub fn start_worker(&mut self, i: usize) {
        self.launch.start_worker(i).unwrap_or_else(|e| panic!("starting worker {i}: {e}"));
    }

    /// Starts one more worker; returns its index.
    pub fn add_worker(&mut self) -> usize {
        self.launch.add_worker().unwrap_or_else(|e| panic!("adding a worker: {e}"))
    }

    /// The launcher under the harness, for what it does not wrap (a worker started under a
    /// prefix command, say).
    pub fn launcher(&mut self) -> &mut LocalCluster {
        &mut self.launch
    }

    /// What worker `i` has logged so far (all its runs).
    pub fn worker_log(&self, i: usize) -> String {
        std::fs::read_to_string(self.launch.worker_log(i)).unwrap_or_default()
    }

    /// The stable id of worker `i` (from its data dir).
    pub fn worker_id(&self, i: usize) -> String {
        std::fs::read_to_string(self.worker_dir(i).join("worker-id")).map(|s| s.trim().to_string()).unwrap_or_default()
    }

    /// Which worker index has the given id.
    pub fn worker_index(&self, id: &str) -> Option<usize> {
        (0..self.launch.worker_count()).find(|&i| self.worker_id(i) == id)
    }

    /// `kill -9` the coordinator.
    pub fn kill_coordinator(&mut self) {
        self.launch.kill_coordinator(0);
    }

    /// Stops the coordinator with SIGTERM (a clean shutdown) and waits for it.
    pub fn stop_coordinator(&mut self) {
        self.launch.terminate_coordinator(0);
    }

    /// The job's status without per-subtask entries.
    pub fn job_summary(&self, id: &str) -> Option<pb::JobStatus> {
        let mut c = self.client_opt()?;
        self.rt
            .block_on(c.get_job(pb::GetJobRequest { job_id: id.into(), subtasks: false }))
            .ok()
            .map(|r| r.into_inner())
    }

    /// `kill -9` worker `i` (its running subtasks' processes are left to die on their own).
    pub fn kill_worker(&mut self, i: usize) {
        self.launch.kill_worker(i);
    }

    /// `kill -STOP` worker `i`: a host that hangs rather than dies (its sockets stay open, nothing
    /// answers). The harness kills it on drop, as any worker.
    pub fn freeze_worker(&self, i: usize) {
        assert!(self.launch.worker_pid(i).is_some(), "worker {i} is running");
        self.launch.signal_worker(i, libc::SIGSTOP).unwrap_or_else(|e| panic!("SIGSTOP worker {i}: {e}"));
    }

    /// `kill -CONT` worker `i`: a frozen worker resumes.
    pub fn thaw_worker(&self, i: usize) {
        self.launch.signal_worker(i, libc::SIGCONT).unwrap_or_else(|e| panic!("SIGCONT worker {i}: {e}"));
    }

    fn client(&self) -> JobServiceClient<InterceptedService<tonic::transport::Channel, Bearer>> {
        self.client_with(self.admin_token.as_deref())
    }

    /// Polls `f` every 50 ms until it returns Some, or panics after `timeout` naming `what`.
    pub fn wait_for<T>(&self, what: &str, timeout: Duration, mut f: impl FnMut(&Cluster) -> Option<T>) -> T {
        let start = Instant::now();
        loop {
            if let Some(v) = f(self) {
                return v;
            }
            if start.elapsed() > timeout {
                panic!(
                    "timed out after {timeout:?} waiting for {what}\n--- coordinator log ---\n{}",
                    self.coordinator_log()
                );
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    pub fn workers(&self) -> Option<Vec<pb::WorkerInfo>> {
        let mut c = self.client_opt()?;
        self.rt.block_on(c.list_workers(pb::ListWorkersRequest::default())).ok().map(|r| r.into_inner().workers)
    }

    fn client_opt(&self) -> Option<JobServiceClient<InterceptedService<tonic::transport::Channel, Bearer>>> {
        let token = self.admin_token.as_deref().map(|t| plexus_security::Token::parse(t).expect("a well-formed token"));
        Some(
            JobServiceClient::with_interceptor(self.channel().ok()?, Bearer::new(token.as_ref()))
                .max_decoding_message_size(64 << 20),
        )
    }

    pub fn wait_workers_alive(&self, n: usize) {
        self.wait_for(&format!("{n} live workers"), Duration::from_secs(30), |c| {
            let alive = c.workers()?.iter().filter(|w| w.alive).count();
            (alive >= n).then_some(())
        });
    }

    /// Submits a job file's text over gRPC; returns the job id.
    pub fn submit(&self, name: &str, source: &str) -> String {
        self.try_submit(name, source).unwrap_or_else(|e| panic!("submit failed: {}", e.message()))
    }

    /// Submits a job file's text over gRPC; returns the job id, or the refusal.
    pub fn try_submit(&self, name: &str, source: &str) -> Result<String, tonic::Status> {
        let mut c = self.client();
        self.rt
            .block_on(c.submit_job(pb::SubmitJobRequest {
                source: source.into(),
                format: String::new(),
                filename: name.into(),
                after_jobs: Vec::new(),
                working_dir: Vec::new(),
                dry_run: false,
            }))
            .map(|r| r.into_inner().job_id)
    }

    /// The job's status with subtasks, or None if the coordinator is unreachable.
    pub fn job(&self, id: &str) -> Option<pb::JobStatus> {
        let mut c = self.client_opt()?;
        self.rt
            .block_on(c.get_job(pb::GetJobRequest { job_id: id.into(), subtasks: true }))
            .ok()
            .map(|r| r.into_inner())
    }

    /// Waits until the job is in a final state and returns its status.
    pub fn wait_job(&self, id: &str, timeout: Duration) -> pb::JobStatus {
        self.wait_for(&format!("job {id} to end"), timeout, |c| {
            c.job(id).filter(|j| j.state != pb::JobState::Running as i32)
        })
    }

    /// Runs the `plexus` CLI against this cluster, as its admin.
    pub fn plexus(&self, args: &[&str]) -> Output {
        let mut cmd = Command::new(self.bin.join("plexus"));
        cmd.env("PLEXUS_COORDINATOR", &self.url).env_remove("PLEXUS_TOKEN").env_remove("PLEXUS_CONTEXT");
        // Contexts of its own (none): the user's never reach a test.
        cmd.env("PLEXUS_CONFIG_DIR", self.dir.path().join("config"));
        if self.config.insecure {
            cmd.arg("--insecure");
        } else {
            cmd.env("PLEXUS_CA", self.ca_file()).env("PLEXUS_TOKEN_FILE", self.admin_token_file());
        }
        cmd.args(args).output().expect("running plexus")
    }
}

impl Drop for Cluster {
    fn drop(&mut self) {
        // Workers first, politely, so they kill their subtasks' process groups; then the cgroups
        // a killed worker left, then the coordinator: before the directory goes.
        self.launch.stop();
        if std::env::var_os("PLEXUS_KEEP_TEST_DIR").is_some() {
            let p = self.dir.path().to_path_buf();
            eprintln!("keeping {}", p.display());
            std::mem::forget(std::mem::replace(&mut self.dir, tempfile::tempdir().expect("temp dir")));
        }
    }
}

/// Text of a CLI output's stdout and stderr, for assertion messages.
/// One HTTP/1.1 GET to `base` (`http://ADDR`) over a fresh connection, with a Bearer `token` if
/// given: (status code, body). For the coordinator's HTTP side (metrics, dashboard).
pub fn http_get(base: &str, path: &str, token: Option<&str>) -> (u16, String) {
    use std::io::{Read, Write};
    let addr = base.strip_prefix("http://").expect("an http:// URL");
    let mut s = std::net::TcpStream::connect(addr).expect("connecting to the coordinator's HTTP side");
    s.set_read_timeout(Some(Duration::from_secs(10))).expect("setting a read timeout");
    let auth = token.map(|t| format!("Authorization: Bearer {t}\r\n")).unwrap_or_default();
    write!(s, "GET {path} HTTP/1.1\r\nHost: {addr}\r\n{auth}Connection: close\r\n\r\n").expect("sending the request");
    let mut raw = String::new();
    s.read_to_string(&mut raw).expect("reading the response");
    let (head, body) = raw.split_once("\r\n\r\n").expect("a header and a body");
    let code = head.split_whitespace().nth(1).and_then(|c| c.parse().ok()).expect("a status code");
    assert!(
        !head.to_ascii_lowercase().contains("transfer-encoding: chunked") || code != 200,
        "expected a sized body: {head}"
    );
    (code, body.to_string())
}

/// `POST path` on `base` (`http://ADDR`) with a form `body`, the bearer `token` and `headers`:
/// (status code, the response's head, its body).
pub fn http_post(
    base: &str,
    path: &str,
    token: Option<&str>,
    headers: &[(&str, &str)],
    body: &str,
) -> (u16, String, String) {
    use std::io::{Read, Write};
    let addr = base.strip_prefix("http://").expect("an http:// URL");
    let mut s = std::net::TcpStream::connect(addr).expect("connecting to the coordinator's HTTP side");
    s.set_read_timeout(Some(Duration::from_secs(10))).expect("setting a read timeout");
    let mut head = format!("POST {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n");
    if let Some(t) = token {
        head.push_str(&format!("Authorization: Bearer {t}\r\n"));
    }
    for (k, v) in headers {
        head.push_str(&format!("{k}: {v}\r\n"));
    }
    head.push_str(&format!(
        "Content-Type: application/x-www-form-urlencoded\r\nContent-Length: {}\r\n\r\n",
        body.len()
    ));
    write!(s, "{head}{body}").expect("sending the request");
    let mut raw = String::new();
    s.read_to_string(&mut raw).expect("reading the response");
    let (head, body) = raw.split_once("\r\n\r\n").expect("a header and a body");
    let code = head.split_whitespace().nth(1).and_then(|c| c.parse().ok()).expect("a status code");
    (code, head.to_string(), body.to_string())
}

pub fn describe(o: &Output) -> String {
    format!(
        "exit {:?}\nstdout: {}\nstderr: {}",
        o.status.code(),
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}
