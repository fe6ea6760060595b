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
}

impl Default for RewardConfig {
    fn default() -> Self {
        // w = 0.5 weighs the two objectives of the seed equally; β_e = −0.5 lets a large
        // eviction cost at most half the best latency term; 1 GB/s is a DRAM-to-SSD write-back.
        RewardConfig { w: 0.5, beta_e: -0.5, l0_ms: 10.0, eviction_bandwidth: 1e9, p0_s: 1.0 }
    }
}

/// Measurements of one finished attempt.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct RewardInputs {
    pub utilisation: f64,
    pub fetch_ms: f64,
    pub evicted_bytes: u64,
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
        self.w * util + (1.0 - self.w) * latency_term
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
        assert!(close(c.reward(&RewardInputs { utilisation: 0.8, fetch_ms: 0.0, evicted_bytes: 0 }), 0.9));
        // P = 0, 90 ms fetch: L = 10 → 0.5·0.8 + 0.5·0.1 = 0.45
        assert!(close(c.reward(&RewardInputs { utilisation: 0.8, fetch_ms: 90.0, evicted_bytes: 0 }), 0.45));
        // P = 0.25 (250 MB at 1 GB/s), L = 2: max(−0.5/2, 0.5 − 0.25) = 0.25 → 0.5·0.4 + 0.5·0.25 = 0.325
        assert!(close(c.reward(&RewardInputs { utilisation: 0.4, fetch_ms: 10.0, evicted_bytes: 250_000_000 }), 0.325));
        // P = 3, L = 2: max(−0.25, −2.5) = −0.25 (the floor) → 0.5·0 + 0.5·(−0.25) = −0.125
        assert!(close(c.reward(&RewardInputs { utilisation: 0.0, fetch_ms: 10.0, evicted_bytes: 3_000_000_000 }), -0.125));
        // w = 1: utilisation only.
        let u = RewardConfig { w: 1.0, ..c };
        assert!(close(u.reward(&RewardInputs { utilisation: 0.3, fetch_ms: 500.0, evicted_bytes: 9 }), 0.3));
    }
}
