//! `plexus up`: an embedded local cluster. Starts `plexus-coordinator` and N `plexus-worker`
//! processes as children (logs in `DIR/logs/`), waits until the coordinator answers and every
//! worker is alive, prints `coordinator: <URL>` on stdout, and runs until Ctrl-C or SIGTERM;
//! then it stops the children (SIGTERM, then SIGKILL after a grace period) and exits 0.
//!
//! Children run in their own process group, so a Ctrl-C in the terminal reaches only `plexus up`,
//! which then stops them in order; on Linux they also get SIGTERM should `plexus up` itself die
//! without cleaning up (killed with SIGKILL, say).

use std::ffi::OsString;
use std::fs::File;
use std::io::Write;
use std::net::TcpListener;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{ExitCode, ExitStatus, Stdio};
use std::time::Duration;

use anyhow::{Context, bail};
use plexus_proto::pb::ListWorkersRequest;
use tokio::process::{Child, Command};
use tokio::signal::unix::{Signal, SignalKind, signal};
use tokio::time::Instant;

use crate::args::UpArgs;
use crate::client::{self, Client};
use crate::output;

pub const COORDINATOR_BIN: &str = "plexus-coordinator";
pub const WORKER_BIN: &str = "plexus-worker";

/// How long the coordinator, and then the workers, may take to come up.
const READY_TIMEOUT: Duration = Duration::from_secs(30);
/// How long children get between SIGTERM and SIGKILL.
const STOP_GRACE: Duration = Duration::from_secs(5);
/// How often children and the coordinator are polled.
const POLL: Duration = Duration::from_millis(200);

pub async fn run(args: &UpArgs) -> anyhow::Result<ExitCode> {
    let coordinator_bin = find_binary(COORDINATOR_BIN)?;
    let worker_bin = if args.workers > 0 { Some(find_binary(WORKER_BIN)?) } else { None };
    let port = choose_port(args.port)?;
    // The dashboard and /metrics: the usual 8265 when free, else any free port.
    let http_port = choose_port(DASHBOARD_PORT).or_else(|_| choose_port(0))?;
    let log_dir = args.dir.join("logs");
    std::fs::create_dir_all(&log_dir)
        .with_context(|| format!("cannot create the log directory {}", log_dir.display()))?;
    // Installed before any child starts, so a Ctrl-C during start-up still stops them cleanly.
    let mut signals = Signals::new()?;

    let plan = Plan { coordinator_bin, worker_bin, port, http_port, args, log_dir };
    let mut cluster = Cluster::default();
    let result = run_cluster(&plan, &mut cluster, &mut signals).await;
    cluster.stop(STOP_GRACE).await;
    result.map(|()| ExitCode::SUCCESS)
}

struct Plan<'a> {
    coordinator_bin: PathBuf,
    worker_bin: Option<PathBuf>,
    port: u16,
    http_port: u16,
    args: &'a UpArgs,
    log_dir: PathBuf,
}

impl Plan<'_> {
    fn url(&self) -> String {
        format!("https://127.0.0.1:{}", self.port)
    }

    /// The coordinator's data dir, where it writes `ca.pem`, `admin.token` and `join.token`.
    fn coordinator_dir(&self) -> PathBuf {
        self.args.dir.join("coordinator")
    }
}

/// Starts the cluster and runs it until a signal. Returns early (and the caller stops whatever
/// was started) on a signal during start-up or on any failure.
async fn run_cluster(plan: &Plan<'_>, cluster: &mut Cluster, signals: &mut Signals) -> anyhow::Result<()> {
    let url = plan.url();
    let a = plan.args;
    cluster.spawn(
        "coordinator".to_string(),
        &plan.coordinator_bin,
        &coordinator_args(plan.port, plan.http_port, &a.dir, a.placer.as_deref()),
        plan.log_dir.join("coordinator.log"),
    )?;
    let Some(mut client) = wait_for_coordinator(cluster, signals, &url, &plan.coordinator_dir()).await? else {
        return Ok(());
    };

    // Workers start only once the coordinator answers, so their first registration succeeds.
    if let Some(worker_bin) = &plan.worker_bin {
        for i in 1..=a.workers {
            cluster.spawn(
                format!("worker-{i}"),
                worker_bin,
                &worker_args(&url, &a.dir, i, a.cpus, a.cache.as_deref(), &a.rails),
                plan.log_dir.join(format!("worker-{i}.log")),
            )?;
        }
    }
    if !wait_for_workers(cluster, signals, &mut client, a.workers, &plan.log_dir).await? {
        return Ok(());
    }

    output::print(&ready_lines(
        &url,
        &std::path::absolute(plan.coordinator_dir()).unwrap_or_else(|_| plan.coordinator_dir()),
    ))?;
    note(&format!(
        "dashboard: http://127.0.0.1:{}/login?token=$(cat {}) (metrics at /metrics)",
        plan.http_port,
        plan.coordinator_dir().join("admin.token").display()
    ));
    note(&format!(
        "coordinator and {} worker(s) running; data and logs in {}; press Ctrl-C to stop",
        a.workers,
        a.dir.display()
    ));

    loop {
        tokio::select! {
            sig = signals.recv() => {
                note(&format!("{sig}; stopping the cluster"));
                return Ok(());
            }
            _ = tokio::time::sleep(POLL) => {}
        }
        // A dead child is reported and the rest keep running: the others may still be useful
        // (and a worker dying is exactly what one may be testing).
        for (name, status, log) in cluster.reap() {
            note(&format!("{name} exited ({status}); see {}", log.display()));
        }
        if cluster.all_exited() {
            bail!("every process of the cluster has exited; see the logs in {}", plan.log_dir.display());
        }
    }
}

/// The lines scripts read: `coordinator: <URL>`, and the exports that let the CLI reach the
/// cluster from any directory (the CA, and the admin token's file, in the coordinator's dir).
fn ready_lines(url: &str, coordinator_dir: &Path) -> String {
    let ca = coordinator_dir.join("ca.pem");
    let token = coordinator_dir.join("admin.token");
    format!(
        "coordinator: {url}\nexport PLEXUS_COORDINATOR={url}\nexport PLEXUS_CA={}\nexport PLEXUS_TOKEN_FILE={}\n",
        ca.display(),
        token.display()
    )
}

/// Polls `ListWorkers` until the coordinator answers. `None`: a signal came first.
async fn wait_for_coordinator(
    cluster: &mut Cluster,
    signals: &mut Signals,
    url: &str,
    coordinator_dir: &Path,
) -> anyhow::Result<Option<Client>> {
    let deadline = Instant::now() + READY_TIMEOUT;
    let log = cluster.log_of("coordinator");
    loop {
        if let Some((name, status, log)) = cluster.reap().into_iter().next() {
            bail!("the {name} exited ({status}) before it answered; see {}", log.display());
        }
        // The coordinator writes its CA and admin token before it listens.
        let target = client::Target::of_up(url.to_string(), coordinator_dir);
        let last_error = match async { list_workers(&target?).await }.await {
            Ok(client) => return Ok(Some(client)),
            Err(e) => client::render_error(&e, url).trim_start_matches("error: ").to_string(),
        };
        if Instant::now() >= deadline {
            bail!(
                "the coordinator did not answer at {url} within {} s ({last_error}); see {}",
                READY_TIMEOUT.as_secs(),
                log.display()
            );
        }
        tokio::select! {
            sig = signals.recv() => {
                note(&format!("{sig} while starting; stopping"));
                return Ok(None);
            }
            _ = tokio::time::sleep(POLL) => {}
        }
    }
}

/// A client, once the coordinator has answered a call.
async fn list_workers(target: &client::Target) -> anyhow::Result<Client> {
    let mut client = client::connect(target).await?;
    client.list_workers(ListWorkersRequest {}).await?;
    Ok(client)
}

/// Polls until `n` workers are alive. `false`: a signal came first.
async fn wait_for_workers(
    cluster: &mut Cluster,
    signals: &mut Signals,
    client: &mut Client,
    n: u32,
    log_dir: &Path,
) -> anyhow::Result<bool> {
    let deadline = Instant::now() + READY_TIMEOUT;
    loop {
        if let Some((name, status, log)) = cluster.reap().into_iter().next() {
            bail!("{name} exited ({status}) before the cluster was up; see {}", log.display());
        }
        let alive = match client.list_workers(ListWorkersRequest {}).await {
            Ok(r) => r.into_inner().workers.iter().filter(|w| w.alive).count(),
            Err(status) => bail!("the coordinator stopped answering: {}", client::one_line(status.message())),
        };
        if alive >= n as usize {
            return Ok(true);
        }
        if Instant::now() >= deadline {
            bail!(
                "only {alive} of {n} workers registered with the coordinator within {} s; see the worker logs in {} \
                 (worker-<i>.log) and coordinator.log",
                READY_TIMEOUT.as_secs(),
                log_dir.display()
            );
        }
        tokio::select! {
            sig = signals.recv() => {
                note(&format!("{sig} while starting; stopping"));
                return Ok(false);
            }
            _ = tokio::time::sleep(POLL) => {}
        }
    }
}

/// A status line on stderr; stdout is kept for what scripts parse.
fn note(msg: &str) {
    let _ = writeln!(std::io::stderr(), "plexus up: {msg}");
}

/// Where `plexus up` serves the dashboard when the port is free (as the coordinator's default).
const DASHBOARD_PORT: u16 = 8265;

fn coordinator_args(port: u16, http_port: u16, dir: &Path, placer: Option<&str>) -> Vec<OsString> {
    let mut args: Vec<OsString> = vec![
        "--listen".into(),
        format!("127.0.0.1:{port}").into(),
        "--http".into(),
        format!("127.0.0.1:{http_port}").into(),
        "--data-dir".into(),
        dir.join("coordinator").into(),
    ];
    if let Some(p) = placer {
        args.extend(["--placer".into(), p.into()]);
    }
    args
}

/// A worker of the cluster: it joins with the coordinator's join token the first time, and
/// keeps its certificate in its data dir after that.
fn worker_args(
    url: &str,
    dir: &Path,
    i: u32,
    cpus: Option<u32>,
    cache: Option<&str>,
    rails: &[std::net::IpAddr],
) -> Vec<OsString> {
    let coordinator = dir.join("coordinator");
    let mut args: Vec<OsString> = vec![
        "--coordinator".into(),
        url.into(),
        "--data-dir".into(),
        dir.join(format!("worker-{i}")).into(),
        "--ca".into(),
        coordinator.join("ca.pem").into(),
        "--join-token-file".into(),
        coordinator.join("join.token").into(),
    ];
    if let Some(c) = cpus {
        args.extend(["--cpus".into(), c.to_string().into()]);
    }
    if let Some(c) = cache {
        args.extend(["--cache".into(), c.into()]);
    }
    for r in rails {
        args.extend(["--rail".into(), r.to_string().into()]);
    }
    args
}

/// `port`, checked to be free, or for 0 a free port chosen here: the coordinator cannot report
/// a port it picked itself. (Another process could take it before the coordinator binds it;
/// the coordinator then exits and `up` says so, pointing at its log.)
fn choose_port(port: u16) -> anyhow::Result<u16> {
    match TcpListener::bind(("127.0.0.1", port)) {
        Ok(listener) => Ok(listener.local_addr().context("cannot read the address of a probe socket")?.port()),
        Err(e) if port == 0 => Err(e).context("cannot find a free port on 127.0.0.1"),
        Err(e) => bail!(
            "port {port} on 127.0.0.1 is not free ({e}); is another `plexus up` running? \
             Pick another with --port, or --port 0 for any free one"
        ),
    }
}

/// The program next to the running `plexus` (how `cargo build` lays them out), else on PATH.
fn find_binary(name: &str) -> anyhow::Result<PathBuf> {
    let exe_dir = std::env::current_exe().ok().and_then(|p| p.parent().map(Path::to_path_buf));
    let mut dirs: Vec<PathBuf> = exe_dir.iter().cloned().collect();
    if let Some(path) = std::env::var_os("PATH") {
        dirs.extend(std::env::split_paths(&path));
    }
    search(name, &dirs).with_context(|| {
        let here = exe_dir.map(|d| d.display().to_string()).unwrap_or_else(|| "?".to_string());
        format!("cannot find the {name} program: it is neither next to plexus (in {here}) nor on PATH; build it with `cargo build -p {name}`")
    })
}

fn search(name: &str, dirs: &[PathBuf]) -> Option<PathBuf> {
    dirs.iter().map(|d| d.join(name)).find(|p| is_executable(p))
}

fn is_executable(p: &Path) -> bool {
    std::fs::metadata(p).is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
}

/// SIGINT and SIGTERM, as one stream of "stop" requests.
struct Signals {
    interrupt: Signal,
    terminate: Signal,
}

impl Signals {
    fn new() -> anyhow::Result<Self> {
        Ok(Signals {
            interrupt: signal(SignalKind::interrupt()).context("cannot listen for SIGINT")?,
            terminate: signal(SignalKind::terminate()).context("cannot listen for SIGTERM")?,
        })
    }

    async fn recv(&mut self) -> &'static str {
        tokio::select! {
            _ = self.interrupt.recv() => "interrupted",
            _ = self.terminate.recv() => "terminated",
        }
    }
}

/// How many earlier runs' logs `plexus up` keeps beside the current one (`x.log.1` is the run
/// before, up to `x.log.5`): enough to look back at a crash after a restart or two, bounded so a
/// cluster restarted in a loop does not fill the disk.
const KEPT_LOGS: usize = 5;

/// Moves `log` to `log.1`, `log.1` to `log.2`, … keeping `keep` old ones (the oldest is dropped).
/// A missing file is not an error: there was no earlier run.
fn rotate(log: &Path, keep: usize) -> std::io::Result<()> {
    let numbered = |n: usize| {
        let mut name = log.as_os_str().to_owned();
        name.push(format!(".{n}"));
        PathBuf::from(name)
    };
    if keep == 0 || !log.exists() {
        return Ok(());
    }
    match std::fs::remove_file(numbered(keep)) {
        Err(e) if e.kind() != std::io::ErrorKind::NotFound => return Err(e),
        _ => {}
    }
    for n in (1..keep).rev() {
        match std::fs::rename(numbered(n), numbered(n + 1)) {
            Err(e) if e.kind() != std::io::ErrorKind::NotFound => return Err(e),
            _ => {}
        }
    }
    std::fs::rename(log, numbered(1))
}

/// The child processes of `up`.
#[derive(Default)]
struct Cluster {
    members: Vec<Member>,
}

struct Member {
    name: String,
    log: PathBuf,
    child: Child,
    exit: Option<ExitStatus>,
}

impl Cluster {
    fn spawn(&mut self, name: String, program: &Path, args: &[OsString], log: PathBuf) -> anyhow::Result<()> {
        rotate(&log, KEPT_LOGS).with_context(|| format!("cannot rotate the previous run's log {}", log.display()))?;
        let out = File::create(&log).with_context(|| format!("cannot create the log file {}", log.display()))?;
        let err = out.try_clone().with_context(|| format!("cannot open the log file {}", log.display()))?;
        let mut cmd = Command::new(program);
        cmd.args(args)
            .stdin(Stdio::null())
            .stdout(out)
            .stderr(err)
            // Own process group: the terminal's Ctrl-C goes to `up` only, which stops children
            // itself. kill_on_drop is the last resort should `up` unwind without `stop`.
            .process_group(0)
            .kill_on_drop(true);
        #[cfg(target_os = "linux")]
        {
            let parent = std::process::id() as libc::pid_t;
            // SAFETY: runs in the forked child before exec and only makes async-signal-safe
            // calls (prctl, getppid, _exit), touching no memory shared with the parent.
            // PR_SET_PDEATHSIG fires when the spawning *thread* exits; children are spawned from
            // the main thread (the CLI's runtime is current-thread), which lives as long as `up`.
            unsafe {
                cmd.pre_exec(move || {
                    if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGTERM as libc::c_ulong) != 0 {
                        return Err(std::io::Error::last_os_error());
                    }
                    // The parent may have died before prctl took effect.
                    if libc::getppid() != parent {
                        libc::_exit(1);
                    }
                    Ok(())
                });
            }
        }
        let child = cmd.spawn().with_context(|| format!("cannot start {} ({})", name, program.display()))?;
        self.members.push(Member { name, log, child, exit: None });
        Ok(())
    }

    fn log_of(&self, name: &str) -> PathBuf {
        self.members.iter().find(|m| m.name == name).map(|m| m.log.clone()).unwrap_or_default()
    }

    /// Children that exited since the last call: (name, status, log).
    fn reap(&mut self) -> Vec<(String, ExitStatus, PathBuf)> {
        let mut exited = Vec::new();
        for m in self.members.iter_mut().filter(|m| m.exit.is_none()) {
            if let Ok(Some(status)) = m.child.try_wait() {
                m.exit = Some(status);
                exited.push((m.name.clone(), status, m.log.clone()));
            }
        }
        exited
    }

    fn all_exited(&self) -> bool {
        self.members.iter().all(|m| m.exit.is_some())
    }

    /// SIGTERM to every running child, up to `grace` for them to exit, then SIGKILL.
    async fn stop(&mut self, grace: Duration) {
        for m in self.members.iter().filter(|m| m.exit.is_none()) {
            // Not yet reaped, so the pid is still this child's (at worst a zombie).
            if let Some(pid) = m.child.id() {
                // SAFETY: kill(2) has no memory-safety preconditions.
                unsafe { libc::kill(pid as libc::pid_t, libc::SIGTERM) };
            }
        }
        let deadline = Instant::now() + grace;
        while !self.all_exited() && Instant::now() < deadline {
            tokio::time::sleep(Duration::from_millis(50)).await;
            self.reap();
        }
        for m in self.members.iter_mut().filter(|m| m.exit.is_none()) {
            note(&format!(
                "{} did not stop within {}; killing it",
                m.name,
                output::human_duration(grace.as_millis() as u64)
            ));
            let _ = m.child.start_kill();
            m.exit = m.child.wait().await.ok();
        }
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn logs_of_earlier_runs_are_rotated_not_truncated() {
        let dir = tempfile::tempdir().unwrap();
        let log = dir.path().join("coordinator.log");
        rotate(&log, 2).unwrap(); // nothing yet: nothing to do
        for run in 1..=4 {
            rotate(&log, 2).unwrap();
            std::fs::write(&log, format!("run {run}")).unwrap();
        }
        let read = |p: &str| std::fs::read_to_string(dir.path().join(p)).ok();
        assert_eq!(read("coordinator.log").as_deref(), Some("run 4"));
        assert_eq!(read("coordinator.log.1").as_deref(), Some("run 3"));
        assert_eq!(read("coordinator.log.2").as_deref(), Some("run 2"));
        assert_eq!(read("coordinator.log.3"), None, "only two earlier runs are kept");
    }

    use super::*;

    fn os(v: &[&str]) -> Vec<OsString> {
        v.iter().map(OsString::from).collect()
    }

    #[test]
    fn coordinator_command_line() {
        assert_eq!(
            coordinator_args(50051, 8265, Path::new(".plexus"), None),
            os(&["--listen", "127.0.0.1:50051", "--http", "127.0.0.1:8265", "--data-dir", ".plexus/coordinator"])
        );
        assert_eq!(
            coordinator_args(7, 8, Path::new("/d"), Some("learned")),
            os(&[
                "--listen",
                "127.0.0.1:7",
                "--http",
                "127.0.0.1:8",
                "--data-dir",
                "/d/coordinator",
                "--placer",
                "learned"
            ])
        );
    }

    #[test]
    fn worker_command_line() {
        assert_eq!(
            worker_args("https://127.0.0.1:50051", Path::new(".plexus"), 2, None, None, &[]),
            os(&[
                "--coordinator",
                "https://127.0.0.1:50051",
                "--data-dir",
                ".plexus/worker-2",
                "--ca",
                ".plexus/coordinator/ca.pem",
                "--join-token-file",
                ".plexus/coordinator/join.token"
            ])
        );
        assert_eq!(
            worker_args(
                "https://127.0.0.1:9",
                Path::new("/d"),
                1,
                Some(4),
                Some("256MiB"),
                &["127.0.0.2".parse().unwrap(), "127.0.0.3".parse().unwrap()]
            ),
            os(&[
                "--coordinator",
                "https://127.0.0.1:9",
                "--data-dir",
                "/d/worker-1",
                "--ca",
                "/d/coordinator/ca.pem",
                "--join-token-file",
                "/d/coordinator/join.token",
                "--cpus",
                "4",
                "--cache",
                "256MiB",
                "--rail",
                "127.0.0.2",
                "--rail",
                "127.0.0.3"
            ])
        );
    }

    #[test]
    fn ready_lines_are_parseable() {
        let text = ready_lines("https://127.0.0.1:4242", Path::new("/d/coordinator"));
        let mut lines = text.lines();
        assert_eq!(lines.next(), Some("coordinator: https://127.0.0.1:4242"));
        assert_eq!(lines.next(), Some("export PLEXUS_COORDINATOR=https://127.0.0.1:4242"));
        assert_eq!(lines.next(), Some("export PLEXUS_CA=/d/coordinator/ca.pem"));
        assert_eq!(lines.next(), Some("export PLEXUS_TOKEN_FILE=/d/coordinator/admin.token"));
        assert_eq!(lines.next(), None);
    }

    #[test]
    fn port_zero_picks_a_free_port_and_a_taken_port_is_refused() {
        let port = choose_port(0).unwrap();
        assert_ne!(port, 0);
        let held = TcpListener::bind("127.0.0.1:0").unwrap();
        let taken = held.local_addr().unwrap().port();
        let err = choose_port(taken).unwrap_err().to_string();
        assert!(err.contains(&format!("port {taken} on 127.0.0.1 is not free")), "{err}");
    }

    #[test]
    fn binaries_are_searched_in_order_and_must_be_executable() {
        let a = tempfile::tempdir().unwrap();
        let b = tempfile::tempdir().unwrap();
        let dirs = vec![a.path().to_path_buf(), b.path().to_path_buf()];
        assert_eq!(search("plexus-worker", &dirs), None);

        let not_exec = a.path().join("plexus-worker");
        std::fs::write(&not_exec, "").unwrap();
        std::fs::set_permissions(&not_exec, std::fs::Permissions::from_mode(0o644)).unwrap();
        let exec = b.path().join("plexus-worker");
        std::fs::write(&exec, "").unwrap();
        std::fs::set_permissions(&exec, std::fs::Permissions::from_mode(0o755)).unwrap();
        assert_eq!(search("plexus-worker", &dirs), Some(exec));

        std::fs::set_permissions(&not_exec, std::fs::Permissions::from_mode(0o755)).unwrap();
        assert_eq!(search("plexus-worker", &dirs), Some(not_exec), "the first directory wins");
        std::fs::create_dir(a.path().join("plexus-coordinator")).unwrap();
        assert_eq!(search("plexus-coordinator", &dirs), None, "a directory is not a program");
    }

    #[test]
    fn missing_binary_error_says_how_to_build_it() {
        let err = find_binary("plexus-no-such-program").unwrap_err().to_string();
        assert!(err.contains("cannot find the plexus-no-such-program program"), "{err}");
        assert!(err.contains("cargo build -p plexus-no-such-program"), "{err}");
    }

    /// Polls until every child has exited; bounded so a bug fails the test instead of hanging it.
    async fn reap_all(cluster: &mut Cluster) -> Vec<(String, ExitStatus, PathBuf)> {
        let mut exited = Vec::new();
        for _ in 0..1000 {
            exited.extend(cluster.reap());
            if cluster.all_exited() {
                break;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        exited
    }

    fn sh(cluster: &mut Cluster, name: &str, script: &str, log: PathBuf) {
        cluster.spawn(name.to_string(), Path::new("/bin/sh"), &os(&["-c", script]), log).unwrap();
    }

    #[tokio::test]
    async fn children_log_to_their_file_and_exits_are_reported_once() {
        use std::os::unix::process::ExitStatusExt;
        let dir = tempfile::tempdir().unwrap();
        let log = dir.path().join("worker-1.log");
        let mut cluster = Cluster::default();
        sh(&mut cluster, "worker-1", "echo to-stdout; echo to-stderr >&2; exit 3", log.clone());
        let exited = reap_all(&mut cluster).await;
        assert_eq!(exited.len(), 1);
        assert_eq!(exited[0].0, "worker-1");
        assert_eq!(exited[0].1.code(), Some(3));
        assert_eq!(exited[0].2, log);
        assert!(cluster.reap().is_empty(), "reported only once");
        assert_eq!(std::fs::read_to_string(&log).unwrap(), "to-stdout\nto-stderr\n");
        assert_eq!(cluster.log_of("worker-1"), log);
        assert_eq!(exited[0].1.signal(), None);
    }

    #[tokio::test]
    async fn stop_terminates_then_kills_stragglers() {
        use std::os::unix::process::ExitStatusExt;
        let dir = tempfile::tempdir().unwrap();
        let mut cluster = Cluster::default();
        sh(&mut cluster, "polite", "exec sleep 60", dir.path().join("polite.log"));
        // Ignores SIGTERM (the disposition survives exec), so only SIGKILL ends it. It says when
        // the trap is set: a SIGTERM before that would end it like the polite one.
        let log = dir.path().join("stubborn.log");
        sh(&mut cluster, "stubborn", "trap '' TERM; echo ready; exec sleep 60", log.clone());
        for _ in 0..1000 {
            if std::fs::read_to_string(&log).unwrap_or_default() == "ready\n" {
                break;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        cluster.stop(Duration::from_millis(300)).await;
        assert!(cluster.all_exited());
        let signals: Vec<Option<i32>> = cluster.members.iter().map(|m| m.exit.and_then(|s| s.signal())).collect();
        assert_eq!(signals, vec![Some(libc::SIGTERM), Some(libc::SIGKILL)]);
    }

    #[tokio::test]
    async fn a_program_that_cannot_start_is_named() {
        let dir = tempfile::tempdir().unwrap();
        let mut cluster = Cluster::default();
        let err =
            cluster.spawn("worker-1".into(), &dir.path().join("nope"), &[], dir.path().join("w.log")).unwrap_err();
        assert!(format!("{err:#}").starts_with("cannot start worker-1 ("), "{err:#}");
    }
}
