//! What the dashboard keeps between requests: the learned placer's learning curve, sampled in
//! the background while the HTTP side serves.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use crate::engine::{Cmd, EngineHandle};
use crate::view::{WorkerPage, WorkerSummary};

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

    /// Adds a sample of the cluster (its workers' summary) at `at_ms`.
    pub fn record_usage(&self, summary: &WorkerSummary, at_ms: u64) {
        let mut all = self.usage.lock().unwrap_or_else(|p| p.into_inner());
        let u = measure(summary, at_ms, all.back());
        if all.len() == USAGE_POINTS {
            all.pop_front();
        }
        all.push_back(u);
    }
}

/// The usage of the live workers, from their summary, at `at_ms`; the rails' rate since `prev`.
pub fn measure(summary: &WorkerSummary, at_ms: u64, prev: Option<&Usage>) -> Usage {
    let mut u = Usage {
        at_ms,
        cpu: summary.cpu,
        memory: summary.memory,
        gpus: summary.gpus,
        sent: summary.rail_bytes_sent,
        ..Usage::default()
    };
    if let Some(prev) = prev.filter(|p| at_ms > p.at_ms && u.sent >= p.sent) {
        u.rail_bytes_per_s = (u.sent - prev.sent) as f64 * 1000.0 / (at_ms - prev.at_ms) as f64;
    }
    u
}

/// Samples the cluster's usage every [`USAGE_EVERY`] until `stop`.
pub async fn sample_usage(engine: EngineHandle, board: Arc<Board>, mut stop: tokio::sync::watch::Receiver<bool>) {
    loop {
        // The summary alone: a sum over the workers, no view of any (at 5,000 workers the
        // whole list is ~750 KiB built on the engine's thread every sample).
        if let Ok(list) = engine.call(|reply| Cmd::ListWorkers { page: WorkerPage::SUMMARY, reply }).await {
            board.record_usage(&list.summary, plexus_proto::now_ms());
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
