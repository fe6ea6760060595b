//! An HA control plane on loopback (issue 19): a real etcd cluster ([`crate::etcd`]), several
//! `plexus-coordinator --store etcd://…` processes and workers that know all of them. Tests and
//! the control-plane benchmark use it to kill, pause and resume leaders.

use std::path::PathBuf;
use std::process::Command;
use std::time::{Duration, Instant};

use plexus_launch::{Http, LaunchError, LocalCluster, Store, WorkerLaunch};
use plexus_proto::pb;
use plexus_proto::pb::job_service_client::JobServiceClient;
use plexus_security::tls::Bearer;
use tonic::service::interceptor::InterceptedService;

use crate::bin_dir;
use crate::etcd::EtcdCluster;

pub type Client = JobServiceClient<InterceptedService<tonic::transport::Channel, Bearer>>;

/// How an HA cluster is started.
#[derive(Clone, Debug)]
pub struct HaConfig {
    pub etcd_members: usize,
    pub coordinators: usize,
    pub workers: usize,
    pub cpus_per_worker: u32,
    pub lease_ttl_s: u64,
    pub log: String,
    pub coordinator_args: Vec<String>,
    /// `--advertise` of coordinator i, where given (default: its listening URL).
    pub advertise: Vec<String>,
    /// Serve the dashboard and /metrics (`--http 127.0.0.1:0`; see [`HaCluster::http`]).
    pub http: bool,
}

impl Default for HaConfig {
    fn default() -> Self {
        HaConfig {
            etcd_members: 1,
            coordinators: 3,
            workers: 3,
            cpus_per_worker: 2,
            lease_ttl_s: 2,
            log: "info".into(),
            coordinator_args: vec![],
            advertise: vec![],
            http: false,
        }
    }
}

pub struct HaCluster {
    pub config: HaConfig,
    pub dir: tempfile::TempDir,
    pub etcd: EtcdCluster,
    bin: PathBuf,
    /// Each coordinator's URL (its port is kept across restarts).
    pub urls: Vec<String>,
    /// Coordinator i's dashboard address (`ip:port`), with [`HaConfig::http`].
    pub http: Vec<Option<String>>,
    pub ca: String,
    pub admin_token: String,
    /// The coordinators and workers, started and stopped by the one launcher.
    launch: LocalCluster,
    rt: tokio::runtime::Runtime,
}

impl HaCluster {
    /// Starts etcd, the coordinators (one after the other, so the first makes the CA and the
    /// first tokens) and the workers; waits until one coordinator leads and every worker is
    /// alive. `Err`: etcd could not be started ([`LaunchError::is_missing_tool`] says whether
    /// only because it is not installed); a coordinator or worker that does not start panics.
    pub fn start(config: HaConfig) -> Result<HaCluster, LaunchError> {
        let etcd = EtcdCluster::start(config.etcd_members)?;
        let dir = tempfile::Builder::new().prefix("plexus-ha-").tempdir().expect("a temp dir");
        crate::open_to_tasks(dir.path());
        let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().expect("a tokio runtime");
        let bin = bin_dir();
        let launch = LocalCluster::builder(dir.path())
            .bin_dir(&bin)
            .store(Store::Etcd(etcd.url()))
            .coordinators(config.coordinators)
            .http(if config.http { Http::AnyPort } else { Http::Off })
            .lease_ttl_s(config.lease_ttl_s)
            .coordinator_args(&config.coordinator_args)
            .advertise(config.advertise.clone())
            .workers(config.workers)
            .cpus(Some(config.cpus_per_worker))
            .cache(Some("256MiB"))
            .worker_args(["--memory", "2GiB", "--metrics", "none"])
            .rust_log(&config.log)
            .build()
            .unwrap_or_else(|e| panic!("preparing the cluster in {}: {e}", dir.path().display()));
        let n = config.coordinators;
        let mut c = HaCluster {
            config,
            dir,
            etcd,
            bin,
            urls: vec![String::new(); n],
            http: vec![None; n],
            ca: String::new(),
            admin_token: String::new(),
            launch,
            rt,
        };
        for i in 0..n {
            c.start_coordinator(i);
            if i == 0 {
                c.ca = std::fs::read_to_string(c.launch.ca_file()).expect("the first coordinator's ca.pem");
                c.admin_token = std::fs::read_to_string(c.launch.admin_token_file())
                    .expect("the first coordinator's admin.token")
                    .trim()
                    .to_string();
            }
        }
        c.wait_leader(Duration::from_secs(30));
        for i in 0..c.config.workers {
            c.start_worker(i);
        }
        let n = c.config.workers;
        c.wait_for("every worker alive", Duration::from_secs(60), |c| (c.workers_alive()? >= n).then_some(()));
        Ok(c)
    }

    pub fn coordinator_dir(&self, i: usize) -> PathBuf {
        self.launch.coordinator_dir(i)
    }

    /// The cluster's CA certificate, written by the first coordinator.
    pub fn ca_file(&self) -> PathBuf {
        self.launch.ca_file()
    }

    /// The join token for workers, written by the first coordinator.
    pub fn join_token_file(&self) -> PathBuf {
        self.launch.join_token_file()
    }

    pub fn log_path(&self, what: &str) -> PathBuf {
        self.dir.path().join(format!("{what}.log"))
    }

    pub fn coordinator_log(&self, i: usize) -> String {
        std::fs::read_to_string(self.launch.coordinator_log(i)).unwrap_or_default()
    }

    /// Every URL, comma-separated: what workers and clients are given.
    pub fn url_list(&self) -> String {
        self.urls.join(",")
    }

    /// Starts (or restarts, on its port) coordinator `i`.
    pub fn start_coordinator(&mut self, i: usize) {
        if let Err(e) = self.launch.start_coordinator(i) {
            panic!("coordinator {i} did not start: {e}; log:\n{}", self.coordinator_log(i));
        }
        self.urls[i] = self.launch.url(i).expect("a started coordinator's URL").to_string();
        self.http[i] = self.launch.http(i).map(|a| a.to_string());
    }

    pub fn coordinator_pid(&self, i: usize) -> Option<u32> {
        self.launch.coordinator_pid(i)
    }

    /// `kill -9` coordinator `i`.
    pub fn kill_coordinator(&mut self, i: usize) {
        self.launch.kill_coordinator(i);
    }

    /// Sends `signal` (SIGSTOP, SIGCONT) to coordinator `i`.
    pub fn signal_coordinator(&self, i: usize, signal: i32) {
        // A coordinator that has exited has nothing to stop or continue.
        let _ = self.launch.signal_coordinator(i, signal);
    }

    pub fn start_worker(&mut self, i: usize) {
        let urls = self.url_list();
        self.launch
            .start_worker_with(i, &WorkerLaunch { coordinators: Some(urls), ..Default::default() })
            .unwrap_or_else(|e| panic!("starting worker {i}: {e}"));
    }

    /// Starts one more worker, given the coordinator list `urls`; returns its index.
    pub fn add_worker(&mut self, urls: &str) -> usize {
        self.launch
            .add_worker_with(&WorkerLaunch { coordinators: Some(urls.to_string()), ..Default::default() })
            .unwrap_or_else(|e| panic!("adding a worker: {e}"))
    }

    /// A client of coordinator `i`, as the admin.
    pub fn client_of(&self, i: usize) -> Option<Client> {
        let endpoint = tonic::transport::Endpoint::from_shared(self.urls[i].clone())
            .ok()?
            .connect_timeout(Duration::from_secs(1))
            .timeout(Duration::from_secs(10))
            .tls_config(plexus_security::tls::client(&self.ca, plexus_security::tls::COORDINATOR_NAME, None))
            .ok()?;
        // A paused coordinator accepts TCP but never finishes the TLS handshake: bound it.
        let channel = self
            .rt
            .block_on(async { tokio::time::timeout(Duration::from_secs(2), endpoint.connect()).await })
            .ok()?
            .ok()?;
        let token = plexus_security::Token::parse(&self.admin_token).expect("a well-formed token");
        Some(JobServiceClient::with_interceptor(channel, Bearer::new(Some(&token))).max_decoding_message_size(64 << 20))
    }

    /// Which coordinator leads, as the live ones say (agreeing), if any.
    pub fn leader(&self) -> Option<usize> {
        for i in 0..self.urls.len() {
            if self.launch.coordinator_pid(i).is_none() {
                continue;
            }
            let Some(mut c) = self.client_of(i) else { continue };
            let Ok(r) = self.rt.block_on(c.list_coordinators(pb::ListCoordinatorsRequest {})) else { continue };
            // By its own word (`me`), not by the advertised URL, which may differ from ours.
            if r.into_inner().coordinators.iter().any(|c| c.me && c.leader) {
                // Only a leader that serves counts.
                return self.rt.block_on(c.list_jobs(pb::ListJobsRequest {})).ok().map(|_| i);
            }
        }
        None
    }

    /// Waits for a serving leader; returns it and how long it took.
    pub fn wait_leader(&self, timeout: Duration) -> (usize, Duration) {
        let start = Instant::now();
        let i = self.wait_for("a leader", timeout, HaCluster::leader);
        (i, start.elapsed())
    }

    /// The leader's client, waiting for one.
    pub fn leader_client(&self) -> Client {
        let (i, _) = self.wait_leader(Duration::from_secs(30));
        self.client_of(i).expect("a client of the leader")
    }

    pub fn block_on<F: std::future::Future>(&self, f: F) -> F::Output {
        self.rt.block_on(f)
    }

    /// Submits through the leader of the moment; `Err` when the call failed (not acknowledged).
    pub fn try_submit(&self, name: &str, source: &str) -> Result<String, tonic::Status> {
        let i = self.leader().ok_or_else(|| tonic::Status::unavailable("no leader"))?;
        let mut c = self.client_of(i).ok_or_else(|| tonic::Status::unavailable("leader unreachable"))?;
        self.rt
            .block_on(c.submit_job(pb::SubmitJobRequest {
                source: source.into(),
                format: String::new(),
                filename: name.into(),
                after_jobs: vec![],
                working_dir: Vec::new(),
                dry_run: false,
            }))
            .map(|r| r.into_inner().job_id)
    }

    pub fn job(&self, id: &str) -> Option<pb::JobStatus> {
        let i = self.leader()?;
        let mut c = self.client_of(i)?;
        self.rt
            .block_on(c.get_job(pb::GetJobRequest { job_id: id.into(), subtasks: false }))
            .ok()
            .map(|r| r.into_inner())
    }

    pub fn workers_alive(&self) -> Option<usize> {
        let i = self.leader()?;
        let mut c = self.client_of(i)?;
        let w = self.rt.block_on(c.list_workers(pb::ListWorkersRequest::default())).ok()?.into_inner().workers;
        Some(w.iter().filter(|w| w.alive).count())
    }

    pub fn wait_job(&self, id: &str, timeout: Duration) -> pb::JobStatus {
        self.wait_for(&format!("job {id} to end"), timeout, |c| {
            c.job(id).filter(|j| j.state != pb::JobState::Running as i32)
        })
    }

    /// Polls `f` every 100 ms until it returns Some, or panics after `timeout` with the logs.
    pub fn wait_for<T>(&self, what: &str, timeout: Duration, mut f: impl FnMut(&HaCluster) -> Option<T>) -> T {
        let start = Instant::now();
        loop {
            if let Some(v) = f(self) {
                return v;
            }
            if start.elapsed() > timeout {
                let logs: String = (0..self.urls.len())
                    .map(|i| format!("--- coordinator {i} ---\n{}\n", tail(&self.coordinator_log(i), 30)))
                    .collect();
                panic!("timed out after {timeout:?} waiting for {what}\n{logs}");
            }
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    /// Runs the `plexus` CLI with every coordinator's URL.
    pub fn plexus(&self, args: &[&str]) -> std::process::Output {
        self.plexus_at(&self.url_list(), args)
    }

    /// The CLI given `urls` (comma-separated) as its coordinators.
    pub fn plexus_at(&self, urls: &str, args: &[&str]) -> std::process::Output {
        Command::new(self.bin.join("plexus"))
            .env("PLEXUS_COORDINATOR", urls)
            .env("PLEXUS_CA", self.launch.ca_file())
            .env("PLEXUS_TOKEN", &self.admin_token)
            .env_remove("PLEXUS_TOKEN_FILE")
            .args(args)
            .output()
            .expect("running plexus")
    }
}

fn tail(s: &str, n: usize) -> String {
    let lines: Vec<&str> = s.lines().collect();
    lines[lines.len().saturating_sub(n)..].join("\n")
}

impl Drop for HaCluster {
    fn drop(&mut self) {
        // Workers, their leftover cgroups, then the coordinators (continued if paused, and
        // killed), all before etcd under them goes with the fields.
        self.launch.stop();
        // A failed test keeps its logs (the etcd members' copied beside the coordinators' and
        // workers'), and says where.
        if std::thread::panicking() || std::env::var_os("PLEXUS_KEEP_TEST_DIR").is_some() {
            for i in 0..self.config.etcd_members {
                let _ = std::fs::copy(self.etcd.log_path(i), self.dir.path().join(format!("etcd-{i}.log")));
            }
            let p = self.dir.path().to_path_buf();
            eprintln!("keeping the cluster's logs and data in {}", p.display());
            std::mem::forget(std::mem::replace(&mut self.dir, tempfile::tempdir().expect("temp dir")));
        }
    }
}
