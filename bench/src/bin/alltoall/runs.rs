//! The parent's runs: our worker processes for one world, and Gloo's anchor on the same tables.

use std::io::BufRead;
use std::sync::Arc;
use std::time::Duration;

use plexus_bench::gloo;
use plexus_dataplane::rig::Rig;

use crate::args::{Opts, Sched, TableKind};
use crate::table::Case;
use crate::{GLOO_TIMEOUT, MIB, WARMUP};

/// The machine's CPU time so far, (busy, total) in clock ticks, from /proc/stat.
fn cpu_ticks() -> (u64, u64) {
    let text = std::fs::read_to_string("/proc/stat").unwrap_or_default();
    let v: Vec<u64> =
        text.lines().next().unwrap_or("").split_whitespace().skip(1).filter_map(|x| x.parse().ok()).collect();
    let total: u64 = v.iter().sum();
    // idle and iowait are the 4th and 5th fields.
    let idle = v.get(3).copied().unwrap_or(0) + v.get(4).copied().unwrap_or(0);
    (total - idle, total)
}

pub(crate) fn loadavg() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .map(|s| s.split_whitespace().take(3).collect::<Vec<_>>().join(" "))
        .unwrap_or_else(|_| "?".into())
}

/// One of our measurements: (N, MiB, table, schedule, rails used) → median seconds.
pub(crate) struct Row {
    pub(crate) n: usize,
    pub(crate) mib: usize,
    pub(crate) table: TableKind,
    pub(crate) sched: Sched,
    /// On the rig, how many rails ours used; 0 on loopback.
    pub(crate) rails: usize,
    pub(crate) median: f64,
    /// What an `auto` row ran in its last iteration (css, pairwise, shift, direct); "-" else.
    pub(crate) ran: String,
}

/// Gloo's `all_to_all_single` on one table.
pub(crate) struct GlooRow {
    pub(crate) n: usize,
    pub(crate) mib: usize,
    pub(crate) table: TableKind,
    pub(crate) median: f64,
    pub(crate) correct: bool,
}

/// Spawns `n` workers (on the rig, rank h in host h with its first `rails` rails), introduces
/// them, and collects rank 0's results; false if a worker failed. It says how busy the
/// machine's cores were meanwhile (whoever kept them busy): near 100 %, the exchanges were
/// bound by CPU, not by the links.
pub(crate) fn run_world(n: usize, opts: &Opts, rig: Option<(&Rig, usize)>) -> (Vec<Row>, bool) {
    let cpu0 = cpu_ticks();
    let key = plexus_bench::world::key(&opts.auth);
    let (children, mut readers) = plexus_bench::world::spawn(n, &opts.to_args(), key.as_deref(), rig);
    let rails = rig.map_or(0, |r| r.1);
    // A worker that fails (its exchange's abort could not reach a rank, or the network went
    // away) would leave the others waiting for it forever: the watchdog then ends them all, so
    // rank 0's stdout closes and the run goes on with what was measured.
    let children = Arc::new(std::sync::Mutex::new(children));
    let watchdog = {
        let children = children.clone();
        std::thread::spawn(move || {
            let mut ok = true;
            loop {
                let mut cs = children.lock().expect("children lock");
                let mut running = 0;
                for c in cs.iter_mut() {
                    match c.try_wait() {
                        Ok(Some(s)) => ok &= s.success(),
                        Ok(None) => running += 1,
                        Err(_) => ok = false,
                    }
                }
                if running == 0 {
                    return ok;
                }
                if !ok {
                    for c in cs.iter_mut() {
                        let _ = c.kill();
                        let _ = c.wait();
                    }
                    return false;
                }
                drop(cs);
                std::thread::sleep(Duration::from_millis(200));
            }
        })
    };
    let mut rows = Vec::new();
    for line in readers.swap_remove(0).lines() {
        let Ok(line) = line else { break };
        let f: Vec<&str> = line.split_whitespace().collect();
        if f.first() != Some(&"RESULT") || f.len() != 6 {
            continue;
        }
        let row = Row {
            n,
            mib: f[1].parse().expect("size"),
            table: f[2].parse().expect("table"),
            sched: f[3].parse().expect("schedule"),
            rails,
            median: f[4].parse().expect("median"),
            ran: f[5].to_string(),
        };
        eprintln!(
            "N={n} {} MiB {} {}{}: median {:.2} ms",
            row.mib,
            row.table.name(),
            row.sched.name(),
            if rails > 0 { format!(" ({rails} rails)") } else { String::new() },
            row.median * 1e3
        );
        rows.push(row);
    }
    let ok = watchdog.join().unwrap_or(false);
    if let Some((rig, _)) = rig
        && rig.hosts() > 1
        && !std::path::Path::new("/run/netns/plx-h1").exists()
    {
        println!(
            "N={n}: the rig's namespaces are gone: something else took the rig down during the run (another `rails-rig.sh up` or `down` on this machine)"
        );
    }
    let cpu1 = cpu_ticks();
    println!(
        "N={n}{}: the machine's cores were {:.0} % busy while the workers ran (load average now {})",
        if rails > 0 { format!(" on {rails} rails") } else { String::new() },
        100.0 * (cpu1.0 - cpu0.0) as f64 / (cpu1.1 - cpu0.1).max(1) as f64,
        loadavg()
    );
    (rows, ok)
}

/// Gloo's `all_to_all_single` on every table of world `n`: spawn mode on loopback, or one
/// process per rank on rail 0 of the rig.
pub(crate) fn gloo_world(n: usize, opts: &Opts, rig: Option<&Rig>) -> Vec<GlooRow> {
    let mut rows = Vec::new();
    for &mib in &opts.sizes {
        for &t in &opts.tables {
            let c = Case::new(t, n, (mib * MIB) as u64, opts);
            let path = std::env::temp_dir().join(format!(
                "plexus-alltoall-{}-{n}-{mib}-{}.json",
                std::process::id(),
                t.name()
            ));
            let rows_json: Vec<Vec<u64>> = (0..n).map(|i| c.table.row(i).to_vec()).collect();
            if let Err(e) = std::fs::write(&path, serde_json::to_string(&rows_json).expect("json")) {
                println!("gloo: cannot write {}: {e}", path.display());
                continue;
            }
            let job = gloo::Job {
                args: vec!["alltoall".into(), "--table".into(), path.to_string_lossy().into_owned()],
                env: vec![("WARMUP", WARMUP.to_string()), ("ITERS", opts.iters.to_string()), ("WORLDS", n.to_string())],
                timeout: GLOO_TIMEOUT,
            };
            eprintln!(
                "running Gloo all_to_all_single: N={n} {mib} MiB {} ({} {})",
                t.name(),
                gloo::python(),
                gloo::SCRIPT
            );
            let out = match rig {
                None => gloo::spawn_mode(&job),
                Some(rig) => gloo::on_rig(rig, &job),
            };
            let _ = std::fs::remove_file(&path);
            let got = out.and_then(|v| {
                let r = v.get(0).ok_or("no result row")?;
                let median = r["median_s"].as_f64().ok_or("no median_s")?;
                let total = r["total_bytes"].as_u64().ok_or("no total_bytes")?;
                if total != c.network_bytes() {
                    return Err(format!("Gloo exchanged {total} bytes, the table has {}", c.network_bytes()));
                }
                Ok(GlooRow { n, mib, table: t, median, correct: r["correct"].as_bool() == Some(true) })
            });
            match got {
                Ok(g) => {
                    eprintln!("Gloo N={n} {mib} MiB {}: median {:.2} ms", t.name(), g.median * 1e3);
                    rows.push(g)
                }
                Err(e) => println!("gloo: N={n} {mib} MiB {}: the anchor script did not run: {e}", t.name()),
            }
        }
    }
    rows
}
