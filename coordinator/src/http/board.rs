//! What the dashboard keeps between requests: the learned placer's learning curve, sampled in
//! the background while the HTTP side serves.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use crate::engine::{Cmd, EngineHandle};

/// Points of the learning curve kept (one every [`SAMPLE_EVERY`]: about two hours).
const CURVE_POINTS: usize = 3_600;
const SAMPLE_EVERY: Duration = Duration::from_secs(2);

/// One sample of the learned placer's counters.
#[derive(Clone, Debug)]
pub struct Sample {
    pub at_ms: u64,
    pub decisions: u64,
    pub exploratory: u64,
    pub training_steps: u64,
    pub loss: Option<f64>,
}

/// Points of the cluster's usage kept (one every [`USAGE_EVERY`]: the last hour).
const USAGE_POINTS: usize = 360;
const USAGE_EVERY: Duration = Duration::from_secs(10);

/// The live workers' resources, held and in all, at one time; and the rails' traffic since the
/// sample before (bytes per second sent over every rail of every worker).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Usage {
    pub at_ms: u64,
    pub cpu: (f64, f64),
    pub memory: (u64, u64),
    pub gpus: (u64, u64),
    pub rail_bytes_per_s: f64,
    /// The rails' cumulative bytes sent, for the next sample's rate.
    sent: u64,
}

/// What the dashboard keeps between requests: the learning curve and the cluster's usage.
#[derive(Default)]
pub struct Board {
    curve: Mutex<VecDeque<Sample>>,
    usage: Mutex<VecDeque<Usage>>,
}

impl Board {
    fn push(&self, s: Sample) {
        let mut c = self.curve.lock().unwrap_or_else(|p| p.into_inner());
        if c.len() == CURVE_POINTS {
            c.pop_front();
        }
        c.push_back(s);
    }

    pub fn curve(&self) -> Vec<Sample> {
        self.curve.lock().unwrap_or_else(|p| p.into_inner()).iter().cloned().collect()
    }

    pub fn usage(&self) -> Vec<Usage> {
        self.usage.lock().unwrap_or_else(|p| p.into_inner()).iter().cloned().collect()
    }

    /// Adds a sample of the live workers `workers` at `at_ms`.
    pub fn record_usage(&self, workers: &[crate::view::WorkerView], at_ms: u64) {
        let mut all = self.usage.lock().unwrap_or_else(|p| p.into_inner());
        let u = measure(workers, at_ms, all.back());
        if all.len() == USAGE_POINTS {
            all.pop_front();
        }
        all.push_back(u);
    }
}

/// The usage of the live workers among `workers` at `at_ms`; the rails' rate since `prev`.
pub fn measure(workers: &[crate::view::WorkerView], at_ms: u64, prev: Option<&Usage>) -> Usage {
    let mut u = Usage { at_ms, ..Usage::default() };
    for w in workers.iter().filter(|w| w.alive) {
        u.cpu = (u.cpu.0 + w.allocated.cpu, u.cpu.1 + f64::from(w.capacity.cpus));
        u.memory = (u.memory.0 + w.allocated.memory, u.memory.1 + w.capacity.memory);
        u.gpus = (u.gpus.0 + u64::from(w.allocated.gpu), u.gpus.1 + w.capacity.gpus.len() as u64);
        u.sent = u.sent.saturating_add(w.node.rails.iter().map(|r| r.bytes_sent).fold(0, u64::saturating_add));
    }
    if let Some(prev) = prev.filter(|p| at_ms > p.at_ms && u.sent >= p.sent) {
        u.rail_bytes_per_s = (u.sent - prev.sent) as f64 * 1000.0 / (at_ms - prev.at_ms) as f64;
    }
    u
}

/// Samples the cluster's usage every [`USAGE_EVERY`] until `stop`.
pub async fn sample_usage(engine: EngineHandle, board: Arc<Board>, mut stop: tokio::sync::watch::Receiver<bool>) {
    loop {
        if let Ok(workers) = engine.call(|reply| Cmd::ListWorkers { reply }).await {
            board.record_usage(&workers, plexus_proto::now_ms());
        }
        tokio::select! {
            _ = tokio::time::sleep(USAGE_EVERY) => {}
            _ = stop.changed() => return,
        }
    }
}

/// Samples the learned placer's counters every [`SAMPLE_EVERY`] until `stop`.
pub async fn sample(engine: EngineHandle, board: Arc<Board>, mut stop: tokio::sync::watch::Receiver<bool>) {
    loop {
        if let Ok((_, Some(l))) = engine.call(|reply| Cmd::Learning { reply }).await {
            board.push(Sample {
                at_ms: plexus_proto::now_ms(),
                decisions: l.decisions,
                exploratory: l.exploratory,
                training_steps: l.training_steps,
                loss: l.loss,
            });
        }
        tokio::select! {
            _ = tokio::time::sleep(SAMPLE_EVERY) => {}
            _ = stop.changed() => return,
        }
    }
}
