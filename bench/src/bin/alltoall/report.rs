//! What the parent prints: the tables' shapes before anything runs, the results table, and the
//! issue's targets.

use plexus_dataplane::{Schedule, ScheduleKind};

use crate::args::{Opts, Sched, TableKind};
use crate::runs::{GlooRow, Row};
use crate::table::Case;
use crate::{MIB, SKEW_TARGET};

/// Each table's shape and each schedule's steps and cost, before anything runs.
pub(crate) fn print_tables(opts: &Opts) {
    println!();
    println!(
        "tables (MiB crossing the network; busiest = the most one rank sends or receives) and schedules (steps; model = shift's Σ over steps of the largest message ÷ this one's; and this one's ÷ busiest, which no exchange on one link per rank can beat, steps or not):"
    );
    for &n in &opts.worlds {
        for &mib in &opts.sizes {
            for &t in &opts.tables {
                let c = Case::new(t, n, (mib * MIB) as u64, opts);
                let shift = Schedule::build(ScheduleKind::Shift, &c.table).cost(&c.table);
                let mut line = format!(
                    "  N={n} {mib:>4} MiB {:>12}: {:7.2} MiB, busiest {:6.2} MiB (mean {:6.2}), largest message {:6.2} MiB, Δ = {};",
                    t.name(),
                    c.network_bytes() as f64 / MIB as f64,
                    c.busiest_rank() as f64 / MIB as f64,
                    c.network_bytes() as f64 / n as f64 / MIB as f64,
                    c.table.demands().iter().map(|d| d.2).max().unwrap_or(0) as f64 / MIB as f64,
                    c.table.max_degree(),
                );
                for (s, sch) in c.schedules.iter().filter(|s| s.0.stepped()) {
                    let cost = sch.cost(&c.table).max(1) as f64;
                    line.push_str(&format!(
                        " {} {} steps {:.2}× ({:.2} busiest),",
                        s.name(),
                        sch.len(),
                        shift as f64 / cost,
                        cost / c.busiest_rank().max(1) as f64
                    ));
                }
                line.pop();
                println!("{line}");
            }
        }
    }
}

pub(crate) fn print_results(opts: &Opts, rows: &[Row], gloo_rows: &[GlooRow], rates: &[f64]) {
    let on_rig = !rates.is_empty();
    println!();
    println!(
        "{:>2} {:>8} {:>12} {:>6} {:>9} {:>5} {:>6} {:>10} {:>11} {:>11} {:>8}{}",
        "N",
        "size",
        "table",
        "rails",
        "schedule",
        "steps",
        "model",
        "median_ms",
        "algBW_GB/s",
        "shift÷this",
        "÷ gloo",
        if on_rig { format!(" {:>7}", "÷ link") } else { String::new() }
    );
    for &n in &opts.worlds {
        for &mib in &opts.sizes {
            for &t in &opts.tables {
                let c = Case::new(t, n, (mib * MIB) as u64, opts);
                let bytes = c.network_bytes() as f64;
                let shift_cost = Schedule::build(ScheduleKind::Shift, &c.table).cost(&c.table);
                let g = gloo_rows.iter().find(|g| g.n == n && g.mib == mib && g.table == t);
                // The wire's limit: the busiest rank's bytes at its link's rate.
                let link = |rate: f64| c.busiest_rank() as f64 / rate;
                for r in rows.iter().filter(|r| r.n == n && r.mib == mib && r.table == t) {
                    let Some((_, sch)) = c.schedules.iter().find(|s| s.0 == r.sched) else {
                        continue;
                    };
                    let shift = rows
                        .iter()
                        .find(|o| {
                            o.n == n
                                && o.mib == mib
                                && o.table == t
                                && o.rails == r.rails
                                && o.sched == Sched::Kind(ScheduleKind::Shift)
                        })
                        .map(|o| o.median);
                    println!(
                        "{:>2} {:>5}MiB {:>12} {:>6} {:>9} {:>5} {:>6} {:>10.2} {:>11.3} {:>11} {:>8}{}",
                        n,
                        mib,
                        t.name(),
                        if on_rig { r.rails.to_string() } else { "lo".into() },
                        r.sched.name(),
                        if r.sched.stepped() { sch.len().to_string() } else { "-".into() },
                        if !r.sched.stepped() {
                            "n/a".into()
                        } else {
                            format!("{:.2}×", shift_cost as f64 / sch.cost(&c.table).max(1) as f64)
                        },
                        r.median * 1e3,
                        bytes / r.median / 1e9,
                        shift.map_or("n/a".into(), |s| format!("{:.2}×", s / r.median)),
                        g.map_or("n/a".into(), |g| format!("{:.2}×", g.median / r.median)),
                        if on_rig {
                            format!(" {:>7.2}", link(rates[..r.rails].iter().sum()) / r.median)
                        } else {
                            String::new()
                        }
                    );
                }
                if let Some(g) = g {
                    println!(
                        "{:>2} {:>5}MiB {:>12} {:>6} {:>9} {:>5} {:>6} {:>10.2} {:>11.3} {:>11} {:>8}{}",
                        n,
                        mib,
                        t.name(),
                        if on_rig { "rail 0" } else { "lo" },
                        "gloo",
                        "",
                        "",
                        g.median * 1e3,
                        bytes / g.median / 1e9,
                        "",
                        if g.correct { "" } else { "WRONG" },
                        if on_rig { format!(" {:>7.2}", link(rates[0]) / g.median) } else { String::new() }
                    );
                }
            }
        }
    }
}

/// Issue 30's target for what a job runs by default against Gloo.
const GLOO_TARGET: f64 = 1.1;

/// The issues' targets, each PASS or FAIL from the figures measured above.
pub(crate) fn print_targets(opts: &Opts, rows: &[Row], gloo_rows: &[GlooRow], all_rails: usize) {
    let on_rig = opts.rig.is_some();
    let find = |n: usize, mib: usize, t: TableKind, s: ScheduleKind| {
        rows.iter()
            .find(|r| r.n == n && r.mib == mib && r.table == t && r.rails == all_rails && r.sched == Sched::Kind(s))
            .map(|r| r.median)
    };
    let verdict = |ok: bool| if ok { "PASS" } else { "FAIL" };
    println!();
    println!(
        "targets of issues 15 and 30, from the medians above{}:",
        if on_rig { format!(" (ours on all {all_rails} rails)") } else { String::new() }
    );
    if opts.tables.contains(&TableKind::Skewed) {
        let (mut met, mut of) = (0, 0);
        println!(
            "  css ≥ {SKEW_TARGET}× faster than shift on skewed tables{}:",
            if on_rig { "" } else { " (the target is the rig's, where links are shared; on loopback no link is)" }
        );
        for &n in &opts.worlds {
            for &mib in &opts.sizes {
                if let (Some(shift), Some(css)) = (
                    find(n, mib, TableKind::Skewed, ScheduleKind::Shift),
                    find(n, mib, TableKind::Skewed, ScheduleKind::Css),
                ) {
                    let ok = shift / css >= SKEW_TARGET;
                    of += 1;
                    met += usize::from(ok);
                    println!(
                        "    N={n} {mib:>4} MiB: shift {:.2} ms ÷ css {:.2} ms = {:.2}× {}",
                        shift * 1e3,
                        css * 1e3,
                        shift / css,
                        verdict(ok)
                    );
                }
            }
        }
        println!("    met on {met} of {of}");
    }
    if !gloo_rows.is_empty() {
        // Issue 30: what a job runs by default (`auto`, the cost model's pick) ≥ 1.1× Gloo; css
        // against Gloo as before, for comparison.
        for (what, sched, target) in [("auto", Sched::Auto, GLOO_TARGET), ("css", Sched::Kind(ScheduleKind::Css), 1.0)]
        {
            let (mut met, mut of) = (0, 0);
            println!("  {what} ≥ {target}× Gloo's all_to_all_single on every table (Gloo time ÷ {what} time):");
            for g in gloo_rows {
                let ours = rows
                    .iter()
                    .find(|r| {
                        r.n == g.n && r.mib == g.mib && r.table == g.table && r.rails == all_rails && r.sched == sched
                    })
                    .map(|r| r.median);
                if let Some(ours) = ours {
                    let ok = g.median / ours >= target && g.correct;
                    of += 1;
                    met += usize::from(ok);
                    println!(
                        "    N={} {:>4} MiB {:>12}: Gloo {:.2} ms ÷ {what} {:.2} ms = {:.2}× {}{}",
                        g.n,
                        g.mib,
                        g.table.name(),
                        g.median * 1e3,
                        ours * 1e3,
                        g.median / ours,
                        verdict(ok),
                        if g.correct { "" } else { " (Gloo's result was wrong)" }
                    );
                }
            }
            println!("    met on {met} of {of}");
        }
    }
}
