//! `rails`: the multi-rail channel benchmark (issue 4, seed 000).
//!
//! One run prints one table, every figure measured in it:
//! * loopback (one rail, no shaping): iperf3 between two processes, and the channel between two
//!   processes at several `seg_max`;
//! * the namespace rig (`scripts/rails-rig.sh`, needs root) with 2 and 3 heterogeneous rails:
//!   iperf3 on each rail alone, then every scheduler: goodput, goodput ÷ Σ configured rates,
//!   bytes per rail, CPU used;
//! * a dynamic run on 2 rails where rail 0 drops to a quarter of its rate halfway through:
//!   goodput before and after, and the time until goodput reaches 90 % of the new Σ rates.
//!
//! The sender runs in this process (host 0 of the rig is the root namespace); the receiver is
//! this same binary re-executed as `rails --serve …` in host 1's namespace. Seeded. `rails
//! --help` lists the options (which parts to run, which schedulers, how many repeats).
//!
//! `--auth open,key` (the default) runs everything twice, without and with the authenticated
//! rail handshake (`plexus_dataplane::auth`, a fresh random key that the receiver gets through
//! its environment, `PLEXUS_BENCH_RAIL_KEY`): the loopback table shows both side by side with
//! their ratio, the rig tables one row per scheduler and mode (`+key`). About eight minutes in
//! all with the defaults, four with `--auth open`.

use std::net::{IpAddr, SocketAddr};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use plexus_dataplane::peer::{self, PeerOpts};
use plexus_dataplane::rig::{self, PeerProcess, Rig, pattern};
use plexus_dataplane::{Endpoint, EndpointConfig, RailAuth, RailKey, SchedulerKind};

const MIB: u64 = 1 << 20;
/// Messages the size of a collective's slice (a 256 MiB buffer reduce-scattered over 8
/// workers), two in flight so a rail never idles between messages.
const MSG: u64 = 32 * MIB;
const IN_FLIGHT: usize = 2;
/// Seconds each static run issues messages (then waits for the ones in flight).
const RUN: Duration = Duration::from_secs(5);
/// Seconds each one-rail run issues messages.
const ALONE_RUN: Duration = Duration::from_secs(3);
/// The dynamic run: rail 0's rate drops at `DYN_CHANGE` of `DYN_RUN`.
const DYN_RUN: Duration = Duration::from_secs(8);
const DYN_CHANGE: Duration = Duration::from_secs(4);
/// Goodput is sampled this often for the dynamic run's timeline.
const TICK: Duration = Duration::from_millis(100);
const SEED: u64 = 1;
/// Rig segment size: 1 MiB cuts a 32 MiB slice into 32 segments, enough to balance three
/// rails; the loopback sweep shows larger segments buy little.
const RIG_SEG: u64 = MIB;
/// The environment variable that carries the key to the receiving process (`--rail-key-env`):
/// not its command line, which every user of the machine can read.
const KEY_ENV: &str = "PLEXUS_BENCH_RAIL_KEY";

/// What to run, from the command line.
struct Opts {
    parts: Vec<String>,
    scheds: Vec<SchedulerKind>,
    repeat: usize,
    queue_max: Option<usize>,
    /// Handshake modes, each run in turn: false open, true with the rail key.
    auth: Vec<bool>,
    loopback_segs: Vec<u64>,
    loopback_run: Duration,
}

/// The sender's side of a mode, and the receiver's arguments for it.
fn auth_mode(key: &RailKey, keyed: bool) -> (RailAuth, Vec<String>) {
    if keyed {
        (RailAuth::Key(key.clone()), vec!["--rail-key-env".to_string(), KEY_ENV.to_string()])
    } else {
        (RailAuth::Open, vec![])
    }
}

fn mode_name(keyed: bool) -> &'static str {
    if keyed { "key" } else { "open" }
}

/// The command line.
#[derive(Debug, clap::Parser)]
#[command(name = "rails", about = "Plexus data plane: multi-rail channels on loopback and on the rail rig")]
struct Cli {
    /// Parts to run: loopback (iperf3 and the channel on 127.0.0.1), 2 (rig 2gbit,500mbit),
    /// 3 (rig 1500mbit,750mbit,250mbit), dynamic.
    #[arg(long, value_delimiter = ',', default_value = "loopback,2,3,dynamic",
          value_parser = ["loopback", "2", "3", "dynamic"])]
    only: Vec<String>,
    /// Schedulers to run: round-robin, weighted, q-learning, q-learning-fresh (default all).
    #[arg(long, value_delimiter = ',')]
    sched: Vec<SchedulerKind>,
    /// Runs per scheduler (rig tables) and per seg_max and mode (loopback); the row shows the
    /// median run.
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u64).range(1..))]
    repeat: u64,
    /// Segments per rail send queue (default: the endpoint's, 8).
    #[arg(long = "queue-max", value_parser = clap::value_parser!(u64).range(1..))]
    queue_max: Option<u64>,
    /// Rail handshake modes to run: open (none), key (the authenticated handshake under a random
    /// rail key); loopback runs them alternately.
    #[arg(long, value_delimiter = ',', default_value = "open,key", value_parser = ["open", "key"])]
    auth: Vec<String>,
    /// Loopback seg_max values, MiB, fractions allowed.
    #[arg(long, value_delimiter = ',', default_value = "0.25,1,4,16", value_parser = seg_bytes)]
    seg: Vec<u64>,
    /// Seconds each loopback run issues messages.
    #[arg(long, default_value_t = 3.0, value_parser = positive_secs)]
    secs: f64,
}

/// A seg_max in MiB as bytes, a whole number of 8-byte words, more than none.
fn seg_bytes(m: &str) -> Result<u64, String> {
    m.parse::<f64>()
        .ok()
        .map(|m| (m * MIB as f64) as u64 / 8 * 8)
        .filter(|&b| b > 0)
        .ok_or_else(|| format!("bad --seg value {m:?}"))
}

fn positive_secs(s: &str) -> Result<f64, String> {
    s.parse::<f64>().ok().filter(|&s| s > 0.0).ok_or_else(|| format!("--secs needs a positive number, not {s:?}"))
}

impl Opts {
    fn parse() -> Opts {
        let c = <Cli as clap::Parser>::parse();
        Opts {
            parts: c.only,
            scheds: if c.sched.is_empty() { SchedulerKind::ALL.to_vec() } else { c.sched },
            repeat: c.repeat as usize,
            queue_max: c.queue_max.map(|n| n as usize),
            auth: c.auth.iter().map(|m| m == "key").collect(),
            loopback_segs: c.seg,
            loopback_run: Duration::from_secs_f64(c.secs),
        }
    }

    fn runs(&self, part: &str) -> bool {
        self.parts.iter().any(|p| p == part)
    }
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    if args.first().map(String::as_str) == Some("--serve") {
        let opts = PeerOpts::parse(args[1..].iter().cloned()).unwrap_or_else(|e| {
            eprintln!("rails --serve: {e}");
            std::process::exit(2)
        });
        let rt = tokio::runtime::Runtime::new().expect("runtime");
        if let Err(e) = rt.block_on(peer::serve(opts)) {
            eprintln!("rails --serve: {e}");
            std::process::exit(1);
        }
        return;
    }
    // `--serve` is the receiving process this benchmark starts; the data plane's test peer
    // parses the rest of its command line. Everything else is a person's.
    let opts = Opts::parse();
    let key = RailKey::random();
    let hex = hex::encode(key.as_bytes());
    // SAFETY: no other thread exists yet (the runtime is made below), so nothing reads the
    // environment concurrently. Every receiver process inherits it (`--rail-key-env`).
    unsafe { std::env::set_var(KEY_ENV, hex) };
    let deps = concat!(env!("CARGO_MANIFEST_DIR"), "/../scripts/deps-rails.sh");
    let _ = Command::new("bash").arg(deps).status();
    let rt = tokio::runtime::Runtime::new().expect("runtime");
    let started = Instant::now();

    println!("Plexus data plane: multi-rail channels (seed {SEED}; messages {} MiB, {IN_FLIGHT} in flight)", MSG / MIB);
    println!(
        "machine: {} cores, load average at start {}; {} run(s) per scheduler (median shown), queue_max {}; rail handshake: {}",
        cores(),
        loadavg(),
        opts.repeat,
        opts.queue_max.unwrap_or_else(|| EndpointConfig::default().queue_max),
        opts.auth.iter().map(|&k| mode_name(k)).collect::<Vec<_>>().join(", ")
    );
    println!();

    if opts.runs("loopback") {
        loopback(&rt, &opts, &key);
    }

    match rig::unavailable() {
        Some(why) => println!("rig runs skipped: {why}"),
        None => {
            let mut tables = vec![];
            if opts.runs("2") {
                let t = rig_table(&rt, &opts, &key, &[("2gbit", 2e9), ("500mbit", 0.5e9)]);
                tables.push(("2 rails", t));
            }
            if opts.runs("3") {
                let t = rig_table(&rt, &opts, &key, &[("1500mbit", 1.5e9), ("750mbit", 0.75e9), ("250mbit", 0.25e9)]);
                tables.push(("3 rails", t));
            }
            if opts.runs("dynamic") {
                dynamic(&rt, &opts, &key);
            }
            println!();
            for (name, t) in &tables {
                let g = |k: SchedulerKind| t.iter().find(|r| r.0 == k).map_or(f64::NAN, |r| r.1);
                let Some(best) = t.iter().max_by(|a, b| a.1.total_cmp(&b.1)) else {
                    continue;
                };
                let mut line = format!("{name}: best {} at {:.3} of Σ rates", best.0, best.2);
                for q in [SchedulerKind::QLearning, SchedulerKind::QLearningFresh] {
                    let ratio = g(q) / g(SchedulerKind::RoundRobin);
                    if ratio.is_finite() {
                        line += &format!("; {q} ÷ round-robin = {ratio:.2}×");
                    }
                }
                println!("{line}");
            }
        }
    }
    println!("total bench time {:.0} s", started.elapsed().as_secs_f64());
}

/// iperf3 and the channel between two processes on 127.0.0.1, at each seg_max, in each
/// handshake mode side by side (the modes alternate run by run, so a drift of the machine's
/// load spreads over both; each column is the median of `--repeat` runs).
fn loopback(rt: &tokio::runtime::Runtime, opts: &Opts, key: &RailKey) {
    println!("== loopback: one rail (127.0.0.1), no shaping, two processes ==");
    let iperf = iperf3(None, "127.0.0.1", "127.0.0.1", 4);
    match iperf {
        Some(bps) => println!("{:<34} {:>9.2} Gbit/s", "iperf3 (1 TCP stream, 4 s)", bps / 1e9),
        None => println!("{:<34} {:>9}", "iperf3", "n/a (not installed)"),
    }
    let local: IpAddr = "127.0.0.1".parse().unwrap();
    let mut head = format!("{:<24}", "plexus, seg_max");
    for &k in &opts.auth {
        head += &format!(" {:>13} {:>8} {:>6}", format!("{} Gbit/s", mode_name(k)), "÷ iperf3", "cpu");
    }
    if opts.auth.len() == 2 {
        head += &format!(" {:>12}", format!("{} ÷ {}", mode_name(opts.auth[1]), mode_name(opts.auth[0])));
    }
    println!("{head}   all runs Gbit/s");
    for &seg in &opts.loopback_segs {
        // runs[mode] = (goodput bit/s, cpu cores) of each repeat.
        let mut runs: Vec<Vec<(f64, f64)>> = vec![vec![]; opts.auth.len()];
        for _ in 0..opts.repeat {
            for (m, &keyed) in opts.auth.iter().enumerate() {
                let (auth, peer_args) = auth_mode(key, keyed);
                let mut peer = spawn_peer(None, &[local], &peer_args);
                let cfg = EndpointConfig { rails: vec![local], seg_max: seg, seed: SEED, auth, ..Default::default() };
                let r = rt.block_on(drive(cfg, &peer.addrs, 64 * MIB, opts.loopback_run, None));
                let cpu = r.cpu(peer_pid(&mut peer));
                runs[m].push((r.goodput_bps(), cpu));
            }
        }
        let mut line = format!("{:<24}", plexus_bench::size(seg));
        let mut medians = vec![];
        for m in &mut runs {
            m.sort_by(|a, b| a.0.total_cmp(&b.0));
            let (g, cpu) = m[m.len() / 2];
            medians.push(g);
            let share = iperf.map_or("n/a".to_string(), |i| format!("{:.2}", g / i));
            line += &format!(" {:>13.2} {share:>8} {cpu:>6.2}", g / 1e9);
        }
        if medians.len() == 2 {
            line += &format!(" {:>12.3}", medians[1] / medians[0]);
        }
        let all = runs
            .iter()
            .zip(&opts.auth)
            .map(|(m, &k)| {
                format!(
                    "{} {}",
                    mode_name(k),
                    m.iter().map(|r| format!("{:.2}", r.0 / 1e9)).collect::<Vec<_>>().join(" ")
                )
            })
            .collect::<Vec<_>>()
            .join("; ");
        println!("{line}   {all}");
    }
    println!();
}

/// One rig configuration: iperf3 and the channel on each rail alone, then every scheduler on
/// all rails (`opts.repeat` runs each, the median shown). Returns (scheduler, median goodput
/// bit/s, share of Σ rates).
fn rig_table(
    rt: &tokio::runtime::Runtime,
    opts: &Opts,
    key: &RailKey,
    rails: &[(&str, f64)],
) -> Vec<(SchedulerKind, f64, f64)> {
    let spec: Vec<&str> = rails.iter().map(|r| r.0).collect();
    let spec = spec.join(",");
    let sum: f64 = rails.iter().map(|r| r.1).sum();
    let fastest = rails.iter().map(|r| r.1).fold(0.0, f64::max);
    let rig = Rig::up(2, &spec).expect("rig up");
    println!(
        "== rig: {} rails {spec} (Σ {:.2} Gbit/s), host 0 → host 1, seg_max {}; load average {} ==",
        rails.len(),
        sum / 1e9,
        plexus_bench::size(RIG_SEG),
        loadavg()
    );
    // What each rail gives alone: iperf3 (one TCP stream), and the channel with one rail (the
    // same messages, the same two processes), so the Σ of configured rates can be compared
    // with what the shaped links actually carry.
    let mut per_rail = vec![];
    let mut alone = vec![];
    for (r, &(_, rate)) in rails.iter().enumerate() {
        per_rail.push(iperf3(Some(&rig), &rig.addr(1, r).to_string(), &rig.addr(0, r).to_string(), 2).unwrap_or(0.0));
        // In the first mode of `--auth`.
        let (auth, peer_args) = auth_mode(key, opts.auth[0]);
        let peer = spawn_peer(Some(&rig), &[rig.addr(1, r)], &peer_args);
        let mut cfg = rig_cfg(&rig, opts, SchedulerKind::RoundRobin, rate, auth);
        cfg.rails = vec![rig.addr(0, r)];
        alone.push(rt.block_on(drive(cfg, &peer.addrs, MSG, ALONE_RUN, None)).goodput_bps());
    }
    for (name, figs) in [("iperf3, each alone", &per_rail), ("plexus, each alone", &alone)] {
        let total: f64 = figs.iter().sum();
        println!(
            "{:<18} {:>9.0} Mbit/s  {:>9.3}   per rail Mbit/s {} (of {})",
            name,
            total / 1e6,
            total / sum,
            figs.iter().map(|b| format!("{:.0}", b / 1e6)).collect::<Vec<_>>().join(" / "),
            rails.iter().map(|r| format!("{:.0}", r.1 / 1e6)).collect::<Vec<_>>().join(" / ")
        );
    }
    let alone_sum: f64 = alone.iter().sum();
    println!(
        "{:<18} {:>16}  {:>9}  {:>9}   {:<22} {:<7} all runs ÷ Σ rates",
        "scheduler", "goodput", "÷ Σ rates", "÷ Σ alone", "MiB per rail", "cpu"
    );
    let mut out = vec![];
    for (&kind, &keyed) in opts.scheds.iter().flat_map(|k| opts.auth.iter().map(move |a| (k, a))) {
        let mut runs = vec![];
        for _ in 0..opts.repeat {
            let (auth, peer_args) = auth_mode(key, keyed);
            let mut peer = spawn_peer(Some(&rig), &rig.addrs(1), &peer_args);
            let cfg = rig_cfg(&rig, opts, kind, fastest, auth);
            let r = rt.block_on(drive(cfg, &peer.addrs, MSG, RUN, None));
            let cpu = r.cpu(peer_pid(&mut peer));
            runs.push((r.goodput_bps(), r.rail_bytes, cpu));
        }
        runs.sort_by(|a, b| a.0.total_cmp(&b.0));
        let all = runs.iter().map(|r| format!("{:.3}", r.0 / sum)).collect::<Vec<_>>().join(" ");
        let (g, rail_bytes, cpu) = &runs[runs.len() / 2];
        println!(
            "{:<18} {:>9.0} Mbit/s  {:>9.3}  {:>9.3}   {:<22} {:<7} {all}",
            row_name(kind, keyed, opts),
            g / 1e6,
            g / sum,
            g / alone_sum,
            rail_bytes.iter().map(|b| (b / MIB).to_string()).collect::<Vec<_>>().join(" / "),
            format!("{cpu:.2}"),
        );
        // The summary compares schedulers in the first mode of `--auth`.
        if keyed == opts.auth[0] {
            out.push((kind, *g, g / sum));
        }
    }
    println!();
    out
}

/// A rig row's name: the scheduler, `+key` with the rail key when both modes run.
fn row_name(kind: SchedulerKind, keyed: bool, opts: &Opts) -> String {
    if keyed && opts.auth.len() > 1 { format!("{} +key", kind.name()) } else { kind.name().to_string() }
}

fn rig_cfg(rig: &Rig, opts: &Opts, kind: SchedulerKind, fastest_bits: f64, auth: RailAuth) -> EndpointConfig {
    let d = EndpointConfig::default();
    EndpointConfig {
        auth,
        rails: rig.addrs(0),
        scheduler: kind,
        seg_max: RIG_SEG,
        queue_max: opts.queue_max.unwrap_or(d.queue_max),
        // The seed's `bandwidth` (one rail's theoretical rate) taken as the fastest rail's.
        bandwidth: fastest_bits / 8.0,
        seed: SEED,
        ..d
    }
}

/// 2 rails (2 Gbit/s + 1 Gbit/s); rail 0 drops to 500 Mbit/s (a quarter) at DYN_CHANGE, so
/// the faster rail becomes the slower one and a scheduler has to turn its split around.
fn dynamic(rt: &tokio::runtime::Runtime, opts: &Opts, key: &RailKey) {
    let rig = Rig::up(2, "2gbit,1gbit").expect("rig up");
    let (before_sum, after_sum) = (3.0e9, 1.5e9);
    println!(
        "== dynamic: rig 2gbit,1gbit; at t = {} s rail 0 → 500mbit (Σ {:.1} → {:.1} Gbit/s); {} s ==",
        DYN_CHANGE.as_secs(),
        before_sum / 1e9,
        after_sum / 1e9,
        DYN_RUN.as_secs()
    );
    println!(
        "{:<18} {:>24} {:>24} {:>30}",
        "scheduler", "before (1–4 s) Mbit/s", "after (5–8 s) Mbit/s", "time to 90 % of new Σ (0.5 s window)"
    );
    for (&kind, &keyed) in opts.scheds.iter().flat_map(|k| opts.auth.iter().map(move |a| (k, a))) {
        let (auth, peer_args) = auth_mode(key, keyed);
        let _peer = spawn_peer(Some(&rig), &rig.addrs(1), &peer_args);
        rig.set_rate(0, 0, "2gbit").expect("set-rate");
        let cfg = rig_cfg(&rig, opts, kind, 2e9, auth);
        let r = rt.block_on(drive(cfg, &_peer.addrs, MSG, DYN_RUN, Some((&rig, DYN_CHANGE))));
        let rate = |from: f64, to: f64| r.acked_between(from, to) * 8.0 / (to - from);
        let change = DYN_CHANGE.as_secs_f64();
        // Adapted at the start of the first 0.5 s window after the change from which every
        // later window (up to the end of issuing) ran at ≥ 90 % of the new Σ: sustained, so a
        // burst of data queued before the change does not count.
        let end = DYN_RUN.as_secs_f64();
        let ends: Vec<f64> = r.timeline.iter().map(|&(t, _)| t).filter(|&t| t >= change + 0.5 && t <= end).collect();
        let good: Vec<bool> = ends.iter().map(|&t| rate(t - 0.5, t) >= 0.9 * after_sum).collect();
        let adapt = (0..ends.len())
            .find(|&i| good[i..].iter().all(|&g| g))
            .map_or("not reached".to_string(), |i| format!("{:.1} s", ends[i] - 0.5 - change));
        println!(
            "{:<18} {:>24.0} {:>24.0} {:>30}",
            row_name(kind, keyed, opts),
            rate(1.0, change) / 1e6,
            rate(change + 1.0, DYN_RUN.as_secs_f64()) / 1e6,
            adapt
        );
    }
}

struct RunResult {
    bytes: u64,
    secs: f64,
    rail_bytes: Vec<u64>,
    /// (seconds since start, bytes acknowledged so far).
    timeline: Vec<(f64, u64)>,
    cpu_self: f64,
    peer_cpu_start: Option<(u32, f64)>,
}

impl RunResult {
    fn goodput_bps(&self) -> f64 {
        self.bytes as f64 * 8.0 / self.secs
    }

    /// Bytes acknowledged in [from, to), from the timeline.
    fn acked_between(&self, from: f64, to: f64) -> f64 {
        let at = |t: f64| self.timeline.iter().take_while(|s| s.0 <= t + 1e-9).last().map_or(0, |s| s.1);
        at(to).saturating_sub(at(from)) as f64
    }

    /// CPU cores used on average by this process and the peer during the run.
    fn cpu(&self, peer: Option<u32>) -> f64 {
        let peer_cpu = match (peer, self.peer_cpu_start) {
            (Some(pid), Some((p0, c0))) if pid == p0 => cpu_secs(pid).map_or(0.0, |c| c - c0),
            _ => 0.0,
        };
        (self.cpu_self + peer_cpu) / self.secs
    }
}

/// Sends `msg`-byte messages, IN_FLIGHT at a time, for `dur`, then waits for those in flight.
/// With `change`, rail 0 of host 0 drops to a quarter of 2 Gbit/s at that time.
async fn drive(
    cfg: EndpointConfig,
    peer: &[SocketAddr],
    msg: u64,
    dur: Duration,
    change: Option<(&Rig, Duration)>,
) -> RunResult {
    let data = pattern(msg as usize, SEED);
    let ep = Endpoint::bind(cfg).await.expect("bind");
    let peer_pid = peer_pid_by_addr(peer);
    let peer_cpu_start = peer_pid.and_then(|p| cpu_secs(p).map(|c| (p, c)));
    let cpu0 = cpu_secs(std::process::id()).unwrap_or(0.0);
    let start = Instant::now();
    let mut timeline = vec![(0.0, 0)];
    let mut changed = change.is_none();
    let senders = (0..IN_FLIGHT).map(|_| {
        let (ep, data) = (&ep, data.clone());
        async move {
            let mut n = 0u64;
            while start.elapsed() < dur {
                ep.send(peer, 0, data.clone()).await.expect("send");
                n += data.len() as u64;
            }
            n
        }
    });
    let all = join_all(senders.collect());
    let sent: u64 = {
        tokio::pin!(all);
        let mut tick = tokio::time::interval(TICK);
        loop {
            tokio::select! {
                n = &mut all => break n.iter().sum(),
                _ = tick.tick() => {
                    let t = start.elapsed();
                    timeline.push((t.as_secs_f64(), ep.stats().bytes_acked));
                    if !changed && let Some((rig, at)) = change && t >= at {
                        rig.set_rate(0, 0, "500mbit").expect("set-rate");
                        changed = true;
                    }
                }
            }
        }
    };
    let secs = start.elapsed().as_secs_f64();
    timeline.push((secs, ep.stats().bytes_acked));
    let cpu_self = cpu_secs(std::process::id()).unwrap_or(0.0) - cpu0;
    let rail_bytes = ep.stats().rails.iter().map(|r| r.bytes_sent).collect();
    ep.shutdown().await;
    RunResult { bytes: sent, secs, rail_bytes, timeline, cpu_self, peer_cpu_start }
}

/// Awaits futures concurrently (they run interleaved on this task).
async fn join_all<F: std::future::Future<Output = u64>>(fs: Vec<F>) -> Vec<u64> {
    let mut fs: Vec<_> = fs.into_iter().map(Box::pin).map(Some).collect();
    let mut out = vec![0; fs.len()];
    std::future::poll_fn(|cx| {
        let mut pending = false;
        for (i, f) in fs.iter_mut().enumerate() {
            if let Some(fut) = f {
                match fut.as_mut().poll(cx) {
                    std::task::Poll::Ready(v) => {
                        out[i] = v;
                        *f = None;
                    }
                    std::task::Poll::Pending => pending = true,
                }
            }
        }
        if pending { std::task::Poll::Pending } else { std::task::Poll::Ready(()) }
    })
    .await;
    out
}

/// Starts `rails --serve` in host `h` of the rig (or here, for loopback), with `extra`
/// arguments (the handshake mode's).
fn spawn_peer(rig: Option<&Rig>, rails: &[IpAddr], extra: &[String]) -> PeerProcess {
    let exe = std::env::current_exe().expect("own path").to_string_lossy().into_owned();
    let mut args = vec!["--serve".to_string(), "--quiet".to_string()];
    for r in rails {
        args.extend(["--rail".to_string(), r.to_string()]);
    }
    args.extend(extra.iter().cloned());
    let child = match rig {
        Some(rig) => rig.spawn(1, &exe, &args).expect("spawn peer"),
        None => {
            Command::new(&exe).args(&args).stdin(Stdio::piped()).stdout(Stdio::piped()).spawn().expect("spawn peer")
        }
    };
    PeerProcess::new(child).expect("peer ready")
}

/// The peer's pid, found by the port it listens on (ss is in iproute2, which the rig needs).
fn peer_pid_by_addr(peer: &[SocketAddr]) -> Option<u32> {
    let port = peer.first()?.port();
    for pid in std::fs::read_dir("/proc").ok()?.flatten().filter_map(|e| e.file_name().to_str()?.parse::<u32>().ok()) {
        let cmd = std::fs::read(format!("/proc/{pid}/cmdline")).unwrap_or_default();
        if pid != std::process::id() && cmd.windows(7).any(|w| w == b"--serve") && listens_on(pid, port) {
            return Some(pid);
        }
    }
    None
}

fn listens_on(pid: u32, port: u16) -> bool {
    let net = std::fs::read_to_string(format!("/proc/{pid}/net/tcp")).unwrap_or_default();
    let needle = format!(":{port:04X} ");
    net.lines().any(|l| {
        l.split_whitespace().nth(1).is_some_and(|a| format!("{a} ").ends_with(&needle))
            && l.split_whitespace().nth(3) == Some("0A")
    })
}

fn peer_pid(p: &mut PeerProcess) -> Option<u32> {
    peer_pid_by_addr(&p.addrs)
}

/// User + system CPU seconds of a process.
fn cpu_secs(pid: u32) -> Option<f64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let rest = &stat[stat.rfind(')')? + 2..];
    let f: Vec<&str> = rest.split_whitespace().collect();
    let ticks: f64 = f.get(11)?.parse::<f64>().ok()? + f.get(12)?.parse::<f64>().ok()?;
    Some(ticks / clk_tck())
}

fn clk_tck() -> f64 {
    Command::new("getconf")
        .arg("CLK_TCK")
        .output()
        .ok()
        .and_then(|o| String::from_utf8_lossy(&o.stdout).trim().parse().ok())
        .unwrap_or(100.0)
}

/// iperf3 for `secs` from `from` to a server on `to` (in host 1 of the rig, or here); bit/s
/// received.
fn iperf3(rig: Option<&Rig>, to: &str, from: &str, secs: u32) -> Option<f64> {
    Command::new("iperf3").arg("--version").output().ok()?;
    let port = "5299";
    let server_args: Vec<String> = ["-s", "-1", "-B", to, "-p", port].iter().map(|s| s.to_string()).collect();
    let mut server = match rig {
        Some(rig) => rig.spawn(1, "iperf3", &server_args).ok()?,
        None => Command::new("iperf3").args(&server_args).stdout(Stdio::null()).spawn().ok()?,
    };
    std::thread::sleep(Duration::from_millis(300));
    let out =
        Command::new("iperf3").args(["-c", to, "-B", from, "-p", port, "-t", &secs.to_string(), "-J"]).output().ok()?;
    let _ = server.kill();
    let _ = server.wait();
    let json = String::from_utf8_lossy(&out.stdout);
    // The receiver's figure: "sum_received": { … "bits_per_second": N … }.
    let at = json.find("\"sum_received\"")?;
    let key = "\"bits_per_second\":";
    let b = json[at..].find(key)? + at + key.len();
    json[b..].trim_start().split(|c: char| c == ',' || c.is_whitespace()).next()?.parse().ok()
}

fn cores() -> usize {
    std::thread::available_parallelism().map_or(1, |n| n.get())
}

fn loadavg() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .map_or("?".into(), |s| s.split_whitespace().take(3).collect::<Vec<_>>().join(" "))
}
