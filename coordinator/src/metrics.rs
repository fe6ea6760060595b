//! The coordinator's Prometheus metrics (issue 18), served as text at `/metrics` on `--http`.
//!
//! Names follow Prometheus conventions: the `plexus_` prefix, base units (seconds, bytes),
//! `_total` on counters, and no job ids in labels (a label per job would grow without bound).
//! The engine thread owns [`Metrics`]: it observes each round's placements and starts as they
//! happen, and at a scrape refreshes the gauges from the core's state (O(jobs × tasks +
//! workers)) before encoding.

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::encoding::text::encode;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::{Registry, Unit};
use std::sync::atomic::AtomicU64;

use plexus_proto::{JobState, SubtaskState};
use plexus_scheduler::core::{Core, Counters, Outbox};

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct StateLabel {
    state: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ReasonLabel {
    reason: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct PlacementLabels {
    placer: String,
    result: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct GpuLabels {
    worker: String,
    gpu: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct BuildLabels {
    version: String,
}

/// Why a ready subtask is not placed yet, in the few classes `plexus_subtasks_pending` uses.
pub const PENDING_REASONS: &[&str] = &["dependencies", "placing", "no_room", "gang", "queue_share", "unsatisfiable"];

/// Every metric the coordinator exports.
pub struct Metrics {
    registry: Registry,
    jobs: Family<StateLabel, Gauge>,
    subtasks: Family<StateLabel, Gauge>,
    pending: Family<ReasonLabel, Gauge>,
    workers: Family<StateLabel, Gauge>,
    placements: Family<PlacementLabels, Counter>,
    submit_to_placed: Histogram,
    placed_to_running: Histogram,
    round: Histogram,
    commit: Histogram,
    gang_reservations: Counter,
    gangs_bound: Counter,
    gang_rollbacks: Counter,
    gang_timeouts: Counter,
    digest_mismatches: Counter,
    gpu_utilisation: Family<GpuLabels, Gauge<f64, AtomicU64>>,
    evictions_halted: Gauge,
    heartbeat_interval: Gauge<f64, AtomicU64>,
    eviction_halts: Counter,
    stalls: Counter,
    policy_decisions: Counter,
    policy_exploratory: Counter,
    policy_experiences: Counter,
    policy_training_steps: Counter,
    policy_decision: Histogram,
    policy_departures: Counter,
    policy_fallbacks: Counter,
    policy_holding: Gauge,
    /// The learning placer's counters at the last refresh.
    seen_policy: plexus_scheduler::placer::LearningStats,
    /// The core's counters at the last refresh (the counters above advance by the difference).
    seen: Counters,
    placer: &'static str,
    /// The engine's queue (`shed`): its lag and the requests shed, read at each render.
    load: std::sync::Arc<crate::queue::Load>,
    requests_shed: Counter,
    engine_lag: Gauge<f64, AtomicU64>,
    seen_shed: u64,
}

/// Buckets from 1 ms to ~33 s (×2): placement latencies and engine rounds alike.
fn latency() -> Histogram {
    Histogram::new(exponential_buckets(0.001, 2.0, 16))
}

impl Metrics {
    pub fn new(placer: &'static str, load: std::sync::Arc<crate::queue::Load>) -> Metrics {
        let mut r = Registry::default();
        let m = Metrics {
            jobs: Family::default(),
            subtasks: Family::default(),
            pending: Family::default(),
            workers: Family::default(),
            placements: Family::default(),
            submit_to_placed: latency(),
            placed_to_running: latency(),
            round: latency(),
            commit: latency(),
            gang_reservations: Counter::default(),
            gangs_bound: Counter::default(),
            gang_rollbacks: Counter::default(),
            gang_timeouts: Counter::default(),
            digest_mismatches: Counter::default(),
            gpu_utilisation: Family::default(),
            evictions_halted: Gauge::default(),
            heartbeat_interval: Gauge::default(),
            eviction_halts: Counter::default(),
            stalls: Counter::default(),
            policy_decisions: Counter::default(),
            policy_exploratory: Counter::default(),
            policy_experiences: Counter::default(),
            policy_training_steps: Counter::default(),
            // 10 µs to ~0.33 s (×2): the decision target is < 1 ms.
            policy_decision: Histogram::new(exponential_buckets(1e-5, 2.0, 16)),
            policy_departures: Counter::default(),
            policy_fallbacks: Counter::default(),
            policy_holding: Gauge::default(),
            seen_policy: Default::default(),
            seen: Counters::default(),
            placer,
            registry: Registry::default(),
            load,
            requests_shed: Counter::default(),
            engine_lag: Gauge::default(),
            seen_shed: 0,
        };
        m.register_state(&mut r);
        m.register_latencies(&mut r);
        m.register_gangs(&mut r);
        m.register_liveness(&mut r);
        r.register(
            "plexus_digest_mismatches",
            "Copies of objects whose bytes did not match the digest their attempt reported (found by a worker fetching an input, or by the coordinator relaying a download); each holder is then treated as having lost the object",
            m.digest_mismatches.clone(),
        );
        if crate::learned::is_learned(placer) {
            m.register_policy(&mut r);
        }
        register_build(&mut r);
        Metrics { registry: r, ..m }
    }

    /// Jobs, subtasks (and why pending), workers and placements, by state.
    fn register_state(&self, r: &mut Registry) {
        r.register("plexus_jobs", "Jobs known to the coordinator, by state", self.jobs.clone());
        r.register("plexus_subtasks", "Subtasks of jobs known to the coordinator, by state", self.subtasks.clone());
        r.register(
            "plexus_subtasks_pending",
            "Subtasks not placed yet, by why: dependencies (inputs not produced), placing (ready, not judged yet), no_room, gang (waiting for its gang), queue_share, unsatisfiable (no live worker could ever run it)",
            self.pending.clone(),
        );
        r.register(
            "plexus_workers",
            "Workers by state: alive (connected), disconnected (alive, stream closed), lost",
            self.workers.clone(),
        );
        r.register("plexus_placements", "Subtasks placed on a worker, by placer and result", self.placements.clone());
    }

    /// The latencies: submission to placement, placement to running, a round, a store commit.
    fn register_latencies(&self, r: &mut Registry) {
        r.register_with_unit(
            "plexus_submit_to_placed",
            "Time from a job's submission to each of its subtasks' placement",
            Unit::Seconds,
            self.submit_to_placed.clone(),
        );
        r.register_with_unit(
            "plexus_placed_to_running",
            "Time from a subtask's placement to its worker reporting it running",
            Unit::Seconds,
            self.placed_to_running.clone(),
        );
        r.register_with_unit(
            "plexus_engine_round",
            "Time the engine spends applying commands and scheduling in one round",
            Unit::Seconds,
            self.round.clone(),
        );
        r.register_with_unit(
            "plexus_store_commit",
            "Time of one group commit to the store (sled, flushed)",
            Unit::Seconds,
            self.commit.clone(),
        );
    }

    /// Gang reservations, bindings, rollbacks and timeouts, and each GPU's utilisation.
    fn register_gangs(&self, r: &mut Registry) {
        r.register("plexus_gang_reservations", "Gang members reserved", self.gang_reservations.clone());
        r.register(
            "plexus_gangs_bound",
            "Gangs whose min_members were reserved and dispatched together",
            self.gangs_bound.clone(),
        );
        r.register(
            "plexus_gang_rollbacks",
            "Gangs rolled back (deadline, worker lost before binding, restart)",
            self.gang_rollbacks.clone(),
        );
        r.register("plexus_gang_timeouts", "Gangs rolled back at their deadline", self.gang_timeouts.clone());
        r.register(
            "plexus_gpu_utilisation_ratio",
            "Each worker GPU's utilisation (0..1), from the worker's last heartbeat",
            self.gpu_utilisation.clone(),
        );
    }

    /// Evictions halted, and the coordinator's own stalls (issue 29).
    fn register_liveness(&self, r: &mut Registry) {
        r.register(
            "plexus_evictions_halted",
            "1 while evictions are halted: more than --max-lost-share of the workers missed their heartbeats at once, and none is declared lost",
            self.evictions_halted.clone(),
        );
        r.register(
            "plexus_heartbeat_interval_seconds",
            "The heartbeat interval workers are told now: --heartbeat-interval-ms, stretched past --max-heartbeats-per-sec",
            self.heartbeat_interval.clone(),
        );
        r.register(
            "plexus_eviction_halts",
            "Times evictions halted because too many workers fell silent at once",
            self.eviction_halts.clone(),
        );
        r.register(
            "plexus_coordinator_stalls",
            "Times the coordinator noticed it had stalled (its engine loop or clock jumped) and gave every worker a fresh heartbeat timeout",
            self.stalls.clone(),
        );
        r.register(
            "plexus_requests_shed",
            "Clients' requests refused with RESOURCE_EXHAUSTED because commands waited longer than --shed-lag-ms for the engine",
            self.requests_shed.clone(),
        );
        r.register(
            "plexus_engine_lag_seconds",
            "How long the last command the engine took had waited in its queue (0 while idle)",
            self.engine_lag.clone(),
        );
    }

    /// Counts one stall of the coordinator.
    pub fn stalled(&mut self) {
        self.stalls.inc();
    }

    /// The learned placer's decisions, experiences, training steps and decision time (only
    /// registered when it places).
    fn register_policy(&self, r: &mut Registry) {
        r.register("plexus_policy_decisions", "Placements the learned placer decided", self.policy_decisions.clone());
        r.register(
            "plexus_policy_exploratory_decisions",
            "Of those, exploratory (ε-greedy) ones",
            self.policy_exploratory.clone(),
        );
        r.register(
            "plexus_policy_experiences",
            "Experiences (decision, reward, next state) sent to training",
            self.policy_experiences.clone(),
        );
        r.register(
            "plexus_policy_training_steps",
            "Training steps the learned placer's training thread completed",
            self.policy_training_steps.clone(),
        );
        r.register(
            "plexus_policy_departures",
            "Of the anchored learner's decisions (--placer rl), those where it chose another worker than fastest would (greedy, not exploration)",
            self.policy_departures.clone(),
        );
        r.register(
            "plexus_policy_guard_fallbacks",
            "Times the guard took the anchored learner back to fastest's choices because its departures measured worse",
            self.policy_fallbacks.clone(),
        );
        r.register(
            "plexus_policy_guard_holding",
            "1 while the guard holds the anchored learner to fastest's choices",
            self.policy_holding.clone(),
        );
        r.register_with_unit(
            "plexus_policy_decision",
            "Time of one learned placement decision (inference and choice)",
            Unit::Seconds,
            self.policy_decision.clone(),
        );
    }

    /// What one round did: its placements (submission → placement latency), the subtasks that
    /// started running (placement → running), and how long it took.
    pub fn observe_round(&mut self, core: &Core, out: &Outbox, round_s: f64) {
        if !out.assignments.is_empty() {
            let placed = self
                .placements
                .get_or_create(&PlacementLabels { placer: self.placer.to_string(), result: "assigned".into() });
            for (_, a) in &out.assignments {
                placed.inc();
                let at = &a.attempt;
                if let Some(j) = core.job(at.job)
                    && let Some(s) = j.subtask_index(&at.task, at.rank).ok().map(|i| &j.subtasks()[i as usize])
                {
                    self.submit_to_placed.observe(s.assigned_at.saturating_sub(j.record().submitted_at) as f64 / 1e3);
                }
            }
        }
        for (job, idx) in &out.subtasks {
            if let Some(s) = core.subtask(*job, *idx)
                && s.state == SubtaskState::Running
                && s.started_at >= s.assigned_at
                && s.assigned_at > 0
            {
                self.placed_to_running.observe((s.started_at - s.assigned_at) as f64 / 1e3);
            }
        }
        self.round.observe(round_s);
    }

    /// How long a round's commit took (the store's write and flush).
    pub fn observe_commit(&mut self, commit_s: f64) {
        self.commit.observe(commit_s);
    }

    /// Brings the gauges and the core's counters up to date, and encodes everything.
    pub fn render(&mut self, core: &mut Core) -> String {
        self.learning(core);
        self.refresh(core);
        let shed = self.load.shed();
        self.requests_shed.inc_by(shed.saturating_sub(self.seen_shed));
        self.seen_shed = shed;
        self.engine_lag.set(self.load.lag().as_secs_f64());
        let mut text = String::new();
        // Writing into a String cannot fail.
        let _ = encode(&mut text, &self.registry);
        text
    }

    /// The learning placer's counters since start (its decision times go into the histogram
    /// here, so a scrape and the dashboard can both read them); `None` for a heuristic.
    pub fn learning(&mut self, core: &mut Core) -> Option<plexus_scheduler::placer::LearningStats> {
        if let Some(l) = core.placer_learning() {
            let p = &self.seen_policy;
            self.policy_decisions.inc_by(l.decisions.saturating_sub(p.decisions));
            self.policy_exploratory.inc_by(l.exploratory.saturating_sub(p.exploratory));
            self.policy_experiences.inc_by(l.experiences.saturating_sub(p.experiences));
            self.policy_training_steps.inc_by(l.training_steps.saturating_sub(p.training_steps));
            if let Some(a) = &l.anchor {
                let seen = p.anchor.as_ref();
                self.policy_departures.inc_by(a.departures.saturating_sub(seen.map_or(0, |s| s.departures)));
                self.policy_fallbacks.inc_by(a.fallbacks.saturating_sub(seen.map_or(0, |s| s.fallbacks)));
                self.policy_holding.set(i64::from(a.holding.is_some()));
            }
            for s in &l.decision_seconds {
                self.policy_decision.observe(*s);
            }
            self.seen_policy = plexus_scheduler::placer::LearningStats { decision_seconds: Vec::new(), ..l };
            return Some(self.seen_policy.clone());
        }
        None
    }

    fn refresh(&mut self, core: &Core) {
        let mut jobs = [0i64; 5];
        let mut subtasks = [0i64; 7];
        let mut pending = [0i64; 6];
        for j in core.jobs() {
            jobs[JOB_STATES.iter().position(|s| *s == j.record().state).expect("every state is listed")] += 1;
            for (t, task) in j.record().spec.tasks.iter().enumerate() {
                let c = j.counts(t);
                for (n, v) in c.iter().enumerate() {
                    subtasks[n] += i64::from(*v);
                }
                if j.record().state != JobState::Running {
                    continue;
                }
                pending[0] += i64::from(c[SubtaskState::Waiting as usize]);
                let ready = i64::from(c[SubtaskState::Ready as usize]);
                let class = match j.waiting_reason(t) {
                    _ if task
                        .gang
                        .as_ref()
                        .is_some_and(|g| j.record().gangs.get(&g.name).is_none_or(|s| s.bound_at == 0)) =>
                    {
                        3
                    }
                    None => 1,
                    Some(r) if r.starts_with("no live worker has room") => 2,
                    Some(r) if r.starts_with("queue ") => 4,
                    Some(_) => 5,
                };
                pending[class] += ready;
            }
        }
        for (n, state) in JOB_STATES.iter().enumerate() {
            self.jobs.get_or_create(&StateLabel { state: state.as_str().to_string() }).set(jobs[n]);
        }
        for (n, state) in SUBTASK_STATES.iter().enumerate() {
            self.subtasks.get_or_create(&StateLabel { state: state.as_str().to_string() }).set(subtasks[n]);
        }
        for (n, name) in PENDING_REASONS.iter().enumerate() {
            self.pending.get_or_create(&ReasonLabel { reason: name.to_string() }).set(pending[n]);
        }
        let mut workers = [0i64; 3];
        self.gpu_utilisation.clear();
        for w in core.workers() {
            workers[if !w.record().alive {
                2
            } else if w.connected() {
                0
            } else {
                1
            }] += 1;
            if w.record().alive {
                for g in &w.node().gpus {
                    self.gpu_utilisation
                        .get_or_create(&GpuLabels { worker: w.record().id.to_string(), gpu: g.index.to_string() })
                        .set(g.utilisation);
                }
            }
        }
        for (n, name) in ["alive", "disconnected", "lost"].iter().enumerate() {
            self.workers.get_or_create(&StateLabel { state: name.to_string() }).set(workers[n]);
        }
        let now = core.counters();
        self.gang_reservations.inc_by(now.gang_reservations.saturating_sub(self.seen.gang_reservations));
        self.gangs_bound.inc_by(now.gangs_bound.saturating_sub(self.seen.gangs_bound));
        self.gang_rollbacks.inc_by(now.gang_rollbacks.saturating_sub(self.seen.gang_rollbacks));
        self.gang_timeouts.inc_by(now.gang_timeouts.saturating_sub(self.seen.gang_timeouts));
        self.eviction_halts.inc_by(now.eviction_halts.saturating_sub(self.seen.eviction_halts));
        self.evictions_halted.set(i64::from(core.eviction_halt().is_some()));
        self.heartbeat_interval.set(core.timing().heartbeat_interval_ms as f64 / 1e3);
        self.digest_mismatches.inc_by(now.digest_mismatches.saturating_sub(self.seen.digest_mismatches));
        self.seen = now;
    }
}

/// Every job state, as `plexus_jobs` labels them (the domain's names).
const JOB_STATES: [JobState; 5] =
    [JobState::Running, JobState::Succeeded, JobState::Failed, JobState::Cancelled, JobState::CompletedWithFailures];
/// Every subtask state in `Job::counts` order (the enum's), labelled by the domain's names.
const SUBTASK_STATES: [SubtaskState; 7] = [
    SubtaskState::Waiting,
    SubtaskState::Ready,
    SubtaskState::Assigned,
    SubtaskState::Running,
    SubtaskState::Succeeded,
    SubtaskState::Failed,
    SubtaskState::Cancelled,
];

/// The build's info: always 1, with the version as a label.
fn register_build(r: &mut Registry) {
    let build: Family<BuildLabels, Gauge> = Family::default();
    build.get_or_create(&BuildLabels { version: env!("CARGO_PKG_VERSION").to_string() }).set(1);
    r.register("plexus_build_info", "The coordinator's build: always 1, with its version as a label", build);
}
