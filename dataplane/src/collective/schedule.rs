//! Contention-free schedules for a personalised all-to-all exchange (seed 004): pure functions
//! from a communication table to the ordered steps every rank performs.
//!
//! A [`ComTable`] says how many bytes each sender sends each receiver (N × N; the diagonal is
//! a rank's part for itself, a local copy that is never a step). A [`Schedule`] is a list of
//! steps; each step is a set of (sender, receiver) pairs in which every sender and every
//! receiver appears at most once, so no receiver is the target of two senders at once (the
//! seed's *contention*). Every non-zero off-diagonal entry of the table is in exactly one step,
//! zero entries and the diagonal in none, and a step with no message is not a step.
//! [`Schedule::rank_steps`] gives one rank its own part, in order: at most one send and one
//! receive per step.
//!
//! Three ways to build one ([`ScheduleKind`]):
//! * **shift** — the seed's baseline (a common `MPI_Alltoallv` replacement): in step p,
//!   p = 1 … N−1, sender i sends to (i + p) mod N and receives from (i − p) mod N. At most
//!   N − 1 steps. O(N²).
//! * **pairwise** — MPICH's pairwise exchange: when N is a power of two, in step k = 1 … N−1
//!   rank i exchanges with i XOR k (it sends to and receives from the same peer); otherwise the
//!   same steps as shift. O(N²).
//! * **css** — the general method the seed points at: the demand graph (senders × receivers,
//!   one edge per non-zero off-diagonal entry) is bipartite, so by König's theorem its edges
//!   split into exactly Δ matchings, Δ its maximum degree (the most messages one rank sends or
//!   receives) — the fewest steps any contention-free schedule can have. Edges are coloured
//!   heaviest first, each into a step that already holds heavier messages and is free at both
//!   ends when there is one (free of cost, and it is what puts similar sizes together); else
//!   a new step is opened while fewer than Δ are, or the alternating-path recolouring of
//!   bipartite edge colouring makes room (two variants, one preferring a new step, the other a
//!   recolouring that costs nothing). Then a local search swaps the two colours inside
//!   alternating components (Kempe chains) of every pair of steps, oriented exactly for the
//!   pair, while that lowers the cost; it also starts from the shift and pairwise schedules
//!   when they happen to use exactly Δ steps (every dense table), and the cheapest result is
//!   kept. Steps are ordered largest message first.
//!
//!   Guarantees: exactly Δ steps, and a cost no higher than shift's whenever shift itself
//!   needs only Δ steps. Minimising the cost exactly is NP-hard, and with only Δ steps it can
//!   exceed the cost of a schedule with more steps (shift's, on a few small sparse tables: see
//!   the tests). On random tables it is 5–95 % cheaper than shift, more so the more skewed
//!   and the larger N. Against the exhaustive optimum over Δ-step schedules (random tables):
//!   exact for N ≤ 3; N = 4 exact on 97 %, at worst 1.46×; N = 5 exact on half the dense
//!   tables, at worst 1.27× — and once in 40 sparse N = 5 tables above shift where a Δ-step
//!   schedule below shift existed.
//!
//!   Complexity: O(E·Δ) to colour (E ≤ N² the edges; a recolouring walks one path, O(N), for
//!   each of at most `FLIP_CANDIDATES` candidates), then up to `KEMPE_PASSES` passes over the
//!   Δ²/2 pairs of steps, most dismissed after one component walk, the rest O(N). Measured in
//!   a release build (one core): N = 64 dense 18 ms, N = 128 120 ms, N = 256 0.9 s; sparse
//!   tables far less. For large groups compute it once and reuse it
//!   (`Exchanger::alltoallv_with`).
//!
//! The cost of a schedule ([`Schedule::cost`]) is the sum over its steps of the step's largest
//! message: what the exchange takes when every step lasts as long as its longest message and
//! the network carries one message per receiver at a time.
//!
//! The block-cyclic redistribution tables and the seed's Algorithms 1 and 2 are in the sibling
//! `redistribution`.

use std::fmt;
use std::str::FromStr;

use crate::error::{Error, Result};

/// Bytes each sender sends each receiver: an N × N table, N ≥ 1, row = sender.
#[derive(Clone, PartialEq, Eq)]
pub struct ComTable {
    n: usize,
    bytes: Vec<u64>,
}

impl ComTable {
    /// A table for `n` ranks from its entries, row by row (`bytes[i * n + j]`: sender i to
    /// receiver j).
    pub fn new(n: usize, bytes: Vec<u64>) -> Result<ComTable> {
        if n == 0 {
            return Err(Error::Config("a communication table needs at least one rank".into()));
        }
        let want = n.checked_mul(n).ok_or_else(|| Error::Config(format!("a table for {n} ranks is too large")))?;
        if bytes.len() != want {
            return Err(Error::Config(format!(
                "a communication table for {n} ranks has {want} entries (n × n), got {}",
                bytes.len()
            )));
        }
        Ok(ComTable { n, bytes })
    }

    /// A table from its rows; it must be square.
    pub fn from_rows(rows: &[Vec<u64>]) -> Result<ComTable> {
        let n = rows.len();
        if let Some((i, r)) = rows.iter().enumerate().find(|(_, r)| r.len() != n) {
            return Err(Error::Config(format!(
                "row {i} of the communication table has {} entries, the table has {n} rows (it must be square)",
                r.len()
            )));
        }
        ComTable::new(n, rows.concat())
    }

    /// A table whose entry (i, j) is `f(i, j)`.
    pub fn from_fn(n: usize, mut f: impl FnMut(usize, usize) -> u64) -> Result<ComTable> {
        let mut bytes = Vec::new();
        n.checked_mul(n)
            .and_then(|e| bytes.try_reserve_exact(e).ok())
            .ok_or_else(|| Error::Config(format!("cannot allocate a table for {n} ranks")))?;
        for i in 0..n {
            for j in 0..n {
                bytes.push(f(i, j));
            }
        }
        ComTable::new(n, bytes)
    }

    /// Every rank sends every rank (itself included) `bytes` bytes.
    pub fn uniform(n: usize, bytes: u64) -> Result<ComTable> {
        ComTable::from_fn(n, |_, _| bytes)
    }

    /// The number of ranks N.
    pub fn n(&self) -> usize {
        self.n
    }

    /// Bytes sender `from` sends receiver `to`.
    pub fn get(&self, from: usize, to: usize) -> u64 {
        self.bytes[from * self.n + to]
    }

    /// What sender `from` sends each receiver.
    pub fn row(&self, from: usize) -> &[u64] {
        &self.bytes[from * self.n..(from + 1) * self.n]
    }

    /// Every entry, row by row.
    pub fn entries(&self) -> &[u64] {
        &self.bytes
    }

    /// Every entry multiplied by `k` (elements to bytes, one period to several), or an error if
    /// one overflows.
    pub fn scaled(&self, k: u64) -> Result<ComTable> {
        let bytes = self
            .bytes
            .iter()
            .map(|&b| b.checked_mul(k))
            .collect::<Option<Vec<u64>>>()
            .ok_or_else(|| Error::Config(format!("scaling the communication table by {k} overflows")))?;
        Ok(ComTable { n: self.n, bytes })
    }

    /// The messages that cross the network: (sender, receiver, bytes) for every non-zero
    /// off-diagonal entry, row by row.
    pub fn demands(&self) -> Vec<(usize, usize, u64)> {
        let n = self.n;
        (0..n)
            .flat_map(|i| (0..n).map(move |j| (i, j)))
            .filter(|&(i, j)| i != j)
            .map(|(i, j)| (i, j, self.get(i, j)))
            .filter(|&(_, _, b)| b > 0)
            .collect()
    }

    /// The maximum degree Δ of the demand graph: the most messages one rank sends, or one rank
    /// receives, over the network. No contention-free schedule has fewer steps.
    pub fn max_degree(&self) -> usize {
        let n = self.n;
        let mut out = vec![0usize; n];
        let mut inn = vec![0usize; n];
        for (i, j, _) in self.demands() {
            out[i] += 1;
            inn[j] += 1;
        }
        out.into_iter().chain(inn).max().unwrap_or(0)
    }

    /// A short fingerprint of the table (FNV-1a over N and the entries), which ranks compare to
    /// check that they were given the same one.
    pub fn fingerprint(&self) -> u64 {
        let mut h = Fnv::new();
        h.word(self.n as u64);
        for &b in &self.bytes {
            h.word(b);
        }
        h.0
    }
}

impl fmt::Debug for ComTable {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(f, "ComTable {}×{} [", self.n, self.n)?;
        for i in 0..self.n {
            writeln!(f, "  {:?}", self.row(i))?;
        }
        write!(f, "]")
    }
}

/// Which schedule an exchange follows; every rank of it must pass the same.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ScheduleKind {
    /// Step p: sender i sends to (i + p) mod N.
    Shift,
    /// MPICH's pairwise exchange: partner i XOR k for powers of two, else as shift.
    Pairwise,
    /// Edge colouring of the demand graph into exactly Δ steps, similar sizes together.
    Css,
}

impl ScheduleKind {
    pub const ALL: &'static [ScheduleKind] = &[ScheduleKind::Shift, ScheduleKind::Pairwise, ScheduleKind::Css];

    pub fn name(self) -> &'static str {
        match self {
            ScheduleKind::Shift => "shift",
            ScheduleKind::Pairwise => "pairwise",
            ScheduleKind::Css => "css",
        }
    }

    /// A one-byte code for the exchange's header.
    pub fn code(self) -> u8 {
        match self {
            ScheduleKind::Shift => 1,
            ScheduleKind::Pairwise => 2,
            ScheduleKind::Css => 3,
        }
    }

    pub fn from_code(c: u8) -> Option<ScheduleKind> {
        ScheduleKind::ALL.iter().copied().find(|k| k.code() == c)
    }
}

impl fmt::Display for ScheduleKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for ScheduleKind {
    type Err = Error;

    fn from_str(s: &str) -> Result<ScheduleKind> {
        ScheduleKind::ALL
            .iter()
            .copied()
            .find(|k| k.name() == s)
            .ok_or_else(|| Error::Config(format!("unknown all-to-all schedule {s:?} (one of: shift, pairwise, css)")))
    }
}

/// One rank's part of one step: whom it sends to and whom it receives from (at least one).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RankStep {
    /// The step's index in the schedule.
    pub step: usize,
    pub send_to: Option<usize>,
    pub recv_from: Option<usize>,
}

/// An ordered list of contention-free steps for N ranks. Invariants (checked by
/// [`Schedule::from_steps`], kept by every constructor): every pair is off-diagonal and inside
/// 0..N, no step is empty, and in each step the senders are distinct and the receivers are
/// distinct. Pairs within a step are sorted by sender.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Schedule {
    n: usize,
    steps: Vec<Vec<(usize, usize)>>,
}

impl Schedule {
    /// A schedule from its steps' (sender, receiver) pairs, refused (naming the step and the
    /// pair) unless every pair is off-diagonal and inside 0..`n` and no step repeats a sender
    /// or a receiver. Empty steps are dropped.
    pub fn from_steps(n: usize, steps: Vec<Vec<(usize, usize)>>) -> Result<Schedule> {
        let mut send_seen = vec![usize::MAX; n];
        let mut recv_seen = vec![usize::MAX; n];
        for (k, step) in steps.iter().enumerate() {
            for &(i, j) in step {
                if i >= n || j >= n {
                    return Err(Error::Config(format!("step {k} has the pair {i} → {j}, outside a group of {n}")));
                }
                if i == j {
                    return Err(Error::Config(format!(
                        "step {k} has rank {i} sending to itself (a local copy is not a step)"
                    )));
                }
                if send_seen[i] == k {
                    return Err(Error::Config(format!("step {k} has rank {i} sending twice")));
                }
                if recv_seen[j] == k {
                    return Err(Error::Config(format!("step {k} has two senders to rank {j} (contention)")));
                }
                send_seen[i] = k;
                recv_seen[j] = k;
            }
        }
        Ok(Schedule::normalized(n, steps))
    }

    /// Sorts each step by sender and drops the empty ones (the pairs are already valid).
    fn normalized(n: usize, steps: Vec<Vec<(usize, usize)>>) -> Schedule {
        let steps = steps
            .into_iter()
            .filter(|s| !s.is_empty())
            .map(|mut s| {
                s.sort_unstable();
                s
            })
            .collect();
        Schedule { n, steps }
    }

    /// The schedule of `kind` for `table`.
    pub fn build(kind: ScheduleKind, table: &ComTable) -> Schedule {
        match kind {
            ScheduleKind::Shift => shift(table),
            ScheduleKind::Pairwise => pairwise(table),
            ScheduleKind::Css => css(table),
        }
    }

    /// The number of ranks N.
    pub fn n(&self) -> usize {
        self.n
    }

    /// The number of steps.
    pub fn len(&self) -> usize {
        self.steps.len()
    }

    pub fn is_empty(&self) -> bool {
        self.steps.is_empty()
    }

    /// Step `k`'s (sender, receiver) pairs, sorted by sender.
    pub fn step(&self, k: usize) -> &[(usize, usize)] {
        &self.steps[k]
    }

    pub fn steps(&self) -> &[Vec<(usize, usize)>] {
        &self.steps
    }

    /// Rank `rank`'s steps in order: only those where it sends or receives.
    pub fn rank_steps(&self, rank: usize) -> Vec<RankStep> {
        self.steps
            .iter()
            .enumerate()
            .filter_map(|(k, pairs)| {
                let send_to = pairs.iter().find(|p| p.0 == rank).map(|p| p.1);
                let recv_from = pairs.iter().find(|p| p.1 == rank).map(|p| p.0);
                (send_to.is_some() || recv_from.is_some()).then_some(RankStep { step: k, send_to, recv_from })
            })
            .collect()
    }

    /// The sum over steps of the step's largest message in `table`.
    pub fn cost(&self, table: &ComTable) -> u128 {
        self.steps.iter().map(|s| u128::from(step_max(table, s))).sum()
    }

    /// Checks that this schedule carries exactly `table`'s network messages: the same N, every
    /// non-zero off-diagonal entry in exactly one step, no zero entry in any. The error names
    /// the first pair that is wrong.
    pub fn check(&self, table: &ComTable) -> Result<()> {
        let n = self.n;
        if table.n() != n {
            return Err(Error::Config(format!("the schedule is for {n} ranks, the table for {}", table.n())));
        }
        let mut seen = vec![false; n * n];
        for (k, step) in self.steps.iter().enumerate() {
            for &(i, j) in step {
                if table.get(i, j) == 0 {
                    return Err(Error::Config(format!("step {k} sends {i} → {j}, which the table says is 0 bytes")));
                }
                if std::mem::replace(&mut seen[i * n + j], true) {
                    return Err(Error::Config(format!("the schedule sends {i} → {j} twice (again in step {k})")));
                }
            }
        }
        if let Some((i, j, b)) = table.demands().into_iter().find(|&(i, j, _)| !seen[i * n + j]) {
            return Err(Error::Config(format!("the schedule never sends {i} → {j} ({b} bytes)")));
        }
        Ok(())
    }

    /// A short fingerprint of the steps (FNV-1a), which ranks compare to check that they
    /// follow the same schedule.
    pub fn fingerprint(&self) -> u64 {
        let mut h = Fnv::new();
        h.word(self.n as u64);
        for s in &self.steps {
            h.word(s.len() as u64);
            for &(i, j) in s {
                h.word(i as u64);
                h.word(j as u64);
            }
        }
        h.0
    }
}

/// The largest message of one step.
fn step_max(table: &ComTable, pairs: &[(usize, usize)]) -> u64 {
    pairs.iter().map(|&(i, j)| table.get(i, j)).max().unwrap_or(0)
}

/// FNV-1a, 64 bits, over little-endian words.
struct Fnv(u64);

impl Fnv {
    fn new() -> Fnv {
        Fnv(0xcbf2_9ce4_8422_2325)
    }

    fn word(&mut self, w: u64) {
        for b in w.to_le_bytes() {
            self.0 ^= u64::from(b);
            self.0 = self.0.wrapping_mul(0x0100_0000_01b3);
        }
    }
}

/// The seed's baseline: in step p (1 ≤ p < N) sender i sends to (i + p) mod N. Zero entries are
/// left out, and steps left empty dropped.
pub fn shift(table: &ComTable) -> Schedule {
    let n = table.n();
    let steps =
        (1..n).map(|p| (0..n).map(|i| (i, (i + p) % n)).filter(|&(i, j)| table.get(i, j) > 0).collect()).collect();
    Schedule::normalized(n, steps)
}

/// MPICH's pairwise exchange: for N a power of two, in step k (1 ≤ k < N) rank i exchanges
/// with i XOR k; otherwise the steps of [`shift`] (send to i + k, receive from i − k).
pub fn pairwise(table: &ComTable) -> Schedule {
    let n = table.n();
    if !n.is_power_of_two() {
        return shift(table);
    }
    let steps = (1..n).map(|k| (0..n).map(|i| (i, i ^ k)).filter(|&(i, j)| table.get(i, j) > 0).collect()).collect();
    Schedule::normalized(n, steps)
}

/// How many passes of pair-wise Kempe swaps the local search makes at most from one start.
/// A pass is O(N·Δ²) at worst; on the random tables of the tests the search settles within
/// this (`css_is_a_local_optimum_of_two_step_swaps` checks that nothing is left to gain).
const KEMPE_PASSES: usize = 8;
/// How many (free colour at the sender, free colour at the receiver) pairs the colouring
/// compares before it recolours an alternating path: each costs O(N) to evaluate, and the
/// local search repairs what a poorer choice costs.
const FLIP_CANDIDATES: usize = 16;

/// The contention-free schedule with exactly Δ steps, similar sizes together (see the module
/// documentation). Steps are ordered by their largest message, largest first.
pub fn css(table: &ComTable) -> Schedule {
    let n = table.n();
    let delta = table.max_degree();
    if delta == 0 {
        return Schedule { n, steps: vec![] };
    }
    let mut best = Colouring::heaviest_first(table, delta, false);
    best.kempe();
    let mut other = Colouring::heaviest_first(table, delta, true);
    other.kempe();
    if other.cost() < best.cost() {
        best = other;
    }
    let shifted = shift(table);
    let paired = pairwise(table);
    let starts = if paired == shifted { vec![shifted] } else { vec![shifted, paired] };
    for start in starts {
        if start.len() != delta {
            continue;
        }
        let mut c = Colouring::from_schedule(table, &start, delta);
        c.kempe();
        if c.cost() < best.cost() {
            best = c;
        }
    }
    best.into_schedule()
}

const NONE: usize = usize::MAX;

/// An assignment of the demand graph's edges to `colours` matchings (steps).
struct Colouring<'t> {
    table: &'t ComTable,
    n: usize,
    colours: usize,
    /// `send[c * n + u]`: the receiver of sender u in colour c, or NONE.
    send: Vec<usize>,
    /// `recv[c * n + v]`: the sender to receiver v in colour c, or NONE.
    recv: Vec<usize>,
}

impl<'t> Colouring<'t> {
    fn empty(table: &'t ComTable, colours: usize) -> Colouring<'t> {
        let n = table.n();
        Colouring { table, n, colours, send: vec![NONE; colours * n], recv: vec![NONE; colours * n] }
    }

    fn from_schedule(table: &'t ComTable, s: &Schedule, colours: usize) -> Colouring<'t> {
        let mut c = Colouring::empty(table, colours);
        for (k, step) in s.steps().iter().enumerate() {
            for &(u, v) in step {
                c.assign(k, u, v);
            }
        }
        c
    }

    fn assign(&mut self, c: usize, u: usize, v: usize) {
        debug_assert!(self.send[c * self.n + u] == NONE && self.recv[c * self.n + v] == NONE);
        self.send[c * self.n + u] = v;
        self.recv[c * self.n + v] = u;
    }

    fn free_at_sender(&self, c: usize, u: usize) -> bool {
        self.send[c * self.n + u] == NONE
    }

    fn free_at_receiver(&self, c: usize, v: usize) -> bool {
        self.recv[c * self.n + v] == NONE
    }

    /// The largest message of colour c.
    fn max_of(&self, c: usize) -> u64 {
        (0..self.n)
            .filter_map(|u| {
                let v = self.send[c * self.n + u];
                (v != NONE).then(|| self.table.get(u, v))
            })
            .max()
            .unwrap_or(0)
    }

    fn cost(&self) -> u128 {
        (0..self.colours).map(|c| u128::from(self.max_of(c))).sum()
    }

    /// Colours the edges heaviest first. An edge goes into the first open colour free at both
    /// ends: every open colour already holds a message at least as large, so this costs
    /// nothing. Else a new colour is opened while fewer than Δ are. Else (every colour is busy
    /// at one end or the other) the alternating path of two colours a (free at the sender) and
    /// b (free at the receiver) that starts at the receiver is swapped, which frees a at the
    /// receiver without touching the sender (the graph is bipartite), and the edge takes a;
    /// of the first `FLIP_CANDIDATES` such pairs, the one whose swap raises the cost least.
    fn heaviest_first(table: &'t ComTable, delta: usize, recolour_first: bool) -> Colouring<'t> {
        let mut edges = table.demands();
        edges.sort_by(|x, y| y.2.cmp(&x.2).then((x.0, x.1).cmp(&(y.0, y.1))));
        let mut col = Colouring::empty(table, delta);
        let mut maxw = vec![0u64; delta];
        let mut opened = 0;
        for (u, v, w) in edges {
            if let Some(c) = (0..opened).find(|&c| col.free_at_sender(c, u) && col.free_at_receiver(c, v)) {
                col.assign(c, u, v);
                continue;
            }
            // Recolouring among the open colours needs one free at u and one free at v; with
            // all Δ open there always are (u and v have fewer than Δ coloured edges, this one
            // not being coloured yet), and none is free at both (else the first branch took
            // it).
            let flip = col.best_flip(u, v, w, opened, &maxw);
            let open_new = opened < delta && (!recolour_first || flip.is_none_or(|(cost, _, _)| cost > 0));
            if open_new {
                col.assign(opened, u, v);
                maxw[opened] = w;
                opened += 1;
                continue;
            }
            let (_, a, b) = flip.expect("a colour is free at each end");
            let path = col.path_from_receiver(v, a, b);
            col.swap(&path, a, b);
            col.assign(a, u, v);
            maxw[a] = col.max_of(a);
            maxw[b] = col.max_of(b);
        }
        col
    }

    /// Of the first `FLIP_CANDIDATES` pairs (a free at sender u, b free at receiver v) among
    /// the first `opened` colours, the one whose path swap, with u → v then coloured a, raises
    /// the cost least: (that rise, a, b). `None` if no open colour is free at u or at v.
    fn best_flip(&self, u: usize, v: usize, w: u64, opened: usize, maxw: &[u64]) -> Option<(u128, usize, usize)> {
        let free_u: Vec<usize> = (0..opened).filter(|&c| self.free_at_sender(c, u)).collect();
        let free_v: Vec<usize> = (0..opened).filter(|&c| self.free_at_receiver(c, v)).collect();
        let mut best: Option<(u128, usize, usize)> = None;
        for (a, b) in free_u.iter().flat_map(|&a| free_v.iter().map(move |&b| (a, b))).take(FLIP_CANDIDATES) {
            let path = self.path_from_receiver(v, a, b);
            let (na, nb) = self.maxima_after_swap(&path, a, b);
            let after = u128::from(na.max(w)) + u128::from(nb);
            let before = u128::from(maxw[a]) + u128::from(maxw[b]);
            let rise = after.saturating_sub(before);
            if best.is_none_or(|(d, _, _)| rise < d) {
                best = Some((rise, a, b));
            }
        }
        best
    }

    /// The edges (sender, receiver, colour) of the path that starts at receiver `v` with its
    /// a-edge and alternates a, b, a, … .
    fn path_from_receiver(&self, v: usize, a: usize, b: usize) -> Vec<(usize, usize, usize)> {
        let n = self.n;
        let mut path = Vec::new();
        let mut recv_side = v;
        loop {
            let u = self.recv[a * n + recv_side];
            if u == NONE {
                break;
            }
            path.push((u, recv_side, a));
            let next = self.send[b * n + u];
            if next == NONE {
                break;
            }
            path.push((u, next, b));
            recv_side = next;
        }
        path
    }

    /// The largest messages of colours a and b if `edges` (each a or b) swapped colour.
    fn maxima_after_swap(&self, edges: &[(usize, usize, usize)], a: usize, b: usize) -> (u64, u64) {
        let n = self.n;
        let mut moved = vec![false; n];
        for &(u, _, c) in edges {
            if c == a {
                moved[u] = true;
            }
        }
        let mut moved_b = vec![false; n];
        for &(u, _, c) in edges {
            if c == b {
                moved_b[u] = true;
            }
        }
        let (mut na, mut nb) = (0u64, 0u64);
        for u in 0..n {
            let va = self.send[a * n + u];
            if va != NONE {
                let w = self.table.get(u, va);
                if moved[u] {
                    nb = nb.max(w);
                } else {
                    na = na.max(w);
                }
            }
            let vb = self.send[b * n + u];
            if vb != NONE {
                let w = self.table.get(u, vb);
                if moved_b[u] {
                    na = na.max(w);
                } else {
                    nb = nb.max(w);
                }
            }
        }
        (na, nb)
    }

    /// Swaps colours a and b on `edges` (each of colour a or b, a union of alternating
    /// components, so the result is again a pair of matchings).
    fn swap(&mut self, edges: &[(usize, usize, usize)], a: usize, b: usize) {
        let n = self.n;
        for &(u, v, c) in edges {
            self.send[c * n + u] = NONE;
            self.recv[c * n + v] = NONE;
        }
        for &(u, v, c) in edges {
            let c = if c == a { b } else { a };
            self.assign(c, u, v);
        }
    }

    /// Local search: for every pair of colours, the union of the two matchings splits into
    /// alternating paths and cycles, and swapping the colours inside any of them keeps both
    /// matchings. The best orientation is exact for the pair: every component puts its heavier
    /// side in one colour, so that colour's largest message is the overall largest and the
    /// other's is the largest of the components' lighter sides. Applied while it lowers the
    /// cost, at most `KEMPE_PASSES` passes.
    ///
    /// Most pairs cannot improve, and two checks skip them cheaply: a pair neither of whose
    /// colours changed since it was last looked at cannot (its optimum is a function of the
    /// two colours), and neither can a pair where a largest message of the lighter colour lies
    /// in a component whose other side is at least as heavy (that component's lighter side is
    /// then the lighter colour's maximum already), which takes a walk along that one component.
    fn kempe(&mut self) {
        let n = self.n;
        let colours = self.colours;
        let mut maxima: Vec<u64> = (0..colours).map(|c| self.max_of(c)).collect();
        let mut dirty = vec![true; colours];
        // Union-find over 2n vertices (senders 0..n, receivers n..2n), per-root side maxima,
        // and the pair's edges: reused across pairs.
        let mut parent = vec![0usize; 2 * n];
        let mut side = vec![(0u64, 0u64); 2 * n];
        let mut edges: Vec<(usize, usize, usize)> = Vec::with_capacity(2 * n);
        fn find(parent: &mut [usize], mut x: usize) -> usize {
            while parent[x] != x {
                parent[x] = parent[parent[x]];
                x = parent[x];
            }
            x
        }
        for _ in 0..KEMPE_PASSES {
            let mut changed = vec![false; colours];
            let mut improved = false;
            for a0 in 0..colours {
                for b0 in a0 + 1..colours {
                    if !(dirty[a0] || dirty[b0] || changed[a0] || changed[b0]) {
                        continue;
                    }
                    // a: the heavier colour, b: the lighter.
                    let (a, b) = if maxima[a0] >= maxima[b0] { (a0, b0) } else { (b0, a0) };
                    if maxima[b] == 0 || self.blocked(a, b, maxima[b]) {
                        continue;
                    }
                    for (i, p) in parent.iter_mut().enumerate() {
                        *p = i;
                    }
                    edges.clear();
                    for c in [a, b] {
                        for u in 0..n {
                            let v = self.send[c * n + u];
                            if v != NONE {
                                edges.push((u, v, c));
                                let (x, y) = (find(&mut parent, u), find(&mut parent, n + v));
                                if x != y {
                                    parent[x] = y;
                                }
                            }
                        }
                    }
                    // Per component root: the largest message of its a-side and its b-side.
                    side.fill((0, 0));
                    for &(u, v, c) in &edges {
                        let r = find(&mut parent, u);
                        let w = self.table.get(u, v);
                        if c == a {
                            side[r].0 = side[r].0.max(w);
                        } else {
                            side[r].1 = side[r].1.max(w);
                        }
                    }
                    let (mut heavy, mut light) = (0u64, 0u64);
                    for &(p, q) in &side {
                        heavy = heavy.max(p.max(q));
                        light = light.max(p.min(q));
                    }
                    let before = u128::from(maxima[a]) + u128::from(maxima[b]);
                    if u128::from(heavy) + u128::from(light) >= before {
                        continue;
                    }
                    let flip: Vec<(usize, usize, usize)> = edges
                        .iter()
                        .copied()
                        .filter(|&(u, _, _)| {
                            let r = find(&mut parent, u);
                            side[r].1 > side[r].0
                        })
                        .collect();
                    self.swap(&flip, a, b);
                    maxima[a] = heavy;
                    maxima[b] = light;
                    changed[a] = true;
                    changed[b] = true;
                    improved = true;
                }
            }
            if !improved {
                break;
            }
            dirty = changed;
        }
    }

    /// Whether some message of colour b weighing `max_b` (b's largest) lies in an alternating
    /// a/b component whose a-side has a message at least as large: then no swap between a and
    /// b can lower b's maximum while a keeps the overall largest.
    fn blocked(&self, a: usize, b: usize, max_b: u64) -> bool {
        let n = self.n;
        (0..n).any(|u| {
            let v = self.send[b * n + u];
            v != NONE && self.table.get(u, v) == max_b && self.side_max(a, b, u, v) >= max_b
        })
    }

    /// The largest a-message of the a/b component that holds the b-edge u → v: its walk goes
    /// both ways from that edge, to the path's ends or once around the cycle.
    fn side_max(&self, a: usize, b: usize, u0: usize, v0: usize) -> u64 {
        let n = self.n;
        let mut best = 0u64;
        // From sender u0: its a-edge, then that receiver's b-edge, and so on.
        let mut u = u0;
        loop {
            let v = self.send[a * n + u];
            if v == NONE {
                break;
            }
            best = best.max(self.table.get(u, v));
            let next = self.recv[b * n + v];
            if next == NONE || next == u0 {
                // The end of the path, or back at the start edge: a cycle, all seen.
                return if next == u0 { best } else { best.max(self.side_from_receiver(a, b, v0, u0)) };
            }
            u = next;
        }
        best.max(self.side_from_receiver(a, b, v0, u0))
    }

    /// The largest a-message on the walk from receiver v0 along its a-edge, its sender's
    /// b-edge, and so on (the other half of a path through the b-edge u0 → v0).
    fn side_from_receiver(&self, a: usize, b: usize, v0: usize, u0: usize) -> u64 {
        let n = self.n;
        let mut best = 0u64;
        let mut v = v0;
        loop {
            let u = self.recv[a * n + v];
            if u == NONE || u == u0 {
                break;
            }
            best = best.max(self.table.get(u, v));
            let next = self.send[b * n + u];
            if next == NONE {
                break;
            }
            v = next;
        }
        best
    }

    /// The colours as steps, largest message first.
    fn into_schedule(self) -> Schedule {
        let n = self.n;
        let mut steps: Vec<(u64, Vec<(usize, usize)>)> = (0..self.colours)
            .map(|c| {
                let pairs: Vec<(usize, usize)> = (0..n)
                    .filter_map(|u| {
                        let v = self.send[c * n + u];
                        (v != NONE).then_some((u, v))
                    })
                    .collect();
                (self.max_of(c), pairs)
            })
            .collect();
        steps.sort_by(|x, y| y.0.cmp(&x.0).then_with(|| x.1.cmp(&y.1)));
        Schedule::normalized(n, steps.into_iter().map(|s| s.1).collect())
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    /// A seeded xorshift generator: the tests' tables are the same on every run.
    pub(crate) struct Rng(u64);

    impl Rng {
        pub(crate) fn new(seed: u64) -> Rng {
            Rng(seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1)
        }

        pub(crate) fn next(&mut self) -> u64 {
            self.0 ^= self.0 << 13;
            self.0 ^= self.0 >> 7;
            self.0 ^= self.0 << 17;
            self.0
        }

        pub(crate) fn below(&mut self, k: u64) -> u64 {
            self.next() % k
        }
    }

    /// A Zipf-like size: 1 MB / k^1.2 for k uniform in 1..=1000, so a few messages are large
    /// and most are small.
    fn zipf(r: &mut Rng) -> u64 {
        let k = (1 + r.below(1000)) as f64;
        (1e6 / k.powf(1.2)) as u64 + 1
    }

    /// The random table families of the tests, for `n` ranks and one seed.
    fn families(n: usize, seed: u64) -> Vec<(&'static str, ComTable)> {
        let mut r = Rng::new(seed * 1000 + n as u64);
        let hot = [0, n / 2];
        vec![
            ("uniform", ComTable::from_fn(n, |_, _| 1 + r.below(1000)).unwrap()),
            ("zipf", ComTable::from_fn(n, |_, _| zipf(&mut r)).unwrap()),
            (
                "hot receivers",
                ComTable::from_fn(n, |_, j| (1 + r.below(1000)) * if hot.contains(&j) { 50 } else { 1 }).unwrap(),
            ),
            ("sparse", ComTable::from_fn(n, |_, _| if r.below(10) < 7 { 0 } else { 1 + r.below(1000) }).unwrap()),
            ("sparse zipf", ComTable::from_fn(n, |_, _| if r.below(2) == 0 { 0 } else { zipf(&mut r) }).unwrap()),
            ("equal", ComTable::uniform(n, 7).unwrap()),
            ("zeros", ComTable::from_fn(n, |i, j| if i == j { 5 } else { 0 }).unwrap()),
        ]
    }

    /// Independent of the code under test: every step a matching without self-pairs, and
    /// every non-zero off-diagonal demand in exactly one step, nothing else.
    pub(crate) fn assert_valid(t: &ComTable, s: &Schedule, what: &str) {
        let n = t.n();
        assert_eq!(s.n(), n, "{what}: group size");
        let mut count = vec![0u32; n * n];
        for (k, step) in s.steps().iter().enumerate() {
            assert!(!step.is_empty(), "{what}: step {k} is empty");
            let (mut snd, mut rcv) = (vec![false; n], vec![false; n]);
            for &(i, j) in step {
                assert!(i < n && j < n && i != j, "{what}: step {k} has {i} → {j}");
                assert!(!snd[i], "{what}: step {k}: sender {i} twice");
                assert!(!rcv[j], "{what}: step {k}: receiver {j} twice (contention)");
                snd[i] = true;
                rcv[j] = true;
                count[i * n + j] += 1;
            }
        }
        for i in 0..n {
            for j in 0..n {
                let want = u32::from(i != j && t.get(i, j) > 0);
                assert_eq!(
                    count[i * n + j],
                    want,
                    "{what}: {i} → {j} ({} bytes) delivered {} times",
                    t.get(i, j),
                    count[i * n + j]
                );
            }
        }
        s.check(t).unwrap_or_else(|e| panic!("{what}: Schedule::check refuses a valid schedule: {e}"));
    }

    /// Δ counted directly from the table.
    fn degree(t: &ComTable) -> usize {
        let n = t.n();
        let out = (0..n).map(|i| (0..n).filter(|&j| j != i && t.get(i, j) > 0).count());
        let inn = (0..n).map(|j| (0..n).filter(|&i| i != j && t.get(i, j) > 0).count());
        out.chain(inn).max().unwrap_or(0)
    }

    /// The sum over steps of the largest message, computed here.
    fn cost(t: &ComTable, s: &Schedule) -> u128 {
        s.steps().iter().map(|st| st.iter().map(|&(i, j)| u128::from(t.get(i, j))).max().unwrap()).sum()
    }

    /// Every rank walks its own steps with sends that never wait: a rank finishes a step once
    /// the message it receives there was sent, i.e. its sender has started that step. Every
    /// rank must finish, and every receive must meet the sender's send of the same step.
    pub(crate) fn assert_runs_to_completion(s: &Schedule, what: &str) {
        let n = s.n();
        let lists: Vec<Vec<RankStep>> = (0..n).map(|r| s.rank_steps(r)).collect();
        let (mut sent, mut received) = (0, 0);
        for (r, list) in lists.iter().enumerate() {
            for w in list.windows(2) {
                assert!(w[0].step < w[1].step, "{what}: rank {r}'s steps out of order");
            }
            for st in list {
                assert!(st.send_to.is_some() || st.recv_from.is_some());
                if let Some(from) = st.recv_from {
                    let theirs = lists[from].iter().find(|x| x.step == st.step);
                    assert_eq!(
                        theirs.and_then(|x| x.send_to),
                        Some(r),
                        "{what}: rank {r} receives from {from} in step {} but {from} does not send it there",
                        st.step
                    );
                }
                sent += usize::from(st.send_to.is_some());
                received += usize::from(st.recv_from.is_some());
            }
        }
        // And every pair of the schedule is in both ranks' lists, at its step.
        let pairs = s.steps().iter().map(Vec::len).sum::<usize>();
        assert_eq!((sent, received), (pairs, pairs), "{what}");
        for (k, step) in s.steps().iter().enumerate() {
            for &(i, j) in step {
                let at = |r: usize| lists[r].iter().find(|x| x.step == k).copied();
                assert_eq!(at(i).and_then(|x| x.send_to), Some(j), "{what}: step {k}");
                assert_eq!(at(j).and_then(|x| x.recv_from), Some(i), "{what}: step {k}");
            }
        }
        let mut pos = vec![0usize; n];
        loop {
            let mut moved = false;
            for r in 0..n {
                let Some(st) = lists[r].get(pos[r]) else {
                    continue;
                };
                // The sender started the step: its position is at (or past) it.
                let ready = st.recv_from.is_none_or(|f| lists[f].get(pos[f]).is_none_or(|x| x.step >= st.step));
                if ready {
                    pos[r] += 1;
                    moved = true;
                }
            }
            if !moved {
                break;
            }
        }
        for r in 0..n {
            assert_eq!(pos[r], lists[r].len(), "{what}: rank {r} is stuck at {:?}", lists[r].get(pos[r]));
        }
    }

    fn each_table(mut f: impl FnMut(&str, &ComTable)) {
        for n in 1..=12 {
            for seed in 0..12 {
                for (name, t) in families(n, seed) {
                    f(&format!("{name} n={n} seed={seed}"), &t);
                }
            }
        }
    }

    #[test]
    fn every_schedule_delivers_each_demand_once_without_contention() {
        each_table(|what, t| {
            for &kind in ScheduleKind::ALL {
                let s = Schedule::build(kind, t);
                let what = format!("{kind} {what}");
                assert_valid(t, &s, &what);
                assert_runs_to_completion(&s, &what);
                assert_eq!(s.cost(t), cost(t, &s), "{what}: cost");
            }
        });
    }

    #[test]
    fn css_uses_exactly_max_degree_steps() {
        each_table(|what, t| {
            let d = degree(t);
            assert_eq!(t.max_degree(), d, "{what}");
            assert_eq!(css(t).len(), d, "{what}");
        });
    }

    /// Shift and pairwise use no more steps than N − 1, and css never more than either.
    #[test]
    fn step_counts_are_bounded() {
        each_table(|what, t| {
            let n = t.n();
            let (s, p, c) = (shift(t), pairwise(t), css(t));
            assert!(s.len() <= n.saturating_sub(1), "{what}");
            assert!(p.len() <= n.saturating_sub(1), "{what}");
            assert!(c.len() <= s.len().min(p.len()), "{what}");
        });
    }

    /// The least cost of any schedule with exactly Δ steps, by exhaustive search (edges
    /// heaviest first, each into a colour free at both ends, one empty colour tried per edge,
    /// branches cut at the best cost so far). For small tables only.
    fn optimum_with_max_degree_steps(t: &ComTable) -> u128 {
        fn go(
            k: usize,
            e: &[(usize, usize, u64)],
            busy: &mut [(Vec<bool>, Vec<bool>, u64)],
            cost: u128,
            best: &mut u128,
        ) {
            if cost >= *best {
                return;
            }
            let Some(&(u, v, w)) = e.get(k) else {
                *best = cost;
                return;
            };
            let mut tried_empty = false;
            for c in 0..busy.len() {
                if busy[c].0[u] || busy[c].1[v] {
                    continue;
                }
                let empty = busy[c].2 == 0;
                if empty && std::mem::replace(&mut tried_empty, true) {
                    continue;
                }
                busy[c].0[u] = true;
                busy[c].1[v] = true;
                if empty {
                    busy[c].2 = w;
                }
                go(k + 1, e, busy, cost + if empty { u128::from(w) } else { 0 }, best);
                busy[c].0[u] = false;
                busy[c].1[v] = false;
                if empty {
                    busy[c].2 = 0;
                }
            }
        }
        let n = t.n();
        let mut e = t.demands();
        e.sort_by_key(|x| std::cmp::Reverse(x.2));
        let mut busy = vec![(vec![false; n], vec![false; n], 0u64); degree(t)];
        let mut best = if e.is_empty() { 0 } else { u128::MAX };
        go(0, &e, &mut busy, 0, &mut best);
        best
    }

    /// css never costs more than shift, except where no schedule with Δ steps can: whenever
    /// shift itself has Δ steps (every dense table) css is at most its cost by construction,
    /// and on the sparse tables of up to 5 ranks where css costs more, the exhaustive search
    /// shows that every Δ-step schedule does. On the larger sparse ones it simply holds.
    #[test]
    fn css_costs_no_more_than_shift() {
        let (mut wins, mut random, mut all, mut forced) = (0, 0, 0, 0);
        each_table(|what, t| {
            let (c, s) = (cost(t, &css(t)), cost(t, &shift(t)));
            all += 1;
            // Random tables of 8 ranks or more: css should do strictly better.
            if t.n() >= 8 && !what.starts_with("equal") && !what.starts_with("zeros") {
                random += 1;
                wins += usize::from(c < s);
            }
            if c <= s {
                return;
            }
            assert!(shift(t).len() > degree(t) && t.n() <= 5, "{what}: css costs {c}, shift {s}\n{t:?}");
            let best = optimum_with_max_degree_steps(t);
            assert!(best > s, "{what}: css costs {c}, shift {s}, the best Δ-step schedule {best}");
            forced += 1;
        });
        assert!(wins * 20 >= random * 19, "css beat shift on only {wins} of {random} random tables of 8 ranks or more");
        assert!(forced < all / 100, "{forced} of {all} tables force css above shift");
    }

    /// The exhaustive search that the test above relies on finds what it should: the optimum
    /// of a table whose best Δ-step schedule is known.
    #[test]
    fn the_exhaustive_search_finds_the_known_optimum() {
        // Path 0 → 1 (10), 2 → 1 (1), 2 → 3 (1), 4 → 3 (10): two steps, each with a 10.
        let path = ComTable::from_fn(5, |i, j| match (i, j) {
            (0, 1) | (4, 3) => 10,
            (2, 1) | (2, 3) => 1,
            _ => 0,
        })
        .unwrap();
        assert_eq!(optimum_with_max_degree_steps(&path), 20);
        // Reversal with large messages, 1 elsewhere: one step of large ones, Δ − 1 of ones.
        let rev = ComTable::from_fn(4, |i, j| if i + j == 3 { 1000 } else { 1 }).unwrap();
        assert_eq!(optimum_with_max_degree_steps(&rev), 1002);
        assert_eq!(css(&rev).cost(&rev), 1002);
        for seed in 0..40 {
            for (name, t) in families(4, seed) {
                let best = optimum_with_max_degree_steps(&t);
                let c = cost(&t, &css(&t));
                assert!(best <= c, "{name} seed {seed}: the search found {best}, css {c}");
            }
        }
    }

    /// The schedules follow their definitions on a table where every pair talks.
    #[test]
    fn shift_and_pairwise_follow_their_formulas() {
        for n in 1..=12 {
            let t = ComTable::from_fn(n, |i, j| 1 + (i * 31 + j * 7) as u64 % 5).unwrap();
            let s = shift(&t);
            assert_eq!(s.len(), n - 1);
            for (k, step) in s.steps().iter().enumerate() {
                let want: Vec<_> = (0..n).map(|i| (i, (i + k + 1) % n)).collect();
                assert_eq!(step, &want, "shift n={n} step {k}");
            }
            let p = pairwise(&t);
            if n.is_power_of_two() {
                for (k, step) in p.steps().iter().enumerate() {
                    let want: Vec<_> = (0..n).map(|i| (i, i ^ (k + 1))).collect();
                    assert_eq!(step, &want, "pairwise n={n} step {k}");
                }
            } else {
                assert_eq!(p, s, "pairwise n={n} is shift");
            }
        }
    }

    /// Zero entries are not messages, the diagonal is never a step, and a step left with no
    /// message is dropped.
    #[test]
    fn zero_entries_and_the_diagonal_are_not_steps() {
        // Only 0 → 2 and 3 → 1 cross the network.
        let t = ComTable::from_fn(4, |i, j| match (i, j) {
            (0, 2) => 9,
            (3, 1) => 4,
            (i, j) if i == j => 100,
            _ => 0,
        })
        .unwrap();
        assert_eq!(t.max_degree(), 1);
        assert_eq!(t.demands(), vec![(0, 2, 9), (3, 1, 4)]);
        assert_eq!(css(&t).steps(), &[vec![(0, 2), (3, 1)]]);
        // 0 → 2 is shift's step p = 2, 3 → 1 also p = 2.
        assert_eq!(shift(&t).steps(), &[vec![(0, 2), (3, 1)]]);
        // 0 XOR 2 = 2 and 3 XOR 2 = 1: pairwise's step k = 2 holds both too.
        assert_eq!(pairwise(&t).steps(), &[vec![(0, 2), (3, 1)]]);
        for kind in ScheduleKind::ALL {
            let s = Schedule::build(*kind, &t);
            assert_eq!(s.rank_steps(1), vec![RankStep { step: s.len() - 1, send_to: None, recv_from: Some(3) }]);
            assert!(Schedule::build(*kind, &ComTable::uniform(1, 5).unwrap()).is_empty());
        }
        assert_eq!(pairwise(&t).rank_steps(0), vec![RankStep { step: 0, send_to: Some(2), recv_from: None }]);
        // Where pairwise and shift differ: 0 → 1 is shift's p = 1 and 1 → 0 its p = 3, while
        // pairwise exchanges 0 ↔ 1 in one step.
        let t = ComTable::from_fn(4, |i, j| u64::from((i, j) == (0, 1) || (i, j) == (1, 0))).unwrap();
        assert_eq!(shift(&t).steps(), &[vec![(0, 1)], vec![(1, 0)]]);
        assert_eq!(pairwise(&t).steps(), &[vec![(0, 1), (1, 0)]]);
    }

    /// css puts similar sizes together: with large messages along a permutation that shift
    /// spreads over three steps, css sends them all in one.
    #[test]
    fn css_groups_similar_sizes_where_shift_mixes_them() {
        // i → 5 − i is 1000 bytes, everything else 1: shift meets the large ones at p = 1, 3
        // and 5 (each step of length 5 − 2i mod 6).
        let n = 6;
        let t = ComTable::from_fn(n, |i, j| if i + j == n - 1 { 1000 } else { 1 }).unwrap();
        assert_eq!(shift(&t).cost(&t), 3 * 1000 + 2);
        let c = css(&t);
        assert_eq!(c.len(), n - 1);
        assert_eq!(c.cost(&t), 1000 + 4, "css: {:?}", c.steps());
        let large: Vec<_> = (0..n).map(|i| (i, n - 1 - i)).collect();
        assert_eq!(c.step(0), &large[..], "the large messages share the first step");
    }

    /// The colouring alone, before any local search, already groups by size: edges taken
    /// heaviest first fill the first step with the large messages of a matching. (N even: for
    /// odd N the reversal keeps one rank's part local, and that rank's Δ messages need every
    /// step, the first included, so one large message must leave it.)
    #[test]
    fn heaviest_first_colouring_alone_groups_the_large_messages() {
        for n in [4, 6, 8, 10] {
            let t = ComTable::from_fn(n, |i, j| if i + j == n - 1 { 1000 } else { 1 }).unwrap();
            for recolour_first in [false, true] {
                let c = Colouring::heaviest_first(&t, n - 1, recolour_first);
                let want = 1000 + (n as u128 - 2);
                assert_eq!(c.cost(), want, "n={n} recolour_first={recolour_first}");
                assert_valid(&t, &c.into_schedule(), &format!("n={n}"));
            }
        }
    }

    /// With exactly Δ steps a schedule can cost more than one with more steps: shift meets
    /// this table's two largest messages in one step, which only a third step allows.
    #[test]
    fn exactly_max_degree_steps_can_cost_more_than_shift_on_sparse_tables() {
        let t = ComTable::from_rows(&[
            vec![0, 522, 0, 0],
            vec![0, 0, 297, 0],
            vec![336, 3630, 0, 0],
            vec![516, 0, 8932, 0],
        ])
        .unwrap();
        // Δ = 2. With two steps, 3 → 2 (8932) and 2 → 1 (3630) cannot share one: 2 → 0 and
        // 3 → 0 go to the same receiver, so one of them is in the step of 8932, and it shares
        // a sender with 8932 or 3630.
        let c = css(&t);
        assert_eq!(c.len(), 2);
        assert_eq!(c.cost(&t), 8932 + 3630);
        assert_eq!(optimum_with_max_degree_steps(&t), 8932 + 3630);
        let s = shift(&t);
        assert_eq!(s.steps(), &[vec![(0, 1), (1, 2), (3, 0)], vec![(2, 0)], vec![(2, 1), (3, 2)]]);
        assert_eq!(s.cost(&t), 522 + 336 + 8932);
    }

    /// After css no swap of colours inside alternating components of two of its steps lowers
    /// the cost (the local search ran to its end), on every test table. Checked here from
    /// scratch: for each pair of steps, every way of orienting each component is summarised
    /// by the exact pair optimum (largest message overall + largest lighter side).
    #[test]
    fn css_is_a_local_optimum_of_two_step_swaps() {
        each_table(|what, t| {
            let s = css(t);
            let n = t.n();
            let step_max = |k: usize| s.step(k).iter().map(|&(i, j)| t.get(i, j)).max().unwrap();
            for a in 0..s.len() {
                for b in a + 1..s.len() {
                    // Components of the two matchings, by flooding over shared endpoints.
                    let edges: Vec<(usize, usize, bool)> = s
                        .step(a)
                        .iter()
                        .map(|&(i, j)| (i, j, true))
                        .chain(s.step(b).iter().map(|&(i, j)| (i, j, false)))
                        .collect();
                    let mut comp = vec![usize::MAX; edges.len()];
                    let (mut heavy, mut light) = (0u64, 0u64);
                    for first in 0..edges.len() {
                        if comp[first] != usize::MAX {
                            continue;
                        }
                        comp[first] = first;
                        let mut stack = vec![first];
                        let (mut pa, mut pb) = (0u64, 0u64);
                        while let Some(e) = stack.pop() {
                            let (i, j, in_a) = edges[e];
                            let w = t.get(i, j);
                            if in_a {
                                pa = pa.max(w)
                            } else {
                                pb = pb.max(w)
                            }
                            for (f, &(i2, j2, _)) in edges.iter().enumerate() {
                                if comp[f] == usize::MAX && (i2 == i || j2 == j) {
                                    comp[f] = first;
                                    stack.push(f);
                                }
                            }
                        }
                        heavy = heavy.max(pa.max(pb));
                        light = light.max(pa.min(pb));
                    }
                    let now = u128::from(step_max(a)) + u128::from(step_max(b));
                    assert!(
                        u128::from(heavy) + u128::from(light) >= now,
                        "{what} (n={n}): swapping inside steps {a} and {b} lowers {now} to {}",
                        u128::from(heavy) + u128::from(light)
                    );
                }
            }
        });
    }

    #[test]
    fn bad_tables_and_schedules_are_refused_with_the_problem_named() {
        let e = ComTable::new(3, vec![0; 8]).unwrap_err().to_string();
        assert!(e.contains("9 entries") && e.contains("got 8"), "{e}");
        let e = ComTable::new(0, vec![]).unwrap_err().to_string();
        assert!(e.contains("at least one rank"), "{e}");
        let e = ComTable::from_rows(&[vec![1, 2], vec![3]]).unwrap_err().to_string();
        assert!(e.contains("row 1") && e.contains("square"), "{e}");
        let e = ComTable::uniform(usize::MAX / 2, 1).unwrap_err().to_string();
        assert!(e.contains("cannot allocate a table"), "{e}");
        let e = ComTable::uniform(2, u64::MAX).unwrap().scaled(2).unwrap_err().to_string();
        assert!(e.contains("overflows"), "{e}");

        let e = Schedule::from_steps(3, vec![vec![(0, 1), (2, 1)]]).unwrap_err().to_string();
        assert!(e.contains("two senders to rank 1"), "{e}");
        let e = Schedule::from_steps(3, vec![vec![(0, 1), (0, 2)]]).unwrap_err().to_string();
        assert!(e.contains("rank 0 sending twice"), "{e}");
        let e = Schedule::from_steps(3, vec![vec![], vec![(2, 2)]]).unwrap_err().to_string();
        assert!(e.contains("step 1") && e.contains("itself"), "{e}");
        let e = Schedule::from_steps(3, vec![vec![(0, 3)]]).unwrap_err().to_string();
        assert!(e.contains("0 → 3"), "{e}");

        let t = ComTable::from_rows(&[vec![0, 5, 0], vec![1, 0, 0], vec![0, 0, 0]]).unwrap();
        let ok = Schedule::from_steps(3, vec![vec![(0, 1), (1, 0)]]).unwrap();
        ok.check(&t).unwrap();
        let missing = Schedule::from_steps(3, vec![vec![(0, 1)]]).unwrap();
        let e = missing.check(&t).unwrap_err().to_string();
        assert!(e.contains("never sends 1 → 0"), "{e}");
        let twice = Schedule::from_steps(3, vec![vec![(0, 1), (1, 0)], vec![(0, 1)]]).unwrap();
        let e = twice.check(&t).unwrap_err().to_string();
        assert!(e.contains("0 → 1 twice"), "{e}");
        let zero = Schedule::from_steps(3, vec![vec![(0, 1), (1, 0)], vec![(2, 0)]]).unwrap();
        let e = zero.check(&t).unwrap_err().to_string();
        assert!(e.contains("2 → 0") && e.contains("0 bytes"), "{e}");
        let e = ok.check(&ComTable::uniform(2, 1).unwrap()).unwrap_err().to_string();
        assert!(e.contains("3 ranks") && e.contains("for 2"), "{e}");

        let e = "ring".parse::<ScheduleKind>().unwrap_err().to_string();
        assert!(e.contains("\"ring\"") && e.contains("css"), "{e}");
        for &k in ScheduleKind::ALL {
            assert_eq!(k.name().parse::<ScheduleKind>().unwrap(), k);
            assert_eq!(ScheduleKind::from_code(k.code()), Some(k));
        }
    }

    /// Fingerprints tell different tables and schedules apart.
    #[test]
    fn fingerprints_differ_when_the_contents_do() {
        let a = ComTable::uniform(3, 4).unwrap();
        let b = ComTable::from_fn(3, |i, j| if (i, j) == (2, 1) { 5 } else { 4 }).unwrap();
        assert_ne!(a.fingerprint(), b.fingerprint());
        assert_eq!(a.fingerprint(), a.clone().fingerprint());
        assert_ne!(shift(&a).fingerprint(), css(&b).fingerprint().wrapping_add(1));
        let t = ComTable::uniform(4, 1).unwrap();
        assert_ne!(shift(&t).fingerprint(), pairwise(&t).fingerprint());
    }
}
