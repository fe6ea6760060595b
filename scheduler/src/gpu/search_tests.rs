//! Tests of the objective and the searches: hand-worked cases, and properties over seeded
//! random instances.

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

use super::objective::{Evaluator, GpuCandidate, Problem, Weights};
use super::search::*;
use super::{InterferenceModel, TaskVector};
use crate::error::Error;

const GIB: u64 = 1 << 30;

/// A toy model: task i is slowed by `1 + 0.5·Σ_{j≠i} u_j`.
struct Additive;

impl InterferenceModel for Additive {
    fn predict(&self, tasks: &[TaskVector]) -> Vec<f64> {
        let total: f64 = tasks.iter().map(|t| t.utilisation).sum();
        tasks.iter().map(|t| 1.0 + 0.5 * (total - t.utilisation)).collect()
    }
}

/// A less regular model for the random instances: pairwise terms that depend on both tasks and
/// on their signatures, and a penalty when the GPU is oversubscribed.
struct Pairwise;

impl InterferenceModel for Pairwise {
    fn predict(&self, tasks: &[TaskVector]) -> Vec<f64> {
        let total: f64 = tasks.iter().map(|t| t.utilisation).sum();
        tasks
            .iter()
            .enumerate()
            .map(|(i, a)| {
                let pairs: f64 = tasks
                    .iter()
                    .enumerate()
                    .filter(|(j, _)| *j != i)
                    .map(|(_, b)| {
                        a.utilisation * b.utilisation * (0.5 + ((a.signature ^ b.signature) % 7) as f64 / 7.0)
                    })
                    .sum();
                total.max(1.0) * (1.0 + pairs)
            })
            .collect()
    }
}

fn task(utilisation: f64, memory_gib: u64, model_bytes: u64, signature: u64) -> TaskVector {
    TaskVector {
        gpu_memory: memory_gib * GIB,
        device_memory: 32 * GIB,
        utilisation,
        solo_ms: 100.0,
        model_bytes,
        signature,
    }
}

fn gpu(resident: Vec<TaskVector>, free_gib: u64, slots: usize) -> GpuCandidate {
    GpuCandidate { resident, free_memory: free_gib * GIB, slots }
}

#[test]
fn objective_matches_a_hand_computed_value() {
    let member = task(0.8, 8, 400, 1);
    let gpus = vec![gpu(vec![task(0.4, 4, 0, 2)], 16, 2), gpu(vec![], 32, 2), gpu(vec![], 32, 2)];
    let msc = vec![0.0, 1.0, 4.0, 1.0, 0.0, 4.0, 4.0, 4.0, 0.0];
    let p =
        Problem::with_msc_matrix(vec![member; 2], gpus, msc, Weights { alpha: 1.0, beta: 2.0, msc_ref: None }).unwrap();
    // muds = (400 + 400)/2 for the one pair; C_ref = 400 × the largest msc, 4.
    assert_eq!(p.muds(0, 1), 400.0);
    assert_eq!(p.c_ref(), 1600.0);
    let mut eval = Evaluator::new(&p, &Additive);
    // Member 0 beside the resident: predictions 1 + 0.5·0.8 = 1.4 (resident) and
    // 1 + 0.5·0.4 = 1.2 (member), SD_0 = 1.3; member 1 alone, SD_1 = 1. I = 1.15,
    // C = 1·400, C/C_ref = 0.25, objective = 1.15 + 2·0.25 = 1.65.
    let b = eval.breakdown(&[0, 1]);
    assert!((b.slowdowns[0] - 1.3).abs() < 1e-12 && (b.slowdowns[1] - 1.0).abs() < 1e-12, "{b:?}");
    assert!((b.interference - 1.15).abs() < 1e-12);
    assert_eq!(b.communication, 400.0);
    assert!((b.communication_norm - 0.25).abs() < 1e-12);
    assert!((b.objective - 1.65).abs() < 1e-12);
    assert!((eval.objective(&[0, 1]) - 1.65).abs() < 1e-12);
    // Both members on GPU 1: both in its list, each slowed 1 + 0.5·0.8 = 1.4; msc(1, 1) = 0.
    let b = eval.breakdown(&[1, 1]);
    assert_eq!(b.slowdowns, vec![1.4, 1.4]);
    assert!((b.objective - 1.4).abs() < 1e-12);
    // The optimum of this instance is that one: exhaustive agrees.
    let best = exhaustive(&mut eval, EXHAUSTIVE_LIMIT).unwrap();
    assert_eq!(best.assignment, vec![1, 1]);
}

#[test]
fn predictions_are_cached_per_gpu_and_multiset_of_members() {
    let p = Problem::new(
        vec![task(0.5, 4, 100, 1); 4],
        vec![gpu(vec![task(0.3, 4, 0, 2)], 32, 4); 3],
        |a, b| if a == b { 0.0 } else { 1.0 },
        Weights::default(),
    )
    .unwrap();
    let mut eval = Evaluator::new(&p, &Additive);
    eval.objective(&[0, 1, 2, 0]);
    assert_eq!(eval.model_calls(), 3, "GPU 0 with two alike members, GPUs 1 and 2 with one");
    eval.objective(&[1, 0, 0, 2]);
    assert_eq!(eval.model_calls(), 3, "the same members-per-GPU, other members: all cached");
    eval.objective(&[2, 1, 1, 0]);
    assert_eq!(eval.model_calls(), 5, "GPU 1 with two members and GPU 0 with one are new");
}

#[test]
fn malformed_problems_are_refused_naming_the_input() {
    let err = Problem::with_msc_matrix(
        vec![task(0.5, 1, 1, 1)],
        vec![gpu(vec![], 8, 1); 2],
        vec![0.0; 3],
        Weights::default(),
    )
    .unwrap_err();
    assert!(err.to_string().contains("msc has 3 entries"), "{err}");
    let err = Problem::new(vec![], vec![gpu(vec![], 8, 1)], |_, _| 0.0, Weights::default()).unwrap_err();
    assert!(err.to_string().contains("no members"), "{err}");
    let err =
        Problem::new(vec![task(0.5, 1, 1, 1)], vec![gpu(vec![], 8, 1)], |_, _| -1.0, Weights::default()).unwrap_err();
    assert!(err.to_string().contains("msc(0, 0)"), "{err}");
    let err = Problem::new(
        vec![task(0.5, 1, 1, 1)],
        vec![gpu(vec![], 8, 1)],
        |_, _| 0.0,
        Weights { beta: f64::NAN, ..Weights::default() },
    )
    .unwrap_err();
    assert!(err.to_string().contains("beta"), "{err}");
}

#[test]
fn memeplexes_deal_the_sorted_population_round_robin() {
    assert_eq!(partition(6, 2), vec![vec![0, 2, 4], vec![1, 3, 5]]);
    assert_eq!(partition(7, 3), vec![vec![0, 3, 6], vec![1, 4], vec![2, 5]]);
    assert_eq!(partition(3, 5), vec![vec![0], vec![1], vec![2]], "no more memeplexes than frogs");
}

/// A scripted pond: fitness from a table, a leap copies the first position where the frogs
/// differ, fresh frogs come from a list.
struct Scripted {
    table: fn(&[usize]) -> f64,
    fresh: Vec<Vec<usize>>,
    leaps: Vec<(Vec<usize>, Vec<usize>)>,
}

impl Pond for Scripted {
    fn fitness(&mut self, genes: &[usize]) -> f64 {
        (self.table)(genes)
    }

    fn leap(&mut self, from: &[usize], toward: &[usize]) -> Vec<usize> {
        self.leaps.push((from.to_vec(), toward.to_vec()));
        let mut x = from.to_vec();
        if let Some(i) = (0..x.len()).find(|&i| x[i] != toward[i]) {
            x[i] = toward[i];
        }
        x
    }

    fn fresh(&mut self) -> Option<Vec<usize>> {
        Some(self.fresh.remove(0))
    }
}

#[test]
fn one_iteration_moves_the_worst_frogs_as_worked_by_hand() {
    // Two genes in 0..3, a fitness table (lower is better).
    fn table(x: &[usize]) -> f64 {
        match (x[0], x[1]) {
            (0, 0) => 1.0,
            (1, 1) => 2.0,
            (1, 0) => 3.0,
            (2, 0) => 4.0,
            (2, 1) => 5.0,
            (2, 2) => 6.0,
            (0, 1) => 1.5,
            (1, 2) => 8.0,
            (0, 2) => 9.0,
            _ => unreachable!(),
        }
    }
    let frog = |a: usize, b: usize| Frog { genes: vec![a, b], fitness: table(&[a, b]) };
    // Sorted: A(0,0)=1 B(1,1)=2 C(1,0)=3 D(2,0)=4 E(2,1)=5 F(2,2)=6.
    let mut population = vec![frog(0, 0), frog(1, 1), frog(1, 0), frog(2, 0), frog(2, 1), frog(2, 2)];
    let mut moves = Scripted { table, fresh: vec![vec![1, 2]], leaps: Vec::new() };
    iteration(&mut population, 2, 1, &mut moves);
    // Memeplex 0 = {A, C, E}: the worst, E (2,1), leaps toward its best A (0,0): the first
    // differing gene is copied, (0,1) = 1.5 < 5, so E becomes (0,1).
    // Memeplex 1 = {B, D, F}: the worst, F (2,2), leaps toward B (1,1): (1,2) = 8, not better
    // than 6; toward the global best A: (0,2) = 9, not better; so F is replaced by the fresh
    // frog (1,2) = 8, unconditionally.
    assert_eq!(
        moves.leaps,
        vec![(vec![2, 1], vec![0, 0]), (vec![2, 2], vec![1, 1]), (vec![2, 2], vec![0, 0])],
        "E toward A; F toward B, then toward A"
    );
    assert!(moves.fresh.is_empty(), "one fresh frog drawn");
    // Shuffled back: merged and sorted best first.
    assert_eq!(population, vec![frog(0, 0), frog(0, 1), frog(1, 1), frog(1, 0), frog(2, 0), frog(1, 2)]);
}

/// A random instance: `n` GPUs, some busy, some with no slot, members of one or two kinds.
fn instance(rng: &mut StdRng, n: usize, m: usize) -> Problem {
    let kinds = [task(0.9, 8, 400 << 20, 11), task(0.5, 12, 100 << 20, 12), task(0.3, 4, 50 << 20, 13)];
    let first = kinds[rng.random_range(0..3)];
    let second = if rng.random::<bool>() { kinds[rng.random_range(0..3)] } else { first };
    let members = (0..m).map(|i| if i % 2 == 0 { first } else { second }).collect();
    let gpus = (0..n)
        .map(|_| {
            let resident: Vec<TaskVector> =
                (0..rng.random_range(0..3)).map(|_| kinds[rng.random_range(0..3)]).collect();
            let used: u64 = resident.iter().map(|t| t.gpu_memory / GIB).sum();
            GpuCandidate { free_memory: (32u64.saturating_sub(used)) * GIB, slots: rng.random_range(0..4), resident }
        })
        .collect();
    // Nodes of 4 GPUs: NVLink-ish inside a node, costlier between nodes.
    let msc = |a: usize, b: usize| {
        if a == b {
            0.0
        } else if a / 4 == b / 4 {
            1.0 + ((a + b) % 2) as f64
        } else {
            10.0
        }
    };
    Problem::new(members, gpus, msc, Weights::default()).unwrap()
}

/// Every assignment by plain enumeration (n^m), the best feasible one's objective.
fn brute_force(eval: &mut Evaluator<'_, Pairwise>) -> Option<f64> {
    let p = eval.problem();
    let (m, n) = (p.members().len(), p.gpus().len());
    let mut best: Option<f64> = None;
    for code in 0..n.pow(m as u32) {
        let x: Vec<usize> = (0..m).map(|i| code / n.pow(i as u32) % n).collect();
        if p.is_feasible(&x) {
            let f = eval.objective(&x);
            best = Some(best.map_or(f, |b: f64| b.min(f)));
        }
    }
    best
}

#[test]
fn every_search_returns_a_feasible_assignment_or_agrees_there_is_none() {
    let mut rng = StdRng::seed_from_u64(16);
    let (mut solved, mut unsolvable) = (0, 0);
    for case in 0..300u64 {
        let (n, m) = (rng.random_range(1..10), rng.random_range(1..6));
        let p = instance(&mut rng, n, m);
        let mut eval = Evaluator::new(&p, &Pairwise);
        let optimum = exhaustive(&mut eval, EXHAUSTIVE_LIMIT);
        let results = [
            ("sfla", sfla(&mut eval, &SflaParams::default(), case)),
            ("sfla-seed-only", sfla(&mut eval, &SflaParams::seed_only(), case)),
            ("greedy", greedy(&mut eval)),
            ("topology-greedy", topology_greedy(&mut eval)),
            ("random", random(&mut eval, case)),
        ];
        match &optimum {
            Ok(best) => {
                solved += 1;
                p.check(&best.assignment).unwrap();
                for (name, r) in &results {
                    // A constructive search may miss a tight packing of unequal members, so an
                    // error is allowed here; what it returns must fit.
                    if let Ok(found) = r {
                        p.check(&found.assignment).unwrap_or_else(|e| panic!("case {case}: {name}: {e}"));
                        assert!(
                            (eval.objective(&found.assignment) - found.objective).abs() < 1e-9,
                            "case {case}: {name} reports its objective"
                        );
                        assert!(found.objective >= best.objective - 1e-9, "case {case}: {name} beat the optimum");
                    }
                }
            }
            Err(Error::Infeasible { .. }) => {
                unsolvable += 1;
                for (name, r) in &results {
                    assert!(
                        matches!(r, Err(Error::Infeasible { .. })),
                        "case {case}: {name} found {r:?} where nothing fits"
                    );
                }
            }
            Err(e) => panic!("case {case}: {e}"),
        }
    }
    assert!(solved > 100 && unsolvable > 10, "both kinds of instance are exercised: {solved} solved, {unsolvable} not");
}

#[test]
fn exhaustive_finds_the_brute_force_optimum() {
    let mut rng = StdRng::seed_from_u64(3);
    for case in 0..150 {
        let (n, m) = (rng.random_range(1..7), rng.random_range(1..5));
        let p = instance(&mut rng, n, m);
        let mut eval = Evaluator::new(&p, &Pairwise);
        let brute = brute_force(&mut eval);
        match exhaustive(&mut eval, EXHAUSTIVE_LIMIT) {
            Ok(found) => assert!(
                (found.objective - brute.unwrap()).abs() < 1e-12,
                "case {case}: {} vs {brute:?}",
                found.objective
            ),
            Err(e) => assert!(brute.is_none(), "case {case}: {e} but brute force found {brute:?}"),
        }
    }
}

#[test]
fn exhaustive_counts_multisets_and_refuses_beyond_its_limit() {
    let a = task(0.5, 1, 1, 1);
    let b = task(0.7, 1, 1, 2);
    let p = Problem::new(vec![a, b, a], vec![gpu(vec![], 8, 3); 3], |_, _| 1.0, Weights::default()).unwrap();
    // Two alike members on 3 GPUs: C(4, 2) = 6 multisets; the third member: 3.
    assert_eq!(exhaustive_count(&p), 18);
    let mut eval = Evaluator::new(&p, &Additive);
    assert_eq!(exhaustive(&mut eval, 17), Err(Error::TooLarge { count: 18, limit: 17 }));
    assert_eq!(eval.evaluations(), 0, "refused before evaluating anything");
    exhaustive(&mut eval, 18).unwrap();
    assert_eq!(eval.evaluations(), 18, "every multiset fits here, each evaluated once");
    let big = Problem::new(vec![a; 16], vec![gpu(vec![], 8, 1); 128], |_, _| 1.0, Weights::default()).unwrap();
    assert!(exhaustive_count(&big) > 1u128 << 64);
}

#[test]
fn a_leap_copies_positions_and_repairs_by_swapping() {
    // Two GPUs with one slot each: copying either position of (1,0) into (0,1) overfills a GPU,
    // so the member there swaps; the leap lands on (1,0) whichever position it copies.
    let p =
        Problem::new(vec![task(0.5, 4, 1, 1); 2], vec![gpu(vec![], 8, 1); 2], |_, _| 1.0, Weights::default()).unwrap();
    let mut eval = Evaluator::new(&p, &Additive);
    for seed in 0..20 {
        let mut pond = SearchPond::new(&mut eval, seed, false);
        assert_eq!(pond.leap(&[0, 1], &[1, 0]), vec![1, 0]);
    }
    // A frog that differs in one position lands on the target.
    let p =
        Problem::new(vec![task(0.5, 4, 1, 1); 3], vec![gpu(vec![], 8, 1); 4], |_, _| 1.0, Weights::default()).unwrap();
    let mut eval = Evaluator::new(&p, &Additive);
    for seed in 0..20 {
        let mut pond = SearchPond::new(&mut eval, seed, false);
        assert_eq!(pond.leap(&[0, 1, 2], &[0, 1, 3]), vec![0, 1, 3]);
        assert_eq!(pond.leap(&[0, 1, 2], &[0, 1, 2]), vec![0, 1, 2]);
    }
    // Random instances: leaps between random frogs stay feasible and take each position from
    // one of the two frogs.
    let mut rng = StdRng::seed_from_u64(5);
    let mut copied = 0;
    for seed in 0..300 {
        let (n, m) = (rng.random_range(2..12), rng.random_range(1..7));
        let p = instance(&mut rng, n, m);
        let mut eval = Evaluator::new(&p, &Pairwise);
        let mut pond = SearchPond::new(&mut eval, seed, seed % 2 == 0);
        let (Some(a), Some(b)) = (pond.fresh(), pond.fresh()) else { continue };
        p.check(&a).unwrap();
        let x = pond.leap(&a, &b);
        p.check(&x).unwrap();
        // A member takes the target's GPU, keeps its own, or (swapped out of the way) takes the
        // old GPU of the member that took its place.
        assert!(x.iter().all(|g| a.contains(g) || b.contains(g)), "{a:?} → {b:?} gave {x:?}");
        copied += (0..x.len()).filter(|&i| x[i] != a[i]).count();
    }
    assert!(copied > 100, "leaps moved members: {copied}");
}

#[test]
fn sfla_is_within_a_few_percent_of_the_optimum_on_small_instances() {
    let mut rng = StdRng::seed_from_u64(2);
    let (mut gaps, mut seed_gaps) = (Vec::new(), Vec::new());
    for case in 0..200u64 {
        let (n, m) = (rng.random_range(4..9), rng.random_range(2..6));
        let p = instance(&mut rng, n, m);
        let mut eval = Evaluator::new(&p, &Pairwise);
        let Ok(best) = exhaustive(&mut eval, EXHAUSTIVE_LIMIT) else { continue };
        for (params, gaps) in [(SflaParams::default(), &mut gaps), (SflaParams::seed_only(), &mut seed_gaps)] {
            let found = sfla(&mut eval, &params, case).unwrap();
            gaps.push(found.objective / best.objective - 1.0);
        }
    }
    let mean = |g: &[f64]| g.iter().sum::<f64>() / g.len() as f64;
    let max = |g: &[f64]| g.iter().copied().fold(0.0, f64::max);
    assert!(gaps.len() > 100, "{} instances with an optimum", gaps.len());
    // Seen: 0 on all 191 instances for the default, a mean of 0.2 % (at most 9 %) for the seed's
    // form alone.
    assert!(mean(&gaps) < 0.005 && max(&gaps) < 0.02, "sfla: mean gap {:.4}, max {:.4}", mean(&gaps), max(&gaps));
    assert!(mean(&seed_gaps) < 0.01, "sfla (seed only): mean gap {:.4}, max {:.4}", mean(&seed_gaps), max(&seed_gaps));
}

#[test]
fn searches_repeat_with_their_seed() {
    let mut rng = StdRng::seed_from_u64(9);
    let p = instance(&mut rng, 9, 5);
    let run = |seed| {
        let mut eval = Evaluator::new(&p, &Pairwise);
        (sfla(&mut eval, &SflaParams::default(), seed), random(&mut eval, seed))
    };
    assert_eq!(run(1), run(1));
}
