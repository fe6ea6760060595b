//! The chaos run's cluster: a [`LocalCluster`] (sled, or etcd with several coordinators), its
//! etcd members, the small tmpfs that worker 0's data dir lives on so a fault can fill it, the
//! slow disk under worker 1's data dir and the network namespace the last worker runs in
//! ([`super::rig`]), each left out with the reason when it cannot be made.
//!
//! With the namespace, the coordinators listen on the host's end of its veth pair and every
//! other worker serves its peers and rail there too, so the namespaced worker reaches them all
//! (127.0.0.1 in the namespace is its own), and they reach it, until the link is cut.

use std::ffi::OsString;
use std::net::IpAddr;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use plexus_launch::{EtcdCluster, LocalCluster, Store, WorkerLaunch};

use super::client::Access;
use super::rig::{Partition, SlowDisk};

/// The size of the tmpfs under worker 0's data dir: room for its cache (see [`CACHE`]) and the
/// attempts' scratch, small enough to fill in a moment.
const DISK_MB: u64 = 192;
/// The slow disk's size (an ext4 image under the run's directory, sparse).
const SLOW_DISK_MB: u64 = 320;
/// Every worker's cache bound, under [`DISK_MB`].
const CACHE: &str = "128MiB";

pub struct ChaosCluster {
    pub launch: LocalCluster,
    pub etcd: Option<EtcdCluster>,
    /// Worker 0's data dir when it is a tmpfs mounted here (unmounted on drop).
    pub small_disk: Option<PathBuf>,
    /// Why there is no small disk, when there is none.
    pub no_small_disk: Option<String>,
    /// Worker 1's data dir on a throttleable loop device, or why there is none.
    pub slow_disk: Result<(usize, SlowDisk), String>,
    /// The last worker's network namespace, or why there is none.
    pub partition: Result<(usize, Partition), String>,
    /// How each worker is started (its namespace, its cgroup, its addresses): restarts too.
    launches: Vec<WorkerLaunch>,
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

/// How worker `i` is started: in the namespace (the last worker) or serving on the host's end
/// of it, and in the slow disk's cgroup (worker 1).
fn worker_launch(
    i: usize,
    partition: &Result<(usize, Partition), String>,
    slow: &Result<(usize, SlowDisk), String>,
) -> WorkerLaunch {
    let mut l = WorkerLaunch::default();
    if let Ok((w, d)) = slow
        && *w == i
    {
        l.prefix.extend(d.prefix().into_iter().map(OsString::from));
    }
    if let Ok((w, p)) = partition {
        let ip = if *w == i {
            l.prefix.extend(["nsenter".into(), format!("--net={}", p.path().display()).into()]);
            p.ns_ip
        } else {
            p.host_ip
        };
        l.args.extend(["--listen".into(), format!("{ip}:0").into(), "--rail".into(), ip.to_string().into()]);
    }
    l
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
        let partition = Partition::create().map(|p| (workers - 1, p));
        let mut builder = LocalCluster::builder(dir).bin_dir(bin).store(store).coordinators(coordinators);
        if let Ok((_, p)) = &partition {
            builder = builder.listen_ip(IpAddr::V4(p.host_ip));
        }
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
        let slow_i = 1 % workers;
        let slow_disk =
            SlowDisk::create(&dir.join("slow-disk.img"), &launch.worker_dir(slow_i), SLOW_DISK_MB).map(|d| (slow_i, d));
        let launches = (0..workers).map(|i| worker_launch(i, &partition, &slow_disk)).collect();
        let mut c = ChaosCluster { launch, etcd, small_disk, no_small_disk, slow_disk, partition, launches };
        c.launch.start_coordinators().map_err(|e| format!("starting the coordinators: {e}"))?;
        for i in 0..workers {
            c.start_worker(i).map_err(|e| format!("starting worker {i}: {e}"))?;
        }
        Ok(c)
    }

    /// Starts (or restarts) worker `i` as it was first started.
    pub fn start_worker(&mut self, i: usize) -> Result<(), String> {
        self.launch.start_worker_with(i, &self.launches[i]).map_err(|e| e.to_string())
    }

    /// Cuts (`false`) or mends the namespaced worker's link.
    pub fn link(&self, up: bool) -> Result<(), String> {
        self.partition.as_ref().map_err(Clone::clone)?.1.link(up)
    }

    /// Throttles (`true`) the slow disk, or lifts it.
    pub fn slow(&self, on: bool) -> Result<(), String> {
        self.slow_disk.as_ref().map_err(Clone::clone)?.1.throttle(on)
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
        // A cut link or a throttled disk would slow the workers' stop.
        let _ = self.link(true);
        let _ = self.slow(false);
        self.launch.stop();
        if let Ok((_, d)) = &mut self.slow_disk {
            d.teardown();
        }
        if let Some(dir) = &self.small_disk {
            // The worker has exited: nothing holds the mount. Lazily, so a straggler cannot
            // keep it.
            std::thread::sleep(Duration::from_millis(100));
            let _ = Command::new("umount").arg("-l").arg(dir).status();
        }
    }
}
