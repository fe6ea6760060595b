//! The invariant checker's verdict: the counts, the violations (each precise enough to look
//! up in the logs), the faults by kind, and the table that prints them with the seed.

use std::collections::BTreeMap;
use std::fmt::Write as _;

use super::faults::{FaultKind, Injected};
use super::ledger::Overlap;

/// An output that did not hold its expected bytes.
#[derive(Clone, Debug)]
pub struct Mismatch {
    pub job: String,
    pub object: String,
    pub what: String,
}

/// Everything the checker found.
#[derive(Clone, Debug, Default)]
pub struct Report {
    pub seed: u64,
    /// The command line that reproduces the run (its fault plan and job stream).
    pub reproduce: String,
    pub store: String,
    pub workers: usize,
    pub duration_s: u64,
    pub settle_s: u64,
    pub submitted: usize,
    /// Submissions no coordinator answered (during a fault): each submitted again.
    pub unacknowledged: usize,
    /// Submissions a serving coordinator refused (a job the cluster cannot run: a bug of the
    /// stream, or of the coordinator).
    pub refused: usize,
    pub succeeded: usize,
    pub failed: usize,
    /// Failed jobs: (job id, name, state).
    pub failures: Vec<(String, String, String)>,
    /// Acknowledged jobs the coordinator no longer knows: (id, name).
    pub lost: Vec<(String, String)>,
    /// Jobs still running `settle_s` after the last fault was healed: (id, name).
    pub not_ended: Vec<(String, String)>,
    pub overlaps: Vec<Overlap>,
    pub attempts: usize,
    pub completed_more_than_once: usize,
    pub malformed_ledger_lines: usize,
    pub outputs_checked: usize,
    pub mismatches: Vec<Mismatch>,
    /// Outputs of succeeded jobs that could not be fetched at all: (job, object, error).
    pub unavailable: Vec<(String, String, String)>,
    pub faults: Vec<Injected>,
    /// Fault kinds that are not injected in this run, and why.
    pub not_injected: Vec<(String, String)>,
    /// When the run started, ns since the epoch (the ledger's clock), to print times relative.
    pub start_ns: u64,
    /// Where the logs were kept, if they were.
    pub kept: Option<String>,
}

impl Report {
    /// Each violated invariant, one line each, naming what broke.
    pub fn violations(&self) -> Vec<String> {
        let mut v = Vec::new();
        if !self.lost.is_empty() {
            v.push(format!("{} acknowledged jobs lost: {:?}", self.lost.len(), self.lost));
        }
        if !self.not_ended.is_empty() {
            v.push(format!(
                "{} jobs did not end within {} s after the faults stopped: {:?}",
                self.not_ended.len(),
                self.settle_s,
                self.not_ended
            ));
        }
        // Every job of the stream is correct and every fault is healed, so none may fail: a
        // fault may cost attempts, never a job (a stream whose tasks fail for a reason of their
        // own, such as a file they cannot write, shows here too).
        if !self.failures.is_empty() {
            v.push(format!("{} jobs failed: {:?}", self.failures.len(), self.failures));
        }
        if self.refused > 0 {
            v.push(format!("{} submissions refused by a serving coordinator", self.refused));
        }
        for o in &self.overlaps {
            v.push(format!("subtask ran twice at once: {}", self.describe_overlap(o)));
        }
        for m in &self.mismatches {
            v.push(format!("output {} of job {} does not match: {}", m.object, m.job, m.what));
        }
        v
    }

    fn rel(&self, ns: u64) -> f64 {
        ns.saturating_sub(self.start_ns) as f64 / 1e9
    }

    /// The overlap with its times after the start and the fault active then.
    fn describe_overlap(&self, o: &Overlap) -> String {
        let (job, task, rank) = &o.subtask;
        let from = o.a.1.first_ns.max(o.b.1.first_ns);
        let fault = self
            .faults
            .iter()
            .rev()
            .find(|f| f.started.as_secs_f64() <= self.rel(from))
            .map(|f| {
                format!(
                    "{} {} at {:.1}s–{:.1}s",
                    f.fault.kind.describe(),
                    f.fault.target,
                    f.started.as_secs_f64(),
                    f.healed.as_secs_f64()
                )
            })
            .unwrap_or_else(|| "none yet".into());
        format!(
            "{job} {task}/{rank}: attempt {} alive {:.1}s–{:.1}s{}, attempt {} alive {:.1}s–{:.1}s{} (last fault before: {fault})",
            o.a.0,
            self.rel(o.a.1.first_ns),
            self.rel(o.a.1.last_ns),
            if o.a.1.ended { " (ended)" } else { "" },
            o.b.0,
            self.rel(o.b.1.first_ns),
            self.rel(o.b.1.last_ns),
            if o.b.1.ended { " (ended)" } else { "" },
        )
    }

    /// The faults injected, by kind.
    pub fn faults_by_kind(&self) -> BTreeMap<FaultKind, usize> {
        let mut m = BTreeMap::new();
        for f in &self.faults {
            *m.entry(f.fault.kind).or_insert(0) += 1;
        }
        m
    }

    /// The table, the violations and how to reproduce them.
    pub fn table(&self) -> String {
        let mut s = String::new();
        let _ = writeln!(
            s,
            "chaos run: seed {}, {} s of faults, store {}, {} workers; bound after the faults: {} s",
            self.seed, self.duration_s, self.store, self.workers, self.settle_s
        );
        let _ = writeln!(s, "\nfaults injected");
        let by_kind = self.faults_by_kind();
        for k in FaultKind::ALL {
            if let Some(n) = by_kind.get(&k) {
                let _ = writeln!(s, "  {:<28} {n:>5}", k.describe());
            }
        }
        for (what, why) in &self.not_injected {
            let _ = writeln!(s, "  {what:<28}     - ({why})");
        }
        let failed_faults = self.faults.iter().filter(|f| f.error.is_some()).count();
        if failed_faults > 0 {
            let _ =
                writeln!(s, "  ({failed_faults} faults could not be injected or healed cleanly: see the run's output)");
        }
        let ok = |bad: bool| if bad { "VIOLATED" } else { "ok" };
        let _ = writeln!(s, "\n{:<58} {:>8}  {:<8}  verdict", "invariant", "value", "must be");
        let mut row = |name: &str, value: String, must: &str, verdict: &str| {
            let _ = writeln!(s, "{name:<58} {value:>8}  {must:<8}  {verdict}");
        };
        row("jobs submitted (acknowledged)", self.submitted.to_string(), "", "");
        row("submissions no coordinator answered (tried again)", self.unacknowledged.to_string(), "", "");
        row("submissions refused", self.refused.to_string(), "0", ok(self.refused > 0));
        row("jobs ended: succeeded", self.succeeded.to_string(), "", "");
        row("jobs ended: failed", self.failed.to_string(), "0", ok(self.failed > 0));
        row("jobs lost (acknowledged, then unknown)", self.lost.len().to_string(), "0", ok(!self.lost.is_empty()));
        row(
            &format!("jobs not ended within {} s after the faults stopped", self.settle_s),
            self.not_ended.len().to_string(),
            "0",
            ok(!self.not_ended.is_empty()),
        );
        row("attempts in the ledger", self.attempts.to_string(), "", "");
        row(
            "subtasks run twice at once (attempts overlapping)",
            self.overlaps.len().to_string(),
            "0",
            ok(!self.overlaps.is_empty()),
        );
        row("subtasks completed by more than one attempt", self.completed_more_than_once.to_string(), "", "(info)");
        row("outputs checked with plexus get", self.outputs_checked.to_string(), "", "");
        row(
            "outputs whose bytes do not match",
            self.mismatches.len().to_string(),
            "0",
            ok(!self.mismatches.is_empty()),
        );
        row("outputs of succeeded jobs that could not be fetched", self.unavailable.len().to_string(), "", "(info)");
        if self.malformed_ledger_lines > 0 {
            row("malformed ledger lines", self.malformed_ledger_lines.to_string(), "", "(info)");
        }
        for (id, name, state) in self.failures.iter().take(10) {
            let _ = writeln!(s, "failed: {id} ({name}): {state}");
        }
        for (job, object, e) in self.unavailable.iter().take(10) {
            let _ = writeln!(s, "could not fetch {object} of {job}: {e}");
        }
        let v = self.violations();
        if v.is_empty() {
            let _ = writeln!(s, "\nno invariant violated (seed {})", self.seed);
        } else {
            let _ = writeln!(s, "\n{} violations (seed {}):", v.len(), self.seed);
            for line in v.iter().take(50) {
                let _ = writeln!(s, "  {line}");
            }
            let _ = writeln!(s, "reproduce (same fault plan and job stream): {}", self.reproduce);
        }
        if let Some(k) = &self.kept {
            let _ = writeln!(s, "logs and ledger kept in {k}");
        }
        s
    }
}
