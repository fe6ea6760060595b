//! A harness that runs a real Plexus cluster on loopback: the `plexus-coordinator`,
//! `plexus-worker` and `plexus` binaries as child processes, each with its own data dir under one
//! temporary directory, talking gRPC over 127.0.0.1 ports. Tests and benchmarks use it to check
//! behaviour the way a user sees it.
//!
//! The binaries are found next to the running executable (`target/<profile>/`), so build them
//! first (`cargo build --workspace --bins`, which `make test` does), or point `PLEXUS_BIN_DIR`
//! at them.

use std::fs::{File, OpenOptions};

pub mod etcd;
pub mod ha;
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

use plexus_proto::pb;
use plexus_proto::pb::job_service_client::JobServiceClient;
use plexus_security::tls::Bearer;
use tonic::service::interceptor::InterceptedService;

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
    port: u16,
    /// The cluster CA (PEM) and the admin token, read from the coordinator's data dir.
    pub ca: Option<String>,
    pub admin_token: Option<String>,
    coordinator: Option<Child>,
    workers: Vec<Option<Child>>,
    rt: tokio::runtime::Runtime,
}

fn log_file(path: &Path) -> File {
    OpenOptions::new().create(true).append(true).open(path).expect("opening a log file in the test dir")
}

impl Cluster {
    /// Starts a coordinator and the configured workers and waits until all workers are alive.
    pub fn start(config: ClusterConfig) -> Cluster {
        let dir = tempfile::Builder::new().prefix("plexus-e2e-").tempdir().expect("a temp dir");
        let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().expect("a tokio runtime");
        let mut c = Cluster {
            config,
            dir,
            bin: bin_dir(),
            url: String::new(),
            http: None,
            port: 0,
            ca: None,
            admin_token: None,
            coordinator: None,
            workers: Vec::new(),
            rt,
        };
        c.start_coordinator();
        for i in 0..c.config.workers {
            c.workers.push(None);
            c.start_worker(i);
        }
        c.wait_workers_alive(c.config.workers);
        c
    }

    pub fn path(&self, p: &str) -> PathBuf {
        self.dir.path().join(p)
    }

    /// Starts (or restarts, on the same data dir and port) the coordinator.
    pub fn start_coordinator(&mut self) {
        let listen = format!("127.0.0.1:{}", self.port);
        let mut child = Command::new(self.bin.join("plexus-coordinator"))
            .args(self.config.insecure.then_some("--insecure"))
            .args(["--listen", &listen, "--data-dir"])
            .arg(self.path("coordinator"))
            .args(["--placer", &self.config.placer])
            .args(["--heartbeat-timeout-ms", &self.config.heartbeat_timeout_ms.to_string()])
            .args(if self.config.coordinator_args.iter().any(|a| a == "--http") {
                vec![]
            } else {
                vec!["--http", "127.0.0.1:0"]
            })
            .args(&self.config.coordinator_args)
            .env("RUST_LOG", &self.config.log)
            .stdout(Stdio::piped())
            .stderr(log_file(&self.path("coordinator.log")))
            .spawn()
            .expect("spawning plexus-coordinator");
        let stdout = child.stdout.take().expect("piped stdout");
        let mut line = String::new();
        let mut out = BufReader::new(stdout);
        out.read_line(&mut line).expect("reading the coordinator's first line");
        let mut http = String::new();
        if !self.config.coordinator_args.windows(2).any(|w| w[0] == "--http" && w[1] == "none") {
            out.read_line(&mut http).expect("reading the coordinator's second line");
        }
        self.http = http.trim().strip_prefix("plexus-coordinator http on ").map(|a| format!("http://{a}"));
        let addr = line
            .trim()
            .strip_prefix("plexus-coordinator listening on ")
            .unwrap_or_else(|| panic!("coordinator did not start: {line:?}; log:\n{}", self.coordinator_log()))
            .to_string();
        self.port = addr.rsplit(':').next().and_then(|p| p.parse().ok()).expect("a port in the listen line");
        self.url = format!("{}://{addr}", if self.config.insecure { "http" } else { "https" });
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
        self.coordinator = Some(child);
    }

    /// The CA certificate the coordinator wrote into its data dir.
    pub fn ca_file(&self) -> PathBuf {
        self.path("coordinator").join("ca.pem")
    }

    /// The first admin token, written on the coordinator's first start.
    pub fn admin_token_file(&self) -> PathBuf {
        self.path("coordinator").join("admin.token")
    }

    /// The join token for workers, written on the coordinator's first start.
    pub fn join_token_file(&self) -> PathBuf {
        self.path("coordinator").join("join.token")
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

    pub fn coordinator_log(&self) -> String {
        std::fs::read_to_string(self.path("coordinator.log")).unwrap_or_default()
    }

    pub fn worker_dir(&self, i: usize) -> PathBuf {
        self.path(&format!("worker-{i}"))
    }

    /// Starts (or restarts) worker `i`.
    pub fn start_worker(&mut self, i: usize) {
        let trust: Vec<std::ffi::OsString> = if self.config.insecure {
            vec!["--insecure".into()]
        } else {
            vec!["--ca".into(), self.ca_file().into(), "--join-token-file".into(), self.join_token_file().into()]
        };
        let child = Command::new(self.bin.join("plexus-worker"))
            .args(["--coordinator", &self.url, "--data-dir"])
            .arg(self.worker_dir(i))
            .args(trust)
            .args(["--cpus", &self.config.cpus_per_worker.to_string(), "--cache", &self.config.cache])
            .args(&self.config.worker_args)
            .envs(self.config.worker_env.iter().map(|(k, v)| (k, v)))
            .env("RUST_LOG", &self.config.log)
            .stdout(log_file(&self.path(&format!("worker-{i}.log"))))
            .stderr(log_file(&self.path(&format!("worker-{i}.log"))))
            .spawn()
            .expect("spawning plexus-worker");
        self.workers[i] = Some(child);
    }

    /// Starts one more worker; returns its index.
    pub fn add_worker(&mut self) -> usize {
        let i = self.workers.len();
        self.workers.push(None);
        self.start_worker(i);
        i
    }

    /// What worker `i` has logged so far (all its runs).
    pub fn worker_log(&self, i: usize) -> String {
        std::fs::read_to_string(self.path(&format!("worker-{i}.log"))).unwrap_or_default()
    }

    /// The stable id of worker `i` (from its data dir).
    pub fn worker_id(&self, i: usize) -> String {
        std::fs::read_to_string(self.worker_dir(i).join("worker-id")).map(|s| s.trim().to_string()).unwrap_or_default()
    }

    /// Which worker index has the given id.
    pub fn worker_index(&self, id: &str) -> Option<usize> {
        (0..self.workers.len()).find(|&i| self.worker_id(i) == id)
    }

    /// `kill -9` the coordinator.
    pub fn kill_coordinator(&mut self) {
        if let Some(mut c) = self.coordinator.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }

    /// Stops the coordinator with SIGTERM (a clean shutdown) and waits for it.
    pub fn stop_coordinator(&mut self) {
        if let Some(mut c) = self.coordinator.take() {
            // SAFETY: kill(2) on a pid we spawned.
            unsafe { libc::kill(c.id() as i32, libc::SIGTERM) };
            let _ = c.wait();
        }
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
        if let Some(mut c) = self.workers[i].take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }

    /// `kill -STOP` worker `i`: a host that hangs rather than dies (its sockets stay open, nothing
    /// answers). The harness kills it on drop, as any worker.
    pub fn freeze_worker(&self, i: usize) {
        let pid = self.workers[i].as_ref().expect("worker is running").id();
        // SAFETY: kill(2) has no memory-safety preconditions; the pid is our own child's.
        let rc = unsafe { libc::kill(pid as libc::pid_t, libc::SIGSTOP) };
        assert_eq!(rc, 0, "SIGSTOP worker {i}: {}", std::io::Error::last_os_error());
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
        self.rt.block_on(c.list_workers(pb::ListWorkersRequest {})).ok().map(|r| r.into_inner().workers)
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
        cmd.env("PLEXUS_COORDINATOR", &self.url).env_remove("PLEXUS_TOKEN");
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
        // Workers first, politely, so they kill their subtasks' process groups.
        for w in self.workers.iter_mut().flatten() {
            // SAFETY: kill(2) on a pid we spawned; at worst the process is already gone.
            unsafe { libc::kill(w.id() as i32, libc::SIGTERM) };
        }
        let deadline = Instant::now() + Duration::from_secs(3);
        for w in self.workers.iter_mut().flatten() {
            while Instant::now() < deadline && matches!(w.try_wait(), Ok(None)) {
                std::thread::sleep(Duration::from_millis(20));
            }
            let _ = w.kill();
            let _ = w.wait();
        }
        // A worker killed with `kill -9` (and not restarted) leaves its cgroups, and maybe
        // processes in them, until its next start; there is none for a test's worker.
        for i in 0..self.workers.len() {
            remove_worker_cgroups(&self.worker_id(i));
        }
        self.kill_coordinator();
        if std::env::var_os("PLEXUS_KEEP_TEST_DIR").is_some() {
            let p = self.dir.path().to_path_buf();
            eprintln!("keeping {}", p.display());
            std::mem::forget(std::mem::replace(&mut self.dir, tempfile::tempdir().expect("temp dir")));
        }
    }
}

/// Kills whatever is left in the cgroups of worker `id` (`<cgroup mount>/plexus/<id>/…`, in every
/// cgroup hierarchy mounted here) and removes them, and the shared `plexus` parent if it is empty
/// then. What the worker's next start would do; a test's worker has none.
pub fn remove_worker_cgroups(id: &str) {
    if !id.starts_with("wkr-") || id.contains('/') {
        return;
    }
    let mounts = std::fs::read_to_string("/proc/self/mountinfo").unwrap_or_default();
    for line in mounts.lines() {
        let Some((left, right)) = line.split_once(" - ") else { continue };
        if !(right.starts_with("cgroup ") || right.starts_with("cgroup2 ")) {
            continue;
        }
        let Some(point) = left.split(' ').nth(4) else { continue };
        let shared = Path::new(point).join("plexus");
        let parent = shared.join(id);
        // Parents before children, then removed children first.
        let mut dirs = Vec::new();
        let mut stack = vec![parent];
        while let Some(d) = stack.pop() {
            let Ok(rd) = std::fs::read_dir(&d) else { continue };
            stack.extend(rd.flatten().filter(|e| e.file_type().is_ok_and(|t| t.is_dir())).map(|e| e.path()));
            dirs.push(d);
        }
        for d in dirs.iter().rev() {
            for _ in 0..100 {
                let pids: Vec<i32> = std::fs::read_to_string(d.join("cgroup.procs"))
                    .unwrap_or_default()
                    .lines()
                    .filter_map(|l| l.trim().parse().ok())
                    .filter(|&p: &i32| p > 1 && p != std::process::id() as i32)
                    .collect();
                if pids.is_empty() {
                    break;
                }
                for p in pids {
                    // SAFETY: kill(2); the pid is in a cgroup a test's worker made for its tasks.
                    unsafe { libc::kill(p, libc::SIGKILL) };
                }
                std::thread::sleep(Duration::from_millis(10));
            }
            let _ = std::fs::remove_dir(d);
        }
        let _ = std::fs::remove_dir(&shared);
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

pub fn describe(o: &Output) -> String {
    format!(
        "exit {:?}\nstdout: {}\nstderr: {}",
        o.status.code(),
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}
