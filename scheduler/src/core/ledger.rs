//! The worker ledger: every worker the core knows, what each offers and what attempts hold on it,
//! and which workers hold each object.
//!
//! Invariants kept here, behind private fields:
//! - A worker's `allocated` resources are exactly the sum of the requests of the attempts placed
//!   on it (`placed`) and of the gang members holding a reservation there (`reserved`). Only
//!   [`Worker::reserve`], [`Worker::release`], [`Worker::place`] and [`Worker::free`] change
//!   them, each moving one attempt's [`Claim`] in or out together with its devices.
//! - A whole GPU device belongs to at most one placed attempt (`gpus_used`), and a device shared
//!   by `gpu_share` attempts (`gpu_shared`) is in no one's `gpus_used`.
//! - The holders index lists exactly the workers whose last report (or succeeded attempt) says
//!   they hold each object, less the copies found bad (served bytes that did not match the
//!   object's digest): it changes only with a worker's objects.
//! - The epoch grows whenever the set of workers that could take work changes (a worker
//!   registers, is lost, drained, undrained or removed): what a waiting task's reason depends on.
//! - The index of workers with room ([`Rooms`]) holds exactly the workers with at least
//!   [`ROOM_CORES`] free: it is updated whenever a worker is registered, restored or removed and
//!   when a [`WorkerMut`] (the only way to change what attempts hold) is dropped.

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};

use std::sync::Arc;

use plexus_proto::{JobId, ObjectId, Resources, WorkerId};

use super::messages::NodeReport;
use super::records::WorkerRecord;
use crate::error::Error;
use crate::spec::constraints::Constraint;

/// An attempt, as the ledger keys it: (job, subtask index).
pub type AttemptKey = (JobId, u32);

/// What one attempt holds on a worker: its request and, for an attempt that shares a GPU, the
/// device memory it sets aside on one device.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Claim {
    pub resources: Resources,
    pub shared_memory: Option<u64>,
    /// Whether it takes one of the worker's `max_attempts` slots: every attempt that runs a
    /// process does; a built-in `noop` runs nothing and holds nothing, so it takes none.
    pub slot: bool,
}

/// Which devices an attempt being placed gets.
#[derive(Clone, Copy, Debug)]
pub enum Devices<'a> {
    /// The device a GPU gang's search planned for it when that is still free (or, sharing, still
    /// has room), else the lowest free (or the least shared device with room).
    Preferred(&'a [u32]),
    /// Exactly these, as stored before a restart.
    Exactly(&'a [u32]),
}

/// A worker in memory. Its fields are read through accessors; what attempts hold on it changes
/// only through [`Worker::reserve`], [`Worker::release`], [`Worker::place`] and [`Worker::free`].
#[derive(Debug)]
pub struct Worker {
    record: WorkerRecord,
    /// Registered with this coordinator process (a session is live). False after a restart until
    /// the worker registers again; assignments go only to connected workers.
    connected: bool,
    node: NodeReport,
    /// placed + reserved.
    allocated: Resources,
    placed: BTreeSet<AttemptKey>,
    /// Of `placed`, those whose claim takes no slot (`Claim::slot` false).
    slotless: BTreeSet<AttemptKey>,
    objects: HashMap<ObjectId, u64>,
    /// Objects whose copy here served bytes that did not match their digest: not held, whatever
    /// the worker's reports say, until a succeeded attempt writes the object here again (or the
    /// worker stops listing it, or is lost).
    bad: HashSet<ObjectId>,
    /// GPU device indices held by placed attempts: each device belongs to one attempt at a time.
    gpus_used: BTreeSet<u32>,
    /// Gang members holding a reservation here: their requests are in `allocated` too.
    reserved: BTreeSet<AttemptKey>,
    /// Devices shared by `gpu_share` attempts (placed or reserved): device → (their
    /// `gpu_memory` summed, how many). A shared device is in no one's `gpus_used` and counts as
    /// taken for whole-device requests.
    gpu_shared: BTreeMap<u32, (u64, u32)>,
    /// For each sharing attempt placed here, the sharing attempts it met on its device (in
    /// memory only: what the GPU learner is told when it ends).
    gpu_peers: HashMap<AttemptKey, BTreeSet<AttemptKey>>,
}

impl Worker {
    fn new(record: WorkerRecord, connected: bool) -> Worker {
        Worker {
            record,
            connected,
            node: NodeReport::default(),
            allocated: Resources::default(),
            placed: BTreeSet::new(),
            slotless: BTreeSet::new(),
            objects: HashMap::new(),
            bad: HashSet::new(),
            gpus_used: BTreeSet::new(),
            reserved: BTreeSet::new(),
            gpu_shared: BTreeMap::new(),
            gpu_peers: HashMap::new(),
        }
    }

    pub fn record(&self) -> &WorkerRecord {
        &self.record
    }

    pub fn id(&self) -> WorkerId {
        self.record.id
    }

    /// Registered with this coordinator process (a session is live).
    pub fn connected(&self) -> bool {
        self.connected
    }

    /// What the worker last reported of itself.
    pub fn node(&self) -> &NodeReport {
        &self.node
    }

    /// What placed and reserved attempts hold here.
    pub fn allocated(&self) -> Resources {
        self.allocated
    }

    /// The attempts placed here.
    pub fn placed(&self) -> &BTreeSet<AttemptKey> {
        &self.placed
    }

    /// The gang members holding a reservation here.
    pub fn reserved(&self) -> &BTreeSet<AttemptKey> {
        &self.reserved
    }

    /// The objects it holds, with their sizes.
    pub fn objects(&self) -> &HashMap<ObjectId, u64> {
        &self.objects
    }

    /// The devices placed attempts hold whole.
    pub fn gpus_used(&self) -> &BTreeSet<u32> {
        &self.gpus_used
    }

    /// The devices sharing attempts are on: device → (the memory they set aside, how many).
    pub fn gpu_shared(&self) -> &BTreeMap<u32, (u64, u32)> {
        &self.gpu_shared
    }

    /// For each sharing attempt placed here, the sharing attempts it met on its device.
    pub fn gpu_peers(&self) -> &HashMap<AttemptKey, BTreeSet<AttemptKey>> {
        &self.gpu_peers
    }

    /// Whether new work may be placed here: connected, alive and not drained.
    pub fn placeable(&self) -> bool {
        self.connected && self.record.alive && !self.record.draining
    }

    /// Connected and alive: it runs what it is sent (drained or not).
    pub fn live(&self) -> bool {
        self.connected && self.record.alive
    }

    /// How many more attempts it takes at once (`max_attempts` less those placed and reserved
    /// that take a slot); `u32::MAX` when it sets no bound.
    pub fn free_slots(&self) -> u32 {
        match self.record.capacity.max_attempts {
            0 => u32::MAX,
            max => {
                let held = self.placed.len() - self.slotless.len() + self.reserved.len();
                max.saturating_sub(u32::try_from(held).unwrap_or(u32::MAX))
            }
        }
    }

    /// What is not allocated: its capacity less what attempts hold, shared devices counted as
    /// taken; [`Resources::NO_ROOM`] when it runs as many attempts as it takes.
    pub fn available(&self) -> Resources {
        self.room(true)
    }

    /// What is not allocated, for an attempt that takes a slot (`slot`) or none (a `noop`,
    /// which fits however many attempts run here).
    pub fn room(&self, slot: bool) -> Resources {
        if slot && self.free_slots() == 0 {
            return Resources::NO_ROOM;
        }
        let mut free = self.record.capacity.resources().minus(&self.allocated);
        free.gpu = free.gpu.saturating_sub(self.gpu_shared.len() as u32);
        free
    }

    /// The `n` lowest device indices no placed attempt holds and none shares, or `None` if
    /// fewer are free.
    pub fn free_gpus(&self, n: u32) -> Option<Vec<u32>> {
        let free: Vec<u32> = self.free_devices().into_iter().take(n as usize).collect();
        (free.len() == n as usize).then_some(free)
    }

    /// Every device index no placed attempt holds and none shares.
    pub fn free_devices(&self) -> Vec<u32> {
        self.record
            .capacity
            .gpus
            .iter()
            .map(|g| g.index)
            .filter(|i| !self.gpus_used.contains(i) && !self.gpu_shared.contains_key(i))
            .collect()
    }

    /// The devices a sharing task needing `memory` bytes could join now: not held whole, and
    /// with that much memory left after the sharing attempts already there (a device whose
    /// memory the worker did not report is taken at its word: any amount fits).
    pub fn shareable_gpus(&self, memory: u64) -> Vec<u32> {
        self.record
            .capacity
            .gpus
            .iter()
            .filter(|g| !self.gpus_used.contains(&g.index))
            .filter(|g| {
                let used = self.gpu_shared.get(&g.index).map_or(0, |s| s.0);
                g.memory == 0 || used.saturating_add(memory) <= g.memory
            })
            .map(|g| g.index)
            .collect()
    }

    /// Sets a gang member's claim aside here; returns the device a sharing member joined: the
    /// one `planned` for it (a GPU gang's search) when it still has room, else the least shared.
    pub fn reserve(&mut self, key: AttemptKey, claim: Claim, planned: Option<u32>) -> Vec<u32> {
        self.allocated.add(&claim.resources);
        self.reserved.insert(key);
        match claim.shared_memory {
            Some(memory) => self.join_shared_gpu(memory, planned).into_iter().collect(),
            None => Vec::new(),
        }
    }

    /// Gives back a reservation made with [`Worker::reserve`] (`gpus`: the devices it set memory
    /// aside on); false, changing nothing, when `key` holds none here.
    pub fn release(&mut self, key: AttemptKey, claim: Claim, gpus: &[u32]) -> bool {
        if !self.reserved.remove(&key) {
            return false;
        }
        self.allocated.sub(&claim.resources);
        if let Some(memory) = claim.shared_memory {
            for &g in gpus {
                self.unshare_gpu(g, memory);
            }
        }
        true
    }

    /// Places an attempt here and returns its devices. A sharing attempt joins one device with
    /// room for its memory; a whole-device attempt gets the lowest free indices. The count fits
    /// (the placement was feasible, and `allocated.gpu` plus the shared devices count exactly the
    /// devices taken), so they are found.
    pub fn place(&mut self, key: AttemptKey, claim: Claim, devices: Devices<'_>) -> Vec<u32> {
        let want = claim.resources.gpu as usize;
        let gpus = match (claim.shared_memory, devices) {
            (Some(memory), Devices::Exactly(gpus)) => {
                for &g in gpus {
                    self.share_gpu(g, memory);
                }
                gpus.to_vec()
            }
            (Some(memory), Devices::Preferred(planned)) => {
                self.join_shared_gpu(memory, planned.first().copied()).into_iter().collect()
            }
            (None, Devices::Exactly(gpus)) => gpus.to_vec(),
            (None, Devices::Preferred(planned)) => {
                // (A GPU gang member gets the device its search planned, when that is still free.)
                if want == 1 && planned.len() == 1 && self.free_devices().contains(&planned[0]) {
                    planned.to_vec()
                } else {
                    self.free_gpus(claim.resources.gpu).unwrap_or_default()
                }
            }
        };
        if claim.shared_memory.is_none() {
            self.gpus_used.extend(gpus.iter().copied());
        }
        self.allocated.add(&claim.resources);
        self.placed.insert(key);
        if !claim.slot {
            self.slotless.insert(key);
        }
        gpus
    }

    /// Frees what a placed attempt held (`gpus`: its devices); false, changing nothing, when it
    /// is not placed here.
    pub fn free(&mut self, key: AttemptKey, claim: Claim, gpus: &[u32]) -> bool {
        if !self.placed.remove(&key) {
            return false;
        }
        self.slotless.remove(&key);
        self.gpu_peers.remove(&key);
        self.allocated.sub(&claim.resources);
        for &g in gpus {
            match claim.shared_memory {
                Some(memory) => self.unshare_gpu(g, memory),
                None => {
                    self.gpus_used.remove(&g);
                }
            }
        }
        true
    }

    /// Sharing attempt `key` joined a device where `there` already were: they have all met.
    pub fn met(&mut self, key: AttemptKey, there: Vec<AttemptKey>) {
        for p in &there {
            self.gpu_peers.entry(*p).or_default().insert(key);
        }
        self.gpu_peers.entry(key).or_default().extend(there);
    }

    fn join_shared_gpu(&mut self, memory: u64, planned: Option<u32>) -> Option<u32> {
        let room = self.shareable_gpus(memory);
        let device = planned
            .filter(|g| room.contains(g))
            .or_else(|| room.iter().copied().min_by_key(|g| (self.gpu_shared.get(g).map_or(0, |s| s.1), *g)))?;
        self.share_gpu(device, memory);
        Some(device)
    }

    fn share_gpu(&mut self, gpu: u32, memory: u64) {
        let s = self.gpu_shared.entry(gpu).or_insert((0, 0));
        s.0 = s.0.saturating_add(memory);
        s.1 += 1;
    }

    fn unshare_gpu(&mut self, gpu: u32, memory: u64) {
        if let Some(s) = self.gpu_shared.get_mut(&gpu) {
            s.0 = s.0.saturating_sub(memory);
            s.1 = s.1.saturating_sub(1);
            if s.1 == 0 {
                self.gpu_shared.remove(&gpu);
            }
        }
    }
}

/// Free cores below which a worker is not in [`Rooms`]: a request of at least twice this many
/// fits only on a worker that is (see [`Ledger::with_room`]).
pub const ROOM_CORES: f64 = 1e-6;

/// The workers with cores free (issue 35): for an attempt that takes a slot (`slot`: a free slot
/// too) and for one that takes none (`any`, a `noop`). A sampled decision walks these rather than
/// every worker: in a full cluster with a deep queue, walking the ledger from the cursor to find
/// the few workers with room made every decision O(workers). Kept by [`WorkerMut`], through
/// which alone what attempts hold on a worker changes, and by registration and removal.
#[derive(Default)]
struct Rooms {
    slot: BTreeSet<WorkerId>,
    any: BTreeSet<WorkerId>,
}

impl Rooms {
    fn update(&mut self, w: &Worker) {
        for (set, slot) in [(&mut self.slot, true), (&mut self.any, false)] {
            if w.room(slot).cpu >= ROOM_CORES {
                set.insert(w.id());
            } else {
                set.remove(&w.id());
            }
        }
    }

    fn forget(&mut self, id: &WorkerId) {
        self.slot.remove(id);
        self.any.remove(id);
    }

    fn of(&self, slot: bool) -> &BTreeSet<WorkerId> {
        if slot { &self.slot } else { &self.any }
    }
}

/// A worker borrowed to change what attempts hold on it ([`Ledger::get_mut`]); when it is
/// dropped, the ledger's index of workers with room learns what changed.
pub struct WorkerMut<'a> {
    worker: &'a mut Worker,
    rooms: &'a mut Rooms,
}

impl std::ops::Deref for WorkerMut<'_> {
    type Target = Worker;

    fn deref(&self) -> &Worker {
        self.worker
    }
}

impl std::ops::DerefMut for WorkerMut<'_> {
    fn deref_mut(&mut self) -> &mut Worker {
        self.worker
    }
}

impl Drop for WorkerMut<'_> {
    fn drop(&mut self) {
        self.rooms.update(self.worker);
    }
}

/// Distinct constraint sets whose admitting workers are kept; past it the cache starts again.
const ADMITTING_SETS: usize = 64;

/// The workers (ids, in order) that meet each set of constraints decisions asked for, as of the
/// ledger's epoch (which moves when a worker registers, is drained or removed: when what it
/// offers, labels included, can change). A task with constraints considers only these: walking
/// every worker to find the few that meet them made each decision of a task confined to 2 of
/// 5,000 workers O(workers), at every round that retried it (issue 35's fleet with real
/// workers beside hollow ones: the label comparisons were 18 % of the engine's time).
#[derive(Default)]
struct Admitting {
    epoch: u64,
    sets: HashMap<Vec<Constraint>, Arc<[WorkerId]>>,
}

/// Every worker by id, the holders of each object, and the workers' epoch.
#[derive(Default)]
pub struct Ledger {
    workers: BTreeMap<WorkerId, Worker>,
    /// Which workers hold each object.
    holders: HashMap<ObjectId, BTreeSet<WorkerId>>,
    /// Bumped whenever the workers that could take work change.
    epoch: u64,
    /// The workers that meet each set of constraints decisions asked for.
    admitting: std::cell::RefCell<Admitting>,
    /// The workers with cores free.
    rooms: Rooms,
}

impl Ledger {
    pub fn get(&self, id: &WorkerId) -> Option<&Worker> {
        self.workers.get(id)
    }

    /// A worker, to change what attempts hold on it.
    pub fn get_mut(&mut self, id: &WorkerId) -> Option<WorkerMut<'_>> {
        let worker = self.workers.get_mut(id)?;
        Some(WorkerMut { worker, rooms: &mut self.rooms })
    }

    /// The workers with at least [`ROOM_CORES`] free for an attempt that takes a slot (`slot`)
    /// or none, whose ids are in `range`, by id.
    pub fn with_room(
        &self,
        slot: bool,
        range: (std::ops::Bound<WorkerId>, std::ops::Bound<WorkerId>),
    ) -> impl Iterator<Item = &Worker> {
        self.rooms.of(slot).range(range).filter_map(|id| self.workers.get(id))
    }

    /// Whether `id` is among the workers with room for an attempt that takes a slot (`slot`) or
    /// none.
    pub fn has_room(&self, slot: bool, id: &WorkerId) -> bool {
        self.rooms.of(slot).contains(id)
    }

    /// Every worker, by id.
    pub fn values(&self) -> impl Iterator<Item = &Worker> {
        self.workers.values()
    }

    /// The workers after `after` (from the first without it), by id.
    pub fn after(&self, after: Option<WorkerId>) -> impl Iterator<Item = &Worker> {
        use std::ops::Bound::{Excluded, Unbounded};
        let from = after.map_or(Unbounded, Excluded);
        self.workers.range((from, Unbounded)).map(|(_, w)| w)
    }

    pub fn len(&self) -> usize {
        self.workers.len()
    }

    pub fn is_empty(&self) -> bool {
        self.workers.is_empty()
    }

    /// The workers last known to hold `o` (alive or not).
    pub fn holders(&self, o: &ObjectId) -> Option<&BTreeSet<WorkerId>> {
        self.holders.get(o)
    }

    pub fn epoch(&self) -> u64 {
        self.epoch
    }

    /// The workers that meet `constraints` (none: `None`, every worker does), in id order.
    pub fn admitting(&self, constraints: &[Constraint]) -> Option<Arc<[WorkerId]>> {
        if constraints.is_empty() {
            return None;
        }
        let mut cache = self.admitting.borrow_mut();
        if cache.epoch != self.epoch {
            cache.sets.clear();
            cache.epoch = self.epoch;
        }
        // Looked up by the slice: the key is copied only when a set is first met.
        if let Some(ids) = cache.sets.get(constraints) {
            return Some(ids.clone());
        }
        if cache.sets.len() >= ADMITTING_SETS {
            cache.sets.clear();
        }
        let ids: Arc<[WorkerId]> =
            self.workers.values().filter(|w| w.record.capacity.admits(constraints)).map(|w| w.id()).collect();
        cache.sets.insert(constraints.to_vec(), ids.clone());
        Some(ids)
    }

    /// A worker as stored, not connected until it registers again.
    pub fn restore(&mut self, record: WorkerRecord) {
        let w = Worker::new(record, false);
        self.rooms.update(&w);
        self.workers.insert(w.id(), w);
    }

    /// A worker registered (new, or again): its record replaces the stored one and it is
    /// connected. What attempts hold on it stays.
    pub fn register(&mut self, record: WorkerRecord) {
        self.epoch += 1;
        let id = record.id;
        let w = self.workers.entry(id).or_insert_with(|| Worker::new(record.clone(), true));
        w.record = record;
        w.connected = true;
        self.rooms.update(w);
    }

    /// Drains (`on`) or undrains a worker; true when that changed it.
    pub fn set_draining(&mut self, id: WorkerId, on: bool) -> Result<bool, Error> {
        let w = self.workers.get_mut(&id).ok_or(Error::NoWorker(id))?;
        if w.record.draining == on {
            return Ok(false);
        }
        w.record.draining = on;
        self.epoch += 1;
        Ok(true)
    }

    /// Forgets a lost worker and the objects it was last known to hold; a live one is refused.
    pub fn remove(&mut self, id: WorkerId) -> Result<(), Error> {
        let w = self.workers.get(&id).ok_or(Error::NoWorker(id))?;
        if w.record.alive {
            return Err(Error::WorkerBusy(format!(
                "worker {id} is alive: only a lost worker can be removed (drain it, stop its process, and remove it once it is lost)"
            )));
        }
        let w = self.workers.remove(&id).expect("checked");
        self.rooms.forget(&id);
        for o in w.objects.keys() {
            self.drop_holder(o, id);
        }
        self.epoch += 1;
        Ok(())
    }

    /// A heartbeat of session `session` at `now`; false if the worker must register again
    /// (unknown, not connected, or another session).
    pub fn heartbeat(&mut self, id: WorkerId, session: &str, now: u64) -> bool {
        match self.workers.get_mut(&id) {
            Some(w) if w.connected && w.record.session == session => {
                w.record.last_heartbeat = now;
                true
            }
            _ => false,
        }
    }

    /// Raises the longest heartbeat timeout worker `id`'s session was told to `timeout_ms`; true
    /// when it grew (its record is to be stored again).
    pub fn raise_timeout(&mut self, id: WorkerId, timeout_ms: u64) -> bool {
        match self.workers.get_mut(&id) {
            Some(w) if w.record.timeout_ms < timeout_ms => {
                w.record.timeout_ms = timeout_ms;
                true
            }
            _ => false,
        }
    }

    /// A fresh heartbeat timeout from `now` for every alive worker; how many.
    pub fn grace(&mut self, now: u64) -> usize {
        let mut n = 0;
        for w in self.workers.values_mut().filter(|w| w.record.alive) {
            w.record.last_heartbeat = w.record.last_heartbeat.max(now);
            n += 1;
        }
        n
    }

    /// The worker's report of itself, with the objects it holds now.
    pub fn update_node(&mut self, id: WorkerId, node: NodeReport) {
        let Some(w) = self.workers.get_mut(&id) else { return };
        // A bad copy the worker no longer lists is gone; one it still lists is not held.
        w.bad.retain(|o| node.objects.iter().any(|(n, _)| n == o));
        let new: HashMap<ObjectId, u64> = node.objects.iter().filter(|(o, _)| !w.bad.contains(o)).cloned().collect();
        let gone: Vec<ObjectId> = w.objects.keys().filter(|o| !new.contains_key(*o)).cloned().collect();
        for o in new.keys() {
            if !w.objects.contains_key(o) {
                self.holders.entry(o.clone()).or_default().insert(id);
            }
        }
        w.objects = new;
        w.node = node;
        for o in gone {
            self.drop_holder(&o, id);
        }
    }

    /// Objects a succeeded attempt wrote on `id`.
    pub fn add_objects(&mut self, id: WorkerId, objects: Vec<(ObjectId, u64)>) {
        let Some(w) = self.workers.get_mut(&id) else { return };
        for (o, size) in objects {
            w.bad.remove(&o);
            w.objects.insert(o.clone(), size);
            self.holders.entry(o).or_default().insert(id);
        }
    }

    /// Declares a worker lost: not alive, not connected, holding nothing. Returns the objects no
    /// worker holds any more, or `None` for an unknown worker.
    pub fn lose(&mut self, id: WorkerId) -> Option<HashSet<ObjectId>> {
        let w = self.workers.get_mut(&id)?;
        self.epoch += 1;
        w.record.alive = false;
        w.connected = false;
        let objects: Vec<ObjectId> = w.objects.drain().map(|(o, _)| o).collect();
        w.bad.clear();
        let mut gone = HashSet::new();
        for o in objects {
            if self.drop_holder(&o, id) {
                gone.insert(o);
            }
        }
        Some(gone)
    }

    /// The copy of `o` on `id` served bytes that do not match its digest: `id` no longer holds
    /// it (see `Worker::bad`). True when it was listed as holding it.
    pub fn distrust(&mut self, id: WorkerId, o: &ObjectId) -> bool {
        let Some(w) = self.workers.get_mut(&id) else { return false };
        w.bad.insert(o.clone());
        if w.objects.remove(o).is_none() {
            return false;
        }
        self.drop_holder(o, id);
        true
    }

    /// Removes `id` from `o`'s holders; true when none is left.
    fn drop_holder(&mut self, o: &ObjectId, id: WorkerId) -> bool {
        let Some(h) = self.holders.get_mut(o) else { return false };
        h.remove(&id);
        if h.is_empty() {
            self.holders.remove(o);
            return true;
        }
        false
    }
}

impl std::ops::Index<&WorkerId> for Ledger {
    type Output = Worker;

    fn index(&self, id: &WorkerId) -> &Worker {
        &self.workers[id]
    }
}
