//! The command line: the tables and schedules a run measures, and the flags a worker is given.

use std::net::IpAddr;

use plexus_dataplane::{EndpointConfig, ScheduleKind};

use crate::MIB;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum TableKind {
    Uniform,
    Skewed,
    BlockCyclic,
}

impl TableKind {
    const ALL: &'static [TableKind] = &[TableKind::Uniform, TableKind::Skewed, TableKind::BlockCyclic];

    pub(crate) fn name(self) -> &'static str {
        match self {
            TableKind::Uniform => "uniform",
            TableKind::Skewed => "skewed",
            TableKind::BlockCyclic => "block-cyclic",
        }
    }
}

impl std::str::FromStr for TableKind {
    type Err = String;

    fn from_str(s: &str) -> Result<TableKind, String> {
        TableKind::ALL
            .iter()
            .copied()
            .find(|t| t.name() == s)
            .ok_or_else(|| format!("unknown table {s:?} (uniform, skewed, block-cyclic)"))
    }
}

/// A schedule to measure: one the exchanger builds from the table, or one of the seed's two
/// for block-cyclic redistribution (given to `alltoallv_with`), or no schedule at all.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Sched {
    Kind(ScheduleKind),
    /// css with the seed's pacing (`Exchanger::with_acked_steps`): each step ends only when its
    /// send is acknowledged, a round trip after its last byte (the default before issue 30).
    CssAcked,
    Alg1,
    Alg2,
    /// Not an exchanger's: every message at once through `Endpoint::send`/`recv`, what Gloo's
    /// `all_to_all_single` does, on our transport. It tells the cost of the steps from the
    /// cost of the transport.
    Direct,
    /// The exchanger's own send-at-once (`ExchangeAlgorithm::Direct`, what a job's
    /// `schedule = "direct"` runs).
    XDirect,
    /// What the cost model picks from what the workers measured (a job's default).
    Auto,
    /// `auto` with every message striped by the endpoint's rail scheduler alone
    /// (`Exchanger::with_rail_shares(false)`), not by both ends' rail shares: what the
    /// receiver-aware shares change.
    AutoRailScheduler,
}

impl Sched {
    const ALL: &'static [Sched] = &[
        Sched::Kind(ScheduleKind::Shift),
        Sched::Kind(ScheduleKind::Pairwise),
        Sched::Kind(ScheduleKind::Css),
        Sched::CssAcked,
        Sched::Alg1,
        Sched::Alg2,
        Sched::Direct,
        Sched::XDirect,
        Sched::Auto,
        Sched::AutoRailScheduler,
    ];

    /// Whether it runs along a schedule's steps (so the schedule's columns mean something).
    pub(crate) fn stepped(self) -> bool {
        !matches!(self, Sched::Direct | Sched::XDirect | Sched::Auto | Sched::AutoRailScheduler)
    }

    pub(crate) fn name(self) -> &'static str {
        match self {
            Sched::Kind(k) => k.name(),
            Sched::CssAcked => "css-acked",
            Sched::Alg1 => "alg1",
            Sched::Alg2 => "alg2",
            Sched::Direct => "direct",
            Sched::XDirect => "x-direct",
            Sched::Auto => "auto",
            Sched::AutoRailScheduler => "auto-sched",
        }
    }
}

impl std::str::FromStr for Sched {
    type Err = String;

    fn from_str(s: &str) -> Result<Sched, String> {
        Sched::ALL.iter().copied().find(|k| k.name() == s).ok_or_else(|| {
            format!(
                "unknown schedule {s:?} (shift, pairwise, css, css-acked, alg1, alg2, direct, x-direct, auto, auto-sched)"
            )
        })
    }
}

#[derive(Clone, Debug)]
pub(crate) struct Opts {
    pub(crate) worlds: Vec<usize>,
    pub(crate) sizes: Vec<usize>,
    pub(crate) tables: Vec<TableKind>,
    pub(crate) schedules: Vec<Sched>,
    pub(crate) iters: usize,
    pub(crate) zipf: f64,
    pub(crate) seed: u64,
    pub(crate) gloo: bool,
    /// The rail rig's rails (`--rig`), for the parent.
    pub(crate) rig: Option<String>,
    /// On the rig, how many rails ours uses, each in turn (`--rails-used`); empty: every rail.
    pub(crate) rails_used: Vec<usize>,
    /// Rail authentication (`--auth open|key`; default `key`, the product's).
    pub(crate) auth: String,
    /// The endpoints' largest segment (`--seg-max`, MiB, fractions allowed).
    pub(crate) seg_max: u64,
    /// SO_SNDBUF of the rail connections, bytes (`--sndbuf KiB`); none: the kernel's autotuning.
    pub(crate) sndbuf: Option<usize>,
    /// After the rig's worlds, the same bench on loopback at these sizes (MiB), uniform tables,
    /// `auto` against Gloo (`--loopback-sizes`); empty: none.
    pub(crate) loopback_sizes: Vec<usize>,
    /// The worlds of that loopback part (`--loopback-worlds`; default `--worlds`).
    pub(crate) loopback_worlds: Vec<usize>,
    /// This worker's rail addresses (`--rails`, given by the parent); empty: 127.0.0.1.
    pub(crate) rails: Vec<IpAddr>,
    /// This worker's rail key, hex (`--rail-key`, given by the parent for `key`); none: open.
    pub(crate) rail_key: Option<String>,
}

/// The command line. `--worker R` (with `--rails` and `--rail-key`) is how the benchmark starts
/// its own rank processes; a person passes the other flags.
#[derive(Debug, clap::Parser)]
#[command(name = "alltoall", about = "Plexus all-to-all schedules side by side, with Gloo as the anchor")]
struct Cli {
    /// World sizes (ranks), comma-separated; each at least 2.
    #[arg(long, value_delimiter = ',', default_value = "4,8")]
    worlds: Vec<usize>,
    /// Total bytes exchanged per table, MiB, comma-separated.
    #[arg(long, value_delimiter = ',', default_value = "64,256")]
    sizes: Vec<usize>,
    /// Tables: uniform, skewed, block-cyclic.
    #[arg(long, value_delimiter = ',', default_value = "uniform,skewed,block-cyclic")]
    tables: Vec<TableKind>,
    /// Schedules: shift, pairwise, css, css-acked, alg1, alg2, direct, x-direct, auto, auto-sched.
    #[arg(long, value_delimiter = ',', default_value = "shift,pairwise,css,css-acked,alg1,alg2,direct,x-direct,auto")]
    schedules: Vec<Sched>,
    /// With --rig: afterwards, on loopback, uniform tables of these sizes (MiB), `auto` against
    /// Gloo, in the same run.
    #[arg(long = "loopback-sizes", value_delimiter = ',')]
    loopback_sizes: Vec<usize>,
    /// The worlds of the loopback part (default: --worlds).
    #[arg(long = "loopback-worlds", value_delimiter = ',')]
    loopback_worlds: Vec<usize>,
    /// Timed iterations per schedule (after the warm-up).
    #[arg(long, default_value_t = 5, value_parser = clap::value_parser!(u64).range(1..))]
    iters: u64,
    /// The skewed table's Zipf exponent.
    #[arg(long, default_value_t = 1.2)]
    zipf: f64,
    #[arg(long, default_value_t = 4)]
    seed: u64,
    /// Leave out the Gloo anchor.
    #[arg(long = "no-gloo")]
    no_gloo: bool,
    /// Run on the rail rig with these rail rates (e.g. `1gbit,500mbit`).
    #[arg(long)]
    rig: Option<String>,
    /// On the rig, how many rails ours uses, each in turn, comma-separated (default: every rail).
    #[arg(long = "rails-used", value_delimiter = ',')]
    rails_used: Vec<usize>,
    /// Rail authentication: `key` (the product's) or `open`.
    #[arg(long, default_value = "key", value_parser = ["open", "key"])]
    auth: String,
    /// The endpoints' largest segment, MiB (fractions allowed; default: the endpoint's).
    #[arg(long = "seg-max", value_name = "MIB")]
    seg_max: Option<f64>,
    /// SO_SNDBUF of the rail connections, KiB (default: the kernel's autotuning).
    #[arg(long, value_name = "KIB")]
    sndbuf: Option<usize>,
    #[command(flatten)]
    world: plexus_bench::world::WorkerArgs,
}

impl Opts {
    /// The options and, for a worker process, its rank.
    pub(crate) fn parse() -> (Opts, Option<usize>) {
        use clap::{CommandFactory, Parser};
        let c = Cli::parse();
        if c.worlds.iter().chain(&c.loopback_worlds).any(|&n| n < 2) {
            Cli::command()
                .error(clap::error::ErrorKind::ValueValidation, "every world needs at least 2 ranks (--worlds)")
                .exit();
        }
        let opts = Opts {
            worlds: c.worlds.clone(),
            sizes: c.sizes,
            tables: c.tables,
            schedules: c.schedules,
            iters: c.iters as usize,
            zipf: c.zipf,
            seed: c.seed,
            gloo: !c.no_gloo,
            rig: c.rig,
            rails_used: c.rails_used,
            loopback_worlds: if c.loopback_worlds.is_empty() { c.worlds.clone() } else { c.loopback_worlds },
            loopback_sizes: c.loopback_sizes,
            auth: c.auth,
            seg_max: c.seg_max.map_or(EndpointConfig::default().seg_max, |m| (m * MIB as f64) as u64),
            sndbuf: c.sndbuf.map(|k| k << 10),
            rails: c.world.rails,
            rail_key: c.world.rail_key,
        };
        (opts, c.world.worker)
    }

    /// The loopback part of a rig run: its worlds and sizes, uniform tables, `auto` (Gloo as
    /// configured), on no rig.
    pub(crate) fn loopback(&self) -> Opts {
        Opts {
            worlds: self.loopback_worlds.clone(),
            sizes: self.loopback_sizes.clone(),
            tables: vec![TableKind::Uniform],
            schedules: vec![Sched::Auto],
            rig: None,
            rails_used: Vec::new(),
            loopback_sizes: Vec::new(),
            ..self.clone()
        }
    }

    /// What a worker needs to rebuild the same tables and run the same schedules.
    pub(crate) fn to_args(&self) -> Vec<String> {
        let join = |v: Vec<String>| v.join(",");
        let mut args = vec![
            "--sizes".into(),
            join(self.sizes.iter().map(|x| x.to_string()).collect()),
            "--tables".into(),
            join(self.tables.iter().map(|t| t.name().to_string()).collect()),
            "--schedules".into(),
            join(self.schedules.iter().map(|s| s.name().to_string()).collect()),
            "--iters".into(),
            self.iters.to_string(),
            "--zipf".into(),
            self.zipf.to_string(),
            "--seed".into(),
            self.seed.to_string(),
            "--seg-max".into(),
            (self.seg_max as f64 / MIB as f64).to_string(),
        ];
        if let Some(b) = self.sndbuf {
            args.extend(["--sndbuf".into(), (b >> 10).to_string()]);
        }
        args
    }
}
