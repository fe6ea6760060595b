//! The worker against a fake coordinator (a real WorkerService on 127.0.0.1): registration,
//! assignments, heartbeats, batched reports, `reregister`, and surviving a coordinator restart.
//!
//! Each fake coordinator runs on its own tokio runtime, so "the coordinator crashed" can be
//! simulated faithfully by shutting that runtime down: every socket it held closes at once.

use std::collections::HashSet;
use std::net::SocketAddr;
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use plexus_proto::{AttemptRef, JobId, pb};
use plexus_worker::{Config, Worker};
use tokio::sync::mpsc;
use tokio_stream::StreamExt;
use tokio_stream::wrappers::{ReceiverStream, TcpListenerStream};
use tonic::{Request, Response, Status};

#[derive(Default)]
struct Recorded {
    registers: Vec<pb::RegisterRequest>,
    heartbeats: Vec<pb::HeartbeatRequest>,
    /// Every report the worker tried to send, acknowledged or not.
    offered: Vec<pb::TaskReport>,
    /// Reports this coordinator acknowledged.
    accepted: Vec<pb::TaskReport>,
    /// Where to push assignment batches: the latest open stream.
    stream: Option<mpsc::Sender<Result<pb::AssignmentBatch, Status>>>,
}

struct Shared {
    rec: Mutex<Recorded>,
    accept_reports: bool,
    reregister_once: AtomicBool,
}

#[derive(Clone)]
struct FakeService(Arc<Shared>);

#[tonic::async_trait]
impl pb::worker_service_server::WorkerService for FakeService {
    async fn register(&self, r: Request<pb::RegisterRequest>) -> Result<Response<pb::RegisterResponse>, Status> {
        self.0.rec.lock().unwrap().registers.push(r.into_inner());
        Ok(Response::new(pb::RegisterResponse {
            heartbeat_interval_ms: 50,
            heartbeat_timeout_ms: 5000,
            lease_ms: 0,
            rail_key: vec![],
            // Never claims to have kept the session: a lapsed lease kills what froze.
            resumed: false,
        }))
    }

    /// An insecure coordinator's answers: these tests drive the worker with `--insecure`.
    async fn join(&self, _: Request<pb::JoinRequest>) -> Result<Response<pb::JoinResponse>, Status> {
        Err(Status::failed_precondition("this fake coordinator is insecure"))
    }

    async fn resolve_peer(
        &self,
        _: Request<pb::ResolvePeerRequest>,
    ) -> Result<Response<pb::ResolvePeerResponse>, Status> {
        Err(Status::failed_precondition("this fake coordinator is insecure"))
    }

    async fn heartbeat(&self, r: Request<pb::HeartbeatRequest>) -> Result<Response<pb::HeartbeatResponse>, Status> {
        self.0.rec.lock().unwrap().heartbeats.push(r.into_inner());
        let reregister = self.0.reregister_once.swap(false, Ordering::SeqCst);
        Ok(Response::new(pb::HeartbeatResponse { reregister, ..Default::default() }))
    }

    type FetchWorkingDirStream =
        std::pin::Pin<Box<dyn tokio_stream::Stream<Item = Result<pb::WorkingDirChunk, Status>> + Send>>;

    async fn fetch_working_dir(
        &self,
        _: Request<pb::FetchWorkingDirRequest>,
    ) -> Result<Response<Self::FetchWorkingDirStream>, Status> {
        Err(Status::not_found("this fake coordinator keeps no working dirs"))
    }

    type AssignmentsStream =
        std::pin::Pin<Box<dyn tokio_stream::Stream<Item = Result<pb::AssignmentBatch, Status>> + Send>>;

    async fn assignments(
        &self,
        _: Request<pb::AssignmentsRequest>,
    ) -> Result<Response<Self::AssignmentsStream>, Status> {
        let (tx, rx) = mpsc::channel(16);
        self.0.rec.lock().unwrap().stream = Some(tx);
        Ok(Response::new(Box::pin(ReceiverStream::new(rx))))
    }

    async fn report_tasks(
        &self,
        r: Request<pb::ReportTasksRequest>,
    ) -> Result<Response<pb::ReportTasksResponse>, Status> {
        let reports = r.into_inner().reports;
        let mut rec = self.0.rec.lock().unwrap();
        rec.offered.extend(reports.iter().cloned());
        if !self.0.accept_reports {
            return Err(Status::unavailable("this coordinator cannot persist reports"));
        }
        rec.accepted.extend(reports);
        Ok(Response::new(pb::ReportTasksResponse { reregister: false }))
    }
}

/// A fake coordinator on its own runtime.
struct Fake {
    shared: Arc<Shared>,
    addr: SocketAddr,
    rt: Option<tokio::runtime::Runtime>,
}

impl Fake {
    fn start(addr: SocketAddr, accept_reports: bool) -> Fake {
        let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(1).enable_all().build().unwrap();
        let shared =
            Arc::new(Shared { rec: Mutex::default(), accept_reports, reregister_once: AtomicBool::new(false) });
        let listener = {
            let _guard = rt.enter();
            // SO_REUSEADDR lets a restarted coordinator take the same port at once.
            let socket = tokio::net::TcpSocket::new_v4().unwrap();
            socket.set_reuseaddr(true).unwrap();
            socket.bind(addr).unwrap();
            socket.listen(128).unwrap()
        };
        let addr = listener.local_addr().unwrap();
        let service = pb::worker_service_server::WorkerServiceServer::new(FakeService(shared.clone()));
        rt.spawn(
            tonic::transport::Server::builder()
                .add_service(service)
                .serve_with_incoming(TcpListenerStream::new(listener)),
        );
        Fake { shared, addr, rt: Some(rt) }
    }

    fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    fn with<T>(&self, f: impl FnOnce(&mut Recorded) -> T) -> T {
        f(&mut self.shared.rec.lock().unwrap())
    }

    async fn send(&self, batch: pb::AssignmentBatch) {
        let tx = wait_until("an assignment stream", || self.with(|r| r.stream.clone())).await;
        tx.send(Ok(batch)).await.unwrap();
    }

    /// Simulates a crash: every task and socket of this coordinator goes away.
    fn kill(mut self) {
        if let Some(rt) = self.rt.take() {
            // A runtime cannot be shut down with a wait from inside another runtime's thread.
            std::thread::spawn(move || rt.shutdown_timeout(Duration::from_secs(5))).join().unwrap();
        }
    }
}

impl Drop for Fake {
    fn drop(&mut self) {
        if let Some(rt) = self.rt.take() {
            rt.shutdown_background();
        }
    }
}

/// Polls `f` until it yields; the bound only keeps a broken test from hanging forever.
async fn wait_until<T>(what: &str, mut f: impl FnMut() -> Option<T>) -> T {
    for _ in 0..6000 {
        if let Some(t) = f() {
            return t;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    panic!("gave up waiting for {what}");
}

fn config(coordinator: String, dir: &Path) -> Config {
    // Searchable by others: a root worker's tasks run as uids of their own and reach their work
    // dirs through it.
    std::fs::set_permissions(dir, <std::fs::Permissions as std::os::unix::fs::PermissionsExt>::from_mode(0o711))
        .unwrap();
    let mut c = Config::new(coordinator, dir);
    c.cache_bytes = 1 << 30;
    // In-process: the test binary is no worker; attempts run under the real one's supervisor.
    c.supervisor = env!("CARGO_BIN_EXE_plexus-worker").into();
    c
}

fn attempt(job: JobId, task: &str, rank: u32) -> AttemptRef {
    AttemptRef { job, task: task.into(), rank, attempt: 1 }
}

fn noop(a: &AttemptRef) -> pb::Assignment {
    pb::Assignment { attempt: Some(a.into()), replicas: 1, kind: "noop".into(), ..Default::default() }
}

fn command(a: &AttemptRef, script: &str, outputs: &[&str]) -> pb::Assignment {
    pb::Assignment {
        attempt: Some(a.into()),
        replicas: 1,
        command: vec!["sh".into(), "-c".into(), script.into()],
        outputs: outputs.iter().map(|s| s.to_string()).collect(),
        ..Default::default()
    }
}

fn find(reports: &[pb::TaskReport], a: &AttemptRef, state: pb::SubtaskState) -> Option<pb::TaskReport> {
    let want = pb::AttemptRef::from(a);
    reports.iter().find(|r| r.attempt.as_ref() == Some(&want) && r.state == state as i32).cloned()
}

fn set(refs: &[pb::AttemptRef]) -> HashSet<AttemptRef> {
    refs.iter().map(|r| AttemptRef::try_from(r).unwrap()).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn register_assign_heartbeat_report() {
    let fake = Fake::start("127.0.0.1:0".parse().unwrap(), true);
    let dir = tempfile::tempdir().unwrap();
    let worker = Worker::start(config(fake.url(), dir.path())).await.unwrap();

    let reg = wait_until("Register", || fake.with(|r| r.registers.first().cloned())).await;
    assert_eq!(reg.worker_id, worker.worker_id().to_string());
    assert_eq!(reg.session, worker.session());
    assert_eq!(reg.peer_addr, worker.peer_addr());
    assert_eq!(reg.peer_addr, format!("http://{}", worker.local_addr()));
    let cap = reg.capacity.unwrap();
    assert!(cap.cpus >= 1 && cap.memory > 0);
    // One data-plane rail on loopback, advertised with the port it listens on.
    assert_eq!(cap.rails.len(), 1);
    let rail: std::net::SocketAddr = cap.rails[0].parse().expect("a rail is ip:port");
    assert!(rail.ip().is_loopback() && rail.port() != 0, "{rail}");
    assert_eq!(cap.cache_bytes, 1 << 30);
    assert!(reg.known.is_empty());

    let job = JobId::random();
    let (n, c) = (attempt(job, "n", 0), attempt(job, "gen", 3));
    fake.send(pb::AssignmentBatch {
        assign: vec![noop(&n), command(&c, "echo hi; printf 42 > \"$PLEXUS_OUT/x\"", &["x"])],
        cancel: vec![],
    })
    .await;
    let done =
        wait_until("the command's final report", || fake.with(|r| find(&r.accepted, &c, pb::SubtaskState::Succeeded)))
            .await;
    assert_eq!(done.stdout_tail, b"hi\n");
    let object = format!("{job}/gen/3/x");
    let digest = plexus_proto::Digest::of(b"42").to_vec();
    assert_eq!(done.outputs, vec![pb::ObjectInfo { object_id: object.clone(), size: 2, digest }]);
    fake.with(|r| {
        assert!(find(&r.accepted, &n, pb::SubtaskState::Succeeded).is_some());
        assert!(find(&r.accepted, &n, pb::SubtaskState::Running).is_none(), "noop reports no RUNNING");
        assert!(find(&r.accepted, &c, pb::SubtaskState::Running).is_some());
    });

    // Heartbeats carry the node state, including the new object.
    let hb = wait_until("a heartbeat listing the object", || {
        fake.with(|r| {
            r.heartbeats
                .iter()
                .find(|h| h.state.as_ref().is_some_and(|s| s.objects.iter().any(|o| o.object_id == object)))
                .cloned()
        })
    })
    .await;
    let state = hb.state.unwrap();
    assert_eq!(hb.session, worker.session());
    assert!((0.0..=1.0).contains(&state.cpu_utilisation));
    assert!(state.memory_free > 0);
    assert_eq!(state.cache_used, 2);

    // The logs and the object are served to peers.
    let mut peer = pb::peer_service_client::PeerServiceClient::connect(worker.peer_addr().to_string()).await.unwrap();
    let log =
        peer.read_log(pb::ReadLogRequest { attempt: Some((&c).into()), max_bytes: 0 }).await.unwrap().into_inner();
    assert_eq!(log.stdout, b"hi\n");
    let mut chunks = peer.fetch_object(pb::FetchObjectRequest { object_id: object }).await.unwrap().into_inner();
    let first = chunks.next().await.unwrap().unwrap();
    assert_eq!((first.total_size, first.data.as_slice()), (2, &b"42"[..]));

    // `reregister` in a heartbeat answer makes the worker register again, same session.
    fake.shared.reregister_once.store(true, Ordering::SeqCst);
    let again = wait_until("a second Register", || fake.with(|r| r.registers.get(1).cloned())).await;
    assert_eq!(again.session, worker.session());
    assert!(again.known.is_empty(), "everything was acknowledged");

    // A restart keeps the worker id and starts a new session.
    let (id, session) = (worker.worker_id(), worker.session().to_string());
    worker.shutdown().await.unwrap();
    let worker = Worker::start(config(fake.url(), dir.path())).await.unwrap();
    assert_eq!(worker.worker_id(), id);
    assert_ne!(worker.session(), session);
    worker.shutdown().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reports_and_known_attempts_survive_a_coordinator_restart() {
    // The first coordinator never acknowledges a report.
    let a = Fake::start("127.0.0.1:0".parse().unwrap(), false);
    let addr = a.addr;
    let dir = tempfile::tempdir().unwrap();
    let worker = Worker::start(config(a.url(), dir.path())).await.unwrap();

    let job = JobId::random();
    let (n, long) = (attempt(job, "quick", 0), attempt(job, "long", 0));
    a.send(pb::AssignmentBatch { assign: vec![noop(&n), command(&long, "exec sleep 100", &[])], cancel: vec![] }).await;
    wait_until("both reports offered to the first coordinator", || {
        a.with(|r| {
            (find(&r.offered, &n, pb::SubtaskState::Succeeded).is_some()
                && find(&r.offered, &long, pb::SubtaskState::Running).is_some())
            .then_some(())
        })
    })
    .await;
    a.kill();

    // The restarted coordinator, on the same address, acknowledges reports.
    let b = Fake::start(addr, true);
    let reg = wait_until("Register with the restarted coordinator", || b.with(|r| r.registers.first().cloned())).await;
    assert_eq!(
        set(&reg.known),
        HashSet::from([n.clone(), long.clone()]),
        "running and unacknowledged attempts are known"
    );
    assert_eq!(set(&reg.state.unwrap().running), HashSet::from([long.clone()]));
    wait_until("the unacknowledged reports, sent again", || {
        b.with(|r| {
            (find(&r.accepted, &n, pb::SubtaskState::Succeeded).is_some()
                && find(&r.accepted, &long, pb::SubtaskState::Running).is_some())
            .then_some(())
        })
    })
    .await;

    // Re-sending the assignment of a known attempt does not run it twice.
    b.send(pb::AssignmentBatch { assign: vec![command(&long, "exec sleep 100", &[]), noop(&n)], cancel: vec![] }).await;
    b.send(pb::AssignmentBatch { assign: vec![], cancel: vec![(&long).into()] }).await;
    let cancelled =
        wait_until("the CANCELLED report", || b.with(|r| find(&r.accepted, &long, pb::SubtaskState::Cancelled))).await;
    assert_eq!(cancelled.error, "cancelled by the coordinator");
    assert_eq!(cancelled.exit_code, 128 + 9);
    b.with(|r| {
        let runs = r
            .accepted
            .iter()
            .filter(|x| x.attempt.as_ref() == Some(&(&long).into()) && x.state == pb::SubtaskState::Running as i32);
        assert_eq!(runs.count(), 1, "the re-sent assignment was ignored");
        let noops = r.accepted.iter().filter(|x| x.attempt.as_ref() == Some(&(&n).into()));
        assert_eq!(noops.count(), 1, "the re-sent noop was ignored");
    });

    // Once everything is acknowledged, a new registration knows nothing.
    b.shared.reregister_once.store(true, Ordering::SeqCst);
    let again = wait_until("a second Register", || b.with(|r| r.registers.get(1).cloned())).await;
    assert!(again.known.is_empty(), "{:?}", again.known);
    worker.shutdown().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shutdown_kills_running_process_groups() {
    let fake = Fake::start("127.0.0.1:0".parse().unwrap(), true);
    let dir = tempfile::tempdir().unwrap();
    let worker = Worker::start(config(fake.url(), dir.path())).await.unwrap();
    let a = attempt(JobId::random(), "forever", 0);
    // Where the task may write: a root worker runs it as a uid of its own.
    let shared = dir.path().join("shared");
    std::fs::create_dir(&shared).unwrap();
    std::fs::set_permissions(&shared, <std::fs::Permissions as std::os::unix::fs::PermissionsExt>::from_mode(0o1777))
        .unwrap();
    let pid_file = shared.join("bg.pid");
    let script = format!("sleep 100 & echo $! > '{}'; wait", pid_file.display());
    fake.send(pb::AssignmentBatch { assign: vec![command(&a, &script, &[])], cancel: vec![] }).await;
    let bg: i32 = wait_until("the background pid", || {
        std::fs::read_to_string(&pid_file).ok().and_then(|s| s.trim().parse().ok())
    })
    .await;
    worker.shutdown().await.unwrap();
    wait_until("the background process to be gone", || process_gone(bg).then_some(())).await;
}

/// The coordinator sends messages up to `plexus_proto::rules::MAX_MESSAGE` (64 MiB); the worker
/// used to decode at tonic's default 4 MiB, so a larger assignment batch broke the stream again
/// and again and its work never ran.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn assignment_batches_past_4_mib_are_received() {
    let fake = Fake::start("127.0.0.1:0".parse().unwrap(), true);
    let dir = tempfile::tempdir().unwrap();
    let worker = Worker::start(config(fake.url(), dir.path())).await.unwrap();
    let a = attempt(JobId::random(), "big", 0);
    let mut big = noop(&a);
    big.env = std::collections::HashMap::from([("PAD".to_string(), "x".repeat(6 << 20))]);
    fake.send(pb::AssignmentBatch { assign: vec![big], cancel: vec![] }).await;
    wait_until("the report of the 6 MiB assignment", || {
        fake.with(|r| find(&r.accepted, &a, pb::SubtaskState::Succeeded))
    })
    .await;
    worker.shutdown().await.unwrap();
}

/// Whether a process is gone (a zombie waiting for a non-reaping init counts as gone).
fn process_gone(pid: i32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Err(_) => true,
        Ok(stat) => stat.rsplit_once(')').is_some_and(|(_, rest)| rest.trim_start().starts_with('Z')),
    }
}

/// A worker whose coordinator never comes back (issue 29): at the lease's end its attempt is
/// frozen, not killed (the coordinator might still confirm it), but once the coordinator's own
/// timeout has certainly passed — it gave the worker up and placed the attempt elsewhere — the
/// attempt's supervisor kills it, rather than keeping it frozen for ever.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_attempt_frozen_past_the_coordinators_timeout_is_killed() {
    let fake = Fake::start("127.0.0.1:0".parse().unwrap(), true);
    let dir = tempfile::tempdir().unwrap();
    let worker = Worker::start(config(fake.url(), dir.path())).await.unwrap();
    let a = attempt(JobId::random(), "forever", 0);
    let shared = dir.path().join("shared");
    std::fs::create_dir(&shared).unwrap();
    std::fs::set_permissions(&shared, <std::fs::Permissions as std::os::unix::fs::PermissionsExt>::from_mode(0o1777))
        .unwrap();
    let pid_file = shared.join("bg.pid");
    let script = format!("sleep 1000 & echo $! > '{}'; wait", pid_file.display());
    fake.send(pb::AssignmentBatch { assign: vec![command(&a, &script, &[])], cancel: vec![] }).await;
    let bg: i32 = wait_until("the background pid", || {
        std::fs::read_to_string(&pid_file).ok().and_then(|s| s.trim().parse().ok())
    })
    .await;
    // The fake states a 5 s timeout and 50 ms heartbeats: a lease of 3.75 s, and a frozen
    // attempt is killed 1.25 s + 30 s after the lease's end (`plexus_worker::lease::frozen_limit`).
    let limit = plexus_worker::lease::frozen_limit(Duration::from_secs(5), Duration::from_millis(3_750));
    assert_eq!(limit, Duration::from_millis(31_250));
    fake.kill();
    let gone_from = std::time::Instant::now();
    tokio::time::sleep(Duration::from_secs(6)).await;
    assert!(!process_gone(bg), "past the lease's end the attempt is frozen, not killed yet");
    wait_until("the frozen attempt to be killed", || process_gone(bg).then_some(())).await;
    let after = gone_from.elapsed();
    assert!(after >= limit, "killed {after:?} after the coordinator went, before the limit {limit:?}");
    worker.shutdown().await.unwrap();
}
