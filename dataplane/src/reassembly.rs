//! Reassembly bookkeeping for one incoming message: which byte ranges are held, which are being
//! written right now, and whether the message is complete.
//!
//! The transport writes each segment's payload straight from the socket into the message's
//! buffer. Several rails write into the same buffer at once, so a range is first *reserved*
//! (which proves no other writer touches it), then *committed* once its checksum matched, or
//! *aborted* when it did not or its connection died. Segments may arrive in any order, on any
//! rail, and more than once (a resend after a rail failure may race the original).

use std::collections::BTreeMap;

use crate::error::Error;

/// What to do with an arriving segment.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Admit {
    /// New data: the range is now reserved for the caller; write it, then commit or abort.
    Fresh,
    /// Every byte of it is already held: read and drop the payload, acknowledge it again.
    Duplicate,
    /// Exactly this range is being written by another rail right now: drop the payload and
    /// ask the sender to retry later (it will then be a duplicate, or fresh if that write failed).
    Busy,
}

/// The state of one message being received.
#[derive(Debug)]
pub struct Reassembler {
    total: u64,
    /// Committed ranges, merged: start → end (exclusive), disjoint and non-adjacent.
    held: BTreeMap<u64, u64>,
    /// Reserved ranges, as reserved: start → end. Disjoint from each other and from `held`.
    reserved: BTreeMap<u64, u64>,
    received: u64,
    /// A zero-length message is complete once its one empty segment arrived.
    empty_seen: bool,
}

impl Reassembler {
    pub fn new(total: u64) -> Reassembler {
        Reassembler { total, held: BTreeMap::new(), reserved: BTreeMap::new(), received: 0, empty_seen: false }
    }

    pub fn total(&self) -> u64 {
        self.total
    }

    /// Bytes committed so far.
    pub fn received(&self) -> u64 {
        self.received
    }

    /// Ranges currently reserved (being written).
    pub fn in_flight(&self) -> usize {
        self.reserved.len()
    }

    /// Decides what to do with the segment `[offset, offset + len)`; on `Fresh` the range is
    /// reserved for the caller.
    pub fn reserve(&mut self, offset: u64, len: u64) -> Result<Admit, Error> {
        let end = match offset.checked_add(len) {
            Some(end) if end <= self.total => end,
            _ => {
                return Err(Error::SegmentOutOfBounds { offset, len, total: self.total });
            }
        };
        if len == 0 {
            if self.total != 0 {
                return Err(Error::EmptySegment { total: self.total });
            }
            let first = !self.empty_seen;
            self.empty_seen = true;
            return Ok(if first { Admit::Fresh } else { Admit::Duplicate });
        }
        if let Some((_, &e)) = self.held.range(..=offset).next_back()
            && e >= end
        {
            return Ok(Admit::Duplicate);
        }
        if self.reserved.get(&offset) == Some(&end) {
            return Ok(Admit::Busy);
        }
        if overlaps(&self.held, offset, end) || overlaps(&self.reserved, offset, end) {
            return Err(Error::SegmentOverlap { offset, len });
        }
        self.reserved.insert(offset, end);
        Ok(Admit::Fresh)
    }

    /// Marks a reserved range as held (its payload is written and verified).
    ///
    /// # Panics
    /// If the range was not reserved by [`reserve`](Self::reserve): that is a bug in the caller.
    pub fn commit(&mut self, offset: u64, len: u64) {
        if len == 0 {
            return;
        }
        let end = self.reserved.remove(&offset);
        assert_eq!(end, Some(offset + len), "commit of a range that was not reserved");
        self.received += len;
        let (mut start, mut stop) = (offset, offset + len);
        // Merge with the held range that ends exactly where this starts, and the one that starts
        // exactly where this ends, so the map stays as small as the number of holes.
        if let Some((&s, &e)) = self.held.range(..start).next_back()
            && e == start
        {
            self.held.remove(&s);
            start = s;
        }
        if let Some(e) = self.held.remove(&stop) {
            stop = e;
        }
        self.held.insert(start, stop);
    }

    /// Releases a reserved range without holding it (checksum failed, or its connection died).
    pub fn abort(&mut self, offset: u64, len: u64) {
        if len == 0 {
            self.empty_seen = false;
            return;
        }
        let end = self.reserved.remove(&offset);
        assert_eq!(end, Some(offset + len), "abort of a range that was not reserved");
    }

    /// True when every byte is held and nothing is being written.
    pub fn is_complete(&self) -> bool {
        self.reserved.is_empty() && if self.total == 0 { self.empty_seen } else { self.received == self.total }
    }
}

/// Whether `[start, end)` intersects any range of `map` (disjoint ranges keyed by start).
fn overlaps(map: &BTreeMap<u64, u64>, start: u64, end: u64) -> bool {
    if let Some((_, &e)) = map.range(..=start).next_back()
        && e > start
    {
        return true;
    }
    map.range(start..end).next().is_some()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Cuts `total` into segments of at most `seg`, as the sender does.
    fn cut(total: u64, seg: u64) -> Vec<(u64, u64)> {
        (0..total.div_ceil(seg)).map(|i| (i * seg, seg.min(total - i * seg))).collect()
    }

    fn permutations(n: usize) -> Vec<Vec<usize>> {
        if n == 0 {
            return vec![vec![]];
        }
        let mut out = vec![];
        for p in permutations(n - 1) {
            for i in 0..=p.len() {
                let mut q = p.clone();
                q.insert(i, n - 1);
                out.push(q);
            }
        }
        out
    }

    #[test]
    fn completes_for_every_arrival_order() {
        // 5 segments (the last one short): all 120 orders.
        let segs = cut(4 * 10 + 3, 10);
        assert_eq!(segs.len(), 5);
        for order in permutations(segs.len()) {
            let mut r = Reassembler::new(43);
            for (n, &i) in order.iter().enumerate() {
                assert!(!r.is_complete());
                let (o, l) = segs[i];
                assert_eq!(r.reserve(o, l).ok(), Some(Admit::Fresh), "order {order:?}");
                r.commit(o, l);
                assert_eq!(
                    r.received(),
                    segs.iter().enumerate().filter(|(j, _)| order[..=n].contains(j)).map(|(_, s)| s.1).sum::<u64>()
                );
            }
            assert!(r.is_complete(), "order {order:?}");
            assert_eq!(r.held.len(), 1, "held ranges merge into one");
        }
    }

    #[test]
    fn completes_with_reservations_interleaved_across_rails() {
        // Two "rails" hold reservations at once; commits come in another order than reserves.
        for order in permutations(4) {
            let segs = cut(40, 10);
            let mut r = Reassembler::new(40);
            for &i in &order {
                assert_eq!(r.reserve(segs[i].0, segs[i].1).ok(), Some(Admit::Fresh));
            }
            assert_eq!(r.in_flight(), 4);
            for &i in order.iter().rev() {
                assert!(!r.is_complete());
                r.commit(segs[i].0, segs[i].1);
            }
            assert!(r.is_complete());
        }
    }

    #[test]
    fn duplicates_are_recognised_after_commit_and_busy_while_reserved() {
        let mut r = Reassembler::new(30);
        assert_eq!(r.reserve(10, 10).ok(), Some(Admit::Fresh));
        assert_eq!(r.reserve(10, 10).ok(), Some(Admit::Busy));
        r.commit(10, 10);
        assert_eq!(r.reserve(10, 10).ok(), Some(Admit::Duplicate));
        assert_eq!(r.reserve(12, 3).ok(), Some(Admit::Duplicate), "a sub-range of held data is a duplicate");
        assert_eq!(r.received(), 10);
        assert_eq!(r.reserve(0, 10).ok(), Some(Admit::Fresh));
        r.commit(0, 10);
        assert_eq!(r.reserve(0, 20).ok(), Some(Admit::Duplicate), "merged ranges still recognise duplicates");
        assert_eq!(r.reserve(20, 10).ok(), Some(Admit::Fresh));
        r.commit(20, 10);
        assert!(r.is_complete());
        assert_eq!(r.received(), 30);
    }

    #[test]
    fn aborted_ranges_can_be_received_again() {
        let mut r = Reassembler::new(20);
        assert_eq!(r.reserve(0, 10).ok(), Some(Admit::Fresh));
        r.abort(0, 10);
        assert_eq!(r.received(), 0);
        assert_eq!(r.reserve(0, 10).ok(), Some(Admit::Fresh));
        r.commit(0, 10);
        assert_eq!(r.reserve(10, 10).ok(), Some(Admit::Fresh));
        assert!(!r.is_complete(), "a reservation keeps the message incomplete");
        r.commit(10, 10);
        assert!(r.is_complete());
    }

    #[test]
    fn refuses_overlaps_and_out_of_bounds() {
        let mut r = Reassembler::new(100);
        assert_eq!(r.reserve(10, 10).ok(), Some(Admit::Fresh));
        r.commit(10, 10);
        assert_eq!(r.reserve(40, 10).ok(), Some(Admit::Fresh));
        // Partial overlaps with held data, from either side, and spanning it.
        assert!(matches!(r.reserve(5, 10), Err(Error::SegmentOverlap { offset: 5, len: 10 })));
        assert!(matches!(r.reserve(15, 10), Err(Error::SegmentOverlap { offset: 15, len: 10 })));
        assert!(matches!(r.reserve(0, 30), Err(Error::SegmentOverlap { offset: 0, len: 30 })));
        // Partial overlaps with a reservation.
        assert!(matches!(r.reserve(45, 10), Err(Error::SegmentOverlap { offset: 45, len: 10 })));
        assert!(matches!(r.reserve(35, 10), Err(Error::SegmentOverlap { offset: 35, len: 10 })));
        assert!(matches!(r.reserve(40, 5), Err(Error::SegmentOverlap { offset: 40, len: 5 })));
        // Adjacent ranges are fine.
        assert_eq!(r.reserve(20, 20).ok(), Some(Admit::Fresh));
        assert_eq!(r.reserve(0, 10).ok(), Some(Admit::Fresh));
        // Bounds.
        assert!(matches!(r.reserve(95, 6), Err(Error::SegmentOutOfBounds { offset: 95, len: 6, total: 100 })));
        assert!(matches!(r.reserve(u64::MAX, 2), Err(Error::SegmentOutOfBounds { .. })));
        assert!(matches!(r.reserve(50, 0), Err(Error::EmptySegment { total: 100 })));
        // Refusals changed nothing.
        assert_eq!(r.received(), 10);
        assert_eq!(r.in_flight(), 3);
    }

    #[test]
    fn empty_message_completes_on_its_one_empty_segment() {
        let mut r = Reassembler::new(0);
        assert!(!r.is_complete());
        assert_eq!(r.reserve(0, 0).ok(), Some(Admit::Fresh));
        r.commit(0, 0);
        assert!(r.is_complete());
        assert_eq!(r.reserve(0, 0).ok(), Some(Admit::Duplicate));
        assert!(matches!(r.reserve(0, 1), Err(Error::SegmentOutOfBounds { .. })));
    }

    #[test]
    fn random_orders_with_duplicates_and_aborts_always_complete_exactly() {
        use rand::{Rng, SeedableRng, seq::SliceRandom};
        let mut rng = rand::rngs::StdRng::seed_from_u64(7);
        for _ in 0..500 {
            let total = rng.random_range(1..5000u64);
            let seg = rng.random_range(1..700u64);
            let mut pending = cut(total, seg);
            pending.shuffle(&mut rng);
            let mut r = Reassembler::new(total);
            let mut steps = 0;
            while let Some((o, l)) = pending.pop() {
                steps += 1;
                assert!(steps < 100_000);
                match r.reserve(o, l).unwrap() {
                    Admit::Fresh => match rng.random_range(0..10) {
                        0 => {
                            r.abort(o, l);
                            pending.insert(0, (o, l));
                        }
                        1 => {
                            // A duplicate arrives while the original is still being written.
                            assert_eq!(r.reserve(o, l).unwrap(), Admit::Busy);
                            r.commit(o, l);
                            assert_eq!(r.reserve(o, l).unwrap(), Admit::Duplicate);
                        }
                        _ => r.commit(o, l),
                    },
                    other => panic!("unexpected {other:?}"),
                }
            }
            assert!(r.is_complete());
            assert_eq!(r.received(), total);
        }
    }
}
