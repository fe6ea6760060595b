//! The endpoint's configuration.

use std::net::{IpAddr, Ipv4Addr};
use std::time::Duration;

use crate::error::{Error, Result};
use crate::sched::SchedulerKind;
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
    /// Largest segment in bytes. The seed's range is 1–64 MiB. 1 MiB, its lower end, measured
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
    /// Incoming messages larger than this are refused (the receiver allocates a message's whole
    /// buffer when its first segment arrives).
    pub max_message: u64,
    /// A segment whose checksum fails at the receiver this many times fails its message.
    pub max_attempts: u32,
    /// SO_SNDBUF of every rail connection, bytes; `None` leaves it to the kernel's
    /// autotuning (up to 4 MiB). A reply travels behind whatever the socket already holds, so
    /// on a slow rail that carries data both ways (a collective) megabytes of buffered data
    /// delay every acknowledgement by tens of milliseconds, and a sender that waits for them
    /// stalls: on the rail rig (2 Gbit/s + 500 Mbit/s) an N = 2 allreduce gained nothing from
    /// the second rail with autotuning and 1.15–1.20× with 128 KiB (see the README).
    pub send_buffer: Option<usize>,
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
            scheduler: SchedulerKind::RoundRobin,
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
            max_attempts: 8,
            send_buffer: None,
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
            return Err(Error::Config(format!(
                "{} rails; at most {}",
                self.rails.len(),
                u16::MAX
            )));
        }
        if self.seg_max == 0 || self.seg_max > u64::from(MAX_SEGMENT_LEN) {
            return Err(Error::Config(format!(
                "seg_max {} must be in 1..={MAX_SEGMENT_LEN}",
                self.seg_max
            )));
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
            return Err(Error::Config(format!(
                "send_buffer {n} must be at least 4096 bytes"
            )));
        }
        if self.queue_max == 0 {
            return Err(Error::Config("queue_max must be at least 1".into()));
        }
        if !(8..=32).contains(&self.k) {
            return Err(Error::Config(format!(
                "k {} must be in 8..=32 (the seed's range)",
                self.k
            )));
        }
        if !(self.bandwidth.is_finite() && self.bandwidth > 0.0) {
            return Err(Error::Config(format!(
                "bandwidth {} must be a positive number of bytes/s",
                self.bandwidth
            )));
        }
        if self.max_attempts == 0 {
            return Err(Error::Config("max_attempts must be at least 1".into()));
        }
        for (name, d) in [
            ("rail_timeout", self.rail_timeout),
            ("connect_timeout", self.connect_timeout),
            ("stall_timeout", self.stall_timeout),
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
    }
}
