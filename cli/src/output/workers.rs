//! Workers as `plexus workers` shows them: the workers table (and each GPU), the rails table,
//! and the JSON view.

use plexus_proto::pb;
use serde::Serialize;

use super::format::{Table, age, human_bytes, non_empty, number, short_names, time, yes_no};

/// `plexus workers`: one row per worker, then, when any worker has GPUs, one row per device with
/// its model and its load from the latest heartbeat. SPEED and FETCH IN are what the coordinator
/// measured (issue 17): its run times against the cluster's mean for the same tasks (`1.5x`:
/// faster), and the mean throughput of the fetches to it; `-` until measured.
pub fn workers_table(workers: &[pb::WorkerInfo], now_ms: u64, wide: bool) -> String {
    if workers.is_empty() {
        return "no workers\n".to_string();
    }
    let names = short_names(workers.iter().map(|w| w.worker_id.as_str()));
    // The columns that fit 100 characters, then what `-o wide` adds (each marked `true`).
    let columns: [(&str, bool); 17] = [
        ("NAME", false),
        ("ID", true),
        ("ALIVE", false),
        ("PEER", true),
        ("CPUS", false),
        ("MEMORY", false),
        ("GPUS", false),
        ("RAILS", false),
        ("ISOLATION", false),
        ("ASSIGNED", false),
        ("ALLOC CPU", true),
        ("CPU UTIL", false),
        ("CACHE", true),
        ("OBJECTS", true),
        ("SPEED", true),
        ("FETCH IN", true),
        ("HEARTBEAT", false),
    ];
    let shown = |row: Vec<String>| -> Vec<String> {
        row.into_iter().zip(columns).filter(|(_, (_, w))| wide || !w).map(|(c, _)| c).collect()
    };
    let heads: Vec<&str> = columns.iter().filter(|(_, w)| wide || !w).map(|(h, _)| *h).collect();
    let mut t = Table::new(&heads);
    let mut devices = Table::new(&["WORKER", "GPU", "MODEL", "UTIL", "MEMORY"]);
    for (w, name) in workers.iter().zip(&names) {
        let cap = w.capacity.clone().unwrap_or_default();
        let state = w.state.clone().unwrap_or_default();
        let alloc = w.allocated.unwrap_or_default();
        let speed = speed_view(w.speed.as_ref());
        t.row(shown(vec![
            name.clone(),
            w.worker_id.clone(),
            if w.draining { format!("{}, drained", yes_no(w.alive)) } else { yes_no(w.alive).to_string() },
            w.peer_addr.clone(),
            cap.cpus.to_string(),
            human_bytes(cap.memory),
            cap.gpus.len().to_string(),
            cap.rails.len().to_string(),
            isolation_text(&cap),
            w.assigned.to_string(),
            number(alloc.cpu),
            format!("{:.0}%", state.cpu_utilisation * 100.0),
            format!("{}/{}", human_bytes(state.cache_used), human_bytes(cap.cache_bytes)),
            state.objects.len().to_string(),
            speed.relative_speed.map_or("-".into(), |v| format!("{v:.2}x")),
            speed.fetch_bytes_per_s.map_or("-".into(), |v| format!("{}/s", human_bytes(v as u64))),
            age(w.last_heartbeat, now_ms),
        ]));
        for g in &cap.gpus {
            let load = state.gpus.iter().find(|s| s.index == g.index);
            devices.row(vec![
                w.worker_id.clone(),
                g.index.to_string(),
                g.name.clone(),
                load.map_or("-".into(), |s| format!("{:.0}%", s.utilisation * 100.0)),
                match load {
                    Some(s) => format!("{}/{}", human_bytes(s.memory_used), human_bytes(g.memory)),
                    None => format!("-/{}", human_bytes(g.memory)),
                },
            ]);
        }
    }
    if workers.iter().any(|w| w.capacity.as_ref().is_some_and(|c| !c.gpus.is_empty())) {
        format!("{}\n{}", t.render(), devices.render())
    } else {
        t.render()
    }
}

/// Each worker's data-plane rails, one row per rail: the counters of its last heartbeat
/// (cumulative since the worker started), and each rail's share of what the worker sent.
pub fn rails_table(workers: &[pb::WorkerInfo]) -> String {
    let names = short_names(workers.iter().map(|w| w.worker_id.as_str()));
    let mut t = Table::new(&["WORKER", "RAIL", "ADDRESS", "SENT", "RECEIVED", "SHARE SENT", "FAILURES"]);
    for (w, name) in workers.iter().zip(&names) {
        let rails = w.state.as_ref().map(|s| s.rails.as_slice()).unwrap_or_default();
        let total: u64 = rails.iter().map(|r| r.bytes_sent).fold(0, u64::saturating_add);
        for (i, r) in rails.iter().enumerate() {
            t.row(vec![
                name.clone(),
                i.to_string(),
                r.addr.clone(),
                human_bytes(r.bytes_sent),
                human_bytes(r.bytes_received),
                if total == 0 {
                    "-".to_string()
                } else {
                    format!("{:.0}%", r.bytes_sent as f64 * 100.0 / total as f64)
                },
                r.failures.to_string(),
            ]);
        }
    }
    if t.is_empty() { "no rail counters reported yet\n".to_string() } else { t.render() }
}

#[derive(Debug, Serialize)]
pub struct WorkerList {
    pub workers: Vec<WorkerView>,
}

#[derive(Debug, Serialize)]
pub struct WorkerView {
    pub worker_id: String,
    pub alive: bool,
    pub peer_addr: String,
    pub hostname: String,
    pub cpus: u32,
    pub memory_bytes: u64,
    pub gpus: Vec<GpuView>,
    /// How the worker confines subtasks: `cgroup-v2`, `cgroup-v1` or `process-group`; null when
    /// it does not say.
    pub isolation: Option<String>,
    /// The worker's `--label`s (`rack=r1`).
    pub labels: std::collections::BTreeMap<String, String>,
    /// How its GPUs connect, from `nvidia-smi topo -m`: one entry per pair, `"0-1": "NV2"`.
    pub gpu_links: std::collections::BTreeMap<String, String>,
    pub rails: Vec<String>,
    /// The data plane's cumulative counters per rail, from the latest heartbeat.
    pub rail_traffic: Vec<RailTrafficView>,
    /// Rail connections the worker dropped because they failed the rail handshake.
    pub rails_refused: u64,
    pub assigned: u32,
    pub allocated: ResourcesView,
    pub cpu_utilisation: f64,
    pub memory_free_bytes: u64,
    pub cache_used_bytes: u64,
    pub cache_bound_bytes: u64,
    pub objects: usize,
    /// Attempts running or being prepared, as `<job>/<task>/<rank>#<attempt>`.
    pub running: Vec<String>,
    pub last_heartbeat_ms: Option<u64>,
    /// What the coordinator measured of its speed.
    pub speed: SpeedView,
}

/// A worker's measured speed (issue 17); null where nothing was measured. `*_samples` are
/// effective sample counts (recency-weighted, at most 10 per estimate).
#[derive(Debug, Default, Serialize, PartialEq)]
pub struct SpeedView {
    /// Its run times against the cluster's mean for the same tasks (geometric mean; > 1 faster).
    pub relative_speed: Option<f64>,
    /// Kinds of task (command or kind, and requests) with measured run times here.
    pub signatures: u32,
    pub run_samples: f64,
    /// Compute per 10⁹ flops on one core (or GPU: a task's flops per unit it holds), from tasks
    /// with a `flops` hint.
    pub ms_per_gflop: Option<f64>,
    pub flop_samples: f64,
    /// Holders whose fetches to it were measured, and their mean throughput and latency.
    pub fetch_pairs: u32,
    pub fetch_bytes_per_s: Option<f64>,
    pub fetch_latency_ms: Option<f64>,
    pub fetch_samples: f64,
}

/// 0 on the wire is "not measured".
fn speed_view(s: Option<&pb::WorkerSpeed>) -> SpeedView {
    let Some(s) = s else { return SpeedView::default() };
    let measured = |v: f64| (v > 0.0 && v.is_finite()).then_some(v);
    SpeedView {
        relative_speed: measured(s.relative_speed),
        signatures: s.signatures,
        run_samples: s.run_samples,
        ms_per_gflop: measured(s.ms_per_gflop),
        flop_samples: s.flop_samples,
        fetch_pairs: s.fetch_pairs,
        fetch_bytes_per_s: measured(s.fetch_bytes_per_ms).map(|v| v * 1000.0),
        fetch_latency_ms: (s.fetch_pairs > 0).then_some(s.fetch_latency_ms),
        fetch_samples: s.fetch_samples,
    }
}

#[derive(Debug, Serialize)]
pub struct RailTrafficView {
    pub addr: String,
    pub bytes_sent: u64,
    pub bytes_received: u64,
    pub failures: u64,
}

#[derive(Debug, Serialize)]
pub struct GpuView {
    pub index: u32,
    /// The model, as nvidia-smi names it.
    pub name: String,
    pub memory_bytes: u64,
    /// Its NUMA node, when the worker reported one.
    pub numa: Option<u32>,
    /// 0..1, from the latest heartbeat; null before the first sample.
    pub utilisation: Option<f64>,
    pub memory_used_bytes: Option<u64>,
}

#[derive(Debug, Serialize)]
pub struct ResourcesView {
    pub cpu: f64,
    pub memory_bytes: u64,
    pub gpu: u32,
}

pub fn worker_list_view(workers: &[pb::WorkerInfo]) -> WorkerList {
    let workers = workers
        .iter()
        .map(|w| {
            let cap = w.capacity.clone().unwrap_or_default();
            let state = w.state.clone().unwrap_or_default();
            let alloc = w.allocated.unwrap_or_default();
            WorkerView {
                worker_id: w.worker_id.clone(),
                alive: w.alive,
                peer_addr: w.peer_addr.clone(),
                hostname: cap.hostname,
                cpus: cap.cpus,
                memory_bytes: cap.memory,
                gpus: cap
                    .gpus
                    .iter()
                    .map(|g| {
                        let load = state.gpus.iter().find(|s| s.index == g.index);
                        GpuView {
                            index: g.index,
                            name: g.name.clone(),
                            memory_bytes: g.memory,
                            numa: cap.gpu_numa.get(&g.index).copied(),
                            utilisation: load.map(|s| s.utilisation),
                            memory_used_bytes: load.map(|s| s.memory_used),
                        }
                    })
                    .collect(),
                isolation: non_empty(&cap.isolation),
                labels: cap.labels.iter().map(|(k, v)| (k.clone(), v.clone())).collect(),
                gpu_links: cap.gpu_links.iter().map(|l| (format!("{}-{}", l.a, l.b), l.level.clone())).collect(),
                rails: cap.rails,
                rails_refused: state.rails_refused,
                rail_traffic: state
                    .rails
                    .iter()
                    .map(|r| RailTrafficView {
                        addr: r.addr.clone(),
                        bytes_sent: r.bytes_sent,
                        bytes_received: r.bytes_received,
                        failures: r.failures,
                    })
                    .collect(),
                assigned: w.assigned,
                allocated: ResourcesView { cpu: alloc.cpu, memory_bytes: alloc.memory, gpu: alloc.gpu },
                cpu_utilisation: state.cpu_utilisation,
                memory_free_bytes: state.memory_free,
                cache_used_bytes: state.cache_used,
                cache_bound_bytes: cap.cache_bytes,
                objects: state.objects.len(),
                running: state
                    .running
                    .iter()
                    .map(|a| format!("{}/{}/{}#{}", a.job_id, a.task, a.rank, a.attempt))
                    .collect(),
                last_heartbeat_ms: time(w.last_heartbeat),
                speed: speed_view(w.speed.as_ref()),
            }
        })
        .collect();
    WorkerList { workers }
}

/// How a worker confines its tasks, and its container runtime when it has one
/// (`cgroup-v1, docker`).
fn isolation_text(cap: &pb::NodeCapacity) -> String {
    let runtime = cap.labels.get(plexus_proto::runtime_env::RUNTIME_LABEL).map(String::as_str);
    match (non_empty(&cap.isolation), runtime) {
        (Some(i), Some(r)) => format!("{i}, {r}"),
        (Some(i), None) => i,
        (None, Some(r)) => r.to_string(),
        (None, None) => "-".to_string(),
    }
}

/// `plexus workers --summary -o json`: the cluster in counts and sums.
#[derive(Debug, Serialize)]
pub struct WorkersSummaryView {
    pub total: u32,
    pub alive: u32,
    pub lost: u32,
    pub draining: u32,
    /// Attempts placed and not finished.
    pub assigned: u64,
    /// Held and offered, over the alive workers.
    pub cpu_held: f64,
    pub cpu_offered: f64,
    pub memory_held_bytes: u64,
    pub memory_offered_bytes: u64,
    pub gpus_held: u64,
    pub gpus_offered: u64,
}

pub fn workers_summary_view(s: &pb::WorkersSummary) -> WorkersSummaryView {
    WorkersSummaryView {
        total: s.total,
        alive: s.alive,
        lost: s.total.saturating_sub(s.alive),
        draining: s.draining,
        assigned: s.assigned,
        cpu_held: s.cpu_held,
        cpu_offered: s.cpu_offered,
        memory_held_bytes: s.memory_held,
        memory_offered_bytes: s.memory_offered,
        gpus_held: s.gpus_held,
        gpus_offered: s.gpus_offered,
    }
}

/// `plexus workers --summary`: one line for the whole cluster.
pub fn workers_summary_line(s: &pb::WorkersSummary) -> String {
    format!(
        "{} workers: {} alive, {} lost, {} draining; {:.1}/{:.0} cores, {}/{} memory, {}/{} GPUs held; {} attempts placed\n",
        s.total,
        s.alive,
        s.total.saturating_sub(s.alive),
        s.draining,
        s.cpu_held,
        s.cpu_offered,
        human_bytes(s.memory_held),
        human_bytes(s.memory_offered),
        s.gpus_held,
        s.gpus_offered,
        s.assigned
    )
}
