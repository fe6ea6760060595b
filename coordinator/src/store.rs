//! Durable state. The only module that knows sled.
//!
//! The store is narrow on purpose: load everything at start, and commit a batch of changed
//! records atomically and durably. Records are JSON (readable with any sled dump tool, and
//! tolerant of added fields); keys are the v2 layout documented in `plexus-migrations`.

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Mutex;

use plexus_migrations as mig;
use plexus_proto::{JobId, WorkerId};

use plexus_policy::StoreError;
use plexus_scheduler::core::estimates::Estimates;
use plexus_scheduler::core::{JobRecord, PlacementRecord, Snapshot, Subtask, WorkerRecord};

use crate::error::Error;

#[cfg(test)]
pub(crate) mod testing;

/// How long [`SledStore::open`] waits for another holder of the database lock to let go: a `Db`
/// that was just dropped (or a coordinator that is still exiting) releases the lock only when
/// sled's background flusher has finished, a moment later.
const LOCK_WAIT: std::time::Duration = std::time::Duration::from_secs(5);

/// sled's page cache. Its default, 1 GiB, is what the coordinator's memory grew towards as a
/// deep queue was placed (issue 35: every placement record written passes through it); the
/// state the engine needs is in the core's memory, so the cache only serves reads of records
/// and the log's recent pages.
const SLED_CACHE_BYTES: u64 = 128 << 20;

fn open_db_waiting(dir: &Path, wait: std::time::Duration) -> Result<sled::Db, Error> {
    let start = std::time::Instant::now();
    loop {
        match sled::Config::new().path(dir).cache_capacity(SLED_CACHE_BYTES).open() {
            Err(sled::Error::Io(e)) if e.to_string().contains("could not acquire lock") => {
                if start.elapsed() >= wait {
                    return Err(Error::Locked {
                        dir: dir.display().to_string(),
                        waited_ms: start.elapsed().as_millis() as u64,
                    });
                }
                std::thread::sleep(std::time::Duration::from_millis(20));
            }
            r => return Ok(r?),
        }
    }
}

/// Changed records, encoded, waiting to be committed together.
#[derive(Default)]
pub struct Batch {
    /// Key → new value, or `None`: delete.
    items: Vec<(Vec<u8>, Option<Vec<u8>>)>,
}

impl Batch {
    pub fn len(&self) -> usize {
        self.items.len()
    }

    pub fn is_empty(&self) -> bool {
        self.items.is_empty()
    }

    /// Appends `other`'s records after these (a later write of a key wins, as in a commit).
    pub fn append(&mut self, mut other: Batch) {
        self.items.append(&mut other.items);
    }

    /// A record already encoded (a copy from another store).
    pub fn raw(&mut self, key: Vec<u8>, value: Vec<u8>) {
        self.items.push((key, Some(value)));
    }

    /// The encoded records: key, and new value or `None` (delete).
    pub fn into_items(self) -> Vec<(Vec<u8>, Option<Vec<u8>>)> {
        self.items
    }

    pub fn job(&mut self, r: &JobRecord) {
        self.put(key(mig::JOB_PREFIX, r.id.as_bytes(), None), r);
    }

    pub fn subtask(&mut self, job: JobId, idx: u32, s: &Subtask) {
        self.put(key(mig::SUBTASK_PREFIX, job.as_bytes(), Some(idx)), s);
    }

    pub fn worker(&mut self, r: &WorkerRecord) {
        self.put(key(mig::WORKER_PREFIX, r.id.as_bytes(), None), r);
    }

    /// Deletes a worker's record (a removed worker).
    pub fn remove_worker(&mut self, id: plexus_proto::WorkerId) {
        self.items.push((key(mig::WORKER_PREFIX, id.as_bytes(), None), None));
    }

    pub fn placement(&mut self, job: JobId, idx: u32, p: &PlacementRecord) {
        self.put(key(mig::PLACEMENT_PREFIX, job.as_bytes(), Some(idx)), p);
    }

    fn put<T: serde::Serialize>(&mut self, k: Vec<u8>, v: &T) {
        // Serialising plain structs of strings and numbers cannot fail; NaN scores are stored as
        // null by construction (PlacementRecord keeps them as Option).
        match serde_json::to_vec(v) {
            Ok(bytes) => self.items.push((k, Some(bytes))),
            Err(e) => tracing::error!(error = %e, "record could not be encoded; not stored"),
        }
    }
}

fn key(prefix: u8, id: &[u8; 16], idx: Option<u32>) -> Vec<u8> {
    let mut k = Vec::with_capacity(21);
    k.push(prefix);
    k.extend_from_slice(id);
    if let Some(i) = idx {
        k.extend_from_slice(&i.to_be_bytes());
    }
    k
}

/// Durable state of the coordinator.
pub trait Store: Send + Sync {
    /// Every record but the placement records, decoded: what the core restores from.
    fn load(&self) -> Result<Snapshot, Error>;
    /// The stored record of a subtask's latest placement (for `plexus explain` of one placed
    /// before this coordinator started), if there is one.
    fn placement(&self, job: JobId, idx: u32) -> Result<Option<PlacementRecord>, Error>;
    /// Writes the batch atomically; when this returns Ok the records survive a crash.
    fn commit(&self, batch: Batch) -> Result<(), Error>;
    /// The measured speeds last saved (`core::estimates::Estimates` as JSON), if any.
    fn load_estimates(&self) -> Result<Option<Vec<u8>>, Error>;
    /// Replaces the saved speeds. Durable with the next commit's flush (or sled's own periodic
    /// one): a crash loses at most the last few measurements, which costs only estimates.
    fn save_estimates(&self, bytes: &[u8]) -> Result<(), Error>;
}

impl<S: Store + Sync> Store for std::sync::Arc<S> {
    fn load(&self) -> Result<Snapshot, Error> {
        (**self).load()
    }
    fn placement(&self, job: JobId, idx: u32) -> Result<Option<PlacementRecord>, Error> {
        (**self).placement(job, idx)
    }
    fn commit(&self, batch: Batch) -> Result<(), Error> {
        (**self).commit(batch)
    }
    fn load_estimates(&self) -> Result<Option<Vec<u8>>, Error> {
        (**self).load_estimates()
    }
    fn save_estimates(&self, bytes: &[u8]) -> Result<(), Error> {
        (**self).save_estimates(bytes)
    }
}

/// The sled store: one database directory, one `state` tree, a `policy` tree for what the
/// learned placer has learned, and an `estimates` tree for the measured speeds.
pub struct SledStore {
    db: sled::Db,
    state: sled::Tree,
    estimates: sled::Tree,
}

/// Tree holding the cluster's measured speeds (issue 17): one value, under [`ESTIMATES_KEY`].
/// Not in `state`: it is rewritten whole every so often, not with each round's records.
pub const ESTIMATES_TREE: &str = "estimates";
pub const ESTIMATES_KEY: &[u8] = b"cluster";

/// Tree holding the learned placer's weights (`weights`) and experiences (`e` + id, u64 BE).
pub const POLICY_TREE: &str = "policy";
/// Tree holding the working dirs' archives (`crate::working_dirs`).
pub const ARCHIVES_TREE: &str = "archives";
/// Tree holding the queues' shares (`plexus-coordinator queue set`).
pub const QUEUES_TREE: &str = "queues";

/// The coordinator's namespaces besides its state, on either store.
#[derive(Clone)]
pub struct Spaces {
    /// The cluster's trust (`crate::auth`).
    pub security: SharedKv,
    /// What the learned placers learned: the placement policy (`KvPolicyStore`) and the GPU
    /// interference model (`crate::learned::LearnedGpu`).
    pub policy: SharedKv,
    /// The queues' shares.
    pub queues: SharedKv,
    /// The archives of jobs' working dirs (`crate::working_dirs`).
    pub archives: SharedKv,
}

impl Spaces {
    pub fn security_store(&self) -> SecurityStore {
        SecurityStore::new(self.security.clone())
    }

    pub fn policy_store(&self) -> std::sync::Arc<dyn plexus_policy::PolicyStore> {
        std::sync::Arc::new(KvPolicyStore::new(self.policy.clone()))
    }
}

/// Tree holding the cluster's trust: the CA's certificate and key, the rail key, token hashes,
/// and the fingerprints of the certificates issued to workers (see `crate::auth`).
pub const SECURITY_TREE: &str = "security";

/// A namespace of small records (the cluster's trust, the learned placer's weights and
/// experiences, the queues' shares), on whichever store the coordinator runs: a sled tree, or a
/// key prefix in etcd (`crate::etcd`). Every call is synchronous; where `durable`, a write has
/// reached the disk (sled: flushed) or a quorum (etcd) when it returns.
pub trait Kv: Send + Sync {
    fn get(&self, key: &[u8]) -> Result<Option<Vec<u8>>, Error>;
    fn put(&self, key: &[u8], value: &[u8]) -> Result<(), Error>;
    /// Several records, in as few writes as the store allows (all or none of each write).
    fn put_many(&self, items: &[(Vec<u8>, Vec<u8>)]) -> Result<(), Error> {
        items.iter().try_for_each(|(k, v)| self.put(k, v))
    }
    /// Removes every key of `keys` (absent ones are no error).
    fn remove(&self, keys: &[Vec<u8>]) -> Result<(), Error>;
    /// Every record whose key starts with `prefix`, in key order.
    fn scan(&self, prefix: &[u8]) -> Result<Pairs, Error>;
}

/// Where the sled database lives inside the data dir.
pub fn store_dir(data_dir: &std::path::Path) -> std::path::PathBuf {
    data_dir.join("state.sled")
}

/// Keys and their values, in key order.
pub type Pairs = Vec<(Vec<u8>, Vec<u8>)>;

pub type SharedKv = std::sync::Arc<dyn Kv>;

/// A sled tree as a [`Kv`]; `durable`: flush after every write.
pub struct SledKv {
    tree: sled::Tree,
    durable: bool,
}

impl SledKv {
    pub fn new(tree: sled::Tree, durable: bool) -> SledKv {
        SledKv { tree, durable }
    }

    fn flushed(&self) -> Result<(), Error> {
        if self.durable {
            self.tree.flush()?;
        }
        Ok(())
    }
}

impl Kv for SledKv {
    fn get(&self, key: &[u8]) -> Result<Option<Vec<u8>>, Error> {
        Ok(self.tree.get(key)?.map(|v| v.to_vec()))
    }
    fn put(&self, key: &[u8], value: &[u8]) -> Result<(), Error> {
        self.tree.insert(key, value)?;
        self.flushed()
    }
    fn put_many(&self, items: &[(Vec<u8>, Vec<u8>)]) -> Result<(), Error> {
        let mut b = sled::Batch::default();
        for (k, v) in items {
            b.insert(k.as_slice(), v.as_slice());
        }
        self.tree.apply_batch(b)?;
        self.flushed()
    }
    fn remove(&self, keys: &[Vec<u8>]) -> Result<(), Error> {
        let mut b = sled::Batch::default();
        for k in keys {
            b.remove(k.as_slice());
        }
        self.tree.apply_batch(b)?;
        self.flushed()
    }
    fn scan(&self, prefix: &[u8]) -> Result<Pairs, Error> {
        self.tree
            .scan_prefix(prefix)
            .map(|r| {
                let (k, v) = r?;
                Ok((k.to_vec(), v.to_vec()))
            })
            .collect()
    }
}

/// The cluster's trust (see `crate::auth`): small records, each written durably before the call
/// that made it returns, because a token handed out or a certificate issued must survive a crash.
#[derive(Clone)]
pub struct SecurityStore {
    kv: SharedKv,
}

impl SecurityStore {
    pub fn new(kv: SharedKv) -> SecurityStore {
        SecurityStore { kv }
    }

    pub fn get(&self, key: &str) -> Result<Option<Vec<u8>>, Error> {
        self.kv.get(key.as_bytes())
    }

    /// Writes durably.
    pub fn put(&self, key: &str, value: &[u8]) -> Result<(), Error> {
        self.kv.put(key.as_bytes(), value)
    }

    /// Writes several records durably, at once (one transaction on etcd, one flush on sled).
    pub fn put_many(&self, items: &[(String, Vec<u8>)]) -> Result<(), Error> {
        let items: Vec<(Vec<u8>, Vec<u8>)> = items.iter().map(|(k, v)| (k.as_bytes().to_vec(), v.clone())).collect();
        self.kv.put_many(&items)
    }

    /// Removes durably.
    pub fn remove(&self, key: &str) -> Result<(), Error> {
        self.kv.remove(&[key.as_bytes().to_vec()])
    }

    /// Every record whose key starts with `prefix`.
    pub fn scan(&self, prefix: &str) -> Result<Vec<(String, Vec<u8>)>, Error> {
        Ok(self
            .kv
            .scan(prefix.as_bytes())?
            .into_iter()
            .map(|(k, v)| (String::from_utf8_lossy(&k).into_owned(), v))
            .collect())
    }
}

/// The learned placer's persistence, in a [`Kv`]: `weights`, and `e` + id (u64 BE) per
/// experience. On sled, writes are made durable by sled's periodic flush and the engine's flush
/// of every commit; losing the last fraction of a second of experiences in a crash only costs a
/// little learning.
pub struct KvPolicyStore {
    kv: SharedKv,
}

impl KvPolicyStore {
    pub fn new(kv: SharedKv) -> KvPolicyStore {
        KvPolicyStore { kv }
    }
}

fn experience_key(id: u64) -> Vec<u8> {
    let mut k = vec![b'e'; 9];
    k[1..].copy_from_slice(&id.to_be_bytes());
    k
}

fn policy_error(e: Error) -> StoreError {
    e.to_string().into()
}

impl plexus_policy::PolicyStore for KvPolicyStore {
    fn load_weights(&self) -> Result<Option<Vec<u8>>, StoreError> {
        self.kv.get(b"weights").map_err(policy_error)
    }
    fn save_weights(&self, bytes: &[u8]) -> Result<(), StoreError> {
        self.kv.put(b"weights", bytes).map_err(policy_error)
    }
    fn load_experiences(&self) -> Result<Vec<(u64, Vec<u8>)>, StoreError> {
        self.kv
            .scan(b"e")
            .map_err(policy_error)?
            .into_iter()
            .map(|(k, v)| {
                let id =
                    k.get(1..9).and_then(|b| b.try_into().ok()).map(u64::from_be_bytes).ok_or("bad experience key")?;
                Ok((id, v))
            })
            .collect()
    }
    fn put_experience(&self, id: u64, bytes: &[u8]) -> Result<(), StoreError> {
        self.kv.put(&experience_key(id), bytes).map_err(policy_error)
    }
    fn put_experiences(&self, items: &[(u64, Vec<u8>)]) -> Result<(), StoreError> {
        let records: Pairs = items.iter().map(|(id, bytes)| (experience_key(*id), bytes.clone())).collect();
        self.kv.put_many(&records).map_err(policy_error)
    }
    fn remove_experiences(&self, ids: &[u64]) -> Result<(), StoreError> {
        self.kv.remove(&ids.iter().map(|id| experience_key(*id)).collect::<Vec<_>>()).map_err(policy_error)
    }
}

/// The queues' shares in `kv` (name → share, f64 LE).
pub fn queue_shares(kv: &dyn Kv) -> Result<Vec<(String, f64)>, Error> {
    let mut out = Vec::new();
    for (k, v) in kv.scan(b"")? {
        match (std::str::from_utf8(&k), <[u8; 8]>::try_from(v.as_slice())) {
            (Ok(name), Ok(b)) => out.push((name.to_string(), f64::from_le_bytes(b))),
            _ => tracing::warn!("a queue record that is not name -> share; ignored"),
        }
    }
    Ok(out)
}

/// Stores (`Some`) or removes a queue's share, durably.
pub fn set_queue_share(kv: &dyn Kv, name: &str, share: Option<f64>) -> Result<(), Error> {
    match share {
        Some(s) => kv.put(name.as_bytes(), &s.to_le_bytes()),
        None => kv.remove(&[name.as_bytes().to_vec()]),
    }
}

impl SledStore {
    /// Opens (creating if needed) and migrates the store at `dir`.
    pub fn open(dir: &Path) -> Result<(SledStore, Vec<mig::Applied>), Error> {
        Self::open_waiting(dir, LOCK_WAIT)
    }

    /// [`SledStore::open`], waiting at most `wait` for another process to release the store: an
    /// administrative command asks the running coordinator instead of waiting long.
    pub fn open_waiting(dir: &Path, wait: std::time::Duration) -> Result<(SledStore, Vec<mig::Applied>), Error> {
        let db = open_db_waiting(dir, wait)?;
        let applied = mig::migrate(&db)?;
        let state = db.open_tree(mig::STATE_TREE)?;
        let estimates = db.open_tree(ESTIMATES_TREE)?;
        Ok((SledStore { db, state, estimates }, applied))
    }

    /// A tree of this database as a [`Kv`] (`durable`: flushed at every write).
    pub fn kv(&self, tree: &str, durable: bool) -> Result<SharedKv, Error> {
        Ok(std::sync::Arc::new(SledKv::new(self.db.open_tree(tree)?, durable)))
    }

    /// The namespaces the coordinator keeps besides its state, in this database's trees.
    pub fn spaces(&self) -> Result<Spaces, Error> {
        Ok(Spaces {
            security: self.kv(SECURITY_TREE, true)?,
            policy: self.kv(POLICY_TREE, false)?,
            queues: self.kv(QUEUES_TREE, true)?,
            archives: self.kv(ARCHIVES_TREE, true)?,
        })
    }

    /// Every state record as stored (v2 key, JSON value): what `migrate --to etcd://` copies.
    pub fn raw_state(&self) -> Result<Pairs, Error> {
        self.state.iter().map(|r| r.map(|(k, v)| (k.to_vec(), v.to_vec())).map_err(Error::from)).collect()
    }

    /// Migrations that opening the store at `dir` would run, without running them.
    pub fn pending(
        dir: &Path,
        wait: std::time::Duration,
    ) -> Result<(Option<u32>, Vec<&'static mig::Migration>), Error> {
        let db = open_db_waiting(dir, wait)?;
        Ok((mig::version(&db)?, mig::pending(&db)?))
    }
}

impl Store for SledStore {
    fn load(&self) -> Result<Snapshot, Error> {
        // A range per kind of record, so the placement records' pages are never read.
        let kinds = [mig::JOB_PREFIX, mig::SUBTASK_PREFIX, mig::WORKER_PREFIX];
        let items = kinds.into_iter().flat_map(|p| self.state.scan_prefix([p]));
        decode_records(items.map(|r| r.map(|(k, v)| (k.to_vec(), v.to_vec())).map_err(Error::from)))
    }

    fn placement(&self, job: JobId, idx: u32) -> Result<Option<PlacementRecord>, Error> {
        let k = placement_key(job, idx);
        self.state.get(&k)?.map(|v| decode_placement(&k, &v)).transpose()
    }

    fn commit(&self, batch: Batch) -> Result<(), Error> {
        if batch.is_empty() {
            return Ok(());
        }
        let mut b = sled::Batch::default();
        for (k, v) in batch.items {
            match v {
                Some(v) => b.insert(k, v),
                None => b.remove(k),
            }
        }
        self.state.apply_batch(b)?;
        // The batch is in sled's in-process log buffer; flushing writes and fsyncs it, after
        // which a kill -9 cannot lose it. One flush per group commit, not per record.
        self.db.flush()?;
        Ok(())
    }

    fn load_estimates(&self) -> Result<Option<Vec<u8>>, Error> {
        Ok(self.estimates.get(ESTIMATES_KEY)?.map(|v| v.to_vec()))
    }

    fn save_estimates(&self, bytes: &[u8]) -> Result<(), Error> {
        self.estimates.insert(ESTIMATES_KEY, bytes)?;
        Ok(())
    }
}

/// A store in memory, for tests of the engine.
#[derive(Default)]
pub struct MemStore {
    items: Mutex<BTreeMap<Vec<u8>, Vec<u8>>>,
    estimates: Mutex<Option<Vec<u8>>>,
}

impl Store for MemStore {
    fn load(&self) -> Result<Snapshot, Error> {
        let items = self.items.lock().map_err(|_| Error::Corrupt { key: "-".into(), reason: "poisoned".into() })?;
        decode_records(items.iter().map(|(k, v)| Ok((k.clone(), v.clone()))))
    }

    fn placement(&self, job: JobId, idx: u32) -> Result<Option<PlacementRecord>, Error> {
        let items = self.items.lock().map_err(|_| Error::Corrupt { key: "-".into(), reason: "poisoned".into() })?;
        let k = placement_key(job, idx);
        items.get(&k).map(|v| decode_placement(&k, v)).transpose()
    }

    fn commit(&self, batch: Batch) -> Result<(), Error> {
        let mut items = self.items.lock().map_err(|_| Error::Corrupt { key: "-".into(), reason: "poisoned".into() })?;
        for (k, v) in batch.items {
            match v {
                Some(v) => items.insert(k, v),
                None => items.remove(&k),
            };
        }
        Ok(())
    }

    fn load_estimates(&self) -> Result<Option<Vec<u8>>, Error> {
        Ok(self
            .estimates
            .lock()
            .map_err(|_| Error::Corrupt { key: "estimates".into(), reason: "poisoned".into() })?
            .clone())
    }

    fn save_estimates(&self, bytes: &[u8]) -> Result<(), Error> {
        *self.estimates.lock().map_err(|_| Error::Corrupt { key: "estimates".into(), reason: "poisoned".into() })? =
            Some(bytes.to_vec());
        Ok(())
    }
}

/// The measured speeds saved in `store`, or fresh ones when none were saved, or when what was
/// saved cannot be read (logged: losing them costs only estimates, which are learnt again).
pub fn load_estimates(store: &dyn Store) -> Estimates {
    match store.load_estimates() {
        Ok(None) => Estimates::new(),
        Ok(Some(bytes)) => serde_json::from_slice(&bytes).unwrap_or_else(|e| {
            tracing::warn!(error = %e, "the saved speed estimates cannot be read; starting with none");
            Estimates::new()
        }),
        Err(e) => {
            tracing::warn!(error = %e, "the saved speed estimates cannot be loaded; starting with none");
            Estimates::new()
        }
    }
}

/// Saves `estimates` in `store`. A failure is logged, not fatal: the estimates stay in memory and
/// the next save tries again.
pub fn save_estimates(store: &dyn Store, estimates: &Estimates) -> bool {
    let saved = serde_json::to_vec(estimates)
        .map_err(|e| e.to_string())
        .and_then(|b| store.save_estimates(&b).map_err(|e| e.to_string()));
    match saved {
        Ok(()) => true,
        Err(e) => {
            tracing::warn!(error = %e, "the speed estimates could not be saved");
            false
        }
    }
}

/// The key of a subtask's placement record.
pub fn placement_key(job: JobId, idx: u32) -> Vec<u8> {
    key(mig::PLACEMENT_PREFIX, job.as_bytes(), Some(idx))
}

/// A stored placement record.
pub fn decode_placement(k: &[u8], v: &[u8]) -> Result<PlacementRecord, Error> {
    serde_json::from_slice(v).map_err(|e| Error::Corrupt { key: hex::encode(k), reason: e.to_string() })
}

/// Decodes the state records (v2 keys) into a snapshot for the core; placement records are
/// skipped (see [`Store::placement`]).
pub fn decode_records(items: impl Iterator<Item = Result<(Vec<u8>, Vec<u8>), Error>>) -> Result<Snapshot, Error> {
    let mut snap = Snapshot::default();
    for item in items {
        let (k, v) = item?;
        let corrupt = |reason: String| Error::Corrupt { key: hex::encode(&k), reason };
        let id = |k: &[u8]| -> Option<[u8; 16]> { k.get(1..17)?.try_into().ok() };
        let idx = |k: &[u8]| -> Option<u32> { Some(u32::from_be_bytes(k.get(17..21)?.try_into().ok()?)) };
        match k.first().copied() {
            Some(mig::JOB_PREFIX) if k.len() == 17 => {
                snap.jobs.push(serde_json::from_slice(&v).map_err(|e| corrupt(e.to_string()))?);
            }
            Some(mig::SUBTASK_PREFIX) if k.len() == 21 => {
                let (Some(j), Some(i)) = (id(&k), idx(&k)) else { return Err(corrupt("bad key".into())) };
                snap.subtasks.push((
                    JobId::from_bytes(j),
                    i,
                    serde_json::from_slice(&v).map_err(|e| corrupt(e.to_string()))?,
                ));
            }
            Some(mig::WORKER_PREFIX) if k.len() == 17 => {
                let w: WorkerRecord = serde_json::from_slice(&v).map_err(|e| corrupt(e.to_string()))?;
                if id(&k).map(WorkerId::from_bytes) != Some(w.id) {
                    return Err(corrupt("worker record stored under another id".into()));
                }
                snap.workers.push(w);
            }
            // Not restored: read one at a time by `Store::placement`.
            Some(mig::PLACEMENT_PREFIX) if k.len() == 21 => {}
            _ => return Err(corrupt("unknown key kind".into())),
        }
    }
    Ok(snap)
}

#[cfg(test)]
mod tests {
    use super::*;
    use plexus_scheduler::core::{Core, CoreConfig};
    use plexus_scheduler::placer::heuristic;
    use plexus_scheduler::spec::{Format, parse};
    use serde_json::json;

    fn batch_of(core: &Core, job: JobId) -> Batch {
        let mut b = Batch::default();
        let j = core.job(job).unwrap();
        b.job(j.record());
        for (i, s) in j.subtasks().iter().enumerate() {
            b.subtask(job, i as u32, s);
        }
        b
    }

    #[test]
    fn committed_records_survive_reopening() {
        let dir = tempfile::tempdir().unwrap();
        let mut core = Core::new(CoreConfig::default(), heuristic("least-loaded", 1).unwrap());
        let job = JobId::random();
        core.submit(
            job,
            parse("[[task]]\nname = \"a\"\nkind = \"noop\"\nreplicas = 4\n", Format::Toml, "j").unwrap(),
            5,
        )
        .unwrap();
        {
            let (store, applied) = SledStore::open(dir.path()).unwrap();
            assert!(applied.is_empty());
            store.commit(batch_of(&core, job)).unwrap();
        }
        let (store, _) = SledStore::open(dir.path()).unwrap();
        let snap = store.load().unwrap();
        assert_eq!(snap.jobs.len(), 1);
        assert_eq!(snap.jobs[0].id, job);
        assert_eq!(snap.subtasks.len(), 4);
        let mut restored = Core::new(CoreConfig::default(), heuristic("least-loaded", 1).unwrap());
        restored.restore(snap, 10).unwrap();
        assert_eq!(restored.job(job).unwrap().total(), 4);
        assert_eq!(restored.ready_len(), 4);
    }

    /// A placement record is read back one at a time (`plexus explain`), never by the load a
    /// restore starts from; an absent one is `None`, a corrupt one an error naming its key.
    #[test]
    fn placement_records_are_read_one_at_a_time() {
        let dir = tempfile::tempdir().unwrap();
        let (store, _) = SledStore::open(dir.path()).unwrap();
        let job = JobId::random();
        let record = |decision| PlacementRecord {
            decision,
            placer: "least-loaded".into(),
            attempt: 1,
            chosen: WorkerId::random(),
            exploratory: false,
            reason: "lowest promised cpu share".into(),
            decided_at: 7,
            candidates: vec![],
            omitted: 3,
        };
        let mut b = Batch::default();
        b.placement(job, 0, &record(11));
        b.placement(job, 2, &record(12));
        b.raw(placement_key(job, 3), b"{not json".to_vec());
        store.commit(b).unwrap();
        let back = store.placement(job, 2).unwrap().expect("stored");
        assert_eq!((back.decision, back.omitted, back.reason.as_str()), (12, 3, "lowest promised cpu share"));
        assert!(store.placement(job, 1).unwrap().is_none());
        let e = store.placement(job, 3).unwrap_err().to_string();
        assert!(e.contains(&hex::encode(placement_key(job, 3))), "{e}");
        // The load skips them, the corrupt one included.
        let snap = store.load().unwrap();
        assert!(snap.jobs.is_empty() && snap.subtasks.is_empty());
    }

    /// A succeeded subtask's output digests survive a reopen and a restore; a record written
    /// before digests (no `digests` field) still loads, with none.
    #[test]
    fn output_digests_survive_reopening_and_old_records_load_without() {
        let dir = tempfile::tempdir().unwrap();
        let mut core = Core::new(CoreConfig::default(), heuristic("least-loaded", 1).unwrap());
        let job = JobId::random();
        let src = "[[task]]\nname = \"a\"\ncommand = [\"true\"]\noutputs = [\"o\"]\nreplicas = 2\n";
        core.submit(job, parse(src, Format::Toml, "j").unwrap(), 5).unwrap();
        let digest = plexus_proto::Digest::of(b"the output");
        let mut done = core.job(job).unwrap().subtasks()[0].clone();
        done.state = plexus_proto::SubtaskState::Succeeded;
        done.outputs = vec![("o".into(), 10)];
        done.digests = [("o".to_string(), digest)].into();
        let mut old = serde_json::to_value(&done).unwrap();
        assert_eq!(old["digests"]["o"], json!(digest.to_string()), "stored as hex");
        old.as_object_mut().unwrap().remove("digests");
        {
            let (store, _) = SledStore::open(dir.path()).unwrap();
            let mut b = Batch::default();
            b.job(core.job(job).unwrap().record());
            b.subtask(job, 0, &done);
            b.raw(key(mig::SUBTASK_PREFIX, job.as_bytes(), Some(1)), serde_json::to_vec(&old).unwrap());
            store.commit(b).unwrap();
        }
        let (store, _) = SledStore::open(dir.path()).unwrap();
        let snap = store.load().unwrap();
        let by_idx = |i: u32| snap.subtasks.iter().find(|(_, n, _)| *n == i).map(|(_, _, s)| s.clone()).unwrap();
        assert_eq!(by_idx(0).digests, done.digests);
        assert!(by_idx(1).digests.is_empty(), "an old record loads without digests");
        let mut restored = Core::new(CoreConfig::default(), heuristic("least-loaded", 1).unwrap());
        restored.restore(snap, 10).unwrap();
        let o = plexus_proto::ObjectId { job, task: "a".into(), rank: 0, name: "o".into() };
        assert_eq!(restored.digest_of(&o), Some(digest));
        assert_eq!(restored.digest_of(&plexus_proto::ObjectId { rank: 1, ..o }), None);
    }

    /// A database held open elsewhere is refused with an error naming the directory, after a
    /// bounded wait; once its holder lets go it opens.
    #[test]
    fn a_store_held_elsewhere_is_named_not_hung_on() {
        let dir = tempfile::tempdir().unwrap();
        let (held, _) = SledStore::open(dir.path()).unwrap();
        let e = open_db_waiting(dir.path(), std::time::Duration::from_millis(100)).unwrap_err();
        assert!(matches!(e, Error::Locked { .. }), "{e}");
        assert!(e.to_string().contains(&dir.path().display().to_string()), "{e}");
        drop(held);
        SledStore::open(dir.path()).expect("opens once the holder has let go");
    }

    /// A store written in the v1 layout (subtasks embedded in job records) opens, migrates and
    /// loads into the core.
    #[test]
    fn a_v1_store_is_migrated_and_loaded() {
        let dir = tempfile::tempdir().unwrap();
        let mut core = Core::new(CoreConfig::default(), heuristic("least-loaded", 1).unwrap());
        let job = JobId::random();
        core.submit(
            job,
            parse("[[task]]\nname = \"a\"\nkind = \"noop\"\nreplicas = 3\n", Format::Toml, "j").unwrap(),
            5,
        )
        .unwrap();
        {
            let db = sled::open(dir.path()).unwrap();
            let j = core.job(job).unwrap();
            let mut v = serde_json::to_value(j.record()).unwrap();
            v["subtasks"] = json!(j.subtasks());
            db.open_tree("jobs").unwrap().insert(job.as_bytes(), serde_json::to_vec(&v).unwrap()).unwrap();
            plexus_migrations::set_version(&db, 1).unwrap();
        }
        let (_, pending) = SledStore::pending(dir.path(), LOCK_WAIT).unwrap();
        assert_eq!(pending.len(), 1);
        let (store, applied) = SledStore::open(dir.path()).unwrap();
        assert_eq!(applied.len(), 1);
        let mut restored = Core::new(CoreConfig::default(), heuristic("least-loaded", 1).unwrap());
        restored.restore(store.load().unwrap(), 10).unwrap();
        assert_eq!(restored.job(job).unwrap().subtasks().len(), 3);
    }

    /// Saved speeds come back after a reopen; unreadable ones give fresh estimates, not an error.
    #[test]
    fn estimates_are_saved_in_their_tree_and_damage_starts_fresh() {
        let dir = tempfile::tempdir().unwrap();
        let (a, b) = (WorkerId::random(), WorkerId::random());
        let mut e = Estimates::new();
        e.observe_run(a, 7, None, 120.0);
        e.observe_fetch(a, b, None, 1, 1 << 20, 40.0);
        {
            let (store, _) = SledStore::open(dir.path()).unwrap();
            assert!(load_estimates(&store).is_empty(), "nothing saved yet");
            assert!(save_estimates(&store, &e));
            store.db.flush().unwrap();
        }
        let (store, _) = SledStore::open(dir.path()).unwrap();
        let back = load_estimates(&store);
        assert_eq!(back.revision(), e.revision());
        assert_eq!(back.compute(a, 7, None), e.compute(a, 7, None));
        assert_eq!(back.link(a, b, None), e.link(a, b, None));
        store.save_estimates(b"{not json").unwrap();
        assert!(load_estimates(&store).is_empty());
        let mem = MemStore::default();
        mem.save_estimates(br#"{"format": 99, "revision": 1, "runs": [], "flop_rates": [], "links": []}"#).unwrap();
        assert!(load_estimates(&mem).is_empty(), "another format starts fresh");
    }

    #[test]
    fn corrupt_records_are_reported_not_panicked_on() {
        let store = MemStore::default();
        store.items.lock().unwrap().insert(key(mig::JOB_PREFIX, &[7; 16], None), b"{oops".to_vec());
        let e = store.load().unwrap_err();
        assert!(e.to_string().contains("6a07070707"), "{e}");
    }
}
