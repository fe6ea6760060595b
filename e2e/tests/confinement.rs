//! End-to-end: tasks are confined (issue 29, items 1 and 2). A root worker runs each job's tasks
//! as a uid of its own, so a task that walks up from `$PLEXUS_OUT` cannot read the worker's key,
//! list its data dir or cache, read another job's work dir, or rewrite another job's cached
//! output; and an input is read-only to the task that reads it, so a consumer that appends to
//! its input changes neither what a later consumer reads nor what `plexus get` returns (with
//! tasks as the worker's own user too, where inputs are copies).
//!
//! Every test runs a secure cluster of real processes as the product runs them (as root: the
//! worker's default is then a uid per job); as another user they say `SKIPPED`.

use std::path::Path;
use std::time::Duration;

use plexus_e2e::{Cluster, ClusterConfig, describe};
use plexus_proto::pb;

#[path = "support/require.rs"]
mod require;

const SUCCEEDED: i32 = pb::JobState::Succeeded as i32;

/// The data dir, from a task: `$PLEXUS_OUT` is `DIR/work/<job>/<task>/<rank>.<attempt>/out`.
const DATA_DIR: &str = "d=$(cd \"$PLEXUS_OUT/../../../../..\" && pwd)";

/// A job file with one task running `script` (a shell command).
fn one_task(name: &str, task: &str, script: &str, outputs: &[&str]) -> String {
    format!("name = {name:?}\n[[task]]\nname = {task:?}\ncpu = 0.5\noutputs = {outputs:?}\ncommand = {script:?}\n")
}

/// What `plexus logs JOB TASK` prints (rank 0, its last attempt).
fn logs(c: &Cluster, job: &str, task: &str) -> String {
    let o = c.plexus(&["logs", job, task]);
    assert!(o.status.success(), "{}", describe(&o));
    String::from_utf8_lossy(&o.stdout).into_owned()
}

/// The bytes `plexus get JOB OBJECT` downloads (OBJECT is `task/rank/output`).
fn get(c: &Cluster, job: &str, object: &str, into: &str) -> String {
    let dir = c.path(into);
    let o = c.plexus(&["get", job, object, "-o", dir.to_str().unwrap()]);
    assert!(o.status.success(), "{}", describe(&o));
    std::fs::read_to_string(dir.join(object)).unwrap()
}

/// The uid a task printed as `uid N`.
fn printed_uid(log: &str) -> u32 {
    let line = log.lines().find_map(|l| l.strip_prefix("uid ")).unwrap_or_else(|| panic!("no uid line in {log:?}"));
    line.trim().parse().unwrap()
}

/// The hostile user's first try: from `$PLEXUS_OUT` up to the worker's data dir, for its key,
/// its cache, its listing and another job's work dir (and, in the environment, the worker's
/// join token). Before: every one of them was the task's, as root.
#[test]
fn a_task_cannot_reach_the_workers_key_cache_or_another_jobs_files() {
    if !require::require(&[require::ROOT]) {
        return;
    }
    let c = Cluster::start(ClusterConfig {
        workers: 1,
        worker_env: vec![("PLEXUS_JOIN_TOKEN".into(), "plexus-test-join-secret".into())],
        ..Default::default()
    });
    let key = c.worker_dir(0).join("tls/worker.key");
    assert!(key.is_file(), "a secure worker has its key at {}", key.display());
    let (marks, go) = (c.task_dir("marks"), c.path("go"));

    // Job A keeps a file in its work dir while B looks for it.
    let hold = format!(
        "echo secret > $PLEXUS_OUT/secret; echo uid $(id -u) > {m}/a; while [ ! -e {g} ]; do sleep 0.05; done",
        m = marks.display(),
        g = go.display()
    );
    let a = c.submit("a.toml", &one_task("holder", "hold", &hold, &[]));
    let a_uid = c.wait_for("job A's task to start", Duration::from_secs(30), |_| {
        std::fs::read_to_string(marks.join("a")).ok().filter(|s| s.ends_with('\n'))
    });
    let probe = format!(
        "{DATA_DIR}; echo uid $(id -u); echo home $HOME; \
         if cat $d/tls/worker.key > /dev/null 2>&1; then echo key READ; else echo key denied; fi; \
         if ls $d/cache > /dev/null 2>&1; then echo cache LISTED; else echo cache denied; fi; \
         if ls $d > /dev/null 2>&1; then echo data dir LISTED; else echo data dir denied; fi; \
         if cat $d/work/{a}/hold/0.1/out/secret > /dev/null 2>&1; then echo other job READ; else echo other job denied; fi; \
         if env | grep -q plexus-test-join-secret; then echo join token SEEN; else echo join token hidden; fi; \
         echo mine > $PLEXUS_OUT/o"
    );
    let b = c.submit("b.toml", &one_task("prober", "probe", &probe, &["o"]));
    let st = c.wait_job(&b, Duration::from_secs(60));
    std::fs::write(&go, "").unwrap();
    assert_eq!(st.state, SUCCEEDED, "the task writes its own outputs: {st:?}");
    let seen = logs(&c, &b, "probe");
    for line in ["key denied", "cache denied", "data dir denied", "other job denied", "join token hidden"] {
        assert!(seen.lines().any(|l| l == line), "{line:?} not in what the task saw:\n{seen}");
    }
    let (ua, ub) = (printed_uid(&a_uid), printed_uid(&seen));
    let range = 200_000..=265_535;
    assert!(range.contains(&ua) && range.contains(&ub) && ua != ub, "jobs A and B ran as uids {ua} and {ub}");
    assert!(seen.contains("home /") && seen.contains("/work/"), "HOME is the attempt's work dir: {seen}");
    assert_eq!(get(&c, &b, "probe/0/o", "got-b"), "mine\n", "the worker took the task's output into its cache");
    assert_eq!(c.wait_job(&a, Duration::from_secs(30)).state, SUCCEEDED);
}

/// A task of job B finds job A's cached output and rewrites it (chmod, then the same number
/// of bytes, so no size check notices). Before: as root it could, and `plexus get` returned
/// the tampered bytes.
#[test]
fn a_task_cannot_overwrite_another_jobs_cached_output() {
    if !require::require(&[require::ROOT]) {
        return;
    }
    let c = Cluster::start(ClusterConfig { workers: 1, ..Default::default() });
    let a = c.submit("a.toml", &one_task("victim", "a", "printf original > $PLEXUS_OUT/o", &["o"]));
    assert_eq!(c.wait_job(&a, Duration::from_secs(60)).state, SUCCEEDED);
    let cached = c.worker_dir(0).join(format!("cache/{a}/a/0/o"));
    assert!(cached.is_file(), "A's output is cached at {}", cached.display());
    let tamper = format!(
        "{DATA_DIR}; f=$d/cache/{a}/a/0/o; chmod u+w $f 2> /dev/null; \
         if printf tampered > $f; then echo cache WRITTEN; else echo cache write denied; fi"
    );
    let b = c.submit("b.toml", &one_task("tamperer", "t", &tamper, &[]));
    let st = c.wait_job(&b, Duration::from_secs(60));
    assert!(logs(&c, &b, "t").contains("cache write denied"), "{st:?}");
    assert_eq!(std::fs::read_to_string(&cached).unwrap(), "original");
    assert_eq!(get(&c, &a, "a/0/o", "got-a"), "original");
}

/// A producer, a consumer that appends to its input (and chmods it first), and a second
/// consumer that runs after it: the second reads what the producer wrote, and so does `plexus
/// get`. Before: the input was a hard link of the cache's file, and the append changed both.
fn appending_to_an_input_changes_nothing_else(c: &Cluster, marks: &Path) {
    let append = format!(
        "chmod u+w $PLEXUS_IN/p/0/o 2> /dev/null; \
         if echo appended >> $PLEXUS_IN/p/0/o; then echo appended > {m}/c1; else echo denied > {m}/c1; fi",
        m = marks.display()
    );
    let src = format!(
        "name = \"appender\"\n\
         [[task]]\nname = \"p\"\ncpu = 0.5\noutputs = [\"o\"]\ncommand = \"echo original > $PLEXUS_OUT/o\"\n\
         [[task]]\nname = \"c1\"\ncpu = 0.5\ninputs = [\"p/o\"]\ncommand = {append:?}\n\
         [[task]]\nname = \"c2\"\ncpu = 0.5\ninputs = [\"p/o\"]\nafter = [\"c1\"]\noutputs = [\"seen\"]\n\
         command = \"cat $PLEXUS_IN/p/0/o > $PLEXUS_OUT/seen\"\n"
    );
    let job = c.submit("appender.toml", &src);
    let st = c.wait_job(&job, Duration::from_secs(60));
    assert_eq!(st.state, SUCCEEDED, "{st:?}");
    assert!(std::fs::read_to_string(marks.join("c1")).is_ok(), "the first consumer ran");
    assert_eq!(get(c, &job, "c2/0/seen", "got-seen"), "original\n", "the later consumer read the producer's bytes");
    assert_eq!(get(c, &job, "p/0/o", "got-o"), "original\n", "plexus get returns the producer's bytes");
}

#[test]
fn a_consumer_appending_to_its_input_changes_nothing_else() {
    if !require::require(&[require::ROOT]) {
        return;
    }
    let c = Cluster::start(ClusterConfig { workers: 1, ..Default::default() });
    let marks = c.task_dir("marks");
    appending_to_an_input_changes_nothing_else(&c, &marks);
    // Under a uid of its own, the task could not even write to its input.
    assert_eq!(std::fs::read_to_string(marks.join("c1")).unwrap(), "denied\n");
}

/// The same with tasks as the worker's own user (`--task-user worker`): the input is the task's
/// copy, so the append succeeds there and nowhere else.
#[test]
fn as_the_workers_user_a_consumer_appends_to_its_own_copy_only() {
    if !require::require(&[require::ROOT]) {
        return;
    }
    let c = Cluster::start(ClusterConfig {
        workers: 1,
        worker_args: vec!["--task-user".into(), "worker".into()],
        ..Default::default()
    });
    let marks = c.task_dir("marks");
    appending_to_an_input_changes_nothing_else(&c, &marks);
    assert_eq!(std::fs::read_to_string(marks.join("c1")).unwrap(), "appended\n");
}

/// A task that owns its work dir replaces `out/` with a link to the worker's `tls/` and declares
/// `worker.key` its output, for the worker (root) to move the key into the cache, where `plexus
/// get` would hand it out. The worker does not follow the link: the attempt fails, the key stays.
#[test]
fn a_task_cannot_make_the_worker_take_its_key_as_an_output() {
    if !require::require(&[require::ROOT]) {
        return;
    }
    let c = Cluster::start(ClusterConfig { workers: 1, ..Default::default() });
    let key = c.worker_dir(0).join("tls/worker.key");
    let before = std::fs::read(&key).unwrap();
    let swap = format!("{DATA_DIR}; cd $PLEXUS_OUT/.. && mv out out.old && ln -s $d/tls out");
    let src = format!(
        "name = \"thief\"\n[[task]]\nname = \"t\"\ncpu = 0.5\nmax_retries = 0\noutputs = [\"worker.key\"]\ncommand = {swap:?}\n"
    );
    let job = c.submit("thief.toml", &src);
    let st = c.wait_job(&job, Duration::from_secs(60));
    assert_ne!(st.state, SUCCEEDED, "{st:?}");
    assert_eq!(std::fs::read(&key).unwrap(), before, "the worker's key is where it was");
    assert!(!c.worker_dir(0).join(format!("cache/{job}/t/0/worker.key")).exists());
    assert!(c.plexus(&["workers"]).status.success());
}
