//! What per-worker speeds do not show (issue 34, item 2): effects on a task's run time that
//! depend on more than which node it runs on, so that a placer ranking nodes by their measured
//! speed for a kind of task (`fastest`) is blind to them, and the room left for a placer that
//! learns is measured (by the oracle, `fastest-exact`, which sees them at the decision's instant)
//! before it is claimed.
//!
//! * [`Interference`]: memory-bandwidth-bound tasks share a node's memory bandwidth; past what it
//!   sustains, they slow down, and so, less, do their neighbours. The run time of a task depends
//!   on what else runs beside it, and changes while it runs.
//! * [`Drift`]: nodes slow down for a while and recover (a co-tenant, thermal throttling), in
//!   seeded phases; a node's measured mean lags its present speed.
//! * [`Affinity`]: a node class fast for one kind of task and slow for another; the coordinator's
//!   fallback for work it has not measured on a node (its ms per flop, over every kind) is blind to
//!   it, and with many distinct requests most (node, signature) pairs are never measured.
//! * [`Hidden::shared_links`]: concurrent fetches from one node share its link: a fetch that
//!   starts while `k` others are reading from the same node moves its bytes `k + 1` times slower.
//!
//! The engine applies them (`engine/hidden.rs`); the defaults ([`Hidden::default`]) apply none,
//! so the three original workloads run exactly as before.

use crate::SimError;

/// The hidden effects one simulated cluster has. Empty by default.
#[derive(Clone, Debug, PartialEq, Default)]
pub struct Hidden {
    pub interference: Option<Interference>,
    pub drift: Option<Drift>,
    pub affinity: Vec<Affinity>,
    pub shared_links: bool,
}

/// Memory-bandwidth contention on a node. The cores of memory-bound tasks computing on a node add
/// up to a demand `D`; the node sustains `S = stream_share × cores` of it at full speed. Past that,
/// with `over = max(0, D / S − 1)`, a memory-bound task computes `1 + over` times slower (the
/// bandwidth is shared), and any other task `1 + neighbour × over` times slower (its cache misses
/// queue behind them).
#[derive(Clone, Debug, PartialEq)]
pub struct Interference {
    /// Task kinds (names without their trailing digits) that are memory-bandwidth bound.
    pub kinds: Vec<String>,
    /// Share of a node's cores whose memory-bound work its memory bandwidth sustains.
    pub stream_share: f64,
    /// How much of the contention a task that is not memory-bound feels.
    pub neighbour: f64,
}

/// Nodes slowed in phases: time is cut into periods of `period_us`; in each, a node is slowed
/// (its engines run `1 / slow` as fast) with probability `share`, drawn from `seed`, the node and
/// the period, so the same configuration slows the same nodes at the same times.
#[derive(Clone, Debug, PartialEq)]
pub struct Drift {
    pub period_us: u64,
    pub share: f64,
    pub slow: f64,
    pub seed: u64,
}

/// Tasks of `kind` run `speed` times as fast on nodes of class `class` as that class's engines
/// alone say (0.5: twice as slow).
#[derive(Clone, Debug, PartialEq)]
pub struct Affinity {
    pub class: String,
    pub kind: String,
    pub speed: f64,
}

impl Hidden {
    /// Whether run times can change while a task computes (the engine then follows each task's
    /// remaining work instead of fixing its end when it starts computing).
    pub fn varies(&self) -> bool {
        self.interference.is_some() || self.drift.is_some()
    }

    pub fn validate(&self) -> Result<(), SimError> {
        let bad = |what: &str| Err(SimError::Config(format!("hidden effects: {what}")));
        if let Some(i) = &self.interference {
            if !(i.stream_share > 0.0 && i.stream_share.is_finite()) {
                return bad("interference stream_share must be positive");
            }
            if !(0.0..=1.0).contains(&i.neighbour) {
                return bad("interference neighbour must be within [0, 1]");
            }
        }
        if let Some(d) = &self.drift
            && (d.period_us == 0 || !(0.0..=1.0).contains(&d.share) || !(d.slow >= 1.0 && d.slow.is_finite()))
        {
            return bad("drift needs a positive period, a share within [0, 1] and a slowdown of at least 1");
        }
        if let Some(a) = self.affinity.iter().find(|a| !(a.speed > 0.0 && a.speed.is_finite())) {
            return bad(&format!("affinity of class {:?} for {:?} must be a positive speed", a.class, a.kind));
        }
        Ok(())
    }

    /// A line for the benchmark's header saying which effects apply ("" for none).
    pub fn describe(&self) -> String {
        let mut parts = Vec::new();
        if let Some(i) = &self.interference {
            parts.push(format!(
                "interference: {} memory-bound, a node sustains {:.0}% of its cores of them, others feel {:.0}% of the excess",
                i.kinds.join(", "),
                i.stream_share * 100.0,
                i.neighbour * 100.0
            ));
        }
        if let Some(d) = &self.drift {
            parts.push(format!(
                "drift: {:.0} s phases, {:.0}% of nodes {}× slower in each",
                d.period_us as f64 / 1e6,
                d.share * 100.0,
                d.slow
            ));
        }
        if !self.affinity.is_empty() {
            let a: Vec<String> =
                self.affinity.iter().map(|a| format!("{} on {} ×{}", a.kind, a.class, a.speed)).collect();
            parts.push(format!("affinity: {}", a.join(", ")));
        }
        if self.shared_links {
            parts.push("shared links: concurrent fetches from a node share its link".into());
        }
        if parts.is_empty() { String::new() } else { format!("\nhidden from per-worker speeds: {}", parts.join("; ")) }
    }

    /// The speed factor of `kind` on nodes of class `class` (1 without an [`Affinity`]).
    pub fn affinity(&self, class: &str, kind: &str) -> f64 {
        self.affinity.iter().find(|a| a.class == class && a.kind == kind).map_or(1.0, |a| a.speed)
    }

    /// Whether tasks of `kind` are memory-bandwidth bound.
    pub fn memory_bound(&self, kind: &str) -> bool {
        self.interference.as_ref().is_some_and(|i| i.kinds.iter().any(|k| k == kind))
    }

    /// The slowdown of a task on a node of `cores` cores whose memory-bound tasks computing
    /// (this one included, if it is one) hold `demand` cores.
    pub fn contention(&self, cores: f64, demand: f64, memory_bound: bool) -> f64 {
        let Some(i) = &self.interference else { return 1.0 };
        let sustained = (i.stream_share * cores).max(1.0);
        let over = (demand / sustained - 1.0).max(0.0);
        if memory_bound { 1.0 + over } else { 1.0 + i.neighbour * over }
    }

    /// The slowdown of node `node` at `at_us` from [`Drift`] (1 without one).
    pub fn drift(&self, node: usize, at_us: u64) -> f64 {
        let Some(d) = &self.drift else { return 1.0 };
        let period = at_us / d.period_us;
        // SplitMix64 of (seed, node, period): a well-mixed, reproducible draw per phase.
        let mut z =
            d.seed ^ (node as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15) ^ period.wrapping_mul(0xD1B5_4A32_D192_ED03);
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^= z >> 31;
        if ((z >> 11) as f64 / (1u64 << 53) as f64) < d.share { d.slow } else { 1.0 }
    }

    /// When the phase after the one holding `at_us` starts (never without [`Drift`]).
    pub fn next_phase(&self, at_us: u64) -> Option<u64> {
        self.drift.as_ref().map(|d| (at_us / d.period_us + 1) * d.period_us)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn interference() -> Hidden {
        Hidden {
            interference: Some(Interference { kinds: vec!["stream".into()], stream_share: 0.5, neighbour: 0.25 }),
            ..Hidden::default()
        }
    }

    #[test]
    fn contention_starts_past_the_sustained_bandwidth_and_neighbours_feel_a_share() {
        let h = interference();
        // 32 cores sustain 16 cores of memory-bound work.
        assert_eq!(h.contention(32.0, 16.0, true), 1.0);
        assert_eq!(h.contention(32.0, 32.0, true), 2.0);
        assert_eq!(h.contention(32.0, 48.0, true), 3.0);
        assert_eq!(h.contention(32.0, 32.0, false), 1.25);
        assert!(h.memory_bound("stream") && !h.memory_bound("solve"));
        assert_eq!(Hidden::default().contention(32.0, 1e6, true), 1.0);
    }

    #[test]
    fn drift_slows_the_share_asked_for_in_phases_that_repeat() {
        let h = Hidden {
            drift: Some(Drift { period_us: 1_000_000, share: 0.25, slow: 3.0, seed: 7 }),
            ..Hidden::default()
        };
        let draws: Vec<f64> = (0..4000).map(|i| h.drift(i % 40, (i / 40) as u64 * 1_000_000 + 5)).collect();
        let slowed = draws.iter().filter(|&&d| d == 3.0).count() as f64 / draws.len() as f64;
        assert!((slowed - 0.25).abs() < 0.03, "{slowed}");
        assert!(draws.iter().all(|&d| d == 1.0 || d == 3.0));
        // Constant within a phase; the next phase starts on the period's boundary.
        assert_eq!(h.drift(3, 2_000_000), h.drift(3, 2_999_999));
        assert_eq!(h.next_phase(2_500_000), Some(3_000_000));
        assert_eq!(Hidden::default().next_phase(5), None);
    }

    #[test]
    fn bad_settings_are_refused_by_name() {
        let mut h = interference();
        h.interference.as_mut().unwrap().neighbour = 2.0;
        assert!(h.validate().unwrap_err().to_string().contains("neighbour"));
        let h = Hidden {
            affinity: vec![Affinity { class: "fat".into(), kind: "map".into(), speed: 0.0 }],
            ..Hidden::default()
        };
        assert!(h.validate().unwrap_err().to_string().contains("\"fat\""));
        let h = Hidden { drift: Some(Drift { period_us: 0, share: 0.5, slow: 2.0, seed: 0 }), ..Hidden::default() };
        assert!(h.validate().unwrap_err().to_string().contains("period"));
    }
}
