//! Bytes split across rails in proportion to each rail's measured throughput, the way UCX
//! (bandwidth-proportional lanes) and Open MPI's ob1 (bandwidth-weighted BTL split) stripe a
//! large message.

use std::time::Duration;

use super::{RailScheduler, RailView};

/// Weight of a new rate sample in the running average. One eighth (the TCP SRTT gain) follows a
/// rate change within a few dozen segments while smoothing the noise of single samples.
const RATE_GAIN: f64 = 1.0 / 8.0;

/// Smooth weighted round-robin over bytes: every pick credits each up rail with its share of
/// the segment (rate_i / Σ rate), the rail with the most credit takes the segment and is
/// debited its length. Over any stretch the bytes per rail are within one segment of the
/// rate-proportional split.
///
/// Like the others, it does not look at queue lengths: a sender that picked a full rail waits
/// for it. Passing over full rails instead was measured (`rails` benchmark) and is worse: the
/// slow rails then hold deep queues, and a message completes only when its last segment,
/// queued behind them, arrives.
///
/// A rail's rate is measured from acknowledgements, like a delivery-rate estimate: a segment of
/// `b` bytes acknowledged at `t` gives `b / (t − max(sent_at, previous ack on that rail))`, so
/// back-to-back segments measure the rail's service rate and an isolated one its
/// rate-plus-latency. Before any sample every rail is assumed to run at the nominal bandwidth.
#[derive(Debug)]
pub struct Weighted {
    rate: Vec<f64>,
    credit: Vec<f64>,
    last_ack: Vec<Option<Duration>>,
}

impl Weighted {
    pub fn new(rails: usize, nominal_bandwidth: f64) -> Weighted {
        Weighted {
            rate: vec![nominal_bandwidth; rails],
            credit: vec![0.0; rails],
            last_ack: vec![None; rails],
        }
    }

    /// The current rate estimates, bytes/s.
    pub fn rates(&self) -> &[f64] {
        &self.rate
    }
}

impl RailScheduler for Weighted {
    fn pick(&mut self, rails: &[RailView], len: u64, _now: Duration) -> usize {
        let total: f64 = rails
            .iter()
            .zip(&self.rate)
            .filter(|(v, _)| v.up)
            .map(|(_, r)| r)
            .sum();
        let len = len.max(1) as f64;
        let mut best = None;
        for (i, v) in rails.iter().enumerate() {
            if !v.up {
                continue;
            }
            self.credit[i] += len * self.rate[i] / total;
            if best.is_none_or(|b: usize| self.credit[i] > self.credit[b]) {
                best = Some(i);
            }
        }
        let a = best.expect("the transport calls pick only with a rail up");
        self.credit[a] -= len;
        a
    }

    fn delivered(&mut self, rail: usize, bytes: u64, sent_at: Duration, now: Duration) {
        let start = self.last_ack[rail].map_or(sent_at, |t| t.max(sent_at));
        self.last_ack[rail] = Some(now);
        let secs = now.saturating_sub(start).as_secs_f64();
        // Acknowledgements that arrive together (a burst read from one socket) carry no timing
        // information; below 10 µs the sample would be noise.
        if secs < 10e-6 {
            return;
        }
        let sample = bytes as f64 / secs;
        self.rate[rail] += RATE_GAIN * (sample - self.rate[rail]);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn up(m: usize) -> Vec<RailView> {
        vec![
            RailView {
                up: true,
                queued: 0
            };
            m
        ]
    }

    #[test]
    fn splits_equally_before_measuring() {
        let mut w = Weighted::new(2, 1e9);
        let picks: Vec<_> = (0..6)
            .map(|_| w.pick(&up(2), 100, Duration::ZERO))
            .collect();
        assert_eq!(picks.iter().filter(|&&p| p == 0).count(), 3);
    }

    #[test]
    fn splits_bytes_in_proportion_to_rates() {
        let mut w = Weighted::new(3, 1.0);
        w.rate = vec![4.0, 1.0, 3.0];
        let mut bytes = [0u64; 3];
        for _ in 0..800 {
            let a = w.pick(&up(3), 10, Duration::ZERO);
            bytes[a] += 10;
        }
        assert_eq!(bytes, [4000, 1000, 3000]);
    }

    #[test]
    fn never_picks_a_rail_that_is_down() {
        let mut w = Weighted::new(2, 1.0);
        w.rate = vec![10.0, 1.0];
        let mut v = up(2);
        v[0].up = false;
        for _ in 0..10 {
            assert_eq!(w.pick(&v, 5, Duration::ZERO), 1);
        }
    }

    #[test]
    fn measures_rate_from_back_to_back_acknowledgements() {
        let mut w = Weighted::new(1, 1.0);
        let ms = Duration::from_millis;
        // Segments of 1000 bytes sent at once, acknowledged every 10 ms: 100 kB/s.
        for i in 1..=200 {
            w.delivered(0, 1000, ms(0), ms(10 * i));
        }
        assert!((w.rates()[0] - 100_000.0).abs() < 1.0, "{}", w.rates()[0]);
        // An isolated segment after an idle second counts from when it was sent.
        w.delivered(0, 1000, ms(3000), ms(3020));
        assert!((w.rates()[0] - (100_000.0 + (50_000.0 - 100_000.0) / 8.0)).abs() < 1.0);
    }
}
