//! What the scheduler learns from GPU attempts: each one that ends well is a [`GpuRun`] (its
//! task vector, the time it measured, the tasks that shared its device), which a [`GpuLearner`]
//! turns into solo times per signature and, for shared runs, slowdown samples for its
//! interference model.
//!
//! The core holds one learner: the coordinator gives it the learned MLP (`plexus-policy`, on
//! libtorch); without one it uses [`ContentionModel`], a fixed analytic guess that also keeps the
//! solo times, so sharing and GPU gangs work (less well) where libtorch is not linked.

use std::collections::HashMap;

use super::{InterferenceModel, TaskVector};

/// One GPU attempt that succeeded.
#[derive(Clone, Debug, PartialEq)]
pub struct GpuRun {
    /// Its task's vector as the core knows it (`solo_ms` as the learner last completed it).
    pub task: TaskVector,
    /// What it measured: its median iteration time when it printed `plexus:iter_ms=`, else its
    /// run time, ms.
    pub measured_ms: f64,
    /// Whether `measured_ms` is an iteration time (else a whole run's).
    pub per_iteration: bool,
    /// The tasks that shared its device at some time while it ran (none: it ran alone).
    pub peers: Vec<TaskVector>,
}

/// Learns from GPU runs and predicts slowdowns.
pub trait GpuLearner: InterferenceModel + Send {
    /// A GPU attempt ended well.
    fn observe(&mut self, run: &GpuRun);
    /// `v` with what was measured of its signature filled in (`solo_ms`, when known).
    fn complete(&self, v: TaskVector) -> TaskVector;
    /// For `plexus explain`.
    fn name(&self) -> &str;
}

/// Solo times per (signature, iteration or run): an exponential moving average of the runs
/// that had their device alone.
#[derive(Clone, Debug, Default)]
pub struct SoloTimes {
    by_signature: HashMap<(u64, bool), (f64, u32)>,
}

/// The weight of a new solo measurement in the moving average.
const SOLO_EMA: f64 = 0.3;
/// The most signatures remembered (the oldest-learnt are not evicted; past this, new ones are
/// not learnt): a bound on memory against a flood of distinct commands.
const MAX_SIGNATURES: usize = 100_000;

impl SoloTimes {
    /// Records a run; only one that had its device alone teaches a solo time. Returns the
    /// slowdown of a shared run, when its solo time is known.
    pub fn record(&mut self, run: &GpuRun) -> Option<f64> {
        let key = (run.task.signature, run.per_iteration);
        if !(run.measured_ms.is_finite() && run.measured_ms > 0.0) {
            return None;
        }
        if run.peers.is_empty() {
            if self.by_signature.len() >= MAX_SIGNATURES && !self.by_signature.contains_key(&key) {
                return None;
            }
            let e = self.by_signature.entry(key).or_insert((run.measured_ms, 0));
            e.0 = if e.1 == 0 { run.measured_ms } else { (1.0 - SOLO_EMA) * e.0 + SOLO_EMA * run.measured_ms };
            e.1 = e.1.saturating_add(1);
            return None;
        }
        self.by_signature.get(&key).map(|(solo, _)| (run.measured_ms / solo).max(1.0))
    }

    /// The table as bytes: per entry signature (8), iteration flag (1), ms (8), runs (4), LE.
    pub fn to_bytes(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(self.by_signature.len() * 21);
        let mut entries: Vec<_> = self.by_signature.iter().collect();
        entries.sort_by(|a, b| a.0.cmp(b.0));
        for ((sig, iter), (ms, n)) in entries {
            out.extend_from_slice(&sig.to_le_bytes());
            out.push(u8::from(*iter));
            out.extend_from_slice(&ms.to_le_bytes());
            out.extend_from_slice(&n.to_le_bytes());
        }
        out
    }

    /// A table from [`SoloTimes::to_bytes`]; `None` when the bytes are not one (a truncated or
    /// foreign value), entries that are not plausible times are dropped.
    pub fn from_bytes(bytes: &[u8]) -> Option<SoloTimes> {
        if !bytes.len().is_multiple_of(21) || bytes.len() / 21 > MAX_SIGNATURES {
            return None;
        }
        let mut by_signature = HashMap::new();
        for e in bytes.chunks_exact(21) {
            let sig = u64::from_le_bytes(e[0..8].try_into().ok()?);
            let iter = match e[8] {
                0 => false,
                1 => true,
                _ => return None,
            };
            let ms = f64::from_le_bytes(e[9..17].try_into().ok()?);
            let n = u32::from_le_bytes(e[17..21].try_into().ok()?);
            if ms.is_finite() && ms > 0.0 {
                by_signature.insert((sig, iter), (ms, n));
            }
        }
        Some(SoloTimes { by_signature })
    }

    /// The solo time of a signature, preferring iteration times.
    pub fn solo_ms(&self, signature: u64) -> Option<f64> {
        self.by_signature
            .get(&(signature, true))
            .or_else(|| self.by_signature.get(&(signature, false)))
            .map(|(ms, _)| *ms)
    }
}

/// The fallback interference model: tasks sharing a device contend in proportion to how busy
/// each keeps it, `slowdown_i = 1 + κ · u_i · Σ_{j≠i} u_j` (u = declared or default utilisation,
/// κ = 1: two tasks that each keep the device fully busy take twice as long, the time-slicing
/// bound), and the solo times it measured.
#[derive(Clone, Debug, Default)]
pub struct ContentionModel {
    pub solo: SoloTimes,
}

/// The utilisation assumed of a task that declared none.
pub const DEFAULT_UTILISATION: f64 = 0.5;

impl InterferenceModel for ContentionModel {
    fn predict(&self, tasks: &[TaskVector]) -> Vec<f64> {
        let u = |t: &TaskVector| if t.utilisation > 0.0 { t.utilisation.min(1.0) } else { DEFAULT_UTILISATION };
        let total: f64 = tasks.iter().map(u).sum();
        tasks.iter().map(|t| 1.0 + u(t) * (total - u(t))).collect()
    }
}

impl GpuLearner for ContentionModel {
    fn observe(&mut self, run: &GpuRun) {
        self.solo.record(run);
    }

    fn complete(&self, mut v: TaskVector) -> TaskVector {
        if let Some(ms) = self.solo.solo_ms(v.signature) {
            v.solo_ms = ms;
        }
        v
    }

    fn name(&self) -> &str {
        "contention"
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(sig: u64, ms: f64, peers: usize) -> GpuRun {
        let v = TaskVector { signature: sig, utilisation: 0.8, ..TaskVector::default() };
        GpuRun { task: v, measured_ms: ms, per_iteration: true, peers: vec![v; peers] }
    }

    #[test]
    fn solo_runs_teach_solo_times_and_shared_runs_give_slowdowns() {
        let mut s = SoloTimes::default();
        assert_eq!(s.record(&run(1, 20.0, 1)), None, "no solo time yet");
        assert_eq!(s.record(&run(1, 10.0, 0)), None);
        assert_eq!(s.solo_ms(1), Some(10.0));
        s.record(&run(1, 20.0, 0));
        assert!((s.solo_ms(1).unwrap() - 13.0).abs() < 1e-9, "a moving average");
        assert!((s.record(&run(1, 26.0, 2)).unwrap() - 2.0).abs() < 1e-9);
        assert_eq!(s.record(&run(1, f64::NAN, 0)), None);
        assert_eq!(s.record(&run(2, 5.0, 1)), None, "another signature");
        let back = SoloTimes::from_bytes(&s.to_bytes()).unwrap();
        assert_eq!(back.solo_ms(1), s.solo_ms(1));
        assert!(SoloTimes::from_bytes(&s.to_bytes()[..20]).is_none());
        assert!(SoloTimes::from_bytes(&[7u8; 21]).is_none(), "a bad flag");
    }

    #[test]
    fn the_contention_model_slows_busy_sharers_most() {
        let m = ContentionModel::default();
        let busy = TaskVector { utilisation: 1.0, ..TaskVector::default() };
        let light = TaskVector { utilisation: 0.2, ..TaskVector::default() };
        assert_eq!(m.predict(&[busy]), vec![1.0]);
        assert_eq!(m.predict(&[busy, busy]), vec![2.0, 2.0]);
        let p = m.predict(&[busy, light]);
        assert!((p[0] - 1.2).abs() < 1e-9 && (p[1] - 1.2).abs() < 1e-9, "{p:?}");
        let p = m.predict(&[light, light, busy]);
        assert!(p[2] > p[0], "{p:?}");
    }
}
