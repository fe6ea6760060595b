//! `plexus-coordinator migrate --to etcd://…`: a sled store copied into an empty etcd store.

use super::client::{Etcd, prefix_end};
use super::store::EtcdStore;
use super::url::EtcdUrl;
use crate::error::Error;
use crate::store::{Batch, Store};

/// What [`copy_sled`] copied.
#[derive(Debug, Default)]
pub struct Copied {
    pub records: usize,
    pub security: usize,
    pub policy: usize,
    pub queues: usize,
    pub estimates: bool,
}

impl std::fmt::Display for Copied {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{} state records, {} security records, {} policy records, {} queue shares, {}",
            self.records,
            self.security,
            self.policy,
            self.queues,
            if self.estimates { "the measured speeds" } else { "no measured speeds" }
        )
    }
}

/// Copies a sled store (already migrated) into the etcd store at `to`, which must hold no state
/// yet (`plexus-coordinator migrate --to etcd://…`): the records as one snapshot, then every
/// namespace record by record.
pub fn copy_sled(from: &crate::store::SledStore, to: &EtcdUrl) -> Result<Copied, Error> {
    let etcd = Etcd::connect(to)?;
    etcd.locked("init", || {
        let log = etcd.key("/state/");
        if !etcd.range(log.clone(), prefix_end(&log))?.is_empty()
            || etcd.get(etcd.key("/kv/security/meta/cluster"))?.is_some()
        {
            return Err(Error::Invalid(format!(
                "{to} already holds a Plexus cluster's state; copy into an empty prefix (etcd://…/another-prefix)"
            )));
        }
        etcd.check_version()?;
        let mut copied = Copied::default();
        let store = EtcdStore::new(etcd.clone());
        let mut batch = Batch::default();
        for (k, v) in from.raw_state()? {
            batch.raw(k, v);
            copied.records += 1;
        }
        store.commit(batch)?;
        store.snapshot_now()?;
        let (src, dst) = (from.spaces()?, etcd.spaces());
        for (name, a, b, n) in [
            ("security", &src.security, &dst.security, &mut copied.security),
            ("policy", &src.policy, &dst.policy, &mut copied.policy),
            ("queues", &src.queues, &dst.queues, &mut copied.queues),
        ] {
            for (k, v) in a.scan(b"")? {
                b.put(&k, &v).map_err(|e| Error::Etcd(format!("copying the {name} records: {e}")))?;
                *n += 1;
            }
        }
        if let Some(e) = from.load_estimates()? {
            store.save_estimates(&e)?;
            copied.estimates = true;
        }
        Ok(copied)
    })
}
