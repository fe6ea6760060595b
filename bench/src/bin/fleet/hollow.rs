//! Hollow workers: real credentials, the real protocol over a connection each, no processes.

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::Relaxed};
use std::time::{Duration, Instant};

use plexus_proto::WorkerId;
use plexus_proto::pb;
use plexus_proto::pb::worker_service_client::WorkerServiceClient;
use plexus_worker::credentials::{self, Credentials, TrustConfig};
use plexus_worker::layout::Layout;
use tokio::sync::{Mutex, Semaphore};
use tonic::transport::{Channel, Endpoint};

/// One hollow worker: its identity, its connection, what it runs now.
pub(crate) struct Hollow {
    pub(crate) id: WorkerId,
    session: String,
    client: WorkerServiceClient<Channel>,
    running: Mutex<Vec<pb::AttemptRef>>,
    /// The heartbeat interval the coordinator gave (ms): at registration, then as it stretches
    /// or shortens it with the cluster's size (`HeartbeatResponse`).
    every: AtomicU64,
}

impl Hollow {
    /// The heartbeat interval the coordinator told this worker last.
    pub(crate) fn interval(&self) -> Duration {
        Duration::from_millis(self.every.load(Relaxed))
    }
}

/// What the fleet's workers were asked to run: each subtask replica's assignments, and whether
/// its success was acknowledged (the coordinator answered the report): an assignment of a
/// subtask whose success was acknowledged ran it twice.
#[derive(Default)]
pub(crate) struct Ledger {
    subtasks: std::sync::Mutex<HashMap<(String, String, u32), bool>>,
    pub(crate) twice: AtomicU64,
    /// `Assignments` streams the coordinator opened (the last step of a worker's start).
    pub(crate) streams: AtomicU64,
}

impl Ledger {
    fn assigned(&self, a: &pb::AttemptRef) {
        let key = (a.job_id.clone(), a.task.clone(), a.rank);
        if self.subtasks.lock().expect("ledger").get(&key) == Some(&true) {
            self.twice.fetch_add(1, Relaxed);
        }
    }

    fn acknowledged(&self, done: &[pb::AttemptRef]) {
        let mut m = self.subtasks.lock().expect("ledger");
        for a in done {
            m.insert((a.job_id.clone(), a.task.clone(), a.rank), true);
        }
    }
}

/// Every worker of `creds` connects and registers, all at once (as after a cold start).
pub(crate) fn register_all(
    rt: &tokio::runtime::Runtime,
    urls: &[String],
    creds: &[(WorkerId, Credentials)],
    cpus: u32,
) -> Result<Vec<Arc<Hollow>>, Box<dyn std::error::Error>> {
    rt.block_on(async {
        let mut set = tokio::task::JoinSet::new();
        for (id, cred) in creds.iter().cloned() {
            let (urls, cpus) = (urls.to_vec(), cpus);
            set.spawn(async move { register(&urls, id, &cred, cpus).await });
        }
        let mut out = Vec::with_capacity(creds.len());
        while let Some(r) = set.join_next().await {
            out.push(r.expect("register task")?);
        }
        Ok::<_, Box<dyn std::error::Error + Send + Sync>>(out)
    })
    .map_err(|e| e.to_string().into())
}

/// Every worker's certificate (`Join`, as a new worker does), `concurrency` at a time.
pub(crate) async fn join_all(
    trust: &TrustConfig,
    url: &str,
    dirs: &std::path::Path,
    n: usize,
    concurrency: usize,
) -> Result<Vec<(WorkerId, Credentials)>, plexus_worker::Error> {
    let gate = Arc::new(Semaphore::new(concurrency));
    let mut set = tokio::task::JoinSet::new();
    for i in 0..n {
        let (gate, trust, url, dir) = (gate.clone(), trust.clone(), url.to_string(), dirs.join(format!("w{i}")));
        set.spawn(async move {
            let _permit = gate.acquire_owned().await.expect("open semaphore");
            let id = WorkerId::random();
            let c = credentials::obtain(&trust, &Layout::new(dir), id, &url).await?;
            Ok::<_, plexus_worker::Error>((id, c.expect("a secure cluster gives credentials")))
        });
    }
    let mut out = Vec::with_capacity(n);
    while let Some(r) = set.join_next().await {
        out.push(r.expect("join task")?);
    }
    Ok(out)
}

/// Connects as worker `id` with its certificate and registers a node of `cpus` cores with the
/// first of `urls` that takes it (the leader; a standby refuses), as a worker given every
/// coordinator's URL does.
/// The label every hollow worker carries (the real workers beside them do not).
pub(crate) const HOLLOW_LABEL: &str = "hollow";

pub(crate) async fn register(
    urls: &[String],
    id: WorkerId,
    cred: &Credentials,
    cpus: u32,
) -> Result<Arc<Hollow>, Box<dyn std::error::Error + Send + Sync>> {
    let mut last = None;
    for url in urls {
        match register_at(url, id, cred, cpus).await {
            Ok(h) => return Ok(h),
            Err(e) => last = Some(e),
        }
    }
    Err(last.unwrap_or_else(|| "no coordinator URL".into()))
}

async fn register_at(
    url: &str,
    id: WorkerId,
    cred: &Credentials,
    cpus: u32,
) -> Result<Arc<Hollow>, Box<dyn std::error::Error + Send + Sync>> {
    let channel = Endpoint::from_shared(url.to_string())?
        .connect_timeout(Duration::from_secs(2))
        .tls_config(cred.coordinator_tls())?
        .connect()
        .await?;
    let mut client = WorkerServiceClient::new(channel);
    let session = WorkerId::random().to_string();
    let r = client
        .register(pb::RegisterRequest {
            worker_id: id.to_string(),
            session: session.clone(),
            peer_addr: "http://127.0.0.1:9".into(),
            capacity: Some(pb::NodeCapacity {
                cpus,
                memory: 8 << 30,
                cache_bytes: 1 << 30,
                hostname: format!("hollow-{id}"),
                isolation: "none".into(),
                // What the no-op job asks for, and the real workers' job refuses.
                labels: [(HOLLOW_LABEL.to_string(), "true".to_string())].into(),
                ..Default::default()
            }),
            state: Some(pb::NodeState { memory_free: 8 << 30, ..Default::default() }),
            known: vec![],
        })
        .await?
        .into_inner();
    let every = AtomicU64::new(r.heartbeat_interval_ms.max(1));
    Ok(Arc::new(Hollow { id, session, client, running: Mutex::new(Vec::new()), every }))
}

/// Heartbeats at the interval the coordinator gives until `stop`, timing each while `timing`.
/// A new interval in an answer takes effect from the next heartbeat on, as on a real worker.
pub(crate) async fn heartbeats(
    h: Arc<Hollow>,
    stop: Arc<AtomicBool>,
    rtts: Arc<std::sync::Mutex<Vec<f64>>>,
    timing: Arc<AtomicBool>,
) {
    // Spread over the interval, as workers that started at different times are.
    let mut every = h.interval();
    tokio::time::sleep(every * u32::from(h.id.as_bytes()[15]) / 256).await;
    let mut tick = tokio::time::interval(every);
    while !stop.load(Relaxed) {
        tick.tick().await;
        let running = h.running.lock().await.clone();
        let mut client = h.client.clone();
        let t = Instant::now();
        let r = client
            .heartbeat(pb::HeartbeatRequest {
                worker_id: h.id.to_string(),
                session: h.session.clone(),
                state: Some(pb::NodeState { memory_free: 8 << 30, running, ..Default::default() }),
            })
            .await;
        if r.is_ok() && timing.load(Relaxed) {
            rtts.lock().expect("rtts").push(t.elapsed().as_secs_f64() * 1e3);
        }
        let told = r.map_or(0, |r| r.into_inner().heartbeat_interval_ms);
        if told != 0 && Duration::from_millis(told) != every {
            every = Duration::from_millis(told);
            h.every.store(told, Relaxed);
            tick = tokio::time::interval_at(tokio::time::Instant::now() + every, every);
        }
    }
}

/// Answers every assignment until `stop`, each into `ledger`: with RUNNING and SUCCEEDED in one
/// report when `run` is zero, else RUNNING at once and SUCCEEDED `run` later (listed as running
/// in the heartbeats meanwhile), as a task that ran that long.
pub(crate) async fn assignments(
    h: Arc<Hollow>,
    stop: Arc<AtomicBool>,
    placed: Arc<AtomicU64>,
    ledger: Arc<Ledger>,
    run: Duration,
) {
    let mut client = h.client.clone();
    let req = pb::AssignmentsRequest { worker_id: h.id.to_string(), session: h.session.clone() };
    let Ok(stream) = client.assignments(req).await else { return };
    ledger.streams.fetch_add(1, Relaxed);
    let mut stream = stream.into_inner();
    while !stop.load(Relaxed) {
        let Ok(Some(batch)) = stream.message().await else { return };
        if batch.assign.is_empty() {
            continue;
        }
        let attempts: Vec<pb::AttemptRef> = batch.assign.iter().filter_map(|a| a.attempt.clone()).collect();
        for a in &attempts {
            ledger.assigned(a);
        }
        placed.fetch_add(batch.assign.len() as u64, Relaxed);
        let now = plexus_proto::now_ms();
        if run.is_zero() {
            let states = [pb::SubtaskState::Running, pb::SubtaskState::Succeeded];
            if report(&mut client, &h, &attempts, &states, now, now).await.is_err() {
                return;
            }
            ledger.acknowledged(&attempts);
            continue;
        }
        h.running.lock().await.extend(attempts.iter().cloned());
        if report(&mut client, &h, &attempts, &[pb::SubtaskState::Running], now, 0).await.is_err() {
            return;
        }
        let (h, mut client, ledger) = (h.clone(), client.clone(), ledger.clone());
        tokio::spawn(async move {
            tokio::time::sleep(run).await;
            h.running.lock().await.retain(|r| !attempts.contains(r));
            let end = plexus_proto::now_ms();
            if report(&mut client, &h, &attempts, &[pb::SubtaskState::Succeeded], now, end).await.is_ok() {
                ledger.acknowledged(&attempts);
            }
        });
    }
}

/// One `ReportTasks` of `states` for each of `attempts`, started at `started` (and finished at
/// `finished` where the state is SUCCEEDED).
async fn report(
    client: &mut WorkerServiceClient<Channel>,
    h: &Hollow,
    attempts: &[pb::AttemptRef],
    states: &[pb::SubtaskState],
    started: u64,
    finished: u64,
) -> Result<(), tonic::Status> {
    let reports = attempts
        .iter()
        .flat_map(|a| {
            states.iter().map(move |&state| pb::TaskReport {
                attempt: Some(a.clone()),
                state: state as i32,
                started_at: started,
                finished_at: if state == pb::SubtaskState::Succeeded { finished } else { 0 },
                ..Default::default()
            })
        })
        .collect();
    let req = pb::ReportTasksRequest { worker_id: h.id.to_string(), session: h.session.clone(), reports };
    client.report_tasks(req).await.map(|_| ())
}
