//! Searches over assignments of a gang's members to candidate GPUs (issue 16 item 3), each
//! minimising the objective of [`super::objective`] and returning a feasible assignment or an
//! error saying why there is none.
//!
//! - [`sfla`]: seed 002's shuffled frog leaping algorithm (below).
//! - Baselines: [`greedy`] (each member in turn to the GPU that adds the least interference),
//!   [`topology_greedy`] (NVIDIA's device-plugin best-effort policy: the best-connected set of
//!   GPUs, blind to interference), [`random`], and [`exhaustive`] (the optimum, for small
//!   instances).
//!
//! Every search is pure and seeded: no clock, no thread, randomness only from `StdRng` seeded
//! by the caller, so the same problem, model and seed give the same placement.
//!
//! # SFLA
//! A frog is a feasible assignment; its fitness is the objective (lower is better). The
//! population is as many frogs as the gang has members, at least [`SflaParams::min_frogs`]. Each
//! iteration sorts it best first and deals it round-robin into memeplexes (frog k of the sorted
//! population to memeplex k mod the count). In each memeplex, [`SflaParams::local_steps`] times,
//! the worst frog leaps toward the memeplex's best `F_b`; if that is not better than where it
//! was, it leaps toward the global best `F_g` instead; if that is not better either, it is
//! replaced by a random feasible frog. The memeplexes are then shuffled back into one population
//! (merged and re-sorted). The search stops after [`SflaParams::iterations`] iterations (the
//! seed's g = 16), or when an iteration improved the best by no more than
//! [`SflaParams::convergence`] (the seed's z).
//!
//! **The leap** is SFLA's `X_w + r·(X_b − X_w)`, r uniform in (0, 1], made discrete: of the d
//! members the two frogs place differently, ⌈r·d⌉ chosen at random take the target's GPU. A copy
//! that would overfill the target GPU (slots or memory) is repaired by a swap: a member on that
//! GPU whose position was not copied moves to the copied member's old GPU (which that member
//! just freed), preferring one the target frog places elsewhere; when no swap fits, that copy is
//! skipped. So every frog stays feasible, and a leap toward a frog that differs in one position
//! lands on it.
//!
//! **Beyond the seed**, on by default ([`SflaParams::heuristic_frogs`],
//! [`SflaParams::constructive_frogs`], [`SflaParams::polish`]; [`SflaParams::seed_only`] turns
//! them off), because the seed's form alone missed the targets on the simulator's
//! clusters (`sim/examples/gpu_search.rs`): up to 9 % from the optimum on small instances, and
//! worse than greedy by 20 % on 128 GPUs. The leap only recombines positions the population
//! already holds, and uniformly random frogs on 128 GPUs hold almost none worth having (members
//! scattered over racks and onto busy GPUs). So:
//! - the initial population also holds the greedy and topology-greedy placements;
//! - random frogs (initial, and those replacing a worst frog) are drawn by a randomised
//!   objective-greedy construction around a uniformly random anchor GPU, not uniformly: still
//!   random, spread over the cluster, but each a sensible placement where it lands;
//! - the final best frog is improved by local search: moving one member to another GPU, moving
//!   the members on a GPU together to another (trading with those there), and swapping members
//!   of different kinds, while that lowers the objective.
//!
//! With these, SFLA matched the exhaustive optimum on every small instance tried, and a run with
//! four times the frogs and iterations found nothing better on 128 GPUs.

use rand::rngs::StdRng;
use rand::seq::IndexedRandom;
use rand::seq::index::sample;
use rand::{Rng, SeedableRng};

use super::InterferenceModel;
use super::load::Load;
use super::objective::{Evaluator, Problem};
use super::polish::polish;
use crate::error::Error;

/// A search's answer: member i → candidate GPU `assignment[i]`, and its objective.
#[derive(Clone, Debug, PartialEq)]
pub struct Placement {
    pub assignment: Vec<usize>,
    pub objective: f64,
}

/// SFLA's parameters.
#[derive(Clone, Debug, PartialEq)]
pub struct SflaParams {
    /// Memeplexes the population is dealt into (the seed's m); fewer when the population is
    /// too small to give each at least two frogs.
    pub memeplexes: usize,
    /// The population is as many frogs as the gang has members (the seed's rule), but at least
    /// this many, so small gangs are searched too.
    pub min_frogs: usize,
    /// Iterations at most (the seed's g, 16 by default).
    pub iterations: usize,
    /// Stop when an iteration improved the best objective by no more than this (the seed's z);
    /// `None` runs all iterations.
    pub convergence: Option<f64>,
    /// Leaps of each memeplex's worst frog per iteration.
    pub local_steps: usize,
    /// Put the greedy and topology-greedy placements in the initial population.
    pub heuristic_frogs: bool,
    /// Draw random frogs (the initial ones and those replacing a worst frog that could not
    /// improve) by the randomised objective-greedy construction around a random GPU, not
    /// uniformly.
    pub constructive_frogs: bool,
    /// Improve the final best frog by local search.
    pub polish: bool,
}

impl Default for SflaParams {
    /// The seed's g = 16 iterations; 16 frogs at least in 4 memeplexes of 4, each memeplex's
    /// worst frog leaping 4 times per iteration (so every frog of a memeplex may be replaced
    /// once per iteration, as in the classic SFLA); no early stop, since the seed leaves z to
    /// the task and 16 iterations take a few milliseconds on 128 GPUs. Four times the frogs
    /// and iterations found nothing better on the simulator's clusters.
    fn default() -> SflaParams {
        SflaParams {
            memeplexes: 4,
            min_frogs: 16,
            iterations: 16,
            convergence: None,
            local_steps: 4,
            heuristic_frogs: true,
            constructive_frogs: true,
            polish: true,
        }
    }
}

impl SflaParams {
    /// The seed's algorithm alone: random initial frogs and no local search.
    pub fn seed_only() -> SflaParams {
        SflaParams { heuristic_frogs: false, constructive_frogs: false, polish: false, ..SflaParams::default() }
    }
}

fn infeasible(p: &Problem, why: impl Into<String>) -> Error {
    Error::Infeasible { members: p.members().len(), gpus: p.gpus().len(), why: why.into() }
}

/// Members by decreasing memory (ties by index): the order the constructive searches place
/// them in, so the largest are placed while there is most room.
fn by_memory(p: &Problem) -> Vec<usize> {
    let mut order: Vec<usize> = (0..p.members().len()).collect();
    order.sort_by_key(|&i| std::cmp::Reverse(p.members()[i].gpu_memory));
    order
}

/// Attempts a random feasible assignment makes before giving up (a dead end happens only when
/// members' memories differ and the room is tight; each attempt is cheap).
const RANDOM_ATTEMPTS: usize = 32;

/// A uniformly random feasible assignment: members by decreasing memory, each to a random GPU
/// with room; `None` after [`RANDOM_ATTEMPTS`] dead ends.
fn random_frog(p: &Problem, rng: &mut StdRng) -> Option<Vec<usize>> {
    let order = by_memory(p);
    let mut room = Vec::with_capacity(p.gpus().len());
    'attempt: for _ in 0..RANDOM_ATTEMPTS {
        let mut load = Load::empty(p);
        let mut x = vec![0; p.members().len()];
        for &i in &order {
            room.clear();
            room.extend((0..p.gpus().len()).filter(|&g| load.fits(p, i, g)));
            let Some(&g) = room.choose(rng) else { continue 'attempt };
            load.add(p, i, g);
            x[i] = g;
        }
        return Some(x);
    }
    None
}

/// A random feasible assignment.
pub fn random<M: InterferenceModel + ?Sized>(eval: &mut Evaluator<'_, M>, seed: u64) -> Result<Placement, Error> {
    let p = eval.problem();
    let mut rng = StdRng::seed_from_u64(seed);
    let x = random_frog(p, &mut rng)
        .ok_or_else(|| infeasible(p, format!("{RANDOM_ATTEMPTS} random attempts found no room")))?;
    let objective = eval.objective(&x);
    Ok(Placement { assignment: x, objective })
}

/// `Σ_{j placed} msc(g, g_j)·muds_ij`: what placing member i on g adds to `C`.
fn added_communication(p: &Problem, x: &[usize], placed: &[bool], i: usize, g: usize) -> f64 {
    (0..x.len()).filter(|&j| placed[j] && j != i).map(|j| p.msc(g, x[j]) * p.muds(i, j)).sum()
}

/// Greedy: members in turn (by decreasing memory) each to the feasible GPU where it adds the
/// least interference — the increase of `Σ SD` over the members placed so far, counting what
/// it does to the members already on that GPU. Ties (equal predictions, as for every idle GPU)
/// go to the GPU that adds the least communication to the members placed so far, then to the
/// lowest index, so greedy is not needlessly scattered.
pub fn greedy<M: InterferenceModel + ?Sized>(eval: &mut Evaluator<'_, M>) -> Result<Placement, Error> {
    let p = eval.problem();
    let (m, n) = (p.members().len(), p.gpus().len());
    let mut x = vec![0; m];
    let mut placed = vec![false; m];
    let mut groups: Vec<Vec<usize>> = vec![Vec::new(); n];
    let mut load = Load::empty(p);
    let mut with = Vec::new();
    for i in by_memory(p) {
        let mut best: Option<(f64, f64, usize)> = None;
        for g in (0..n).filter(|&g| load.fits(p, i, g)) {
            let k = groups[g].len() as f64;
            let before = if groups[g].is_empty() { 0.0 } else { k * eval.group_sd(g, &groups[g]) };
            with.clear();
            with.extend_from_slice(&groups[g]);
            with.push(i);
            let added = (k + 1.0) * eval.group_sd(g, &with) - before;
            let better = match best {
                None => true,
                Some((bi, bc, _)) => {
                    let tol = 1e-9 * bi.abs().max(1.0);
                    added < bi - tol || (added <= bi + tol && added_communication(p, &x, &placed, i, g) < bc)
                }
            };
            if better {
                best = Some((added, added_communication(p, &x, &placed, i, g), g));
            }
        }
        let (_, _, g) = best.ok_or_else(|| infeasible(p, format!("greedy found no GPU with room for member {i}")))?;
        x[i] = g;
        placed[i] = true;
        groups[g].push(i);
        load.add(p, i, g);
    }
    let objective = eval.objective(&x);
    Ok(Placement { assignment: x, objective })
}

/// Topology-greedy, NVIDIA's device-plugin best-effort policy: the set of GPUs with the least
/// sum of pairwise msc, grown greedily — from every candidate as a start, each next member to
/// the feasible GPU with the least msc to those already chosen (a GPU already used only when no
/// unused one has room, as the plugin allocates whole GPUs), ties to the lowest index; the best
/// start wins (least `C`, then lowest start). Blind to interference.
pub fn topology_greedy<M: InterferenceModel + ?Sized>(eval: &mut Evaluator<'_, M>) -> Result<Placement, Error> {
    let p = eval.problem();
    let (m, n) = (p.members().len(), p.gpus().len());
    let order = by_memory(p);
    let mut best: Option<(f64, Vec<usize>)> = None;
    let mut cost = vec![0.0f64; n];
    'start: for start in 0..n {
        if !Load::empty(p).fits(p, order[0], start) {
            continue;
        }
        let mut load = Load::empty(p);
        let mut x = vec![0; m];
        cost.iter_mut().for_each(|c| *c = 0.0);
        for (k, &i) in order.iter().enumerate() {
            let g = if k == 0 {
                start
            } else {
                let pick = |used: bool| {
                    (0..n)
                        .filter(|&g| load.fits(p, i, g) && (load.members_on(g) > 0) == used)
                        .min_by(|&a, &b| cost[a].total_cmp(&cost[b]))
                };
                match pick(false).or_else(|| pick(true)) {
                    Some(g) => g,
                    None => continue 'start,
                }
            };
            x[i] = g;
            load.add(p, i, g);
            for (h, c) in cost.iter_mut().enumerate() {
                *c += p.msc(h, g);
            }
        }
        let c = p.communication(&x);
        if best.as_ref().is_none_or(|(b, _)| c < *b) {
            best = Some((c, x));
        }
    }
    let (_, x) = best.ok_or_else(|| infeasible(p, "topology-greedy found no start from which every member fits"))?;
    let objective = eval.objective(&x);
    Ok(Placement { assignment: x, objective })
}

/// The default limit of [`exhaustive`]: assignments it enumerates at most.
pub const EXHAUSTIVE_LIMIT: u64 = 2_000_000;

/// How many assignments the exhaustive search enumerates (before capacity pruning): alike
/// members are interchangeable, so a class of k alike members on n GPUs is a multiset,
/// C(n + k − 1, k) of them. Saturates at `u128::MAX`.
pub fn exhaustive_count(p: &Problem) -> u128 {
    let n = p.gpus().len() as u128;
    let mut per_class = vec![0u128; p.classes()];
    for i in 0..p.members().len() {
        per_class[p.class(i) as usize] += 1;
    }
    let mut total: u128 = 1;
    for k in per_class {
        // C(n + t, t + 1) = C(n + t − 1, t)·(n + t)/(t + 1), exact at each step.
        let mut c: u128 = 1;
        for t in 0..k {
            c = match c.checked_mul(n + t) {
                Some(v) => v / (t + 1),
                None => return u128::MAX,
            };
        }
        total = match total.checked_mul(c) {
            Some(v) => v,
            None => return u128::MAX,
        };
    }
    total
}

/// The optimum by enumeration: every assignment up to permutations of alike members (each
/// class's GPUs in non-decreasing order), skipping those that overfill a GPU; refused with
/// [`Error::TooLarge`] when [`exhaustive_count`] exceeds `limit`. Ties to the first found.
pub fn exhaustive<M: InterferenceModel + ?Sized>(eval: &mut Evaluator<'_, M>, limit: u64) -> Result<Placement, Error> {
    let p = eval.problem();
    let count = exhaustive_count(p);
    if count > u128::from(limit) {
        return Err(Error::TooLarge { count, limit });
    }
    let (m, n) = (p.members().len(), p.gpus().len());
    // Members grouped by class, so each class's members are consecutive in the order.
    let mut order: Vec<usize> = (0..m).collect();
    order.sort_by_key(|&i| p.class(i));
    let mut x = vec![0; m];
    let mut load = Load::empty(p);
    let mut best: Option<Placement> = None;
    // An explicit stack of the next GPU to try at each depth.
    let mut next = vec![0usize; m + 1];
    let mut depth = 0;
    next[0] = 0;
    loop {
        if depth == m {
            let objective = eval.objective(&x);
            if best.as_ref().is_none_or(|b| objective < b.objective) {
                best = Some(Placement { assignment: x.clone(), objective });
            }
            depth -= 1;
            load.remove(p, order[depth], x[order[depth]]);
            next[depth] = x[order[depth]] + 1;
            continue;
        }
        let i = order[depth];
        match (next[depth]..n).find(|&g| load.fits(p, i, g)) {
            Some(g) => {
                x[i] = g;
                load.add(p, i, g);
                depth += 1;
                let same_class = depth < m && p.class(order[depth]) == p.class(i);
                next[depth] = if same_class { g } else { 0 };
            }
            None => {
                if depth == 0 {
                    break;
                }
                depth -= 1;
                load.remove(p, order[depth], x[order[depth]]);
                next[depth] = x[order[depth]] + 1;
            }
        }
    }
    best.ok_or_else(|| infeasible(p, "no assignment fits the candidates' slots and memory"))
}

/// A frog: an assignment and its fitness (the objective; lower is better).
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct Frog {
    pub(crate) genes: Vec<usize>,
    pub(crate) fitness: f64,
}

/// Where SFLA's frogs live: their fitness, their leaps and fresh frogs. The search's only
/// source of randomness, and a seam so a test can script the moves.
pub(crate) trait Pond {
    fn fitness(&mut self, genes: &[usize]) -> f64;
    /// `from` leaps toward `toward`: a feasible frog taking some of `toward`'s positions.
    fn leap(&mut self, from: &[usize], toward: &[usize]) -> Vec<usize>;
    /// A random feasible frog, `None` when none was found.
    fn fresh(&mut self) -> Option<Vec<usize>>;
}

/// The memeplexes of a population of `frogs` sorted best first: frog k goes to memeplex
/// k mod `memeplexes`, so each memeplex is itself sorted best first.
pub(crate) fn partition(frogs: usize, memeplexes: usize) -> Vec<Vec<usize>> {
    let memeplexes = memeplexes.clamp(1, frogs.max(1));
    let mut parts = vec![Vec::new(); memeplexes];
    for k in 0..frogs {
        parts[k % memeplexes].push(k);
    }
    parts
}

fn sort_population(population: &mut [Frog]) {
    population.sort_by(|a, b| a.fitness.total_cmp(&b.fitness));
}

/// One SFLA iteration on a population sorted best first: deal it into memeplexes, evolve each
/// memeplex's worst frog `local_steps` times, shuffle (merge and re-sort).
pub(crate) fn iteration(population: &mut [Frog], memeplexes: usize, local_steps: usize, pond: &mut dyn Pond) {
    for memeplex in partition(population.len(), memeplexes) {
        if memeplex.len() < 2 {
            continue;
        }
        for _ in 0..local_steps {
            let by_fitness = |a: &&usize, b: &&usize| population[**a].fitness.total_cmp(&population[**b].fitness);
            let fb = *memeplex.iter().min_by(by_fitness).expect("a memeplex has frogs");
            // `min_by` takes the first of equals and `max_by` the last, so when every frog of
            // the memeplex is as good as another the best and the worst are still two frogs.
            let fw = *memeplex.iter().max_by(by_fitness).expect("a memeplex has frogs");
            if fw == fb {
                continue;
            }
            let fg = (0..population.len())
                .min_by(|&a, &b| population[a].fitness.total_cmp(&population[b].fitness))
                .expect("a population has frogs");
            let worst = population[fw].fitness;
            let try_leap = |toward: usize, population: &mut [Frog], pond: &mut dyn Pond| {
                let genes = pond.leap(&population[fw].genes, &population[toward].genes);
                let f = pond.fitness(&genes);
                if f < worst {
                    population[fw] = Frog { genes, fitness: f };
                    true
                } else {
                    false
                }
            };
            if try_leap(fb, population, pond) || try_leap(fg, population, pond) {
                continue;
            }
            if let Some(genes) = pond.fresh() {
                let f = pond.fitness(&genes);
                population[fw] = Frog { genes, fitness: f };
            }
        }
    }
    sort_population(population);
}

/// The pond of the real search: frogs evaluated by the problem's evaluator, random leaps, and
/// fresh frogs drawn uniformly or by [`constructive_frog`].
pub(crate) struct SearchPond<'e, 'a, M: InterferenceModel + ?Sized> {
    eval: &'e mut Evaluator<'a, M>,
    rng: StdRng,
    constructive: bool,
}

impl<'e, 'a, M: InterferenceModel + ?Sized> SearchPond<'e, 'a, M> {
    pub(crate) fn new(eval: &'e mut Evaluator<'a, M>, seed: u64, constructive: bool) -> SearchPond<'e, 'a, M> {
        SearchPond { eval, rng: StdRng::seed_from_u64(seed), constructive }
    }
}

impl<M: InterferenceModel + ?Sized> Pond for SearchPond<'_, '_, M> {
    fn fitness(&mut self, genes: &[usize]) -> f64 {
        self.eval.objective(genes)
    }

    fn leap(&mut self, from: &[usize], toward: &[usize]) -> Vec<usize> {
        let p = self.eval.problem();
        let differ: Vec<usize> = (0..from.len()).filter(|&i| from[i] != toward[i]).collect();
        let mut x = from.to_vec();
        if differ.is_empty() {
            return x;
        }
        let r = 1.0 - self.rng.random::<f64>(); // in (0, 1]
        let copies = ((r * differ.len() as f64).ceil() as usize).clamp(1, differ.len());
        let mut load = Load::of(p, &x);
        let mut fixed = vec![false; x.len()];
        for k in sample(&mut self.rng, differ.len(), copies) {
            let i = differ[k];
            let (h, g) = (x[i], toward[i]);
            if h == g {
                fixed[i] = true;
                continue;
            }
            load.remove(p, i, h);
            if load.fits(p, i, g) {
                load.add(p, i, g);
                x[i] = g;
                fixed[i] = true;
                continue;
            }
            load.add(p, i, h);
            let swappable = |j: usize| j != i && x[j] == g && !fixed[j] && load.swap_fits(p, &x, i, j);
            let partner =
                (0..x.len()).find(|&j| swappable(j) && toward[j] != g).or_else(|| (0..x.len()).find(|&j| swappable(j)));
            if let Some(j) = partner {
                load.remove(p, i, h);
                load.remove(p, j, g);
                load.add(p, i, g);
                load.add(p, j, h);
                x.swap(i, j);
                fixed[i] = true;
            }
        }
        x
    }

    fn fresh(&mut self) -> Option<Vec<usize>> {
        if self.constructive {
            constructive_frog(self.eval, &mut self.rng)
        } else {
            random_frog(self.eval.problem(), &mut self.rng)
        }
    }
}

/// How many of the best-scoring GPUs a constructive frog chooses among for each member.
const CONSTRUCTIVE_CHOICES: usize = 2;

/// A randomised objective-greedy frog: the first member (by decreasing memory) on a uniformly
/// random GPU with room, then each next member on one of the [`CONSTRUCTIVE_CHOICES`] feasible
/// GPUs that add the least to the objective (interference, its own and that it causes, and
/// communication with the members placed so far), chosen uniformly. Frogs grow around random
/// anchors, so they cover the cluster, and each is already a sensible placement there.
///
/// Each member is scored on every GPU in O(1): what a GPU's group would predict with one more
/// member of a class is kept until that group changes, and the communication a member of each
/// class would add on each GPU is kept as a running sum.
fn constructive_frog<M: InterferenceModel + ?Sized>(
    eval: &mut Evaluator<'_, M>,
    rng: &mut StdRng,
) -> Option<Vec<usize>> {
    let p = eval.problem();
    let (m, n, classes) = (p.members().len(), p.gpus().len(), p.classes());
    let w = p.weights();
    // Two members of each class where it has two, for muds (which depends only on the two
    // members' task vectors): muds(a member of class d, i) is muds(j, i) for a j ≠ i of class d.
    let mut two_of: Vec<Vec<usize>> = vec![Vec::new(); classes];
    for i in 0..m {
        let c = &mut two_of[p.class(i) as usize];
        if c.len() < 2 {
            c.push(i);
        }
    }
    let mut x = vec![0; m];
    let mut groups: Vec<Vec<usize>> = vec![Vec::new(); n];
    // k·SD of each GPU's group as it stands, and with one more member of a class (when known).
    let mut current = vec![0.0; n];
    let mut with: Vec<Option<f64>> = vec![None; n * classes];
    // comm[c·n + g]: Σ over placed j of msc(g, g_j)·muds(a member of class c, j).
    let mut comm = vec![0.0; n * classes];
    let mut load = Load::empty(p);
    let mut room: Vec<usize> = Vec::with_capacity(n);
    for (k, i) in by_memory(p).into_iter().enumerate() {
        let c = p.class(i) as usize;
        room.clear();
        room.extend((0..n).filter(|&g| load.fits(p, i, g)));
        if room.is_empty() {
            return None;
        }
        let g = if k == 0 {
            room[rng.random_range(0..room.len())]
        } else {
            // The CONSTRUCTIVE_CHOICES lowest (score, GPU), kept sorted.
            let mut best = [(f64::INFINITY, usize::MAX); CONSTRUCTIVE_CHOICES];
            for &g in &room {
                let sd = match with[c * n + g] {
                    Some(v) => v,
                    None => {
                        groups[g].push(i);
                        let v = groups[g].len() as f64 * eval.group_sd(g, &groups[g]);
                        groups[g].pop();
                        with[c * n + g] = Some(v);
                        v
                    }
                };
                let score = w.alpha * (sd - current[g]) / m as f64 + w.beta * p.normalise(comm[c * n + g]);
                if let Some(at) = best.iter().position(|b| score < b.0) {
                    best.copy_within(at..CONSTRUCTIVE_CHOICES - 1, at + 1);
                    best[at] = (score, g);
                }
            }
            let choices = CONSTRUCTIVE_CHOICES.min(room.len());
            best[rng.random_range(0..choices)].1
        };
        if with[c * n + g].is_none() {
            groups[g].push(i);
            with[c * n + g] = Some(groups[g].len() as f64 * eval.group_sd(g, &groups[g]));
            groups[g].pop();
        }
        current[g] = with[c * n + g].expect("scored above");
        x[i] = g;
        groups[g].push(i);
        for d in 0..classes {
            with[d * n + g] = None;
            // A class whose only member is i is never scored again.
            let Some(&j) = two_of[d].iter().find(|&&j| j != i) else { continue };
            let muds = p.muds(j, i);
            for h in 0..n {
                comm[d * n + h] += p.msc(h, g) * muds;
            }
        }
        load.add(p, i, g);
    }
    Some(x)
}

/// Seed 002's shuffled frog leaping search (see the module documentation), seeded.
pub fn sfla<M: InterferenceModel + ?Sized>(
    eval: &mut Evaluator<'_, M>,
    params: &SflaParams,
    seed: u64,
) -> Result<Placement, Error> {
    let p = eval.problem();
    let size = p.members().len().max(params.min_frogs).max(1);
    let mut population: Vec<Frog> = Vec::with_capacity(size);
    if params.heuristic_frogs {
        for found in [greedy(eval), topology_greedy(eval)].into_iter().flatten() {
            population.push(Frog { genes: found.assignment, fitness: found.objective });
        }
    }
    let mut pond = SearchPond::new(eval, seed, params.constructive_frogs);
    while population.len() < size {
        match pond.fresh() {
            Some(genes) => {
                let fitness = pond.fitness(&genes);
                population.push(Frog { genes, fitness });
            }
            None if population.is_empty() => {
                // Random frogs failed: take greedy's if it fits, so SFLA fails only when it does.
                let found = greedy(pond.eval)?;
                population.push(Frog { genes: found.assignment, fitness: found.objective });
            }
            None => break,
        }
    }
    sort_population(&mut population);
    // Each memeplex needs two frogs for a worst to leap toward a best.
    let memeplexes = params.memeplexes.min(population.len() / 2).max(1);
    let mut best = population[0].clone();
    for _ in 0..params.iterations {
        iteration(&mut population, memeplexes, params.local_steps, &mut pond);
        let improvement = best.fitness - population[0].fitness;
        if improvement > 0.0 {
            best = population[0].clone();
        }
        if params.convergence.is_some_and(|z| improvement <= z) {
            break;
        }
    }
    if params.polish {
        best.fitness = polish(eval, &mut best.genes);
    }
    Ok(Placement { assignment: best.genes, objective: best.fitness })
}
