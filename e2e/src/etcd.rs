//! A real etcd cluster on loopback for the HA tests: the launcher's ([`plexus_launch::etcd`]),
//! here under the harness's name so tests and benchmarks reach it as `plexus_e2e::etcd`.

pub use plexus_launch::etcd::{EtcdCluster, check_etcd, etcd_available};
