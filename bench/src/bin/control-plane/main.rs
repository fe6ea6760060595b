//! Control-plane benchmark: a job of 10,000 no-op subtasks across 4 real worker processes on
//! loopback, measured end to end (submitted → placed → persisted → sent → reported done →
//! persisted), plus dispatch latency percentiles and where the coordinator's engine spent its
//! time. Run with `make bench-control` (release build).
//!
//! The whole measurement runs twice, on a secure cluster (mutual TLS between workers and
//! coordinator, TLS and a bearer token on every client call: the default) and on one started
//! with `--insecure`, and the table shows both side by side with their ratio; and a third time
//! on a secure cluster with metrics off (`--http none`), while the first two are scraped every
//! second, so the table shows what metrics cost (issue 18: < 5 % of throughput).
//!
//! Then a deep-queue run (issue 14): one secure cluster of 4 workers offering 16 cores each (64
//! one-core slots) is given a job of N one-core no-op replicas for N = 1,000, 10,000 and 100,000,
//! so that N replicas wait for those 64 slots, and placements per second are measured at each
//! depth side by side; then the same with priorities and small gangs mixed in (a priority-0 job of
//! N replicas submitted together with a few priority-10 jobs whose task is a gang of 4 one-core
//! no-op members that start together). The mixed run skips itself, saying why, while the
//! coordinator refuses those job-file fields. Each depth is cut off after a time limit (the rate
//! reached so far is printed, marked "timed out"). `--deep-only` runs only the deep-queue part,
//! `--no-deep` only the TLS / insecure part, `--depth-timeout SECS` changes the limit.
//!
//! Then the stores side by side (issue 19): the same 10,000-subtask bursts and one-subtask jobs
//! on the sled store and on etcd (one member, and three), each with three coordinators where the
//! store is etcd, measured through the leader: placements per second and submit→placed latency;
//! then the failover time: the leader killed with `kill -9` while a job runs, until a standby
//! serves as the leader, at two lease TTLs. `--stores-only` runs only this part, `--no-stores`
//! skips it; it skips itself, saying why, where etcd is not installed.
//!
//! Figures for other schedulers are the ones their projects published (cited, not measured here):
//! they are printed for scale, not as a same-machine comparison.
//!
//! # Layout
//! * `tls`: the bursts and isolated subtasks, TLS, `--insecure` and metrics off side by side.
//! * `deep`: the deep-queue part, plain and mixed, and its table.
//! * `stores`: sled and etcd side by side, the experience stores, and the failover times.

mod deep;
mod stores;
mod tls;

use std::time::Duration;

use deep::{DEPTH_TIMEOUT, measure_deep, print_deep};
use stores::stores;
use tls::tls_vs_insecure;

const SUBTASKS: u32 = 10_000;
const RUNS: usize = 3;
/// Single-subtask jobs submitted one after another, to measure the latency of one subtask on an
/// idle control plane (the burst runs measure throughput).
const SINGLES: usize = 200;

/// The command line: which parts to run.
#[derive(Debug, clap::Parser)]
#[command(
    name = "control-plane",
    about = "The control plane's throughput and latency, TLS and insecure, sled and etcd, side by side"
)]
struct Cli {
    /// Only the deep-queue part.
    #[arg(long = "deep-only")]
    deep_only: bool,
    /// Leave out the deep-queue part.
    #[arg(long = "no-deep")]
    no_deep: bool,
    /// Only the stores part (sled and etcd).
    #[arg(long = "stores-only")]
    stores_only: bool,
    /// Leave out the stores part.
    #[arg(long = "no-stores")]
    no_stores: bool,
    /// How long the deep-queue part may take, seconds.
    #[arg(long = "depth-timeout", value_name = "SECS", default_value_t = DEPTH_TIMEOUT.as_secs())]
    depth_timeout: u64,
}

fn main() {
    let c = <Cli as clap::Parser>::parse();
    let tls_part = !c.deep_only && !c.stores_only;
    let deep_part = !c.no_deep && !c.stores_only;
    let store_part = !c.no_stores && !c.deep_only;
    let limit = Duration::from_secs(c.depth_timeout);
    if tls_part {
        tls_vs_insecure();
    }
    if store_part {
        stores();
    }
    if deep_part {
        let m = measure_deep(limit);
        print_deep(&m, limit);
    }
}

/// The coordinator engine's stats line, field by field.
fn print_engine(mode: &str, what: &str, engine: &Option<String>) {
    match engine {
        Some(line) => {
            println!("coordinator engine ({mode}), {what}:");
            for field in ["rounds", "commands", "records", "apply_ms", "schedule_ms", "commit_ms", "dispatch_ms"] {
                if let Some(v) = line.split_whitespace().find_map(|w| w.strip_prefix(&format!("{field}="))) {
                    println!("  {field:<12} {v}");
                }
            }
        }
        None => println!("(no engine stats line in the {mode} coordinator log)"),
    }
}
