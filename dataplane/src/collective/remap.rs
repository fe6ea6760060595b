//! Seed 004's array remapping after loop partitioning: the loop
//! `for i in 0..ns: A[a1·i + b1] = F(B[a2·i + b2])` with B distributed cyclic(y) over Q source
//! processors and A cyclic(x) over P destination processors ("owner computes": the owner of
//! B's element sends it to the owner of A's). F is the identity here (an element is moved, not
//! transformed; a job applies its own F before or after). Pure.
//!
//! The seed's formulas, with g a global index:
//! * (1) the source of B[g] is `(g div y) mod Q`; (2) the destination of A[g] is
//!   `(g div x) mod P`;
//! * (3) `period_A = lcm(P·x, a1) / a1` — iterations after which A's accesses return to the
//!   same destination processors;
//! * (4) `period_s = lcm(Q·y, a2·period_A)` — the B index span after which both patterns
//!   repeat;
//! * (5) `period_iter = period_s / a2` — the loop's period in iterations.
//!
//! Lemma 1 follows: the communication table of k·period_iter iterations is k times the table of
//! one period ([`AffineRemap::counts`] computes one period, scales it, and adds the remainder;
//! a test checks it against a direct count). The table then goes to the same schedules as every
//! exchange (css, or the cost model's choice); the seed's Algorithms 1 and 2 are for the plain
//! redistribution (`redistribution`).
//!
//! A member's local array holds its elements of the global one in order: global g of a
//! cyclic(b) distribution over R processors is local `(g div (b·R))·b + g mod b`
//! ([`local_index`]). Elements of A the loop does not write are zero.

use crate::error::{Error, Result};

use super::redistribution::CyclicLayout;

/// Most loop iterations a remapping may have: packing and unpacking walk them once per
/// member, so this bounds the work a job file can ask for (the arrays are smaller anyway).
pub const MAX_ITERATIONS: u64 = 1 << 32;

/// A loop `A[a1·i + b1] = B[a2·i + b2]`, `i` in `0..iterations`, B cyclic(`y`) over `q`
/// sources, A (`na` elements) cyclic(`x`) over `p` destinations.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct AffineRemap {
    pub q: usize,
    pub y: u64,
    pub p: usize,
    pub x: u64,
    pub na: u64,
    pub a1: u64,
    pub b1: u64,
    pub a2: u64,
    pub b2: u64,
    pub iterations: u64,
}

fn gcd(mut a: u128, mut b: u128) -> u128 {
    while b != 0 {
        (a, b) = (b, a % b);
    }
    a
}

fn lcm(a: u128, b: u128) -> u128 {
    a / gcd(a, b) * b
}

/// Local position of global index `g` in a cyclic(`block`) distribution over `procs`.
pub fn local_index(g: u64, block: u64, procs: usize) -> u64 {
    (g / (block * procs as u64)) * block + g % block
}

impl AffineRemap {
    /// Checks the parameters: every count and stride at least 1, the loop's last A index
    /// inside A, at most [`MAX_ITERATIONS`].
    pub fn new(
        (q, y): (usize, u64),
        (p, x): (usize, u64),
        na: u64,
        (a1, b1): (u64, u64),
        (a2, b2): (u64, u64),
        iterations: u64,
    ) -> Result<AffineRemap> {
        let bad = |m: String| Err(Error::Config(m));
        if q == 0 || p == 0 || x == 0 || y == 0 {
            return bad(format!("processors and blocks must be at least 1 (Q {q}, y {y}, P {p}, x {x})"));
        }
        if a1 == 0 || a2 == 0 {
            return bad(format!("the strides a1 = {a1} and a2 = {a2} must be at least 1"));
        }
        if iterations > MAX_ITERATIONS {
            return bad(format!("{iterations} iterations; at most {MAX_ITERATIONS}"));
        }
        let r = AffineRemap { q, y, p, x, na, a1, b1, a2, b2, iterations };
        if iterations > 0 {
            let last = u128::from(a1) * u128::from(iterations - 1) + u128::from(b1);
            if last >= u128::from(na) {
                return bad(format!(
                    "the loop writes A[{a1}·{} + {b1}] = A[{last}], but A has {na} elements",
                    iterations - 1
                ));
            }
            r.b_needed()?;
        }
        Ok(r)
    }

    /// The fewest elements B must have: one past the loop's last B index.
    pub fn b_needed(&self) -> Result<u64> {
        if self.iterations == 0 {
            return Ok(0);
        }
        let last = u128::from(self.a2) * u128::from(self.iterations - 1) + u128::from(self.b2);
        u64::try_from(last + 1).map_err(|_| Error::Config(format!("the loop reads B[{last}], beyond 2^64")))
    }

    /// Source of iteration `i` (formula 1).
    fn src(&self, i: u64) -> usize {
        (((self.a2 * i + self.b2) / self.y) % self.q as u64) as usize
    }

    /// Destination of iteration `i` (formula 2).
    fn dst(&self, i: u64) -> usize {
        (((self.a1 * i + self.b1) / self.x) % self.p as u64) as usize
    }

    /// The seed's periods (3), (4), (5): (period_A, period_s, period_iter).
    pub fn periods(&self) -> (u128, u128, u128) {
        let (p, q) = (self.p as u128, self.q as u128);
        let (x, y, a1, a2) = (u128::from(self.x), u128::from(self.y), u128::from(self.a1), u128::from(self.a2));
        let period_a = lcm(p * x, a1) / a1;
        let period_s = lcm(q * y, a2 * period_a);
        (period_a, period_s, period_s / a2)
    }

    /// The communication table in elements, Q rows (sources) × P columns (destinations),
    /// row-major: one period counted (Lemma 1), times the whole periods, plus the rest.
    pub fn counts(&self) -> Vec<u64> {
        let (_, _, period) = self.periods();
        let ns = u128::from(self.iterations);
        let mut t = vec![0u64; self.q * self.p];
        let (whole, rest) = if period < ns { (ns / period, ns % period) } else { (0, ns) };
        if whole > 0 {
            for i in 0..period as u64 {
                t[self.src(i) * self.p + self.dst(i)] += 1;
            }
            let whole = whole as u64;
            t.iter_mut().for_each(|c| *c *= whole);
        }
        let start = (whole * period) as u64;
        for i in start..start + rest as u64 {
            t[self.src(i) * self.p + self.dst(i)] += 1;
        }
        t
    }

    /// What source `src` sends each destination, in elements.
    pub fn send_counts(&self, src: usize) -> Vec<u64> {
        let mut row = vec![0u64; self.p];
        for i in (0..self.iterations).filter(|&i| self.src(i) == src) {
            row[self.dst(i)] += 1;
        }
        row
    }

    /// Checks the sources' local lengths (in elements) as one array B cyclic(y) over Q long
    /// enough for the loop; returns B's length.
    pub fn check_sources(&self, lens: &[u64]) -> Result<u64> {
        let layout = CyclicLayout::new(self.q, self.y, self.p, self.x)?;
        let nb = layout.check_sources(lens)?;
        let need = self.b_needed()?;
        if nb < need {
            return Err(Error::Config(format!("the loop reads B up to element {}, but B has {nb} elements", need - 1)));
        }
        Ok(nb)
    }

    /// How many elements source `src`'s local B must hold for the loop: one past the last
    /// local index it reads (0 when it reads none).
    pub fn local_needed(&self, src: usize) -> u64 {
        (0..self.iterations)
            .filter(|&i| self.src(i) == src)
            .map(|i| local_index(self.a2 * i + self.b2, self.y, self.q) + 1)
            .max()
            .unwrap_or(0)
    }

    /// Source `src`'s messages: for each destination, its elements of B (`elem` bytes each,
    /// from its local array `local`) in iteration order.
    pub fn pack(&self, src: usize, local: &[u8], elem: usize) -> Result<Vec<Vec<u8>>> {
        let counts = self.send_counts(src);
        let mut out: Vec<Vec<u8>> = counts.iter().map(|&c| Vec::with_capacity(c as usize * elem)).collect();
        for i in (0..self.iterations).filter(|&i| self.src(i) == src) {
            let at = local_index(self.a2 * i + self.b2, self.y, self.q) as usize * elem;
            let e = local.get(at..at + elem).ok_or_else(|| {
                Error::Config(format!(
                    "source {src}'s local B has {} elements; the loop reads its element {}",
                    local.len() / elem,
                    at / elem
                ))
            })?;
            out[self.dst(i)].extend_from_slice(e);
        }
        Ok(out)
    }

    /// Destination `dst`'s local A from every source's message to it (`parts[s]`, in source
    /// order): each element where the loop writes it, zero elsewhere.
    pub fn unpack(&self, dst: usize, parts: &[&[u8]], elem: usize) -> Result<Vec<u8>> {
        if parts.len() != self.q {
            return Err(Error::Config(format!("{} parts for {} sources", parts.len(), self.q)));
        }
        let len = CyclicLayout::local_len(self.na, self.p, self.x, dst) as usize;
        let mut out = vec![0u8; len * elem];
        let mut at = vec![0usize; self.q];
        for i in (0..self.iterations).filter(|&i| self.dst(i) == dst) {
            let s = self.src(i);
            let e = parts[s].get(at[s]..at[s] + elem).ok_or_else(|| {
                Error::Protocol(format!("source {s} sent {} bytes to destination {dst}, too few", parts[s].len()))
            })?;
            let to = local_index(self.a1 * i + self.b1, self.x, self.p) as usize * elem;
            out[to..to + elem].copy_from_slice(e);
            at[s] += elem;
        }
        if let Some(s) = (0..self.q).find(|&s| at[s] != parts[s].len()) {
            return Err(Error::Protocol(format!(
                "source {s} sent {} bytes to destination {dst}, the loop takes {}",
                parts[s].len(),
                at[s]
            )));
        }
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The seed's example 1: A(0:181) cyclic(4) on 5, B(0:119) cyclic(3) on 5,
    /// `A(3i + 4) = B(2i + 1)`, i = 0..59: its periods (20, 120, 60) and Figure 2(b)'s table.
    #[test]
    fn the_seeds_example_1() {
        let r = AffineRemap::new((5, 3), (5, 4), 182, (3, 4), (2, 1), 60).unwrap();
        assert_eq!(r.periods(), (20, 120, 60));
        let want: [[u64; 5]; 5] = [[2, 2, 3, 3, 2], [3, 3, 2, 2, 2], [2, 2, 2, 3, 3], [2, 3, 3, 2, 2], [3, 2, 2, 2, 3]];
        let got = r.counts();
        for (i, row) in want.iter().enumerate() {
            assert_eq!(&got[i * 5..i * 5 + 5], row, "row Q{i}");
        }
        // Figure 5: iteration 0 moves B(1) on Q0 to A(4) on P1.
        assert_eq!((r.src(0), r.dst(0)), (0, 1));
    }

    struct Rng(u64);
    impl Rng {
        fn below(&mut self, n: u64) -> u64 {
            self.0 = self.0.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
            (self.0 >> 33) % n
        }
    }

    /// Seeded random maps: the periodic table equals a direct count, k periods are k times one
    /// (Lemma 1), and packing at the sources, routing, and unpacking at the destinations gives
    /// exactly the A of running the loop on the global arrays.
    #[test]
    #[allow(clippy::needless_range_loop)] // ranks index several tables at once
    fn random_maps_move_every_element_where_the_loop_puts_it() {
        let mut rng = Rng(0x5eed_0004);
        for case in 0..300 {
            let (q, p) = (1 + rng.below(6) as usize, 1 + rng.below(6) as usize);
            let (y, x) = (1 + rng.below(5), 1 + rng.below(5));
            let (a1, a2) = (1 + rng.below(4), 1 + rng.below(4));
            let (b1, b2) = (rng.below(7), rng.below(7));
            let ns = rng.below(80);
            let na = a1 * ns.saturating_sub(1) + b1 + 1 + rng.below(5);
            let nb = a2 * ns.saturating_sub(1) + b2 + 1 + rng.below(5);
            let r = AffineRemap::new((q, y), (p, x), na, (a1, b1), (a2, b2), ns).unwrap();
            let what = format!("case {case}: {r:?}");
            let mut direct = vec![0u64; q * p];
            let mut want = vec![0u32; na as usize];
            let b: Vec<u32> = (0..nb as u32).map(|v| v * 7 + 1).collect();
            for i in 0..ns {
                let (ga, gb) = (a1 * i + b1, a2 * i + b2);
                direct[((gb / y) % q as u64) as usize * p + ((ga / x) % p as u64) as usize] += 1;
                want[ga as usize] = b[gb as usize];
            }
            assert_eq!(r.counts(), direct, "{what}");
            let one = AffineRemap { iterations: r.periods().2 as u64, na: u64::MAX, ..r }.counts();
            let three = AffineRemap { iterations: 3 * r.periods().2 as u64, na: u64::MAX, ..r }.counts();
            assert_eq!(three, one.iter().map(|c| 3 * c).collect::<Vec<_>>(), "Lemma 1, {what}");

            // Distribute B cyclic(y) over q, as little-endian u32.
            let mut locals = vec![Vec::new(); q];
            for (g, v) in b.iter().enumerate() {
                locals[((g as u64 / y) % q as u64) as usize].extend_from_slice(&v.to_le_bytes());
            }
            let lens: Vec<u64> = locals.iter().map(|l| l.len() as u64 / 4).collect();
            assert_eq!(r.check_sources(&lens).unwrap(), nb, "{what}");
            let packed: Vec<Vec<Vec<u8>>> = (0..q).map(|s| r.pack(s, &locals[s], 4).unwrap()).collect();
            for s in 0..q {
                let row: Vec<u64> = packed[s].iter().map(|m| m.len() as u64 / 4).collect();
                assert_eq!(row, r.send_counts(s), "{what}");
                assert_eq!(row, direct[s * p..(s + 1) * p], "{what}");
            }
            let mut got = vec![0u32; na as usize];
            for d in 0..p {
                let parts: Vec<&[u8]> = (0..q).map(|s| packed[s][d].as_slice()).collect();
                let local = r.unpack(d, &parts, 4).unwrap();
                for (k, e) in local.chunks_exact(4).enumerate() {
                    let g = (k as u64 / x) * x * p as u64 + d as u64 * x + k as u64 % x;
                    got[g as usize] = u32::from_le_bytes(e.try_into().unwrap());
                }
            }
            assert_eq!(got, want, "{what}");
        }
    }

    #[test]
    fn bad_parameters_and_short_inputs_are_named() {
        let e = AffineRemap::new((2, 2), (2, 2), 10, (3, 0), (1, 0), 5).unwrap_err().to_string();
        assert!(e.contains("A[3·4 + 0] = A[12], but A has 10 elements"), "{e}");
        let e = AffineRemap::new((2, 2), (2, 2), 10, (0, 0), (1, 0), 5).unwrap_err().to_string();
        assert!(e.contains("a1 = 0"), "{e}");
        let r = AffineRemap::new((2, 2), (2, 2), 10, (1, 0), (2, 0), 5).unwrap();
        let e = r.check_sources(&[2, 2]).unwrap_err().to_string();
        assert!(e.contains("reads B up to element 8, but B has 4"), "{e}");
        let parts: [&[u8]; 2] = [&[0u8; 4], &[]];
        assert!(r.unpack(0, &parts, 4).is_err());
    }
}
