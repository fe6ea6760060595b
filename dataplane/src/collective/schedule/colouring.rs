//! The colouring behind `css`: the demand graph's edges assigned to Δ matchings heaviest first
//! (with alternating-path recolouring), then improved by Kempe-chain swaps between pairs of
//! steps while that lowers the cost.

use super::steps::Schedule;
use super::table::ComTable;

/// How many passes of pair-wise Kempe swaps the local search makes at most from one start.
/// A pass is O(N·Δ²) at worst; on the random tables of the tests the search settles within
/// this (`css_is_a_local_optimum_of_two_step_swaps` checks that nothing is left to gain).
const KEMPE_PASSES: usize = 8;
/// How many (free colour at the sender, free colour at the receiver) pairs the colouring
/// compares before it recolours an alternating path: each costs O(N) to evaluate, and the
/// local search repairs what a poorer choice costs.
const FLIP_CANDIDATES: usize = 16;

const NONE: usize = usize::MAX;

/// An assignment of the demand graph's edges to `colours` matchings (steps).
pub(super) struct Colouring<'t> {
    table: &'t ComTable,
    n: usize,
    colours: usize,
    /// `send[c * n + u]`: the receiver of sender u in colour c, or NONE.
    send: Vec<usize>,
    /// `recv[c * n + v]`: the sender to receiver v in colour c, or NONE.
    recv: Vec<usize>,
}

impl<'t> Colouring<'t> {
    fn empty(table: &'t ComTable, colours: usize) -> Colouring<'t> {
        let n = table.n();
        Colouring { table, n, colours, send: vec![NONE; colours * n], recv: vec![NONE; colours * n] }
    }

    pub(super) fn from_schedule(table: &'t ComTable, s: &Schedule, colours: usize) -> Colouring<'t> {
        let mut c = Colouring::empty(table, colours);
        for (k, step) in s.steps().iter().enumerate() {
            for &(u, v) in step {
                c.assign(k, u, v);
            }
        }
        c
    }

    fn assign(&mut self, c: usize, u: usize, v: usize) {
        debug_assert!(self.send[c * self.n + u] == NONE && self.recv[c * self.n + v] == NONE);
        self.send[c * self.n + u] = v;
        self.recv[c * self.n + v] = u;
    }

    fn free_at_sender(&self, c: usize, u: usize) -> bool {
        self.send[c * self.n + u] == NONE
    }

    fn free_at_receiver(&self, c: usize, v: usize) -> bool {
        self.recv[c * self.n + v] == NONE
    }

    /// The largest message of colour c.
    fn max_of(&self, c: usize) -> u64 {
        (0..self.n)
            .filter_map(|u| {
                let v = self.send[c * self.n + u];
                (v != NONE).then(|| self.table.get(u, v))
            })
            .max()
            .unwrap_or(0)
    }

    pub(super) fn cost(&self) -> u128 {
        (0..self.colours).map(|c| u128::from(self.max_of(c))).sum()
    }

    /// Colours the edges heaviest first. An edge goes into the first open colour free at both
    /// ends: every open colour already holds a message at least as large, so this costs
    /// nothing. Else a new colour is opened while fewer than Δ are. Else (every colour is busy
    /// at one end or the other) the alternating path of two colours a (free at the sender) and
    /// b (free at the receiver) that starts at the receiver is swapped, which frees a at the
    /// receiver without touching the sender (the graph is bipartite), and the edge takes a;
    /// of the first `FLIP_CANDIDATES` such pairs, the one whose swap raises the cost least.
    pub(super) fn heaviest_first(table: &'t ComTable, delta: usize, recolour_first: bool) -> Colouring<'t> {
        let mut edges = table.demands();
        edges.sort_by(|x, y| y.2.cmp(&x.2).then((x.0, x.1).cmp(&(y.0, y.1))));
        let mut col = Colouring::empty(table, delta);
        let mut maxw = vec![0u64; delta];
        let mut opened = 0;
        for (u, v, w) in edges {
            if let Some(c) = (0..opened).find(|&c| col.free_at_sender(c, u) && col.free_at_receiver(c, v)) {
                col.assign(c, u, v);
                continue;
            }
            // Recolouring among the open colours needs one free at u and one free at v; with
            // all Δ open there always are (u and v have fewer than Δ coloured edges, this one
            // not being coloured yet), and none is free at both (else the first branch took
            // it).
            let flip = col.best_flip(u, v, w, opened, &maxw);
            let open_new = opened < delta && (!recolour_first || flip.is_none_or(|(cost, _, _)| cost > 0));
            if open_new {
                col.assign(opened, u, v);
                maxw[opened] = w;
                opened += 1;
                continue;
            }
            let (_, a, b) = flip.expect("a colour is free at each end");
            let path = col.path_from_receiver(v, a, b);
            col.swap(&path, a, b);
            col.assign(a, u, v);
            maxw[a] = col.max_of(a);
            maxw[b] = col.max_of(b);
        }
        col
    }

    /// Of the first `FLIP_CANDIDATES` pairs (a free at sender u, b free at receiver v) among
    /// the first `opened` colours, the one whose path swap, with u → v then coloured a, raises
    /// the cost least: (that rise, a, b). `None` if no open colour is free at u or at v.
    fn best_flip(&self, u: usize, v: usize, w: u64, opened: usize, maxw: &[u64]) -> Option<(u128, usize, usize)> {
        let free_u: Vec<usize> = (0..opened).filter(|&c| self.free_at_sender(c, u)).collect();
        let free_v: Vec<usize> = (0..opened).filter(|&c| self.free_at_receiver(c, v)).collect();
        let mut best: Option<(u128, usize, usize)> = None;
        for (a, b) in free_u.iter().flat_map(|&a| free_v.iter().map(move |&b| (a, b))).take(FLIP_CANDIDATES) {
            let path = self.path_from_receiver(v, a, b);
            let (na, nb) = self.maxima_after_swap(&path, a, b);
            let after = u128::from(na.max(w)) + u128::from(nb);
            let before = u128::from(maxw[a]) + u128::from(maxw[b]);
            let rise = after.saturating_sub(before);
            if best.is_none_or(|(d, _, _)| rise < d) {
                best = Some((rise, a, b));
            }
        }
        best
    }

    /// The edges (sender, receiver, colour) of the path that starts at receiver `v` with its
    /// a-edge and alternates a, b, a, … .
    fn path_from_receiver(&self, v: usize, a: usize, b: usize) -> Vec<(usize, usize, usize)> {
        let n = self.n;
        let mut path = Vec::new();
        let mut recv_side = v;
        loop {
            let u = self.recv[a * n + recv_side];
            if u == NONE {
                break;
            }
            path.push((u, recv_side, a));
            let next = self.send[b * n + u];
            if next == NONE {
                break;
            }
            path.push((u, next, b));
            recv_side = next;
        }
        path
    }

    /// The largest messages of colours a and b if `edges` (each a or b) swapped colour.
    fn maxima_after_swap(&self, edges: &[(usize, usize, usize)], a: usize, b: usize) -> (u64, u64) {
        let n = self.n;
        let mut moved = vec![false; n];
        for &(u, _, c) in edges {
            if c == a {
                moved[u] = true;
            }
        }
        let mut moved_b = vec![false; n];
        for &(u, _, c) in edges {
            if c == b {
                moved_b[u] = true;
            }
        }
        let (mut na, mut nb) = (0u64, 0u64);
        for u in 0..n {
            let va = self.send[a * n + u];
            if va != NONE {
                let w = self.table.get(u, va);
                if moved[u] {
                    nb = nb.max(w);
                } else {
                    na = na.max(w);
                }
            }
            let vb = self.send[b * n + u];
            if vb != NONE {
                let w = self.table.get(u, vb);
                if moved_b[u] {
                    na = na.max(w);
                } else {
                    nb = nb.max(w);
                }
            }
        }
        (na, nb)
    }

    /// Swaps colours a and b on `edges` (each of colour a or b, a union of alternating
    /// components, so the result is again a pair of matchings).
    fn swap(&mut self, edges: &[(usize, usize, usize)], a: usize, b: usize) {
        let n = self.n;
        for &(u, v, c) in edges {
            self.send[c * n + u] = NONE;
            self.recv[c * n + v] = NONE;
        }
        for &(u, v, c) in edges {
            let c = if c == a { b } else { a };
            self.assign(c, u, v);
        }
    }

    /// Local search: for every pair of colours, the union of the two matchings splits into
    /// alternating paths and cycles, and swapping the colours inside any of them keeps both
    /// matchings. The best orientation is exact for the pair: every component puts its heavier
    /// side in one colour, so that colour's largest message is the overall largest and the
    /// other's is the largest of the components' lighter sides. Applied while it lowers the
    /// cost, at most `KEMPE_PASSES` passes.
    ///
    /// Most pairs cannot improve, and two checks skip them cheaply: a pair neither of whose
    /// colours changed since it was last looked at cannot (its optimum is a function of the
    /// two colours), and neither can a pair where a largest message of the lighter colour lies
    /// in a component whose other side is at least as heavy (that component's lighter side is
    /// then the lighter colour's maximum already), which takes a walk along that one component.
    pub(super) fn kempe(&mut self) {
        let n = self.n;
        let colours = self.colours;
        let mut maxima: Vec<u64> = (0..colours).map(|c| self.max_of(c)).collect();
        let mut dirty = vec![true; colours];
        // Union-find over 2n vertices (senders 0..n, receivers n..2n), per-root side maxima,
        // and the pair's edges: reused across pairs.
        let mut parent = vec![0usize; 2 * n];
        let mut side = vec![(0u64, 0u64); 2 * n];
        let mut edges: Vec<(usize, usize, usize)> = Vec::with_capacity(2 * n);
        fn find(parent: &mut [usize], mut x: usize) -> usize {
            while parent[x] != x {
                parent[x] = parent[parent[x]];
                x = parent[x];
            }
            x
        }
        for _ in 0..KEMPE_PASSES {
            let mut changed = vec![false; colours];
            let mut improved = false;
            for a0 in 0..colours {
                for b0 in a0 + 1..colours {
                    if !(dirty[a0] || dirty[b0] || changed[a0] || changed[b0]) {
                        continue;
                    }
                    // a: the heavier colour, b: the lighter.
                    let (a, b) = if maxima[a0] >= maxima[b0] { (a0, b0) } else { (b0, a0) };
                    if maxima[b] == 0 || self.blocked(a, b, maxima[b]) {
                        continue;
                    }
                    for (i, p) in parent.iter_mut().enumerate() {
                        *p = i;
                    }
                    edges.clear();
                    for c in [a, b] {
                        for u in 0..n {
                            let v = self.send[c * n + u];
                            if v != NONE {
                                edges.push((u, v, c));
                                let (x, y) = (find(&mut parent, u), find(&mut parent, n + v));
                                if x != y {
                                    parent[x] = y;
                                }
                            }
                        }
                    }
                    // Per component root: the largest message of its a-side and its b-side.
                    side.fill((0, 0));
                    for &(u, v, c) in &edges {
                        let r = find(&mut parent, u);
                        let w = self.table.get(u, v);
                        if c == a {
                            side[r].0 = side[r].0.max(w);
                        } else {
                            side[r].1 = side[r].1.max(w);
                        }
                    }
                    let (mut heavy, mut light) = (0u64, 0u64);
                    for &(p, q) in &side {
                        heavy = heavy.max(p.max(q));
                        light = light.max(p.min(q));
                    }
                    let before = u128::from(maxima[a]) + u128::from(maxima[b]);
                    if u128::from(heavy) + u128::from(light) >= before {
                        continue;
                    }
                    let flip: Vec<(usize, usize, usize)> = edges
                        .iter()
                        .copied()
                        .filter(|&(u, _, _)| {
                            let r = find(&mut parent, u);
                            side[r].1 > side[r].0
                        })
                        .collect();
                    self.swap(&flip, a, b);
                    maxima[a] = heavy;
                    maxima[b] = light;
                    changed[a] = true;
                    changed[b] = true;
                    improved = true;
                }
            }
            if !improved {
                break;
            }
            dirty = changed;
        }
    }

    /// Whether some message of colour b weighing `max_b` (b's largest) lies in an alternating
    /// a/b component whose a-side has a message at least as large: then no swap between a and
    /// b can lower b's maximum while a keeps the overall largest.
    fn blocked(&self, a: usize, b: usize, max_b: u64) -> bool {
        let n = self.n;
        (0..n).any(|u| {
            let v = self.send[b * n + u];
            v != NONE && self.table.get(u, v) == max_b && self.side_max(a, b, u, v) >= max_b
        })
    }

    /// The largest a-message of the a/b component that holds the b-edge u → v: its walk goes
    /// both ways from that edge, to the path's ends or once around the cycle.
    fn side_max(&self, a: usize, b: usize, u0: usize, v0: usize) -> u64 {
        let n = self.n;
        let mut best = 0u64;
        // From sender u0: its a-edge, then that receiver's b-edge, and so on.
        let mut u = u0;
        loop {
            let v = self.send[a * n + u];
            if v == NONE {
                break;
            }
            best = best.max(self.table.get(u, v));
            let next = self.recv[b * n + v];
            if next == NONE || next == u0 {
                // The end of the path, or back at the start edge: a cycle, all seen.
                return if next == u0 { best } else { best.max(self.side_from_receiver(a, b, v0, u0)) };
            }
            u = next;
        }
        best.max(self.side_from_receiver(a, b, v0, u0))
    }

    /// The largest a-message on the walk from receiver v0 along its a-edge, its sender's
    /// b-edge, and so on (the other half of a path through the b-edge u0 → v0).
    fn side_from_receiver(&self, a: usize, b: usize, v0: usize, u0: usize) -> u64 {
        let n = self.n;
        let mut best = 0u64;
        let mut v = v0;
        loop {
            let u = self.recv[a * n + v];
            if u == NONE || u == u0 {
                break;
            }
            best = best.max(self.table.get(u, v));
            let next = self.send[b * n + u];
            if next == NONE {
                break;
            }
            v = next;
        }
        best
    }

    /// The colours as steps, largest message first.
    pub(super) fn into_schedule(self) -> Schedule {
        let n = self.n;
        let mut steps: Vec<(u64, Vec<(usize, usize)>)> = (0..self.colours)
            .map(|c| {
                let pairs: Vec<(usize, usize)> = (0..n)
                    .filter_map(|u| {
                        let v = self.send[c * n + u];
                        (v != NONE).then_some((u, v))
                    })
                    .collect();
                (self.max_of(c), pairs)
            })
            .collect();
        steps.sort_by(|x, y| y.0.cmp(&x.0).then_with(|| x.1.cmp(&y.1)));
        Schedule::normalized(n, steps.into_iter().map(|s| s.1).collect())
    }
}
