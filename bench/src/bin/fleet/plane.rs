//! The control plane a fleet runs against: one coordinator on the sled store (`Cluster`), or an
//! HA one on etcd (`HaCluster`: etcd members, two coordinators, one leading), behind the few
//! calls the benchmark makes.

use std::path::PathBuf;
use std::time::Duration;

use plexus_e2e::ha::{Client, HaCluster, HaConfig};
use plexus_e2e::{Cluster, ClusterConfig};
use plexus_proto::pb;

use crate::{Args, Knobs};

/// Which store the coordinator keeps its state in.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum StoreKind {
    Sled,
    Etcd,
}

impl StoreKind {
    pub(crate) fn parse(v: &str) -> Result<StoreKind, String> {
        match v.trim() {
            "sled" => Ok(StoreKind::Sled),
            "etcd" => Ok(StoreKind::Etcd),
            other => Err(format!("unknown store {other:?} (sled or etcd)")),
        }
    }

    pub(crate) fn name(self) -> &'static str {
        match self {
            StoreKind::Sled => "sled",
            StoreKind::Etcd => "etcd",
        }
    }
}

pub(crate) enum Plane {
    Sled(Cluster),
    Etcd(HaCluster),
}

impl Plane {
    /// A fresh secure control plane with `--real-workers` real workers: heartbeats at the product's interval, a
    /// worker lost after 10 s silent (both stretched past `knobs.max_heartbeats_per_sec`), and
    /// `knobs.shed_lag_ms`.
    pub(crate) fn start(store: StoreKind, args: &Args, knobs: Knobs) -> Result<Plane, Box<dyn std::error::Error>> {
        let mut coordinator_args = vec![
            "--shed-lag-ms".to_string(),
            knobs.shed_lag_ms.to_string(),
            "--max-heartbeats-per-sec".into(),
            knobs.max_heartbeats_per_sec.to_string(),
        ];
        Ok(match store {
            StoreKind::Sled => Plane::Sled(Cluster::start(ClusterConfig {
                workers: args.real_workers,
                heartbeat_timeout_ms: 10_000,
                log: "warn".into(),
                // (The HA launcher turns the dashboard off itself.)
                coordinator_args: ["--http".to_string(), "none".into()].into_iter().chain(coordinator_args).collect(),
                ..ClusterConfig::default()
            })),
            StoreKind::Etcd => Plane::Etcd({
                coordinator_args.extend(["--heartbeat-timeout-ms".to_string(), "10000".into()]);
                HaCluster::start(HaConfig {
                    etcd_members: args.etcd_members,
                    coordinators: 2,
                    workers: args.real_workers,
                    lease_ttl_s: args.lease_ttl_s,
                    log: "warn".into(),
                    coordinator_args,
                    ..HaConfig::default()
                })
                .map_err(|e| format!("starting etcd: {e}"))?
            }),
        })
    }

    /// Every coordinator's URL; a worker tries them in turn until one (the leader) takes it.
    pub(crate) fn urls(&self) -> Vec<String> {
        match self {
            Plane::Sled(c) => vec![c.url.clone()],
            Plane::Etcd(c) => c.urls.clone(),
        }
    }

    /// The URL of the coordinator that leads now.
    pub(crate) fn leader_url(&self) -> String {
        match self {
            Plane::Sled(c) => c.url.clone(),
            Plane::Etcd(c) => c.urls[c.wait_leader(Duration::from_secs(60)).0].clone(),
        }
    }

    /// The leading coordinator's process id.
    pub(crate) fn pid(&self) -> Option<u32> {
        match self {
            Plane::Sled(c) => c.coordinator_pid(),
            Plane::Etcd(c) => c.coordinator_pid(c.leader()?),
        }
    }

    pub(crate) fn ca_file(&self) -> PathBuf {
        match self {
            Plane::Sled(c) => c.ca_file(),
            Plane::Etcd(c) => c.ca_file(),
        }
    }

    pub(crate) fn join_token_file(&self) -> PathBuf {
        match self {
            Plane::Sled(c) => c.join_token_file(),
            Plane::Etcd(c) => c.join_token_file(),
        }
    }

    /// An admin client of the leading coordinator.
    pub(crate) fn client(&self) -> Client {
        match self {
            Plane::Sled(c) => c.client_with(c.admin_token.as_deref()),
            Plane::Etcd(c) => c.leader_client(),
        }
    }

    /// Runs `f` on the harness's runtime, where [`Plane::client`]'s connections live.
    pub(crate) fn block_on<F: std::future::Future>(&self, f: F) -> F::Output {
        match self {
            Plane::Sled(c) => c.block_on(f),
            Plane::Etcd(c) => c.block_on(f),
        }
    }

    /// Submits a job, as a well-behaved client does: a refusal to shed load
    /// (`RESOURCE_EXHAUSTED`, "retry in a moment") is retried after 100 ms, for up to 30 s.
    pub(crate) fn submit(&self, name: &str, source: &str) -> Result<String, tonic::Status> {
        let until = std::time::Instant::now() + Duration::from_secs(30);
        loop {
            let r = match self {
                Plane::Sled(c) => c.try_submit(name, source),
                Plane::Etcd(c) => c.try_submit(name, source),
            };
            match r {
                Err(e) if e.code() == tonic::Code::ResourceExhausted && std::time::Instant::now() < until => {
                    std::thread::sleep(Duration::from_millis(100));
                }
                r => return r,
            }
        }
    }

    /// A job's state and counts (no subtask list), from the leader; None while none answers.
    pub(crate) fn job(&self, id: &str) -> Option<pb::JobStatus> {
        match self {
            Plane::Sled(c) => c.job_summary(id),
            Plane::Etcd(c) => c.job(id),
        }
    }

    /// `kill -9` the leading coordinator; returns which it was.
    pub(crate) fn kill_leader(&mut self) -> usize {
        match self {
            Plane::Sled(c) => {
                c.kill_coordinator();
                0
            }
            Plane::Etcd(c) => {
                let (i, _) = c.wait_leader(Duration::from_secs(60));
                c.kill_coordinator(i);
                i
            }
        }
    }

    /// Starts coordinator `i` again on its data dir and port.
    pub(crate) fn start_coordinator(&mut self, i: usize) {
        match self {
            Plane::Sled(c) => c.start_coordinator(),
            Plane::Etcd(c) => c.start_coordinator(i),
        }
    }

    /// Waits until a coordinator leads and serves (at once on the sled store).
    pub(crate) fn wait_leader(&self, timeout: Duration) {
        if let Plane::Etcd(c) = self {
            c.wait_leader(timeout);
        }
    }
}
