//! The fetch stage: every input placed in the work dir from the cache, read-only to the task
//! (see [`place_input`]), after fetching the ones not cached from the first holder that can serve them (over the data plane when it has rails,
//! else as a gRPC stream). Inputs stay pinned in the cache until the attempt's report is built.
//! A fetched copy is hashed as it arrives and refused when its digest is not the one its
//! producer reported: that holder is listed in the report's `bad_copies` (the coordinator then
//! treats it as having lost the object) and the next holder is tried. A copy in the cache was
//! checked when it arrived (or hashed when this worker made it), so it is not hashed again.

use std::path::{Path, PathBuf};

use plexus_proto::pb;
use tracing::{debug, warn};

use crate::cache::Pin;
use crate::error::{Error, Result};
use crate::peer;

use super::context::{Accounting, Ctx, WorkDirs};
use super::validation::Input;

impl Ctx {
    /// Places every input at `in/<task>/<rank>/<name>`, fetching the ones not cached.
    pub(super) async fn materialise(
        &self,
        inputs: &[Input],
        dirs: &WorkDirs,
        acct: &mut Accounting,
        pins: &mut Vec<Pin>,
    ) -> Result<()> {
        for input in inputs {
            let dest = dirs.input_path(&input.task, input.rank, &input.name);
            let cached = match self.cache.pin(&input.id) {
                Some(pin) => match place_input(&self.cache.path(&input.id), &dest, dirs.uid.is_some()) {
                    Ok(()) => {
                        self.counters.cache_hits.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                        Some(pin)
                    }
                    // Listed but its file is gone: forgotten, and fetched like any other.
                    Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                        drop(pin);
                        self.cache.forget(&input.id);
                        None
                    }
                    Err(source) => return Err(Error::PlaceInput { object: input.id.clone(), dest, source }),
                },
                None => None,
            };
            let pin = match cached {
                Some(pin) => pin,
                None => {
                    let pin = self.fetch(input, acct).await?;
                    place_input(&self.cache.path(&input.id), &dest, dirs.uid.is_some())
                        .map_err(|source| Error::PlaceInput { object: input.id.clone(), dest: dest.clone(), source })?;
                    pin
                }
            };
            pins.push(pin);
        }
        Ok(())
    }

    /// Fetches an input from the first holder that can serve it, into the cache: over the data
    /// plane when the holder has rails, else (or when that fails) as a gRPC stream.
    async fn fetch(&self, input: &Input, acct: &mut Accounting) -> Result<Pin> {
        let started = std::time::Instant::now();
        let mut last_error = Error::NoHolder;
        let mut pin = None;
        for holder in &input.holders {
            let url = &holder.peer_addr;
            let mut fetched = None;
            if !holder.rails.is_empty() {
                let tmp = TempFile(self.layout.tmp_dir().join(uuid::Uuid::new_v4().to_string()));
                match peer::fetch_object_rails(
                    &self.rails,
                    self.peer_tls.as_ref(),
                    holder,
                    &input.id,
                    input.expected(),
                    &tmp.0,
                )
                .await
                {
                    Ok(f) => {
                        debug!(object = %input.id, holder = url, bytes = f.bytes, "fetched over the data plane");
                        fetched = Some((f, tmp));
                    }
                    Err(Error::DigestMismatch(e)) => {
                        last_error = self.bad_copy(input, holder, e, acct);
                        continue;
                    }
                    Err(e) => {
                        warn!(object = %input.id, holder = url, error = %e, "data-plane fetch failed; trying gRPC");
                        last_error = Error::Holder { url: url.clone(), source: Box::new(e) };
                    }
                }
            }
            let (fetched, tmp) = match fetched {
                Some(f) => f,
                None => {
                    let tmp = TempFile(self.layout.tmp_dir().join(uuid::Uuid::new_v4().to_string()));
                    match peer::fetch_object(holder, self.peer_tls.as_ref(), &input.id, input.expected(), &tmp.0).await
                    {
                        Ok(f) => (f, tmp),
                        Err(Error::DigestMismatch(e)) => {
                            last_error = self.bad_copy(input, holder, e, acct);
                            continue;
                        }
                        Err(e) => {
                            debug!(object = %input.id, holder = url, error = %e, "fetch from holder failed");
                            last_error = Error::Holder { url: url.clone(), source: Box::new(e) };
                            continue;
                        }
                    }
                }
            };
            match self.cache.insert(&input.id, &tmp.0) {
                Ok(ins) => {
                    acct.fetched_bytes += fetched.bytes;
                    acct.evicted_bytes += ins.evicted_bytes;
                    self.counters.fetched_bytes.fetch_add(fetched.bytes, std::sync::atomic::Ordering::Relaxed);
                    self.counters.evicted_bytes.fetch_add(ins.evicted_bytes, std::sync::atomic::Ordering::Relaxed);
                    pin = Some(ins.pin);
                    break;
                }
                Err(e) => last_error = e,
            }
        }
        acct.fetch_ms += u64::try_from(started.elapsed().as_millis()).unwrap_or(u64::MAX);
        {
            use std::sync::atomic::Ordering::Relaxed;
            let c = &self.counters;
            c.fetch_us.fetch_add(u64::try_from(started.elapsed().as_micros()).unwrap_or(u64::MAX), Relaxed);
            match &pin {
                Some(_) => {
                    c.fetches.fetch_add(1, Relaxed);
                }
                None => {
                    c.fetch_failures.fetch_add(1, Relaxed);
                }
            }
        }
        pin.ok_or_else(|| Error::FetchInput { object: input.id.clone(), source: Box::new(last_error) })
    }
}

impl Ctx {
    /// A copy from `holder` that did not match its digest (`e` names both): listed for the
    /// report, counted, and returned as the holder's error.
    fn bad_copy(&self, input: &Input, holder: &peer::Source, e: plexus_proto::Error, acct: &mut Accounting) -> Error {
        warn!(object = %input.id, holder = %holder.peer_addr, error = %e, "a fetched copy did not match its digest; refused");
        self.counters.digest_mismatches.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        if let plexus_proto::Error::DigestMismatch { expected, got, .. } = &e {
            let bytes = |d: &str| d.parse::<plexus_proto::Digest>().map(|d| d.to_vec()).unwrap_or_default();
            acct.bad_copies.push(pb::BadCopy {
                object_id: input.id.to_string(),
                worker_id: holder.worker.clone(),
                expected: bytes(expected),
                got: bytes(got),
            });
        }
        Error::Holder { url: holder.peer_addr.clone(), source: Box::new(Error::DigestMismatch(e)) }
    }
}

/// A partial download, removed when dropped (also when the attempt is cancelled mid-fetch). After
/// a successful insert the file has moved and the removal finds nothing.
struct TempFile(PathBuf);

impl Drop for TempFile {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}

/// Places a cached object at `dest` read-only to the task, never handing the task the cache's
/// inode to change. A task under a uid of its own (`own_uid`) gets a hard link (free) when the
/// cached file is the worker's and read-only: the task is not its owner, so it can neither write
/// nor chmod it. Otherwise (the task runs as the worker's user, who owns the cache) it gets a
/// reflink where the file system has them, else a copy, mode 0444.
fn place_input(src: &Path, dest: &Path, own_uid: bool) -> std::io::Result<()> {
    use std::os::unix::fs::{MetadataExt, PermissionsExt};
    if let Some(dir) = dest.parent() {
        std::fs::create_dir_all(dir)?;
    }
    if std::fs::symlink_metadata(dest).is_ok() {
        // The same input listed twice: it is already in place.
        return Ok(());
    }
    let meta = std::fs::symlink_metadata(src)?;
    // SAFETY: geteuid has no preconditions.
    let ours_read_only = meta.uid() == unsafe { libc::geteuid() } && meta.mode() & 0o222 == 0;
    if own_uid && ours_read_only && std::fs::hard_link(src, dest).is_ok() {
        return Ok(());
    }
    if reflink(src, dest).is_err() {
        let _ = std::fs::remove_file(dest);
        std::fs::copy(src, dest)?;
    }
    std::fs::set_permissions(dest, std::fs::Permissions::from_mode(0o444))
}

/// `dest` made a reflink of `src` (`FICLONE`: the same blocks, copied on write), where the file
/// system can (btrfs, XFS); an error otherwise.
fn reflink(src: &Path, dest: &Path) -> std::io::Result<()> {
    use std::os::fd::AsRawFd;
    use std::os::unix::fs::OpenOptionsExt;
    let from = std::fs::File::open(src)?;
    let to = std::fs::OpenOptions::new().write(true).create_new(true).mode(0o444).open(dest)?;
    // SAFETY: both descriptors are open for the duration of the call.
    let rc = unsafe { libc::ioctl(to.as_raw_fd(), libc::FICLONE, from.as_raw_fd()) };
    if rc != 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(())
}

/// A collective member's input, as materialised in its work dir.
pub(super) async fn read_input(input: &Input, dirs: &WorkDirs) -> Result<Vec<u8>> {
    let path = dirs.input_path(&input.task, input.rank, &input.name);
    tokio::fs::read(&path).await.map_err(|source| Error::ReadInput { object: input.id.clone(), source })
}
