//! Measured speeds of the cluster (issue 17): how long work takes on each worker, and how long
//! moving bytes from one worker to another takes, learnt from what workers report of the attempts
//! that succeed, so that placement can estimate each candidate's fetch and compute time
//! (`Candidate::est_fetch_ms`, `Candidate::est_compute_ms`).
//!
//! Pure: no I/O and no clock (recency is counted in samples, not seconds); bounded memory; and
//! serialisable, so the coordinator keeps it across restarts.
//!
//! # Recency and confidence
//! Every statistic is a set of recency-weighted sums: a new sample enters with weight 1 and every
//! earlier one is multiplied by [`DECAY`] (0.9), so a mean is `Σ λ^k·x_k / Σ λ^k` over the samples,
//! newest first (k = 0). The confidence of an estimate is its effective sample count `Σ λ^k`: 1
//! after one sample, 1.9 after two, never more than `1 / (1 − λ)` = 10. An estimate that is not
//! measured but derived from others (a fallback below) has confidence 0.
//!
//! # Compute
//! For each worker and each task signature run there (`core::gpus::signature`: the command or
//! kind and the requests, so the same work in different jobs shares what was measured of it), the
//! recency-weighted mean run time. A run's time is the worker's `finished_at − started_at`, which
//! starts once the inputs are fetched, so it is compute (and output collection) only. For tasks
//! with a `flops` hint, the worker's ms per unit of work too: `Σ λ^k·ms_k / Σ λ^k·work_k`, where a
//! task's work ([`work`]) is its flops per unit it computes on: its GPUs if it requests any, else
//! its cores (at least one). A task holding 8 cores or 4 GPUs is taken to spread its flops over
//! them, so what a worker's 1-core tasks measured carries to its 8-core ones, and its GPU tasks'
//! rate to its CPU ones no more than the units say. (Per flop alone, a worker that had run 16-core
//! tasks looked 16 times faster to a 1-core task than one that had run 1-core tasks; measured in
//! the simulator, rates per unit of work and per kind made `fastest`'s mean task response
//! 0.90–1.05 × what it was over 21 workloads and seeds, shorter on 19.) A task that does not use the cores it holds is estimated
//! short until it has run there once (step 1).
//! A task's compute time on a worker is estimated from, in this order:
//! 1. the worker's own runs of the signature;
//! 2. its work × the worker's ms per unit of work over the tasks of its kind (the command or kind
//!    without the requests, `core::signature::kind_key`), where the caller names the kind: a
//!    worker fast at one kind of work and slow at another is estimated per kind;
//! 3. its work × the worker's ms per unit of work over every task;
//! 4. the mean, over the workers that ran the signature, of their means (a worker that never ran it
//!    is taken to be typical, so placers try it);
//! 5. its work × the mean of the workers' ms per unit of work;
//! 6. none.
//!
//! # Fetch
//! For each (holder → worker) pair, `fetch_ms = L·objects + R·bytes`: `L` the latency of one fetch,
//! `R` the ms per byte (1/throughput). Workers fetch an attempt's missing inputs one after another
//! and report the total time and bytes, so one attempt is one sample (objects, bytes, ms), and `L`
//! and `R` are fitted by recency-weighted least squares, constrained to `L, R ≥ 0`. Samples that
//! all have the same bytes per object cannot tell latency from throughput; all of it is then
//! taken as throughput (`L = 0`, `R = Σ λ^k·b_k·y_k / Σ λ^k·b_k²`).
//!
//! *Attribution (an approximation)*: an attempt whose inputs came from several holders is counted
//! whole as a sample of the holder that supplied most of its bytes (the core decides that when it
//! dispatches the attempt, from the holder the worker tries first for each missing input). A
//! minority of bytes from other holders thus adds their speed to the main holder's; for the
//! usual attempt (inputs from one producer, or one big input) the sample is exact.
//!
//! A pair never measured is estimated, in this order, from: the mean `L` and `R` of the measured
//! pairs with the same rack relation (both workers labelled `rack=…` and the same rack, or both
//! labelled and different racks); the mean of every measured pair (the cluster's mean, also for
//! workers without a rack label); none.
//!
//! # Bounds
//! At most [`MAX_RUNS`] (worker, signature) means and as many (worker, signature) and (worker,
//! kind) rates, [`MAX_FLOP_RATES`] workers' rates and [`MAX_LINKS`] pairs are kept; past a bound
//! the least recently updated eighth is dropped.

use std::collections::HashMap;

use plexus_proto::WorkerId;
use serde::{Deserialize, Serialize};

use crate::error::Error;

/// The work of a task for the per-unit rates (see the module documentation): its `flops` hint
/// per unit it computes on, its GPUs if it requests any, else its cores (at least one). `None`
/// without a usable hint.
pub fn work(flops: Option<f64>, resources: &plexus_proto::Resources) -> Option<f64> {
    let units = if resources.gpu > 0 { f64::from(resources.gpu) } else { resources.cpu.max(1.0) };
    flops.filter(|f| f.is_finite() && *f > 0.0).map(|f| f / if units.is_finite() { units } else { 1.0 })
}

/// Weight of every earlier sample when a new one arrives. 0.9: about ten samples count (the
/// effective window is `1 / (1 − λ)`), enough to smooth the ±20 % a single run varies by on a
/// busy node, while a node whose speed changes (a co-tenant, a throttled link) is followed within
/// a few runs (the oldest sample's weight halves every 6.6 samples).
pub const DECAY: f64 = 0.9;
/// (worker, signature) run-time means kept at most: 4,096 is 64 workers × 64 kinds of task.
pub const MAX_RUNS: usize = 4_096;
/// Workers whose ms per flop is kept at most.
pub const MAX_FLOP_RATES: usize = 1_024;
/// (holder → worker) pairs kept at most: every pair of 64 workers.
pub const MAX_LINKS: usize = 4_096;
/// The layout of [`Estimates`] as stored; another version is refused (and the coordinator starts
/// fresh).
pub const FORMAT: u32 = 1;

/// Below this `1 − ρ²` (ρ the uncentred correlation of the samples' objects and bytes) a pair's
/// samples are taken to have one size per object, and latency is not separated from throughput:
/// sizes per object must differ by a few per cent for the two to be told apart.
const DEGENERATE: f64 = 1e-4;

/// A recency-weighted mean.
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Mean {
    /// Σ λ^k: the effective sample count.
    pub weight: f64,
    pub sum: f64,
}

impl Mean {
    fn add(&mut self, x: f64) {
        self.weight = self.weight * DECAY + 1.0;
        self.sum = self.sum * DECAY + x;
    }

    pub fn value(&self) -> Option<f64> {
        (self.weight > 0.0).then(|| self.sum / self.weight)
    }

    fn valid(&self) -> bool {
        self.weight > 0.0 && self.weight.is_finite() && self.sum >= 0.0 && self.sum.is_finite()
    }
}

/// A recency-weighted ratio `Σ λ^k·num_k / Σ λ^k·den_k` (ms per flop).
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Ratio {
    pub weight: f64,
    pub num: f64,
    pub den: f64,
}

impl Ratio {
    fn add(&mut self, num: f64, den: f64) {
        self.weight = self.weight * DECAY + 1.0;
        self.num = self.num * DECAY + num;
        self.den = self.den * DECAY + den;
    }

    pub fn value(&self) -> Option<f64> {
        (self.den > 0.0).then(|| self.num / self.den)
    }

    fn valid(&self) -> bool {
        [self.weight, self.num, self.den].iter().all(|v| v.is_finite() && *v >= 0.0)
            && self.weight > 0.0
            && self.den > 0.0
    }
}

/// The recency-weighted sums of one pair's fetch samples (n objects, b bytes, y ms), from which
/// latency and ms per byte are fitted.
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Link {
    pub weight: f64,
    pub nn: f64,
    pub nb: f64,
    pub bb: f64,
    pub ny: f64,
    pub by: f64,
    pub yy: f64,
}

impl Link {
    fn add(&mut self, n: f64, b: f64, y: f64) {
        for (s, v) in [
            (&mut self.weight, 1.0),
            (&mut self.nn, n * n),
            (&mut self.nb, n * b),
            (&mut self.bb, b * b),
            (&mut self.ny, n * y),
            (&mut self.by, b * y),
            (&mut self.yy, y * y),
        ] {
            *s = *s * DECAY + v;
        }
    }

    /// (latency ms per fetch, ms per byte): the least-squares fit with both ≥ 0.
    pub fn fit(&self) -> (f64, f64) {
        let (nn, nb, bb, ny, by, yy) = (self.nn, self.nb, self.bb, self.ny, self.by, self.yy);
        let det = nn * bb - nb * nb;
        if bb > 0.0 && det > DEGENERATE * nn * bb {
            let l = (ny * bb - nb * by) / det;
            let r = (nn * by - nb * ny) / det;
            // Inside the quadrant the unconstrained minimum is the constrained one.
            if l >= 0.0 && r >= 0.0 {
                return (l, r);
            }
        }
        // Else the minimum lies on an edge: throughput only, or latency only.
        let sse = |l: f64, r: f64| yy - 2.0 * l * ny - 2.0 * r * by + l * l * nn + 2.0 * l * r * nb + r * r * bb;
        let latency_only = (if nn > 0.0 { (ny / nn).max(0.0) } else { 0.0 }, 0.0);
        if bb <= 0.0 {
            return latency_only;
        }
        let throughput_only = (0.0, (by / bb).max(0.0));
        // Near-ties (a single sample fits both exactly) go to throughput: it scales with size.
        let tolerance = 1e-9 * yy.max(1.0);
        if sse(latency_only.0, 0.0) < sse(0.0, throughput_only.1) - tolerance { latency_only } else { throughput_only }
    }

    fn valid(&self) -> bool {
        [self.weight, self.nn, self.bb, self.nb, self.ny, self.by, self.yy].iter().all(|v| v.is_finite() && *v >= 0.0)
            && self.weight > 0.0
            && self.nn > 0.0
    }
}

/// An estimate and how many (effective) samples back it: 0 when it is derived from other
/// workers or pairs (a fallback).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Estimate {
    pub ms: f64,
    pub samples: f64,
    /// Whether it comes from this work's own runs on this worker (its signature's rate or mean
    /// there), not from the worker's speed over other work or the cluster's means: a learner
    /// that corrects the estimates (`plexus_policy::correction`) corrects the two apart.
    pub own: bool,
    /// Whether it comes from this worker's runs of this kind of work (`own`, or its rate over
    /// the kind, `kind_key`), not only from its speed over other kinds or the cluster's means:
    /// what the learned placer probes (`plexus_policy::correction::Correction::probe`).
    pub of_kind: bool,
}

/// A pair's fetch model.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct LinkEstimate {
    pub latency_ms: f64,
    pub ms_per_byte: f64,
    /// 0 for a pair never measured (a fallback).
    pub samples: f64,
}

impl LinkEstimate {
    /// Milliseconds to fetch one object of `bytes`.
    pub fn fetch_ms(&self, bytes: u64) -> f64 {
        self.latency_ms + self.ms_per_byte * bytes as f64
    }
}

/// What was measured of one worker, for `plexus workers`.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct WorkerSpeed {
    /// Ms per 10⁹ flops on one core or GPU ([`work`]), from tasks with a `flops` hint.
    pub ms_per_gflop: Option<f64>,
    pub flop_samples: f64,
    /// Task signatures with a measured run time here, and their samples in all.
    pub signatures: u32,
    pub run_samples: f64,
    /// The geometric mean, over the signatures that other workers ran too, of the cluster's mean
    /// run time ÷ this worker's: above 1, faster than typical.
    pub relative_speed: Option<f64>,
    /// Holders measured fetching to it, their mean throughput (bytes per ms, from the mean ms per
    /// byte) and mean latency, and their samples in all.
    pub fetch_pairs: u32,
    pub fetch_bytes_per_ms: Option<f64>,
    pub fetch_latency_ms: Option<f64>,
    pub fetch_samples: f64,
}

#[derive(Clone, Copy, Debug, Default)]
struct Sum {
    count: u32,
    total: f64,
}

impl Sum {
    fn add(&mut self, v: f64) {
        self.count += 1;
        self.total += v;
    }

    fn remove(&mut self, v: f64) {
        self.count = self.count.saturating_sub(1);
        self.total = if self.count == 0 { 0.0 } else { (self.total - v).max(0.0) };
    }

    fn mean(&self) -> Option<f64> {
        (self.count > 0).then(|| self.total / self.count as f64)
    }
}

/// The classes of pairs whose means stand in for a pair never measured.
const SAME_RACK: usize = 0;
const OTHER_RACK: usize = 1;
const ALL: usize = 2;

fn classes(same_rack: Option<bool>) -> &'static [usize] {
    match same_rack {
        Some(true) => &[SAME_RACK, ALL],
        Some(false) => &[OTHER_RACK, ALL],
        None => &[ALL],
    }
}

#[derive(Clone, Copy, Debug)]
struct LinkEntry {
    link: Link,
    /// The pair's rack relation when it was last measured.
    same_rack: Option<bool>,
    seq: u64,
}

/// The cluster's measured speeds. See the module documentation for the formulas.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
#[serde(try_from = "Stored", into = "Stored")]
pub struct Estimates {
    /// Bumped by every sample: the coordinator saves when it moved.
    revision: u64,
    runs: HashMap<(WorkerId, u64), (Mean, u64)>,
    /// Per (worker, signature), ms per unit of work, from the runs that carried a `flops` hint: a
    /// kind of task whose work varies from one task to the next is estimated by its size, not its
    /// mean.
    run_rates: HashMap<(WorkerId, u64), (Ratio, u64)>,
    /// Per (worker, kind of task), ms per unit of work.
    kind_rates: HashMap<(WorkerId, u64), (Ratio, u64)>,
    flop_rates: HashMap<WorkerId, (Ratio, u64)>,
    links: HashMap<(WorkerId, WorkerId), LinkEntry>,
    // Derived, rebuilt when loaded: per signature the sum of the workers' means; the sum of the
    // workers' ms per flop; per class the sums of the pairs' latency and ms per byte.
    signature_means: HashMap<u64, Sum>,
    flop_mean: Sum,
    link_latency: [Sum; 3],
    link_rate: [Sum; 3],
    /// Not stored: per worker, how much slower than estimated its latest runs were (see
    /// [`Estimates::slowdown`]).
    slowdowns: HashMap<WorkerId, f64>,
}

/// Weight of a worker's earlier runs in its [`Estimates::slowdown`] when a new one arrives:
/// 0.5, so the last three runs make nearly 90 % of it — a surprise, not a mean.
pub const SLOWDOWN_DECAY: f64 = 0.5;
/// Workers whose slowdown is kept at most (past it, the map starts over).
pub const MAX_SLOWDOWNS: usize = 16_384;

impl Estimates {
    pub fn new() -> Estimates {
        Estimates::default()
    }

    /// Bumped by every sample.
    pub fn revision(&self) -> u64 {
        self.revision
    }

    /// Whether nothing was measured yet.
    pub fn is_empty(&self) -> bool {
        self.runs.is_empty() && self.flop_rates.is_empty() && self.links.is_empty()
    }

    /// One successful run of a task of `signature` on `worker` that took `run_ms` (compute, not
    /// fetch), with the task's work ([`work`]: its `flops` hint per core or GPU).
    pub fn observe_run(&mut self, worker: WorkerId, signature: u64, flops: Option<f64>, run_ms: f64) {
        self.observe_run_of(worker, signature, None, flops, run_ms);
    }

    /// [`Estimates::observe_run`] of a task of `kind` (`core::signature::kind_key`), whose rate
    /// per unit of work is then kept per kind too.
    pub fn observe_run_of(
        &mut self,
        worker: WorkerId,
        signature: u64,
        kind: Option<u64>,
        flops: Option<f64>,
        run_ms: f64,
    ) {
        if !run_ms.is_finite() || run_ms < 0.0 {
            return;
        }
        // How this run compares with what was expected of it, before it counts in the estimate.
        if let Some(expected) = self.compute_of(worker, signature, kind, flops).map(|e| e.ms).filter(|&ms| ms > 0.0) {
            let ratio = (run_ms / expected).clamp(0.01, 100.0);
            if self.slowdowns.len() >= MAX_SLOWDOWNS && !self.slowdowns.contains_key(&worker) {
                self.slowdowns.clear();
            }
            let s = self.slowdowns.entry(worker).or_insert(ratio);
            *s = SLOWDOWN_DECAY * *s + (1.0 - SLOWDOWN_DECAY) * ratio;
        }
        self.revision += 1;
        let seq = self.revision;
        let e = self.runs.entry((worker, signature)).or_insert((Mean::default(), seq));
        let old = e.0.value();
        e.0.add(run_ms);
        e.1 = seq;
        let new = e.0.value().unwrap_or(0.0);
        let s = self.signature_means.entry(signature).or_default();
        if let Some(o) = old {
            s.remove(o);
        }
        s.add(new);
        if let Some(f) = flops.filter(|f| f.is_finite() && *f > 0.0) {
            let r = self.run_rates.entry((worker, signature)).or_insert((Ratio::default(), seq));
            r.0.add(run_ms, f);
            r.1 = seq;
            if let Some(k) = kind {
                let r = self.kind_rates.entry((worker, k)).or_insert((Ratio::default(), seq));
                r.0.add(run_ms, f);
                r.1 = seq;
            }
            let e = self.flop_rates.entry(worker).or_insert((Ratio::default(), seq));
            let old = e.0.value();
            e.0.add(run_ms, f);
            e.1 = seq;
            let new = e.0.value().unwrap_or(0.0);
            if let Some(o) = old {
                self.flop_mean.remove(o);
            }
            self.flop_mean.add(new);
        }
        if self.runs.len() > MAX_RUNS
            || self.run_rates.len() > MAX_RUNS
            || self.kind_rates.len() > MAX_RUNS
            || self.flop_rates.len() > MAX_FLOP_RATES
        {
            self.trim();
        }
    }

    /// One attempt on `worker` that fetched `objects` inputs, `bytes` in all, in `ms`, counted as
    /// fetched from `holder`; `same_rack` is the pair's rack relation (`None` when either worker
    /// has no `rack` label).
    pub fn observe_fetch(
        &mut self,
        holder: WorkerId,
        worker: WorkerId,
        same_rack: Option<bool>,
        objects: u32,
        bytes: u64,
        ms: f64,
    ) {
        if holder == worker || objects == 0 || !ms.is_finite() || ms < 0.0 {
            return;
        }
        self.revision += 1;
        let seq = self.revision;
        let e = self.links.entry((holder, worker)).or_insert(LinkEntry { link: Link::default(), same_rack, seq });
        let old = (e.link.weight > 0.0).then(|| (e.link.fit(), e.same_rack));
        e.link.add(objects as f64, bytes as f64, ms);
        e.seq = seq;
        e.same_rack = same_rack;
        let new = e.link.fit();
        if let Some(((l, r), rel)) = old {
            for &c in classes(rel) {
                self.link_latency[c].remove(l);
                self.link_rate[c].remove(r);
            }
        }
        for &c in classes(same_rack) {
            self.link_latency[c].add(new.0);
            self.link_rate[c].add(new.1);
        }
        if self.links.len() > MAX_LINKS {
            self.trim();
        }
    }

    /// How much slower than estimated `worker`'s latest runs were: a recency-weighted mean
    /// ([`SLOWDOWN_DECAY`]) of each run's time ÷ the compute estimate it had just before it
    /// counted. Near 1 on a worker that runs as measured; above it on one that slowed down since
    /// (a co-tenant, memory-bound neighbours, throttling), which its means follow only over many
    /// runs. `None` before a run was compared with an estimate; not kept across restarts.
    pub fn slowdown(&self, worker: WorkerId) -> Option<f64> {
        self.slowdowns.get(&worker).copied()
    }

    /// Estimated compute of a task of `signature` (with its work, [`work`]) on `worker`.
    pub fn compute(&self, worker: WorkerId, signature: u64, flops: Option<f64>) -> Option<Estimate> {
        self.compute_of(worker, signature, None, flops)
    }

    /// [`Estimates::compute`] of a task of `kind` (`core::signature::kind_key`): where `worker`
    /// has not run the signature, its rate over the kind comes before its rate over every task.
    pub fn compute_of(
        &self,
        worker: WorkerId,
        signature: u64,
        kind: Option<u64>,
        flops: Option<f64>,
    ) -> Option<Estimate> {
        let hint = flops.filter(|f| f.is_finite() && *f > 0.0);
        if let (Some(f), Some((r, _))) = (hint, self.run_rates.get(&(worker, signature)))
            && let Some(rate) = r.value()
        {
            return Some(Estimate { ms: f * rate, samples: r.weight, own: true, of_kind: true });
        }
        if let Some((m, _)) = self.runs.get(&(worker, signature))
            && let Some(ms) = m.value()
        {
            return Some(Estimate { ms, samples: m.weight, own: true, of_kind: true });
        }
        if let (Some(f), Some((r, _))) = (hint, kind.and_then(|k| self.kind_rates.get(&(worker, k))))
            && let Some(rate) = r.value()
        {
            return Some(Estimate { ms: f * rate, samples: r.weight, own: false, of_kind: true });
        }
        if let (Some(f), Some((r, _))) = (hint, self.flop_rates.get(&worker))
            && let Some(rate) = r.value()
        {
            return Some(Estimate { ms: f * rate, samples: r.weight, own: false, of_kind: false });
        }
        if let Some(ms) = self.signature_means.get(&signature).and_then(Sum::mean) {
            return Some(Estimate { ms, samples: 0.0, own: false, of_kind: false });
        }
        let (f, rate) = (hint?, self.flop_mean.mean()?);
        Some(Estimate { ms: f * rate, samples: 0.0, own: false, of_kind: false })
    }

    /// The fetch model of `holder → worker`: measured, or the mean of its rack class, or the
    /// cluster's mean (see the module documentation).
    pub fn link(&self, holder: WorkerId, worker: WorkerId, same_rack: Option<bool>) -> Option<LinkEstimate> {
        if holder == worker {
            return Some(LinkEstimate { latency_ms: 0.0, ms_per_byte: 0.0, samples: f64::INFINITY });
        }
        if let Some(e) = self.links.get(&(holder, worker)) {
            let (latency_ms, ms_per_byte) = e.link.fit();
            return Some(LinkEstimate { latency_ms, ms_per_byte, samples: e.link.weight });
        }
        classes(same_rack).iter().find_map(|&c| {
            Some(LinkEstimate {
                latency_ms: self.link_latency[c].mean()?,
                ms_per_byte: self.link_rate[c].mean()?,
                samples: 0.0,
            })
        })
    }

    /// What was measured of every worker that has any measurement, in one pass.
    pub fn speeds(&self) -> HashMap<WorkerId, WorkerSpeed> {
        let mut out: HashMap<WorkerId, WorkerSpeed> = HashMap::new();
        // Σ ln(cluster mean / own mean) and how many, per worker.
        let mut logs: HashMap<WorkerId, (f64, u32)> = HashMap::new();
        for ((w, sig), (m, _)) in &self.runs {
            let s = out.entry(*w).or_default();
            s.signatures += 1;
            s.run_samples += m.weight;
            let cluster = self.signature_means.get(sig).filter(|c| c.count >= 2).and_then(Sum::mean);
            if let (Some(own), Some(c)) = (m.value(), cluster)
                && own > 0.0
                && c > 0.0
            {
                let e = logs.entry(*w).or_default();
                e.0 += (c / own).ln();
                e.1 += 1;
            }
        }
        for (w, (sum, n)) in logs {
            out.entry(w).or_default().relative_speed = Some((sum / n as f64).exp());
        }
        for (w, (r, _)) in &self.flop_rates {
            let s = out.entry(*w).or_default();
            s.ms_per_gflop = r.value().map(|v| v * 1e9);
            s.flop_samples = r.weight;
        }
        let mut fetch: HashMap<WorkerId, (f64, f64)> = HashMap::new();
        for ((_, w), e) in &self.links {
            let (l, r) = e.link.fit();
            let s = out.entry(*w).or_default();
            s.fetch_pairs += 1;
            s.fetch_samples += e.link.weight;
            let f = fetch.entry(*w).or_default();
            f.0 += l;
            f.1 += r;
        }
        for (w, (l, r)) in fetch {
            let s = out.get_mut(&w).expect("counted above");
            let n = s.fetch_pairs as f64;
            s.fetch_latency_ms = Some(l / n);
            s.fetch_bytes_per_ms = (r > 0.0).then(|| n / r);
        }
        out
    }

    /// Drops the least recently updated eighth of whichever table is past its bound, then
    /// rebuilds the derived sums (which also clears their rounding drift).
    fn trim(&mut self) {
        fn oldest<K: Copy + Eq + std::hash::Hash>(
            seqs: impl Iterator<Item = (K, u64)>,
            len: usize,
            bound: usize,
        ) -> Vec<K> {
            if len <= bound {
                return Vec::new();
            }
            let mut v: Vec<(u64, K)> = seqs.map(|(k, s)| (s, k)).collect();
            v.sort_unstable_by_key(|(s, _)| *s);
            v.into_iter().take(len - bound * 7 / 8).map(|(_, k)| k).collect()
        }
        for k in oldest(self.runs.iter().map(|(k, (_, s))| (*k, *s)), self.runs.len(), MAX_RUNS) {
            self.runs.remove(&k);
        }
        for k in oldest(self.run_rates.iter().map(|(k, (_, s))| (*k, *s)), self.run_rates.len(), MAX_RUNS) {
            self.run_rates.remove(&k);
        }
        for k in oldest(self.kind_rates.iter().map(|(k, (_, s))| (*k, *s)), self.kind_rates.len(), MAX_RUNS) {
            self.kind_rates.remove(&k);
        }
        for k in oldest(self.flop_rates.iter().map(|(k, (_, s))| (*k, *s)), self.flop_rates.len(), MAX_FLOP_RATES) {
            self.flop_rates.remove(&k);
        }
        for k in oldest(self.links.iter().map(|(k, e)| (*k, e.seq)), self.links.len(), MAX_LINKS) {
            self.links.remove(&k);
        }
        self.rebuild();
    }

    fn rebuild(&mut self) {
        self.signature_means.clear();
        for ((_, sig), (m, _)) in &self.runs {
            if let Some(v) = m.value() {
                self.signature_means.entry(*sig).or_default().add(v);
            }
        }
        self.flop_mean = Sum::default();
        for (r, _) in self.flop_rates.values() {
            if let Some(v) = r.value() {
                self.flop_mean.add(v);
            }
        }
        self.link_latency = Default::default();
        self.link_rate = Default::default();
        for e in self.links.values() {
            let (l, r) = e.link.fit();
            for &c in classes(e.same_rack) {
                self.link_latency[c].add(l);
                self.link_rate[c].add(r);
            }
        }
    }
}

/// [`Estimates`] as stored: the measured tables as lists (JSON maps need string keys), without
/// the derived sums, with a format version.
#[derive(Serialize, Deserialize)]
struct Stored {
    format: u32,
    revision: u64,
    /// (worker, signature, mean, last update)
    runs: Vec<(WorkerId, u64, Mean, u64)>,
    flop_rates: Vec<(WorkerId, Ratio, u64)>,
    /// (worker, signature, ms per unit of work, last update); absent in stores written before it.
    #[serde(default)]
    run_rates: Vec<(WorkerId, u64, Ratio, u64)>,
    /// (worker, kind, ms per unit of work, last update); absent in stores written before it.
    #[serde(default)]
    kind_rates: Vec<(WorkerId, u64, Ratio, u64)>,
    /// (holder, worker, same rack, sums, last update)
    links: Vec<(WorkerId, WorkerId, Option<bool>, Link, u64)>,
}

impl From<Estimates> for Stored {
    fn from(e: Estimates) -> Stored {
        Stored {
            format: FORMAT,
            revision: e.revision,
            runs: e.runs.into_iter().map(|((w, sig), (m, seq))| (w, sig, m, seq)).collect(),
            flop_rates: e.flop_rates.into_iter().map(|(w, (r, seq))| (w, r, seq)).collect(),
            run_rates: e.run_rates.into_iter().map(|((w, sig), (r, seq))| (w, sig, r, seq)).collect(),
            kind_rates: e.kind_rates.into_iter().map(|((w, k), (r, seq))| (w, k, r, seq)).collect(),
            links: e.links.into_iter().map(|((h, w), l)| (h, w, l.same_rack, l.link, l.seq)).collect(),
        }
    }
}

impl TryFrom<Stored> for Estimates {
    type Error = Error;

    /// Entries that are not finite and non-negative (a damaged store) are dropped; the bounds
    /// are applied again.
    fn try_from(s: Stored) -> Result<Estimates, Error> {
        if s.format != FORMAT {
            return Err(Error::EstimatesFormat { found: s.format, expected: FORMAT });
        }
        let mut e = Estimates { revision: s.revision, ..Estimates::default() };
        e.runs =
            s.runs.into_iter().filter(|(.., m, _)| m.valid()).map(|(w, sig, m, seq)| ((w, sig), (m, seq))).collect();
        e.flop_rates =
            s.flop_rates.into_iter().filter(|(_, r, _)| r.valid()).map(|(w, r, seq)| (w, (r, seq))).collect();
        e.run_rates = s
            .run_rates
            .into_iter()
            .filter(|(.., r, _)| r.valid())
            .map(|(w, sig, r, seq)| ((w, sig), (r, seq)))
            .collect();
        e.kind_rates =
            s.kind_rates.into_iter().filter(|(.., r, _)| r.valid()).map(|(w, k, r, seq)| ((w, k), (r, seq))).collect();
        e.links = s
            .links
            .into_iter()
            .filter(|(h, w, _, l, _)| h != w && l.valid())
            .map(|(h, w, same_rack, link, seq)| ((h, w), LinkEntry { link, same_rack, seq }))
            .collect();
        e.revision = e.revision.max(
            e.runs
                .values()
                .map(|r| r.1)
                .chain(e.flop_rates.values().map(|r| r.1))
                .chain(e.run_rates.values().map(|r| r.1))
                .chain(e.kind_rates.values().map(|r| r.1))
                .chain(e.links.values().map(|l| l.seq))
                .max()
                .unwrap_or(0),
        );
        e.trim();
        Ok(e)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn w(n: u8) -> WorkerId {
        let mut b = [0u8; 16];
        b[15] = n;
        WorkerId::from_bytes(b)
    }

    fn close(a: f64, b: f64) -> bool {
        (a - b).abs() <= 1e-9 * b.abs().max(1.0)
    }

    /// A worker's rate is per unit of work (flops per core, or per GPU), so what its tasks of one
    /// shape measured carries to tasks of another: a 16-core task's speed is not a core's.
    #[test]
    fn a_workers_rate_is_per_core_or_gpu_so_it_carries_across_task_shapes() {
        let r = |cpu, gpu| plexus_proto::Resources { cpu, memory: 0, gpu };
        let mut e = Estimates::new();
        // Worker 1 ran 16e9 flops on 16 cores in 1000 ms; worker 2 2e9 flops on 1 core in 2000 ms.
        e.observe_run(w(1), 1, work(Some(16e9), &r(16.0, 0)), 1000.0);
        e.observe_run(w(2), 2, work(Some(2e9), &r(1.0, 0)), 2000.0);
        // A new 1-core task of 1e9 flops: 1000 ms on either (per flop alone, worker 1 read as 16
        // times faster: 62.5 ms).
        for n in [1, 2] {
            let est = e.compute(w(n), 3, work(Some(1e9), &r(1.0, 0))).unwrap();
            assert!(close(est.ms, 1000.0) && !est.own, "worker {n}: {est:?}");
        }
        // On 4 cores, a quarter of that.
        assert!(close(e.compute(w(1), 4, work(Some(1e9), &r(4.0, 0))).unwrap().ms, 250.0));
        // A GPU task's flops are spread over its GPUs, not over the node's cores.
        assert_eq!(work(Some(8e12), &r(4.0, 2)), Some(4e12));
        // Part of a core counts as one; no hint, or a hostile one, is no work.
        assert_eq!(work(Some(1e9), &r(0.25, 0)), Some(1e9));
        assert_eq!(work(Some(1e9), &r(f64::INFINITY, 0)), Some(1e9));
        assert_eq!(work(None, &r(1.0, 0)), None);
        assert_eq!(work(Some(f64::NAN), &r(1.0, 0)), None);
        assert_eq!(work(Some(-1.0), &r(1.0, 0)), None);
    }

    /// A worker's rate per unit of work is kept per kind of task too: a worker twice as fast at
    /// one kind as at another estimates a signature of each kind it has not run by its kind.
    #[test]
    fn a_worker_fast_at_one_kind_and_slow_at_another_is_estimated_per_kind() {
        let (solve, scan) = (100u64, 200u64);
        let mut e = Estimates::new();
        // Worker 1: the solver (signature 1) 1e9 flops a core in 500 ms; a scan (signature 2) in
        // 2000 ms.
        e.observe_run_of(w(1), 1, Some(solve), Some(1e9), 500.0);
        e.observe_run_of(w(1), 2, Some(scan), Some(1e9), 2000.0);
        // New signatures of each kind (other requests): estimated at their kind's rate.
        let at = |e: &Estimates, sig, kind| e.compute_of(w(1), sig, kind, Some(2e9)).unwrap();
        assert!(close(at(&e, 3, Some(solve)).ms, 1000.0), "{:?}", at(&e, 3, Some(solve)));
        assert!(close(at(&e, 4, Some(scan)).ms, 4000.0));
        assert!(!at(&e, 3, Some(solve)).own && at(&e, 3, Some(solve)).of_kind);
        assert!(at(&e, 1, Some(solve)).own && at(&e, 1, Some(solve)).of_kind);
        // A kind never run there, or no kind named: the worker's rate over every task (the mean
        // of 500 and 2000 ms per 1e9, weighted by recency: (0.9·500 + 2000) / 1.9 per 1e9).
        let all = 2e9 * (0.9 * 500.0 + 2000.0) / (1.9 * 1e9);
        assert!(close(at(&e, 5, Some(7)).ms, all) && close(at(&e, 5, None).ms, all));
        assert!(!at(&e, 5, Some(7)).of_kind, "a kind never run there: blind to it");
        // Kept across a store round trip; a store written before kinds still loads.
        let back: Estimates = serde_json::from_slice(&serde_json::to_vec(&e).unwrap()).unwrap();
        assert!(close(at(&back, 3, Some(solve)).ms, 1000.0));
        let mut old: serde_json::Value = serde_json::to_value(&e).unwrap();
        old.as_object_mut().unwrap().remove("kind_rates");
        let back: Estimates = serde_json::from_value(old).unwrap();
        assert!(close(at(&back, 3, Some(solve)).ms, all));
    }

    #[test]
    fn a_kind_of_task_with_flops_hints_is_estimated_by_its_size() {
        let mut e = Estimates::new();
        // Two runs of kind 7 on worker 1: 1 GFLOP in 100 ms, 3 GFLOP in 300 ms: 1e-7 ms per flop.
        e.observe_run(w(1), 7, Some(1e9), 100.0);
        e.observe_run(w(1), 7, Some(3e9), 300.0);
        let est = e.compute(w(1), 7, Some(2e9)).unwrap();
        assert!(close(est.ms, 200.0), "{est:?}");
        // Without a hint: the kind's mean, recency-weighted ((0.9·100 + 300) / 1.9).
        assert!(close(e.compute(w(1), 7, None).unwrap().ms, 390.0 / 1.9));
        // Kept across a store round trip.
        let back: Estimates = serde_json::from_slice(&serde_json::to_vec(&e).unwrap()).unwrap();
        assert!(close(back.compute(w(1), 7, Some(2e9)).unwrap().ms, 200.0));
        // A store written before run rates existed still loads (the kind's mean then).
        let mut old: serde_json::Value = serde_json::to_value(&e).unwrap();
        old.as_object_mut().unwrap().remove("run_rates");
        let back: Estimates = serde_json::from_value(old).unwrap();
        assert!(close(back.compute(w(1), 7, Some(2e9)).unwrap().ms, 390.0 / 1.9));
    }

    #[test]
    fn run_times_are_recency_weighted_means_with_their_sample_count() {
        let mut e = Estimates::new();
        e.observe_run(w(1), 7, None, 100.0);
        assert_eq!(e.compute(w(1), 7, None), Some(Estimate { ms: 100.0, samples: 1.0, own: true, of_kind: true }));
        e.observe_run(w(1), 7, None, 200.0);
        // (0.9·100 + 200) / (0.9 + 1) = 290 / 1.9
        let c = e.compute(w(1), 7, None).unwrap();
        assert!(close(c.ms, 290.0 / 1.9) && close(c.samples, 1.9), "{c:?}");
        e.observe_run(w(1), 7, None, 50.0);
        // (0.81·100 + 0.9·200 + 50) / (0.81 + 0.9 + 1) = 311 / 2.71
        let c = e.compute(w(1), 7, None).unwrap();
        assert!(close(c.ms, 311.0 / 2.71) && close(c.samples, 2.71), "{c:?}");
        // The sample count saturates at 1 / (1 − 0.9) = 10.
        for _ in 0..400 {
            e.observe_run(w(1), 7, None, 80.0);
        }
        let c = e.compute(w(1), 7, None).unwrap();
        assert!(close(c.ms, 80.0) && c.samples < 10.0 && c.samples > 9.999, "{c:?}");
    }

    #[test]
    fn compute_falls_back_to_flops_then_the_cluster() {
        let mut e = Estimates::new();
        assert_eq!(e.compute(w(1), 7, Some(1e9)), None, "nothing measured: no estimate");
        // Worker 1 ran signature 7 (2e9 flops) in 400 ms, then 600 ms: ms per flop =
        // (0.9·400 + 600) / (0.9·2e9 + 2e9) = 960 / 3.8e9.
        e.observe_run(w(1), 7, Some(2e9), 400.0);
        e.observe_run(w(1), 7, Some(2e9), 600.0);
        let per_flop = 960.0 / 3.8e9;
        // Another signature with a flops hint on worker 1: flops × its rate, its samples.
        let c = e.compute(w(1), 8, Some(1e9)).unwrap();
        assert!(close(c.ms, 1e9 * per_flop) && close(c.samples, 1.9), "{c:?}");
        // Worker 2 never ran anything: signature 7 is the mean of the workers that ran it.
        let c = e.compute(w(2), 7, None).unwrap();
        assert!(close(c.ms, 960.0 / 1.9) && c.samples == 0.0, "{c:?}");
        e.observe_run(w(3), 7, None, 100.0);
        let c = e.compute(w(2), 7, None).unwrap();
        assert!(close(c.ms, (960.0 / 1.9 + 100.0) / 2.0), "the mean of the workers' means: {c:?}");
        // An unknown signature with flops: the cluster's mean ms per flop (worker 1's alone).
        let c = e.compute(w(2), 9, Some(3e9)).unwrap();
        assert!(close(c.ms, 3e9 * per_flop) && c.samples == 0.0, "{c:?}");
        // And without flops: nothing.
        assert_eq!(e.compute(w(2), 9, None), None);
    }

    #[test]
    fn a_link_separates_latency_from_throughput_when_sizes_differ() {
        let mut e = Estimates::new();
        // One sample cannot separate them: all throughput, 30 ms / 1000 B.
        e.observe_fetch(w(1), w(2), None, 2, 1_000, 30.0);
        let l = e.link(w(1), w(2), None).unwrap();
        assert_eq!((l.latency_ms, l.samples), (0.0, 1.0));
        assert!(close(l.ms_per_byte, 0.03), "{l:?}");
        // 1 object of 1000 B in 12 ms, 1 of 3000 B in 32 ms: 2 ms + 0.01 ms/B fits both
        // exactly, whatever the weights.
        let mut e = Estimates::new();
        e.observe_fetch(w(1), w(2), None, 1, 1_000, 12.0);
        e.observe_fetch(w(1), w(2), None, 1, 3_000, 32.0);
        let l = e.link(w(1), w(2), None).unwrap();
        assert!(close(l.latency_ms, 2.0) && close(l.ms_per_byte, 0.01) && close(l.samples, 1.9), "{l:?}");
        assert!(close(l.fetch_ms(5_000), 52.0));
        // Three objects of 1000 B in 36 ms: 3·2 + 3000·0.01 = 36, still exact.
        e.observe_fetch(w(1), w(2), None, 3, 3_000, 36.0);
        let l = e.link(w(1), w(2), None).unwrap();
        assert!(close(l.latency_ms, 2.0) && close(l.ms_per_byte, 0.01), "{l:?}");
    }

    #[test]
    fn a_fit_with_negative_latency_is_cut_to_throughput_only() {
        // 1 object of 1000 B in 5 ms, 1 of 2000 B in 20 ms: the free fit says L = −10, R = 0.015,
        // so the fit lies on the edge L = 0: R = Σλ^k·b·y / Σλ^k·b² = (0.9·5000 + 40000) /
        // (0.9·1e6 + 4e6).
        let mut e = Estimates::new();
        e.observe_fetch(w(1), w(2), None, 1, 1_000, 5.0);
        e.observe_fetch(w(1), w(2), None, 1, 2_000, 20.0);
        let l = e.link(w(1), w(2), None).unwrap();
        assert_eq!(l.latency_ms, 0.0);
        assert!(close(l.ms_per_byte, 44_500.0 / 4.9e6), "{l:?}");
        // Empty objects teach latency only.
        let mut e = Estimates::new();
        e.observe_fetch(w(1), w(2), None, 4, 0, 8.0);
        let l = e.link(w(1), w(2), None).unwrap();
        assert_eq!((l.latency_ms, l.ms_per_byte), (2.0, 0.0));
    }

    #[test]
    fn unmeasured_pairs_fall_back_to_their_rack_class_then_the_cluster() {
        let mut e = Estimates::new();
        assert_eq!(e.link(w(1), w(2), Some(true)), None, "nothing measured: no estimate");
        // Same rack: 1 → 2 at 0.01 ms/B, 3 → 4 at 0.03 ms/B (one sample each: throughput only).
        e.observe_fetch(w(1), w(2), Some(true), 1, 1_000, 10.0);
        e.observe_fetch(w(3), w(4), Some(true), 1, 1_000, 30.0);
        // Other racks: 1 → 5 at 0.1 ms/B.
        e.observe_fetch(w(1), w(5), Some(false), 1, 1_000, 100.0);
        let same = e.link(w(2), w(3), Some(true)).unwrap();
        assert!(close(same.ms_per_byte, 0.02) && same.samples == 0.0, "the mean of the same-rack pairs: {same:?}");
        let other = e.link(w(2), w(5), Some(false)).unwrap();
        assert!(close(other.ms_per_byte, 0.1), "{other:?}");
        // Unlabelled workers: the cluster's mean, (0.01 + 0.03 + 0.1) / 3.
        let any = e.link(w(6), w(7), None).unwrap();
        assert!(close(any.ms_per_byte, 0.14 / 3.0), "{any:?}");
        // A relation with no measured pair of its own: the cluster's mean too.
        let mut e = Estimates::new();
        e.observe_fetch(w(1), w(2), Some(true), 1, 1_000, 10.0);
        assert!(close(e.link(w(1), w(5), Some(false)).unwrap().ms_per_byte, 0.01));
        // A measured pair is its own, whatever its class says; a re-measured pair moves its class
        // mean (old fit out, new fit in).
        e.observe_fetch(w(3), w(4), Some(true), 1, 1_000, 30.0);
        e.observe_fetch(w(3), w(4), Some(true), 1, 1_000, 30.0);
        assert!(close(e.link(w(8), w(9), Some(true)).unwrap().ms_per_byte, 0.02));
        assert!(close(e.link(w(1), w(2), Some(true)).unwrap().ms_per_byte, 0.01));
        // Fetching from oneself costs nothing.
        assert_eq!(e.link(w(1), w(1), None).unwrap().fetch_ms(1 << 30), 0.0);
    }

    #[test]
    fn memory_is_bounded_and_the_least_recent_go_first() {
        let mut e = Estimates::new();
        for sig in 0..(MAX_RUNS as u64 + 10) {
            e.observe_run(w(1), sig, None, sig as f64);
        }
        assert!(e.runs.len() <= MAX_RUNS);
        assert!(e.compute(w(1), 0, None).is_none_or(|c| c.samples == 0.0), "the oldest was dropped");
        assert_eq!(e.compute(w(1), MAX_RUNS as u64 + 9, None).unwrap().samples, 1.0, "the newest kept");
        for n in 0..(MAX_LINKS as u32 + 10) {
            let mut b = [0u8; 16];
            b[..4].copy_from_slice(&n.to_be_bytes());
            e.observe_fetch(WorkerId::from_bytes(b), w(1), None, 1, 1_000, 10.0);
        }
        assert!(e.links.len() <= MAX_LINKS);
        // The derived means match the tables after the trim.
        assert_eq!(e.link_rate[ALL].count as usize, e.links.len());
        assert!(close(e.link(w(200), w(201), None).unwrap().ms_per_byte, 0.01));
    }

    #[test]
    fn estimates_survive_serialisation_and_damage_is_dropped() {
        let mut e = Estimates::new();
        e.observe_run(w(1), 7, Some(1e9), 100.0);
        e.observe_run(w(2), 7, None, 300.0);
        e.observe_fetch(w(1), w(2), Some(true), 1, 1_000, 12.0);
        e.observe_fetch(w(1), w(2), Some(true), 1, 3_000, 32.0);
        let json = serde_json::to_string(&e).unwrap();
        let back: Estimates = serde_json::from_str(&json).unwrap();
        assert_eq!(back.revision(), e.revision());
        assert_eq!(back.compute(w(1), 7, None), e.compute(w(1), 7, None));
        assert_eq!(back.compute(w(3), 7, None), e.compute(w(3), 7, None), "derived means rebuilt");
        assert_eq!(back.compute(w(3), 8, Some(1e9)), e.compute(w(3), 8, Some(1e9)));
        assert_eq!(back.link(w(1), w(2), None), e.link(w(1), w(2), None));
        assert_eq!(back.link(w(5), w(6), Some(true)), e.link(w(5), w(6), Some(true)));
        // Another format is refused (the coordinator then starts fresh)...
        let mut v: serde_json::Value = serde_json::from_str(&json).unwrap();
        v["format"] = 99.into();
        let err = serde_json::from_value::<Estimates>(v.clone()).unwrap_err();
        assert!(err.to_string().contains("format 99"), "{err}");
        // ...and a damaged entry is dropped, not believed.
        v["format"] = FORMAT.into();
        v["runs"][0][2]["sum"] = (-5.0).into();
        let back: Estimates = serde_json::from_value(v).unwrap();
        assert_eq!(back.runs.len(), 1);
        assert!(serde_json::from_str::<Estimates>("{oops").is_err());
    }

    #[test]
    fn a_worker_slower_than_its_estimates_says_so_at_once() {
        let mut e = Estimates::new();
        e.observe_run(w(1), 7, None, 100.0);
        assert_eq!(e.slowdown(w(1)), None, "nothing to compare the first run with");
        for _ in 0..5 {
            e.observe_run(w(1), 7, None, 100.0);
        }
        assert!((e.slowdown(w(1)).unwrap() - 1.0).abs() < 1e-9);
        // Three times slower: the slowdown says so within two runs, while the mean lags.
        e.observe_run(w(1), 7, None, 300.0);
        e.observe_run(w(1), 7, None, 300.0);
        let slow = e.slowdown(w(1)).unwrap();
        assert!(slow > 1.9, "{slow}");
        assert!(e.compute(w(1), 7, None).unwrap().ms < 180.0);
        // Not stored.
        let back: Estimates = serde_json::from_str(&serde_json::to_string(&e).unwrap()).unwrap();
        assert_eq!(back.slowdown(w(1)), None);
    }

    #[test]
    fn speeds_summarise_each_worker() {
        let mut e = Estimates::new();
        // Worker 1 runs signature 7 in 100 ms, worker 2 in 300 ms: the mean is 200, so worker 1
        // is 2× typical and worker 2 is 2/3.
        e.observe_run(w(1), 7, Some(1e9), 100.0);
        e.observe_run(w(2), 7, None, 300.0);
        e.observe_fetch(w(1), w(2), None, 1, 1_000, 12.0);
        e.observe_fetch(w(1), w(2), None, 1, 3_000, 32.0);
        e.observe_fetch(w(3), w(2), None, 1, 1_000, 30.0);
        let s = e.speeds();
        assert!(close(s[&w(1)].relative_speed.unwrap(), 2.0));
        assert!(close(s[&w(2)].relative_speed.unwrap(), 2.0 / 3.0));
        assert!(close(s[&w(1)].ms_per_gflop.unwrap(), 100.0));
        assert_eq!((s[&w(1)].signatures, s[&w(2)].fetch_pairs), (1, 2));
        // Into worker 2: latency (2 + 0) / 2, ms per byte (0.01 + 0.03) / 2 → 50 bytes per ms.
        assert!(
            close(s[&w(2)].fetch_latency_ms.unwrap(), 1.0) && close(s[&w(2)].fetch_bytes_per_ms.unwrap(), 50.0),
            "{:?}",
            s[&w(2)]
        );
        assert!(close(s[&w(2)].fetch_samples, 2.9));
        assert!(!s.contains_key(&w(3)), "a holder that only sent has nothing measured of its own");
    }
}
