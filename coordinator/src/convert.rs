//! The coordinator's one place for proto ↔ domain conversion: incoming worker messages become
//! core inputs (checked, never trusted), and the engine's views ([`crate::view`]) become
//! outgoing messages.

use plexus_proto::convert::{self as pc, ConvertError};
use plexus_proto::{AttemptRef, Digest, ObjectId, SubtaskState, WorkerId, pb};

use plexus_proto::rules;
use plexus_proto::topology::{self as topo, GpuLink, LinkLevel};
use plexus_scheduler::core::estimates::WorkerSpeed;
use plexus_scheduler::core::messages::GpuUsage;
use plexus_scheduler::core::{
    Assignment, BadCopy, Capacity, GangPhase, GpuRecord, NodeReport, PlacementRecord, RailCounter, Registration, Report,
};
use plexus_scheduler::gpu::topology::NodeTopology;
use plexus_scheduler::spec::Work;

use crate::view::{JobView, QueueView, WorkBatch, WorkerList, WorkerPage, WorkerSummary, WorkerView};

/// The largest tail of a log the coordinator keeps per stream.
pub const LOG_TAIL_MAX: usize = 64 * 1024;

/// A worker's reports of copies that did not match their digests (at most one per input of an
/// attempt, so a few; more are refused).
fn bad_copies(list: &[pb::BadCopy]) -> Result<Vec<BadCopy>, ConvertError> {
    if list.len() > 4096 {
        return Err(ConvertError::Invalid {
            field: "bad_copies",
            reason: format!("{} entries; at most 4096", list.len()),
        });
    }
    list.iter()
        .map(|b| {
            Ok(BadCopy {
                object: pc::object_id("bad_copies.object_id", &b.object_id)?,
                holder: pc::worker_id("bad_copies.worker_id", &b.worker_id)?,
            })
        })
        .collect()
}

fn objects(list: &[pb::ObjectInfo]) -> Result<Vec<(ObjectId, u64)>, ConvertError> {
    list.iter().map(|o| Ok((pc::object_id("object_id", &o.object_id)?, o.size))).collect()
}

/// A fraction in [0, 1]; rounding may put a busy device a hair above 1, nothing else.
fn fraction(field: &'static str, v: f64) -> Result<f64, ConvertError> {
    if !(v.is_finite() && (0.0..=1.0 + 1e-6).contains(&v)) {
        return Err(ConvertError::Invalid { field, reason: format!("{v} is not a fraction in [0, 1]") });
    }
    Ok(v.clamp(0.0, 1.0))
}

/// How a worker confines its subtasks (`cgroup-v2`, `cgroup-v1`, `process-group`; empty from a
/// worker that does not say): a short name, shown in tables, so nothing else is accepted.
fn isolation(field: &'static str, s: &str) -> Result<String, ConvertError> {
    if s.len() > 32 || !s.chars().all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-') {
        return Err(ConvertError::Invalid {
            field,
            reason: "must be at most 32 characters of a-z, 0-9 and '-'".into(),
        });
    }
    Ok(s.to_string())
}

pub fn node_report(s: Option<&pb::NodeState>) -> Result<NodeReport, ConvertError> {
    let Some(s) = s else { return Ok(NodeReport::default()) };
    let util = fraction("state.cpu_utilisation", s.cpu_utilisation)?;
    if s.gpus.len() > rules::MAX_NODE_GPUS {
        return Err(ConvertError::Invalid {
            field: "state.gpus",
            reason: format!("{} devices; at most {}", s.gpus.len(), rules::MAX_NODE_GPUS),
        });
    }
    let gpus = s
        .gpus
        .iter()
        .map(|g| {
            if g.memory_used > rules::MAX_NODE_BYTES {
                return Err(ConvertError::Invalid {
                    field: "state.gpus.memory_used",
                    reason: format!("{} bytes on device {}", g.memory_used, g.index),
                });
            }
            Ok(GpuUsage {
                index: g.index,
                utilisation: fraction("state.gpus.utilisation", g.utilisation)?,
                memory_used: g.memory_used,
            })
        })
        .collect::<Result<_, _>>()?;
    Ok(NodeReport {
        cpu_utilisation: util,
        memory_free: s.memory_free,
        running: s.running.iter().map(AttemptRef::try_from).collect::<Result<_, _>>()?,
        objects: objects(&s.objects)?,
        cache_used: s.cache_used,
        rails: s
            .rails
            .iter()
            .take(rules::MAX_RAILS)
            .map(|r| RailCounter {
                addr: r.addr.chars().take(rules::MAX_RAIL_ADDR_LEN).collect(),
                bytes_sent: r.bytes_sent,
                bytes_received: r.bytes_received,
                failures: r.failures,
            })
            .collect(),
        gpus,
        isolation: isolation("state.isolation", &s.isolation)?,
        rails_refused: s.rails_refused,
    })
}

/// The labels and GPU topology a worker registers (issue 16), checked: at most one link per pair
/// of two distinct offered devices, each with a link level other than `X`; labels by the shared
/// label rules; NUMA nodes of offered devices only.
fn node_topology(
    cap: &pb::NodeCapacity,
    offered: &std::collections::BTreeSet<u32>,
) -> Result<NodeTopology, ConvertError> {
    let invalid = |field: &'static str, reason: String| ConvertError::Invalid { field, reason };
    let pairs = offered.len() * offered.len().saturating_sub(1) / 2;
    if cap.gpu_links.len() > pairs {
        return Err(invalid(
            "capacity.gpu_links",
            format!("{} links for {} devices; at most {pairs}", cap.gpu_links.len(), offered.len()),
        ));
    }
    let mut seen = std::collections::BTreeSet::new();
    let mut gpu_links = Vec::with_capacity(cap.gpu_links.len());
    for l in &cap.gpu_links {
        let level: LinkLevel =
            l.level.parse().map_err(|e: topo::TopoError| invalid("capacity.gpu_links.level", e.to_string()))?;
        if l.a == l.b || level == LinkLevel::SameGpu {
            return Err(invalid(
                "capacity.gpu_links",
                format!("GPU{}/GPU{} {level}: a link joins two distinct devices", l.a, l.b),
            ));
        }
        if !offered.contains(&l.a) || !offered.contains(&l.b) {
            return Err(invalid("capacity.gpu_links", format!("GPU{}/GPU{}: not a pair of offered devices", l.a, l.b)));
        }
        let (a, b) = (l.a.min(l.b), l.a.max(l.b));
        if !seen.insert((a, b)) {
            return Err(invalid("capacity.gpu_links", format!("GPU{a}/GPU{b} is listed twice")));
        }
        gpu_links.push(GpuLink { a, b, level });
    }
    gpu_links.sort();
    if cap.labels.len() > topo::MAX_LABELS {
        return Err(invalid("capacity.labels", format!("{} labels; at most {}", cap.labels.len(), topo::MAX_LABELS)));
    }
    let mut labels = std::collections::BTreeMap::new();
    for (k, v) in &cap.labels {
        topo::check_label(k, v).map_err(|e| invalid("capacity.labels", e.to_string()))?;
        labels.insert(k.clone(), v.clone());
    }
    let mut gpu_numa = std::collections::BTreeMap::new();
    for (&device, &node) in &cap.gpu_numa {
        if !offered.contains(&device) || node > topo::MAX_NUMA_NODE {
            return Err(invalid(
                "capacity.gpu_numa",
                format!(
                    "GPU{device} on NUMA node {node}: not an offered device, or a node past {}",
                    topo::MAX_NUMA_NODE
                ),
            ));
        }
        gpu_numa.insert(device, node);
    }
    Ok(NodeTopology { labels, gpu_links, gpu_numa })
}

pub fn registration(r: &pb::RegisterRequest) -> Result<Registration, ConvertError> {
    let cap = r.capacity.as_ref().ok_or(ConvertError::Missing("capacity"))?;
    if r.session.is_empty() || r.session.len() > 128 {
        return Err(ConvertError::Invalid { field: "session", reason: "must be 1-128 characters".into() });
    }
    if !(r.peer_addr.starts_with("http://") || r.peer_addr.starts_with("https://")) {
        return Err(ConvertError::Invalid {
            field: "peer_addr",
            reason: format!("{:?} is not an http(s) URL", r.peer_addr),
        });
    }
    let invalid = |field: &'static str, reason: String| Err(ConvertError::Invalid { field, reason });
    if cap.cpus > rules::MAX_NODE_CPUS {
        return invalid(
            "capacity.cpus",
            format!("{} is more than any node has (at most {})", cap.cpus, rules::MAX_NODE_CPUS),
        );
    }
    for (field, v) in [("capacity.memory", cap.memory), ("capacity.cache_bytes", cap.cache_bytes)] {
        if v > rules::MAX_NODE_BYTES {
            return invalid(
                field,
                format!("{v} bytes is more than any node has (at most {} bytes)", rules::MAX_NODE_BYTES),
            );
        }
    }
    if cap.gpus.len() > rules::MAX_NODE_GPUS {
        return invalid("capacity.gpus", format!("{} devices; at most {}", cap.gpus.len(), rules::MAX_NODE_GPUS));
    }
    let mut indices = std::collections::BTreeSet::new();
    for g in &cap.gpus {
        if !indices.insert(g.index) {
            return invalid("capacity.gpus.index", format!("device {} is listed twice", g.index));
        }
        if g.memory > rules::MAX_NODE_BYTES || g.name.len() > rules::MAX_NAME_LEN {
            return invalid("capacity.gpus", format!("device {}: memory or name out of bounds", g.index));
        }
    }
    if cap.hostname.len() > rules::MAX_NAME_LEN || cap.hostname.chars().any(char::is_control) {
        return invalid(
            "capacity.hostname",
            format!("must be at most {} characters, none of them control characters", rules::MAX_NAME_LEN),
        );
    }
    if !rules::rails_within_limits(&cap.rails) {
        return Err(ConvertError::Invalid {
            field: "capacity.rails",
            reason: format!(
                "at most {} rail addresses of at most {} characters",
                rules::MAX_RAILS,
                rules::MAX_RAIL_ADDR_LEN
            ),
        });
    }
    let declared = isolation("capacity.isolation", &cap.isolation)?;
    let topology = node_topology(cap, &indices)?;
    let mut state = node_report(r.state.as_ref())?;
    if !declared.is_empty() {
        state.isolation = declared;
    }
    Ok(Registration {
        worker: pc::worker_id("worker_id", &r.worker_id)?,
        session: r.session.clone(),
        peer_addr: r.peer_addr.clone(),
        capacity: Capacity {
            cpus: cap.cpus,
            memory: cap.memory,
            gpus: cap
                .gpus
                .iter()
                .map(|g| GpuRecord { index: g.index, name: g.name.clone(), memory: g.memory })
                .collect(),
            rails: cap.rails.clone(),
            cache_bytes: cap.cache_bytes,
            hostname: cap.hostname.clone(),
            topology,
            max_attempts: cap.max_attempts,
        },
        state,
        known: r.known.iter().map(AttemptRef::try_from).collect::<Result<_, _>>()?,
    })
}

fn tail(b: &[u8]) -> String {
    let start = b.len().saturating_sub(LOG_TAIL_MAX);
    String::from_utf8_lossy(&b[start..]).into_owned()
}

pub fn report(r: &pb::TaskReport) -> Result<Report, ConvertError> {
    let state = pc::subtask_state("state", r.state)?;
    // ASSIGNED only says what the attempt does before it runs (`stage`).
    let staged = state == SubtaskState::Assigned && !r.stage.is_empty();
    if !staged
        && !matches!(
            state,
            SubtaskState::Running | SubtaskState::Succeeded | SubtaskState::Failed | SubtaskState::Cancelled
        )
    {
        return Err(ConvertError::Invalid {
            field: "state",
            reason: format!("a worker cannot report {}", state.as_str()),
        });
    }
    let attempt = pc::attempt("attempt", r.attempt.as_ref())?;
    let outputs = objects(&r.outputs)?;
    if let Some((o, _)) =
        outputs.iter().find(|(o, _)| o.job != attempt.job || o.task != attempt.task || o.rank != attempt.rank)
    {
        return Err(ConvertError::Invalid {
            field: "outputs",
            reason: format!("object {o} does not belong to attempt {attempt}"),
        });
    }
    let mut digests = std::collections::BTreeMap::new();
    for (i, o) in r.outputs.iter().enumerate() {
        if let Some(d) = Digest::from_field("outputs.digest", &o.digest)? {
            digests.insert(outputs[i].0.name.clone(), d);
        }
    }
    let checkpoint = checkpoint(r.checkpoint.as_ref(), &attempt)?;
    Ok(Report {
        attempt: Some(attempt),
        state: Some(state),
        exit_code: r.exit_code,
        error: r.error.chars().take(4096).collect(),
        started_at: r.started_at,
        finished_at: r.finished_at,
        fetch_ms: r.fetch_ms,
        fetched_bytes: r.fetched_bytes,
        evicted_bytes: r.evicted_bytes,
        outputs,
        digests,
        bad_copies: bad_copies(&r.bad_copies)?,
        stdout_tail: tail(&r.stdout_tail),
        stderr_tail: tail(&r.stderr_tail),
        // A figure from the network: anything but a plausible time is no figure.
        iter_ms: if r.iter_ms.is_finite() && r.iter_ms > 0.0 && r.iter_ms < 86_400_000.0 { r.iter_ms } else { 0.0 },
        unfetched_input: if r.unfetched_input.is_empty() {
            None
        } else {
            Some(pc::object_id("unfetched_input", &r.unfetched_input)?)
        },
        checkpoint,
        stage: r.stage.chars().take(200).collect(),
    })
}

/// A report's kept checkpoint: an object of the reporting attempt's own subtask (the core checks
/// that it is that attempt's kept copy of the task's `checkpoint` output).
fn checkpoint(
    c: Option<&pb::ObjectInfo>,
    attempt: &AttemptRef,
) -> Result<Option<(ObjectId, u64, Option<Digest>)>, ConvertError> {
    let Some(c) = c else { return Ok(None) };
    let o = pc::object_id("checkpoint.object_id", &c.object_id)?;
    if o.job != attempt.job || o.task != attempt.task || o.rank != attempt.rank {
        return Err(ConvertError::Invalid {
            field: "checkpoint",
            reason: format!("object {o} does not belong to attempt {attempt}"),
        });
    }
    Ok(Some((o, c.size, Digest::from_field("checkpoint.digest", &c.digest)?)))
}

pub fn assignment(a: &Assignment) -> pb::Assignment {
    let (command, kind) = match &a.work {
        Work::Command(argv) => (argv.clone(), String::new()),
        Work::Kind(k) => (Vec::new(), k.clone()),
    };
    pb::Assignment {
        attempt: Some((&a.attempt).into()),
        replicas: a.replicas,
        command,
        kind,
        resources: Some((&a.resources).into()),
        timeout_ms: a.timeout_ms,
        inputs: a
            .inputs
            .iter()
            .map(|i| pb::InputObject {
                object_id: i.object.to_string(),
                task: i.object.task.clone(),
                rank: i.object.rank,
                name: i.object.name.clone(),
                size: i.size,
                holders: i.holders.iter().map(|h| h.peer_addr.clone()).collect(),
                sources: i
                    .holders
                    .iter()
                    .map(|h| pb::Holder {
                        peer_addr: h.peer_addr.clone(),
                        rails: h.rails.clone(),
                        worker_id: h.worker.to_string(),
                    })
                    .collect(),
                digest: i.digest.map(|d| d.to_vec()).unwrap_or_default(),
            })
            .collect(),
        outputs: a.outputs.clone(),
        checkpoint: a.checkpoint.clone().unwrap_or_default(),
        resume: a.resume.as_ref().map(ToString::to_string).unwrap_or_default(),
        working_dir: a.working_dir.map(|(d, _)| d.to_vec()).unwrap_or_default(),
        working_dir_size: a.working_dir.map(|(_, n)| n).unwrap_or_default(),
        python: a.python.clone(),
        image: a.image.clone().unwrap_or_default(),
        env: a.env.iter().map(|(k, v)| (k.clone(), v.clone())).collect(),
        collective: a.collective.as_ref().map(|c| pb::Collective {
            members: c.members.iter().map(|rails| pb::Member { rails: rails.clone() }).collect(),
            tag: c.tag,
            dtype: c.spec.dtype.to_string(),
            op: c.spec.op.to_string(),
            root: c.spec.root,
            algorithm: c.spec.algorithm.to_string(),
            schedule: c.spec.exchange.as_ref().map(|e| e.schedule.to_string()).unwrap_or_default(),
            split: c.spec.exchange.as_ref().map(|e| e.split.to_string()).unwrap_or_default(),
            counts: c.spec.exchange.as_ref().map(|e| e.counts.clone()).unwrap_or_default(),
            redistribute: c.spec.exchange.as_ref().and_then(|e| e.redistribute).map(|r| pb::Redistribution {
                senders: r.senders,
                from_block: r.from_block,
                receivers: r.receivers,
                to_block: r.to_block,
                remap: r.remap.map(|m| pb::AffineMap {
                    a1: m.a1,
                    b1: m.b1,
                    a2: m.a2,
                    b2: m.b2,
                    iterations: m.iterations,
                    len: m.len,
                }),
            }),
        }),
        gpus: a.gpus.clone(),
        params: a.params.iter().cloned().collect(),
    }
}

/// A dry run's plan (`plexus submit --dry-run`).
pub fn dry_run(d: &plexus_scheduler::core::dry_run::DryRun) -> pb::DryRun {
    pb::DryRun {
        queue: d.queue.clone(),
        priority: d.priority,
        tasks: d
            .tasks
            .iter()
            .map(|t| pb::TaskPlan {
                task: t.task.clone(),
                replicas: t.replicas,
                resources: Some((&t.resources).into()),
                start_now: t.start_now,
                workers: t.workers.iter().map(ToString::to_string).collect(),
                waits: t.waits.clone(),
            })
            .collect(),
        ahead: d.ahead,
        ahead_jobs: d.ahead_jobs,
        cores: d.cores,
        cluster_cores: d.cluster_cores,
    }
}

pub fn job_status(job: &JobView) -> pb::JobStatus {
    let groups = job
        .groups
        .iter()
        .map(|g| {
            let at = |s: SubtaskState| g.count(s);
            pb::TaskGroupStatus {
                task: g.task.clone(),
                replicas: g.replicas,
                waiting: at(SubtaskState::Waiting),
                ready: at(SubtaskState::Ready),
                assigned: at(SubtaskState::Assigned),
                running: at(SubtaskState::Running),
                succeeded: at(SubtaskState::Succeeded),
                failed: at(SubtaskState::Failed),
                cancelled: at(SubtaskState::Cancelled),
                waiting_reason: g.waiting_reason.clone(),
                failed_attempts: g.failed_attempts,
                after: g.after.clone(),
            }
        })
        .collect();
    let subtasks = job.subtasks.iter().map(|s| subtask_status(job.id, s)).collect();
    pb::JobStatus {
        phase: job.phase.to_string(),
        phase_reason: job.phase_reason.clone(),
        started_at: job.started_at,
        failed_task: job.failed.as_ref().map(|f| f.0.clone()).unwrap_or_default(),
        failed_rank: job.failed.as_ref().map_or(0, |f| f.1),
        failed_stderr: job.failed.as_ref().map(|f| f.2.clone()).unwrap_or_default(),
        job_id: job.id.to_string(),
        name: job.name.clone(),
        state: pb::JobState::from(job.state) as i32,
        submitted_at: job.submitted_at,
        finished_at: job.finished_at,
        error: job.error.clone(),
        groups,
        subtasks,
        total_subtasks: job.total_subtasks,
        gangs: job
            .gangs
            .iter()
            .cloned()
            .map(|g| {
                let (deadline, bound_at) = match g.phase {
                    GangPhase::Reserving { deadline } => (deadline, 0),
                    GangPhase::Bound { at } => (0, at),
                    _ => (0, 0),
                };
                let planned_start = match g.phase {
                    GangPhase::Planned { start } => start,
                    _ => 0,
                };
                pb::GangStatus {
                    name: g.name,
                    tasks: g.tasks,
                    min_members: g.min_members,
                    members: g.members,
                    reserved: g.reserved,
                    phase: g.phase.as_str().to_string(),
                    planned_start,
                    deadline,
                    bound_at,
                    rolled_back_at: g.state.rolled_back_at,
                    retry_at: g.state.retry_at,
                    rollbacks: g.state.rollbacks,
                    reason: g.state.reason,
                    timeout_ms: g.timeout_ms,
                }
            })
            .collect(),
        priority: job.priority,
        queue: job.queue.clone(),
    }
}

/// One subtask of job `job` as `plexus status --subtasks` shows it.
fn subtask_status(job: plexus_proto::JobId, s: &crate::view::SubtaskView) -> pb::SubtaskStatus {
    pb::SubtaskStatus {
        task: s.task.clone(),
        rank: s.rank,
        state: pb::SubtaskState::from(s.state) as i32,
        attempt: s.attempt,
        failures: s.failures,
        worker_id: s.worker.map(|w| w.to_string()).unwrap_or_default(),
        ready_at: s.ready_at,
        assigned_at: s.assigned_at,
        started_at: s.started_at,
        finished_at: s.finished_at,
        exit_code: s.exit_code,
        error: s.error.clone(),
        fetch_ms: s.fetch_ms,
        fetched_bytes: s.fetched_bytes,
        evicted_bytes: s.evicted_bytes,
        outputs: s
            .outputs
            .iter()
            .map(|(n, size)| pb::ObjectInfo {
                object_id: format!("{}/{}/{}/{}", job, s.task, s.rank, n),
                size: *size,
                digest: s.digests.get(n).map(|d| d.to_vec()).unwrap_or_default(),
            })
            .collect(),
        failed_attempts: s
            .failed_attempts
            .iter()
            .map(|f| pb::AttemptFailure {
                attempt: f.attempt,
                worker_id: f.worker.map(|w| w.to_string()).unwrap_or_default(),
                exit_code: f.exit_code,
                error: f.error.clone(),
                finished_at: f.finished_at,
            })
            .collect(),
        not_before: s.not_before,
        reruns: s.reruns,
        unfetched_requeues: s.unfetched_requeues,
        params: s.params.iter().cloned().collect(),
        stage: s.stage.clone(),
    }
}

fn capacity(c: &Capacity) -> pb::NodeCapacity {
    pb::NodeCapacity {
        cpus: c.cpus,
        memory: c.memory,
        gpus: c.gpus.iter().map(|g| pb::GpuInfo { index: g.index, name: g.name.clone(), memory: g.memory }).collect(),
        rails: c.rails.clone(),
        cache_bytes: c.cache_bytes,
        hostname: c.hostname.clone(),
        isolation: String::new(),
        gpu_links: c
            .topology
            .gpu_links
            .iter()
            .map(|l| pb::GpuLink { a: l.a, b: l.b, level: l.level.to_string() })
            .collect(),
        labels: c.topology.labels.iter().map(|(k, v)| (k.clone(), v.clone())).collect(),
        gpu_numa: c.topology.gpu_numa.iter().map(|(&d, &n)| (d, n)).collect(),
        max_attempts: c.max_attempts,
    }
}

/// A worker for `plexus workers`, with what was measured of its speed (none: nothing yet).
/// The most workers one `ListWorkers` page holds: ~750 KiB, well within a gRPC message.
pub const MAX_WORKERS_PAGE: u32 = 5_000;

/// The page a `ListWorkers` request asks for: `page_size` workers (0: every one, or none with
/// `summary_only`; over [`MAX_WORKERS_PAGE`]: that many) after the worker `page_token` names.
pub fn worker_page(r: &pb::ListWorkersRequest) -> Result<WorkerPage, String> {
    let after = match r.page_token.as_str() {
        "" => None,
        t => Some(t.parse::<WorkerId>().map_err(|e| format!("page_token {t:?} is not a worker id: {e}"))?),
    };
    let limit = match (r.page_size, r.summary_only) {
        (_, true) => Some(0),
        (0, false) => None,
        (n, false) => Some(n.min(MAX_WORKERS_PAGE) as usize),
    };
    Ok(WorkerPage { after, limit, only: None })
}

/// A page of workers as `ListWorkers` answers it.
pub fn workers_response(
    list: &WorkerList,
    halt: Option<plexus_scheduler::core::EvictionHalt>,
) -> pb::ListWorkersResponse {
    pb::ListWorkersResponse {
        workers: list.workers.iter().map(worker_info).collect(),
        evictions_halted: halt.map(eviction_halt),
        next_page_token: list.next.map(|id| id.to_string()).unwrap_or_default(),
        summary: Some(workers_summary(&list.summary)),
    }
}

pub fn workers_summary(s: &WorkerSummary) -> pb::WorkersSummary {
    pb::WorkersSummary {
        total: s.total,
        alive: s.alive,
        draining: s.draining,
        assigned: s.assigned,
        cpu_held: s.cpu.0,
        cpu_offered: s.cpu.1,
        memory_held: s.memory.0,
        memory_offered: s.memory.1,
        gpus_held: s.gpus.0,
        gpus_offered: s.gpus.1,
        rail_bytes_sent: s.rail_bytes_sent,
    }
}

pub fn worker_info(w: &WorkerView) -> pb::WorkerInfo {
    pb::WorkerInfo {
        worker_id: w.id.to_string(),
        peer_addr: w.peer_addr.clone(),
        // The stored capacity has no isolation: the latest node state carries it.
        capacity: Some(pb::NodeCapacity { isolation: w.node.isolation.clone(), ..capacity(&w.capacity) }),
        state: Some(pb::NodeState {
            cpu_utilisation: w.node.cpu_utilisation,
            memory_free: w.node.memory_free,
            running: w.node.running.iter().map(pb::AttemptRef::from).collect(),
            objects: w
                .objects
                .iter()
                .map(|(o, s)| pb::ObjectInfo { object_id: o.to_string(), size: *s, digest: Vec::new() })
                .collect(),
            cache_used: w.node.cache_used,
            rails: w
                .node
                .rails
                .iter()
                .map(|r| pb::RailCounters {
                    addr: r.addr.clone(),
                    bytes_sent: r.bytes_sent,
                    bytes_received: r.bytes_received,
                    failures: r.failures,
                })
                .collect(),
            gpus: w
                .node
                .gpus
                .iter()
                .map(|g| pb::GpuState { index: g.index, utilisation: g.utilisation, memory_used: g.memory_used })
                .collect(),
            isolation: w.node.isolation.clone(),
            rails_refused: w.node.rails_refused,
        }),
        alive: w.alive,
        last_heartbeat: w.last_heartbeat,
        allocated: Some((&w.allocated).into()),
        assigned: w.assigned,
        speed: w.speed.as_ref().map(worker_speed),
        draining: w.draining,
    }
}

/// A measured speed; "not measured" is 0 on the wire.
pub fn worker_speed(s: &WorkerSpeed) -> pb::WorkerSpeed {
    pb::WorkerSpeed {
        ms_per_gflop: s.ms_per_gflop.unwrap_or(0.0),
        flop_samples: s.flop_samples,
        signatures: s.signatures,
        run_samples: s.run_samples,
        relative_speed: s.relative_speed.unwrap_or(0.0),
        fetch_pairs: s.fetch_pairs,
        fetch_bytes_per_ms: s.fetch_bytes_per_ms.unwrap_or(0.0),
        fetch_latency_ms: s.fetch_latency_ms.unwrap_or(0.0),
        fetch_samples: s.fetch_samples,
    }
}

pub fn explanation(p: &PlacementRecord) -> pb::ExplainPlacementResponse {
    pb::ExplainPlacementResponse {
        placer: p.placer.clone(),
        attempt: p.attempt,
        chosen_worker: p.chosen.to_string(),
        exploratory: p.exploratory,
        candidates: p
            .candidates
            .iter()
            .map(|c| pb::CandidateScore {
                worker_id: c.worker.to_string(),
                feasible: c.feasible,
                score: c.score.unwrap_or(f64::NAN),
                features: c.features.iter().map(|(n, v)| pb::Feature { name: n.to_string(), value: v }).collect(),
                note: c.note.clone(),
            })
            .collect(),
        decided_at: p.decided_at,
        reason: p.reason.clone(),
        collective: String::new(),
        learner: String::new(),
        omitted: p.omitted,
    }
}

pub fn queue_info(q: &QueueView) -> pb::QueueInfo {
    pb::QueueInfo { name: q.name.clone(), share: q.share, used_cpu: q.used_cpu }
}

pub fn queue_list(queues: &[QueueView]) -> pb::QueueList {
    pb::QueueList { queues: queues.iter().map(queue_info).collect() }
}

/// One worker's new work and cancellations, as its assignment stream carries them.
pub fn work_batch(b: &WorkBatch) -> pb::AssignmentBatch {
    pb::AssignmentBatch {
        assign: b.assign.iter().map(assignment).collect(),
        cancel: b.cancel.iter().map(Into::into).collect(),
    }
}

pub fn token_info(t: &crate::auth::TokenRecord) -> pb::TokenInfo {
    pb::TokenInfo {
        id: t.id.clone(),
        name: t.name.clone(),
        scope: t.scope.clone(),
        created_ms: t.created_ms,
        expires_ms: t.expires_ms,
        revoked_ms: t.revoked_ms,
    }
}

pub fn coordinator_info(c: &crate::ha::Coordinator) -> pb::CoordinatorInfo {
    pb::CoordinatorInfo { id: c.id.clone(), url: c.url.clone(), leader: c.leader, started_ms: c.started_ms, me: c.me }
}

/// Evictions halted, as `ListWorkers` says it.
pub fn eviction_halt(h: plexus_scheduler::core::EvictionHalt) -> pb::EvictionHalt {
    pb::EvictionHalt {
        since_ms: h.since,
        silent: u32::try_from(h.silent).unwrap_or(u32::MAX),
        alive: u32::try_from(h.alive).unwrap_or(u32::MAX),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use plexus_proto::JobId;

    #[test]
    fn a_worker_page_is_bounded_and_its_token_checked() {
        let page = |page_size, page_token: &str, summary_only| {
            worker_page(&pb::ListWorkersRequest { page_size, page_token: page_token.into(), summary_only })
        };
        assert_eq!(page(0, "", false).unwrap(), WorkerPage::ALL);
        assert_eq!(page(7, "", true).unwrap(), WorkerPage::SUMMARY);
        assert_eq!(page(u32::MAX, "", false).unwrap().limit, Some(MAX_WORKERS_PAGE as usize));
        let id = WorkerId::random();
        assert_eq!(
            page(10, &id.to_string(), false).unwrap(),
            WorkerPage { after: Some(id), limit: Some(10), only: None }
        );
        let e = page(10, "job-1", false).unwrap_err();
        assert!(e.starts_with("page_token \"job-1\" is not a worker id"), "{e}");
    }

    #[test]
    fn reports_are_checked() {
        let job = JobId::random();
        let a = pb::AttemptRef { job_id: job.to_string(), task: "t".into(), rank: 0, attempt: 1 };
        let ok = pb::TaskReport {
            attempt: Some(a.clone()),
            state: pb::SubtaskState::Succeeded as i32,
            ..Default::default()
        };
        assert!(report(&ok).is_ok());
        let waiting = pb::TaskReport { state: pb::SubtaskState::Waiting as i32, ..ok.clone() };
        assert!(report(&waiting).unwrap_err().to_string().contains("cannot report waiting"));
        let foreign = pb::TaskReport {
            outputs: vec![pb::ObjectInfo { object_id: format!("{job}/other/0/x"), size: 1, ..Default::default() }],
            ..ok.clone()
        };
        assert!(report(&foreign).unwrap_err().to_string().contains("does not belong"));
        let no_attempt = pb::TaskReport { attempt: None, ..ok };
        assert!(report(&no_attempt).unwrap_err().to_string().contains("attempt is missing"));
    }

    #[test]
    fn registrations_are_checked() {
        let good = pb::RegisterRequest {
            worker_id: plexus_proto::WorkerId::random().to_string(),
            session: "s".into(),
            peer_addr: "http://127.0.0.1:1".into(),
            capacity: Some(pb::NodeCapacity { cpus: 2, ..Default::default() }),
            ..Default::default()
        };
        assert!(registration(&good).is_ok());
        assert!(registration(&pb::RegisterRequest { capacity: None, ..good.clone() }).is_err());
        assert!(registration(&pb::RegisterRequest { peer_addr: "127.0.0.1:1".into(), ..good.clone() }).is_err());
        assert!(registration(&pb::RegisterRequest { worker_id: "job-1".into(), ..good }).is_err());
    }

    #[test]
    fn absurd_capacities_and_utilisations_are_refused_naming_the_field() {
        let good = pb::RegisterRequest {
            worker_id: plexus_proto::WorkerId::random().to_string(),
            session: "s".into(),
            peer_addr: "http://127.0.0.1:1".into(),
            capacity: Some(pb::NodeCapacity { cpus: 8, memory: 1 << 34, cache_bytes: 1 << 30, ..Default::default() }),
            ..Default::default()
        };
        assert!(registration(&good).is_ok());
        let with = |f: &dyn Fn(&mut pb::RegisterRequest)| {
            let mut r = good.clone();
            f(&mut r);
            registration(&r).unwrap_err().to_string()
        };
        let e = with(&|r| r.capacity.as_mut().unwrap().cpus = u32::MAX);
        assert!(e.contains("capacity.cpus") && e.contains("4294967295"), "{e}");
        let e = with(&|r| r.capacity.as_mut().unwrap().memory = u64::MAX);
        assert!(e.contains("capacity.memory"), "{e}");
        let e = with(&|r| r.capacity.as_mut().unwrap().cache_bytes = u64::MAX);
        assert!(e.contains("capacity.cache_bytes"), "{e}");
        let gpu = pb::GpuInfo { index: 0, name: "A100".into(), memory: 1 << 34 };
        let e = with(&|r| r.capacity.as_mut().unwrap().gpus = vec![gpu.clone(), gpu.clone()]);
        assert!(e.contains("capacity.gpus.index") && e.contains("listed twice"), "{e}");
        let e = with(&|r| r.capacity.as_mut().unwrap().hostname = "evil\u{1b}[2J".into());
        assert!(e.contains("capacity.hostname"), "{e}");
        for bad in [f64::NAN, f64::INFINITY, -0.5, 7.0] {
            let e = with(&|r| r.state = Some(pb::NodeState { cpu_utilisation: bad, ..Default::default() }));
            assert!(e.contains("state.cpu_utilisation"), "{bad}: {e}");
            assert!(
                node_report(Some(&pb::NodeState { cpu_utilisation: bad, ..Default::default() })).is_err(),
                "heartbeats too: {bad}"
            );
        }
        assert!(node_report(Some(&pb::NodeState { cpu_utilisation: 1.0, ..Default::default() })).is_ok());
    }

    #[test]
    fn gpu_topology_and_labels_are_checked_and_kept() {
        let gpu = |index| pb::GpuInfo { index, name: "V100".into(), memory: 16 << 30 };
        let link = |a, b, level: &str| pb::GpuLink { a, b, level: level.into() };
        let good = pb::RegisterRequest {
            worker_id: plexus_proto::WorkerId::random().to_string(),
            session: "s".into(),
            peer_addr: "http://127.0.0.1:1".into(),
            capacity: Some(pb::NodeCapacity {
                cpus: 8,
                gpus: vec![gpu(0), gpu(3), gpu(5)],
                gpu_links: vec![link(3, 0, "NV2"), link(0, 5, "SYS"), link(3, 5, "SOC")],
                labels: [("rack".to_string(), "r1".to_string())].into(),
                gpu_numa: [(0, 0), (5, 1)].into(),
                ..Default::default()
            }),
            ..Default::default()
        };
        let reg = registration(&good).unwrap();
        let t = &reg.capacity.topology;
        assert_eq!(t.rack(), Some("r1"));
        assert_eq!(
            t.gpu_links,
            [
                GpuLink { a: 0, b: 3, level: LinkLevel::NvLink(2) },
                GpuLink { a: 0, b: 5, level: LinkLevel::Sys },
                GpuLink { a: 3, b: 5, level: LinkLevel::Sys }
            ]
        );
        assert_eq!(t.gpu_numa.get(&5), Some(&1));
        // And back out, as `plexus workers` sees it.
        let out = capacity(&reg.capacity);
        assert_eq!(out.labels.get("rack").map(String::as_str), Some("r1"));
        assert_eq!(out.gpu_links[0], link(0, 3, "NV2"));
        assert_eq!(out.gpu_numa.get(&0), Some(&0));

        let with = |f: &dyn Fn(&mut pb::NodeCapacity)| {
            let mut r = good.clone();
            f(r.capacity.as_mut().unwrap());
            registration(&r).unwrap_err().to_string()
        };
        let e = with(&|c| c.gpu_links[0].level = "NV99".into());
        assert!(e.contains("capacity.gpu_links.level") && e.contains("\"NV99\""), "{e}");
        let e = with(&|c| c.gpu_links[0].level = "\u{1b}[2J".repeat(1000));
        assert!(e.contains("capacity.gpu_links.level") && e.len() < 300 && !e.contains('\u{1b}'), "{e}");
        let e = with(&|c| c.gpu_links[0] = link(3, 3, "NV2"));
        assert!(e.contains("capacity.gpu_links") && e.contains("distinct"), "{e}");
        let e = with(&|c| c.gpu_links[0] = link(0, 3, "X"));
        assert!(e.contains("distinct"), "{e}");
        let e = with(&|c| c.gpu_links[0] = link(0, 7, "PIX"));
        assert!(e.contains("not a pair of offered devices"), "{e}");
        let e = with(&|c| c.gpu_links[2] = link(3, 0, "PIX"));
        assert!(e.contains("GPU0/GPU3 is listed twice"), "{e}");
        let e = with(&|c| c.gpu_links = vec![link(0, 3, "PIX"); 4]);
        assert!(e.contains("4 links for 3 devices; at most 3"), "{e}");
        let e = with(&|c| c.labels = [("rack".to_string(), "r 1".to_string())].into());
        assert!(e.contains("capacity.labels") && e.contains("the value must be"), "{e}");
        let e = with(&|c| c.labels = [("x".repeat(100_000), "v".to_string())].into());
        assert!(e.contains("capacity.labels") && e.len() < 400, "{}", e.len());
        let e = with(&|c| c.labels = (0..33).map(|i| (format!("k{i}"), "v".to_string())).collect());
        assert!(e.contains("33 labels; at most 32"), "{e}");
        let e = with(&|c| c.gpu_numa = [(9, 0)].into());
        assert!(e.contains("capacity.gpu_numa"), "{e}");
        let e = with(&|c| c.gpu_numa = [(0, u32::MAX)].into());
        assert!(e.contains("capacity.gpu_numa"), "{e}");
        // A worker that reports nothing of it (an older one, or no nvidia-smi) registers as before.
        let mut bare = good.clone();
        let c = bare.capacity.as_mut().unwrap();
        (c.gpu_links, c.labels, c.gpu_numa) = (vec![], Default::default(), Default::default());
        assert_eq!(registration(&bare).unwrap().capacity.topology, NodeTopology::default());
    }

    #[test]
    fn gpu_states_and_isolation_are_checked_and_kept() {
        let gpu = |utilisation, memory_used| pb::GpuState { index: 1, utilisation, memory_used };
        let state =
            pb::NodeState { gpus: vec![gpu(0.25, 1 << 30)], isolation: "cgroup-v1".into(), ..Default::default() };
        let n = node_report(Some(&state)).unwrap();
        assert_eq!(n.gpus, [GpuUsage { index: 1, utilisation: 0.25, memory_used: 1 << 30 }]);
        assert_eq!(n.isolation, "cgroup-v1");
        for bad in [f64::NAN, -0.1, 1.5] {
            let e = node_report(Some(&pb::NodeState { gpus: vec![gpu(bad, 0)], ..Default::default() }))
                .unwrap_err()
                .to_string();
            assert!(e.contains("state.gpus.utilisation"), "{bad}: {e}");
        }
        let e = node_report(Some(&pb::NodeState { gpus: vec![gpu(0.0, u64::MAX)], ..Default::default() }))
            .unwrap_err()
            .to_string();
        assert!(e.contains("state.gpus.memory_used"), "{e}");
        let e = node_report(Some(&pb::NodeState { gpus: vec![gpu(0.0, 0); 257], ..Default::default() }))
            .unwrap_err()
            .to_string();
        assert!(e.contains("state.gpus") && e.contains("257"), "{e}");
        let e = node_report(Some(&pb::NodeState { isolation: "evil\u{1b}[2J".into(), ..Default::default() }))
            .unwrap_err()
            .to_string();
        assert!(e.contains("state.isolation"), "{e}");

        // The capacity's isolation is what the registration declares; it lands in the node state.
        let reg = pb::RegisterRequest {
            worker_id: plexus_proto::WorkerId::random().to_string(),
            session: "s".into(),
            peer_addr: "http://127.0.0.1:1".into(),
            capacity: Some(pb::NodeCapacity { cpus: 2, isolation: "process-group".into(), ..Default::default() }),
            ..Default::default()
        };
        assert_eq!(registration(&reg).unwrap().state.isolation, "process-group");
        let mut bad = reg.clone();
        bad.capacity.as_mut().unwrap().isolation = "x".repeat(33);
        assert!(registration(&bad).unwrap_err().to_string().contains("capacity.isolation"));
    }
}
