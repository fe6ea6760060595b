//! The reward of seed 001, claims 8–10, from measurements the workers report.
//!
//! With access latency L and eviction penalty P = evicted bytes ÷ eviction bandwidth:
//! - P = 0: `r = w·util + (1 − w)·(1/L)`
//! - P > 0: `r = w·util + (1 − w)·max(β_e/L, 1/L − P)`, with β_e ∈ [−1, 0].
//!
//! The seed leaves units open, and `1/L − P` only makes sense when both are dimensionless, so L
//! and P are measured in reference units: `L = 1 + fetch_ms / l0_ms` (1 when every input was
//! local, so 1/L ∈ (0, 1]) and `P = (evicted_bytes / eviction_bandwidth) / p0_s`. With the
//! defaults (l0 = 10 ms, p0 = 1 s) a 90 ms fetch divides the latency term by 10, and
//! evicting one second's worth of eviction bandwidth costs 1.
//!
//! # Our departure: a run-time term (off by default)
//! The seed's L is the access latency only (request → data served), so its reward cannot tell a
//! node with a fast engine from a slow one, nor a rack-local fetch of 1 GiB (0.4 s) from a
//! cross-rack one (1.7 s) once both are far beyond l0. The objective the seed evaluates, mean
//! response, is made of the whole run. With `run_weight` > 0 the reward gains
//! `run_weight · ref / (ref + run_ms)`, the same shape as the seed's latency term, measured to the
//! attempt's end (fetch + eviction + compute). `ref` is the decision's own scale when the caller
//! knows one ([`RewardInputs::best_est_ms`]: the least estimated run among the candidates, so a
//! task placed as well as the estimates allow scores 1/2 whether it runs 100 ms or 100 s), else
//! the fixed `run_ref_ms`. A per-decision scale matters for learning: with a fixed one, how
//! long the *next* task is (which the decision does not choose) moves the bootstrapped target
//! γ·max Q(s′) more than the choice moves the reward. With `run_weight` = 0 (the default) the
//! reward is exactly the seed's. The queueing wait before the decision is left out on purpose:
//! the decision cannot change it.

/// Parameters of the reward.
#[derive(Clone, Debug, PartialEq)]
pub struct RewardConfig {
    /// Weight of utilisation against latency, w ∈ [0, 1].
    pub w: f64,
    /// Floor factor β_e ∈ [−1, 0] for large eviction penalties.
    pub beta_e: f64,
    /// Latency reference, ms.
    pub l0_ms: f64,
    /// Bytes per second evicted data costs to write back.
    pub eviction_bandwidth: f64,
    /// Penalty reference, s.
    pub p0_s: f64,
    /// Weight of the run-time term (our departure; 0 = the seed's reward).
    pub run_weight: f64,
    /// Run-time reference, ms, when the decision has no estimate of its own: a run of this
    /// length scores half the run-time term.
    pub run_ref_ms: f64,
}

impl Default for RewardConfig {
    fn default() -> Self {
        // w = 0.5 weighs the two objectives of the seed equally; β_e = −0.5 lets a large
        // eviction cost at most half the best latency term; 1 GB/s is a DRAM-to-SSD write-back.
        // The run-time term is off: the default is the seed's reward. 1 s is the order of a data
        // task's run in the simulator's workloads, where 1/(1 + run/ref) is most sensitive.
        RewardConfig {
            w: 0.5,
            beta_e: -0.5,
            l0_ms: 10.0,
            eviction_bandwidth: 1e9,
            p0_s: 1.0,
            run_weight: 0.0,
            run_ref_ms: 1000.0,
        }
    }
}

/// Measurements of one finished attempt.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct RewardInputs {
    pub utilisation: f64,
    pub fetch_ms: f64,
    pub evicted_bytes: u64,
    /// Start → end of the attempt (fetch, eviction and compute), ms; only the run-time term
    /// reads it.
    pub run_ms: f64,
    /// The least estimated run (fetch + compute) among the decision's feasible candidates, when
    /// the caller could estimate it: the run-time term's per-decision scale.
    pub best_est_ms: Option<f64>,
}

impl RewardConfig {
    pub fn latency(&self, fetch_ms: f64) -> f64 {
        1.0 + fetch_ms.max(0.0) / self.l0_ms
    }

    pub fn penalty(&self, evicted_bytes: u64) -> f64 {
        (evicted_bytes as f64 / self.eviction_bandwidth) / self.p0_s
    }

    pub fn reward(&self, m: &RewardInputs) -> f64 {
        let util = m.utilisation.clamp(0.0, 1.0);
        let l = self.latency(m.fetch_ms);
        let p = self.penalty(m.evicted_bytes);
        let latency_term = if p <= 0.0 { 1.0 / l } else { (self.beta_e / l).max(1.0 / l - p) };
        let seed = self.w * util + (1.0 - self.w) * latency_term;
        if self.run_weight == 0.0 {
            return seed;
        }
        let reference = m.best_est_ms.filter(|&b| b > 0.0 && b.is_finite()).unwrap_or(self.run_ref_ms);
        seed + self.run_weight * reference / (reference + m.run_ms.max(0.0))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn close(a: f64, b: f64) -> bool {
        (a - b).abs() < 1e-12
    }

    #[test]
    fn reward_matches_hand_computed_values() {
        let c = RewardConfig::default();
        // P = 0, all local: 0.5·0.8 + 0.5·1 = 0.9
        assert!(close(
            c.reward(&RewardInputs {
                utilisation: 0.8,
                fetch_ms: 0.0,
                evicted_bytes: 0,
                run_ms: 0.0,
                best_est_ms: None
            }),
            0.9
        ));
        // P = 0, 90 ms fetch: L = 10 → 0.5·0.8 + 0.5·0.1 = 0.45
        assert!(close(
            c.reward(&RewardInputs {
                utilisation: 0.8,
                fetch_ms: 90.0,
                evicted_bytes: 0,
                run_ms: 0.0,
                best_est_ms: None
            }),
            0.45
        ));
        // P = 0.25 (250 MB at 1 GB/s), L = 2: max(−0.5/2, 0.5 − 0.25) = 0.25 → 0.5·0.4 + 0.5·0.25 = 0.325
        assert!(close(
            c.reward(&RewardInputs {
                utilisation: 0.4,
                fetch_ms: 10.0,
                evicted_bytes: 250_000_000,
                run_ms: 0.0,
                best_est_ms: None
            }),
            0.325
        ));
        // P = 3, L = 2: max(−0.25, −2.5) = −0.25 (the floor) → 0.5·0 + 0.5·(−0.25) = −0.125
        assert!(close(
            c.reward(&RewardInputs {
                utilisation: 0.0,
                fetch_ms: 10.0,
                evicted_bytes: 3_000_000_000,
                run_ms: 0.0,
                best_est_ms: None
            }),
            -0.125
        ));
        // w = 1: utilisation only.
        let u = RewardConfig { w: 1.0, ..c };
        assert!(close(
            u.reward(&RewardInputs {
                utilisation: 0.3,
                fetch_ms: 500.0,
                evicted_bytes: 9,
                run_ms: 0.0,
                best_est_ms: None
            }),
            0.3
        ));
    }

    #[test]
    fn run_time_term_is_off_by_default_and_adds_when_weighted() {
        let m = RewardInputs { utilisation: 0.8, fetch_ms: 90.0, evicted_bytes: 0, run_ms: 3000.0, best_est_ms: None };
        let c = RewardConfig::default();
        assert!(close(c.reward(&m), 0.45), "the seed's reward, whatever the run time");
        // 0.45 + 0.5 · 1/(1 + 3000/1000) = 0.45 + 0.125
        let r = RewardConfig { run_weight: 0.5, ..c.clone() };
        assert!(close(r.reward(&m), 0.575));
        // A shorter run scores higher, all else equal.
        assert!(r.reward(&RewardInputs { run_ms: 1000.0, ..m }) > r.reward(&m));
        // With the decision's own scale: 0.45 + 0.5 · 2000/(2000 + 3000) = 0.45 + 0.2
        assert!(close(r.reward(&RewardInputs { best_est_ms: Some(2000.0), ..m }), 0.65));
        // A task placed as well as estimated scores the same, long or short.
        let placed_well = |ms: f64| r.reward(&RewardInputs { run_ms: ms, best_est_ms: Some(ms), ..m });
        assert!(close(placed_well(100.0), placed_well(100_000.0)));
        assert!(close(placed_well(100.0), 0.45 + 0.25));
        // A useless estimate falls back to run_ref_ms.
        assert!(close(r.reward(&RewardInputs { best_est_ms: Some(0.0), ..m }), 0.575));
    }
}
