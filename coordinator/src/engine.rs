//! The engine: one thread that owns the [`Core`] and the [`Store`] and serialises every change.
//!
//! gRPC handlers send [`Cmd`]s over a channel. The engine drains whatever has arrived, applies it
//! all to the core, lets the core place ready subtasks, and hands every changed record, encoded
//! as ONE atomic batch, to the committer thread (`commit.rs`), which writes and flushes it and
//! only then answers the round's callers; the engine pushes the round's assignments to workers
//! and wakes its watchers once it hears the write is done (`rounds.rs`), and meanwhile goes on
//! with the next rounds. Nothing is acknowledged or acted on before it is durable, rounds are
//! written in order, and one fsync is shared by everything that queued up while the previous
//! one ran. (A heartbeat that changed nothing stored is answered as it is applied: there is
//! nothing to wait for.)

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use plexus_proto::{JobId, WorkerId};
use tokio::sync::{mpsc, oneshot, watch};

use plexus_scheduler::Error as SchedulerError;
use plexus_scheduler::core::timing::HeartbeatTiming;
use plexus_scheduler::core::{Core, NodeReport, Outbox, Registration, Report};
use plexus_scheduler::spec::JobSpec;

use crate::commit::{Committer, Deferred, Pending};
use crate::error::Error;
pub use crate::lookup::LogSource;
use crate::lookup::{explained, log_source};
use crate::queue;
use crate::store::Store;
use crate::view::{Detail, Explanation, JobView, QueueView, Timing, WorkBatch, WorkerList, WorkerPage, WorkerView};

mod rounds;

/// How often the engine wakes with nothing to do, to detect lost workers. A tenth of a second
/// keeps lost-worker detection within 100 ms of the heartbeat timeout at negligible cost.
const TICK: Duration = Duration::from_millis(100);

/// The least gap between two engine rounds (or between the wall clock's and the monotonic
/// clock's advance over one) that counts as a stall of the coordinator itself; at least a third
/// of the heartbeat timeout is needed too (see [`Engine::notice_stall`]).
const MIN_STALL: Duration = Duration::from_millis(500);

/// At most this many commands go into one group commit, so replies are never held back for long
/// under a flood of requests.
const MAX_BATCH: usize = 4096;

/// How often the measured speeds are saved (when they changed), and at stop. Not with every
/// round: they change with every finished attempt and are rewritten whole (up to about 2 MB at
/// their bounds). A crash loses at most this much measuring, which only costs estimates that a
/// few more attempts teach again.
const SAVE_ESTIMATES_EVERY_MS: u64 = 30_000;

pub type Reply<T> = oneshot::Sender<T>;

/// Where an object can be read, and what it must hash to.
pub struct ObjectSources {
    /// The digest its producer reported (`None`: not known).
    pub digest: Option<plexus_proto::Digest>,
    /// The live workers holding it: id and PeerService URL.
    pub holders: Vec<(WorkerId, String)>,
}

/// A request to the engine.
pub enum Cmd {
    Submit {
        id: JobId,
        spec: JobSpec,
        reply: Reply<Result<u32, SchedulerError>>,
    },
    /// What submitting `spec` now would do; nothing changes.
    DryRun {
        spec: JobSpec,
        reply: Reply<Result<plexus_scheduler::core::dry_run::DryRun, SchedulerError>>,
    },
    Cancel {
        job: JobId,
        reply: Reply<Result<JobView, SchedulerError>>,
    },
    /// The live workers holding an object (its job must exist), and its digest.
    Holders {
        object: plexus_proto::ObjectId,
        reply: Reply<Result<ObjectSources, SchedulerError>>,
    },
    /// A copy of `object` that `holder` served did not match its digest (found by this
    /// coordinator's relay): the holder is treated as having lost it.
    BadCopy {
        holder: WorkerId,
        object: plexus_proto::ObjectId,
        reply: Reply<()>,
    },
    /// Drains (`true`) or undrains a worker.
    DrainWorker {
        worker: WorkerId,
        on: bool,
        reply: Reply<Result<(), SchedulerError>>,
    },
    /// Forgets a lost worker.
    RemoveWorker {
        worker: WorkerId,
        reply: Reply<Result<(), SchedulerError>>,
    },
    /// Submits job `job`'s spec again as job `id`.
    Resubmit {
        job: JobId,
        id: JobId,
        reply: Reply<Result<u32, SchedulerError>>,
    },
    GetJob {
        job: JobId,
        detail: Detail,
        reply: Reply<Result<JobView, SchedulerError>>,
    },
    ListJobs {
        reply: Reply<Vec<JobView>>,
    },
    /// The working-dir digests of job `job` (`None`: of every job not yet ended, which hold theirs).
    WorkingDirs {
        job: Option<JobId>,
        reply: Reply<Vec<plexus_proto::Digest>>,
    },
    Watch {
        job: JobId,
        reply: Reply<Result<watch::Receiver<JobView>, SchedulerError>>,
    },
    /// A page of workers and the summary of all (see [`WorkerView::page`]).
    ListWorkers {
        page: WorkerPage,
        reply: Reply<WorkerList>,
    },
    /// Whether evictions are halted now (too many workers silent at once).
    EvictionHalt {
        reply: Reply<Option<plexus_scheduler::core::EvictionHalt>>,
    },
    /// Sets (`Some`) or clears a queue's share; replies with every queue's share and use.
    SetQueue {
        name: String,
        share: Option<f64>,
        reply: Reply<Result<Vec<QueueView>, Error>>,
    },
    ListQueues {
        reply: Reply<Vec<QueueView>>,
    },
    /// The metrics in the Prometheus text format.
    Metrics {
        reply: Reply<String>,
    },
    /// The learning placer's counters (`None`: a heuristic, or metrics off), and the placer's name.
    Learning {
        reply: Reply<(&'static str, Option<plexus_scheduler::placer::LearningStats>)>,
    },
    Explain {
        job: JobId,
        task: String,
        rank: u32,
        /// The placement, and for a collective member what its latest attempt's log says ran.
        reply: Reply<Result<(Explanation, Option<String>), SchedulerError>>,
    },
    /// Where the logs of an attempt (0: the latest) are.
    Logs {
        job: JobId,
        task: String,
        rank: u32,
        attempt: u32,
        reply: Reply<Result<LogSource, SchedulerError>>,
    },
    /// (Boxed: a registration is large, and every command is as large as the largest.)
    Register {
        reg: Box<Registration>,
        reply: Reply<Timing>,
    },
    Heartbeat {
        worker: WorkerId,
        session: String,
        node: NodeReport,
        /// The timing to tell the worker; `None`: it must register again.
        reply: Reply<Option<HeartbeatTiming>>,
    },
    Report {
        worker: WorkerId,
        session: String,
        reports: Vec<Report>,
        reply: Reply<bool>,
    },
    OpenStream {
        worker: WorkerId,
        session: String,
        reply: Reply<Option<mpsc::UnboundedReceiver<WorkBatch>>>,
    },
    /// Ends every assignment and watch stream, so a graceful shutdown has no open stream to wait
    /// for. Workers reconnect to the next coordinator process; watchers see the stream end.
    CloseStreams {
        reply: Reply<()>,
    },
    /// Stops the engine after this round. Connection tasks may still hold handles, so the engine
    /// cannot wait for every handle to be dropped.
    Stop,
}

/// A cloneable handle for sending commands to the engine thread. Every clone follows
/// [`EngineHandle::replace`]: with an HA control plane (issue 19) each term of leadership runs
/// an engine of its own behind the one handle the services hold.
#[derive(Clone)]
pub struct EngineHandle {
    tx: std::sync::Arc<std::sync::RwLock<queue::Sender<Cmd>>>,
}

impl EngineHandle {
    /// A handle with no engine behind it (a standby's): every call fails with
    /// [`Error::EngineStopped`] until [`EngineHandle::replace`].
    pub fn detached() -> EngineHandle {
        EngineHandle::from_sender(queue::channel().0)
    }

    pub(crate) fn from_sender(tx: queue::Sender<Cmd>) -> EngineHandle {
        EngineHandle { tx: std::sync::Arc::new(std::sync::RwLock::new(tx)) }
    }

    /// How far behind the current engine is (see `shed`).
    pub fn load(&self) -> std::sync::Arc<queue::Load> {
        self.sender().load().clone()
    }

    /// Points this handle, and every clone of it, at `other`'s engine.
    pub fn replace(&self, other: &EngineHandle) {
        let tx = other.sender();
        *self.tx.write().unwrap_or_else(|p| p.into_inner()) = tx;
    }

    fn sender(&self) -> queue::Sender<Cmd> {
        self.tx.read().unwrap_or_else(|p| p.into_inner()).clone()
    }

    /// Asks the engine to stop after its current round.
    pub fn stop(&self) {
        let _ = self.sender().send(Cmd::Stop);
    }

    /// Sends a command built around a fresh reply channel and waits for the answer.
    /// Fails with [`Error::EngineStopped`] when the engine is gone.
    pub async fn call<T>(&self, make: impl FnOnce(Reply<T>) -> Cmd) -> Result<T, Error> {
        let (tx, rx) = oneshot::channel();
        self.sender().send(make(tx)).map_err(|_| Error::EngineStopped)?;
        rx.await.map_err(|_| Error::EngineStopped)
    }
}

/// Per-worker delivery of assignments.
#[derive(Default)]
struct Delivery {
    session: String,
    stream: Option<mpsc::UnboundedSender<WorkBatch>>,
    /// Decided before the worker opened its stream; sent when it does.
    pending: WorkBatch,
}

/// Where the engine's time goes, logged when it stops (the control-plane benchmark reads it).
#[derive(Default, Debug)]
struct Stats {
    rounds: u64,
    commands: u64,
    records: u64,
    apply: Duration,
    schedule: Duration,
    commit: Duration,
    dispatch: Duration,
}

struct Engine {
    stats: Stats,
    core: Core,
    store: Arc<dyn Store>,
    /// Writes each round's records while the engine goes on (`commit.rs`).
    committer: Committer,
    /// The rounds whose commits are being written, oldest first.
    inflight: std::collections::VecDeque<InFlight>,
    clock: fn() -> u64,
    delivery: HashMap<WorkerId, Delivery>,
    watchers: HashMap<JobId, watch::Sender<JobView>>,
    /// The estimates' revision last saved, and when.
    estimates_saved: (u64, u64),
    /// `None`: metrics off (no `--http`), so they cost nothing.
    metrics: Option<crate::metrics::Metrics>,
    /// The previous round's start on the monotonic clock and on `clock`, to notice stalls.
    last_round: Option<(Instant, u64)>,
    /// See [`Acting`].
    acting: Option<Acting>,
}

/// Starts the engine thread. It runs until every handle is dropped, or a commit fails; the
/// returned join handle yields the storage error in the latter case.
pub fn start(
    core: Core,
    store: Box<dyn Store>,
    clock: fn() -> u64,
) -> (EngineHandle, std::thread::JoinHandle<Result<(), Error>>) {
    start_with(core, store, clock, true)
}

/// Whether the coordinator may act now: with etcd, while it leads and its lease is valid. While
/// it may not, its gate refuses every call, workers' heartbeats included, so the engine gives
/// every worker a fresh heartbeat timeout at each round rather than counting their silence: a
/// lease renewal late by a second or two (an etcd member killed) once had the leader declare
/// both its workers lost and run again the attempts whose success it had refused to hear.
pub type Acting = std::sync::Arc<dyn Fn() -> bool + Send + Sync>;

/// [`start`], with metrics kept (`metrics`) or not observed at all.
pub fn start_with(
    core: Core,
    store: Box<dyn Store>,
    clock: fn() -> u64,
    metrics: bool,
) -> (EngineHandle, std::thread::JoinHandle<Result<(), Error>>) {
    start_acting(core, store, clock, metrics, None)
}

/// [`start_with`], acting only while `acting` says so (`None`: always; one coordinator).
pub fn start_acting(
    core: Core,
    store: Box<dyn Store>,
    clock: fn() -> u64,
    metrics: bool,
    acting: Option<Acting>,
) -> (EngineHandle, std::thread::JoinHandle<Result<(), Error>>) {
    let (tx, rx) = queue::channel();
    let estimates_saved = (core.estimates().revision(), clock());
    let metrics = metrics.then(|| crate::metrics::Metrics::new(core.placer_name(), tx.load().clone()));
    let store: Arc<dyn Store> = Arc::from(store);
    let engine = Engine {
        stats: Stats::default(),
        core,
        committer: Committer::start(store.clone()),
        inflight: std::collections::VecDeque::new(),
        store,
        clock,
        delivery: HashMap::new(),
        watchers: HashMap::new(),
        estimates_saved,
        metrics,
        last_round: None,
        acting,
    };
    let join = std::thread::Builder::new()
        .name("plexus-engine".into())
        .spawn(move || engine.run(rx))
        .expect("spawning the engine thread at start-up");
    (EngineHandle::from_sender(tx), join)
}

/// A round whose commit is being written: what is sent once it is durable.
struct InFlight {
    pending: Pending,
    /// Its assignments and cancellations, and which records it wrote.
    out: Outbox,
    /// Its watchers' new views, built when the round ended (what was committed).
    views: Vec<(JobId, JobView)>,
}

/// What the engine's wait for commands ended with. (A command is moved once through it, as
/// through the queue; boxing it would allocate for every command.)
#[allow(clippy::large_enum_variant)]
enum Next {
    Cmd(Cmd),
    /// None came for [`TICK`]: a round all the same (retries' back-offs, silent workers).
    Tick,
    /// Every handle is gone: the engine stops.
    Disconnected,
}

/// The most rounds whose commits may be written at once: past it, the engine waits for the
/// oldest (a stalled disk holds the engine there, not its memory).
const MAX_IN_FLIGHT: usize = 8;

/// How long the engine waits for commands at a time while a commit is being written, so that
/// it sends that round's assignments soon after the commit ends.
const POLL_WHILE_COMMITTING: Duration = Duration::from_micros(500);

fn defer<T: Send + 'static>(reply: Reply<T>, value: T) -> Deferred {
    Box::new(move || {
        // The caller may have gone away (client disconnected); nothing to do then.
        let _ = reply.send(value);
    })
}

impl Engine {
    /// Notices that the coordinator itself stalled — a gap between two rounds (the loop wakes at
    /// least every [`TICK`]), or the wall clock advancing further than the monotonic one — longer
    /// than a third of the heartbeat timeout (at least [`MIN_STALL`]). Its process was stopped, or
    /// starved, or its clock jumped: the workers' heartbeats were not heard, through no fault of
    /// theirs, so every worker gets a fresh heartbeat timeout from now (issue 29: a `kill -STOP`
    /// of 7 s once declared every worker lost).
    fn notice_stall(&mut self, now: u64) {
        let mono = Instant::now();
        let previous = self.last_round.replace((mono, now));
        let Some((prev_mono, prev_now)) = previous else { return };
        let bound = MIN_STALL.max(Duration::from_millis(self.core.config().heartbeat_timeout_ms / 3));
        let gap = mono.duration_since(prev_mono);
        let wall_gap = Duration::from_millis(now.saturating_sub(prev_now));
        if gap <= bound && wall_gap <= gap + bound {
            return;
        }
        let workers = self.core.grace(now);
        tracing::warn!(
            gap_ms = gap.as_millis() as u64,
            wall_gap_ms = wall_gap.as_millis() as u64,
            workers,
            "the coordinator stalled (its engine did not run, or its clock jumped); every worker gets a fresh \
             heartbeat timeout rather than being declared lost"
        );
        if let Some(m) = &mut self.metrics {
            m.stalled();
        }
    }

    /// Saves the measured speeds when they changed and it is time (or `now_anyway`, at stop).
    fn save_estimates(&mut self, now: u64, now_anyway: bool) {
        let revision = self.core.estimates().revision();
        let (saved, at) = self.estimates_saved;
        if revision == saved || (!now_anyway && now < at.saturating_add(SAVE_ESTIMATES_EVERY_MS)) {
            return;
        }
        if crate::store::save_estimates(self.store.as_ref(), self.core.estimates()) {
            self.estimates_saved = (revision, now);
        } else {
            // Try again at the next period, not at every round.
            self.estimates_saved.1 = now;
        }
    }

    fn log_stats(&self) {
        let s = &self.stats;
        tracing::info!(
            rounds = s.rounds,
            commands = s.commands,
            records = s.records,
            apply_ms = s.apply.as_millis() as u64,
            schedule_ms = s.schedule.as_millis() as u64,
            commit_ms = s.commit.as_millis() as u64,
            dispatch_ms = s.dispatch.as_millis() as u64,
            "engine stats"
        );
    }

    fn apply(&mut self, cmd: Cmd, now: u64, replies: &mut Vec<Deferred>) {
        let core = &mut self.core;
        match cmd {
            Cmd::Submit { id, spec, reply } => {
                let r = core.submit(id, spec, now);
                if let Ok(n) = &r {
                    tracing::info!(job = %id, subtasks = n, "job accepted");
                }
                replies.push(defer(reply, r));
            }
            Cmd::DryRun { spec, reply } => replies.push(defer(reply, core.dry_run(&spec))),
            Cmd::Holders { object, reply } => {
                let r = match core.job(object.job) {
                    None => Err(SchedulerError::NoJob(object.job)),
                    Some(_) => Ok(ObjectSources {
                        digest: core.digest_of(&object),
                        holders: core
                            .live_holders(&object)
                            .into_iter()
                            .map(|w| (w.id(), w.record().peer_addr.clone()))
                            .collect(),
                    }),
                };
                replies.push(defer(reply, r));
            }
            Cmd::BadCopy { holder, object, reply } => {
                core.bad_copy(holder, &object, "the coordinator relaying it");
                replies.push(defer(reply, ()));
            }
            Cmd::Resubmit { job, id, reply } => {
                let r = match core.job(job).map(|j| j.spec().clone()) {
                    Some(spec) => core.submit(id, spec, now),
                    None => Err(SchedulerError::NoJob(job)),
                };
                if let Ok(n) = &r {
                    tracing::info!(job = %id, from = %job, subtasks = n, "job resubmitted");
                }
                replies.push(defer(reply, r));
            }
            Cmd::Cancel { job, reply } => {
                let r = core
                    .cancel(job, now)
                    .map(|_| JobView::of(core.job(job).expect("cancelled job exists"), Detail::Summary, now));
                replies.push(defer(reply, r));
            }
            Cmd::GetJob { job, detail, reply } => {
                let r = core.job(job).map(|j| JobView::of(j, detail, now)).ok_or(SchedulerError::NoJob(job));
                replies.push(defer(reply, r));
            }
            Cmd::ListJobs { reply } => {
                let v = core.jobs().map(|j| JobView::of(j, Detail::Summary, now)).collect();
                replies.push(defer(reply, v));
            }
            Cmd::WorkingDirs { job, reply } => replies.push(defer(reply, working_dirs(core, job))),
            Cmd::Watch { job, reply } => {
                let r = match core.job(job) {
                    None => Err(SchedulerError::NoJob(job)),
                    Some(j) => {
                        let status = JobView::of(j, Detail::Summary, now);
                        let final_already = j.record().state.is_final();
                        if final_already {
                            // Nothing will change: a channel whose sender is gone at once.
                            Ok(watch::channel(status).1)
                        } else {
                            Ok(self.watchers.entry(job).or_insert_with(|| watch::channel(status).0).subscribe())
                        }
                    }
                };
                replies.push(defer(reply, r));
            }
            Cmd::Explain { job, task, rank, reply } => {
                let r = explained(core, self.store.as_ref(), job, &task, rank).map(|e| {
                    let ran = log_source(core, job, &task, rank, 0)
                        .ok()
                        .and_then(|l| plexus_proto::rules::collective_line(&l.stdout_tail).map(str::to_string));
                    (e, ran)
                });
                replies.push(defer(reply, r));
            }
            Cmd::Logs { job, task, rank, attempt, reply } => {
                replies.push(defer(reply, log_source(core, job, &task, rank, attempt)));
            }
            cmd @ (Cmd::DrainWorker { .. }
            | Cmd::RemoveWorker { .. }
            | Cmd::ListWorkers { .. }
            | Cmd::EvictionHalt { .. }
            | Cmd::SetQueue { .. }
            | Cmd::Metrics { .. }
            | Cmd::Learning { .. }
            | Cmd::ListQueues { .. }) => self.apply_admin(cmd, replies),
            cmd @ (Cmd::Register { .. }
            | Cmd::Heartbeat { .. }
            | Cmd::Report { .. }
            | Cmd::Stop
            | Cmd::CloseStreams { .. }
            | Cmd::OpenStream { .. }) => self.apply_worker(cmd, now, replies),
        }
    }

    /// The commands of the cluster's administration: draining and removing workers, queues,
    /// and what the workers, metrics and learning look like.
    fn apply_admin(&mut self, cmd: Cmd, replies: &mut Vec<Deferred>) {
        let core = &mut self.core;
        match cmd {
            Cmd::DrainWorker { worker, on, reply } => {
                let r = core.drain_worker(worker, on);
                if r.is_ok() {
                    tracing::info!(%worker, draining = on, "worker drain set");
                }
                replies.push(defer(reply, r));
            }
            Cmd::RemoveWorker { worker, reply } => {
                let r = core.remove_worker(worker);
                if r.is_ok() {
                    tracing::info!(%worker, "worker removed");
                }
                replies.push(defer(reply, r));
            }
            Cmd::ListWorkers { page, reply } => {
                replies.push(defer(reply, WorkerView::page(core, page)));
            }
            Cmd::EvictionHalt { reply } => {
                replies.push(defer(reply, core.eviction_halt()));
            }
            Cmd::SetQueue { name, share, reply } => {
                // The core says why a share is refused (a bad name or share: INVALID_ARGUMENT).
                let r = core.set_queue_share(&name, share).map(|()| QueueView::all(core)).map_err(Error::Scheduler);
                replies.push(defer(reply, r));
            }
            Cmd::Metrics { reply } => {
                let text = match &mut self.metrics {
                    Some(m) => m.render(&mut self.core),
                    None => "# metrics are off on this coordinator (started with --http none)\n".to_string(),
                };
                replies.push(defer(reply, text));
            }
            Cmd::Learning { reply } => {
                let l = self.metrics.as_mut().and_then(|m| m.learning(&mut self.core));
                replies.push(defer(reply, (self.core.placer_name(), l)));
            }
            Cmd::ListQueues { reply } => {
                replies.push(defer(reply, QueueView::all(core)));
            }
            // The other commands are not the administration's (see `apply`).
            _ => {}
        }
    }

    /// The commands of workers' sessions: registration, heartbeats, reports and their streams.
    fn apply_worker(&mut self, cmd: Cmd, now: u64, replies: &mut Vec<Deferred>) {
        let core = &mut self.core;
        match cmd {
            Cmd::Register { reg, reply } => {
                let id = reg.worker;
                tracing::info!(worker = %id, peer = %reg.peer_addr, known = reg.known.len(), "worker registered");
                // A new registration ends the previous stream and drops what was waiting for
                // it: the core has just re-placed whatever the worker did not list as known.
                self.delivery.insert(id, Delivery { session: reg.session.clone(), ..Default::default() });
                let resumed = core.register(*reg, now);
                let t = core.timing();
                let timing = Timing {
                    heartbeat_interval_ms: t.heartbeat_interval_ms,
                    heartbeat_timeout_ms: t.heartbeat_timeout_ms,
                    lease_ms: t.lease_ms,
                    resumed,
                };
                replies.push(defer(reply, timing));
            }
            Cmd::Heartbeat { worker, session, node, reply } => {
                let told = core.worker(worker).map(|w| w.record().timeout_ms);
                let ok = core.heartbeat(worker, &session, node, now);
                let timing = ok.then(|| core.timing());
                // The timeout it would be told may be stored by the round being committed.
                let unwritten = self.inflight.iter().any(|f| f.out.workers.contains(&worker));
                if unwritten || core.worker(worker).map(|w| w.record().timeout_ms) != told {
                    // It tells the worker a longer timeout than before: answered once that is
                    // stored (`timing.rs`), after the round's commit.
                    replies.push(defer(reply, timing));
                } else {
                    // Nothing of it is stored, so it is answered now, not after the round's
                    // placements and commit: a heartbeat's answer time is the engine's queue
                    // and this command, however much work the round holds (issue 35).
                    let _ = reply.send(timing);
                }
            }
            Cmd::Report { worker, session, reports, reply } => {
                let ok = core.report(worker, &session, reports, now);
                replies.push(defer(reply, ok));
            }
            // Handled by the loop before `apply` is called.
            Cmd::Stop => {}
            Cmd::CloseStreams { reply } => {
                self.delivery.clear();
                self.watchers.clear();
                replies.push(defer(reply, ()));
            }
            Cmd::OpenStream { worker, session, reply } => {
                let registered = core.worker(worker).is_some_and(|w| w.connected() && w.record().session == session);
                let d = self.delivery.get_mut(&worker).filter(|d| d.session == session);
                let r = match (registered, d) {
                    (true, Some(d)) => {
                        let (tx, rx) = mpsc::unbounded_channel();
                        let pending = std::mem::take(&mut d.pending);
                        if !pending.is_empty() {
                            let _ = tx.send(pending);
                        }
                        d.stream = Some(tx);
                        Some(rx)
                    }
                    _ => None,
                };
                replies.push(defer(reply, r));
            }
            // The other commands are not a session's (see `apply`).
            _ => {}
        }
    }

    /// Sends each worker its new assignments and cancellations, in one message per worker
    /// (moved out of the outbox: nothing after this reads them).
    fn dispatch(&mut self, out: &mut Outbox) {
        let mut per_worker: HashMap<WorkerId, WorkBatch> = HashMap::new();
        for (w, a) in out.assignments.drain(..) {
            per_worker.entry(w).or_default().assign.push(a);
        }
        for (w, a) in out.cancels.drain(..) {
            per_worker.entry(w).or_default().cancel.push(a);
        }
        for (w, batch) in per_worker {
            let d = self.delivery.entry(w).or_default();
            match &d.stream {
                Some(tx) => {
                    if tx.send(batch).is_err() {
                        // The worker's stream ended; it will register again, listing what it
                        // knows, and the core re-places what never reached it.
                        d.stream = None;
                    }
                }
                None => {
                    d.pending.assign.extend(batch.assign);
                    d.pending.cancel.extend(batch.cancel);
                }
            }
        }
    }
}

/// The working-dir digests of job `job`, or (`None`) of every job not yet ended: those hold theirs.
fn working_dirs(core: &Core, job: Option<JobId>) -> Vec<plexus_proto::Digest> {
    let digest = |j: &plexus_scheduler::core::Job| j.spec().working_dir.as_ref()?.digest;
    match job {
        Some(id) => core.job(id).and_then(digest).into_iter().collect(),
        None => core.jobs().filter(|j| !j.record().state.is_final()).filter_map(digest).collect(),
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use plexus_proto::{AttemptRef, SubtaskState};
    use plexus_scheduler::core::{Capacity, CoreConfig};
    use plexus_scheduler::placer::heuristic;
    use plexus_scheduler::spec::{Format, parse};

    use super::*;
    use crate::store::{MemStore, load_estimates};

    /// A worker of `cpus` cores registering with session "s".
    fn registration(worker: WorkerId, cpus: u32) -> Registration {
        Registration {
            worker,
            session: "s".into(),
            peer_addr: "http://127.0.0.1:1".into(),
            capacity: Capacity { cpus, memory: 1 << 30, ..Default::default() },
            state: NodeReport::default(),
            known: vec![],
        }
    }

    /// Pipelined commits (`commit.rs`): while a round's records are being written the engine
    /// goes on with new commands (a heartbeat is answered), but that round's callers are not
    /// answered and its assignments are not sent until the write is done; a write that fails
    /// answers nobody and stops the engine.
    #[tokio::test]
    async fn nothing_of_a_round_is_answered_or_sent_before_its_commit_while_the_engine_goes_on() {
        use std::time::Duration;
        let store = Arc::new(crate::store::testing::HeldStore::default());
        let core = Core::new(CoreConfig::default(), heuristic("least-loaded", 1).expect("a heuristic"));
        let (handle, thread) = start(core, Box::new(store.clone()), plexus_proto::now_ms);
        let worker = WorkerId::random();
        handle.call(|reply| Cmd::Register { reg: Box::new(registration(worker, 1)), reply }).await.unwrap();
        let mut stream = handle
            .call(|reply| Cmd::OpenStream { worker, session: "s".into(), reply })
            .await
            .unwrap()
            .expect("a stream");

        store.close(true);
        let job = JobId::random();
        let spec = parse("[[task]]\nname = \"a\"\ncommand = [\"work\"]\n", Format::Toml, "j.toml").unwrap();
        let h = handle.clone();
        let mut submitted = tokio::spawn(async move { h.call(|reply| Cmd::Submit { id: job, spec, reply }).await });
        let early = tokio::time::timeout(Duration::from_millis(300), &mut submitted).await;
        assert!(early.is_err(), "the submission was answered before its commit was written");
        assert!(stream.try_recv().is_err(), "an assignment was sent before its commit was written");
        // The engine goes on meanwhile: a heartbeat, which stores nothing, is answered.
        let beat =
            handle.call(|reply| Cmd::Heartbeat { worker, session: "s".into(), node: NodeReport::default(), reply });
        let timing = tokio::time::timeout(Duration::from_secs(5), beat).await.expect("answered while a commit waits");
        assert!(timing.unwrap().is_some());
        assert!(stream.try_recv().is_err());

        store.close(false);
        submitted.await.unwrap().unwrap().unwrap();
        let batch = tokio::time::timeout(Duration::from_secs(5), stream.recv()).await.unwrap().expect("assigned");
        assert_eq!(batch.assign.len(), 1);
        assert!(store.inner.load().unwrap().jobs.iter().any(|j| j.id == job), "the job is stored");

        // A failed write: its caller is not answered, and the engine stops with the error.
        store.failing.store(true, std::sync::atomic::Ordering::SeqCst);
        let spec = parse("[[task]]\nname = \"b\"\ncommand = [\"work\"]\n", Format::Toml, "k.toml").unwrap();
        let lost = handle.call(|reply| Cmd::Submit { id: JobId::random(), spec, reply }).await;
        assert!(matches!(lost, Err(Error::EngineStopped)), "answered although its commit failed");
        let end = tokio::task::spawn_blocking(move || thread.join()).await.unwrap().expect("the engine thread ends");
        assert!(end.unwrap_err().to_string().contains("the disk is gone"));
    }

    /// What a worker's succeeded attempt teaches reaches `plexus workers`, and is saved when the
    /// engine stops, so the next coordinator starts from it.
    #[tokio::test]
    async fn measured_speeds_are_listed_and_saved_at_stop() {
        let store = Arc::new(MemStore::default());
        let core = Core::new(CoreConfig::default(), heuristic("fastest", 1).expect("a heuristic"));
        let (handle, thread) = start(core, Box::new(store.clone()), plexus_proto::now_ms);
        let worker = WorkerId::random();
        let reg = registration(worker, 2);
        handle.call(|reply| Cmd::Register { reg: Box::new(reg), reply }).await.unwrap();
        let job = JobId::random();
        let spec = parse("[[task]]\nname = \"a\"\ncommand = [\"work\"]\n", Format::Toml, "j.toml").unwrap();
        handle.call(|reply| Cmd::Submit { id: job, spec, reply }).await.unwrap().unwrap();
        let attempt = AttemptRef { job, task: "a".into(), rank: 0, attempt: 1 };
        let report = Report {
            attempt: Some(attempt),
            state: Some(SubtaskState::Succeeded),
            started_at: 1_000,
            finished_at: 1_250,
            ..Default::default()
        };
        assert!(
            handle
                .call(|reply| Cmd::Report { worker, session: "s".into(), reports: vec![report], reply })
                .await
                .unwrap()
        );
        let workers = handle.call(|reply| Cmd::ListWorkers { page: WorkerPage::ALL, reply }).await.unwrap().workers;
        let speed = workers[0].speed.as_ref().expect("measured");
        assert_eq!((speed.signatures, speed.run_samples), (1, 1.0));
        assert!(store.load_estimates().unwrap().is_none(), "not saved with every round");
        handle.stop();
        tokio::task::spawn_blocking(move || thread.join())
            .await
            .unwrap()
            .expect("the engine thread ends")
            .expect("cleanly");
        let saved = load_estimates(store.as_ref());
        assert_eq!(saved.speeds()[&worker].signatures, 1);
        assert!(saved.revision() > 0);
    }

    /// A placement decided before a restart is explained from the store: restoring does not load
    /// placement records, and what `plexus explain` shows of it is what was decided.
    #[tokio::test]
    async fn a_placement_from_before_a_restart_is_explained_from_the_store() {
        let store = Arc::new(MemStore::default());
        let placer = || heuristic("least-loaded", 1).expect("a heuristic");
        let (handle, thread) =
            start(Core::new(CoreConfig::default(), placer()), Box::new(store.clone()), plexus_proto::now_ms);
        let worker = WorkerId::random();
        let reg = registration(worker, 1);
        handle.call(|reply| Cmd::Register { reg: Box::new(reg), reply }).await.unwrap();
        let job = JobId::random();
        let spec =
            parse("[[task]]\nname = \"a\"\ncommand = [\"work\"]\nreplicas = 2\n", Format::Toml, "j.toml").unwrap();
        handle.call(|reply| Cmd::Submit { id: job, spec, reply }).await.unwrap().unwrap();
        let explain = |h: &EngineHandle, rank: u32| {
            let h = h.clone();
            async move { h.call(|reply| Cmd::Explain { job, task: "a".into(), rank, reply }).await.unwrap() }
        };
        let before = explain(&handle, 0).await.expect("rank 0 placed on the one core").0;
        assert_eq!(before.chosen, worker);
        handle.stop();
        tokio::task::spawn_blocking(move || thread.join()).await.unwrap().unwrap().unwrap();

        let snap = store.load().unwrap();
        let mut core = Core::new(CoreConfig::default(), placer());
        core.restore(snap, plexus_proto::now_ms()).unwrap();
        assert!(core.explain(job, "a", 0).is_err(), "the restored core holds no placement record");
        let (handle, thread) = start(core, Box::new(store.clone()), plexus_proto::now_ms);
        let after = explain(&handle, 0).await.expect("explained from the store").0;
        assert_eq!((after.chosen, after.decision, &after.reason), (before.chosen, before.decision, &before.reason));
        assert_eq!(after.candidates.len(), before.candidates.len());
        let never = explain(&handle, 1).await.expect_err("rank 1 waits for the core");
        assert!(never.to_string().contains("not been placed yet"), "{never}");
        handle.stop();
        tokio::task::spawn_blocking(move || thread.join()).await.unwrap().unwrap().unwrap();
    }

    /// While the coordinator may not act (its lease's validity lapsed, so its gate refuses
    /// every call), a silent worker is not declared lost; once it acts again, the timeout runs.
    #[tokio::test]
    async fn workers_silent_while_the_coordinator_may_not_act_are_not_declared_lost() {
        use std::sync::atomic::{AtomicBool, Ordering};
        let config =
            CoreConfig { heartbeat_interval_ms: 100, heartbeat_timeout_ms: 700, lease_ms: 200, ..Default::default() };
        let core = Core::new(config, heuristic("least-loaded", 1).expect("a heuristic"));
        let may = Arc::new(AtomicBool::new(false));
        let flag = may.clone();
        let acting: Acting = Arc::new(move || flag.load(Ordering::SeqCst));
        let (handle, thread) =
            start_acting(core, Box::new(MemStore::default()), plexus_proto::now_ms, false, Some(acting));
        let worker = WorkerId::random();
        let reg = registration(worker, 1);
        handle.call(|reply| Cmd::Register { reg: Box::new(reg), reply }).await.unwrap();
        let alive = || async {
            let page = handle.call(|reply| Cmd::ListWorkers { page: WorkerPage::ALL, reply }).await.unwrap();
            page.workers[0].alive
        };
        tokio::time::sleep(Duration::from_millis(1_500)).await;
        assert!(alive().await, "silent for twice the timeout while the coordinator may not act");
        may.store(true, Ordering::SeqCst);
        tokio::time::sleep(Duration::from_millis(1_500)).await;
        assert!(!alive().await, "silent past the timeout while it acts: lost");
        handle.stop();
        tokio::task::spawn_blocking(move || thread.join()).await.unwrap().unwrap().unwrap();
    }
}
