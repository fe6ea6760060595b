//! The engine's rounds around their commits (`crate::commit`): waiting for commands while a
//! commit is written, and what is sent once it is durable — each round's assignments and its
//! watchers' views.

use std::sync::mpsc as std_mpsc;
use std::time::Instant;

use plexus_proto::JobId;
use plexus_scheduler::core::Outbox;

use super::{Cmd, Deferred, Engine, InFlight, MAX_BATCH, MAX_IN_FLIGHT, Next, POLL_WHILE_COMMITTING, TICK};
use crate::commit::{Done, encode};
use crate::error::Error;
use crate::queue;
use crate::view::{Detail, JobView};

impl Engine {
    pub(super) fn run(mut self, rx: queue::Receiver<Cmd>) -> Result<(), Error> {
        let mut last_round = Instant::now();
        loop {
            let first = match self.next_command(&rx, last_round)? {
                Next::Cmd(c) => Some(c),
                Next::Tick => None,
                Next::Disconnected => {
                    self.finish_all()?;
                    self.save_estimates((self.clock)(), true);
                    self.log_stats();
                    return Ok(());
                }
            };
            last_round = Instant::now();
            if self.round(&rx, first)? {
                self.finish_all()?;
                self.log_stats();
                return Ok(());
            }
        }
    }

    /// The next command, or a tick when none came for [`TICK`]. While commits are being written
    /// it waits in short steps, and sends each round's assignments as soon as its commit ends.
    fn next_command(&mut self, rx: &queue::Receiver<Cmd>, last_round: Instant) -> Result<Next, Error> {
        loop {
            self.finish_done()?;
            let wait = if self.inflight.is_empty() { TICK } else { POLL_WHILE_COMMITTING };
            match rx.recv_timeout(wait) {
                Ok(c) => return Ok(Next::Cmd(c)),
                Err(std_mpsc::RecvTimeoutError::Timeout) if last_round.elapsed() >= TICK => return Ok(Next::Tick),
                Err(std_mpsc::RecvTimeoutError::Timeout) => {}
                Err(std_mpsc::RecvTimeoutError::Disconnected) => return Ok(Next::Disconnected),
            }
        }
    }

    /// One round: the commands that have arrived (from `first`), the core's tick and
    /// placements, then the round's records and answers handed to the committer, behind the
    /// rounds still being written. Returns whether a `Stop` came.
    fn round(&mut self, rx: &queue::Receiver<Cmd>, first: Option<Cmd>) -> Result<bool, Error> {
        let now = (self.clock)();
        self.notice_stall(now);
        if self.acting.as_ref().is_some_and(|may| !may()) {
            self.core.grace(now);
        }
        let mut replies: Vec<Deferred> = Vec::new();
        let mut next = first;
        let mut n = 0;
        let mut stop = false;
        let t0 = Instant::now();
        while let Some(cmd) = next {
            if matches!(cmd, Cmd::Stop) {
                stop = true;
                break;
            }
            self.apply(cmd, now, &mut replies);
            n += 1;
            next = if n < MAX_BATCH { rx.try_recv().ok() } else { None };
        }
        let t1 = Instant::now();
        self.core.tick(now);
        self.core.schedule(now);
        let out = self.core.take_outbox();
        let t2 = Instant::now();
        if let Some(m) = &mut self.metrics {
            m.observe_round(&self.core, &out, (t2 - t0).as_secs_f64());
        }
        let batch = encode(&self.core, &out);
        let views = self.views(&out, now);
        let st = &mut self.stats;
        if n > 0 || !out.is_empty() {
            st.rounds += 1;
        }
        st.commands += n as u64;
        st.records += batch.len() as u64;
        st.apply += t1 - t0;
        st.schedule += t2 - t1;
        // A round with anything to write, answer or send goes to the committer, even one that
        // wrote nothing: what it answered may rest on what the rounds before it are writing.
        let idle = batch.is_empty()
            && replies.is_empty()
            && out.assignments.is_empty()
            && out.cancels.is_empty()
            && views.is_empty();
        if !idle {
            let pending = self.committer.send(batch, replies);
            self.inflight.push_back(InFlight { pending, out, views });
        }
        // The rounds being written are bounded: past that many, the oldest is waited for.
        while self.inflight.len() > MAX_IN_FLIGHT {
            self.finish_front()?;
        }
        self.save_estimates(now, stop);
        Ok(stop)
    }

    /// Finishes the rounds whose commits are done, oldest first, without waiting.
    fn finish_done(&mut self) -> Result<(), Error> {
        while let Some(done) = self.inflight.front().and_then(|f| f.pending.try_done()) {
            self.finish(done)?;
        }
        Ok(())
    }

    /// Waits for the oldest round being written, and finishes it.
    fn finish_front(&mut self) -> Result<(), Error> {
        let Some(f) = self.inflight.front() else { return Ok(()) };
        let done = f.pending.wait();
        self.finish(done)
    }

    /// Waits for every round being written (the engine is stopping).
    fn finish_all(&mut self) -> Result<(), Error> {
        while !self.inflight.is_empty() {
            self.finish_front()?;
        }
        Ok(())
    }

    /// The oldest round being written is done: on success its assignments and watchers' views
    /// go out (its callers were answered by the committer); a failed write stops the engine.
    fn finish(&mut self, done: Done) -> Result<(), Error> {
        let Some(mut f) = self.inflight.pop_front() else { return Ok(()) };
        if let Err(e) = done.result {
            // State in memory is ahead of the disk now; the only safe course is to stop and
            // let a restart reload what is durable. Callers see their replies dropped.
            tracing::error!(error = %e, "commit failed; stopping the engine");
            self.inflight.clear();
            return Err(e);
        }
        let t = Instant::now();
        if let Some(m) = &mut self.metrics
            && !f.out.is_empty()
        {
            m.observe_commit(done.took.as_secs_f64());
        }
        self.dispatch(&mut f.out);
        self.publish(f.views);
        self.stats.commit += done.took;
        self.stats.dispatch += t.elapsed();
        Ok(())
    }

    /// The new views of the watched jobs that changed in a round, as the round left them.
    pub(super) fn views(&mut self, out: &Outbox, now: u64) -> Vec<(JobId, JobView)> {
        if self.watchers.is_empty() {
            return Vec::new();
        }
        // Each changed job once, whether its record or only its subtasks changed.
        let changed: std::collections::BTreeSet<JobId> =
            out.jobs.iter().copied().chain(out.subtasks.iter().map(|(j, _)| *j)).collect();
        let mut views = Vec::new();
        for job in changed {
            let Some(tx) = self.watchers.get(&job) else { continue };
            if tx.receiver_count() == 0 {
                self.watchers.remove(&job);
                continue;
            }
            if let Some(j) = self.core.job(job) {
                views.push((job, JobView::of(j, Detail::Summary, now)));
            }
        }
        views
    }

    /// Wakes the watchers of the jobs that changed in a committed round.
    fn publish(&mut self, views: Vec<(JobId, JobView)>) {
        for (job, view) in views {
            let Some(tx) = self.watchers.get(&job) else { continue };
            let last = view.state.is_final();
            tx.send_replace(view);
            if last {
                // Dropping the sender ends every watch stream after its final status.
                self.watchers.remove(&job);
            }
        }
    }
}
