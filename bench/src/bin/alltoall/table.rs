//! The tables exchanged (uniform, skewed, block-cyclic), the schedules built for them, and the
//! deterministic fill every received byte is checked against.

use bytes::Bytes;
use plexus_dataplane::{BlockCyclic, ComTable, Placement, Schedule, ScheduleKind};

use crate::args::{Opts, Sched, TableKind};
use crate::{ELEM, FROM_BLOCK, TO_BLOCK};

/// One table of one world and size, and the schedules measured on it.
pub(crate) struct Case {
    pub(crate) table: ComTable,
    pub(crate) schedules: Vec<(Sched, Schedule)>,
}

impl Case {
    /// The `kind` table for `n` ranks whose off-diagonal sum is (about, in whole elements)
    /// `total` bytes, with the schedules of `wanted` that apply to it.
    pub(crate) fn new(kind: TableKind, n: usize, total: u64, opts: &Opts) -> Case {
        let mut redistribution = None;
        let table = match kind {
            TableKind::Uniform => {
                let per = total / (n * (n - 1)) as u64 / ELEM * ELEM;
                ComTable::uniform(n, per).expect("n ≥ 2")
            }
            TableKind::Skewed => skewed(n, total, opts.zipf, opts.seed),
            TableKind::BlockCyclic => {
                let bc = BlockCyclic::new(n, FROM_BLOCK, n, TO_BLOCK).expect("valid parameters");
                let period = bc.table(Placement::Shared);
                let off: u64 = period.demands().iter().map(|d| d.2).sum();
                let periods = (total / (off * ELEM)).max(1);
                redistribution = Some(bc);
                period.scaled(periods * ELEM).expect("no overflow at these sizes")
            }
        };
        let schedules = opts
            .schedules
            .iter()
            .filter_map(|&s| {
                let built = match (s, &redistribution) {
                    (Sched::Kind(k), _) => Schedule::build(k, &table),
                    (Sched::CssAcked, _) => Schedule::build(ScheduleKind::Css, &table),
                    // Its "schedule" is only for the table's columns: every pair in one step
                    // is no schedule, so shift's stands in (the model column says n/a).
                    (Sched::Direct | Sched::XDirect | Sched::Auto | Sched::AutoRailScheduler, _) => {
                        Schedule::build(ScheduleKind::Shift, &table)
                    }
                    (Sched::Alg1, Some(bc)) => bc.algorithm1(Placement::Shared)?,
                    (Sched::Alg2, Some(bc)) => bc.algorithm2(Placement::Shared),
                    (_, None) => return None,
                };
                Some((s, built))
            })
            .collect();
        Case { table, schedules }
    }

    /// Bytes that cross the network.
    pub(crate) fn network_bytes(&self) -> u64 {
        self.table.demands().iter().map(|d| d.2).sum()
    }

    /// The most bytes one rank sends or receives over the network.
    pub(crate) fn busiest_rank(&self) -> u64 {
        let n = self.table.n();
        let mut load = vec![0u64; 2 * n];
        for (i, j, b) in self.table.demands() {
            load[i] += b;
            load[n + j] += b;
        }
        load.into_iter().max().unwrap_or(0)
    }
}

/// splitmix64's output function: a bijective mix of 64 bits.
fn mix(mut z: u64) -> u64 {
    z = z.wrapping_add(0x9e37_79b9_7f4a_7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// The skewed table (see the module documentation): sender i's k-th receiver in a seeded
/// random order of the others gets (total / N) · k^−s / Σ_k k^−s, in whole elements.
pub(crate) fn skewed(n: usize, total: u64, s: f64, seed: u64) -> ComTable {
    let weights: Vec<f64> = (1..n).map(|k| (k as f64).powf(-s)).collect();
    let sum: f64 = weights.iter().sum();
    let row = (total / n as u64) as f64;
    let mut rows = vec![vec![0u64; n]; n];
    for (i, r) in rows.iter_mut().enumerate() {
        // Fisher–Yates over the other ranks, from a stream seeded by (seed, n, i).
        let mut state = mix(seed ^ ((n as u64) << 32) ^ ((i as u64) << 48));
        let mut next = move || {
            state = mix(state);
            state
        };
        let mut order: Vec<usize> = (0..n).filter(|&j| j != i).collect();
        for k in (1..order.len()).rev() {
            order.swap(k, (next() % (k as u64 + 1)) as usize);
        }
        for (k, &j) in order.iter().enumerate() {
            r[j] = (row * weights[k] / sum) as u64 / ELEM * ELEM;
        }
    }
    ComTable::from_rows(&rows).expect("square")
}

/// The 8 bytes at word `k` of what `from` sends `to`: distinct for every (from, to, offset).
fn word(from: usize, to: usize, k: u64) -> [u8; 8] {
    mix(((from as u64) << 52) ^ ((to as u64) << 40) ^ k).to_le_bytes()
}

/// What rank `from` sends rank `to`: `len` bytes of the deterministic fill.
pub(crate) fn fill(from: usize, to: usize, len: usize) -> Bytes {
    let mut v = vec![0u8; len];
    for (k, c) in v.chunks_mut(8).enumerate() {
        c.copy_from_slice(&word(from, to, k as u64)[..c.len()]);
    }
    Bytes::from(v)
}

/// Checks every byte rank `me` received (one part per sender, in rank order) against the fill.
pub(crate) fn verify(me: usize, table: &ComTable, got: &[Bytes]) -> Result<(), String> {
    if got.len() != table.n() {
        return Err(format!("{} parts for {} senders", got.len(), table.n()));
    }
    for (from, part) in got.iter().enumerate() {
        let want = table.get(from, me);
        if part.len() as u64 != want {
            return Err(format!("{} bytes from rank {from}, {want} expected", part.len()));
        }
        if let Some(k) = part.chunks(8).enumerate().position(|(k, c)| match <[u8; 8]>::try_from(c) {
            Ok(c) => u64::from_le_bytes(c) != u64::from_le_bytes(word(from, me, k as u64)),
            Err(_) => c != &word(from, me, k as u64)[..c.len()],
        }) {
            return Err(format!("the part from rank {from} differs at byte {}", 8 * k));
        }
    }
    Ok(())
}
