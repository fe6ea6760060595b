//! The gRPC adapters: `JobService` for clients and `WorkerService` for workers. The only module
//! that knows tonic's service traits. Each handler converts and checks its request, calls the
//! engine, and maps errors to a `Status` in one place ([`status`]).

use std::pin::Pin;
use std::time::Duration;

use futures::Stream;
use plexus_proto::convert::{self as pc};
use plexus_proto::pb::job_service_server::JobService;
use plexus_proto::pb::peer_service_client::PeerServiceClient;
use plexus_proto::pb::worker_service_server::WorkerService;
use plexus_proto::{JobId, pb};
use tonic::{Request, Response, Status};

use crate::convert;
use crate::core::CoreError;
use crate::engine::{Cmd, EngineHandle, EngineStopped};
use crate::spec::{self, Format};

/// How long the coordinator waits on a worker when proxying a log read. Logs are small and the
/// worker is local to the cluster; past this the coordinator serves the tail it keeps.
const LOG_PROXY_TIMEOUT: Duration = Duration::from_secs(3);

/// Watch streams send at most one status per this interval; a 10,000-subtask job changes every
/// millisecond, and nobody reads progress bars faster than this.
const WATCH_MIN_INTERVAL: Duration = Duration::from_millis(100);

/// Largest job file accepted.
const MAX_JOB_SOURCE: usize = 16 << 20;

fn status(e: CoreError) -> Status {
    match e {
        CoreError::NoJob(_) | CoreError::NoTask { .. } | CoreError::NoRank { .. } | CoreError::NotPlaced(_) => Status::not_found(e.to_string()),
        CoreError::JobFinished { .. } => Status::failed_precondition(e.to_string()),
        CoreError::Unsatisfiable(_) => Status::invalid_argument(e.to_string()),
        CoreError::Duplicate(_) => Status::already_exists(e.to_string()),
    }
}

impl From<EngineStopped> for Status {
    fn from(e: EngineStopped) -> Self {
        Status::unavailable(e.to_string())
    }
}

fn job_id(s: &str) -> Result<JobId, Status> {
    Ok(pc::job_id("job_id", s)?)
}

/// The client API.
pub struct JobApi {
    pub engine: EngineHandle,
}

type WatchStream = Pin<Box<dyn Stream<Item = Result<pb::JobStatus, Status>> + Send>>;

#[tonic::async_trait]
impl JobService for JobApi {
    async fn submit_job(&self, req: Request<pb::SubmitJobRequest>) -> Result<Response<pb::SubmitJobResponse>, Status> {
        let r = req.into_inner();
        let filename = if r.filename.is_empty() { "<job>".to_string() } else { r.filename.clone() };
        if r.source.len() > MAX_JOB_SOURCE {
            return Err(Status::invalid_argument(format!("{filename}: job file is larger than {} MiB", MAX_JOB_SOURCE >> 20)));
        }
        let format = Format::infer(&r.format, &filename).map_err(|e| Status::invalid_argument(e.to_string()))?;
        // Parsing happens here, on a tokio thread, so a large file does not stall the engine.
        let spec = spec::parse(&r.source, format, &filename).map_err(|e| Status::invalid_argument(e.to_string()))?;
        let id = JobId::random();
        let n = self
            .engine
            .call(|reply| Cmd::Submit { id, spec, reply })
            .await?
            .map_err(|e| Status::invalid_argument(format!("{filename}: {e}")))?;
        Ok(Response::new(pb::SubmitJobResponse { job_id: id.to_string(), subtasks: n }))
    }

    async fn get_job(&self, req: Request<pb::GetJobRequest>) -> Result<Response<pb::JobStatus>, Status> {
        let r = req.into_inner();
        let job = job_id(&r.job_id)?;
        let s = self.engine.call(|reply| Cmd::GetJob { job, subtasks: r.subtasks, reply }).await?.map_err(status)?;
        Ok(Response::new(s))
    }

    async fn list_jobs(&self, _req: Request<pb::ListJobsRequest>) -> Result<Response<pb::ListJobsResponse>, Status> {
        let jobs = self.engine.call(|reply| Cmd::ListJobs { reply }).await?;
        Ok(Response::new(pb::ListJobsResponse { jobs }))
    }

    type WatchJobStream = WatchStream;

    async fn watch_job(&self, req: Request<pb::WatchJobRequest>) -> Result<Response<WatchStream>, Status> {
        let job = job_id(&req.into_inner().job_id)?;
        let mut rx = self.engine.call(|reply| Cmd::Watch { job, reply }).await?.map_err(status)?;
        let stream = async_stream(move |tx| async move {
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
                        let _ = tx.send(Err(Status::unavailable("the coordinator is shutting down"))).await;
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
        let src = self.engine.call(|reply| Cmd::Logs { job, task: r.task.clone(), rank: r.rank, reply }).await?.map_err(status)?;
        // The worker has the whole log; ask it first, and fall back on the tail we keep.
        if let Some(peer) = &src.peer_addr {
            let attempt = pb::AttemptRef::from(&src.attempt_ref);
            let read = async {
                let mut client = PeerServiceClient::connect(peer.clone()).await.map_err(|e| Status::unavailable(e.to_string()))?;
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
                    }));
                }
                Ok(Err(e)) => tracing::debug!(peer, error = %e.message(), "log read from worker failed; serving the kept tail"),
                Err(_) => tracing::debug!(peer, "log read from worker timed out; serving the kept tail"),
            }
        }
        if src.stdout_tail.is_empty() && src.stderr_tail.is_empty() && src.peer_addr.is_none() {
            return Err(Status::unavailable(format!(
                "the logs of task {:?} rank {} are on worker {}, which is not reachable, and no tail was kept",
                r.task, r.rank, src.worker
            )));
        }
        Ok(Response::new(pb::GetLogsResponse {
            stdout: src.stdout_tail.into_bytes(),
            stderr: src.stderr_tail.into_bytes(),
            worker_id: src.worker,
            attempt: src.attempt,
            truncated: true,
        }))
    }

    async fn list_workers(&self, _req: Request<pb::ListWorkersRequest>) -> Result<Response<pb::ListWorkersResponse>, Status> {
        let workers = self.engine.call(|reply| Cmd::ListWorkers { reply }).await?;
        Ok(Response::new(pb::ListWorkersResponse { workers }))
    }

    async fn explain_placement(&self, req: Request<pb::ExplainPlacementRequest>) -> Result<Response<pb::ExplainPlacementResponse>, Status> {
        let r = req.into_inner();
        let job = job_id(&r.job_id)?;
        let e = self.engine.call(|reply| Cmd::Explain { job, task: r.task, rank: r.rank, reply }).await?.map_err(status)?;
        Ok(Response::new(e))
    }
}

/// A stream fed by a task through a bounded channel: the task stops when the client goes away.
fn async_stream<F, Fut>(f: F) -> WatchStream
where
    F: FnOnce(tokio::sync::mpsc::Sender<Result<pb::JobStatus, Status>>) -> Fut,
    Fut: std::future::Future<Output = ()> + Send + 'static,
{
    let (tx, rx) = tokio::sync::mpsc::channel(4);
    tokio::spawn(f(tx));
    Box::pin(tokio_stream::wrappers::ReceiverStream::new(rx))
}

/// The worker-facing API.
pub struct WorkerApi {
    pub engine: EngineHandle,
}

type AssignmentStream = Pin<Box<dyn Stream<Item = Result<pb::AssignmentBatch, Status>> + Send>>;

#[tonic::async_trait]
impl WorkerService for WorkerApi {
    async fn register(&self, req: Request<pb::RegisterRequest>) -> Result<Response<pb::RegisterResponse>, Status> {
        let reg = convert::registration(&req.into_inner())?;
        let (interval, timeout) = self.engine.call(|reply| Cmd::Register { reg, reply }).await?;
        Ok(Response::new(pb::RegisterResponse { heartbeat_interval_ms: interval, heartbeat_timeout_ms: timeout }))
    }

    async fn heartbeat(&self, req: Request<pb::HeartbeatRequest>) -> Result<Response<pb::HeartbeatResponse>, Status> {
        let r = req.into_inner();
        let worker = pc::worker_id("worker_id", &r.worker_id)?;
        let node = convert::node_report(r.state.as_ref())?;
        let ok = self.engine.call(|reply| Cmd::Heartbeat { worker, session: r.session, node, reply }).await?;
        Ok(Response::new(pb::HeartbeatResponse { reregister: !ok }))
    }

    type AssignmentsStream = AssignmentStream;

    async fn assignments(&self, req: Request<pb::AssignmentsRequest>) -> Result<Response<AssignmentStream>, Status> {
        let r = req.into_inner();
        let worker = pc::worker_id("worker_id", &r.worker_id)?;
        let rx = self
            .engine
            .call(|reply| Cmd::OpenStream { worker, session: r.session, reply })
            .await?
            .ok_or_else(|| Status::failed_precondition("this worker session is not registered; call Register first"))?;
        let stream = futures::StreamExt::map(tokio_stream::wrappers::UnboundedReceiverStream::new(rx), Ok);
        Ok(Response::new(Box::pin(stream)))
    }

    async fn report_tasks(&self, req: Request<pb::ReportTasksRequest>) -> Result<Response<pb::ReportTasksResponse>, Status> {
        let r = req.into_inner();
        let worker = pc::worker_id("worker_id", &r.worker_id)?;
        // One bad report refuses the whole call: the worker keeps them all and the error names
        // the field, which is a bug on the worker's side to be fixed, not data to half-apply.
        let reports = r.reports.iter().map(convert::report).collect::<Result<Vec<_>, _>>()?;
        let ok = self.engine.call(|reply| Cmd::Report { worker, session: r.session, reports, reply }).await?;
        Ok(Response::new(pb::ReportTasksResponse { reregister: !ok }))
    }
}
