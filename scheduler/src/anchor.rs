//! The learned placer's anchor and guard (issue 34): a learner that starts where the best
//! heuristic is, departs from it only within a stated budget, and goes back to it when its own
//! choices measure worse.
//!
//! Every decision first asks the anchor (`fastest`: the least estimated fetch + compute) for its
//! choice. The learner's greedy choice replaces it only when
//! * the learner has trained at least once (an untrained network's preferences are noise), and
//! * its Q-value beats the anchor's choice by [`AnchorConfig::margin`], and
//! * it is estimated at most [`AnchorConfig::slack`] slower than the anchor's choice, and
//! * the guard trusts the learner (below).
//!
//! **Proposals.** The learner may also propose a candidate outright ([`Guard::decide_with`]): the
//! coordinator's `rl` does when its learned correction of the estimates
//! (`plexus_policy::correction`: what runs beside a worker, its class, its recent slowdown) puts
//! another worker ahead of the anchor's choice by a margin. A proposal is a departure, not bound
//! by the slack (it corrects the very estimates the slack is measured in), held back like the
//! others while the guard holds. A random tenth of proposals ([`CONTROL_SHARE`]) are not followed
//! but kept as **controls** ([`Kind::Withheld`]): proposals go exactly where the anchor's
//! estimate is wrong, so the followed decisions' calibration would judge them unfairly; a
//! proposed departure is judged against the mean outcome ÷ anchor estimate of the controls (once
//! there are [`MIN_CONTROLS`]), a yardstick of what following the anchor there takes that the
//! proposals do not bias. (A mean of ratios, not their sums' ratio: it weighs a short estimate
//! that ran long as much as a long one, so it is the more lenient; measured in the simulator, the
//! sums' ratio held the learner back 1–14 times a run instead of 1–7 and `rl` came out 0.5–2 %
//! slower on six of seven workloads. The judgement is per task either way and overstates what
//! departures gain, since a task's gain is partly taken from the tasks after it.)
//!
//! **Probes.** The learner may also send a decision, within a budget it states, where it has not
//! learnt what the anchor's estimates miss ([`Guard::probe`]: the coordinator's `rl` probes a
//! worker whose estimate for this kind of work comes only from other work, once per worker and
//! kind, each at most 2 × the anchor's estimate). Probes are counted apart
//! ([`Kind::Probed`]) and, like exploration, not judged.
//!
//! Exploration (the seed's ε) picks only among candidates within the same slack, so the
//! estimated cost of exploring is at most ε · slack of the estimated run time (5 % × 25 % =
//! 1.25 % with the defaults), where the seed's ε-greedy could send a task anywhere. Without
//! estimates for every feasible candidate (nothing like the task has run yet) the anchor decides
//! alone: there is no budget to depart within.
//!
//! **The guard.** Each greedy departure is judged when its outcome arrives: what it took
//! (fetch + run) against what the anchor's choice was estimated to take, the estimate corrected
//! by how the estimates of the anchor's own (followed) choices compare with their outcomes
//! lately ([`Guard::calibration`], the median ratio, so a cluster whose estimates run 20 % low
//! does not read as the learner's loss). When the last [`AnchorConfig::window`] judged
//! departures (at least [`AnchorConfig::min_judged`]) took longer in sum than the anchor was
//! estimated to, the guard stops greedy departures for [`AnchorConfig::cooldown`] decisions and
//! says so in every decision's reason; then it trusts the learner again with an empty window.
//! Exploratory departures are not judged: they are expected to lose, within the budget.

use std::collections::{BTreeMap, VecDeque};

use rand::Rng;

use crate::placer::{AnchorStats, Candidate};

/// The anchor's and the guard's parameters.
#[derive(Clone, Debug, PartialEq)]
pub struct AnchorConfig {
    /// Exploration rate among the candidates within `slack` (the seed's ε, 0.05).
    pub epsilon: f64,
    /// A departure goes only to a candidate estimated at most this much slower than the
    /// anchor's choice (0.25: ≤ 1.25 × its estimate).
    pub slack: f64,
    /// The learner's Q-value must beat the anchor's choice's by this fraction of the larger
    /// magnitude of the two (at least this much absolute) for a greedy departure.
    pub margin: f64,
    /// Greedy departures the guard judges together.
    pub window: usize,
    /// Judged departures before the guard may fall back.
    pub min_judged: usize,
    /// Decisions placed as the anchor after a fall-back.
    pub cooldown: u64,
}

impl Default for AnchorConfig {
    fn default() -> Self {
        AnchorConfig { epsilon: 0.05, slack: 0.25, margin: 0.02, window: 32, min_judged: 8, cooldown: 256 }
    }
}

/// Followed decisions whose estimate-to-outcome ratios calibrate the guard.
const CALIBRATION: usize = 64;
/// Departures awaiting their outcome at most (older ones were lost with their attempts).
const MAX_AWAITED: usize = 10_000;
/// Share of the learner's proposals not followed, at random: the controls.
pub const CONTROL_SHARE: f64 = 0.1;
/// Controls before a proposed departure is judged.
pub const MIN_CONTROLS: usize = 8;

/// What the anchor decided for one decision.
#[derive(Clone, Debug, PartialEq)]
pub struct Anchored {
    pub chosen: usize,
    pub kind: Kind,
    /// Words for `plexus explain`.
    pub reason: String,
}

/// How a decision relates to the anchor's choice.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    /// The anchor's choice, which the learner shares (or may not depart from).
    Followed,
    /// The learner's greedy choice, not the anchor's.
    Departed,
    /// A random candidate within the slack, not the anchor's.
    Explored,
    /// The learner proposed a departure and the anchor's choice was kept, at random, as a
    /// control: what these took is the yardstick of the proposed departures.
    Withheld,
    /// A probe ([`Guard::probe`]): a worker that has not run this kind of work, chosen within the
    /// learner's stated budget; not judged, like exploration.
    Probed,
}

struct Awaited {
    kind: Kind,
    /// A departure the learner proposed (`Guard::decide_with`), judged against the controls.
    proposed: bool,
    /// The anchor's choice's estimate, and this decision's own choice's, ms.
    anchor_est: f64,
    own_est: f64,
}

/// The anchor's state across decisions: the guard's window and the calibration.
pub struct Guard {
    cfg: AnchorConfig,
    awaited: BTreeMap<u64, Awaited>,
    /// Judged departures: (calibrated anchor estimate, what the departure took), ms.
    window: VecDeque<(f64, f64)>,
    /// Outcome ÷ estimate of recent followed decisions.
    ratios: VecDeque<f64>,
    /// Outcome ÷ the anchor's estimate of recent controls (`Kind::Withheld`).
    controls: VecDeque<f64>,
    /// Decision count until which departures are held back, and why.
    hold: Option<(u64, String)>,
    stats: AnchorStats,
}

impl Guard {
    pub fn new(cfg: AnchorConfig) -> Guard {
        Guard {
            cfg,
            awaited: BTreeMap::new(),
            window: VecDeque::new(),
            ratios: VecDeque::new(),
            controls: VecDeque::new(),
            hold: None,
            stats: AnchorStats::default(),
        }
    }

    pub fn config(&self) -> &AnchorConfig {
        &self.cfg
    }

    pub fn stats(&self) -> AnchorStats {
        AnchorStats { holding: self.hold.as_ref().map(|h| h.1.clone()), ..self.stats.clone() }
    }

    /// The median outcome ÷ estimate of recent followed decisions (1 before any).
    pub fn calibration(&self) -> f64 {
        if self.ratios.is_empty() {
            return 1.0;
        }
        let mut r: Vec<f64> = self.ratios.iter().copied().collect();
        r.sort_by(f64::total_cmp);
        r[r.len() / 2]
    }

    /// Decides decision `id` among `candidates`, the anchor having chosen `anchor` and the
    /// learner scoring them `q` (−∞ or NaN for infeasible ones); `trained` says whether the
    /// learner's weights come from at least one training step.
    pub fn decide(
        &mut self,
        id: u64,
        candidates: &[Candidate],
        anchor: usize,
        q: &[f64],
        trained: bool,
        rng: &mut impl Rng,
    ) -> Anchored {
        self.decide_with(id, candidates, anchor, q, trained, None, rng)
    }

    /// [`Guard::decide`], with the learner's own proposal: a candidate and why (the learned
    /// correction of the estimates, `plexus_policy::correction`, found it faster than the
    /// anchor's choice). A proposal other than the anchor's choice is a departure, judged like
    /// the Q-value's and held back like them; it is not bound by the slack, whose estimates it
    /// corrects.
    #[allow(clippy::too_many_arguments)]
    pub fn decide_with(
        &mut self,
        id: u64,
        candidates: &[Candidate],
        anchor: usize,
        q: &[f64],
        trained: bool,
        proposal: Option<(usize, String)>,
        rng: &mut impl Rng,
    ) -> Anchored {
        self.count_decision();
        let est: Option<Vec<f64>> =
            candidates.iter().map(|c| if c.feasible { c.est_run_ms() } else { Some(f64::INFINITY) }).collect();
        let Some(est) = est.filter(|_| anchor < candidates.len()) else {
            return Anchored {
                chosen: anchor,
                kind: Kind::Followed,
                reason: "as fastest: no estimate for every feasible worker yet, so nothing to depart within".into(),
            };
        };
        let a_est = est[anchor];
        let bound = a_est * (1.0 + self.cfg.slack);
        let near: Vec<usize> =
            (0..candidates.len()).filter(|&i| i != anchor && candidates[i].feasible && est[i] <= bound).collect();
        let greedy = (0..candidates.len())
            .filter(|&i| candidates[i].feasible && q.get(i).is_some_and(|v| v.is_finite()))
            .max_by(|&a, &b| q[a].total_cmp(&q[b]).then(b.cmp(&a)));
        let proposal = proposal.filter(|(p, _)| *p != anchor && candidates.get(*p).is_some_and(|c| c.feasible));
        let proposed = proposal.is_some();
        let out = match (greedy, proposal) {
            (_, Some((p, why))) => self.proposed(anchor, p, why, rng),
            (Some(g), None) if g != anchor && trained && self.beats(q[g], q[anchor]) && est[g] <= bound => {
                match &self.hold {
                    Some((_, why)) => Anchored {
                        chosen: anchor,
                        kind: Kind::Followed,
                        reason: format!("as fastest: the guard holds the learner back ({why})"),
                    },
                    None => Anchored {
                        chosen: g,
                        kind: Kind::Departed,
                        reason: format!(
                            "departed from fastest: the learner's Q-value {:.3} beats {:.3} for fastest's choice \
                             (estimated {:.0} ms here, {:.0} ms there)",
                            q[g], q[anchor], est[g], a_est
                        ),
                    },
                }
            }
            _ if !near.is_empty() && rng.random::<f64>() < self.cfg.epsilon => Anchored {
                chosen: near[rng.random_range(0..near.len())],
                kind: Kind::Explored,
                reason: format!(
                    "exploration: a random worker estimated within {:.0} % of fastest's choice",
                    self.cfg.slack * 100.0
                ),
            },
            (Some(g), _) if g == anchor => Anchored {
                chosen: anchor,
                kind: Kind::Followed,
                reason: "as fastest, which the learner agrees with (highest Q-value)".into(),
            },
            _ if !trained => Anchored {
                chosen: anchor,
                kind: Kind::Followed,
                reason: "as fastest: the learner has not finished a training step yet".into(),
            },
            _ => Anchored {
                chosen: anchor,
                kind: Kind::Followed,
                reason: format!(
                    "as fastest: the learner's preference is under the margin or estimated over {:.0} % slower",
                    self.cfg.slack * 100.0
                ),
            },
        };
        match out.kind {
            Kind::Departed => self.stats.departures += 1,
            Kind::Explored => self.stats.explored += 1,
            Kind::Withheld => self.stats.withheld += 1,
            Kind::Followed | Kind::Probed => {}
        }
        if a_est.is_finite() {
            self.awaited.insert(id, Awaited { kind: out.kind, proposed, anchor_est: a_est, own_est: est[out.chosen] });
            while self.awaited.len() > MAX_AWAITED {
                self.awaited.pop_first();
            }
        }
        out
    }

    /// Counts a decision, and ends a hold whose cooldown is over.
    fn count_decision(&mut self) {
        self.stats.decisions += 1;
        if let Some((until, _)) = &self.hold
            && self.stats.decisions > *until
        {
            self.hold = None;
            self.window.clear();
        }
    }

    /// Decision `id` goes to `p`, a probe the learner chose within its own stated budget
    /// (`plexus_policy::correction`: a worker that has not run this kind of work),
    /// `why` in words. Counted apart, not judged (like exploration), and not held back by the
    /// guard, which judges what the learner knows, not what it has yet to learn.
    pub fn probe(&mut self, p: usize, why: String) -> Anchored {
        self.count_decision();
        self.stats.probes += 1;
        Anchored { chosen: p, kind: Kind::Probed, reason: format!("probe: {why}") }
    }

    /// The decision on the learner's proposal `p` (not the anchor's choice): held back while the
    /// guard holds, kept as a control at random, else followed.
    fn proposed(&mut self, anchor: usize, p: usize, why: String, rng: &mut impl Rng) -> Anchored {
        match &self.hold {
            Some((_, held)) => Anchored {
                chosen: anchor,
                kind: Kind::Followed,
                reason: format!("as fastest: the guard holds the learner back ({held})"),
            },
            None if rng.random::<f64>() < CONTROL_SHARE => Anchored {
                chosen: anchor,
                kind: Kind::Withheld,
                reason: format!(
                    "as fastest, kept as a control (one proposal in {:.0} is not followed, at random, so that the \
                     proposed departures are judged against what fastest's choices took where the learner would \
                     have departed); the learner proposed another worker: {why}",
                    1.0 / CONTROL_SHARE
                ),
            },
            None => Anchored { chosen: p, kind: Kind::Departed, reason: format!("departed from fastest: {why}") },
        }
    }

    fn beats(&self, q: f64, anchor_q: f64) -> bool {
        let need = self.cfg.margin * q.abs().max(anchor_q.abs()).max(1.0);
        q - anchor_q > need
    }

    /// The outcome of decision `id`: it took `took_ms` (fetch + run).
    pub fn observe(&mut self, id: u64, took_ms: f64, succeeded: bool) {
        let Some(a) = self.awaited.remove(&id) else { return };
        if !succeeded || !took_ms.is_finite() {
            return;
        }
        match a.kind {
            Kind::Followed => {
                if a.own_est > 0.0 {
                    self.ratios.push_back(took_ms / a.own_est);
                    if self.ratios.len() > CALIBRATION {
                        self.ratios.pop_front();
                    }
                }
            }
            Kind::Explored | Kind::Probed => {}
            Kind::Withheld => {
                if a.anchor_est > 0.0 {
                    self.controls.push_back(took_ms / a.anchor_est);
                    if self.controls.len() > CALIBRATION {
                        self.controls.pop_front();
                    }
                }
            }
            Kind::Departed => {
                // A proposed departure goes where the learner finds the anchor's estimate wrong:
                // the followed decisions' calibration would be biased against it, so it is judged
                // against the controls, once there are enough of them.
                let calibration = if !a.proposed {
                    self.calibration()
                } else if self.controls.len() >= MIN_CONTROLS {
                    self.controls.iter().sum::<f64>() / self.controls.len() as f64
                } else {
                    return;
                };
                let expected = a.anchor_est * calibration;
                self.stats.judged += 1;
                self.stats.gain_ms += expected - took_ms;
                self.stats.anchor_ms += expected;
                self.window.push_back((expected, took_ms));
                if self.window.len() > self.cfg.window {
                    self.window.pop_front();
                }
                self.judge();
            }
        }
    }

    /// Falls back to the anchor when the window's departures took longer than the anchor's
    /// choices were estimated to.
    fn judge(&mut self) {
        if self.hold.is_some() || self.window.len() < self.cfg.min_judged {
            return;
        }
        let (expected, took) = self.window.iter().fold((0.0, 0.0), |(e, t), (a, b)| (e + a, t + b));
        if took > expected {
            let worse = if expected > 0.0 { (took / expected - 1.0) * 100.0 } else { f64::INFINITY };
            let why = format!(
                "its last {} departures took {worse:.0} % longer than fastest's choices were estimated to; \
                 placing as fastest for {} decisions",
                self.window.len(),
                self.cfg.cooldown
            );
            self.hold = Some((self.stats.decisions + self.cfg.cooldown, why));
            self.stats.fallbacks += 1;
        }
    }
}

#[cfg(test)]
mod tests;
