//! End-to-end: the coordinator measures compute and fetch speeds from what real workers report
//! (issue 17), shows them in `plexus workers` and `plexus explain`, places on them with
//! `--placer fastest`, and keeps them across a restart.

use std::time::Duration;

use plexus_e2e::{Cluster, ClusterConfig, describe};
use plexus_proto::pb;

/// Two producers (one core each on one-core workers, so one per worker) write 4 MiB each; the
/// consumer reads both, so it fetches the other worker's blob.
const JOB: &str = r#"
name = "speeds"

[[task]]
name = "gen"
command = "head -c 4194304 /dev/zero > $PLEXUS_OUT/blob"
replicas = 2
outputs = ["blob"]
cpu = 1
timeout = "60s"

[[task]]
name = "sum"
command = "cat $PLEXUS_IN/gen/*/blob | wc -c"
inputs = ["gen/blob"]
cpu = 1
timeout = "60s"
"#;

fn explain(c: &Cluster, job: &str, task: &str) -> serde_json::Value {
    let out = c.plexus(&["explain", job, task, "-o", "json"]);
    assert!(out.status.success(), "{}", describe(&out));
    serde_json::from_slice(&out.stdout).expect("explain -o json prints JSON")
}

#[test]
fn speeds_are_measured_shown_placed_on_and_kept_across_a_restart() {
    let mut c = Cluster::start(ClusterConfig {
        workers: 2,
        cpus_per_worker: 1,
        placer: "fastest".into(),
        ..ClusterConfig::default()
    });
    let first = c.submit("speeds.toml", JOB);
    let status = c.wait_job(&first, Duration::from_secs(60));
    assert_eq!(status.state, pb::JobState::Succeeded as i32, "{status:?}\n{}", c.coordinator_log());
    let sum = status.subtasks.iter().find(|s| s.task == "sum").expect("the sum subtask");
    assert!(sum.fetched_bytes >= 4 << 20, "the consumer fetched the other worker's blob: {sum:?}");
    // Nothing was measured when the first job was placed: fastest placed as least-loaded.
    let e = explain(&c, &first, "gen");
    assert!(e["reason"].as_str().unwrap().starts_with("no estimate"), "{e}");

    // Both workers ran `gen`; the consumer's worker had one fetch measured.
    let workers = c.workers().expect("workers");
    assert!(workers.iter().all(|w| w.speed.is_some_and(|s| s.signatures >= 1)), "{workers:?}");
    let receiver = workers.iter().find(|w| w.worker_id == sum.worker_id).expect("the consumer's worker");
    let speed = receiver.speed.expect("measured");
    assert_eq!(speed.fetch_pairs, 1, "{speed:?}");
    assert!(speed.fetch_bytes_per_ms > 0.0 && speed.fetch_samples == 1.0, "{speed:?}");

    // The same work again: every candidate now has both estimates, and fastest places on them.
    let second = c.submit("speeds.toml", JOB);
    let status = c.wait_job(&second, Duration::from_secs(60));
    assert_eq!(status.state, pb::JobState::Succeeded as i32, "{status:?}");
    for task in ["gen", "sum"] {
        let e = explain(&c, &second, task);
        assert!(e["reason"].as_str().unwrap().starts_with("least estimated"), "{task}: {e}");
        for cand in e["candidates"].as_array().unwrap() {
            assert!(cand["est_fetch_ms"].is_number() && cand["est_compute_ms"].is_number(), "{task}: {cand}");
        }
    }
    let e = explain(&c, &second, "gen");
    for cand in e["candidates"].as_array().unwrap() {
        assert_eq!(cand["est_fetch_ms"], 0.0, "gen reads nothing: {cand}");
        assert!(cand["features"]["est_compute_samples"].as_f64().unwrap() >= 1.0, "each worker ran gen: {cand}");
    }

    // A restart keeps them: saved at shutdown, loaded at start.
    let before = c.plexus(&["workers", "-o", "json"]);
    assert!(before.status.success(), "{}", describe(&before));
    let before: serde_json::Value = serde_json::from_slice(&before.stdout).unwrap();
    c.stop_coordinator();
    c.start_coordinator();
    c.wait_workers_alive(2);
    let after = c.plexus(&["workers", "-o", "json"]);
    assert!(after.status.success(), "{}", describe(&after));
    let after: serde_json::Value = serde_json::from_slice(&after.stdout).unwrap();
    let speeds = |v: &serde_json::Value| {
        let mut s: Vec<(String, serde_json::Value)> = v["workers"]
            .as_array()
            .unwrap()
            .iter()
            .map(|w| (w["worker_id"].as_str().unwrap().to_string(), w["speed"].clone()))
            .collect();
        s.sort_by(|a, b| a.0.cmp(&b.0));
        s
    };
    // (Equal up to rounding: the cluster's means are summed afresh when loaded.)
    let same = |a: &serde_json::Value, b: &serde_json::Value| match (a.as_f64(), b.as_f64()) {
        (Some(x), Some(y)) => (x - y).abs() <= 1e-9 * x.abs().max(1.0),
        _ => a == b,
    };
    let (before, after) = (speeds(&before), speeds(&after));
    assert_eq!(before.len(), after.len());
    for ((wb, sb), (wa, sa)) in before.iter().zip(&after) {
        assert_eq!(wb, wa);
        let fields = sb.as_object().expect("a speed object");
        assert!(fields.iter().all(|(k, v)| same(v, &sa[k])), "the measured speeds survive the restart: {sb} then {sa}");
        assert!(sa["signatures"].as_u64() >= Some(1), "{sa}");
    }
}
