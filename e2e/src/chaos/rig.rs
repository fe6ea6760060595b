//! The chaos run's two rigs that need root: a network namespace one worker lives in, joined to
//! the host by a veth pair whose link a fault cuts (a network partition), and a data dir on a
//! loop device whose I/O a fault throttles (a slow disk). Each says why it cannot be built when
//! it cannot, and tears itself down on drop.
//!
//! The slow disk: an ext4 image on a loop device, mounted `sync` (every write reaches the device
//! while the writer waits, so the writer is the one throttled), and the worker started in a
//! cgroup v1 `blkio` cgroup of its own (under `plexus/`), whose `blkio.throttle.*_device` limits
//! on that loop device the fault sets and clears. The worker's tasks inherit the cgroup (the
//! worker confines them in other controllers only). Linux's `dm-delay` would add latency rather
//! than cap bandwidth, but needs device-mapper in the kernel, which many hosts (this one among
//! them) lack; the blkio throttle needs only the loop driver and cgroup v1.

use std::net::Ipv4Addr;
use std::path::{Path, PathBuf};
use std::process::Command;

/// Bandwidth and I/O operations per second the slow disk allows each way while the fault holds.
pub const SLOW_BPS: u64 = 512 * 1024;
pub const SLOW_IOPS: u64 = 32;

/// Runs `program args…`; `Err` naming it and its stderr when it fails.
fn run(program: &str, args: &[&str]) -> Result<String, String> {
    let out = Command::new(program).args(args).output().map_err(|e| format!("running {program}: {e}"))?;
    if !out.status.success() {
        return Err(format!("{program} {}: {}", args.join(" "), String::from_utf8_lossy(&out.stderr).trim()));
    }
    Ok(String::from_utf8_lossy(&out.stdout).trim().to_string())
}

/// Why the rigs cannot run here, if they cannot: root and these programs.
fn need(programs: &[&str]) -> Result<(), String> {
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        return Err("needs root".into());
    }
    for p in programs {
        if Command::new(p).arg("--version").output().is_err() {
            return Err(format!("`{p}` is not installed (scripts/deps-chaos.sh installs it)"));
        }
    }
    Ok(())
}

/// A network namespace with a veth pair to the host: the host end holds `host_ip` (the
/// coordinators and the other workers listen on it), the namespace's end `ns_ip`.
pub struct Partition {
    pub name: String,
    host_if: String,
    pub host_ip: Ipv4Addr,
    pub ns_ip: Ipv4Addr,
}

impl Partition {
    /// Makes the namespace `chaos-<pid>` and its link (up).
    pub fn create() -> Result<Partition, String> {
        need(&["ip", "nsenter"])?;
        let id = std::process::id();
        // A /30 of 10.215.0.0/16 per run: runs side by side do not collide.
        let base = (id % 16_000) * 4;
        let octets = |n: u32| Ipv4Addr::new(10, 215, (n >> 8) as u8, (n & 0xff) as u8);
        let p = Partition {
            name: format!("chaos-{id}"),
            host_if: format!("chaos{id}h"),
            host_ip: octets(base + 1),
            ns_ip: octets(base + 2),
        };
        let ns_if = format!("chaos{id}n");
        run("ip", &["netns", "add", &p.name])?;
        // From here on, a failure tears down what was made (drop).
        let host = format!("{}/30", p.host_ip);
        let inner = format!("{}/30", p.ns_ip);
        let steps: [&[&str]; 7] = [
            &["link", "add", &p.host_if, "type", "veth", "peer", "name", &ns_if],
            &["link", "set", &ns_if, "netns", &p.name],
            &["addr", "add", &host, "dev", &p.host_if],
            &["link", "set", &p.host_if, "up"],
            &["-n", &p.name, "addr", "add", &inner, "dev", &ns_if],
            &["-n", &p.name, "link", "set", &ns_if, "up"],
            &["-n", &p.name, "link", "set", "lo", "up"],
        ];
        for args in steps {
            run("ip", args)?;
        }
        Ok(p)
    }

    /// The namespace's file, for `nsenter --net=`.
    pub fn path(&self) -> PathBuf {
        Path::new("/var/run/netns").join(&self.name)
    }

    /// Cuts (`false`) or mends (`true`) the link: with the host end down, nothing passes
    /// between the namespace and the host either way (the host's own address stays local).
    pub fn link(&self, up: bool) -> Result<(), String> {
        run("ip", &["link", "set", &self.host_if, if up { "up" } else { "down" }]).map(|_| ())
    }
}

impl Drop for Partition {
    fn drop(&mut self) {
        // Deleting the namespace deletes its end of the veth pair, and the pair with it.
        let _ = Command::new("ip").args(["netns", "del", &self.name]).output();
        let _ = Command::new("ip").args(["link", "del", &self.host_if]).output();
    }
}

/// A data dir on a loop device whose I/O can be throttled.
pub struct SlowDisk {
    /// Where the file system is mounted (the worker's data dir).
    pub dir: PathBuf,
    image: PathBuf,
    loop_dev: String,
    /// `major:minor` of the loop device.
    dev: String,
    /// The worker's blkio cgroup.
    cgroup: PathBuf,
    mounted: bool,
}

impl SlowDisk {
    /// An ext4 image of `size_mb` at `image`, on a loop device, mounted `sync` on `dir`, and a
    /// blkio cgroup `plexus/chaos-<pid>-slow` for the worker.
    pub fn create(image: &Path, dir: &Path, size_mb: u64) -> Result<SlowDisk, String> {
        need(&["losetup", "mkfs.ext4"])?;
        let blkio = Path::new("/sys/fs/cgroup/blkio");
        if !blkio.join("blkio.throttle.write_bps_device").exists() {
            return Err("no cgroup v1 blkio hierarchy at /sys/fs/cgroup/blkio (a cgroup v2 host would need io.max, \
                        not implemented)"
                .into());
        }
        let file = std::fs::File::create(image).map_err(|e| format!("creating {}: {e}", image.display()))?;
        file.set_len(size_mb << 20).map_err(|e| format!("sizing {}: {e}", image.display()))?;
        drop(file);
        let image_s = image.to_string_lossy().into_owned();
        run("mkfs.ext4", &["-q", "-F", "-m", "0", &image_s])?;
        let loop_dev = run("losetup", &["-f", "--show", &image_s])?;
        let mut d = SlowDisk {
            dir: dir.to_path_buf(),
            image: image.to_path_buf(),
            loop_dev,
            dev: String::new(),
            cgroup: blkio.join("plexus").join(format!("chaos-{}-slow", std::process::id())),
            mounted: false,
        };
        let meta = std::fs::metadata(&d.loop_dev).map_err(|e| format!("{}: {e}", d.loop_dev))?;
        let rdev = std::os::unix::fs::MetadataExt::rdev(&meta);
        d.dev = format!("{}:{}", libc::major(rdev), libc::minor(rdev));
        std::fs::create_dir_all(dir).map_err(|e| format!("creating {}: {e}", dir.display()))?;
        run("mount", &["-o", "sync", &d.loop_dev, &dir.to_string_lossy()])?;
        d.mounted = true;
        let _ = std::fs::remove_dir(dir.join("lost+found"));
        std::fs::set_permissions(dir, std::os::unix::fs::PermissionsExt::from_mode(0o711))
            .map_err(|e| format!("chmod {}: {e}", dir.display()))?;
        std::fs::create_dir_all(&d.cgroup).map_err(|e| format!("creating {}: {e}", d.cgroup.display()))?;
        Ok(d)
    }

    /// The command a worker runs under to join the blkio cgroup first.
    pub fn prefix(&self) -> Vec<String> {
        vec![
            "sh".into(),
            "-c".into(),
            format!("echo $$ > '{}/cgroup.procs' && exec \"$@\"", self.cgroup.display()),
            "sh".into(),
        ]
    }

    /// Throttles (`true`) the device to [`SLOW_BPS`] and [`SLOW_IOPS`] each way, or lifts it.
    pub fn throttle(&self, on: bool) -> Result<(), String> {
        let limits = [
            ("blkio.throttle.read_bps_device", SLOW_BPS),
            ("blkio.throttle.write_bps_device", SLOW_BPS),
            ("blkio.throttle.read_iops_device", SLOW_IOPS),
            ("blkio.throttle.write_iops_device", SLOW_IOPS),
        ];
        for (file, limit) in limits {
            // A limit of 0 removes the rule.
            let line = format!("{} {}", self.dev, if on { limit } else { 0 });
            std::fs::write(self.cgroup.join(file), &line)
                .map_err(|e| format!("writing {line:?} to {}: {e}", self.cgroup.join(file).display()))?;
        }
        Ok(())
    }

    /// Unmounts (once the worker is gone), detaches the loop device, removes the cgroup.
    pub fn teardown(&mut self) {
        let _ = self.throttle(false);
        if self.mounted {
            let _ = Command::new("umount").arg("-l").arg(&self.dir).output();
            self.mounted = false;
        }
        if !self.loop_dev.is_empty() {
            let _ = Command::new("losetup").args(["-d", &self.loop_dev]).output();
            self.loop_dev.clear();
        }
        // The worker (the cgroup's last process) has exited; a straggler keeps it, harmlessly.
        let _ = std::fs::remove_dir(&self.cgroup);
        let _ = std::fs::remove_file(&self.image);
    }
}

impl Drop for SlowDisk {
    fn drop(&mut self) {
        self.teardown();
    }
}
