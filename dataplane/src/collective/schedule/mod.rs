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
//!
//! # Layout
//! `table` holds the [`ComTable`], `steps` the [`Schedule`] and its invariants, `colouring` the
//! edge colouring and local search behind [`css`]; this file the kinds and the three builders.
//! The other files never import this one.

mod colouring;
mod steps;
mod table;
#[cfg(test)]
pub(crate) mod tests;

use std::fmt;
use std::str::FromStr;

use crate::error::{Error, Result};

use colouring::Colouring;
pub use steps::{RankStep, Schedule};
pub use table::ComTable;

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

impl Schedule {
    /// The schedule of `kind` for `table`.
    pub fn build(kind: ScheduleKind, table: &ComTable) -> Schedule {
        match kind {
            ScheduleKind::Shift => shift(table),
            ScheduleKind::Pairwise => pairwise(table),
            ScheduleKind::Css => css(table),
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

/// The contention-free schedule with exactly Δ steps, similar sizes together (see the module
/// documentation). Steps are ordered by their largest message, largest first.
pub fn css(table: &ComTable) -> Schedule {
    let n = table.n();
    let delta = table.max_degree();
    if delta == 0 {
        return Schedule::normalized(n, vec![]);
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
