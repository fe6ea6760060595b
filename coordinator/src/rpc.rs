//! The gRPC adapters: `JobService` for clients and `WorkerService` for workers. The only module
//! that implements tonic's service traits. Each handler converts and checks its request, calls
//! the engine, converts the engine's views ([`crate::view`]) with [`crate::convert`], and returns
//! the crate's [`Error`]; the trait methods only wrap that in a `Response`, the error made a
//! `Status` by [`crate::status::status`], the one place that happens.

use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use futures::Stream;
use plexus_proto::convert::{self as pc};
use plexus_proto::pb::job_service_server::JobService;
use plexus_proto::pb::peer_service_client::PeerServiceClient;
use plexus_proto::pb::worker_service_server::WorkerService;
use plexus_proto::{JobId, WorkerId, pb};
use plexus_scheduler::Error as SchedulerError;
use plexus_scheduler::spec::{self, Format};
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;
use tonic::{Request, Response, Status};

use crate::auth::{self, Caller, Security};
use crate::convert;
use crate::engine::{Cmd, EngineHandle};
use crate::error::Error;
use crate::relay;
use crate::status::status;
use crate::submission;
use crate::view::{Detail, WorkerPage};
use crate::working_dirs::{self, ChunkStream, WorkingDirs};

/// How long the coordinator waits on a worker when proxying a log read. Logs are small and the
/// worker is local to the cluster; past this the coordinator serves the tail it keeps.
const LOG_PROXY_TIMEOUT: Duration = Duration::from_secs(3);

/// Watch streams send at most one status per this interval; a 10,000-subtask job changes every
/// millisecond, and nobody reads progress bars faster than this.
const WATCH_MIN_INTERVAL: Duration = Duration::from_millis(100);

/// Largest job file accepted.
const MAX_JOB_SOURCE: usize = 16 << 20;

/// A handler's answer as tonic wants it.
fn reply<T>(r: Result<T, Error>) -> Result<Response<T>, Status> {
    r.map(Response::new).map_err(status)
}

fn job_id(s: &str) -> Result<JobId, Error> {
    Ok(pc::job_id("job_id", s)?)
}

/// Waits for blocking work (the store, certificates) run off the runtime's threads.
async fn blocking<T: Send + 'static>(
    what: &str,
    f: impl FnOnce() -> Result<T, Error> + Send + 'static,
) -> Result<T, Error> {
    tokio::task::spawn_blocking(f).await.map_err(|e| Error::Engine(format!("{what}: {e}")))?
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
    /// The tasks feeding `WatchJob` and `GetObject` streams: cancelled and awaited at shutdown
    /// ([`JobApi::stream_stopper`]), so none outlives the server.
    streams: TaskTracker,
    stop: CancellationToken,
    /// The archives of jobs' working dirs.
    working_dirs: Option<Arc<WorkingDirs>>,
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
            working_dirs: None,
        }
    }

    /// Takes and serves working-dir archives from `dirs`.
    pub fn with_working_dirs(mut self, dirs: Arc<WorkingDirs>) -> JobApi {
        self.working_dirs = Some(dirs);
        self
    }

    /// Serves the token RPCs from `security`, and reads logs from workers over mutual TLS.
    pub fn with_security(mut self, security: Option<Arc<Security>>) -> JobApi {
        self.security = security;
        self
    }

    fn security(&self) -> Result<Arc<Security>, Error> {
        self.security.clone().ok_or_else(|| {
            Error::Insecure(
                "this coordinator runs with --insecure: it has no tokens (restart it without --insecure)".into(),
            )
        })
    }

    /// A client of a worker's `PeerService`, over mutual TLS unless the coordinator is insecure.
    async fn peer_client(&self, peer: &str) -> Result<PeerServiceClient<tonic::transport::Channel>, Error> {
        let unavailable = |e: &dyn std::fmt::Display| Error::Unavailable(format!("connecting to worker {peer}: {e}"));
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

    fn store(&self) -> Result<&StoreAccess, Error> {
        self.store.as_ref().ok_or_else(|| Error::Unavailable("this coordinator serves no store information".into()))
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
type ObjectStream = Pin<Box<dyn Stream<Item = Result<pb::ObjectChunk, Status>> + Send>>;

/// The handlers of `JobService`, each on the plain request, answering with the crate's error.
impl JobApi {
    async fn submit(&self, r: pb::SubmitJobRequest) -> Result<pb::SubmitJobResponse, Error> {
        let filename = if r.filename.is_empty() { "<job>".to_string() } else { r.filename.clone() };
        if r.source.len() > MAX_JOB_SOURCE {
            return Err(Error::Invalid(format!("{filename}: job file is larger than {} MiB", MAX_JOB_SOURCE >> 20)));
        }
        let format = Format::infer(&r.format, &filename).map_err(SchedulerError::from)?;
        // Parsing happens off the engine and off the runtime's worker threads (a large file takes
        // a moment), so neither heartbeats nor other requests wait for it.
        let (source, file) = (r.source, filename.clone());
        let mut spec = tokio::task::spawn_blocking(move || spec::parse(&source, format, &file))
            .await
            .map_err(|e| Error::Engine(format!("parsing the job file: {e}")))?
            .map_err(SchedulerError::from)?;
        submission::add_after_jobs(&mut spec, &r.after_jobs, &filename)?;
        if r.dry_run {
            return submission::dry_run(&self.engine, spec, filename).await;
        }
        // Held until the engine has the job: its working dir's archive stays (`WorkingDirs::claim`).
        let _held = working_dirs::hold_for(self.working_dirs.as_deref(), &mut spec, &r.working_dir, &filename).await?;
        let id = JobId::random();
        let n = self
            .engine
            .call(|reply| Cmd::Submit { id, spec, reply })
            .await?
            .map_err(|source| Error::InFile { file: filename.clone(), source })?;
        Ok(pb::SubmitJobResponse { job_id: id.to_string(), subtasks: n, dry_run: None })
    }

    async fn resubmit(&self, r: pb::ResubmitJobRequest) -> Result<pb::SubmitJobResponse, Error> {
        let job = job_id(&r.job_id)?;
        let id = JobId::random();
        let _held = working_dirs::hold_again(self.working_dirs.as_deref(), &self.engine, job).await?;
        let n = self.engine.call(|reply| Cmd::Resubmit { job, id, reply }).await??;
        Ok(pb::SubmitJobResponse { job_id: id.to_string(), subtasks: n, dry_run: None })
    }

    async fn get(&self, r: pb::GetJobRequest) -> Result<pb::JobStatus, Error> {
        let job = job_id(&r.job_id)?;
        let detail = Detail::of_request(r.subtasks);
        let view = self.engine.call(|reply| Cmd::GetJob { job, detail, reply }).await??;
        Ok(convert::job_status(&view))
    }

    async fn list(&self) -> Result<pb::ListJobsResponse, Error> {
        let jobs = self.engine.call(|reply| Cmd::ListJobs { reply }).await?;
        Ok(pb::ListJobsResponse { jobs: jobs.iter().map(convert::job_status).collect() })
    }

    async fn object(&self, r: pb::GetObjectRequest) -> Result<ObjectStream, Error> {
        let object_id = r.object_id;
        let object = pc::object_id("object_id", &object_id)?;
        let sources = self.engine.call(|reply| Cmd::Holders { object: object.clone(), reply }).await??;
        if sources.holders.is_empty() {
            return Err(Error::NotFound(format!(
                "no live worker holds {object_id} (not produced yet, lost with its worker, or its copies did not match its digest; a job that needs it again re-runs its producer)"
            )));
        }
        let mut last = String::new();
        for (holder, peer) in sources.holders {
            let fetch = async {
                let mut client = self.peer_client(&peer).await?;
                client
                    .fetch_object(pb::FetchObjectRequest { object_id: object_id.clone() })
                    .await
                    .map_err(|s| Error::Unavailable(s.message().to_string()))
            };
            match tokio::time::timeout(LOG_PROXY_TIMEOUT, fetch).await {
                Ok(Ok(stream)) => {
                    let (engine, copy) =
                        (self.engine.clone(), relay::Copy { object, holder, peer, digest: sources.digest });
                    return Ok(self.tracked_stream(move |tx| relay::forward(stream.into_inner(), tx, engine, copy)));
                }
                Ok(Err(e)) => last = format!("{peer}: {e}"),
                Err(_) => last = format!("{peer}: no answer within {LOG_PROXY_TIMEOUT:?}"),
            }
        }
        Err(Error::Unavailable(format!("no holder of {object_id} could serve it ({last})")))
    }

    async fn watch(&self, r: pb::WatchJobRequest) -> Result<WatchStream, Error> {
        let job = job_id(&r.job_id)?;
        let mut rx = self.engine.call(|reply| Cmd::Watch { job, reply }).await??;
        Ok(self.tracked_stream(move |tx| async move {
            loop {
                let current = rx.borrow_and_update().clone();
                let done = current.is_final();
                if tx.send(Ok(convert::job_status(&current))).await.is_err() || done {
                    return;
                }
                tokio::time::sleep(WATCH_MIN_INTERVAL).await;
                if rx.changed().await.is_err() {
                    // The engine dropped the sender: the job ended (its final status is the
                    // last value) or the coordinator is stopping.
                    let last = rx.borrow().clone();
                    let _ = if last.is_final() {
                        tx.send(Ok(convert::job_status(&last))).await
                    } else {
                        tx.send(Err(status(Error::ShuttingDown))).await
                    };
                    return;
                }
            }
        }))
    }

    async fn cancel(&self, r: pb::CancelJobRequest) -> Result<pb::JobStatus, Error> {
        let job = job_id(&r.job_id)?;
        let view = self.engine.call(|reply| Cmd::Cancel { job, reply }).await??;
        Ok(convert::job_status(&view))
    }

    async fn logs(&self, r: pb::GetLogsRequest) -> Result<pb::GetLogsResponse, Error> {
        let job = job_id(&r.job_id)?;
        let src = self
            .engine
            .call(|reply| Cmd::Logs { job, task: r.task.clone(), rank: r.rank, attempt: r.attempt, reply })
            .await??;
        // The worker has the whole log; ask it first, and fall back on the tail we keep.
        if let Some(peer) = &src.peer_addr {
            let attempt = pb::AttemptRef::from(&src.attempt_ref);
            let read = async {
                let mut client = self.peer_client(peer).await?;
                client
                    .read_log(pb::ReadLogRequest { attempt: Some(attempt), max_bytes: 0 })
                    .await
                    .map_err(|s| Error::Unavailable(s.message().to_string()))
            };
            match tokio::time::timeout(LOG_PROXY_TIMEOUT, read).await {
                Ok(Ok(resp)) => {
                    let l = resp.into_inner();
                    return Ok(pb::GetLogsResponse {
                        stdout: l.stdout,
                        stderr: l.stderr,
                        worker_id: src.worker,
                        attempt: src.attempt,
                        truncated: l.truncated,
                        state: pb::SubtaskState::from(src.state) as i32,
                        latest_attempt: src.latest_attempt,
                        dropped_bytes: l.dropped_bytes,
                    });
                }
                Ok(Err(e)) => {
                    tracing::debug!(peer, error = %e, "log read from worker failed; serving the kept tail")
                }
                Err(_) => tracing::debug!(peer, "log read from worker timed out; serving the kept tail"),
            }
        }
        if src.stdout_tail.is_empty() && src.stderr_tail.is_empty() && src.peer_addr.is_none() {
            return Err(Error::Unavailable(format!(
                "the logs of task {:?} rank {} are on worker {}, which is not reachable, and no tail was kept",
                r.task, r.rank, src.worker
            )));
        }
        Ok(pb::GetLogsResponse {
            stdout: src.stdout_tail.into_bytes(),
            stderr: src.stderr_tail.into_bytes(),
            worker_id: src.worker,
            attempt: src.attempt,
            truncated: true,
            state: pb::SubtaskState::from(src.state) as i32,
            latest_attempt: src.latest_attempt,
            dropped_bytes: 0,
        })
    }

    async fn workers(&self, r: pb::ListWorkersRequest) -> Result<pb::ListWorkersResponse, Error> {
        let page = convert::worker_page(&r).map_err(Error::Invalid)?;
        let list = self.engine.call(|reply| Cmd::ListWorkers { page, reply }).await?;
        let halt = self.engine.call(|reply| Cmd::EvictionHalt { reply }).await?;
        Ok(convert::workers_response(&list, halt))
    }

    fn store_info(&self) -> Result<pb::StoreInfo, Error> {
        let s = self.store()?;
        Ok(pb::StoreInfo {
            dir: s.dir.clone(),
            schema_version: s.schema_version,
            binary_version: plexus_migrations::CURRENT,
        })
    }

    async fn policy_weights(&self) -> Result<pb::ExportPolicyResponse, Error> {
        let policy = self.store()?.policy.clone();
        let weights = blocking("reading the policy weights", move || {
            policy.load_weights().map_err(|e| Error::Unavailable(format!("reading the policy weights: {e}")))
        })
        .await?;
        Ok(pb::ExportPolicyResponse { weights: weights.unwrap_or_default() })
    }

    async fn token_create(&self, r: pb::CreateTokenRequest) -> Result<pb::CreateTokenResponse, Error> {
        let security = self.security()?;
        let scope = plexus_security::tokens::scope(&r.scope).map_err(|e| Error::Invalid(e.to_string()))?;
        let (token, record) = blocking("creating a token", move || {
            security.create_token(scope, &r.name, r.ttl_ms, plexus_proto::now_ms())
        })
        .await?;
        tracing::info!(id = record.id, scope = record.scope, name = record.name, "token created");
        Ok(pb::CreateTokenResponse { token: token.expose(), info: Some(convert::token_info(&record)) })
    }

    async fn token_list(&self) -> Result<pb::ListTokensResponse, Error> {
        let security = self.security()?;
        let tokens = blocking("listing tokens", move || security.list_tokens()).await?;
        Ok(pb::ListTokensResponse { tokens: tokens.iter().map(convert::token_info).collect() })
    }

    async fn token_revoke(&self, r: pb::RevokeTokenRequest) -> Result<pb::TokenInfo, Error> {
        let security = self.security()?;
        let record = blocking("revoking a token", move || security.revoke(&r.id, plexus_proto::now_ms())).await?;
        tracing::info!(id = record.id, "token revoked");
        Ok(convert::token_info(&record))
    }

    async fn queue_set(&self, r: pb::SetQueueRequest) -> Result<pb::QueueList, Error> {
        let share = (!r.clear).then_some(r.share);
        let name = r.name.clone();
        let queues = self.engine.call(|reply| Cmd::SetQueue { name: r.name, share, reply }).await??;
        if let Some(tree) = self.store.as_ref().and_then(|s| s.queues.clone()) {
            let key = name.clone();
            blocking("storing a queue share", move || crate::store::set_queue_share(tree.as_ref(), &key, share))
                .await
                .map_err(|e| Error::QueueNotStored { queue: name.clone(), source: Box::new(e) })?;
        }
        tracing::info!(queue = name, ?share, "queue share set");
        Ok(convert::queue_list(&queues))
    }

    async fn queue_list(&self) -> Result<pb::QueueList, Error> {
        let queues = self.engine.call(|reply| Cmd::ListQueues { reply }).await?;
        Ok(convert::queue_list(&queues))
    }

    async fn coordinators(&self) -> Result<pb::ListCoordinatorsResponse, Error> {
        let Some(role) = &self.role else {
            return Err(Error::Unavailable("this coordinator serves no control-plane information".into()));
        };
        let coordinators = role.coordinators().await?;
        Ok(pb::ListCoordinatorsResponse {
            coordinators: coordinators.iter().map(convert::coordinator_info).collect(),
            store: role.store.clone(),
        })
    }

    async fn worker_revoke(&self, r: pb::RevokeWorkerRequest) -> Result<pb::RevokeWorkerResponse, Error> {
        let security = self.security()?;
        let worker = pc::worker_id("worker_id", &r.worker_id)?;
        let revoked = blocking("revoking a worker certificate", move || security.revoke_worker(worker)).await?;
        tracing::info!(%worker, revoked, "worker certificate revoked");
        Ok(pb::RevokeWorkerResponse { revoked })
    }

    async fn drain(&self, r: pb::DrainWorkerRequest) -> Result<pb::DrainWorkerResponse, Error> {
        let worker = pc::worker_id("worker_id", &r.worker_id)?;
        self.engine.call(|reply| Cmd::DrainWorker { worker, on: !r.undrain, reply }).await??;
        Ok(pb::DrainWorkerResponse {})
    }

    async fn remove(&self, r: pb::RemoveWorkerRequest) -> Result<pb::RemoveWorkerResponse, Error> {
        let worker = pc::worker_id("worker_id", &r.worker_id)?;
        self.engine.call(|reply| Cmd::RemoveWorker { worker, reply }).await??;
        Ok(pb::RemoveWorkerResponse {})
    }

    async fn explain(&self, r: pb::ExplainPlacementRequest) -> Result<pb::ExplainPlacementResponse, Error> {
        let job = job_id(&r.job_id)?;
        let (e, ran) = self.engine.call(|reply| Cmd::Explain { job, task: r.task, rank: r.rank, reply }).await??;
        let learner = self.engine.call(|reply| Cmd::Learning { reply }).await?;
        Ok(pb::ExplainPlacementResponse {
            collective: ran.unwrap_or_default(),
            learner: crate::learned::summary(learner.0, learner.1.as_ref()),
            ..convert::explanation(&e)
        })
    }
}

#[tonic::async_trait]
impl JobService for JobApi {
    async fn stat_working_dir(
        &self,
        req: Request<pb::StatWorkingDirRequest>,
    ) -> Result<Response<pb::StatWorkingDirResponse>, Status> {
        reply(async { working_dirs::kept(self.working_dirs.as_deref())?.stat(req.into_inner()).await }.await)
    }

    async fn upload_working_dir(
        &self,
        req: Request<tonic::Streaming<pb::WorkingDirChunk>>,
    ) -> Result<Response<pb::UploadWorkingDirResponse>, Status> {
        let received =
            async { working_dirs::kept(self.working_dirs.as_deref())?.receive(req.into_inner(), &self.engine).await }
                .await;
        reply(received.map(|received_bytes| pb::UploadWorkingDirResponse { received_bytes }))
    }

    async fn submit_job(&self, req: Request<pb::SubmitJobRequest>) -> Result<Response<pb::SubmitJobResponse>, Status> {
        reply(self.submit(req.into_inner()).await)
    }

    async fn resubmit_job(
        &self,
        req: Request<pb::ResubmitJobRequest>,
    ) -> Result<Response<pb::SubmitJobResponse>, Status> {
        reply(self.resubmit(req.into_inner()).await)
    }

    async fn get_job(&self, req: Request<pb::GetJobRequest>) -> Result<Response<pb::JobStatus>, Status> {
        reply(self.get(req.into_inner()).await)
    }

    async fn list_jobs(&self, _req: Request<pb::ListJobsRequest>) -> Result<Response<pb::ListJobsResponse>, Status> {
        reply(self.list().await)
    }

    type WatchJobStream = WatchStream;
    type GetObjectStream = ObjectStream;

    async fn get_object(&self, req: Request<pb::GetObjectRequest>) -> Result<Response<ObjectStream>, Status> {
        reply(self.object(req.into_inner()).await)
    }

    async fn watch_job(&self, req: Request<pb::WatchJobRequest>) -> Result<Response<WatchStream>, Status> {
        reply(self.watch(req.into_inner()).await)
    }

    async fn cancel_job(&self, req: Request<pb::CancelJobRequest>) -> Result<Response<pb::JobStatus>, Status> {
        reply(self.cancel(req.into_inner()).await)
    }

    async fn get_logs(&self, req: Request<pb::GetLogsRequest>) -> Result<Response<pb::GetLogsResponse>, Status> {
        reply(self.logs(req.into_inner()).await)
    }

    async fn list_workers(
        &self,
        req: Request<pb::ListWorkersRequest>,
    ) -> Result<Response<pb::ListWorkersResponse>, Status> {
        reply(self.workers(req.into_inner()).await)
    }

    async fn get_store_info(&self, _req: Request<pb::GetStoreInfoRequest>) -> Result<Response<pb::StoreInfo>, Status> {
        reply(self.store_info())
    }

    async fn export_policy(
        &self,
        _req: Request<pb::ExportPolicyRequest>,
    ) -> Result<Response<pb::ExportPolicyResponse>, Status> {
        reply(self.policy_weights().await)
    }

    async fn create_token(
        &self,
        req: Request<pb::CreateTokenRequest>,
    ) -> Result<Response<pb::CreateTokenResponse>, Status> {
        reply(self.token_create(req.into_inner()).await)
    }

    async fn list_tokens(
        &self,
        _req: Request<pb::ListTokensRequest>,
    ) -> Result<Response<pb::ListTokensResponse>, Status> {
        reply(self.token_list().await)
    }

    async fn revoke_token(&self, req: Request<pb::RevokeTokenRequest>) -> Result<Response<pb::TokenInfo>, Status> {
        reply(self.token_revoke(req.into_inner()).await)
    }

    async fn set_queue(&self, req: Request<pb::SetQueueRequest>) -> Result<Response<pb::QueueList>, Status> {
        reply(self.queue_set(req.into_inner()).await)
    }

    async fn list_queues(&self, _req: Request<pb::ListQueuesRequest>) -> Result<Response<pb::QueueList>, Status> {
        reply(self.queue_list().await)
    }

    async fn list_coordinators(
        &self,
        _req: Request<pb::ListCoordinatorsRequest>,
    ) -> Result<Response<pb::ListCoordinatorsResponse>, Status> {
        reply(self.coordinators().await)
    }

    async fn revoke_worker(
        &self,
        req: Request<pb::RevokeWorkerRequest>,
    ) -> Result<Response<pb::RevokeWorkerResponse>, Status> {
        reply(self.worker_revoke(req.into_inner()).await)
    }

    async fn drain_worker(
        &self,
        req: Request<pb::DrainWorkerRequest>,
    ) -> Result<Response<pb::DrainWorkerResponse>, Status> {
        reply(self.drain(req.into_inner()).await)
    }

    async fn remove_worker(
        &self,
        req: Request<pb::RemoveWorkerRequest>,
    ) -> Result<Response<pb::RemoveWorkerResponse>, Status> {
        reply(self.remove(req.into_inner()).await)
    }

    async fn explain_placement(
        &self,
        req: Request<pb::ExplainPlacementRequest>,
    ) -> Result<Response<pb::ExplainPlacementResponse>, Status> {
        reply(self.explain(req.into_inner()).await)
    }
}

/// The worker-facing API.
pub struct WorkerApi {
    engine: EngineHandle,
    /// `None`: the coordinator runs with `--insecure` (no certificates, no rail key).
    security: Option<Arc<Security>>,
    working_dirs: Option<Arc<WorkingDirs>>,
    /// With etcd: where this coordinator stands, for the registrations a standby holds.
    role: Option<Arc<crate::ha::Role>>,
}

type AssignmentStream = Pin<Box<dyn Stream<Item = Result<pb::AssignmentBatch, Status>> + Send>>;

impl WorkerApi {
    pub fn new(engine: EngineHandle) -> WorkerApi {
        WorkerApi { engine, security: None, working_dirs: None, role: None }
    }

    /// Holds registrations that reach this coordinator as a standby while a leader is coming
    /// (`ha::Role::holds_registrations`) until it leads.
    pub fn with_role(mut self, role: Arc<crate::ha::Role>) -> WorkerApi {
        self.role = Some(role);
        self
    }

    /// Serves `FetchWorkingDir` from `dirs`.
    pub fn with_working_dirs(mut self, dirs: Arc<WorkingDirs>) -> WorkerApi {
        self.working_dirs = Some(dirs);
        self
    }

    async fn working_dir(&self, caller: Option<&Caller>, r: pb::FetchWorkingDirRequest) -> Result<ChunkStream, Error> {
        self.check(caller, &r.worker_id)?;
        working_dirs::kept(self.working_dirs.as_deref())?.send(&r.digest).await
    }

    /// Issues certificates to joining workers, hands out the rail key, and checks that every
    /// call's worker id is the caller's certificate's.
    pub fn with_security(mut self, security: Option<Arc<Security>>) -> WorkerApi {
        self.security = security;
        self
    }

    /// The worker id a message claims, checked against the caller's certificate.
    fn check(&self, caller: Option<&Caller>, claimed: &str) -> Result<WorkerId, Error> {
        let worker = pc::worker_id("worker_id", claimed)?;
        auth::check_worker(caller, worker, self.security.is_some())?;
        Ok(worker)
    }

    async fn registration(
        &self,
        caller: Option<&Caller>,
        r: pb::RegisterRequest,
    ) -> Result<pb::RegisterResponse, Error> {
        if let Some(role) = &self.role {
            role.admit_registration().await?;
        }
        self.check(caller, &r.worker_id)?;
        let reg = Box::new(convert::registration(&r)?);
        let t = self.engine.call(|reply| Cmd::Register { reg, reply }).await?;
        let rail_key = self.security.as_ref().map(|s| s.rail_key.clone()).unwrap_or_default();
        Ok(pb::RegisterResponse {
            heartbeat_interval_ms: t.heartbeat_interval_ms,
            heartbeat_timeout_ms: t.heartbeat_timeout_ms,
            lease_ms: t.lease_ms,
            rail_key,
            resumed: t.resumed,
        })
    }

    async fn resolve(&self, r: pb::ResolvePeerRequest) -> Result<pb::ResolvePeerResponse, Error> {
        let Some(security) = &self.security else {
            return Err(Error::Insecure(
                "this coordinator runs with --insecure: there are no certificates to resolve".into(),
            ));
        };
        let fp = plexus_security::Fingerprint(r.fingerprint);
        let worker = security
            .worker_of(&fp)
            .ok_or_else(|| Error::NotFound(format!("no current worker certificate has fingerprint {fp}")))?;
        let page = WorkerPage::one(worker);
        let workers = self.engine.call(|reply| Cmd::ListWorkers { page, reply }).await?.workers;
        let rails =
            workers.into_iter().find(|w| w.id == worker && w.alive).map(|w| w.capacity.rails).unwrap_or_default();
        Ok(pb::ResolvePeerResponse { worker_id: worker.to_string(), rails })
    }

    async fn beat(&self, caller: Option<&Caller>, r: pb::HeartbeatRequest) -> Result<pb::HeartbeatResponse, Error> {
        let worker = self.check(caller, &r.worker_id)?;
        let node = convert::node_report(r.state.as_ref())?;
        let t = std::time::Instant::now();
        let timing = self.engine.call(|reply| Cmd::Heartbeat { worker, session: r.session, node, reply }).await?;
        self.engine.load().heartbeat(t.elapsed());
        Ok(match timing {
            Some(t) => pb::HeartbeatResponse {
                reregister: false,
                heartbeat_interval_ms: t.heartbeat_interval_ms,
                heartbeat_timeout_ms: t.heartbeat_timeout_ms,
                lease_ms: t.lease_ms,
            },
            None => pb::HeartbeatResponse { reregister: true, ..Default::default() },
        })
    }

    async fn assignment_stream(
        &self,
        caller: Option<&Caller>,
        r: pb::AssignmentsRequest,
    ) -> Result<AssignmentStream, Error> {
        let worker = self.check(caller, &r.worker_id)?;
        let rx = self
            .engine
            .call(|reply| Cmd::OpenStream { worker, session: r.session, reply })
            .await?
            .ok_or(Error::NotRegistered)?;
        let stream = futures::StreamExt::map(tokio_stream::wrappers::UnboundedReceiverStream::new(rx), |b| {
            Ok(convert::work_batch(&b))
        });
        Ok(Box::pin(stream))
    }

    async fn report(
        &self,
        caller: Option<&Caller>,
        r: pb::ReportTasksRequest,
    ) -> Result<pb::ReportTasksResponse, Error> {
        let worker = self.check(caller, &r.worker_id)?;
        // One bad report refuses the whole call: the worker keeps them all and the error names
        // the field, which is a bug on the worker's side to be fixed, not data to half-apply.
        let reports = r.reports.iter().map(convert::report).collect::<Result<Vec<_>, _>>()?;
        let ok = self.engine.call(|reply| Cmd::Report { worker, session: r.session, reports, reply }).await?;
        Ok(pb::ReportTasksResponse { reregister: !ok })
    }
}

/// Who made a call, as the auth layer left it in the request (nothing with `--insecure`).
fn caller<T>(req: &Request<T>) -> Option<Caller> {
    req.extensions().get::<Caller>().cloned()
}

#[tonic::async_trait]
impl WorkerService for WorkerApi {
    async fn register(&self, req: Request<pb::RegisterRequest>) -> Result<Response<pb::RegisterResponse>, Status> {
        let caller = caller(&req);
        reply(self.registration(caller.as_ref(), req.into_inner()).await)
    }

    async fn join(&self, req: Request<pb::JoinRequest>) -> Result<Response<pb::JoinResponse>, Status> {
        reply(auth::join(self.security.clone(), req.into_inner()).await)
    }

    async fn resolve_peer(
        &self,
        req: Request<pb::ResolvePeerRequest>,
    ) -> Result<Response<pb::ResolvePeerResponse>, Status> {
        reply(self.resolve(req.into_inner()).await)
    }

    async fn heartbeat(&self, req: Request<pb::HeartbeatRequest>) -> Result<Response<pb::HeartbeatResponse>, Status> {
        let caller = caller(&req);
        reply(self.beat(caller.as_ref(), req.into_inner()).await)
    }

    type AssignmentsStream = AssignmentStream;
    type FetchWorkingDirStream = ChunkStream;

    async fn fetch_working_dir(
        &self,
        req: Request<pb::FetchWorkingDirRequest>,
    ) -> Result<Response<ChunkStream>, Status> {
        let caller = caller(&req);
        reply(self.working_dir(caller.as_ref(), req.into_inner()).await)
    }

    async fn assignments(&self, req: Request<pb::AssignmentsRequest>) -> Result<Response<AssignmentStream>, Status> {
        let caller = caller(&req);
        reply(self.assignment_stream(caller.as_ref(), req.into_inner()).await)
    }

    async fn report_tasks(
        &self,
        req: Request<pb::ReportTasksRequest>,
    ) -> Result<Response<pb::ReportTasksResponse>, Status> {
        let caller = caller(&req);
        reply(self.report(caller.as_ref(), req.into_inner()).await)
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
            working_dir: Vec::new(),
            dry_run: false,
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
