//! What a communicator runs with ([`CollectiveConfig`]) and what a collective measured
//! ([`Profile`]).

use std::time::Duration;

use crate::elem::Algorithm;

/// How a communicator runs its collectives. Every rank must use the same values.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CollectiveConfig {
    pub algorithm: Algorithm,
    /// Slices per message range: the depth of the pipeline between exchange and reduction. A
    /// power of two lets every send be a zero-copy slice (slices nest across rounds). The seed
    /// uses 2; the default is 4 by the `allreduce` benchmark at 64 MiB on loopback (N = 2: 4
    /// slices 91 ms, 8 slices 102–135 ms, 2 slices 105–144 ms, 1 slice 157 ms, on a shared
    /// 2-core machine whose run-to-run noise was ±20 %): one slice loses the overlap of
    /// reduction with exchange, more slices add per-message acknowledgement gaps.
    pub slices: usize,
    /// Messages of one collective being handed to the rails at once from this rank (a message
    /// whose segments all wait in rail queues no longer counts: the next one follows it without
    /// waiting for its acknowledgements). 1 keeps them in plan order on the wire, so the receiver gets slice s complete before slice s+1 starts and
    /// can reduce it while s+1 arrives; more lets slices interleave segment by segment.
    pub send_window: usize,
}

impl Default for CollectiveConfig {
    fn default() -> Self {
        CollectiveConfig { algorithm: Algorithm::Halving, slices: 4, send_window: 1 }
    }
}

/// Where one collective's time went, as this rank saw it. The parts overlap the transport's own
/// work (which runs on other tasks), so they need not add up to `total`.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Profile {
    pub total: Duration,
    /// User-space copies: the caller's buffer into a sendable one, sends spanning several
    /// pieces, and the result back into the caller's buffer.
    pub copy: Duration,
    pub copied_bytes: u64,
    /// Reduction kernels.
    pub reduce: Duration,
    pub reduced_bytes: u64,
    /// Waiting for a message that had not arrived yet: communication not hidden behind work.
    pub wait: Duration,
    /// Waiting at the end for the last sends to be acknowledged.
    pub drain: Duration,
    pub bytes_sent: u64,
    pub bytes_received: u64,
    pub messages_sent: u64,
}
