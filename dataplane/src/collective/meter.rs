//! What the cost model is fed with: a [`LinkMeter`] that collectives and exchanges of one
//! endpoint report their messages to (bytes and seconds from hand-over to acknowledgement, per
//! peer), whole direct exchanges, and reductions; and `agree`, the round in which every member
//! of a call tells every other what it measured (its model, and its rails' measured rates, which
//! an exchange stripes its messages by), so all decide from the same model.
//!
//! α and the per-message rate are fitted per peer by least squares to `t = α + b / rate` over
//! the peer's latest [`SAMPLES`] messages (a peer whose messages all had about one size gives
//! its rate only, α staying at the prior). A rank's model toward a group is the slowest of its
//! peers in the group ([`LinkModel::combine`]). The direct rate and the reduction rate are
//! moving averages over calls.

use std::collections::{HashMap, VecDeque};
use std::net::SocketAddr;
use std::sync::Mutex;

use bytes::Bytes;
use tokio::task::JoinSet;

use super::cost::{ExchangeAlgorithm, LinkModel, Measured};
use crate::elem::Algorithm;
use crate::endpoint::Endpoint;
use crate::error::{Error, Result};
use crate::peer_id::PeerId;

/// Message samples kept per peer.
pub const SAMPLES: usize = 64;
/// Messages below this many bytes are not samples of the rate (their time is all α).
const RATE_MIN_BYTES: u64 = 64 << 10;
/// Weight of a new call in the moving averages.
const EWMA: f64 = 0.3;

/// Measurements of one endpoint's links, shared by every collective on it (the worker keeps
/// one for its data plane). Cheap to update: a lock per sample.
#[derive(Debug, Default)]
pub struct LinkMeter {
    state: Mutex<State>,
}

#[derive(Debug, Default)]
struct State {
    peers: HashMap<PeerId, VecDeque<(u64, f64)>>,
    direct_rate: Option<f64>,
    reduce_rate: Option<f64>,
    /// Per (members, size class): what each allreduce algorithm's calls took.
    allreduce: HashMap<(usize, u32), Calls<3>>,
    /// Per (members, size class of the busiest member's bytes): what each all-to-all
    /// algorithm's calls took.
    alltoall: HashMap<(usize, u32), Calls<4>>,
}

/// One world and size class's calls of a collective: each algorithm's time (a moving average
/// over consecutive calls of it), how many of each ran, and which ran last.
#[derive(Debug)]
struct Calls<const K: usize> {
    secs: Measured<K>,
    runs: [u32; K],
    last: Option<usize>,
}

impl<const K: usize> Default for Calls<K> {
    fn default() -> Self {
        Calls { secs: Measured::NONE, runs: [0; K], last: None }
    }
}

impl<const K: usize> Calls<K> {
    /// Algorithm `i` ran in `secs`: the first call of it is not a sample (it opens connections
    /// and faults buffers in); a later one sets its figure when another algorithm ran last, else
    /// moves it there by the moving average; the others' figures shrink by [`FORGET`].
    fn ran(&mut self, i: usize, secs: f64) {
        for (_, v) in self.secs.0.iter_mut().enumerate().filter(|&(j, _)| j != i) {
            *v *= 1.0 - FORGET;
        }
        self.runs[i] = self.runs[i].saturating_add(1);
        if self.runs[i] > 1 {
            let old = self.secs.at(i).filter(|_| self.last == Some(i));
            self.secs.set_at(i, old.map_or(secs, |o| ewma(Some(o), secs)));
        }
        self.last = Some(i);
    }
}

/// Records a call of algorithm `i` in `secs` under `key`, unless the map is full of other keys.
fn record<const K: usize>(map: &mut HashMap<(usize, u32), Calls<K>>, key: (usize, u32), i: usize, secs: f64) {
    if !(secs.is_finite() && secs > 0.0) || (!map.contains_key(&key) && map.len() >= MAX_CLASSES) {
        return;
    }
    map.entry(key).or_default().ran(i, secs);
}

/// (members, size class) pairs kept at most; past it new ones are not learnt (a group's worlds
/// and sizes are few; this bounds a caller that tries every size).
const MAX_CLASSES: usize = 1024;

/// Each call of one algorithm makes the others' figures this much shorter: one that measured
/// slower is tried again after a while (24 % slower: some 21 calls later), so a figure taken
/// in a bad moment, or before the machine changed, does not rule it out for good, at the cost
/// of about one slower call in twenty.
const FORGET: f64 = 0.01;

/// The size class of a call of `bytes`: calls within a factor of two share their corrections.
pub(crate) fn size_class(bytes: u64) -> u32 {
    u64::BITS - bytes.max(1).leading_zeros()
}

impl LinkMeter {
    pub fn new() -> LinkMeter {
        LinkMeter::default()
    }

    /// One message of `bytes` to `peer` took `secs` from hand-over to acknowledgement, alone
    /// on this rank's links (a schedule's step, a plan's send).
    pub fn message(&self, peer: PeerId, bytes: u64, secs: f64) {
        if !(secs.is_finite() && secs > 0.0) {
            return;
        }
        let mut s = self.state.lock().expect("meter lock");
        let q = s.peers.entry(peer).or_default();
        if q.len() == SAMPLES {
            q.pop_front();
        }
        q.push_back((bytes, secs));
    }

    /// A whole exchange with every message at once: its busiest member moved `bytes` in `secs`.
    pub fn direct(&self, bytes: u64, secs: f64) {
        if bytes >= RATE_MIN_BYTES && secs > 0.0 {
            let mut s = self.state.lock().expect("meter lock");
            s.direct_rate = Some(ewma(s.direct_rate, bytes as f64 / secs));
        }
    }

    /// The reduction kernels reduced `bytes` in `secs`.
    pub fn reduced(&self, bytes: u64, secs: f64) {
        if bytes >= RATE_MIN_BYTES && secs > 0.0 {
            let mut s = self.state.lock().expect("meter lock");
            s.reduce_rate = Some(ewma(s.reduce_rate, bytes as f64 / secs));
        }
    }

    /// An allreduce of `bytes` over `members` ran `algorithm` in `secs`. The first call of an
    /// algorithm at a world and size class is not a sample (it opens connections and faults
    /// buffers in); a later one sets its figure when another algorithm ran last, else moves it
    /// there by the moving average; the other algorithms' figures shrink by [`FORGET`].
    pub fn allreduce_ran(&self, members: usize, bytes: u64, algorithm: Algorithm, secs: f64) {
        let mut s = self.state.lock().expect("meter lock");
        record(&mut s.allreduce, (members, size_class(bytes)), Measured::index(algorithm), secs);
    }

    /// An all-to-all over `members` whose busiest member moves `busiest` bytes ran `algorithm`
    /// in `secs` (this member's time of the exchange, without the agreement round), kept as
    /// [`allreduce_ran`](Self::allreduce_ran) keeps an allreduce's.
    pub fn alltoall_ran(&self, members: usize, busiest: u64, algorithm: ExchangeAlgorithm, secs: f64) {
        let mut s = self.state.lock().expect("meter lock");
        record(&mut s.alltoall, (members, size_class(busiest)), Measured::exchange_index(algorithm), secs);
    }

    /// What each all-to-all algorithm's calls took over `members` at this size class of the
    /// busiest member's bytes (none where not measured).
    pub fn alltoall_measured(&self, members: usize, busiest: u64) -> Measured<4> {
        let s = self.state.lock().expect("meter lock");
        s.alltoall.get(&(members, size_class(busiest))).map_or(Measured::NONE, |c| c.secs)
    }

    /// What each allreduce algorithm's calls of `bytes` over `members` took (none where it has
    /// not been measured at that world and size class).
    pub fn allreduce_measured(&self, members: usize, bytes: u64) -> Measured {
        let s = self.state.lock().expect("meter lock");
        s.allreduce.get(&(members, size_class(bytes))).map_or(Measured::NONE, |c| c.secs)
    }

    /// This rank's model toward `peers`: the slowest fitted peer (peers never measured are
    /// left out; with none measured, the prior), the direct and reduction averages.
    pub fn model(&self, peers: &[PeerId]) -> LinkModel {
        let s = self.state.lock().expect("meter lock");
        let fitted: Vec<LinkModel> =
            peers.iter().filter_map(|p| s.peers.get(p)).filter_map(|q| fit(q.iter().copied())).collect();
        let mut m = if fitted.is_empty() { LinkModel::PRIOR } else { LinkModel::combine(&fitted) };
        if let Some(d) = s.direct_rate {
            m.direct_rate = d;
        } else if m.samples > 0 {
            // Not measured: assume all-at-once reaches what the prior says of one link,
            // relative to the measured per-message rate.
            m.direct_rate = m.rate * LinkModel::PRIOR.direct_rate / LinkModel::PRIOR.rate;
        }
        if let Some(r) = s.reduce_rate {
            m.reduce_rate = r;
        }
        m
    }
}

fn ewma(old: Option<f64>, new: f64) -> f64 {
    old.map_or(new, |o| (1.0 - EWMA) * o + EWMA * new)
}

/// `t = α + b / rate` fitted to `(bytes, secs)` samples; `None` without a sample large enough
/// to show a rate.
pub fn fit(samples: impl Iterator<Item = (u64, f64)> + Clone) -> Option<LinkModel> {
    let n = samples.clone().count() as f64;
    let big: Vec<(f64, f64)> =
        samples.clone().filter(|&(b, _)| b >= RATE_MIN_BYTES).map(|(b, t)| (b as f64, t)).collect();
    if big.is_empty() {
        return None;
    }
    let (sx, sy) = samples.clone().fold((0.0, 0.0), |(x, y), (b, t)| (x + b as f64, y + t));
    let (mx, my) = (sx / n, sy / n);
    let (sxx, sxy) = samples
        .clone()
        .fold((0.0, 0.0), |(xx, xy), (b, t)| (xx + (b as f64 - mx).powi(2), xy + (b as f64 - mx) * (t - my)));
    let prior = LinkModel::PRIOR;
    let slope = if sxx > 0.0 { sxy / sxx } else { 0.0 };
    let intercept = my - slope * mx;
    let (alpha, rate) = if slope > 0.0 && intercept > 0.0 && n >= 4.0 {
        (intercept, 1.0 / slope)
    } else {
        // One size only, or a fit that makes no sense: the rate of the large messages with
        // the prior's α taken off (never below a tenth of their time).
        let (b, t) = big.iter().fold((0.0, 0.0), |(b, t), &(x, y)| (b + x, t + (y - prior.alpha).max(y / 10.0)));
        (prior.alpha, b / t)
    };
    Some(LinkModel { alpha, rate, direct_rate: prior.direct_rate, reduce_rate: prior.reduce_rate, samples: n as u32 })
}

/// The most rails a member's agreed rates may list.
pub const MAX_RAILS: usize = 64;

/// What one member tells the others in `agree`: its link model, its rails' measured rates
/// (bytes/s in rail order, `None` for a rail not measured yet) and what its own calls of each
/// all-to-all algorithm took at the call's world and size class.
#[derive(Clone, Debug, PartialEq)]
pub struct Agreed {
    pub model: LinkModel,
    pub rails: Vec<Option<f64>>,
    pub measured: Measured<4>,
}

impl Agreed {
    /// The model's bytes, the number of rails (one byte), each rail's rate (f64, 0 when not
    /// measured), the measured figures.
    pub fn to_bytes(&self) -> Vec<u8> {
        let rails = &self.rails[..self.rails.len().min(MAX_RAILS)];
        let mut b = Vec::with_capacity(LinkModel::WIRE_LEN + 1 + 8 * rails.len() + Measured::<4>::WIRE_LEN);
        b.extend_from_slice(&self.model.to_bytes());
        b.push(rails.len() as u8);
        for r in rails {
            b.extend_from_slice(&r.unwrap_or(0.0).to_le_bytes());
        }
        b.extend_from_slice(&self.measured.to_bytes());
        b
    }

    /// `None` unless `b` is exactly a model, as many finite, non-negative rates as it says (at
    /// most [`MAX_RAILS`]) and the measured figures.
    pub fn from_bytes(b: &[u8]) -> Option<Agreed> {
        let model = LinkModel::from_bytes(b.get(..LinkModel::WIRE_LEN)?)?;
        let count = usize::from(*b.get(LinkModel::WIRE_LEN)?);
        let rest = &b[LinkModel::WIRE_LEN + 1..];
        if count > MAX_RAILS || rest.len() != 8 * count + Measured::<4>::WIRE_LEN {
            return None;
        }
        let (rates, measured) = rest.split_at(8 * count);
        let rails = rates
            .chunks_exact(8)
            .map(|c| {
                let v = f64::from_le_bytes(c.try_into().expect("8 bytes"));
                (v.is_finite() && v >= 0.0).then_some((v > 0.0).then_some(v))
            })
            .collect::<Option<Vec<_>>>()?;
        Some(Agreed { model, rails, measured: Measured::from_bytes(measured)? })
    }
}

/// Every member's model and rail rates, in rank order: each member sends its own to every
/// other under `tag` and receives theirs. Fails when a peer's does not arrive or is not one;
/// callers run it under their abort handling.
pub(crate) async fn agree(
    endpoint: &std::sync::Arc<Endpoint>,
    ranks: &[Vec<SocketAddr>],
    ids: &[PeerId],
    me: usize,
    tag: u64,
    mine: Agreed,
) -> Result<Vec<Agreed>> {
    let got = exchange(endpoint, ranks, ids, me, tag, Bytes::from(mine.to_bytes())).await?;
    got.into_iter()
        .enumerate()
        .map(|(r, b)| match b {
            None => Ok(mine.clone()),
            Some(b) => Agreed::from_bytes(&b).ok_or_else(|| {
                Error::Protocol(format!("rank {r} sent {} bytes that are not a link model and rail rates", b.len()))
            }),
        })
        .collect()
}

/// [`agree`] on several models per member (the same count from each: toward the members on
/// other hosts and toward those on its own, say) and its allreduce figures ([`Measured`]): every
/// member's, in rank order.
pub(crate) async fn agree_many(
    endpoint: &std::sync::Arc<Endpoint>,
    ranks: &[Vec<SocketAddr>],
    ids: &[PeerId],
    me: usize,
    tag: u64,
    mine: &[LinkModel],
    measured: Measured,
) -> Result<Vec<(Vec<LinkModel>, Measured)>> {
    let mut bytes: Vec<u8> = mine.iter().flat_map(|m| m.to_bytes()).collect();
    bytes.extend_from_slice(&measured.to_bytes());
    let got = exchange(endpoint, ranks, ids, me, tag, Bytes::from(bytes)).await?;
    let models_len = mine.len() * LinkModel::WIRE_LEN;
    got.into_iter()
        .enumerate()
        .map(|(r, b)| {
            let Some(b) = b else { return Ok((mine.to_vec(), measured)) };
            let bad = || {
                Error::Protocol(format!(
                    "rank {r} sent {} bytes that are not {} link models and the allreduce figures",
                    b.len(),
                    mine.len()
                ))
            };
            if b.len() != models_len + Measured::<3>::WIRE_LEN {
                return Err(bad());
            }
            let models = b[..models_len]
                .chunks(LinkModel::WIRE_LEN)
                .map(LinkModel::from_bytes)
                .collect::<Option<Vec<_>>>()
                .ok_or_else(bad)?;
            Ok((models, Measured::from_bytes(&b[models_len..]).ok_or_else(bad)?))
        })
        .collect()
}

/// Sends `bytes` to every other member under `tag` and receives each one's: `None` at `me`.
async fn exchange(
    endpoint: &std::sync::Arc<Endpoint>,
    ranks: &[Vec<SocketAddr>],
    ids: &[PeerId],
    me: usize,
    tag: u64,
    bytes: Bytes,
) -> Result<Vec<Option<Bytes>>> {
    let mut sends = JoinSet::new();
    for (r, addrs) in ranks.iter().enumerate().filter(|&(r, _)| r != me) {
        let (ep, addrs, b) = (endpoint.clone(), addrs.clone(), bytes.clone());
        sends.spawn(async move { ep.send(&addrs, tag, b).await.map_err(|e| (r, e)) });
    }
    let mut got: Vec<Option<Bytes>> = vec![None; ranks.len()];
    for (r, id) in ids.iter().enumerate().filter(|&(r, _)| r != me) {
        got[r] = Some(endpoint.recv(*id, tag).await?.freeze());
    }
    while let Some(r) = sends.join_next().await {
        r.map_err(|e| Error::Peer(format!("model send task: {e}")))?
            .map_err(|(r, e)| Error::Peer(format!("sending this rank's link model to rank {r}: {e}")))?;
    }
    Ok(got)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn allreduce_calls_are_measured_per_world_and_size_class() {
        let m = LinkMeter::new();
        let h = |m: &LinkMeter| m.allreduce_measured(8, 64 << 20).of(Algorithm::Halving);
        assert_eq!(m.allreduce_measured(8, 64 << 20), Measured::NONE);
        // The first call is a warm-up, the second sets the figure, consecutive ones average.
        m.allreduce_ran(8, 64 << 20, Algorithm::Halving, 4.0);
        assert_eq!(h(&m), None);
        m.allreduce_ran(8, 64 << 20, Algorithm::Halving, 0.50);
        assert_eq!(h(&m), Some(0.50));
        m.allreduce_ran(8, 64 << 20, Algorithm::Halving, 0.40);
        assert!((h(&m).unwrap() - 0.47).abs() < 1e-9);
        // A ring call (its warm-up) makes halving's figure 1 % shorter.
        m.allreduce_ran(8, 64 << 20, Algorithm::Ring, 9.0);
        assert!((h(&m).unwrap() - 0.47 * 0.99).abs() < 1e-9);
        assert_eq!(m.allreduce_measured(8, 64 << 20).of(Algorithm::Ring), None, "the ring's first call is a warm-up");
        m.allreduce_ran(8, 64 << 20, Algorithm::Ring, 0.42);
        // Halving again after the ring: its new figure replaces the old, not averaged with it.
        m.allreduce_ran(8, 64 << 20, Algorithm::Halving, 0.60);
        assert_eq!(h(&m), Some(0.60));
        // The same size class (within a factor of two) shares figures; another world or size not.
        assert_eq!(m.allreduce_measured(8, 100 << 20), m.allreduce_measured(8, 64 << 20));
        assert_eq!(m.allreduce_measured(4, 64 << 20), Measured::NONE);
        assert_eq!(m.allreduce_measured(8, 1 << 20), Measured::NONE);
        // Nonsense is not a sample.
        for secs in [f64::NAN, 0.0, -1.0, f64::INFINITY] {
            m.allreduce_ran(2, 1 << 20, Algorithm::Ring, secs);
            m.allreduce_ran(2, 1 << 20, Algorithm::Ring, secs);
        }
        assert_eq!(m.allreduce_measured(2, 1 << 20), Measured::NONE);
        // Bounded: past MAX_CLASSES (world, class) pairs new ones are not learnt.
        for w in 0..MAX_CLASSES + 10 {
            m.allreduce_ran(100 + w, 1 << 20, Algorithm::Ring, 2.0);
            m.allreduce_ran(100 + w, 1 << 20, Algorithm::Ring, 2.0);
        }
        assert_eq!(m.allreduce_measured(100 + MAX_CLASSES + 5, 1 << 20), Measured::NONE);
        assert_eq!(m.allreduce_measured(100, 1 << 20).of(Algorithm::Ring), Some(2.0));
    }

    /// An all-to-all's calls are kept like an allreduce's, per world and size class of the
    /// busiest member's bytes, apart from the allreduce's.
    #[test]
    fn alltoall_calls_are_measured_per_world_and_busiest_class() {
        use crate::collective::schedule::ScheduleKind;
        let css = ExchangeAlgorithm::Steps(ScheduleKind::Css);
        let m = LinkMeter::new();
        m.alltoall_ran(8, 16 << 20, css, 9.0);
        assert_eq!(m.alltoall_measured(8, 16 << 20), Measured::NONE, "the first call is a warm-up");
        m.alltoall_ran(8, 16 << 20, css, 0.4);
        m.alltoall_ran(8, 20 << 20, css, 0.2);
        let got = m.alltoall_measured(8, 17 << 20);
        assert!((got.of_exchange(css).unwrap() - 0.34).abs() < 1e-9, "{got:?}");
        m.alltoall_ran(8, 16 << 20, ExchangeAlgorithm::Direct, 0.3);
        m.alltoall_ran(8, 16 << 20, ExchangeAlgorithm::Direct, 0.3);
        let got = m.alltoall_measured(8, 16 << 20);
        assert_eq!(got.of_exchange(ExchangeAlgorithm::Direct), Some(0.3));
        assert!(got.of_exchange(css).unwrap() < 0.34, "a figure not refreshed shrinks: {got:?}");
        assert_eq!(m.alltoall_measured(4, 16 << 20), Measured::NONE);
        assert_eq!(m.alltoall_measured(8, 1 << 20), Measured::NONE);
        assert_eq!(m.allreduce_measured(8, 16 << 20), Measured::NONE, "kept apart from the allreduce's");
        m.alltoall_ran(8, 16 << 20, css, f64::NAN);
        assert!(m.alltoall_measured(8, 16 << 20).of_exchange(css).is_some());
    }

    #[test]
    fn the_fit_recovers_alpha_and_rate_from_mixed_sizes() {
        let (alpha, rate) = (200e-6, 0.25e9);
        let samples: Vec<(u64, f64)> = [64u64 << 10, 1 << 20, 4 << 20, 16 << 20, 256 << 10]
            .iter()
            .map(|&b| (b, alpha + b as f64 / rate))
            .collect();
        let m = fit(samples.iter().copied()).expect("a fit");
        assert!((m.alpha - alpha).abs() < 1e-9 && (m.rate - rate).abs() / rate < 1e-9, "{m:?}");
        // One size: the rate with the prior's α taken off.
        let one = [(1u64 << 20, 100e-6 + (1u64 << 20) as f64 / rate); 3];
        let m = fit(one.iter().copied()).expect("a fit");
        assert!((m.rate - rate).abs() / rate < 1e-6, "{m:?}");
        assert_eq!(fit([(100u64, 1e-4)].into_iter()), None, "tiny messages say nothing of the rate");
    }

    #[test]
    fn agreed_models_and_rail_rates_survive_the_wire_and_bad_ones_do_not() {
        let measured = Measured([0.5, 0.0, 0.25, 0.125]);
        let a = Agreed { model: LinkModel::PRIOR, rails: vec![Some(250e6), None, Some(1.5)], measured };
        let b = a.to_bytes();
        assert_eq!(b.len(), LinkModel::WIRE_LEN + 1 + 24 + 32);
        assert_eq!(Agreed::from_bytes(&b), Some(a.clone()));
        // A figure past the longest call, or negative, is refused.
        for bad in [-1.0f64, 1e9] {
            let mut x = b.clone();
            let at = x.len() - 8;
            x[at..].copy_from_slice(&bad.to_le_bytes());
            assert_eq!(Agreed::from_bytes(&x), None, "{bad}");
        }
        let none = Agreed { model: LinkModel::PRIOR, rails: vec![], measured: Measured::NONE };
        assert_eq!(Agreed::from_bytes(&none.to_bytes()), Some(none));
        // Truncated, too long, a count that lies, a negative or NaN rate, a bad model.
        assert_eq!(Agreed::from_bytes(&b[..b.len() - 1]), None);
        assert_eq!(Agreed::from_bytes(&[b.as_slice(), &[0]].concat()), None);
        let mut lie = b.clone();
        lie[LinkModel::WIRE_LEN] = 200;
        assert_eq!(Agreed::from_bytes(&lie), None);
        for bad in [-1.0f64, f64::NAN, f64::INFINITY] {
            let mut x = b.clone();
            x[LinkModel::WIRE_LEN + 1..LinkModel::WIRE_LEN + 9].copy_from_slice(&bad.to_le_bytes());
            assert_eq!(Agreed::from_bytes(&x), None, "{bad}");
        }
        let mut x = b.clone();
        x[8..16].copy_from_slice(&f64::NAN.to_le_bytes());
        assert_eq!(Agreed::from_bytes(&x), None);
        assert_eq!(Agreed::from_bytes(&b[..10]), None);
    }

    #[test]
    fn a_meter_models_the_slowest_peer_of_a_group_and_keeps_the_latest_samples() {
        let meter = LinkMeter::new();
        let (a, b, c) = (
            PeerId("10.0.0.1:1".parse().unwrap()),
            PeerId("10.0.0.2:1".parse().unwrap()),
            PeerId("10.0.0.3:1".parse().unwrap()),
        );
        assert_eq!(meter.model(&[a, b]), LinkModel::PRIOR);
        for bytes in [1u64 << 20, 2 << 20, 4 << 20, 8 << 20] {
            meter.message(a, bytes, 50e-6 + bytes as f64 / 1e9);
            meter.message(b, bytes, 50e-6 + bytes as f64 / 0.5e9);
        }
        let m = meter.model(&[a, b, c]);
        assert!((m.rate - 0.5e9).abs() < 1e3, "the slower peer: {m:?}");
        assert!((meter.model(&[a]).rate - 1e9).abs() < 1e3);
        for _ in 0..SAMPLES {
            meter.message(a, 4 << 20, 50e-6 + (4u64 << 20) as f64 / 2e9);
        }
        assert!((meter.model(&[a]).rate - 2e9).abs() / 2e9 < 0.05, "old samples are forgotten");
        meter.direct(64 << 20, 0.5);
        meter.reduced(64 << 20, 0.1);
        let m = meter.model(&[a]);
        assert_eq!((m.direct_rate, m.reduce_rate), ((64u64 << 20) as f64 / 0.5, (64u64 << 20) as f64 / 0.1));
        meter.message(a, 1, f64::NAN);
        assert_eq!(meter.model(&[a]).samples, SAMPLES as u32);
    }
}
