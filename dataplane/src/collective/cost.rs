//! The cost model that picks each collective's algorithm (issue 30): an α–β model per peer,
//! fed with what the data plane measured, and the predicted time of every candidate. Pure.
//!
//! A [`LinkModel`] holds what one rank measured of the links to its peers:
//! * `alpha` — seconds one message costs beyond its bytes: latency, the acknowledgement a step
//!   waits for, the per-message work of both ends;
//! * `rate` — bytes per second one message moves when it is the only one this rank sends (and
//!   receives, full duplex), striped over the rails: one step of a schedule;
//! * `direct_rate` — bytes per second of the busiest rank when every message of an exchange is
//!   sent at once (the aggregate the transport reaches with many flows);
//! * `reduce_rate` — bytes per second the reduction kernel reduces.
//!
//! Before anything was measured each value is a prior ([`LinkModel::PRIOR`]), and the reason a
//! choice gives says so. Every member of a call sends its model to every other
//! (`meter::agree`), and all of them decide from the same combination ([`LinkModel::combine`]:
//! the slowest of each), so all members choose the same algorithm without a coordinator.
//!
//! **allreduce** of L bytes over N ranks, in s slices per message (the pipeline depth):
//! * transfer `T = 2·(N−1)/N · L / rate` (every rank sends and receives that much, halving or
//!   ring alike) and reduction `R = (N−1)/N · L / reduce_rate`;
//! * halving: `2·⌈log₂N⌉·s` messages, plus for N not a power of two a fold of the extra ranks
//!   into their partners and back (`2·(s·α + L/rate)` more);
//! * ring: `2·(N−1)·s` messages;
//! * each costs `messages·α + T + R/s`: with s slices, reduction overlaps transfer except for
//!   one slice of each round (the seed's pipeline), and each slice is a message more. The best
//!   s is near √(R / (rounds·α)); the candidates are s = 1, 2, 4, … 64.
//!
//! Where members share hosts ([`Topology`]: H hosts of k members each, the ranks host by host,
//! told apart by their rail addresses) each rank keeps two models ([`Links`]): toward the
//! members on other hosts (`remote`) and toward those on its own (`local`, loopback), and the
//! k members of a host share its rails (`remote.rate` is what one member reaches alone):
//! * ring: as above at the slower of the two (only the last member of a host sends across);
//! * halving: its ⌈log₂H⌉ widest rounds go across hosts with all k members sending at once:
//!   `2·(H−1)/H·L·k / remote.rate`, the rest `2·(k−1)/N·L / local.rate`;
//! * hierarchical: a gather into the leader `G = (k−1)·(s·α_l + L/local.rate + L/reduce_rate)`,
//!   halving among the H leaders at the remote model (the ring where H is not a power of two) `I`, the result back `B = (k−1)·(s·α_l +
//!   L/local.rate)`; the three overlap slice by slice: `max + (sum − max)/s`.
//!
//! With one host (loopback) only `local` is measured and with one member per host only
//! `remote`; both reduce to the flat formulas, and hierarchical is a candidate only where
//! k > 1.
//!
//! **all-to-all** of a table: a stepped schedule (css, pairwise, shift) costs
//! `Σ_steps (α + largest message of the step / rate)`; sending everything at once (`direct`)
//! costs `α + B / direct_rate`, B the most bytes one rank sends or receives (the bound).
//! Contention-free steps win where one message at a time reaches the link's rate and the table
//! is skewed (css puts similar sizes together, so its sum of maxima is close to the bound);
//! direct wins where per-message costs dominate (small messages, many steps) or where one
//! message alone does not fill the link.

use std::fmt;
use std::net::{IpAddr, SocketAddr};

use super::plan::inner_algorithm;
use super::schedule::{ComTable, Schedule, ScheduleKind};
use crate::elem::Algorithm;

/// The pipeline depths the allreduce choice considers (powers of two: every send stays a
/// zero-copy slice of the buffer).
pub const SLICE_CHOICES: [usize; 7] = [1, 2, 4, 8, 16, 32, 64];

/// What one rank measured of its links (see the module documentation). Rates in bytes/s.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct LinkModel {
    pub alpha: f64,
    pub rate: f64,
    pub direct_rate: f64,
    pub reduce_rate: f64,
    /// Message samples behind `alpha` and `rate`; 0 = the prior.
    pub samples: u32,
}

impl LinkModel {
    /// What a rank assumes before it has measured anything: 100 µs per message, 1 GB/s per
    /// message and 0.9 of that with every message at once (Gloo's all-to-all reached 0.90 of
    /// its link on the rig, `docs/seeds/004-contention-free-all-to-all.md`), 2 GB/s reduction.
    pub const PRIOR: LinkModel =
        LinkModel { alpha: 100e-6, rate: 1e9, direct_rate: 0.9e9, reduce_rate: 2e9, samples: 0 };

    /// The model every member of a call decides from: the slowest of each value (the step
    /// that waits for the slowest member), the fewest samples.
    pub fn combine(models: &[LinkModel]) -> LinkModel {
        let mut m = models.first().copied().unwrap_or(LinkModel::PRIOR);
        for x in models.iter().skip(1) {
            m.alpha = m.alpha.max(x.alpha);
            m.rate = m.rate.min(x.rate);
            m.direct_rate = m.direct_rate.min(x.direct_rate);
            m.reduce_rate = m.reduce_rate.min(x.reduce_rate);
            m.samples = m.samples.min(x.samples);
        }
        m
    }

    /// Whether every value is a finite, positive number (what `agree` accepts from a peer).
    pub fn is_sane(&self) -> bool {
        [self.alpha, self.rate, self.direct_rate, self.reduce_rate].iter().all(|v| v.is_finite() && *v > 0.0)
    }

    pub const WIRE_LEN: usize = 36;

    pub fn to_bytes(&self) -> [u8; Self::WIRE_LEN] {
        let mut b = [0u8; Self::WIRE_LEN];
        for (i, v) in [self.alpha, self.rate, self.direct_rate, self.reduce_rate].iter().enumerate() {
            b[i * 8..i * 8 + 8].copy_from_slice(&v.to_le_bytes());
        }
        b[32..].copy_from_slice(&self.samples.to_le_bytes());
        b
    }

    pub fn from_bytes(b: &[u8]) -> Option<LinkModel> {
        if b.len() != Self::WIRE_LEN {
            return None;
        }
        let f = |i: usize| f64::from_le_bytes(b[i * 8..i * 8 + 8].try_into().expect("8 bytes"));
        let m = LinkModel {
            alpha: f(0),
            rate: f(1),
            direct_rate: f(2),
            reduce_rate: f(3),
            samples: u32::from_le_bytes(b[32..].try_into().expect("4 bytes")),
        };
        m.is_sane().then_some(m)
    }
}

impl fmt::Display for LinkModel {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "α {:.0} µs, {:.3} GB/s per message, {:.3} GB/s all at once, reduce {:.2} GB/s{}",
            self.alpha * 1e6,
            self.rate / 1e9,
            self.direct_rate / 1e9,
            self.reduce_rate / 1e9,
            if self.samples == 0 {
                " (prior: nothing measured yet)".to_string()
            } else {
                format!(" ({} samples)", self.samples)
            }
        )
    }
}

/// An allreduce's choice: the algorithm, the pipeline depth, and why.
#[derive(Clone, Debug, PartialEq)]
pub struct AllreduceChoice {
    pub algorithm: Algorithm,
    pub slices: usize,
    /// Every candidate's predicted seconds at its best depth: halving, ring, then hierarchical
    /// where it is a candidate.
    pub predicted: Vec<(Algorithm, usize, f64)>,
    pub reason: String,
    /// The fastest measured was chosen: no candidate is left to try at this size class.
    pub settled: bool,
}

/// How a group's members sit on hosts: `hosts` hosts of `per_host` members each, the ranks
/// numbered host by host. `per_host` 1: every member on a host of its own (or a group the
/// hierarchical algorithm cannot use: hosts of different sizes, or members of one host not
/// numbered together).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Topology {
    pub hosts: usize,
    pub per_host: usize,
}

impl Topology {
    /// Every one of `n` members on a host of its own.
    pub fn flat(n: usize) -> Topology {
        Topology { hosts: n, per_host: 1 }
    }

    pub fn ranks(&self) -> usize {
        self.hosts * self.per_host
    }

    /// The topology of a group from each rank's rail addresses: members with the same set of
    /// addresses (ports aside) share a host. Flat unless every host has the same number of
    /// members and each host's members are numbered together.
    pub fn of(ranks: &[Vec<SocketAddr>]) -> Topology {
        let n = ranks.len();
        if n == 0 {
            return Topology::flat(0);
        }
        let host = |r: usize| {
            let mut ips: Vec<IpAddr> = ranks[r].iter().map(SocketAddr::ip).collect();
            ips.sort_unstable();
            ips.dedup();
            ips
        };
        let keys: Vec<Vec<IpAddr>> = (0..n).map(host).collect();
        let k = keys.iter().take_while(|x| **x == keys[0]).count();
        if !n.is_multiple_of(k) {
            return Topology::flat(n);
        }
        let runs: Vec<&[Vec<IpAddr>]> = keys.chunks(k).collect();
        let uniform = runs.iter().all(|c| c.iter().all(|x| *x == c[0]));
        let distinct = runs.iter().enumerate().all(|(i, c)| runs[..i].iter().all(|d| d[0] != c[0]));
        if uniform && distinct { Topology { hosts: n / k, per_host: k } } else { Topology::flat(n) }
    }
}

impl fmt::Display for Topology {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.per_host == 1 {
            write!(f, "{} members, one per host", self.hosts)
        } else if self.hosts == 1 {
            write!(f, "{} members on one host", self.per_host)
        } else {
            write!(f, "{} members, {} hosts × {}", self.ranks(), self.hosts, self.per_host)
        }
    }
}

/// What a rank measured toward the members on other hosts (`remote`) and toward those on its
/// own host (`local`); a side with no members is never used.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Links {
    pub remote: LinkModel,
    pub local: LinkModel,
}

impl Links {
    /// One model for every link (a flat group, or a caller that does not tell them apart).
    pub fn uniform(m: LinkModel) -> Links {
        Links { remote: m, local: m }
    }

    /// The model of the links a flat algorithm waits for: the slower of the sides `t` has.
    fn flat(&self, t: Topology) -> LinkModel {
        match (t.hosts > 1, t.per_host > 1) {
            (true, true) => LinkModel::combine(&[self.remote, self.local]),
            (false, true) => self.local,
            _ => self.remote,
        }
    }

    /// Every member's [`Links`] combined side by side ([`LinkModel::combine`]).
    pub fn combine(all: &[Links]) -> Links {
        let remote: Vec<LinkModel> = all.iter().map(|l| l.remote).collect();
        let local: Vec<LinkModel> = all.iter().map(|l| l.local).collect();
        Links { remote: LinkModel::combine(&remote), local: LinkModel::combine(&local) }
    }
}

/// Predicted seconds of `algorithm` for `bytes` over `n` ranks (each on its own host) in
/// `slices` slices.
pub fn allreduce_time(algorithm: Algorithm, n: usize, bytes: u64, slices: usize, m: &LinkModel) -> f64 {
    allreduce_time_on(algorithm, Topology::flat(n), bytes, slices, &Links::uniform(*m))
}

/// Predicted seconds of `algorithm` for `bytes` over the members of `t` in `slices` slices (see
/// the module documentation).
pub fn allreduce_time_on(algorithm: Algorithm, t: Topology, bytes: u64, slices: usize, links: &Links) -> f64 {
    let n = t.ranks();
    if n <= 1 {
        return 0.0;
    }
    let m = links.flat(t);
    let (nf, l, s) = (n as f64, bytes as f64, slices as f64);
    let reduce = (nf - 1.0) / nf * l / m.reduce_rate;
    let halving_extra = |n: usize, m: &LinkModel| {
        let pw = 1usize << (usize::BITS - 1 - n.leading_zeros());
        let rounds = f64::from(pw.trailing_zeros());
        let fold = if pw == n { 0.0 } else { 2.0 * (s * m.alpha + l / m.rate) };
        (2.0 * rounds * s, fold)
    };
    let shared = t.hosts > 1 && t.per_host > 1;
    match algorithm {
        Algorithm::Ring => 2.0 * (nf - 1.0) * s * m.alpha + 2.0 * (nf - 1.0) / nf * l / m.rate + reduce / s,
        Algorithm::Hierarchical if t.per_host > 1 => {
            let (k, lo) = ((t.per_host - 1) as f64, &links.local);
            let gather = k * (s * lo.alpha + l / lo.rate + l / m.reduce_rate);
            let inner = allreduce_time_on(inner_algorithm(t.hosts), Topology::flat(t.hosts), bytes, slices, links);
            let back = k * (s * lo.alpha + l / lo.rate);
            let most = gather.max(inner).max(back);
            most + (gather + inner + back - most) / s
        }
        Algorithm::Halving | Algorithm::Auto | Algorithm::Hierarchical if shared => {
            let (hf, kf) = (t.hosts as f64, t.per_host as f64);
            let (messages, fold) = halving_extra(n, &m);
            let across = 2.0 * (hf - 1.0) / hf * l * kf / links.remote.rate;
            let within = 2.0 * (kf - 1.0) / nf * l / links.local.rate;
            messages * m.alpha + across + within + reduce / s + fold
        }
        Algorithm::Halving | Algorithm::Auto | Algorithm::Hierarchical => {
            let (messages, fold) = halving_extra(n, &m);
            messages * m.alpha + 2.0 * (nf - 1.0) / nf * l / m.rate + reduce / s + fold
        }
    }
}

/// The algorithm and depth with the least predicted time for `bytes` over `n` ranks, each on
/// its own host.
pub fn choose_allreduce(n: usize, bytes: u64, m: &LinkModel) -> AllreduceChoice {
    choose_allreduce_on(Topology::flat(n), bytes, &Links::uniform(*m))
}

/// The algorithm and depth with the least predicted time for `bytes` over the members of `t`:
/// halving and ring, and hierarchical where hosts have several members (ties: that order).
pub fn choose_allreduce_on(t: Topology, bytes: u64, links: &Links) -> AllreduceChoice {
    choose_allreduce_measured(t, bytes, links, &Measured::NONE)
}

/// [`choose_allreduce_on`] where the calls themselves were measured ([`Measured`]): until one
/// candidate is measured at this world and size class the model decides; then each candidate
/// not measured yet whose model prediction is within [`TRY_WITHIN`] of the best one's is tried
/// (the best by the model first); once all of those are measured, the fastest measured one
/// runs, at the depth the model picks for it. The α–β model sees bytes and messages, not what the
/// machine adds: on 2 cores at N = 8, halving's rounds make every rank copy and reduce at the
/// same moments while the links idle, where the ring keeps both busy (0.77 against 0.91 of the
/// rig's bound), and the per-message α the model fits there (tens of ms) makes the ring look 3×
/// slower than it is.
pub fn choose_allreduce_measured(t: Topology, bytes: u64, links: &Links, measured: &Measured) -> AllreduceChoice {
    let mut candidates = vec![Algorithm::Halving, Algorithm::Ring];
    if t.per_host > 1 {
        candidates.push(Algorithm::Hierarchical);
    }
    let predicted: Vec<(Algorithm, usize, f64)> = candidates
        .into_iter()
        .map(|a| {
            let (s, secs) = SLICE_CHOICES
                .iter()
                .map(|&s| (s, allreduce_time_on(a, t, bytes, s, links)))
                .fold((1, f64::INFINITY), |best, c| if c.1 < best.1 { c } else { best });
            (a, s, secs)
        })
        .collect();
    let model: Vec<f64> = predicted.iter().map(|p| p.2).collect();
    let got: Vec<Option<f64>> = predicted.iter().map(|p| measured.of(p.0)).collect();
    let (i, how) = pick(&model, &got);
    let best = predicted[i];
    let others: Vec<String> = predicted
        .iter()
        .map(|(a, s, t)| match measured.of(*a) {
            Some(m) => format!("{a} ×{s} {} (its calls measured {})", ms(*t), ms(m)),
            None => format!("{a} ×{s} {}", ms(*t)),
        })
        .collect();
    let measured_links = match (t.hosts > 1, t.per_host > 1) {
        (true, true) => format!("measured across hosts {}; within a host {}", links.remote, links.local),
        (false, true) => format!("measured {}", links.local),
        _ => format!("measured {}", links.remote),
    };
    let why = how.why(&best.0.to_string());
    let reason =
        format!("cost model: {} over {t}, predicted {}{why}; {measured_links}", human(bytes), others.join(", "));
    AllreduceChoice { algorithm: best.0, slices: best.1, predicted, reason, settled: how == Pick::Fastest }
}

/// How [`pick`] chose.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Pick {
    /// Nothing measured yet: the model's best.
    Model,
    /// Not measured yet, and within [`TRY_WITHIN`] of the model's best: tried.
    Trying,
    /// The fastest measured.
    Fastest,
}

impl Pick {
    /// The tail of a reason line for `name`, the pick.
    fn why(self, name: &str) -> String {
        match self {
            Pick::Model => String::new(),
            Pick::Trying => format!("; {name} not measured at this size yet, so tried"),
            Pick::Fastest => "; the fastest measured".to_string(),
        }
    }
}

/// Which of the candidates runs, from the model's predicted seconds (`model`) and what their
/// calls measured (`measured`, none where not yet), in the same order: until one is measured the
/// model's best (ties: the first); then each one not measured yet whose prediction is within
/// [`TRY_WITHIN`] of the model's best (the best by the model first); once all of those are
/// measured, the fastest measured (ties: the first). Returns its index and how.
fn pick(model: &[f64], measured: &[Option<f64>]) -> (usize, Pick) {
    let first_min = |it: &mut dyn Iterator<Item = (usize, f64)>| {
        it.fold(None, |b: Option<(usize, f64)>, c| if b.is_some_and(|b| b.1 <= c.1) { b } else { Some(c) })
    };
    let (by_model, best) = first_min(&mut model.iter().copied().enumerate()).expect("at least one candidate");
    if measured.iter().all(Option::is_none) {
        return (by_model, Pick::Model);
    }
    let untried = model.iter().copied().enumerate().filter(|&(i, t)| measured[i].is_none() && t <= TRY_WITHIN * best);
    if let Some((i, _)) = first_min(&mut { untried }) {
        return (i, Pick::Trying);
    }
    let fastest = first_min(&mut measured.iter().enumerate().filter_map(|(i, m)| m.map(|m| (i, m))));
    (fastest.expect("one is measured").0, Pick::Fastest)
}

/// A candidate the model predicts within this factor of the best is measured before the
/// measured ones decide (a call or two of it per world and size class).
pub const TRY_WITHIN: f64 = 4.0;

/// What each algorithm's calls took at one world and size class, seconds (0: not measured), as
/// `meter::LinkMeter` keeps them: an allreduce's `Measured<3>` (halving, ring, hierarchical), an
/// all-to-all's `Measured<4>` (css, pairwise, shift, direct). Every member sends its own in the
/// agreement round; all decide from the same combination ([`Measured::combine`]: the slowest
/// member's figure, and "not measured" where any member has none), so all choose alike.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Measured<const K: usize = 3>(pub [f64; K]);

impl<const K: usize> Default for Measured<K> {
    fn default() -> Self {
        Measured::NONE
    }
}

impl<const K: usize> Measured<K> {
    pub const NONE: Measured<K> = Measured([0.0; K]);
    pub const WIRE_LEN: usize = 8 * K;
    /// The longest call a figure may say (a peer's beyond it is refused).
    pub const MAX_SECS: f64 = 3600.0;

    /// The figure at `i`, if measured.
    pub fn at(&self, i: usize) -> Option<f64> {
        self.0.get(i).copied().filter(|&v| v > 0.0)
    }

    /// Sets the figure at `i` (a figure that is not a positive finite number: not measured).
    pub fn set_at(&mut self, i: usize, secs: f64) {
        self.0[i] = if secs.is_finite() && secs > 0.0 { secs.min(Self::MAX_SECS) } else { 0.0 };
    }

    /// What every member decides from: per algorithm the largest figure, none where any member
    /// has none.
    pub fn combine(all: &[Measured<K>]) -> Measured<K> {
        let mut c = Measured::NONE;
        for (i, v) in c.0.iter_mut().enumerate() {
            *v = if all.iter().any(|x| x.0[i] <= 0.0) { 0.0 } else { all.iter().map(|x| x.0[i]).fold(0.0, f64::max) };
        }
        c
    }

    pub fn to_bytes(&self) -> Vec<u8> {
        self.0.iter().flat_map(|v| v.to_le_bytes()).collect()
    }

    /// `None` unless `8 · K` bytes of K figures, each 0 or a finite number of seconds up to
    /// [`Self::MAX_SECS`].
    pub fn from_bytes(b: &[u8]) -> Option<Measured<K>> {
        if b.len() != Self::WIRE_LEN {
            return None;
        }
        let mut c = Measured::NONE;
        for (i, v) in c.0.iter_mut().enumerate() {
            *v = f64::from_le_bytes(b[i * 8..i * 8 + 8].try_into().expect("8 bytes"));
            if !(0.0..=Self::MAX_SECS).contains(v) {
                return None;
            }
        }
        Some(c)
    }
}

impl Measured<3> {
    pub(crate) fn index(a: Algorithm) -> usize {
        match a {
            Algorithm::Ring => 1,
            Algorithm::Hierarchical => 2,
            Algorithm::Halving | Algorithm::Auto => 0,
        }
    }

    pub fn of(&self, a: Algorithm) -> Option<f64> {
        self.at(Self::index(a))
    }

    pub fn set(&mut self, a: Algorithm, secs: f64) {
        self.set_at(Self::index(a), secs);
    }
}

impl Measured<4> {
    /// The figure's place for an exchange algorithm: css, pairwise, shift, direct.
    pub(crate) fn exchange_index(a: ExchangeAlgorithm) -> usize {
        match a {
            ExchangeAlgorithm::Steps(ScheduleKind::Css) => 0,
            ExchangeAlgorithm::Steps(ScheduleKind::Pairwise) => 1,
            ExchangeAlgorithm::Steps(ScheduleKind::Shift) => 2,
            ExchangeAlgorithm::Direct => 3,
        }
    }

    pub fn of_exchange(&self, a: ExchangeAlgorithm) -> Option<f64> {
        self.at(Self::exchange_index(a))
    }

    pub fn set_exchange(&mut self, a: ExchangeAlgorithm, secs: f64) {
        self.set_at(Self::exchange_index(a), secs);
    }
}

/// How an all-to-all runs: along a stepped schedule, or every message at once.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ExchangeAlgorithm {
    Steps(ScheduleKind),
    Direct,
}

impl ExchangeAlgorithm {
    pub const ALL: [ExchangeAlgorithm; 4] = [
        ExchangeAlgorithm::Steps(ScheduleKind::Css),
        ExchangeAlgorithm::Steps(ScheduleKind::Pairwise),
        ExchangeAlgorithm::Steps(ScheduleKind::Shift),
        ExchangeAlgorithm::Direct,
    ];

    pub fn name(self) -> &'static str {
        match self {
            ExchangeAlgorithm::Steps(k) => k.name(),
            ExchangeAlgorithm::Direct => "direct",
        }
    }
}

impl fmt::Display for ExchangeAlgorithm {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// An all-to-all's choice and why.
#[derive(Clone, Debug, PartialEq)]
pub struct AlltoallChoice {
    pub algorithm: ExchangeAlgorithm,
    /// Every candidate's predicted seconds, in [`ExchangeAlgorithm::ALL`] order.
    pub predicted: Vec<(ExchangeAlgorithm, f64)>,
    pub reason: String,
    /// The fastest measured was chosen: no candidate is left to try at this size class.
    pub settled: bool,
}

/// The most bytes one rank sends or receives (its own part left out): the exchange's bound.
pub fn busiest(table: &ComTable) -> u64 {
    let n = table.n();
    (0..n)
        .map(|r| {
            let sent: u64 = (0..n).filter(|&j| j != r).map(|j| table.get(r, j)).sum();
            let got: u64 = (0..n).filter(|&i| i != r).map(|i| table.get(i, r)).sum();
            sent.max(got)
        })
        .max()
        .unwrap_or(0)
}

/// Predicted seconds of a stepped `schedule` of `table`.
pub fn steps_time(schedule: &Schedule, table: &ComTable, m: &LinkModel) -> f64 {
    schedule.len() as f64 * m.alpha + schedule.cost(table) as f64 / m.rate
}

/// Predicted seconds of sending every message of `table` at once.
pub fn direct_time(table: &ComTable, m: &LinkModel) -> f64 {
    let b = busiest(table);
    if b == 0 { 0.0 } else { m.alpha + b as f64 / m.direct_rate }
}

/// The exchange algorithm with the least predicted time for `table` (ties: the earlier of
/// [`ExchangeAlgorithm::ALL`], so css before direct). Returns the stepped schedule it built
/// when a stepped one wins, so the caller need not build it again.
pub fn choose_alltoall(table: &ComTable, m: &LinkModel) -> (AlltoallChoice, Option<Schedule>) {
    choose_alltoall_measured(table, m, &Measured::NONE)
}

/// [`choose_alltoall`] where the calls themselves were measured at this world and size class
/// (`measured`, agreed by every member), picked as [`pick`] does: the model until one is
/// measured, then the others it puts within [`TRY_WITHIN`], then the fastest measured. The model
/// fits α from message times that include waiting behind other traffic (on the rail rig 5–25 ms
/// a message), which makes every stepped schedule look slower than sending everything at once
/// while on the rig css's steps were the faster by up to 1.3×.
pub fn choose_alltoall_measured(
    table: &ComTable,
    m: &LinkModel,
    measured: &Measured<4>,
) -> (AlltoallChoice, Option<Schedule>) {
    let mut predicted = Vec::with_capacity(4);
    let mut schedules = Vec::with_capacity(4);
    for a in ExchangeAlgorithm::ALL {
        let (t, s) = match a {
            ExchangeAlgorithm::Steps(k) => {
                let s = Schedule::build(k, table);
                (steps_time(&s, table, m), Some(s))
            }
            ExchangeAlgorithm::Direct => (direct_time(table, m), None),
        };
        predicted.push((a, t));
        schedules.push(s);
    }
    let model: Vec<f64> = predicted.iter().map(|p| p.1).collect();
    let got: Vec<Option<f64>> = predicted.iter().map(|p| measured.of_exchange(p.0)).collect();
    let (i, how) = pick(&model, &got);
    let algorithm = predicted[i].0;
    let list: Vec<String> = predicted
        .iter()
        .map(|(a, t)| match measured.of_exchange(*a) {
            Some(c) => format!("{a} {} (its calls measured {})", ms(*t), ms(c)),
            None => format!("{a} {}", ms(*t)),
        })
        .collect();
    let reason = format!(
        "cost model: {} members, busiest member moves {}, predicted {}{}; measured {m}",
        table.n(),
        human(busiest(table)),
        list.join(", "),
        how.why(&algorithm.to_string())
    );
    (AlltoallChoice { algorithm, predicted, reason, settled: how == Pick::Fastest }, schedules.swap_remove(i))
}

fn ms(t: f64) -> String {
    format!("{:.3} ms", t * 1e3)
}

fn human(bytes: u64) -> String {
    match bytes {
        b if b >= 1 << 30 => format!("{:.1} GiB", b as f64 / (1u64 << 30) as f64),
        b if b >= 1 << 20 => format!("{:.1} MiB", b as f64 / (1u64 << 20) as f64),
        b if b >= 1 << 10 => format!("{:.1} KiB", b as f64 / 1024.0),
        b => format!("{b} B"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// What the calls measured decides: halving is the model's pick at N = 8; the ring, within
    /// `TRY_WITHIN` of it by the model, is tried once halving is measured; then the faster
    /// measured one runs. A candidate far off by the model is never tried.
    #[test]
    fn measured_calls_decide_the_allreduce_choice() {
        let m = model(500.0, 0.3, 0.27, 10.0);
        let links = Links::uniform(m);
        let flat = Topology::flat(8);
        let plain = choose_allreduce_measured(flat, 64 << 20, &links, &Measured::NONE);
        assert_eq!(plain.algorithm, Algorithm::Halving);
        assert_eq!(plain, choose_allreduce_on(flat, 64 << 20, &links));
        let mut c = Measured::NONE;
        c.set(Algorithm::Halving, 0.52);
        let tried = choose_allreduce_measured(flat, 64 << 20, &links, &c);
        assert_eq!(tried.algorithm, Algorithm::Ring, "{}", tried.reason);
        assert!(tried.reason.contains("ring not measured at this size yet, so tried"), "{}", tried.reason);
        c.set(Algorithm::Ring, 0.42);
        let fastest = choose_allreduce_measured(flat, 64 << 20, &links, &c);
        assert_eq!(fastest.algorithm, Algorithm::Ring, "{}", fastest.reason);
        assert!(
            fastest.reason.contains("the fastest measured") && fastest.reason.contains("measured 520"),
            "{}",
            fastest.reason
        );
        c.set(Algorithm::Ring, 0.60);
        assert_eq!(choose_allreduce_measured(flat, 64 << 20, &links, &c).algorithm, Algorithm::Halving);
        // Tiny messages at N = 64 with a dear α: the ring's 126 messages are far off; not tried.
        let dear = Links::uniform(model(5000.0, 1.0, 0.9, 10.0));
        let mut h = Measured::NONE;
        h.set(Algorithm::Halving, 0.1);
        assert_eq!(choose_allreduce_measured(Topology::flat(64), 4 << 10, &dear, &h).algorithm, Algorithm::Halving);
    }

    #[test]
    fn measured_figures_travel_bounded_and_combine_to_the_slowest() {
        let mut a = Measured::NONE;
        a.set(Algorithm::Ring, 2.0);
        a.set(Algorithm::Halving, 1e9);
        assert_eq!(a.of(Algorithm::Halving), Some(Measured::<3>::MAX_SECS), "kept within range");
        a.set(Algorithm::Hierarchical, f64::NAN);
        assert_eq!(a.of(Algorithm::Hierarchical), None);
        assert_eq!(Measured::from_bytes(&a.to_bytes()), Some(a));
        let mut b = Measured::NONE;
        b.set(Algorithm::Ring, 3.0);
        b.set(Algorithm::Halving, 1.0);
        assert_eq!(Measured::combine(&[a, b]), Measured([Measured::<3>::MAX_SECS, 3.0, 0.0]));
        b.set(Algorithm::Halving, 0.0);
        assert_eq!(Measured::combine(&[a, b]).of(Algorithm::Halving), None, "one member has none");
        // A peer's bytes that are not three figures in range are refused.
        for bad in [f64::NAN, f64::INFINITY, -1.0, 1e5] {
            let mut raw = Measured::<3>::NONE.to_bytes();
            raw[8..16].copy_from_slice(&bad.to_le_bytes());
            assert_eq!(Measured::<3>::from_bytes(&raw), None, "{bad}");
        }
        assert_eq!(Measured::<3>::from_bytes(&[0; 23]), None);
    }

    fn model(alpha_us: f64, rate_gbs: f64, direct_gbs: f64, reduce_gbs: f64) -> LinkModel {
        LinkModel {
            alpha: alpha_us * 1e-6,
            rate: rate_gbs * 1e9,
            direct_rate: direct_gbs * 1e9,
            reduce_rate: reduce_gbs * 1e9,
            samples: 10,
        }
    }

    /// Powers of two: halving sends 2·log₂N messages where the ring sends 2(N−1), the same
    /// bytes, so halving wins; at N = 6 halving's fold costs 2·L more on the wire and the ring
    /// wins for large buffers, while for tiny ones the ring's 10 messages cost more than the fold.
    #[test]
    fn allreduce_picks_halving_for_powers_of_two_and_ring_for_large_odd_groups() {
        let m = model(50.0, 0.3, 0.27, 2.0);
        for n in [2, 4, 8, 16] {
            assert_eq!(choose_allreduce(n, 64 << 20, &m).algorithm, Algorithm::Halving, "N = {n}");
        }
        assert_eq!(choose_allreduce(6, 64 << 20, &m).algorithm, Algorithm::Ring);
        assert_eq!(choose_allreduce(6, 1 << 10, &m).algorithm, Algorithm::Halving);
        // A slow network makes α relatively cheap: the ring wins at N = 6 from a lower size.
        let slow = model(50.0, 0.01, 0.01, 2.0);
        assert_eq!(choose_allreduce(6, 64 << 10, &slow).algorithm, Algorithm::Ring);
    }

    /// The pipeline depth: deeper when reduction is slow next to α (more of it to hide), one
    /// slice when messages are dear and the buffer small.
    #[test]
    fn allreduce_depth_follows_reduction_cost_against_latency() {
        let cheap_msgs = model(5.0, 1.0, 0.9, 0.5);
        let dear_msgs = model(2000.0, 1.0, 0.9, 0.5);
        let deep = choose_allreduce(4, 256 << 20, &cheap_msgs);
        let shallow = choose_allreduce(4, 256 << 20, &dear_msgs);
        assert!(deep.slices > shallow.slices, "{deep:?} {shallow:?}");
        assert_eq!(choose_allreduce(4, 4 << 10, &dear_msgs).slices, 1);
        // The choice is the minimum of the model over every candidate.
        for (c, m) in [(&deep, &cheap_msgs), (&shallow, &dear_msgs)] {
            let t = c.predicted.iter().find(|p| p.0 == c.algorithm).expect("chosen is predicted").2;
            for a in [Algorithm::Halving, Algorithm::Ring] {
                for s in SLICE_CHOICES {
                    assert!(allreduce_time(a, 4, 256 << 20, s, m) >= t);
                }
            }
            assert!(c.reason.contains("cost model") && c.reason.contains("halving") && c.reason.contains("ring"));
        }
    }

    /// Members sharing hosts whose own links are much faster than the rails between hosts:
    /// hierarchical (only the leaders cross) beats halving (every member crosses, sharing the
    /// rails) and the ring (as many bytes across as hierarchical, but 2(N−1) steps and all of
    /// the buffer's bytes over the rails at the slow rate); on one host it never wins.
    #[test]
    fn allreduce_picks_hierarchical_where_members_share_hosts() {
        let links = Links { remote: model(100.0, 0.3, 0.27, 2.0), local: model(20.0, 3.0, 2.7, 2.0) };
        for (hosts, per_host) in [(2, 2), (2, 4), (4, 2), (3, 2)] {
            let t = Topology { hosts, per_host };
            let c = choose_allreduce_on(t, 64 << 20, &links);
            assert_eq!(c.algorithm, Algorithm::Hierarchical, "{t}: {}", c.reason);
            assert_eq!(c.predicted.len(), 3);
            assert!(c.reason.contains("hierarchical") && c.reason.contains("across hosts"), "{}", c.reason);
            let p = |a| c.predicted.iter().find(|x| x.0 == a).expect("predicted").2;
            assert!(p(Algorithm::Halving) > 1.3 * p(Algorithm::Hierarchical), "{:?}", c.predicted);
        }
        // One host: gathering into one member is slower than halving among them all.
        let one_host = choose_allreduce_on(Topology { hosts: 1, per_host: 4 }, 64 << 20, &links);
        assert_eq!(one_host.algorithm, Algorithm::Halving, "{}", one_host.reason);
        // One member per host: not a candidate, and the flat model is the old one.
        let flat = choose_allreduce_on(Topology::flat(4), 64 << 20, &links);
        assert_eq!(flat.predicted.len(), 2);
        assert_eq!(flat, choose_allreduce(4, 64 << 20, &links.remote));
        // A host's own links far slower than the rails (a congested host): gathering every
        // member's buffer into one costs more than sharing the rails.
        let slow_local = Links { remote: links.remote, local: model(100.0, 0.03, 0.027, 2.0) };
        let c = choose_allreduce_on(Topology { hosts: 2, per_host: 2 }, 64 << 20, &slow_local);
        assert_ne!(c.algorithm, Algorithm::Hierarchical, "{}", c.reason);
        // With one member per host, hierarchical is halving, slice for slice.
        for s in SLICE_CHOICES {
            assert_eq!(
                allreduce_time_on(Algorithm::Hierarchical, Topology::flat(6), 1 << 20, s, &links),
                allreduce_time_on(Algorithm::Halving, Topology::flat(6), 1 << 20, s, &links)
            );
        }
    }

    #[test]
    fn a_topology_is_read_from_the_rail_addresses() {
        let at = |ip: &str, port: u16| -> Vec<SocketAddr> { vec![format!("{ip}:{port}").parse().unwrap()] };
        let two_by_two = vec![at("10.0.0.1", 1), at("10.0.0.1", 2), at("10.0.0.2", 1), at("10.0.0.2", 2)];
        assert_eq!(Topology::of(&two_by_two), Topology { hosts: 2, per_host: 2 });
        let loopback: Vec<_> = (0..4).map(|p| at("127.0.0.1", p)).collect();
        assert_eq!(Topology::of(&loopback), Topology { hosts: 1, per_host: 4 });
        let own: Vec<_> = (1..=3).map(|h| at(&format!("10.0.0.{h}"), 7)).collect();
        assert_eq!(Topology::of(&own), Topology::flat(3));
        // Interleaved hosts, or hosts of different sizes: flat.
        let interleaved = vec![at("10.0.0.1", 1), at("10.0.0.2", 1), at("10.0.0.1", 2), at("10.0.0.2", 2)];
        assert_eq!(Topology::of(&interleaved), Topology::flat(4));
        let uneven = vec![at("10.0.0.1", 1), at("10.0.0.1", 2), at("10.0.0.2", 1), at("10.0.0.3", 1)];
        assert_eq!(Topology::of(&uneven), Topology::flat(4));
        // Two rails each: the same set of addresses is the same host, whatever the ports.
        let rails = |h: u8, p: u16| -> Vec<SocketAddr> {
            vec![format!("10.77.0.{h}:{p}").parse().unwrap(), format!("10.77.1.{h}:{}", p + 1).parse().unwrap()]
        };
        assert_eq!(Topology::of(&[rails(1, 5), rails(1, 9), rails(2, 5), rails(2, 9)]).per_host, 2);
        assert_eq!(Topology::of(&[]), Topology::flat(0));
    }

    fn skewed(n: usize, seed: u64) -> ComTable {
        let mut x = seed;
        let rows: Vec<Vec<u64>> = (0..n)
            .map(|_| {
                (0..n)
                    .map(|_| {
                        x = x.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
                        let r = (x >> 33) % 100;
                        if r < 70 { 1 << 16 } else { 32 << 20 }
                    })
                    .collect()
            })
            .collect();
        ComTable::from_rows(&rows).expect("a table")
    }

    /// Every rank sends one 32 MiB message (to 3i + 1 mod 8, a permutation) and 64 KiB to the
    /// others: css puts the large ones in one step, shift spreads them over four.
    fn one_heavy_partner(n: usize) -> ComTable {
        let rows: Vec<Vec<u64>> =
            (0..n).map(|i| (0..n).map(|j| if j == (3 * i + 1) % n { 32 << 20 } else { 64 << 10 }).collect()).collect();
        ComTable::from_rows(&rows).expect("a table")
    }

    /// Large skewed messages on links where one message reaches the rate: css (the fewest,
    /// best-aligned steps) wins; tiny messages: direct's one α beats N−1 steps' α; and when one
    /// message alone reaches only a fraction of what many do, direct wins large ones too.
    #[test]
    fn alltoall_picks_css_for_skewed_bulk_and_direct_when_messages_are_dear() {
        let table = one_heavy_partner(8);
        let fast_steps = model(50.0, 0.3, 0.27, 2.0);
        let (c, s) = choose_alltoall(&table, &fast_steps);
        assert_eq!(c.algorithm, ExchangeAlgorithm::Steps(ScheduleKind::Css), "{}", c.reason);
        assert!(c.predicted[0].1 * 2.0 < c.predicted[2].1, "css well below shift: {:?}", c.predicted);
        assert!(s.is_some_and(|s| s == Schedule::build(ScheduleKind::Css, &table)));
        let tiny = ComTable::uniform(8, 256).expect("a table");
        assert_eq!(choose_alltoall(&tiny, &fast_steps).0.algorithm, ExchangeAlgorithm::Direct);
        let slow_steps = model(50.0, 0.12, 0.27, 2.0);
        let (c, s) = choose_alltoall(&table, &slow_steps);
        assert_eq!(c.algorithm, ExchangeAlgorithm::Direct, "{}", c.reason);
        assert!(s.is_none());
        // css never predicts above shift or pairwise on these tables (its steps are Δ matchings
        // no costlier), so when steps win, css is what is picked.
        for seed in 0..20 {
            let t = skewed(6, seed);
            let p = choose_alltoall(&t, &fast_steps).0.predicted;
            assert!(p[0].1 <= p[2].1 + 1e-12, "{p:?}");
        }
    }

    /// What the calls measured decides an all-to-all too: the model's pick (direct, on links
    /// where one message is slow) runs first; once it is measured the stepped schedules the
    /// model puts within `TRY_WITHIN` are tried (the best by the model first), then the fastest
    /// measured runs and the choice says it is settled; a candidate far off is never tried.
    #[test]
    fn measured_calls_decide_the_alltoall_choice() {
        use ExchangeAlgorithm::{Direct, Steps};
        let table = one_heavy_partner(8);
        let slow_steps = model(50.0, 0.12, 0.27, 2.0);
        let (first, _) = choose_alltoall_measured(&table, &slow_steps, &Measured::NONE);
        assert_eq!(first.algorithm, Direct, "{}", first.reason);
        assert!(!first.settled);
        let mut m = Measured::<4>::NONE;
        m.set_exchange(Direct, 0.30);
        let (tried, s) = choose_alltoall_measured(&table, &slow_steps, &m);
        assert_eq!(tried.algorithm, Steps(ScheduleKind::Css), "{}", tried.reason);
        assert!(tried.reason.contains("css not measured at this size yet, so tried"), "{}", tried.reason);
        assert!(s.is_some_and(|s| s == Schedule::build(ScheduleKind::Css, &table)), "the schedule comes with it");
        m.set_exchange(Steps(ScheduleKind::Css), 0.20);
        m.set_exchange(Steps(ScheduleKind::Pairwise), 0.25);
        m.set_exchange(Steps(ScheduleKind::Shift), 0.22);
        let (settled, _) = choose_alltoall_measured(&table, &slow_steps, &m);
        assert_eq!(settled.algorithm, Steps(ScheduleKind::Css), "{}", settled.reason);
        assert!(settled.settled && settled.reason.contains("the fastest measured"), "{}", settled.reason);
        m.set_exchange(Direct, 0.19);
        assert_eq!(choose_alltoall_measured(&table, &slow_steps, &m).0.algorithm, Direct);
        // Tiny messages on dear steps: the steps are far off by the model, never tried.
        let tiny = ComTable::uniform(8, 256).expect("a table");
        let mut d = Measured::<4>::NONE;
        d.set_exchange(Direct, 1e-3);
        let (c, _) = choose_alltoall_measured(&tiny, &model(5000.0, 0.3, 0.27, 2.0), &d);
        assert_eq!(c.algorithm, Direct, "{}", c.reason);
        assert!(c.settled, "{}", c.reason);
        // The all-to-all figures survive the wire, and bad ones do not.
        assert_eq!(Measured::<4>::from_bytes(&m.to_bytes()), Some(m));
        assert_eq!(Measured::<4>::from_bytes(&m.to_bytes()[..31]), None);
    }

    #[test]
    fn models_combine_to_the_slowest_and_survive_the_wire() {
        let a = model(50.0, 0.3, 0.2, 2.0);
        let b = LinkModel { samples: 3, ..model(80.0, 0.4, 0.1, 1.0) };
        let c = LinkModel::combine(&[a, b]);
        assert_eq!(
            (c.alpha, c.rate, c.direct_rate, c.reduce_rate, c.samples),
            (b.alpha, a.rate, b.direct_rate, b.reduce_rate, 3)
        );
        assert_eq!(LinkModel::combine(&[b, a]), c, "order does not matter");
        assert_eq!(LinkModel::from_bytes(&c.to_bytes()), Some(c));
        let mut bad = c.to_bytes();
        bad[8..16].copy_from_slice(&f64::NAN.to_le_bytes());
        assert_eq!(LinkModel::from_bytes(&bad), None);
        assert_eq!(LinkModel::from_bytes(&bad[..10]), None);
        assert!(LinkModel::PRIOR.to_string().contains("prior"));
    }
}
