//! The chaos run's cluster: a [`LocalCluster`] on loopback (sled, or etcd with several
//! coordinators), its etcd members, and the small tmpfs that worker 0's data dir lives on so a
//! fault can fill it.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use plexus_launch::{EtcdCluster, LocalCluster, Store};

use super::client::Access;

/// The size of the tmpfs under worker 0's data dir: room for its cache (see [`CACHE`]) and the
/// attempts' scratch, small enough to fill in a moment.
const DISK_MB: u64 = 192;
/// Every worker's cache bound, under [`DISK_MB`].
const CACHE: &str = "128MiB";

pub struct ChaosCluster {
    pub launch: LocalCluster,
    pub etcd: Option<EtcdCluster>,
    /// Worker 0's data dir when it is a tmpfs mounted here (unmounted on drop).
    pub small_disk: Option<PathBuf>,
    /// Why there is no small disk, when there is none.
    pub no_small_disk: Option<String>,
}

/// Mounts a `size_mb` tmpfs on `dir` (made first): `Err` with why it could not.
fn mount_tmpfs(dir: &Path, size_mb: u64) -> Result<(), String> {
    std::fs::create_dir_all(dir).map_err(|e| format!("creating {}: {e}", dir.display()))?;
    let out = Command::new("mount")
        .args(["-t", "tmpfs", "-o", &format!("size={size_mb}m,mode=0711"), "plexus-chaos"])
        .arg(dir)
        .output()
        .map_err(|e| format!("running mount: {e}"))?;
    if !out.status.success() {
        return Err(format!("mount -t tmpfs failed: {}", String::from_utf8_lossy(&out.stderr).trim()));
    }
    Ok(())
}

impl ChaosCluster {
    /// Starts etcd and `coordinators` coordinators on it (with `ha`; else one on sled), and
    /// `workers` workers, under `dir`.
    pub fn start(
        ha: bool,
        coordinators: usize,
        workers: usize,
        dir: &Path,
        bin: &Path,
    ) -> Result<ChaosCluster, String> {
        let etcd =
            if ha { Some(EtcdCluster::start(3).map_err(|e| format!("starting 3 etcd members: {e}"))?) } else { None };
        let store = etcd.as_ref().map(|e| Store::Etcd(e.url())).unwrap_or_default();
        let coordinators = if ha { coordinators.max(2) } else { 1 };
        let mut builder = LocalCluster::builder(dir).bin_dir(bin).store(store).coordinators(coordinators);
        if ha {
            builder = builder.lease_ttl_s(2);
        }
        let launch = builder
            .workers(workers)
            .cpus(Some(2))
            .cache(Some(CACHE))
            .worker_args(["--memory", "2GiB", "--metrics", "none"])
            .rust_log("info")
            .build()
            .map_err(|e| format!("preparing the cluster in {}: {e}", dir.display()))?;
        let (small_disk, no_small_disk) = match mount_tmpfs(&launch.worker_dir(0), DISK_MB) {
            Ok(()) => (Some(launch.worker_dir(0)), None),
            Err(why) => (None, Some(why)),
        };
        let mut c = ChaosCluster { launch, etcd, small_disk, no_small_disk };
        c.launch.start_coordinators().map_err(|e| format!("starting the coordinators: {e}"))?;
        c.launch.start_workers().map_err(|e| format!("starting the workers: {e}"))?;
        Ok(c)
    }

    /// How a client reaches the cluster.
    pub fn access(&self, bin: &Path) -> Result<Access, String> {
        let ca_file = self.launch.ca_file();
        let ca = std::fs::read_to_string(&ca_file).map_err(|e| format!("reading {}: {e}", ca_file.display()))?;
        let token = std::fs::read_to_string(self.launch.admin_token_file())
            .map_err(|e| format!("reading the admin token: {e}"))?
            .trim()
            .to_string();
        Ok(Access { urls: self.launch.urls(), ca_file, ca, token, bin: bin.to_path_buf() })
    }

    /// Every log of the run (coordinators, workers, etcd members): (name, path).
    pub fn logs(&self) -> Vec<(String, PathBuf)> {
        let mut out = Vec::new();
        for i in 0..self.launch.coordinator_count() {
            out.push((format!("coordinator-{i}"), self.launch.coordinator_log(i)));
        }
        for i in 0..self.launch.worker_count() {
            out.push((format!("worker-{i}"), self.launch.worker_log(i)));
        }
        if let Some(e) = &self.etcd {
            for i in 0..3 {
                out.push((format!("etcd-{i}"), e.log_path(i)));
            }
        }
        out
    }

    /// Fills worker 0's disk: a file grown until the tmpfs has no room left.
    pub fn fill_disk(&self) -> Result<(), String> {
        let dir = self.small_disk.as_ref().ok_or("no small disk")?;
        let out = Command::new("dd")
            .args(["if=/dev/zero", "bs=1M", &format!("count={DISK_MB}")])
            .arg(format!("of={}", dir.join("chaos-fill").display()))
            .output()
            .map_err(|e| format!("running dd: {e}"))?;
        // dd fails with "No space left on device" when the disk is full: that is the point.
        let _ = out;
        Ok(())
    }

    /// Frees worker 0's disk again.
    pub fn free_disk(&self) {
        if let Some(dir) = &self.small_disk {
            let _ = std::fs::remove_file(dir.join("chaos-fill"));
        }
    }
}

impl Drop for ChaosCluster {
    fn drop(&mut self) {
        self.launch.stop();
        if let Some(dir) = &self.small_disk {
            // The worker has exited: nothing holds the mount. Lazily, so a straggler cannot
            // keep it.
            std::thread::sleep(Duration::from_millis(100));
            let _ = Command::new("umount").arg("-l").arg(dir).status();
        }
    }
}
