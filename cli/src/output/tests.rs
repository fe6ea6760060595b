//! The output formats pinned: every table, line and JSON document the CLI prints.

use plexus_proto::pb;

use super::*;
use serde_json::json;

const J1: &str = "job-00000000000000000000000000000001";
const J2: &str = "job-00000000000000000000000000000002";
const W1: &str = "wkr-0000000000000000000000000000000a";
const W2: &str = "wkr-0000000000000000000000000000000b";
const NOW: u64 = 1_700_000_100_000;

#[test]
fn short_names_are_unique_prefixes_of_at_least_8_digits() {
    let ids = [
        "wkr-1a2b3c4d00000000000000000000000a",
        "wkr-1a2b3c4d50000000000000000000000b",
        "wkr-ffff0000000000000000000000000000",
    ];
    assert_eq!(short_names(ids.iter().copied()), ["wkr-1a2b3c4d0", "wkr-1a2b3c4d5", "wkr-ffff0000"]);
}

fn group(task: &str, replicas: u32, counts: [u32; 7]) -> pb::TaskGroupStatus {
    let [waiting, ready, assigned, running, succeeded, failed, cancelled] = counts;
    pb::TaskGroupStatus {
        task: task.into(),
        replicas,
        waiting,
        ready,
        assigned,
        running,
        succeeded,
        failed,
        cancelled,
        waiting_reason: String::new(),
        failed_attempts: 0,
        after: vec![],
    }
}

fn job() -> pb::JobStatus {
    pb::JobStatus {
        job_id: J1.into(),
        name: "demo".into(),
        state: pb::JobState::Running as i32,
        submitted_at: NOW - 65_000,
        finished_at: 0,
        error: String::new(),
        groups: vec![
            group("gen", 4, [0, 0, 1, 1, 2, 0, 0]),
            pb::TaskGroupStatus { after: vec!["gen".into()], ..group("sum", 1, [1, 0, 0, 0, 0, 0, 0]) },
        ],
        gangs: vec![],
        priority: 0,
        queue: "default".into(),
        phase: "running".into(),
        started_at: NOW - 63_000,
        subtasks: vec![
            pb::SubtaskStatus {
                task: "gen".into(),
                rank: 0,
                state: pb::SubtaskState::Succeeded as i32,
                attempt: 1,
                worker_id: W1.into(),
                ready_at: NOW - 64_000,
                assigned_at: NOW - 63_900,
                started_at: NOW - 63_000,
                finished_at: NOW - 60_500,
                exit_code: 0,
                outputs: vec![pb::ObjectInfo {
                    object_id: format!("{J1}/gen/0/numbers"),
                    size: 4096,
                    digest: vec![0xab; 32],
                }],
                ..Default::default()
            },
            pb::SubtaskStatus {
                task: "gen".into(),
                rank: 1,
                state: pb::SubtaskState::Failed as i32,
                attempt: 3,
                failures: 3,
                worker_id: W2.into(),
                started_at: NOW - 2_000,
                finished_at: NOW - 1_000,
                exit_code: 2,
                error: "exit status 2\nsee logs".into(),
                ..Default::default()
            },
            pb::SubtaskStatus {
                task: "sum".into(),
                rank: 0,
                state: pb::SubtaskState::Waiting as i32,
                ..Default::default()
            },
        ],
        total_subtasks: 5,
        ..Default::default()
    }
}

#[test]
fn sizes() {
    assert_eq!(human_bytes(0), "0 B");
    assert_eq!(human_bytes(1023), "1023 B");
    assert_eq!(human_bytes(1024), "1.0 KiB");
    assert_eq!(human_bytes(1536), "1.5 KiB");
    assert_eq!(human_bytes(12 * 1024 * 1024), "12.0 MiB");
    assert_eq!(human_bytes(3 * 1024 * 1024 * 1024 + 200 * 1024 * 1024), "3.2 GiB");
    assert_eq!(human_bytes(1 << 40), "1.0 TiB");
    assert_eq!(human_bytes(u64::MAX), "16.0 EiB");
}

#[test]
fn durations_and_ages() {
    assert_eq!(human_duration(0), "0ms");
    assert_eq!(human_duration(850), "850ms");
    assert_eq!(human_duration(12_345), "12.3s");
    assert_eq!(human_duration(245_000), "4m05s");
    assert_eq!(human_duration(2 * 3_600_000 + 3 * 60_000 + 59_000), "2h03m");
    assert_eq!(human_duration(3 * 86_400_000 + 4 * 3_600_000), "3d04h");
    assert_eq!(age(0, NOW), "-");
    assert_eq!(age(NOW - 1_500, NOW), "1.5s ago");
    assert_eq!(age(NOW + 10, NOW), "0ms ago", "clock skew never underflows");
}

#[test]
fn numbers() {
    assert_eq!(number(3.0), "3");
    assert_eq!(number(0.25), "0.25");
    assert_eq!(number(4.0 / 3.0), "1.3333");
    assert_eq!(number(-2.0), "-2");
    assert_eq!(number(-0.00001), "0");
    assert_eq!(number(f64::NAN), "NaN");
}

#[test]
fn table_aligns_and_trims() {
    let mut t = Table::new(&["A", "LONGER", "C"]);
    t.row(vec!["xxxx".into(), "y".into(), "z".into()]);
    t.row(vec!["1".into(), "".into(), "".into()]);
    assert_eq!(t.render(), "A     LONGER  C\nxxxx  y       z\n1\n");
}

#[test]
fn job_list_table() {
    let mut done = job();
    done.job_id = J2.into();
    done.name = "old".into();
    done.state = pb::JobState::Succeeded as i32;
    done.phase = "succeeded".into();
    done.submitted_at = NOW - 3_600_000;
    done.started_at = NOW - 3_600_000 + 2_000;
    done.finished_at = NOW - 3_600_000 + 12_300;
    done.groups = vec![group("a", 2, [0, 0, 0, 0, 2, 0, 0])];
    done.total_subtasks = 2;
    let text = jobs_table(&[job(), done], NOW, true);
    let expected = format!(
        "ID{p}NAME  STATE      PROGRESS  SUBMITTED  QUEUED  RAN    PRI  QUEUE\n\
         {J1}  demo  running    2/5       1m05s ago  2.0s    1m03s  0    default\n\
         {J2}  old   succeeded  2/2       1h00m ago  2.0s    10.3s  0    default\n",
        p = " ".repeat(36)
    );
    assert_eq!(text, expected);
    assert_eq!(jobs_table(&[], NOW, false), "no jobs\n");
    let mut other = job();
    other.job_id = "job-fedcba98765432100000000000000000".into();
    let narrow = jobs_table(&[job(), other], NOW, false);
    assert!(
        narrow.contains("\njob-00000000  demo") && narrow.contains("\njob-fedcba98  demo"),
        "short ids by default: {narrow}"
    );
    assert!(narrow.lines().all(|l| l.len() <= 100), "{narrow}");
    assert!(!narrow.contains("PRI"), "priority and queue only when they say something: {narrow}");
    let mut urgent = job();
    (urgent.priority, urgent.queue) = (5, "gpu".into());
    let listed = jobs_table(&[urgent], NOW, false);
    assert!(listed.lines().next().unwrap().ends_with("PRI  QUEUE") && listed.contains("5    gpu"), "{listed}");
}

#[test]
fn gangs_say_where_they_stand() {
    let g = |phase: &str| pb::GangStatus {
        name: "train".into(),
        tasks: vec!["w".into()],
        min_members: 4,
        members: 4,
        reserved: 3,
        phase: phase.into(),
        deadline: NOW + 11_500,
        rolled_back_at: 1_700_000_067_000,
        retry_at: NOW + 4_000,
        rollbacks: 1,
        reason: "deadline: 3 of 4 members reserved within 30000 ms".into(),
        timeout_ms: 30_000,
        ..Default::default()
    };
    assert_eq!(gang_line(&g("reserving"), NOW), "3/4 reserved, deadline in 12 s");
    assert_eq!(gang_line(&g("bound"), NOW), "bound (4 of 4 members needed to start)");
    assert_eq!(
        gang_line(&g("backing off"), NOW),
        "rolled back at 22:14:27 (deadline: 3 of 4 members reserved within 30000 ms), retry in 4 s"
    );
    let mut j = job();
    j.gangs = vec![g("reserving")];
    j.priority = 10;
    assert!(job_detail(&j, Detail::Summary, NOW).contains("gang train: 3/4 reserved, deadline in 12 s\n"));
    assert!(job_detail(&j, Detail::Summary, NOW).contains("priority:  10"));
    let v = serde_json::to_value(job_view(&j, Detail::Summary)).unwrap();
    assert_eq!(v["gangs"][0]["phase"], "reserving");
    assert_eq!(v["gangs"][0]["deadline_ms"], NOW + 11_500);
    assert_eq!(v["priority"], 10);
}

#[test]
fn job_detail_with_and_without_subtasks() {
    let text = job_detail(&job(), Detail::Summary, NOW);
    let expected = format!(
        "job:       {J1}\n\
         name:      demo\n\
         state:     running\n\
         submitted: 1m05s ago\n\
         queued:    2.0s\n\
         ran:       1m03s\n\
         progress:  2/5 succeeded\n\
         \n\
         TASK  REPLICAS  WAITING  READY  RUNNING  SUCCEEDED  FAILED  CANCELLED\n\
         gen   4         0        0      2        2          0       0\n\
         sum   1         1        0      0        0          0       0\n"
    );
    assert_eq!(text, expected);

    let mut waits = job();
    waits.groups[1].waiting_reason = "needs 4 workers for gang \"sum\" (...), 2 alive".into();
    let text = job_detail(&waits, Detail::Summary, NOW);
    assert!(text.ends_with("sum   1         1        0      0        0          0       0\nwaiting: sum: needs 4 workers for gang \"sum\" (...), 2 alive\n"), "{text}");
    let view = serde_json::to_value(job_view(&waits, Detail::Summary)).unwrap();
    assert_eq!(view["groups"][1]["waiting_reason"], "needs 4 workers for gang \"sum\" (...), 2 alive");
    assert!(view["groups"][0].get("waiting_reason").is_none());

    let mut failed = job();
    failed.error = "task gen failed".into();
    let text = job_detail(&failed, Detail::WithSubtasks, NOW);
    assert!(text.contains("\nerror:     task gen failed\n"), "{text}");
    let subtask_part = text.split("\n\n").nth(2).unwrap();
    let expected = format!(
        "TASK  RANK  STATE      ATTEMPT  WORKER{p}EXIT  DURATION  REASON      ERROR\n\
         gen   0     succeeded  1        {W1}  0     2.5s      -\n\
         gen   1     failed     3        {W2}  2     1.0s      -           exit status 2 see logs\n\
         sum   0     waiting    0        -{q}-     -         after: gen\n",
        p = " ".repeat(32),
        q = " ".repeat(37)
    );
    assert_eq!(subtask_part, expected);
}

#[test]
fn job_json_shape() {
    let v = serde_json::to_value(job_view(&job(), Detail::WithSubtasks)).unwrap();
    assert_eq!(v["job_id"], J1);
    assert_eq!(v["state"], "running");
    assert_eq!(v["submitted_at_ms"], NOW - 65_000);
    assert_eq!(v["finished_at_ms"], serde_json::Value::Null);
    assert_eq!(v["duration_ms"], serde_json::Value::Null);
    assert_eq!(v["error"], serde_json::Value::Null);
    assert_eq!(v["total_subtasks"], 5);
    assert_eq!(v["succeeded_subtasks"], 2);
    assert_eq!(
        v["groups"][0],
        json!({"task": "gen", "replicas": 4, "waiting": 0, "ready": 0, "assigned": 1, "running": 1,
               "succeeded": 2, "failed": 0, "cancelled": 0, "failed_attempts": 0})
    );
    assert_eq!(
        v["subtasks"][0],
        json!({
            "task": "gen", "rank": 0, "state": "succeeded", "attempt": 1, "failures": 0,
            "worker_id": W1, "ready_at_ms": NOW - 64_000, "assigned_at_ms": NOW - 63_900,
            "started_at_ms": NOW - 63_000, "finished_at_ms": NOW - 60_500, "duration_ms": 2_500,
            "exit_code": 0, "error": null, "fetch_ms": 0, "fetched_bytes": 0, "evicted_bytes": 0,
            "outputs": [{"object_id": format!("{J1}/gen/0/numbers"), "size_bytes": 4096, "digest": "ab".repeat(32)}],
            "failed_attempts": [], "not_before_ms": null, "reruns": 0, "unfetched_requeues": 0
        })
    );
    assert_eq!(v["subtasks"][2]["worker_id"], serde_json::Value::Null);
    assert_eq!(v["subtasks"][2]["exit_code"], serde_json::Value::Null);

    let list = serde_json::to_value(job_list_view(&[job()])).unwrap();
    assert_eq!(list["jobs"][0]["job_id"], J1);
    assert!(list["jobs"][0].get("subtasks").is_none(), "summaries carry no subtasks");
    let mut keys: Vec<&str> = list["jobs"][0].as_object().unwrap().keys().map(String::as_str).collect();
    keys.sort_unstable();
    assert_eq!(
        keys,
        [
            "duration_ms",
            "error",
            "finished_at_ms",
            "gangs",
            "groups",
            "job_id",
            "name",
            "phase",
            "priority",
            "queue",
            "queued_ms",
            "ran_ms",
            "started_at_ms",
            "state",
            "submitted_at_ms",
            "succeeded_subtasks",
            "total_subtasks"
        ]
    );
}

#[test]
fn unknown_states_do_not_panic() {
    let mut j = job();
    j.state = 42;
    j.subtasks[0].state = 0;
    assert_eq!(job_view(&j, Detail::WithSubtasks).state, "unknown");
    assert!(job_detail(&j, Detail::WithSubtasks, NOW).contains("unknown"));
}

#[test]
fn final_line_and_progress_lines() {
    let mut j = job();
    assert_eq!(job_final_line(&j), format!("job {J1} running\n"));
    j.state = pb::JobState::Failed as i32;
    j.error = "task gen rank 1 failed:\nexit status 2".into();
    assert_eq!(job_final_line(&j), format!("job {J1} failed: task gen rank 1 failed: exit status 2\n"));
    assert_eq!(watch_header(&job()), format!("job {J1} (demo) running: 2/5 subtasks succeeded"));
    j.failed_task = "gen".into();
    j.failed_rank = 1;
    j.failed_stderr = "Traceback (most recent call last):\nValueError: bad lr\x1b[0m".into();
    assert_eq!(
        job_final_line(&j),
        format!(
            "job {J1} failed: task gen rank 1 failed: exit status 2\n\
             stderr of gen rank 1 (last lines; all of it: plexus logs {J1} gen --rank 1):\n\
             \x20 | Traceback (most recent call last):\n\
             \x20 | ValueError: bad lr[0m\n"
        ),
        "the tail follows, indented, control characters dropped"
    );
    let mut pending = job();
    pending.phase = "pending".into();
    pending.phase_reason = "task gen: needs 8 cpus, the largest worker has 4".into();
    pending.started_at = 0;
    assert_eq!(
        watch_header(&pending),
        format!("job {J1} (demo) pending (task gen: needs 8 cpus, the largest worker has 4): 2/5 subtasks succeeded")
    );
    let detail = job_detail(&pending, Detail::Summary, NOW);
    assert!(detail.contains("state:     pending\nwhy:       task gen: needs 8 cpus"), "{detail}");
    assert!(detail.contains("queued:    1m05s\nran:       -\n"), "{detail}");

    let c = GroupCounts::from(&group("gen", 8, [0, 0, 0, 0, 8, 0, 0]));
    assert_eq!(c.line("gen"), "gen 8/8 succeeded, 0 running, 0 failed");
    let c = GroupCounts::from(&group("gen", 8, [0, 1, 2, 1, 3, 1, 0]));
    assert_eq!(c.line("gen"), "gen 3/8 succeeded, 3 running, 1 failed");
    let c = GroupCounts::from(&group("gen", 8, [0, 0, 0, 0, 3, 1, 4]));
    assert_eq!(c.message(), "0 running, 1 failed, 4 cancelled");
}

fn workers() -> Vec<pb::WorkerInfo> {
    vec![pb::WorkerInfo {
        worker_id: W1.into(),
        peer_addr: "http://127.0.0.1:7001".into(),
        capacity: Some(pb::NodeCapacity {
            cpus: 4,
            memory: 8 << 30,
            gpus: vec![
                pb::GpuInfo { index: 0, name: "H100".into(), memory: 80 << 30 },
                pb::GpuInfo { index: 2, name: "H100".into(), memory: 80 << 30 },
            ],
            rails: vec!["10.0.0.1:7100".into(), "10.0.1.1:7100".into()],
            cache_bytes: 1 << 30,
            hostname: "node1".into(),
            isolation: "cgroup-v1".into(),
            gpu_links: vec![pb::GpuLink { a: 0, b: 2, level: "NV2".into() }],
            labels: [("rack".to_string(), "r1".to_string())].into(),
            gpu_numa: [(0, 1)].into(),
            max_attempts: 16,
        }),
        state: Some(pb::NodeState {
            cpu_utilisation: 0.375,
            memory_free: 6 << 30,
            running: vec![pb::AttemptRef { job_id: J1.into(), task: "gen".into(), rank: 2, attempt: 1 }],
            objects: vec![pb::ObjectInfo { object_id: "o".into(), size: 12 << 20, ..Default::default() }],
            cache_used: 12 << 20,
            rails: vec![pb::RailCounters {
                addr: "10.0.0.1:7100".into(),
                bytes_sent: 5,
                bytes_received: 7,
                failures: 1,
            }],
            gpus: vec![pb::GpuState { index: 0, utilisation: 0.37, memory_used: 12 << 30 }],
            isolation: "cgroup-v1".into(),
            rails_refused: 3,
        }),
        alive: true,
        last_heartbeat: NOW - 1_200,
        allocated: Some(pb::Resources { cpu: 1.5, memory: 1 << 30, gpu: 0 }),
        assigned: 2,
        speed: Some(pb::WorkerSpeed {
            relative_speed: 1.25,
            signatures: 2,
            run_samples: 3.5,
            fetch_pairs: 1,
            fetch_bytes_per_ms: 1048.576,
            fetch_latency_ms: 2.5,
            fetch_samples: 1.9,
            ..Default::default()
        }),
        draining: false,
    }]
}

#[test]
fn rails_table_shows_each_rail_and_its_share() {
    let text = rails_table(&workers());
    assert_eq!(
        text,
        "WORKER        RAIL  ADDRESS        SENT  RECEIVED  SHARE SENT  FAILURES\n\
         wkr-00000000  0     10.0.0.1:7100  5 B   7 B       100%        1\n"
    );
    let bare = pb::WorkerInfo { worker_id: W2.into(), ..Default::default() };
    assert_eq!(rails_table(&[bare]), "no rail counters reported yet\n");
}

#[test]
fn workers_table_and_json() {
    let text = workers_table(&workers(), NOW, true);
    let expected = format!(
        "NAME          ID{p}ALIVE  PEER                   CPUS  MEMORY   GPUS  RAILS  ISOLATION  ASSIGNED  ALLOC CPU  CPU UTIL  CACHE             OBJECTS  SPEED  FETCH IN   HEARTBEAT\n\
         wkr-00000000  {W1}  yes    http://127.0.0.1:7001  4     8.0 GiB  2     2      cgroup-v1  2         1.5        38%       12.0 MiB/1.0 GiB  1        1.25x  1.0 MiB/s  1.2s ago\n\
         \n\
         WORKER{w}GPU  MODEL  UTIL  MEMORY\n\
         {W1}  0    H100   37%   12.0 GiB/80.0 GiB\n\
         {W1}  2    H100   -     -/80.0 GiB\n",
        p = " ".repeat(36),
        w = " ".repeat(32)
    );
    assert_eq!(text, expected);
    assert_eq!(workers_table(&[], NOW, false), "no workers\n");
    // By default: the columns that matter, within 100 characters.
    let narrow = workers_table(&workers(), NOW, false);
    assert!(
        narrow
            .starts_with("NAME          ALIVE  CPUS  MEMORY   GPUS  RAILS  ISOLATION  ASSIGNED  CPU UTIL  HEARTBEAT\n"),
        "{narrow}"
    );
    assert!(narrow.lines().all(|l| l.len() <= 100), "{narrow}");
    // A worker that has not reported yet has no capacity or state: still a row, no panic, and
    // no device table without GPUs.
    let bare = pb::WorkerInfo { worker_id: W2.into(), ..Default::default() };
    let text = workers_table(&[bare], NOW, true);
    assert!(text.contains("0 B/0 B") && text.lines().count() == 2, "{text}");

    let v = serde_json::to_value(worker_list_view(&workers())).unwrap();
    assert_eq!(
        v["workers"][0],
        json!({
            "worker_id": W1, "alive": true, "peer_addr": "http://127.0.0.1:7001", "hostname": "node1",
            "cpus": 4, "memory_bytes": 8u64 << 30,
            "gpus": [
                {"index": 0, "name": "H100", "memory_bytes": 80u64 << 30, "numa": 1, "utilisation": 0.37, "memory_used_bytes": 12u64 << 30},
                {"index": 2, "name": "H100", "memory_bytes": 80u64 << 30, "numa": null, "utilisation": null, "memory_used_bytes": null}
            ],
            "isolation": "cgroup-v1",
            "labels": {"rack": "r1"},
            "gpu_links": {"0-2": "NV2"},
            "rails": ["10.0.0.1:7100", "10.0.1.1:7100"],
            "rail_traffic": [{"addr": "10.0.0.1:7100", "bytes_sent": 5, "bytes_received": 7, "failures": 1}],
            "rails_refused": 3,
            "assigned": 2,
            "allocated": {"cpu": 1.5, "memory_bytes": 1u64 << 30, "gpu": 0},
            "cpu_utilisation": 0.375, "memory_free_bytes": 6u64 << 30,
            "cache_used_bytes": 12u64 << 20, "cache_bound_bytes": 1u64 << 30, "objects": 1,
            "running": [format!("{J1}/gen/2#1")], "last_heartbeat_ms": NOW - 1_200,
            "speed": {"relative_speed": 1.25, "signatures": 2, "run_samples": 3.5, "ms_per_gflop": null, "flop_samples": 0.0,
                      "fetch_pairs": 1, "fetch_bytes_per_s": 1048576.0, "fetch_latency_ms": 2.5, "fetch_samples": 1.9}
        })
    );
}

fn explanation() -> pb::ExplainPlacementResponse {
    let feature = |name: &str, value: f64| pb::Feature { name: name.into(), value };
    pb::ExplainPlacementResponse {
        placer: "greedy".into(),
        attempt: 1,
        chosen_worker: W2.into(),
        exploratory: false,
        candidates: vec![
            pb::CandidateScore {
                worker_id: W1.into(),
                feasible: false,
                score: 0.0,
                features: vec![feature("free_cpu", 0.0)],
                note: "needs 2 cpu, 0 free".into(),
            },
            pb::CandidateScore {
                worker_id: W2.into(),
                feasible: true,
                score: 0.8125,
                features: vec![feature("free_cpu", 3.0), feature("local_bytes", 4096.0)],
                note: String::new(),
            },
        ],
        decided_at: NOW - 3_000,
        reason: "most input bytes local".into(),
        collective: String::new(),
        learner: String::new(),
        omitted: 0,
    }
}

#[test]
fn explain_table_marks_the_chosen_worker() {
    let text = explain_text(&explanation(), NOW, true);
    let expected = format!(
        "placer:      greedy\n\
         attempt:     1\n\
         chosen:      {W2}\n\
         exploratory: no\n\
         decided:     3.0s ago\n\
         reason:      most input bytes local\n\
         \n\
         {s}WORKER{p}FEASIBLE  SCORE   FEATURES                     NOTE\n\
         {s}{W1}  no        -       free_cpu=0                   needs 2 cpu, 0 free\n\
         *  {W2}  yes       0.8125  free_cpu=3 local_bytes=4096\n",
        s = "   ",
        p = " ".repeat(32)
    );
    assert_eq!(text, expected);
}

#[test]
fn explain_json_shape() {
    let v = serde_json::to_value(explain_view(&explanation())).unwrap();
    assert_eq!(v["placer"], "greedy");
    assert_eq!(v["chosen_worker"], W2);
    assert_eq!(v["decided_at_ms"], NOW - 3_000);
    assert_eq!(
        v["candidates"][1],
        json!({"worker_id": W2, "chosen": true, "feasible": true, "score": 0.8125,
               "features": {"free_cpu": 3.0, "local_bytes": 4096.0}, "est_fetch_ms": null, "est_compute_ms": null, "note": null})
    );
    assert_eq!(v["candidates"][0]["chosen"], false);
}

/// A collective member's explanation says which algorithm ran and why (issue 30), aligned with
/// the other fields and in the JSON; other tasks show no such line.
#[test]
fn explain_shows_a_collective_members_algorithm() {
    let mut e = explanation();
    assert!(!explain_text(&e, NOW, true).contains("collective:"));
    e.collective = "css chosen by the cost model: 4 members, predicted css 1.2 ms, direct 1.9 ms".into();
    let text = explain_text(&e, NOW, true);
    assert!(
        text.contains("reason:      most input bytes local\ncollective:  css chosen by the cost model: 4 members"),
        "{text}"
    );
    let v = serde_json::to_value(explain_view(&e)).unwrap();
    assert_eq!(v["collective"], e.collective.as_str());
}

/// Under a learned placer, explain carries its record against fastest, in text and JSON.
#[test]
fn explain_shows_the_learners_record() {
    let mut e = explanation();
    assert!(!explain_text(&e, NOW, false).contains("learner:"));
    assert!(serde_json::to_value(explain_view(&e)).unwrap()["learner"].is_null());
    e.learner = "rl: 840 decisions, 3 training steps; departed from fastest in 12 (1.4 %); the guard trusts it".into();
    for wide in [false, true] {
        let text = explain_text(&e, NOW, wide);
        assert!(
            text.contains("learner:     rl: 840 decisions, 3 training steps; departed from fastest in 12"),
            "{text}"
        );
    }
    assert_eq!(serde_json::to_value(explain_view(&e)).unwrap()["learner"], e.learner.as_str());
}

/// Candidates with measured estimates (issue 17) get an EST MS column (fetch + compute) and
/// the estimates in their JSON.
#[test]
fn explain_shows_each_candidates_estimates() {
    let feature = |name: &str, value: f64| pb::Feature { name: name.into(), value };
    let mut e = explanation();
    e.candidates[1].features =
        vec![feature("est_fetch_ms", 12.5), feature("est_fetch_samples", 1.9), feature("est_compute_ms", 40.0)];
    let text = explain_text(&e, NOW, true);
    let rows: Vec<&str> = text.lines().skip(7).collect();
    assert!(rows[0].contains("EST MS") && rows[0].find("EST MS") < rows[0].find("FEATURES"), "{text}");
    assert!(rows[1].contains("  -  "), "no estimate: {text}");
    assert!(rows[2].contains("52.5") && rows[2].contains("est_fetch_samples=1.9"), "{text}");
    let v = serde_json::to_value(explain_view(&e)).unwrap();
    assert_eq!(
        (v["candidates"][1]["est_fetch_ms"].clone(), v["candidates"][1]["est_compute_ms"].clone()),
        (json!(12.5), json!(40.0))
    );
    assert_eq!(v["candidates"][0]["est_fetch_ms"], json!(null));
    // Without estimates the table is as before.
    assert!(!explain_text(&explanation(), NOW, true).contains("EST MS"));
}

#[test]
fn closed_pipe_is_not_an_error() {
    struct Closed;
    impl Write for Closed {
        fn write(&mut self, _: &[u8]) -> io::Result<usize> {
            Err(io::ErrorKind::BrokenPipe.into())
        }
        fn flush(&mut self) -> io::Result<()> {
            Ok(())
        }
    }
    assert!(write_bytes(&mut Closed, b"x").is_ok());
}

#[test]
fn every_failed_attempt_is_shown_and_watch_counts_them() {
    let mut j = job();
    j.subtasks[1].failed_attempts = vec![
        pb::AttemptFailure {
            attempt: 1,
            worker_id: W1.into(),
            exit_code: 2,
            error: "exit status 2".into(),
            finished_at: NOW - 62_000,
        },
        pb::AttemptFailure {
            attempt: 2,
            worker_id: W2.into(),
            exit_code: 2,
            error: "exit status 2\nsee logs".into(),
            finished_at: NOW - 61_000,
        },
    ];
    j.groups[0].failed_attempts = 2;
    let text = job_detail(&j, Detail::WithSubtasks, NOW);
    let part = text.split("failed attempts:\n").nth(1).expect("a failed-attempts table");
    let lines: Vec<&str> = part.lines().collect();
    assert_eq!(lines.len(), 3, "{part}");
    assert!(lines[1].starts_with("gen   1     1        ") && lines[1].ends_with("2     exit status 2"), "{part}");
    assert!(lines[2].ends_with("exit status 2 see logs"), "{part}");
    let v = serde_json::to_value(job_view(&j, Detail::WithSubtasks)).unwrap();
    assert_eq!(v["subtasks"][1]["failed_attempts"][1]["attempt"], 2);
    assert_eq!(v["subtasks"][1]["failed_attempts"][0]["error"], "exit status 2");
    assert_eq!(v["groups"][0]["failed_attempts"], 2);
    let c = GroupCounts::from(&j.groups[0]);
    assert_eq!(c.line("gen"), "gen 2/4 succeeded, 2 running, 0 failed, 2 failed attempts");
    assert!(!job_detail(&job(), Detail::WithSubtasks, NOW).contains("failed attempts:"), "no table without failures");
}

#[test]
fn explain_by_default_says_the_chosen_and_the_best_others_in_words() {
    let mut e = explanation();
    let feature = |name: &str, value: f64| pb::Feature { name: name.into(), value };
    e.candidates.push(pb::CandidateScore {
        worker_id: "wkr-99999999999999999999999999999999".into(),
        feasible: true,
        score: 0.5,
        features: vec![feature("est_fetch_ms", 10.0), feature("est_compute_ms", 90.0)],
        note: String::new(),
    });
    e.candidates[1].features.extend([feature("est_fetch_ms", 5.0), feature("est_compute_ms", 45.0)]);
    let text = explain_text(&e, NOW, false);
    let table: Vec<&str> = text.split("\n\n").nth(1).unwrap().lines().collect();
    assert_eq!(table[0], "   WORKER        SCORE   WHY", "{text}");
    assert!(
        table[1].starts_with("*  wkr-00000000  0.8125  chosen: the highest score of those able to run it; est. 50 ms (fetch 5 + compute 45)"),
        "{text}"
    );
    assert!(table[2].contains("0.3125 lower than the chosen (est. 50 ms slower)"), "{text}");
    assert_eq!(table.len(), 4, "the infeasible one is left to -o wide: {text}");
    assert!(table[3].starts_with("3 candidate(s), 2 able to run it; -o wide lists every one"), "{text}");
    assert!(!text.contains("FEATURES") && text.lines().all(|l| l.len() <= 160), "{text}");
}
