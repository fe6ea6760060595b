//! Queues' shares of the cluster (issue 14): `plexus-coordinator queue set NAME --share 0.5`.
//!
//! A queue with a share may hold at most that fraction of the live workers' cores while another
//! queue has work waiting; when no other queue waits, it may use everything (work-conserving,
//! like Kueue's borrowing and YARN's elastic queues). Ordering inside and across queues stays
//! priority, then age; a share only stops a queue that is over it.

use plexus_proto::JobId;

use super::Core;

/// The longest queue name (a job's `queue` obeys the same rule).
pub const MAX_QUEUE_NAME: usize = 64;

impl Core {
    /// Sets (`Some`) or clears (`None`) a queue's share, in (0, 1].
    pub fn set_queue_share(&mut self, queue: &str, share: Option<f64>) -> Result<(), String> {
        if queue.is_empty()
            || queue.len() > MAX_QUEUE_NAME
            || !queue.chars().all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_')
        {
            return Err(format!(
                "queue name {:?}: letters, digits, '-' and '_', at most {MAX_QUEUE_NAME}",
                queue.chars().take(MAX_QUEUE_NAME + 1).collect::<String>()
            ));
        }
        match share {
            Some(s) if !(s.is_finite() && s > 0.0 && s <= 1.0) => {
                Err(format!("share {s} of queue {queue:?} is not in (0, 1]"))
            }
            Some(s) => {
                self.queue_shares.insert(queue.to_string(), s);
                Ok(())
            }
            None => {
                self.queue_shares.remove(queue);
                Ok(())
            }
        }
    }

    /// Every queue with a share.
    pub fn queue_shares(&self) -> &std::collections::BTreeMap<String, f64> {
        &self.queue_shares
    }

    /// The cores each queue's placed and reserved attempts hold now.
    pub fn queue_usage(&self, queue: &str) -> f64 {
        self.queue_cpu.get(queue).copied().unwrap_or(0.0).max(0.0)
    }

    /// Attempt (job, idx) starts (`sign` 1) or stops (-1) holding its cores, for its queue.
    pub(super) fn count_queue(&mut self, job: JobId, idx: u32, sign: f64) {
        let Some(j) = self.jobs.get(&job) else { return };
        let cpu = j.record.spec.tasks[j.task_of(idx)].resources.cpu;
        if cpu > 0.0 {
            *self.queue_cpu.entry(j.record.spec.queue.clone()).or_default() += sign * cpu;
        }
    }

    /// Why a task of `queue` asking `cpu` cores may not place now: its queue is at its share
    /// and another queue has work waiting (`waiting`: the queues with ready work this round).
    pub(super) fn over_share(
        &self,
        queue: &str,
        cpu: f64,
        waiting: &std::collections::HashSet<String>,
    ) -> Option<String> {
        let share = *self.queue_shares.get(queue)?;
        if !waiting.iter().any(|q| q != queue) {
            return None;
        }
        let total: f64 =
            self.workers.values().filter(|w| w.record.alive).map(|w| f64::from(w.record.capacity.cpus)).sum();
        let used = self.queue_usage(queue);
        (used + cpu > share * total + 1e-9).then(|| {
            format!("queue {queue:?} holds {used:.1} of its share {share} × {total:.0} cores while other queues wait")
        })
    }
}
