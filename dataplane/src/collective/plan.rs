//! The round/slice plan of a collective: a pure function from (group size, my rank, length,
//! slices, algorithm, kind) to the ordered list of sends and receives this rank performs.
//!
//! The executor runs the steps one after the other; a `Send` hands its bytes to a sender task
//! and never waits, a `Recv` waits for its message and reduces it into (or copies it over) its
//! range. Because sends never wait on the peer's progress (the transport buffers whole
//! messages), a plan is deadlock-free as long as every `Recv` has a matching `Send` that its
//! sender reaches without first waiting for the receiver — which the exhaustive simulation in
//! the tests checks for every group size up to 16.
//!
//! Two algorithms:
//! * **Halving** (seed 003): with P the largest power of two ≤ N, the ranks P..N−1 first fold
//!   their whole buffer into rank r−P (the usual pre-step for non-powers of two) and sit out;
//!   then log2 P rounds of recursive halving with partner `v XOR d`, d = P/2, P/4, …, 1 (the
//!   high bit first, so every rank's share stays one contiguous run of blocks and ends as block
//!   v); then recursive doubling with d = 1, 2, …, P/2 (allreduce) or a binomial gather to the
//!   root (reduce); finally the folded ranks get the result back from r−P (allreduce). Ranks are
//!   renumbered `v = (r − root) mod N` so that the root is always v = 0.
//! * **Ring**: N chunks; N−1 reduce-scatter steps to the right neighbour, then N−1 allgather
//!   steps (allreduce) or one step where every rank sends its reduced chunk to the root (reduce).
//! * **Hierarchical** (allreduce): with the ranks host by host, `per_host` on each (rank
//!   h·k + j is member j of host h), every member j > 0 sends its whole buffer to its host's
//!   leader h·k, which reduces them into its own; the H leaders run halving among themselves
//!   (leader h as rank h; the ring where H is not a power of two); each leader sends the result
//!   to its members. Every slice moves on as
//!   soon as it is complete, so the three stages overlap. Across hosts only the leaders send:
//!   each host's rails carry 2(H−1)/H of the buffer each way, where flat halving has each of the
//!   k members of a host send that much over the same rails. With `per_host` 1 it is halving; a
//!   `reduce` runs halving.
//!
//! Every message range is cut into `slices` slices, each its own message: the receiver reduces
//! slice s while slice s+1 is still on the wire, and the next round's sends start as soon as the
//! slices they carry have been reduced (see [`linearize`]). Slices nest across rounds when
//! `slices` is a power of two (a later round's slice lies inside one earlier slice), so the
//! executor can send it without copying.
//!
//! Every element is reduced at exactly one rank and only copied afterwards, so an allreduce
//! leaves bitwise-identical results on every rank whatever the floating-point order.

use std::ops::Range;

use crate::elem::Algorithm;

/// Most slices per message range: the slice index lives in the low 12 bits of a step tag.
pub const MAX_SLICES: usize = 1 << SLICE_BITS;
const SLICE_BITS: u32 = 12;
/// Most phases a plan may have (tags are 32 bits: phase above the slice bits, two reserved).
const MAX_PHASE: usize = (1 << (32 - SLICE_BITS)) - 2;

/// Which collective.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    /// Every rank ends with the reduction of all buffers.
    Allreduce,
    /// Rank `root` ends with the reduction; the other ranks' buffers are inputs only.
    Reduce { root: usize },
}

/// What a plan is computed from; every rank of a collective must pass the same values except
/// `rank`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PlanParams {
    /// Group size N ≥ 1.
    pub ranks: usize,
    /// This rank, < N.
    pub rank: usize,
    /// Buffer length in elements.
    pub len: usize,
    /// Slices per message range, in 1..=MAX_SLICES.
    pub slices: usize,
    pub algorithm: Algorithm,
    /// Ranks per host, the ranks numbered host by host (`Algorithm::Hierarchical` only; others
    /// ignore it): ≥ 1 and dividing `ranks`. 1: every rank on its own host.
    pub per_host: usize,
    pub kind: Kind,
}

/// One step of a rank's plan. Ranges are in elements; ranks are real ranks (not renumbered).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Step {
    /// Send the current contents of `range` to rank `to`.
    Send { to: usize, tag: u32, range: Range<usize> },
    /// Receive `range` from rank `from`; reduce it into the local contents, or overwrite them.
    Recv { from: usize, tag: u32, range: Range<usize>, reduce: bool },
}

/// One message of a phase, as the plan builder sees it (ranks still renumbered).
#[derive(Clone, Debug, PartialEq, Eq)]
struct Msg {
    peer: usize,
    tag: u32,
    range: Range<usize>,
    reduce: bool,
}

#[derive(Clone, Debug, Default)]
struct Phase {
    sends: Vec<Msg>,
    recvs: Vec<Msg>,
}

/// The steps rank `p.rank` performs, in order. Panics only on parameters the caller validated
/// (`ranks` ≥ 1, `rank` and `root` < `ranks`, `slices` in 1..=MAX_SLICES).
pub fn plan(p: &PlanParams) -> Vec<Step> {
    assert!(p.ranks >= 1 && p.rank < p.ranks, "rank {} of {}", p.rank, p.ranks);
    assert!((1..=MAX_SLICES).contains(&p.slices), "slices {}", p.slices);
    assert!(p.per_host >= 1 && p.ranks.is_multiple_of(p.per_host), "{} per host of {}", p.per_host, p.ranks);
    let root = match p.kind {
        Kind::Allreduce => 0,
        Kind::Reduce { root } => {
            assert!(root < p.ranks, "root {root} of {}", p.ranks);
            root
        }
    };
    if p.ranks == 1 {
        return Vec::new();
    }
    let n = p.ranks;
    let v = (p.rank + n - root) % n;
    let mine = phases(p, v);
    assert!(mine.len() <= MAX_PHASE, "{} phases", mine.len());
    linearize(&mine, v, |u| phases(p, u))
        .into_iter()
        .map(|(is_recv, m)| {
            let peer = (m.peer + root) % n;
            if is_recv {
                Step::Recv { from: peer, tag: m.tag, range: m.range, reduce: m.reduce }
            } else {
                Step::Send { to: peer, tag: m.tag, range: m.range }
            }
        })
        .collect()
}

fn tag(phase: usize, slice: usize) -> u32 {
    ((phase << SLICE_BITS) | slice) as u32
}

/// Element offset where block `b` of `blocks` starts (the last block ends at `len`).
fn bound(len: usize, blocks: usize, b: usize) -> usize {
    (len as u128 * b as u128 / blocks as u128) as usize
}

/// `range` cut into `k` nearly equal parts (empty parts included).
fn cut(range: Range<usize>, k: usize) -> Vec<Range<usize>> {
    let w = range.end - range.start;
    (0..k).map(|s| range.start + w * s / k..range.start + w * (s + 1) / k).collect()
}

/// The slices of blocks `[x, y)`: whole groups of blocks when the count divides evenly, every
/// block cut in `slices / m` when that divides evenly, otherwise the element range cut evenly.
/// With `slices` and the block counts powers of two, a smaller range's slices always lie inside
/// a larger range's slices, which is what lets the executor send without copying.
fn slice_blocks(len: usize, blocks: usize, x: usize, y: usize, slices: usize) -> Vec<Range<usize>> {
    let m = y - x;
    let b = |i| bound(len, blocks, i);
    if m.is_multiple_of(slices) {
        let g = m / slices;
        (0..slices).map(|s| b(x + s * g)..b(x + (s + 1) * g)).collect()
    } else if slices.is_multiple_of(m) {
        (x..y).flat_map(|i| cut(b(i)..b(i + 1), slices / m)).collect()
    } else {
        cut(b(x)..b(y), slices)
    }
}

/// Messages for `ranges` (empty ones dropped), tagged by their index within the phase.
fn msgs(peer: usize, phase: usize, ranges: Vec<Range<usize>>, reduce: bool) -> Vec<Msg> {
    ranges
        .into_iter()
        .enumerate()
        .filter(|(_, r)| !r.is_empty())
        .map(|(s, range)| Msg { peer, tag: tag(phase, s), range, reduce })
        .collect()
}

/// Every phase of renumbered rank `v`, sends and receives unordered within a phase.
fn phases(p: &PlanParams, v: usize) -> Vec<Phase> {
    match p.algorithm {
        // `auto` is resolved by the communicator before a plan is made (`cost`); a plan asked
        // for it directly is the seed's.
        Algorithm::Hierarchical if p.kind == Kind::Allreduce && p.per_host > 1 => hierarchical(p, v),
        Algorithm::Halving | Algorithm::Auto | Algorithm::Hierarchical => halving(p, v),
        Algorithm::Ring => ring(p, v),
    }
}

/// The algorithm the leaders of `hosts` hosts run in a hierarchical allreduce.
pub fn inner_algorithm(hosts: usize) -> Algorithm {
    if hosts.is_power_of_two() { Algorithm::Halving } else { Algorithm::Ring }
}

/// Rank v's phases of the hierarchical allreduce (see the module documentation): phase 0
/// gathers into the leaders, then the leaders' allreduce ([`inner_algorithm`]), the last phase
/// sends the result back.
fn hierarchical(p: &PlanParams, v: usize) -> Vec<Phase> {
    let (k, len, s) = (p.per_host, p.len, p.slices);
    let hosts = p.ranks / k;
    let (h, j) = (v / k, v % k);
    let leader = h * k;
    // The leaders' allreduce, leader h as rank h: halving for a power of two of hosts, else
    // the ring (halving's fold would send the whole buffer across twice more). The gather cuts
    // the buffer as the inner algorithm's first sends do and the way back as its last
    // receives, so every send here nests in a piece the rank holds (no copy).
    let sub = PlanParams { ranks: hosts, rank: h, algorithm: inner_algorithm(hosts), per_host: 1, ..*p };
    let (inner, first, whole) = if hosts.is_power_of_two() {
        let pw = hosts;
        let whole: Vec<Range<usize>> = (0..pw).flat_map(|b| slice_blocks(len, pw, b, b + 1, s)).collect();
        (halving(&sub, h), slice_blocks(len, pw, 0, pw, s), whole)
    } else {
        let chunks: Vec<Range<usize>> =
            (0..hosts).flat_map(|c| cut(bound(len, hosts, c)..bound(len, hosts, c + 1), s)).collect();
        (ring(&sub, h), chunks.clone(), chunks)
    };
    let last = inner.len() + 1;
    let (mut gather, mut back) = (Phase::default(), Phase::default());
    if j == 0 {
        for m in leader + 1..leader + k {
            gather.recvs.extend(msgs(m, 0, first.clone(), true));
            back.sends.extend(msgs(m, last, whole.clone(), false));
        }
    } else {
        gather.sends = msgs(leader, 0, first, true);
        back.recvs = msgs(leader, last, whole, false);
    }
    let across = |ms: Vec<Msg>| -> Vec<Msg> {
        ms.into_iter().map(|m| Msg { peer: m.peer * k, tag: m.tag + (1 << SLICE_BITS), ..m }).collect()
    };
    let mut out = Vec::with_capacity(inner.len() + 2);
    out.push(gather);
    for ph in inner {
        out.push(if j == 0 { Phase { sends: across(ph.sends), recvs: across(ph.recvs) } } else { Phase::default() });
    }
    out.push(back);
    out
}

fn halving(p: &PlanParams, v: usize) -> Vec<Phase> {
    let (n, len, s) = (p.ranks, p.len, p.slices);
    let pw = 1usize << (usize::BITS - 1 - n.leading_zeros());
    let logp = pw.trailing_zeros() as usize;
    let mut out = vec![Phase::default(); 2 * logp + 2];
    // The whole buffer, cut as the blocks of the power-of-two group: the fold and unfold move
    // it in the slices that round 0 and the last doubling round use.
    let whole = || (0..pw).flat_map(|b| slice_blocks(len, pw, b, b + 1, s)).collect::<Vec<_>>();
    // Phase 0: fold the extra ranks in.
    if v >= pw {
        out[0].sends = msgs(v - pw, 0, slice_blocks(len, pw, 0, pw, s), true);
        if p.kind == Kind::Allreduce {
            out[2 * logp + 1].recvs = msgs(v - pw, 2 * logp + 1, whole(), false);
        }
        return out;
    }
    if v + pw < n {
        out[0].recvs = msgs(v + pw, 0, slice_blocks(len, pw, 0, pw, s), true);
    }
    // Phases 1..=logp: recursive halving, partner distance P/2 down to 1.
    let (mut lo, mut hi) = (0, pw);
    for k in 0..logp {
        let d = pw >> (k + 1);
        let partner = v ^ d;
        let mid = lo + (hi - lo) / 2;
        let (keep, give) = if v & d == 0 { ((lo, mid), (mid, hi)) } else { ((mid, hi), (lo, mid)) };
        let ph = &mut out[1 + k];
        ph.sends = msgs(partner, 1 + k, slice_blocks(len, pw, give.0, give.1, s), true);
        ph.recvs = msgs(partner, 1 + k, slice_blocks(len, pw, keep.0, keep.1, s), true);
        (lo, hi) = keep;
    }
    debug_assert_eq!((lo, hi), (v, v + 1));
    // The slices of blocks [x, y) in the collection phases: each block in the slices its
    // owner reduced it in, so a forwarded slice is always one piece the executor holds.
    let held = |x: usize, y: usize| (x..y).flat_map(|b| slice_blocks(len, pw, b, b + 1, s)).collect::<Vec<_>>();
    let base = 1 + logp;
    match p.kind {
        Kind::Allreduce => {
            for k in 0..logp {
                let d = 1 << k;
                let partner = v ^ d;
                // The partner holds the aligned run of d blocks next to ours.
                let (plo, phi) = if lo & d == 0 { (lo + d, hi + d) } else { (lo - d, hi - d) };
                // After round k both hold the aligned run of 2d blocks around them.
                let ph = &mut out[base + k];
                ph.sends = msgs(partner, base + k, held(lo, hi), false);
                ph.recvs = msgs(partner, base + k, held(plo, phi), false);
                (lo, hi) = (lo.min(plo), hi.max(phi));
            }
            if v + pw < n {
                out[2 * logp + 1].sends = msgs(v + pw, 2 * logp + 1, whole(), false);
            }
        }
        Kind::Reduce { .. } => {
            for k in 0..logp {
                let d = 1 << k;
                let low_bits = v & (2 * d - 1);
                if low_bits == d {
                    out[base + k].sends = msgs(v - d, base + k, held(lo, hi), false);
                    break;
                }
                if low_bits == 0 {
                    out[base + k].recvs = msgs(v + d, base + k, held(v + d, v + 2 * d), false);
                    hi = v + 2 * d;
                }
            }
        }
    }
    out
}

fn ring(p: &PlanParams, v: usize) -> Vec<Phase> {
    let (n, len, s) = (p.ranks, p.len, p.slices);
    let chunk = |c: usize| {
        let c = c % n;
        cut(bound(len, n, c)..bound(len, n, c + 1), s)
    };
    let right = (v + 1) % n;
    let left = (v + n - 1) % n;
    let mut out = vec![Phase::default(); 2 * n - 1];
    for (k, ph) in out.iter_mut().enumerate().take(n - 1) {
        ph.sends = msgs(right, k, chunk(v + n - k), true);
        ph.recvs = msgs(left, k, chunk(v + 2 * n - k - 1), true);
    }
    // After the reduce-scatter rank v holds the reduced chunk v+1.
    match p.kind {
        Kind::Allreduce => {
            for k in 0..n - 1 {
                let ph = &mut out[n - 1 + k];
                ph.sends = msgs(right, n - 1 + k, chunk(v + 1 + n - k), false);
                ph.recvs = msgs(left, n - 1 + k, chunk(v + n - k), false);
            }
        }
        Kind::Reduce { .. } => {
            // The root is v = 0 and holds chunk 1; chunk c is reduced at v = c − 1.
            if v == 0 {
                out[n - 1].recvs = (2..=n).flat_map(|c| msgs(c - 1, n - 1, chunk(c), false)).collect();
            } else {
                out[n - 1].sends = msgs(0, n - 1, chunk(v + 1), false);
            }
        }
    }
    out
}

fn overlaps(a: &Range<usize>, b: &Range<usize>) -> bool {
    a.start < b.end && b.start < a.end
}

/// The receiving order rank `v` wants in phase `q`: first the slices its own next sends need,
/// so that the round's last reductions overlap the next round's first exchange (the seed's
/// "the last segment of a round is reduced while the first segment of the next round is
/// exchanged").
fn recv_order(phases: &[Phase], q: usize) -> Vec<Msg> {
    let next: Vec<&Msg> =
        phases[q + 1..].iter().find(|ph| !ph.sends.is_empty()).map(|ph| ph.sends.iter().collect()).unwrap_or_default();
    let mut rs = phases[q].recvs.clone();
    rs.sort_by_key(|m| {
        let needed = next.iter().any(|s| overlaps(&s.range, &m.range));
        (!needed, m.range.start, m.peer)
    });
    rs
}

/// Rank `v`'s phases as one sequence of (is a receive, message): receives in phase order
/// (each phase in the order [`recv_order`] picks), and each send placed as early as possible —
/// right after the last receive of an earlier phase that writes into its range — in the order
/// its receiver wants. `phases_of(u)` gives rank u's phases (to learn a receiver's order).
fn linearize(mine: &[Phase], v: usize, phases_of: impl Fn(usize) -> Vec<Phase>) -> Vec<(bool, Msg)> {
    let recvs: Vec<(usize, Msg)> =
        (0..mine.len()).flat_map(|q| recv_order(mine, q).into_iter().map(move |m| (q, m))).collect();
    let mut theirs: std::collections::HashMap<usize, Vec<Phase>> = Default::default();
    let mut sends: Vec<(usize, Msg)> = Vec::new();
    for (q, ph) in mine.iter().enumerate() {
        let mut peers: Vec<usize> = ph.sends.iter().map(|m| m.peer).collect();
        peers.sort_unstable();
        peers.dedup();
        let before = sends.len();
        for peer in peers {
            let their = theirs.entry(peer).or_insert_with(|| phases_of(peer));
            // The order the receiver will wait in, restricted to what comes from us.
            for m in recv_order(their, q) {
                if m.peer == v {
                    sends.push((q, Msg { peer, reduce: false, ..m }));
                }
            }
        }
        debug_assert_eq!(sends.len() - before, ph.sends.len(), "phase {q} of rank {v}");
    }
    let mut out = Vec::with_capacity(recvs.len() + sends.len());
    let mut sent = vec![false; sends.len()];
    let mut flush = |done: usize, out: &mut Vec<(bool, Msg)>| {
        // `done` receives are emitted; a send is ready once no later receive of an earlier
        // phase overlaps it.
        for (i, (q, m)) in sends.iter().enumerate() {
            if sent[i] {
                continue;
            }
            let blocked = recvs[done..].iter().any(|(rq, r)| rq < q && overlaps(&r.range, &m.range));
            if !blocked {
                sent[i] = true;
                out.push((false, m.clone()));
            }
        }
    };
    for (i, (_, r)) in recvs.iter().enumerate() {
        flush(i, &mut out);
        out.push((true, r.clone()));
    }
    flush(recvs.len(), &mut out);
    debug_assert!(sent.iter().all(|&s| s));
    out
}

#[cfg(test)]
mod tests {
    use std::collections::{HashMap, HashSet};

    use super::*;

    /// A symbolic element: which ranks' inputs it contains, and which reduction made it (an
    /// input is made by its rank; a copy keeps the maker), so equal makers mean equal bits.
    #[derive(Clone, Copy, Debug, PartialEq, Eq)]
    struct Sym {
        mask: u32,
        maker: u64,
    }

    /// Runs every rank's plan on symbolic data (`per_host` ranks per host), sends never
    /// waiting, receives waiting for their message; returns every rank's final buffer, or why it
    /// went wrong.
    fn simulate_on(
        n: usize,
        per_host: usize,
        len: usize,
        slices: usize,
        algorithm: Algorithm,
        kind: Kind,
    ) -> Result<Vec<Vec<Sym>>, String> {
        let plans: Vec<Vec<Step>> =
            (0..n).map(|rank| plan(&PlanParams { ranks: n, rank, len, slices, algorithm, kind, per_host })).collect();
        let mut bufs: Vec<Vec<Sym>> = (0..n).map(|r| vec![Sym { mask: 1 << r, maker: r as u64 }; len]).collect();
        let mut pc = vec![0usize; n];
        let mut wire: HashMap<(usize, usize, u32), Vec<Sym>> = HashMap::new();
        let mut next_maker = n as u64;
        loop {
            let mut progressed = false;
            for r in 0..n {
                while let Some(step) = plans[r].get(pc[r]) {
                    match step {
                        Step::Send { to, tag, range } => {
                            let key = (r, *to, *tag);
                            if wire.insert(key, bufs[r][range.clone()].to_vec()).is_some() {
                                return Err(format!("duplicate message {key:?}"));
                            }
                        }
                        Step::Recv { from, tag, range, reduce } => {
                            let Some(data) = wire.remove(&(*from, r, *tag)) else {
                                break;
                            };
                            if data.len() != range.len() {
                                return Err(format!("rank {r} tag {tag}: {} elements for {range:?}", data.len()));
                            }
                            for (i, d) in range.clone().zip(data) {
                                if *reduce {
                                    let mine = bufs[r][i];
                                    if mine.mask & d.mask != 0 {
                                        return Err(format!(
                                            "rank {r} element {i}: {:b} counted twice with {:b}",
                                            mine.mask, d.mask
                                        ));
                                    }
                                    bufs[r][i] = Sym { mask: mine.mask | d.mask, maker: next_maker };
                                    next_maker += 1;
                                } else {
                                    bufs[r][i] = d;
                                }
                            }
                        }
                    }
                    pc[r] += 1;
                    progressed = true;
                }
            }
            if (0..n).all(|r| pc[r] == plans[r].len()) {
                break;
            }
            if !progressed {
                return Err(format!("deadlock at steps {pc:?}"));
            }
        }
        if !wire.is_empty() {
            return Err(format!("{} messages never received", wire.len()));
        }
        Ok(bufs)
    }

    const LENS: &[usize] = &[0, 1, 2, 3, 5, 7, 8, 13, 16, 31, 64, 100];

    fn check_all(algorithm: Algorithm, max_n: usize) {
        check_all_on(algorithm, max_n, |_| vec![1]);
    }

    /// Every group size up to `max_n`, with every ranks-per-host `per_host(n)` gives.
    fn check_all_on(algorithm: Algorithm, max_n: usize, per_host: impl Fn(usize) -> Vec<usize>) {
        for (n, k) in (1..=max_n).flat_map(|n| per_host(n).into_iter().map(move |k| (n, k))) {
            let full = (1u32 << n) - 1;
            let mut lens: Vec<usize> = LENS.to_vec();
            lens.extend([n - 1, n, n + 1, 2 * n + 1, 4 * n - 1]);
            for &len in &lens {
                for slices in [1, 3, 4] {
                    let bufs = simulate_on(n, k, len, slices, algorithm, Kind::Allreduce).unwrap_or_else(|e| {
                        panic!("{algorithm:?} allreduce n={n} per_host={k} len={len} slices={slices}: {e}")
                    });
                    for (r, b) in bufs.iter().enumerate() {
                        for (i, x) in b.iter().enumerate() {
                            assert_eq!(x.mask, full, "{algorithm:?} n={n} len={len} slices={slices} rank {r} elem {i}");
                            assert_eq!(
                                *x, bufs[0][i],
                                "{algorithm:?} n={n} len={len} slices={slices}: rank {r} elem {i} made elsewhere"
                            );
                        }
                    }
                    let roots: Vec<usize> = if n <= 9 { (0..n).collect() } else { vec![0, n / 2, n - 1] };
                    for root in roots {
                        let bufs =
                            simulate_on(n, k, len, slices, algorithm, Kind::Reduce { root }).unwrap_or_else(|e| {
                                panic!("{algorithm:?} reduce root={root} n={n} len={len} slices={slices}: {e}")
                            });
                        assert!(
                            bufs[root].iter().all(|x| x.mask == full),
                            "{algorithm:?} reduce n={n} len={len} slices={slices} root={root}"
                        );
                    }
                }
            }
        }
    }

    #[test]
    fn halving_reduces_every_element_once_for_n_up_to_16() {
        check_all(Algorithm::Halving, 16);
    }

    #[test]
    fn ring_reduces_every_element_once_for_n_up_to_16() {
        check_all(Algorithm::Ring, 16);
    }

    /// Every split of every group up to 16 into equal hosts, non-powers of two of hosts and of
    /// members included (one host: gather and send back; one member per host: halving).
    #[test]
    fn hierarchical_reduces_every_element_once_for_every_split_into_hosts() {
        check_all_on(Algorithm::Hierarchical, 16, |n| (1..=n).filter(|k| n.is_multiple_of(*k)).collect());
    }

    /// Across hosts only the leaders send, and each host's bytes out are what halving among
    /// the hosts sends: 4 ranks on 2 hosts move half the buffer per host each way where flat
    /// halving moves the whole.
    #[test]
    fn hierarchical_sends_across_hosts_only_from_leaders() {
        let (n, k, len) = (8, 2, 1 << 16);
        let host_out = |algorithm: Algorithm| -> Vec<usize> {
            let mut out = vec![0; n / k];
            for rank in 0..n {
                let p = PlanParams { ranks: n, rank, len, slices: 4, algorithm, kind: Kind::Allreduce, per_host: k };
                for s in plan(&p) {
                    if let Step::Send { to, range, .. } = s
                        && to / k != rank / k
                    {
                        assert!(algorithm != Algorithm::Hierarchical || rank % k == 0, "rank {rank} sent across");
                        out[rank / k] += range.len();
                    }
                }
            }
            out
        };
        // Four hosts: halving among them sends 2·(3/4) of the buffer per host.
        assert_eq!(host_out(Algorithm::Hierarchical), vec![len * 3 / 2; 4]);
        assert_eq!(host_out(Algorithm::Halving), vec![len * 3; 4], "both members of a host send across");
    }

    #[test]
    fn every_message_has_a_distinct_tag_per_sender_and_receiver() {
        for algorithm in [Algorithm::Halving, Algorithm::Ring, Algorithm::Hierarchical] {
            for n in 1..=12 {
                let mut seen = HashSet::new();
                let per_host = if n % 3 == 0 {
                    3
                } else if n % 2 == 0 {
                    2
                } else {
                    1
                };
                for rank in 0..n {
                    let steps = plan(&PlanParams {
                        ranks: n,
                        rank,
                        len: 1000,
                        slices: 4,
                        algorithm,
                        kind: Kind::Allreduce,
                        per_host,
                    });
                    for s in steps {
                        if let Step::Send { to, tag, .. } = s {
                            assert!(seen.insert((rank, to, tag)), "{algorithm:?} n={n}");
                        }
                    }
                }
            }
        }
    }

    #[test]
    fn power_of_two_slices_nest_so_sends_need_no_copy() {
        // Every send range lies inside one piece the rank holds: its original buffer, or one
        // range a receive wrote (what the executor's rope holds), for power-of-two slices.
        for algorithm in [Algorithm::Halving, Algorithm::Ring, Algorithm::Hierarchical] {
            for n in 2..=16 {
                for slices in [1, 2, 4, 8] {
                    for len in [4096, 1_000_003] {
                        for rank in 0..n {
                            let per_host = if n % 4 == 0 {
                                4
                            } else if n % 3 == 0 {
                                3
                            } else {
                                1
                            };
                            let steps = plan(&PlanParams {
                                ranks: n,
                                rank,
                                len,
                                slices,
                                algorithm,
                                kind: Kind::Allreduce,
                                per_host,
                            });
                            let mut pieces: Vec<Range<usize>> = std::iter::once(0..len).collect();
                            for s in steps {
                                match s {
                                    Step::Recv { range, .. } => {
                                        let mut next = Vec::new();
                                        for p in pieces {
                                            if !overlaps(&p, &range) {
                                                next.push(p);
                                                continue;
                                            }
                                            if p.start < range.start {
                                                next.push(p.start..range.start);
                                            }
                                            if range.end < p.end {
                                                next.push(range.end..p.end);
                                            }
                                        }
                                        next.push(range);
                                        pieces = next;
                                    }
                                    Step::Send { range, .. } => assert!(
                                        pieces.iter().any(|p| p.start <= range.start && range.end <= p.end),
                                        "{algorithm:?} n={n} slices={slices} len={len} rank {rank}: {range:?} spans pieces"
                                    ),
                                }
                            }
                        }
                    }
                }
            }
        }
    }

    #[test]
    fn the_seed_example_two_slices_pairs_by_xor() {
        // N = 4, allreduce: the first round pairs 0↔2 and 1↔3 (distance P/2 first), two slices.
        let steps = plan(&PlanParams {
            ranks: 4,
            rank: 0,
            len: 16,
            slices: 2,
            algorithm: Algorithm::Halving,
            kind: Kind::Allreduce,
            per_host: 1,
        });
        assert_eq!(
            steps[..4],
            [
                // Rank 2 sends [12, 16) in round two, so it wants that slice first.
                Step::Send { to: 2, tag: tag(1, 1), range: 12..16 },
                Step::Send { to: 2, tag: tag(1, 0), range: 8..12 },
                // Rank 0 sends [4, 8) in round two, so it reduces that slice first...
                Step::Recv { from: 2, tag: tag(1, 1), range: 4..8, reduce: true },
                // ...and sends it on to rank 1 while it reduces [0, 4).
                Step::Send { to: 1, tag: tag(2, 0), range: 4..6 },
            ]
        );
        assert_eq!(steps[4], Step::Send { to: 1, tag: tag(2, 1), range: 6..8 });
        assert_eq!(steps[5], Step::Recv { from: 2, tag: tag(1, 0), range: 0..4, reduce: true });
    }
}
