//! The outputs stage: on success every declared output is taken out of the task's reach, must be
//! a regular file, and becomes the worker's; each is hashed (its digest goes with the report: what
//! every copy is checked against), then they all move into the cache, or none does. On failure,
//! the task's `checkpoint` output alone is kept the same way, under a name of its attempt.

use std::path::{Path, PathBuf};

use plexus_proto::ids::kept_checkpoint;
use plexus_proto::{AttemptRef, Digest, ObjectId, pb};

use crate::cache::Pin;
use crate::error::{Error, Result};

use super::context::{Accounting, Ctx};
use super::validation::Work;

impl Ctx {
    /// Moves every declared output out of `out_dir` into `DIR/tmp/` (the worker's alone), checks
    /// that each is a regular file, makes it the worker's (`uid`: the task's own uid, whose files
    /// they were), hashes each there, then moves them all into the cache.
    ///
    /// Moved first and checked after: `out/` is the task's, so whatever was checked there could
    /// be swapped (for a symbolic link to the worker's key, say) by another process of the task's
    /// uid before the move; in `DIR/tmp/` nothing but the worker can touch it. `out/` itself is
    /// opened without following a link, so a task that replaced it with one pointing elsewhere
    /// makes the worker move nothing from there.
    pub(super) async fn collect_outputs(
        &self,
        work: &Work,
        out_dir: &Path,
        uid: Option<u32>,
        acct: &mut Accounting,
        pins: &mut Vec<Pin>,
    ) -> Result<Vec<pb::ObjectInfo>> {
        let files: Vec<(String, String)> = work.outputs.iter().map(|n| (n.clone(), n.clone())).collect();
        self.store_files(&work.attempt, &files, out_dir, uid, acct, pins).await
    }

    /// Keeps the `checkpoint` output a failed or stopped attempt left (`None`: the task has no
    /// checkpoint, or wrote none yet), taken and checked as outputs are, in the cache as
    /// `<checkpoint>.attempt-<n>` ([`kept_checkpoint`]) for the subtask's next attempt.
    pub(super) async fn keep_checkpoint(
        &self,
        work: &Work,
        out_dir: &Path,
        uid: Option<u32>,
        acct: &mut Accounting,
        pins: &mut Vec<Pin>,
    ) -> Option<pb::ObjectInfo> {
        let name = work.checkpoint.as_ref()?;
        let files = [(name.clone(), kept_checkpoint(&work.attempt, name).name)];
        match self.store_files(&work.attempt, &files, out_dir, uid, acct, pins).await {
            Ok(mut kept) => {
                tracing::info!(attempt = %work.attempt, checkpoint = %name, "kept the checkpoint the attempt left");
                kept.pop()
            }
            Err(Error::OutputMissing { .. }) => None,
            Err(e) => {
                tracing::warn!(attempt = %work.attempt, error = %e, "could not keep the attempt's checkpoint");
                None
            }
        }
    }

    /// Moves each `(name, object)` of `files` out of `out_dir` (`name`) into the cache as the
    /// attempt's object `object`, as [`Ctx::collect_outputs`] says.
    async fn store_files(
        &self,
        a: &AttemptRef,
        files: &[(String, String)],
        out_dir: &Path,
        uid: Option<u32>,
        acct: &mut Accounting,
        pins: &mut Vec<Pin>,
    ) -> Result<Vec<pb::ObjectInfo>> {
        // All taken and checked first, so a failed attempt leaves nothing in the cache.
        let mut staged = Vec::with_capacity(files.len());
        let first = files.first().map(|(n, _)| n.clone()).unwrap_or_default();
        let store_error = |name: &str, action, path: &Path, e| Error::StoreOutput {
            name: name.to_string(),
            source: Box::new(Error::Io { action, path: path.to_path_buf(), source: e }),
        };
        // `out/` lies in the task's work dir: it is opened without following a link the task may
        // have put in its place, and outputs are taken relative to it (`renameat`).
        let (out, tmp) = match (open_dir(out_dir), open_dir(&self.layout.tmp_dir())) {
            (Ok(o), Ok(t)) => (o, t),
            (Err(e), _) => return Err(store_error(&first, "open", out_dir, e)),
            (_, Err(e)) => return Err(store_error(&first, "open", &self.layout.tmp_dir(), e)),
        };
        for (name, _) in files {
            let s = Staged(self.layout.tmp_dir().join(uuid::Uuid::new_v4().to_string()));
            match rename_at(&out, name, &tmp, &s.0) {
                Ok(()) => {}
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                    return Err(Error::OutputMissing { name: name.clone() });
                }
                Err(e) => return Err(store_error(name, "take", &out_dir.join(name), e)),
            }
            match std::fs::symlink_metadata(&s.0) {
                Ok(m) if m.is_file() => {}
                _ => return Err(Error::OutputNotFile { name: name.clone() }),
            }
            if uid.is_some() {
                let (euid, egid) = worker_ids();
                std::os::unix::fs::lchown(&s.0, Some(euid), Some(egid)).map_err(|e| Error::StoreOutput {
                    name: name.clone(),
                    source: Box::new(Error::Io { action: "take ownership of", path: s.0.clone(), source: e }),
                })?;
            }
            staged.push(s);
        }
        let paths: Vec<(String, PathBuf)> =
            files.iter().map(|(n, _)| n.clone()).zip(staged.iter().map(|s| s.0.clone())).collect();
        let digests = tokio::task::spawn_blocking(move || digests(&paths)).await??;
        let mut infos = Vec::with_capacity(files.len());
        for (((name, object), s), digest) in files.iter().zip(&staged).zip(digests) {
            let id = ObjectId { job: a.job, task: a.task.clone(), rank: a.rank, name: object.clone() };
            let ins = self
                .cache
                .insert(&id, &s.0)
                .map_err(|e| Error::StoreOutput { name: name.clone(), source: Box::new(e) })?;
            acct.evicted_bytes += ins.evicted_bytes;
            self.counters.evicted_bytes.fetch_add(ins.evicted_bytes, std::sync::atomic::Ordering::Relaxed);
            infos.push(pb::ObjectInfo { object_id: id.to_string(), size: ins.size, digest: digest.to_vec() });
            pins.push(ins.pin);
        }
        Ok(infos)
    }
}

/// A directory opened for `*at` calls, refusing a symbolic link in its place.
fn open_dir(dir: &Path) -> std::io::Result<std::fs::File> {
    use std::os::unix::fs::OpenOptionsExt;
    std::fs::OpenOptions::new().read(true).custom_flags(libc::O_NOFOLLOW | libc::O_DIRECTORY).open(dir)
}

/// `renameat(from_dir, name, to_dir, to's file name)`: moves the entry itself, whatever it is
/// (a link is moved, not followed).
fn rename_at(from_dir: &std::fs::File, name: &str, to_dir: &std::fs::File, to: &Path) -> std::io::Result<()> {
    use std::os::fd::AsRawFd;
    use std::os::unix::ffi::OsStrExt;
    let bad = |_| std::io::Error::from(std::io::ErrorKind::InvalidInput);
    let from = std::ffi::CString::new(name).map_err(bad)?;
    let to = std::ffi::CString::new(to.file_name().unwrap_or_default().as_bytes()).map_err(bad)?;
    // SAFETY: both descriptors are open and both names NUL-terminated for the call.
    let rc = unsafe { libc::renameat(from_dir.as_raw_fd(), from.as_ptr(), to_dir.as_raw_fd(), to.as_ptr()) };
    if rc != 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(())
}

/// The worker's effective uid and gid.
fn worker_ids() -> (u32, u32) {
    // SAFETY: geteuid and getegid have no preconditions.
    unsafe { (libc::geteuid(), libc::getegid()) }
}

/// An output taken out of `out/`, removed when dropped unless the cache took it (a failed
/// attempt's outputs, whatever they are: a directory included).
struct Staged(PathBuf);

impl Drop for Staged {
    fn drop(&mut self) {
        match std::fs::symlink_metadata(&self.0) {
            Ok(m) if m.is_dir() => {
                let _ = std::fs::remove_dir_all(&self.0);
            }
            Ok(_) => {
                let _ = std::fs::remove_file(&self.0);
            }
            Err(_) => {}
        }
    }
}

/// Each output file's digest, read to its end (blocking: run off the async threads).
fn digests(files: &[(String, PathBuf)]) -> Result<Vec<Digest>> {
    files
        .iter()
        .map(|(name, path)| {
            let file = std::fs::File::open(path).map_err(|source| Error::StoreOutput {
                name: name.clone(),
                source: Box::new(Error::io("open to hash", path)(source)),
            })?;
            Digest::of_reader(file).map_err(|source| Error::StoreOutput {
                name: name.clone(),
                source: Box::new(Error::io("hash", path)(source)),
            })
        })
        .collect()
}
