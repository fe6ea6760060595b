//! End-to-end: objects move between real worker processes over the data plane, striped over
//! each worker's two rails (two loopback addresses), and arrive intact.

use std::time::Duration;

use plexus_e2e::{Cluster, ClusterConfig, describe};
use plexus_proto::pb;

/// Two producers on two workers (one core each, so one per worker) each write 24 MiB of random
/// bytes and their checksum; two consumers each read both blobs, so every consumer fetches the
/// other worker's blob from a peer, and check every checksum.
const JOB: &str = r#"
name = "rails"

[[task]]
name = "gen"
command = "head -c 25165824 /dev/urandom > $PLEXUS_OUT/blob && cksum < $PLEXUS_OUT/blob > $PLEXUS_OUT/sum"
replicas = 2
outputs = ["blob", "sum"]
cpu = 1
timeout = "60s"

[[task]]
name = "check"
command = "for d in $PLEXUS_IN/gen/*; do [ \"$(cksum < $d/blob)\" = \"$(cat $d/sum)\" ] || { echo corrupt $d; exit 1; }; done; echo intact"
inputs = ["gen/blob", "gen/sum"]
replicas = 2
cpu = 1
timeout = "60s"
"#;

#[test]
fn objects_travel_between_workers_striped_over_both_rails() {
    let c = Cluster::start(ClusterConfig {
        workers: 2,
        cpus_per_worker: 1,
        worker_args: ["--rail", "127.0.0.1", "--rail", "127.0.0.2"].map(String::from).to_vec(),
        ..ClusterConfig::default()
    });
    let job = c.submit("rails.toml", JOB);
    let status = c.wait_job(&job, Duration::from_secs(90));
    assert_eq!(status.state, pb::JobState::Succeeded as i32, "{status:?}\n{}", c.coordinator_log());
    let fetched: u64 = status.subtasks.iter().filter(|s| s.task == "check").map(|s| s.fetched_bytes).sum();
    assert!(fetched >= (2 * 24) << 20, "each consumer fetched the other worker's blob: {fetched} bytes");
    for rank in ["0", "1"] {
        let logs = c.plexus(&["logs", &job, "check", "--rank", rank]);
        assert!(logs.status.success(), "{}", describe(&logs));
        assert_eq!(String::from_utf8_lossy(&logs.stdout).trim(), "intact");
    }

    // The heartbeats' counters (every 500 ms) show both rails of the receiving side carried a
    // real share of the bytes.
    let per_rail = c.wait_for("the rail counters to show both blobs", Duration::from_secs(10), |c| {
        let mut per_rail = [0u64; 2];
        for w in c.workers()? {
            for (i, r) in w.state?.rails.iter().enumerate().take(2) {
                per_rail[i] += r.bytes_received;
            }
        }
        (per_rail.iter().sum::<u64>() >= (2 * 24) << 20).then_some(per_rail)
    });
    let total: u64 = per_rail.iter().sum();
    for (i, bytes) in per_rail.iter().enumerate() {
        assert!(*bytes * 5 >= total, "rail {i} carried too small a share: {per_rail:?}");
    }

    // The CLI shows each worker's data-plane address per rail, and the rails' traffic.
    let out = c.plexus(&["workers", "-o", "json"]);
    assert!(out.status.success(), "{}", describe(&out));
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).expect("workers -o json prints JSON");
    let workers = v["workers"].as_array().expect("a worker list");
    assert_eq!(workers.len(), 2, "{v}");
    for w in workers {
        let rails = w["rails"].as_array().expect("rails");
        assert_eq!(rails.len(), 2, "{w}");
        assert!(rails[0].as_str().unwrap().starts_with("127.0.0.1:"), "{w}");
        assert!(rails[1].as_str().unwrap().starts_with("127.0.0.2:"), "{w}");
        assert_eq!(w["rail_traffic"].as_array().map(Vec::len), Some(2), "{w}");
    }
}

/// The examples' allreduce job: four producers, a built-in allreduce gang over the data plane,
/// and a check of the sum against a sequential one, on four workers with two rails each.
#[test]
fn the_allreduce_example_sums_four_replicas_across_workers() {
    let c = Cluster::start(ClusterConfig {
        workers: 4,
        cpus_per_worker: 1,
        worker_args: ["--rail", "127.0.0.1", "--rail", "127.0.0.2"].map(String::from).to_vec(),
        ..ClusterConfig::default()
    });
    let file = concat!(env!("CARGO_MANIFEST_DIR"), "/../examples/allreduce.toml");
    let source = std::fs::read_to_string(file).expect("the example");
    let job = c.submit("allreduce.toml", &source);
    let status = c.wait_job(&job, Duration::from_secs(120));
    assert_eq!(status.state, pb::JobState::Succeeded as i32, "{status:?}\n{}", c.coordinator_log());

    let logs = c.plexus(&["logs", &job, "check"]);
    assert!(logs.status.success(), "{}", describe(&logs));
    let out = String::from_utf8_lossy(&logs.stdout);
    assert!(out.starts_with("ok: 262144 elements summed over 4 replicas"), "{out}");

    // Each member ran where its input was, on four distinct workers, in one gang.
    let members: Vec<&pb::SubtaskStatus> = status.subtasks.iter().filter(|s| s.task == "sum").collect();
    assert_eq!(members.len(), 4);
    let mut workers: Vec<&str> = members.iter().map(|s| s.worker_id.as_str()).collect();
    workers.sort();
    workers.dedup();
    assert_eq!(workers.len(), 4, "{members:?}");
    assert!(members.iter().all(|s| s.fetched_bytes == 0), "inputs were local: {members:?}");
    let explain = c.plexus(&["explain", &job, "sum", "--rank", "2"]);
    assert!(explain.status.success(), "{}", describe(&explain));
    let text = String::from_utf8_lossy(&explain.stdout);
    assert!(text.contains("gang") && text.contains("member 2 of 4"), "{text}");
    let member_log = c.plexus(&["logs", &job, "sum", "--rank", "1"]);
    let text = String::from_utf8_lossy(&member_log.stdout);
    let ran =
        ["halving", "ring"].into_iter().find(|a| text.starts_with(&format!("allreduce f32 sum over 4 members ({a} ×")));
    assert!(ran.is_some() && text.contains(", rank 1: 1048576 bytes"), "{text}");
    // The example leaves the algorithm to the cost model: explain says which ran and why.
    let explain = c.plexus(&["explain", &job, "sum", "--rank", "1"]);
    let text = String::from_utf8_lossy(&explain.stdout);
    let line = text.lines().find(|l| l.starts_with("collective:")).unwrap_or_default();
    assert!(
        line.contains(&format!("{} ×", ran.unwrap_or_default())) && line.contains("chosen by the cost model"),
        "{text}"
    );
    assert!(line.contains("predicted halving") && line.contains("ring ×"), "{text}");
}

/// The main job of `make demo`, examples/train.toml, as the demo runs it: shard -> 4 training
/// replicas (a gang) -> allreduce of their gradients over two rails -> evaluate, placed by the
/// learned placer; its check passes, `plexus explain` shows Q-values, and `plexus workers --rails`
/// shows traffic on both rails of every worker.
#[test]
fn the_train_example_passes_its_check_with_the_learned_placer_over_two_rails() {
    let c = Cluster::start(ClusterConfig {
        workers: 4,
        cpus_per_worker: 2,
        placer: "rl".into(),
        worker_args: ["--rail", "127.0.0.2", "--rail", "127.0.0.3"].map(String::from).to_vec(),
        ..ClusterConfig::default()
    });
    let file = concat!(env!("CARGO_MANIFEST_DIR"), "/../examples/train.toml");
    let source = std::fs::read_to_string(file).expect("the example");
    let job = c.submit("train.toml", &source);
    let status = c.wait_job(&job, Duration::from_secs(240));
    assert_eq!(status.state, pb::JobState::Succeeded as i32, "{status:?}\n{}", c.coordinator_log());

    let logs = c.plexus(&["logs", &job, "evaluate"]);
    assert!(logs.status.success(), "{}", describe(&logs));
    let out = String::from_utf8_lossy(&logs.stdout);
    assert!(out.starts_with("check ok: the allreduced gradient (524288 features, 4 replicas x 2 samples)"), "{out}");
    assert!(out.contains("one step of gradient descent: loss per feature"), "{out}");

    // The training replicas are one gang: every one was placed, and explain says so.
    let train: Vec<&pb::SubtaskStatus> = status.subtasks.iter().filter(|s| s.task == "train").collect();
    assert_eq!(train.len(), 4);
    assert!(train.iter().all(|s| !s.worker_id.is_empty()), "{train:?}");
    let explain = c.plexus(&["explain", &job, "train", "--rank", "0"]);
    assert!(explain.status.success(), "{}", describe(&explain));
    let text = String::from_utf8_lossy(&explain.stdout);
    assert!(text.contains("placer:      rl") && text.contains("gang \"train\""), "{text}");

    // Both rails of every worker carried data (the counters arrive with the next heartbeat).
    let rails = c.wait_for("traffic on both rails of every worker", Duration::from_secs(10), |c| {
        let out = c.plexus(&["workers", "--rails"]);
        let text = String::from_utf8_lossy(&out.stdout).into_owned();
        let rows: Vec<&str> = text.lines().skip_while(|l| !l.starts_with("WORKER ")).skip(1).collect();
        let busy = rows.iter().filter(|r| r.split_whitespace().nth(3).is_none_or(|sent| sent != "0")).count();
        (rows.len() == 8 && busy == 8).then_some(text)
    });
    assert!(rails.contains("127.0.0.2:") && rails.contains("127.0.0.3:"), "{rails}");
}
