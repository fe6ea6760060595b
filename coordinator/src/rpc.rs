//! The gRPC adapters: `JobService` for clients and `WorkerService` for workers. The only module
//! that knows tonic's service traits. Each handler converts and checks its request, calls the
//! engine, and maps errors to a `Status` in one place ([`status`]).

use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use futures::Stream;
use plexus_proto::convert::{self as pc};
use plexus_proto::pb::job_service_server::JobService;
use plexus_proto::pb::peer_service_client::PeerServiceClient;
use plexus_proto::pb::worker_service_server::WorkerService;
use plexus_proto::{JobId, pb};
use plexus_scheduler::Error as SchedulerError;
use plexus_scheduler::spec::{self, Format};
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;
use tonic::{Request, Response, Status};

use crate::Error;
use crate::auth::{self, Security};
use crate::convert::{self, Detail};
use crate::engine::{Cmd, EngineHandle};

/// How long the coordinator waits on a worker when proxying a log read. Logs are small and the
/// worker is local to the cluster; past this the coordinator serves the tail it keeps.
const LOG_PROXY_TIMEOUT: Duration = Duration::from_secs(3);
/// How long a relayed object download may go without a chunk from the worker serving it.
const RELAY_IDLE_TIMEOUT: Duration = Duration::from_secs(30);

/// Watch streams send at most one status per this interval; a 10,000-subtask job changes every
/// millisecond, and nobody reads progress bars faster than this.
const WATCH_MIN_INTERVAL: Duration = Duration::from_millis(100);

/// Largest job file accepted.
const MAX_JOB_SOURCE: usize = 16 << 20;

/// The one place an error becomes a `Status`: the code says what kind of failure it is (the
/// caller's mistake, something missing, a state conflict, the server's trouble), the message
/// says which input.
pub fn status(e: impl Into<Error>) -> Status {
    let e = e.into();
    let msg = e.to_string();
    match &e {
        Error::Scheduler(s) | Error::InFile { source: s, .. } => match s {
            SchedulerError::NoWorker(_)
            | SchedulerError::NoJob(_)
            | SchedulerError::NoTask { .. }
            | SchedulerError::NoRank { .. }
            | SchedulerError::NotPlaced(_) => Status::not_found(msg),
            SchedulerError::JobFinished { .. } | SchedulerError::WorkerBusy(_) => Status::failed_precondition(msg),
            SchedulerError::Duplicate(_) => Status::already_exists(msg),
            SchedulerError::Spec(_)
            | SchedulerError::Unsatisfiable(_)
            | SchedulerError::UnknownPlacer { .. }
            | SchedulerError::QueueName { .. }
            | SchedulerError::QueueShare { .. }
            | SchedulerError::MscSyntax { .. }
            | SchedulerError::MscUnknownKey { .. }
            | SchedulerError::MscDuplicate(_)
            | SchedulerError::NotACost { .. }
            | SchedulerError::MscDecreasing { .. } => Status::invalid_argument(msg),
            SchedulerError::Restore(_)
            | SchedulerError::GpuProblem(_)
            | SchedulerError::Infeasible { .. }
            | SchedulerError::TooLarge { .. }
            | SchedulerError::EstimatesFormat { .. } => Status::internal(msg),
        },
        Error::Convert(_) | Error::Invalid(_) => Status::invalid_argument(msg),
        Error::Unavailable(_) | Error::EngineStopped | Error::ShuttingDown | Error::Etcd(_) | Error::Fenced => {
            Status::unavailable(msg)
        }
        Error::NotRegistered => Status::failed_precondition(msg),
        Error::Io(..)
        | Error::Sled(_)
        | Error::Migration(_)
        | Error::Corrupt { .. }
        | Error::Locked { .. }
        | Error::Policy(_)
        | Error::Engine(_)
        | Error::Transport(_) => Status::internal(msg),
    }
}

impl From<Error> for Status {
    fn from(e: Error) -> Self {
        status(e)
    }
}

fn job_id(s: &str) -> Result<JobId, Status> {
    pc::job_id("job_id", s).map_err(status)
}

/// What the running coordinator tells administrative commands about its store, which they cannot
/// open themselves while it holds the lock.
#[derive(Clone)]
pub struct StoreAccess {
    pub dir: String,
    pub schema_version: u32,
    pub policy: std::sync::Arc<dyn plexus_policy::PolicyStore>,
    /// Where `SetQueue` keeps the queues' shares; `None`: they last until a restart.
    pub queues: Option<crate::store::SharedKv>,
}

/// The client API.
pub struct JobApi {
    engine: EngineHandle,
    store: Option<StoreAccess>,
    role: Option<Arc<crate::ha::Role>>,
    /// The cluster's trust: tokens, and the certificate the log proxy shows workers. `None`:
    /// the coordinator runs with `--insecure`.
    security: Option<Arc<Security>>,
    /// The tasks feeding `WatchJob` streams: cancelled and awaited at shutdown
    /// ([`JobApi::stop_streams`]), so none outlives the server.
    streams: TaskTracker,
    stop: CancellationToken,
}

impl JobApi {
    pub fn new(engine: EngineHandle) -> JobApi {
        JobApi {
            engine,
            store: None,
            role: None,
            security: None,
            streams: TaskTracker::new(),
            stop: CancellationToken::new(),
        }
    }

    /// Serves the token RPCs from `security`, and reads logs from workers over mutual TLS.
    pub fn with_security(mut self, security: Option<Arc<Security>>) -> JobApi {
        self.security = security;
        self
    }

    fn security(&self) -> Result<&Arc<Security>, Status> {
        self.security.as_ref().ok_or_else(|| {
            Status::failed_precondition(
                "this coordinator runs with --insecure: it has no tokens (restart it without --insecure)",
            )
        })
    }

    /// A client of a worker's `PeerService`, over mutual TLS unless the coordinator is insecure.
    async fn peer_client(&self, peer: &str) -> Result<PeerServiceClient<tonic::transport::Channel>, Status> {
        let unavailable =
            |e: &dyn std::fmt::Display| status(Error::Unavailable(format!("connecting to worker {peer}: {e}")));
        let limit = std::time::Duration::from_secs(5);
        let mut endpoint = tonic::transport::Endpoint::from_shared(peer.to_string())
            .map_err(|e| unavailable(&e))?
            .connect_timeout(limit);
        if let Some(s) = &self.security {
            endpoint = endpoint.tls_config(s.peer_tls()).map_err(|e| unavailable(&e))?;
        }
        // Bounded whole: a worker that hangs would otherwise hold the caller's request for ever.
        let channel = plexus_security::tls::connect_within(&endpoint, limit).await.map_err(|e| unavailable(&e))?;
        Ok(PeerServiceClient::new(channel))
    }

    /// Also answers `GetStoreInfo` and `ExportPolicy` from this store.
    pub fn with_store(mut self, store: StoreAccess) -> JobApi {
        self.store = Some(store);
        self
    }

    /// Answers `ListCoordinators` from this coordinator's role.
    pub fn with_role(mut self, role: Arc<crate::ha::Role>) -> JobApi {
        self.role = Some(role);
        self
    }

    fn store(&self) -> Result<&StoreAccess, Status> {
        self.store
            .as_ref()
            .ok_or_else(|| status(Error::Unavailable("this coordinator serves no store information".into())))
    }

    /// A handle that ends every watch stream, now and later, and waits for their tasks.
    pub fn stream_stopper(&self) -> StreamStopper {
        StreamStopper { streams: self.streams.clone(), stop: self.stop.clone() }
    }

    /// A stream fed by a tracked task through a bounded channel: the task stops when the client
    /// goes away or the server shuts down (the client then gets UNAVAILABLE).
    fn tracked_stream<T, F, Fut>(&self, f: F) -> Pin<Box<dyn Stream<Item = Result<T, Status>> + Send>>
    where
        T: Send + 'static,
        F: FnOnce(tokio::sync::mpsc::Sender<Result<T, Status>>) -> Fut,
        Fut: std::future::Future<Output = ()> + Send + 'static,
    {
        let (tx, rx) = tokio::sync::mpsc::channel(4);
        let stop = self.stop.clone();
        let on_stop = tx.clone();
        let work = f(tx);
        self.streams.spawn(async move {
            tokio::select! {
                () = work => {}
                () = stop.cancelled() => {
                    let _ = on_stop.send(Err(status(Error::ShuttingDown))).await;
                }
            }
        });
        Box::pin(tokio_stream::wrappers::ReceiverStream::new(rx))
    }
}

/// Ends the `WatchJob` streams of a [`JobApi`] and waits for their tasks.
pub struct StreamStopper {
    streams: TaskTracker,
    stop: CancellationToken,
}

impl StreamStopper {
    pub async fn stop(self) {
        self.stop.cancel();
        self.streams.close();
        self.streams.wait().await;
    }
}

type WatchStream = Pin<Box<dyn Stream<Item = Result<pb::JobStatus, Status>> + Send>>;

#[tonic::async_trait]
impl JobService for JobApi {
    async fn submit_job(&self, req: Request<pb::SubmitJobRequest>) -> Result<Response<pb::SubmitJobResponse>, Status> {
        let r = req.into_inner();
        let filename = if r.filename.is_empty() { "<job>".to_string() } else { r.filename.clone() };
        if r.source.len() > MAX_JOB_SOURCE {
            return Err(status(Error::Invalid(format!(
                "{filename}: job file is larger than {} MiB",
                MAX_JOB_SOURCE >> 20
            ))));
        }
        let format = Format::infer(&r.format, &filename).map_err(|e| status(SchedulerError::from(e)))?;
        // Parsing happens off the engine and off the runtime's worker threads (a large file takes
        // a moment), so neither heartbeats nor other requests wait for it.
        let (source, file) = (r.source, filename.clone());
        let spec = tokio::task::spawn_blocking(move || spec::parse(&source, format, &file))
            .await
            .map_err(|e| status(Error::Engine(format!("parsing the job file: {e}"))))?
            .map_err(|e| status(SchedulerError::from(e)))?;
        let mut spec = spec;
        for (i, a) in r.after_jobs.iter().enumerate() {
            let a = job_id(a).map_err(|e| Status::invalid_argument(format!("after_jobs[{i}]: {}", e.message())))?;
            if !spec.after_jobs.contains(&a) {
                spec.after_jobs.push(a);
            }
        }
        if spec.after_jobs.len() > plexus_scheduler::spec::MAX_AFTER_JOBS {
            return Err(Status::invalid_argument(format!(
                "{filename}: runs after {} jobs; at most {}",
                spec.after_jobs.len(),
                plexus_scheduler::spec::MAX_AFTER_JOBS
            )));
        }
        let id = JobId::random();
        let n = self
            .engine
            .call(|reply| Cmd::Submit { id, spec, reply })
            .await?
            .map_err(|source| status(Error::InFile { file: filename.clone(), source }))?;
        Ok(Response::new(pb::SubmitJobResponse { job_id: id.to_string(), subtasks: n }))
    }

    async fn resubmit_job(
        &self,
        req: Request<pb::ResubmitJobRequest>,
    ) -> Result<Response<pb::SubmitJobResponse>, Status> {
        let job = job_id(&req.into_inner().job_id)?;
        let id = JobId::random();
        let n = self.engine.call(|reply| Cmd::Resubmit { job, id, reply }).await?.map_err(status)?;
        Ok(Response::new(pb::SubmitJobResponse { job_id: id.to_string(), subtasks: n }))
    }

    async fn get_job(&self, req: Request<pb::GetJobRequest>) -> Result<Response<pb::JobStatus>, Status> {
        let r = req.into_inner();
        let job = job_id(&r.job_id)?;
        let s = self
            .engine
            .call(|reply| Cmd::GetJob { job, detail: Detail::of_request(r.subtasks), reply })
            .await?
            .map_err(status)?;
        Ok(Response::new(s))
    }

    async fn list_jobs(&self, _req: Request<pb::ListJobsRequest>) -> Result<Response<pb::ListJobsResponse>, Status> {
        let jobs = self.engine.call(|reply| Cmd::ListJobs { reply }).await?;
        Ok(Response::new(pb::ListJobsResponse { jobs }))
    }

    type WatchJobStream = WatchStream;
    type GetObjectStream = Pin<Box<dyn Stream<Item = Result<pb::ObjectChunk, Status>> + Send>>;

    async fn get_object(&self, req: Request<pb::GetObjectRequest>) -> Result<Response<Self::GetObjectStream>, Status> {
        let object_id = req.into_inner().object_id;
        let object = plexus_proto::convert::object_id("object_id", &object_id)
            .map_err(|e| Status::invalid_argument(e.to_string()))?;
        let peers = self.engine.call(|reply| Cmd::Holders { object: object.clone(), reply }).await?.map_err(status)?;
        if peers.is_empty() {
            return Err(Status::not_found(format!(
                "no live worker holds {object_id} (not produced yet, or lost with its worker; a job that needs it again re-runs its producer)"
            )));
        }
        let mut last = String::new();
        for peer in &peers {
            let fetch = async {
                let mut client = self.peer_client(peer).await?;
                client.fetch_object(pb::FetchObjectRequest { object_id: object_id.clone() }).await
            };
            match tokio::time::timeout(LOG_PROXY_TIMEOUT, fetch).await {
                Ok(Ok(stream)) => {
                    // Relayed chunk by chunk: a holder that stops sending mid-object (it hung)
                    // ends the download with an error instead of holding the caller for ever.
                    let (mut inner, id) = (stream.into_inner(), object_id.clone());
                    let relay = self.tracked_stream(move |tx| async move {
                        loop {
                            let next = match tokio::time::timeout(RELAY_IDLE_TIMEOUT, inner.message()).await {
                                Ok(Ok(Some(chunk))) => Ok(chunk),
                                Ok(Ok(None)) => return,
                                Ok(Err(s)) => Err(s),
                                Err(_) => Err(status(Error::Unavailable(format!(
                                    "the worker serving {id} sent nothing for {RELAY_IDLE_TIMEOUT:?}"
                                )))),
                            };
                            let end = next.is_err();
                            if tx.send(next).await.is_err() || end {
                                return;
                            }
                        }
                    });
                    return Ok(Response::new(relay));
                }
                Ok(Err(e)) => last = format!("{peer}: {}", e.message()),
                Err(_) => last = format!("{peer}: no answer within {LOG_PROXY_TIMEOUT:?}"),
            }
        }
        Err(status(Error::Unavailable(format!("no holder of {object_id} could serve it ({last})"))))
    }

    async fn watch_job(&self, req: Request<pb::WatchJobRequest>) -> Result<Response<WatchStream>, Status> {
        let job = job_id(&req.into_inner().job_id)?;
        let mut rx = self.engine.call(|reply| Cmd::Watch { job, reply }).await?.map_err(status)?;
        let stream = self.tracked_stream(move |tx| async move {
            loop {
                let current = rx.borrow_and_update().clone();
                let done = convert::is_final(&current);
                if tx.send(Ok(current)).await.is_err() || done {
                    return;
                }
                tokio::time::sleep(WATCH_MIN_INTERVAL).await;
                if rx.changed().await.is_err() {
                    // The engine dropped the sender: the job ended (its final status is the
                    // last value) or the coordinator is stopping.
                    let last = rx.borrow().clone();
                    if convert::is_final(&last) {
                        let _ = tx.send(Ok(last)).await;
                    } else {
                        let _ = tx.send(Err(status(Error::ShuttingDown))).await;
                    }
                    return;
                }
            }
        });
        Ok(Response::new(stream))
    }

    async fn cancel_job(&self, req: Request<pb::CancelJobRequest>) -> Result<Response<pb::JobStatus>, Status> {
        let job = job_id(&req.into_inner().job_id)?;
        let s = self.engine.call(|reply| Cmd::Cancel { job, reply }).await?.map_err(status)?;
        Ok(Response::new(s))
    }

    async fn get_logs(&self, req: Request<pb::GetLogsRequest>) -> Result<Response<pb::GetLogsResponse>, Status> {
        let r = req.into_inner();
        let job = job_id(&r.job_id)?;
        let src = self
            .engine
            .call(|reply| Cmd::Logs { job, task: r.task.clone(), rank: r.rank, attempt: r.attempt, reply })
            .await?
            .map_err(status)?;
        // The worker has the whole log; ask it first, and fall back on the tail we keep.
        if let Some(peer) = &src.peer_addr {
            let attempt = pb::AttemptRef::from(&src.attempt_ref);
            let read = async {
                let mut client = self.peer_client(peer).await?;
                client.read_log(pb::ReadLogRequest { attempt: Some(attempt), max_bytes: 0 }).await
            };
            match tokio::time::timeout(LOG_PROXY_TIMEOUT, read).await {
                Ok(Ok(resp)) => {
                    let l = resp.into_inner();
                    return Ok(Response::new(pb::GetLogsResponse {
                        stdout: l.stdout,
                        stderr: l.stderr,
                        worker_id: src.worker,
                        attempt: src.attempt,
                        truncated: l.truncated,
                        state: pb::SubtaskState::from(src.state) as i32,
                        latest_attempt: src.latest_attempt,
                    }));
                }
                Ok(Err(e)) => {
                    tracing::debug!(peer, error = %e.message(), "log read from worker failed; serving the kept tail")
                }
                Err(_) => tracing::debug!(peer, "log read from worker timed out; serving the kept tail"),
            }
        }
        if src.stdout_tail.is_empty() && src.stderr_tail.is_empty() && src.peer_addr.is_none() {
            return Err(status(Error::Unavailable(format!(
                "the logs of task {:?} rank {} are on worker {}, which is not reachable, and no tail was kept",
                r.task, r.rank, src.worker
            ))));
        }
        Ok(Response::new(pb::GetLogsResponse {
            stdout: src.stdout_tail.into_bytes(),
            stderr: src.stderr_tail.into_bytes(),
            worker_id: src.worker,
            attempt: src.attempt,
            truncated: true,
            state: pb::SubtaskState::from(src.state) as i32,
            latest_attempt: src.latest_attempt,
        }))
    }

    async fn list_workers(
        &self,
        _req: Request<pb::ListWorkersRequest>,
    ) -> Result<Response<pb::ListWorkersResponse>, Status> {
        let workers = self.engine.call(|reply| Cmd::ListWorkers { reply }).await?;
        Ok(Response::new(pb::ListWorkersResponse { workers }))
    }

    async fn get_store_info(&self, _req: Request<pb::GetStoreInfoRequest>) -> Result<Response<pb::StoreInfo>, Status> {
        let s = self.store()?;
        Ok(Response::new(pb::StoreInfo {
            dir: s.dir.clone(),
            schema_version: s.schema_version,
            binary_version: plexus_migrations::CURRENT,
        }))
    }

    async fn export_policy(
        &self,
        _req: Request<pb::ExportPolicyRequest>,
    ) -> Result<Response<pb::ExportPolicyResponse>, Status> {
        let policy = self.store()?.policy.clone();
        let weights = tokio::task::spawn_blocking(move || policy.load_weights())
            .await
            .map_err(|e| status(Error::Engine(format!("reading the policy weights: {e}"))))?
            .map_err(|e| status(Error::Unavailable(format!("reading the policy weights: {e}"))))?;
        Ok(Response::new(pb::ExportPolicyResponse { weights: weights.unwrap_or_default() }))
    }

    async fn create_token(
        &self,
        req: Request<pb::CreateTokenRequest>,
    ) -> Result<Response<pb::CreateTokenResponse>, Status> {
        let security = Arc::clone(self.security()?);
        let r = req.into_inner();
        let scope = r.scope.parse::<plexus_security::Scope>().map_err(|e| Status::invalid_argument(e.to_string()))?;
        let (token, record) = tokio::task::spawn_blocking(move || {
            security.create_token(scope, &r.name, r.ttl_ms, plexus_proto::now_ms())
        })
        .await
        .map_err(|e| status(Error::Engine(e.to_string())))?
        .map_err(status)?;
        tracing::info!(id = record.id, scope = record.scope, name = record.name, "token created");
        Ok(Response::new(pb::CreateTokenResponse { token: token.expose(), info: Some(record.info()) }))
    }

    async fn list_tokens(
        &self,
        _req: Request<pb::ListTokensRequest>,
    ) -> Result<Response<pb::ListTokensResponse>, Status> {
        let security = Arc::clone(self.security()?);
        let tokens = tokio::task::spawn_blocking(move || security.list_tokens())
            .await
            .map_err(|e| status(Error::Engine(e.to_string())))?
            .map_err(status)?;
        Ok(Response::new(pb::ListTokensResponse { tokens: tokens.iter().map(auth::TokenRecord::info).collect() }))
    }

    async fn revoke_token(&self, req: Request<pb::RevokeTokenRequest>) -> Result<Response<pb::TokenInfo>, Status> {
        let security = Arc::clone(self.security()?);
        let id = req.into_inner().id;
        let record = tokio::task::spawn_blocking(move || security.revoke(&id, plexus_proto::now_ms()))
            .await
            .map_err(|e| status(Error::Engine(e.to_string())))?
            .map_err(|e| match e {
                Error::Unavailable(m) => Status::not_found(m),
                e => status(e),
            })?;
        tracing::info!(id = record.id, "token revoked");
        Ok(Response::new(record.info()))
    }

    async fn set_queue(&self, req: Request<pb::SetQueueRequest>) -> Result<Response<pb::QueueList>, Status> {
        let r = req.into_inner();
        let share = (!r.clear).then_some(r.share);
        let name = r.name.clone();
        let queues = self
            .engine
            .call(|reply| Cmd::SetQueue { name: r.name, share, reply })
            .await?
            .map_err(Status::invalid_argument)?;
        if let Some(tree) = self.store.as_ref().and_then(|s| s.queues.clone()) {
            let key = name.clone();
            tokio::task::spawn_blocking(move || crate::store::set_queue_share(tree.as_ref(), &key, share))
                .await
                .map_err(|e| status(Error::Engine(e.to_string())))?
                .map_err(|e| {
                    Status::internal(format!(
                        "the share of queue {name:?} applies, but could not be stored (it lasts until a restart): {e}"
                    ))
                })?;
        }
        tracing::info!(queue = name, ?share, "queue share set");
        Ok(Response::new(pb::QueueList { queues }))
    }

    async fn list_queues(&self, _req: Request<pb::ListQueuesRequest>) -> Result<Response<pb::QueueList>, Status> {
        let queues = self.engine.call(|reply| Cmd::ListQueues { reply }).await?;
        Ok(Response::new(pb::QueueList { queues }))
    }

    async fn list_coordinators(
        &self,
        _req: Request<pb::ListCoordinatorsRequest>,
    ) -> Result<Response<pb::ListCoordinatorsResponse>, Status> {
        let Some(role) = &self.role else {
            return Err(status(Error::Unavailable("this coordinator serves no control-plane information".into())));
        };
        let coordinators = role.coordinators().await?;
        Ok(Response::new(pb::ListCoordinatorsResponse { coordinators, store: role.store.clone() }))
    }

    async fn revoke_worker(
        &self,
        req: Request<pb::RevokeWorkerRequest>,
    ) -> Result<Response<pb::RevokeWorkerResponse>, Status> {
        let security = Arc::clone(self.security()?);
        let worker = pc::worker_id("worker_id", &req.into_inner().worker_id).map_err(status)?;
        let revoked = tokio::task::spawn_blocking(move || security.revoke_worker(worker))
            .await
            .map_err(|e| status(Error::Engine(e.to_string())))?
            .map_err(status)?;
        tracing::info!(%worker, revoked, "worker certificate revoked");
        Ok(Response::new(pb::RevokeWorkerResponse { revoked }))
    }

    async fn drain_worker(
        &self,
        req: Request<pb::DrainWorkerRequest>,
    ) -> Result<Response<pb::DrainWorkerResponse>, Status> {
        let r = req.into_inner();
        let worker = pc::worker_id("worker_id", &r.worker_id).map_err(status)?;
        self.engine.call(|reply| Cmd::DrainWorker { worker, on: !r.undrain, reply }).await?.map_err(status)?;
        Ok(Response::new(pb::DrainWorkerResponse {}))
    }

    async fn remove_worker(
        &self,
        req: Request<pb::RemoveWorkerRequest>,
    ) -> Result<Response<pb::RemoveWorkerResponse>, Status> {
        let worker = pc::worker_id("worker_id", &req.into_inner().worker_id).map_err(status)?;
        self.engine.call(|reply| Cmd::RemoveWorker { worker, reply }).await?.map_err(status)?;
        Ok(Response::new(pb::RemoveWorkerResponse {}))
    }

    async fn explain_placement(
        &self,
        req: Request<pb::ExplainPlacementRequest>,
    ) -> Result<Response<pb::ExplainPlacementResponse>, Status> {
        let r = req.into_inner();
        let job = job_id(&r.job_id)?;
        let e =
            self.engine.call(|reply| Cmd::Explain { job, task: r.task, rank: r.rank, reply }).await?.map_err(status)?;
        Ok(Response::new(e))
    }
}

/// The worker-facing API.
pub struct WorkerApi {
    engine: EngineHandle,
    /// `None`: the coordinator runs with `--insecure` (no certificates, no rail key).
    security: Option<Arc<Security>>,
}

impl WorkerApi {
    pub fn new(engine: EngineHandle) -> WorkerApi {
        WorkerApi { engine, security: None }
    }

    /// Issues certificates to joining workers, hands out the rail key, and checks that every
    /// call's worker id is the caller's certificate's.
    pub fn with_security(mut self, security: Option<Arc<Security>>) -> WorkerApi {
        self.security = security;
        self
    }

    fn check<T>(&self, req: &Request<T>, claimed: &str) -> Result<plexus_proto::WorkerId, Status> {
        let worker = pc::worker_id("worker_id", claimed).map_err(status)?;
        auth::check_worker(req, worker, self.security.is_some())?;
        Ok(worker)
    }
}

type AssignmentStream = Pin<Box<dyn Stream<Item = Result<pb::AssignmentBatch, Status>> + Send>>;

#[tonic::async_trait]
impl WorkerService for WorkerApi {
    async fn register(&self, req: Request<pb::RegisterRequest>) -> Result<Response<pb::RegisterResponse>, Status> {
        self.check(&req, &req.get_ref().worker_id)?;
        let reg = convert::registration(&req.into_inner()).map_err(status)?;
        let (interval, timeout) = self.engine.call(|reply| Cmd::Register { reg, reply }).await?;
        let rail_key = self.security.as_ref().map(|s| s.rail_key.clone()).unwrap_or_default();
        Ok(Response::new(pb::RegisterResponse {
            heartbeat_interval_ms: interval,
            heartbeat_timeout_ms: timeout,
            rail_key,
        }))
    }

    async fn join(&self, req: Request<pb::JoinRequest>) -> Result<Response<pb::JoinResponse>, Status> {
        let Some(security) = self.security.clone() else {
            return Err(Status::failed_precondition(
                "this coordinator runs with --insecure: workers need no certificate (start the worker with --insecure)",
            ));
        };
        let r = req.into_inner();
        let worker = pc::worker_id("worker_id", &r.worker_id).map_err(status)?;
        let certificate = tokio::task::spawn_blocking(move || {
            security.issue_worker(worker, &r.public_key).map(|c| (c, security.ca_pem().to_string()))
        })
        .await
        .map_err(|e| status(Error::Engine(e.to_string())))?
        .map_err(status)?;
        tracing::info!(%worker, "issued a worker certificate");
        Ok(Response::new(pb::JoinResponse { certificate: certificate.0, ca: certificate.1 }))
    }

    async fn resolve_peer(
        &self,
        req: Request<pb::ResolvePeerRequest>,
    ) -> Result<Response<pb::ResolvePeerResponse>, Status> {
        let Some(security) = &self.security else {
            return Err(Status::failed_precondition(
                "this coordinator runs with --insecure: there are no certificates to resolve",
            ));
        };
        let fp = plexus_security::Fingerprint(req.into_inner().fingerprint);
        let worker = security
            .worker_of(&fp)
            .ok_or_else(|| Status::not_found(format!("no current worker certificate has fingerprint {fp}")))?;
        let workers = self.engine.call(|reply| Cmd::ListWorkers { reply }).await?;
        let rails = workers
            .into_iter()
            .find(|w| w.worker_id == worker.to_string() && w.alive)
            .and_then(|w| w.capacity)
            .map(|c| c.rails)
            .unwrap_or_default();
        Ok(Response::new(pb::ResolvePeerResponse { worker_id: worker.to_string(), rails }))
    }

    async fn heartbeat(&self, req: Request<pb::HeartbeatRequest>) -> Result<Response<pb::HeartbeatResponse>, Status> {
        let worker = self.check(&req, &req.get_ref().worker_id)?;
        let r = req.into_inner();
        let node = convert::node_report(r.state.as_ref()).map_err(status)?;
        let ok = self.engine.call(|reply| Cmd::Heartbeat { worker, session: r.session, node, reply }).await?;
        Ok(Response::new(pb::HeartbeatResponse { reregister: !ok }))
    }

    type AssignmentsStream = AssignmentStream;

    async fn assignments(&self, req: Request<pb::AssignmentsRequest>) -> Result<Response<AssignmentStream>, Status> {
        let worker = self.check(&req, &req.get_ref().worker_id)?;
        let r = req.into_inner();
        let rx = self
            .engine
            .call(|reply| Cmd::OpenStream { worker, session: r.session, reply })
            .await?
            .ok_or_else(|| status(Error::NotRegistered))?;
        let stream = futures::StreamExt::map(tokio_stream::wrappers::UnboundedReceiverStream::new(rx), Ok);
        Ok(Response::new(Box::pin(stream)))
    }

    async fn report_tasks(
        &self,
        req: Request<pb::ReportTasksRequest>,
    ) -> Result<Response<pb::ReportTasksResponse>, Status> {
        let worker = self.check(&req, &req.get_ref().worker_id)?;
        let r = req.into_inner();
        // One bad report refuses the whole call: the worker keeps them all and the error names
        // the field, which is a bug on the worker's side to be fixed, not data to half-apply.
        let reports = r.reports.iter().map(convert::report).collect::<Result<Vec<_>, _>>().map_err(status)?;
        let ok = self.engine.call(|reply| Cmd::Report { worker, session: r.session, reports, reply }).await?;
        Ok(Response::new(pb::ReportTasksResponse { reregister: !ok }))
    }
}

#[cfg(test)]
mod tests {
    //! The handlers called directly with `Request::new`, over a real engine thread and an
    //! in-memory store: no network, so each test is about what a handler answers.

    use plexus_scheduler::core::{Core, CoreConfig};
    use plexus_scheduler::placer::heuristic;
    use tonic::Code;

    use super::*;
    use crate::engine;
    use crate::store::MemStore;

    type EngineThread = std::thread::JoinHandle<Result<(), Error>>;

    fn engine() -> (JobApi, WorkerApi, EngineThread) {
        let core = Core::new(CoreConfig::default(), heuristic("least-loaded", 1).expect("a heuristic"));
        let (handle, thread) = engine::start(core, Box::new(MemStore::default()), plexus_proto::now_ms);
        (JobApi::new(handle.clone()), WorkerApi::new(handle), thread)
    }

    fn apis() -> (JobApi, WorkerApi) {
        let (jobs, workers, _thread) = engine();
        (jobs, workers)
    }

    fn submit(source: &str) -> Request<pb::SubmitJobRequest> {
        Request::new(pb::SubmitJobRequest {
            source: source.into(),
            filename: "job.toml".into(),
            format: String::new(),
            after_jobs: Vec::new(),
        })
    }

    fn register(worker: &str, cpus: u32) -> Request<pb::RegisterRequest> {
        Request::new(pb::RegisterRequest {
            worker_id: worker.into(),
            session: "s1".into(),
            peer_addr: "http://127.0.0.1:1".into(),
            capacity: Some(pb::NodeCapacity { cpus, memory: 1 << 30, ..Default::default() }),
            ..Default::default()
        })
    }

    const ONE: &str = "[[task]]\nname = \"a\"\ncommand = [\"true\"]\n";

    #[tokio::test]
    async fn a_bad_job_file_is_invalid_argument_with_file_and_line() {
        let (jobs, _) = apis();
        let e = jobs
            .submit_job(submit("[[task]]\nname = \"a\"\ncommand = [\"true\"]\nafter = [\"b\"]\n"))
            .await
            .unwrap_err();
        assert_eq!(e.code(), Code::InvalidArgument);
        assert!(
            e.message().starts_with("job.toml:4: ") && e.message().contains("unknown dependency \"b\""),
            "{}",
            e.message()
        );
        let huge = "#".repeat(MAX_JOB_SOURCE + 1);
        let e = jobs.submit_job(submit(&huge)).await.unwrap_err();
        assert_eq!(e.code(), Code::InvalidArgument);
        assert!(e.message().contains("larger than"), "{}", e.message());
    }

    #[tokio::test]
    async fn an_unsatisfiable_job_names_its_file_and_is_invalid_argument() {
        let (jobs, workers) = apis();
        workers.register(register(&plexus_proto::WorkerId::random().to_string(), 2)).await.unwrap();
        let e =
            jobs.submit_job(submit("[[task]]\nname = \"big\"\ncommand = [\"true\"]\ncpu = 64\n")).await.unwrap_err();
        assert_eq!(e.code(), Code::InvalidArgument);
        assert!(
            e.message().starts_with("job.toml: ") && e.message().contains("no live worker can ever offer"),
            "{}",
            e.message()
        );
    }

    #[tokio::test]
    async fn unknown_and_finished_jobs_get_their_own_codes() {
        let (jobs, _) = apis();
        let unknown = JobId::random().to_string();
        let e = jobs
            .get_job(Request::new(pb::GetJobRequest { job_id: unknown.clone(), subtasks: false }))
            .await
            .unwrap_err();
        assert_eq!(e.code(), Code::NotFound);
        assert!(e.message().contains(&unknown), "{}", e.message());
        let e = jobs
            .get_job(Request::new(pb::GetJobRequest {
                job_id: "wkr-00000000000000000000000000000000".into(),
                subtasks: false,
            }))
            .await
            .unwrap_err();
        assert_eq!(e.code(), Code::InvalidArgument, "a worker id where a job id belongs: {}", e.message());
        assert!(e.message().contains("job_id"), "the field is named: {}", e.message());

        let id = jobs.submit_job(submit(ONE)).await.unwrap().into_inner().job_id;
        let cancelled =
            jobs.cancel_job(Request::new(pb::CancelJobRequest { job_id: id.clone() })).await.unwrap().into_inner();
        assert_eq!(cancelled.job_id, id);
        let e = jobs.cancel_job(Request::new(pb::CancelJobRequest { job_id: id.clone() })).await.unwrap_err();
        assert_eq!(e.code(), Code::FailedPrecondition, "{}", e.message());
        let e = jobs
            .explain_placement(Request::new(pb::ExplainPlacementRequest { job_id: id, task: "zz".into(), rank: 0 }))
            .await
            .unwrap_err();
        assert_eq!(e.code(), Code::NotFound);
    }

    #[tokio::test]
    async fn get_job_returns_subtasks_only_when_asked() {
        let (jobs, _) = apis();
        let id = jobs
            .submit_job(submit("[[task]]\nname = \"a\"\ncommand = [\"true\"]\nreplicas = 3\n"))
            .await
            .unwrap()
            .into_inner()
            .job_id;
        let brief = jobs
            .get_job(Request::new(pb::GetJobRequest { job_id: id.clone(), subtasks: false }))
            .await
            .unwrap()
            .into_inner();
        let full =
            jobs.get_job(Request::new(pb::GetJobRequest { job_id: id, subtasks: true })).await.unwrap().into_inner();
        assert!(brief.subtasks.is_empty());
        assert_eq!(full.subtasks.len(), 3);
    }

    #[tokio::test]
    async fn worker_messages_are_checked_and_name_the_field() {
        let (_, workers) = apis();
        let e = workers.register(register("job-00000000000000000000000000000000", 2)).await.unwrap_err();
        assert_eq!(e.code(), Code::InvalidArgument);
        assert!(e.message().contains("worker_id"), "{}", e.message());
        let mut r = register(&plexus_proto::WorkerId::random().to_string(), 2);
        r.get_mut().capacity.as_mut().unwrap().rails = vec!["127.0.0.1:1".into(); plexus_proto::rules::MAX_RAILS + 1];
        let e = workers.register(r).await.unwrap_err();
        assert_eq!(e.code(), Code::InvalidArgument);
        assert!(e.message().contains("capacity.rails"), "{}", e.message());
        // An assignment stream for a session that never registered.
        let e = workers
            .assignments(Request::new(pb::AssignmentsRequest {
                worker_id: plexus_proto::WorkerId::random().to_string(),
                session: "x".into(),
            }))
            .await
            .err()
            .expect("refused");
        assert_eq!(e.code(), Code::FailedPrecondition);
    }

    #[tokio::test]
    async fn watch_streams_end_when_the_server_stops_them() {
        let (jobs, _) = apis();
        // No worker: the job stays running, so its watch stream would never end by itself.
        let id = jobs.submit_job(submit(ONE)).await.unwrap().into_inner().job_id;
        let mut stream = jobs.watch_job(Request::new(pb::WatchJobRequest { job_id: id })).await.unwrap().into_inner();
        let first = futures::StreamExt::next(&mut stream).await.expect("a first status").expect("ok");
        assert_eq!(first.state, pb::JobState::Running as i32);
        jobs.stream_stopper().stop().await;
        let mut last = None;
        while let Some(item) = futures::StreamExt::next(&mut stream).await {
            last = Some(item);
        }
        let e = last.expect("the stream says why it ended").expect_err("an error");
        assert_eq!(e.code(), Code::Unavailable);
        assert!(e.message().contains("shutting down"), "{}", e.message());
        // And a watch opened after the stop ends at once, not never.
        assert!(jobs.streams.is_closed());
    }

    #[tokio::test]
    async fn a_stopped_engine_is_unavailable() {
        let (jobs, _, thread) = engine();
        jobs.engine.stop();
        tokio::task::spawn_blocking(move || thread.join())
            .await
            .unwrap()
            .expect("the engine thread ends")
            .expect("cleanly");
        let e = jobs.list_jobs(Request::new(pb::ListJobsRequest {})).await.unwrap_err();
        assert_eq!(e.code(), Code::Unavailable);
        assert!(e.message().contains("engine has stopped"), "{}", e.message());
    }
}
