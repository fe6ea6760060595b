//! A node's fast memory: a bounded least-recently-used object cache with pinning.
//!
//! Objects that running tasks read or write are pinned and never evicted; inserting an object
//! evicts the least recently used unpinned objects until it fits. An object that cannot fit
//! even after evicting everything unpinned is not cached at all (it is streamed from where it
//! lives), and nothing is evicted for it. Ties in recency cannot occur: every use takes the
//! next value of a counter, so eviction order is deterministic.

use std::collections::{BTreeSet, HashMap};

/// Whether an inserted object is pinned (read or written by a running task) or only cached.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Pin {
    Pinned,
    Unpinned,
}

#[derive(Clone, Copy, Debug)]
struct Entry {
    bytes: u64,
    stamp: u64,
    pins: u32,
}

#[derive(Clone, Debug)]
pub(crate) struct Cache {
    capacity: u64,
    used: u64,
    pinned: u64,
    entries: HashMap<usize, Entry>,
    /// (stamp, object) of every entry, oldest first.
    order: BTreeSet<(u64, usize)>,
    clock: u64,
}

impl Cache {
    pub fn new(capacity: u64) -> Self {
        Cache { capacity, used: 0, pinned: 0, entries: HashMap::new(), order: BTreeSet::new(), clock: 0 }
    }

    pub fn used(&self) -> u64 {
        self.used
    }

    pub fn contains(&self, object: usize) -> bool {
        self.entries.contains_key(&object)
    }

    /// Marks a cached object as used now and pins it; false if it is not cached.
    pub fn pin(&mut self, object: usize) -> bool {
        let Some(e) = self.entries.get_mut(&object) else { return false };
        self.clock += 1;
        self.order.remove(&(e.stamp, object));
        e.stamp = self.clock;
        self.order.insert((e.stamp, object));
        if e.pins == 0 {
            self.pinned += e.bytes;
        }
        e.pins += 1;
        true
    }

    pub fn unpin(&mut self, object: usize) {
        if let Some(e) = self.entries.get_mut(&object)
            && e.pins > 0
        {
            e.pins -= 1;
            if e.pins == 0 {
                self.pinned -= e.bytes;
            }
        }
    }

    /// Inserts `object` pinned or unpinned, evicting least recently used unpinned objects to
    /// make room. Returns the evicted `(object, bytes)`, or `None` if the object cannot be cached
    /// (then nothing was evicted). An object already cached is only pinned (if asked).
    pub fn insert(&mut self, object: usize, bytes: u64, pin: Pin) -> Option<Vec<(usize, u64)>> {
        let pinned = pin == Pin::Pinned;
        if self.contains(object) {
            if pinned {
                self.pin(object);
            }
            return Some(Vec::new());
        }
        if bytes > self.capacity - self.pinned {
            return None;
        }
        let mut evicted = Vec::new();
        while self.used + bytes > self.capacity {
            // There is enough unpinned data to evict (checked above), so this finds one.
            let victim = self.order.iter().copied().find(|(_, o)| self.entries[o].pins == 0);
            let Some((stamp, o)) = victim else { break };
            self.order.remove(&(stamp, o));
            let e = self.entries.remove(&o).expect("ordered entries exist");
            self.used -= e.bytes;
            evicted.push((o, e.bytes));
        }
        self.clock += 1;
        let pins = u32::from(pinned);
        self.entries.insert(object, Entry { bytes, stamp: self.clock, pins });
        self.order.insert((self.clock, object));
        self.used += bytes;
        if pinned {
            self.pinned += bytes;
        }
        Some(evicted)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn evicts_least_recently_used_unpinned_objects() {
        let mut c = Cache::new(100);
        assert_eq!(c.insert(1, 40, Pin::Unpinned), Some(vec![]));
        assert_eq!(c.insert(2, 40, Pin::Unpinned), Some(vec![]));
        assert!(c.pin(1)); // 1 is now the most recently used, and pinned
        c.unpin(1);
        assert_eq!(c.insert(3, 40, Pin::Unpinned), Some(vec![(2, 40)]));
        assert_eq!(c.used(), 80);
        assert!(c.contains(1) && c.contains(3) && !c.contains(2));
    }

    #[test]
    fn pinned_objects_stay_and_oversized_objects_are_not_cached() {
        let mut c = Cache::new(100);
        c.insert(1, 60, Pin::Pinned);
        c.insert(2, 30, Pin::Unpinned);
        assert_eq!(c.insert(3, 50, Pin::Pinned), None, "only 40 bytes could be freed");
        assert!(c.contains(2), "nothing is evicted for an object that is not cached");
        assert_eq!(c.insert(3, 40, Pin::Pinned), Some(vec![(2, 30)]));
        c.unpin(1);
        assert_eq!(c.insert(4, 60, Pin::Unpinned), Some(vec![(1, 60)]));
        assert_eq!(c.used(), 100);
    }
}
