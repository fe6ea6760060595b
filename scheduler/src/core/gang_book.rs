//! The gang book of one scheduling round: which gang is each queue's head, which workers are
//! held for head gangs (and until when), and which gangs have had their turn.
//!
//! Invariants kept here, behind private fields: a queue has at most one head gang per round
//! (only a head reserves, so two gangs never hold partial reservations against each other), and
//! a gang takes one turn per round however many of its tasks have ready work.

use std::collections::{HashMap, HashSet};

use plexus_proto::{JobId, WorkerId};

/// A worker held for a head gang: for which, and when the gang can expect to use it (the
/// time enough of what runs there will have ended, by the attempts' `timeout`s; `None` when
/// something it waits for has no timeout). Work that will end before then may still use it
/// (backfill, as Slurm does around a reservation): the gang loses nothing.
#[derive(Clone, Debug)]
pub struct Hold {
    pub label: String,
    pub until: Option<u64>,
}

impl Hold {
    /// Whether a task with `timeout_ms` (0 = none) placed `now` ends before the gang needs the
    /// worker.
    pub fn admits(&self, timeout_ms: u64, now: u64) -> bool {
        timeout_ms > 0 && self.until.is_some_and(|u| now.saturating_add(timeout_ms) <= u)
    }
}

/// The longest back-off of a gang that was rolled back.
pub const MAX_GANG_BACKOFF_MS: u64 = 60_000;

/// The back-off after a gang's `n`-th rollback: 1 s, doubling, at most [`MAX_GANG_BACKOFF_MS`].
pub fn gang_backoff_ms(n: u32) -> u64 {
    1_000u64.saturating_mul(1u64 << n.saturating_sub(1).min(16)).min(MAX_GANG_BACKOFF_MS)
}

/// One round's heads, holds and turns. A new book starts every round: nothing in it lasts.
#[derive(Default, Debug)]
pub struct GangBook {
    /// Workers held for the gangs at the head of their queues this round.
    held: HashMap<WorkerId, Hold>,
    /// Queues whose head gang has had its turn this round.
    heads: HashSet<String>,
    /// Gangs that have had their turn this round.
    turns: HashSet<(JobId, String)>,
}

impl GangBook {
    /// Gang `name` of `job` takes its turn: true the first time this round, false after.
    pub fn first_turn(&mut self, job: JobId, name: &str) -> bool {
        self.turns.insert((job, name.to_string()))
    }

    /// Makes the calling gang `queue`'s head: true when the queue had none this round.
    pub fn take_head(&mut self, queue: &str) -> bool {
        if self.heads.contains(queue) {
            return false;
        }
        self.heads.insert(queue.to_string());
        true
    }

    /// Holds worker `wid` for a head gang.
    pub fn hold(&mut self, wid: WorkerId, hold: Hold) {
        self.held.insert(wid, hold);
    }

    /// What `wid` is held for, if anything.
    pub fn hold_of(&self, wid: &WorkerId) -> Option<&Hold> {
        self.held.get(wid)
    }

    pub fn is_held(&self, wid: &WorkerId) -> bool {
        self.held.contains_key(wid)
    }
}
