//! What one simulation measured, and the figures the comparison table prints.

/// One task's life. Times are microseconds of simulated time.
#[derive(Clone, Debug, PartialEq)]
pub struct TaskRecord {
    /// Index of the job in the workload, and of the task in the job.
    pub job: usize,
    pub task: usize,
    pub node: usize,
    pub decision: u64,
    /// When all its dependencies had finished (its job's arrival for a first task).
    pub ready_us: u64,
    pub start_us: u64,
    pub finish_us: u64,
    /// Time spent fetching inputs that were not in the node's fast memory.
    pub fetch_us: u64,
    /// Time spent pushing evicted bytes out of fast memory.
    pub evict_us: u64,
    pub compute_us: u64,
    pub fetched_bytes: u64,
    pub evicted_bytes: u64,
    /// Input bytes already in the node's fast memory at start.
    pub hit_bytes: u64,
}

impl TaskRecord {
    /// Ready → start: the time spent in the ready queue.
    pub fn wait_us(&self) -> u64 {
        self.start_us - self.ready_us
    }

    /// Ready → finish.
    pub fn response_us(&self) -> u64 {
        self.finish_us - self.ready_us
    }
}

/// One job's life.
#[derive(Clone, Debug, PartialEq)]
pub struct JobRecord {
    pub arrival_us: u64,
    pub first_start_us: u64,
    pub finish_us: u64,
}

impl JobRecord {
    /// Arrival → first task start.
    pub fn wait_us(&self) -> u64 {
        self.first_start_us - self.arrival_us
    }

    /// Arrival → last task finish.
    pub fn response_us(&self) -> u64 {
        self.finish_us - self.arrival_us
    }
}

/// Share of each resource in use, over all nodes and a span of time. `cpu`, `gpu` and `memory`
/// are allocated shares (held by placed tasks, fetching or computing); `busy` is the share of
/// cores held by tasks that are computing (what a node's measured CPU utilisation shows);
/// `cache` is the share of fast memory filled.
#[derive(Clone, Copy, Debug, PartialEq, Default)]
pub struct Utilisation {
    pub cpu: f64,
    pub busy: f64,
    pub gpu: f64,
    pub memory: f64,
    pub cache: f64,
}

/// A learning-curve point: `tasks` consecutive completions ending at `end_us`.
#[derive(Clone, Debug, PartialEq)]
pub struct Window {
    pub end_us: u64,
    pub tasks: usize,
    pub mean_response_ms: f64,
    /// Over the window's span of time.
    pub utilisation: Utilisation,
}

/// Everything one run of one placer over one workload measured.
#[derive(Clone, Debug, PartialEq)]
pub struct Report {
    pub placer: String,
    /// In completion order.
    pub tasks: Vec<TaskRecord>,
    /// In workload order.
    pub jobs: Vec<JobRecord>,
    /// Over [first arrival, last finish].
    pub utilisation: Utilisation,
    /// Consecutive windows of `SimConfig::window` completed tasks (a partial last one is left
    /// out).
    pub windows: Vec<Window>,
    /// Decision ids used were `first_decision .. first_decision + placements`.
    pub first_decision: u64,
    pub placements: u64,
    pub start_us: u64,
    pub end_us: u64,
}

fn mean(xs: impl Iterator<Item = u64>) -> f64 {
    let (mut sum, mut n) = (0u128, 0u64);
    for x in xs {
        sum += x as u128;
        n += 1;
    }
    if n == 0 { 0.0 } else { sum as f64 / n as f64 }
}

/// The nearest-rank percentile `p` (0 < p ≤ 100).
pub fn percentile(mut xs: Vec<u64>, p: f64) -> u64 {
    if xs.is_empty() {
        return 0;
    }
    xs.sort_unstable();
    let rank = ((p / 100.0) * xs.len() as f64).ceil() as usize;
    xs[rank.clamp(1, xs.len()) - 1]
}

impl Report {
    /// Mean task wait (ready → start), milliseconds.
    pub fn mean_wait_ms(&self) -> f64 {
        mean(self.tasks.iter().map(TaskRecord::wait_us)) / 1e3
    }

    /// Mean task response (ready → finish), milliseconds.
    pub fn mean_response_ms(&self) -> f64 {
        mean(self.tasks.iter().map(TaskRecord::response_us)) / 1e3
    }

    pub fn p95_response_ms(&self) -> f64 {
        percentile(self.tasks.iter().map(TaskRecord::response_us).collect(), 95.0) as f64 / 1e3
    }

    /// Mean job response (arrival → last finish), milliseconds.
    pub fn mean_job_response_ms(&self) -> f64 {
        mean(self.jobs.iter().map(JobRecord::response_us)) / 1e3
    }

    pub fn mean_job_wait_ms(&self) -> f64 {
        mean(self.jobs.iter().map(JobRecord::wait_us)) / 1e3
    }

    /// Total time tasks spent fetching inputs, seconds.
    pub fn fetch_s(&self) -> f64 {
        self.tasks.iter().map(|t| t.fetch_us).sum::<u64>() as f64 / 1e6
    }

    pub fn fetched_bytes(&self) -> u64 {
        self.tasks.iter().map(|t| t.fetched_bytes).sum()
    }

    pub fn evicted_bytes(&self) -> u64 {
        self.tasks.iter().map(|t| t.evicted_bytes).sum()
    }

    /// Share of input bytes that were already in the chosen node's fast memory.
    pub fn hit_ratio(&self) -> f64 {
        let hit: u64 = self.tasks.iter().map(|t| t.hit_bytes).sum();
        let total = hit + self.fetched_bytes();
        if total == 0 { 1.0 } else { hit as f64 / total as f64 }
    }

    /// Simulated time from the first arrival to the last finish, seconds.
    pub fn makespan_s(&self) -> f64 {
        (self.end_us - self.start_us) as f64 / 1e6
    }
}
