//! What an `auto` call's agreement round gave every member, kept for the calls after it
//! ([`LastAgreed`]): a [`Communicator`](super::Communicator)'s links and allreduce figures, an
//! [`Exchanger`](super::Exchanger)'s link models and all-to-all figures.
//!
//! Once a call's choice is the fastest measured algorithm (nothing left to try at its size
//! class), the next calls of the same size class decide from the same agreed figures, agreeing
//! afresh once in [`AGREE_EVERY`]: the round costs every pair a message, as much as a small
//! allreduce (a DDP step's buckets, a barrier) and about a tenth of a 64 MiB all-to-all at N = 8
//! on loopback. While candidates are still being tried, or the size class changes, every call
//! agrees. What was agreed is the same on every member and every member makes the same calls in
//! the same order, so all agree at the same calls.

use std::sync::Mutex;

/// Calls that decide from one agreement round, once settled.
pub(super) const AGREE_EVERY: u32 = 16;

/// The last agreement round's figures `T`, for the size class (`meter::size_class`) they were
/// agreed for.
#[derive(Debug)]
pub(super) struct LastAgreed<T>(Mutex<Option<Last<T>>>);

#[derive(Debug)]
struct Last<T> {
    class: u32,
    /// Calls that decided from it.
    used: u32,
    /// Whether the choice it gave was the fastest measured.
    settled: bool,
    figures: T,
}

impl<T: Clone> LastAgreed<T> {
    pub(super) fn new() -> LastAgreed<T> {
        LastAgreed(Mutex::new(None))
    }

    /// The figures a call of size class `class` may decide from without agreeing, and how many
    /// calls ago they were agreed: agreed for this class, settled, used fewer than
    /// [`AGREE_EVERY`] times.
    pub(super) fn reuse(&self, class: u32) -> Option<(T, u32)> {
        let mut last = self.0.lock().expect("agreed lock");
        let l = last.as_mut().filter(|l| l.class == class && l.settled && l.used < AGREE_EVERY)?;
        l.used += 1;
        Some((l.figures.clone(), l.used - 1))
    }

    /// A round just agreed `figures` for `class` (not settled until [`settle`](Self::settle)).
    pub(super) fn store(&self, class: u32, figures: T) {
        *self.0.lock().expect("agreed lock") = Some(Last { class, used: 1, settled: false, figures });
    }

    /// Whether the choice made from the last figures was the fastest measured.
    pub(super) fn settle(&self, settled: bool) {
        if let Some(l) = self.0.lock().expect("agreed lock").as_mut() {
            l.settled = settled;
        }
    }
}

/// The tail of a reason line whose figures were agreed `calls` calls before (none: this call's).
pub(super) fn ago(calls: Option<u32>) -> String {
    calls.map_or(String::new(), |k| format!(" (figures agreed {k} calls ago)"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn settled_figures_serve_their_class_for_a_while() {
        let a = LastAgreed::new();
        assert_eq!(a.reuse(20), None, "nothing agreed yet");
        a.store(20, 7u8);
        assert_eq!(a.reuse(20), None, "not settled");
        a.settle(true);
        assert_eq!(a.reuse(21), None, "another class");
        for k in 1..AGREE_EVERY {
            assert_eq!(a.reuse(20), Some((7, k)));
        }
        assert_eq!(a.reuse(20), None, "used up: agree again");
        a.store(20, 8);
        a.settle(true);
        assert_eq!(a.reuse(20), Some((8, 1)));
        assert_eq!(ago(Some(3)), " (figures agreed 3 calls ago)");
        assert_eq!(ago(None), "");
    }
}
