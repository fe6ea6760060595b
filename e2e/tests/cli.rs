//! End-to-end: the CLI habits of issue 18 against a real cluster — jobs named by unique id
//! prefix or by name (ambiguous and unknown ones refused, naming the matches), `plexus status`
//! filters, completion scripts, and the hint when no coordinator answers.

use std::time::Duration;

use plexus_e2e::{Cluster, ClusterConfig, describe};
use plexus_proto::pb;

#[path = "support/wait.rs"]
mod wait;

fn job(name: &str, command: &str) -> String {
    format!("name = \"{name}\"\n[[task]]\nname = \"t\"\ncommand = \"{command}\"\n")
}

fn stdout(o: &std::process::Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

#[test]
fn jobs_by_prefix_and_name_filters_and_completions() {
    let c = Cluster::start(ClusterConfig { workers: 1, ..ClusterConfig::default() });
    let ok = c.submit("ok.toml", &job("nightly-etl", "echo hello"));
    let bad = c.submit("bad.toml", &job("broken", "exit 3"));
    let twin_a = c.submit("a.toml", &job("twin", "true"));
    // Newer by its submission time (milliseconds): not in the same one.
    std::thread::sleep(Duration::from_millis(20));
    let twin_b = c.submit("b.toml", &job("twin", "true"));
    for id in [&ok, &bad, &twin_a, &twin_b] {
        c.wait_job(id, Duration::from_secs(60));
    }

    // By name, and by a unique prefix with and without "job-".
    let o = c.plexus(&["logs", "nightly-etl", "t"]);
    assert!(o.status.success() && stdout(&o).contains("hello"), "{}", describe(&o));
    let prefix = &ok[..ok.len() - 20];
    let o = c.plexus(&["status", prefix, "-o", "json"]);
    assert!(o.status.success(), "{}", describe(&o));
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(v["job_id"], ok.as_str(), "{v}");
    let o = c.plexus(&["status", &bad["job-".len()..bad.len() - 16], "-o", "json"]);
    assert!(o.status.success(), "{}", describe(&o));
    assert_eq!(serde_json::from_slice::<serde_json::Value>(&o.stdout).unwrap()["job_id"], bad.as_str());

    // Two jobs share a name: the name is the newest, `~1` the one before.
    let id_of = |r: &str| {
        let o = c.plexus(&["status", r, "-o", "json"]);
        assert!(o.status.success(), "{}", describe(&o));
        serde_json::from_slice::<serde_json::Value>(&o.stdout).unwrap()["job_id"].as_str().unwrap().to_string()
    };
    assert_eq!((id_of("twin"), id_of("twin~1")), (twin_b.clone(), twin_a.clone()));
    // Nothing matches: says so.
    let o = c.plexus(&["cancel", "no-such-job"]);
    assert!(
        !o.status.success() && String::from_utf8_lossy(&o.stderr).contains("no job matches \"no-such-job\""),
        "{}",
        describe(&o)
    );
    // The empty prefix "job-" matches every job: ambiguous, not the first one.
    let o = c.plexus(&["status", "job-"]);
    assert!(!o.status.success() && String::from_utf8_lossy(&o.stderr).contains("matches 4 jobs"), "{}", describe(&o));

    // Resubmit by name: a new job with the same file.
    let o = c.plexus(&["resubmit", "nightly-etl"]);
    assert!(o.status.success(), "{}", describe(&o));
    let again = stdout(&o).trim().to_string();
    assert!(again.starts_with("job-") && again != ok, "{again}");
    let st = c.wait_job(&again, Duration::from_secs(60));
    assert_eq!((st.name.as_str(), st.state), ("nightly-etl", pb::JobState::Succeeded as i32));
    let o = c.plexus(&["logs", &again, "t"]);
    assert!(stdout(&o).contains("hello"), "{}", describe(&o));
    let o = c.plexus(&["resubmit", "job-ffff"]);
    assert!(!o.status.success() && String::from_utf8_lossy(&o.stderr).contains("no job matches"), "{}", describe(&o));

    // Filters.
    let o = c.plexus(&["status", "--state", "failed", "-o", "json"]);
    assert!(o.status.success(), "{}", describe(&o));
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    let ids: Vec<&str> =
        v["jobs"].as_array().expect("a list of jobs").iter().map(|j| j["job_id"].as_str().unwrap()).collect();
    assert_eq!(ids, vec![bad.as_str()]);
    let o = c.plexus(&["status", "--name", "twin", "--limit", "1", "-o", "json"]);
    assert!(o.status.success(), "{}", describe(&o));
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(v["jobs"].as_array().expect("a list of jobs").len(), 1, "{v}");
    let o = c.plexus(&["status", "--state", "succeeded"]);
    let table = stdout(&o);
    assert!(table.contains("nightly-etl") && !table.contains("broken"), "{table}");
    assert_eq!(c.job(&ok).unwrap().state, pb::JobState::Succeeded as i32);

    // Completion scripts, with no coordinator involved.
    for (shell, marker) in [("bash", "_plexus()"), ("zsh", "#compdef plexus"), ("fish", "complete -c plexus")] {
        let o = std::process::Command::new(c.bin.join("plexus"))
            .args(["completions", shell])
            .env("PLEXUS_COORDINATOR", "https://127.0.0.1:1")
            .output()
            .unwrap();
        assert!(
            o.status.success() && stdout(&o).contains(marker) && stdout(&o).contains("explain"),
            "{shell}: {}",
            describe(&o)
        );
    }
}

#[test]
fn an_unreachable_coordinator_says_what_to_do() {
    let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
    let o = std::process::Command::new(plexus_e2e::bin_dir().join("plexus"))
        .args(["--insecure", "--coordinator", &format!("http://127.0.0.1:{port}"), "status"])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        !o.status.success()
            && err.contains("cannot reach the coordinator")
            && err.contains("plexus up")
            && err.contains("PLEXUS_COORDINATOR"),
        "{}",
        describe(&o)
    );
}

/// A coordinator stopped with SIGSTOP still accepts TCP connections (the kernel does) but never
/// answers: the CLI's keep-alive pings fail the call, instead of waiting for ever.
#[test]
fn a_frozen_coordinator_is_reported_not_waited_on_for_ever() {
    let dir = tempfile::tempdir().unwrap();
    let mut coordinator = std::process::Command::new(plexus_e2e::bin_dir().join("plexus-coordinator"))
        .args(["--insecure", "--listen", "127.0.0.1:0", "--http", "none", "--data-dir"])
        .arg(dir.path().join("c"))
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let mut line = String::new();
    std::io::BufRead::read_line(&mut std::io::BufReader::new(coordinator.stdout.take().unwrap()), &mut line).unwrap();
    let addr = line.trim().strip_prefix("plexus-coordinator listening on ").expect("the listening line").to_string();
    let url = format!("http://{addr}");
    let run = || {
        std::process::Command::new(plexus_e2e::bin_dir().join("plexus"))
            .args(["--insecure", "--coordinator", &url, "workers"])
            .output()
            .unwrap()
    };
    assert!(run().status.success());
    // SAFETY: kill(2) on a child of ours.
    unsafe { libc::kill(coordinator.id() as i32, libc::SIGSTOP) };
    let started = std::time::Instant::now();
    let o = run();
    let took = started.elapsed();
    unsafe { libc::kill(coordinator.id() as i32, libc::SIGCONT) };
    let _ = coordinator.kill();
    let _ = coordinator.wait();
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        !o.status.success() && err.contains("cannot reach the coordinator") && err.contains("no answer"),
        "{}",
        describe(&o)
    );
    assert!(took < Duration::from_secs(45), "failed only after {took:?}");
}

/// A child process whose stdout and stderr are read as they come (so a test can wait on what it
/// has said so far), killed if the test ends before it does.
struct Running {
    child: std::process::Child,
    out: std::sync::Arc<std::sync::Mutex<Vec<u8>>>,
    err: std::sync::Arc<std::sync::Mutex<Vec<u8>>>,
    readers: Vec<std::thread::JoinHandle<()>>,
}

impl Running {
    /// Takes over `child`, spawned with piped stdout and stderr.
    fn new(mut child: std::process::Child) -> Running {
        fn reader(
            mut from: impl std::io::Read + Send + 'static,
            into: &std::sync::Arc<std::sync::Mutex<Vec<u8>>>,
        ) -> std::thread::JoinHandle<()> {
            let into = into.clone();
            std::thread::spawn(move || {
                let mut buf = [0u8; 4096];
                while let Ok(n @ 1..) = from.read(&mut buf) {
                    into.lock().unwrap().extend_from_slice(&buf[..n]);
                }
            })
        }
        let (out, err) = Default::default();
        let readers = vec![
            reader(child.stdout.take().expect("stdout piped"), &out),
            reader(child.stderr.take().expect("stderr piped"), &err),
        ];
        Running { child, out, err, readers }
    }

    fn stdout(&self) -> String {
        String::from_utf8_lossy(&self.out.lock().unwrap()).into_owned()
    }

    fn stderr(&self) -> String {
        String::from_utf8_lossy(&self.err.lock().unwrap()).into_owned()
    }

    /// Waits for the child to end and returns its output; fails naming `what` if it has not
    /// ended within `limit` (a guard against a hang, not a measurement; the child is killed).
    fn output_within(mut self, limit: Duration, what: &str) -> std::process::Output {
        let status = wait::until(&format!("{what} to end"), limit, || self.child.try_wait().unwrap());
        for r in std::mem::take(&mut self.readers) {
            r.join().unwrap();
        }
        let out = std::mem::take(&mut *self.out.lock().unwrap());
        let err = std::mem::take(&mut *self.err.lock().unwrap());
        std::process::Output { status, stdout: out, stderr: err }
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        // Ended already, or the test failed: either way nothing is left running.
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Over TLS a server that accepts connections and never answers holds the handshake, which
/// keep-alive pings do not cover: the CLI bounds the whole connect and says so.
#[test]
fn a_coordinator_that_accepts_and_never_answers_over_tls_is_reported() {
    let silent = std::net::TcpListener::bind("127.0.0.1:0").unwrap(); // never accepts
    let dir = tempfile::tempdir().unwrap();
    let ca = dir.path().join("ca.pem");
    std::fs::write(&ca, plexus_security::pki::ClusterCa::create("test").unwrap().cert_pem()).unwrap();
    let child = std::process::Command::new(plexus_e2e::bin_dir().join("plexus"))
        .args(["--coordinator", &format!("https://{}", silent.local_addr().unwrap()), "--ca"])
        .arg(&ca)
        .arg("status")
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    // A guard against a hang, not a measurement: the CLI gives up after 5 s.
    let o = Running::new(child).output_within(Duration::from_secs(60), "plexus status against a silent coordinator");
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        !o.status.success() && err.contains("cannot reach the coordinator") && err.contains("no answer within 5s"),
        "{}",
        describe(&o)
    );
    drop(silent);
}

#[test]
fn watch_rides_through_a_coordinator_kill_and_restart() {
    let mut c = Cluster::start(ClusterConfig { workers: 1, ..ClusterConfig::default() });
    let id = c.submit("slow.toml", &job("slow", "sleep 4; echo done"));
    let watch = std::process::Command::new(c.bin.join("plexus"))
        .args(["watch", &id])
        .env("PLEXUS_COORDINATOR", &c.url)
        .env_remove("PLEXUS_TOKEN")
        .env("PLEXUS_CA", c.ca_file())
        .env("PLEXUS_TOKEN_FILE", c.admin_token_file())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let watch = Running::new(watch);
    // The coordinator dies once the watch follows the job (it has printed the job's status), and
    // comes back once the watch has noticed.
    wait::until("the watch to show the job", Duration::from_secs(30), || (!watch.stdout().is_empty()).then_some(()));
    c.kill_coordinator(); // kill -9
    wait::until("the watch to notice the coordinator is gone", Duration::from_secs(30), || {
        watch.stderr().contains("lost the coordinator").then_some(())
    });
    c.start_coordinator();
    let o = watch.output_within(Duration::from_secs(90), "the watch");
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(o.status.success(), "the watch ends 0 when the job succeeds: {}", describe(&o));
    assert!(
        err.contains("lost the coordinator") && err.contains("reconnecting in") && err.contains("reconnected"),
        "{}",
        describe(&o)
    );
    assert!(stdout(&o).trim_end().ends_with(&format!("job {id} succeeded")), "{}", describe(&o));
}

#[test]
fn drain_undrain_and_remove_workers_by_short_name() {
    let mut c = Cluster::start(ClusterConfig { workers: 2, cpus_per_worker: 2, ..ClusterConfig::default() });
    let (w0, w1) = (c.worker_id(0), c.worker_id(1));
    let short0 = &w0[..12]; // wkr- + 8 digits, as the NAME column shows
    let o = c.plexus(&["workers", "drain", short0]);
    assert!(o.status.success() && stdout(&o).contains(&format!("worker {w0} drained")), "{}", describe(&o));
    let table = stdout(&c.plexus(&["workers"]));
    assert!(table.contains("yes, drained"), "{table}");
    let job =
        c.submit("four.toml", "name = \"four\"\n[[task]]\nname = \"t\"\ncommand = \"true\"\ncpu = 1\nreplicas = 4\n");
    let st = c.wait_job(&job, Duration::from_secs(60));
    assert_eq!(st.state, pb::JobState::Succeeded as i32);
    assert!(
        st.subtasks.iter().all(|s| s.worker_id == w1),
        "nothing ran on the drained worker: {:?}",
        st.subtasks.iter().map(|s| &s.worker_id).collect::<Vec<_>>()
    );
    assert!(c.plexus(&["workers", "undrain", &w0]).status.success());
    assert!(!stdout(&c.plexus(&["workers"])).contains("drained"));

    // A live worker cannot be removed; a lost one can, and is gone from the list.
    let o = c.plexus(&["workers", "remove", &w1[4..14]]);
    assert!(!o.status.success() && String::from_utf8_lossy(&o.stderr).contains("is alive"), "{}", describe(&o));
    c.kill_worker(1);
    c.wait_for("worker 1 to be lost", Duration::from_secs(30), |c| {
        c.workers().filter(|ws| ws.iter().any(|w| w.worker_id == w1 && !w.alive)).map(|_| ())
    });
    let o = c.plexus(&["workers", "remove", &w1]);
    assert!(o.status.success(), "{}", describe(&o));
    let ws = c.workers().unwrap();
    assert_eq!(ws.iter().map(|w| w.worker_id.as_str()).collect::<Vec<_>>(), [w0.as_str()]);
    let o = c.plexus(&["workers", "drain", "wkr-zz"]);
    assert!(
        !o.status.success() && String::from_utf8_lossy(&o.stderr).contains("no worker matches"),
        "{}",
        describe(&o)
    );
}

/// A listing of workers comes a page at a time, in id order, each page with the summary of all;
/// `plexus workers` walks the pages (here two workers a page) and `--summary` is one request;
/// the dashboard pages the same way; a page token that names no worker is refused by name.
#[test]
fn workers_are_listed_a_page_at_a_time_with_a_summary_of_all() {
    let c = Cluster::start(ClusterConfig { workers: 3, cpus_per_worker: 2, ..ClusterConfig::default() });
    let mut ids: Vec<String> = (0..3).map(|i| c.worker_id(i)).collect();
    ids.sort();
    let list = |page_size, page_token: &str, summary_only| {
        let req = pb::ListWorkersRequest { page_size, page_token: page_token.into(), summary_only };
        let mut client = c.client_with(c.admin_token.as_deref());
        c.block_on(client.list_workers(req))
    };
    let first = list(2, "", false).unwrap().into_inner();
    let shown: Vec<&str> = first.workers.iter().map(|w| w.worker_id.as_str()).collect();
    assert_eq!(shown, [ids[0].as_str(), ids[1].as_str()]);
    assert_eq!(first.next_page_token, ids[1]);
    let summary = first.summary.expect("a summary");
    assert_eq!((summary.total, summary.alive, summary.draining), (3, 3, 0));
    assert_eq!(summary.cpu_offered, 6.0);
    let second = list(2, &first.next_page_token, false).unwrap().into_inner();
    assert_eq!(second.workers.iter().map(|w| w.worker_id.as_str()).collect::<Vec<_>>(), [ids[2].as_str()]);
    assert!(second.next_page_token.is_empty(), "the last page");
    let only = list(0, "", true).unwrap().into_inner();
    assert!(only.workers.is_empty() && only.summary.is_some_and(|s| s.total == 3));
    let all = list(0, "", false).unwrap().into_inner();
    assert_eq!(all.workers.len(), 3, "page_size 0: every worker");
    let e = list(2, "wkr-nope", false).unwrap_err();
    assert_eq!(e.code(), tonic::Code::InvalidArgument);
    assert!(e.message().contains("page_token \"wkr-nope\" is not a worker id"), "{e:?}");

    let o = c.plexus(&["workers", "--page-size", "2"]);
    let table = stdout(&o);
    assert!(o.status.success() && ids.iter().all(|id| table.contains(&id[..12])), "{}", describe(&o));
    let o = c.plexus(&["workers", "--summary"]);
    assert!(
        o.status.success() && stdout(&o).starts_with("3 workers: 3 alive, 0 lost, 0 draining; 0.0/6 cores"),
        "{}",
        describe(&o)
    );
    let o = c.plexus(&["workers", "--summary", "-o", "json"]);
    let v: serde_json::Value = serde_json::from_str(&stdout(&o)).unwrap_or_else(|e| panic!("{e}: {}", describe(&o)));
    assert_eq!((v["total"].as_u64(), v["lost"].as_u64(), v["cpu_offered"].as_f64()), (Some(3), Some(0), Some(6.0)));

    let http = c.http.as_deref().expect("the coordinator serves HTTP");
    let token = c.admin_token.as_deref();
    let (code, page) = plexus_e2e::http_get(http, &format!("/workers?after={}", ids[0]), token);
    assert_eq!(code, 200, "{page}");
    assert!(page.contains("3 workers: 3 alive, 0 lost"), "{page}");
    assert!(
        !page.contains(&format!("data-worker=\"{}\"", ids[0])) && page.contains(&format!("data-worker=\"{}\"", ids[2]))
    );
    assert!(page.contains("id=\"first-page\""), "a later page links back to the first");
    let (code, json) = plexus_e2e::http_get(http, &format!("/api/workers?after={}", ids[1]), token);
    assert_eq!(code, 200, "{json}");
    let v: serde_json::Value = serde_json::from_str(&json).unwrap();
    assert_eq!(v["workers"].as_array().map(Vec::len), Some(1));
    assert!(v["next"].is_null() && v["summary"].as_str().is_some_and(|s| s.starts_with("3 workers")));
    let (code, body) = plexus_e2e::http_get(http, "/workers?after=wkr-nope", token);
    assert_eq!(code, 400);
    assert!(body.contains("after=\"wkr-nope\" is not a worker id"), "{body}");
}

#[test]
fn logs_follow_all_ranks_and_attempts() {
    let c = Cluster::start(ClusterConfig { workers: 1, cpus_per_worker: 2, ..ClusterConfig::default() });
    // Attempt 1 prints and fails; attempt 2 prints over two seconds and succeeds.
    let id = c.submit(
        "retry.toml",
        "name = \"retry\"\n[[task]]\nname = \"t\"\nmax_retries = 1\ncommand = \"echo start $PLEXUS_ATTEMPT; if [ $PLEXUS_ATTEMPT = 1 ]; then exit 3; fi; sleep 1; echo middle; sleep 1; echo end\"\n\
         [[task]]\nname = \"r\"\nreplicas = 2\ncommand = \"echo rank $PLEXUS_RANK\"\n",
    );
    let o = c.plexus(&["logs", "retry", "t", "--follow"]);
    let text = stdout(&o);
    assert!(o.status.success(), "{}", describe(&o));
    assert!(text.contains("start 2\nmiddle\nend\n"), "followed to the end of the attempt that succeeded:\n{text}");
    c.wait_job(&id, Duration::from_secs(60));
    let o = c.plexus(&["logs", &id, "t", "--attempt", "1"]);
    assert_eq!(stdout(&o), "start 1\n", "{}", describe(&o));
    let o = c.plexus(&["logs", &id, "t", "--attempt", "7"]);
    assert!(!o.status.success() && String::from_utf8_lossy(&o.stderr).contains("no attempt 7"), "{}", describe(&o));
    let o = c.plexus(&["logs", &id, "r", "--all-ranks"]);
    assert_eq!(stdout(&o), "==> r/0 attempt 1 <==\nrank 0\n\n==> r/1 attempt 1 <==\nrank 1\n", "{}", describe(&o));
}

#[test]
fn get_downloads_outputs_from_their_holders() {
    let c = Cluster::start(ClusterConfig { workers: 2, cpus_per_worker: 1, ..ClusterConfig::default() });
    let id = c.submit(
        "blobs.toml",
        "name = \"blobs\"\n[[task]]\nname = \"gen\"\nreplicas = 2\ncpu = 1\noutputs = [\"blob\", \"small\"]\n\
         command = \"head -c 3000000 /dev/urandom | tee $PLEXUS_OUT/blob | sha256sum | cut -d' ' -f1; echo hi > $PLEXUS_OUT/small\"\n",
    );
    let st = c.wait_job(&id, Duration::from_secs(60));
    assert_eq!(st.state, pb::JobState::Succeeded as i32);
    let dir = c.path("got");
    let o = c.plexus(&["get", "blobs", "gen", "-o", dir.to_str().unwrap()]);
    assert!(o.status.success(), "{}", describe(&o));
    for rank in ["0", "1"] {
        let file = dir.join("gen").join(rank).join("blob");
        let local = std::process::Command::new("sha256sum").arg(&file).output().unwrap();
        let local = String::from_utf8_lossy(&local.stdout).split_whitespace().next().unwrap_or_default().to_string();
        let printed = stdout(&c.plexus(&["logs", &id, "gen", "--rank", rank]));
        assert_eq!(local, printed.trim(), "rank {rank}'s blob arrived intact");
        assert_eq!(std::fs::read_to_string(dir.join("gen").join(rank).join("small")).unwrap(), "hi\n");
    }
    // One output of one rank; then what does not exist.
    let one = c.path("one");
    let o = c.plexus(&["get", &id, "gen/1/small", "-o", one.to_str().unwrap()]);
    assert!(
        o.status.success()
            && one.join("gen/1/small").is_file()
            && !one.join("gen/1/blob").exists()
            && !one.join("gen/0").exists(),
        "{}",
        describe(&o)
    );
    let o = c.plexus(&["get", &id, "nope"]);
    assert!(
        !o.status.success() && String::from_utf8_lossy(&o.stderr).contains("has no task \"nope\" (its tasks: gen)"),
        "{}",
        describe(&o)
    );
    let o = c.plexus(&["get", &id, "gen/7"]);
    assert!(!o.status.success() && String::from_utf8_lossy(&o.stderr).contains("nothing to get"), "{}", describe(&o));
    let o = c.plexus(&["get", &id, "gen/x"]);
    assert!(!o.status.success() && String::from_utf8_lossy(&o.stderr).contains("is not a number"), "{}", describe(&o));

    // Outputs whose names look like the download's temporary file: each keeps its own bytes,
    // and nothing else is left in the folder.
    let tricky = c.submit(
        "tricky.toml",
        "name = \"tricky\"\n[[task]]\nname = \"a\"\noutputs = [\"x.plexus-partial\", \"x\", \"x.bin\"]\n\
         command = \"echo AAA > $PLEXUS_OUT/x.plexus-partial; echo BBB > $PLEXUS_OUT/x; echo CCC > $PLEXUS_OUT/x.bin\"\n",
    );
    assert_eq!(c.wait_job(&tricky, Duration::from_secs(60)).state, pb::JobState::Succeeded as i32);
    let t = c.path("tricky");
    let o = c.plexus(&["get", &tricky, "a", "-o", t.to_str().unwrap()]);
    assert!(o.status.success(), "{}", describe(&o));
    let d = t.join("a/0");
    assert_eq!(std::fs::read_to_string(d.join("x.plexus-partial")).unwrap(), "AAA\n");
    assert_eq!(std::fs::read_to_string(d.join("x")).unwrap(), "BBB\n");
    assert_eq!(std::fs::read_to_string(d.join("x.bin")).unwrap(), "CCC\n");
    let mut left: Vec<String> =
        std::fs::read_dir(&d).unwrap().map(|e| e.unwrap().file_name().to_string_lossy().into_owned()).collect();
    left.sort();
    assert_eq!(left, ["x", "x.bin", "x.plexus-partial"]);
}

#[test]
fn submit_after_other_jobs() {
    let c = Cluster::start(ClusterConfig { workers: 1, cpus_per_worker: 2, ..ClusterConfig::default() });
    let dir = c.path("files");
    std::fs::create_dir_all(&dir).unwrap();
    let file = |name: &str, body: &str| {
        let p = dir.join(name);
        std::fs::write(&p, body).unwrap();
        p.to_str().unwrap().to_string()
    };
    let first = c.submit("first.toml", &job("first", "sleep 2"));
    let then = file("then.toml", &job("then", "true"));
    let o = c.plexus(&["submit", &then, "--after", "first"]);
    assert!(o.status.success(), "{}", describe(&o));
    let then_id = stdout(&o).trim().to_string();
    let a = c.wait_job(&first, Duration::from_secs(60));
    let b = c.wait_job(&then_id, Duration::from_secs(60));
    assert_eq!(b.state, pb::JobState::Succeeded as i32, "{b:?}");
    assert!(
        b.subtasks[0].assigned_at >= a.finished_at,
        "then placed at {} before first ended at {}",
        b.subtasks[0].assigned_at,
        a.finished_at
    );

    // After a job that fails: it fails too, saying why.
    let bad = c.submit("bad.toml", &job("bad", "sleep 1; exit 4"));
    let o = c.plexus(&["submit", &then, "--after", &bad]);
    assert!(o.status.success(), "{}", describe(&o));
    let st = c.wait_job(stdout(&o).trim(), Duration::from_secs(60));
    assert_eq!(st.state, pb::JobState::Failed as i32);
    assert!(st.error.contains("runs after") && st.error.contains(&bad), "{}", st.error);

    // In the file; a malformed id is refused with its line.
    let in_file = file(
        "in-file.toml",
        &format!(
            "name = \"in-file\"\nafter_jobs = [\"{first}\", \"job-nope\"]\n[[task]]\nname = \"t\"\ncommand = \"true\"\n"
        ),
    );
    let o = c.plexus(&["submit", &in_file]);
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(!o.status.success() && err.contains("in-file.toml:2") && err.contains("after_jobs[1]"), "{}", describe(&o));
}

/// What the coordinator refuses reaches the user as its own words, however large it would be:
/// a 3,000-task cycle names its first tasks and the count (it used to exceed what a gRPC status
/// header carries and read "cannot reach the coordinator"), and a command past what execve
/// takes is refused at submit, naming the task and the size.
#[test]
fn large_refusals_and_commands_past_the_os_limits_are_reported_at_submit() {
    let c = Cluster::start(ClusterConfig { workers: 0, ..ClusterConfig::default() });
    let dir = c.path("files");
    std::fs::create_dir_all(&dir).unwrap();
    let n = 3000;
    let ring: String = (0..n)
        .map(|i| {
            format!(
                "[[task]]\nname = \"a-rather-long-task-name-{i:04}\"\ncommand = \"true\"\nafter = [\"a-rather-long-task-name-{:04}\"]\n",
                (i + 1) % n
            )
        })
        .collect();
    let file = dir.join("ring.toml");
    std::fs::write(&file, format!("name = \"ring\"\n{ring}")).unwrap();
    let o = c.plexus(&["submit", file.to_str().unwrap()]);
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(!o.status.success(), "{}", describe(&o));
    assert!(
        err.contains("dependency cycle: a-rather-long-task-name-") && err.contains("(3000 tasks in the cycle)"),
        "{err}"
    );
    assert!(!err.contains("cannot reach"), "{err}");

    let big = dir.join("big.toml");
    let arg = "x".repeat(200 << 10);
    std::fs::write(&big, format!("name = \"big\"\n[[task]]\nname = \"echo\"\ncommand = [\"echo\", \"{arg}\"]\n"))
        .unwrap();
    let o = c.plexus(&["submit", big.to_str().unwrap()]);
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        !o.status.success() && err.contains("task \"echo\": command argument 1 is 204800 bytes; the OS refuses"),
        "{err}"
    );
}

/// The CLI refuses a coordinator nobody meant (an empty `PLEXUS_COORDINATOR`, a scheme that is
/// not http(s)) instead of trying the default or a host named "ftp", says when a token file can
/// be read by others, and when the CA file is not a PEM certificate.
#[test]
fn an_empty_or_foreign_coordinator_a_shared_token_and_a_non_pem_ca_are_reported() {
    use std::os::unix::fs::PermissionsExt;
    let plexus = |env: &[(&str, &str)], args: &[&str]| {
        let mut cmd = std::process::Command::new(plexus_e2e::bin_dir().join("plexus"));
        for v in ["PLEXUS_COORDINATOR", "PLEXUS_TOKEN", "PLEXUS_TOKEN_FILE", "PLEXUS_CA", "PLEXUS_CONTEXT"] {
            cmd.env_remove(v);
        }
        // No contexts: what this test checks is the CLI's own defaults.
        cmd.env("PLEXUS_CONFIG_DIR", "/nonexistent/plexus-config");
        cmd.envs(env.iter().copied()).args(args).output().unwrap()
    };
    for (env, args) in [
        (vec![("PLEXUS_COORDINATOR", "")], vec!["workers"]),
        (vec![], vec!["--coordinator", "", "workers"]),
        (vec![("PLEXUS_COORDINATOR", "  ")], vec!["--insecure", "workers"]),
    ] {
        let o = plexus(&env, &args);
        let err = String::from_utf8_lossy(&o.stderr);
        assert!(
            !o.status.success() && err.contains("the coordinator URL is empty"),
            "{env:?} {args:?}: {}",
            describe(&o)
        );
    }
    let o = plexus(&[("PLEXUS_COORDINATOR", "ftp://x")], &["workers"]);
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(!o.status.success() && err.contains("\"ftp://x\" is not http(s)"), "{}", describe(&o));

    let c = Cluster::start(ClusterConfig { workers: 0, ..ClusterConfig::default() });
    let shared = c.path("shared.token");
    std::fs::copy(c.admin_token_file(), &shared).unwrap();
    std::fs::set_permissions(&shared, std::fs::Permissions::from_mode(0o644)).unwrap();
    let ca = c.ca_file();
    let env = [("PLEXUS_COORDINATOR", c.url.as_str()), ("PLEXUS_CA", ca.to_str().unwrap())];
    let o = plexus(&[env[0], env[1], ("PLEXUS_TOKEN_FILE", shared.to_str().unwrap())], &["workers"]);
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(o.status.success(), "a warning, not a refusal: {}", describe(&o));
    assert!(err.contains("can be read by other users (mode 644); make it owner-only: chmod 600"), "{err}");
    let o = plexus(&[env[0], env[1], ("PLEXUS_TOKEN_FILE", c.admin_token_file().to_str().unwrap())], &["workers"]);
    assert!(o.status.success() && o.stderr.is_empty(), "an owner-only file: no warning: {}", describe(&o));

    let not_pem = c.path("ca.der");
    std::fs::write(&not_pem, b"\x30\x82\x01\x0a binary, not PEM").unwrap();
    let o = plexus(&[env[0], ("PLEXUS_CA", not_pem.to_str().unwrap())], &["workers"]);
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(!o.status.success() && err.contains("is not a PEM certificate"), "{}", describe(&o));
}

/// A task that writes far more than the worker's `--log-cap` leaves a log within the cap: its
/// start and its latest part, with a line saying how much was dropped between, and `plexus logs`
/// says so.
#[test]
fn a_log_past_the_cap_keeps_its_start_and_end_and_says_what_was_dropped() {
    let c = Cluster::start(ClusterConfig {
        workers: 1,
        worker_args: vec!["--log-cap".into(), "64KiB".into()],
        ..ClusterConfig::default()
    });
    // 20,000 numbered lines of 16 bytes (312.5 KiB) on stdout, one line on stderr.
    let id = c.submit(
        "loud.toml",
        "name = \"loud\"\n[[task]]\nname = \"t\"\ncommand = \"seq -f 'line %010g' 0 19999; echo quiet >&2\"\n",
    );
    let st = c.wait_job(&id, Duration::from_secs(60));
    assert_eq!(st.state, pb::JobState::Succeeded as i32, "{st:?}");
    let log = c.worker_dir(0).join("logs").join(&id).join("t").join("0.1.out");
    let len = std::fs::metadata(&log).unwrap().len();
    assert!(len <= 64 << 10, "{} is {len} bytes", log.display());

    let o = c.plexus(&["logs", &id, "t"]);
    assert!(o.status.success(), "{}", describe(&o));
    let text = stdout(&o);
    assert!(text.starts_with("line 0000000000\nline 0000000001\n"), "the start is kept: {}", &text[..100]);
    assert!(text.ends_with("line 0000019998\nline 0000019999\n"), "the end is kept");
    let marker = text.lines().find(|l| l.starts_with("[plexus: ")).expect("a marker line");
    let dropped: u64 = marker.trim_start_matches("[plexus: ").trim_end_matches(" bytes dropped]").parse().unwrap();
    // What is kept and what was dropped add up to what was written: whole lines, in order.
    let kept: Vec<&str> = text.lines().filter(|l| l.starts_with("line ")).collect();
    assert!(kept.iter().all(|l| l.len() == 15), "whole lines only");
    assert_eq!(kept.len() as u64 * 16 + dropped, 20_000 * 16, "{marker}");
    let numbers: Vec<u64> = kept.iter().map(|l| l[5..].parse().unwrap()).collect();
    let gap = numbers.windows(2).filter(|w| w[1] != w[0] + 1).count();
    assert_eq!(gap, 1, "one cut, where the marker stands");
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(err.contains("quiet"), "{err}");
    assert!(err.contains(&format!("{dropped} bytes were dropped")) && err.contains("--log-cap"), "{err}");
}
