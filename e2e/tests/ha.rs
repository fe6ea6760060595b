//! The HA control plane (issue 19) with real processes: etcd, three coordinators on it, workers
//! that know all three. A leader killed with `kill -9` under load, a leader paused past its
//! lease and resumed, an etcd member killed: a standby leads within the lease TTL + 2 s, every
//! job finishes, no subtask completes twice (each writes a marker line), and no acknowledged
//! submission is lost. Skipped, saying so on stderr, only where etcd is not installed (`make
//! deps`); any other start error fails the test.

use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use plexus_e2e::ha::{HaCluster, HaConfig};
use plexus_proto::pb;

#[path = "support/require.rs"]
mod require;

const TTL_S: u64 = 2;

/// The cluster, or `None` (the test is skipped, and says so) where etcd is not installed. Every
/// start error once etcd is there — a member that does not come up, a coordinator that does not
/// listen — fails the test.
fn start(config: HaConfig) -> Option<HaCluster> {
    if !require::require(&[require::ETCD]) {
        return None;
    }
    Some(HaCluster::start(config).unwrap_or_else(|e| panic!("starting the HA cluster: {e}")))
}

/// A job of `n` subtasks, each appending its attempt to `markers/<rank>` when it completes.
fn marker_job(name: &str, n: u32, markers: &Path, sleep: &str) -> String {
    format!(
        "name = \"{name}\"\n[[task]]\nname = \"mark\"\nreplicas = {n}\ncommand = [\"sh\", \"-c\", \"sleep {sleep}; echo $PLEXUS_ATTEMPT >> {}/$PLEXUS_RANK\"]\n",
        markers.display()
    )
}

/// Every rank's marker file holds exactly one line.
fn assert_each_once(markers: &Path, n: u32) {
    let mut twice = Vec::new();
    let mut missing = Vec::new();
    for r in 0..n {
        match std::fs::read_to_string(markers.join(r.to_string())) {
            Ok(s) if s.lines().count() == 1 => {}
            Ok(s) => twice.push((r, s.lines().map(str::to_string).collect::<Vec<_>>())),
            Err(_) => missing.push(r),
        }
    }
    assert!(twice.is_empty(), "subtasks completed more than once (rank, the attempts that completed it): {twice:?}");
    assert!(missing.is_empty(), "subtasks that never completed: {missing:?}");
}

/// A client that keeps submitting one-subtask jobs through whichever coordinator leads,
/// recording those acknowledged, until stopped.
struct Submitter {
    stop: Arc<AtomicBool>,
    acked: Arc<Mutex<Vec<String>>>,
    refused: Arc<Mutex<u64>>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Submitter {
    fn start(c: &HaCluster) -> Submitter {
        let (urls, ca, token) = (c.urls.clone(), c.ca.clone(), c.admin_token.clone());
        let stop = Arc::new(AtomicBool::new(false));
        let acked = Arc::new(Mutex::new(Vec::new()));
        let refused = Arc::new(Mutex::new(0));
        let (s, a, r) = (stop.clone(), acked.clone(), refused.clone());
        let thread = std::thread::spawn(move || {
            let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
            let token = plexus_security::Token::parse(&token).unwrap();
            let mut n = 0u32;
            while !s.load(Ordering::SeqCst) {
                n += 1;
                let src = format!("name = \"load-{n}\"\n[[task]]\nname = \"t\"\ncommand = [\"true\"]\n");
                let mut done = false;
                for url in &urls {
                    let r = rt.block_on(async {
                        let ep = tonic::transport::Endpoint::from_shared(url.clone())
                            .unwrap()
                            .connect_timeout(Duration::from_millis(500))
                            .timeout(Duration::from_secs(10))
                            .tls_config(plexus_security::tls::client(&ca, plexus_security::tls::COORDINATOR_NAME, None))
                            .unwrap();
                        let ch = tokio::time::timeout(Duration::from_secs(2), ep.connect())
                            .await
                            .map_err(|_| tonic::Status::unavailable("handshake timed out"))?
                            .map_err(|e| tonic::Status::unavailable(e.to_string()))?;
                        let mut c = pb::job_service_client::JobServiceClient::with_interceptor(
                            ch,
                            plexus_security::tls::Bearer::new(Some(&token)),
                        );
                        c.submit_job(pb::SubmitJobRequest {
                            source: src.clone(),
                            format: String::new(),
                            filename: format!("load-{n}.toml"),
                            after_jobs: vec![],
                            working_dir: Vec::new(),
                            dry_run: false,
                        })
                        .await
                    });
                    if let Ok(resp) = r {
                        a.lock().unwrap().push(resp.into_inner().job_id);
                        done = true;
                        break;
                    }
                }
                if !done {
                    *r.lock().unwrap() += 1;
                }
                std::thread::sleep(Duration::from_millis(100));
            }
        });
        Submitter { stop, acked, refused, thread: Some(thread) }
    }

    fn finish(mut self) -> (Vec<String>, u64) {
        self.stop.store(true, Ordering::SeqCst);
        if let Some(t) = self.thread.take() {
            t.join().unwrap();
        }
        let acked = self.acked.lock().unwrap().clone();
        let refused = *self.refused.lock().unwrap();
        (acked, refused)
    }
}

fn progress(c: &HaCluster, job: &str) -> Option<(u32, u32)> {
    c.job(job).map(|j| (j.groups.iter().map(|g| g.succeeded).sum(), j.total_subtasks))
}

#[test]
fn a_killed_leader_is_replaced_within_the_lease_and_nothing_is_lost_or_done_twice() {
    let Some(mut c) = start(HaConfig { coordinators: 3, workers: 3, lease_ttl_s: TTL_S, ..Default::default() }) else {
        return;
    };
    let markers = c.dir.path().join("markers");
    std::fs::create_dir_all(&markers).unwrap();
    plexus_e2e::open_to_tasks(&markers);
    let n = 1000;
    let job = c.try_submit("big.toml", &marker_job("big", n, &markers, "0.02")).expect("the job is accepted");
    let load = Submitter::start(&c);
    c.wait_for("a quarter of the job done", Duration::from_secs(120), |c| {
        progress(c, &job).filter(|(s, _)| *s >= n / 4)
    });
    let (leader, _) = c.wait_leader(Duration::from_secs(5));
    let before = progress(&c, &job).unwrap();
    c.kill_coordinator(leader);
    let killed = Instant::now();
    let (next, _) = c.wait_leader(Duration::from_secs(30));
    let failover = killed.elapsed();
    eprintln!("leader {leader} killed at {before:?} of the job; coordinator {next} leads after {failover:?}");
    assert_ne!(next, leader);
    assert!(
        failover <= Duration::from_secs(TTL_S + 2),
        "a standby led only after {failover:?} (lease TTL {TTL_S} s + 2 s allowed)"
    );
    let end = c.wait_job(&job, Duration::from_secs(300));
    assert_eq!(end.state, pb::JobState::Succeeded as i32, "{end:?}");
    assert_each_once(&markers, n);
    let (acked, refused) = load.finish();
    eprintln!("{} submissions acknowledged, {refused} not (during the failover)", acked.len());
    assert!(acked.len() >= 10, "the load submitted too little to mean anything: {}", acked.len());
    for id in &acked {
        let j = c.wait_job(id, Duration::from_secs(120));
        assert_eq!(
            j.state,
            pb::JobState::Succeeded as i32,
            "acknowledged job {id} (name {}) did not succeed: {j:?}",
            j.name
        );
    }
    // The CLI, given all three URLs, names the new leader.
    let out = c.plexus(&["coordinators"]);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{text} {}", String::from_utf8_lossy(&out.stderr));
    let leader_line =
        text.lines().find(|l| l.starts_with("leader")).unwrap_or_else(|| panic!("no leader line in:\n{text}"));
    assert!(leader_line.contains(&c.urls[next]), "{text}");
}

#[test]
fn a_paused_leader_is_fenced_steps_down_on_resume_and_nothing_is_done_twice() {
    let Some(c) = start(HaConfig { coordinators: 2, workers: 2, lease_ttl_s: TTL_S, ..Default::default() }) else {
        return;
    };
    let markers = c.dir.path().join("markers");
    std::fs::create_dir_all(&markers).unwrap();
    plexus_e2e::open_to_tasks(&markers);
    let n = 200;
    let job = c.try_submit("paused.toml", &marker_job("paused", n, &markers, "0.05")).expect("accepted");
    c.wait_for("some of the job done", Duration::from_secs(60), |c| progress(c, &job).filter(|(s, _)| *s >= 20));
    let (old, _) = c.wait_leader(Duration::from_secs(5));
    c.signal_coordinator(old, libc::SIGSTOP);
    let paused = Instant::now();
    // The standby leads once the paused leader's lease has run out.
    let new = c.wait_for("the standby to lead", Duration::from_secs(30), |c| c.leader().filter(|l| *l != old));
    eprintln!("coordinator {new} leads {:?} after {old} was paused", paused.elapsed());
    std::thread::sleep(Duration::from_secs(1));
    c.signal_coordinator(old, libc::SIGCONT);
    // The resumed coordinator stops acting: it says so, and refuses calls naming the new leader.
    c.wait_for("the resumed coordinator to step down", Duration::from_secs(15), |c| {
        c.coordinator_log(old).contains("no longer leading").then_some(())
    });
    // Its refusals name the new leader once it has looked it up (within a moment).
    let leader_url = c.urls[new].clone();
    c.wait_for("the old leader's refusal to name the new one", Duration::from_secs(10), |c| {
        let mut stale = c.client_of(old)?;
        let refusal = c.block_on(stale.list_jobs(pb::ListJobsRequest {})).expect_err("a standby refuses");
        assert_eq!(refusal.code(), tonic::Code::Unavailable, "{refusal:?}");
        let named = refusal.metadata().get("plexus-leader").and_then(|v| v.to_str().ok()).map(str::to_string);
        (named.as_deref() == Some(leader_url.as_str())).then_some(())
    });
    assert_eq!(c.leader(), Some(new), "leadership did not move back");
    let end = c.wait_job(&job, Duration::from_secs(120));
    assert_eq!(end.state, pb::JobState::Succeeded as i32, "{end:?}");
    assert_each_once(&markers, n);
    let log = c.coordinator_log(old);
    // Whichever it noticed first after SIGCONT: its keep-alive finding the lease gone, etcd
    // refusing a write (the fence), or a write of its engine failing (its request timed out
    // while the process was stopped, past the retry budget): never panicked, never carried on.
    assert!(
        ["its lease was lost", "fenced", "its engine failed to write"].iter().any(|why| log.contains(why)),
        "why it stepped down is logged:\n{log}"
    );
    assert!(!log.contains("its engine panicked"), "{log}");
}

/// A leader that hangs for good (SIGSTOP, never resumed: its kernel accepts connections, nothing
/// answers): connected workers move on when their keep-alive fails, a worker started with the
/// hung coordinator first in its list passes over it (its TLS handshake is bounded), and the job
/// finishes under the new leader with nothing done twice.
#[test]
fn a_leader_that_hangs_for_good_is_passed_over_by_workers_old_and_new() {
    let Some(mut c) = start(HaConfig { coordinators: 2, workers: 2, lease_ttl_s: TTL_S, ..Default::default() }) else {
        return;
    };
    let markers = c.dir.path().join("markers");
    std::fs::create_dir_all(&markers).unwrap();
    plexus_e2e::open_to_tasks(&markers);
    let n = 100;
    let job = c.try_submit("hung.toml", &marker_job("hung", n, &markers, "0.05")).expect("accepted");
    c.wait_for("some of the job done", Duration::from_secs(60), |c| progress(c, &job).filter(|(s, _)| *s >= 10));
    let (old, _) = c.wait_leader(Duration::from_secs(5));
    c.signal_coordinator(old, libc::SIGSTOP);
    let new = c.wait_for("the standby to lead", Duration::from_secs(30), |c| c.leader().filter(|l| *l != old));
    let hung_first = format!("{},{}", c.urls[old], c.urls[new]);
    let added = c.add_worker(&hung_first);
    c.wait_for("all three workers alive at the new leader", Duration::from_secs(90), |c| {
        (c.workers_alive()? >= 3).then_some(())
    });
    let end = c.wait_job(&job, Duration::from_secs(120));
    assert_eq!(end.state, pb::JobState::Succeeded as i32, "{end:?}");
    assert_each_once(&markers, n);
    let log = std::fs::read_to_string(c.log_path(&format!("worker-{added}"))).unwrap_or_default();
    assert!(log.contains("no answer within"), "the new worker passed over the hung coordinator:\n{log}");
    c.signal_coordinator(old, libc::SIGCONT);
}

/// Killing a member can cost the leader its lease (its renewals miss the 2 s TTL while etcd
/// re-elects or the client leaves the dead member): it steps down and the standby leads. Once
/// this saw two subtasks complete twice (issue 29): the new leader gave each worker only the
/// heartbeat timeout (3 s) from its restore to register again; a worker later than that (its
/// reconnect back-off grows to 2 s, a step per refusal that names no leader, on a loaded
/// machine) was declared lost, and the attempts it had finished but whose reports were not yet
/// acknowledged were placed again while their own reports were ignored. A restored worker now
/// has the timeout plus `RESTORE_GRACE_MS` (5 s) to register again (`core/restore.rs`, with a
/// unit test). A failure keeps the cluster's logs (coordinators, workers, etcd members) and
/// prints where.
#[test]
fn an_etcd_member_killed_of_three_and_the_cluster_goes_on() {
    let Some(mut c) =
        start(HaConfig { etcd_members: 3, coordinators: 2, workers: 2, lease_ttl_s: TTL_S, ..Default::default() })
    else {
        return;
    };
    let markers = c.dir.path().join("markers");
    std::fs::create_dir_all(&markers).unwrap();
    plexus_e2e::open_to_tasks(&markers);
    let first = c.try_submit("a.toml", &marker_job("a", 100, &markers, "0.02")).expect("accepted");
    c.wait_for("some of the job done", Duration::from_secs(60), |c| progress(c, &first).filter(|(s, _)| *s >= 10));
    c.etcd.kill(0);
    let end = c.wait_job(&first, Duration::from_secs(120));
    assert_eq!(end.state, pb::JobState::Succeeded as i32, "{end:?}");
    assert_each_once(&markers, 100);
    // New work is accepted and runs with two members of three.
    let more = c.dir.path().join("more");
    std::fs::create_dir_all(&more).unwrap();
    plexus_e2e::open_to_tasks(&more);
    let second = c.try_submit("b.toml", &marker_job("b", 50, &more, "0")).expect("accepted with a member down");
    let end = c.wait_job(&second, Duration::from_secs(120));
    assert_eq!(end.state, pb::JobState::Succeeded as i32, "{end:?}");
    assert_each_once(&more, 50);
    let _ = &mut c;
}

/// Coordinators that advertise URLs this host cannot reach (as in a container network whose
/// names only its members resolve; here loopback ports nothing listens on): the CLI, given
/// every real URL with a standby first, is told the leader's advertised URL, cannot reach it,
/// and finds the leader further down its list. Given the standby alone, it says who leads.
#[test]
fn the_cli_finds_a_leader_whose_advertised_url_does_not_answer_from_here() {
    // Privileged ports 1 and 2: never handed out to a process of the test run (a port bound
    // and released here could be), so nothing listens there.
    let dead: Vec<String> = (1..=2).map(|p| format!("https://127.0.0.1:{p}")).collect();
    let Some(c) = start(HaConfig {
        coordinators: 2,
        workers: 0,
        lease_ttl_s: TTL_S,
        advertise: dead.clone(),
        ..Default::default()
    }) else {
        return;
    };
    let (leader, _) = c.wait_leader(Duration::from_secs(30));
    let standby = 1 - leader;
    let both = format!("{},{}", c.urls[standby], c.urls[leader]);
    let out = c.plexus_at(&both, &["coordinators"]);
    let (stdout, stderr) = (String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    assert!(out.status.success(), "plexus coordinators through a standby whose leader's URL does not answer: {stderr}");
    assert!(stdout.contains(&dead[leader]), "{stdout}");
    let out = c.plexus_at(&both, &["status"]);
    assert!(
        out.status.success(),
        "plexus status (served by the leader only): {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let out = c.plexus_at(&c.urls[standby], &["status"]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "the standby alone cannot serve");
    assert!(stderr.contains(&dead[leader]), "the refusal names the leader's advertised URL: {stderr}");
}

/// `GET path` on `addr` with the admin token: (status code, body).
fn http_get(addr: &str, path: &str, token: &str) -> (u16, String) {
    use std::io::{Read, Write};
    let mut s = std::net::TcpStream::connect(addr).expect("connecting to the dashboard");
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    write!(s, "GET {path} HTTP/1.0\r\nHost: {addr}\r\nAuthorization: Bearer {token}\r\n\r\n").unwrap();
    let mut text = String::new();
    s.read_to_string(&mut text).expect("reading the answer");
    let code = text.split_whitespace().nth(1).and_then(|c| c.parse().ok()).unwrap_or(0);
    (code, text)
}

/// A standby's dashboard and API say it stands by and name the leader (503), where the
/// leader's serve; after a failover the old standby's pages work and the killed one's are gone.
#[test]
fn a_standbys_dashboard_says_it_stands_by_and_names_the_leader() {
    let Some(mut c) =
        start(HaConfig { coordinators: 2, workers: 0, lease_ttl_s: TTL_S, http: true, ..Default::default() })
    else {
        return;
    };
    let (leader, _) = c.wait_leader(Duration::from_secs(30));
    let standby = 1 - leader;
    let addrs: Vec<String> = c.http.iter().map(|a| a.clone().expect("the coordinator's http address")).collect();
    let addr = |i: usize| addrs[i].clone();
    let (code, page) = http_get(&addr(leader), "/", &c.admin_token);
    assert_eq!(code, 200, "{page}");
    // The standby learns the leader's URL within a moment.
    let want = format!("the leader is {}", c.urls[leader]);
    let page = c.wait_for("the standby's page to name the leader", Duration::from_secs(10), |c| {
        let (code, page) = http_get(c.http[standby].as_deref().unwrap(), "/", &c.admin_token);
        (code == 503 && page.contains(&want)).then_some(page)
    });
    assert!(page.contains("id=\"standby\""), "{page}");
    let (code, api) = http_get(&addr(standby), "/api/jobs", &c.admin_token);
    assert!(code == 503 && api.contains(&want), "{api}");
    let (code, metrics) = http_get(&addr(standby), "/metrics", &c.admin_token);
    assert!(code == 503 && metrics.contains("is a standby"), "{metrics}");
    // Without a token the standby still asks for one first: nothing is told to strangers.
    let (code, _) = http_get(
        &addr(standby),
        "/api/jobs",
        "plx_000000000000_0000000000000000000000000000000000000000000000000000000000000000",
    );
    assert_eq!(code, 401);

    c.kill_coordinator(leader);
    let (new, _) = c.wait_leader(Duration::from_secs(30));
    assert_eq!(new, standby);
    let (code, page) = http_get(&addr(standby), "/api/jobs", &c.admin_token);
    assert_eq!(code, 200, "{page}");
}
