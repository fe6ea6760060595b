//! "ours": the real scheduling core, [`plexus_scheduler::core::Core`], driven in simulated time.
//!
//! Every worker registers at the start; each arrival is submitted as a job file — a gang as one
//! task with `replicas = K`, `min_members = K` and its `gang_timeout`, a small task as a
//! one-replica task — and each round is what the coordinator's engine does: heartbeats of every
//! worker, `tick`, `schedule`, and the outbox's assignments, each taken as started at once. When
//! an item's run time is over, its members report success. The core's records (reservations,
//! deadlines, rollbacks) are read only to know when its next timer is due.

use std::collections::{BTreeMap, BTreeSet, HashMap};

use plexus_proto::{AttemptRef, JobId, SubtaskState, WorkerId};
use plexus_scheduler::core::{Capacity, Core, CoreConfig, NodeReport, Registration, Report};
use plexus_scheduler::placer::heuristic;
use plexus_scheduler::spec::{self, Format};

use super::engine::{GangScheduler, Start};
use super::workload::{Item, Kind};
use crate::SimError;

/// The name of every gang's task (and so of its gang) in its job file.
const GANG_TASK: &str = "m";

/// Memory each simulated worker offers (tasks ask for none).
const WORKER_MEMORY: u64 = 64 << 30;

fn worker_id(n: usize) -> WorkerId {
    let mut b = [0u8; 16];
    b[8..].copy_from_slice(&(n as u64 + 1).to_be_bytes());
    WorkerId::from_bytes(b)
}

fn job_id(item: usize) -> JobId {
    let mut b = [0u8; 16];
    b[8..].copy_from_slice(&(item as u64 + 1).to_be_bytes());
    JobId::from_bytes(b)
}

fn session(n: usize) -> String {
    format!("sim-{n}")
}

/// The job file of an arrival.
pub fn job_file(item: &Item) -> String {
    let limit = if item.limit_ms > 0 { format!("timeout = \"{}ms\"\n", item.limit_ms) } else { String::new() };
    match item.kind {
        Kind::Gang => format!(
            "name = \"gang-{id}\"\n[[task]]\nname = \"{GANG_TASK}\"\nkind = \"noop\"\ncpu = {cores}\nreplicas = {k}\nmin_members = {k}\ngang_timeout = \"{t}ms\"\n{limit}",
            id = item.id,
            cores = item.cores,
            k = item.members,
            t = item.timeout_ms,
        ),
        Kind::Small => format!(
            "name = \"small-{}\"\n[[task]]\nname = \"t\"\nkind = \"noop\"\ncpu = {}\n{limit}",
            item.id, item.cores
        ),
    }
}

/// The scheduling core under the loop.
pub struct Ours {
    core: Core,
    workers: Vec<WorkerId>,
    index: HashMap<WorkerId, usize>,
    /// Job → item.
    items: HashMap<JobId, usize>,
    /// Running members: (item, member) → (worker index, attempt).
    attempts: HashMap<(usize, u32), (usize, AttemptRef)>,
    /// Gangs not bound yet: item → (job, deadline).
    unbound: BTreeMap<usize, (JobId, u64)>,
    changed: bool,
    anomalies: Vec<String>,
    /// Cores set aside by reservations after the last round, and when that was.
    reserved: u64,
    last_round: u64,
    /// Σ reserved cores × time: cores held for gangs that are not running yet.
    reserved_core_ms: u64,
    /// The most gangs holding reservations at once after a round, and rounds with more than one.
    most_reserving: usize,
    rounds_reserving_many: u64,
}

impl Ours {
    /// A core with `placer` (a heuristic's name) and `workers` workers of `cores` cores,
    /// registered at time 0.
    pub fn new(workers: u32, cores: u32, placer: &str, seed: u64) -> Result<Ours, SimError> {
        let p = heuristic(placer, seed).ok_or_else(|| SimError::GangWorkload(format!("unknown placer {placer:?}")))?;
        let mut core = Core::new(CoreConfig::default(), p);
        let ids: Vec<WorkerId> = (0..workers as usize).map(worker_id).collect();
        for (n, &id) in ids.iter().enumerate() {
            core.register(
                Registration {
                    worker: id,
                    session: session(n),
                    peer_addr: format!("http://sim-{n}:7000"),
                    capacity: Capacity {
                        cpus: cores,
                        memory: WORKER_MEMORY,
                        gpus: vec![],
                        rails: vec![],
                        cache_bytes: 0,
                        hostname: format!("sim-{n}"),
                        topology: Default::default(),
                        max_attempts: 0,
                    },
                    state: NodeReport::default(),
                    known: vec![],
                },
                0,
            );
        }
        let _ = core.take_outbox();
        let index = ids.iter().enumerate().map(|(n, &w)| (w, n)).collect();
        Ok(Ours {
            core,
            workers: ids,
            index,
            items: HashMap::new(),
            attempts: HashMap::new(),
            unbound: BTreeMap::new(),
            changed: false,
            anomalies: Vec::new(),
            reserved: 0,
            last_round: 0,
            reserved_core_ms: 0,
            most_reserving: 0,
            rounds_reserving_many: 0,
        })
    }

    /// The core, for tests that look at its records.
    pub fn core(&self) -> &Core {
        &self.core
    }

    /// The job an item was submitted as.
    pub fn job_of(item: usize) -> JobId {
        job_id(item)
    }
}

impl GangScheduler for Ours {
    fn name(&self) -> &'static str {
        "ours"
    }

    fn submit(&mut self, item: &Item, now: u64) -> Result<(), SimError> {
        let src = job_file(item);
        let spec = spec::parse(&src, Format::Toml, "sim.toml")
            .map_err(|e| SimError::Refused { item: item.id, why: e.to_string() })?;
        let id = job_id(item.id);
        self.core.submit(id, spec, now).map_err(|e| SimError::Refused { item: item.id, why: e.to_string() })?;
        self.items.insert(id, item.id);
        if item.kind == Kind::Gang {
            self.unbound.insert(item.id, (id, item.timeout_ms));
        }
        Ok(())
    }

    fn finished(&mut self, item: &Item, member: u32, now: u64) {
        let Some((w, attempt)) = self.attempts.remove(&(item.id, member)) else {
            self.anomalies.push(format!("item {} member {member} finished without an attempt of the core", item.id));
            return;
        };
        let report = Report {
            attempt: Some(attempt),
            state: Some(SubtaskState::Succeeded),
            finished_at: now,
            ..Default::default()
        };
        if !self.core.report(self.workers[w], &session(w), vec![report], now) {
            self.anomalies.push(format!("the core refused worker {w}'s report at {now} ms"));
        }
    }

    fn round(&mut self, now: u64) -> Vec<Start> {
        // What `submit` and `report` recorded is not this round's doing.
        let _ = self.core.take_outbox();
        for (n, &w) in self.workers.iter().enumerate() {
            if !self.core.heartbeat(w, &session(n), NodeReport::default(), now) {
                self.anomalies.push(format!("the core refused worker {n}'s heartbeat at {now} ms"));
            }
        }
        self.core.tick(now);
        self.core.schedule(now);
        let out = self.core.take_outbox();
        self.changed = !out.is_empty();
        if !out.cancels.is_empty() {
            self.anomalies.push(format!("{} cancels at {now} ms", out.cancels.len()));
        }
        let mut starts = Vec::with_capacity(out.assignments.len());
        for (w, a) in out.assignments {
            let (Some(&item), Some(&worker)) = (self.items.get(&a.attempt.job), self.index.get(&w)) else {
                self.anomalies.push(format!("an assignment of an unknown job or worker: {}", a.attempt));
                continue;
            };
            self.unbound.remove(&item);
            starts.push(Start { item, member: a.attempt.rank, worker });
            self.attempts.insert((item, a.attempt.rank), (worker, a.attempt));
        }
        // The core's own books: never more promised than a worker has; and what reservations
        // hold.
        self.reserved_core_ms += self.reserved * (now - self.last_round);
        self.last_round = now;
        self.reserved = 0;
        let mut reserving: BTreeSet<JobId> = BTreeSet::new();
        for w in self.core.workers() {
            if w.allocated().cpu > w.record().capacity.cpus as f64 + 1e-9 {
                self.anomalies.push(format!(
                    "worker {} has {} cores allocated of {} at {now} ms",
                    w.record().id,
                    w.allocated().cpu,
                    w.record().capacity.cpus
                ));
            }
            for (job, idx) in w.reserved() {
                reserving.insert(*job);
                if let Some(t) = self.core.job(*job).and_then(|j| j.spec().task(&j.subtasks()[*idx as usize].task)) {
                    self.reserved += t.resources.cpu.round() as u64;
                }
            }
        }
        self.most_reserving = self.most_reserving.max(reserving.len());
        self.rounds_reserving_many += u64::from(reserving.len() > 1);
        starts
    }

    fn changed(&self) -> bool {
        self.changed
    }

    fn next_timer(&self, now: u64) -> Option<u64> {
        let mut next: Option<u64> = None;
        for (job, timeout) in self.unbound.values() {
            let Some(st) = self.core.job(*job).and_then(|j| j.record().gangs.get(GANG_TASK)) else { continue };
            let deadline = (st.reserving_since > 0).then(|| st.reserving_since + timeout);
            for t in deadline.into_iter().chain(Some(st.retry_at)) {
                if t > now {
                    next = Some(next.map_or(t, |n| n.min(t)));
                }
            }
        }
        next
    }

    fn rollbacks(&self) -> u64 {
        self.core.jobs().filter_map(|j| j.record().gangs.get(GANG_TASK)).map(|g| u64::from(g.rollbacks)).sum()
    }

    fn anomalies(&self) -> Vec<String> {
        self.anomalies.clone()
    }

    fn reserved_core_ms(&self) -> u64 {
        self.reserved_core_ms
    }

    fn notes(&self) -> Vec<String> {
        vec![format!(
            "gangs holding reservations at once: at most {}; rounds that ended with more than one: {}",
            self.most_reserving, self.rounds_reserving_many
        )]
    }
}
