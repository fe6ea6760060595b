//! One placer's cluster: the rail rig's shape, the coordinator and the workers held to their
//! CPU quotas, torn down in order when dropped.

use std::net::{IpAddr, SocketAddr};
use std::time::{Duration, Instant};

use plexus_bench::live::{CpuQuotas, Forward, confined};
use plexus_dataplane::rig::Rig;
use plexus_e2e::{Cluster, ClusterConfig};
use plexus_launch::WorkerLaunch;

use crate::args::Opts;
use crate::{JOIN_TIMEOUT, WORKER_GRACE};

/// The rig's shape for this run.
pub(crate) struct RigPlan {
    pub(crate) rig: Rig,
    /// Worker i's rail address (host i + 1).
    addrs: Vec<IpAddr>,
}

pub(crate) fn build_rig(o: &Opts) -> Result<RigPlan, String> {
    if let Some(why) = plexus_dataplane::rig::unavailable() {
        return Err(why);
    }
    let n = o.quotas.len();
    let rig = Rig::up(n + 1, &o.fast_rate).map_err(|e| e.to_string())?;
    for &w in &o.slow {
        rig.set_rate(w + 1, 0, &o.slow_rate).map_err(|e| e.to_string())?;
    }
    Ok(RigPlan { addrs: (0..n).map(|i| rig.addr(i + 1, 0)).collect(), rig })
}

/// Everything one placer's cluster holds: the workers are stopped first when it is dropped
/// (they kill their subtasks), then, in field order, their cgroups, the forwarder, the
/// coordinator and its directory.
pub(crate) struct Live {
    pub(crate) quotas: CpuQuotas,
    _forward: Option<Forward>,
    pub(crate) cluster: Cluster,
}

impl Drop for Live {
    fn drop(&mut self) {
        self.cluster.launcher().stop_workers();
    }
}

impl Live {
    /// The first worker that has exited, with its status.
    pub(crate) fn exited_worker(&mut self) -> Option<(usize, std::process::ExitStatus)> {
        let launcher = self.cluster.launcher();
        let e = launcher.reap().into_iter().find(|e| e.name.starts_with("worker-"))?;
        let i = (0..launcher.worker_count()).find(|&i| launcher.worker_log(i) == e.log)?;
        Some((i, e.status))
    }
}

pub(crate) fn start(o: &Opts, placer: &str, ids: &[String], rig: Option<&RigPlan>) -> Result<Live, String> {
    let n = o.quotas.len();
    let config = ClusterConfig {
        workers: 0,
        placer: placer.to_string(),
        log: "warn".into(),
        // Workers held to a quarter of a core answer late under load; none is lost here.
        heartbeat_timeout_ms: 10_000,
        cpus_per_worker: o.slots,
        cache: "256MiB".into(),
        // Subtasks stay in the worker's cgroup, under its quota (and in a namespace made by
        // `ip netns exec`, /sys/fs/cgroup is not mounted anyway).
        worker_args: vec!["--isolation".into(), "process-group".into()],
        stop_grace: WORKER_GRACE,
        ..Default::default()
    };
    let cluster = Cluster::start(config);
    let limits: Vec<(String, f64)> = o.quotas.iter().enumerate().map(|(i, q)| (format!("w{i}"), q / 100.0)).collect();
    let run = format!("run-{}-{placer}", std::process::id());
    let quotas = CpuQuotas::create(&run, &limits)?;
    let forward = match rig {
        Some(r) => {
            let port: u16 = cluster
                .url
                .rsplit(':')
                .next()
                .and_then(|p| p.parse().ok())
                .ok_or("no port in the coordinator's url")?;
            let f = Forward::start(r.rig.addr(0, 0), SocketAddr::from(([127, 0, 0, 1], port)))
                .map_err(|e| format!("forwarder: {e}"))?;
            Some(f)
        }
        None => None,
    };
    let url = forward.as_ref().map(|f| format!("https://{}", f.addr));
    let mut live = Live { quotas, _forward: forward, cluster };
    for (i, id) in ids.iter().enumerate() {
        let dir = live.cluster.worker_dir(i);
        std::fs::create_dir_all(&dir).map_err(|e| format!("{}: {e}", dir.display()))?;
        std::fs::write(dir.join("worker-id"), format!("{id}\n")).map_err(|e| format!("{}: {e}", dir.display()))?;
        let netns = rig.map(|_| format!("plx-h{}", i + 1));
        let args = match rig {
            Some(r) => {
                let a = r.addrs[i];
                vec!["--rail".into(), a.to_string().into(), "--listen".into(), format!("{a}:0").into()]
            }
            None => vec![],
        };
        let launch = WorkerLaunch {
            prefix: confined(&live.quotas.procs_file(i), netns.as_deref()),
            args,
            coordinators: url.clone(),
        };
        live.cluster.launcher().add_worker_with(&launch).map_err(|e| format!("starting worker {i}: {e}"))?;
    }
    let t0 = Instant::now();
    loop {
        if let Some((i, status)) = live.exited_worker() {
            return Err(format!(
                "worker {i} exited ({status}) while joining; its log:\n{}",
                live.cluster.worker_log(i)
            ));
        }
        let alive = live.cluster.workers().map_or(0, |ws| ws.iter().filter(|w| w.alive).count());
        if alive >= n {
            break;
        }
        if t0.elapsed() > JOIN_TIMEOUT {
            return Err(format!(
                "only {alive} of {n} workers joined in {} s; worker 0's log:\n{}",
                JOIN_TIMEOUT.as_secs(),
                live.cluster.worker_log(0)
            ));
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    Ok(live)
}
