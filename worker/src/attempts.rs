//! What this worker process knows about attempts, and the queue of reports for the coordinator.
//!
//! One lock guards both, so that the set of *known* attempts sent with `Register` (running or
//! being prepared, plus finished ones whose final report is not acknowledged yet) can never miss
//! an attempt that is between "finished" and "reported".
//!
//! Reports leave the queue in batches ([`Attempts::take_batch`]): everything pending goes into one
//! `ReportTasks` call, and whatever arrives while that call is in flight waits for the next one.
//! A batch is only forgotten when the coordinator acknowledges it ([`Batch::ack`]); a batch that
//! is dropped unacknowledged (the call failed, the coordinator asked to re-register, the
//! connection was torn down mid-call) goes back to the front of the queue, in its original order,
//! so a RUNNING report is never overtaken by the final report of the same attempt.

use std::collections::{HashMap, HashSet, VecDeque};
use std::sync::{Arc, Mutex, MutexGuard};

use plexus_proto::{AttemptRef, pb};
use prost::Message;
use tokio::sync::Notify;
use tokio_util::sync::CancellationToken;

/// How many finished attempts are remembered after their report was acknowledged, so that an
/// assignment the coordinator re-sends (e.g. after a reconnect race) is not run twice. At the
/// benchmark's 2,500 no-op attempts per second per worker this covers well over half a minute,
/// for a few megabytes of memory.
const RECENT_FINISHED: usize = 100_000;

/// The most a batch of reports may weigh, encoded. Far under the one message limit both ends
/// apply (`plexus_proto::rules::MAX_MESSAGE`, 64 MiB; a batch over it would be refused and
/// retried forever): the coordinator persists a whole batch before it answers, and a few MiB keep
/// that call short. One report is at most two 64 KiB log tails plus its outputs, so a single
/// report always fits.
pub const MAX_BATCH_BYTES: usize = 3 << 20;

/// Attempt bookkeeping and the report queue. Shared as `Arc<Attempts>`.
#[derive(Debug)]
pub struct Attempts {
    inner: Mutex<Inner>,
    wake: Notify,
    /// Parent of every attempt's cancellation token: cancelled when the worker shuts down.
    root: CancellationToken,
}

#[derive(Debug, Default)]
struct Inner {
    /// Running or being prepared → its cancellation token.
    active: HashMap<AttemptRef, CancellationToken>,
    /// Finished attempts whose final report has not been acknowledged.
    unacked: HashSet<AttemptRef>,
    /// Recently finished attempts (acknowledged or not), oldest first, for de-duplication.
    recent: VecDeque<AttemptRef>,
    recent_set: HashSet<AttemptRef>,
    pending: VecDeque<Report>,
    /// Active attempts the worker fenced ([`Attempts::fence`]) → why, until they finish.
    fenced: HashMap<AttemptRef, String>,
    /// Active attempts that run inside the worker (no supervisor to freeze them): cancelled when
    /// the lease runs out ([`Attempts::lapse`]).
    in_worker: HashSet<AttemptRef>,
}

#[derive(Debug, Clone)]
struct Report {
    attempt: AttemptRef,
    is_final: bool,
    msg: pb::TaskReport,
}

impl Inner {
    fn is_known(&self, a: &AttemptRef) -> bool {
        self.active.contains_key(a) || self.unacked.contains(a) || self.recent_set.contains(a)
    }

    fn remember_finished(&mut self, a: &AttemptRef) {
        self.unacked.insert(a.clone());
        if self.recent_set.insert(a.clone()) {
            self.recent.push_back(a.clone());
            if self.recent.len() > RECENT_FINISHED
                && let Some(old) = self.recent.pop_front()
            {
                self.recent_set.remove(&old);
            }
        }
    }
}

impl Attempts {
    /// Attempt tokens will be children of `root`, so cancelling it stops every attempt.
    pub fn new(root: CancellationToken) -> Arc<Attempts> {
        Arc::new(Attempts { inner: Mutex::new(Inner::default()), wake: Notify::new(), root })
    }

    fn lock(&self) -> MutexGuard<'_, Inner> {
        // Every critical section is a handful of collection operations; a panic elsewhere cannot
        // leave the state half-updated in a way that matters more than stopping the worker would.
        self.inner.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Whether the worker is shutting down (as opposed to an attempt being cancelled).
    pub fn shutting_down(&self) -> bool {
        self.root.is_cancelled()
    }

    /// Starts tracking an attempt; `None` when it is already known (running, finished with an
    /// unacknowledged report, or recently finished), in which case it must not run again.
    pub fn begin(&self, a: &AttemptRef) -> Option<CancellationToken> {
        let mut inner = self.lock();
        if inner.is_known(a) {
            return None;
        }
        let token = self.root.child_token();
        inner.active.insert(a.clone(), token.clone());
        Some(token)
    }

    /// Records an attempt that starts and finishes at once (a built-in like `noop`) with its final
    /// report; `false` (and nothing recorded) when it is already known.
    pub fn complete_at_once(&self, a: &AttemptRef, report: pb::TaskReport) -> bool {
        {
            let mut inner = self.lock();
            if inner.is_known(a) {
                return false;
            }
            inner.remember_finished(a);
            inner.pending.push_back(Report { attempt: a.clone(), is_final: true, msg: report });
        }
        self.wake.notify_one();
        true
    }

    /// Queues a progress report (RUNNING) of an active attempt.
    pub fn progress(&self, a: &AttemptRef, report: pb::TaskReport) {
        self.lock().pending.push_back(Report { attempt: a.clone(), is_final: false, msg: report });
        self.wake.notify_one();
    }

    /// Moves an active attempt to "finished" and queues its final report.
    pub fn finish(&self, a: &AttemptRef, report: pb::TaskReport) {
        {
            let mut inner = self.lock();
            inner.active.remove(a);
            inner.fenced.remove(a);
            inner.in_worker.remove(a);
            inner.remember_finished(a);
            inner.pending.push_back(Report { attempt: a.clone(), is_final: true, msg: report });
        }
        self.wake.notify_one();
    }

    /// Cancels an active attempt; `false` when it is not active (unknown or already finished).
    pub fn cancel(&self, a: &AttemptRef) -> bool {
        match self.lock().active.get(a) {
            Some(token) => {
                token.cancel();
                true
            }
            None => false,
        }
    }

    /// Fencing ([`crate::lease`]): cancels every active attempt, recording `why` as the reason
    /// its report gives. Returns how many attempts it cancelled.
    pub fn fence(&self, why: &str) -> usize {
        let mut inner = self.lock();
        let Inner { active, fenced, .. } = &mut *inner;
        let mut n = 0;
        for (a, token) in active.iter() {
            if !token.is_cancelled() {
                token.cancel();
                fenced.insert(a.clone(), why.to_string());
                n += 1;
            }
        }
        n
    }

    /// Marks an active attempt as running inside the worker (a collective, or a command without
    /// a supervisor): it cannot be frozen, so [`Attempts::lapse`] cancels it.
    pub fn mark_in_worker(&self, a: &AttemptRef) {
        let mut inner = self.lock();
        if inner.active.contains_key(a) {
            inner.in_worker.insert(a.clone());
        }
    }

    /// The lease ran out: cancels the active attempts that run inside the worker, recording
    /// `why` (the others are frozen by their supervisors, and killed by [`Attempts::fence`] if
    /// the coordinator gave the worker up). Returns how many it cancelled.
    pub fn lapse(&self, why: &str) -> usize {
        let mut inner = self.lock();
        let Inner { active, fenced, in_worker, .. } = &mut *inner;
        let mut n = 0;
        for a in in_worker.iter() {
            if let Some(token) = active.get(a).filter(|t| !t.is_cancelled()) {
                token.cancel();
                fenced.insert(a.clone(), why.to_string());
                n += 1;
            }
        }
        n
    }

    /// Why an active attempt was fenced, if it was.
    pub fn fenced(&self, a: &AttemptRef) -> Option<String> {
        self.lock().fenced.get(a).cloned()
    }

    /// Attempts running or being prepared.
    pub fn running(&self) -> Vec<pb::AttemptRef> {
        self.lock().active.keys().map(pb::AttemptRef::from).collect()
    }

    /// Every attempt to list in `Register`: running or being prepared, plus finished ones whose
    /// final report is not acknowledged yet.
    pub fn known(&self) -> Vec<pb::AttemptRef> {
        let inner = self.lock();
        inner.active.keys().chain(inner.unacked.iter()).map(pb::AttemptRef::from).collect()
    }

    /// How many reports wait to be sent (not counting a batch in flight).
    pub fn pending_reports(&self) -> usize {
        self.lock().pending.len()
    }

    /// Waits until at least one report is pending. Meant for a single waiter (the reporter).
    pub async fn reports_ready(&self) {
        loop {
            if !self.lock().pending.is_empty() {
                return;
            }
            // `notify_one` stores a permit when nobody waits, so a report queued between the
            // check above and this await still wakes us.
            self.wake.notified().await;
        }
    }

    /// Takes the pending reports, oldest first, as one batch of at most [`MAX_BATCH_BYTES`]
    /// encoded (but at least one report); `None` when there are none.
    pub fn take_batch(self: &Arc<Self>) -> Option<Batch> {
        self.take_batch_within(MAX_BATCH_BYTES)
    }

    fn take_batch_within(self: &Arc<Self>, max_bytes: usize) -> Option<Batch> {
        let mut inner = self.lock();
        let mut bytes = 0;
        let mut count = 0;
        for r in &inner.pending {
            // Field tag and length prefix of each repeated entry: a few bytes, over-estimated.
            let size = r.msg.encoded_len() + 8;
            if count > 0 && bytes + size > max_bytes {
                break;
            }
            bytes += size;
            count += 1;
        }
        if count == 0 {
            return None;
        }
        let reports: Vec<Report> = inner.pending.drain(..count).collect();
        drop(inner);
        Some(Batch { attempts: Arc::clone(self), reports: Some(reports) })
    }
}

/// Reports on their way to the coordinator. Dropping it without [`Batch::ack`] puts them back.
#[derive(Debug)]
pub struct Batch {
    attempts: Arc<Attempts>,
    reports: Option<Vec<Report>>,
}

impl Batch {
    /// The messages to send.
    pub fn messages(&self) -> Vec<pb::TaskReport> {
        self.reports.iter().flatten().map(|r| r.msg.clone()).collect()
    }

    pub fn len(&self) -> usize {
        self.reports.as_ref().map_or(0, Vec::len)
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The coordinator persisted these reports: forget them, and the finished attempts with them.
    pub fn ack(mut self) {
        let Some(reports) = self.reports.take() else { return };
        let mut inner = self.attempts.lock();
        for r in reports.iter().filter(|r| r.is_final) {
            inner.unacked.remove(&r.attempt);
        }
    }
}

impl Drop for Batch {
    fn drop(&mut self) {
        let Some(reports) = self.reports.take() else { return };
        {
            let mut inner = self.attempts.lock();
            for r in reports.into_iter().rev() {
                inner.pending.push_front(r);
            }
        }
        self.attempts.wake.notify_one();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use plexus_proto::JobId;

    fn attempt(job: JobId, rank: u32) -> AttemptRef {
        AttemptRef { job, task: "t".into(), rank, attempt: 1 }
    }

    fn report(a: &AttemptRef, state: pb::SubtaskState) -> pb::TaskReport {
        pb::TaskReport { attempt: Some(pb::AttemptRef::from(a)), state: state as i32, ..Default::default() }
    }

    fn states(batch: &Batch) -> Vec<(u32, i32)> {
        batch.messages().iter().map(|m| (m.attempt.as_ref().unwrap().rank, m.state)).collect()
    }

    #[test]
    fn attempts_are_deduplicated_and_known_until_acknowledged() {
        let attempts = Attempts::new(CancellationToken::new());
        let job = JobId::random();
        let (a, b) = (attempt(job, 0), attempt(job, 1));
        let token = attempts.begin(&a).unwrap();
        assert!(attempts.begin(&a).is_none(), "an active attempt is not started twice");
        assert!(attempts.complete_at_once(&b, report(&b, pb::SubtaskState::Succeeded)));
        assert!(!attempts.complete_at_once(&b, report(&b, pb::SubtaskState::Succeeded)));
        assert_eq!(attempts.running().len(), 1);
        assert_eq!(attempts.known().len(), 2);

        assert!(attempts.cancel(&a));
        assert!(token.is_cancelled());
        attempts.finish(&a, report(&a, pb::SubtaskState::Cancelled));
        assert!(!attempts.cancel(&a), "a finished attempt cannot be cancelled");
        assert!(attempts.running().is_empty());
        assert_eq!(attempts.known().len(), 2);

        let batch = attempts.take_batch().unwrap();
        assert_eq!(batch.len(), 2);
        batch.ack();
        assert!(attempts.known().is_empty());
        assert!(attempts.begin(&a).is_none(), "a recently finished attempt does not run again");
        assert!(attempts.take_batch().is_none());
    }

    #[test]
    fn unacknowledged_batches_go_back_in_order() {
        let attempts = Attempts::new(CancellationToken::new());
        let job = JobId::random();
        let (a, b) = (attempt(job, 0), attempt(job, 1));
        attempts.begin(&a).unwrap();
        attempts.progress(&a, report(&a, pb::SubtaskState::Running));
        let batch = attempts.take_batch().unwrap();
        // While the batch is in flight, more reports accumulate for the next call.
        attempts.finish(&a, report(&a, pb::SubtaskState::Succeeded));
        attempts.complete_at_once(&b, report(&b, pb::SubtaskState::Succeeded));
        assert_eq!(attempts.pending_reports(), 2);
        drop(batch);
        let batch = attempts.take_batch().unwrap();
        let (r, s) = (pb::SubtaskState::Running as i32, pb::SubtaskState::Succeeded as i32);
        assert_eq!(states(&batch), [(0, r), (0, s), (1, s)]);
        drop(batch);
        assert_eq!(attempts.known().len(), 2);
        attempts.take_batch().unwrap().ack();
        assert!(attempts.known().is_empty());
    }

    #[test]
    fn fencing_cancels_every_active_attempt_and_says_why() {
        let attempts = Attempts::new(CancellationToken::new());
        let job = JobId::random();
        let (a, b, c) = (attempt(job, 0), attempt(job, 1), attempt(job, 2));
        let (ta, tb) = (attempts.begin(&a).unwrap(), attempts.begin(&b).unwrap());
        assert!(attempts.cancel(&b), "b was cancelled by the coordinator before");
        attempts.complete_at_once(&c, report(&c, pb::SubtaskState::Succeeded));
        assert_eq!(attempts.fence("fenced: lease"), 1);
        assert!(ta.is_cancelled() && tb.is_cancelled());
        assert_eq!(attempts.fenced(&a).as_deref(), Some("fenced: lease"));
        assert_eq!(attempts.fenced(&b), None, "a cancel the coordinator asked for stays one");
        attempts.finish(&a, report(&a, pb::SubtaskState::Cancelled));
        assert_eq!(attempts.fenced(&a), None);
        assert_eq!(attempts.fence("again"), 0, "nothing left to fence");
    }

    #[test]
    fn a_lapse_cancels_only_what_runs_inside_the_worker() {
        let attempts = Attempts::new(CancellationToken::new());
        let job = JobId::random();
        let (command, collective) = (attempt(job, 0), attempt(job, 1));
        let (tc, tl) = (attempts.begin(&command).unwrap(), attempts.begin(&collective).unwrap());
        attempts.mark_in_worker(&collective);
        assert_eq!(attempts.lapse("fenced: lease"), 1);
        assert!(tl.is_cancelled(), "a collective cannot be frozen");
        assert!(!tc.is_cancelled(), "a command is frozen by its supervisor, not cancelled");
        assert_eq!(attempts.fenced(&collective).as_deref(), Some("fenced: lease"));
        assert_eq!(attempts.lapse("again"), 0);
        assert_eq!(attempts.fence("fenced: lost"), 1, "the coordinator gave the worker up: killed");
        assert!(tc.is_cancelled());
    }

    #[test]
    fn shutdown_cancels_every_attempt() {
        let root = CancellationToken::new();
        let attempts = Attempts::new(root.clone());
        let t = attempts.begin(&attempt(JobId::random(), 0)).unwrap();
        assert!(!attempts.shutting_down());
        root.cancel();
        assert!(t.is_cancelled() && attempts.shutting_down());
    }

    #[test]
    fn batches_stay_under_the_message_size_limit() {
        let attempts = Attempts::new(CancellationToken::new());
        let job = JobId::random();
        for rank in 0..5 {
            let a = attempt(job, rank);
            let r = pb::TaskReport { stdout_tail: vec![b'x'; 1000], ..report(&a, pb::SubtaskState::Succeeded) };
            attempts.complete_at_once(&a, r);
        }
        let first = attempts.take_batch_within(2500).unwrap();
        assert_eq!(first.len(), 2);
        let second = attempts.take_batch_within(10).unwrap();
        assert_eq!(second.len(), 1, "one report always goes, whatever its size");
        assert_eq!(attempts.take_batch().unwrap().len(), 2);
        drop(second);
        drop(first);
        assert_eq!(states(&attempts.take_batch().unwrap()).iter().map(|s| s.0).collect::<Vec<_>>(), [0, 1, 2, 3, 4]);
    }

    #[tokio::test]
    async fn the_reporter_wakes_for_reports_queued_before_it_waits() {
        let attempts = Attempts::new(CancellationToken::new());
        let a = attempt(JobId::random(), 0);
        attempts.complete_at_once(&a, report(&a, pb::SubtaskState::Succeeded));
        attempts.reports_ready().await;
        assert_eq!(attempts.take_batch().unwrap().len(), 1);
    }
}
