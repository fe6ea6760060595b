//! Local search from a feasible assignment (SFLA's last step beyond the seed, see
//! [`super::search`]): members moved one at a time, groups of members sharing a GPU moved
//! together, and members of different kinds swapped, while that lowers the objective.

use super::InterferenceModel;
use super::load::Load;
use super::objective::{Evaluator, Problem};

/// Passes of local search at most; each pass that improves nothing ends it earlier.
const POLISH_PASSES: usize = 16;

/// An assignment being polished, with its load and the members on each GPU kept in step.
struct State<'x> {
    x: &'x mut Vec<usize>,
    load: Load,
    groups: Vec<Vec<usize>>,
}

/// Local search from a feasible assignment `x`, until a pass changes nothing; returns its
/// objective:
/// - each member in turn moves to the GPU that lowers the objective most (computed
///   incrementally: only its old and new GPU's groups and its own pairs change);
/// - the members on a GPU trade places with those on another (or move there whole), so a
///   group of members sharing a GPU can move together;
/// - members of different kinds swap GPUs.
pub(super) fn polish<M: InterferenceModel + ?Sized>(eval: &mut Evaluator<'_, M>, x: &mut Vec<usize>) -> f64 {
    let p = eval.problem();
    let n = p.gpus().len();
    let load = Load::of(p, x);
    let mut groups: Vec<Vec<usize>> = vec![Vec::new(); n];
    for (i, &g) in x.iter().enumerate() {
        groups[g].push(i);
    }
    let mut s = State { x, load, groups };
    for _ in 0..POLISH_PASSES {
        let mut improved = move_members(eval, p, &mut s);
        let mut current = eval.objective(s.x);
        improved |= trade_groups(eval, p, &mut s, &mut current);
        if p.classes() > 1 {
            improved |= swap_kinds(eval, p, &mut s, &mut current);
        }
        if !improved {
            break;
        }
    }
    eval.objective(s.x)
}

/// `members.len()` times their group's mean prediction on GPU g: their summed slowdowns.
fn sum_sd<M: InterferenceModel + ?Sized>(eval: &mut Evaluator<'_, M>, g: usize, members: &[usize]) -> f64 {
    if members.is_empty() { 0.0 } else { members.len() as f64 * eval.group_sd(g, members) }
}

/// Each member in turn to the GPU that lowers the objective most; true when one moved.
fn move_members<M: InterferenceModel + ?Sized>(eval: &mut Evaluator<'_, M>, p: &Problem, s: &mut State<'_>) -> bool {
    let m = p.members().len();
    let w = p.weights();
    let mut scratch = Vec::new();
    let mut improved = false;
    for i in 0..m {
        let h = s.x[i];
        let here = sum_sd(eval, h, &s.groups[h]);
        scratch.clear();
        scratch.extend(s.groups[h].iter().copied().filter(|&j| j != i));
        let without = sum_sd(eval, h, &scratch);
        let mut best: Option<(f64, usize)> = None;
        for (g, group) in s.groups.iter().enumerate() {
            if g == h || !s.load.fits(p, i, g) {
                continue;
            }
            scratch.clear();
            scratch.extend_from_slice(group);
            let there = sum_sd(eval, g, &scratch);
            scratch.push(i);
            let with = sum_sd(eval, g, &scratch);
            let d_i = (without + with - here - there) / m as f64;
            let d_c: f64 =
                (0..m).filter(|&j| j != i).map(|j| (p.msc(g, s.x[j]) - p.msc(h, s.x[j])) * p.muds(i, j)).sum();
            let delta = w.alpha * d_i + w.beta * p.normalise(d_c);
            if delta < best.map_or(-1e-12, |b| b.0) {
                best = Some((delta, g));
            }
        }
        if let Some((_, g)) = best {
            s.groups[h].retain(|&j| j != i);
            s.groups[g].push(i);
            s.load.remove(p, i, h);
            s.load.add(p, i, g);
            s.x[i] = g;
            improved = true;
        }
    }
    improved
}

/// The members on a GPU trade places with those on another (or move there whole) when that
/// lowers the objective (`current`, kept up to date); true when a group moved.
fn trade_groups<M: InterferenceModel + ?Sized>(
    eval: &mut Evaluator<'_, M>,
    p: &Problem,
    s: &mut State<'_>,
    current: &mut f64,
) -> bool {
    let n = p.gpus().len();
    let memory = |members: &[usize]| members.iter().map(|&i| p.members()[i].gpu_memory).sum::<u64>();
    let same_classes = |a: &[usize], b: &[usize]| {
        let classes = |g: &[usize]| {
            let mut c: Vec<u32> = g.iter().map(|&i| p.class(i)).collect();
            c.sort_unstable();
            c
        };
        a.len() == b.len() && classes(a) == classes(b)
    };
    let mut improved = false;
    let used: Vec<usize> = (0..n).filter(|&g| !s.groups[g].is_empty()).collect();
    for h in used {
        for g in 0..n {
            let (a, b) = (&s.groups[h], &s.groups[g]);
            // One member to an empty GPU is a move the pass above tried; alike groups
            // trading places change nothing.
            if g == h || a.is_empty() || (a.len() == 1 && b.is_empty()) || same_classes(a, b) {
                continue;
            }
            let (ga, gb) = (&p.gpus()[g], &p.gpus()[h]);
            if a.len() > ga.slots || b.len() > gb.slots || memory(a) > ga.free_memory || memory(b) > gb.free_memory {
                continue;
            }
            for &i in a {
                s.x[i] = g;
            }
            for &i in b {
                s.x[i] = h;
            }
            let f = eval.objective(s.x);
            if f < *current - 1e-12 {
                for &i in &s.groups[h] {
                    s.load.remove(p, i, h);
                    s.load.add(p, i, g);
                }
                for &i in &s.groups[g] {
                    s.load.remove(p, i, g);
                    s.load.add(p, i, h);
                }
                s.groups.swap(g, h);
                *current = f;
                improved = true;
            } else {
                for &i in &s.groups[h] {
                    s.x[i] = h;
                }
                for &i in &s.groups[g] {
                    s.x[i] = g;
                }
            }
        }
    }
    improved
}

/// Members of different kinds swap GPUs when that lowers the objective (`current`, kept up to
/// date); true when a pair swapped.
fn swap_kinds<M: InterferenceModel + ?Sized>(
    eval: &mut Evaluator<'_, M>,
    p: &Problem,
    s: &mut State<'_>,
    current: &mut f64,
) -> bool {
    let m = p.members().len();
    let mut improved = false;
    for i in 0..m {
        for j in i + 1..m {
            if p.class(i) == p.class(j) || s.x[i] == s.x[j] || !s.load.swap_fits(p, s.x, i, j) {
                continue;
            }
            s.x.swap(i, j);
            let f = eval.objective(s.x);
            if f < *current - 1e-12 {
                let (gi, gj) = (s.x[i], s.x[j]);
                s.load.remove(p, i, gj);
                s.load.remove(p, j, gi);
                s.load.add(p, i, gi);
                s.load.add(p, j, gj);
                s.groups[gj].retain(|&k| k != i);
                s.groups[gi].retain(|&k| k != j);
                s.groups[gi].push(i);
                s.groups[gj].push(j);
                *current = f;
                improved = true;
            } else {
                s.x.swap(i, j);
            }
        }
    }
    improved
}
