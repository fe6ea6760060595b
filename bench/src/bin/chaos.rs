//! The chaos run, the reliability benchmark (issue 29): a cluster on loopback (one coordinator on
//! sled, or with `--ha` three etcd members and several coordinators) runs a seeded stream of jobs
//! — DAGs, gangs, an allreduce, outputs of a few MiB, every task appending its life to a ledger —
//! for `--duration` seconds while seeded faults hit it: `kill -9` and `SIGSTOP`/`SIGCONT` of
//! workers and coordinators, etcd members killed and restarted, worker 0's data dir (a small
//! tmpfs) filled up. Then the invariant checker prints its table: jobs submitted, ended, lost;
//! subtasks run twice at once (from the ledger); outputs whose bytes do not match (fetched with
//! `plexus get`); jobs not ended within `--settle` seconds after the last fault; the faults by
//! kind; and the seed and command line that reproduce any violation. Exits 1 when an invariant
//! is violated (the run's directory, logs and ledger included, is kept then), 2 when the cluster
//! could not be started.
//!
//! The harness is `plexus_e2e::chaos`, which `e2e/tests/chaos.rs` runs at CI size. Needs root
//! for the small disk (without it, that fault is left out and the table says why) and the
//! Plexus binaries built next to this one (`cargo build --release --workspace --bins`).
//! `make bench-chaos` runs three minutes on sled.

use std::process::ExitCode;
use std::time::Duration;

use plexus_e2e::chaos::{self, Config};

#[derive(Debug, clap::Parser)]
#[command(name = "chaos", about = "A seeded stream of jobs under seeded faults, and the invariants that must hold")]
struct Args {
    /// The seed of the job stream and of the fault plan.
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// Seconds of jobs and faults.
    #[arg(long, default_value_t = 180, value_parser = clap::value_parser!(u64).range(10..))]
    duration: u64,
    /// Seconds every job gets to end after the last fault is healed.
    #[arg(long, default_value_t = 180, value_parser = clap::value_parser!(u64).range(10..))]
    settle: u64,
    /// The mean pause in seconds between one fault's end and the next one's start.
    #[arg(long, default_value_t = 6, value_parser = clap::value_parser!(u64).range(1..))]
    fault_every: u64,
    /// Worker processes (2 cores each).
    #[arg(long, default_value_t = 4, value_parser = clap::value_parser!(u64).range(2..=16))]
    workers: u64,
    /// etcd (3 members) and several coordinators instead of one coordinator on sled.
    #[arg(long)]
    ha: bool,
    /// Coordinators with `--ha`.
    #[arg(long, default_value_t = 3, value_parser = clap::value_parser!(u64).range(2..=3))]
    coordinators: u64,
    /// At most this many jobs running at once.
    #[arg(long, default_value_t = 4, value_parser = clap::value_parser!(u64).range(1..=64))]
    max_in_flight: u64,
    /// Keep the run's directory (logs, ledger) even when every invariant held.
    #[arg(long)]
    keep: bool,
}

fn main() -> ExitCode {
    let a = <Args as clap::Parser>::parse();
    let config = Config {
        seed: a.seed,
        duration: Duration::from_secs(a.duration),
        settle: Duration::from_secs(a.settle),
        fault_every: Duration::from_secs(a.fault_every),
        workers: a.workers as usize,
        ha: a.ha,
        coordinators: a.coordinators as usize,
        max_in_flight: a.max_in_flight as usize,
        keep: a.keep,
    };
    if a.ha
        && let Some(why) = plexus_e2e::etcd::etcd_available()
    {
        eprintln!("chaos: --ha needs etcd ({why}); `make deps` installs it");
        return ExitCode::from(2);
    }
    match chaos::run(&config, &plexus_e2e::bin_dir()) {
        Ok(report) => {
            print!("{}", report.table());
            if report.violations().is_empty() { ExitCode::SUCCESS } else { ExitCode::from(1) }
        }
        Err(e) => {
            eprintln!("chaos: {e}");
            ExitCode::from(2)
        }
    }
}
