//! A learned correction of the run-time estimates (issue 34, items 1 and 2): what `fastest`
//! cannot see, learnt from what placed attempts took against what they were estimated to take.
//!
//! `fastest` ranks workers by the measured estimates (`core::estimates`): the mean of the same
//! work on that worker, or else that worker's speed over other work. Three things those means do
//! not show, and this model learns from every finished attempt:
//! * **what runs beside it.** A task's run time depends on its neighbours (memory bandwidth,
//!   caches): the model learns, per kind of task, how each kind of neighbour changes its run time
//!   (a linear model of the log ratio over the cores each neighbour kind holds on the node);
//! * **a kind of work a class of node is fast or slow at.** Where a worker has not run this
//!   work, its estimate is its speed over other work; the model learns, per kind and class of
//!   node (its capacity), how that estimate errs, apart from estimates of the work's own runs;
//! * **a node slower than its means lately**: the log of its recent slowdown
//!   (`Candidate::recent_slowdown`), weighted as learnt.
//!
//! The prediction is `ln(took ÷ estimated) = bias(kind, class, own) + w(kind) · x`, fitted online
//! (a running mean for the bias, normalised least mean squares for `w`); the correction factor is
//! its exponential, bounded to [¼, 4]. Until a kind has [`MIN_FIT`] outcomes and a cell
//! [`MIN_CELL`], what is not learnt reads as no correction, so a new kind of work is placed as
//! `fastest` places it. Deterministic: no random draws, and kinds get their context slots in the
//! order they are first seen.
//!
//! **Probes.** The model learns only where placed tasks go, and so does the estimator: a worker's
//! estimate for a kind of work it has never run is its speed over other kinds, and `fastest`
//! never sends the work where that reads slow, so a worker fast at this kind and slow at the rest
//! is never tried, and never learnt (the blind spot of the `affinity` workload).
//! [`Correction::probe`] names such a worker: its estimate not from its runs of this kind
//! (`Candidate::est_compute_kind`), estimated at most [`PROBE_REACH`] times fastest's choice,
//! never probed for this kind before. One run there teaches the estimator its rate for the kind.
//! The budget is stated by those bounds: at most one probe per (worker, kind) pair, each costing
//! at most `PROBE_REACH − 1` times fastest's estimate ([`MAX_PROBED`] pairs remembered; past that
//! it starts again).
//!
//! Memory is bounded: at most [`MAX_KINDS`] kinds (past that the model starts again, saying so
//! in the log), [`MAX_CELLS`] cells a kind, [`MAX_AWAITED`] decisions awaiting their outcome.

use std::collections::{BTreeMap, HashMap, HashSet};

use plexus_proto::WorkerId;
use plexus_scheduler::placer::Candidate;

/// Kinds of neighbour told apart in the context; kinds past the first `SLOTS - 1` share the last.
pub const SLOTS: usize = 16;
/// Width of the context: per neighbour kind, its share of the node's cores, that share squared
/// (contention grows faster than linearly once a shared resource saturates) and that share times
/// the task's own share; then the task's own share and the recent slowdown.
pub const WIDTH: usize = 3 * SLOTS + 2;
const OWN: usize = 3 * SLOTS;
const SLOWDOWN: usize = 3 * SLOTS + 1;
/// Outcomes of a kind before its neighbour weights are used.
pub const MIN_FIT: u64 = 24;
/// Outcomes of a (kind, class, own) cell before its bias is used.
pub const MIN_CELL: u64 = 2;
pub const MAX_KINDS: usize = 1024;
pub const MAX_CELLS: usize = 256;
/// (A context is ~420 bytes: at most ~21 MB awaiting.)
pub const MAX_AWAITED: usize = 50_000;
/// (kind, worker) pairs probed that are remembered (~32 bytes each); past that, the set starts
/// again.
pub const MAX_PROBED: usize = 100_000;
/// A probe goes only to a worker estimated at most this many times fastest's choice.
pub const PROBE_REACH: f64 = 2.0;
/// Step of the neighbour weights' normalised least mean squares.
const RATE: f64 = 0.1;
/// The bias is a running mean over at most this many outcomes (then a moving one).
const BIAS_MEMORY: u64 = 32;
/// A neighbour kind's share of a node's cores is read as at most this (a node reporting more
/// attempts than it has cores is oversubscribed, not infinitely so).
const MAX_SHARE: f64 = 4.0;
/// Bounds of a log ratio learnt from, and of the correction's.
const MAX_LOG: f64 = std::f64::consts::LN_2 * 2.0;

/// What the model reads of one candidate for one task.
#[derive(Clone, Debug, PartialEq)]
pub struct Context {
    /// The node's class: its capacity, hashed.
    pub class: u64,
    /// Whether the compute estimate comes from this work's own runs there.
    pub own: bool,
    pub x: [f64; WIDTH],
}

#[derive(Clone, Debug, Default)]
struct Cell {
    bias: f64,
    n: u64,
}

#[derive(Clone, Debug)]
struct KindModel {
    w: [f64; WIDTH],
    n: u64,
    cells: HashMap<(u64, bool), Cell>,
}

impl Default for KindModel {
    fn default() -> Self {
        KindModel { w: [0.0; WIDTH], n: 0, cells: HashMap::new() }
    }
}

struct Awaited {
    kind: u64,
    ctx: Context,
    est_ms: f64,
}

/// The learned correction (see the module documentation).
#[derive(Default)]
pub struct Correction {
    slots: HashMap<u64, usize>,
    kinds: HashMap<u64, KindModel>,
    awaited: BTreeMap<u64, Awaited>,
    outcomes: u64,
    /// (kind, worker) pairs probed ([`Correction::probe`]).
    probed: HashSet<(u64, WorkerId)>,
}

/// The class of a node: its capacity (cores, memory, GPUs, fast memory), hashed.
pub fn class_of(c: &Candidate) -> u64 {
    let mut h = plexus_scheduler::core::FieldHash::default();
    h.eat(&c.capacity.cpu.to_le_bytes());
    h.eat(&c.capacity.memory.to_le_bytes());
    h.eat(&c.capacity.gpu.to_le_bytes());
    h.eat(&c.cache_bytes.to_le_bytes());
    h.finish()
}

impl Correction {
    pub fn new() -> Correction {
        Correction::default()
    }

    /// Outcomes learnt from so far.
    pub fn outcomes(&self) -> u64 {
        self.outcomes
    }

    fn slot(&mut self, kind: u64) -> usize {
        if let Some(&s) = self.slots.get(&kind) {
            return s;
        }
        if self.slots.len() + 1 < SLOTS {
            let s = self.slots.len();
            self.slots.insert(kind, s);
            return s;
        }
        SLOTS - 1
    }

    /// What the model reads of candidate `c` for a task of `cores` cores: what runs there (each
    /// neighbour kind's cores over the node's, see [`WIDTH`]), its recent slowdown, its class,
    /// and where its compute estimate comes from.
    pub fn context(&mut self, cores: f64, c: &Candidate) -> Context {
        let mut x = [0.0; WIDTH];
        let node = c.capacity.cpu.max(1.0);
        for &(kind, cpu) in &c.running {
            let s = self.slot(kind);
            x[s] += cpu.max(0.0) / node;
        }
        let own = (cores.max(0.0) / node).min(1.0);
        for s in 0..SLOTS {
            x[s] = x[s].min(MAX_SHARE);
            x[SLOTS + s] = x[s] * x[s];
            x[2 * SLOTS + s] = x[s] * own;
        }
        x[OWN] = own;
        x[SLOWDOWN] =
            c.recent_slowdown.filter(|s| s.is_finite() && *s > 0.0).map_or(0.0, |s| s.ln().clamp(-MAX_LOG, MAX_LOG));
        Context { class: class_of(c), own: c.est_compute_own, x }
    }

    /// The predicted log of took ÷ estimated for a task of `kind` in `ctx`; `None` where nothing
    /// learnt applies yet.
    pub fn predict(&self, kind: u64, ctx: &Context) -> Option<f64> {
        let m = self.kinds.get(&kind)?;
        let cell = m.cells.get(&(ctx.class, ctx.own)).filter(|c| c.n >= MIN_CELL).map(|c| c.bias);
        let lin = (m.n >= MIN_FIT).then(|| dot(&m.w, &ctx.x));
        if cell.is_none() && lin.is_none() {
            return None;
        }
        Some((cell.unwrap_or(0.0) + lin.unwrap_or(0.0)).clamp(-MAX_LOG, MAX_LOG))
    }

    /// The factor to multiply the compute estimate of a task of `kind` by in `ctx` (1 where
    /// nothing learnt applies).
    pub fn factor(&self, kind: u64, ctx: &Context) -> f64 {
        self.predict(kind, ctx).map_or(1.0, f64::exp)
    }

    /// The worker to probe for a task of `kind`, fastest having chosen `anchor` (see the module
    /// documentation), or `None`: the nearest feasible one whose estimate does not come from its
    /// runs of this kind, within the reach, not probed for it yet.
    pub fn probe(&self, kind: u64, candidates: &[Candidate], anchor: usize) -> Option<usize> {
        let reach = candidates.get(anchor)?.est_run_ms()? * PROBE_REACH;
        candidates
            .iter()
            .enumerate()
            .filter(|&(i, c)| {
                i != anchor && c.feasible && !c.est_compute_kind && !self.probed.contains(&(kind, c.worker))
            })
            .filter_map(|(i, c)| Some((i, c.est_run_ms().filter(|e| *e <= reach)?)))
            .min_by(|a, b| a.1.total_cmp(&b.1).then(a.0.cmp(&b.0)))
            .map(|(i, _)| i)
    }

    /// A task of `kind` was sent to `worker` as a probe.
    pub fn probed(&mut self, kind: u64, worker: WorkerId) {
        if self.probed.len() >= MAX_PROBED {
            self.probed.clear();
        }
        self.probed.insert((kind, worker));
    }

    /// The model of `kind`, a new one if there is none (starting again past [`MAX_KINDS`]).
    fn model(&mut self, kind: u64) -> &mut KindModel {
        if self.kinds.len() >= MAX_KINDS && !self.kinds.contains_key(&kind) {
            tracing::info!(
                kinds = MAX_KINDS,
                "the estimate correction holds as many kinds as it keeps; starting again"
            );
            self.kinds.clear();
        }
        self.kinds.entry(kind).or_default()
    }

    /// Decision `decision` placed a task of `kind` where `ctx` holds, estimated to compute for
    /// `est_ms`: its outcome will be learnt from.
    pub fn remember(&mut self, decision: u64, kind: u64, ctx: Context, est_ms: f64) {
        if !(est_ms.is_finite() && est_ms > 0.0) {
            return;
        }
        self.awaited.insert(decision, Awaited { kind, ctx, est_ms });
        while self.awaited.len() > MAX_AWAITED {
            self.awaited.pop_first();
        }
    }

    /// The attempt of `decision` computed for `run_ms`.
    pub fn observe(&mut self, decision: u64, run_ms: f64) {
        let Some(a) = self.awaited.remove(&decision) else { return };
        if !run_ms.is_finite() || run_ms < 0.0 {
            return;
        }
        // Whole-millisecond reports: a 0 ms run of a 1 ms estimate is not 0 × slower.
        let y = ((run_ms.max(1.0)) / a.est_ms.max(1.0)).ln().clamp(-MAX_LOG, MAX_LOG);
        let m = self.model(a.kind);
        if m.cells.len() >= MAX_CELLS && !m.cells.contains_key(&(a.ctx.class, a.ctx.own)) {
            m.cells.clear();
        }
        let cell = m.cells.entry((a.ctx.class, a.ctx.own)).or_default();
        let e = y - cell.bias - dot(&m.w, &a.ctx.x);
        cell.n += 1;
        cell.bias += e / cell.n.min(BIAS_MEMORY) as f64;
        let norm = 1.0 + dot(&a.ctx.x, &a.ctx.x);
        for (w, x) in m.w.iter_mut().zip(&a.ctx.x) {
            *w += RATE * e * x / norm;
        }
        m.n += 1;
        self.outcomes += 1;
    }
}

fn dot(a: &[f64; WIDTH], b: &[f64; WIDTH]) -> f64 {
    a.iter().zip(b).map(|(a, b)| a * b).sum()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cand(running: Vec<(u64, f64)>, own: bool) -> Candidate {
        Candidate { running, est_compute_own: own, ..Candidate::example(1) }
    }

    #[test]
    fn nothing_learnt_is_no_correction() {
        let mut c = Correction::new();
        let ctx = c.context(1.0, &cand(vec![(7, 2.0)], true));
        assert_eq!(c.predict(1, &ctx), None);
        assert_eq!(c.factor(1, &ctx), 1.0);
    }

    #[test]
    fn a_kind_slowed_by_a_neighbour_kind_is_learnt_and_told_apart() {
        // Kind 1 runs twice as long as estimated for each core of kind 9 beside it on 4 cores
        // (ratio 1 + cores/2), and is unaffected by kind 5.
        let mut c = Correction::new();
        for d in 0..400u64 {
            let (k, cores) = [(9u64, 0.0), (9, 2.0), (9, 4.0), (5, 4.0)][d as usize % 4];
            let ctx = c.context(1.0, &cand(vec![(k, cores)], true));
            let took = if k == 9 { 100.0 * (1.0 + cores / 2.0) } else { 100.0 };
            c.remember(d, 1, ctx, 100.0);
            c.observe(d, took);
        }
        let calm = c.context(1.0, &cand(vec![(5, 4.0)], true));
        let busy = c.context(1.0, &cand(vec![(9, 4.0)], true));
        let (fc, fb) = (c.factor(1, &calm), c.factor(1, &busy));
        assert!(fb > 2.0 * fc, "busy {fb}, calm {fc}");
        assert!(fc < 1.5, "{fc}");
        // Another kind has learnt nothing.
        assert_eq!(c.factor(2, &busy), 1.0);
        assert_eq!(c.outcomes(), 400);
    }

    #[test]
    fn estimates_from_other_work_are_corrected_apart_from_own_ones() {
        // On this class, estimates from the worker's speed over other work run 2.5 × short;
        // estimates of the work's own runs are right.
        let mut c = Correction::new();
        for d in 0..40 {
            let own = d % 2 == 0;
            let ctx = c.context(1.0, &cand(Vec::new(), own));
            c.remember(d, 3, ctx, 200.0);
            c.observe(d, if own { 200.0 } else { 500.0 });
        }
        let other = c.context(1.0, &cand(Vec::new(), false));
        let own = c.context(1.0, &cand(Vec::new(), true));
        assert!((c.factor(3, &other) - 2.5).abs() < 0.1, "{}", c.factor(3, &other));
        assert!((c.factor(3, &own) - 1.0).abs() < 0.1, "{}", c.factor(3, &own));
        // Another class has no cell of its own: only the kind's weights apply there, far from
        // the 2.5 learnt of the first class.
        let big = Candidate {
            capacity: plexus_proto::Resources { cpu: 64.0, ..Candidate::example(1).capacity },
            ..cand(Vec::new(), false)
        };
        let ctx = c.context(1.0, &big);
        assert!(c.factor(3, &ctx) < 1.5, "{}", c.factor(3, &ctx));
    }

    #[test]
    fn probes_go_once_to_workers_blind_to_the_kind_near_fastests_choice() {
        let at = |n: u8, est: f64, of_kind: bool| Candidate {
            est_fetch_ms: Some(0.0),
            est_compute_ms: Some(est),
            est_compute_kind: of_kind,
            ..Candidate::example(n)
        };
        let mut c = Correction::new();
        // Fastest chose worker 1 (100 ms). A worker whose estimate comes from its runs of the
        // kind, or one past the reach, or an infeasible one, is not probed.
        assert_eq!(c.probe(4, &[at(1, 100.0, true), at(2, 120.0, true)], 0), None);
        assert_eq!(c.probe(4, &[at(1, 100.0, true), at(2, 250.0, false)], 0), None);
        let full = Candidate { feasible: false, ..at(2, 120.0, false) };
        assert_eq!(c.probe(4, &[at(1, 100.0, true), full], 0), None);
        // The nearest blind worker within the reach is probed, once per kind.
        let cands = [at(1, 100.0, true), at(2, 180.0, false), at(3, 150.0, false)];
        assert_eq!(c.probe(4, &cands, 0), Some(2));
        c.probed(4, cands[2].worker);
        assert_eq!(c.probe(4, &cands, 0), Some(1));
        c.probed(4, cands[1].worker);
        assert_eq!(c.probe(4, &cands, 0), None);
        // Another kind is still probed there.
        assert_eq!(c.probe(5, &cands, 0), Some(2));
        // Fastest's own choice is never a probe, blind or not.
        assert_eq!(c.probe(6, &[at(1, 100.0, false)], 0), None);
        // The memory stays bounded.
        for k in 0..(MAX_PROBED as u64 + 10) {
            c.probed(k, cands[1].worker);
        }
        assert!(c.probed.len() <= MAX_PROBED);
    }

    #[test]
    fn hostile_outcomes_stay_bounded() {
        let mut c = Correction::new();
        for d in 0..100 {
            let ctx = c.context(1.0, &cand(vec![(d, 1e12)], d % 2 == 0));
            c.remember(d, d % 3, ctx, if d % 5 == 0 { f64::NAN } else { 1.0 });
            c.observe(d, [0.0, f64::INFINITY, 1e300, -5.0][d as usize % 4]);
        }
        // Outcomes without a decision are ignored.
        c.observe(1_000_000, 5.0);
        for k in 0..3 {
            let ctx = c.context(1.0, &cand(vec![(1, 4.0)], true));
            let f = c.factor(k, &ctx);
            assert!((0.25..=4.0).contains(&f), "{f}");
        }
        assert!(c.slots.len() < SLOTS && c.slots.values().all(|&s| s < SLOTS - 1));
    }
}
