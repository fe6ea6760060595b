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

/// What the dashboard keeps between requests: the learning curve.
#[derive(Default)]
pub struct Board {
    curve: Mutex<VecDeque<Sample>>,
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
