//! The command line: the stream's seed and size, the placers, the workers' quotas and rails.

use std::time::Duration;

#[derive(Clone, Debug)]
pub(crate) struct Opts {
    pub(crate) seed: u64,
    pub(crate) jobs: usize,
    pub(crate) warmup: usize,
    pub(crate) placers: Vec<String>,
    pub(crate) rig: bool,
    /// Percent of one core, per worker.
    pub(crate) quotas: Vec<f64>,
    /// Workers behind the slow rail (rig only).
    pub(crate) slow: Vec<usize>,
    pub(crate) fast_rate: String,
    pub(crate) slow_rate: String,
    /// Cores each worker offers (`--cpus`); every task asks for one.
    pub(crate) slots: u32,
    pub(crate) interval_ms: u64,
    pub(crate) block: usize,
    pub(crate) job_timeout: Duration,
    pub(crate) drain: Duration,
}

/// The command line.
#[derive(Debug, clap::Parser)]
#[command(name = "placement-live", about = "The placers side by side on a real heterogeneous cluster")]
struct Cli {
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// Jobs measured; at least 1.
    #[arg(long, default_value_t = 40, value_parser = clap::value_parser!(u64).range(1..))]
    jobs: u64,
    /// Jobs run first, not measured.
    #[arg(long, default_value_t = 10)]
    warmup: usize,
    /// Placers, comma-separated.
    #[arg(long, value_delimiter = ',', default_value = "least-loaded,locality,fastest,rl")]
    placers: Vec<String>,
    /// Run on loopback instead of the rail rig.
    #[arg(long = "no-rig")]
    no_rig: bool,
    /// Each worker's CPU quota, percent of one core, comma-separated (at least two workers).
    #[arg(long, value_delimiter = ',', default_value = "100,50,25,25")]
    quotas: Vec<f64>,
    /// Workers behind the slow rail (rig only), comma-separated; `none` for none.
    #[arg(long, default_value = "1,3", value_parser = parse_slow)]
    slow: Slow,
    #[arg(long = "fast-rate", default_value = "1gbit")]
    fast_rate: String,
    #[arg(long = "slow-rate", default_value = "200mbit")]
    slow_rate: String,
    /// Cores each worker offers (`--cpus`); every task asks for one. At least 1.
    #[arg(long, default_value_t = 2, value_parser = clap::value_parser!(u32).range(1..))]
    slots: u32,
    #[arg(long = "interval-ms", default_value_t = 2000)]
    interval_ms: u64,
    #[arg(long, default_value_t = 10)]
    block: u64,
    /// How long one job may run, seconds.
    #[arg(long = "job-timeout", value_name = "SECS", default_value_t = 180)]
    job_timeout: u64,
    /// How long after the last arrival every job must be done, seconds.
    #[arg(long, value_name = "SECS", default_value_t = 180)]
    drain: u64,
}

/// `--slow`: worker indices (a newtype, so clap takes the whole list as one value).
#[derive(Clone, Debug)]
struct Slow(Vec<usize>);

fn parse_slow(v: &str) -> Result<Slow, String> {
    if v.is_empty() || v == "none" {
        return Ok(Slow(vec![]));
    }
    v.split(',').map(|x| x.trim().parse().map_err(|e| format!("{x:?}: {e}"))).collect::<Result<_, _>>().map(Slow)
}

/// Ends the program with a usage error saying `msg`, as clap does for the flags it checks.
fn fail(msg: String) -> ! {
    use clap::CommandFactory;
    Cli::command().error(clap::error::ErrorKind::ValueValidation, msg).exit()
}

pub(crate) fn parse_opts() -> Opts {
    let c = <Cli as clap::Parser>::parse();
    let o = Opts {
        seed: c.seed,
        jobs: c.jobs as usize,
        warmup: c.warmup,
        placers: c.placers,
        rig: !c.no_rig,
        quotas: c.quotas,
        slow: c.slow.0,
        fast_rate: c.fast_rate,
        slow_rate: c.slow_rate,
        slots: c.slots,
        interval_ms: c.interval_ms,
        block: c.block.max(1) as usize,
        job_timeout: Duration::from_secs(c.job_timeout),
        drain: Duration::from_secs(c.drain),
    };
    for p in &o.placers {
        if !plexus_coordinator::learned::PLACERS.contains(&p.as_str()) {
            fail(format!("unknown placer {p:?} (known: {})", plexus_coordinator::learned::PLACERS.join(", ")));
        }
    }
    if o.quotas.len() < 2 || o.quotas.iter().any(|q| !(q.is_finite() && *q >= 1.0)) {
        fail("--quotas needs at least two workers, each at least 1 (% of a core)".into());
    }
    if o.slow.iter().any(|&s| s >= o.quotas.len()) {
        fail(format!("--slow names a worker past the {} of --quotas", o.quotas.len()));
    }
    o
}
