//! Local Plexus clusters as child processes: the one launcher behind `plexus up`, the e2e
//! harness (`plexus_e2e::Cluster`, `HaCluster`) and the benchmarks.
//!
//! # Layout
//! - [`cluster`]: [`LocalCluster`] and its [`Builder`] — sled or etcd store, N coordinators, M
//!   workers, rails, TLS or insecure, flags passed through; owns its processes and stops them
//!   (killed and reaped) when dropped.
//! - [`process`]: one child process owned ([`Proc`]): its log, its signals, its stop.
//! - [`ready`]: the coordinator's "listening on" and "http on" lines, parsed in one place.
//! - [`etcd`]: a real etcd cluster of one or more members ([`EtcdCluster`]) for the HA store.
//! - [`programs`]: where the Plexus programs are.
//! - [`cgroups`]: cleaning up after a worker that was killed.
//!
//! Architecture invariant: the crate links no tokio, tonic or tch — the CLI uses it, and it
//! only starts, watches and stops processes. Waiting until a cluster *serves* (workers alive, a
//! leader elected) takes a client, which each caller has.

pub mod cgroups;
pub mod cluster;
pub mod error;
pub mod etcd;
pub mod process;
pub mod programs;
pub mod ready;

pub use cgroups::remove_worker_cgroups;
pub use cluster::{Builder, Exited, Http, LocalCluster, Store, WorkerLaunch};
pub use error::LaunchError;
pub use etcd::EtcdCluster;
pub use process::{Proc, Spec};
