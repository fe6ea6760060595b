//! The 10,000-subtask bursts and isolated subtasks on a secure cluster, an `--insecure` one and
//! one with metrics off, side by side.

use std::time::{Duration, Instant};

use plexus_bench::percentile;
use plexus_e2e::{Cluster, ClusterConfig};
use plexus_proto::pb;

use crate::{RUNS, SINGLES, SUBTASKS, print_engine};

pub(crate) struct Run {
    pub(crate) wall: Duration,
    /// ready → assigned (queueing in the coordinator), ms per subtask.
    pub(crate) queue: Vec<u64>,
    /// assigned (persisted, sent) → started on the worker, ms per subtask.
    pub(crate) dispatch: Vec<u64>,
    /// ready → finished on the worker, ms per subtask.
    pub(crate) total: Vec<u64>,
}

fn one_run(c: &Cluster, i: usize) -> Run {
    let src =
        format!("name = \"noop-{i}\"\n[[task]]\nname = \"noop\"\nkind = \"noop\"\nreplicas = {SUBTASKS}\ncpu = 0\n");
    let t0 = Instant::now();
    let job = c.submit("noop.toml", &src);
    loop {
        let s = c.job_summary(&job).expect("coordinator reachable");
        if s.state != pb::JobState::Running as i32 {
            assert_eq!(s.state, pb::JobState::Succeeded as i32, "benchmark job failed: {}", s.error);
            break;
        }
        std::thread::sleep(Duration::from_millis(2));
    }
    let wall = t0.elapsed();
    let full = c.job(&job).expect("job status");
    let mut r = Run { wall, queue: Vec::new(), dispatch: Vec::new(), total: Vec::new() };
    for s in &full.subtasks {
        assert_eq!(s.attempt, 1, "every subtask placed once");
        r.queue.push(s.assigned_at.saturating_sub(s.ready_at));
        r.dispatch.push(s.started_at.saturating_sub(s.assigned_at));
        r.total.push(s.finished_at.saturating_sub(s.ready_at));
    }
    r.queue.sort_unstable();
    r.dispatch.sort_unstable();
    r.total.sort_unstable();
    r
}

/// Everything measured on one cluster.
pub(crate) struct Measured {
    pub(crate) runs: Vec<Run>,
    single_total: Vec<u64>,
    single_dispatch: Vec<u64>,
    pub(crate) engine: Option<String>,
}

/// Scrapes the coordinator's `/metrics` every [`SCRAPE_EVERY`] until dropped, as Prometheus
/// would (with the admin token when there is one): metrics cost what keeping and serving them costs.
struct Scraper {
    pub(crate) stop: std::sync::Arc<std::sync::atomic::AtomicBool>,
    pub(crate) thread: Option<std::thread::JoinHandle<u64>>,
}

const SCRAPE_EVERY: Duration = Duration::from_secs(1);

impl Scraper {
    pub(crate) fn start(c: &Cluster) -> Option<Scraper> {
        let addr = c.http.as_deref()?.strip_prefix("http://")?.to_string();
        let auth = c.admin_token.as_ref().map(|t| format!("Authorization: Bearer {t}\r\n")).unwrap_or_default();
        let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let flag = stop.clone();
        let thread = std::thread::spawn(move || {
            use std::io::{Read, Write};
            let mut ok = 0;
            while !flag.load(std::sync::atomic::Ordering::Relaxed) {
                if let Ok(mut s) = std::net::TcpStream::connect(&addr) {
                    let _ = s.set_read_timeout(Some(Duration::from_secs(5)));
                    let mut body = String::new();
                    if write!(s, "GET /metrics HTTP/1.1\r\nHost: {addr}\r\n{auth}Connection: close\r\n\r\n").is_ok()
                        && s.read_to_string(&mut body).is_ok()
                        && body.starts_with("HTTP/1.1 200")
                    {
                        ok += 1;
                    }
                }
                std::thread::sleep(SCRAPE_EVERY);
            }
            ok
        });
        Some(Scraper { stop, thread: Some(thread) })
    }

    /// Stops, and says how many scrapes succeeded.
    fn finish(mut self) -> u64 {
        self.stop.store(true, std::sync::atomic::Ordering::Relaxed);
        self.thread.take().and_then(|t| t.join().ok()).unwrap_or(0)
    }
}

pub(crate) fn measure(insecure: bool, metrics: bool) -> Measured {
    let coordinator_args = if metrics { vec![] } else { vec!["--http".to_string(), "none".to_string()] };
    let config = ClusterConfig {
        workers: 4,
        log: "warn,plexus_coordinator::engine=info".into(),
        insecure,
        coordinator_args,
        ..Default::default()
    };
    eprintln!(
        "starting a coordinator and {} workers ({}, metrics {}; release binaries from {})",
        config.workers,
        if insecure { "--insecure" } else { "TLS and tokens" },
        if metrics { "on, scraped every second" } else { "off (--http none)" },
        plexus_e2e::bin_dir().display()
    );
    let mut c = Cluster::start(config);
    let scraper = if metrics { Some(Scraper::start(&c).expect("the coordinator serves /metrics")) } else { None };

    // One warm-up job so connections and allocators are warm, then the measured runs.
    let _ = one_run(&c, 0);
    let runs: Vec<Run> = (1..=RUNS).map(|i| one_run(&c, i)).collect();

    // Isolated subtasks: submit, wait until done, repeat.
    let mut single_total = Vec::new();
    let mut single_dispatch = Vec::new();
    for i in 0..SINGLES {
        let t0 = Instant::now();
        let job =
            c.submit("one.toml", &format!("name = \"one-{i}\"\n[[task]]\nname = \"noop\"\nkind = \"noop\"\ncpu = 0\n"));
        let st = loop {
            let s = c.job(&job).expect("coordinator reachable");
            if s.state != pb::JobState::Running as i32 {
                break s;
            }
            std::thread::sleep(Duration::from_micros(200));
        };
        single_total.push(t0.elapsed().as_micros() as u64);
        let s = &st.subtasks[0];
        single_dispatch.push(s.started_at.saturating_sub(s.assigned_at));
    }
    single_total.sort_unstable();
    single_dispatch.sort_unstable();
    if let Some(s) = scraper {
        let n = s.finish();
        assert!(n > 0, "no scrape of /metrics succeeded during the runs");
        eprintln!("{n} scrapes of /metrics during the runs");
    }
    c.stop_coordinator();
    let engine = c.coordinator_log().lines().rev().find(|l| l.contains("engine stats")).map(str::to_string);
    Measured { runs, single_total, single_dispatch, engine }
}

fn median_rate(m: &Measured) -> f64 {
    let rates: Vec<f64> = m.runs.iter().map(|r| SUBTASKS as f64 / r.wall.as_secs_f64()).collect();
    plexus_bench::median(&rates).expect("at least one measured run")
}

/// The 10,000-subtask bursts and isolated subtasks, TLS and `--insecure` side by side.
pub(crate) fn tls_vs_insecure() {
    let modes =
        [("tls", measure(false, true)), ("insecure", measure(true, true)), ("no-metrics", measure(false, false))];

    println!(
        "control plane: {SUBTASKS} no-op subtasks per job, 4 worker processes, 1 coordinator, loopback, 2-core machine"
    );
    println!(
        "tls = the default (mutual TLS worker<->coordinator, TLS + bearer token for the client), with /metrics scraped every second; insecure = --insecure (metrics on, scraped); no-metrics = tls with --http none (metrics not kept)"
    );
    println!();
    println!(
        "{:<10} {:>4} {:>9} {:>12} {:>11} {:>11} {:>13} {:>13} {:>11} {:>11}",
        "mode",
        "run",
        "wall_ms",
        "subtasks/s",
        "queue_p50",
        "queue_p99",
        "dispatch_p50",
        "dispatch_p99",
        "total_p50",
        "total_p99"
    );
    for (mode, m) in &modes {
        for (i, r) in m.runs.iter().enumerate() {
            println!(
                "{:<10} {:>4} {:>9} {:>12.0} {:>11} {:>11} {:>13} {:>13} {:>11} {:>11}",
                mode,
                i + 1,
                r.wall.as_millis(),
                SUBTASKS as f64 / r.wall.as_secs_f64(),
                percentile(&r.queue, 50.0),
                percentile(&r.queue, 99.0),
                percentile(&r.dispatch, 50.0),
                percentile(&r.dispatch, 99.0),
                percentile(&r.total, 50.0),
                percentile(&r.total, 99.0),
            );
        }
    }
    println!(
        "(latencies in ms; queue = ready→placed+persisted, dispatch = placed→started on the worker, total = ready→done on the worker)"
    );
    println!();
    println!("isolated subtasks ({SINGLES} one-subtask jobs, one at a time):");
    for (mode, m) in &modes {
        println!(
            "  {mode:<10} client submit -> job done seen: p50 {:.2} ms, p99 {:.2} ms (includes 0.2 ms polling); placed -> started: p50 {} ms, p99 {} ms",
            percentile(&m.single_total, 50.0) as f64 / 1000.0,
            percentile(&m.single_total, 99.0) as f64 / 1000.0,
            percentile(&m.single_dispatch, 50.0),
            percentile(&m.single_dispatch, 99.0)
        );
    }
    println!();
    let (tls, insecure) = (median_rate(&modes[0].1), median_rate(&modes[1].1));
    println!("{:<44} {:>12}", "system", "placements/s");
    println!("{:<44} {:>12.0}", "plexus, TLS + tokens (this run, median)", tls);
    println!("{:<44} {:>12.0}", "plexus, --insecure (this run, median)", insecure);
    println!("{:<44} {:>12.2}", "ratio TLS / insecure (target >= 0.80)", tls / insecure);
    let off = median_rate(&modes[2].1);
    println!("{:<44} {:>12.0}", "plexus, TLS, metrics off (this run, median)", off);
    println!("{:<44} {:>12.2}", "ratio metrics on / off (target >= 0.95)", tls / off);
    println!("{:<44} {:>12}", "target", 10_000);
    println!("{:<44} {:>12}", "Nomad C1M (published; 5 servers)", 3_750);
    println!("{:<44} {:>12}", "Slurm (documented jobs/s)", 500);
    println!("{:<44} {:>12}", "kube-scheduler (published pods/s)", 300);
    println!();

    // Where the coordinator's engine thread spent its time over all runs (warm-up included).
    for (mode, m) in &modes {
        print_engine(mode, "all jobs (warm-up included)", &m.engine);
    }
    println!();
}

// ---- deep queue (issue 14) ------------------------------------------------------------------
