//! A real etcd cluster of one or three members on loopback, as child processes, for the tests
//! and benchmarks of the HA control plane (issue 19). `make deps` installs Debian's
//! `etcd-server`; without it [`EtcdCluster::start`] says so and tests skip.
//!
//! Each member has a directory of its own in one temporary directory: `mN/data` (etcd's data
//! dir) and `mN/etcd.log` (its output, appended to across restarts).

use std::path::PathBuf;
use std::process::{Child, Command};
use std::time::{Duration, Instant};

/// Why etcd cannot be run here, if it cannot.
pub fn etcd_available() -> Option<String> {
    match Command::new("etcd").arg("--version").output() {
        Ok(o) if o.status.success() => None,
        Ok(o) => Some(format!("`etcd --version` failed: {}", String::from_utf8_lossy(&o.stderr).trim())),
        Err(e) => Some(format!("etcd is not installed ({e}); `make deps` installs Debian's etcd-server")),
    }
}

struct Member {
    name: String,
    client_port: u16,
    peer_port: u16,
    /// `mN/`: `data/` and `etcd.log`.
    dir: PathBuf,
    child: Option<Child>,
}

pub struct EtcdCluster {
    dir: tempfile::TempDir,
    members: Vec<Member>,
    token: String,
}

/// `n` distinct free ports on loopback: every listener is held until all are bound, so the
/// kernel cannot hand out one port twice.
fn free_ports(n: usize) -> Result<Vec<u16>, String> {
    let bind = |_| std::net::TcpListener::bind("127.0.0.1:0").map_err(|e| format!("binding 127.0.0.1:0: {e}"));
    let listeners = (0..n).map(bind).collect::<Result<Vec<_>, _>>()?;
    listeners.iter().map(|l| l.local_addr().map(|a| a.port()).map_err(|e| e.to_string())).collect()
}

impl EtcdCluster {
    /// Starts `members` members and waits until each answers `/health`.
    pub fn start(members: usize) -> Result<EtcdCluster, String> {
        if let Some(why) = etcd_available() {
            return Err(why);
        }
        let dir = tempfile::Builder::new().prefix("plexus-etcd-").tempdir().map_err(|e| e.to_string())?;
        let token = format!("plexus-test-{}-{}", std::process::id(), plexus_proto::now_ms());
        let ports = free_ports(2 * members)?;
        let members: Vec<Member> = (0..members)
            .map(|i| Member {
                name: format!("m{i}"),
                client_port: ports[2 * i],
                peer_port: ports[2 * i + 1],
                dir: dir.path().join(format!("m{i}")),
                child: None,
            })
            .collect();
        for m in &members {
            std::fs::create_dir_all(&m.dir).map_err(|e| format!("creating {}: {e}", m.dir.display()))?;
        }
        let mut c = EtcdCluster { dir, members, token };
        for i in 0..c.members.len() {
            c.spawn(i, "new")?;
        }
        for i in 0..c.members.len() {
            c.wait_healthy(i, Duration::from_secs(30))?;
        }
        Ok(c)
    }

    fn initial_cluster(&self) -> String {
        self.members
            .iter()
            .map(|m| format!("{}=http://127.0.0.1:{}", m.name, m.peer_port))
            .collect::<Vec<_>>()
            .join(",")
    }

    /// Member `i`'s output.
    pub fn log_path(&self, i: usize) -> PathBuf {
        self.members[i].dir.join("etcd.log")
    }

    fn spawn(&mut self, i: usize, state: &str) -> Result<(), String> {
        let cluster = self.initial_cluster();
        let log =
            std::fs::OpenOptions::new().create(true).append(true).open(self.log_path(i)).map_err(|e| e.to_string())?;
        let err = log.try_clone().map_err(|e| e.to_string())?;
        let m = &self.members[i];
        let client = format!("http://127.0.0.1:{}", m.client_port);
        let peer = format!("http://127.0.0.1:{}", m.peer_port);
        let child = Command::new("etcd")
            .args(["--name", &m.name, "--data-dir"])
            .arg(m.dir.join("data"))
            .args(["--listen-client-urls", &client, "--advertise-client-urls", &client])
            .args(["--listen-peer-urls", &peer, "--initial-advertise-peer-urls", &peer])
            .args([
                "--initial-cluster",
                &cluster,
                "--initial-cluster-state",
                state,
                "--initial-cluster-token",
                &self.token,
            ])
            .args(["--auto-compaction-mode", "revision", "--auto-compaction-retention", "1000"])
            .args(["--quota-backend-bytes", &(4u64 << 30).to_string()])
            .stdout(log)
            .stderr(err)
            .spawn()
            .map_err(|e| format!("spawning etcd: {e}"))?;
        self.members[i].child = Some(child);
        Ok(())
    }

    /// Member `i` answers `GET /health` with `{"health":"true"}` (it has a leader and serves).
    pub fn healthy(&self, i: usize) -> bool {
        use std::io::{Read, Write};
        let Ok(mut s) = std::net::TcpStream::connect(("127.0.0.1", self.members[i].client_port)) else { return false };
        let _ = s.set_read_timeout(Some(Duration::from_secs(2)));
        if write!(s, "GET /health HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n").is_err() {
            return false;
        }
        let mut body = String::new();
        let _ = s.read_to_string(&mut body);
        body.contains("\"health\":\"true\"")
    }

    /// Waits until member `i` is [`healthy`](Self::healthy); `Err` with its log's tail.
    pub fn wait_healthy(&self, i: usize, timeout: Duration) -> Result<(), String> {
        let start = Instant::now();
        while start.elapsed() < timeout {
            if self.healthy(i) {
                return Ok(());
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        let log = std::fs::read_to_string(self.log_path(i)).unwrap_or_default();
        let tail: Vec<&str> = log.lines().rev().take(20).collect();
        Err(format!(
            "etcd member {i} not healthy after {timeout:?}; log tail:\n{}",
            tail.into_iter().rev().collect::<Vec<_>>().join("\n")
        ))
    }

    /// The temporary directory that holds every member's directory (removed on drop).
    pub fn dir(&self) -> &std::path::Path {
        self.dir.path()
    }

    /// `127.0.0.1:port` of every member.
    pub fn endpoints(&self) -> Vec<String> {
        self.members.iter().map(|m| format!("127.0.0.1:{}", m.client_port)).collect()
    }

    /// `etcd://` with every member, for `--store`.
    pub fn url(&self) -> String {
        format!("etcd://{}", self.endpoints().join(","))
    }

    pub fn pid(&self, i: usize) -> Option<u32> {
        self.members[i].child.as_ref().map(Child::id)
    }

    /// `kill -9` member `i`.
    pub fn kill(&mut self, i: usize) {
        if let Some(mut c) = self.members[i].child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }

    /// Starts member `i` again on its data dir and waits until it is healthy.
    pub fn restart(&mut self, i: usize) -> Result<(), String> {
        self.kill(i);
        self.spawn(i, "existing")?;
        self.wait_healthy(i, Duration::from_secs(30))
    }
}

impl Drop for EtcdCluster {
    fn drop(&mut self) {
        for i in 0..self.members.len() {
            self.kill(i);
        }
    }
}
