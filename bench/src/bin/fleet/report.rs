//! The tables, and what they read from /proc.

use std::time::Duration;

use crate::plane::StoreKind;
use crate::{Args, HEARTBEAT_P99_TARGET_MS, LIST_TARGET, PLACEMENTS_TARGET, REGISTER_TARGET, RSS_TARGET, Row};

/// The CPU time `pid` has used, user and system.
pub(crate) fn cpu_of(pid: u32) -> Option<Duration> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // After the command's closing parenthesis: state is field 3, utime and stime 14 and 15.
    let fields: Vec<&str> = stat.rsplit_once(')')?.1.split_whitespace().collect();
    let ticks: u64 = fields.get(11)?.parse::<u64>().ok()? + fields.get(12)?.parse::<u64>().ok()?;
    // SAFETY: sysconf has no preconditions.
    let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) }.max(1) as u64;
    Some(Duration::from_millis(ticks * 1000 / hz))
}

/// Cores used between two CPU readings `wall` apart.
pub(crate) fn share(before: Option<Duration>, after: Option<Duration>, wall: Duration) -> Option<f64> {
    Some(after?.saturating_sub(before?).as_secs_f64() / wall.as_secs_f64().max(1e-9))
}

/// A process's resident set, bytes.
pub(crate) fn rss_of(pid: u32) -> Option<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let kb: u64 = status.lines().find_map(|l| l.strip_prefix("VmRSS:"))?.split_whitespace().next()?.parse().ok()?;
    Some(kb * 1024)
}

/// Cores, as the table shows them.
fn cores(c: Option<f64>) -> String {
    c.map_or("-".into(), |c| format!("{c:.2}"))
}

pub(crate) fn print(args: &Args, rows: &[Row]) {
    println!(
        "\nfleet: hollow workers of {} cores each over mutual TLS against the coordinator (sled: one; etcd: the \
         leader of two, on {} etcd members), this machine; a job of {} no-op one-core subtasks",
        args.cpus, args.etcd_members, args.subtasks
    );
    println!(
        "{:>6} {:>5} {:>8} {:>9} {:>8} {:>9} {:>8} {:>8} {:>7} {:>8} {:>11} {:>8} {:>9} {:>10} {:>9} {:>10} {:>8} {:>8} {:>9}",
        "N",
        "store",
        "hb/s max",
        "interval",
        "join s",
        "register",
        "hb p50",
        "hb p99",
        "beats",
        "hb cpu",
        "placed/s",
        "job cpu",
        "RSS MiB",
        "+KiB/wkr",
        "list ms",
        "list KiB",
        "page ms",
        "summ ms",
        "not alive"
    );
    for r in rows {
        let rss = r.rss.map_or("-".into(), |b| format!("{:.0}", b as f64 / f64::from(1 << 20)));
        // What the workers added, per worker (the coordinator's own pages, libtorch's among
        // them, are there before the first one).
        let per = match (r.rss, r.rss_before) {
            (Some(a), Some(b)) => format!("{:.0}", a.saturating_sub(b) as f64 / 1024.0 / r.n as f64),
            _ => "-".into(),
        };
        println!(
            "{:>6} {:>5} {:>8} {:>7}ms {:>8.1} {:>8.1}s {:>6.1}ms {:>6.1}ms {:>7} {:>8} {:>11.0} {:>8} {:>9} {:>10} {:>9.1} {:>10.1} {:>8.1} {:>8.2} {:>9}",
            r.n,
            r.store.name(),
            if r.knobs.max_heartbeats_per_sec == 0 {
                "off".to_string()
            } else {
                r.knobs.max_heartbeats_per_sec.to_string()
            },
            r.interval.as_millis(),
            r.join.as_secs_f64(),
            r.register.as_secs_f64(),
            r.hb_p50_ms,
            r.hb_p99_ms,
            r.heartbeats,
            cores(r.idle_cpu),
            r.placements_per_s,
            cores(r.work_cpu),
            rss,
            per,
            r.list.as_secs_f64() * 1e3,
            r.list_bytes as f64 / 1024.0,
            r.page.as_secs_f64() * 1e3,
            r.summary.as_secs_f64() * 1e3,
            r.not_alive
        );
    }
    print_settled(rows);
    print_flood(args, rows);
    print_real(rows);
    print_storms(args, rows);
    print_takeovers(args, rows);
    print_etcd_vs_sled(rows);
    println!("\ntargets (issue 35, meant at 5,000 workers; judged here at each size measured):");
    for r in rows {
        let v = |ok: bool| if ok { "PASS" } else { "FAIL" };
        println!(
            "  N={:<5} {:<4} registered ≤ 60 s {}; heartbeat p99 ≤ 200 ms {}; ≥ 10,000 placements/s {}; RSS ≤ 2 GiB {}; \
             ListWorkers ≤ 1 s {}; none lost {}; heartbeat p99 ≤ 200 ms under the flood {}  ({} assignments \
             answered)",
            r.n,
            r.store.name(),
            v(r.register <= REGISTER_TARGET),
            v(r.hb_p99_ms <= HEARTBEAT_P99_TARGET_MS && r.heartbeats > 0),
            v(r.placements_per_s >= PLACEMENTS_TARGET),
            v(r.rss.is_some_and(|b| b <= RSS_TARGET)),
            v(r.list <= LIST_TARGET),
            v(r.not_alive == 0),
            if args.flood_secs == 0 {
                "-"
            } else {
                v(r.flood.hb_p99_ms <= HEARTBEAT_P99_TARGET_MS && r.flood.heartbeats > 0)
            },
            r.placed
        );
    }
}

/// The heartbeats of the cold start apart from the settled cluster's: when every hollow
/// worker's `Assignments` stream was open after registration, and the p99 of the heartbeats
/// answered after that (the table's own p99 counts every heartbeat of the window).
fn print_settled(rows: &[Row]) {
    println!(
        "\nheartbeats once the cold start is over (every Assignments stream open); the table's hb p99 counts them all"
    );
    println!(
        "{:>6} {:>5} {:>14} {:>8} {:>14} {:>14}",
        "N", "store", "streams open s", "hb p99", "settled beats", "settled p99"
    );
    for r in rows {
        let open = r.streams_open.map_or("-".into(), |t| format!("{:.2}", t.as_secs_f64()));
        println!(
            "{:>6} {:>5} {:>14} {:>6.1}ms {:>14} {:>12.1}ms",
            r.n,
            r.store.name(),
            open,
            r.hb_p99_ms,
            r.settled_beats,
            r.settled_p99_ms
        );
    }
}

/// The real workers' job beside the fleet's (see `phases::place_all`).
fn print_real(rows: &[Row]) {
    if rows.iter().all(|r| r.real.is_none()) {
        return;
    }
    println!(
        "\nreal workers beside the hollow ones: plexus-worker processes on the same control plane, their job (`true`, \
         2 subtasks a worker, one per core) submitted with the fleet's and run while it is placed; coordinator CPU per placement \
         is the job cpu over placements/s"
    );
    println!(
        "{:>6} {:>5} {:>6} {:>10} {:>10} {:>8} {:>16} {:>16} {:>16} {:>14}",
        "N",
        "store",
        "real",
        "subtasks",
        "real job s",
        "verdict",
        "placed ms p50/max",
        "start ms p50/max",
        "ran ms p50/max",
        "cpu µs/placed"
    );
    let span = |(p50, max): (f64, f64)| format!("{p50:.0}/{max:.0}");
    for r in rows {
        let Some(x) = &r.real else { continue };
        let per = r.work_cpu.map_or("-".into(), |c| format!("{:.0}", c / r.placements_per_s.max(1e-9) * 1e6));
        println!(
            "{:>6} {:>5} {:>6} {:>4}/{:<5} {:>10.2} {:>8} {:>16} {:>16} {:>16} {:>14}",
            r.n,
            r.store.name(),
            x.workers,
            x.succeeded,
            x.subtasks,
            x.took.as_secs_f64(),
            if x.ok && x.succeeded == x.subtasks { "PASS" } else { "FAIL" },
            span(x.waited_ms),
            span(x.start_ms),
            span(x.ran_ms),
            per
        );
    }
}

/// The flood's table (see [`flood`]).
fn print_flood(args: &Args, rows: &[Row]) {
    if args.flood_secs > 0 {
        println!(
            "\nflood: {} clients calling ListWorkers ({}) in a loop for {} s, heartbeats timed meanwhile; a shed \
             call is refused at once with RESOURCE_EXHAUSTED (the client waits 20 ms)",
            args.flooders,
            if args.flood_list == "summary" { "the summary alone" } else { "every worker, page_size 0" },
            args.flood_secs
        );
        println!(
            "{:>6} {:>9} {:>10} {:>10} {:>8} {:>9} {:>8} {:>7}",
            "N", "shed ms", "hb p99", "flood p99", "beats", "answered", "shed", "failed"
        );
        for r in rows {
            let f = &r.flood;
            let shed = if r.knobs.shed_lag_ms == 0 { "off".to_string() } else { r.knobs.shed_lag_ms.to_string() };
            println!(
                "{:>6} {:>9} {:>8.1}ms {:>8.1}ms {:>8} {:>9} {:>8} {:>7}",
                r.n, shed, r.hb_p99_ms, f.hb_p99_ms, f.heartbeats, f.answered, f.shed, f.failed
            );
            if let Some(e) = &f.error {
                println!("        first other error: {e}");
            }
        }
    }
}

/// The restart storms' table (see [`storm`]).
fn print_storms(args: &Args, rows: &[Row]) {
    if args.storm && rows.iter().any(|r| !r.storms.is_empty()) {
        println!(
            "\nrestart storm: the coordinator kill -9ed and started again (same data dir); every worker retries \
             Register on its back-off from the kill: jittered (the product's) or in lockstep (before)"
        );
        println!("{:>6} {:>10} {:>11} {:>15} {:>9}", "N", "schedule", "restart s", "all back s", "attempts");
        for r in rows {
            for st in &r.storms {
                let how = if st.jittered { "jittered" } else { "lockstep" };
                println!(
                    "{:>6} {:>10} {:>11.2} {:>15.2} {:>9}",
                    r.n,
                    how,
                    st.restart.as_secs_f64(),
                    st.all.as_secs_f64(),
                    st.attempts
                );
            }
        }
    }
}

/// The takeovers' table (see [`crate::phases::takeover`]).
fn print_takeovers(args: &Args, rows: &[Row]) {
    if !rows.iter().any(|r| r.takeover.is_some()) {
        return;
    }
    let lease = Duration::from_secs(args.lease_ttl_s);
    println!(
        "\ntakeover (etcd): the leader kill -9ed a quarter through a job of {} no-op subtasks; every worker retries \
         Register on both coordinators on its jittered back-off; times from the kill; target: all back within the \
         lease ({} s) + 10 s, nothing lost, nothing run twice",
        args.subtasks, args.lease_ttl_s
    );
    println!(
        "{:>6} {:>9} {:>10} {:>11} {:>10} {:>9} {:>10} {:>10} {:>6} {:>7}",
        "N", "at kill", "leader s", "all back s", "job end s", "attempts", "succeeded", "after", "twice", "verdict"
    );
    for r in rows {
        let Some(t) = &r.takeover else { continue };
        let ok = t.all_back <= lease + Duration::from_secs(10) && t.job_ok && t.twice == 0;
        println!(
            "{:>6} {:>9} {:>10.2} {:>11.2} {:>10.2} {:>9} {:>10} {:>10} {:>6} {:>7}",
            r.n,
            t.answered_at_kill,
            t.leader.as_secs_f64(),
            t.all_back.as_secs_f64(),
            t.job_end.as_secs_f64(),
            t.attempts,
            format!("{}/{}", t.succeeded, args.subtasks),
            t.answered_after,
            t.twice,
            if ok { "PASS" } else { "FAIL" }
        );
    }
}

/// Each etcd row's figures ÷ the sled row's of the same size and shedding (target: within 2×).
fn print_etcd_vs_sled(rows: &[Row]) {
    let pairs: Vec<(&Row, &Row)> = rows
        .iter()
        .filter(|e| e.store == StoreKind::Etcd)
        .filter_map(|e| {
            rows.iter().find(|s| s.store == StoreKind::Sled && s.n == e.n && s.knobs == e.knobs).map(|s| (e, s))
        })
        .collect();
    if pairs.is_empty() {
        return;
    }
    println!("\netcd ÷ sled (target: within 2×; placements/s is sled ÷ etcd, so above 1 is worse for each)");
    println!(
        "{:>6} {:>10} {:>9} {:>9} {:>10} {:>9} {:>7}",
        "N", "register", "hb p50", "hb p99", "placed/s", "list", "verdict"
    );
    for (e, s) in pairs {
        let ratio = |a: f64, b: f64| if b > 0.0 { a / b } else { f64::NAN };
        let figures = [
            ratio(e.register.as_secs_f64(), s.register.as_secs_f64()),
            ratio(e.hb_p50_ms, s.hb_p50_ms),
            ratio(e.hb_p99_ms, s.hb_p99_ms),
            ratio(s.placements_per_s, e.placements_per_s),
            ratio(e.list.as_secs_f64(), s.list.as_secs_f64()),
        ];
        let ok = figures.iter().all(|&x| x <= 2.0);
        println!(
            "{:>6} {:>9.2}× {:>8.2}× {:>8.2}× {:>9.2}× {:>8.2}× {:>7}",
            e.n,
            figures[0],
            figures[1],
            figures[2],
            figures[3],
            figures[4],
            if ok { "PASS" } else { "FAIL" }
        );
    }
}
