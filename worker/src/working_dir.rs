//! Jobs' working dirs on this worker: each archive fetched from the coordinator once per digest
//! (attempts that need one another is fetching wait for that fetch), its digest checked, unpacked
//! within `plexus_archive`'s bounds into `DIR/code/<digest>/` and made read-only there (0444 and
//! 0555 files, 0555 directories, the worker's: a task under its own uid reads it and changes
//! nothing). A command attempt of the job runs in it; it still writes to `$PLEXUS_OUT`.
//!
//! `DIR/code/` is search-only for others (0711), so a task reaches a working dir only by its
//! digest. It is cleared when the worker starts; while the worker runs, what it unpacked stays.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use plexus_proto::{Digest, WorkerId, pb};
use tonic::transport::Channel;

use crate::error::{Error, Result};

type Client = pb::worker_service_client::WorkerServiceClient<Channel>;

/// The largest archive a worker takes, whatever the coordinator says: the bound on what it
/// unpacks, which a larger archive could not meet short of gzip growing incompressible files.
const MAX_ARCHIVE: u64 = plexus_archive::Limits::DEFAULT.unpacked_bytes;

/// The working dirs this worker has unpacked, and where it fetches more.
#[derive(Debug)]
pub struct WorkingDirs {
    root: PathBuf,
    /// The coordinator connection of the current session (set at each registration).
    coordinator: Mutex<Option<(Client, WorkerId)>>,
    /// One lock per digest: held while it is fetched; `true` once it is unpacked.
    slots: Mutex<HashMap<Digest, Arc<tokio::sync::Mutex<bool>>>>,
}

impl WorkingDirs {
    pub fn new(root: PathBuf) -> WorkingDirs {
        WorkingDirs { root, coordinator: Mutex::new(None), slots: Mutex::new(HashMap::new()) }
    }

    /// Where working dirs are fetched from from now on.
    pub fn set_coordinator(&self, client: Client, worker: WorkerId) {
        *self.coordinator.lock().unwrap_or_else(|p| p.into_inner()) = Some((client, worker));
    }

    /// The unpacked working dir of `digest` (an archive of `size` bytes), fetched and unpacked
    /// the first time.
    pub async fn get(&self, digest: Digest, size: u64) -> Result<PathBuf> {
        let slot = self.slots.lock().unwrap_or_else(|p| p.into_inner()).entry(digest).or_default().clone();
        let mut unpacked = slot.lock().await;
        let dir = self.root.join(digest.to_string());
        if !*unpacked {
            let bytes = self.fetch(digest, size).await?;
            let tmp = self.root.join(format!(".partial-{}", uuid::Uuid::new_v4().simple()));
            let (t, d) = (tmp.clone(), dir.clone());
            let unpacking = tokio::task::spawn_blocking(move || -> Result<()> {
                let failed = |reason: String| Error::WorkingDir { digest: digest.to_string(), reason };
                plexus_archive::unpack(&bytes, &t, &plexus_archive::Limits::DEFAULT)
                    .map_err(|e| failed(e.to_string()))?;
                std::fs::rename(&t, &d).map_err(|e| failed(format!("moving it into place: {e}")))
            })
            .await
            .unwrap_or_else(|e| Err(Error::WorkingDir { digest: digest.to_string(), reason: e.to_string() }));
            if let Err(e) = unpacking {
                remove_tree(&tmp);
                return Err(e);
            }
            *unpacked = true;
        }
        Ok(dir)
    }

    /// The archive's bytes from the coordinator, refused past `size` (and [`MAX_ARCHIVE`]) and
    /// unless they hash to `digest`.
    async fn fetch(&self, digest: Digest, size: u64) -> Result<Vec<u8>> {
        let failed = |reason: String| Error::WorkingDir { digest: digest.to_string(), reason };
        if size > MAX_ARCHIVE {
            return Err(failed(format!("an archive of {size} bytes is over this worker's limit of {MAX_ARCHIVE}")));
        }
        let (mut client, worker) =
            self.coordinator.lock().unwrap_or_else(|p| p.into_inner()).clone().ok_or(Error::NoCoordinator)?;
        let request = pb::FetchWorkingDirRequest { worker_id: worker.to_string(), digest: digest.to_vec() };
        let mut stream =
            client.fetch_working_dir(request).await.map_err(|s| failed(s.message().to_string()))?.into_inner();
        let mut bytes = Vec::with_capacity(size.min(1 << 20) as usize);
        while let Some(chunk) = stream.message().await.map_err(|s| failed(format!("fetching: {}", s.message())))? {
            if bytes.len() as u64 + chunk.data.len() as u64 > size {
                return Err(failed(format!("the coordinator sent more than the {size} bytes assigned")));
            }
            bytes.extend_from_slice(&chunk.data);
        }
        if bytes.len() as u64 != size {
            return Err(failed(format!("truncated: {} of {size} bytes arrived", bytes.len())));
        }
        let (bytes, got) = tokio::task::spawn_blocking(move || {
            let got = Digest::of(&bytes);
            (bytes, got)
        })
        .await
        .map_err(|e| failed(e.to_string()))?;
        if got != digest {
            return Err(failed(format!("the bytes that arrived hash to {got}")));
        }
        Ok(bytes)
    }
}

/// Removes a tree that may have been made read-only: every directory made writable again first,
/// found with an explicit list (the tree came from an archive).
pub fn remove_tree(root: &Path) {
    use std::os::unix::fs::PermissionsExt;
    let mut dirs = vec![root.to_path_buf()];
    let mut i = 0;
    while i < dirs.len() {
        let _ = std::fs::set_permissions(&dirs[i], std::fs::Permissions::from_mode(0o700));
        if let Ok(entries) = std::fs::read_dir(&dirs[i]) {
            for e in entries.flatten() {
                if e.file_type().is_ok_and(|t| t.is_dir()) {
                    dirs.push(e.path());
                }
            }
        }
        i += 1;
    }
    if let Err(e) = std::fs::remove_dir_all(root)
        && e.kind() != std::io::ErrorKind::NotFound
    {
        tracing::warn!(dir = %root.display(), error = %e, "could not remove a working dir");
    }
}
