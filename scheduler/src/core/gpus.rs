//! GPU attempts and what the core learns from them (issue 16): a task's vector for the
//! interference model, which sharing attempts met on a device, and the runs handed to the GPU
//! learner when they end.
//!
//! Who met whom is approximate in one direction only: an attempt's peers are every sharing
//! attempt that was on its device at some moment of its run, so a peer that stayed briefly
//! counts as much as one that stayed throughout (the model learns an average over such mixes).

use std::collections::BTreeSet;

use plexus_proto::{JobId, WorkerId};

use super::Core;
use crate::gpu::TaskVector;
use crate::gpu::learner::{GpuLearner, GpuRun};
use crate::spec::{TaskSpec, Work};

impl Core {
    /// Replaces the GPU learner (the coordinator's learned model).
    pub fn set_gpu_learner(&mut self, learner: Box<dyn GpuLearner>) {
        self.gpu_learner = learner;
    }

    pub fn gpu_learner(&self) -> &dyn GpuLearner {
        self.gpu_learner.as_ref()
    }

    /// The vector of `task` on a device of `device_memory` bytes, with what was measured of its
    /// signature.
    pub fn task_vector(&self, task: &TaskSpec, device_memory: u64) -> TaskVector {
        let p = task.gpu_profile;
        let v = TaskVector {
            gpu_memory: p.map_or(0, |p| p.memory),
            device_memory,
            utilisation: p.and_then(|p| p.utilisation).unwrap_or(0.0),
            solo_ms: 0.0,
            model_bytes: p.map_or(0, |p| p.model_bytes),
            signature: signature(task),
        };
        self.gpu_learner.complete(v)
    }

    /// The memory of device `gpu` of worker `wid` (0 when unknown).
    pub(super) fn device_memory(&self, wid: WorkerId, gpu: u32) -> u64 {
        self.workers.get(&wid).and_then(|w| w.record.capacity.gpus.iter().find(|g| g.index == gpu)).map_or(0, |g| g.memory)
    }

    /// A sharing attempt joined device `gpu` of `wid`: it and every sharing attempt already
    /// there have met.
    pub(super) fn met_on_gpu(&mut self, wid: WorkerId, key: (JobId, u32), gpu: u32) {
        let Some(w) = self.workers.get(&wid) else { return };
        let there: Vec<(JobId, u32)> = w
            .placed
            .iter()
            .copied()
            .filter(|&p| p != key)
            .filter(|(j, i)| self.jobs.get(j).is_some_and(|job| job.record.spec.tasks[job.task_of(*i)].shares_gpu() && job.subtasks[*i as usize].gpus.first() == Some(&gpu)))
            .collect();
        let w = self.workers.get_mut(&wid).expect("exists");
        for p in &there {
            w.gpu_peers.entry(*p).or_default().insert(key);
        }
        w.gpu_peers.entry(key).or_default().extend(there);
    }

    /// A GPU attempt ended well on `wid`: its run goes to the learner. Call before its worker
    /// is released (its device is still recorded on the subtask).
    pub(super) fn learn_gpu_run(&mut self, (job, idx): (JobId, u32), wid: WorkerId) {
        let Some(j) = self.jobs.get(&job) else { return };
        let task = &j.record.spec.tasks[j.task_of(idx)];
        if task.resources.gpu == 0 && !task.shares_gpu() {
            return;
        }
        let s = &j.subtasks[idx as usize];
        let device = s.gpus.first().copied().unwrap_or(0);
        let memory = self.device_memory(wid, device);
        let (measured_ms, per_iteration) = if s.iter_ms > 0.0 { (s.iter_ms, true) } else { (s.finished_at.saturating_sub(s.started_at) as f64, false) };
        let peers: BTreeSet<(JobId, u32)> = self.workers.get(&wid).and_then(|w| w.gpu_peers.get(&(job, idx))).cloned().unwrap_or_default();
        let peers: Vec<TaskVector> = peers
            .into_iter()
            .filter_map(|(pj, pi)| self.jobs.get(&pj).map(|pj| self.task_vector(&pj.record.spec.tasks[pj.task_of(pi)], memory)))
            .collect();
        let run = GpuRun { task: self.task_vector(task, memory), measured_ms, per_iteration, peers };
        self.gpu_learner.observe(&run);
    }
}

/// A task's signature: what it runs and asks for, so runs of the same work across jobs share
/// what was measured of them (FNV-1a over the command or kind, the resources and the GPU
/// profile; not the name or the job).
pub fn signature(task: &TaskSpec) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    let mut eat = |bytes: &[u8]| {
        for &b in bytes {
            h ^= u64::from(b);
            h = h.wrapping_mul(0x0000_0100_0000_01b3);
        }
        h ^= 0xff;
        h = h.wrapping_mul(0x0000_0100_0000_01b3);
    };
    match &task.work {
        Work::Command(argv) => argv.iter().for_each(|a| eat(a.as_bytes())),
        Work::Kind(k) => eat(k.as_bytes()),
    }
    eat(&task.resources.cpu.to_le_bytes());
    eat(&task.resources.memory.to_le_bytes());
    eat(&task.resources.gpu.to_le_bytes());
    if let Some(p) = task.gpu_profile {
        eat(&p.memory.to_le_bytes());
        eat(&p.model_bytes.to_le_bytes());
        eat(&[u8::from(p.share)]);
    }
    h
}
