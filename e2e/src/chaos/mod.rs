//! The chaos run (issue 29), the reliability benchmark: a real cluster on loopback runs a seeded
//! stream of jobs for a fixed time while seeded faults hit it, then an invariant checker says
//! what broke. `bench --bin chaos` runs it at any length; `e2e/tests/chaos.rs` runs a CI-sized one.
//!
//! # Layout
//! * [`jobs`]: the job stream (DAGs, gangs, a collective, large outputs), each task appending its
//!   life to a ledger, each output's expected bytes.
//! * [`faults`]: the fault plan drawn from the seed, and the thread that injects and heals it.
//! * [`cluster`]: the cluster ([`plexus_launch::LocalCluster`], etcd with `ha`, the small disk,
//!   the slow disk, the namespaced worker).
//! * [`rig`]: the network namespace a partition cuts off and the disk a fault slows down.
//! * [`client`]: calls to whichever coordinator serves, `plexus get`.
//! * [`ledger`]: attempts' spans and the overlaps among them.
//! * [`report`]: the verdict and its table.
//!
//! The invariants: no acknowledged job is lost; every job ends within `settle` after the last
//! fault is healed; no two attempts of one subtask are alive at the same time (from the ledger);
//! every output of a succeeded job holds exactly its expected bytes (fetched with `plexus get`).
//! The fault plan and the job stream are functions of the seed; the interleaving with the
//! processes is not, so a seed reproduces the same faults on the same jobs, not the same race.

pub mod client;
pub mod cluster;
pub mod faults;
pub mod jobs;
pub mod ledger;
pub mod report;
pub mod rig;

use std::path::Path;
use std::time::{Duration, Instant};

use rand::SeedableRng;
use rand::rngs::StdRng;

use client::{CallError, Client, JobState};
use cluster::ChaosCluster;
use jobs::JobPlan;
use report::{Mismatch, Report};

/// How a chaos run goes.
#[derive(Clone, Debug)]
pub struct Config {
    pub seed: u64,
    /// How long jobs are submitted and faults injected.
    pub duration: Duration,
    /// How long every job gets to end after the last fault is healed.
    pub settle: Duration,
    /// The mean pause between one fault's end and the next one's start.
    pub fault_every: Duration,
    pub workers: usize,
    /// etcd (3 members) and `coordinators` coordinators instead of one coordinator on sled.
    pub ha: bool,
    pub coordinators: usize,
    /// At most this many jobs running at once (the stream waits).
    pub max_in_flight: usize,
    /// Keep the run's directory (logs, ledger) even when nothing was violated; it is always kept
    /// when something was.
    pub keep: bool,
}

impl Default for Config {
    fn default() -> Self {
        Config {
            seed: 1,
            duration: Duration::from_secs(180),
            settle: Duration::from_secs(180),
            fault_every: Duration::from_secs(6),
            workers: 4,
            ha: false,
            coordinators: 3,
            max_in_flight: 4,
            keep: false,
        }
    }
}

impl Config {
    /// The `bench --bin chaos` command line that runs this configuration again.
    pub fn command_line(&self) -> String {
        let mut s = format!(
            "cargo run --release -p plexus-bench --bin chaos -- --seed {} --duration {} --settle {} --fault-every {} --workers {} --max-in-flight {}",
            self.seed,
            self.duration.as_secs(),
            self.settle.as_secs(),
            self.fault_every.as_secs(),
            self.workers,
            self.max_in_flight
        );
        if self.ha {
            s += &format!(" --ha --coordinators {}", self.coordinators);
        }
        s
    }
}

/// A job of the stream as the run follows it.
struct Tracked {
    plan: JobPlan,
    id: String,
    state: JobState,
    /// Whether its outputs were compared (`Some(true)`: all fetched; `Some(false)`: some could
    /// not be fetched and are tried again at the end).
    checked: Option<bool>,
}

/// Now, in ns since the epoch: the ledger's clock.
fn now_ns() -> u64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.as_nanos() as u64).unwrap_or(0)
}

/// Makes `dir` readable by anyone (a confined task runs as another user and appends to the
/// ledger beneath it), the ledger directory writable by anyone, and the ledger too.
fn open_up(dir: &Path, ledger_dir: &Path) -> Result<(), String> {
    use std::os::unix::fs::PermissionsExt;
    std::fs::create_dir_all(ledger_dir).map_err(|e| format!("creating {}: {e}", ledger_dir.display()))?;
    std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o755)).map_err(|e| e.to_string())?;
    std::fs::set_permissions(ledger_dir, std::fs::Permissions::from_mode(0o1777)).map_err(|e| e.to_string())?;
    // The ledger itself exists before any task runs, the directory owner's (root's) and writable
    // by anyone: tasks of different jobs run as different uids, and a file the first of them
    // made would be its own (0644 under the usual umask), closed to every later job.
    let ledger = ledger_dir.join("ledger");
    std::fs::File::create(&ledger).map_err(|e| format!("creating {}: {e}", ledger.display()))?;
    std::fs::set_permissions(&ledger, std::fs::Permissions::from_mode(0o666)).map_err(|e| e.to_string())
}

/// Runs the chaos run `config` with the Plexus programs in `bin`; `Err` when the cluster could
/// not be started at all. The report says which invariants held.
pub fn run(config: &Config, bin: &Path) -> Result<Report, String> {
    let dir = tempfile::Builder::new().prefix("plexus-chaos-").tempdir().map_err(|e| e.to_string())?;
    let ledger_dir = dir.path().join("ledger");
    open_up(dir.path(), &ledger_dir)?;
    let ledger = ledger_dir.join("ledger");
    let cluster =
        ChaosCluster::start(config.ha, config.coordinators, config.workers, &dir.path().join("cluster"), bin)?;
    let mut client = Client::new(cluster.access(bin)?);
    wait_serving(&mut client, config.workers)?;
    let mut report = Report {
        seed: config.seed,
        reproduce: config.command_line(),
        store: if config.ha {
            format!("etcd (3 members), {} coordinators", config.coordinators.max(2))
        } else {
            "sled".into()
        },
        workers: config.workers,
        duration_s: config.duration.as_secs(),
        settle_s: config.settle.as_secs(),
        start_ns: now_ns(),
        ..Default::default()
    };
    if let Err(why) = &cluster.partition {
        report.not_injected.push(("network partition".into(), why.clone()));
    }
    if let Err(why) = &cluster.slow_disk {
        report.not_injected.push(("slow disk".into(), why.clone()));
    }
    if let Some(why) = &cluster.no_small_disk {
        report.not_injected.push(("disk full".into(), why.clone()));
    }
    if !config.ha {
        report.not_injected.push(("kill -9 etcd member".into(), "sled store; --ha runs etcd".into()));
    }
    let shape = faults::Shape {
        duration: config.duration,
        every: config.fault_every,
        workers: config.workers,
        coordinators: cluster.launch.coordinator_count(),
        etcd_members: if config.ha { 3 } else { 0 },
        small_disk: cluster.small_disk.is_some(),
        partitionable: cluster.partition.as_ref().ok().map(|p| p.0),
        slow_disk: cluster.slow_disk.as_ref().ok().map(|d| d.0),
    };
    let plan = faults::plan(config.seed, &shape);
    let start = Instant::now();
    let injector = std::thread::spawn(move || faults::run(cluster, plan, start));
    let scratch = dir.path().join("fetched");
    let mut tracked = stream(config, &mut client, &ledger, &scratch, &mut report, start);
    let (cluster, injected) = injector.join().map_err(|_| "the fault thread panicked".to_string())?;
    report.faults = injected;
    settle(config, &mut client, &mut tracked, &scratch, &mut report);
    check(&ledger, &mut report);
    let kept = !report.violations().is_empty() || config.keep;
    drop(cluster);
    if kept {
        report.kept = Some(dir.keep().display().to_string());
    }
    Ok(report)
}

/// Waits until a coordinator serves and sees `workers` live workers.
fn wait_serving(client: &mut Client, workers: usize) -> Result<(), String> {
    let start = Instant::now();
    while start.elapsed() < Duration::from_secs(60) {
        if let Ok(n) = client.live_workers()
            && n >= workers
        {
            return Ok(());
        }
        std::thread::sleep(Duration::from_millis(200));
    }
    Err(format!("the cluster did not serve {workers} live workers within 60 s"))
}

/// Submits the seeded stream while the faults run, following each job until it ends and
/// checking the outputs of those that succeed.
fn stream(
    config: &Config,
    client: &mut Client,
    ledger: &Path,
    scratch: &Path,
    report: &mut Report,
    start: Instant,
) -> Vec<Tracked> {
    let mut rng = StdRng::seed_from_u64(config.seed);
    let mut tracked: Vec<Tracked> = Vec::new();
    let mut n = 0u64;
    // A job no coordinator answered for is submitted again (the same job, so the stream stays
    // the seed's): had it been accepted, its duplicate only costs work.
    let mut next: Option<JobPlan> = None;
    while start.elapsed() < config.duration {
        let running = tracked.iter().filter(|t| t.state == JobState::Running).count();
        if running < config.max_in_flight {
            let plan = next.take().unwrap_or_else(|| {
                n += 1;
                jobs::plan(n - 1, config.seed, config.workers, &mut rng, ledger)
            });
            match client.submit(&format!("{}.toml", plan.name), &plan.source) {
                Ok(id) => {
                    report.submitted += 1;
                    tracked.push(Tracked { plan, id, state: JobState::Running, checked: None });
                }
                Err(CallError::Unserved(_)) => {
                    report.unacknowledged += 1;
                    next = Some(plan);
                }
                Err(e) => {
                    report.refused += 1;
                    eprintln!(
                        "chaos: {:>7.1}s submitting {} was refused: {e}",
                        start.elapsed().as_secs_f64(),
                        plan.name
                    );
                }
            }
        }
        poll(client, &mut tracked, scratch, report);
        std::thread::sleep(Duration::from_millis(500));
    }
    tracked
}

/// Asks for the state of every running job; checks the outputs of those that succeeded.
fn poll(client: &mut Client, tracked: &mut [Tracked], scratch: &Path, report: &mut Report) {
    for t in tracked.iter_mut().filter(|t| t.state == JobState::Running) {
        if let Ok(s) = client.state(&t.id) {
            t.state = s;
        }
        if t.state == JobState::Succeeded && t.checked.is_none() {
            t.checked = Some(compare(client, t, scratch, report, false));
        }
    }
}

/// Fetches every expected output of `t` and compares it; true when every one could be fetched
/// (and the findings are added to `report`). When one cannot be fetched and this is not the
/// `last_try`, nothing is recorded: the whole job is checked again after the faults.
fn compare(client: &Client, t: &Tracked, scratch: &Path, report: &mut Report, last_try: bool) -> bool {
    let mut found = Report::default();
    for e in &t.plan.expected {
        match client.get(&t.id, &e.object(), scratch) {
            Ok(bytes) => {
                found.outputs_checked += 1;
                if bytes != e.bytes {
                    let at =
                        bytes.iter().zip(&e.bytes).position(|(a, b)| a != b).unwrap_or(bytes.len().min(e.bytes.len()));
                    found.mismatches.push(Mismatch {
                        job: t.id.clone(),
                        object: e.object(),
                        what: format!(
                            "{} bytes, expected {}; first difference at byte {at}",
                            bytes.len(),
                            e.bytes.len()
                        ),
                    });
                }
            }
            // The CLI refusing bytes that are not the object's is a mismatch caught in transit.
            // ("no live worker holds" names digests too, as one reason a copy may be gone: that
            // is an output no one holds, counted as unavailable below, not a mismatch.)
            Err(err)
                if !err.contains("no live worker holds")
                    && (err.contains("sent more than") || err.to_lowercase().contains("digest")) =>
            {
                found.outputs_checked += 1;
                found.mismatches.push(Mismatch { job: t.id.clone(), object: e.object(), what: err });
            }
            Err(_) if !last_try => return false,
            Err(err) => found.unavailable.push((t.id.clone(), e.object(), err)),
        }
    }
    report.outputs_checked += found.outputs_checked;
    report.mismatches.extend(found.mismatches);
    report.unavailable.extend(found.unavailable);
    true
}

/// After the faults: waits up to `settle` for every job to end, then takes the verdict on each.
fn settle(config: &Config, client: &mut Client, tracked: &mut [Tracked], scratch: &Path, report: &mut Report) {
    let healed = Instant::now();
    while healed.elapsed() < config.settle && tracked.iter().any(|t| t.state == JobState::Running) {
        poll(client, tracked, scratch, report);
        std::thread::sleep(Duration::from_millis(500));
    }
    for t in tracked.iter_mut() {
        // One more look: a job that ended, or that the coordinator does not know (lost).
        if let Ok(s) = client.state(&t.id) {
            t.state = s;
        }
        match &t.state {
            JobState::Running => report.not_ended.push((t.id.clone(), t.plan.name.clone())),
            JobState::Unknown => report.lost.push((t.id.clone(), t.plan.name.clone())),
            JobState::Succeeded => {
                report.succeeded += 1;
                if t.checked != Some(true) {
                    // A job whose check was cut short by a fault: once more, now.
                    t.checked = Some(compare(client, t, scratch, report, true));
                }
            }
            JobState::Failed(state) => {
                report.failed += 1;
                report.failures.push((t.id.clone(), t.plan.name.clone(), state.clone()));
            }
        }
    }
}

/// The ledger's verdict.
fn check(ledger: &Path, report: &mut Report) {
    let text = std::fs::read_to_string(ledger).unwrap_or_default();
    let l = ledger::Ledger::parse(&text);
    report.overlaps = l.overlaps();
    report.attempts = l.attempt_count();
    report.completed_more_than_once = l.completed_more_than_once();
    report.malformed_ledger_lines = l.malformed;
}
