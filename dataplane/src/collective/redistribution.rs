//! Block-cyclic redistribution (seed 004): the communication table of moving an array from
//! cyclic(x) on P processors to cyclic(y) on Q processors, its periodic structure, and the
//! seed's two schedules for it. Pure.
//!
//! Element g lives on source processor ⌊g/x⌋ mod P and goes to destination processor
//! ⌊g/y⌋ mod Q. The pattern repeats every L = lcm(P·x, Q·y) elements, so one period is all a
//! table needs ([`BlockCyclic::counts`]; k periods are the same table scaled by k).
//!
//! **The recurrence** (the seed's Theorem 1, for a plain redistribution). Shifting every element
//! by M = lcm(x, y) moves whole source blocks and whole destination blocks, so
//! `COM(i, j) = COM((i + m) mod P, (j + n) mod Q)` with m = M/x and n = M/y. The table splits
//! into orbits of this shift, each of lcm(s, t) equal entries, where s = P / gcd(P, m) and
//! t = Q / gcd(Q, n); the orbits of one (sender mod gcd(P, m), receiver mod gcd(Q, n)) class
//! form the seed's s × t sub-matrices. The table is computed from that: one stretch of M
//! elements is cut into the pieces where a source block meets a destination block (M/x + M/y
//! pieces at most), and each piece adds its length to its orbit. O(M/x + M/y + P·Q).
//!
//! **Algorithm 1** (closed form, [`BlockCyclic::algorithm1`]): when gcd(m, P) = 1 and
//! Q / gcd(Q, n) = P (this is the seed's condition as far as its text can be read; it is the
//! one that makes the construction below a schedule), every orbit has exactly one entry per
//! sender, at distinct receivers. Column c of the seed's CS table starts at sender 0 → receiver
//! c and follows the recurrence: sender (k·m) mod P → receiver (c + k·n) mod Q, k = 0 … P−1.
//! So every step holds one orbit: every sender sends at once, to distinct receivers, messages
//! of one length. Q steps (fewer when an orbit is empty); O(P·Q).
//!
//! **Algorithm 2** (greedy sort-and-fill, [`BlockCyclic::algorithm2`]), for any parameters: the
//! orbits (groups of equal entries) are sorted by size, largest first, and each step is filled
//! by walking them in that order — the entries of a group in recurrence order, alternately
//! forwards and backwards from one step to the next — taking every entry whose sender and
//! receiver are still free in the step. The seed lets a sender send several messages in one
//! "big step" to even out the step's sizes; here a step holds at most one message per sender
//! and per receiver, like every schedule of the data plane, so each step is a maximal
//! matching of what is left, and there are at most 2Δ − 1 steps. O(steps · P·Q).
//!
//! Placement ([`Placement`]): the seed's source and destination processors are two groups. In
//! a job they are often the same ranks ([`Placement::Shared`]: rank r is source r and
//! destination r, N = max(P, Q), and what a rank keeps is a local copy, not a step) or two
//! different sets ([`Placement::Disjoint`]: sources are ranks 0..P, destinations P..P+Q).
//!
//! How they compare (sum over steps of the largest message, every P, Q, x, y in 1..=8, 4,096
//! tables, measured once): on disjoint ranks css costs 0.75 of shift in total and Algorithm 2
//! 0.77 (never more than shift, but above css in 525 tables, with more than Δ steps in 560);
//! Algorithm 1 applies to 393 tables and costs exactly what css does on every one. On shared
//! ranks everything is closer to shift, whose steps already pair each rank with a fixed
//! offset: css 0.99, Algorithm 2 1.03 (above shift in 778 tables), and Algorithm 1 above css
//! in 81 of its 393, since a step that loses its local part still needs a step of its own.

use super::schedule::{ComTable, Schedule};
use crate::error::{Error, Result};

/// Most pieces one stretch of lcm(x, y) elements may be cut into (M/x + M/y): beyond this the
/// table would take longer to compute than a redistribution of the blocks it describes.
const MAX_PIECES: u64 = 1 << 26;
/// Most entries P·Q of a table (512 MiB of counts): far beyond any group the data plane runs,
/// and a bound on what [`BlockCyclic::new`] allocates.
const MAX_ENTRIES: usize = 1 << 26;

/// How the source and destination processors map onto the ranks of one group.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Placement {
    /// Rank r is source processor r (if r < P) and destination processor r (if r < Q);
    /// N = max(P, Q). What a rank sends itself is a local copy.
    Shared,
    /// Source processors are ranks 0..P, destination processors ranks P..P+Q; N = P + Q.
    Disjoint,
}

/// A redistribution from cyclic(x) on P processors to cyclic(y) on Q processors, with its table
/// for one period.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BlockCyclic {
    p: usize,
    x: u64,
    q: usize,
    y: u64,
    period: u64,
    /// The recurrence's shifts, m mod P and n mod Q.
    m: usize,
    n: usize,
    /// gcd(P, m), s = P / g1, and the inverse of m / g1 modulo s (0 when s = 1).
    g1: usize,
    s: usize,
    m_inv: usize,
    /// gcd(Q, s·n): receivers an orbit reaches from one sender step by this.
    g3: usize,
    /// Orbit size lcm(s, t).
    orbit_len: usize,
    /// Elements each source processor sends each destination processor in one period, P × Q.
    counts: Vec<u64>,
}

impl BlockCyclic {
    /// The redistribution cyclic(`x`) on `p` processors → cyclic(`y`) on `q` processors.
    pub fn new(p: usize, x: u64, q: usize, y: u64) -> Result<BlockCyclic> {
        for (what, v) in [
            ("source processors P", p as u64),
            ("source block x", x),
            ("destination processors Q", q as u64),
            ("destination block y", y),
        ] {
            if v == 0 {
                return Err(Error::Config(format!("a block-cyclic redistribution needs at least 1 for {what}")));
            }
        }
        if p.checked_mul(q).is_none_or(|e| e > MAX_ENTRIES) {
            return Err(Error::Config(format!("a table of {p} × {q} processors is over {MAX_ENTRIES} entries")));
        }
        let too_big =
            || Error::Config(format!("the period of cyclic({x}) on {p} → cyclic({y}) on {q} does not fit in 64 bits"));
        let px = (p as u128).checked_mul(u128::from(x)).ok_or_else(too_big)?;
        let qy = (q as u128).checked_mul(u128::from(y)).ok_or_else(too_big)?;
        let period = lcm128(px, qy).ok_or_else(too_big)?;
        let period = u64::try_from(period).map_err(|_| too_big())?;
        let big_m = lcm128(u128::from(x), u128::from(y)).ok_or_else(too_big)?;
        let (mx, my) = (big_m / u128::from(x), big_m / u128::from(y));
        if mx + my > u128::from(MAX_PIECES) {
            return Err(Error::Config(format!(
                "cyclic({x}) → cyclic({y}) cuts every {big_m} elements into {} pieces, over {MAX_PIECES}",
                mx + my
            )));
        }
        let m = (mx % p as u128) as usize;
        let n = (my % q as u128) as usize;
        let g1 = gcd(p, m);
        let s = p / g1;
        let m_inv = if s == 1 { 0 } else { mod_inverse(m / g1 % s, s) };
        let t = q / gcd(q, n);
        let g3 = gcd(q, (s as u128 * n as u128 % q as u128) as usize);
        let orbit_len = s / gcd(s, t) * t;
        let mut bc = BlockCyclic { p, x, q, y, period, m, n, g1, s, m_inv, g3, orbit_len, counts: Vec::new() };
        // One stretch of M elements, cut where a source or destination block ends: each piece
        // adds its length to its orbit (see the module documentation).
        let big_m = big_m as u64;
        let mut per_orbit = vec![0u64; g1 * g3];
        let mut pos = 0u64;
        while pos < big_m {
            let (a, c) = (pos / x, pos / y);
            let end = ((a + 1) * x).min((c + 1) * y);
            let i = (a % p as u64) as usize;
            let j = (c % q as u64) as usize;
            per_orbit[bc.orbit_id(i, j)] += end - pos;
            pos = end;
        }
        bc.counts =
            (0..p).flat_map(|i| (0..q).map(move |j| (i, j))).map(|(i, j)| per_orbit[bc.orbit_id(i, j)]).collect();
        Ok(bc)
    }

    /// Source processors P.
    pub fn src_procs(&self) -> usize {
        self.p
    }

    /// Destination processors Q.
    pub fn dst_procs(&self) -> usize {
        self.q
    }

    /// Elements in one period, lcm(P·x, Q·y).
    pub fn period(&self) -> u64 {
        self.period
    }

    /// The recurrence's shifts (m mod P, n mod Q): `COM(i, j) = COM(i + m, j + n)`.
    pub fn recurrence(&self) -> (usize, usize) {
        (self.m, self.n)
    }

    /// How many equal entries each orbit of the recurrence has, lcm(s, t).
    pub fn orbit_len(&self) -> usize {
        self.orbit_len
    }

    /// Elements source processor `i` sends destination processor `j` in one period.
    pub fn count(&self, i: usize, j: usize) -> u64 {
        self.counts[i * self.q + j]
    }

    /// Every count, P × Q, row = source processor.
    pub fn counts(&self) -> &[u64] {
        &self.counts
    }

    /// The number of ranks under `placement`.
    pub fn ranks(&self, placement: Placement) -> usize {
        match placement {
            Placement::Shared => self.p.max(self.q),
            Placement::Disjoint => self.p + self.q,
        }
    }

    /// (sender rank, receiver rank) of source `i` and destination `j`.
    fn place(&self, placement: Placement, i: usize, j: usize) -> (usize, usize) {
        match placement {
            Placement::Shared => (i, j),
            Placement::Disjoint => (i, self.p + j),
        }
    }

    /// The table of one period in elements, on the ranks of `placement` (scale it by the
    /// element size for bytes, by k for k periods).
    pub fn table(&self, placement: Placement) -> ComTable {
        let n = self.ranks(placement);
        let mut bytes = vec![0u64; n * n];
        for i in 0..self.p {
            for j in 0..self.q {
                let (a, b) = self.place(placement, i, j);
                bytes[a * n + b] = self.count(i, j);
            }
        }
        ComTable::new(n, bytes).expect("n ≥ 1 and n × n entries")
    }

    /// The orbit of (i, j) under the recurrence, as an index below gcd(P, m) · gcd(Q, s·n):
    /// (i, j) is moved back along the recurrence to sender i mod gcd(P, m), and its receiver
    /// there reduced modulo the receiver step of the orbit at a fixed sender.
    fn orbit_id(&self, i: usize, j: usize) -> usize {
        let i0 = i % self.g1;
        let k = ((i - i0) / self.g1) as u128 * self.m_inv as u128 % self.s as u128;
        let back = (k * self.n as u128 % self.q as u128) as usize;
        let j1 = (j + self.q - back) % self.q;
        i0 * self.g3 + j1 % self.g3
    }

    /// The members of the orbit through (i, j), in recurrence order.
    fn orbit(&self, i: usize, j: usize) -> impl Iterator<Item = (usize, usize)> + '_ {
        (0..self.orbit_len).map(move |k| {
            (
                ((i as u128 + k as u128 * self.m as u128) % self.p as u128) as usize,
                ((j as u128 + k as u128 * self.n as u128) % self.q as u128) as usize,
            )
        })
    }

    /// The seed's schedule for `table`, the exchange of an actual array (whole periods and
    /// perhaps part of one, so every pair it sends is a pair of one period's table): Algorithm 1
    /// where it applies, else Algorithm 2, without the pairs that carry nothing in `table` and
    /// the steps left empty.
    pub fn seed_schedule(&self, table: &ComTable, placement: Placement) -> Result<Schedule> {
        let full = self.algorithm1(placement).unwrap_or_else(|| self.algorithm2(placement));
        let steps: Vec<Vec<(usize, usize)>> = full
            .steps()
            .iter()
            .map(|step| step.iter().copied().filter(|&(i, j)| table.get(i, j) > 0).collect::<Vec<_>>())
            .filter(|step| !step.is_empty())
            .collect();
        let schedule = Schedule::from_steps(table.n(), steps)?;
        schedule.check(table)?;
        Ok(schedule)
    }

    /// Whether Algorithm 1 applies: gcd(m, P) = 1 and Q / gcd(Q, n) = P.
    pub fn algorithm1_applies(&self) -> bool {
        self.g1 == 1 && self.q / gcd(self.q, self.n) == self.p
    }

    /// The seed's Algorithm 1, when it applies (else `None`): row 0 of the CS table is the
    /// receivers in order, and the recurrence fills the rest, so step c is the orbit through
    /// (0, c). Zero entries, and under [`Placement::Shared`] the local parts, are left out;
    /// steps left empty are dropped.
    pub fn algorithm1(&self, placement: Placement) -> Option<Schedule> {
        if !self.algorithm1_applies() {
            return None;
        }
        let steps = (0..self.q)
            .map(|c| {
                self.orbit(0, c)
                    .filter(|&(i, j)| self.count(i, j) > 0)
                    .map(|(i, j)| self.place(placement, i, j))
                    .filter(|&(a, b)| a != b)
                    .collect()
            })
            .collect();
        Some(
            Schedule::from_steps(self.ranks(placement), steps)
                .expect("an orbit has one entry per sender at distinct receivers"),
        )
    }

    /// The seed's Algorithm 2 (greedy sort-and-fill over the orbit groups), for any
    /// parameters; see the module documentation.
    pub fn algorithm2(&self, placement: Placement) -> Schedule {
        let n = self.ranks(placement);
        // One representative per non-empty orbit, with its members and size.
        let mut seen = vec![false; self.g1 * self.g3];
        let mut groups: Vec<Group> = Vec::new();
        for i in 0..self.p {
            for j in 0..self.q {
                let id = self.orbit_id(i, j);
                if std::mem::replace(&mut seen[id], true) || self.count(i, j) == 0 {
                    continue;
                }
                let members = self
                    .orbit(i, j)
                    .map(|(a, b)| self.place(placement, a, b))
                    .filter(|&(a, b)| a != b)
                    .collect::<Vec<_>>();
                if !members.is_empty() {
                    groups.push((self.count(i, j), id, members));
                }
            }
        }
        groups.sort_by(|a, b| b.0.cmp(&a.0).then(a.1.cmp(&b.1)));
        let mut done: Vec<Vec<bool>> = groups.iter().map(|g| vec![false; g.2.len()]).collect();
        let mut left: usize = groups.iter().map(|g| g.2.len()).sum();
        let mut steps = Vec::new();
        while left > 0 {
            let forwards = steps.len() % 2 == 0;
            let mut busy_send = vec![false; n];
            let mut busy_recv = vec![false; n];
            let mut step = Vec::new();
            for (g, (_, _, members)) in groups.iter().enumerate() {
                let len = members.len();
                for e in 0..len {
                    let e = if forwards { e } else { len - 1 - e };
                    let (a, b) = members[e];
                    if done[g][e] || busy_send[a] || busy_recv[b] {
                        continue;
                    }
                    busy_send[a] = true;
                    busy_recv[b] = true;
                    done[g][e] = true;
                    step.push((a, b));
                    left -= 1;
                }
            }
            steps.push(step);
        }
        Schedule::from_steps(n, steps).expect("each step takes free senders and receivers only")
    }
}

/// One orbit of the recurrence for Algorithm 2: its entries' size, its index, and its members
/// as (sender rank, receiver rank) in recurrence order, local parts left out.
type Group = (u64, usize, Vec<(usize, usize)>);

fn gcd(mut a: usize, mut b: usize) -> usize {
    while b != 0 {
        (a, b) = (b, a % b);
    }
    a
}

fn lcm128(a: u128, b: u128) -> Option<u128> {
    let (mut x, mut y) = (a, b);
    while y != 0 {
        (x, y) = (y, x % y);
    }
    (a / x).checked_mul(b)
}

/// The inverse of `a` modulo `m` (gcd(a, m) = 1, m ≥ 2), by the extended Euclidean algorithm.
fn mod_inverse(a: usize, m: usize) -> usize {
    let (mut r0, mut r1) = (m as i128, a as i128);
    let (mut t0, mut t1) = (0i128, 1i128);
    while r1 != 0 {
        let q = r0 / r1;
        (r0, r1) = (r1, r0 - q * r1);
        (t0, t1) = (t1, t0 - q * t1);
    }
    debug_assert_eq!(r0, 1, "{a} has no inverse modulo {m}");
    t0.rem_euclid(m as i128) as usize
}

/// The element-level layout of a redistribution of one array of `n` elements from cyclic(x)
/// over P ranks to cyclic(y) over Q ranks: what each source sends each destination, and where a
/// destination puts what it receives. A rank's local array holds its blocks in global order.
///
/// Both directions walk *runs*: the longest stretches of a rank's local array that stay in one
/// block of the other distribution, so copying costs O(len / min(x, y)) slices, not one per
/// element.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CyclicLayout {
    pub p: usize,
    pub x: u64,
    pub q: usize,
    pub y: u64,
}

impl CyclicLayout {
    pub fn new(p: usize, x: u64, q: usize, y: u64) -> Result<CyclicLayout> {
        if p == 0 || q == 0 || x == 0 || y == 0 {
            return Err(Error::Config(format!(
                "a redistribution from cyclic({x}) over {p} to cyclic({y}) over {q}: every count must be at least 1"
            )));
        }
        Ok(CyclicLayout { p, x, q, y })
    }

    /// How many of `n` elements rank `r` of a cyclic(`block`) distribution over `procs` holds.
    pub fn local_len(n: u64, procs: usize, block: u64, r: usize) -> u64 {
        let cycle = procs as u64 * block;
        let (full, rest) = (n / cycle, n % cycle);
        full * block + rest.saturating_sub(r as u64 * block).min(block)
    }

    /// The array's length from the sources' local lengths, when they are those of one array
    /// distributed cyclic(x) over P; else an error naming the first source that does not fit.
    pub fn check_sources(&self, lens: &[u64]) -> Result<u64> {
        if lens.len() != self.p {
            return Err(Error::Config(format!("{} source lengths for {} sources", lens.len(), self.p)));
        }
        let n = lens
            .iter()
            .try_fold(0u64, |a, &l| a.checked_add(l))
            .ok_or_else(|| Error::Config("the sources hold more than 2⁶⁴ elements".into()))?;
        for (r, &l) in lens.iter().enumerate() {
            let want = Self::local_len(n, self.p, self.x, r);
            if l != want {
                return Err(Error::Config(format!(
                    "the inputs are not one array distributed cyclic({}) over {}: source {r} holds {l} elements, an array of {n} elements gives it {want}",
                    self.x, self.p
                )));
            }
        }
        Ok(n)
    }

    /// Source `src`'s runs, `(local offset, length, destination)`, over its `len` elements.
    fn source_runs(&self, src: usize, len: u64) -> Runs {
        Runs {
            rank: src as u64,
            procs: self.p as u64,
            block: self.x,
            other_procs: self.q as u64,
            other_block: self.y,
            len,
            k: 0,
        }
    }

    /// Destination `dst`'s runs, `(local offset, length, source)`, over its `len` elements.
    fn destination_runs(&self, dst: usize, len: u64) -> Runs {
        Runs {
            rank: dst as u64,
            procs: self.q as u64,
            block: self.y,
            other_procs: self.p as u64,
            other_block: self.x,
            len,
            k: 0,
        }
    }

    /// Elements source `src`, holding `len`, sends each destination (Q counts).
    pub fn send_counts(&self, src: usize, len: u64) -> Vec<u64> {
        let mut counts = vec![0u64; self.q];
        for (_, l, d) in self.source_runs(src, len) {
            counts[d] += l;
        }
        counts
    }

    /// Source `src`'s local array (`elem` bytes an element) cut into what each destination
    /// receives, in the destination's order (Q parts).
    pub fn pack(&self, src: usize, local: &[u8], elem: usize) -> Result<Vec<Vec<u8>>> {
        if elem == 0 || !local.len().is_multiple_of(elem) {
            return Err(Error::Config(format!(
                "a local array of {} bytes is not whole elements of {elem} bytes",
                local.len()
            )));
        }
        let len = (local.len() / elem) as u64;
        let mut parts: Vec<Vec<u8>> =
            self.send_counts(src, len).into_iter().map(|c| Vec::with_capacity(c as usize * elem)).collect();
        for (k, l, d) in self.source_runs(src, len) {
            parts[d].extend_from_slice(&local[k as usize * elem..(k + l) as usize * elem]);
        }
        Ok(parts)
    }

    /// Destination `dst`'s local array from what each source sent it (P parts, in source order),
    /// checking that each part is exactly what the layout takes from that source.
    pub fn unpack(&self, dst: usize, parts: &[&[u8]], elem: usize) -> Result<Vec<u8>> {
        if parts.len() != self.p {
            return Err(Error::Config(format!("{} parts for {} sources", parts.len(), self.p)));
        }
        if elem == 0 {
            return Err(Error::Config("an element of 0 bytes".into()));
        }
        let total: usize = parts.iter().map(|b| b.len()).sum();
        if let Some((s, b)) = parts.iter().enumerate().find(|(_, b)| !b.len().is_multiple_of(elem)) {
            return Err(Error::Config(format!(
                "source {s} sent {} bytes, not whole elements of {elem} bytes",
                b.len()
            )));
        }
        let mut out = vec![0u8; total];
        let mut at = vec![0usize; self.p];
        for (k, l, s) in self.destination_runs(dst, (total / elem) as u64) {
            let (from, bytes) = (at[s], l as usize * elem);
            let Some(run) = parts[s].get(from..from + bytes) else {
                return Err(Error::Config(format!(
                    "destination {dst} needs more elements from source {s} than the {} it sent",
                    parts[s].len() / elem
                )));
            };
            out[k as usize * elem..k as usize * elem + bytes].copy_from_slice(run);
            at[s] += bytes;
        }
        if let Some(s) = (0..self.p).find(|&s| at[s] != parts[s].len()) {
            return Err(Error::Config(format!(
                "source {s} sent destination {dst} {} elements, its layout takes {}",
                parts[s].len() / elem,
                at[s] / elem
            )));
        }
        Ok(out)
    }
}

/// The runs of one rank's local array: see [`CyclicLayout`].
struct Runs {
    rank: u64,
    procs: u64,
    block: u64,
    other_procs: u64,
    other_block: u64,
    len: u64,
    k: u64,
}

impl Iterator for Runs {
    /// (local offset, length, owner under the other distribution)
    type Item = (u64, u64, usize);

    fn next(&mut self) -> Option<(u64, u64, usize)> {
        if self.k >= self.len {
            return None;
        }
        let (b, off) = (self.k / self.block, self.k % self.block);
        let g = (b * self.procs + self.rank) * self.block + off;
        let l = (self.block - off).min(self.other_block - g % self.other_block).min(self.len - self.k);
        let owner = ((g / self.other_block) % self.other_procs) as usize;
        let run = (self.k, l, owner);
        self.k += l;
        Some(run)
    }
}

#[cfg(test)]
mod tests {
    use super::super::schedule::tests::{assert_runs_to_completion, assert_valid};
    use super::super::schedule::{css, shift};
    use super::*;

    /// Every (P, x, Q, y) with P, Q ≤ 6 and blocks ≤ 6.
    fn all_params() -> impl Iterator<Item = (usize, u64, usize, u64)> {
        (1..=6).flat_map(|p| (1..=6).flat_map(move |x| (1..=6).flat_map(move |q| (1..=6).map(move |y| (p, x, q, y)))))
    }

    /// The counts of one period, element by element.
    fn brute_force(p: usize, x: u64, q: usize, y: u64) -> (u64, Vec<u64>) {
        let mut l = 1u64;
        while !l.is_multiple_of(p as u64 * x) || !l.is_multiple_of(q as u64 * y) {
            l += 1;
        }
        let mut c = vec![0u64; p * q];
        for g in 0..l {
            let i = (g / x) as usize % p;
            let j = (g / y) as usize % q;
            c[i * q + j] += 1;
        }
        (l, c)
    }

    #[test]
    fn the_table_counts_every_element_of_a_period() {
        for (p, x, q, y) in all_params() {
            let bc = BlockCyclic::new(p, x, q, y).unwrap();
            let what = format!("cyclic({x}) on {p} → cyclic({y}) on {q}");
            let (l, c) = brute_force(p, x, q, y);
            assert_eq!(bc.period(), l, "{what}");
            assert_eq!(bc.counts(), &c[..], "{what}");
            assert_eq!(bc.counts().iter().sum::<u64>(), l, "{what}");
            let shared = bc.table(Placement::Shared);
            let disjoint = bc.table(Placement::Disjoint);
            assert_eq!((shared.n(), disjoint.n()), (p.max(q), p + q), "{what}");
            for a in 0..shared.n() {
                for b in 0..shared.n() {
                    let want = if a < p && b < q { c[a * q + b] } else { 0 };
                    assert_eq!(shared.get(a, b), want, "{what}: shared ({a}, {b})");
                }
            }
            for a in 0..p + q {
                for b in 0..p + q {
                    let want = if a < p && b >= p { c[a * q + b - p] } else { 0 };
                    assert_eq!(disjoint.get(a, b), want, "{what}: disjoint ({a}, {b})");
                }
            }
        }
    }

    /// The seed's Theorem 1 on the brute-force counts: COM(i, j) = COM(i + m, j + n), the
    /// orbits have lcm(s, t) members each, and the orbit index the table is computed with
    /// names exactly the orbits.
    #[test]
    fn the_recurrence_holds_and_orbits_are_what_the_index_says() {
        for (p, x, q, y) in all_params() {
            let bc = BlockCyclic::new(p, x, q, y).unwrap();
            let what = format!("cyclic({x}) on {p} → cyclic({y}) on {q}");
            let (_, c) = brute_force(p, x, q, y);
            let (m, n) = bc.recurrence();
            let lxy = (1..).map(|k| k * x).find(|v| v % y == 0).unwrap();
            assert_eq!((m, n), ((lxy / x) as usize % p, (lxy / y) as usize % q), "{what}");
            for i in 0..p {
                for j in 0..q {
                    assert_eq!(c[i * q + j], c[(i + m) % p * q + (j + n) % q], "{what} ({i}, {j})");
                    let members: Vec<_> = bc.orbit(i, j).collect();
                    let mut distinct = members.clone();
                    distinct.sort_unstable();
                    distinct.dedup();
                    assert_eq!(distinct.len(), bc.orbit_len(), "{what}: orbit of ({i}, {j})");
                    for (a, b) in members {
                        assert_eq!(bc.orbit_id(a, b), bc.orbit_id(i, j), "{what}");
                    }
                }
            }
            let mut ids: Vec<usize> =
                (0..p).flat_map(|i| (0..q).map(move |j| (i, j))).map(|(i, j)| bc.orbit_id(i, j)).collect();
            ids.sort_unstable();
            ids.dedup();
            assert_eq!(ids.len() * bc.orbit_len(), p * q, "{what}: orbit count");
        }
    }

    /// The seed's own example: cyclic(4) on 5 processors to cyclic(3) on 5. Its Figure 2(c)
    /// prints the table with a row per receiver, and its Figure 4(c) the schedule Algorithm 1
    /// gives (row = sender, column = step, entry = receiver).
    #[test]
    fn the_seeds_example_comes_out_as_printed() {
        let bc = BlockCyclic::new(5, 4, 5, 3).unwrap();
        let figure_2c = [[3, 3, 2, 2, 2], [2, 2, 3, 3, 2], [3, 2, 2, 2, 3], [2, 3, 3, 2, 2], [2, 2, 2, 3, 3]];
        for (j, row) in figure_2c.iter().enumerate() {
            for (i, &v) in row.iter().enumerate() {
                assert_eq!(bc.count(i, j), v, "sender {i} → receiver {j}");
            }
        }
        assert_eq!(bc.period(), 60);
        assert!(bc.algorithm1_applies());
        let figure_4c = [[0, 1, 2, 3, 4], [3, 4, 0, 1, 2], [1, 2, 3, 4, 0], [4, 0, 1, 2, 3], [2, 3, 4, 0, 1]];
        let s = bc.algorithm1(Placement::Disjoint).unwrap();
        assert_eq!(s.len(), 5);
        for (k, step) in s.steps().iter().enumerate() {
            let want: Vec<_> = (0..5).map(|i| (i, 5 + figure_4c[i][k])).collect();
            assert_eq!(step, &want, "step {k}");
        }
        // Every step sends one length, sender 0's to that step's receiver.
        let t = bc.table(Placement::Disjoint);
        for (k, st) in s.steps().iter().enumerate() {
            let sizes: Vec<u64> = st.iter().map(|&(a, b)| t.get(a, b)).collect();
            assert_eq!(sizes, vec![bc.count(0, k); 5], "step {k}");
        }
        // cyclic(3) → cyclic(4), the other way, is the same table transposed.
        let back = BlockCyclic::new(5, 3, 5, 4).unwrap();
        for i in 0..5 {
            for j in 0..5 {
                assert_eq!(back.count(i, j), bc.count(j, i));
            }
        }
    }

    /// Where Algorithm 1 applies, its schedule is the closed form CS[i][c] = (c + k_i·n) mod Q
    /// with k_i = i·m⁻¹ mod P (computed here independently), every step's messages have one
    /// length, and the schedule is valid and runs to completion, in both placements.
    #[test]
    fn algorithm1_is_its_closed_form_with_one_length_per_step() {
        let mut applied = 0;
        for (p, x, q, y) in all_params() {
            let bc = BlockCyclic::new(p, x, q, y).unwrap();
            let what = format!("cyclic({x}) on {p} → cyclic({y}) on {q}");
            let (m, n) = bc.recurrence();
            let gcd = |mut a: usize, mut b: usize| {
                while b != 0 {
                    (a, b) = (b, a % b);
                }
                a
            };
            let applies = gcd(m, p) == 1 && q / gcd(q, n) == p;
            assert_eq!(bc.algorithm1_applies(), applies, "{what}");
            let Some(s) = bc.algorithm1(Placement::Disjoint) else {
                assert!(!applies, "{what}");
                assert!(bc.algorithm1(Placement::Shared).is_none());
                continue;
            };
            applied += 1;
            let inv = (0..p).find(|&v| v * m % p == 1 % p).unwrap();
            let closed: Vec<Vec<(usize, usize)>> = (0..q)
                .map(|c| {
                    (0..p)
                        .map(|i| (i, (c + i * inv % p * n) % q))
                        .filter(|&(i, j)| bc.count(i, j) > 0)
                        .map(|(i, j)| (i, p + j))
                        .collect::<Vec<_>>()
                })
                .filter(|st| !st.is_empty())
                .collect();
            assert_eq!(s.steps(), &closed[..], "{what}");
            for placement in [Placement::Shared, Placement::Disjoint] {
                let s = bc.algorithm1(placement).unwrap();
                let t = bc.table(placement);
                let what = format!("{what} {placement:?}");
                assert_valid(&t, &s, &what);
                assert_runs_to_completion(&s, &what);
                for st in s.steps() {
                    let sizes: Vec<u64> = st.iter().map(|&(a, b)| t.get(a, b)).collect();
                    assert!(sizes.iter().all(|&v| v == sizes[0]), "{what}: step sizes {sizes:?}");
                }
            }
        }
        assert!(applied >= 100, "Algorithm 1 applied to only {applied} cases");
    }

    /// Algorithm 2, for every case: a valid schedule, each step a maximal matching of what was
    /// left (no remaining message had both ends free), hence at most 2Δ − 1 steps, and the
    /// first step holds a largest message.
    #[test]
    fn algorithm2_fills_maximal_steps_largest_first() {
        for (p, x, q, y) in all_params() {
            let bc = BlockCyclic::new(p, x, q, y).unwrap();
            for placement in [Placement::Shared, Placement::Disjoint] {
                let what = format!("cyclic({x}) on {p} → cyclic({y}) on {q} {placement:?}");
                let t = bc.table(placement);
                let s = bc.algorithm2(placement);
                assert_valid(&t, &s, &what);
                assert_runs_to_completion(&s, &what);
                let d = t.max_degree();
                assert!(s.len() <= (2 * d).saturating_sub(1), "{what}: {} steps, Δ = {d}", s.len());
                let n = t.n();
                let mut left: Vec<(usize, usize)> = t.demands().into_iter().map(|(a, b, _)| (a, b)).collect();
                for (k, st) in s.steps().iter().enumerate() {
                    left.retain(|e| !st.contains(e));
                    let (mut snd, mut rcv) = (vec![false; n], vec![false; n]);
                    for &(a, b) in st {
                        snd[a] = true;
                        rcv[b] = true;
                    }
                    assert!(left.iter().all(|&(a, b)| snd[a] || rcv[b]), "{what}: step {k} could have taken more");
                }
                if let Some(first) = s.steps().first() {
                    let top =
                        t.entries().iter().enumerate().filter(|(e, _)| e / n != e % n).map(|(_, &v)| v).max().unwrap();
                    assert!(first.iter().any(|&(a, b)| t.get(a, b) == top), "{what}");
                }
            }
        }
    }

    /// The general schedules on block-cyclic tables: css in Δ steps, never above shift;
    /// Algorithm 1, where it applies, never above css.
    #[test]
    fn css_and_shift_on_block_cyclic_tables() {
        for (p, x, q, y) in all_params() {
            let bc = BlockCyclic::new(p, x, q, y).unwrap();
            for placement in [Placement::Shared, Placement::Disjoint] {
                let what = format!("cyclic({x}) on {p} → cyclic({y}) on {q} {placement:?}");
                let t = bc.table(placement);
                let c = css(&t);
                assert_valid(&t, &c, &what);
                assert_eq!(c.len(), t.max_degree(), "{what}");
                let s = shift(&t);
                assert!(c.cost(&t) <= s.cost(&t), "{what}: css {} shift {}", c.cost(&t), s.cost(&t));
                // With shared ranks a step of Algorithm 1 can lose its local part and still
                // need a step of its own, so it may take one step more than css and cost more.
                if placement == Placement::Disjoint
                    && let Some(a1) = bc.algorithm1(placement)
                {
                    assert!(a1.cost(&t) <= c.cost(&t), "{what}: Algorithm 1 {} css {}", a1.cost(&t), c.cost(&t));
                }
            }
        }
    }

    #[test]
    fn bad_parameters_are_refused_with_the_value_named() {
        let e = BlockCyclic::new(0, 1, 2, 3).unwrap_err().to_string();
        assert!(e.contains("source processors P"), "{e}");
        let e = BlockCyclic::new(2, 1, 2, 0).unwrap_err().to_string();
        assert!(e.contains("destination block y"), "{e}");
        let e = BlockCyclic::new(1 << 20, 1, 1 << 20, 1).unwrap_err().to_string();
        assert!(e.contains("entries"), "{e}");
        let e = BlockCyclic::new(1 << 10, u64::MAX / 3, 3, u64::MAX / 5).unwrap_err().to_string();
        assert!(e.contains("64 bits"), "{e}");
        let e = BlockCyclic::new(1, 1 << 30, 1, (1 << 30) - 1).unwrap_err().to_string();
        assert!(e.contains("pieces"), "{e}");
    }

    /// A reference: the whole array, distributed element by element.
    fn cyclic_reference(n: u64, procs: usize, block: u64) -> Vec<Vec<u32>> {
        let mut local = vec![Vec::new(); procs];
        for g in 0..n {
            local[((g / block) % procs as u64) as usize].push(g as u32);
        }
        local
    }

    #[test]
    fn cyclic_layout_moves_every_element_to_its_place() {
        let bytes = |v: &[u32]| v.iter().flat_map(|e| e.to_le_bytes()).collect::<Vec<u8>>();
        for (p, x, q, y) in [(4, 3, 3, 5), (1, 1, 1, 1), (3, 2, 5, 7), (5, 4, 2, 1), (2, 8, 8, 2), (6, 1, 4, 6)] {
            let layout = CyclicLayout::new(p, x, q, y).unwrap();
            for n in [0u64, 1, 7, 59, 60, 61, 1000] {
                let src = cyclic_reference(n, p, x);
                let dst = cyclic_reference(n, q, y);
                let lens: Vec<u64> = src.iter().map(|v| v.len() as u64).collect();
                assert_eq!(layout.check_sources(&lens).unwrap(), n);
                for (r, v) in src.iter().enumerate() {
                    assert_eq!(CyclicLayout::local_len(n, p, x, r), v.len() as u64);
                }
                let packed: Vec<Vec<Vec<u8>>> = (0..p).map(|s| layout.pack(s, &bytes(&src[s]), 4).unwrap()).collect();
                for d in 0..q {
                    let parts: Vec<&[u8]> = (0..p).map(|s| packed[s][d].as_slice()).collect();
                    assert_eq!(
                        layout.unpack(d, &parts, 4).unwrap(),
                        bytes(&dst[d]),
                        "({p},{x})->({q},{y}) n={n} dst {d}"
                    );
                }
            }
        }
    }

    #[test]
    fn cyclic_layout_refuses_inputs_that_are_not_one_array() {
        let layout = CyclicLayout::new(2, 1, 1, 1).unwrap();
        let e = layout.check_sources(&[3, 5]).unwrap_err().to_string();
        assert!(e.contains("source 0 holds 3 elements, an array of 8 elements gives it 4"), "{e}");
        let e = layout.unpack(0, &[&[0u8; 12], &[0u8; 20]], 4).unwrap_err().to_string();
        assert!(e.contains("source 0"), "{e}");
        assert!(layout.pack(0, &[0u8; 5], 4).is_err());
        assert!(CyclicLayout::new(2, 0, 1, 1).is_err());
    }

    #[test]
    fn the_seed_schedule_of_an_actual_array_carries_exactly_its_table() {
        for (p, x, q, y) in [(4, 3, 3, 5), (4, 2, 4, 3), (2, 1, 6, 1), (3, 5, 3, 5), (5, 7, 2, 3)] {
            let b = BlockCyclic::new(p, x, q, y).unwrap();
            let layout = CyclicLayout::new(p, x, q, y).unwrap();
            let ranks = p.max(q);
            for n in [1u64, 17, 10_007] {
                let table = ComTable::from_fn(ranks, |i, j| {
                    if i < p && j < q { layout.send_counts(i, CyclicLayout::local_len(n, p, x, i))[j] * 8 } else { 0 }
                })
                .unwrap();
                let s = b.seed_schedule(&table, Placement::Shared).unwrap();
                s.check(&table).unwrap();
            }
        }
    }
}
