//! Tests of the agent: real libtorch on the CPU, seeded.

use std::sync::Arc;

use rand::seq::SliceRandom;

use super::*;
use crate::features::{TaskFeatures, candidate};

fn small_config() -> PolicyConfig {
    PolicyConfig {
        buffer: 64,
        batch: 16,
        batches_per_step: 4,
        sync_every: 8,
        device: Some(Device::Cpu),
        ..Default::default()
    }
}

fn obs(n: usize, feasible: impl Fn(usize) -> bool) -> Observation {
    obs_v(n, 0, feasible)
}

/// An observation that differs for every `v`, so experiences built from it are not duplicates.
fn obs_v(n: usize, v: u64, feasible: impl Fn(usize) -> bool) -> Observation {
    let task = TaskFeatures {
        system_utilisation: (v % 97) as f64 / 97.0,
        flops: 1e9 + v as f64,
        input_bytes: 1 << 20,
        writes: false,
    };
    let nodes: Vec<_> = (0..n)
        .map(|i| candidate(feasible(i), 1 << 30, (i as u64) << 24, 0, 0.1 * i as f64, 0.2, false, None))
        .collect();
    Observation::build(&task, &nodes)
}

#[test]
fn exploration_never_returns_the_best_and_has_rate_epsilon() {
    let mut rng = StdRng::seed_from_u64(3);
    let feasible = [0, 2, 3, 5];
    for _ in 0..2000 {
        let (i, explored) = explore(&mut rng, 1.0, 3, &feasible);
        assert!(explored && i != 3 && feasible.contains(&i));
    }
    assert_eq!(explore(&mut rng, 1.0, 2, &[2]), (2, false), "a lone feasible candidate is chosen");
    let explored = (0..20_000).filter(|_| explore(&mut rng, 0.05, 0, &feasible).1).count();
    assert!((800..1200).contains(&explored), "ε = 0.05 explored {explored} of 20000");
}

#[test]
fn infeasible_candidates_are_masked() {
    let mut p = DqnPolicy::new(PolicyConfig { epsilon: 1.0, ..small_config() }, None).unwrap();
    for id in 0..200 {
        let o = obs(6, |i| i % 2 == 0);
        let c = p.decide(id, o).unwrap();
        assert_eq!(c.index % 2, 0, "chose infeasible {}", c.index);
        assert!(c.q[1].is_infinite() && c.q[1] < 0.0);
    }
    assert!(p.decide(999, obs(3, |_| false)).is_none());
}

/// Weights reach the inference network only at multiples of `sync_every` decisions.
#[test]
fn weights_are_copied_every_sync_every_decisions() {
    // Lockstep: the training step ends inside the observe that fills the buffer, so where it
    // falls between sync boundaries does not depend on how busy the machine is.
    let mut p = DqnPolicy::new(PolicyConfig { lockstep: true, ..small_config() }, None).unwrap();
    let probe = obs(4, |_| true);
    // small_config's buffer of 64 fills with the 65th decision: one training step, its weights
    // published after the boundary at 64 decisions.
    let mut id = 0;
    while id < 65 {
        let c = p.decide(id, obs_v(4, id, |_| true)).unwrap();
        p.observe(
            id,
            &RewardInputs {
                utilisation: 0.5,
                fetch_ms: if c.index == 0 { 0.0 } else { 100.0 },
                evicted_bytes: 0,
                ..Default::default()
            },
        );
        id += 1;
    }
    assert_eq!(p.stats().training_steps.load(Ordering::Relaxed), 1);
    // Step right up to a boundary without crossing it: nothing may change.
    while !(p.decisions() + 1).is_multiple_of(8) {
        p.decide(id, obs(4, |_| true));
        id += 1;
    }
    let syncs = p.syncs();
    let before = p.q_values(&probe);
    p.decide(id, obs(4, |_| true)); // decision number 8k: the sync happens before the 8k+1-th
    id += 1;
    assert_eq!(p.q_values(&probe), before, "weights changed off the cadence");
    assert_eq!(p.syncs(), syncs);
    p.decide(id, obs(4, |_| true));
    assert_eq!(p.syncs(), syncs + 1, "the published weights were swapped in at the boundary");
    assert_ne!(p.q_values(&probe), before);
}

/// On a small seeded cluster where one node is clearly best (it holds the task's input, so the
/// fetch is free), the learned policy converges to it.
#[test]
fn converges_to_the_clearly_best_node() {
    // Lockstep: every experience is absorbed before the next decision, so the run repeats
    // whatever else the machine is doing.
    let config = PolicyConfig {
        buffer: 256,
        batch: 64,
        batches_per_step: 4,
        sync_every: 256,
        epsilon: 0.05,
        device: Some(Device::Cpu),
        lockstep: true,
        ..Default::default()
    };
    let mut p = DqnPolicy::new(config, None).unwrap();
    let mut rng = StdRng::seed_from_u64(11);
    let task = TaskFeatures { system_utilisation: 0.5, flops: 1e9, input_bytes: 256 << 20, writes: false };
    let mut greedy_hits = 0;
    let mut greedy_total = 0;
    for id in 0..6000u64 {
        // Five nodes in a shuffled order; the one holding the input is "best".
        let mut nodes: Vec<_> = (0..5)
            .map(|i| {
                candidate(
                    true,
                    1 << 30,
                    rng.random_range(0..1u64 << 29),
                    if i == 0 { 256 << 20 } else { 0 },
                    rng.random_range(0.0..0.8),
                    rng.random_range(0.0..1.0),
                    false,
                    None,
                )
            })
            .collect();
        nodes.shuffle(&mut rng);
        let best = nodes.iter().position(|n| n.local_input_bytes > 0).unwrap();
        let c = p.decide(id, Observation::build(&task, &nodes)).unwrap();
        let fetch = if c.index == best { 0.0 } else { 300.0 };
        p.observe(id, &RewardInputs { utilisation: 0.5, fetch_ms: fetch, evicted_bytes: 0, ..Default::default() });
        if id >= 5000 && !c.exploratory {
            greedy_total += 1;
            greedy_hits += (c.index == best) as u32;
        }
    }
    assert!(p.stats().training_steps.load(Ordering::Relaxed) >= 5);
    let rate = greedy_hits as f64 / greedy_total as f64;
    assert!(rate > 0.95, "greedy choice hit the best node {greedy_hits}/{greedy_total}");
}

#[test]
fn weights_and_experiences_persist_through_the_store() {
    let store: Arc<MemPolicyStore> = Arc::new(MemPolicyStore::default());
    let probe = obs(5, |_| true);
    let q_trained;
    {
        // Lockstep, so the step comes where the test says whatever else the machine is doing
        // (free-running, the decisions sent before the first step showed could fill the buffer
        // again and a second step would take every stored experience).
        let mut p = DqnPolicy::new(PolicyConfig { lockstep: true, ..small_config() }, Some(store.clone())).unwrap();
        // small_config's buffer of 64 fills with the 65th decision; its step samples all 64.
        for id in 0..65 {
            p.decide(id, obs_v(5, id, |_| true));
            p.observe(id, &RewardInputs { utilisation: 0.9, fetch_ms: 5.0, evicted_bytes: 0, ..Default::default() });
        }
        assert_eq!(p.stats().training_steps.load(Ordering::Relaxed), 1);
        // Experiences arriving after the step stay in the buffer and in the store.
        for id in 65..75 {
            p.decide(id, obs_v(5, id, |i| i != (id as usize % 5)));
            p.observe(id, &RewardInputs { utilisation: 0.1, fetch_ms: 50.0, evicted_bytes: 10, ..Default::default() });
        }
        drop(p);
        assert!(store.load_weights().unwrap().is_some());
        // The restarted policy loads the trained (training-side) weights.
        let restarted = DqnPolicy::new(small_config(), Some(store.clone())).unwrap();
        q_trained = restarted.q_values(&probe);
    }
    let fresh = DqnPolicy::new(small_config(), None).unwrap();
    assert_ne!(fresh.q_values(&probe), q_trained, "stored weights were used");
    assert_eq!(store.load_experiences().unwrap().len(), 10, "the ten experiences after the step are stored");
}

#[test]
fn export_and_import_safetensors() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("policy.safetensors");
    let probe = obs(3, |_| true);
    let a = DqnPolicy::new(PolicyConfig { seed: 5, ..small_config() }, None).unwrap();
    a.export(&path).unwrap();
    let mut b = DqnPolicy::new(PolicyConfig { seed: 6, ..small_config() }, None).unwrap();
    assert_ne!(a.q_values(&probe), b.q_values(&probe));
    b.import(&path).unwrap();
    assert_eq!(a.q_values(&probe), b.q_values(&probe));
    // A file for another network shape is refused with a message naming the tensor.
    let mut wide =
        DqnPolicy::new(PolicyConfig { net: NetConfig { d_model: 32, ..NetConfig::default() }, ..small_config() }, None)
            .unwrap();
    let e = wide.import(&path).unwrap_err().to_string();
    assert!(e.contains("has shape"), "{e}");
    std::fs::write(dir.path().join("junk.safetensors"), b"not a safetensors file").unwrap();
    assert!(wide.import(&dir.path().join("junk.safetensors")).is_err());
}

/// `passes` repeats a step's gradient passes over the batches it sampled; the buffer still gives
/// up exactly those batches (the seed's "sampled entries are removed").
#[test]
fn passes_repeat_a_steps_batches_without_resampling() {
    for passes in [1usize, 3] {
        let store: Arc<MemPolicyStore> = Arc::new(MemPolicyStore::default());
        let config = PolicyConfig { passes, lockstep: true, ..small_config() };
        let mut p = DqnPolicy::new(config, Some(store.clone())).unwrap();
        // 64 distinct experiences fill the buffer exactly once: the 65th decision completes the
        // 64th experience.
        for id in 0..65 {
            p.decide(id, obs_v(4, id, |_| true));
            p.observe(id, &RewardInputs { utilisation: 0.5, fetch_ms: 10.0, ..Default::default() });
        }
        let s = p.stats();
        assert_eq!(s.experiences.load(Ordering::Relaxed), 64);
        assert_eq!(s.training_steps.load(Ordering::Relaxed), 1);
        // small_config: 4 batches of 16 per step.
        assert_eq!(s.gradient_steps.load(Ordering::Relaxed), 4 * passes as u64);
        assert!(store.load_experiences().unwrap().is_empty(), "every sampled experience left the buffer and the store");
    }
}

/// The run-time term changes what is learned, as intended. One node holds the task's input but
/// computes slowly (least fetch, longest run); another must fetch from its rack but finishes
/// soonest; the rest must fetch across the spine. With the seed's reward (fetch latency only)
/// the policy converges to the holder; with the run-time term and the estimate features, to the
/// node that finishes soonest.
#[test]
fn run_time_term_moves_the_policy_from_the_holder_to_the_fastest_node() {
    const DECISIONS: u64 = 8_000;
    // Weight 6 makes the run-time term outweigh the seed's fetch term clearly here (rewards: holder
    // 0.75 + 6·0.149, fastest 0.26 + 6·0.5, remote 0.25 + 6·0.35), so the test is about the
    // direction learned, not about resolving small differences.
    for (run_weight, want) in [(0.0, "holder"), (6.0, "fastest")] {
        let reward = RewardConfig { run_weight, ..RewardConfig::default() };
        let config = PolicyConfig {
            buffer: 256,
            batch: 64,
            batches_per_step: 4,
            sync_every: 256,
            passes: 2,
            history: 2,
            reward,
            lockstep: true,
            device: Some(Device::Cpu),
            ..Default::default()
        };
        let mut p = DqnPolicy::new(config, None).unwrap();
        let mut rng = StdRng::seed_from_u64(12);
        let input = 1u64 << 30;
        let task = TaskFeatures { system_utilisation: 0.5, flops: 1e11, input_bytes: input, writes: false };
        // (name, resident bytes, fetch ms, compute ms)
        let kinds = [
            ("holder", input, 0.0, 8000.0),
            ("fastest", 0, 400.0, 1000.0),
            ("remote", 0, 1600.0, 1000.0),
            ("remote", 0, 1600.0, 1000.0),
            ("remote", 0, 1600.0, 1000.0),
        ];
        let (mut hits, mut total) = (0, 0);
        for id in 0..DECISIONS {
            let mut order: Vec<usize> = (0..kinds.len()).collect();
            order.shuffle(&mut rng);
            let nodes: Vec<_> = order
                .iter()
                .map(|&k| {
                    let (cache_used, cpu_load, util) =
                        (rng.random_range(0..1u64 << 30), rng.random_range(0.0..0.8), rng.random_range(0.0..1.0));
                    candidate(
                        true,
                        4 << 30,
                        cache_used,
                        kinds[k].1,
                        cpu_load,
                        util,
                        false,
                        Some((kinds[k].2, kinds[k].3)),
                    )
                })
                .collect();
            let c = p.decide(id, Observation::build(&task, &nodes)).unwrap();
            let (name, _, fetch, compute) = kinds[order[c.index]];
            p.observe(
                id,
                &RewardInputs {
                    utilisation: 0.5,
                    fetch_ms: fetch,
                    evicted_bytes: 0,
                    run_ms: fetch + compute,
                    best_est_ms: Some(1400.0),
                },
            );
            if id >= DECISIONS - 1500 && !c.exploratory {
                total += 1;
                hits += (name == want) as u32;
            }
        }
        let rate = hits as f64 / total as f64;
        assert!(rate > 0.85, "run_weight {run_weight}: greedy choice was the {want} node {hits}/{total}");
    }
}

/// The learning curve starts at the first training step and keeps every step until it is
/// thinned; `trained` turns on with the first published weights; `commit` records the caller's
/// own choice as the experience's action.
#[test]
fn the_curve_starts_at_the_first_step_and_a_callers_choice_is_learned_from() {
    let mut p = DqnPolicy::new(PolicyConfig { lockstep: true, ..small_config() }, None).unwrap();
    assert!(!p.trained());
    assert!(p.stats().curve.lock().unwrap().points().is_empty());
    for id in 0..200 {
        let o = obs_v(4, id, |_| true);
        let q = p.score(&o);
        assert_eq!(q.len(), 4);
        // The caller always takes candidate 3, whatever the scores.
        p.commit(id, o, 3);
        p.observe(id, &RewardInputs { utilisation: 0.5, fetch_ms: 10.0, ..Default::default() });
    }
    let steps = p.stats().training_steps.load(Ordering::Relaxed);
    assert!(steps >= 2, "{steps} training steps");
    let curve = p.stats().curve.lock().unwrap().clone();
    let xs: Vec<u64> = curve.points().iter().map(|c| c.0).collect();
    assert_eq!(xs, (1..=steps).collect::<Vec<_>>(), "one point per step from the first");
    assert!(curve.points().iter().all(|c| c.1.is_finite() && c.1 >= 0.0));
    assert!(p.trained(), "weights were published and swapped in");
    assert_eq!(p.decisions(), 200);
}

#[test]
fn the_curve_is_thinned_evenly_and_stays_bounded() {
    let mut c = Curve::default();
    for s in 1..=10_000u64 {
        c.push(s, 1.0 / s as f64);
    }
    let pts = c.points();
    assert!(pts.len() <= CURVE_POINTS && pts.len() > CURVE_POINTS / 4, "{} points", pts.len());
    assert_eq!(pts[0].0, 1, "the first step is always kept");
    let gaps: Vec<u64> = pts.windows(2).skip(1).map(|w| w[1].0 - w[0].0).collect();
    assert!(gaps.windows(2).all(|g| g[0] == g[1]), "even spacing after the first: {gaps:?}");
    assert!(pts.last().unwrap().0 > 9_900, "the newest steps are kept: {:?}", pts.last());
}
