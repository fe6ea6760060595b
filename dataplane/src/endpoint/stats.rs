//! Counters an endpoint keeps, for benchmarks, tests and operators.

use std::sync::atomic::{AtomicU64, Ordering::Relaxed};

/// Per-rail counters (cumulative since the endpoint started).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct RailStats {
    /// Payload bytes written on this rail, resends included.
    pub bytes_sent: u64,
    pub segments_sent: u64,
    /// Payload bytes received on this rail (verified or not).
    pub bytes_received: u64,
    /// Connections of this rail declared dead (write/read error, or no reply within
    /// `rail_timeout`), and connection attempts that failed.
    pub failures: u64,
}

/// A snapshot of an endpoint's counters.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Stats {
    pub rails: Vec<RailStats>,
    /// Payload bytes the peers acknowledged (each segment counted once).
    pub bytes_acked: u64,
    /// Segments sent again: after a rail failure, a checksum failure, or a busy reply.
    pub resent: u64,
    /// Segments this endpoint received whose checksum did not match.
    pub corrupt_received: u64,
    pub messages_sent: u64,
    pub messages_received: u64,
    /// Bytes held now for incoming messages nobody has taken yet: the buffers of half-received
    /// and unclaimed messages, plus a fixed bookkeeping cost per message (a gauge, not a
    /// counter).
    pub open_bytes: u64,
    /// Connections dropped because a segment on them would have taken its peer over
    /// `max_open_bytes_per_peer`, or all peers over `max_open_bytes`.
    pub dropped_over_budget: u64,
    /// Connections dropped because a peer sent a second message under a (sender, tag) whose
    /// receive was posted: one already open, waiting to be taken, or delivered to the post.
    pub dropped_duplicate_tag: u64,
    /// Connections closed at once because their address already had `max_conns_per_addr`.
    pub refused_connections: u64,
    /// Rail connections dropped because they failed the handshake or took longer than
    /// `connect_timeout` for it (the rail-key exchange, see [`auth`](crate::auth), and the
    /// `Hello`s), incoming and outgoing; incoming ones refused while the endpoint waits for its
    /// rail key included.
    pub handshake_failures: u64,
    /// Half-received messages dropped after `partial_expiry` without a segment.
    pub expired_partial: u64,
    /// Complete messages dropped after `unclaimed_expiry` without being taken.
    pub expired_unclaimed: u64,
}

#[derive(Default)]
pub(crate) struct RailCounters {
    pub bytes_sent: AtomicU64,
    pub segments_sent: AtomicU64,
    pub bytes_received: AtomicU64,
    pub failures: AtomicU64,
}

#[derive(Default)]
pub(crate) struct Counters {
    pub rails: Vec<RailCounters>,
    pub bytes_acked: AtomicU64,
    pub resent: AtomicU64,
    pub corrupt_received: AtomicU64,
    pub messages_sent: AtomicU64,
    pub messages_received: AtomicU64,
    pub dropped_over_budget: AtomicU64,
    pub dropped_duplicate_tag: AtomicU64,
    pub refused_connections: AtomicU64,
    pub handshake_failures: AtomicU64,
    pub expired_partial: AtomicU64,
    pub expired_unclaimed: AtomicU64,
    /// Segment transmissions so far (numbers the transmissions for `Faults::corrupt`).
    pub transmissions: AtomicU64,
}

impl Counters {
    pub fn new(rails: usize) -> Counters {
        Counters { rails: (0..rails).map(|_| RailCounters::default()).collect(), ..Default::default() }
    }

    /// The counters; `open_bytes` is the caller's to fill (the incoming state keeps it).
    pub fn snapshot(&self) -> Stats {
        Stats {
            rails: self
                .rails
                .iter()
                .map(|r| RailStats {
                    bytes_sent: r.bytes_sent.load(Relaxed),
                    segments_sent: r.segments_sent.load(Relaxed),
                    bytes_received: r.bytes_received.load(Relaxed),
                    failures: r.failures.load(Relaxed),
                })
                .collect(),
            bytes_acked: self.bytes_acked.load(Relaxed),
            resent: self.resent.load(Relaxed),
            corrupt_received: self.corrupt_received.load(Relaxed),
            messages_sent: self.messages_sent.load(Relaxed),
            messages_received: self.messages_received.load(Relaxed),
            open_bytes: 0,
            dropped_over_budget: self.dropped_over_budget.load(Relaxed),
            dropped_duplicate_tag: self.dropped_duplicate_tag.load(Relaxed),
            refused_connections: self.refused_connections.load(Relaxed),
            handshake_failures: self.handshake_failures.load(Relaxed),
            expired_partial: self.expired_partial.load(Relaxed),
            expired_unclaimed: self.expired_unclaimed.load(Relaxed),
        }
    }
}
