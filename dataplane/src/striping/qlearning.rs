//! The Q-learning rail scheduler of seed 000 (CN101833479): one Q-table per pair of rails,
//! states from per-rail queue counters and waiting times, greedy action on the summed Q.
//!
//! The seed, step by step, with its reconstructed parts marked (the readings are argued in
//! docs/seeds/000-multi-rail-striping.md):
//! * `time_interval = seg_max / bandwidth`, the time to send one full segment on one rail.
//! * `queue_interval = ceil(queue_max / k)` (reconstructed).
//! * When segment j leaves rail i's queue: `wait_time[i] = (now − enter_time[j]) / time_interval`.
//! * Rail state `k_i = min(k − 1, floor(counter[i] / queue_interval) + floor(wait_time[i]))`
//!   (reconstructed); the environment state is `s = (k_0, …, k_{m−1})`.
//! * Tables `Q_ij[k_i][k_j][a]` for every i < j, all initialised to `q_init` (reconstructed: a
//!   small optimistic constant).
//! * Decision: `a = argmax_a Σ_{i<j} Q_ij[k_i][k_j][a]`; the first decision ever uses
//!   `s = (0, …, 0)` and a random rail.
//! * After each decision (not the first), every table is updated at the previous state-action
//!   pair: `Q_ij(s_prev, a_prev) ← (1 − β) Q_ij(s_prev, a_prev) + β (r + γ Q_ij(s_cur, a_cur))`,
//!   where r is the reward of the previous decision.
//! * The segment joins rail a's queue (`counter[a] += 1`), then the reward of this decision is
//!   `r = 1 / (wait_time[a] + 1) − k_a / k` (reconstructed), with k_a rail a's state after the
//!   segment joined (the seed computes r in step 9, after step 8.3 incremented the counter).
//!
//! `bandwidth` is measured (issue 30): each rail's delivery rate is estimated from its
//! acknowledgements (bytes acknowledged over the time since the rail's previous
//! acknowledgement while it stayed busy, else since the segment was sent; a moving average),
//! and `time_interval` is `seg_max` over the mean measured rate of the rails — the configured
//! bandwidth is only the prior until the first acknowledgement. An operator can set the rate,
//! `k` and `queue_max` of every Q-learning scheduler of a running process through
//! [`QTuning::global`] (the worker reads them from its `rail-tuning` file); a new `k` resizes
//! the tables, which start again from `q_init`. `queue_max` here is the scheduler's state
//! scale (`queue_interval`); the transport's own bound on a rail's queue is its configuration.
//!
//! Ties in the argmax (every entry starts equal) are broken uniformly at random with the
//! seeded generator; the seed does not say, and always taking the lowest index would make
//! rail 0 the default of every unvisited state.

use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering::Relaxed};
use std::time::Duration;

use rand::{Rng, SeedableRng, rngs::StdRng};

use super::rail::{RailScheduler, RailView, SchedulerParams, next_up};

/// Which reading of the seed to run.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum QVariant {
    /// The seed as written (with the reconstructions of docs/seeds/000-multi-rail-striping.md),
    /// nothing added.
    Seed,
    /// Two changes, argued in the module documentation of the endpoint and ARCHITECTURE.md:
    /// a rail whose queue is empty has waiting time 0 (the seed keeps the wait of the last
    /// segment it sent, so a rail that once had a long queue looks busy forever after it
    /// drained), and the reward is paid when the segment leaves its queue, with the wait that
    /// segment actually had, instead of the last wait some earlier segment had on that rail.
    Fresh,
}

/// Parameters of the Q-learning scheduler.
#[derive(Clone, Debug)]
pub struct QConfig {
    pub rails: usize,
    /// States per rail, 8..=32.
    pub k: usize,
    pub queue_max: usize,
    /// Seconds to send one full segment on one rail (`seg_max / bandwidth`): the prior, until a
    /// rail's rate is measured.
    pub time_interval: f64,
    /// Bytes of a full segment, for `time_interval` from measured rates.
    pub seg_max: u64,
    /// What an operator set while the process runs.
    pub tuning: &'static QTuning,
    /// Learning rate β.
    pub beta: f64,
    /// Discount γ.
    pub gamma: f64,
    /// Initial value of every Q entry.
    pub q_init: f64,
    pub seed: u64,
    pub variant: QVariant,
}

/// β = 0.1 and γ = 0.95 are the seed's defaults (its claims 2 and 3).
pub const BETA: f64 = 0.1;
pub const GAMMA: f64 = 0.95;
/// The seed's initial Q value is lost. Rewards lie in (−1, 1], so 1.0 is above any single
/// reward (optimistic: an untried action looks at least as good as the best immediate outcome)
/// yet far below the 1 / (1 − γ) = 20 that would take hundreds of visits per entry to unlearn.
pub const Q_INIT: f64 = 1.0;

impl QConfig {
    pub fn from_params(p: &SchedulerParams, variant: QVariant) -> QConfig {
        QConfig {
            rails: p.rails,
            k: p.k,
            queue_max: p.queue_max,
            time_interval: p.seg_max as f64 / p.bandwidth,
            seg_max: p.seg_max,
            tuning: QTuning::global(),
            beta: BETA,
            gamma: GAMMA,
            q_init: Q_INIT,
            seed: p.seed,
            variant,
        }
    }
}

/// Q-learning parameters an operator may set on a running process (`None`/0: not set; the
/// rate then comes from measurement, `k` and `queue_max` from the configuration). Every
/// scheduler reads them at its next decision.
#[derive(Debug, Default)]
pub struct QTuning {
    /// Bytes/s as `f64` bits; 0 = measured.
    rate: AtomicU64,
    k: AtomicUsize,
    queue_max: AtomicUsize,
    generation: AtomicU64,
}

impl QTuning {
    pub const fn new() -> QTuning {
        QTuning {
            rate: AtomicU64::new(0),
            k: AtomicUsize::new(0),
            queue_max: AtomicUsize::new(0),
            generation: AtomicU64::new(0),
        }
    }

    /// The process's settings, which schedulers built by an endpoint follow.
    pub fn global() -> &'static QTuning {
        static GLOBAL: QTuning = QTuning::new();
        &GLOBAL
    }

    /// Sets (or with `None` clears) the rate in bytes/s, `k` (8..=32) and `queue_max` (≥ 1).
    pub fn set(&self, rate: Option<f64>, k: Option<usize>, queue_max: Option<usize>) -> Result<(), String> {
        if let Some(r) = rate
            && !(r.is_finite() && r > 0.0)
        {
            return Err(format!("rate {r} must be a positive number of bytes/s"));
        }
        if let Some(k) = k
            && !(8..=32).contains(&k)
        {
            return Err(format!("k = {k} must be in 8..=32 (the seed's range)"));
        }
        if queue_max == Some(0) {
            return Err("queue_max must be at least 1".into());
        }
        self.rate.store(rate.map_or(0, f64::to_bits), Relaxed);
        self.k.store(k.unwrap_or(0), Relaxed);
        self.queue_max.store(queue_max.unwrap_or(0), Relaxed);
        self.generation.fetch_add(1, Relaxed);
        Ok(())
    }

    /// (rate, k, queue_max) as set.
    pub fn get(&self) -> (Option<f64>, Option<usize>, Option<usize>) {
        let rate = self.rate.load(Relaxed);
        let nz = |v: usize| (v != 0).then_some(v);
        ((rate != 0).then(|| f64::from_bits(rate)), nz(self.k.load(Relaxed)), nz(self.queue_max.load(Relaxed)))
    }
}

/// Weight of a new acknowledgement in a rail's measured rate.
const RATE_EWMA: f64 = 0.2;

/// The seed's scheduler. See the module documentation for the exact procedure.
#[derive(Debug)]
pub struct QLearning {
    cfg: QConfig,
    /// `k` and `queue_max` as configured (what clearing a tuning returns to).
    configured: (usize, usize),
    /// The tuning generation applied.
    generation: u64,
    /// Each rail's measured delivery rate (bytes/s), and when it last had an acknowledgement.
    rate: Vec<Option<f64>>,
    last_ack: Vec<Option<Duration>>,
    queue_interval: usize,
    /// The rail pairs (i, j), i < j, in table order.
    pairs: Vec<(usize, usize)>,
    /// One table per pair, flattened as `[k_i][k_j][a]`.
    tables: Vec<Vec<f64>>,
    wait_time: Vec<f64>,
    /// Segments queued per rail as this scheduler last saw them (used by `Fresh` to know a
    /// queue is empty; the seed's counter itself comes from the transport's view).
    queued: Vec<usize>,
    prev: Option<Decision>,
    /// `Fresh`: decisions whose segment has not yet left its queue, per rail in FCFS order:
    /// the (state, action) to update once its reward is known.
    waiting: Vec<std::collections::VecDeque<Vec<usize>>>,
    rng: StdRng,
}

#[derive(Clone, Debug, PartialEq)]
struct Decision {
    state: Vec<usize>,
    action: usize,
    reward: f64,
}

impl QLearning {
    pub fn new(cfg: QConfig) -> QLearning {
        assert!((8..=32).contains(&cfg.k) || cfg!(test), "k must be in 8..=32");
        assert!(cfg.queue_max > 0 && cfg.time_interval > 0.0);
        let m = cfg.rails;
        let pairs: Vec<_> = (0..m).flat_map(|i| (i + 1..m).map(move |j| (i, j))).collect();
        let tables = vec![vec![cfg.q_init; cfg.k * cfg.k * m]; pairs.len()];
        QLearning {
            configured: (cfg.k, cfg.queue_max),
            generation: 0,
            rate: vec![None; m],
            last_ack: vec![None; m],
            queue_interval: cfg.queue_max.div_ceil(cfg.k),
            pairs,
            tables,
            wait_time: vec![0.0; m],
            queued: vec![0; m],
            prev: None,
            waiting: vec![Default::default(); m],
            rng: StdRng::seed_from_u64(cfg.seed),
            cfg,
        }
    }

    /// `queue_interval = ceil(queue_max / k)`.
    pub fn queue_interval(&self) -> usize {
        self.queue_interval
    }

    /// The normalised waiting times, one per rail.
    pub fn wait_times(&self) -> &[f64] {
        &self.wait_time
    }

    /// `k_i = min(k − 1, floor(counter / queue_interval) + floor(wait_time))`.
    pub fn rail_state(&self, counter: usize, wait_time: f64) -> usize {
        (counter / self.queue_interval + wait_time.floor() as usize).min(self.cfg.k - 1)
    }

    /// The environment state for the given views.
    pub fn state(&self, rails: &[RailView]) -> Vec<usize> {
        rails.iter().enumerate().map(|(i, v)| self.rail_state(v.queued, self.effective_wait(i, v.queued))).collect()
    }

    fn effective_wait(&self, rail: usize, queued: usize) -> f64 {
        match self.cfg.variant {
            QVariant::Fresh if queued == 0 => 0.0,
            _ => self.wait_time[rail],
        }
    }

    /// `Q_ij[k_i][k_j][a]` for pair index `p`.
    pub fn q(&self, p: usize, state: &[usize], a: usize) -> f64 {
        self.tables[p][self.index(p, state, a)]
    }

    fn index(&self, p: usize, state: &[usize], a: usize) -> usize {
        let (i, j) = self.pairs[p];
        (state[i] * self.cfg.k + state[j]) * self.cfg.rails + a
    }

    /// `Q_total(s, a) = Σ_{i<j} Q_ij[k_i][k_j][a]`.
    pub fn q_total(&self, state: &[usize], a: usize) -> f64 {
        (0..self.pairs.len()).map(|p| self.q(p, state, a)).sum()
    }

    /// The rail pairs in table order.
    pub fn pairs(&self) -> &[(usize, usize)] {
        &self.pairs
    }

    /// `r = 1 / (wait + 1) − k_a / k`.
    /// Seconds to send one full segment: `seg_max` over the operator's rate, else over the mean
    /// measured rate of the rails, else the configured prior.
    pub fn time_interval(&self) -> f64 {
        if let (Some(r), _, _) = self.cfg.tuning.get() {
            return self.cfg.seg_max as f64 / r;
        }
        let measured: Vec<f64> = self.rate.iter().flatten().copied().collect();
        if measured.is_empty() {
            self.cfg.time_interval
        } else {
            self.cfg.seg_max as f64 * measured.len() as f64 / measured.iter().sum::<f64>()
        }
    }

    /// Each rail's measured delivery rate in bytes/s (`None` before its first acknowledgement).
    pub fn measured_rates(&self) -> &[Option<f64>] {
        &self.rate
    }

    /// (k, queue_max) in force.
    pub fn params(&self) -> (usize, usize) {
        (self.cfg.k, self.cfg.queue_max)
    }

    /// Applies an operator's new settings, if any since the last decision.
    fn retune(&mut self) {
        let g = self.cfg.tuning.generation.load(Relaxed);
        if g == self.generation {
            return;
        }
        self.generation = g;
        let (_, k, queue_max) = self.cfg.tuning.get();
        let (k, queue_max) = (k.unwrap_or(self.configured.0), queue_max.unwrap_or(self.configured.1));
        if k != self.cfg.k {
            self.cfg.k = k;
            let size = k * k * self.cfg.rails;
            self.tables.iter_mut().for_each(|t| *t = vec![self.cfg.q_init; size]);
            self.prev = None;
            self.waiting.iter_mut().for_each(std::collections::VecDeque::clear);
        }
        self.cfg.queue_max = queue_max;
        self.queue_interval = queue_max.div_ceil(k);
    }

    pub fn reward(&self, wait: f64, k_a: usize) -> f64 {
        1.0 / (wait + 1.0) - k_a as f64 / self.cfg.k as f64
    }

    /// The seed's update of every table at (s_prev, a_prev) towards r + γ Q_ij(s_cur, a_cur).
    fn update(
        &mut self,
        prev_state: &[usize],
        prev_action: usize,
        reward: f64,
        cur_state: &[usize],
        cur_action: usize,
    ) {
        let (beta, gamma) = (self.cfg.beta, self.cfg.gamma);
        for p in 0..self.pairs.len() {
            let next = self.q(p, cur_state, cur_action);
            let at = self.index(p, prev_state, prev_action);
            let q = &mut self.tables[p][at];
            *q = (1.0 - beta) * *q + beta * (reward + gamma * next);
        }
    }

    fn argmax(&mut self, state: &[usize], rails: &[RailView]) -> usize {
        let mut best: Vec<usize> = vec![];
        let mut best_q = f64::NEG_INFINITY;
        for a in (0..rails.len()).filter(|&a| rails[a].up) {
            let q = self.q_total(state, a);
            if q > best_q {
                best_q = q;
                best.clear();
            }
            if q == best_q {
                best.push(a);
            }
        }
        best[self.rng.random_range(0..best.len())]
    }

    fn random_up(&mut self, rails: &[RailView]) -> usize {
        let up: Vec<usize> = (0..rails.len()).filter(|&a| rails[a].up).collect();
        up[self.rng.random_range(0..up.len())]
    }
}

impl RailScheduler for QLearning {
    fn pick(&mut self, rails: &[RailView], _len: u64, _now: Duration) -> usize {
        self.retune();
        for (i, v) in rails.iter().enumerate() {
            self.queued[i] = v.queued;
            // A decision whose segment never joined the queue (its rail went down while the
            // sender waited) leaves a stale entry; the queue is FCFS, so the stale ones are
            // the oldest.
            while self.waiting[i].len() > v.queued {
                self.waiting[i].pop_front();
            }
        }
        if self.pairs.is_empty() {
            // One rail: nothing to choose, nothing to learn.
            return next_up(rails, 0);
        }
        let (state, action) = match &self.prev {
            None => (vec![0; rails.len()], self.random_up(rails)),
            Some(_) => {
                let s = self.state(rails);
                let a = self.argmax(&s, rails);
                (s, a)
            }
        };
        match self.cfg.variant {
            QVariant::Seed => {
                if let Some(prev) = self.prev.take() {
                    self.update(&prev.state, prev.action, prev.reward, &state, action);
                }
                let k_a = self.rail_state(rails[action].queued + 1, self.wait_time[action]);
                let reward = self.reward(self.wait_time[action], k_a);
                self.prev = Some(Decision { state, action, reward });
            }
            QVariant::Fresh => {
                // The reward arrives when this segment leaves its queue (`departed`); until then
                // the decision waits in its rail's FCFS list. `prev` only marks "not first".
                self.waiting[action].push_back(state);
                self.prev = Some(Decision { state: vec![], action, reward: 0.0 });
            }
        }
        self.queued[action] += 1;
        action
    }

    fn departed(&mut self, rail: usize, entered: Duration, now: Duration) {
        let wait = now.saturating_sub(entered).as_secs_f64() / self.time_interval();
        self.wait_time[rail] = wait;
        self.queued[rail] = self.queued[rail].saturating_sub(1);
        if self.cfg.variant == QVariant::Fresh
            && let Some(state) = self.waiting[rail].pop_front()
        {
            // Reward of the decision that put this segment here, from the wait it really had
            // and the state it left its rail in; bootstrap from the greedy value of the state
            // now (a one-step Q-learning target, as the decision that follows is not known).
            let k_a = self.rail_state(self.queued[rail], wait);
            let reward = self.reward(wait, k_a);
            let views: Vec<RailView> =
                self.queued.iter().map(|&q| RailView { up: true, queued: q, ..RailView::default() }).collect();
            let now_state = self.state(&views);
            let best = (0..self.cfg.rails)
                .max_by(|&a, &b| self.q_total(&now_state, a).total_cmp(&self.q_total(&now_state, b)))
                .expect("rails");
            self.update(&state, rail, reward, &now_state, best);
        }
    }

    fn delivered(&mut self, rail: usize, bytes: u64, sent_at: Duration, now: Duration) {
        // Busy since the previous acknowledgement (this segment was sent before it): the gap
        // between the two is this segment's time on the wire; else its whole round trip.
        let since = match self.last_ack[rail] {
            Some(t) if sent_at <= t => t,
            _ => sent_at,
        };
        let dt = now.saturating_sub(since).as_secs_f64();
        if dt > 0.0 {
            let r = bytes as f64 / dt;
            self.rate[rail] = Some(self.rate[rail].map_or(r, |old| (1.0 - RATE_EWMA) * old + RATE_EWMA * r));
        }
        self.last_ack[rail] = Some(now);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cfg(rails: usize, k: usize, queue_max: usize) -> QConfig {
        QConfig {
            rails,
            k,
            queue_max,
            time_interval: 0.010,
            seg_max: 1 << 20,
            tuning: Box::leak(Box::new(QTuning::new())),
            beta: BETA,
            gamma: GAMMA,
            q_init: Q_INIT,
            seed: 1,
            variant: QVariant::Seed,
        }
    }

    fn views(queued: &[usize]) -> Vec<RailView> {
        queued.iter().map(|&q| RailView { up: true, queued: q, ..RailView::default() }).collect()
    }

    const MS: fn(u64) -> Duration = Duration::from_millis;

    #[test]
    fn builds_one_table_per_rail_pair() {
        for (m, tables) in [(2, 1), (3, 3), (4, 6), (5, 10)] {
            let q = QLearning::new(cfg(m, 8, 16));
            assert_eq!(q.tables.len(), tables, "C({m},2)");
            assert!(q.tables.iter().all(|t| t.len() == 8 * 8 * m && t.iter().all(|&v| v == Q_INIT)));
        }
        assert_eq!(QLearning::new(cfg(3, 8, 16)).pairs(), &[(0, 1), (0, 2), (1, 2)]);
    }

    #[test]
    fn queue_interval_is_ceil_queue_max_over_k() {
        assert_eq!(QLearning::new(cfg(2, 8, 16)).queue_interval(), 2);
        assert_eq!(QLearning::new(cfg(2, 8, 17)).queue_interval(), 3);
        assert_eq!(QLearning::new(cfg(2, 8, 4)).queue_interval(), 1);
        assert_eq!(QLearning::new(cfg(2, 32, 64)).queue_interval(), 2);
    }

    #[test]
    fn wait_time_is_queueing_delay_over_time_interval() {
        let mut q = QLearning::new(cfg(2, 8, 16));
        // time_interval = 10 ms; a segment that entered at 5 ms and left at 40 ms waited 3.5.
        q.departed(1, MS(5), MS(40));
        assert_eq!(q.wait_times()[0], 0.0);
        assert!((q.wait_times()[1] - 3.5).abs() < 1e-9, "{:?}", q.wait_times());
    }

    #[test]
    fn rail_state_by_hand() {
        let q = QLearning::new(cfg(2, 8, 16)); // queue_interval 2, k 8
        assert_eq!(q.rail_state(0, 0.0), 0);
        assert_eq!(q.rail_state(1, 0.99), 0); // floor(1/2) + floor(0.99)
        assert_eq!(q.rail_state(5, 1.5), 3); // 2 + 1
        assert_eq!(q.rail_state(16, 0.0), 7); // 8, capped at k−1
        assert_eq!(q.rail_state(2, 30.0), 7);
        let mut q = q;
        q.departed(0, MS(0), MS(25)); // wait 2.5
        assert_eq!(q.state(&views(&[3, 4])), vec![3, 2]); // (1+2, 2+0)
    }

    #[test]
    fn reward_by_hand() {
        let q = QLearning::new(cfg(2, 8, 16));
        assert_eq!(q.reward(0.0, 0), 1.0);
        assert_eq!(q.reward(1.0, 4), 0.5 - 0.5);
        assert!((q.reward(3.0, 2) - (0.25 - 0.25)).abs() < 1e-12);
        assert!((q.reward(0.5, 7) - (1.0 / 1.5 - 7.0 / 8.0)).abs() < 1e-12);
    }

    #[test]
    fn first_decision_is_random_from_the_zero_state_then_greedy_with_updates_by_hand() {
        let mut q = QLearning::new(cfg(2, 8, 16));
        let first = q.pick(&views(&[0, 0]), 1, MS(0));
        let d1 = q.prev.clone().unwrap();
        assert_eq!(d1.state, vec![0, 0]);
        assert_eq!(d1.action, first);
        // Reward of the first decision: wait 0, k_a = floor(1/2) + 0 = 0 → r = 1.
        assert_eq!(d1.reward, 1.0);

        // Rail 0 now shows a wait of 2.0 (20 ms / 10 ms) and 4 queued; rail 1 empty.
        q.departed(0, MS(0), MS(20));
        let s = views(&[4, 0]);
        assert_eq!(q.state(&s), vec![4, 0]); // 4/2 + 2 = 4; 0
        // Make rail 1 the greedy choice in (4, 0).
        let at = q.index(0, &[4, 0], 1);
        q.tables[0][at] = 3.0;
        let second = q.pick(&s, 1, MS(20));
        assert_eq!(second, 1);
        // Update of the table at (s_prev = (0,0), a_prev = first):
        // (1 − 0.1)·1.0 + 0.1·(1.0 + 0.95·3.0) = 0.9 + 0.385 = 1.285
        let got = q.q(0, &[0, 0], first);
        assert!((got - 1.285).abs() < 1e-12, "{got}");
        // Every other entry is untouched.
        let changed = q.tables[0].iter().filter(|&&v| v != Q_INIT).count();
        assert_eq!(changed, 2);
        // Reward of the second decision: wait_time[1] = 0, k_1 after joining = floor(1/2) = 0.
        assert_eq!(q.prev.as_ref().unwrap().reward, 1.0);
    }

    #[test]
    fn three_rails_sum_three_tables_and_update_each() {
        let mut q = QLearning::new(cfg(3, 8, 8)); // queue_interval 1
        q.pick(&views(&[0, 0, 0]), 1, MS(0));
        let prev = q.prev.clone().unwrap();
        let s = [1usize, 2, 3];
        // Q_total(s, 2) = Q_01[1][2][2] + Q_02[1][3][2] + Q_12[2][3][2].
        for (p, v) in [(0, 0.5), (1, 0.25), (2, 2.0)] {
            let at = q.index(p, &s, 2);
            q.tables[p][at] = v;
        }
        assert_eq!(q.q_total(&s, 2), 2.75);
        assert_eq!(q.q_total(&s, 0), 3.0 * Q_INIT);
        assert_ne!(q.pick(&views(&[1, 2, 3]), 1, MS(1)), 2, "Q_total 3.0 for rails 0 and 1 beats 2.75");
        // All three tables updated at (s_prev, a_prev) with their own next value.
        for p in 0..3 {
            let next = q.q(p, &s, q.prev.as_ref().unwrap().action);
            let want = 0.9 * Q_INIT + 0.1 * (prev.reward + 0.95 * next);
            assert!((q.q(p, &prev.state, prev.action) - want).abs() < 1e-12);
        }
    }

    #[test]
    fn ties_are_broken_at_random_and_down_rails_never_chosen() {
        let mut q = QLearning::new(cfg(3, 8, 8));
        let mut seen = [0; 3];
        for _ in 0..300 {
            // Fresh scheduler state each time would be needed for pure ties; with learning the
            // values drift, so use a state never visited: (7, 7, 7) with all entries equal.
            let a = q.argmax(&[7, 7, 7], &views(&[0, 0, 0]));
            seen[a] += 1;
        }
        assert!(seen.iter().all(|&n| n > 50), "{seen:?}");
        let mut v = views(&[0, 0, 0]);
        v[0].up = false;
        v[2].up = false;
        for _ in 0..20 {
            assert_eq!(q.pick(&v, 1, MS(0)), 1);
        }
    }

    #[test]
    fn same_seed_same_decisions() {
        let run = || {
            let mut q = QLearning::new(cfg(3, 8, 8));
            (0..200)
                .map(|t| {
                    let a = q.pick(&views(&[t % 3, t % 5, t % 2]), 1, MS(t as u64));
                    q.departed(a, MS(t as u64), MS(t as u64 + (a as u64 + 1) * 7));
                    a
                })
                .collect::<Vec<_>>()
        };
        assert_eq!(run(), run());
    }

    /// `time_interval` follows the rails' measured rates once acknowledgements arrive, and an
    /// operator's rate over both.
    #[test]
    fn time_interval_comes_from_measured_rates_then_from_the_operator() {
        let c = cfg(2, 8, 16);
        let tuning = c.tuning;
        let mut q = QLearning::new(c);
        assert_eq!(q.time_interval(), 0.010, "the prior before any acknowledgement");
        // Rail 0 busy: 1 MiB acknowledged every 4 ms (250 MiB/s); rail 1: 1 MiB every 16 ms.
        for i in 1..=20u64 {
            q.delivered(0, 1 << 20, MS(4 * i - 4), MS(4 * i));
            q.delivered(1, 1 << 20, MS(16 * i - 16), MS(16 * i));
        }
        let r = q.measured_rates().to_vec();
        assert!((r[0].unwrap() - (1u64 << 20) as f64 / 0.004).abs() < 1.0, "{r:?}");
        assert!((r[1].unwrap() - (1u64 << 20) as f64 / 0.016).abs() < 1.0, "{r:?}");
        let mean = (r[0].unwrap() + r[1].unwrap()) / 2.0;
        assert!((q.time_interval() - (1u64 << 20) as f64 / mean).abs() < 1e-12);
        tuning.set(Some(1e9), None, None).unwrap();
        assert_eq!(q.time_interval(), (1u64 << 20) as f64 / 1e9);
        tuning.set(None, None, None).unwrap();
        assert!((q.time_interval() - (1u64 << 20) as f64 / mean).abs() < 1e-12);
    }

    /// A running scheduler takes a new k and queue_max at its next decision; bad values are
    /// refused with the reason.
    #[test]
    fn k_and_queue_max_are_settable_while_running() {
        let c = cfg(3, 8, 16);
        let tuning = c.tuning;
        let mut q = QLearning::new(c);
        q.pick(&views(&[0, 0, 0]), 1, MS(0));
        tuning.set(None, Some(16), Some(64)).unwrap();
        q.pick(&views(&[1, 0, 0]), 1, MS(1));
        assert_eq!((q.params(), q.queue_interval()), ((16, 64), 4));
        assert!(q.tables.iter().all(|t| t.len() == 16 * 16 * 3));
        assert_eq!(q.rail_state(64, 0.0), 15, "states now go up to k − 1 = 15");
        tuning.set(None, None, None).unwrap();
        q.pick(&views(&[0, 0, 0]), 1, MS(2));
        assert_eq!(q.params(), (8, 16), "cleared: back to the configuration");
        assert!(tuning.set(None, Some(4), None).unwrap_err().contains("8..=32"));
        assert!(tuning.set(Some(-1.0), None, None).unwrap_err().contains("rate"));
        assert!(tuning.set(None, None, Some(0)).unwrap_err().contains("queue_max"));
    }
}
