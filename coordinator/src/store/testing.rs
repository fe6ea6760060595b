//! A store for tests of what writes: a [`MemStore`] whose commits can be held, made to fail,
//! and are counted.

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Condvar, Mutex};

use plexus_proto::JobId;
use plexus_scheduler::core::{PlacementRecord, Snapshot};

use super::{Batch, MemStore, Store};
use crate::error::Error;

/// Commits wait while the store is closed ([`HeldStore::close`]), fail with "the disk is gone"
/// while `failing` is set, and each one tried is counted in `writes`.
#[derive(Default)]
pub(crate) struct HeldStore {
    pub(crate) inner: MemStore,
    closed: Mutex<bool>,
    opened: Condvar,
    pub(crate) failing: AtomicBool,
    pub(crate) writes: AtomicUsize,
}

impl HeldStore {
    pub(crate) fn close(&self, closed: bool) {
        *self.closed.lock().unwrap() = closed;
        self.opened.notify_all();
    }
}

impl Store for HeldStore {
    fn load(&self) -> Result<Snapshot, Error> {
        self.inner.load()
    }
    fn placement(&self, job: JobId, idx: u32) -> Result<Option<PlacementRecord>, Error> {
        self.inner.placement(job, idx)
    }
    fn commit(&self, batch: Batch) -> Result<(), Error> {
        let mut closed = self.closed.lock().unwrap();
        while *closed {
            closed = self.opened.wait(closed).unwrap();
        }
        self.writes.fetch_add(1, Ordering::SeqCst);
        if self.failing.load(Ordering::SeqCst) {
            return Err(Error::Unavailable("the disk is gone".into()));
        }
        self.inner.commit(batch)
    }
    fn load_estimates(&self) -> Result<Option<Vec<u8>>, Error> {
        self.inner.load_estimates()
    }
    fn save_estimates(&self, bytes: &[u8]) -> Result<(), Error> {
        self.inner.save_estimates(bytes)
    }
}
