//! The endpoint's configuration.

use std::net::{IpAddr, Ipv4Addr};
use std::time::Duration;

use crate::auth::RailAuth;
use crate::error::{Error, Result};
use crate::striping::SchedulerKind;
use crate::wire::MAX_SEGMENT_LEN;

/// How an [`Endpoint`](super::Endpoint) is set up. `Default` gives one loopback rail.
#[derive(Clone, Debug)]
pub struct EndpointConfig {
    /// Local rail addresses, in rail order (rail i connects to the peer's rail i). Empty means
    /// one rail on 127.0.0.1.
    pub rails: Vec<IpAddr>,
    /// Listening port on every rail; 0 lets each rail's listener take any free port.
    pub port: u16,
    pub scheduler: SchedulerKind,
    /// Largest segment in bytes; a message is cut into segments of about a millisecond of its
    /// fastest rail's measured rate, at least 64 KiB and at most this (this, until the rails
    /// are measured). The seed's range is 1–64 MiB. 1 MiB, its lower end, measured
    /// best on loopback in the `rails` benchmark against 4 and 16 MiB (a segment is checksummed
    /// while it is still in cache; the share of iperf3 it reaches varies with the machine's load,
    /// 0.45–0.98 in runs here), and cuts a 32 MiB collective slice into 32 segments, enough to
    /// balance three rails.
    pub seg_max: u64,
    /// At most this many segments wait in one rail's send queue; a sender that picked a full
    /// rail waits until it drains (the seed's step 8.1).
    pub queue_max: usize,
    /// Q-learning: states per rail, in 8..=32.
    pub k: usize,
    /// Nominal bandwidth of one rail, bytes/s: the seed's `bandwidth` in
    /// `time_interval = seg_max / bandwidth`, and the weighted scheduler's prior.
    pub bandwidth: f64,
    /// Seed of the schedulers' random choices.
    pub seed: u64,
    /// A connection with unacknowledged segments that gets no reply for this long is declared
    /// dead, and its segments are resent on the other rails. TCP itself would take minutes to
    /// give up on a cut link. 2 s is several times what a 16 MiB segment behind a full 4 MiB
    /// socket buffer takes on a 250 Mbit/s rail (0.7 s), so a slow rail is not mistaken for a
    /// dead one.
    pub rail_timeout: Duration,
    /// Connecting (and the handshake) gives up after this long. 1 s: the first SYN
    /// retransmission happens at 1 s, so a peer that did not answer the first SYN is not there.
    pub connect_timeout: Duration,
    /// A `send` that gets no acknowledgement at all for this long fails.
    pub stall_timeout: Duration,
    /// Incoming messages larger than this are refused. (What the receiver allocates is bounded
    /// by `alloc_ahead` and the open-bytes caps, not by this.)
    pub max_message: u64,
    /// An incoming message's buffer is allocated at most this far ahead of the bytes that
    /// arrived (plus the segment being received), and grows as segments arrive, so a peer
    /// that announces a huge message costs what it sent, not what it announced. A segment that
    /// starts further ahead than this is answered busy (the sender retries it). 64 MiB: a
    /// message up to that size is allocated whole at its first segment (an object piece, a
    /// collective slice of a 512 MiB buffer), and it is more than the segments that can be in
    /// flight out of order on the rails at once with the default `queue_max` and `seg_max`
    /// (8 queued segments of 1 MiB per rail, plus a few MiB of socket buffers).
    pub alloc_ahead: u64,
    /// The bytes one peer may hold in this endpoint at once: the buffers of its half-received
    /// messages and of its messages nobody has taken yet (posted receives, which use the
    /// receiver's own memory, count only their bookkeeping). A segment that would go over it
    /// is refused and its connection dropped (counted in `Stats::dropped_over_budget`). 2 GiB:
    /// a peer is at most about one round ahead in a collective, so what arrives before its
    /// post is at most half the buffer (buffers of up to 4 GiB pass); and it is 32 object
    /// pieces of 64 MiB waiting for their fetcher, which is then stuck rather than slow.
    pub max_open_bytes_per_peer: u64,
    /// The same bound for all peers together. A peer's id is what it announces in its
    /// handshake, not proven, so without this a peer could claim ever new ids. 8 GiB: four
    /// peers at their cap at once; a node with less memory to spare should lower it.
    pub max_open_bytes: u64,
    /// Connections accepted from one IP address at once (handshakes included); one more is
    /// closed at once (counted in `Stats::refused_connections`). 64: an address hosts a few
    /// endpoints (a worker, benchmark ranks on one host), each with one connection per rail to
    /// us plus a replaced one while a rail reconnects; 64 covers 16 of them with room to spare,
    /// while a flood from one address costs at most 64 sockets and tasks.
    pub max_conns_per_addr: usize,
    /// A half-received message with no segment for this long is dropped, its memory freed
    /// (counted in `Stats::expired_partial`). 60 s: twice `stall_timeout`, after which its
    /// sender has given up on it (a sender fails a message after 30 s without progress), so
    /// nothing will complete it.
    pub partial_expiry: Duration,
    /// A complete message that nobody took (`recv`) for this long is dropped (counted in
    /// `Stats::expired_unclaimed`): the tail of an abandoned object fetch, the messages of a
    /// collective that failed. 10 min: a collective's rank may start long after its peers sent
    /// it their first messages (it fetched bigger inputs first), and must still find them; the
    /// open-bytes caps bound the memory meanwhile.
    pub unclaimed_expiry: Duration,
    /// A segment whose checksum fails at the receiver this many times fails its message.
    pub max_attempts: u32,
    /// SO_SNDBUF of every rail connection, bytes; `None` (the default) sizes it from the
    /// rail's measured rate: half a millisecond of it, 64 KiB to 4 MiB (the kernel's autotuning
    /// until the rail's first acknowledgement). A reply travels behind whatever the socket
    /// already holds, so on a slow rail that carries data both ways (a collective) megabytes of
    /// buffered data delay every acknowledgement by tens of milliseconds, and a sender that
    /// waits for them stalls: on the rail rig (2 Gbit/s + 500 Mbit/s) an N = 2 allreduce gained
    /// nothing from the second rail with autotuning and 1.15–1.20× with 128 KiB (see the
    /// README).
    pub send_buffer: Option<usize>,
    /// Whether rail connections start with the authenticated handshake (see
    /// [`auth`](crate::auth)): [`RailAuth::Open`] (the default) sends none of its bytes,
    /// [`RailAuth::Key`] requires it on every connection in and out, [`RailAuth::Pending`]
    /// refuses every connection until [`Endpoint::set_rail_key`](super::Endpoint::set_rail_key)
    /// gives the key. This is the endpoint's starting mode; `set_rail_key` changes it later.
    pub auth: RailAuth,
    /// Faults to inject, for tests.
    pub faults: Faults,
}

/// Deliberate faults, so that the failure paths can be tested on plain loopback.
#[derive(Clone, Debug, Default)]
pub struct Faults {
    /// Segment transmissions (counted from 0 across the endpoint, resends included) whose
    /// payload is corrupted on the wire (one bit flipped after the checksum was computed).
    pub corrupt: Vec<u64>,
    /// Abort the connection of this rail once this many payload bytes were written on the rail
    /// in total, as if its link died (once).
    pub kill_rail: Option<(usize, u64)>,
}

impl Default for EndpointConfig {
    fn default() -> Self {
        EndpointConfig {
            rails: vec![],
            port: 0,
            // Earliest completion by measured rates: round robin gives a slow rail as many
            // bytes as a fast one, so two unequal rails would be slower than the fast one.
            scheduler: SchedulerKind::Weighted,
            seg_max: 1 << 20,
            queue_max: 8,
            k: 8,
            // 10 Gbit/s: a common NIC; only the Q-learning state granularity depends on it.
            bandwidth: 1.25e9,
            seed: 0,
            rail_timeout: Duration::from_secs(2),
            connect_timeout: Duration::from_secs(1),
            stall_timeout: Duration::from_secs(30),
            max_message: 64 << 30,
            alloc_ahead: 64 << 20,
            max_open_bytes_per_peer: 2 << 30,
            max_open_bytes: 8 << 30,
            max_conns_per_addr: 64,
            partial_expiry: Duration::from_secs(60),
            unclaimed_expiry: Duration::from_secs(600),
            max_attempts: 8,
            send_buffer: None,
            auth: RailAuth::Open,
            faults: Faults::default(),
        }
    }
}

impl EndpointConfig {
    /// Fills defaults and checks every field, naming the one that is wrong.
    pub(crate) fn validated(mut self) -> Result<EndpointConfig> {
        if self.rails.is_empty() {
            self.rails.push(IpAddr::V4(Ipv4Addr::LOCALHOST));
        }
        if self.rails.len() > usize::from(u16::MAX) {
            return Err(Error::Config(format!("{} rails; at most {}", self.rails.len(), u16::MAX)));
        }
        if self.seg_max == 0 || self.seg_max > u64::from(MAX_SEGMENT_LEN) {
            return Err(Error::Config(format!("seg_max {} must be in 1..={MAX_SEGMENT_LEN}", self.seg_max)));
        }
        if !self.seg_max.is_multiple_of(8) {
            return Err(Error::Config(format!(
                "seg_max {} must be a multiple of 8, so that no segment splits an element of a collective",
                self.seg_max
            )));
        }
        if let Some(n) = self.send_buffer
            && n < 4096
        {
            return Err(Error::Config(format!("send_buffer {n} must be at least 4096 bytes")));
        }
        if self.queue_max == 0 {
            return Err(Error::Config("queue_max must be at least 1".into()));
        }
        if !(8..=32).contains(&self.k) {
            return Err(Error::Config(format!("k {} must be in 8..=32 (the seed's range)", self.k)));
        }
        if !(self.bandwidth.is_finite() && self.bandwidth > 0.0) {
            return Err(Error::Config(format!("bandwidth {} must be a positive number of bytes/s", self.bandwidth)));
        }
        if self.max_attempts == 0 {
            return Err(Error::Config("max_attempts must be at least 1".into()));
        }
        for (name, n) in [
            ("alloc_ahead", self.alloc_ahead),
            ("max_open_bytes_per_peer", self.max_open_bytes_per_peer),
            ("max_open_bytes", self.max_open_bytes),
            ("max_conns_per_addr", self.max_conns_per_addr as u64),
        ] {
            if n == 0 {
                return Err(Error::Config(format!("{name} must be at least 1")));
            }
        }
        for (name, d) in [
            ("rail_timeout", self.rail_timeout),
            ("connect_timeout", self.connect_timeout),
            ("stall_timeout", self.stall_timeout),
            ("partial_expiry", self.partial_expiry),
            ("unclaimed_expiry", self.unclaimed_expiry),
        ] {
            if d.is_zero() {
                return Err(Error::Config(format!("{name} must be positive")));
            }
        }
        Ok(self)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_to_one_loopback_rail() {
        let c = EndpointConfig::default().validated().unwrap();
        assert_eq!(c.rails, vec![IpAddr::V4(Ipv4Addr::LOCALHOST)]);
    }

    #[test]
    fn names_the_bad_field() {
        let bad = |f: fn(&mut EndpointConfig)| {
            let mut c = EndpointConfig::default();
            f(&mut c);
            c.validated().unwrap_err().to_string()
        };
        assert!(bad(|c| c.seg_max = 0).contains("seg_max"));
        assert!(bad(|c| c.seg_max = 1 << 40).contains("seg_max"));
        assert!(bad(|c| c.seg_max = 1001).contains("multiple of 8"));
        assert!(bad(|c| c.send_buffer = Some(100)).contains("send_buffer"));
        assert!(bad(|c| c.queue_max = 0).contains("queue_max"));
        assert!(bad(|c| c.k = 7).contains("k 7"));
        assert!(bad(|c| c.k = 33).contains("k 33"));
        assert!(bad(|c| c.bandwidth = 0.0).contains("bandwidth"));
        assert!(bad(|c| c.rail_timeout = Duration::ZERO).contains("rail_timeout"));
        assert!(bad(|c| c.max_attempts = 0).contains("max_attempts"));
        assert!(bad(|c| c.alloc_ahead = 0).contains("alloc_ahead"));
        assert!(bad(|c| c.max_open_bytes_per_peer = 0).contains("max_open_bytes_per_peer"));
        assert!(bad(|c| c.max_open_bytes = 0).contains("max_open_bytes"));
        assert!(bad(|c| c.max_conns_per_addr = 0).contains("max_conns_per_addr"));
        assert!(bad(|c| c.partial_expiry = Duration::ZERO).contains("partial_expiry"));
        assert!(bad(|c| c.unclaimed_expiry = Duration::ZERO).contains("unclaimed_expiry"));
    }
}
