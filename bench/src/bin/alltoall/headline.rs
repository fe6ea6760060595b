//! Issue 30's tables: what a job runs by default (`auto`, every rail, rail shares) against
//! itself on one rail and against Gloo on the fast rail, on the rig; and on loopback against
//! Gloo by size. Each target PASS or FAIL from the medians measured in this run.

use plexus_dataplane::ScheduleKind;

use crate::args::{Opts, Sched, TableKind};
use crate::runs::{GlooRow, Row};

/// Ours (defaults) ≥ this × Gloo on every rig table.
const RIG_GLOO: f64 = 1.1;
/// Ours ≥ this × Gloo on loopback at every size ≥ 1 MiB.
const LOOPBACK_GLOO: f64 = 1.0;
/// css ≥ this × shift on skewed tables at N = 8, on the rig.
const CSS_SHIFT: f64 = 1.3;

fn verdict(ok: bool) -> &'static str {
    if ok { "PASS" } else { "FAIL" }
}

/// Counts targets met, for the summary line.
#[derive(Default)]
struct Tally {
    met: usize,
    of: usize,
}

impl Tally {
    fn check(&mut self, ok: bool) -> &'static str {
        self.of += 1;
        self.met += usize::from(ok);
        verdict(ok)
    }
}

fn find(rows: &[Row], n: usize, mib: usize, t: TableKind, s: Sched, rails: usize) -> Option<&Row> {
    rows.iter().find(|r| r.n == n && r.mib == mib && r.table == t && r.sched == s && r.rails == rails)
}

fn ms(x: Option<f64>) -> String {
    x.map_or("n/a".into(), |x| format!("{:.1}", x * 1e3))
}

/// The rig's table: one line per (N, size, table).
pub(crate) fn print_rig(opts: &Opts, rows: &[Row], gloo: &[GlooRow], all_rails: usize) {
    println!();
    println!(
        "issue 30 on the rig ({}): ours = auto (the cost model's pick, every rail, rail shares: a job's defaults); 1 rail = the same on rail 0 alone; auto-sched = auto striped by the rail scheduler alone; Gloo on rail 0 (the fast one). Medians of the slowest rank, ms.",
        opts.rig.as_deref().unwrap_or("?")
    );
    println!(
        "{:>2} {:>7} {:>12} {:>9} {:>8} {:>8} {:>10} {:>8} {:>15} {:>16} {:>17}",
        "N",
        "size",
        "table",
        "ours",
        "ran",
        "1 rail",
        "auto-sched",
        "Gloo",
        "Gloo÷ours ≥1.1",
        "1 rail÷ours ≥1.0",
        "shift÷css (≥1.3)"
    );
    let (mut vs_gloo, mut vs_one, mut skew) = (Tally::default(), Tally::default(), Tally::default());
    for &n in &opts.worlds {
        for &mib in &opts.sizes {
            for &t in &opts.tables {
                let ours = find(rows, n, mib, t, Sched::Auto, all_rails);
                let one = find(rows, n, mib, t, Sched::Auto, 1).filter(|_| all_rails > 1);
                let sched = find(rows, n, mib, t, Sched::AutoRailScheduler, all_rails);
                let g = gloo.iter().find(|g| g.n == n && g.mib == mib && g.table == t);
                let shift = find(rows, n, mib, t, Sched::Kind(ScheduleKind::Shift), all_rails);
                let css = find(rows, n, mib, t, Sched::Kind(ScheduleKind::Css), all_rails);
                let gloo_col = match (ours, g) {
                    (Some(o), Some(g)) => {
                        let ok = g.median / o.median >= RIG_GLOO && g.correct;
                        format!("{:.2}× {}", g.median / o.median, vs_gloo.check(ok))
                    }
                    _ => "n/a".into(),
                };
                let one_col = match (ours, one) {
                    (Some(o), Some(x)) => format!("{:.2}× {}", x.median / o.median, vs_one.check(x.median >= o.median)),
                    _ => "n/a".into(),
                };
                let skew_col = match (shift, css) {
                    (Some(s), Some(c)) if t == TableKind::Skewed && n == 8 => {
                        format!("{:.2}× {}", s.median / c.median, skew.check(s.median / c.median >= CSS_SHIFT))
                    }
                    (Some(s), Some(c)) => format!("{:.2}×", s.median / c.median),
                    _ => "n/a".into(),
                };
                println!(
                    "{:>2} {:>4}MiB {:>12} {:>9} {:>8} {:>8} {:>10} {:>8} {:>15} {:>16} {:>17}",
                    n,
                    mib,
                    t.name(),
                    ms(ours.map(|r| r.median)),
                    ours.map_or("", |r| r.ran.as_str()),
                    ms(one.map(|r| r.median)),
                    ms(sched.map(|r| r.median)),
                    ms(g.map(|g| g.median)),
                    gloo_col,
                    one_col,
                    skew_col
                );
            }
        }
    }
    // Two rails against one for every schedule measured both ways, not only the headline's.
    let mut every = Tally::default();
    let mut worse = Vec::new();
    for r in rows.iter().filter(|r| r.rails == all_rails && all_rails > 1) {
        if let Some(o) = find(rows, r.n, r.mib, r.table, r.sched, 1)
            && every.check(r.median <= o.median) == "FAIL"
        {
            worse.push(format!(
                "N={} {} MiB {} {} ({:.2}×)",
                r.n,
                r.mib,
                r.table.name(),
                r.sched.name(),
                o.median / r.median
            ));
        }
    }
    println!("targets (issue 30, rig):");
    println!("  ours ≥ {RIG_GLOO}× Gloo on every table: met on {} of {}", vs_gloo.met, vs_gloo.of);
    println!("  css ≥ {CSS_SHIFT}× shift on skewed tables at N = 8: met on {} of {}", skew.met, skew.of);
    println!("  two rails ≥ one rail, ours: met on {} of {}", vs_one.met, vs_one.of);
    println!(
        "  two rails ≥ one rail, every schedule measured both ways: met on {} of {}{}",
        every.met,
        every.of,
        if worse.is_empty() { String::new() } else { format!(" (slower on two: {})", worse.join("; ")) }
    );
}

/// The loopback table: ours (auto) against Gloo by size.
pub(crate) fn print_loopback(lo: &Opts, rows: &[Row], gloo: &[GlooRow]) {
    println!();
    println!(
        "issue 30 on loopback (no rails to stripe): uniform tables, ours = auto, Gloo in spawn mode; medians of the slowest rank, ms"
    );
    println!("{:>2} {:>7} {:>9} {:>8} {:>9} {:>16}", "N", "size", "ours", "ran", "Gloo", "Gloo÷ours ≥1.0");
    let mut tally = Tally::default();
    for &n in &lo.worlds {
        for &mib in &lo.sizes {
            let ours = find(rows, n, mib, TableKind::Uniform, Sched::Auto, 0);
            let g = gloo.iter().find(|g| g.n == n && g.mib == mib && g.table == TableKind::Uniform);
            let col = match (ours, g) {
                (Some(o), Some(g)) => {
                    format!(
                        "{:.2}× {}",
                        g.median / o.median,
                        tally.check(g.median / o.median >= LOOPBACK_GLOO && g.correct)
                    )
                }
                _ => "n/a".into(),
            };
            println!(
                "{:>2} {:>4}MiB {:>9} {:>8} {:>9} {:>16}",
                n,
                mib,
                ms(ours.map(|r| r.median)),
                ours.map_or("", |r| r.ran.as_str()),
                ms(g.map(|g| g.median)),
                col
            );
        }
    }
    println!("  ours ≥ {LOOPBACK_GLOO}× Gloo at every size ≥ 1 MiB: met on {} of {}", tally.met, tally.of);
}
