//! Domain enums and value types shared by every crate.

use serde::{Deserialize, Serialize};

/// Where a subtask is in its life. `Succeeded`, `Failed` and `Cancelled` are final.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum SubtaskState {
    Waiting,
    Ready,
    Assigned,
    Running,
    Succeeded,
    Failed,
    Cancelled,
}

impl SubtaskState {
    pub fn is_final(self) -> bool {
        matches!(self, SubtaskState::Succeeded | SubtaskState::Failed | SubtaskState::Cancelled)
    }

    /// Placed on a worker and not finished: it holds that worker's resources.
    pub fn is_placed(self) -> bool {
        matches!(self, SubtaskState::Assigned | SubtaskState::Running)
    }

    pub fn as_str(self) -> &'static str {
        match self {
            SubtaskState::Waiting => "waiting",
            SubtaskState::Ready => "ready",
            SubtaskState::Assigned => "assigned",
            SubtaskState::Running => "running",
            SubtaskState::Succeeded => "succeeded",
            SubtaskState::Failed => "failed",
            SubtaskState::Cancelled => "cancelled",
        }
    }
}

/// Where a job is in its life. Everything but `Running` is final.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum JobState {
    Running,
    Succeeded,
    Failed,
    Cancelled,
    /// Every subtask ended and some failed under `on_failure = "continue"`.
    CompletedWithFailures,
}

impl JobState {
    pub fn is_final(self) -> bool {
        self != JobState::Running
    }

    pub fn as_str(self) -> &'static str {
        match self {
            JobState::Running => "running",
            JobState::Succeeded => "succeeded",
            JobState::Failed => "failed",
            JobState::Cancelled => "cancelled",
            JobState::CompletedWithFailures => "completed-with-failures",
        }
    }
}

/// A resource request or capacity.
#[derive(Clone, Copy, PartialEq, Debug, Default, Serialize, Deserialize)]
pub struct Resources {
    /// Cores; fractions allowed, 0 takes no core.
    pub cpu: f64,
    /// Bytes.
    pub memory: u64,
    /// Whole devices.
    pub gpu: u32,
}

impl Resources {
    /// Room that no request fits in, not even one of nothing: a worker running as many attempts
    /// as it takes. (Negative cores: every request asks for at least 0.)
    pub const NO_ROOM: Resources = Resources { cpu: -1.0, memory: 0, gpu: 0 };

    /// Whether `self` (a request) fits into `room`.
    pub fn fits_in(&self, room: &Resources) -> bool {
        // A small epsilon so that ten 0.1-core requests fit into one core.
        self.cpu <= room.cpu + 1e-9 && self.memory <= room.memory && self.gpu <= room.gpu
    }

    pub fn add(&mut self, other: &Resources) {
        self.cpu += other.cpu;
        self.memory += other.memory;
        self.gpu += other.gpu;
    }

    pub fn sub(&mut self, other: &Resources) {
        self.cpu = (self.cpu - other.cpu).max(0.0);
        self.memory = self.memory.saturating_sub(other.memory);
        self.gpu = self.gpu.saturating_sub(other.gpu);
    }

    /// `self - other`, saturating at zero.
    pub fn minus(&self, other: &Resources) -> Resources {
        let mut r = *self;
        r.sub(other);
        r
    }
}
