//! What every scheduler shares: the [`RailView`] it sees of each rail, the [`RailScheduler`]
//! trait it implements, the [`SchedulerParams`] it is built from, [`next_up`], and [`AckRate`],
//! the delivery-rate estimate from acknowledgements (also the transport's pacing's). The
//! schedulers and `sched`'s own module both import this, so no scheduler imports the module
//! that declares it.

use std::time::Duration;

/// What a scheduler sees of one rail when it decides.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct RailView {
    /// The rail can carry segments to this peer now (its connection is not known to be dead).
    pub up: bool,
    /// Segments waiting in the rail's send queue (the seed's `counter[i]`).
    pub queued: usize,
    /// Bytes of those segments.
    pub queued_bytes: u64,
    /// Bytes that left the queue on this rail (to any peer) and are not acknowledged yet: in
    /// the socket buffer, on the wire, or awaiting their acknowledgement.
    pub in_flight_bytes: u64,
}

impl RailView {
    /// Bytes the rail must still carry before a segment queued now can be acknowledged.
    pub fn backlog_bytes(&self) -> u64 {
        self.queued_bytes + self.in_flight_bytes
    }
}

/// A rail scheduler. The transport guarantees that at least one rail is up when it calls
/// [`pick`](Self::pick), and a scheduler must return an up rail.
pub trait RailScheduler: Send {
    /// Chooses the rail for the next segment, of `len` bytes, at time `now`.
    fn pick(&mut self, rails: &[RailView], len: u64, now: Duration) -> usize;

    /// A segment that joined `rail`'s queue at `entered` left it at `now` (it was handed to
    /// the connection: the seed's "sent to the NIC").
    fn departed(&mut self, rail: usize, entered: Duration, now: Duration) {
        let _ = (rail, entered, now);
    }

    /// The peer acknowledged a segment of `bytes` that was handed to `rail` at `sent_at`.
    fn delivered(&mut self, rail: usize, bytes: u64, sent_at: Duration, now: Duration) {
        let _ = (rail, bytes, sent_at, now);
    }
}

/// Everything a scheduler may need, built from the endpoint configuration.
#[derive(Clone, Debug)]
pub struct SchedulerParams {
    pub rails: usize,
    pub seg_max: u64,
    pub queue_max: usize,
    /// Nominal bandwidth of one rail in bytes/s (the seed's `bandwidth`, used for
    /// `time_interval`, and the weighted scheduler's prior before it has measured anything).
    pub bandwidth: f64,
    /// Q-learning: states per rail, in 8..=32.
    pub k: usize,
    pub seed: u64,
}

/// The first up rail at or after `from`, cyclically. Shared by the schedulers that must skip
/// rails taken out of service.
pub(crate) fn next_up(rails: &[RailView], from: usize) -> usize {
    let m = rails.len();
    (0..m).map(|d| (from + d) % m).find(|&i| rails[i].up).expect("the transport calls pick only with a rail up")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn next_up_skips_down_rails_cyclically() {
        let v = |up: [bool; 3]| up.map(|up| RailView { up, ..RailView::default() });
        assert_eq!(next_up(&v([true, true, true]), 1), 1);
        assert_eq!(next_up(&v([true, false, true]), 1), 2);
        assert_eq!(next_up(&v([true, false, false]), 1), 0);
    }
}

/// A span of acknowledgements shorter than this is no sample of a rail's rate.
pub const ACK_SPAN: std::time::Duration = std::time::Duration::from_millis(2);

/// A rail's delivery rate from its acknowledgements: the bytes acknowledged on the rail while it
/// stayed busy, over spans of at least [`ACK_SPAN`] of busy time. A span starts when a segment
/// sent after the previous acknowledgement (the rail was idle) is acknowledged — at that
/// segment's send — and otherwise where the previous span closed; so back-to-back segments
/// measure the rail's service rate, isolated ones their rate-plus-latency.
///
/// A busy stretch that ends (the rail goes idle) before [`ACK_SPAN`] is not thrown away: its
/// bytes and busy time are carried into the next sample. Without that, a rail that only ever
/// carries short exchanges (a training loop's small reductions, a latency benchmark) was never
/// measured, every rail kept the same nominal prior, and the scheduler split a small message
/// evenly between a 2 Gbit/s and a 500 Mbit/s rail: on the rail rig a 256 KiB allreduce took
/// 1.9 ms over both rails against 0.84 ms over the fast one alone.
///
/// Why spans and not every pair of consecutive acknowledgements: the rail carries several
/// connections (one per peer), whose acknowledgements interleave, and a receiver on a loaded
/// host reads and answers segments in bursts; the gap between two acknowledgements then says
/// nothing of the rail. Measured on the rail rig (2 Gbit/s + 500 Mbit/s) during allreduces on a
/// loaded machine, per-pair samples put the 500 Mbit/s rail at 0.475 GB/s (7.6× its rate) and
/// the scheduler sent it most of the bytes.
#[derive(Clone, Copy, Debug, Default)]
pub struct AckRate {
    /// The current span's start and the bytes acknowledged in it.
    span: Option<(std::time::Duration, u64)>,
    last_ack: Option<std::time::Duration>,
    /// Busy time and bytes of stretches that ended short of a sample, for the next one.
    carried: (std::time::Duration, u64),
}

impl AckRate {
    /// A segment of `bytes` sent at `sent_at` was acknowledged at `now`: the rate over the span
    /// this closes, bytes/s, if it closes one.
    pub fn delivered(&mut self, bytes: u64, sent_at: std::time::Duration, now: std::time::Duration) -> Option<f64> {
        let idle = self.last_ack.is_none_or(|t| sent_at > t);
        let (start, acked) = match (self.span, self.last_ack) {
            (Some(s), _) if !idle => s,
            (Some((start, acked)), Some(last)) => {
                // The rail went idle: the stretch that ended at the last acknowledgement.
                self.carried.0 += last.saturating_sub(start);
                self.carried.1 += acked;
                (sent_at, 0)
            }
            _ => (sent_at, 0),
        };
        self.last_ack = Some(now);
        let acked = acked + bytes;
        let busy = now.saturating_sub(start) + self.carried.0;
        if busy < ACK_SPAN {
            self.span = Some((start, acked));
            return None;
        }
        let all = acked + self.carried.1;
        self.span = Some((now, 0));
        self.carried = Default::default();
        Some(all as f64 / busy.as_secs_f64())
    }
}

#[cfg(test)]
mod ack_tests {
    use super::*;
    use std::time::Duration;

    /// A rail that delivers 100 kB/s, its acknowledgements read in bursts of two 50 µs apart
    /// (a busy receiver) or interleaved from two connections: every sample is the rail's rate.
    #[test]
    fn bursts_and_interleaved_connections_do_not_inflate_the_rate() {
        let us = Duration::from_micros;
        let mut a = AckRate::default();
        let mut samples = Vec::new();
        for burst in 1..=50u64 {
            for k in 0..2 {
                samples.extend(a.delivered(1000, us(0), us(burst * 20_000 + k * 50)));
            }
        }
        assert!(samples.len() >= 45, "{samples:?}");
        for s in &samples[1..] {
            assert!((s - 100_000.0).abs() < 1_000.0, "{samples:?}");
        }
        // Idle, then one segment alone: its size over its latency, with the last burst's
        // second acknowledgement (1000 bytes 50 µs after the last sample) carried into it.
        let got = a.delivered(1000, us(5_000_000), us(5_010_000)).expect("a sample");
        assert!((got - 2000.0 / 0.010_05).abs() < 1e-6, "{got}");
        // A segment acknowledged within the span of the previous one is no sample by itself.
        assert_eq!(a.delivered(1000, us(5_000_000), us(5_010_100)), None);
    }

    /// Short exchanges with idle gaps between them (each 0.5 ms for 1000 bytes, 10 ms apart):
    /// their busy time adds up to a sample at the fourth, the idle time between them left out.
    #[test]
    fn short_stretches_add_up_to_a_sample() {
        let us = Duration::from_micros;
        let mut a = AckRate::default();
        let mut got = Vec::new();
        for k in 0..8u64 {
            got.push(a.delivered(1000, us(k * 10_000), us(k * 10_000 + 500)));
        }
        let rate = 4000.0 / 0.002;
        assert_eq!(got, [None, None, None, Some(rate), None, None, None, Some(rate)]);
    }
}
