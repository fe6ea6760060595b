//! The dual-thread DQN agent of seed 001.
//!
//! * The **decision side** ([`DqnPolicy::decide`], called on the caller's thread) owns the
//!   *inference network* only. It scores every candidate, picks one ε-greedily (the exploratory
//!   pick is a random feasible candidate *other than* the best), and when a decision's reward and
//!   next state are both known, hands the experience to the training thread over a channel — a
//!   send that never waits.
//! * The **training thread** owns the *training network*, a target copy, the experience buffer
//!   and the optimiser. When the buffer is full (1024) it runs a training step of 8 batches of
//!   128 sampled (and removed) experiences, then publishes its weights. With `passes` > 1 and
//!   `history` > 0 (our departures, see [`PolicyConfig::passes`] and [`PolicyConfig::history`])
//!   the step goes that many times over its batches and those of the steps before it.
//! * Every `sync_every` (1024) decisions the decision side takes the newest published weights and
//!   swaps them into its inference network between two decisions; no lock is held while deciding.
//!
//! Experiences and weights persist through a [`PolicyStore`] (the coordinator backs it with
//! sled), so a learned policy survives a restart.

use std::collections::{BTreeMap, HashMap};
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc;
use std::thread::JoinHandle;

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use tch::nn::{self, OptimizerConfig};
use tch::{Device, Kind, Tensor};

use crate::PolicyError;
use crate::buffer::{Experience, ExperienceBuffer, Inserted};
use crate::features::{FEATURES, Observation};
use crate::net::{NetConfig, QNet, criticality_loss};
use crate::reward::{RewardConfig, RewardInputs};

/// Whatever failed inside a [`PolicyStore`]: the store's own error, boxed, because the seam is
/// implemented outside this crate (the coordinator's sled store). The policy only logs it.
/// At most this many experiences are written to the store in one call.
const PERSIST_BATCH: usize = 256;

pub type StoreError = Box<dyn std::error::Error + Send + Sync>;

/// Durable storage for what the policy learned. The policy logs a store's errors and goes on
/// learning in memory rather than stopping placement.
pub trait PolicyStore: Send + Sync {
    fn load_weights(&self) -> Result<Option<Vec<u8>>, StoreError>;
    fn save_weights(&self, bytes: &[u8]) -> Result<(), StoreError>;
    fn load_experiences(&self) -> Result<Vec<(u64, Vec<u8>)>, StoreError>;
    fn put_experience(&self, id: u64, bytes: &[u8]) -> Result<(), StoreError>;
    /// Several at once: one write where the store can batch (one etcd transaction instead of
    /// one round trip each), so persisting keeps up with experiences arriving by the thousand.
    fn put_experiences(&self, items: &[(u64, Vec<u8>)]) -> Result<(), StoreError> {
        items.iter().try_for_each(|(id, bytes)| self.put_experience(*id, bytes))
    }
    fn remove_experiences(&self, ids: &[u64]) -> Result<(), StoreError>;
}

/// Everything that shapes the agent.
#[derive(Clone, Debug)]
pub struct PolicyConfig {
    pub net: NetConfig,
    pub reward: RewardConfig,
    /// Exploration rate (the seed: 0.05).
    pub epsilon: f64,
    /// Discount (the seed: 0.9).
    pub gamma: f64,
    /// Experience buffer capacity; a training step starts when it is full (the seed: 1024).
    pub buffer: usize,
    pub batch: usize,
    /// Batches per training step (the seed: 8).
    pub batches_per_step: usize,
    /// Passes over a training step's batches (the seed: 1). Our departure, for online learning
    /// from few decisions: the seed trains once per 1024 decisions and uses each experience
    /// once, which is ~6 steps (48 gradient steps) in a few thousand decisions. With `passes` =
    /// k a step still samples (and removes) its 8 × 128 experiences from the buffer exactly as
    /// the seed says, then makes k gradient passes over them, refreshing the target network
    /// after each pass (so a step is k rounds of fitted Q-iteration on its batches, not k
    /// gradient steps towards one stale target). 1 is exactly the seed's schedule.
    pub passes: usize,
    /// Training steps whose batches are kept for later steps' passes (the seed: 0). Our
    /// departure, with `passes`: a step's passes go over its own 8 batches and those of the
    /// previous `history` steps, kept outside the experience buffer (which still gives every
    /// sampled entry up, as the seed says). Fitting each step to only its 1024 newest
    /// experiences many times over fits their noise; a window of several steps averages it.
    pub history: usize,
    /// Decisions between weight copies into the inference network (the seed: 1024).
    pub sync_every: u64,
    pub learning_rate: f64,
    pub seed: u64,
    /// None: CUDA when available, else CPU.
    pub device: Option<Device>,
    /// Simulation only: the decision side waits until the training thread has absorbed each
    /// experience (and trained, when that filled the buffer). A simulator issues decisions far
    /// faster than real time; without this the trainer falls behind, experiences arriving while
    /// the buffer is full are dropped, and runs do not repeat. Never set in the coordinator,
    /// where learning must not block decisions.
    pub lockstep: bool,
}

impl Default for PolicyConfig {
    fn default() -> Self {
        PolicyConfig {
            net: NetConfig::default(),
            reward: RewardConfig::default(),
            epsilon: 0.05,
            gamma: 0.9,
            buffer: 1024,
            batch: 128,
            batches_per_step: 8,
            passes: 1,
            history: 0,
            sync_every: 1024,
            // Adam at 1e-3 is the usual step for small DQNs; plain SGD on this loss, whose gradient
            // is damped by the criticality factor, learns too slowly to adapt online.
            learning_rate: 1e-3,
            seed: 1,
            device: None,
            lockstep: false,
        }
    }
}

impl PolicyConfig {
    /// Our departures from the seed on (ARCHITECTURE.md, "Departures"): 4 passes over each
    /// step's batches and those of the 4 steps before it, the run-time reward term at weight 2
    /// — chosen with `bench --bin placement` — and a smaller buffer, batch and sync interval. What `--placer rl` runs; `default()`
    /// is the seed's schedule and reward (`rl-seed` in the benchmarks).
    pub fn ours() -> Self {
        PolicyConfig {
            passes: 4,
            history: 4,
            reward: RewardConfig { run_weight: 2.0, ..RewardConfig::default() },
            // Learning within the first few hundred decisions: a training step every 256
            // experiences (8 batches of 32) and new weights in the inference network every 128
            // decisions. The seed's 1024 / 128 / 1024 left a live cluster of ~230 decisions an
            // hour placing with its initial weights (`bench --bin placement-live`).
            buffer: 256,
            batch: 32,
            sync_every: 128,
            ..PolicyConfig::default()
        }
    }
}

/// The choice for one decision.
#[derive(Clone, Debug, PartialEq)]
pub struct Choice {
    pub index: usize,
    /// One Q-value per candidate (−∞ for infeasible ones).
    pub q: Vec<f32>,
    pub exploratory: bool,
}

/// Counters shared with the training thread.
#[derive(Debug, Default)]
pub struct Stats {
    pub experiences: AtomicU64,
    pub training_steps: AtomicU64,
    /// Optimiser steps (one per batch per pass).
    pub gradient_steps: AtomicU64,
    pub last_loss_micro: AtomicU64,
    /// The training loss of every step since this policy started (thinned as it grows, see
    /// [`Curve`]): the learning curve from the first step.
    pub curve: std::sync::Mutex<Curve>,
}

/// Points of the learning curve kept at most; past it every other point is dropped and only
/// every second step after is kept, so the curve spans every step taken with bounded memory.
pub const CURVE_POINTS: usize = 512;

/// The learning curve: (training step, loss) from the first step, at most [`CURVE_POINTS`]
/// points, evenly thinned.
#[derive(Debug, Default, Clone, PartialEq)]
pub struct Curve {
    points: Vec<(u64, f64)>,
    /// Only steps that are multiples of this are kept.
    stride: u64,
}

impl Curve {
    pub fn push(&mut self, step: u64, loss: f64) {
        let stride = self.stride.max(1);
        if !step.is_multiple_of(stride) && step != 1 {
            return;
        }
        self.points.push((step, loss));
        if self.points.len() > CURVE_POINTS {
            let next = stride * 2;
            self.points.retain(|&(s, _)| s == 1 || s.is_multiple_of(next));
            self.stride = next;
        }
    }

    pub fn points(&self) -> &[(u64, f64)] {
        &self.points
    }
}

type Weights = Vec<(String, Tensor)>;

enum ToTrainer {
    Experience(Experience),
}

/// A decision waiting for its reward and/or the next state.
struct Pending {
    state: Observation,
    action: usize,
    reward: Option<f32>,
    next: Option<Observation>,
}

/// Scheduling niceness of the training thread (0 = normal, 19 = lowest).
const TRAINING_NICE: i32 = 10;

/// Decisions kept waiting for a reward at most; older ones are dropped (their attempts were
/// lost or never finished), so memory stays bounded.
const MAX_PENDING: usize = 100_000;

pub struct DqnPolicy {
    config: PolicyConfig,
    device: Device,
    vs: nn::VarStore,
    net: QNet,
    rng: StdRng,
    decisions: u64,
    syncs: u64,
    pending: BTreeMap<u64, Pending>,
    last_decision: Option<u64>,
    to_trainer: Option<mpsc::Sender<ToTrainer>>,
    from_trainer: mpsc::Receiver<Weights>,
    /// In lockstep mode, one message per absorbed experience.
    absorbed: Option<mpsc::Receiver<()>>,
    trainer: Option<JoinHandle<()>>,
    stats: Arc<Stats>,
    /// Whether the weights were restored from the store.
    restored: bool,
}

fn device_for(c: &PolicyConfig) -> Device {
    c.device.unwrap_or_else(|| if tch::Cuda::is_available() { Device::Cuda(0) } else { Device::Cpu })
}

impl DqnPolicy {
    /// Builds the agent, loading weights and experiences from `store` if it has them, and starts
    /// the training thread.
    pub fn new(config: PolicyConfig, store: Option<Arc<dyn PolicyStore>>) -> Result<Self, PolicyError> {
        let device = device_for(&config);
        // One intra-op thread: the decision and training threads each keep one core busy; more
        // threads would fight over the same two cores and raise decision latency.
        tch::set_num_threads(1);
        tch::manual_seed(config.seed as i64);
        let mut vs = nn::VarStore::new(device);
        let net = QNet::new(&vs.root(), &config.net);
        let mut restored = None;
        if let Some(s) = &store {
            match s.load_weights() {
                Ok(Some(bytes)) => match vs.load_from_stream(std::io::Cursor::new(&bytes)) {
                    Ok(()) => {
                        tracing::info!(bytes = bytes.len(), "policy weights restored");
                        restored = Some(bytes);
                    }
                    Err(e) => {
                        tracing::warn!(error = %e, "stored policy weights do not fit this network; starting fresh")
                    }
                },
                Ok(None) => {}
                Err(e) => tracing::warn!(error = %e, "could not read stored policy weights; starting fresh"),
            }
        }
        let (tx, rx) = mpsc::channel();
        let (wtx, wrx) = mpsc::channel();
        let stats = Arc::new(Stats::default());
        let (atx, arx) = mpsc::channel();
        let mut trainer = Trainer::new(&config, device, &vs, store, wtx, stats.clone())?;
        let lockstep = config.lockstep;
        trainer.absorbed = lockstep.then_some(atx);
        trainer.restore_experiences();
        let handle = std::thread::Builder::new()
            .name("plexus-policy-train".into())
            .spawn(move || trainer.run(rx))
            .map_err(|e| PolicyError::Io(format!("starting the training thread: {e}")))?;
        if restored.is_none() {
            tracing::info!(device = ?device, "policy starts from fresh Gaussian weights");
        }
        Ok(DqnPolicy {
            rng: StdRng::seed_from_u64(config.seed),
            config,
            device,
            vs,
            net,
            decisions: 0,
            syncs: 0,
            pending: BTreeMap::new(),
            last_decision: None,
            to_trainer: Some(tx),
            from_trainer: wrx,
            absorbed: lockstep.then_some(arx),
            trainer: Some(handle),
            stats,
            restored: restored.is_some(),
        })
    }

    pub fn device(&self) -> Device {
        self.device
    }

    pub fn decisions(&self) -> u64 {
        self.decisions
    }

    /// How many times new weights were swapped into the inference network.
    pub fn syncs(&self) -> u64 {
        self.syncs
    }

    pub fn stats(&self) -> &Stats {
        &self.stats
    }

    /// Q-values for one observation, from the inference network.
    pub fn q_values(&self, obs: &Observation) -> Vec<f32> {
        let n = obs.len() as i64;
        if n == 0 {
            return Vec::new();
        }
        let flat: Vec<f32> = obs.tokens.iter().flatten().copied().collect();
        tch::no_grad(|| {
            let tokens = Tensor::from_slice(&flat).view([1, n, FEATURES as i64]).to_device(self.device);
            let pad = Tensor::zeros([1, n], (Kind::Bool, self.device));
            let q = self.net.forward(&tokens, &pad, false).to_device(Device::Cpu).view([n]);
            let v: Vec<f32> = Vec::<f32>::try_from(&q).unwrap_or_else(|_| vec![0.0; n as usize]);
            v.into_iter().zip(&obs.feasible).map(|(q, &f)| if f { q } else { f32::NEG_INFINITY }).collect()
        })
    }

    /// Chooses a feasible candidate for decision `id`; None if none is feasible.
    pub fn decide(&mut self, id: u64, obs: Observation) -> Option<Choice> {
        let q = self.score(&obs);
        let feasible: Vec<usize> = (0..obs.len()).filter(|&i| obs.feasible[i]).collect();
        let best = *feasible.iter().max_by(|&&a, &&b| q[a].total_cmp(&q[b]).then(b.cmp(&a)))?;
        let (index, exploratory) = explore(&mut self.rng, self.config.epsilon, best, &feasible);
        self.commit(id, obs, index);
        Some(Choice { index, q, exploratory })
    }

    /// The Q-values of one decision's candidates, for a caller that chooses itself (the
    /// anchored placer) and then calls [`DqnPolicy::commit`] with what it chose. Swaps in newer
    /// weights first, as `decide` does.
    pub fn score(&mut self, obs: &Observation) -> Vec<f32> {
        self.maybe_sync();
        self.q_values(obs)
    }

    /// Whether the inference network's weights come from training (a step published, or
    /// weights restored from the store) rather than the initial Gaussian draw.
    pub fn trained(&self) -> bool {
        self.syncs > 0 || self.restored
    }

    /// Records decision `id`'s observation and the candidate taken (`action`, which the caller
    /// chose), so its outcome becomes an experience.
    pub fn commit(&mut self, id: u64, obs: Observation, index: usize) {
        self.decisions += 1;

        // This state is the previous decision's next state.
        if let Some(prev) = self.last_decision.take()
            && let Some(p) = self.pending.get_mut(&prev)
        {
            p.next = Some(obs.clone());
            self.try_emit(prev);
        }
        self.pending.insert(id, Pending { state: obs, action: index, reward: None, next: None });
        self.last_decision = Some(id);
        while self.pending.len() > MAX_PENDING {
            self.pending.pop_first();
        }
    }

    /// The measured outcome of decision `id`.
    pub fn observe(&mut self, id: u64, inputs: &RewardInputs) {
        if let Some(p) = self.pending.get_mut(&id) {
            p.reward = Some(self.config.reward.reward(inputs) as f32);
            self.try_emit(id);
        }
    }

    fn try_emit(&mut self, id: u64) {
        let ready = self.pending.get(&id).is_some_and(|p| p.reward.is_some() && p.next.is_some());
        if !ready {
            return;
        }
        let Some(p) = self.pending.remove(&id) else { return };
        let (Some(reward), Some(next)) = (p.reward, p.next) else { return };
        let e = Experience { state: p.state, action: p.action, reward, next };
        if let Some(tx) = &self.to_trainer {
            if tx.send(ToTrainer::Experience(e)).is_err() {
                tracing::warn!("policy training thread has stopped; experiences are dropped");
                self.to_trainer = None;
            } else if let Some(absorbed) = &self.absorbed {
                let _ = absorbed.recv();
            }
        }
    }

    /// Every `sync_every` decisions, swaps the newest published weights in.
    fn maybe_sync(&mut self) {
        if self.decisions == 0 || !self.decisions.is_multiple_of(self.config.sync_every) {
            return;
        }
        let Some(latest) = self.from_trainer.try_iter().last() else { return };
        self.load_weights(&latest);
        self.syncs += 1;
    }

    fn load_weights(&mut self, w: &Weights) {
        let mut vars = self.vs.variables();
        tch::no_grad(|| {
            for (name, t) in w {
                if let Some(v) = vars.get_mut(name) {
                    v.copy_(&t.to_device(self.device));
                }
            }
        });
    }

    /// The inference network's weights in libtorch's stream format (what the store keeps).
    pub fn weights_bytes(&self) -> Result<Vec<u8>, PolicyError> {
        let mut bytes = Vec::new();
        self.vs.save_to_stream(&mut bytes)?;
        Ok(bytes)
    }

    /// Writes the inference network's weights as safetensors.
    pub fn export(&self, path: &Path) -> Result<(), PolicyError> {
        let vars = self.vs.variables();
        let named: Vec<(String, Tensor)> = vars.into_iter().map(|(n, t)| (n, t.to_device(Device::Cpu))).collect();
        Tensor::write_safetensors(&named, path)?;
        Ok(())
    }

    /// Reads safetensors weights (from [`DqnPolicy::export`]) into the inference network.
    pub fn import(&mut self, path: &Path) -> Result<(), PolicyError> {
        let read = Tensor::read_safetensors(path)?;
        let vars = self.vs.variables();
        for (name, t) in &read {
            match vars.get(name) {
                Some(v) if v.size() == t.size() => {}
                Some(v) => {
                    return Err(PolicyError::Io(format!(
                        "{}: tensor {name} has shape {:?}, the network expects {:?}",
                        path.display(),
                        t.size(),
                        v.size()
                    )));
                }
                None => return Err(PolicyError::Io(format!("{}: unknown tensor {name}", path.display()))),
            }
        }
        if let Some(missing) = vars.keys().find(|k| !read.iter().any(|(n, _)| n == *k)) {
            return Err(PolicyError::Io(format!("{}: tensor {missing} is missing", path.display())));
        }
        self.load_weights(&read);
        Ok(())
    }
}

impl Drop for DqnPolicy {
    fn drop(&mut self) {
        // Closing the channel ends the training loop; wait for it so weights it is writing land.
        self.to_trainer = None;
        if let Some(h) = self.trainer.take() {
            let _ = h.join();
        }
    }
}

/// ε-greedy as the seed defines it: with probability ε a random feasible candidate other than
/// the best (the best itself when it is the only one).
pub fn explore(rng: &mut impl Rng, epsilon: f64, best: usize, feasible: &[usize]) -> (usize, bool) {
    if feasible.len() > 1 && rng.random::<f64>() < epsilon {
        let others: Vec<usize> = feasible.iter().copied().filter(|&i| i != best).collect();
        (others[rng.random_range(0..others.len())], true)
    } else {
        (best, false)
    }
}

/// The training side, run on its own thread.
struct Trainer {
    config: PolicyConfig,
    device: Device,
    vs: nn::VarStore,
    net: QNet,
    target_vs: nn::VarStore,
    target: QNet,
    opt: nn::Optimizer,
    buffer: ExperienceBuffer,
    rng: StdRng,
    store: Option<Arc<dyn PolicyStore>>,
    publish: mpsc::Sender<Weights>,
    stats: Arc<Stats>,
    absorbed: Option<mpsc::Sender<()>>,
    /// The batches of the latest `1 + history` training steps, newest first.
    history: std::collections::VecDeque<Vec<Vec<(u64, Experience)>>>,
}

impl Trainer {
    fn new(
        c: &PolicyConfig,
        device: Device,
        init: &nn::VarStore,
        store: Option<Arc<dyn PolicyStore>>,
        publish: mpsc::Sender<Weights>,
        stats: Arc<Stats>,
    ) -> Result<Self, PolicyError> {
        let mut vs = nn::VarStore::new(device);
        let net = QNet::new(&vs.root(), &c.net);
        vs.copy(init)?;
        let mut target_vs = nn::VarStore::new(device);
        let target = QNet::new(&target_vs.root(), &c.net);
        target_vs.copy(init)?;
        let opt = nn::Adam::default().build(&vs, c.learning_rate)?;
        Ok(Trainer {
            config: c.clone(),
            device,
            vs,
            net,
            target_vs,
            target,
            opt,
            buffer: ExperienceBuffer::new(c.buffer),
            rng: StdRng::seed_from_u64(c.seed.wrapping_add(1)),
            store,
            publish,
            stats,
            absorbed: None,
            history: std::collections::VecDeque::new(),
        })
    }

    fn restore_experiences(&mut self) {
        let Some(s) = &self.store else { return };
        match s.load_experiences() {
            Ok(list) => {
                let mut bad = Vec::new();
                for (id, bytes) in list {
                    match Experience::decode(&bytes) {
                        Some(e) => {
                            self.buffer.insert(e);
                        }
                        None => bad.push(id),
                    }
                }
                if !bad.is_empty() {
                    tracing::warn!(count = bad.len(), "undecodable stored experiences dropped");
                    let _ = s.remove_experiences(&bad);
                }
                tracing::info!(experiences = self.buffer.len(), "policy experiences restored");
            }
            Err(e) => tracing::warn!(error = %e, "could not read stored experiences"),
        }
    }

    fn run(mut self, rx: mpsc::Receiver<ToTrainer>) {
        // Training yields the CPU to decisions: on Linux, setpriority(PRIO_PROCESS, 0, …) applies
        // to the calling thread only. Nice 10 keeps decision latency low on a small machine
        // while training still gets every idle cycle. Failure only costs latency, so it is logged.
        // SAFETY: setpriority has no memory-safety preconditions.
        if unsafe { libc::setpriority(libc::PRIO_PROCESS, 0, TRAINING_NICE) } != 0 {
            tracing::debug!(error = %std::io::Error::last_os_error(), "could not lower the training thread's priority");
        }
        // What arrived while the last batch was written is taken at once and written as one.
        while let Ok(first) = rx.recv() {
            let mut batch = vec![first];
            while batch.len() < PERSIST_BATCH {
                match rx.try_recv() {
                    Ok(m) => batch.push(m),
                    Err(_) => break,
                }
            }
            let mut unwritten = Vec::new();
            for ToTrainer::Experience(e) in batch {
                let bytes = e.encode();
                if let Inserted::Added(id) = self.buffer.insert(e) {
                    self.stats.experiences.fetch_add(1, Ordering::Relaxed);
                    unwritten.push((id, bytes));
                }
                if self.buffer.is_full() {
                    // Written before a training step may sample and remove them from the store.
                    self.persist(&mut unwritten);
                    self.train_step();
                }
                if let Some(a) = &self.absorbed {
                    let _ = a.send(());
                }
            }
            self.persist(&mut unwritten);
        }
    }

    /// Writes `items` to the store (if any) in one call, and empties it.
    fn persist(&self, items: &mut Vec<(u64, Vec<u8>)>) {
        if let Some(s) = &self.store
            && !items.is_empty()
            && let Err(err) = s.put_experiences(items)
        {
            tracing::warn!(error = %err, count = items.len(), "could not persist experiences");
        }
        items.clear();
    }

    /// One training step: `batches_per_step` batches, each sampled and removed from the buffer;
    /// `passes` passes over them and the batches of the `history` steps before (the target
    /// refreshed after each pass); then the new weights are published and persisted.
    fn train_step(&mut self) {
        let mut batches = Vec::with_capacity(self.config.batches_per_step);
        for _ in 0..self.config.batches_per_step {
            let batch = self.buffer.sample(self.config.batch, &mut self.rng);
            if batch.is_empty() {
                break;
            }
            batches.push(batch);
        }
        let used: Vec<u64> = batches.iter().flatten().map(|(id, _)| *id).collect();
        if let Some(s) = &self.store
            && let Err(e) = s.remove_experiences(&used)
        {
            tracing::warn!(error = %e, "could not remove sampled experiences from the store");
        }
        let mut loss_sum = 0.0;
        let passes = self.config.passes.max(1);
        self.history.push_front(batches);
        self.history.truncate(self.config.history + 1);
        for pass in 0..passes {
            for batch in self.history.iter().flatten() {
                let exps: Vec<&Experience> = batch.iter().map(|(_, e)| e).collect();
                let loss = self.loss(&exps);
                self.opt.backward_step(&loss);
                self.stats.gradient_steps.fetch_add(1, Ordering::Relaxed);
                // The mean reported is the last pass's, over all its batches.
                if pass + 1 == passes {
                    loss_sum += loss.double_value(&[]) / self.history.iter().map(Vec::len).sum::<usize>().max(1) as f64;
                }
            }
            let _ = self.target_vs.copy(&self.vs);
        }
        let weights: Weights = self.vs.variables().into_iter().map(|(n, t)| (n, t.detach().copy())).collect();
        let _ = self.publish.send(weights);
        if let Some(s) = &self.store {
            let mut bytes = Vec::new();
            match self.vs.save_to_stream(&mut bytes) {
                Ok(()) => {
                    if let Err(e) = s.save_weights(&bytes) {
                        tracing::warn!(error = %e, "could not persist policy weights");
                    }
                }
                Err(e) => tracing::warn!(error = %e, "could not serialise policy weights"),
            }
        }
        let steps = self.stats.training_steps.fetch_add(1, Ordering::Relaxed) + 1;
        let mean = loss_sum;
        self.stats.last_loss_micro.store((mean * 1e6) as u64, Ordering::Relaxed);
        self.stats.curve.lock().unwrap_or_else(|p| p.into_inner()).push(steps, mean);
        tracing::debug!(steps, loss = mean, "policy training step");
    }

    /// The criticality loss on one batch: p = Q(s)[a], h = r + γ·max over feasible a' of
    /// Q_target(s')[a'] (h = r when s' has no feasible candidate).
    fn loss(&self, batch: &[&Experience]) -> Tensor {
        let (s_tok, s_pad, _) = stack(batch.iter().map(|e| &e.state), self.device);
        let (n_tok, n_pad, n_feasible) = stack(batch.iter().map(|e| &e.next), self.device);
        let actions: Vec<i64> = batch.iter().map(|e| e.action as i64).collect();
        let rewards: Vec<f32> = batch.iter().map(|e| e.reward).collect();
        let actions = Tensor::from_slice(&actions).to_device(self.device).unsqueeze(1);
        let rewards = Tensor::from_slice(&rewards).to_device(self.device);

        let q = self.net.forward(&s_tok, &s_pad, true);
        let p = q.gather(1, &actions, false).squeeze_dim(1);
        let h = tch::no_grad(|| {
            let qn = self.target.forward(&n_tok, &n_pad, false);
            let masked = qn.masked_fill(&n_feasible.logical_not(), f64::NEG_INFINITY);
            let best = masked.max_dim(1, false).0;
            let any = n_feasible.any_dim(1, false);
            let best = best.where_self(&any, &Tensor::zeros_like(&best));
            &rewards + best * self.config.gamma
        });
        criticality_loss(&p, &h)
    }
}

/// Pads observations of different sizes into [B, N, F] tokens, a [B, N] padding mask and a
/// [B, N] feasibility mask.
fn stack<'a>(obs: impl Iterator<Item = &'a Observation>, device: Device) -> (Tensor, Tensor, Tensor) {
    let obs: Vec<&Observation> = obs.collect();
    let b = obs.len();
    let n = obs.iter().map(|o| o.len()).max().unwrap_or(1).max(1);
    let mut tokens = vec![0f32; b * n * FEATURES];
    let mut pad = vec![true; b * n];
    let mut feasible = vec![false; b * n];
    for (i, o) in obs.iter().enumerate() {
        for (j, t) in o.tokens.iter().enumerate() {
            tokens[(i * n + j) * FEATURES..(i * n + j + 1) * FEATURES].copy_from_slice(t);
            pad[i * n + j] = false;
            feasible[i * n + j] = o.feasible[j];
        }
    }
    let shape = [b as i64, n as i64];
    (
        Tensor::from_slice(&tokens).view([b as i64, n as i64, FEATURES as i64]).to_device(device),
        Tensor::from_slice(&pad).view(shape).to_device(device),
        Tensor::from_slice(&feasible).view(shape).to_device(device),
    )
}

/// A store in memory, for tests and for running without persistence.
#[derive(Default)]
pub struct MemPolicyStore {
    weights: std::sync::Mutex<Option<Vec<u8>>>,
    experiences: std::sync::Mutex<HashMap<u64, Vec<u8>>>,
}

impl PolicyStore for MemPolicyStore {
    fn load_weights(&self) -> Result<Option<Vec<u8>>, StoreError> {
        Ok(self.weights.lock().map_err(|e| e.to_string())?.clone())
    }
    fn save_weights(&self, bytes: &[u8]) -> Result<(), StoreError> {
        *self.weights.lock().map_err(|e| e.to_string())? = Some(bytes.to_vec());
        Ok(())
    }
    fn load_experiences(&self) -> Result<Vec<(u64, Vec<u8>)>, StoreError> {
        Ok(self.experiences.lock().map_err(|e| e.to_string())?.iter().map(|(k, v)| (*k, v.clone())).collect())
    }
    fn put_experience(&self, id: u64, bytes: &[u8]) -> Result<(), StoreError> {
        self.experiences.lock().map_err(|e| e.to_string())?.insert(id, bytes.to_vec());
        Ok(())
    }
    fn remove_experiences(&self, ids: &[u64]) -> Result<(), StoreError> {
        let mut m = self.experiences.lock().map_err(|e| e.to_string())?;
        for id in ids {
            m.remove(id);
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests;
