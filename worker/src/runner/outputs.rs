//! The outputs stage: on success every declared output must be a regular file in `out/`; each
//! is hashed (its digest goes with the report: what every copy is checked against), then they
//! all move into the cache, or none does.

use std::path::{Path, PathBuf};

use plexus_proto::{Digest, ObjectId, pb};

use crate::cache::Pin;
use crate::error::{Error, Result};

use super::context::{Accounting, Ctx};
use super::validation::Work;

impl Ctx {
    /// Checks that every declared output was written, hashes each, then moves them all into the
    /// cache.
    pub(super) async fn collect_outputs(
        &self,
        work: &Work,
        out_dir: &Path,
        acct: &mut Accounting,
        pins: &mut Vec<Pin>,
    ) -> Result<Vec<pb::ObjectInfo>> {
        // Check them all first, so a failed attempt leaves nothing in the cache.
        for name in &work.outputs {
            match std::fs::symlink_metadata(out_dir.join(name)) {
                Ok(m) if m.is_file() => {}
                Ok(_) => return Err(Error::OutputNotFile { name: name.clone() }),
                Err(_) => return Err(Error::OutputMissing { name: name.clone() }),
            }
        }
        let files: Vec<(String, PathBuf)> = work.outputs.iter().map(|n| (n.clone(), out_dir.join(n))).collect();
        let digests = tokio::task::spawn_blocking(move || digests(&files)).await??;
        let a = &work.attempt;
        let mut infos = Vec::with_capacity(work.outputs.len());
        for (name, digest) in work.outputs.iter().zip(digests) {
            let id = ObjectId { job: a.job, task: a.task.clone(), rank: a.rank, name: name.clone() };
            let ins = self
                .cache
                .insert(&id, &out_dir.join(name))
                .map_err(|e| Error::StoreOutput { name: name.clone(), source: Box::new(e) })?;
            acct.evicted_bytes += ins.evicted_bytes;
            self.counters.evicted_bytes.fetch_add(ins.evicted_bytes, std::sync::atomic::Ordering::Relaxed);
            infos.push(pb::ObjectInfo { object_id: id.to_string(), size: ins.size, digest: digest.to_vec() });
            pins.push(ins.pin);
        }
        Ok(infos)
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
