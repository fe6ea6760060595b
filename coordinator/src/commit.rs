//! The engine's group commits, pipelined (issue 35).
//!
//! Each engine round ends in one atomic, flushed write of the records it changed. Measured at
//! 5,000 hollow workers draining 100,000 subtasks, those writes were half the engine thread's
//! time (the flush waits for the disk), and the engine did nothing else meanwhile. Now the round's
//! records are encoded on the engine thread (they are read from the core) and written on a
//! thread of their own, the committer, while the engine applies the next commands and places
//! the next subtasks. What must wait for durability still waits: the committer answers the
//! round's callers only once its write is flushed, and the engine sends the round's assignments
//! and watchers' updates only once it hears that (`engine/rounds.rs`, `finish`). Commits stay in order:
//! the committer takes them in the order they were handed over, and what queued up while a
//! write ran goes in one write and one flush (group commit across rounds). At most
//! `MAX_IN_FLIGHT` rounds are being written at once (`engine.rs`). A failed write drops its
//! callers' answers and stops the engine, as before.

use std::sync::Arc;
use std::sync::mpsc as std_mpsc;
use std::time::{Duration, Instant};

use plexus_scheduler::core::{Core, Outbox};

use crate::error::Error;
use crate::store::{Batch, Store};

/// An answer to a caller, sent once its round is durable.
pub(crate) type Deferred = Box<dyn FnOnce() + Send>;

/// A commit the committer finished: its result, and how long the write and flush took.
pub(crate) struct Done {
    pub(crate) result: Result<(), Error>,
    pub(crate) took: Duration,
}

/// The committer thread and the way to it. Dropping it waits for the commits handed over.
pub(crate) struct Committer {
    tx: Option<std_mpsc::Sender<Commit>>,
    thread: Option<std::thread::JoinHandle<()>>,
}

struct Commit {
    batch: Batch,
    replies: Vec<Deferred>,
    done: std_mpsc::SyncSender<Done>,
}

/// A commit handed over and not yet known to be done.
pub(crate) struct Pending {
    done: std_mpsc::Receiver<Done>,
}

impl Committer {
    pub(crate) fn start(store: Arc<dyn Store>) -> Committer {
        let (tx, rx) = std_mpsc::channel::<Commit>();
        let thread = std::thread::Builder::new()
            .name("plexus-commit".into())
            .spawn(move || {
                // After a failed write nothing more is written or answered: a later round may
                // rest on what that one did not store. (The engine stops when it hears.)
                let mut failed: Option<String> = None;
                while let Ok(first) = rx.recv() {
                    // What queued up while the last write ran goes in one write and one flush,
                    // in the order the rounds were handed over.
                    let mut group = vec![first];
                    while group.len() < MAX_GROUP
                        && let Ok(c) = rx.try_recv()
                    {
                        group.push(c);
                    }
                    write(store.as_ref(), group, &mut failed);
                }
            })
            .expect("spawning the commit thread at start-up");
        Committer { tx: Some(tx), thread: Some(thread) }
    }

    /// Hands `batch` to the committer: it writes and flushes it, then sends `replies` (only if
    /// the write succeeded), then reports through the returned [`Pending`].
    pub(crate) fn send(&self, batch: Batch, replies: Vec<Deferred>) -> Pending {
        let (done, rx) = std_mpsc::sync_channel(1);
        if let Some(tx) = &self.tx {
            // A committer that is gone (it panicked) drops `done`: `Pending` reports that.
            let _ = tx.send(Commit { batch, replies, done });
        }
        Pending { done: rx }
    }
}

/// The most rounds written together.
const MAX_GROUP: usize = 64;

/// Writes the rounds of `group` as one batch and one flush; on success answers their callers,
/// oldest round first; then says how it went to each round's [`Pending`]. Once a write has
/// `failed`, writes nothing and answers nobody, and fails every round with that error's text.
fn write(store: &dyn Store, group: Vec<Commit>, failed: &mut Option<String>) {
    let mut batch = Batch::default();
    let mut rounds = Vec::with_capacity(group.len());
    for c in group {
        batch.append(c.batch);
        rounds.push((c.replies, c.done));
    }
    let t = Instant::now();
    let result = match failed {
        Some(e) => Err(Error::Unavailable(format!("an earlier commit failed: {e}"))),
        None if batch.is_empty() => Ok(()),
        None => store.commit(batch),
    };
    let took = t.elapsed();
    if let Err(e) = &result {
        failed.get_or_insert_with(|| e.to_string());
    }
    if result.is_ok() {
        for (replies, _) in &mut rounds {
            for r in replies.drain(..) {
                r();
            }
        }
    }
    let mut result = Some(result);
    for (_, done) in rounds {
        // The first round gets the error itself, the others its text.
        let r = match (result.take(), &*failed) {
            (Some(r), _) => r,
            (None, None) => Ok(()),
            (None, Some(e)) => Err(Error::Unavailable(format!("a commit written with this one failed: {e}"))),
        };
        // The engine may have stopped waiting (it is stopping); nothing to do then.
        let _ = done.send(Done { result: r, took });
    }
}

impl Drop for Committer {
    fn drop(&mut self) {
        drop(self.tx.take());
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

impl Pending {
    /// The commit's end, if it has ended.
    pub(crate) fn try_done(&self) -> Option<Done> {
        match self.done.try_recv() {
            Ok(d) => Some(d),
            Err(std_mpsc::TryRecvError::Empty) => None,
            Err(std_mpsc::TryRecvError::Disconnected) => Some(lost()),
        }
    }

    /// Waits for the commit's end.
    pub(crate) fn wait(&self) -> Done {
        self.done.recv().unwrap_or_else(|_| lost())
    }
}

fn lost() -> Done {
    Done {
        result: Err(Error::Unavailable("the commit thread ended before the commit did".into())),
        took: Duration::ZERO,
    }
}

/// The records `out` names, as the core holds them now, encoded for one commit.
pub(crate) fn encode(core: &Core, out: &Outbox) -> Batch {
    let mut b = Batch::default();
    for id in &out.jobs {
        if let Some(j) = core.job(*id) {
            b.job(j.record());
        }
    }
    for (job, idx) in &out.subtasks {
        if let Some(s) = core.subtask(*job, *idx) {
            b.subtask(*job, *idx, s);
        }
    }
    for (job, idx) in &out.placements {
        if let Some(p) = core.placement(*job, *idx) {
            b.placement(*job, *idx, p);
        }
    }
    for id in &out.workers {
        if let Some(w) = core.worker(*id) {
            b.worker(w.record());
        }
    }
    for id in &out.removed_workers {
        b.remove_worker(*id);
    }
    b
}

#[cfg(test)]
mod tests {
    use std::sync::Mutex;
    use std::sync::atomic::Ordering;

    use super::*;
    use crate::store::testing::HeldStore;

    fn one_record(key: u8) -> Batch {
        let mut b = Batch::default();
        b.raw(vec![key], b"{}".to_vec());
        b
    }

    /// After a failed write the committer writes nothing more and answers nobody: a later
    /// round may rest on what the failed one did not store.
    #[test]
    fn after_a_failed_write_nothing_more_is_written_or_answered() {
        let store = Arc::new(HeldStore::default());
        store.failing.store(true, Ordering::SeqCst);
        let committer = Committer::start(store.clone());
        let answered = Arc::new(Mutex::new(Vec::new()));
        let reply = |n: u32| -> Vec<Deferred> {
            let a = answered.clone();
            vec![Box::new(move || a.lock().unwrap().push(n))]
        };
        let first = committer.send(one_record(1), reply(1));
        let e = first.wait().result.unwrap_err().to_string();
        assert!(e.contains("the disk is gone"), "{e}");
        let later = committer.send(one_record(2), reply(2));
        let e = later.wait().result.unwrap_err().to_string();
        assert!(e.contains("an earlier commit failed: the disk is gone"), "{e}");
        assert_eq!(store.writes.load(Ordering::SeqCst), 1, "written after a failed write");
        assert!(answered.lock().unwrap().is_empty(), "answered: {:?}", answered.lock().unwrap());
    }
}
