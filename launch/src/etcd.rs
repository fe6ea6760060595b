//! A real etcd cluster of one or three members on loopback, as child processes, for the tests
//! and benchmarks of the HA control plane (issue 19). `make deps` installs Debian's
//! `etcd-server`; without it [`EtcdCluster::start`] says so ([`LaunchError::MissingTool`]) and
//! tests skip.
//!
//! Each member has a directory of its own in one temporary directory: `mN/data` (etcd's data
//! dir) and `mN/etcd.log` (its output, appended to across restarts).

use std::path::PathBuf;
use std::process::Command;
use std::time::{Duration, Instant};

use crate::LaunchError;
use crate::process::{Proc, Spec};

/// How long a member may take to become healthy: a first start on a loaded 2-core machine
/// takes a few seconds, a restart that replays its log longer.
const HEALTHY_TIMEOUT: Duration = Duration::from_secs(30);

/// Why etcd cannot be run here, if it cannot.
pub fn etcd_available() -> Option<String> {
    check_etcd().err().map(|e| e.to_string())
}

/// `Ok` when `etcd --version` runs; [`LaunchError::MissingTool`] when there is no etcd,
/// [`LaunchError::Tool`] when there is one that fails.
pub fn check_etcd() -> Result<(), LaunchError> {
    match Command::new("etcd").arg("--version").output() {
        Ok(o) if o.status.success() => Ok(()),
        Ok(o) => Err(LaunchError::Tool {
            tool: "etcd",
            reason: format!("`etcd --version` failed: {}", String::from_utf8_lossy(&o.stderr).trim()),
        }),
        Err(e) => {
            Err(LaunchError::MissingTool { tool: "etcd", reason: format!("{e}; Debian's package is etcd-server") })
        }
    }
}

struct Member {
    name: String,
    client_port: u16,
    peer_port: u16,
    /// `mN/`: `data/` and `etcd.log`.
    dir: PathBuf,
    proc: Option<Proc>,
}

pub struct EtcdCluster {
    dir: tempfile::TempDir,
    members: Vec<Member>,
    token: String,
}

/// `n` distinct free ports on loopback: every listener is held until all are bound, so the
/// kernel cannot hand out one port twice.
fn free_ports(n: usize) -> Result<Vec<u16>, LaunchError> {
    let bind = |_| std::net::TcpListener::bind("127.0.0.1:0").map_err(LaunchError::io("bind", "127.0.0.1:0"));
    let listeners = (0..n).map(bind).collect::<Result<Vec<_>, _>>()?;
    listeners
        .iter()
        .map(|l| l.local_addr().map(|a| a.port()).map_err(LaunchError::io("read the address of", "127.0.0.1:0")))
        .collect()
}

impl EtcdCluster {
    /// Starts `members` members and waits until each answers `/health`.
    pub fn start(members: usize) -> Result<EtcdCluster, LaunchError> {
        check_etcd()?;
        let dir = tempfile::Builder::new()
            .prefix("plexus-etcd-")
            .tempdir()
            .map_err(LaunchError::io("create a temporary directory in", std::env::temp_dir()))?;
        let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap_or_default();
        let token = format!("plexus-test-{}-{}", std::process::id(), now.as_millis());
        let ports = free_ports(2 * members)?;
        let members: Vec<Member> = (0..members)
            .map(|i| Member {
                name: format!("m{i}"),
                client_port: ports[2 * i],
                peer_port: ports[2 * i + 1],
                dir: dir.path().join(format!("m{i}")),
                proc: None,
            })
            .collect();
        for m in &members {
            std::fs::create_dir_all(&m.dir).map_err(LaunchError::io("create", &m.dir))?;
        }
        let mut c = EtcdCluster { dir, members, token };
        for i in 0..c.members.len() {
            c.spawn(i, "new")?;
        }
        for i in 0..c.members.len() {
            c.wait_healthy(i, HEALTHY_TIMEOUT)?;
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

    fn spawn(&mut self, i: usize, state: &str) -> Result<(), LaunchError> {
        let cluster = self.initial_cluster();
        let m = &self.members[i];
        let client = format!("http://127.0.0.1:{}", m.client_port);
        let peer = format!("http://127.0.0.1:{}", m.peer_port);
        let mut spec = Spec::new(format!("etcd member {i}"), "etcd", self.log_path(i));
        let data = m.dir.join("data").to_string_lossy().into_owned();
        let args = [
            "--name",
            &m.name,
            "--data-dir",
            &data,
            "--listen-client-urls",
            &client,
            "--advertise-client-urls",
            &client,
            "--listen-peer-urls",
            &peer,
            "--initial-advertise-peer-urls",
            &peer,
            "--initial-cluster",
            &cluster,
            "--initial-cluster-state",
            state,
            "--initial-cluster-token",
            &self.token,
            "--auto-compaction-mode",
            "revision",
            "--auto-compaction-retention",
            "1000",
            "--quota-backend-bytes",
            &(4u64 << 30).to_string(),
        ];
        spec.args = args.iter().map(Into::into).collect();
        self.members[i].proc = Some(Proc::spawn(&spec)?);
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
    pub fn wait_healthy(&self, i: usize, timeout: Duration) -> Result<(), LaunchError> {
        let start = Instant::now();
        while start.elapsed() < timeout {
            if self.healthy(i) {
                return Ok(());
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        let log = std::fs::read_to_string(self.log_path(i)).unwrap_or_default();
        let tail: Vec<&str> = log.lines().rev().take(20).collect();
        Err(LaunchError::Tool {
            tool: "etcd",
            reason: format!(
                "member {i} not healthy after {timeout:?}; log tail:\n{}",
                tail.into_iter().rev().collect::<Vec<_>>().join("\n")
            ),
        })
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
        self.members[i].proc.as_ref().and_then(Proc::pid)
    }

    /// `kill -9` member `i`.
    pub fn kill(&mut self, i: usize) {
        // Dropping the process kills and reaps it.
        self.members[i].proc = None;
    }

    /// Starts member `i` again on its data dir and waits until it is healthy.
    pub fn restart(&mut self, i: usize) -> Result<(), LaunchError> {
        self.kill(i);
        self.spawn(i, "existing")?;
        self.wait_healthy(i, HEALTHY_TIMEOUT)
    }
}

impl Drop for EtcdCluster {
    fn drop(&mut self) {
        // The members first (field order would drop the directory under them).
        for m in &mut self.members {
            m.proc = None;
        }
    }
}
