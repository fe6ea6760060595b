//! Gangs in the simulator (issue 14): the scheduling core's gangs against a naive scheduler and
//! strict FIFO, on the same seeded workload of training-like gangs and small tasks.
//!
//! - [`workload`]: [`GangConfig`] and [`GangWorkload::generate`]: a cluster of alike workers
//!   and Poisson arrivals of gangs (2–16 alike members, one run time per gang) and many small
//!   one-core tasks.
//! - [`engine`]: the event loop all three run under ([`engine::run`]): rounds every 100 ms of
//!   simulated time, a gang's work progressing only while all its members run, partial starts
//!   and deadlocks observed from outside the scheduler.
//! - `ours`: the real [`plexus_scheduler::core::Core`] (reservations, one head gang per queue,
//!   holding and backfill, deadlines and rollbacks) driven in simulated time.
//! - `report`: [`GangReport`], what one scheduler's run measured, and how it [`End`]ed; the
//!   engine fills it in and the comparison reads it, so it sits apart from both.
//! - `baselines`: `naive` (members one by one as room appears, any that fits, no reservation)
//!   and `strict-fifo` (the head starts whole before anything behind it).
//! - [`compare`] runs the three, [`targets`] checks the targets, [`print_comparison`]
//!   prints them side by side.
//!
//! Nothing here reads a clock or draws a random number outside the seeded workload: the same
//! workload and options give the same report.

mod baselines;
pub mod engine;
mod ours;
mod report;
pub mod workload;

#[cfg(test)]
mod tests;

use std::io::Write;

pub use baselines::{Naive, StrictFifo};
pub use engine::{GangScheduler, Options, Start};
pub use ours::{Ours, job_file};
pub use report::{End, GangReport};
pub use workload::{GangConfig, GangWorkload, Item, Kind};

use crate::SimError;

/// The three schedulers.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Policy {
    Ours,
    Naive,
    StrictFifo,
}

impl Policy {
    pub const ALL: [Policy; 3] = [Policy::Ours, Policy::Naive, Policy::StrictFifo];

    pub fn name(self) -> &'static str {
        match self {
            Policy::Ours => "ours",
            Policy::Naive => "naive",
            Policy::StrictFifo => "strict-fifo",
        }
    }
}

/// Runs `workload` under one scheduler.
pub fn simulate(workload: &GangWorkload, policy: Policy, opts: &Options) -> Result<GangReport, SimError> {
    let (w, c, seed) = (workload.workers, workload.cores, workload.seed);
    match policy {
        Policy::Ours => engine::run(workload, &mut Ours::new(w, c, opts.placer, seed)?, opts),
        Policy::Naive => engine::run(workload, &mut Naive::new(w, c, opts.placer, seed)?, opts),
        Policy::StrictFifo => engine::run(workload, &mut StrictFifo::new(w, c, opts.placer, seed)?, opts),
    }
}

/// The three runs of one workload, and the simulator's cost of each (wall time, which is the
/// only thing here that is not a function of the inputs).
#[derive(Clone, Debug)]
pub struct Comparison {
    pub ours: GangReport,
    pub naive: GangReport,
    pub fifo: GangReport,
    pub wall: [std::time::Duration; 3],
}

/// Runs the three schedulers on `workload`.
pub fn compare(workload: &GangWorkload, opts: &Options) -> Result<Comparison, SimError> {
    let timed = |p: Policy| -> Result<(GangReport, std::time::Duration), SimError> {
        let t0 = std::time::Instant::now();
        let r = simulate(workload, p, opts)?;
        Ok((r, t0.elapsed()))
    };
    let (ours, a) = timed(Policy::Ours)?;
    let (naive, b) = timed(Policy::Naive)?;
    let (fifo, c) = timed(Policy::StrictFifo)?;
    Ok(Comparison { ours, naive, fifo, wall: [a, b, c] })
}

/// A mean small-task wait under this (seconds), under both ours and strict FIFO, means small
/// tasks do not queue at all: the backfill target has nothing to measure.
pub const NO_QUEUE_S: f64 = 1.0;

/// One target line of the issue, checked.
#[derive(Clone, Debug, PartialEq)]
pub struct Target {
    pub name: &'static str,
    pub pass: bool,
    pub detail: String,
}

/// The targets for "ours" against strict FIFO on one workload: no partial start and
/// no deadlock (and every item done); utilisation at least strict FIFO's; mean small-task wait
/// at most half of strict FIFO's; no gang waiting longer than under strict FIFO by more than its
/// deadline.
pub fn targets(workload: &GangWorkload, ours: &GangReport, fifo: &GangReport) -> Vec<Target> {
    let mut v = Vec::new();
    v.push(Target {
        name: "ours: zero partial starts",
        pass: ours.partial_starts == 0,
        detail: format!("{} partial starts", ours.partial_starts),
    });
    v.push(Target {
        name: "ours: zero deadlocks, every item done",
        pass: ours.end == End::Finished && ours.anomalies.is_empty(),
        detail: format!(
            "{}; {} of {} items done; {} anomalies",
            ours.end_str(),
            ours.completed,
            ours.items,
            ours.anomalies.len()
        ),
    });
    v.push(Target {
        name: "utilisation >= strict FIFO's",
        pass: ours.utilisation() + 1e-12 >= fifo.utilisation(),
        detail: format!("{:.1}% vs {:.1}%", ours.utilisation() * 100.0, fifo.utilisation() * 100.0),
    });
    let (so, sf) = (ours.mean_small_wait_s(), fifo.mean_small_wait_s());
    // Where small tasks do not queue under strict FIFO either, there is nothing to backfill.
    let idle = sf < NO_QUEUE_S && so < NO_QUEUE_S;
    v.push(Target {
        name: "mean small-task wait <= 0.5 x strict FIFO's",
        pass: so <= 0.5 * sf || idle,
        detail: if idle {
            format!("n/a: small tasks do not queue ({so:.2} s vs {sf:.2} s)")
        } else {
            format!("{so:.1} s vs {sf:.1} s (ratio {:.3})", so / sf.max(1e-9))
        },
    });
    // Per gang: ours' wait ≤ strict FIFO's + the gang's deadline.
    let mut worst: Option<(usize, i64)> = None;
    let mut late = 0usize;
    let mut never = 0usize;
    for (n, &id) in ours.gang_ids.iter().enumerate() {
        let deadline = workload.items[id].timeout_ms;
        match (ours.gang_wait_ms[n], fifo.gang_wait_ms.get(n).copied().flatten()) {
            (Some(o), Some(f)) => {
                let excess = o as i64 - (f + deadline) as i64;
                if excess > 0 {
                    late += 1;
                }
                if worst.is_none_or(|(_, e)| excess > e) {
                    worst = Some((id, excess));
                }
            }
            (None, Some(_)) => never += 1,
            _ => {}
        }
    }
    v.push(Target {
        name: "no gang waits > strict FIFO's wait + its deadline",
        pass: late == 0 && never == 0,
        detail: match worst {
            Some((id, e)) => format!(
                "{late} of {} gangs later, {never} never started; worst: gang {id} ({} s {} the bound)",
                ours.gang_ids.len(),
                e.unsigned_abs() as f64 / 1e3,
                if e > 0 { "over" } else { "within" }
            ),
            None => format!("{never} never started"),
        },
    });
    v
}

/// Prints the three runs of a workload, one row each.
pub fn print_rows(out: &mut dyn Write, label: &str, c: &Comparison) -> std::io::Result<()> {
    for r in [&c.ours, &c.naive, &c.fifo] {
        writeln!(
            out,
            "{label:<10} {:<12} {:>11} {:>7} {:>8} {:>11.1} {:>10.1} {:>12.1} {:>6.1} {:>6.1} {:>6.1} {:>10.0} {:>9} {:>7}",
            r.scheduler,
            format!("{}/{}", r.completed, r.items),
            r.partial_starts,
            r.deadlocks(),
            r.mean_gang_wait_s(),
            r.max_gang_wait_s(),
            r.mean_small_wait_s(),
            r.utilisation() * 100.0,
            r.held_utilisation() * 100.0,
            r.reserved_share() * 100.0,
            r.makespan_ms as f64 / 1e3,
            r.rollbacks,
            r.rounds,
        )?;
    }
    Ok(())
}

/// The header of [`print_rows`].
pub fn print_header(out: &mut dyn Write) -> std::io::Result<()> {
    writeln!(
        out,
        "{:<10} {:<12} {:>11} {:>7} {:>8} {:>11} {:>10} {:>12} {:>6} {:>6} {:>6} {:>10} {:>9} {:>7}",
        "seed",
        "scheduler",
        "done",
        "partial",
        "deadlock",
        "gang wait s",
        "max gang s",
        "small wait s",
        "util%",
        "held%",
        "resv%",
        "makespan s",
        "rollbacks",
        "rounds"
    )
}

/// One workload's comparison: rows, then the targets, PASS or FAIL each.
pub fn print_comparison(
    out: &mut dyn Write,
    label: &str,
    workload: &GangWorkload,
    c: &Comparison,
) -> std::io::Result<bool> {
    print_rows(out, label, c)?;
    for r in [&c.ours, &c.naive, &c.fifo] {
        if r.end != End::Finished {
            writeln!(out, "{:>10} {}: {}, {} items unfinished", "", r.scheduler, r.end_str(), r.unfinished())?;
        }
        for a in &r.anomalies {
            writeln!(out, "{:>10} {} anomaly: {a}", "", r.scheduler)?;
        }
        for n in &r.notes {
            writeln!(out, "{:>10} {}: {n}", "", r.scheduler)?;
        }
    }
    let mut all = true;
    for t in targets(workload, &c.ours, &c.fifo) {
        all &= t.pass;
        writeln!(out, "{:>10} {} {}: {}", "", if t.pass { "PASS" } else { "FAIL" }, t.name, t.detail)?;
    }
    Ok(all)
}
