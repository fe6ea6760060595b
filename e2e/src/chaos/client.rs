//! The chaos run's client: gRPC calls to whichever coordinator serves (the leader of the
//! moment), every connect and call bounded so a paused coordinator costs seconds, not the run;
//! and `plexus get` for the outputs, as a user fetches them.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use plexus_proto::pb;
use plexus_proto::pb::job_service_client::JobServiceClient;
use plexus_security::tls::Bearer;

/// How long a connection (TCP, TLS, HTTP/2) may take: a paused coordinator accepts TCP and
/// never finishes the handshake.
const CONNECT: Duration = Duration::from_secs(2);
/// How long one call may take.
const CALL: Duration = Duration::from_secs(10);
/// How long one `plexus get` may take (a few MiB over loopback).
const GET: Duration = Duration::from_secs(60);

/// A JobService client presenting the admin token.
type Service = JobServiceClient<tonic::service::interceptor::InterceptedService<tonic::transport::Channel, Bearer>>;
/// One call on a [`Service`], boxed so [`Client::call`] can make it again on another coordinator.
type Call<T> = std::pin::Pin<Box<dyn std::future::Future<Output = Result<T, tonic::Status>>>>;

/// Why a call did not succeed.
#[derive(Debug)]
pub enum CallError {
    /// A coordinator that serves answered with this refusal.
    Refused(tonic::Status),
    /// No coordinator served: unreachable, paused, a standby, or the call timed out.
    Unserved(String),
}

impl std::fmt::Display for CallError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            CallError::Refused(s) => write!(f, "refused: {:?}: {}", s.code(), s.message()),
            CallError::Unserved(why) => write!(f, "no coordinator served: {why}"),
        }
    }
}

/// Where the cluster is and how to talk to it; cheap to clone into another thread.
#[derive(Clone, Debug)]
pub struct Access {
    pub urls: Vec<String>,
    pub ca_file: PathBuf,
    pub ca: String,
    pub token: String,
    pub bin: PathBuf,
}

/// A job's state as the checker needs it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum JobState {
    Running,
    Succeeded,
    /// Ended otherwise (failed, completed with failures, cancelled): its state's name.
    Failed(String),
    /// The serving coordinator does not know the job.
    Unknown,
}

pub struct Client {
    access: Access,
    rt: tokio::runtime::Runtime,
    /// The coordinator that answered last: tried first.
    preferred: usize,
}

impl Client {
    pub fn new(access: Access) -> Client {
        let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().expect("a tokio runtime");
        Client { access, rt, preferred: 0 }
    }

    pub fn access(&self) -> &Access {
        &self.access
    }

    fn connect(&self, i: usize) -> Option<Service> {
        let tls = plexus_security::tls::client(&self.access.ca, plexus_security::tls::COORDINATOR_NAME, None);
        let endpoint = tonic::transport::Endpoint::from_shared(self.access.urls[i].clone())
            .ok()?
            .connect_timeout(CONNECT)
            .timeout(CALL)
            .tls_config(tls)
            .ok()?;
        let channel = self.rt.block_on(async { tokio::time::timeout(CONNECT, endpoint.connect()).await }).ok()?.ok()?;
        let token = plexus_security::Token::parse(&self.access.token).ok()?;
        Some(JobServiceClient::with_interceptor(channel, Bearer::new(Some(&token))).max_decoding_message_size(64 << 20))
    }

    /// Runs `call` against the coordinators, the last one that answered first, until one
    /// answers other than UNAVAILABLE (a standby, or one that cannot be reached) or
    /// RESOURCE_EXHAUSTED (one shedding load).
    fn call<T, F>(&mut self, call: F) -> Result<T, CallError>
    where
        F: Fn(Service) -> Call<T>,
    {
        let n = self.access.urls.len();
        let mut last = "no coordinator could be reached".to_string();
        for k in 0..n {
            let i = (self.preferred + k) % n;
            let Some(c) = self.connect(i) else { continue };
            let r = self.rt.block_on(async { tokio::time::timeout(CALL, call(c)).await });
            match r {
                Ok(Ok(v)) => {
                    self.preferred = i;
                    return Ok(v);
                }
                // UNAVAILABLE (a standby, or none reachable) and RESOURCE_EXHAUSTED (a coordinator
                // shedding load) are answered by trying again, as a client should.
                Ok(Err(s))
                    if !matches!(
                        s.code(),
                        tonic::Code::Unavailable | tonic::Code::Unknown | tonic::Code::ResourceExhausted
                    ) =>
                {
                    return Err(CallError::Refused(s));
                }
                Ok(Err(s)) => last = s.message().to_string(),
                Err(_) => last = format!("the call took over {CALL:?}"),
            }
        }
        Err(CallError::Unserved(last))
    }

    /// Submits a job file's text; the job id once a coordinator acknowledged it.
    pub fn submit(&mut self, filename: &str, source: &str) -> Result<String, CallError> {
        let req = pb::SubmitJobRequest {
            source: source.into(),
            format: String::new(),
            filename: filename.into(),
            after_jobs: vec![],
            working_dir: Vec::new(),
            dry_run: false,
        };
        self.call(move |mut c| {
            let req = req.clone();
            Box::pin(async move { c.submit_job(req).await.map(|r| r.into_inner().job_id) })
        })
    }

    /// The job's state; `Err` when no coordinator answered.
    pub fn state(&mut self, id: &str) -> Result<JobState, CallError> {
        let req = pb::GetJobRequest { job_id: id.into(), subtasks: false };
        let r = self.call(move |mut c| {
            let req = req.clone();
            Box::pin(async move { c.get_job(req).await.map(|r| r.into_inner()) })
        });
        match r {
            Ok(j) if j.state == pb::JobState::Running as i32 => Ok(JobState::Running),
            Ok(j) if j.state == pb::JobState::Succeeded as i32 => Ok(JobState::Succeeded),
            Ok(j) => Ok(JobState::Failed(
                pb::JobState::try_from(j.state)
                    .map(|s| s.as_str_name().to_string())
                    .unwrap_or_else(|_| j.state.to_string()),
            )),
            Err(CallError::Refused(s)) if s.code() == tonic::Code::NotFound => Ok(JobState::Unknown),
            Err(s) => Err(s),
        }
    }

    /// How many workers the serving coordinator counts alive.
    pub fn live_workers(&mut self) -> Result<usize, CallError> {
        let workers = self.call(|mut c| {
            Box::pin(
                async move { c.list_workers(pb::ListWorkersRequest::default()).await.map(|r| r.into_inner().workers) },
            )
        })?;
        Ok(workers.iter().filter(|w| w.alive).count())
    }

    /// `plexus get JOB OBJECT -o DIR`: the fetched bytes, or the CLI's error text.
    pub fn get(&self, job: &str, object: &str, dir: &Path) -> Result<Vec<u8>, String> {
        let _ = std::fs::remove_dir_all(dir);
        std::fs::create_dir_all(dir).map_err(|e| format!("creating {}: {e}", dir.display()))?;
        let mut child = Command::new(self.access.bin.join("plexus"))
            .env("PLEXUS_COORDINATOR", self.access.urls.join(","))
            .env("PLEXUS_CA", &self.access.ca_file)
            .env("PLEXUS_TOKEN", &self.access.token)
            .env_remove("PLEXUS_TOKEN_FILE")
            .args(["get", job, object, "-o"])
            .arg(dir)
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .map_err(|e| format!("running plexus get: {e}"))?;
        let start = Instant::now();
        let status = loop {
            match child.try_wait() {
                Ok(Some(s)) => break s,
                Ok(None) if start.elapsed() > GET => {
                    let _ = child.kill();
                    let _ = child.wait();
                    return Err(format!("plexus get took over {GET:?}"));
                }
                Ok(None) => std::thread::sleep(Duration::from_millis(50)),
                Err(e) => return Err(format!("waiting for plexus get: {e}")),
            }
        };
        let mut err = String::new();
        if let Some(mut e) = child.stderr.take() {
            use std::io::Read;
            let _ = e.read_to_string(&mut err);
        }
        if !status.success() {
            return Err(err.trim().to_string());
        }
        std::fs::read(dir.join(object)).map_err(|e| format!("reading what plexus get wrote: {e}"))
    }
}
