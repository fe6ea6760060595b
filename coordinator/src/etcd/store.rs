//! The engine's state in etcd: an append-only log of committed rounds, snapshots written in the
//! background, and the load that reads the last snapshot and the log after it (see the layout
//! in [`crate::etcd`]).

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Instant;

use etcd_client::{DeleteOptions, TxnOp};
use plexus_proto::JobId;
use plexus_scheduler::core::{PlacementRecord, Snapshot};

use super::client::{Etcd, etcd_error, prefix_end};
use super::frame::{ENTRY_FORMAT, ENTRY_HEADER, PART, compress, decode_items, decompress, encode_items};
use super::kv::EtcdKv;
use crate::error::Error;
use crate::store::{Batch, Kv, Store};

/// A snapshot is written once the log since the last one holds this many bytes…
pub const SNAPSHOT_AFTER_BYTES: u64 = 32 << 20;
/// … or this many entries (each costs a little at load).
pub const SNAPSHOT_AFTER_ENTRIES: u64 = 20_000;

/// The engine's state in etcd: see the module's documentation.
pub struct EtcdStore {
    etcd: Etcd,
    /// The largest log or snapshot part ([`PART`]; smaller in tests).
    part: usize,
    state: Mutex<StateLog>,
    estimates: EtcdKv,
}

/// Everything the store keeps in memory: the records as committed (for snapshots), where the log
/// stands, and the snapshot being written.
struct StateLog {
    records: BTreeMap<Vec<u8>, Arc<[u8]>>,
    /// The seq of the next log entry.
    next_seq: u64,
    /// Log since the last snapshot.
    log_bytes: u64,
    log_entries: u64,
    /// The snapshot being written in the background, if any.
    snapshotting: Option<std::thread::JoinHandle<()>>,
    /// The etcd revision of the last snapshot's pointer: history up to it may be compacted once
    /// the next snapshot is written.
    last_snapshot_revision: Arc<Mutex<i64>>,
    loaded: bool,
    /// What a standby has read so far ([`EtcdStore::follow`]), for its load to read on from.
    warm: Option<Loaded>,
}

/// What a read does with a last round whose last part is not written yet.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Tail {
    /// Drops it: its leader died (a load by the next leader).
    Drop,
    /// Leaves it for the next read: its leader is writing it (a standby following).
    Await,
}

/// What [`EtcdStore::read`] found: the records as of the last complete round, and where the
/// log stands.
struct Loaded {
    records: BTreeMap<Vec<u8>, Arc<[u8]>>,
    next_seq: u64,
    log_bytes: u64,
    log_entries: u64,
}

impl StateLog {
    /// Continues from what was read.
    fn take(&mut self, l: Loaded) {
        self.records = l.records;
        self.next_seq = l.next_seq;
        self.log_bytes = l.log_bytes;
        self.log_entries = l.log_entries;
        self.loaded = true;
    }
}

#[derive(serde::Serialize, serde::Deserialize)]
struct SnapshotPointer {
    seq: u64,
    parts: u32,
    records: u64,
    bytes: u64,
    at_ms: u64,
}

/// A record of the state in etcd that cannot be read as this store wrote it.
fn corrupt(key: &str, reason: String) -> Error {
    Error::Corrupt { key: key.to_string(), reason }
}

impl EtcdStore {
    pub fn new(etcd: Etcd) -> EtcdStore {
        let estimates = EtcdKv { etcd: etcd.clone(), space: "estimates".into() };
        EtcdStore {
            etcd,
            part: PART,
            estimates,
            state: Mutex::new(StateLog {
                records: BTreeMap::new(),
                next_seq: 1,
                log_bytes: 0,
                log_entries: 0,
                snapshotting: None,
                last_snapshot_revision: Arc::new(Mutex::new(0)),
                loaded: false,
                warm: None,
            }),
        }
    }

    /// Cuts log rounds and snapshots into parts of at most `part` bytes (tests use small ones).
    pub fn with_part(mut self, part: usize) -> EtcdStore {
        self.part = part.clamp(64, PART);
        self
    }

    fn log_key(&self, seq: u64) -> Vec<u8> {
        self.etcd.key(&format!("/state/log/{seq:016x}"))
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, StateLog> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Reads the snapshot and the log after it: the records as of the last complete round.
    fn read(&self) -> Result<Loaded, Error> {
        self.read_from(None, Tail::Drop)
    }

    /// The records as of the last complete round, read on from `warm` (what an earlier read
    /// found, [`EtcdStore::follow`]) when no snapshot has overtaken it: only the log written since;
    /// else from the snapshot. `tail` says what a last round not yet whole is: one a leader that
    /// died left half-written (dropped: the next leader appends after it), or one the living
    /// leader is writing (read again next time).
    fn read_from(&self, warm: Option<Loaded>, tail: Tail) -> Result<Loaded, Error> {
        let pointer = |etcd: &Etcd| -> Result<Option<SnapshotPointer>, Error> {
            let Some(p) = etcd.get(etcd.key("/state/snapshot"))? else { return Ok(None) };
            serde_json::from_slice(&p).map(Some).map_err(|e| corrupt("state/snapshot", e.to_string()))
        };
        let mut warm = warm;
        loop {
            let p = pointer(&self.etcd)?;
            let snapshot_seq = p.as_ref().map_or(0, |p| p.seq);
            // A snapshot at seq T deletes the log up to T: a warm state that has applied up to
            // `next_seq - 1 >= T` reads on from the log; one the snapshot overtook starts again.
            let base = match warm.take() {
                Some(w) if snapshot_seq < w.next_seq => w,
                _ => self.read_snapshot(p.as_ref())?,
            };
            let l = self.read_log(base, tail)?;
            // A snapshot written since the pointer was read may have deleted log entries not yet
            // applied: start again from it.
            if pointer(&self.etcd)?.map_or(0, |p| p.seq) == snapshot_seq {
                return Ok(l);
            }
            tracing::debug!("a snapshot was written while the log was read; reading again from it");
        }
    }

    /// The records of snapshot `p` (none: empty), with the log after it still to read.
    fn read_snapshot(&self, p: Option<&SnapshotPointer>) -> Result<Loaded, Error> {
        let mut records: BTreeMap<Vec<u8>, Arc<[u8]>> = BTreeMap::new();
        let Some(p) = p else { return Ok(Loaded { records, next_seq: 1, log_bytes: 0, log_entries: 0 }) };
        let prefix = self.etcd.key(&format!("/state/snap/{:016x}/", p.seq));
        let parts = self.etcd.range(prefix.clone(), prefix_end(&prefix))?;
        if parts.len() != p.parts as usize {
            return Err(corrupt("state/snapshot", format!("{} of its {} parts are there", parts.len(), p.parts)));
        }
        let bytes: Vec<u8> = parts.into_iter().flat_map(|(_, v)| v).collect();
        for (k, v) in decode_items(&decompress(&bytes, "state/snapshot")?, "state/snapshot")? {
            if let Some(v) = v {
                records.insert(k, v.into());
            }
        }
        Ok(Loaded { records, next_seq: p.seq + 1, log_bytes: 0, log_entries: 0 })
    }

    /// Applies the log from `base.next_seq` on to `base`'s records.
    fn read_log(&self, base: Loaded, tail: Tail) -> Result<Loaded, Error> {
        let Loaded { mut records, next_seq: from_seq, log_bytes: mut bytes, log_entries: mut count } = base;
        let from = self.log_key(from_seq);
        let end = prefix_end(&self.etcd.key("/state/log/"));
        let entries = self.etcd.range(from, end)?;
        let mut last_seq = from_seq - 1;
        // The parts of the round being read: (its round id, the compressed bytes so far, and the
        // bytes and entries they were).
        let mut pending: Option<(u64, Vec<u8>, u64, u64)> = None;
        let prefix_len = self.etcd.key("/state/log/").len();
        for (k, v) in entries {
            let name = String::from_utf8_lossy(&k[prefix_len..]).into_owned();
            let seq =
                u64::from_str_radix(&name, 16).map_err(|e| corrupt(&format!("state/log/{name}"), e.to_string()))?;
            last_seq = last_seq.max(seq);
            if v.len() < ENTRY_HEADER || v[0] != ENTRY_FORMAT {
                return Err(corrupt(&format!("state/log/{name}"), "not a log entry of this format".into()));
            }
            let round = u64::from_be_bytes(v[1..9].try_into().expect("8 bytes"));
            let last = v[9] == 1;
            match &mut pending {
                Some((r, buf, b, n)) if *r == round => {
                    buf.extend_from_slice(&v[ENTRY_HEADER..]);
                    *b += v.len() as u64;
                    *n += 1;
                }
                _ => {
                    // A round left half-written by a leader that died is dropped: it was never
                    // acknowledged.
                    if let Some((r, _, b, n)) = &pending {
                        tracing::warn!(round = r, "dropping a round whose last part was never written");
                        (bytes, count) = (bytes + b, count + n);
                    }
                    pending = Some((round, v[ENTRY_HEADER..].to_vec(), v.len() as u64, 1));
                }
            }
            if last {
                let (r, buf, b, n) = pending.take().expect("set above");
                (bytes, count) = (bytes + b, count + n);
                let what = format!("state/log round {r:x}");
                for (k, v) in decode_items(&decompress(&buf, &what)?, &what)? {
                    match v {
                        Some(v) => records.insert(k, v.into()),
                        None => records.remove(&k),
                    };
                }
            }
        }
        let next_seq = match (pending, tail) {
            // Read again from its first part next time.
            (Some((r, ..)), Tail::Await) => r,
            (Some((r, _, b, n)), Tail::Drop) => {
                tracing::warn!(round = r, "dropping the last round: its last part was never written");
                (bytes, count) = (bytes + b, count + n);
                last_seq + 1
            }
            (None, _) => last_seq + 1,
        };
        Ok(Loaded { records, next_seq, log_bytes: bytes, log_entries: count })
    }

    /// A standby's catching up: reads what the leader has committed since the last call (at
    /// first, or after a snapshot overtook it, the whole state), so that taking over reads only
    /// the log written since (issue 35: a new leader read and decoded 200,000 subtasks' state
    /// after it was elected, 20 s of a takeover). Not for a store that leads.
    pub fn follow(&self) -> Result<(), Error> {
        let warm = self.lock().warm.take();
        let l = self.read_from(warm, Tail::Await)?;
        self.lock().warm = Some(l);
        Ok(())
    }

    /// Writes a snapshot of `records` as of log entry `seq`, then the pointer (deleting the log
    /// it covers and older snapshots), then compacts etcd's history up to the previous one.
    fn write_snapshot(
        etcd: &Etcd,
        records: BTreeMap<Vec<u8>, Arc<[u8]>>,
        seq: u64,
        part_size: usize,
        last_revision: &Mutex<i64>,
    ) -> Result<(), Error> {
        let t = Instant::now();
        let raw = encode_items(records.iter().map(|(k, v)| (k.as_slice(), Some(&v[..]))));
        let bytes = compress(&raw);
        let prefix = etcd.key(&format!("/state/snap/{seq:016x}/"));
        let parts = bytes.chunks(part_size).count().max(1);
        for (i, part) in bytes.chunks(part_size).enumerate() {
            let mut k = prefix.clone();
            k.extend_from_slice(format!("{i:08x}").as_bytes());
            etcd.write(vec![TxnOp::put(k, part.to_vec(), None)])?;
        }
        let pointer = SnapshotPointer {
            seq,
            parts: parts as u32,
            records: records.len() as u64,
            bytes: bytes.len() as u64,
            at_ms: plexus_proto::now_ms(),
        };
        let log_from = etcd.key("/state/log/");
        let log_to = etcd.key(&format!("/state/log/{:016x}", seq + 1));
        let snaps = etcd.key("/state/snap/");
        let r = etcd.write(vec![
            TxnOp::put(etcd.key("/state/snapshot"), serde_json::to_vec(&pointer).expect("plain struct"), None),
            TxnOp::delete(log_from, Some(DeleteOptions::new().with_range(log_to))),
            TxnOp::delete(snaps, Some(DeleteOptions::new().with_range(prefix))),
        ])?;
        let revision = r.header().map(|h| h.revision()).unwrap_or(0);
        let previous = std::mem::replace(&mut *last_revision.lock().unwrap_or_else(|p| p.into_inner()), revision);
        if previous > 0 {
            let client = etcd.client();
            // Compaction is housekeeping: a failure (another compaction got there first) is
            // only logged.
            if let Err(e) = etcd.block(async move {
                let mut c = client;
                c.compact(previous, None).await.map_err(etcd_error("compacting etcd's history"))
            }) {
                tracing::debug!(error = %e, "etcd compaction");
            }
        }
        tracing::info!(
            seq,
            records = records.len(),
            raw = raw.len(),
            compressed = bytes.len(),
            parts,
            ms = t.elapsed().as_millis() as u64,
            "snapshot written to etcd"
        );
        Ok(())
    }

    /// Starts a snapshot in the background when the log has grown enough and none is running.
    fn maybe_snapshot(&self, st: &mut StateLog) {
        if st.log_bytes < SNAPSHOT_AFTER_BYTES && st.log_entries < SNAPSHOT_AFTER_ENTRIES {
            return;
        }
        if st.snapshotting.as_ref().is_some_and(|h| !h.is_finished()) {
            return;
        }
        if let Some(h) = st.snapshotting.take() {
            let _ = h.join();
        }
        let records = st.records.clone();
        let seq = st.next_seq - 1;
        let etcd = self.etcd.clone();
        let last_revision = st.last_snapshot_revision.clone();
        let part = self.part;
        st.log_bytes = 0;
        st.log_entries = 0;
        st.snapshotting = std::thread::Builder::new()
            .name("plexus-snapshot".into())
            .spawn(move || {
                if let Err(e) = EtcdStore::write_snapshot(&etcd, records, seq, part, &last_revision) {
                    tracing::warn!(error = %e, seq, "writing a snapshot to etcd failed; the log keeps everything and the next one tries again");
                }
            })
            .map_err(|e| tracing::warn!(error = %e, "cannot start the snapshot thread"))
            .ok();
    }

    /// Writes a snapshot now and waits for it (tests, and `migrate`).
    pub fn snapshot_now(&self) -> Result<(), Error> {
        let (records, seq, last) = {
            let mut st = self.lock();
            if let Some(h) = st.snapshotting.take() {
                let _ = h.join();
            }
            st.log_bytes = 0;
            st.log_entries = 0;
            (st.records.clone(), st.next_seq - 1, st.last_snapshot_revision.clone())
        };
        EtcdStore::write_snapshot(&self.etcd, records, seq, self.part, &last)
    }

    /// Log entries and bytes since the last snapshot (what a load would read after it).
    pub fn log_size(&self) -> (u64, u64) {
        let st = self.lock();
        (st.log_entries, st.log_bytes)
    }
}

impl Drop for EtcdStore {
    fn drop(&mut self) {
        if let Some(h) = self.lock().snapshotting.take() {
            let _ = h.join();
        }
    }
}

impl Store for EtcdStore {
    fn load(&self) -> Result<Snapshot, Error> {
        let warm = self.lock().warm.take();
        let loaded = self.read_from(warm, Tail::Drop)?;
        // Placement records stay encoded in memory (read one at a time by `placement`).
        let restored = loaded.records.iter().filter(|(k, _)| k.first() != Some(&plexus_migrations::PLACEMENT_PREFIX));
        let snap = crate::store::decode_records(restored.map(|(k, v)| Ok((k.clone(), v.to_vec()))))?;
        self.lock().take(loaded);
        Ok(snap)
    }

    fn placement(&self, job: JobId, idx: u32) -> Result<Option<PlacementRecord>, Error> {
        let mut st = self.lock();
        if !st.loaded {
            st.take(self.read()?);
        }
        let k = crate::store::placement_key(job, idx);
        st.records.get(&k).map(|v| crate::store::decode_placement(&k, v)).transpose()
    }

    fn commit(&self, batch: Batch) -> Result<(), Error> {
        if batch.is_empty() {
            return Ok(());
        }
        let mut st = self.lock();
        if !st.loaded {
            // Appending without knowing the log's end could overwrite entries.
            st.take(self.read()?);
        }
        let items = batch.into_items();
        let raw = encode_items(items.iter().map(|(k, v)| (k.as_slice(), v.as_deref())));
        let bytes = compress(&raw);
        let round = st.next_seq;
        let parts: Vec<&[u8]> = bytes.chunks(self.part).collect();
        let n = parts.len();
        for (i, part) in parts.into_iter().enumerate() {
            let seq = round + i as u64;
            let mut v = Vec::with_capacity(ENTRY_HEADER + part.len());
            v.push(ENTRY_FORMAT);
            v.extend_from_slice(&round.to_be_bytes());
            v.push(u8::from(i + 1 == n));
            v.extend_from_slice(part);
            st.log_bytes += v.len() as u64;
            st.log_entries += 1;
            self.etcd.write(vec![TxnOp::put(self.log_key(seq), v, None)])?;
            st.next_seq = seq + 1;
        }
        for (k, v) in items {
            match v {
                Some(v) => st.records.insert(k, v.into()),
                None => st.records.remove(&k),
            };
        }
        self.maybe_snapshot(&mut st);
        Ok(())
    }

    fn load_estimates(&self) -> Result<Option<Vec<u8>>, Error> {
        self.estimates.get(b"cluster")
    }

    fn save_estimates(&self, bytes: &[u8]) -> Result<(), Error> {
        self.estimates.put(b"cluster", bytes)
    }
}
