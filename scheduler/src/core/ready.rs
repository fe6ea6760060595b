//! The ready queue, indexed by what decides the order: a job's priority (higher first), then its
//! submission order, then the task. Each entry holds the ready subtasks of one task, so a round
//! judges a task once — it places subtasks until one does not fit, then moves on — and its cost
//! grows with the number of tasks that have ready work and the placements made, not with how
//! many subtasks wait (a 100,000-replica task costs one failed attempt per round, not 100,000).
//!
//! Entries may be stale (a subtask placed, cancelled or made `Waiting` again since it was
//! queued); whoever takes one checks its state, as before.
//!
//! Beside the queue proper: ready subtasks waiting out a retry back-off, by the time they may be
//! placed (so a waiting retry costs nothing per round), and how many rounds each queued task was
//! overtaken by work queued after it (kept only for tasks still queued).

use std::cmp::Reverse;
use std::collections::{BTreeMap, BTreeSet, HashMap};

use plexus_proto::JobId;

/// Where a task's ready subtasks sit in the scheduling order.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct OrderKey {
    pub priority: Reverse<i64>,
    /// The job's submission sequence number: older first among equal priorities.
    pub seq: u64,
    pub task: u32,
    pub job: JobId,
}

/// Ready subtasks by [`OrderKey`], each task's by subtask index (rank order).
#[derive(Default, Debug)]
pub struct ReadyQueue {
    tasks: BTreeMap<OrderKey, BTreeSet<u32>>,
    /// Entries held, stale ones included.
    len: usize,
    /// Ready subtasks waiting out a retry back-off: (when they may be placed, job, index).
    delayed: BTreeSet<(u64, JobId, u32)>,
    /// Rounds each task with ready work was overtaken by work queued after it (a reordering
    /// placer, `Placer::order`); only tasks still queued have an entry.
    overtaken: HashMap<OrderKey, u32>,
}

impl ReadyQueue {
    pub fn push(&mut self, key: OrderKey, idx: u32) {
        if self.tasks.entry(key).or_default().insert(idx) {
            self.len += 1;
        }
    }

    /// The task keys in scheduling order (a copy: the caller mutates the queue as it goes).
    pub fn keys(&self) -> Vec<OrderKey> {
        self.tasks.keys().copied().collect()
    }

    /// Takes the subtasks of one task out, to work on them; [`ReadyQueue::put_back`] returns
    /// what is left.
    pub fn take(&mut self, key: &OrderKey) -> BTreeSet<u32> {
        let set = self.tasks.remove(key).unwrap_or_default();
        self.len -= set.len();
        set
    }

    /// Returns subtasks taken with [`ReadyQueue::take`] (merged with any queued since): a move,
    /// not a copy, when nothing was queued meanwhile, so a deep task costs nothing here.
    pub fn put_back(&mut self, key: OrderKey, mut set: BTreeSet<u32>) {
        if set.is_empty() {
            return;
        }
        match self.tasks.entry(key) {
            std::collections::btree_map::Entry::Vacant(v) => {
                self.len += set.len();
                v.insert(set);
            }
            std::collections::btree_map::Entry::Occupied(mut o) => {
                let before = o.get().len();
                if set.len() > before {
                    std::mem::swap(o.get_mut(), &mut set);
                }
                o.get_mut().extend(set);
                self.len += o.get().len() - before;
            }
        }
    }

    pub fn remove_task(&mut self, key: &OrderKey) {
        self.take(key);
    }

    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Holds subtask `idx` of `job` back until `at`, when [`ReadyQueue::due`] hands it out.
    pub fn delay(&mut self, at: u64, job: JobId, idx: u32) {
        self.delayed.insert((at, job, idx));
    }

    /// Takes out the delayed subtasks whose time has come by `now`, earliest first, to be
    /// queued.
    pub fn due(&mut self, now: u64) -> Vec<(JobId, u32)> {
        let mut due = Vec::new();
        while let Some(&(at, job, idx)) = self.delayed.first() {
            if at > now {
                break;
            }
            self.delayed.pop_first();
            due.push((job, idx));
        }
        due
    }

    /// Number of subtasks waiting out a back-off.
    pub fn delayed_len(&self) -> usize {
        self.delayed.len()
    }

    /// Rounds task `key` was overtaken while queued.
    pub fn overtaken(&self, key: &OrderKey) -> u32 {
        self.overtaken.get(key).copied().unwrap_or(0)
    }

    /// Ends a round in which the tasks of `keys` were overtaken: those still queued count it,
    /// and tasks that left the queue forget theirs.
    pub fn count_overtaken(&mut self, keys: Vec<OrderKey>) {
        for key in keys {
            if self.tasks.contains_key(&key) {
                *self.overtaken.entry(key).or_insert(0) += 1;
            }
        }
        let tasks = &self.tasks;
        self.overtaken.retain(|k, _| tasks.contains_key(k));
    }

    /// Every (job, subtask) entry, in order (for explaining why a cluster without workers
    /// places nothing).
    pub fn entries(&self) -> impl Iterator<Item = (OrderKey, u32)> + '_ {
        self.tasks.iter().flat_map(|(k, s)| s.iter().map(move |i| (*k, *i)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(priority: i64, seq: u64, task: u32) -> OrderKey {
        OrderKey { priority: Reverse(priority), seq, task, job: JobId::from_bytes([seq as u8; 16]) }
    }

    #[test]
    fn higher_priority_then_older_then_task_order() {
        let mut q = ReadyQueue::default();
        q.push(key(0, 1, 0), 5);
        q.push(key(10, 2, 0), 1);
        q.push(key(0, 1, 1), 9);
        q.push(key(10, 2, 0), 0);
        q.push(key(10, 2, 0), 0); // twice: held once
        assert_eq!(q.len(), 4);
        assert_eq!(q.keys(), vec![key(10, 2, 0), key(0, 1, 0), key(0, 1, 1)]);
        let mut set = q.take(&key(10, 2, 0));
        assert_eq!(q.len(), 2);
        set.remove(&0);
        q.put_back(key(10, 2, 0), set);
        assert_eq!(q.len(), 3);
        assert_eq!(q.entries().filter(|(k, _)| *k == key(10, 2, 0)).map(|(_, i)| i).collect::<Vec<_>>(), vec![1]);
    }
}
