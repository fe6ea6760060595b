//! The outputs stage: on success every declared output is taken out of the task's reach, must be
//! a regular file, and becomes the worker's; they all move into the cache, or none does.

use std::path::{Path, PathBuf};

use plexus_proto::{ObjectId, pb};

use crate::cache::Pin;
use crate::error::{Error, Result};

use super::context::{Accounting, Ctx};
use super::validation::Work;

impl Ctx {
    /// Moves every declared output out of `out_dir` into `DIR/tmp/` (the worker's alone), checks
    /// that each is a regular file, makes it the worker's (`uid`: the task's own uid, whose files
    /// they were), then moves them all into the cache.
    ///
    /// Moved first and checked after: `out/` is the task's, so whatever was checked there could
    /// be swapped (for a symbolic link to the worker's key, say) by another process of the task's
    /// uid before the move; in `DIR/tmp/` nothing but the worker can touch it.
    pub(super) fn collect_outputs(
        &self,
        work: &Work,
        out_dir: &Path,
        uid: Option<u32>,
        acct: &mut Accounting,
        pins: &mut Vec<Pin>,
    ) -> Result<Vec<pb::ObjectInfo>> {
        // All taken and checked first, so a failed attempt leaves nothing in the cache.
        let mut staged = Vec::with_capacity(work.outputs.len());
        for name in &work.outputs {
            let s = Staged(self.layout.tmp_dir().join(uuid::Uuid::new_v4().to_string()));
            match std::fs::rename(out_dir.join(name), &s.0) {
                Ok(()) => {}
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                    return Err(Error::OutputMissing { name: name.clone() });
                }
                Err(e) => {
                    let source = Box::new(Error::Io { action: "take", path: out_dir.join(name), source: e });
                    return Err(Error::StoreOutput { name: name.clone(), source });
                }
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
        let a = &work.attempt;
        let mut infos = Vec::with_capacity(work.outputs.len());
        for (name, s) in work.outputs.iter().zip(&staged) {
            let id = ObjectId { job: a.job, task: a.task.clone(), rank: a.rank, name: name.clone() };
            let ins = self
                .cache
                .insert(&id, &s.0)
                .map_err(|e| Error::StoreOutput { name: name.clone(), source: Box::new(e) })?;
            acct.evicted_bytes += ins.evicted_bytes;
            self.counters.evicted_bytes.fetch_add(ins.evicted_bytes, std::sync::atomic::Ordering::Relaxed);
            infos.push(pb::ObjectInfo { object_id: id.to_string(), size: ins.size });
            pins.push(ins.pin);
        }
        Ok(infos)
    }
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
