//! `plexus up`: an embedded local cluster. Starts `plexus-coordinator` and N `plexus-worker`
//! processes as children through the one launcher ([`plexus_launch::LocalCluster`]; logs in
//! `DIR/logs/`), waits until the coordinator answers and every worker is alive, prints
//! `coordinator: <URL>` on stdout, and runs until Ctrl-C or SIGTERM; then it stops the children
//! (SIGTERM, then SIGKILL after a grace period) and exits 0.
//!
//! Children run in their own process group, so a Ctrl-C in the terminal reaches only `plexus up`,
//! which then stops them in order; on Linux they also get SIGTERM should `plexus up` itself die
//! without cleaning up (killed with SIGKILL, say).

use std::io::Write;
use std::net::TcpListener;
use std::path::Path;
use std::process::ExitCode;
use std::time::Duration;

use anyhow::{Context, bail};
use plexus_launch::{Http, LocalCluster, programs};
use plexus_proto::pb::ListWorkersRequest;
use tokio::signal::unix::{Signal, SignalKind, signal};
use tokio::time::Instant;

use crate::args::UpArgs;
use crate::client::{self, Client};
use crate::output;

/// How long the coordinator, and then the workers, may take to come up.
const READY_TIMEOUT: Duration = Duration::from_secs(30);
/// How long children get between SIGTERM and SIGKILL.
const STOP_GRACE: Duration = Duration::from_secs(5);
/// How often children and the coordinator are polled.
const POLL: Duration = Duration::from_millis(200);
/// How many earlier runs' logs `plexus up` keeps beside the current one (`x.log.1` is the run
/// before, up to `x.log.5`): enough to look back at a crash after a restart or two, bounded so a
/// cluster restarted in a loop does not fill the disk.
const KEPT_LOGS: usize = 5;

pub async fn run(args: &UpArgs) -> anyhow::Result<ExitCode> {
    let mut builder = LocalCluster::builder(&args.dir).coordinator_program(programs::find(programs::COORDINATOR)?);
    if args.workers > 0 {
        builder = builder.worker_program(programs::find(programs::WORKER)?);
    }
    let port = choose_port(args.port)?;
    let http = dashboard_port(args)?;
    // Installed before any child starts, so a Ctrl-C during start-up still stops them cleanly.
    let mut signals = Signals::new()?;
    let mut cluster = builder
        .log_dir(args.dir.join("logs"))
        .keep_logs(KEPT_LOGS)
        .port(port)
        .http(http)
        .placer(args.placer.as_deref())
        .workers(args.workers as usize)
        .number_workers_from(1)
        .cpus(args.cpus)
        .cache(args.cache.as_deref())
        .rails(&args.rails)
        .detach_from_terminal()
        .terminate_coordinators(true)
        .stop_grace(STOP_GRACE)
        .worker_args(match args.task_user.as_deref() {
            Some(u) => vec!["--task-user", if u == "worker" { "worker" } else { "auto" }],
            None => task_user_args(&args.dir),
        })
        .build()?;
    let result = run_cluster(&mut cluster, args, &mut signals).await;
    // Stopping blocks until the children exit; on a thread of its own, so this runtime goes on
    // closing the connection of `up`'s client, which the coordinator waits for before it exits.
    let killed = tokio::task::spawn_blocking(move || cluster.stop()).await.unwrap_or_default();
    let grace = output::human_duration(STOP_GRACE.as_millis() as u64);
    for name in killed {
        note(&format!("{name} did not stop within {grace}; killing it"));
    }
    result.map(|()| ExitCode::SUCCESS)
}

/// Starts the cluster and runs it until a signal. Returns early (and the caller stops whatever
/// was started) on a signal during start-up or on any failure.
async fn run_cluster(cluster: &mut LocalCluster, a: &UpArgs, signals: &mut Signals) -> anyhow::Result<()> {
    // Returns once the coordinator printed its "listening on" line, or failed to.
    cluster.start_coordinators()?;
    let url = cluster.url(0).context("the coordinator reported no URL")?.to_string();
    let Some(mut client) = wait_for_coordinator(cluster, signals, &url).await? else {
        return Ok(());
    };

    // Workers start only once the coordinator answers, so their first registration succeeds.
    cluster.start_workers()?;
    if !wait_for_workers(cluster, signals, &mut client, a.workers).await? {
        return Ok(());
    }

    let coordinator_dir = cluster.coordinator_dir(0);
    let coordinator_dir = std::path::absolute(&coordinator_dir).unwrap_or(coordinator_dir);
    output::print(&ready_lines(&url, &coordinator_dir))?;
    let http = cluster.http(0).map_or_else(|| "(none)".to_string(), |a| a.to_string());
    remember(a, &url, &coordinator_dir, cluster.http(0).map(|h| h.port()));
    note(&format!(
        "dashboard: http://{http}/login?token=$(cat {}) (metrics at /metrics)",
        cluster.admin_token_file().display()
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
        for e in cluster.reap() {
            note(&format!("{} exited ({}); see {}", e.name, e.status, e.log.display()));
        }
        if cluster.all_exited() {
            bail!("every process of the cluster has exited; see the logs in {}", cluster.log_dir().display());
        }
    }
}

/// Where the dashboard listens: `--http` (a port, `127.0.0.1:PORT`, or `none`), else the port
/// this cluster had before (so its URL stays the same across restarts), else 8265, else any
/// free port.
fn dashboard_port(args: &UpArgs) -> anyhow::Result<Http> {
    match args.http.as_deref() {
        Some("none") => return Ok(Http::Off),
        Some(v) => {
            let port = v.strip_prefix("127.0.0.1:").unwrap_or(v).parse::<u16>().map_err(|_| {
                anyhow::anyhow!("--http {v:?}: a port, 127.0.0.1:PORT or none (the dashboard listens on loopback)")
            })?;
            return Ok(Http::Port(choose_port(port)?));
        }
        None => {}
    }
    let before = std::fs::read_to_string(http_port_file(&args.dir)).ok().and_then(|t| t.trim().parse::<u16>().ok());
    let port = before
        .and_then(|p| choose_port(p).ok())
        .map_or_else(|| choose_port(DASHBOARD_PORT).or_else(|_| choose_port(0)), Ok)?;
    Ok(Http::Port(port))
}

fn http_port_file(dir: &Path) -> std::path::PathBuf {
    dir.join("coordinator").join("http-port")
}

/// Keeps what finds this cluster again: its URL (for the CLI run from its folder) and dashboard
/// port (for the next `up`) in its directory, and a context (made current). A failure is said,
/// not fatal: the cluster runs either way.
fn remember(a: &UpArgs, url: &str, coordinator_dir: &Path, http: Option<u16>) {
    let kept = std::fs::write(crate::context::up_url_file(&a.dir), format!("{url}\n"))
        .and_then(|()| http.map_or(Ok(()), |p| std::fs::write(http_port_file(&a.dir), format!("{p}\n"))));
    if let Err(e) = kept {
        note(&format!("could not keep the cluster's address in {}: {e}", a.dir.display()));
    }
    let name = a.context_name.clone().unwrap_or_else(|| default_context_name(&a.dir));
    let ctx = crate::context::Context {
        coordinator: url.to_string(),
        ca: Some(coordinator_dir.join("ca.pem")),
        token_file: Some(coordinator_dir.join("admin.token")),
        dashboard: http.map(|p| format!("http://127.0.0.1:{p}")),
    };
    match crate::context::remember(&name, ctx) {
        Ok(file) => {
            note(&format!("context {name} is current ({}); `plexus context list` shows the others", file.display()))
        }
        Err(e) => note(&format!("could not write the context {name}: {e:#}")),
    }
}

/// The name of the folder that holds `dir` (made a valid context name), else `local`.
fn default_context_name(dir: &Path) -> String {
    let abs = std::path::absolute(dir).unwrap_or_else(|_| dir.to_path_buf());
    let name: String = abs
        .parent()
        .and_then(Path::file_name)
        .map(|n| {
            n.to_string_lossy()
                .chars()
                .map(|c| if c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-') { c } else { '-' })
                .take(63)
                .collect()
        })
        .unwrap_or_default();
    if crate::context::check_name(&name).is_ok() { name } else { "local".to_string() }
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
    cluster: &mut LocalCluster,
    signals: &mut Signals,
    url: &str,
) -> anyhow::Result<Option<Client>> {
    let deadline = Instant::now() + READY_TIMEOUT;
    let log = cluster.coordinator_log(0);
    loop {
        if let Some(e) = cluster.reap().into_iter().next() {
            bail!("the {} exited ({}) before it answered; see {}", e.name, e.status, e.log.display());
        }
        // The coordinator writes its CA and admin token before it listens.
        let target = client::Target::of_up(url.to_string(), &cluster.coordinator_dir(0));
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
    client.list_workers(ListWorkersRequest::default()).await?;
    Ok(client)
}

/// Polls until `n` workers are alive. `false`: a signal came first.
async fn wait_for_workers(
    cluster: &mut LocalCluster,
    signals: &mut Signals,
    client: &mut Client,
    n: u32,
) -> anyhow::Result<bool> {
    let deadline = Instant::now() + READY_TIMEOUT;
    loop {
        if let Some(e) = cluster.reap().into_iter().next() {
            bail!("{} exited ({}) before the cluster was up; see {}", e.name, e.status, e.log.display());
        }
        let alive = match client.list_workers(ListWorkersRequest::default()).await {
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
                cluster.log_dir().display()
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

/// The workers' `--task-user`: their default (as root, a uid per job) unless, as root, the
/// cluster's directory lies below one that other users cannot search (a home directory, say):
/// tasks under uids of their own could not reach their work dirs, so they run as the workers'
/// user, which `up` says.
fn task_user_args(dir: &Path) -> Vec<&'static str> {
    use std::os::unix::fs::PermissionsExt;
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        return vec![];
    }
    let dir = std::path::absolute(dir).unwrap_or_else(|_| dir.to_path_buf());
    let closed = dir.ancestors().find(|d| std::fs::metadata(d).is_ok_and(|m| m.permissions().mode() & 0o001 == 0));
    match closed {
        Some(d) => {
            note(&format!(
                "{} is not searchable by other users, so tasks run as root, not as a uid per job \
                 (chmod o+x {} or start the cluster elsewhere to confine them)",
                d.display(),
                d.display()
            ));
            vec!["--task-user", "worker"]
        }
        None => vec![],
    }
}

/// A status line on stderr; stdout is kept for what scripts parse.
fn note(msg: &str) {
    let _ = writeln!(std::io::stderr(), "plexus up: {msg}");
}

/// Where `plexus up` serves the dashboard when the port is free (as the coordinator's default).
const DASHBOARD_PORT: u16 = 8265;

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

#[cfg(test)]
mod tests {
    use super::*;

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
}
