//! The allreduce benchmark's tables: what was measured, side by side, with PASS/FAIL against
//! issue 30's targets.

use std::time::Duration;

use plexus_dataplane::collective::Profile;

use super::{Cli, MIB};

/// One (N, size) of one configuration of ours, from rank 0's report.
pub struct Row {
    pub n: usize,
    pub bytes: u64,
    /// Median seconds of the slowest rank.
    pub median: f64,
    /// What ran: algorithm ×slices (the cost model's choice under `auto`).
    pub ran: String,
    pub profile: Profile,
    /// "all rails", "rail 0" or "loopback".
    pub label: String,
    /// The share of the machine's cores busy during rank 0's timed calls (NaN: unknown).
    pub busy: f64,
}

/// Gloo's median seconds for (N, size).
pub struct GlooRow {
    pub n: usize,
    pub bytes: u64,
    pub median: f64,
}

fn bus_bw(n: usize, bytes: u64, secs: f64) -> f64 {
    bytes as f64 / secs * 2.0 * (n - 1) as f64 / n as f64
}

impl Row {
    fn bus_bw(&self) -> f64 {
        bus_bw(self.n, self.bytes, self.median)
    }
}

#[derive(Default)]
pub struct Report {
    pub rig: Vec<Row>,
    pub rig3: Vec<Row>,
    pub looped: Vec<Row>,
    pub gloo_rig: Vec<GlooRow>,
    pub gloo_loop: Vec<GlooRow>,
    /// Summed rail rates, bytes/s, of the first rig and the three-rail rig.
    pub bound: f64,
    pub bound3: f64,
}

fn verdict(ok: Option<bool>, tally: &mut (usize, usize)) -> &'static str {
    match ok {
        Some(true) => {
            tally.0 += 1;
            "PASS"
        }
        Some(false) => {
            tally.1 += 1;
            "FAIL"
        }
        None => "n/a",
    }
}

fn opt(v: Option<f64>, f: impl Fn(f64) -> String) -> String {
    v.map_or("n/a".into(), f)
}

fn ms(s: f64) -> String {
    format!("{:.2}", s * 1e3)
}

fn mbs(b: f64) -> String {
    format!("{:.1}", b / 1e6)
}

/// A busy share as a percentage of the machine's cores.
fn pct(share: f64) -> String {
    if share.is_finite() { format!("{:.0}%", share * 100.0) } else { "?".into() }
}

fn gloo(rows: &[GlooRow], n: usize, bytes: u64) -> Option<f64> {
    rows.iter().find(|g| g.n == n && g.bytes == bytes).map(|g| g.median)
}

impl Report {
    pub fn print(&self, cli: &Cli) {
        let mut tally = (0, 0);
        self.print_rig(cli, &mut tally);
        self.print_rig3(cli, &mut tally);
        self.print_latency(cli, &mut tally);
        self.print_loopback(&mut tally);
        for (what, rows) in [("rig, every rail", &self.rig), ("three-rail rig", &self.rig3), ("loopback", &self.looped)]
        {
            let Some(max) = rows.iter().map(|r| r.bytes).max() else { continue };
            print_profiles(what, rows, max);
        }
        println!();
        println!("targets: {} PASS, {} FAIL (machine shared with other work: a FAIL may be load)", tally.0, tally.1);
    }

    fn print_rig(&self, cli: &Cli, tally: &mut (usize, usize)) {
        let big: Vec<&Row> = self.rig.iter().filter(|r| r.bytes >= MIB && r.label == "all rails").collect();
        if big.is_empty() {
            return;
        }
        println!();
        println!(
            "rig {}: bound = the rails' summed rate, {:.1} MB/s per rank each way; busBW in MB/s; Gloo on rail 0 (it does not stripe)",
            cli.rig,
            self.bound / 1e6
        );
        println!(
            "{:>2} {:>9} {:>16} {:>9} {:>7} {:>5} {:>9} {:>7} {:>9} {:>7} {:>7} {:>7} {:>7} {:>10} {:>10} {:>8}",
            "N",
            "size",
            "defaults ran",
            "2r ms",
            "busBW",
            "cpu",
            "1r ms",
            "busBW",
            "gloo ms",
            "busBW",
            "÷bound",
            "÷gloo",
            "2r÷1r",
            "≥.95 bound",
            "≥1.2× gloo",
            "2r≥1r"
        );
        for r in big {
            let one = self.rig.iter().find(|o| o.n == r.n && o.bytes == r.bytes && o.label == "rail 0");
            let g = gloo(&self.gloo_rig, r.n, r.bytes);
            let frac = r.bus_bw() / self.bound;
            let vs_gloo = g.map(|g| g / r.median);
            let vs_one = one.map(|o| o.median / r.median);
            println!(
                "{:>2} {:>9} {:>16} {:>9} {:>7} {:>5} {:>9} {:>7} {:>9} {:>7} {:>7.3} {:>7} {:>7} {:>10} {:>10} {:>8}",
                r.n,
                plexus_bench::size(r.bytes),
                r.ran,
                ms(r.median),
                mbs(r.bus_bw()),
                pct(r.busy),
                opt(one.map(|o| o.median), ms),
                opt(one.map(|o| o.bus_bw()), mbs),
                opt(g, ms),
                opt(g.map(|g| bus_bw(r.n, r.bytes, g)), mbs),
                frac,
                opt(vs_gloo, |x| format!("{x:.2}×")),
                opt(vs_one, |x| format!("{x:.2}×")),
                verdict(Some(frac >= 0.95), tally),
                verdict(vs_gloo.map(|x| x >= 1.2), tally),
                verdict(vs_one.map(|x| x >= 1.0), tally),
            );
        }
    }

    fn print_rig3(&self, cli: &Cli, tally: &mut (usize, usize)) {
        if self.rig3.is_empty() {
            return;
        }
        println!();
        println!("three-rail rig {}: bound {:.1} MB/s per rank each way", cli.rig3, self.bound3 / 1e6);
        println!(
            "{:>2} {:>9} {:>16} {:>9} {:>7} {:>5} {:>7} {:>10}",
            "N", "size", "defaults ran", "ms", "busBW", "cpu", "÷bound", "≥.95 bound"
        );
        for r in &self.rig3 {
            let frac = r.bus_bw() / self.bound3;
            println!(
                "{:>2} {:>9} {:>16} {:>9} {:>7} {:>5} {:>7.3} {:>10}",
                r.n,
                plexus_bench::size(r.bytes),
                r.ran,
                ms(r.median),
                mbs(r.bus_bw()),
                pct(r.busy),
                frac,
                verdict(Some(frac >= 0.95), tally)
            );
        }
    }

    fn print_latency(&self, cli: &Cli, tally: &mut (usize, usize)) {
        let small: Vec<&Row> = self.rig.iter().filter(|r| cli.small_sizes.contains(&r.bytes)).collect();
        let small: Vec<&Row> = small.into_iter().filter(|r| r.label == "all rails").collect();
        if small.is_empty() {
            return;
        }
        println!();
        println!("latency on the rig {} (every rail; Gloo on rail 0), median µs of the slowest rank", cli.rig);
        println!(
            "{:>2} {:>9} {:>16} {:>10} {:>10} {:>8} {:>10}",
            "N", "size", "defaults ran", "ours µs", "gloo µs", "÷gloo", "≤ gloo"
        );
        for r in small {
            let g = gloo(&self.gloo_rig, r.n, r.bytes);
            let vs = g.map(|g| g / r.median);
            println!(
                "{:>2} {:>9} {:>16} {:>10.0} {:>10} {:>8} {:>10}",
                r.n,
                plexus_bench::size(r.bytes),
                r.ran,
                r.median * 1e6,
                opt(g, |g| format!("{:.0}", g * 1e6)),
                opt(vs, |x| format!("{x:.2}×")),
                verdict(vs.map(|x| x >= 1.0), tally)
            );
        }
    }

    fn print_loopback(&self, tally: &mut (usize, usize)) {
        if self.looped.is_empty() {
            return;
        }
        println!();
        println!("loopback (127.0.0.1, no rails to stripe): busBW in MB/s");
        println!(
            "{:>2} {:>9} {:>16} {:>9} {:>7} {:>9} {:>7} {:>7} {:>9}",
            "N", "size", "defaults ran", "ours ms", "busBW", "gloo ms", "busBW", "÷gloo", "≥1.0 gloo"
        );
        for r in &self.looped {
            let g = gloo(&self.gloo_loop, r.n, r.bytes);
            let vs = g.map(|g| g / r.median);
            println!(
                "{:>2} {:>9} {:>16} {:>9} {:>7} {:>9} {:>7} {:>7} {:>9}",
                r.n,
                plexus_bench::size(r.bytes),
                r.ran,
                ms(r.median),
                mbs(r.bus_bw()),
                opt(g, ms),
                opt(g.map(|g| bus_bw(r.n, r.bytes, g)), mbs),
                opt(vs, |x| format!("{x:.2}×")),
                verdict(vs.map(|x| x >= 1.0), tally)
            );
        }
    }
}

/// Where rank 0's time went at `bytes`, for every row of that size.
fn print_profiles(what: &str, rows: &[Row], bytes: u64) {
    println!();
    println!(
        "{what}: where rank 0's time goes at {} (last timed iteration; reductions run in the transport's connection readers as segments arrive, so they lie inside 'wait'):",
        plexus_bench::size(bytes)
    );
    for r in rows.iter().filter(|r| r.bytes == bytes) {
        let p = &r.profile;
        let ms = |d: Duration| d.as_secs_f64() * 1e3;
        println!(
            "  N={} {:>9} {:>14}: total {:8.2} ms = wait {:8.2} (reducing {:7.2}, {:.2} GB/s) + copy {:6.2} ({} MiB) + final drain {:6.2} + other {:6.2}",
            r.n,
            r.label,
            r.ran,
            ms(p.total),
            ms(p.wait),
            ms(p.reduce),
            p.reduced_bytes as f64 / p.reduce.as_secs_f64().max(1e-9) / 1e9,
            ms(p.copy),
            p.copied_bytes / MIB,
            ms(p.drain),
            ms(p.total.saturating_sub(p.wait + p.copy + p.drain)),
        );
    }
}
