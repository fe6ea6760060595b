//! The schedules' tests: every kind on families of random tables, against the exhaustive optimum
//! where that is small enough, and the refusals of bad tables and schedules.

use super::*;

/// A seeded xorshift generator: the tests' tables are the same on every run.
pub(crate) struct Rng(u64);

impl Rng {
    pub(crate) fn new(seed: u64) -> Rng {
        Rng(seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1)
    }

    pub(crate) fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }

    pub(crate) fn below(&mut self, k: u64) -> u64 {
        self.next() % k
    }
}

/// A Zipf-like size: 1 MB / k^1.2 for k uniform in 1..=1000, so a few messages are large
/// and most are small.
fn zipf(r: &mut Rng) -> u64 {
    let k = (1 + r.below(1000)) as f64;
    (1e6 / k.powf(1.2)) as u64 + 1
}

/// The random table families of the tests, for `n` ranks and one seed.
fn families(n: usize, seed: u64) -> Vec<(&'static str, ComTable)> {
    let mut r = Rng::new(seed * 1000 + n as u64);
    let hot = [0, n / 2];
    vec![
        ("uniform", ComTable::from_fn(n, |_, _| 1 + r.below(1000)).unwrap()),
        ("zipf", ComTable::from_fn(n, |_, _| zipf(&mut r)).unwrap()),
        (
            "hot receivers",
            ComTable::from_fn(n, |_, j| (1 + r.below(1000)) * if hot.contains(&j) { 50 } else { 1 }).unwrap(),
        ),
        ("sparse", ComTable::from_fn(n, |_, _| if r.below(10) < 7 { 0 } else { 1 + r.below(1000) }).unwrap()),
        ("sparse zipf", ComTable::from_fn(n, |_, _| if r.below(2) == 0 { 0 } else { zipf(&mut r) }).unwrap()),
        ("equal", ComTable::uniform(n, 7).unwrap()),
        ("zeros", ComTable::from_fn(n, |i, j| if i == j { 5 } else { 0 }).unwrap()),
    ]
}

/// Independent of the code under test: every step a matching without self-pairs, and
/// every non-zero off-diagonal demand in exactly one step, nothing else.
pub(crate) fn assert_valid(t: &ComTable, s: &Schedule, what: &str) {
    let n = t.n();
    assert_eq!(s.n(), n, "{what}: group size");
    let mut count = vec![0u32; n * n];
    for (k, step) in s.steps().iter().enumerate() {
        assert!(!step.is_empty(), "{what}: step {k} is empty");
        let (mut snd, mut rcv) = (vec![false; n], vec![false; n]);
        for &(i, j) in step {
            assert!(i < n && j < n && i != j, "{what}: step {k} has {i} → {j}");
            assert!(!snd[i], "{what}: step {k}: sender {i} twice");
            assert!(!rcv[j], "{what}: step {k}: receiver {j} twice (contention)");
            snd[i] = true;
            rcv[j] = true;
            count[i * n + j] += 1;
        }
    }
    for i in 0..n {
        for j in 0..n {
            let want = u32::from(i != j && t.get(i, j) > 0);
            assert_eq!(
                count[i * n + j],
                want,
                "{what}: {i} → {j} ({} bytes) delivered {} times",
                t.get(i, j),
                count[i * n + j]
            );
        }
    }
    s.check(t).unwrap_or_else(|e| panic!("{what}: Schedule::check refuses a valid schedule: {e}"));
}

/// Δ counted directly from the table.
fn degree(t: &ComTable) -> usize {
    let n = t.n();
    let out = (0..n).map(|i| (0..n).filter(|&j| j != i && t.get(i, j) > 0).count());
    let inn = (0..n).map(|j| (0..n).filter(|&i| i != j && t.get(i, j) > 0).count());
    out.chain(inn).max().unwrap_or(0)
}

/// The sum over steps of the largest message, computed here.
fn cost(t: &ComTable, s: &Schedule) -> u128 {
    s.steps().iter().map(|st| st.iter().map(|&(i, j)| u128::from(t.get(i, j))).max().unwrap()).sum()
}

/// Every rank walks its own steps with sends that never wait: a rank finishes a step once
/// the message it receives there was sent, i.e. its sender has started that step. Every
/// rank must finish, and every receive must meet the sender's send of the same step.
pub(crate) fn assert_runs_to_completion(s: &Schedule, what: &str) {
    let n = s.n();
    let lists: Vec<Vec<RankStep>> = (0..n).map(|r| s.rank_steps(r)).collect();
    let (mut sent, mut received) = (0, 0);
    for (r, list) in lists.iter().enumerate() {
        for w in list.windows(2) {
            assert!(w[0].step < w[1].step, "{what}: rank {r}'s steps out of order");
        }
        for st in list {
            assert!(st.send_to.is_some() || st.recv_from.is_some());
            if let Some(from) = st.recv_from {
                let theirs = lists[from].iter().find(|x| x.step == st.step);
                assert_eq!(
                    theirs.and_then(|x| x.send_to),
                    Some(r),
                    "{what}: rank {r} receives from {from} in step {} but {from} does not send it there",
                    st.step
                );
            }
            sent += usize::from(st.send_to.is_some());
            received += usize::from(st.recv_from.is_some());
        }
    }
    // And every pair of the schedule is in both ranks' lists, at its step.
    let pairs = s.steps().iter().map(Vec::len).sum::<usize>();
    assert_eq!((sent, received), (pairs, pairs), "{what}");
    for (k, step) in s.steps().iter().enumerate() {
        for &(i, j) in step {
            let at = |r: usize| lists[r].iter().find(|x| x.step == k).copied();
            assert_eq!(at(i).and_then(|x| x.send_to), Some(j), "{what}: step {k}");
            assert_eq!(at(j).and_then(|x| x.recv_from), Some(i), "{what}: step {k}");
        }
    }
    let mut pos = vec![0usize; n];
    loop {
        let mut moved = false;
        for r in 0..n {
            let Some(st) = lists[r].get(pos[r]) else {
                continue;
            };
            // The sender started the step: its position is at (or past) it.
            let ready = st.recv_from.is_none_or(|f| lists[f].get(pos[f]).is_none_or(|x| x.step >= st.step));
            if ready {
                pos[r] += 1;
                moved = true;
            }
        }
        if !moved {
            break;
        }
    }
    for r in 0..n {
        assert_eq!(pos[r], lists[r].len(), "{what}: rank {r} is stuck at {:?}", lists[r].get(pos[r]));
    }
}

fn each_table(mut f: impl FnMut(&str, &ComTable)) {
    for n in 1..=12 {
        for seed in 0..12 {
            for (name, t) in families(n, seed) {
                f(&format!("{name} n={n} seed={seed}"), &t);
            }
        }
    }
}

#[test]
fn every_schedule_delivers_each_demand_once_without_contention() {
    each_table(|what, t| {
        for &kind in ScheduleKind::ALL {
            let s = Schedule::build(kind, t);
            let what = format!("{kind} {what}");
            assert_valid(t, &s, &what);
            assert_runs_to_completion(&s, &what);
            assert_eq!(s.cost(t), cost(t, &s), "{what}: cost");
        }
    });
}

#[test]
fn css_uses_exactly_max_degree_steps() {
    each_table(|what, t| {
        let d = degree(t);
        assert_eq!(t.max_degree(), d, "{what}");
        assert_eq!(css(t).len(), d, "{what}");
    });
}

/// Shift and pairwise use no more steps than N − 1, and css never more than either.
#[test]
fn step_counts_are_bounded() {
    each_table(|what, t| {
        let n = t.n();
        let (s, p, c) = (shift(t), pairwise(t), css(t));
        assert!(s.len() <= n.saturating_sub(1), "{what}");
        assert!(p.len() <= n.saturating_sub(1), "{what}");
        assert!(c.len() <= s.len().min(p.len()), "{what}");
    });
}

/// The least cost of any schedule with exactly Δ steps, by exhaustive search (edges
/// heaviest first, each into a colour free at both ends, one empty colour tried per edge,
/// branches cut at the best cost so far). For small tables only.
fn optimum_with_max_degree_steps(t: &ComTable) -> u128 {
    fn go(k: usize, e: &[(usize, usize, u64)], busy: &mut [(Vec<bool>, Vec<bool>, u64)], cost: u128, best: &mut u128) {
        if cost >= *best {
            return;
        }
        let Some(&(u, v, w)) = e.get(k) else {
            *best = cost;
            return;
        };
        let mut tried_empty = false;
        for c in 0..busy.len() {
            if busy[c].0[u] || busy[c].1[v] {
                continue;
            }
            let empty = busy[c].2 == 0;
            if empty && std::mem::replace(&mut tried_empty, true) {
                continue;
            }
            busy[c].0[u] = true;
            busy[c].1[v] = true;
            if empty {
                busy[c].2 = w;
            }
            go(k + 1, e, busy, cost + if empty { u128::from(w) } else { 0 }, best);
            busy[c].0[u] = false;
            busy[c].1[v] = false;
            if empty {
                busy[c].2 = 0;
            }
        }
    }
    let n = t.n();
    let mut e = t.demands();
    e.sort_by_key(|x| std::cmp::Reverse(x.2));
    let mut busy = vec![(vec![false; n], vec![false; n], 0u64); degree(t)];
    let mut best = if e.is_empty() { 0 } else { u128::MAX };
    go(0, &e, &mut busy, 0, &mut best);
    best
}

/// css never costs more than shift, except where no schedule with Δ steps can: whenever
/// shift itself has Δ steps (every dense table) css is at most its cost by construction,
/// and on the sparse tables of up to 5 ranks where css costs more, the exhaustive search
/// shows that every Δ-step schedule does. On the larger sparse ones it simply holds.
#[test]
fn css_costs_no_more_than_shift() {
    let (mut wins, mut random, mut all, mut forced) = (0, 0, 0, 0);
    each_table(|what, t| {
        let (c, s) = (cost(t, &css(t)), cost(t, &shift(t)));
        all += 1;
        // Random tables of 8 ranks or more: css should do strictly better.
        if t.n() >= 8 && !what.starts_with("equal") && !what.starts_with("zeros") {
            random += 1;
            wins += usize::from(c < s);
        }
        if c <= s {
            return;
        }
        assert!(shift(t).len() > degree(t) && t.n() <= 5, "{what}: css costs {c}, shift {s}\n{t:?}");
        let best = optimum_with_max_degree_steps(t);
        assert!(best > s, "{what}: css costs {c}, shift {s}, the best Δ-step schedule {best}");
        forced += 1;
    });
    assert!(wins * 20 >= random * 19, "css beat shift on only {wins} of {random} random tables of 8 ranks or more");
    assert!(forced < all / 100, "{forced} of {all} tables force css above shift");
}

/// The exhaustive search that the test above relies on finds what it should: the optimum
/// of a table whose best Δ-step schedule is known.
#[test]
fn the_exhaustive_search_finds_the_known_optimum() {
    // Path 0 → 1 (10), 2 → 1 (1), 2 → 3 (1), 4 → 3 (10): two steps, each with a 10.
    let path = ComTable::from_fn(5, |i, j| match (i, j) {
        (0, 1) | (4, 3) => 10,
        (2, 1) | (2, 3) => 1,
        _ => 0,
    })
    .unwrap();
    assert_eq!(optimum_with_max_degree_steps(&path), 20);
    // Reversal with large messages, 1 elsewhere: one step of large ones, Δ − 1 of ones.
    let rev = ComTable::from_fn(4, |i, j| if i + j == 3 { 1000 } else { 1 }).unwrap();
    assert_eq!(optimum_with_max_degree_steps(&rev), 1002);
    assert_eq!(css(&rev).cost(&rev), 1002);
    for seed in 0..40 {
        for (name, t) in families(4, seed) {
            let best = optimum_with_max_degree_steps(&t);
            let c = cost(&t, &css(&t));
            assert!(best <= c, "{name} seed {seed}: the search found {best}, css {c}");
        }
    }
}

/// The schedules follow their definitions on a table where every pair talks.
#[test]
fn shift_and_pairwise_follow_their_formulas() {
    for n in 1..=12 {
        let t = ComTable::from_fn(n, |i, j| 1 + (i * 31 + j * 7) as u64 % 5).unwrap();
        let s = shift(&t);
        assert_eq!(s.len(), n - 1);
        for (k, step) in s.steps().iter().enumerate() {
            let want: Vec<_> = (0..n).map(|i| (i, (i + k + 1) % n)).collect();
            assert_eq!(step, &want, "shift n={n} step {k}");
        }
        let p = pairwise(&t);
        if n.is_power_of_two() {
            for (k, step) in p.steps().iter().enumerate() {
                let want: Vec<_> = (0..n).map(|i| (i, i ^ (k + 1))).collect();
                assert_eq!(step, &want, "pairwise n={n} step {k}");
            }
        } else {
            assert_eq!(p, s, "pairwise n={n} is shift");
        }
    }
}

/// Zero entries are not messages, the diagonal is never a step, and a step left with no
/// message is dropped.
#[test]
fn zero_entries_and_the_diagonal_are_not_steps() {
    // Only 0 → 2 and 3 → 1 cross the network.
    let t = ComTable::from_fn(4, |i, j| match (i, j) {
        (0, 2) => 9,
        (3, 1) => 4,
        (i, j) if i == j => 100,
        _ => 0,
    })
    .unwrap();
    assert_eq!(t.max_degree(), 1);
    assert_eq!(t.demands(), vec![(0, 2, 9), (3, 1, 4)]);
    assert_eq!(css(&t).steps(), &[vec![(0, 2), (3, 1)]]);
    // 0 → 2 is shift's step p = 2, 3 → 1 also p = 2.
    assert_eq!(shift(&t).steps(), &[vec![(0, 2), (3, 1)]]);
    // 0 XOR 2 = 2 and 3 XOR 2 = 1: pairwise's step k = 2 holds both too.
    assert_eq!(pairwise(&t).steps(), &[vec![(0, 2), (3, 1)]]);
    for kind in ScheduleKind::ALL {
        let s = Schedule::build(*kind, &t);
        assert_eq!(s.rank_steps(1), vec![RankStep { step: s.len() - 1, send_to: None, recv_from: Some(3) }]);
        assert!(Schedule::build(*kind, &ComTable::uniform(1, 5).unwrap()).is_empty());
    }
    assert_eq!(pairwise(&t).rank_steps(0), vec![RankStep { step: 0, send_to: Some(2), recv_from: None }]);
    // Where pairwise and shift differ: 0 → 1 is shift's p = 1 and 1 → 0 its p = 3, while
    // pairwise exchanges 0 ↔ 1 in one step.
    let t = ComTable::from_fn(4, |i, j| u64::from((i, j) == (0, 1) || (i, j) == (1, 0))).unwrap();
    assert_eq!(shift(&t).steps(), &[vec![(0, 1)], vec![(1, 0)]]);
    assert_eq!(pairwise(&t).steps(), &[vec![(0, 1), (1, 0)]]);
}

/// css puts similar sizes together: with large messages along a permutation that shift
/// spreads over three steps, css sends them all in one.
#[test]
fn css_groups_similar_sizes_where_shift_mixes_them() {
    // i → 5 − i is 1000 bytes, everything else 1: shift meets the large ones at p = 1, 3
    // and 5 (each step of length 5 − 2i mod 6).
    let n = 6;
    let t = ComTable::from_fn(n, |i, j| if i + j == n - 1 { 1000 } else { 1 }).unwrap();
    assert_eq!(shift(&t).cost(&t), 3 * 1000 + 2);
    let c = css(&t);
    assert_eq!(c.len(), n - 1);
    assert_eq!(c.cost(&t), 1000 + 4, "css: {:?}", c.steps());
    let large: Vec<_> = (0..n).map(|i| (i, n - 1 - i)).collect();
    assert_eq!(c.step(0), &large[..], "the large messages share the first step");
}

/// The colouring alone, before any local search, already groups by size: edges taken
/// heaviest first fill the first step with the large messages of a matching. (N even: for
/// odd N the reversal keeps one rank's part local, and that rank's Δ messages need every
/// step, the first included, so one large message must leave it.)
#[test]
fn heaviest_first_colouring_alone_groups_the_large_messages() {
    for n in [4, 6, 8, 10] {
        let t = ComTable::from_fn(n, |i, j| if i + j == n - 1 { 1000 } else { 1 }).unwrap();
        for recolour_first in [false, true] {
            let c = Colouring::heaviest_first(&t, n - 1, recolour_first);
            let want = 1000 + (n as u128 - 2);
            assert_eq!(c.cost(), want, "n={n} recolour_first={recolour_first}");
            assert_valid(&t, &c.into_schedule(), &format!("n={n}"));
        }
    }
}

/// With exactly Δ steps a schedule can cost more than one with more steps: shift meets
/// this table's two largest messages in one step, which only a third step allows.
#[test]
fn exactly_max_degree_steps_can_cost_more_than_shift_on_sparse_tables() {
    let t =
        ComTable::from_rows(&[vec![0, 522, 0, 0], vec![0, 0, 297, 0], vec![336, 3630, 0, 0], vec![516, 0, 8932, 0]])
            .unwrap();
    // Δ = 2. With two steps, 3 → 2 (8932) and 2 → 1 (3630) cannot share one: 2 → 0 and
    // 3 → 0 go to the same receiver, so one of them is in the step of 8932, and it shares
    // a sender with 8932 or 3630.
    let c = css(&t);
    assert_eq!(c.len(), 2);
    assert_eq!(c.cost(&t), 8932 + 3630);
    assert_eq!(optimum_with_max_degree_steps(&t), 8932 + 3630);
    let s = shift(&t);
    assert_eq!(s.steps(), &[vec![(0, 1), (1, 2), (3, 0)], vec![(2, 0)], vec![(2, 1), (3, 2)]]);
    assert_eq!(s.cost(&t), 522 + 336 + 8932);
}

/// After css no swap of colours inside alternating components of two of its steps lowers
/// the cost (the local search ran to its end), on every test table. Checked here from
/// scratch: for each pair of steps, every way of orienting each component is summarised
/// by the exact pair optimum (largest message overall + largest lighter side).
#[test]
fn css_is_a_local_optimum_of_two_step_swaps() {
    each_table(|what, t| {
        let s = css(t);
        let n = t.n();
        let step_max = |k: usize| s.step(k).iter().map(|&(i, j)| t.get(i, j)).max().unwrap();
        for a in 0..s.len() {
            for b in a + 1..s.len() {
                // Components of the two matchings, by flooding over shared endpoints.
                let edges: Vec<(usize, usize, bool)> = s
                    .step(a)
                    .iter()
                    .map(|&(i, j)| (i, j, true))
                    .chain(s.step(b).iter().map(|&(i, j)| (i, j, false)))
                    .collect();
                let mut comp = vec![usize::MAX; edges.len()];
                let (mut heavy, mut light) = (0u64, 0u64);
                for first in 0..edges.len() {
                    if comp[first] != usize::MAX {
                        continue;
                    }
                    comp[first] = first;
                    let mut stack = vec![first];
                    let (mut pa, mut pb) = (0u64, 0u64);
                    while let Some(e) = stack.pop() {
                        let (i, j, in_a) = edges[e];
                        let w = t.get(i, j);
                        if in_a {
                            pa = pa.max(w)
                        } else {
                            pb = pb.max(w)
                        }
                        for (f, &(i2, j2, _)) in edges.iter().enumerate() {
                            if comp[f] == usize::MAX && (i2 == i || j2 == j) {
                                comp[f] = first;
                                stack.push(f);
                            }
                        }
                    }
                    heavy = heavy.max(pa.max(pb));
                    light = light.max(pa.min(pb));
                }
                let now = u128::from(step_max(a)) + u128::from(step_max(b));
                assert!(
                    u128::from(heavy) + u128::from(light) >= now,
                    "{what} (n={n}): swapping inside steps {a} and {b} lowers {now} to {}",
                    u128::from(heavy) + u128::from(light)
                );
            }
        }
    });
}

#[test]
fn bad_tables_and_schedules_are_refused_with_the_problem_named() {
    let e = ComTable::new(3, vec![0; 8]).unwrap_err().to_string();
    assert!(e.contains("9 entries") && e.contains("got 8"), "{e}");
    let e = ComTable::new(0, vec![]).unwrap_err().to_string();
    assert!(e.contains("at least one rank"), "{e}");
    let e = ComTable::from_rows(&[vec![1, 2], vec![3]]).unwrap_err().to_string();
    assert!(e.contains("row 1") && e.contains("square"), "{e}");
    let e = ComTable::uniform(usize::MAX / 2, 1).unwrap_err().to_string();
    assert!(e.contains("cannot allocate a table"), "{e}");
    let e = ComTable::uniform(2, u64::MAX).unwrap().scaled(2).unwrap_err().to_string();
    assert!(e.contains("overflows"), "{e}");

    let e = Schedule::from_steps(3, vec![vec![(0, 1), (2, 1)]]).unwrap_err().to_string();
    assert!(e.contains("two senders to rank 1"), "{e}");
    let e = Schedule::from_steps(3, vec![vec![(0, 1), (0, 2)]]).unwrap_err().to_string();
    assert!(e.contains("rank 0 sending twice"), "{e}");
    let e = Schedule::from_steps(3, vec![vec![], vec![(2, 2)]]).unwrap_err().to_string();
    assert!(e.contains("step 1") && e.contains("itself"), "{e}");
    let e = Schedule::from_steps(3, vec![vec![(0, 3)]]).unwrap_err().to_string();
    assert!(e.contains("0 → 3"), "{e}");

    let t = ComTable::from_rows(&[vec![0, 5, 0], vec![1, 0, 0], vec![0, 0, 0]]).unwrap();
    let ok = Schedule::from_steps(3, vec![vec![(0, 1), (1, 0)]]).unwrap();
    ok.check(&t).unwrap();
    let missing = Schedule::from_steps(3, vec![vec![(0, 1)]]).unwrap();
    let e = missing.check(&t).unwrap_err().to_string();
    assert!(e.contains("never sends 1 → 0"), "{e}");
    let twice = Schedule::from_steps(3, vec![vec![(0, 1), (1, 0)], vec![(0, 1)]]).unwrap();
    let e = twice.check(&t).unwrap_err().to_string();
    assert!(e.contains("0 → 1 twice"), "{e}");
    let zero = Schedule::from_steps(3, vec![vec![(0, 1), (1, 0)], vec![(2, 0)]]).unwrap();
    let e = zero.check(&t).unwrap_err().to_string();
    assert!(e.contains("2 → 0") && e.contains("0 bytes"), "{e}");
    let e = ok.check(&ComTable::uniform(2, 1).unwrap()).unwrap_err().to_string();
    assert!(e.contains("3 ranks") && e.contains("for 2"), "{e}");

    let e = "ring".parse::<ScheduleKind>().unwrap_err().to_string();
    assert!(e.contains("\"ring\"") && e.contains("css"), "{e}");
    for &k in ScheduleKind::ALL {
        assert_eq!(k.name().parse::<ScheduleKind>().unwrap(), k);
        assert_eq!(ScheduleKind::from_code(k.code()), Some(k));
    }
}

/// Fingerprints tell different tables and schedules apart.
#[test]
fn fingerprints_differ_when_the_contents_do() {
    let a = ComTable::uniform(3, 4).unwrap();
    let b = ComTable::from_fn(3, |i, j| if (i, j) == (2, 1) { 5 } else { 4 }).unwrap();
    assert_ne!(a.fingerprint(), b.fingerprint());
    assert_eq!(a.fingerprint(), a.clone().fingerprint());
    assert_ne!(shift(&a).fingerprint(), css(&b).fingerprint().wrapping_add(1));
    let t = ComTable::uniform(4, 1).unwrap();
    assert_ne!(shift(&t).fingerprint(), pairwise(&t).fingerprint());
}
