//! The engine's queue: every command stamped with when it was sent, and the engine's side
//! recording how long the one it takes waited; with the workers' heartbeats' answer times, how
//! far behind the coordinator is ([`Load`], which `shed` acts on).

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::mpsc as std_mpsc;
use std::time::{Duration, Instant};

/// How far one heartbeat moves the estimate of their 90th percentile answer time, µs, up (it was
/// slower) and down (it was not): 9 to 1, so it settles where 10 % are slower.
const BEAT_STEP_UP: u64 = 900;
const BEAT_STEP_DOWN: u64 = 100;

/// How far behind the coordinator is: by the commands its engine takes, and by how long its
/// workers' heartbeats take to answer.
#[derive(Default, Debug)]
pub struct Load {
    /// How long the command the engine took last had waited, µs (0 while the engine is idle).
    lag_us: AtomicU64,
    /// Heartbeats' time from their handler's start to the engine's answer, µs: a running
    /// estimate of its 90th percentile (each slower heartbeat raises it by 0.9 ms, each faster
    /// one lowers it by 0.1 ms, so it settles where 10 % are slower). It grows when the engine is
    /// behind and when the process is short of CPU (the handler's wake-up waits for a runtime
    /// thread), which the engine's queue does not show; and a stall moves it by 0.9 ms a
    /// heartbeat held up, whatever the stall's length.
    beat_us: AtomicU64,
    /// Requests refused, since start.
    pub(crate) shed: AtomicU64,
    /// Since when (µs after `epoch`) it has been behind, as the last client call saw; 0: not.
    behind_since_us: AtomicU64,
    epoch: std::sync::OnceLock<Instant>,
}

impl Load {
    pub fn lag(&self) -> Duration {
        Duration::from_micros(self.lag_us.load(Relaxed))
    }

    /// The running estimate of heartbeats' 90th-percentile answer time.
    pub fn beat(&self) -> Duration {
        Duration::from_micros(self.beat_us.load(Relaxed))
    }

    /// A heartbeat was answered in `took`. (Concurrent updates may lose one step to another,
    /// which thousands of heartbeats a second do not notice.)
    pub fn heartbeat(&self, took: Duration) {
        let old = self.beat_us.load(Relaxed);
        let new =
            if took.as_micros() > u128::from(old) { old + BEAT_STEP_UP } else { old.saturating_sub(BEAT_STEP_DOWN) };
        self.beat_us.store(new, Relaxed);
    }

    pub fn shed(&self) -> u64 {
        self.shed.load(Relaxed)
    }

    /// Whether it has been behind (`now`) for at least `sustain`, noting when it started.
    pub(crate) fn behind_for(&self, behind: bool, sustain: Duration) -> bool {
        let epoch = *self.epoch.get_or_init(Instant::now);
        if !behind {
            self.behind_since_us.store(0, Relaxed);
            return false;
        }
        let now = epoch.elapsed().as_micros() as u64 + 1;
        let since = match self.behind_since_us.compare_exchange(0, now, Relaxed, Relaxed) {
            Ok(_) => now,
            Err(since) => since,
        };
        Duration::from_micros(now - since) >= sustain
    }
}

/// The queue into the engine: every command stamped with when it was sent.
pub fn channel<T>() -> (Sender<T>, Receiver<T>) {
    let (tx, rx) = std_mpsc::channel();
    let load = Arc::new(Load::default());
    (Sender { tx, load: load.clone() }, Receiver { rx, load })
}

pub struct Sender<T> {
    tx: std_mpsc::Sender<(Instant, T)>,
    load: Arc<Load>,
}

impl<T> Clone for Sender<T> {
    fn clone(&self) -> Self {
        Sender { tx: self.tx.clone(), load: self.load.clone() }
    }
}

/// The receiving side is gone (the engine stopped).
#[derive(Debug)]
pub struct Gone;

impl<T> Sender<T> {
    pub fn send(&self, item: T) -> Result<(), Gone> {
        self.tx.send((Instant::now(), item)).map_err(|_| Gone)
    }

    pub fn load(&self) -> &Arc<Load> {
        &self.load
    }
}

pub struct Receiver<T> {
    rx: std_mpsc::Receiver<(Instant, T)>,
    load: Arc<Load>,
}

impl<T> Receiver<T> {
    /// The next command within `timeout`; a timeout means the engine is idle (no lag).
    pub fn recv_timeout(&self, timeout: Duration) -> Result<T, std_mpsc::RecvTimeoutError> {
        let r = self.rx.recv_timeout(timeout);
        if matches!(r, Err(std_mpsc::RecvTimeoutError::Timeout)) {
            self.load.lag_us.store(0, Relaxed);
        }
        r.map(|c| self.took(c))
    }

    /// The next command if one waits.
    pub fn try_recv(&self) -> Result<T, std_mpsc::TryRecvError> {
        self.rx.try_recv().map(|c| self.took(c))
    }

    fn took(&self, (sent, item): (Instant, T)) -> T {
        self.load.lag_us.store(sent.elapsed().as_micros().min(u128::from(u64::MAX)) as u64, Relaxed);
        item
    }
}
