//! The communication table of an exchange: how many bytes each rank sends each other.

use std::fmt;

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

/// FNV-1a, 64 bits, over little-endian words.
pub(super) struct Fnv(pub(super) u64);

impl Fnv {
    pub(super) fn new() -> Fnv {
        Fnv(0xcbf2_9ce4_8422_2325)
    }

    pub(super) fn word(&mut self, w: u64) {
        for b in w.to_le_bytes() {
            self.0 ^= u64::from(b);
            self.0 = self.0.wrapping_mul(0x0100_0000_01b3);
        }
    }
}
