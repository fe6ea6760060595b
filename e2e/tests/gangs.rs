//! End-to-end: gangs, deadlines and priorities on real worker processes (issue 14). Each member
//! writes a start marker (its rank and the time it started, ns) into a directory of the test,
//! so "no member started before its whole gang was reserved" is checked against what actually
//! ran, not only against what the coordinator says.

use std::path::Path;
use std::time::Duration;

use plexus_e2e::{Cluster, ClusterConfig, describe};
use plexus_proto::pb;

const SUCCEEDED: i32 = pb::JobState::Succeeded as i32;

/// A job of one gang task whose members write `<dir>/<job name>.<rank>` = their start time (ns)
/// and then sleep `secs`.
fn gang_job(name: &str, dir: &Path, replicas: u32, min: u32, timeout: &str, secs: f64) -> String {
    format!(
        "name = \"{name}\"\n[[task]]\nname = \"m\"\nreplicas = {replicas}\nmin_members = {min}\ngang_timeout = \"{timeout}\"\ncpu = 1\ncommand = \"date +%s%N > {}/{name}.$PLEXUS_RANK; sleep {secs}\"\n",
        dir.display()
    )
}

/// Start times (ns) of the members of job `name`, by rank.
fn starts(dir: &Path, name: &str, n: u32) -> Vec<Option<u128>> {
    (0..n)
        .map(|r| std::fs::read_to_string(dir.join(format!("{name}.{r}"))).ok().and_then(|s| s.trim().parse().ok()))
        .collect()
}

/// kube-batch#158 and Coscheduling's Permit deadlock (scheduler-plugins#114/#117): two gangs
/// each needing 3 of 4 one-core workers, submitted at once. Both run, one after the other, each
/// whole: every member of a gang was dispatched in the round that bound it, and none of the
/// second started before the first gang's members had all started.
#[test]
fn two_gangs_needing_three_of_four_workers_both_succeed_without_partial_starts() {
    let c = Cluster::start(ClusterConfig { workers: 4, cpus_per_worker: 1, ..Default::default() });
    let marks = c.task_dir("marks");
    let a = c.submit("a.toml", &gang_job("a", &marks, 3, 3, "60s", 1.5));
    let b = c.submit("b.toml", &gang_job("b", &marks, 3, 3, "60s", 1.5));
    for (job, name) in [(&a, "a"), (&b, "b")] {
        let j = c.wait_job(job, Duration::from_secs(90));
        assert_eq!(j.state, SUCCEEDED, "{name}: {}", j.error);
        // Every member placed in one round: the round that bound the gang.
        let assigned: Vec<u64> = j.subtasks.iter().map(|s| s.assigned_at).collect();
        assert!(assigned.iter().all(|&t| t == assigned[0] && t > 0), "{name}: members assigned at {assigned:?}");
        assert!(j.subtasks.iter().all(|s| s.attempt == 1), "{name}: a member ran twice");
    }
    let (sa, sb) = (starts(&marks, "a", 3), starts(&marks, "b", 3));
    assert!(sa.iter().chain(sb.iter()).all(Option::is_some), "start markers: {sa:?} {sb:?}");
    let (sa, sb): (Vec<u128>, Vec<u128>) = (sa.into_iter().flatten().collect(), sb.into_iter().flatten().collect());
    // One gang ran first and whole; the other's members all started after it had all started.
    let (first, second) = if sa.iter().min() < sb.iter().min() { (&sa, &sb) } else { (&sb, &sa) };
    assert!(second.iter().min() > first.iter().max(), "interleaved starts: {first:?} {second:?}");
}

/// YuniKorn's placeholder timeout, Kueue's waitForPodsReady: a gang that cannot fill before its
/// deadline rolls back, `plexus status` says so, and it runs once a worker joins.
#[test]
fn a_gang_that_cannot_fill_rolls_back_is_shown_and_runs_when_a_worker_joins() {
    let mut c = Cluster::start(ClusterConfig { workers: 3, cpus_per_worker: 1, ..Default::default() });
    let marks = c.task_dir("marks");
    // A long task takes one of the three workers.
    let long = c.submit("long.toml", "name = \"long\"\n[[task]]\nname = \"l\"\ncpu = 1\ncommand = \"sleep 600\"\n");
    c.wait_for("the long task to run", Duration::from_secs(20), |c| {
        c.job(&long).filter(|j| j.subtasks[0].state == pb::SubtaskState::Running as i32)
    });
    let g = c.submit("g.toml", &gang_job("g", &marks, 3, 3, "2s", 0.1));
    let out = c.wait_for("the gang to be rolled back", Duration::from_secs(30), |c| {
        let out = c.plexus(&["status", &g]);
        String::from_utf8_lossy(&out.stdout).contains("gang m: rolled back at").then_some(out)
    });
    let text = String::from_utf8_lossy(&out.stdout).to_string();
    assert!(text.contains("deadline: 2 of 3 members reserved"), "{}", describe(&out));
    assert!(starts(&marks, "g", 3).iter().all(Option::is_none), "a member started before the gang was whole");
    let json = c.plexus(&["status", &g, "-o", "json"]);
    let v: serde_json::Value = serde_json::from_slice(&json.stdout).unwrap();
    assert!(v["gangs"][0]["rollbacks"].as_u64().unwrap() >= 1, "{v}");
    assert_eq!(v["gangs"][0]["min_members"], 3);

    // A fourth worker joins: the gang binds and runs.
    c.add_worker();
    let j = c.wait_job(&g, Duration::from_secs(60));
    assert_eq!(j.state, SUCCEEDED, "{}", j.error);
    assert!(starts(&marks, "g", 3).iter().all(Option::is_some));
    let out = c.plexus(&["cancel", &long]);
    assert!(out.status.success(), "{}", describe(&out));
}

/// Priority: a priority-10 job submitted after a priority-0 one starts first.
#[test]
fn a_priority_ten_job_submitted_later_starts_first() {
    let c = Cluster::start(ClusterConfig { workers: 1, cpus_per_worker: 1, ..Default::default() });
    let blocker =
        c.submit("blocker.toml", "name = \"blocker\"\n[[task]]\nname = \"b\"\ncpu = 1\ncommand = \"sleep 2\"\n");
    c.wait_for("the blocker to run", Duration::from_secs(20), |c| {
        c.job(&blocker).filter(|j| j.subtasks[0].state == pb::SubtaskState::Running as i32)
    });
    let low = c.submit("low.toml", "name = \"low\"\n[[task]]\nname = \"t\"\ncpu = 1\ncommand = \"true\"\n");
    let high =
        c.submit("high.toml", "name = \"high\"\npriority = 10\n[[task]]\nname = \"t\"\ncpu = 1\ncommand = \"true\"\n");
    let (l, h) = (c.wait_job(&low, Duration::from_secs(60)), c.wait_job(&high, Duration::from_secs(60)));
    assert_eq!((l.state, h.state), (SUCCEEDED, SUCCEEDED));
    assert!(
        h.subtasks[0].started_at < l.subtasks[0].started_at,
        "high started at {}, low at {}",
        h.subtasks[0].started_at,
        l.subtasks[0].started_at
    );
    let out = c.plexus(&["status", &high]);
    assert!(String::from_utf8_lossy(&out.stdout).contains("priority:  10"), "{}", describe(&out));
}

/// `plexus-coordinator queue set NAME --share S` reaches the running coordinator (with the data
/// dir's admin token), applies at once, is refused with a reason when invalid, and survives a
/// restart of the coordinator (kept in the store).
#[test]
fn queue_shares_are_set_on_the_running_coordinator_and_survive_a_restart() {
    let mut c = Cluster::start(ClusterConfig { workers: 1, ..ClusterConfig::default() });
    let admin = |c: &Cluster, args: &[&str]| {
        std::process::Command::new(plexus_e2e::bin_dir().join("plexus-coordinator"))
            .args(["--coordinator", &c.url, "--data-dir"])
            .arg(c.path("coordinator"))
            .args(args)
            .env_remove("RUST_BACKTRACE")
            .output()
            .expect("running plexus-coordinator")
    };
    let out = admin(&c, &["queue", "set", "batch", "--share", "0.5"]);
    assert!(out.status.success(), "{}", describe(&out));
    assert!(
        String::from_utf8_lossy(&out.stdout).contains("batch                    share 0.500"),
        "{}",
        describe(&out)
    );
    let out = admin(&c, &["queue", "set", "batch", "--share", "2"]);
    assert!(!out.status.success());
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("share 2 of queue \"batch\" is not in (0, 1]"),
        "{}",
        describe(&out)
    );
    c.stop_coordinator();
    c.start_coordinator();
    let out = admin(&c, &["queue", "list"]);
    assert!(out.status.success(), "{}", describe(&out));
    assert!(
        String::from_utf8_lossy(&out.stdout).contains("batch                    share 0.500  using 0.0 cores"),
        "{}",
        describe(&out)
    );
}
