//! The fleet's phases besides registering: the placement run, the listings, the flood, the
//! restart storms (sled) and the leader takeover (etcd).

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::Relaxed};
use std::time::{Duration, Instant};

use plexus_proto::WorkerId;
use plexus_proto::pb;
use plexus_worker::credentials::Credentials;

use crate::hollow::{HOLLOW_LABEL, Hollow, Ledger, assignments, heartbeats, register};
use crate::plane::Plane;
use crate::{Args, Flood, Storm, Takeover};

/// Kills the coordinator and starts it again while all `creds`' workers retry `Register`, each
/// on a back-off schedule from the kill (as a worker notices its stream end): the product's
/// (`plexus_worker::session::Backoff`, seeded by the worker's id) when `jittered`, else the
/// schedule before it (200 ms doubling to 2 s, every worker alike).
pub(crate) fn storm(
    rt: &tokio::runtime::Runtime,
    c: &mut Plane,
    creds: &[(WorkerId, Credentials)],
    cpus: u32,
    jittered: bool,
) -> Result<Storm, Box<dyn std::error::Error>> {
    let i = c.kill_leader();
    let killed = Instant::now();
    let attempts = Arc::new(AtomicU64::new(0));
    let urls = c.urls();
    let mut set = tokio::task::JoinSet::new();
    for (id, cred) in creds.iter().cloned() {
        let (urls, attempts) = (urls.clone(), attempts.clone());
        set.spawn_on(
            async move {
                let seed = u64::from_le_bytes(id.as_bytes()[..8].try_into().expect("8 bytes"));
                let mut backoff = plexus_worker::session::Backoff::new(seed);
                let mut lockstep = Duration::from_millis(200);
                loop {
                    let delay = if jittered { backoff.next_delay() } else { lockstep };
                    lockstep = (lockstep * 2).min(Duration::from_secs(2));
                    tokio::time::sleep(delay).await;
                    attempts.fetch_add(1, Relaxed);
                    if register(&urls, id, &cred, cpus).await.is_ok() {
                        return killed.elapsed();
                    }
                }
            },
            rt.handle(),
        );
    }
    c.start_coordinator(i);
    let restart = killed.elapsed();
    let all = rt.block_on(async {
        let mut last = Duration::ZERO;
        while let Some(t) = set.join_next().await {
            last = last.max(t.expect("a storm task"));
        }
        last
    });
    Ok(Storm { jittered, restart, all, attempts: attempts.load(Relaxed) })
}

/// One `ListWorkers` call, timed.
pub(crate) fn timed_list(
    c: &Plane,
    req: pb::ListWorkersRequest,
) -> Result<(Duration, pb::ListWorkersResponse), Box<dyn std::error::Error>> {
    let mut client = c.client();
    // A refusal to shed load is retried (for up to 30 s) and the answered call is timed.
    let until = Instant::now() + Duration::from_secs(30);
    loop {
        let started = Instant::now();
        match c.block_on(client.list_workers(req.clone())) {
            Err(e) if e.code() == tonic::Code::ResourceExhausted && Instant::now() < until => {
                std::thread::sleep(Duration::from_millis(100));
            }
            r => return Ok((started.elapsed(), r?.into_inner())),
        }
    }
}

/// The heartbeats' round trips taken so far, sorted (and forgotten there).
pub(crate) fn sorted(rtts: &std::sync::Mutex<Vec<f64>>) -> Vec<f64> {
    let mut hb = std::mem::take(&mut *rtts.lock().expect("rtts"));
    hb.sort_by(f64::total_cmp);
    hb
}

pub(crate) fn percentile(sorted: &[f64], p: f64) -> f64 {
    sorted.get(((sorted.len() as f64 * p) as usize).min(sorted.len().saturating_sub(1))).copied().unwrap_or(0.0)
}

/// `--flooders` clients list every worker, again and again, for `--flood-secs`, while the
/// heartbeats are timed: with shedding, the listings the engine cannot keep up with are refused
/// (RESOURCE_EXHAUSTED) and the heartbeats stay on time; without it, they queue behind them.
pub(crate) fn flood(c: &Plane, args: &Args, rtts: &std::sync::Mutex<Vec<f64>>, timing: &AtomicBool) -> Flood {
    let until = Instant::now() + Duration::from_secs(args.flood_secs);
    let counts = Arc::new([AtomicU64::new(0), AtomicU64::new(0), AtomicU64::new(0)]);
    let error = Arc::new(std::sync::Mutex::new(None));
    let clients: Vec<_> = (0..args.flooders).map(|_| c.client()).collect();
    let request = pb::ListWorkersRequest { summary_only: args.flood_list == "summary", ..Default::default() };
    timing.store(true, Relaxed);
    // On the harness's runtime, where the clients' connections live.
    c.block_on(async {
        let mut set = tokio::task::JoinSet::new();
        for mut client in clients {
            let (counts, error, request) = (counts.clone(), error.clone(), request.clone());
            set.spawn(async move {
                while Instant::now() < until {
                    // [answered, shed, failed]
                    let k = match client.list_workers(request.clone()).await {
                        Ok(_) => 0,
                        Err(e) if e.code() == tonic::Code::ResourceExhausted => {
                            // Refused at once: back off a little, as a client would.
                            tokio::time::sleep(Duration::from_millis(20)).await;
                            1
                        }
                        Err(e) => {
                            error.lock().expect("error").get_or_insert_with(|| e.to_string());
                            2
                        }
                    };
                    counts[k].fetch_add(1, Relaxed);
                }
            });
        }
        while set.join_next().await.is_some() {}
    });
    timing.store(false, Relaxed);
    let hb = sorted(rtts);
    Flood {
        hb_p99_ms: percentile(&hb, 0.99),
        heartbeats: hb.len(),
        answered: counts[0].load(Relaxed),
        shed: counts[1].load(Relaxed),
        failed: counts[2].load(Relaxed),
        error: error.lock().expect("error").clone(),
    }
}

/// Submits a job of `--subtasks` no-op replicas and waits for its end: submit to end.
pub(crate) fn place_all(
    c: &Plane,
    args: &Args,
    n: usize,
    placed: &AtomicU64,
) -> Result<(Duration, Option<RealRun>), Box<dyn std::error::Error>> {
    // The real workers' job goes in first, so it waits behind nothing of the fleet's.
    let real = (args.real_workers > 0)
        .then(|| {
            let job = format!(
                "name = \"fleet-real-{n}\"\n[[task]]\nname = \"real\"\ncommand = [\"true\"]\nreplicas = {}\ncpu = 1\n\
                 constraints = {{ {HOLLOW_LABEL} = false }}\n",
                REAL_SUBTASKS_PER_WORKER * args.real_workers
            );
            c.submit("fleet-real.toml", &job).map(|id| (id, Instant::now()))
        })
        .transpose()?;
    let started = Instant::now();
    let id = submit_noop(c, &format!("fleet-{n}"), args.subtasks)?;
    let end = wait_end(c, &id, started + Duration::from_secs(args.job_timeout))
        .map_err(|e| format!("{e}, {} assignments answered", placed.load(Relaxed)))?;
    if end.state != pb::JobState::Succeeded as i32 {
        return Err(format!("the fleet job ended {:?}: {}", end.state, end.error).into());
    }
    let wall = started.elapsed();
    let real = match real {
        None => None,
        Some((id, submitted)) => {
            let end = wait_end(c, &id, submitted + Duration::from_secs(args.job_timeout))
                .map_err(|e| format!("the real workers' job: {e}"))?;
            let mut client = c.client();
            let subtasks = c.block_on(client.get_job(pb::GetJobRequest { job_id: id.clone(), subtasks: true }))?;
            let spans = |f: fn(&pb::SubtaskStatus) -> (u64, u64)| {
                let mut v: Vec<f64> = subtasks
                    .get_ref()
                    .subtasks
                    .iter()
                    .map(f)
                    .filter(|(a, b)| *a > 0 && b >= a)
                    .map(|(a, b)| (b - a) as f64)
                    .collect();
                v.sort_by(f64::total_cmp);
                (percentile(&v, 0.5), v.last().copied().unwrap_or(0.0))
            };
            Some(RealRun {
                waited_ms: spans(|s| (s.ready_at, s.assigned_at)),
                start_ms: spans(|s| (s.assigned_at, s.started_at)),
                ran_ms: spans(|s| (s.started_at, s.finished_at)),
                workers: args.real_workers,
                subtasks: end.groups.iter().map(|g| g.replicas).sum(),
                succeeded: end.groups.iter().map(|g| g.succeeded).sum(),
                ok: end.state == pb::JobState::Succeeded as i32,
                took: Duration::from_millis(end.finished_at.saturating_sub(end.submitted_at)),
            })
        }
    };
    Ok((wall, real))
}

/// `command = ["true"]` subtasks per real worker in their job.
const REAL_SUBTASKS_PER_WORKER: usize = 2;

/// The job the real workers ran beside the fleet's (see [`place_all`]).
pub(crate) struct RealRun {
    pub(crate) workers: usize,
    pub(crate) subtasks: u32,
    pub(crate) succeeded: u32,
    pub(crate) ok: bool,
    /// From its submission to its end, as the coordinator recorded them.
    pub(crate) took: Duration,
    /// Per subtask, median and longest, ms: ready to assigned (placement), assigned to started
    /// (sent, received, its process started), started to finished (ran and reported).
    pub(crate) waited_ms: (f64, f64),
    pub(crate) start_ms: (f64, f64),
    pub(crate) ran_ms: (f64, f64),
}

/// Submits `name`, `replicas` one-core no-op subtasks; returns its id.
fn submit_noop(c: &Plane, name: &str, replicas: u32) -> Result<String, tonic::Status> {
    let job = format!(
        "name = \"{name}\"\n[[task]]\nname = \"noop\"\nkind = \"noop\"\nreplicas = {replicas}\ncpu = 1\n\
         constraints = {{ {HOLLOW_LABEL} = true }}\n"
    );
    c.submit("fleet.toml", &job)
}

/// Polls job `id` (through whichever coordinator leads) until it ends, or says how far it got.
fn wait_end(c: &Plane, id: &str, deadline: Instant) -> Result<pb::JobStatus, String> {
    let mut last = None;
    loop {
        if let Some(j) = c.job(id) {
            if j.state != pb::JobState::Running as i32 {
                return Ok(j);
            }
            last = Some(j);
        }
        if Instant::now() > deadline {
            let done = last.as_ref().map_or(0, |j| j.groups.iter().map(|g| g.succeeded).sum::<u32>());
            let of = last.as_ref().map_or(0, |j| j.groups.iter().map(|g| g.replicas).sum::<u32>());
            return Err(format!("job {id} did not end in time: {done} of {of} subtasks succeeded"));
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// The leader `kill -9`ed while a job of `--subtasks` no-op replicas runs (once a quarter of
/// them were answered): every worker, its session gone, retries `Register` against every
/// coordinator on the product's jittered back-off from the kill until the new leader takes it,
/// then heartbeats and takes work again. Measured from the kill: a new leader serving, every
/// worker registered with it, the job's end (nothing lost: all its subtasks succeeded), and the
/// subtasks assigned again after their success was acknowledged (run twice).
pub(crate) fn takeover(
    rt: &tokio::runtime::Runtime,
    c: &mut Plane,
    args: &Args,
    creds: &[(WorkerId, Credentials)],
    old: (&AtomicBool, &AtomicU64),
    ledger: &Arc<Ledger>,
) -> Result<Takeover, Box<dyn std::error::Error>> {
    let (old_stop, old_placed) = old;
    let before = old_placed.load(Relaxed);
    let id = submit_noop(c, "fleet-takeover", args.subtasks)?;
    let quarter = before + u64::from(args.subtasks / 4);
    let wait_from = Instant::now();
    while old_placed.load(Relaxed) < quarter && wait_from.elapsed() < Duration::from_secs(args.job_timeout) {
        std::thread::sleep(Duration::from_millis(5));
    }
    let answered_at_kill = old_placed.load(Relaxed) - before;
    c.kill_leader();
    let killed = Instant::now();
    old_stop.store(true, Relaxed);
    let attempts = Arc::new(AtomicU64::new(0));
    let urls = c.urls();
    let mut set = tokio::task::JoinSet::new();
    for (wid, cred) in creds.iter().cloned() {
        let (urls, attempts, cpus) = (urls.clone(), attempts.clone(), args.cpus);
        set.spawn_on(
            async move {
                let seed = u64::from_le_bytes(wid.as_bytes()[..8].try_into().expect("8 bytes"));
                let mut backoff = plexus_worker::session::Backoff::new(seed);
                loop {
                    tokio::time::sleep(backoff.next_delay()).await;
                    attempts.fetch_add(1, Relaxed);
                    if let Ok(h) = register(&urls, wid, &cred, cpus).await {
                        return (killed.elapsed(), h);
                    }
                }
            },
            rt.handle(),
        );
    }
    c.wait_leader(Duration::from_secs(60));
    let leader = killed.elapsed();
    let (stop, placed, rtts, timing) = (
        Arc::new(AtomicBool::new(false)),
        Arc::new(AtomicU64::new(0)),
        Arc::new(std::sync::Mutex::new(Vec::new())),
        Arc::new(AtomicBool::new(false)),
    );
    let mut fleet: Vec<Arc<Hollow>> = Vec::with_capacity(creds.len());
    let all_back = rt.block_on(async {
        let mut last = Duration::ZERO;
        while let Some(r) = set.join_next().await {
            let (t, h) = r.expect("a takeover task");
            last = last.max(t);
            tokio::spawn(heartbeats(h.clone(), stop.clone(), rtts.clone(), timing.clone()));
            tokio::spawn(assignments(h.clone(), stop.clone(), placed.clone(), ledger.clone(), crate::run_for(args)));
            fleet.push(h);
        }
        last
    });
    let end = wait_end(c, &id, killed + Duration::from_secs(args.job_timeout))?;
    let job_end = killed.elapsed();
    let succeeded = end.groups.iter().map(|g| g.succeeded).sum::<u32>();
    stop.store(true, Relaxed);
    Ok(Takeover {
        answered_at_kill,
        leader,
        all_back,
        job_end,
        attempts: attempts.load(Relaxed),
        succeeded,
        job_ok: end.state == pb::JobState::Succeeded as i32 && succeeded == args.subtasks,
        answered_after: placed.load(Relaxed),
        twice: ledger.twice.load(Relaxed),
    })
}
