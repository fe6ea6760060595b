//! End-to-end: no subtask runs twice at once (issue 29). Each test runs a one-subtask job whose
//! command writes a *ledger* — `start`, a `tick` every 50 ms, `end`, each with its attempt and
//! the time — into a file outside every worker's data dir, takes the subtask's worker away
//! (`kill -9`, `SIGSTOP`, a network partition) while the command runs, waits until the attempt
//! placed in its stead has ended, and checks the ledger: an attempt's life runs from its `start`
//! to its last line, and no two attempts' lives overlap.
//!
//! Before the fencing of issue 29 each of these saw the first attempt tick on beside its
//! replacement: a killed worker's command ran on (reparented to init), a stopped worker's
//! command ran on unsupervised, and a partitioned worker's command ran on as if nothing happened.

#[path = "support/require.rs"]
mod require;

use std::collections::BTreeMap;
use std::net::{IpAddr, Ipv4Addr};
use std::os::unix::fs::PermissionsExt as _;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use plexus_e2e::{Cluster, ClusterConfig};
use plexus_launch::WorkerLaunch;
use plexus_proto::pb;

/// How long the command runs: ticks of 50 ms. Long enough that the first attempt is still
/// running when its replacement starts (the coordinator gives a worker up after 3 s).
const TICKS: u32 = 240;

/// A ledger file anyone can append to (tasks may run as another user), in a directory of its own.
struct Ledger {
    _dir: tempfile::TempDir,
    path: PathBuf,
}

impl Ledger {
    fn new() -> Ledger {
        let dir = tempfile::Builder::new().prefix("plexus-ledger-").tempdir().expect("a temp dir");
        std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755)).expect("chmod the ledger's dir");
        let path = dir.path().join("ledger");
        std::fs::write(&path, b"").expect("create the ledger");
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o666)).expect("chmod the ledger");
        Ledger { _dir: dir, path }
    }

    /// The job: one subtask that writes its life into the ledger.
    fn job(&self) -> String {
        let l = self.path.display();
        let line = |what: &str| {
            format!("echo \\\"{what} $PLEXUS_TASK/$PLEXUS_RANK $PLEXUS_ATTEMPT $(date +%s%N)\\\" >> '{l}'")
        };
        format!(
            "[[task]]\nname = \"work\"\ncpu = 1\nmax_retries = 0\n\
             command = \"{start}; i=0; while [ $i -lt {TICKS} ]; do {tick}; sleep 0.05; i=$((i+1)); done; {end}\"\n",
            start = line("start"),
            tick = line("tick"),
            end = line("end"),
        )
    }

    fn text(&self) -> String {
        std::fs::read_to_string(&self.path).unwrap_or_default()
    }

    /// Each attempt of each subtask: (first, last) time seen, in ns.
    fn lives(&self) -> BTreeMap<(String, u32), (u128, u128)> {
        let mut lives: BTreeMap<(String, u32), (u128, u128)> = BTreeMap::new();
        for line in self.text().lines() {
            let f: Vec<&str> = line.split_whitespace().collect();
            let [_, subtask, attempt, at] = f[..] else { panic!("a torn ledger line {line:?}") };
            let (attempt, at): (u32, u128) = (attempt.parse().expect("an attempt"), at.parse().expect("a time"));
            let life = lives.entry((subtask.to_string(), attempt)).or_insert((at, at));
            life.0 = life.0.min(at);
            life.1 = life.1.max(at);
        }
        lives
    }

    /// Panics naming the overlap if two attempts of one subtask lived at the same time; returns
    /// how many attempts there were.
    fn assert_no_overlap(&self) -> usize {
        let lives = self.lives();
        for ((s1, a1), (from1, to1)) in &lives {
            for ((s2, a2), (from2, to2)) in &lives {
                if s1 == s2 && a1 < a2 && from1.max(from2) <= to1.min(to2) {
                    panic!(
                        "attempts {a1} and {a2} of {s1} ran at once: {a1} lived {from1}..{to1}, {a2} {from2}..{to2} \
                         ({} ms together)\n{}",
                        (to1.min(to2) - from1.max(from2)) / 1_000_000,
                        self.text()
                    );
                }
            }
        }
        lives.len()
    }

    /// Whether attempt `n` has written its `start`.
    fn started(&self, n: u32) -> bool {
        self.text().lines().any(|l| l.starts_with("start ") && l.split_whitespace().nth(2) == Some(&n.to_string()))
    }
}

/// Submits the ledger job and waits until its first attempt runs; returns the job and the index
/// of the worker running it.
fn start_job(c: &Cluster, ledger: &Ledger) -> (String, usize) {
    let job = c.submit("ledger.toml", &ledger.job());
    let worker = c.wait_for("the first attempt to run", Duration::from_secs(60), |c| {
        let j = c.job(&job)?;
        let s = j.subtasks.first()?;
        (s.state == pb::SubtaskState::Running as i32 && ledger.started(1)).then(|| s.worker_id.clone())
    });
    (job, c.worker_index(&worker).expect("one of ours"))
}

/// Waits until the job has succeeded, with attempt 2 or later.
fn wait_replaced(c: &Cluster, job: &str, ledger: &Ledger) -> pb::JobStatus {
    let end = c.wait_job(job, Duration::from_secs(120));
    assert_eq!(end.state, pb::JobState::Succeeded as i32, "{end:?}\n{}", c.coordinator_log());
    assert!(end.subtasks[0].attempt >= 2, "the subtask was placed again: {end:?}\n{}", ledger.text());
    end
}

#[test]
fn a_killed_workers_attempt_dies_with_it_and_never_overlaps_its_replacement() {
    let mut c = Cluster::start(ClusterConfig { workers: 2, ..Default::default() });
    let ledger = Ledger::new();
    let (job, i) = start_job(&c, &ledger);
    c.kill_worker(i);
    wait_replaced(&c, &job, &ledger);
    // The first attempt's last line was written before the replacement's first.
    assert!(ledger.assert_no_overlap() >= 2, "{}", ledger.text());
}

#[test]
fn a_stopped_workers_attempt_is_fenced_before_its_replacement_starts() {
    let c = Cluster::start(ClusterConfig { workers: 2, ..Default::default() });
    let ledger = Ledger::new();
    let (job, i) = start_job(&c, &ledger);
    c.freeze_worker(i);
    // Stopped far longer than the coordinator waits (3 s): until the replacement has finished.
    wait_replaced(&c, &job, &ledger);
    c.thaw_worker(i);
    // Resumed, the worker learns it was given up and kills the attempt its supervisor froze at
    // the lease's end, before it registers again; nothing of the old attempt comes back.
    c.wait_for("the resumed worker to kill its frozen attempt", Duration::from_secs(30), |c| {
        c.worker_log(i).contains("the attempts were killed").then_some(())
    });
    c.wait_workers_alive(2);
    assert!(ledger.assert_no_overlap() >= 2, "{}", ledger.text());
    let log = c.worker_log(i);
    assert!(log.contains("the lease ran out without a renewal; freezing the attempt"), "{log}");
    assert!(!log.contains("thawing the attempt"), "{log}");
    let end = c.job(&job).expect("the job");
    assert_eq!(end.state, pb::JobState::Succeeded as i32, "the resumed worker changed nothing: {end:?}");
}

/// A network namespace with a veth pair to the host, torn down on drop.
struct Netns {
    name: String,
    host_if: String,
    host_ip: Ipv4Addr,
    ns_ip: Ipv4Addr,
}

fn ip(args: &[&str]) {
    let out = Command::new("ip").args(args).output().expect("running ip");
    assert!(out.status.success(), "ip {}: {}", args.join(" "), String::from_utf8_lossy(&out.stderr));
}

impl Netns {
    fn create() -> Netns {
        let id = std::process::id();
        // A /30 of 10.213.0.0/16 per test process: runs side by side do not collide.
        let base = (id % 16_000) * 4;
        let octets = |n: u32| Ipv4Addr::new(10, 213, (n >> 8) as u8, (n & 0xff) as u8);
        let ns = Netns {
            name: format!("plx-fence-{id}"),
            host_if: format!("plxf{id}h"),
            host_ip: octets(base + 1),
            ns_ip: octets(base + 2),
        };
        let ns_if = format!("plxf{id}n");
        ip(&["netns", "add", &ns.name]);
        ip(&["link", "add", &ns.host_if, "type", "veth", "peer", "name", &ns_if]);
        ip(&["link", "set", &ns_if, "netns", &ns.name]);
        ip(&["addr", "add", &format!("{}/30", ns.host_ip), "dev", &ns.host_if]);
        ip(&["link", "set", &ns.host_if, "up"]);
        ip(&["-n", &ns.name, "addr", "add", &format!("{}/30", ns.ns_ip), "dev", &ns_if]);
        ip(&["-n", &ns.name, "link", "set", &ns_if, "up"]);
        ip(&["-n", &ns.name, "link", "set", "lo", "up"]);
        ns
    }

    fn path(&self) -> PathBuf {
        Path::new("/var/run/netns").join(&self.name)
    }

    /// Cuts (`false`) or mends (`true`) the link.
    fn link(&self, up: bool) {
        ip(&["link", "set", &self.host_if, if up { "up" } else { "down" }]);
    }
}

impl Drop for Netns {
    fn drop(&mut self) {
        // Deleting the namespace deletes its end of the veth pair, and the pair with it.
        let _ = Command::new("ip").args(["netns", "del", &self.name]).status();
        let _ = Command::new("ip").args(["link", "del", &self.host_if]).stderr(std::process::Stdio::null()).status();
    }
}

#[test]
fn a_partitioned_workers_attempt_is_fenced_before_its_replacement_starts() {
    if !require::require(&[require::ROOT, require::IP, require::NSENTER]) {
        return;
    }
    let ns = Netns::create();
    // The coordinator on the host end of the veth; one worker on the host, none placed yet.
    let mut c = Cluster::start(ClusterConfig {
        workers: 1,
        listen_ip: IpAddr::V4(ns.host_ip),
        // The job goes to the namespaced worker: the host worker is drained until then.
        ..Default::default()
    });
    let host_worker = c.worker_id(0);
    assert!(c.plexus(&["workers", "drain", &host_worker]).status.success());
    let net = format!("--net={}", ns.path().display());
    let rail = ns.ns_ip.to_string();
    let launch = WorkerLaunch {
        prefix: vec!["nsenter".into(), net.into()],
        args: vec!["--listen".into(), format!("{rail}:0").into(), "--rail".into(), rail.clone().into()],
        coordinators: None,
    };
    let inside = c.launcher().add_worker_with(&launch).expect("the namespaced worker starts");
    c.wait_workers_alive(2);
    let ledger = Ledger::new();
    let (job, i) = start_job(&c, &ledger);
    assert_eq!(i, inside, "the job runs in the namespace");
    assert!(c.plexus(&["workers", "undrain", &host_worker]).status.success());
    ns.link(false);
    wait_replaced(&c, &job, &ledger);
    ns.link(true);
    // Back in touch, the worker learns it was given up and kills what froze at the lease's end.
    c.wait_for("the partitioned worker to kill its frozen attempt", Duration::from_secs(30), |c| {
        c.worker_log(inside).contains("the attempts were killed").then_some(())
    });
    assert!(ledger.assert_no_overlap() >= 2, "{}", ledger.text());
    let log = c.worker_log(inside);
    assert!(log.contains("the running commands are frozen"), "{log}");
    assert!(!log.contains("thawing the attempt"), "{log}");
}
