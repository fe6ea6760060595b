//! End-to-end: a queue that tells the truth (issue 33 items 1–2) on real processes — a job that
//! waits for room is `pending` with its reason, a job held by `--after` is `blocked`, `--state
//! pending|blocked` lists them, QUEUED and RAN are apart; a failed job shows the last lines of the
//! failed subtask's stderr in `submit --watch`, `status JOB` and its JSON; `submit --logs` streams
//! the chosen task's output; `submit --dry-run` says what would wait and why, storing nothing; a job name is its newest job (`NAME~1` the one before), and the list
//! is newest first; queue shares are set and listed from the CLI.

use std::time::Duration;

use plexus_e2e::{Cluster, ClusterConfig, describe};
use plexus_proto::pb;

fn stdout(o: &std::process::Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

fn submit(c: &Cluster, args: &[&str]) -> String {
    let o = c.plexus(&[&["submit"], args].concat());
    assert!(o.status.success(), "{}", describe(&o));
    stdout(&o).trim().to_string()
}

/// The STATE column of `plexus status -o wide` (full ids) for `job`.
fn listed_state(c: &Cluster, job: &str) -> String {
    let o = c.plexus(&["status", "-o", "wide"]);
    let text = stdout(&o);
    let line = text.lines().find(|l| l.starts_with(job)).unwrap_or_else(|| panic!("{job} not listed: {text}"));
    line.split_whitespace().nth(2).unwrap().to_string()
}

#[test]
fn pending_blocked_and_running_are_told_apart_and_failures_explain_themselves() {
    let c = Cluster::start(ClusterConfig { workers: 1, cpus_per_worker: 2, ..ClusterConfig::default() });
    let dir = c.path("jobs");
    std::fs::create_dir_all(&dir).unwrap();
    let write = |name: &str, text: &str| {
        let p = dir.join(name);
        std::fs::write(&p, text).unwrap();
        p.display().to_string()
    };
    let hold = write("hold.toml", "name = \"hold\"\n[[task]]\nname = \"h\"\ncommand = \"sleep 4\"\ncpu = 2\n");
    let wait = write("wait.toml", "name = \"wait\"\n[[task]]\nname = \"w\"\ncommand = \"true\"\ncpu = 2\n");
    let a = submit(&c, &[&hold]);
    c.wait_for("the holding job to run", Duration::from_secs(30), |c| {
        c.job(&a).filter(|j| j.phase == "running").map(|_| ())
    });
    // A dry run while the first job holds the worker: it says the job would wait, and why, and
    // stores nothing.
    let dry = c.plexus(&["submit", &wait, "--dry-run"]);
    let plan = stdout(&dry);
    assert!(dry.status.success(), "{}", describe(&dry));
    assert!(plan.starts_with("dry run: nothing was stored. 1 subtask(s) in 1 task(s); queue \"default\""), "{plan}");
    assert!(plan.contains("1 would wait for room (cpu=2"), "{plan}");
    assert_eq!(stdout(&c.plexus(&["status"])).lines().count(), 2, "still one job listed (and the header)");
    let bad = c.plexus(&[
        "submit",
        &write("huge.toml", "[[task]]\nname = \"h\"\ncommand = \"true\"\ncpu = 64\n"),
        "--dry-run",
    ]);
    assert!(
        !bad.status.success() && String::from_utf8_lossy(&bad.stderr).contains("no live worker can ever offer that"),
        "{}",
        describe(&bad)
    );
    let b = submit(&c, &[&wait]);
    let after = submit(&c, &[&wait, "--after", &a]);

    // The job that waits for room is pending, with its reason; the one held by --after blocked.
    let jb = c.wait_for("the waiting job's reason", Duration::from_secs(30), |c| {
        c.job(&b).filter(|j| j.phase == "pending" && !j.phase_reason.is_empty())
    });
    assert!(jb.phase_reason.starts_with("task w: "), "{}", jb.phase_reason);
    assert_eq!(jb.state, pb::JobState::Running as i32, "the wire state stays RUNNING for old clients");
    let jc = c.job(&after).unwrap();
    assert_eq!(jc.phase, "blocked", "{jc:?}");
    assert!(jc.phase_reason.contains(&a) && jc.phase_reason.contains("after_jobs"), "{}", jc.phase_reason);
    assert_eq!(
        (listed_state(&c, &a), listed_state(&c, &b), listed_state(&c, &after)),
        ("running".into(), "pending".into(), "blocked".into())
    );
    let pending = stdout(&c.plexus(&["status", "--state", "pending", "-o", "wide"]));
    assert!(pending.contains(&b) && !pending.contains(&a) && !pending.contains(&after), "{pending}");
    let blocked = stdout(&c.plexus(&["status", "--state", "blocked", "-o", "wide"]));
    assert!(blocked.contains(&after) && !blocked.contains(&b), "{blocked}");
    let detail = stdout(&c.plexus(&["status", &b]));
    assert!(detail.contains("state:     pending\nwhy:       task w: "), "{detail}");
    assert!(detail.contains("ran:       -"), "{detail}");
    let header = stdout(&c.plexus(&["status"]));
    assert!(header.lines().next().unwrap().contains("QUEUED") && header.contains("RAN"), "{header}");

    // Everything runs in turn; the queued time of the waiting job covers its wait.
    for j in [&a, &b, &after] {
        assert_eq!(c.wait_job(j, Duration::from_secs(60)).state, pb::JobState::Succeeded as i32);
    }
    let done = c.job(&b).unwrap();
    assert!(done.started_at > done.submitted_at && done.started_at <= done.finished_at, "{done:?}");
    assert!(done.started_at - done.submitted_at >= 1_000, "it queued while the first job ran: {done:?}");
    let json: serde_json::Value = serde_json::from_str(&stdout(&c.plexus(&["status", &b, "-o", "json"]))).unwrap();
    assert_eq!(json["phase"], "succeeded");
    assert!(json["queued_ms"].as_u64().unwrap() >= 1_000 && json["ran_ms"].is_u64(), "{json}");

    // A name is its newest job, NAME~1 the one before; the list is newest first.
    let id_of = |r: &str| {
        let o = c.plexus(&["status", r, "-o", "json"]);
        let v: serde_json::Value = serde_json::from_str(&stdout(&o)).unwrap_or_else(|_| panic!("{}", describe(&o)));
        v["job_id"].as_str().unwrap().to_string()
    };
    assert_eq!((id_of("wait"), id_of("wait~1")), (after.clone(), b.clone()));
    let o = c.plexus(&["status", "wait~2"]);
    assert!(
        !o.status.success() && String::from_utf8_lossy(&o.stderr).contains("\"wait\" has 2 run(s)"),
        "{}",
        describe(&o)
    );
    let list = stdout(&c.plexus(&["status", "-o", "wide"]));
    let order: Vec<&str> = list.lines().skip(1).filter_map(|l| l.split_whitespace().next()).collect();
    assert_eq!(order, [after.as_str(), b.as_str(), a.as_str()], "newest first: {list}");
    // By default the ids are short (each still a job reference) and the table fits 100 columns.
    let narrow = stdout(&c.plexus(&["status"]));
    assert!(narrow.lines().all(|l| l.len() <= 100) && !narrow.contains(&a) && narrow.contains(&a[..12]), "{narrow}");

    // Queue shares from the CLI, over the API.
    let set = c.plexus(&["queue", "set", "gpu", "--share", "0.5"]);
    assert!(set.status.success() && stdout(&set).contains("gpu    0.500"), "{}", describe(&set));
    let list = stdout(&c.plexus(&["queue", "list"]));
    assert!(list.starts_with("QUEUE  SHARE  CORES USED\ngpu    0.500  0.0"), "{list}");
    let bad = c.plexus(&["queue", "set", "gpu", "--share", "2"]);
    assert!(!bad.status.success() && String::from_utf8_lossy(&bad.stderr).contains("share"), "{}", describe(&bad));
    let cleared = c.plexus(&["queue", "set", "gpu", "--clear"]);
    assert!(stdout(&cleared).contains("no queue has a share"), "{}", describe(&cleared));

    a_failure_shows_its_stderr(&c, &write("fail.toml", FAILING));
    submit_logs_streams_the_task(&c, &write("talk.toml", TALKING));
}

const FAILING: &str = "name = \"broken\"\n[[task]]\nname = \"train\"\nmax_retries = 1\nretry_backoff = \"0s\"\n\
    command = '''echo starting; echo 'Traceback (most recent call last):' >&2; echo \"ValueError: lr must be positive, got -1\" >&2; exit 3'''\n";

fn a_failure_shows_its_stderr(c: &Cluster, file: &str) {
    let o = c.plexus(&["submit", file, "--watch"]);
    assert!(!o.status.success(), "{}", describe(&o));
    let out = stdout(&o);
    let id = out.lines().next().unwrap().trim().to_string();
    let block = format!(
        "stderr of train rank 0 (last lines; all of it: plexus logs {id} train --rank 0):\n  | Traceback (most recent call last):\n  | ValueError: lr must be positive, got -1\n"
    );
    assert!(out.contains(&format!("job {id} failed: ")) && out.ends_with(&block), "{}", describe(&o));
    let status = stdout(&c.plexus(&["status", &id]));
    assert!(status.contains(&block), "{status}");
    let json: serde_json::Value = serde_json::from_str(&stdout(&c.plexus(&["status", &id, "-o", "json"]))).unwrap();
    assert_eq!(json["failed_subtask"]["task"], "train");
    assert!(json["failed_subtask"]["stderr_tail"].as_str().unwrap().ends_with("got -1"), "{json}");
}

const TALKING: &str = "name = \"talk\"\n[[task]]\nname = \"t\"\nreplicas = 2\n\
    command = 'for i in 1 2 3; do echo \"line $i of rank $PLEXUS_RANK\"; sleep 0.3; done'\n";

fn submit_logs_streams_the_task(c: &Cluster, file: &str) {
    let o = c.plexus(&["submit", file, "--logs", "t/1"]);
    assert!(o.status.success(), "{}", describe(&o));
    let out = stdout(&o);
    for i in 1..=3 {
        assert!(out.contains(&format!("line {i} of rank 1\n")), "{}", describe(&o));
    }
    assert!(!out.contains("of rank 0"), "only the chosen rank: {out}");
    assert!(out.trim_end().lines().last().unwrap().ends_with(" succeeded"), "the job's end last: {out}");
    let bad = c.plexus(&["submit", file, "--logs", "t/x"]);
    assert!(
        !bad.status.success() && String::from_utf8_lossy(&bad.stderr).contains("is not a rank"),
        "{}",
        describe(&bad)
    );
}
