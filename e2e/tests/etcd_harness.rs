//! The etcd harness ([`plexus_e2e::etcd`]) itself: a real cluster of three members starts and is
//! healthy, keeps serving reads and writes with one member killed, and takes the member back
//! when it is restarted on its data dir. Skipped, saying so on stderr, only where etcd or
//! etcdctl is not installed (`make deps`); any other start error fails the test.

use std::process::Command;
use std::time::Duration;

use plexus_e2e::etcd::EtcdCluster;

#[path = "support/require.rs"]
mod require;

/// `members` members, or `None` (the test is skipped, and says so) where etcd or etcdctl is not
/// installed.
fn start(members: usize) -> Option<EtcdCluster> {
    if !require::require(&[require::ETCD, require::ETCDCTL]) {
        return None;
    }
    Some(EtcdCluster::start(members).unwrap_or_else(|e| panic!("starting {members} etcd members: {e}")))
}

/// `etcdctl --endpoints E ARGS`; its stdout, or a panic with its stderr.
fn etcdctl(endpoints: &[String], args: &[&str]) -> String {
    let out = Command::new("etcdctl")
        .env("ETCDCTL_API", "3")
        .arg(format!("--endpoints={}", endpoints.join(",")))
        .args(["--dial-timeout=2s", "--command-timeout=5s"])
        .args(args)
        .output()
        .expect("running etcdctl");
    assert!(out.status.success(), "etcdctl {args:?} on {endpoints:?} failed: {}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// Waits up to 5 s until member `endpoint` alone has `key` = `want` (a serializable read: no
/// quorum, so it shows what that member has applied; followers apply asynchronously).
fn assert_member_has(endpoint: &str, key: &str, want: &str) {
    let mut v = String::new();
    for _ in 0..50 {
        v = etcdctl(&[endpoint.to_string()], &["get", "--consistency=s", "--print-value-only", key]).trim().to_string();
        if v == want {
            return;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    panic!("member {endpoint} has {key} = {v:?}, not {want:?}");
}

#[test]
fn one_member_starts_and_serves() {
    let Some(c) = start(1) else { return };
    assert!(c.healthy(0));
    let ep = c.endpoints();
    assert_eq!(ep.len(), 1);
    assert!(ep[0].starts_with("127.0.0.1:"), "{ep:?}");
    assert_eq!(c.url(), format!("etcd://{}", ep[0]));
    etcdctl(&ep, &["put", "/plexus-test/k", "v1"]);
    assert_eq!(etcdctl(&ep, &["get", "--print-value-only", "/plexus-test/k"]).trim(), "v1");
}

#[test]
fn three_members_survive_one_killed_and_take_it_back() {
    let Some(mut c) = start(3) else { return };
    let ep = c.endpoints();
    assert_eq!(ep.len(), 3);
    let distinct: std::collections::BTreeSet<&String> = ep.iter().collect();
    assert_eq!(distinct.len(), 3, "{ep:?}");
    assert_eq!(c.url(), format!("etcd://{}", ep.join(",")));
    for i in 0..3 {
        assert!(c.healthy(i), "member {i} is not healthy after start");
    }
    let members = etcdctl(&ep, &["member", "list"]);
    assert_eq!(members.lines().filter(|l| l.contains("started")).count(), 3, "member list:\n{members}");
    etcdctl(&ep, &["put", "/plexus-test/before", "1"]);

    // kill -9 of member 0: the other two keep a quorum (they may elect a new leader first).
    let old_pid = c.pid(0).expect("member 0 runs");
    c.kill(0);
    assert_eq!(c.pid(0), None);
    assert!(!c.healthy(0), "a killed member answers /health");
    for i in 1..3 {
        c.wait_healthy(i, Duration::from_secs(10)).unwrap_or_else(|e| panic!("member {i} with member 0 killed: {e}"));
    }
    let live = &ep[1..];
    etcdctl(live, &["put", "/plexus-test/during", "2"]);
    assert_eq!(etcdctl(live, &["get", "--print-value-only", "/plexus-test/before"]).trim(), "1");
    assert_eq!(etcdctl(live, &["get", "--print-value-only", "/plexus-test/during"]).trim(), "2");

    // Restarted on its data dir, member 0 rejoins and catches up on what it missed.
    c.restart(0).unwrap_or_else(|e| panic!("restarting member 0: {e}"));
    assert!(c.pid(0).is_some_and(|p| p != old_pid));
    assert!(c.healthy(0));
    assert_member_has(&ep[0], "/plexus-test/during", "2");
    etcdctl(&ep[..1], &["put", "/plexus-test/after", "3"]);
    for e in &ep {
        assert_member_has(e, "/plexus-test/after", "3");
    }
    let status = etcdctl(&ep, &["endpoint", "status"]);
    assert_eq!(status.lines().count(), 3, "endpoint status:\n{status}");
}

#[test]
fn drop_kills_every_member() {
    let Some(c) = start(3) else { return };
    let pids: Vec<u32> = (0..3).map(|i| c.pid(i).expect("member runs")).collect();
    let dir = c.dir().to_path_buf();
    drop(c);
    for p in pids {
        // Dropped members were waited for, so their pids no longer name an etcd.
        let comm = std::fs::read_to_string(format!("/proc/{p}/comm")).unwrap_or_default();
        assert_ne!(comm.trim(), "etcd", "etcd pid {p} outlives the dropped cluster");
    }
    assert!(!dir.exists(), "{} is left behind", dir.display());
}
