//! The names certificates hold and are checked against.
//!
//! Certificates are checked against fixed names, not the host a client dialled: the cluster CA
//! signs nothing but this cluster's coordinator and workers, so the name only has to tell the
//! two apart. [`crate::pki`] writes these names into the certificates it issues and
//! [`crate::tls`] expects them when it connects; they live here, apart from both, so neither of
//! the two has to import the other.

/// The name every coordinator certificate holds and every client checks.
pub const COORDINATOR_NAME: &str = "coordinator.plexus";
/// The name every worker certificate holds and every peer checks.
pub const WORKER_NAME: &str = "worker.plexus";
