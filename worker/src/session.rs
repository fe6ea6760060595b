//! The conversation with the coordinator (WorkerService), kept alive forever.
//!
//! One *connection* is: connect, `Register` (with every known attempt), open the `Assignments`
//! stream, then run three loops side by side until one of them fails:
//!
//! - assignments: each `AssignmentBatch` starts its `assign` entries, then applies its `cancel`
//!   entries (in that order, so a batch that assigns and cancels the same attempt cancels it);
//! - heartbeats: every `heartbeat_interval_ms`, the node state; `reregister` ends the connection;
//! - reports: every pending report in one `ReportTasks` call, again and again (see
//!   [`crate::attempts`] for why this batches and how unacknowledged reports survive).
//!
//! The loops are futures of one `select!`, not spawned tasks, so when one fails the others are
//! dropped with it; a report batch in flight then goes back to its queue. Any failure (connect,
//! RPC error or timeout, stream end, `reregister`) starts a new connection after a backoff of
//! 200 ms doubling to 2 s, each delay drawn from the upper half of its step, reset by every
//! successful registration ([`Backoff`] is that schedule;
//! `reconnect` the loop, which takes the connection as a parameter so it runs in tests without a
//! coordinator, on paused time).

use std::hash::{Hash, Hasher};
use std::sync::Arc;
use std::time::Duration;

use plexus_proto::rules::MAX_MESSAGE;
use plexus_proto::{WorkerId, pb};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use tokio_util::sync::CancellationToken;
use tonic::transport::{Channel, Endpoint};
use tracing::{debug, info, warn};

use crate::attempts::Attempts;
use crate::cache::Cache;
use crate::error::{Error, Result};
use crate::lease::{self, Lease, boot_ms};
use crate::node::{self, CpuSampler, GpuSampler};
use crate::runner::Runner;

/// First reconnect delay: short, so a restarted coordinator sees its workers again quickly.
const INITIAL_BACKOFF: Duration = Duration::from_millis(200);
/// Longest reconnect delay: a coordinator that is down for long is retried every 1–2 s, which
/// costs nothing and bounds how long a recovered coordinator waits for its workers.
const MAX_BACKOFF: Duration = Duration::from_secs(2);
/// The longest pause before following a standby to the new leader (see [`Backoff`]).
const FOLLOW_SPREAD: Duration = Duration::from_millis(250);
/// How long the TCP connect may take before it counts as a failure.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);
/// How long the whole connect (TCP, TLS handshake, HTTP/2 set-up) may take. Longer than the
/// CLI's 5 s: a worker on a starved machine must not give up on a slow but live coordinator
/// (each retry costs a back-off, and a worker that reconnects late after a failover is declared
/// lost and its attempts run twice); it is there only so a coordinator that hangs for good is
/// passed over.
const SESSION_CONNECT_LIMIT: Duration = Duration::from_secs(15);
/// How long `Register` and opening the assignment stream may take: they are cheap for the
/// coordinator, so a slower answer means it is in trouble and reconnecting is right.
const SETUP_TIMEOUT: Duration = Duration::from_secs(10);
/// How long one `ReportTasks` call may take. Generous because the coordinator persists the whole
/// batch before answering; on expiry the batch is sent again on the next connection, so the
/// coordinator must treat a repeated report as a no-op.
const REPORT_TIMEOUT: Duration = Duration::from_secs(30);
/// Heartbeat RPC timeout when the coordinator does not state `heartbeat_timeout_ms`.
const DEFAULT_HEARTBEAT_TIMEOUT: Duration = Duration::from_secs(10);
/// Heartbeat interval when the coordinator sends 0.
const DEFAULT_HEARTBEAT_INTERVAL: Duration = Duration::from_secs(1);
/// Bounds on the heartbeat interval a coordinator may ask for: below 10 ms heartbeats would be a
/// load of their own, above a minute the node state would be too stale to place work by.
const MIN_HEARTBEAT_INTERVAL: Duration = Duration::from_millis(10);
const MAX_HEARTBEAT_INTERVAL: Duration = Duration::from_secs(60);
/// HTTP/2 keep-alive pings detect a coordinator that vanished without closing the connection
/// (host down, network cut) while the assignment stream is idle.
const KEEPALIVE_INTERVAL: Duration = Duration::from_secs(10);
const KEEPALIVE_TIMEOUT: Duration = Duration::from_secs(10);

/// The coordinators a worker may talk to (`--coordinator` is a comma-separated list: an HA
/// control plane, issue 19), and which one to try next: the leader a standby named, else the
/// next of the list after a failure.
#[derive(Debug)]
pub struct Coordinators {
    urls: Vec<String>,
    state: std::sync::Mutex<(usize, Option<String>)>,
}

/// The metadata key of a standby's refusal that names the leader (`plexus_coordinator::ha`).
pub const LEADER_METADATA: &str = "plexus-leader";

impl Coordinators {
    /// `list`: URLs separated by commas, already normalised.
    pub fn new(list: &str) -> Coordinators {
        let urls: Vec<String> = list.split(',').map(|u| u.trim().to_string()).filter(|u| !u.is_empty()).collect();
        Coordinators { urls, state: std::sync::Mutex::new((0, None)) }
    }

    /// The URL to connect to now.
    pub fn current(&self) -> String {
        let st = self.state.lock().unwrap_or_else(|p| p.into_inner());
        match &st.1 {
            Some(leader) => leader.clone(),
            None => self.urls.get(st.0).cloned().unwrap_or_default(),
        }
    }

    /// The whole list, as given.
    pub fn all(&self) -> String {
        self.urls.join(",")
    }

    /// A connection to `current()` failed: whether the error named a leader to follow (then
    /// that is tried next, at once); otherwise the next URL of the list is.
    pub fn failed(&self, error: &Error) -> bool {
        let leader = match error {
            Error::Rpc { status, .. } => leader_of(status),
            _ => None,
        };
        let mut st = self.state.lock().unwrap_or_else(|p| p.into_inner());
        match leader {
            Some(l) if st.1.as_deref() != Some(l.as_str()) => {
                st.1 = Some(l);
                true
            }
            _ => {
                st.1 = None;
                if !self.urls.is_empty() {
                    st.0 = (st.0 + 1) % self.urls.len();
                }
                false
            }
        }
    }
}

/// The leader a standby's refusal names, if it is one.
pub fn leader_of(status: &tonic::Status) -> Option<String> {
    if status.code() != tonic::Code::Unavailable {
        return None;
    }
    status
        .metadata()
        .get(LEADER_METADATA)
        .and_then(|v| v.to_str().ok())
        .filter(|u| u.starts_with("http://") || u.starts_with("https://"))
        .map(str::to_string)
}

/// Everything the coordinator connection needs.
#[derive(Debug)]
pub struct Session {
    pub coordinators: Arc<Coordinators>,
    pub worker_id: WorkerId,
    pub session: String,
    pub peer_addr: String,
    pub capacity: pb::NodeCapacity,
    pub attempts: Arc<Attempts>,
    pub cache: Cache,
    pub runner: Runner,
    pub cpu: CpuSampler,
    /// The offered GPUs' latest load.
    pub gpus: Arc<GpuSampler>,
    /// How attempts are confined (`Mode::as_str`), repeated in every node state.
    pub isolation: &'static str,
    /// The data plane, for its per-rail counters in every heartbeat, and the rail key every
    /// registration brings.
    pub rails: Arc<plexus_dataplane::Endpoint>,
    /// Mutual TLS with this worker's certificate (`None`: an insecure cluster).
    pub tls: Option<tonic::transport::ClientTlsConfig>,
    /// Exists while this worker is registered (`Layout::registered_file`): what a container
    /// health check reads without credentials of its own.
    pub registered_file: std::path::PathBuf,
    /// The lease every acknowledged `Register` and heartbeat renews ([`crate::lease`]).
    pub lease: Arc<Lease>,
}

/// The reason a fenced attempt's report gives (`plexus status` and `plexus logs` show it): the
/// lease ran out and the coordinator then gave the worker up.
pub const FENCED: &str = "fenced: the worker's lease with the coordinator ran out (it was paused, or cut off \
                          from the coordinator) and the coordinator gave it up; killed so that it cannot run \
                          beside its replacement";

/// The reason an attempt running inside the worker (a collective) gives when the lease ran out:
/// it cannot be frozen, so it is cancelled at once.
pub const LAPSED: &str = "fenced: the worker's lease with the coordinator ran out (it was paused, or cut off \
                          from the coordinator); a collective cannot be frozen, so it was cancelled";

/// The reconnect delays: [`INITIAL_BACKOFF`] doubling to [`MAX_BACKOFF`], back to the start
/// after every successful registration, each drawn at random from the upper half of its step
/// ("equal jitter"): when a coordinator restarts, thousands of workers lose it at the same
/// instant, and without jitter they would all come back at 200 ms, 400 ms, … in lockstep, a
/// registration storm per step. Drawn from a generator seeded by the worker's id, so a worker's
/// schedule repeats run to run while different workers spread. Pure: the caller sleeps.
#[derive(Debug, Clone)]
pub struct Backoff {
    next: Duration,
    rng: StdRng,
}

impl Backoff {
    /// The schedule of the worker whose id hashes to `seed`.
    pub fn new(seed: u64) -> Backoff {
        Backoff { next: INITIAL_BACKOFF, rng: StdRng::seed_from_u64(seed) }
    }

    /// The delay before the next reconnect, in `[step / 2, step]`; the next step is twice as
    /// long, up to the cap.
    pub fn next_delay(&mut self) -> Duration {
        let step = self.next;
        self.next = (self.next * 2).min(MAX_BACKOFF);
        step / 2 + step.mul_f64(self.rng.random::<f64>() / 2.0)
    }

    /// The pause before following a standby's hint to the new leader, in `[0, FOLLOW_SPREAD]`:
    /// every worker follows at once after a takeover, so this spreads their registrations.
    pub fn follow_delay(&mut self) -> Duration {
        FOLLOW_SPREAD.mul_f64(self.rng.random::<f64>())
    }

    /// A registration succeeded: the next failure is retried quickly again.
    pub fn reset(&mut self) {
        self.next = INITIAL_BACKOFF;
    }
}

/// The seed of a worker's reconnect schedule: its id, hashed (SipHash with fixed keys, so the
/// same id gives the same schedule in every run).
fn backoff_seed(id: &WorkerId) -> u64 {
    #[allow(deprecated)] // SipHasher: fixed keys are the point (DefaultHasher's may change).
    let mut h = std::hash::SipHasher::new();
    id.as_bytes().hash(&mut h);
    h.finish()
}

/// How one connection to the coordinator ended.
#[derive(Debug)]
struct Ended {
    /// Whether `Register` had succeeded before it ended (which resets the back-off).
    registered: bool,
    error: Error,
}

/// Runs `connection` again and again until `shutdown` is cancelled, waiting the [`Backoff`]
/// (seeded with `seed`) between one connection's end and the next one's start.
async fn reconnect<F, Fut>(shutdown: &CancellationToken, coordinators: &Coordinators, seed: u64, mut connection: F)
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Ended>,
{
    let mut backoff = Backoff::new(seed);
    // Whether "not connected" was already logged at info since the last registration.
    let mut announced = false;
    loop {
        let coordinator = coordinators.current();
        let Ended { registered, error } = tokio::select! {
            () = shutdown.cancelled() => return,
            ended = connection() => ended,
        };
        if registered {
            backoff.reset();
        }
        // A standby named the leader: go there now.
        if coordinators.failed(&error) {
            let after = backoff.follow_delay();
            info!(from = %coordinator, to = %coordinators.current(), ?after, "following the leader");
            tokio::select! {
                () = shutdown.cancelled() => return,
                () = tokio::time::sleep(after) => {}
            }
            continue;
        }
        let retry_in = backoff.next_delay();
        // Log connection changes at info, and repeated failures to reconnect only at debug,
        // so a coordinator that is down for an hour does not flood the log.
        if registered || !announced {
            info!(coordinator = %coordinator, %error, ?retry_in, "not connected to the coordinator");
            announced = true;
        } else {
            debug!(coordinator = %coordinator, %error, ?retry_in, "still not connected to the coordinator");
        }
        tokio::select! {
            () = shutdown.cancelled() => return,
            () = tokio::time::sleep(retry_in) => {}
        }
    }
}

impl Session {
    /// Talks to the coordinator until `shutdown` is cancelled, reconnecting forever, and fences
    /// the running attempts whenever the lease runs out, connected or not.
    pub async fn run(self, shutdown: CancellationToken) {
        tokio::select! {
            () = reconnect(&shutdown, &self.coordinators, backoff_seed(&self.worker_id), || self.connection()) => {}
            never = self.fence_on_expiry() => match never {},
        }
    }

    /// Waits until the lease has run out (renewals push its end back). Reads the boot clock at
    /// least every second, so a machine that slept through its lease fences soon after it wakes.
    async fn lease_lapsed(&self) {
        let mut renewals = self.lease.subscribe();
        loop {
            let (end, now) = (*renewals.borrow_and_update(), boot_ms());
            if now >= end {
                return;
            }
            let wait = Duration::from_millis((end - now).min(1_000));
            tokio::select! {
                _ = renewals.changed() => {}
                () = tokio::time::sleep(wait) => {}
            }
        }
    }

    /// Every time the lease runs out: the supervisors freeze their commands by themselves, and
    /// what runs inside the worker is cancelled; then waits for the next renewal.
    async fn fence_on_expiry(&self) -> std::convert::Infallible {
        let mut renewals = self.lease.subscribe();
        loop {
            self.lease_lapsed().await;
            let n = self.attempts.lapse(LAPSED);
            let running = self.attempts.running().len();
            if running > 0 {
                warn!(
                    running,
                    cancelled = n,
                    "the lease with the coordinator ran out: the running commands are frozen until it confirms \
                     they are still this worker's (collectives are cancelled)"
                );
            }
            renewals.borrow_and_update();
            while self.lease.expired() {
                // The sender lives in `self.lease`: `changed` cannot fail while we hold it.
                let _ = renewals.changed().await;
            }
        }
    }

    /// The lease ran out and the coordinator gave this worker up (or cannot say it did not): it
    /// may have placed the attempts elsewhere, so every frozen or running one is killed, before
    /// anything renews the lease (which would thaw them).
    fn fence(&self) {
        let n = self.attempts.fence(FENCED);
        if n > 0 {
            warn!(
                attempts = n,
                "the coordinator gave this worker up after its lease ran out; the attempts were killed"
            );
        }
    }

    /// One connection, to its end.
    async fn connection(&self) -> Ended {
        let mut registered = false;
        let error = match self.connect_and_serve(&mut registered).await {
            Ok(never) => match never {},
            Err(e) => e,
        };
        if registered {
            let _ = std::fs::remove_file(&self.registered_file);
        }
        Ended { registered, error }
    }

    /// One connection; returns only with the error that ended it. Sets `registered` once
    /// `Register` succeeded.
    async fn connect_and_serve(&self, registered: &mut bool) -> Result<std::convert::Infallible> {
        let coordinator = self.coordinators.current();
        let endpoint = Endpoint::from_shared(coordinator.clone())
            .map_err(Error::connect(&coordinator))?
            .connect_timeout(CONNECT_TIMEOUT)
            .tcp_nodelay(true)
            .http2_keep_alive_interval(KEEPALIVE_INTERVAL)
            .keep_alive_timeout(KEEPALIVE_TIMEOUT)
            .keep_alive_while_idle(true);
        let endpoint = match &self.tls {
            Some(tls) => endpoint.tls_config(tls.clone()).map_err(Error::connect(&coordinator))?,
            None => endpoint,
        };
        // Bounded whole: a coordinator that hangs must not keep the worker from the next one.
        let channel = plexus_security::tls::connect_within(&endpoint, SESSION_CONNECT_LIMIT)
            .await
            .map_err(Error::connect(&coordinator))?;
        // The one message-size policy: the coordinator sends assignments up to this size.
        let mut client = pb::worker_service_client::WorkerServiceClient::new(channel)
            .max_decoding_message_size(MAX_MESSAGE)
            .max_encoding_message_size(MAX_MESSAGE);

        // A worker whose lease ran out lists its frozen attempts: the coordinator keeps them only
        // if it never gave this session up (`resumed`), and they are killed otherwise.
        let lapsed = self.lease.expired();
        let known = self.attempts.known();
        let request = pb::RegisterRequest {
            worker_id: self.worker_id.to_string(),
            session: self.session.clone(),
            peer_addr: self.peer_addr.clone(),
            capacity: Some(self.capacity.clone()),
            state: Some(self.node_state()),
            known: known.clone(),
        };
        let sent_at = boot_ms();
        let reply = with_timeout("Register", SETUP_TIMEOUT, client.register(request)).await?.into_inner();
        // Before the renewal below can thaw anything: a coordinator that gave this session up
        // (or restarted without it) may have placed the frozen attempts elsewhere.
        if !reply.resumed && (lapsed || self.lease.expired()) {
            self.fence();
        }
        *registered = true;
        self.runner.set_coordinator(client.clone(), self.worker_id);
        if !reply.rail_key.is_empty() {
            let key = plexus_dataplane::RailKey::from_bytes(&reply.rail_key)
                .map_err(|e| Error::Config(format!("the coordinator sent an unusable rail key: {e}")))?;
            self.rails.set_rail_key(key);
        } else if self.tls.is_some() {
            return Err(Error::Config(
                "the coordinator sent no rail key over a secure connection; is it running with --insecure?".into(),
            ));
        }
        if let Err(e) = std::fs::write(&self.registered_file, format!("{} {}\n", self.session, coordinator)) {
            debug!(error = %e, "cannot write the registered marker");
        }
        let timing = Timing::told(reply.heartbeat_interval_ms, reply.heartbeat_timeout_ms, reply.lease_ms);
        self.lease.set_frozen_limit(lease::frozen_limit(timing.timeout, timing.lease));
        self.lease.renew(sent_at, timing.lease);
        info!(
            coordinator = %coordinator, worker_id = %self.worker_id, known = known.len(),
            heartbeat = ?timing.interval, lease = ?timing.lease, "registered with the coordinator"
        );

        let stream_request =
            pb::AssignmentsRequest { worker_id: self.worker_id.to_string(), session: self.session.clone() };
        let stream = with_timeout("Assignments", SETUP_TIMEOUT, client.assignments(stream_request)).await?.into_inner();
        tokio::select! {
            r = self.assignments(stream) => r,
            r = self.heartbeats(client.clone(), timing) => r,
            r = self.reports(client.clone()) => r,
        }
    }

    async fn assignments(&self, mut stream: tonic::Streaming<pb::AssignmentBatch>) -> Result<std::convert::Infallible> {
        loop {
            let Some(batch) = stream.message().await.map_err(Error::rpc("Assignments"))? else {
                return Err(Error::StreamClosed);
            };
            if !batch.assign.is_empty() || !batch.cancel.is_empty() {
                debug!(assign = batch.assign.len(), cancel = batch.cancel.len(), "assignment batch");
            }
            for a in batch.assign {
                self.runner.assign(a);
            }
            for c in &batch.cancel {
                self.runner.cancel(c);
            }
        }
    }

    async fn heartbeats(
        &self,
        mut client: pb::worker_service_client::WorkerServiceClient<Channel>,
        mut timing: Timing,
    ) -> Result<std::convert::Infallible> {
        // The first tick is immediate, and Register just carried the node state.
        let mut ticks = heartbeat_ticks(timing.interval, true);
        ticks.tick().await;
        loop {
            ticks.tick().await;
            let sent_at = boot_ms();
            let request = pb::HeartbeatRequest {
                worker_id: self.worker_id.to_string(),
                session: self.session.clone(),
                state: Some(self.node_state()),
            };
            // A timeout ends the connection; the next one's `Register` still thaws the frozen
            // attempts if the coordinator kept this session (a pause it noticed as a stall).
            let reply = with_timeout("Heartbeat", timing.timeout, client.heartbeat(request)).await?.into_inner();
            if reply.reregister {
                // It does not know this session (it gave the worker up, or restarted): what froze
                // at the lease's end may run elsewhere already.
                if self.lease.expired() {
                    self.fence();
                }
                return Err(Error::Reregister);
            }
            // The coordinator stretches (or shortens again) the timing as the cluster changes
            // size; it waits for this process at least as long as it ever told it.
            if reply.heartbeat_interval_ms != 0 {
                let told = Timing::told(reply.heartbeat_interval_ms, reply.heartbeat_timeout_ms, reply.lease_ms);
                if told != timing {
                    info!(
                        heartbeat = ?told.interval, lease = ?told.lease, timeout = ?told.timeout,
                        "the coordinator changed the heartbeat timing"
                    );
                    self.lease.set_frozen_limit(lease::frozen_limit(told.timeout, told.lease));
                    if told.interval != timing.interval {
                        ticks = heartbeat_ticks(told.interval, false);
                    }
                    timing = told;
                }
            }
            // The same session, acknowledged: nothing of it was placed elsewhere, so the renewal
            // thaws whatever froze (the supervisors pass it on).
            self.lease.renew(sent_at, timing.lease);
        }
    }

    async fn reports(
        &self,
        mut client: pb::worker_service_client::WorkerServiceClient<Channel>,
    ) -> Result<std::convert::Infallible> {
        loop {
            self.attempts.reports_ready().await;
            // Nothing is reported while the lease has run out: the coordinator may have given
            // this session up, and the heartbeats find out which (renewing, or killing).
            self.lease.live().await;
            let Some(batch) = self.attempts.take_batch() else { continue };
            let request = pb::ReportTasksRequest {
                worker_id: self.worker_id.to_string(),
                session: self.session.clone(),
                reports: batch.messages(),
            };
            let n = batch.len();
            // On any error `batch` is dropped unacknowledged and its reports go back to the queue.
            let reply = with_timeout("ReportTasks", REPORT_TIMEOUT, client.report_tasks(request)).await?.into_inner();
            if reply.reregister {
                return Err(Error::Reregister);
            }
            batch.ack();
            debug!(reports = n, "reports acknowledged");
        }
    }

    fn node_state(&self) -> pb::NodeState {
        pb::NodeState {
            cpu_utilisation: self.cpu.sample(),
            memory_free: node::available_memory(),
            running: self.attempts.running(),
            objects: self.cache.objects(),
            cache_used: self.cache.used(),
            rails: rail_counters(&self.rails),
            gpus: self.gpus.latest(),
            isolation: self.isolation.to_string(),
            rails_refused: self.rails.handshake_failures(),
        }
    }
}

/// The heartbeat timing a coordinator told (`RegisterResponse`, `HeartbeatResponse`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Timing {
    interval: Duration,
    /// The coordinator's heartbeat timeout: also the Heartbeat call's deadline.
    timeout: Duration,
    lease: Duration,
}

impl Timing {
    /// From the reply's fields (ms; 0: not stated, by a coordinator older than the field).
    fn told(interval_ms: u64, timeout_ms: u64, lease_ms: u64) -> Timing {
        let interval = match interval_ms {
            0 => DEFAULT_HEARTBEAT_INTERVAL,
            ms => Duration::from_millis(ms).clamp(MIN_HEARTBEAT_INTERVAL, MAX_HEARTBEAT_INTERVAL),
        };
        let timeout = match timeout_ms {
            0 => DEFAULT_HEARTBEAT_TIMEOUT,
            ms => Duration::from_millis(ms),
        };
        // The coordinator states the lease (`lease_ms`); one older than that field does not, and
        // the worker derives it from the timeout. Never within 500 ms of the timeout, whatever a
        // coordinator says (it refuses to start with less: `CoreConfig::check`).
        let lease = match lease_ms {
            0 => lease::length(timeout, interval),
            ms => Duration::from_millis(ms).min(timeout.saturating_sub(Duration::from_millis(500))),
        };
        Timing { interval, timeout, lease }
    }
}

/// Heartbeat ticks every `interval`, the first now (`immediate`) or an interval from now.
fn heartbeat_ticks(interval: Duration, immediate: bool) -> tokio::time::Interval {
    let start = tokio::time::Instant::now() + if immediate { Duration::ZERO } else { interval };
    let mut ticks = tokio::time::interval_at(start, interval);
    ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    ticks
}

/// The data plane's per-rail counters, as reported to the coordinator.
fn rail_counters(ep: &plexus_dataplane::Endpoint) -> Vec<pb::RailCounters> {
    let stats = ep.stats();
    ep.local_addrs()
        .iter()
        .zip(stats.rails)
        .map(|(addr, r)| pb::RailCounters {
            addr: addr.to_string(),
            bytes_sent: r.bytes_sent,
            bytes_received: r.bytes_received,
            failures: r.failures,
        })
        .collect()
}

/// Awaits a unary call with a deadline, naming the call in errors.
async fn with_timeout<T>(
    call: &'static str,
    after: Duration,
    fut: impl Future<Output = std::result::Result<T, tonic::Status>>,
) -> Result<T> {
    tokio::time::timeout(after, fut).await.map_err(|_| Error::Timeout { call, after })?.map_err(Error::rpc(call))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Mutex;
    use tokio::time::Instant;

    #[test]
    fn the_backoff_doubles_to_its_cap_with_jitter_and_resets() {
        let mut b = Backoff::new(7);
        let steps = [200u128, 400, 800, 1600, 2000, 2000, 2000, 2000];
        let mut first = Vec::new();
        for step in steps {
            let d = b.next_delay().as_millis();
            assert!(d >= step / 2 && d <= step, "{d} ms is outside [{}, {step}]", step / 2);
            first.push(d);
        }
        b.reset();
        let d = b.next_delay().as_millis();
        assert!((100..=200).contains(&d), "{d}");
        // The same seed, the same schedule; another seed, another.
        let mut again = Backoff::new(7);
        assert_eq!(steps.map(|_| again.next_delay().as_millis()).to_vec(), first);
        let mut other = Backoff::new(8);
        assert_ne!(steps.map(|_| other.next_delay().as_millis()).to_vec(), first);
    }

    /// 5,000 workers that lose the coordinator at once: their first retries spread over the
    /// whole upper half of the first step instead of all landing at 200 ms.
    #[test]
    fn workers_that_fail_together_come_back_spread() {
        let mut per_10ms = [0u32; 10];
        for w in 0..5000 {
            let id = WorkerId::from_bytes((w as u128).to_le_bytes());
            let d = Backoff::new(backoff_seed(&id)).next_delay().as_millis();
            assert!((100..=200).contains(&d), "{d}");
            per_10ms[((d - 100) / 10).min(9) as usize] += 1;
        }
        // Uniform: 500 a bucket; none under 350 or over 650.
        assert!(per_10ms.iter().all(|&n| (350..=650).contains(&n)), "{per_10ms:?}");
        let follow: Vec<Duration> = (0..100).map(|s| Backoff::new(s).follow_delay()).collect();
        assert!(follow.iter().all(|d| *d <= FOLLOW_SPREAD));
        assert!(follow.iter().any(|d| *d < FOLLOW_SPREAD / 4) && follow.iter().any(|d| *d > FOLLOW_SPREAD * 3 / 4));
    }

    /// The loop itself, on paused time: connections that fail at once are retried after the
    /// backoff's delays (each within its step: 200 ms, 400 ms, … up to 2 s); one that had
    /// registered makes the next retry quick again. No coordinator and no sleeping: the clock
    /// jumps from one retry to the next.
    #[tokio::test(start_paused = true)]
    async fn reconnects_follow_the_backoff_schedule() {
        let shutdown = CancellationToken::new();
        let starts: Mutex<Vec<Instant>> = Mutex::default();
        let t0 = Instant::now();
        // The seventh connection registers before it fails; the tenth is the last one.
        reconnect(&shutdown, &Coordinators::new("http://coordinator.test"), 3, || {
            let mut starts = starts.lock().unwrap();
            starts.push(Instant::now());
            let n = starts.len();
            if n == 10 {
                shutdown.cancel();
            }
            std::future::ready(Ended { registered: n == 7, error: Error::StreamClosed })
        })
        .await;
        let starts = starts.into_inner().unwrap();
        let gaps: Vec<u128> = starts.windows(2).map(|w| (w[1] - w[0]).as_millis()).collect();
        assert_eq!(starts[0], t0, "the first connection is made at once");
        let mut expected = Backoff::new(3);
        let want: Vec<u128> = (0..9)
            .map(|i| {
                if i == 6 {
                    expected.reset();
                }
                expected.next_delay().as_millis()
            })
            .collect();
        // The timer rounds each sleep up to its next millisecond.
        assert!(gaps.iter().zip(&want).all(|(&g, &w)| g == w || g == w + 1), "{gaps:?} against {want:?}");
        let steps = [200, 400, 800, 1600, 2000, 2000, 200, 400, 800];
        assert!(gaps.iter().zip(steps).all(|(&g, s)| g >= s / 2 && g <= s), "{gaps:?}");
    }

    /// A standby's refusal that names the leader is followed at once; any other failure moves
    /// on to the next coordinator of the list.
    #[test]
    fn standbys_refusals_are_followed_and_failures_rotate_the_list() {
        let c = Coordinators::new("https://a:1, https://b:1,https://c:1");
        assert_eq!(c.all(), "https://a:1,https://b:1,https://c:1");
        assert_eq!(c.current(), "https://a:1");
        assert!(!c.failed(&Error::StreamClosed));
        assert_eq!(c.current(), "https://b:1");
        let refusal = |leader: &str| {
            let mut st = tonic::Status::unavailable("this coordinator is a standby");
            st.metadata_mut().insert(LEADER_METADATA, leader.parse().unwrap());
            Error::Rpc { call: "Register", status: Box::new(st) }
        };
        assert!(c.failed(&refusal("https://c:1")));
        assert_eq!(c.current(), "https://c:1");
        // Named twice in a row: it does not act as the leader, so the list goes on.
        assert!(!c.failed(&refusal("https://c:1")));
        assert_eq!(c.current(), "https://c:1", "the list's next after b");
        assert!(!c.failed(&refusal("not a url")), "a hint that is no URL is ignored");
        assert_eq!(c.current(), "https://a:1");
        let other = Error::Rpc { call: "Register", status: Box::new(tonic::Status::permission_denied("no")) };
        assert!(!c.failed(&other));
    }

    #[tokio::test(start_paused = true)]
    async fn shutdown_ends_the_wait_between_connections() {
        let shutdown = CancellationToken::new();
        let t0 = Instant::now();
        let stop = async {
            tokio::time::sleep(Duration::from_millis(50)).await;
            shutdown.cancel();
        };
        let coordinators = Coordinators::new("http://coordinator.test");
        let run = reconnect(&shutdown, &coordinators, 0, || {
            std::future::ready(Ended { registered: false, error: Error::StreamClosed })
        });
        tokio::join!(run, stop);
        assert_eq!(t0.elapsed(), Duration::from_millis(50), "the 100–200 ms back-off was cut short");
    }
}
