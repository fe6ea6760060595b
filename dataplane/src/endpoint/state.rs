//! The state an endpoint's tasks share ([`Inner`]): configuration, the rail scheduler with
//! its send queues and each peer's rail health, the connections, the messages being sent and
//! received, the counters, and the cancellation token and task tracker every task hangs off.
//! The behaviour lives beside it, one file per job: `send` (the send path), `connect`
//! (connections and the handshake), `receive` (the connection reader), `health` (failures,
//! back-off and the watchdog).

use std::collections::{HashMap, VecDeque};
use std::net::{IpAddr, SocketAddr};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering::Relaxed};
use std::sync::{Arc, Mutex, RwLock};
use std::time::{Duration, Instant};

use ring::rand::SystemRandom;
use tokio::sync::Notify;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use super::config::EndpointConfig;
use super::conn::Conn;
use super::incoming::{Incoming, Limits};
use super::outgoing::{OutMsg, Segment};
use super::pacing::{self, RateMeter};
use super::stats::Counters;
use crate::auth::RailAuth;
use crate::error::{Error, Result};
use crate::peer_id::PeerId;
use crate::striping::{self, RailScheduler, RailView, SchedulerParams};

/// How often waits re-check rail health and the watchdog looks for silent connections. 100 ms
/// is small next to `rail_timeout` (seconds) and costs nothing measurable.
pub(super) const POLL: Duration = Duration::from_millis(100);

/// At most one warning per this long about refused rail connections (failed handshakes);
/// the next one says how many were not logged meanwhile. A flood of bad connections costs the
/// log one line a second, not one per connection.
const REFUSAL_LOG_EVERY: Duration = Duration::from_secs(1);

/// What every task of one endpoint shares; the [`Endpoint`](super::Endpoint) and each task hold
/// it in an `Arc`.
pub(super) struct Inner {
    pub(super) cfg: EndpointConfig,
    pub(super) id: PeerId,
    pub(super) local: Vec<SocketAddr>,
    pub(super) start: Instant,
    pub(super) sched: Mutex<SchedState>,
    /// Wakes rail i's drain task: its queue got a segment.
    pub(super) rail_ready: Vec<Notify>,
    /// Wakes senders waiting on rail i's full queue.
    pub(super) rail_space: Vec<Notify>,
    /// Bytes on rail i's connections written (or being written) and not yet answered: what the
    /// schedulers see as [`RailView::in_flight_bytes`]. Added before a segment is tracked on a
    /// connection, subtracted when it leaves the connection's in-flight map (reply or close).
    pub(super) in_flight: Vec<AtomicU64>,
    /// The socket send buffer rail i's connections should have, from its measured rate (see
    /// `pacing`); 0 until measured, or when `send_buffer` is configured.
    pub(super) sndbuf_target: Vec<AtomicUsize>,
    /// The connection used to send to (peer, rail).
    pub(super) conns: Mutex<HashMap<(PeerId, usize), Arc<Conn>>>,
    /// Every live connection, for the watchdog (an accepted connection may be live without being
    /// the one in `conns`).
    pub(super) live: Mutex<HashMap<u64, Arc<Conn>>>,
    /// Accepted connections per remote address, handshakes included (see [`InboundSlot`]).
    pub(super) inbound: Mutex<HashMap<IpAddr, usize>>,
    pub(super) outgoing: Mutex<HashMap<u64, Arc<OutMsg>>>,
    pub(super) incoming: Incoming,
    pub(super) counters: Counters,
    pub(super) next_msg: AtomicU64,
    pub(super) next_conn: AtomicU64,
    pub(super) kill_fired: AtomicBool,
    /// The current authentication mode: `cfg.auth` at first, then what
    /// [`Endpoint::set_rail_key`](super::Endpoint::set_rail_key) set. Read once per connection,
    /// at the start of its handshake.
    pub(super) auth: RwLock<RailAuth>,
    /// The handshake's nonces.
    pub(super) rng: SystemRandom,
    /// Limits the warnings about refused rail connections (see [`LogLimit`]).
    pub(super) refusals: LogLimit,
    pub(super) cancel: CancellationToken,
    pub(super) tasks: TaskTracker,
}

/// The rail scheduler and what it decides over, under one lock: the rails' send queues and
/// each peer's rail health.
pub(super) struct SchedState {
    pub(super) sched: Box<dyn RailScheduler>,
    pub(super) queues: Vec<VecDeque<Queued>>,
    pub(super) health: HashMap<PeerId, Vec<Health>>,
    /// Every rail's measured delivery rate, whatever the scheduler (see `pacing`).
    pub(super) meters: Vec<RateMeter>,
}

/// A segment waiting in a rail's send queue since `entered` (endpoint time).
pub(super) struct Queued {
    pub(super) seg: Arc<Segment>,
    pub(super) entered: Duration,
}

/// One rail's health towards one peer: out of service until `down_until`, after `failures`
/// failures in a row (each doubles the back-off, see `health`).
#[derive(Clone, Copy, Debug, Default)]
pub(super) struct Health {
    pub(super) down_until: Option<Instant>,
    pub(super) failures: u32,
}

impl Health {
    fn is_up(&self, now: Instant) -> bool {
        self.down_until.is_none_or(|t| now >= t)
    }
}

impl SchedState {
    pub(super) fn health(&mut self, peer: PeerId, rails: usize) -> &mut Vec<Health> {
        self.health.entry(peer).or_insert_with(|| vec![Health::default(); rails])
    }

    /// Rails usable towards `peer` (up, and present on both sides), with their backlogs.
    pub(super) fn views(
        &mut self,
        peer: PeerId,
        peer_rails: usize,
        now: Instant,
        in_flight: &[AtomicU64],
    ) -> Vec<RailView> {
        let m = self.queues.len();
        let queued: Vec<(usize, u64)> =
            self.queues.iter().map(|q| (q.len(), q.iter().map(|q| u64::from(q.seg.len)).sum())).collect();
        let health = self.health(peer, m);
        (0..m)
            .map(|i| RailView {
                up: i < peer_rails && health[i].is_up(now),
                queued: queued[i].0,
                queued_bytes: queued[i].1,
                in_flight_bytes: in_flight[i].load(Relaxed),
            })
            .collect()
    }
}

impl Inner {
    /// The shared state of an endpoint whose rails listen on `local` (in rail order); its
    /// tasks are started by [`Endpoint::bind`](super::Endpoint::bind).
    pub(super) fn new(cfg: EndpointConfig, local: Vec<SocketAddr>) -> Inner {
        let m = cfg.rails.len();
        let params = SchedulerParams {
            rails: m,
            seg_max: cfg.seg_max,
            queue_max: cfg.queue_max,
            bandwidth: cfg.bandwidth,
            k: cfg.k,
            seed: cfg.seed,
        };
        Inner {
            id: PeerId(local[0]),
            local,
            start: Instant::now(),
            sched: Mutex::new(SchedState {
                sched: striping::build(cfg.scheduler, &params),
                queues: (0..m).map(|_| VecDeque::new()).collect(),
                health: HashMap::new(),
                meters: vec![RateMeter::default(); m],
            }),
            rail_ready: (0..m).map(|_| Notify::new()).collect(),
            rail_space: (0..m).map(|_| Notify::new()).collect(),
            in_flight: (0..m).map(|_| AtomicU64::new(0)).collect(),
            sndbuf_target: (0..m).map(|_| AtomicUsize::new(0)).collect(),
            conns: Mutex::new(HashMap::new()),
            live: Mutex::new(HashMap::new()),
            outgoing: Mutex::new(HashMap::new()),
            inbound: Mutex::new(HashMap::new()),
            incoming: Incoming::new(Limits {
                alloc_ahead: cfg.alloc_ahead,
                per_peer: cfg.max_open_bytes_per_peer,
                total: cfg.max_open_bytes,
                partial_expiry: cfg.partial_expiry,
                unclaimed_expiry: cfg.unclaimed_expiry,
            }),
            counters: Counters::new(m),
            next_msg: AtomicU64::new(0),
            next_conn: AtomicU64::new(0),
            kill_fired: AtomicBool::new(false),
            auth: RwLock::new(cfg.auth.clone()),
            rng: SystemRandom::new(),
            refusals: LogLimit::new(REFUSAL_LOG_EVERY),
            cancel: CancellationToken::new(),
            tasks: TaskTracker::new(),
            cfg,
        }
    }

    /// A slot for a connection accepted from `ip`, or `None` if that address already has
    /// `max_conns_per_addr`.
    pub(super) fn inbound_slot(self: &Arc<Self>, ip: IpAddr) -> Option<InboundSlot> {
        let mut inbound = self.inbound.lock().expect("inbound lock");
        let n = inbound.entry(ip).or_default();
        if *n >= self.cfg.max_conns_per_addr {
            return None;
        }
        *n += 1;
        Some(InboundSlot { inner: self.clone(), ip })
    }

    /// The current authentication mode.
    pub(super) fn rail_auth(&self) -> RailAuth {
        self.auth.read().expect("auth lock").clone()
    }

    pub(super) fn now(&self) -> Duration {
        self.start.elapsed()
    }

    /// Records an acknowledged segment in its rail's rate meter and updates the rail's socket
    /// send buffer target. Called under the scheduler lock, with the scheduler's own
    /// `delivered`.
    pub(super) fn measure(&self, st: &mut SchedState, rail: usize, bytes: u64, sent_at: Duration) {
        st.meters[rail].delivered(bytes, sent_at, self.now());
        if self.cfg.send_buffer.is_none()
            && let Some(rate) = st.meters[rail].rate()
        {
            self.sndbuf_target[rail].store(pacing::send_buffer(rate), Relaxed);
        }
    }

    /// The segment length for a message to a peer with `peer_rails` rails, from the measured
    /// rates of the rails both ends have (see `pacing`).
    pub(super) fn segment_len(&self, peer_rails: usize) -> u64 {
        let st = self.sched.lock().expect("sched lock");
        let rates: Vec<Option<f64>> = st.meters.iter().take(peer_rails).map(RateMeter::rate).collect();
        pacing::segment_len(&rates, self.cfg.seg_max)
    }

    /// Every rail's measured delivery rate, bytes/s (`None` before its first acknowledgement).
    pub(super) fn rail_rates(&self) -> Vec<Option<f64>> {
        self.sched.lock().expect("sched lock").meters.iter().map(RateMeter::rate).collect()
    }

    pub(super) fn check_stall(&self, msg: &OutMsg) -> Result<()> {
        let idle = msg.stalled_for();
        if idle >= self.cfg.stall_timeout {
            return Err(Error::Stalled { peer: msg.peer, msg_id: msg.msg_id, secs: idle.as_secs_f64() });
        }
        Ok(())
    }
}

/// One accepted connection counted against its address's `max_conns_per_addr`, from the
/// accept to the end of its reader (or of its handshake, if that fails).
pub(super) struct InboundSlot {
    inner: Arc<Inner>,
    ip: IpAddr,
}

impl Drop for InboundSlot {
    fn drop(&mut self) {
        let mut inbound = self.inner.inbound.lock().expect("inbound lock");
        if let Some(n) = inbound.get_mut(&self.ip) {
            *n -= 1;
            if *n == 0 {
                inbound.remove(&self.ip);
            }
        }
    }
}

/// Rate limit for a kind of log line: at most one per `every`, counting the ones left out.
pub(super) struct LogLimit {
    every: Duration,
    state: Mutex<(Option<Instant>, u64)>,
}

impl LogLimit {
    pub(super) fn new(every: Duration) -> LogLimit {
        LogLimit { every, state: Mutex::new((None, 0)) }
    }

    /// `Some(n)` if a line may be logged now, `n` being how many were left out since the last
    /// one; `None` (and counted) if not.
    pub(super) fn admit(&self) -> Option<u64> {
        let mut st = self.state.lock().expect("log limit lock");
        let now = Instant::now();
        if st.0.is_some_and(|last| now.duration_since(last) < self.every) {
            st.1 += 1;
            return None;
        }
        st.0 = Some(now);
        Some(std::mem::take(&mut st.1))
    }
}
