//! The chaos run at CI size (issue 29): the same harness as `bench --bin chaos`
//! (`plexus_e2e::chaos`), two minutes of a seeded job stream on a sled cluster of three workers
//! while seeded faults hit it (`kill -9` and `SIGSTOP` of workers and the coordinator, worker 0's
//! data dir filled up, the last worker's network link cut, worker 1's disk throttled), then
//! every invariant asserted: no acknowledged job lost, every job ended
//! within the bound after the faults, no subtask run twice at once, every output of a succeeded
//! job byte for byte what the seed says. On failure the table names each violation and the seed,
//! and the run's directory (logs, ledger) is kept and its path printed.
//!
//! Which invariants hold on which code: "no job lost" and "every job ends" hold today. "No subtask
//! run twice at once" holds only once fencing lands (a `SIGSTOP`'d worker's attempts finish
//! beside their replacements, a `kill -9`'d worker's run on until it restarts; issue 29, "No
//! subtask runs twice at once"); "outputs match" is checked against the expected bytes here,
//! and the coordinator's own digest check (issue 29, item 1) makes a corrupt holder count as a
//! lost one. The assertion is not weakened for either: until those land, this test fails and
//! its table says which invariant, with the seed.
//!
//! On the main of 2026-11-27 (before fencing) it fails as expected, seed 29: two subtasks ran
//! twice at once, both while a worker was `SIGSTOP`'d past the heartbeat timeout (declared lost,
//! its attempts placed again while the originals ran on).
//!
//! The disk-full, partition and slow-disk faults need root (a tmpfs; a network namespace; a loop
//! device and a blkio cgroup); without it the run leaves them out and the table says why. Under
//! `PLEXUS_REQUIRE_ALL=1` (CI) leaving one out fails the test.

use std::time::Duration;

use plexus_e2e::chaos::{self, Config};

/// `PLEXUS_CHAOS_SECONDS=N` runs the same test for N seconds of faults, `PLEXUS_CHAOS_HA=1` on
/// etcd (3 members) with 3 coordinators: a longer run without the benchmark's build (which links
/// libtorch); `bench --bin chaos` is the full command line.
fn from_env(name: &str) -> Option<u64> {
    let v = std::env::var(name).ok()?;
    Some(v.trim().parse().unwrap_or_else(|e| panic!("{name}={v:?}: {e}")))
}

#[test]
fn a_seeded_stream_of_jobs_under_seeded_faults_keeps_every_invariant() {
    let ha = from_env("PLEXUS_CHAOS_HA") == Some(1);
    if ha && let Some(why) = plexus_e2e::etcd::etcd_available() {
        panic!("PLEXUS_CHAOS_HA=1 needs etcd: {why}");
    }
    let config = Config {
        seed: 29,
        duration: Duration::from_secs(from_env("PLEXUS_CHAOS_SECONDS").unwrap_or(120)),
        settle: Duration::from_secs(150),
        fault_every: Duration::from_secs(8),
        workers: 3,
        ha,
        coordinators: if ha { 3 } else { 1 },
        max_in_flight: 3,
        keep: false,
    };
    let report = chaos::run(&config, &plexus_e2e::bin_dir()).unwrap_or_else(|e| panic!("the chaos run: {e}"));
    let table = report.table();
    eprintln!("{table}");
    assert!(report.submitted >= 10, "the stream submitted too little to mean anything:\n{table}");
    assert!(!report.faults.is_empty(), "no fault was injected:\n{table}");
    assert!(report.outputs_checked > 0, "no output was checked:\n{table}");
    if std::env::var("PLEXUS_REQUIRE_ALL").as_deref() == Ok("1") {
        // Every fault a sled cluster can have (etcd members are for --ha).
        let missing: Vec<_> = report.not_injected.iter().filter(|(what, _)| !what.contains("etcd")).collect();
        assert!(missing.is_empty(), "PLEXUS_REQUIRE_ALL=1 and faults were left out: {missing:?}\n{table}");
    }
    let violations = report.violations();
    assert!(violations.is_empty(), "{} invariants violated (seed {}):\n{table}", violations.len(), config.seed);
}
