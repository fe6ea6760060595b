//! Queues' shares of the cluster (issue 14): `plexus-coordinator queue set NAME --share 0.5`.
//!
//! A queue with a share may hold at most that fraction of the live workers' cores while another
//! queue has work waiting; when no other queue waits, it may use everything (work-conserving,
//! like Kueue's borrowing and YARN's elastic queues). Ordering inside and across queues stays
//! priority, then age; a share only stops a queue that is over it.

use std::collections::{BTreeMap, HashMap, HashSet};

use crate::error::Error;

/// The longest queue name (a job's `queue` obeys the same rule).
pub const MAX_QUEUE_NAME: usize = 64;

/// Each queue's share, and the cores its placed attempts hold now.
#[derive(Default, Debug)]
pub struct FairShare {
    /// Queue → its share of the live cores, in (0, 1].
    shares: BTreeMap<String, f64>,
    /// Queue → the cores its attempts hold.
    usage: HashMap<String, f64>,
}

impl FairShare {
    /// Sets (`Some`) or clears (`None`) a queue's share, in (0, 1].
    pub fn set(&mut self, queue: &str, share: Option<f64>) -> Result<(), Error> {
        if queue.is_empty()
            || queue.len() > MAX_QUEUE_NAME
            || !queue.chars().all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_')
        {
            return Err(Error::QueueName {
                name: queue.chars().take(MAX_QUEUE_NAME + 1).collect(),
                max: MAX_QUEUE_NAME,
            });
        }
        match share {
            Some(s) if !(s.is_finite() && s > 0.0 && s <= 1.0) => {
                Err(Error::QueueShare { queue: queue.to_string(), share: s })
            }
            Some(s) => {
                self.shares.insert(queue.to_string(), s);
                Ok(())
            }
            None => {
                self.shares.remove(queue);
                Ok(())
            }
        }
    }

    /// Every queue with a share.
    pub fn shares(&self) -> &BTreeMap<String, f64> {
        &self.shares
    }

    /// Whether no queue has a share (then no queue is ever over one).
    pub fn is_empty(&self) -> bool {
        self.shares.is_empty()
    }

    /// The cores the attempts of `queue` hold now.
    pub fn usage(&self, queue: &str) -> f64 {
        self.usage.get(queue).copied().unwrap_or(0.0).max(0.0)
    }

    /// `queue`'s attempts hold `cpu` more cores (fewer when negative).
    pub fn add(&mut self, queue: &str, cpu: f64) {
        *self.usage.entry(queue.to_string()).or_default() += cpu;
    }

    /// Why a task of `queue` asking `cpu` cores may not place now: its queue is at its share of
    /// the `total` live cores (worked out only when it matters) and another queue has work waiting (`waiting`: the queues with ready
    /// work this round).
    pub fn over(
        &self,
        queue: &str,
        cpu: f64,
        waiting: &HashSet<String>,
        total: impl FnOnce() -> f64,
    ) -> Option<String> {
        let share = *self.shares.get(queue)?;
        if !waiting.iter().any(|q| q != queue) {
            return None;
        }
        let (total, used) = (total(), self.usage(queue));
        (used + cpu > share * total + 1e-9).then(|| {
            format!("queue {queue:?} holds {used:.1} of its share {share} × {total:.0} cores while other queues wait")
        })
    }
}
