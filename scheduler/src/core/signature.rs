//! Task signatures: what a task runs and asks for, hashed, so that runs of the same work across
//! jobs share what was measured of them (the GPU learner's and the measured speeds' key).

use crate::spec::{TaskSpec, Work};

/// FNV-1a over a sequence of fields (each field closed by a separator byte, so `ab`,`c` and
/// `a`,`bc` differ): the signature hash of tasks, here and in the simulator.
#[derive(Clone, Copy, Debug)]
pub struct FieldHash(u64);

impl Default for FieldHash {
    fn default() -> Self {
        FieldHash(0xcbf2_9ce4_8422_2325)
    }
}

impl FieldHash {
    /// Adds one field.
    pub fn eat(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.0 ^= u64::from(b);
            self.0 = self.0.wrapping_mul(0x0000_0100_0000_01b3);
        }
        self.0 ^= 0xff;
        self.0 = self.0.wrapping_mul(0x0000_0100_0000_01b3);
    }

    /// A hash that goes on from `state` (a [`FieldHash::finish`] of the fields before).
    pub fn with_state(state: u64) -> FieldHash {
        FieldHash(state)
    }

    pub fn finish(self) -> u64 {
        self.0
    }
}

/// What a task runs, without what it asks for: its command or kind, hashed
/// (`PlacementRequest::kind`). Tasks of one kind with different requests share it, so a learner
/// that corrects the estimates of one kind (`plexus_policy::correction`) applies what it learnt
/// to the kind's requests it has not seen run.
pub fn kind_key(task: &TaskSpec) -> u64 {
    let mut h = FieldHash::default();
    match &task.work {
        Work::Command(argv) => argv.iter().for_each(|a| h.eat(a.as_bytes())),
        Work::Kind(k) => h.eat(k.as_bytes()),
    }
    h.finish()
}

/// A task's signature: what it runs and asks for, so runs of the same work across jobs share
/// what was measured of them (FNV-1a over the command or kind, the resources and the GPU
/// profile; not the name or the job).
pub fn signature(task: &TaskSpec) -> u64 {
    let mut h = FieldHash::with_state(kind_key(task));
    h.eat(&task.resources.cpu.to_le_bytes());
    h.eat(&task.resources.memory.to_le_bytes());
    h.eat(&task.resources.gpu.to_le_bytes());
    if let Some(p) = task.gpu_profile {
        h.eat(&p.memory.to_le_bytes());
        h.eat(&p.model_bytes.to_le_bytes());
        h.eat(&[u8::from(p.share)]);
    }
    h.finish()
}
