//! A [`Schedule`]: ordered contention-free steps, its invariants checked where it is made, and
//! what one rank does in each step.

use crate::error::{Error, Result};

use super::table::{ComTable, Fnv};

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
    pub(super) fn normalized(n: usize, steps: Vec<Vec<(usize, usize)>>) -> Schedule {
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
pub(super) fn step_max(table: &ComTable, pairs: &[(usize, usize)]) -> u64 {
    pairs.iter().map(|&(i, j)| table.get(i, j)).max().unwrap_or(0)
}
