//! Secure by default, checked with real processes: the coordinator and workers of a default
//! cluster talk mutual TLS, users need tokens of the right scope, workers need a join token,
//! rails need the handshake, and pushes go only to the caller's own rails.

use std::io::{Read, Write};
use std::time::{Duration, Instant};

use plexus_e2e::{Cluster, ClusterConfig, describe};
use plexus_proto::pb;
use plexus_security::pki::Issued;
use plexus_security::tls;

const JOB: &str = r#"
name = "one"
[[task]]
name = "a"
command = "true"
"#;

fn worker_identity(c: &Cluster, i: usize) -> Issued {
    let dir = c.worker_dir(i).join("tls");
    Issued {
        cert_pem: std::fs::read_to_string(dir.join("worker.pem")).expect("worker.pem"),
        key_pem: std::fs::read_to_string(dir.join("worker.key")).expect("worker.key"),
    }
}

/// A channel to `url` over TLS presenting `identity`, checking the server as `name`.
fn mtls(
    c: &Cluster,
    url: &str,
    name: &str,
    identity: Option<&Issued>,
) -> Result<tonic::transport::Channel, tonic::transport::Error> {
    let endpoint = tonic::transport::Endpoint::from_shared(url.to_string())?
        .connect_timeout(Duration::from_secs(3))
        .tls_config(tls::client(c.ca.as_deref().unwrap(), name, identity))?;
    c.block_on(endpoint.connect())
}

#[test]
fn tokens_gate_every_call_by_scope_and_a_revoked_token_stops_at_once() {
    let c = Cluster::start(ClusterConfig { workers: 1, ..Default::default() });

    // No token: UNAUTHENTICATED, with the message that says what to do, and nothing stored.
    let mut anonymous = c.client_with(None);
    let req = pb::SubmitJobRequest {
        source: JOB.into(),
        format: String::new(),
        filename: "one.toml".into(),
        ..Default::default()
    };
    let err = c.block_on(anonymous.submit_job(req.clone())).unwrap_err();
    assert_eq!(err.code(), tonic::Code::Unauthenticated, "{err:?}");
    assert!(err.message().contains("set PLEXUS_TOKEN or pass --token-file"), "{}", err.message());
    let mut admin = c.client_with(c.admin_token.as_deref());
    let jobs = c.block_on(admin.list_jobs(pb::ListJobsRequest::default())).unwrap().into_inner();
    assert!(jobs.jobs.is_empty(), "an unauthenticated submit stored a job: {jobs:?}");
    let err = c.block_on(anonymous.list_workers(pb::ListWorkersRequest::default())).unwrap_err();
    assert_eq!(err.code(), tonic::Code::Unauthenticated);

    // A malformed token names the problem.
    let mut raw = pb::job_service_client::JobServiceClient::new(c.channel().unwrap());
    let mut bad = tonic::Request::new(pb::ListWorkersRequest::default());
    bad.metadata_mut().insert("authorization", "Bearer hunter2".parse().unwrap());
    let err = c.block_on(raw.list_workers(bad)).unwrap_err();
    assert_eq!(err.code(), tonic::Code::Unauthenticated);
    assert!(err.message().contains("not a Plexus token"), "{}", err.message());

    // A read token reads but cannot submit, cancel or make tokens.
    let made = c
        .block_on(admin.create_token(pb::CreateTokenRequest { scope: "read".into(), name: "ci".into(), ttl_ms: 0 }))
        .unwrap()
        .into_inner();
    let mut reader = c.client_with(Some(&made.token));
    c.block_on(reader.list_workers(pb::ListWorkersRequest::default())).expect("a read token reads");
    let err = c.block_on(reader.submit_job(req.clone())).unwrap_err();
    assert_eq!(err.code(), tonic::Code::PermissionDenied, "{err:?}");
    assert!(err.message().contains("has scope read; SubmitJob needs submit"), "{}", err.message());
    let err = c.block_on(reader.list_tokens(pb::ListTokensRequest {})).unwrap_err();
    assert_eq!(err.code(), tonic::Code::PermissionDenied);
    assert!(c.block_on(admin.list_jobs(pb::ListJobsRequest::default())).unwrap().into_inner().jobs.is_empty());

    // A submit token submits; the token list shows ids and scopes, never secrets.
    let submitter = c
        .block_on(admin.create_token(pb::CreateTokenRequest { scope: "submit".into(), name: "bot".into(), ttl_ms: 0 }))
        .unwrap()
        .into_inner();
    let job = c
        .block_on(c.client_with(Some(&submitter.token)).submit_job(req))
        .expect("a submit token submits")
        .into_inner()
        .job_id;
    assert_eq!(c.wait_job(&job, Duration::from_secs(60)).state, pb::JobState::Succeeded as i32);
    let listed = c.block_on(admin.list_tokens(pb::ListTokensRequest {})).unwrap().into_inner().tokens;
    assert!(listed.iter().any(|t| t.id == made.info.as_ref().unwrap().id && t.scope == "read"));
    let store = std::fs::read_dir(c.path("coordinator/state.sled")).unwrap().count();
    assert!(store > 0);

    // Revoked: refused at once.
    let id = made.info.unwrap().id;
    c.block_on(admin.revoke_token(pb::RevokeTokenRequest { id: id.clone() })).unwrap();
    let err = c.block_on(reader.list_workers(pb::ListWorkersRequest::default())).unwrap_err();
    assert_eq!(err.code(), tonic::Code::Unauthenticated);
    assert_eq!(err.message(), format!("token {id} was revoked"));

    // The CLI says what to do, exit 1, when it has no token.
    let out = std::process::Command::new(c.bin.join("plexus"))
        .args(["workers"])
        .env("PLEXUS_COORDINATOR", &c.url)
        .env("PLEXUS_CA", c.ca_file())
        .env_remove("PLEXUS_TOKEN")
        .env_remove("PLEXUS_TOKEN_FILE")
        .current_dir(c.dir.path())
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1), "{}", describe(&out));
    assert_eq!(
        String::from_utf8_lossy(&out.stderr).trim(),
        "error: the coordinator requires a token: set PLEXUS_TOKEN or pass --token-file (plexus token create)"
    );
    // And `plexus token` works end to end for an admin.
    let out = c.plexus(&["token", "create", "--scope", "read", "--name", "from-cli"]);
    assert!(out.status.success(), "{}", describe(&out));
    let token = String::from_utf8_lossy(&out.stdout).trim().to_string();
    let out = c.plexus(&["token", "list"]);
    assert!(String::from_utf8_lossy(&out.stdout).contains("from-cli"), "{}", describe(&out));
    assert!(!String::from_utf8_lossy(&out.stdout).contains(&token[17..]), "token list shows a secret");
}

#[test]
fn workers_need_a_join_token_a_certificate_and_their_own_id() {
    let mut c = Cluster::start(ClusterConfig { workers: 2, ..Default::default() });

    // A well-formed but unknown join token: the worker exits, naming the token problem.
    let bad = c.path("bad.token");
    std::fs::write(&bad, plexus_security::Token::generate().expose()).unwrap();
    let run = |token: &std::path::Path, dir: &str| {
        std::process::Command::new(c.bin.join("plexus-worker"))
            .args(["--coordinator", &c.url, "--data-dir"])
            .arg(c.path(dir))
            .arg("--ca")
            .arg(c.ca_file())
            .arg("--join-token-file")
            .arg(token)
            .output()
            .unwrap()
    };
    let out = run(&bad, "intruder");
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("refused to let this worker join") && err.contains("is not known to this coordinator"),
        "{err}"
    );
    std::fs::write(&bad, "not-a-token").unwrap();
    let out = run(&bad, "intruder2");
    assert!(String::from_utf8_lossy(&out.stderr).contains("not a Plexus token"), "{}", describe(&out));
    // A user token is not a join token.
    let admin = c.path("coordinator/admin.token");
    let out = run(&admin, "intruder3");
    assert!(String::from_utf8_lossy(&out.stderr).contains("Join needs worker"), "{}", describe(&out));
    assert_eq!(c.workers().unwrap().len(), 2, "no worker registered with a bad token");

    // Worker calls without a worker certificate are refused, even with an admin token.
    let mut plain = pb::worker_service_client::WorkerServiceClient::new(c.channel().unwrap());
    let hb = pb::HeartbeatRequest { worker_id: c.worker_id(0), session: "s".into(), state: None };
    let err = c.block_on(plain.heartbeat(hb.clone())).unwrap_err();
    assert_eq!(err.code(), tonic::Code::Unauthenticated, "{err:?}");

    // Worker 0's certificate cannot speak for worker 1.
    let w0 = worker_identity(&c, 0);
    let mut as_w0 = pb::worker_service_client::WorkerServiceClient::new(
        mtls(&c, &c.url, tls::COORDINATOR_NAME, Some(&w0)).unwrap(),
    );
    let other = pb::HeartbeatRequest { worker_id: c.worker_id(1), ..hb };
    let err = c.block_on(as_w0.heartbeat(other)).unwrap_err();
    assert_eq!(err.code(), tonic::Code::PermissionDenied, "{err:?}");
    assert!(err.message().contains("does not match the caller's certificate"), "{}", err.message());

    // A restarted worker needs no token: it keeps its certificate.
    c.kill_worker(0);
    std::fs::remove_file(c.join_token_file()).unwrap();
    c.start_worker(0);
    c.wait_for("worker 0 back", Duration::from_secs(30), |c| {
        c.workers()?.iter().any(|w| w.worker_id == c.worker_id(0) && w.alive && w.last_heartbeat > 0).then_some(())
    });
}

#[test]
fn clients_without_the_cluster_ca_or_over_plaintext_cannot_connect() {
    let c = Cluster::start(ClusterConfig { workers: 1, ..Default::default() });
    // Another cluster's CA: the coordinator's certificate does not check out.
    let other = plexus_security::ClusterCa::create("other").unwrap();
    let endpoint = tonic::transport::Endpoint::from_shared(c.url.clone())
        .unwrap()
        .connect_timeout(Duration::from_secs(3))
        .tls_config(tls::client(other.cert_pem(), tls::COORDINATOR_NAME, None))
        .unwrap();
    let err = c.block_on(endpoint.connect()).unwrap_err();
    assert!(format!("{err:?}").contains("UnknownIssuer") || format!("{err:?}").contains("certificate"), "{err:?}");
    // Plaintext HTTP/2 to a TLS port: no answer.
    let plain_url = c.url.replace("https://", "http://");
    let mut req = tonic::Request::new(pb::ListWorkersRequest::default());
    req.set_timeout(Duration::from_secs(5));
    req.metadata_mut()
        .insert("authorization", format!("Bearer {}", c.admin_token.as_deref().unwrap()).parse().unwrap());
    let answered = c.block_on(async move {
        let ch = tonic::transport::Endpoint::from_shared(plain_url)
            .unwrap()
            .connect_timeout(Duration::from_secs(3))
            .connect()
            .await
            .ok()?;
        pb::job_service_client::JobServiceClient::new(ch).list_workers(req).await.ok()
    });
    assert!(answered.is_none(), "a plaintext client got an answer from a TLS coordinator");
    // A worker's PeerService wants a client certificate of the cluster.
    let peer = c.workers().unwrap()[0].peer_addr.clone();
    let anonymous = mtls(&c, &peer, tls::WORKER_NAME, None);
    let refused = match anonymous {
        Err(_) => true,
        Ok(ch) => {
            let mut client = pb::peer_service_client::PeerServiceClient::new(ch);
            c.block_on(client.read_log(pb::ReadLogRequest { attempt: None, max_bytes: 0 }))
                .is_err_and(|s| s.code() != tonic::Code::InvalidArgument)
        }
    };
    assert!(refused, "a client without a certificate reached a worker's PeerService");
}

#[test]
fn rails_drop_strangers_and_pushes_go_only_to_the_callers_rails() {
    let c = Cluster::start(ClusterConfig { workers: 2, ..Default::default() });
    let workers = c.workers().unwrap();
    let target = &workers[0];
    let rail = target.capacity.as_ref().unwrap().rails[0].clone();

    // Not a worker: speaks without the handshake, and is dropped.
    let mut s = std::net::TcpStream::connect(&rail).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(15))).unwrap();
    let _ = s.write_all(&[0x42; 64]);
    let mut buf = [0u8; 128];
    let started = Instant::now();
    loop {
        match s.read(&mut buf) {
            Ok(0) | Err(_) => break,
            Ok(_) => assert!(started.elapsed() < Duration::from_secs(15), "a stranger's rail connection stayed open"),
        }
    }
    assert!(started.elapsed() < Duration::from_secs(15), "a stranger's rail connection stayed open");
    c.wait_for("the refused rail connection to be counted", Duration::from_secs(20), |c| {
        c.workers()?
            .iter()
            .find(|w| w.worker_id == target.worker_id)?
            .state
            .as_ref()
            .filter(|s| s.rails_refused >= 1)
            .map(|_| ())
    });

    // Worker 1 asks worker 0 to push to an address worker 1 never registered: refused.
    let (i1, w1) =
        workers.iter().enumerate().find(|(_, w)| w.worker_id != target.worker_id).map(|(i, w)| (i, w.clone())).unwrap();
    let id1 = c.worker_index(&w1.worker_id).unwrap_or(i1);
    let me = worker_identity(&c, id1);
    let mut peer = pb::peer_service_client::PeerServiceClient::new(
        mtls(&c, &target.peer_addr, tls::WORKER_NAME, Some(&me)).unwrap(),
    );
    let object = format!("{}/t/0/out", plexus_proto::JobId::random());
    let push = |rails: Vec<String>| pb::PushObjectRequest { object_id: object.clone(), rails, tag: 7 };
    let err = c.block_on(peer.push_object(push(vec!["127.0.0.1:9".into()]))).unwrap_err();
    assert_eq!(err.code(), tonic::Code::PermissionDenied, "{err:?}");
    assert!(err.message().contains("not all of them are registered by the calling worker"), "{}", err.message());
    // Its own rails pass the check (and the object is simply not there).
    let err = c.block_on(peer.push_object(push(w1.capacity.as_ref().unwrap().rails.clone()))).unwrap_err();
    assert_eq!(err.code(), tonic::Code::NotFound, "{err:?}");
}

#[test]
fn insecure_is_loopback_only_unless_the_user_insists() {
    let dir = tempfile::tempdir().unwrap();
    let out = std::process::Command::new(plexus_e2e::bin_dir().join("plexus-coordinator"))
        .args(["--insecure", "--listen", "0.0.0.0:0", "--data-dir"])
        .arg(dir.path())
        .output()
        .unwrap();
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("--insecure-i-know"), "{}", describe(&out));

    // On loopback it runs a job, and says in its log that it is insecure.
    let c = Cluster::start(ClusterConfig { workers: 1, insecure: true, ..Default::default() });
    let job = c.submit("one.toml", JOB);
    assert_eq!(c.wait_job(&job, Duration::from_secs(60)).state, pb::JobState::Succeeded as i32);
    assert!(c.coordinator_log().contains("running with --insecure"));
}

/// `plexus up` never writes a token into a log, and its logs are owner-only: the coordinator's
/// first start says where the admin token is, not what it is.
#[test]
fn plexus_up_logs_no_token_and_keeps_its_logs_owner_only() {
    use std::os::unix::fs::PermissionsExt;
    let home = tempfile::tempdir().unwrap();
    let out_path = home.path().join("up.out");
    let mut up = std::process::Command::new(plexus_e2e::bin_dir().join("plexus"))
        .args(["up", "--workers", "1", "--port", "0", "--cpus", "1"])
        .current_dir(home.path())
        .env_remove("PLEXUS_COORDINATOR")
        .env_remove("PLEXUS_TOKEN")
        .env_remove("PLEXUS_TOKEN_FILE")
        .env_remove("PLEXUS_CA")
        .env("PLEXUS_CONFIG_DIR", home.path().join("config"))
        .stdin(std::process::Stdio::null())
        .stdout(std::fs::File::create(&out_path).unwrap())
        .stderr(std::fs::File::create(home.path().join("up.err")).unwrap())
        .spawn()
        .expect("starting plexus up");
    let deadline = Instant::now() + Duration::from_secs(60);
    while !std::fs::read_to_string(&out_path).unwrap_or_default().contains("export PLEXUS_TOKEN_FILE=") {
        let exited = up.try_wait().unwrap();
        let err = std::fs::read_to_string(home.path().join("up.err")).unwrap_or_default();
        assert!(exited.is_none() && Instant::now() < deadline, "plexus up did not come up ({exited:?}):\n{err}");
        std::thread::sleep(Duration::from_millis(100));
    }
    let plexus = home.path().join(".plexus");
    let token = std::fs::read_to_string(plexus.join("coordinator/admin.token")).unwrap();
    let secret = token.trim();
    assert!(secret.len() > 20, "{secret}");
    let mode = |p: &std::path::Path| std::fs::metadata(p).unwrap().permissions().mode() & 0o777;
    let logs = plexus.join("logs");
    assert_eq!(mode(&logs), 0o700, "{}", logs.display());
    assert_eq!(mode(&plexus.join("coordinator")), 0o700, "the coordinator's data dir");
    let mut seen = 0;
    for entry in std::fs::read_dir(&logs).unwrap() {
        let p = entry.unwrap().path();
        let text = std::fs::read_to_string(&p).unwrap();
        assert!(!text.contains(secret), "{} holds the admin token:\n{text}", p.display());
        assert_eq!(mode(&p), 0o600, "{}", p.display());
        seen += 1;
    }
    assert!(seen >= 2, "the coordinator's and the worker's logs");
    let coordinator_log = std::fs::read_to_string(logs.join("coordinator.log")).unwrap();
    assert!(coordinator_log.contains("admin token is in"), "it says where the token is:\n{coordinator_log}");
    // SAFETY: a signal to the child this test started.
    unsafe { libc::kill(up.id() as i32, libc::SIGTERM) };
    assert!(up.wait().unwrap().success());
}

/// `Join` as a join-token holder would call it: TLS without a client certificate, the token.
fn join(c: &Cluster, worker_id: &str, public_key: Vec<u8>) -> Result<pb::JoinResponse, tonic::Status> {
    let token = std::fs::read_to_string(c.join_token_file()).expect("the join token");
    let token = plexus_security::Token::parse(token.trim()).unwrap();
    let mut client = pb::worker_service_client::WorkerServiceClient::with_interceptor(
        c.channel().unwrap(),
        tls::Bearer::new(Some(&token)),
    );
    let req = pb::JoinRequest { worker_id: worker_id.to_string(), public_key };
    c.block_on(client.join(req)).map(|r| r.into_inner())
}

/// Issue 29: a join-token holder took over a live worker's id (`Join` with its id returned a
/// certificate) and locked the real worker out for good.
#[test]
fn a_join_may_not_take_over_a_live_workers_id_until_an_admin_revokes_it() {
    let mut c = Cluster::start(ClusterConfig { workers: 1, ..Default::default() });
    let victim = c.worker_id(0);
    let hostile = plexus_security::WorkerKey::generate().unwrap();

    // Refused, naming the id and what an admin does about it.
    let err = join(&c, &victim, hostile.public_key()).unwrap_err();
    assert_eq!(err.code(), tonic::Code::AlreadyExists, "{err:?}");
    assert!(
        err.message().contains(&victim) && err.message().contains(&format!("token revoke-worker {victim}")),
        "{}",
        err.message()
    );

    // The real worker keeps working, and after a restart registers again with its tls/ dir.
    let job = c.submit("one.toml", JOB);
    assert_eq!(c.wait_job(&job, Duration::from_secs(60)).state, pb::JobState::Succeeded as i32);
    let registered = |c: &Cluster| c.worker_log(0).matches("registered with the coordinator").count();
    let before = registered(&c);
    c.kill_worker(0);
    c.start_worker(0);
    c.wait_for("worker 0 registered again", Duration::from_secs(30), |c| (registered(c) > before).then_some(()));
    c.wait_workers_alive(1);
    assert!(!c.worker_log(0).contains("Unauthenticated"), "{}", c.worker_log(0));
    let job = c.submit("one.toml", JOB);
    assert_eq!(c.wait_job(&job, Duration::from_secs(60)).state, pb::JobState::Succeeded as i32);

    // A public key that is not a point on the curve: refused, naming it.
    let mut bad = vec![0u8; 65];
    bad[0] = 4;
    let err = join(&c, &plexus_proto::WorkerId::random().to_string(), bad).unwrap_err();
    assert_eq!(err.code(), tonic::Code::InvalidArgument, "{err:?}");
    assert!(err.message().contains("not a point on the P-256 curve"), "{}", err.message());

    // The worker is gone for good: an admin revokes its certificate, and the id may join again.
    c.kill_worker(0);
    let out = std::process::Command::new(c.bin.join("plexus-coordinator"))
        .args(["--coordinator", &c.url, "--data-dir"])
        .arg(c.path("coordinator"))
        .args(["token", "revoke-worker", &victim])
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", describe(&out));
    let issued = join(&c, &victim, hostile.public_key()).expect("a join after the revocation");
    assert!(issued.certificate.starts_with("-----BEGIN CERTIFICATE-----"));
}
