//! Driving `scripts/rails-rig.sh` from Rust, for tests and benchmarks: a [`Rig`] is up while
//! the value lives and is taken down when it drops, even when a test panics.

use std::io::Write;
use std::net::IpAddr;
use std::path::PathBuf;
use std::process::{Child, ChildStdin, ChildStdout, Command, Stdio};

use crate::error::{Error, Result};

/// The rig script, found from this crate's folder (tests and benchmarks run from the repo).
/// Deterministic test data: `len` bytes of a xorshift64 stream seeded by `seed`, so a receiver
/// (or a test) can tell a message's bytes from any other's.
pub fn pattern(len: usize, seed: u64) -> bytes::Bytes {
    let mut v = Vec::with_capacity(len + 8);
    // Never zero: xorshift would stay at zero forever.
    let mut x = seed.wrapping_add(0x9e37_79b9_7f4a_7c15) | 1;
    while v.len() < len {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        v.extend_from_slice(&x.to_le_bytes());
    }
    v.truncate(len);
    bytes::Bytes::from(v)
}

pub fn script() -> PathBuf {
    PathBuf::from(concat!(env!("CARGO_MANIFEST_DIR"), "/../scripts/rails-rig.sh"))
}

/// Why the rig cannot be used here, if it cannot: it needs root and the script.
pub fn unavailable() -> Option<String> {
    let uid = Command::new("id").arg("-u").output().ok().map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string());
    if uid.as_deref() != Some("0") {
        return Some("the multi-rail rig needs root (network namespaces and tc)".into());
    }
    if !script().exists() {
        return Some(format!("{} not found", script().display()));
    }
    for (tool, arg) in [("ip", "-V"), ("tc", "-V")] {
        if Command::new(tool).arg(arg).output().is_err() {
            return Some(format!("`{tool}` is not installed (scripts/deps-rails.sh installs iproute2)"));
        }
    }
    None
}

/// For a test that needs the rig: `false` if it can run here; else it says so and returns
/// `true`, and the test returns without running. The line `SKIPPED <test>: <why>` is written
/// straight to the process's stderr, not through `eprintln!`, which the test harness captures
/// and hides for a passing test: a skipped test must be seen as skipped, not taken for a pass.
pub fn skip_unless_available(test: &str) -> bool {
    let Some(why) = unavailable() else {
        return false;
    };
    let mut err = std::io::stderr().lock();
    let _ = writeln!(err, "SKIPPED {test}: {why}");
    let _ = err.flush();
    true
}

/// A running rig. Host 0 is this process's own (root) namespace.
pub struct Rig {
    hosts: usize,
    rails: usize,
}

impl Rig {
    /// `rails` in the script's syntax, e.g. `"2gbit,500mbit"`.
    pub fn up(hosts: usize, rails: &str) -> Result<Rig> {
        run(&["up", "--hosts", &hosts.to_string(), "--rails", rails])?;
        Ok(Rig { hosts, rails: rails.split(',').count() })
    }

    pub fn hosts(&self) -> usize {
        self.hosts
    }

    /// Address of host `h` on rail `r`.
    pub fn addr(&self, h: usize, r: usize) -> IpAddr {
        IpAddr::from([10, 77, r as u8, h as u8 + 1])
    }

    /// Every rail address of host `h`, in rail order.
    pub fn addrs(&self, h: usize) -> Vec<IpAddr> {
        (0..self.rails).map(|r| self.addr(h, r)).collect()
    }

    pub fn set_rate(&self, h: usize, r: usize, rate: &str) -> Result<()> {
        run(&["set-rate", &h.to_string(), &r.to_string(), rate])
    }

    pub fn cut(&self, h: usize, r: usize) -> Result<()> {
        run(&["cut", &h.to_string(), &r.to_string()])
    }

    pub fn restore(&self, h: usize, r: usize) -> Result<()> {
        run(&["restore", &h.to_string(), &r.to_string()])
    }

    /// Starts `program args` in host `h`'s namespace with piped stdin/stdout.
    pub fn spawn(&self, h: usize, program: &str, args: &[String]) -> std::io::Result<Child> {
        let mut c = if h == 0 {
            Command::new(program)
        } else {
            let mut c = Command::new("ip");
            c.args(["netns", "exec", &format!("plx-h{h}"), program]);
            c
        };
        c.args(args).stdin(Stdio::piped()).stdout(Stdio::piped()).stderr(Stdio::inherit()).spawn()
    }
}

impl Drop for Rig {
    fn drop(&mut self) {
        if let Err(e) = run(&["down"]) {
            eprintln!("rails-rig down failed: {e}");
        }
    }
}

fn run(args: &[&str]) -> Result<()> {
    let out = Command::new("bash").arg(script()).args(args).output().map_err(Error::RigStart)?;
    if !out.status.success() {
        return Err(Error::Rig {
            args: args.join(" "),
            stderr: String::from_utf8_lossy(&out.stderr).trim().to_string(),
        });
    }
    Ok(())
}

/// A peer process (see [`crate::peer`]) with its stdout parsed. Dropping it closes its stdin,
/// which stops it, and reaps it.
pub struct PeerProcess {
    child: Child,
    stdin: Option<ChildStdin>,
    lines: std::io::Lines<std::io::BufReader<ChildStdout>>,
    /// Its rail addresses, from its READY line.
    pub addrs: Vec<std::net::SocketAddr>,
}

impl PeerProcess {
    /// Takes a child started with piped stdin/stdout and waits for its READY line.
    pub fn new(mut child: Child) -> Result<PeerProcess> {
        use std::io::BufRead;
        let stdin = child.stdin.take();
        let stdout = child.stdout.take().ok_or_else(|| said("peer stdout not piped"))?;
        let mut lines = std::io::BufReader::new(stdout).lines();
        let first = lines.next().ok_or_else(|| said("peer exited before READY"))?.map_err(|e| said(e.to_string()))?;
        let addrs = first
            .strip_prefix("READY ")
            .ok_or_else(|| said(format!("peer said {first:?}, not READY")))?
            .split(',')
            .map(|a| a.parse().map_err(|e| said(format!("bad address {a:?} from peer: {e}"))))
            .collect::<Result<_>>()?;
        Ok(PeerProcess { child, stdin, lines, addrs })
    }

    /// The next `GOT` line as (sender, tag, len, crc), blocking.
    pub fn next_message(&mut self) -> Result<(String, u64, u64, u32)> {
        let line = self.lines.next().ok_or_else(|| said("peer exited"))?.map_err(|e| said(e.to_string()))?;
        let f: Vec<&str> = line.split_whitespace().collect();
        match f.as_slice() {
            ["GOT", from, tag, len, crc] => Ok((
                from.to_string(),
                tag.parse().map_err(|_| said(line.clone()))?,
                len.parse().map_err(|_| said(line.clone()))?,
                crc.parse().map_err(|_| said(line.clone()))?,
            )),
            _ => Err(said(format!("unexpected line from peer: {line:?}"))),
        }
    }
}

/// A peer process that broke its stdout protocol, with what it said or did.
fn said(what: impl Into<String>) -> Error {
    Error::PeerProcess(what.into())
}

impl Drop for PeerProcess {
    fn drop(&mut self) {
        drop(self.stdin.take());
        let _ = self.child.wait();
    }
}
