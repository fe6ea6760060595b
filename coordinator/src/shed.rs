//! Load shedding (issue 35): when the engine falls behind, clients' requests are refused with
//! `RESOURCE_EXHAUSTED` so that the workers' heartbeats, registrations and reports — which keep
//! the cluster's view true and its workers from being declared lost — keep going through.
//!
//! Every command reaches the engine through one queue ([`crate::queue`]); each carries the
//! instant it was sent, and the engine's side records how long the command it takes waited: a
//! heartbeat sent now waits about as long. And the heartbeats' 90th-percentile answer time is
//! estimated as they come: it also grows when the process is short of CPU (encoding large
//! answers, TLS), which the queue does not show. When either has been over the limit
//! (`--shed-lag-ms`, default [`DEFAULT_LAG_MS`]) for [`SUSTAIN`] (a moment's stall sheds nobody),
//! the [`Shed`] layer in front of the gRPC services answers the job service's reads and
//! submissions at once with `RESOURCE_EXHAUSTED`, naming the wait and the limit, without queueing
//! them; the worker service is never shed, nor the calls that take load off (cancelling a job,
//! draining or removing a worker, revoking) or that a client needs to find the leader.
//!
//! Measured on the fleet benchmark: see `docs/fleet-benchmark.md`.

use std::sync::atomic::Ordering::Relaxed;
use std::time::Duration;

use tonic::codegen::http;

use crate::engine::EngineHandle;
use crate::error::Error;

/// The default limit on how long a command may wait for the engine before clients are shed:
/// under half the workers' default heartbeat interval, so a heartbeat is never late by more.
pub const DEFAULT_LAG_MS: u64 = 200;
/// How long the coordinator must stay behind before clients are shed: a coordinator that was
/// stopped for a moment (`kill -STOP`, a VM migration) answers its last heartbeats late and its
/// first commands after it waited long, and should not refuse anyone for that.
pub const SUSTAIN: Duration = Duration::from_secs(1);
/// After how long a shed client is told to retry (`plexus_proto::rules::RETRY_PUSHBACK_METADATA`
/// on the refusal): the CLI and the Python client wait this long, then longer each time.
pub const RETRY_AFTER_MS: u64 = 250;

/// Whether a call may be shed: the job service's, but for those that take load off or find the
/// leader. The worker service's never are.
fn sheddable(path: &str) -> bool {
    const NEVER: [&str; 6] =
        ["CancelJob", "ListCoordinators", "DrainWorker", "RemoveWorker", "RevokeWorker", "RevokeToken"];
    path.strip_prefix("/plexus.v1.JobService/").is_some_and(|method| !NEVER.contains(&method))
}

/// The gate (`crate::gate`) in front of the gRPC services (see the module documentation).
/// `limit` zero: nothing is shed.
#[derive(Clone)]
pub struct Shed {
    engine: EngineHandle,
    limit: Duration,
    sustain: Duration,
}

impl Shed {
    pub fn new(engine: EngineHandle, limit: Duration) -> Shed {
        Shed { engine, limit, sustain: SUSTAIN }
    }

    /// Sheds after being behind for `sustain` instead of [`SUSTAIN`].
    pub fn with_sustain(mut self, sustain: Duration) -> Shed {
        self.sustain = sustain;
        self
    }

    /// The refusal for a call to `path` now, if it is to be shed.
    fn refusal(&self, path: &str) -> Option<tonic::Status> {
        if self.limit.is_zero() || !sheddable(path) {
            return None;
        }
        let load = self.engine.load();
        let (lag, beat) = (load.lag(), load.beat());
        let behind = if lag >= beat {
            format!("its commands wait {} ms for the engine", lag.as_millis())
        } else {
            format!("its workers' heartbeats take {} ms to answer", beat.as_millis())
        };
        if !load.behind_for(lag.max(beat) > self.limit, self.sustain) {
            return None;
        }
        load.shed.fetch_add(1, Relaxed);
        Some(crate::status::status(Error::Overloaded(
            format!(
                "the coordinator is overloaded: {behind}, over --shed-lag-ms {}; this request was refused so that \
                 workers' heartbeats keep up; retry in a moment",
                self.limit.as_millis()
            ),
            RETRY_AFTER_MS,
        )))
    }
}

impl crate::gate::Gate for Shed {
    fn admit<B>(&self, req: &mut http::Request<B>) -> Result<(), tonic::Status> {
        self.refusal(req.uri().path()).map_or(Ok(()), Err)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::Cmd;
    use crate::gate::{GateLayer, Gated};
    use crate::queue::channel;

    #[test]
    fn the_engine_side_measures_how_long_a_command_waited() {
        let (tx, rx) = channel();
        tx.send(Cmd::Stop).unwrap();
        std::thread::sleep(Duration::from_millis(30));
        assert!(matches!(rx.try_recv(), Ok(Cmd::Stop)));
        let lag = tx.load().lag();
        assert!(lag >= Duration::from_millis(30) && lag < Duration::from_secs(5), "{lag:?}");
        // Idle: nothing waits, no lag.
        assert!(rx.recv_timeout(Duration::from_millis(1)).is_err());
        assert_eq!(tx.load().lag(), Duration::ZERO);
    }

    /// Slow heartbeats alone put the coordinator behind: 300 ms answers raise the estimate by
    /// 0.9 ms each, past a 100 ms limit after 112 of them; fast ones bring it back down.
    #[tokio::test]
    async fn slow_heartbeats_shed_clients_too() {
        let (tx, _rx) = channel();
        let engine = EngineHandle::from_sender(tx.clone());
        let shed = Shed::new(engine, Duration::from_millis(100)).with_sustain(Duration::ZERO);
        let path = "/plexus.v1.JobService/GetJob";
        for _ in 0..111 {
            tx.load().heartbeat(Duration::from_millis(300));
        }
        assert_eq!(tx.load().beat(), Duration::from_micros(99_900));
        assert!(shed.refusal(path).is_none());
        tx.load().heartbeat(Duration::from_millis(300));
        let refused = shed.refusal(path).expect("shed");
        assert!(refused.message().contains("heartbeats take 100 ms"), "{}", refused.message());
        assert_eq!(refused.code(), tonic::Code::ResourceExhausted);
        let pushback = refused.metadata().get(plexus_proto::rules::RETRY_PUSHBACK_METADATA);
        assert_eq!(pushback.and_then(|v| v.to_str().ok()), Some("250"), "a shed refusal says when to retry");
        // One in ten slower than the estimate: it stays (±1 ms) where it is.
        for k in 0..1000 {
            tx.load().heartbeat(Duration::from_millis(if k % 10 == 0 { 300 } else { 1 }));
        }
        assert!(tx.load().beat().abs_diff(Duration::from_micros(100_800)) <= Duration::from_millis(1));
        for _ in 0..100 {
            tx.load().heartbeat(Duration::from_millis(1));
        }
        assert!(shed.refusal(path).is_none(), "fast again: {:?}", tx.load().beat());
    }

    /// Behind for a moment is not enough: only once it lasts `sustain` (here 50 ms) are clients
    /// shed, and catching up resets the clock. A stalled heartbeat moves the estimate by 0.9 ms.
    #[test]
    fn a_moment_behind_sheds_nobody() {
        let (tx, _rx) = channel();
        let shed = Shed::new(EngineHandle::from_sender(tx.clone()), Duration::from_millis(100))
            .with_sustain(Duration::from_millis(50));
        let path = "/plexus.v1.JobService/ListJobs";
        tx.load().heartbeat(Duration::from_secs(7));
        assert_eq!(tx.load().beat(), Duration::from_micros(900), "a 7 s stall moves it by 0.9 ms");
        for _ in 0..120 {
            tx.load().heartbeat(Duration::from_secs(1));
        }
        assert!(shed.refusal(path).is_none(), "behind since now");
        std::thread::sleep(Duration::from_millis(60));
        assert!(shed.refusal(path).is_some(), "behind for 60 ms");
        for _ in 0..100 {
            tx.load().heartbeat(Duration::ZERO);
        }
        assert!(shed.refusal(path).is_none(), "caught up");
        for _ in 0..100 {
            tx.load().heartbeat(Duration::from_secs(1));
        }
        assert!(shed.refusal(path).is_none(), "behind again, since now");
    }

    #[test]
    fn the_job_services_reads_and_submissions_are_sheddable_the_workers_calls_never() {
        for m in ["SubmitJob", "GetJob", "ListJobs", "WatchJob", "ListWorkers", "ExplainPlacement", "GetLogs"] {
            assert!(sheddable(&format!("/plexus.v1.JobService/{m}")), "{m}");
        }
        for m in ["CancelJob", "ListCoordinators", "DrainWorker", "RevokeWorker"] {
            assert!(!sheddable(&format!("/plexus.v1.JobService/{m}")), "{m}");
        }
        for m in ["Register", "Heartbeat", "ReportTasks", "Assignments"] {
            assert!(!sheddable(&format!("/plexus.v1.WorkerService/{m}")), "{m}");
        }
    }

    /// The layer over a real engine whose queue is held up: a command sent 50 ms before the
    /// engine takes it puts the lag over a 10 ms limit, and then a client's listing is refused
    /// with RESOURCE_EXHAUSTED naming both, a heartbeat is not, and with no limit nothing is.
    #[tokio::test]
    async fn over_the_limit_clients_are_refused_and_workers_are_not() {
        let (tx, rx) = channel();
        let engine = EngineHandle::from_sender(tx.clone());
        tx.send(Cmd::Stop).unwrap();
        std::thread::sleep(Duration::from_millis(50));
        rx.try_recv().unwrap();
        let inner = tower::service_fn(|_req: http::Request<()>| async {
            Ok::<_, std::convert::Infallible>(http::Response::new(()))
        });
        let gate = Shed::new(engine.clone(), Duration::from_millis(10)).with_sustain(Duration::ZERO);
        let mut shed = tower::Layer::layer(&GateLayer(gate), inner);
        let call = |shed: &mut Gated<Shed, _>, path: &str| {
            let req = http::Request::builder().uri(path).body(()).unwrap();
            tower::Service::call(shed, req)
        };
        let refused = call(&mut shed, "/plexus.v1.JobService/ListWorkers").await.unwrap();
        let status = tonic::Status::from_header_map(refused.headers()).expect("a gRPC status");
        assert_eq!(status.code(), tonic::Code::ResourceExhausted);
        assert!(status.message().contains("over --shed-lag-ms 10"), "{}", status.message());
        assert_eq!(tx.load().shed(), 1);
        let beat = call(&mut shed, "/plexus.v1.WorkerService/Heartbeat").await.unwrap();
        assert!(tonic::Status::from_header_map(beat.headers()).is_none(), "a heartbeat goes through");
        let mut off = tower::Layer::layer(&GateLayer(Shed::new(engine, Duration::ZERO)), inner);
        let listed = call(&mut off, "/plexus.v1.JobService/ListWorkers").await.unwrap();
        assert!(tonic::Status::from_header_map(listed.headers()).is_none(), "no limit, no shedding");
    }
}
