//! Versioned, ordered migrations of the coordinator's sled keyspace.
//!
//! The schema version lives in the `meta` tree under `schema_version` (u32, big-endian). A fresh
//! database is stamped with [`CURRENT`]; an older one is brought forward by running, in order,
//! every migration whose target is above its version. A database newer than this binary, or one
//! holding data but no version, is refused rather than guessed at.
//!
//! # Layouts
//! - **v1**: tree `jobs` (key: job uuid, 16 bytes) holding each job as JSON *with its subtasks
//!   embedded* (`"subtasks": [...]`); tree `workers` (key: worker uuid) holding worker JSON.
//! - **v2** (current): one tree `state`, keys prefixed by record kind: `j` + job uuid → job JSON
//!   (no subtasks), `s` + job uuid + index (u32 BE) → subtask JSON, `w` + worker uuid → worker
//!   JSON, `p` + job uuid + index → latest placement JSON. One tree, because sled applies a batch
//!   to one tree atomically: the coordinator's group commit of many records is then all or
//!   nothing across a crash. Subtasks are separate records so a state change rewrites one small
//!   value, not a job of 10,000 subtasks. Beside it, tree `policy` holds the learned placer's
//!   weights (`weights`) and experiences (`e` + id); it was added within v2, as a new tree that
//!   older v2 binaries never open.
//!
//! Migrations rewrite values as generic JSON, so they do not depend on the coordinator's types
//! and keep working when those types change.

use serde_json::Value;

/// The layout this binary reads and writes.
pub const CURRENT: u32 = 2;

pub const META_TREE: &str = "meta";
pub const VERSION_KEY: &[u8] = b"schema_version";

/// The v2 tree and its key prefixes.
pub const STATE_TREE: &str = "state";
pub const JOB_PREFIX: u8 = b'j';
pub const SUBTASK_PREFIX: u8 = b's';
pub const WORKER_PREFIX: u8 = b'w';
pub const PLACEMENT_PREFIX: u8 = b'p';

#[derive(Debug, thiserror::Error)]
pub enum MigrationError {
    #[error("sled: {0}")]
    Sled(#[from] sled::Error),
    #[error("the store has schema version {found}, newer than this binary's {CURRENT}; upgrade plexus-coordinator")]
    TooNew { found: u32 },
    #[error("the store holds data (tree {tree:?}) but no schema version; refusing to guess its layout")]
    Unversioned { tree: String },
    #[error("corrupt schema version value {0:?}")]
    BadVersion(Vec<u8>),
    #[error("migration {to} ({name}): record {key}: {reason}")]
    BadRecord { to: u32, name: &'static str, key: String, reason: String },
}

/// One step from version `to - 1` to `to`.
pub struct Migration {
    pub to: u32,
    pub name: &'static str,
    apply: fn(&sled::Db) -> Result<u64, MigrationError>,
}

/// Every migration, in order.
pub static MIGRATIONS: &[Migration] =
    &[Migration { to: 2, name: "one atomic state tree; subtasks split out of job records", apply: v1_to_v2 }];

/// What running one migration did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Applied {
    pub to: u32,
    pub name: &'static str,
    pub records: u64,
}

/// The stored version; `None` for a fresh, empty database.
pub fn version(db: &sled::Db) -> Result<Option<u32>, MigrationError> {
    let meta = db.open_tree(META_TREE)?;
    match meta.get(VERSION_KEY)? {
        Some(v) => {
            let b: [u8; 4] = v.as_ref().try_into().map_err(|_| MigrationError::BadVersion(v.to_vec()))?;
            Ok(Some(u32::from_be_bytes(b)))
        }
        None => {
            for name in db.tree_names() {
                let name_s = String::from_utf8_lossy(&name).to_string();
                if name_s == META_TREE {
                    continue;
                }
                if !db.open_tree(&name)?.is_empty() {
                    return Err(MigrationError::Unversioned { tree: name_s });
                }
            }
            Ok(None)
        }
    }
}

/// Migrations that [`migrate`] would run, in order.
pub fn pending(db: &sled::Db) -> Result<Vec<&'static Migration>, MigrationError> {
    match version(db)? {
        None => Ok(Vec::new()),
        Some(v) if v > CURRENT => Err(MigrationError::TooNew { found: v }),
        Some(v) => Ok(MIGRATIONS.iter().filter(|m| m.to > v).collect()),
    }
}

/// Brings the database to [`CURRENT`], each step durable before the next starts.
pub fn migrate(db: &sled::Db) -> Result<Vec<Applied>, MigrationError> {
    let steps = pending(db)?;
    let mut done = Vec::new();
    if version(db)?.is_none() {
        set_version(db, CURRENT)?;
        return Ok(done);
    }
    for m in steps {
        let records = (m.apply)(db)?;
        set_version(db, m.to)?;
        done.push(Applied { to: m.to, name: m.name, records });
    }
    Ok(done)
}

/// Stamps the version and flushes. Public for tests that build old layouts.
pub fn set_version(db: &sled::Db, v: u32) -> Result<(), MigrationError> {
    db.open_tree(META_TREE)?.insert(VERSION_KEY, &v.to_be_bytes())?;
    db.flush()?;
    Ok(())
}

/// v1 → v2: moves `jobs` and `workers` into the prefixed `state` tree and splits each job's
/// embedded subtasks into their own records. Each job moves in one atomic batch, and the v1
/// record is removed only after, so an interrupted run resumes where it stopped.
fn v1_to_v2(db: &sled::Db) -> Result<u64, MigrationError> {
    const NAME: &str = "one atomic state tree; subtasks split out of job records";
    let bad =
        |key: &[u8], reason: String| MigrationError::BadRecord { to: 2, name: NAME, key: hex::encode(key), reason };
    let state = db.open_tree(STATE_TREE)?;
    let jobs = db.open_tree("jobs")?;
    let workers = db.open_tree("workers")?;
    let mut records = 0u64;

    for item in jobs.iter() {
        let (key, value) = item?;
        if key.len() != 16 {
            return Err(bad(&key, format!("job key is {} bytes, expected 16", key.len())));
        }
        let mut job: Value = serde_json::from_slice(&value).map_err(|e| bad(&key, e.to_string()))?;
        let subtasks = match job.as_object_mut().and_then(|o| o.remove("subtasks")) {
            Some(Value::Array(a)) => a,
            Some(_) => return Err(bad(&key, "\"subtasks\" is not an array".into())),
            None => Vec::new(),
        };
        let mut batch = sled::Batch::default();
        for (i, s) in subtasks.iter().enumerate() {
            let mut k = vec![SUBTASK_PREFIX];
            k.extend_from_slice(&key);
            k.extend_from_slice(&(i as u32).to_be_bytes());
            batch.insert(k, serde_json::to_vec(s).map_err(|e| bad(&key, e.to_string()))?);
            records += 1;
        }
        let mut k = vec![JOB_PREFIX];
        k.extend_from_slice(&key);
        batch.insert(k, serde_json::to_vec(&job).map_err(|e| bad(&key, e.to_string()))?);
        records += 1;
        state.apply_batch(batch)?;
        state.flush()?;
        jobs.remove(&key)?;
    }
    for item in workers.iter() {
        let (key, value) = item?;
        let mut k = vec![WORKER_PREFIX];
        k.extend_from_slice(&key);
        state.insert(k, value)?;
        records += 1;
        state.flush()?;
        workers.remove(&key)?;
    }
    db.drop_tree("jobs")?;
    db.drop_tree("workers")?;
    db.flush()?;
    Ok(records)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn v1_store(dir: &std::path::Path) -> sled::Db {
        let db = sled::open(dir).unwrap();
        let jobs = db.open_tree("jobs").unwrap();
        let job = json!({"id": "job-00000000000000000000000000000001", "seq": 1, "state": "running",
            "subtasks": [{"task": "a", "rank": 0, "state": "succeeded"}, {"task": "a", "rank": 1, "state": "ready"}]});
        jobs.insert([1u8; 16], serde_json::to_vec(&job).unwrap()).unwrap();
        db.open_tree("workers").unwrap().insert([2u8; 16], br#"{"id":"w"}"#.to_vec()).unwrap();
        set_version(&db, 1).unwrap();
        db
    }

    #[test]
    fn fresh_store_is_stamped_current_without_migrating() {
        let dir = tempfile::tempdir().unwrap();
        let db = sled::open(dir.path()).unwrap();
        assert!(pending(&db).unwrap().is_empty());
        assert!(migrate(&db).unwrap().is_empty());
        assert_eq!(version(&db).unwrap(), Some(CURRENT));
    }

    #[test]
    fn v1_store_is_migrated_to_v2() {
        let dir = tempfile::tempdir().unwrap();
        let db = v1_store(dir.path());
        let p = pending(&db).unwrap();
        assert_eq!(p.len(), 1);
        assert_eq!(p[0].to, 2);
        let applied = migrate(&db).unwrap();
        assert_eq!(applied, vec![Applied { to: 2, name: MIGRATIONS[0].name, records: 4 }]);
        assert_eq!(version(&db).unwrap(), Some(2));

        let state = db.open_tree(STATE_TREE).unwrap();
        let mut jk = vec![JOB_PREFIX];
        jk.extend_from_slice(&[1u8; 16]);
        let job: Value = serde_json::from_slice(&state.get(&jk).unwrap().unwrap()).unwrap();
        assert!(job.get("subtasks").is_none());
        assert_eq!(job["seq"], 1);
        let mut sk = vec![SUBTASK_PREFIX];
        sk.extend_from_slice(&[1u8; 16]);
        sk.extend_from_slice(&1u32.to_be_bytes());
        let s: Value = serde_json::from_slice(&state.get(&sk).unwrap().unwrap()).unwrap();
        assert_eq!(s, json!({"task": "a", "rank": 1, "state": "ready"}));
        let mut wk = vec![WORKER_PREFIX];
        wk.extend_from_slice(&[2u8; 16]);
        assert!(state.get(&wk).unwrap().is_some());
        assert!(!db.tree_names().iter().any(|n| n.as_ref() == b"jobs"));
        // Running again is a no-op.
        assert!(migrate(&db).unwrap().is_empty());
    }

    #[test]
    fn newer_or_unversioned_stores_are_refused() {
        let dir = tempfile::tempdir().unwrap();
        let db = sled::open(dir.path()).unwrap();
        set_version(&db, CURRENT + 1).unwrap();
        assert!(matches!(migrate(&db), Err(MigrationError::TooNew { .. })));

        let dir = tempfile::tempdir().unwrap();
        let db = sled::open(dir.path()).unwrap();
        db.open_tree("jobs").unwrap().insert(b"x", b"y").unwrap();
        let e = migrate(&db).unwrap_err();
        assert!(e.to_string().contains("no schema version"), "{e}");
    }

    #[test]
    fn a_corrupt_v1_record_is_named() {
        let dir = tempfile::tempdir().unwrap();
        let db = v1_store(dir.path());
        db.open_tree("jobs").unwrap().insert([3u8; 16], b"not json".to_vec()).unwrap();
        let e = migrate(&db).unwrap_err();
        assert!(e.to_string().contains("03030303"), "{e}");
        assert_eq!(version(&db).unwrap(), Some(1), "a failed migration leaves the version alone");
    }
}
