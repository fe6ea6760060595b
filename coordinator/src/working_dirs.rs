//! The archives of jobs' working dirs (`working_dir` in a job file): uploaded by clients,
//! content-addressed by their BLAKE3 digest, kept in the store's `archives` namespace (a sled
//! tree, or etcd keys written in 1 MiB parts, so a standby that takes over serves the archives of
//! the jobs it inherits), and fetched by workers.
//!
//! Bounds: one archive is at most `limit` bytes (refused while it is received, before it is
//! kept), and all of them together at most `capacity`. A job that has not ended holds its
//! archive; an archive no such job holds may be removed, oldest first, when an upload needs its
//! room (so resubmitting unchanged code usually uploads nothing). A submit that names an archive
//! and the removal of archives are serialised by one lock, so no job is accepted naming an
//! archive that is being removed.

use std::collections::HashSet;

use futures::{Stream, StreamExt};
use plexus_proto::{Digest, pb};
use serde::{Deserialize, Serialize};
use tokio::sync::{Mutex, MutexGuard, Semaphore};

use crate::engine::{Cmd, EngineHandle};
use crate::error::Error;
use crate::store::SharedKv;

/// The default largest archive (`--working-dir-limit`): as `plexus_archive::Limits::DEFAULT`.
pub const DEFAULT_LIMIT: u64 = plexus_archive::Limits::DEFAULT.archive_bytes;
/// The default room for every archive together (`--working-dir-store`): ten of the largest.
pub const DEFAULT_CAPACITY: u64 = 10 * DEFAULT_LIMIT;
/// A chunk of an archive on the wire.
pub const CHUNK: usize = 1 << 20;
/// Uploads held in memory at once (each up to `limit` bytes until it is checked and kept), and
/// fetches served at once (each reads its archive whole): the coordinator's memory for archives
/// is bounded by these times the limit.
const UPLOADS_AT_ONCE: usize = 2;
const FETCHES_AT_ONCE: usize = 4;

/// An archive on its way to a worker.
pub type ChunkStream = std::pin::Pin<Box<dyn Stream<Item = Result<pb::WorkingDirChunk, tonic::Status>> + Send>>;

/// What is kept of an archive besides its bytes (`m` + digest); its bytes are `d` + digest,
/// written first, so a record means the bytes are there.
#[derive(Serialize, Deserialize)]
struct Meta {
    size: u64,
    stored_ms: u64,
}

/// The archives and their bounds.
pub struct WorkingDirs {
    kv: SharedKv,
    limit: u64,
    capacity: u64,
    /// Held from "is the archive here?" to the engine's accepting the job, and from "which
    /// archives do live jobs hold?" to their removal.
    lock: Mutex<()>,
    uploads: Semaphore,
    fetches: std::sync::Arc<Semaphore>,
}

fn meta_key(d: &Digest) -> Vec<u8> {
    format!("m{d}").into_bytes()
}

fn data_key(d: &Digest) -> Vec<u8> {
    format!("d{d}").into_bytes()
}

async fn blocking<T: Send + 'static>(f: impl FnOnce() -> Result<T, Error> + Send + 'static) -> Result<T, Error> {
    tokio::task::spawn_blocking(f).await.map_err(|e| Error::Engine(format!("working-dir store: {e}")))?
}

fn digest_field(field: &'static str, bytes: &[u8]) -> Result<Digest, Error> {
    Digest::from_field(field, bytes)
        .map_err(|e| Error::Invalid(format!("working_dir: {e}")))?
        .ok_or_else(|| Error::Invalid(format!("working_dir: {field} is empty (expected a BLAKE3 digest, 32 bytes)")))
}

/// The archives, where this coordinator keeps them.
pub fn kept(dirs: Option<&WorkingDirs>) -> Result<&WorkingDirs, Error> {
    dirs.ok_or_else(|| Error::Unavailable("this coordinator keeps no working dirs".into()))
}

/// For a submit of `spec` (from `file`) with the archive `digest` the request carries: the
/// archive held until the guard is dropped, its digest and size recorded in the spec; `None`
/// when the job has no working dir. Refuses a digest without a `working_dir` and the reverse.
pub async fn hold_for<'a>(
    dirs: Option<&'a WorkingDirs>,
    spec: &mut plexus_scheduler::spec::JobSpec,
    digest: &[u8],
    file: &str,
) -> Result<Option<MutexGuard<'a, ()>>, Error> {
    match (&mut spec.working_dir, digest.is_empty()) {
        (None, true) => Ok(None),
        (None, false) => Err(Error::Invalid(format!(
            "{file}: the request carries a working_dir archive, but the job file names no working_dir"
        ))),
        (Some(_), true) => Err(Error::Invalid(format!(
            "{file}: working_dir: the job file names one, but the request carries no archive \
             (submit with `plexus submit` or the Python client, which pack and upload it)"
        ))),
        (Some(w), false) => {
            let (guard, digest, size) = kept(dirs)?.claim("working_dir", digest).await?;
            (w.digest, w.size) = (Some(digest), size);
            Ok(Some(guard))
        }
    }
}

/// For a resubmit of `job`: its working dir's archive held until the guard is dropped, or
/// refused, naming `working_dir`, when it was removed since.
pub async fn hold_again<'a>(
    dirs: Option<&'a WorkingDirs>,
    engine: &EngineHandle,
    job: plexus_proto::JobId,
) -> Result<Option<MutexGuard<'a, ()>>, Error> {
    match engine.call(|reply| Cmd::WorkingDirs { job: Some(job), reply }).await?.first() {
        Some(d) => Ok(Some(kept(dirs)?.claim("working_dir", d.as_bytes()).await?.0)),
        None => Ok(None),
    }
}

impl WorkingDirs {
    pub fn new(kv: SharedKv, limit: u64, capacity: u64) -> WorkingDirs {
        WorkingDirs {
            kv,
            limit,
            capacity,
            lock: Mutex::new(()),
            uploads: Semaphore::new(UPLOADS_AT_ONCE),
            fetches: std::sync::Arc::new(Semaphore::new(FETCHES_AT_ONCE)),
        }
    }

    pub fn limit(&self) -> u64 {
        self.limit
    }

    async fn meta(&self, d: Digest) -> Result<Option<Meta>, Error> {
        let kv = self.kv.clone();
        let raw = blocking(move || kv.get(&meta_key(&d))).await?;
        raw.map(|v| {
            serde_json::from_slice(&v)
                .map_err(|e| Error::Corrupt { key: format!("archives/m{d}"), reason: e.to_string() })
        })
        .transpose()
    }

    pub async fn stat(&self, r: pb::StatWorkingDirRequest) -> Result<pb::StatWorkingDirResponse, Error> {
        let d = digest_field("digest", &r.digest)?;
        Ok(pb::StatWorkingDirResponse { present: self.meta(d).await?.is_some(), limit_bytes: self.limit })
    }

    /// The archive `digest` names is here: the guard keeps it so until dropped (hold it until the
    /// engine has accepted the job that names it). Returns its size.
    pub async fn claim(&self, field: &'static str, digest: &[u8]) -> Result<(MutexGuard<'_, ()>, Digest, u64), Error> {
        let d = digest_field(field, digest)?;
        let guard = self.lock.lock().await;
        match self.meta(d).await? {
            Some(m) => Ok((guard, d, m.size)),
            None => Err(Error::NotFound(format!(
                "working_dir: this coordinator holds no archive {d} (upload it first; `plexus submit` and the \
                 Python client do; an archive no live job used may have been removed to make room)"
            ))),
        }
    }

    /// Receives one upload, refusing it as soon as it passes the limit or what it announced;
    /// checks its digest and its entries, then keeps it. Returns the bytes taken (0: held already).
    pub async fn receive<S>(&self, mut chunks: S, engine: &EngineHandle) -> Result<u64, Error>
    where
        S: Stream<Item = Result<pb::WorkingDirChunk, tonic::Status>> + Unpin,
    {
        let broke = |got: usize, s: tonic::Status| {
            Error::Invalid(format!("working_dir upload broke off after {got} bytes: {}", s.message()))
        };
        let _permit = self.uploads.acquire().await.map_err(|_| Error::ShuttingDown)?;
        let first = match chunks.next().await {
            Some(c) => c.map_err(|s| broke(0, s))?,
            None => return Err(Error::Invalid("working_dir upload: no chunk arrived".into())),
        };
        let d = digest_field("digest", &first.digest)?;
        let size = first.size;
        if size > self.limit {
            return Err(Error::Invalid(format!(
                "working_dir: the archive is {size} bytes, over this coordinator's limit of {} bytes \
                 (--working-dir-limit); leave large files out with `excludes` or .gitignore",
                self.limit
            )));
        }
        if self.meta(d).await?.is_some() {
            return Ok(0);
        }
        let mut bytes = Vec::with_capacity((size as usize).min(CHUNK));
        let mut next = Some(first);
        loop {
            if let Some(c) = next.take() {
                if bytes.len() as u64 + c.data.len() as u64 > size {
                    return Err(Error::Invalid(format!("working_dir upload: more bytes than the {size} it announced")));
                }
                bytes.extend_from_slice(&c.data);
            }
            match chunks.next().await {
                Some(c) => next = Some(c.map_err(|s| broke(bytes.len(), s))?),
                None => break,
            }
        }
        if bytes.len() as u64 != size {
            return Err(Error::Invalid(format!(
                "working_dir upload is truncated: {} of the {size} bytes it announced",
                bytes.len()
            )));
        }
        let limits = plexus_archive::Limits { archive_bytes: self.limit, ..plexus_archive::Limits::DEFAULT };
        let bytes = blocking(move || {
            let got = Digest::of(&bytes);
            if got != d {
                return Err(Error::Invalid(format!(
                    "working_dir upload: its bytes hash to {got}, not to the {d} it announced"
                )));
            }
            plexus_archive::check(&bytes, &limits).map_err(|e| Error::Invalid(e.to_string()))?;
            Ok(bytes)
        })
        .await?;
        self.keep(d, bytes, engine).await?;
        Ok(size)
    }

    /// Makes room and writes the archive, bytes before record.
    async fn keep(&self, d: Digest, bytes: Vec<u8>, engine: &EngineHandle) -> Result<(), Error> {
        let _guard = self.lock.lock().await;
        let size = bytes.len() as u64;
        self.make_room(size, engine).await?;
        let kv = self.kv.clone();
        let meta = serde_json::to_vec(&Meta { size, stored_ms: plexus_proto::now_ms() }).expect("plain record");
        blocking(move || {
            kv.put(&data_key(&d), &bytes)?;
            kv.put(&meta_key(&d), &meta)
        })
        .await?;
        tracing::info!(digest = %d, size, "working-dir archive kept");
        Ok(())
    }

    /// Removes archives no live job holds, oldest first, until `size` more bytes fit.
    async fn make_room(&self, size: u64, engine: &EngineHandle) -> Result<(), Error> {
        let kv = self.kv.clone();
        let all = blocking(move || kv.scan(b"m")).await?;
        let mut kept: Vec<(u64, Digest, u64)> = Vec::with_capacity(all.len());
        for (k, v) in &all {
            let d = std::str::from_utf8(&k[1..]).ok().and_then(|s| s.parse::<Digest>().ok());
            let m: Option<Meta> = serde_json::from_slice(v).ok();
            if let (Some(d), Some(m)) = (d, m) {
                kept.push((m.stored_ms, d, m.size));
            }
        }
        let mut used: u64 = kept.iter().map(|k| k.2).sum();
        if used + size <= self.capacity {
            return Ok(());
        }
        let live: HashSet<Digest> =
            engine.call(|reply| Cmd::WorkingDirs { job: None, reply }).await?.into_iter().collect();
        kept.sort_by_key(|k| k.0);
        let mut gone = Vec::new();
        for (_, d, n) in kept.into_iter().filter(|k| !live.contains(&k.1)) {
            if used + size <= self.capacity {
                break;
            }
            gone.push(meta_key(&d));
            gone.push(data_key(&d));
            used -= n;
            tracing::info!(digest = %d, size = n, "working-dir archive removed: no live job holds it");
        }
        let kv = self.kv.clone();
        blocking(move || kv.remove(&gone)).await?;
        if used + size > self.capacity {
            return Err(Error::Exhausted(format!(
                "working_dir: the coordinator's archive store is full: {used} of its {} bytes \
                 (--working-dir-store) hold archives of jobs that have not ended, and this one is {size} bytes",
                self.capacity
            )));
        }
        Ok(())
    }

    /// The archive `digest`, in chunks (the first with its digest and size); the stream holds one
    /// of the fetches' places until it ends.
    pub async fn send(&self, digest: &[u8]) -> Result<ChunkStream, Error> {
        let d = digest_field("digest", digest)?;
        let permit = self.fetches.clone().acquire_owned().await.map_err(|_| Error::ShuttingDown)?;
        let kv = self.kv.clone();
        let bytes = blocking(move || kv.get(&data_key(&d)))
            .await?
            .ok_or_else(|| Error::NotFound(format!("working_dir: this coordinator holds no archive {d}")))?;
        let size = bytes.len() as u64;
        let mut out: Vec<pb::WorkingDirChunk> =
            bytes.chunks(CHUNK).map(|c| pb::WorkingDirChunk { data: c.to_vec(), ..Default::default() }).collect();
        match out.first_mut() {
            Some(first) => {
                first.digest = d.to_vec();
                first.size = size;
            }
            None => out.push(pb::WorkingDirChunk { digest: d.to_vec(), size: 0, data: Vec::new() }),
        }
        Ok(Box::pin(futures::stream::iter(out).map(move |c| {
            let _held = &permit;
            Ok(c)
        })))
    }
}
