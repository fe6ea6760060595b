//! What every scheduler shares: the [`RailView`] it sees of each rail, the [`RailScheduler`]
//! trait it implements, the [`SchedulerParams`] it is built from, and [`next_up`]. The
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
