//! Workers: registration (and reconciliation after either side restarted), heartbeats, the
//! objects they hold, loss after missed heartbeats, and the resources attempts hold on them.

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};

use plexus_proto::{AttemptRef, JobId, ObjectId, Resources, SubtaskState, WorkerId};

use super::{Core, NodeReport, Registration, WorkerRecord};

/// A worker in memory.
pub struct Worker {
    pub record: WorkerRecord,
    /// Registered with this coordinator process (a session is live). False after a restart until
    /// the worker registers again; assignments go only to connected workers.
    pub connected: bool,
    pub node: NodeReport,
    pub allocated: Resources,
    pub placed: BTreeSet<(JobId, u32)>,
    pub objects: HashMap<ObjectId, u64>,
    /// GPU device indices held by placed attempts: each device belongs to one attempt at a time.
    pub gpus_used: BTreeSet<u32>,
    /// Gang members holding a reservation here: their requests are in `allocated` too, so
    /// `allocated` = placed + reserved.
    pub reserved: BTreeSet<(JobId, u32)>,
    /// Devices shared by `gpu_share` attempts (placed or reserved): device → (their
    /// `gpu_memory` summed, how many). A shared device is in no one's `gpus_used` and counts as
    /// taken for whole-device requests.
    pub gpu_shared: BTreeMap<u32, (u64, u32)>,
    /// For each sharing attempt placed here, the sharing attempts it met on its device (in
    /// memory only: what the GPU learner is told when it ends).
    pub gpu_peers: HashMap<(JobId, u32), BTreeSet<(JobId, u32)>>,
}

impl Worker {
    /// Whether new work may be placed here: connected, alive and not drained.
    pub fn placeable(&self) -> bool {
        self.connected && self.record.alive && !self.record.draining
    }

    pub fn free(&self) -> Resources {
        let mut free = self.record.capacity.resources().minus(&self.allocated);
        free.gpu = free.gpu.saturating_sub(self.gpu_shared.len() as u32);
        free
    }

    /// The `n` lowest device indices no placed attempt holds and none shares, or `None` if
    /// fewer are free.
    pub fn free_gpus(&self, n: u32) -> Option<Vec<u32>> {
        let free: Vec<u32> = self
            .record
            .capacity
            .gpus
            .iter()
            .map(|g| g.index)
            .filter(|i| !self.gpus_used.contains(i) && !self.gpu_shared.contains_key(i))
            .take(n as usize)
            .collect();
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

    /// Where a sharing attempt of `memory` bytes joins, and joins it: `planned` (a GPU gang's
    /// search's choice) when it still has room, else the least shared device with room.
    pub fn join_shared_gpu(&mut self, memory: u64, planned: Option<u32>) -> Option<u32> {
        let room = self.shareable_gpus(memory);
        let device = planned
            .filter(|g| room.contains(g))
            .or_else(|| room.iter().copied().min_by_key(|g| (self.gpu_shared.get(g).map_or(0, |s| s.1), *g)))?;
        self.share_gpu(device, memory);
        Some(device)
    }

    /// A sharing attempt of `memory` bytes joins device `gpu`.
    pub fn share_gpu(&mut self, gpu: u32, memory: u64) {
        let s = self.gpu_shared.entry(gpu).or_insert((0, 0));
        s.0 = s.0.saturating_add(memory);
        s.1 += 1;
    }

    /// A sharing attempt of `memory` bytes leaves device `gpu`.
    pub fn unshare_gpu(&mut self, gpu: u32, memory: u64) {
        if let Some(s) = self.gpu_shared.get_mut(&gpu) {
            s.0 = s.0.saturating_sub(memory);
            s.1 = s.1.saturating_sub(1);
            if s.1 == 0 {
                self.gpu_shared.remove(&gpu);
            }
        }
    }
}

impl Core {
    /// Registers a worker or re-registers it after a restart of either side.
    ///
    /// If the worker process is new (another session), every attempt placed on its previous
    /// process is lost and placed again. If it is the same process (the coordinator restarted or
    /// the connection broke), placed attempts it does not list in `known` never reached it and are
    /// placed again, and attempts it lists that are no longer current are cancelled on it.
    pub fn register(&mut self, reg: Registration, now: u64) {
        self.worker_epoch += 1;
        let id = reg.worker;
        let same_process = self.workers.get(&id).is_some_and(|w| w.record.session == reg.session);
        let known: HashSet<&AttemptRef> = reg.known.iter().collect();

        if let Some(w) = self.workers.get(&id) {
            let placed: Vec<(JobId, u32)> = w.placed.iter().copied().collect();
            for (job, idx) in placed {
                let Some(s) = self.jobs.get(&job).map(|j| &j.subtasks[idx as usize]) else { continue };
                let current = AttemptRef { job, task: s.task.clone(), rank: s.rank, attempt: s.attempt };
                if !same_process {
                    self.requeue(job, idx, now, "worker restarted".into());
                } else if !known.contains(&current) {
                    self.requeue(job, idx, now, "assignment never reached the worker".into());
                }
            }
        }
        // Attempts the worker runs that we no longer want there.
        for a in &reg.known {
            let wanted = self.jobs.get(&a.job).and_then(|j| {
                let idx = j.subtask_index(&a.task, a.rank).ok()?;
                let s = &j.subtasks[idx as usize];
                (s.attempt == a.attempt && s.worker == Some(id) && s.state.is_placed()).then_some(())
            });
            if wanted.is_none() {
                self.out.cancels.push((id, a.clone()));
            }
        }

        let registered_at = self.workers.get(&id).map(|w| w.record.registered_at).unwrap_or(now);
        let draining = self.workers.get(&id).is_some_and(|w| w.record.draining);
        let record = WorkerRecord {
            id,
            session: reg.session,
            peer_addr: reg.peer_addr,
            capacity: reg.capacity,
            alive: true,
            registered_at,
            last_heartbeat: now,
            draining,
        };
        let w = self.workers.entry(id).or_insert_with(|| Worker {
            record: record.clone(),
            connected: true,
            node: NodeReport::default(),
            allocated: Resources::default(),
            placed: BTreeSet::new(),
            objects: HashMap::new(),
            gpus_used: BTreeSet::new(),
            gpu_shared: BTreeMap::new(),
            gpu_peers: HashMap::new(),
            reserved: BTreeSet::new(),
        });
        w.record = record;
        w.connected = true;
        self.out.workers.insert(id);
        self.update_node(id, reg.state);
    }

    /// Drains (`on`) or undrains a worker: while drained nothing new is placed on it (gangs do not
    /// count on it either); what runs there finishes. Durable.
    pub fn drain_worker(&mut self, id: WorkerId, on: bool) -> Result<(), crate::Error> {
        let w = self.workers.get_mut(&id).ok_or(crate::Error::NoWorker(id))?;
        if w.record.draining != on {
            w.record.draining = on;
            self.worker_epoch += 1;
            self.out.workers.insert(id);
        }
        Ok(())
    }

    /// Forgets a lost worker (`plexus workers remove`): its record is deleted and the objects it
    /// was last known to hold are no longer looked for there. A live worker is refused: drain and
    /// stop it first (it would register again anyway).
    pub fn remove_worker(&mut self, id: WorkerId) -> Result<(), crate::Error> {
        let w = self.workers.get(&id).ok_or(crate::Error::NoWorker(id))?;
        if w.record.alive {
            return Err(crate::Error::WorkerBusy(format!(
                "worker {id} is alive: only a lost worker can be removed (drain it, stop its process, and remove it once it is lost)"
            )));
        }
        let w = self.workers.remove(&id).expect("checked");
        for o in w.objects.keys() {
            if let Some(h) = self.holders.get_mut(o) {
                h.remove(&id);
                if h.is_empty() {
                    self.holders.remove(o);
                }
            }
        }
        self.worker_epoch += 1;
        self.out.workers.remove(&id);
        self.out.removed_workers.insert(id);
        Ok(())
    }

    /// A heartbeat; false if the worker must register again (unknown, or another session).
    pub fn heartbeat(&mut self, id: WorkerId, session: &str, node: NodeReport, now: u64) -> bool {
        let Some(w) = self.workers.get_mut(&id) else { return false };
        if !w.connected || w.record.session != session {
            return false;
        }
        w.record.last_heartbeat = now;
        self.update_node(id, node);
        true
    }

    pub(super) fn update_node(&mut self, id: WorkerId, node: NodeReport) {
        let Some(w) = self.workers.get_mut(&id) else { return };
        let new: HashMap<ObjectId, u64> = node.objects.iter().cloned().collect();
        for o in w.objects.keys() {
            if !new.contains_key(o)
                && let Some(h) = self.holders.get_mut(o)
            {
                h.remove(&id);
                if h.is_empty() {
                    self.holders.remove(o);
                }
            }
        }
        for o in new.keys() {
            if !w.objects.contains_key(o) {
                self.holders.entry(o.clone()).or_default().insert(id);
            }
        }
        w.objects = new;
        w.node = node;
    }

    /// Declares workers whose heartbeats stopped lost and places their attempts again, and makes
    /// retries whose back-off is over ready.
    pub fn tick(&mut self, now: u64) {
        while let Some(&(at, job, idx)) = self.delayed.first() {
            if at > now {
                break;
            }
            self.delayed.pop_first();
            self.push_ready(job, idx);
        }
        let timeout = self.config.heartbeat_timeout_ms;
        let lost: Vec<WorkerId> = self
            .workers
            .values()
            .filter(|w| w.record.alive && now.saturating_sub(w.record.last_heartbeat) > timeout)
            .map(|w| w.record.id)
            .collect();
        for id in lost {
            self.lose_worker(id, now);
        }
    }

    pub(super) fn lose_worker(&mut self, id: WorkerId, now: u64) {
        let Some(w) = self.workers.get_mut(&id) else { return };
        self.worker_epoch += 1;
        tracing::warn!(worker = %id, "worker missed its heartbeats; declared lost");
        w.record.alive = false;
        w.connected = false;
        let placed: Vec<(JobId, u32)> = w.placed.iter().copied().collect();
        let objects: Vec<ObjectId> = w.objects.drain().map(|(o, _)| o).collect();
        let mut gone = HashSet::new();
        for o in objects {
            if let Some(h) = self.holders.get_mut(&o) {
                h.remove(&id);
                if h.is_empty() {
                    self.holders.remove(&o);
                    gone.insert(o);
                }
            }
        }
        self.out.workers.insert(id);
        // A gang that had a reservation there is rolled back whole: it was not bound.
        let reserved: Vec<(JobId, u32)> =
            self.workers.get(&id).map(|w| w.reserved.iter().copied().collect()).unwrap_or_default();
        for (job, idx) in reserved {
            let gang = self
                .jobs
                .get(&job)
                .and_then(|j| j.record.spec.tasks[j.task_of(idx)].gang.as_ref().map(|g| g.name.clone()));
            match gang {
                Some(name) => {
                    self.rollback_gang(job, &name, format!("worker {id} was lost before the gang was bound"), now)
                }
                None => self.unreserve((job, idx)),
            }
        }
        for (job, idx) in placed {
            self.requeue(job, idx, now, format!("worker {id} lost"));
        }
        self.requeue_fetchers_of(&gone, id, now);
    }

    /// Attempts on other workers that are still fetching their inputs (assigned, not yet
    /// running) where one of them is in `gone` (its last holder, `from`, was just lost): left
    /// alone they would wait out their fetch timeouts (a minute against a host that hangs
    /// rather than refuses) before reporting the input unfetched. They are placed again now,
    /// uncounted, and placing them remakes the input (`lineage.rs`).
    fn requeue_fetchers_of(&mut self, gone: &HashSet<ObjectId>, from: WorkerId, now: u64) {
        if gone.is_empty() {
            return;
        }
        let jobs: HashSet<JobId> = gone.iter().map(|o| o.job).collect();
        let fetching: Vec<(JobId, u32)> = self
            .workers
            .values()
            .filter(|w| w.record.alive)
            .flat_map(|w| w.placed.iter().copied())
            .filter(|&(job, idx)| {
                jobs.contains(&job)
                    && self.jobs.get(&job).is_some_and(|j| j.subtasks[idx as usize].state == SubtaskState::Assigned)
            })
            .collect();
        for (job, idx) in fetching {
            let j = &self.jobs[&job];
            let (t, rank) = (j.task_of(idx), j.subtasks[idx as usize].rank);
            if j.subtasks[idx as usize].state != SubtaskState::Assigned {
                continue; // restarted with its gang by an earlier one of the list
            }
            // What the attempt was sent to fetch: a collective member its own rank's inputs only.
            let collective = j.record.spec.tasks[t].collective.is_some();
            let inputs: Vec<ObjectId> = if collective {
                self.member_inputs(job, t, rank)
            } else {
                self.inputs_of(job, idx).into_iter().map(|(o, _)| o).collect()
            };
            let Some(o) = inputs.into_iter().find(|o| gone.contains(o)) else { continue };
            self.stop_attempt((job, idx));
            self.requeue(job, idx, now, format!("its input {o} was lost with worker {from} while being fetched"));
            if collective {
                self.restart_gang(
                    (job, idx),
                    now,
                    now,
                    format!("gang restarted: member {rank}'s input {o} was lost with worker {from}"),
                );
            }
        }
    }

    /// Promised share of all live cores.
    pub fn cluster_utilisation(&self) -> f64 {
        let (used, total) = self
            .workers
            .values()
            .filter(|w| w.record.alive)
            .fold((0.0, 0.0), |(u, t), w| (u + w.allocated.cpu, t + w.record.capacity.cpus as f64));
        if total > 0.0 { (used / total).min(1.0) } else { 0.0 }
    }

    /// Frees the resources an attempt held on a worker.
    pub(super) fn release_worker(&mut self, (job, idx): (JobId, u32), wid: WorkerId) {
        let Some(j) = self.jobs.get(&job) else { return };
        let res = j.record.spec.tasks[j.task_of(idx)].resources;
        let shared = j.record.spec.tasks[j.task_of(idx)]
            .shares_gpu()
            .then(|| j.record.spec.tasks[j.task_of(idx)].shared_gpu_memory());
        let gpus = std::mem::take(&mut self.jobs.get_mut(&job).expect("exists").subtasks[idx as usize].gpus);
        if let Some(w) = self.workers.get_mut(&wid)
            && w.placed.remove(&(job, idx))
        {
            w.gpu_peers.remove(&(job, idx));
            w.allocated.sub(&res);
            for g in gpus {
                match shared {
                    Some(memory) => w.unshare_gpu(g, memory),
                    None => {
                        w.gpus_used.remove(&g);
                    }
                }
            }
            self.count_queue(job, idx, -1.0);
        }
    }
}
