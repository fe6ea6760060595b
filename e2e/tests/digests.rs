//! End-to-end: every completed output has a content digest, and every copy is checked against
//! it (issue 29, items 1 and 2). A cached output is changed on its holder's disk behind the
//! worker's back (same length, other bytes), as a task running with the worker's rights could:
//! a consumer fetching it and `plexus get` both refuse the changed bytes, the holder is treated as
//! having lost the object, and the refusals are counted in `plexus_digest_mismatches_total`.

use std::path::PathBuf;
use std::time::Duration;

use plexus_e2e::{Cluster, ClusterConfig, describe, http_get};
use plexus_proto::{Digest, pb};

/// gen writes "42\n"; gate waits for the file `go` the test creates; use (after gate) checks the
/// value it reads and writes its own copy of it.
fn gen_gate_use(c: &Cluster) -> (String, PathBuf) {
    let go = c.path("go");
    let src = format!(
        "[[task]]\nname = \"gen\"\ncommand = \"echo 42 > $PLEXUS_OUT/value\"\noutputs = [\"value\"]\n\
         [[task]]\nname = \"gate\"\ncommand = \"while [ ! -e '{go}' ]; do sleep 0.05; done\"\nafter = [\"gen\"]\ncpu = 0\n\
         [[task]]\nname = \"use\"\ncommand = \"test $(cat $PLEXUS_IN/gen/0/value) = 42 && cp $PLEXUS_IN/gen/0/value $PLEXUS_OUT/seen\"\n\
         inputs = [\"gen/value\"]\noutputs = [\"seen\"]\nafter = [\"gate\"]\n",
        go = go.display()
    );
    (c.submit("digests.toml", &src), go)
}

/// Waits until gen succeeded; returns the worker that ran it (the one holding its output).
fn gen_holder(c: &Cluster, job: &str) -> String {
    c.wait_for("gen to succeed", Duration::from_secs(30), |c| {
        let s = c.job(job)?.subtasks.into_iter().find(|s| s.task == "gen")?;
        (s.state == pb::SubtaskState::Succeeded as i32).then_some(s.worker_id)
    })
}

/// gen's cached output on worker `i`.
fn cached_value(c: &Cluster, i: usize, job: &str) -> PathBuf {
    c.worker_dir(i).join("cache").join(job).join("gen").join("0").join("value")
}

/// Rewrites a cached file in place with other bytes of the same length.
fn tamper(file: &PathBuf) {
    let before = std::fs::read(file).unwrap_or_else(|e| panic!("reading {}: {e}", file.display()));
    assert_eq!(before, b"42\n", "{} holds gen's value", file.display());
    std::fs::write(file, b"43\n").unwrap_or_else(|e| panic!("writing {}: {e}", file.display()));
}

/// The coordinator's `plexus_digest_mismatches_total`.
fn mismatches(c: &Cluster) -> f64 {
    let (code, body) =
        http_get(c.http.as_deref().expect("the coordinator serves HTTP"), "/metrics", c.admin_token.as_deref());
    assert_eq!(code, 200, "{body}");
    body.lines()
        .find_map(|l| l.strip_prefix("plexus_digest_mismatches_total "))
        .unwrap_or_else(|| panic!("no plexus_digest_mismatches_total in:\n{body}"))
        .trim()
        .parse()
        .unwrap()
}

fn drain(c: &Cluster, worker: &str) {
    let o = c.plexus(&["workers", "drain", worker]);
    assert!(o.status.success(), "{}", describe(&o));
}

/// A consumer whose input's only holder serves changed bytes never runs on them: the fetching
/// worker refuses the copy (its digest is not gen's), the coordinator treats the holder as having
/// lost the object though its heartbeats still list it, gen runs again, and the job succeeds with
/// the consumer never failing. Before, the consumer read "43" and the job failed.
#[test]
fn a_consumer_refuses_a_changed_input_and_its_producer_runs_again() {
    let c = Cluster::start(ClusterConfig { workers: 2, ..Default::default() });
    let (job, go) = gen_gate_use(&c);
    let holder = gen_holder(&c, &job);
    let i = c.worker_index(&holder).expect("the holder is one of ours");
    tamper(&cached_value(&c, i, &job));
    // Nothing new goes to the holder: the consumer runs on the other worker and must fetch.
    drain(&c, &holder);
    std::fs::write(&go, b"").unwrap();
    let end = c.wait_job(&job, Duration::from_secs(90));
    assert_eq!(end.state, pb::JobState::Succeeded as i32, "{end:?}\n{}", c.coordinator_log());
    let used = end.subtasks.iter().find(|s| s.task == "use").unwrap();
    assert_eq!((used.failures, used.unfetched_requeues), (0, 1), "placed again once, never failed: {used:?}");
    assert_ne!(used.worker_id, holder);
    let producer = end.subtasks.iter().find(|s| s.task == "gen").unwrap();
    assert_eq!((producer.reruns, producer.failures), (1, 0), "gen made its value again");
    assert_ne!(producer.worker_id, holder, "not on the drained holder");
    let other = 1 - i;
    let log = c.worker_log(other);
    assert!(log.contains("a fetched copy did not match its digest"), "{log}");
    assert_eq!(mismatches(&c), 1.0);
    assert!(c.coordinator_log().contains("a copy did not match its digest"), "{}", c.coordinator_log());
}

/// `plexus get` never puts changed bytes in place. With two holders, one changed, it gets the
/// object from the other (the relay refuses the changed copy, and that holder is dropped); with
/// every copy changed it fails with an error naming the object, the holder and both digests,
/// and leaves no file. `plexus status -o json` shows each output's digest.
#[test]
fn get_refuses_a_changed_copy_and_takes_another_holders() {
    let c = Cluster::start(ClusterConfig { workers: 2, ..Default::default() });
    let (job, go) = gen_gate_use(&c);
    let holder = gen_holder(&c, &job);
    // The consumer runs on the other worker, so both hold gen's value.
    drain(&c, &holder);
    std::fs::write(&go, b"").unwrap();
    let end = c.wait_job(&job, Duration::from_secs(60));
    assert_eq!(end.state, pb::JobState::Succeeded as i32, "{end:?}");
    let consumer = end.subtasks.iter().find(|s| s.task == "use").unwrap().worker_id.clone();
    assert_ne!(consumer, holder);
    // The consumer's worker says it holds the fetched copy with its next heartbeat.
    let object = format!("{job}/gen/0/value");
    c.wait_for("both workers to list gen's value", Duration::from_secs(30), |c| {
        let listing = c.workers()?;
        listing
            .iter()
            .all(|w| w.state.as_ref().is_some_and(|s| s.objects.iter().any(|o| o.object_id == object)))
            .then_some(())
    });

    let expected = Digest::of(b"42\n");
    let o = c.plexus(&["status", &job, "--subtasks", "-o", "json"]);
    assert!(o.status.success(), "{}", describe(&o));
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    let producer = v["subtasks"].as_array().unwrap().iter().find(|s| s["task"] == "gen").unwrap();
    assert_eq!(producer["outputs"][0]["digest"], expected.to_string(), "{producer}");

    // The coordinator tries holders in id order: change the first one's copy.
    let mut ids = [holder.clone(), consumer.clone()];
    ids.sort();
    let first = c.worker_index(&ids[0]).unwrap();
    tamper(&cached_value(&c, first, &job));
    let dir = c.path("got");
    let o = c.plexus(&["get", &job, "gen", "-o", dir.to_str().unwrap()]);
    assert!(o.status.success(), "{}", describe(&o));
    assert_eq!(std::fs::read(dir.join("gen/0/value")).unwrap(), b"42\n", "the other holder's copy");
    assert_eq!(mismatches(&c), 1.0);

    // Now the only holder left serves changed bytes too.
    let second = c.worker_index(&ids[1]).unwrap();
    tamper(&cached_value(&c, second, &job));
    let dir = c.path("bad");
    let o = c.plexus(&["get", &job, "gen", "-o", dir.to_str().unwrap()]);
    assert!(!o.status.success(), "{}", describe(&o));
    let err = String::from_utf8_lossy(&o.stderr);
    let got = Digest::of(b"43\n");
    for part in [
        object.as_str(),
        &format!("worker {}", ids[1]),
        "does not match its digest",
        &format!("expected BLAKE3 {expected}, got {got}"),
        "no other live worker holds",
    ] {
        assert!(err.contains(part), "the error names {part:?}: {err}");
    }
    assert!(!dir.join("gen/0/value").exists(), "nothing put in place");
    let left: Vec<_> = std::fs::read_dir(dir.join("gen/0")).map(|d| d.collect()).unwrap_or_default();
    assert!(left.is_empty(), "no partial file left: {left:?}");
    assert_eq!(mismatches(&c), 2.0);
    // Both holders are now treated as having lost it.
    let o = c.plexus(&["get", &job, "gen", "-o", dir.to_str().unwrap()]);
    assert!(
        !o.status.success() && String::from_utf8_lossy(&o.stderr).contains("no live worker holds"),
        "{}",
        describe(&o)
    );
}
