//! Sizes the transport picks from the rails' measured rates instead of configured constants:
//! how long a segment is, and how much a rail connection's socket may hold.
//!
//! Every rail's delivery rate is measured from its acknowledgements ([`RateMeter`], the same
//! estimate as the `weighted` scheduler's, kept here whatever scheduler runs), continuously.
//! From it:
//! * a message is cut into segments that carry about [`SEG_TIME`] of the fastest rail towards
//!   its peer ([`segment_len`]), at least [`MIN_SEG`] and at most the configured `seg_max`:
//!   small enough that the last segment on a slow rail does not finish long after the others,
//!   large enough that the per-segment costs (a header, a reply, a system call) stay small;
//! * a rail connection's `SO_SNDBUF` holds about [`SNDBUF_TIME`] of that rail
//!   ([`send_buffer`]). A reply travels behind whatever the socket already holds, so a socket
//!   that buffers tens of milliseconds (the kernel's autotuning grows it to 4 MiB) delays every
//!   acknowledgement, and with it the sender's next message, by that much. On the rail rig
//!   (2 Gbit/s + 500 Mbit/s) an allreduce over both rails was slower than over one with
//!   autotuning and 1.15–1.18× Gloo with 128 KiB; 0.5 ms of a 2 Gbit/s rail is 125 kB.
//!
//! Until a rail has a measurement, segments are `seg_max` and the socket is left to the
//! kernel's autotuning.

use std::time::Duration;

use crate::striping::AckRate;

/// Weight of a new rate sample in the running average (the TCP SRTT gain, as `weighted`).
const RATE_GAIN: f64 = 1.0 / 8.0;
/// A segment carries about this long of the fastest rail's traffic.
pub(super) const SEG_TIME: f64 = 1e-3;
/// The smallest segment the sizing picks: below it headers, replies and system calls cost more
/// than the balance between rails gains.
pub(super) const MIN_SEG: u64 = 64 << 10;
/// A rail connection's socket send buffer holds about this long of the rail's traffic.
pub(super) const SNDBUF_TIME: f64 = 0.5e-3;
/// Bounds on the socket send buffer the sizing picks: the floor keeps a slow rail's socket
/// able to take a whole small segment, the ceiling is the kernel autotuning's own default
/// maximum (`net.ipv4.tcp_wmem`).
pub(super) const MIN_SNDBUF: usize = 64 << 10;
pub(super) const MAX_SNDBUF: usize = 4 << 20;

/// One rail's delivery rate, measured from acknowledgements over spans of at least 2 ms while
/// the rail stays busy ([`AckRate`]), so back-to-back segments measure the rail's service rate.
#[derive(Clone, Copy, Debug, Default)]
pub(super) struct RateMeter {
    rate: Option<f64>,
    acks: AckRate,
}

impl RateMeter {
    pub(super) fn delivered(&mut self, bytes: u64, sent_at: Duration, now: Duration) {
        let Some(sample) = self.acks.delivered(bytes, sent_at, now) else {
            return;
        };
        self.rate = Some(match self.rate {
            None => sample,
            Some(r) => r + RATE_GAIN * (sample - r),
        });
    }

    /// Bytes/s, once measured.
    pub(super) fn rate(&self) -> Option<f64> {
        self.rate
    }
}

/// The segment length for a message over rails whose measured rates are `rates` (`None`: not
/// measured yet): [`SEG_TIME`] of the fastest, within `[MIN_SEG, seg_max]`, a multiple of 8 (a
/// segment never splits an element of a collective). `seg_max` when no rail is measured.
pub(super) fn segment_len(rates: &[Option<f64>], seg_max: u64) -> u64 {
    let Some(fastest) = rates.iter().flatten().copied().reduce(f64::max) else {
        return seg_max;
    };
    let want = (fastest * SEG_TIME) as u64;
    (want.clamp(MIN_SEG.min(seg_max), seg_max) / 8 * 8).max(8)
}

/// The socket send buffer for a rail measured at `rate` bytes/s: [`SNDBUF_TIME`] of it, within
/// `[MIN_SNDBUF, MAX_SNDBUF]`.
pub(super) fn send_buffer(rate: f64) -> usize {
    ((rate * SNDBUF_TIME) as usize).clamp(MIN_SNDBUF, MAX_SNDBUF)
}

/// Whether a socket whose send buffer was set to `applied` (0: never) should be set to
/// `target`: the first time, or when they differ by more than a quarter (a rate estimate
/// wanders by a few percent from sample to sample; a system call per segment is not needed).
pub(super) fn resize(applied: usize, target: usize) -> bool {
    target != 0 && (applied == 0 || applied.abs_diff(target) * 4 > applied)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn segments_carry_a_millisecond_of_the_fastest_rail() {
        // Not measured: the configured maximum.
        assert_eq!(segment_len(&[None, None], 1 << 20), 1 << 20);
        // 2 Gbit/s and 500 Mbit/s: 250 kB/ms of the fastest.
        assert_eq!(segment_len(&[Some(250e6), Some(62.5e6)], 1 << 20), 250_000);
        // A fast rail is capped at seg_max, a slow one floored at MIN_SEG.
        assert_eq!(segment_len(&[Some(5e9)], 1 << 20), 1 << 20);
        assert_eq!(segment_len(&[Some(1e6), None], 1 << 20), MIN_SEG);
        // seg_max below the floor wins; the result stays a multiple of 8.
        assert_eq!(segment_len(&[Some(1e6)], 4096), 4096);
        assert_eq!(segment_len(&[Some(100_003e3)], 1 << 20) % 8, 0);
    }

    #[test]
    fn send_buffers_hold_half_a_millisecond_within_bounds() {
        assert_eq!(send_buffer(250e6), 125_000);
        assert_eq!(send_buffer(62.5e6), MIN_SNDBUF);
        assert_eq!(send_buffer(50e9), MAX_SNDBUF);
        assert!(resize(0, 100) && !resize(100, 0));
        assert!(!resize(100_000, 110_000) && resize(100_000, 130_000) && resize(100_000, 70_000));
    }

    #[test]
    fn meter_measures_back_to_back_acknowledgements() {
        let ms = Duration::from_millis;
        let mut m = RateMeter::default();
        assert_eq!(m.rate(), None);
        // 1000-byte segments sent together, acknowledged every 10 ms: 100 kB/s.
        for i in 1..=100 {
            m.delivered(1000, ms(0), ms(10 * i));
        }
        assert!((m.rate().unwrap() - 100_000.0).abs() < 1.0, "{:?}", m.rate());
        // A reply in the same instant as the previous one is not a sample.
        m.delivered(1000, ms(0), ms(1000));
        assert!((m.rate().unwrap() - 100_000.0).abs() < 1.0);
    }
}
