//! Beyond one coordinator (issue 19): leader election on etcd, the gate that keeps a standby
//! from acting, and the loop that turns a standby into the leader and back.
//!
//! Every coordinator of an HA control plane serves gRPC from its start. While it is a standby,
//! [`LeaderGate`] answers every call but `ListCoordinators` with `UNAVAILABLE` and the leader's
//! URL in the `plexus-leader` metadata, which workers and clients follow. [`lead`] campaigns on
//! `P/election` with a lease of `--lease-ttl`; once elected it loads the state from etcd, starts
//! an engine behind the services' [`EngineHandle`], and leads until its lease is lost (not
//! renewed in time: a pause, a partition, etcd gone), its engine stops (a fenced write), or
//! shutdown; then it stops the engine at once, gives the lease back and campaigns again.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, RwLock};
use std::time::{Duration, Instant};

use tokio_util::sync::CancellationToken;
use tonic::codegen::http;

use crate::engine::EngineHandle;
use crate::error::Error;
use crate::etcd::{Etcd, EtcdStore, LeaseId, LeaseRenewal};
pub use crate::status::LEADER_METADATA;
use crate::status::status;

/// One coordinator of the control plane, as `plexus coordinators` lists it.
#[derive(Clone, Debug, PartialEq)]
pub struct Coordinator {
    pub id: String,
    pub url: String,
    pub leader: bool,
    pub started_ms: u64,
    /// The coordinator answering.
    pub me: bool,
}

/// Where this coordinator stands.
pub struct Role {
    /// This coordinator's advertised URL.
    pub me: String,
    pub id: String,
    pub started_ms: u64,
    /// With sled: always the leader, and nothing expires.
    single: bool,
    leading: AtomicBool,
    /// Until when the lease is surely still ours (renewal sent at `t` with TTL `ttl` is good
    /// until `t + ttl`, as etcd counts from when it received it).
    valid_until: Mutex<Option<Instant>>,
    /// The leader's URL as last seen.
    leader: RwLock<Option<String>>,
    /// The store, as `ListCoordinators` shows it.
    pub store: String,
    etcd: Option<Etcd>,
    /// Woken when this coordinator starts or stops leading, or the leader it knows changes:
    /// what registrations held by a standby wait on ([`Role::await_lead`]).
    changed: tokio::sync::Notify,
}

/// How long a standby holds a worker's `Register` while a leader is coming (see
/// [`Role::holds_registrations`]): below the worker's 10 s limit on `Register`, and longer than
/// a new leader takes to load its state from etcd at 5,000 workers.
pub const REGISTER_HOLD: Duration = Duration::from_secs(8);

impl Role {
    /// The one coordinator of a sled store.
    pub fn single(me: String, store: String) -> Arc<Role> {
        Arc::new(Role {
            id: uuid::Uuid::new_v4().to_string(),
            started_ms: plexus_proto::now_ms(),
            leader: RwLock::new(Some(me.clone())),
            me,
            single: true,
            leading: AtomicBool::new(true),
            valid_until: Mutex::new(None),
            store,
            etcd: None,
            changed: tokio::sync::Notify::new(),
        })
    }

    /// A coordinator of an etcd store, a standby until [`lead`] wins the election.
    pub fn candidate(me: String, etcd: Etcd) -> Arc<Role> {
        Arc::new(Role {
            id: uuid::Uuid::new_v4().to_string(),
            started_ms: plexus_proto::now_ms(),
            leader: RwLock::new(None),
            me,
            single: false,
            leading: AtomicBool::new(false),
            valid_until: Mutex::new(None),
            store: etcd.url().to_string(),
            etcd: Some(etcd),
            changed: tokio::sync::Notify::new(),
        })
    }

    /// Whether this coordinator may act now: it leads and its lease has not run out.
    pub fn is_leading(&self) -> bool {
        if self.single {
            return true;
        }
        self.leading.load(Ordering::SeqCst)
            && self.valid_until.lock().unwrap_or_else(|p| p.into_inner()).is_some_and(|t| Instant::now() < t)
    }

    pub fn leader(&self) -> Option<String> {
        if self.is_leading() {
            return Some(self.me.clone());
        }
        self.leader.read().unwrap_or_else(|p| p.into_inner()).clone()
    }

    fn set_leader(&self, url: Option<String>) {
        let mut leader = self.leader.write().unwrap_or_else(|p| p.into_inner());
        if *leader != url {
            *leader = url;
            self.changed.notify_waiters();
        }
    }

    fn set_leading(&self, leading: bool) {
        self.leading.store(leading, Ordering::SeqCst);
        self.changed.notify_waiters();
    }

    /// Whether this standby holds a worker's `Register` rather than refusing it: a leader is
    /// coming — none is known (the last one's lease ran out and a campaign is on), or this
    /// coordinator has been elected and is loading the state. After a leader dies its workers
    /// reach the standby while it takes over; holding them there means their connections and TLS
    /// handshakes are done by the time it leads, and they register at once instead of on their
    /// back-off (issue 35: 5,000 workers came back 6.9 s after the new leader served).
    pub fn holds_registrations(&self) -> bool {
        if self.single || self.is_leading() {
            return false;
        }
        self.leader.read().unwrap_or_else(|p| p.into_inner()).as_ref().is_none_or(|l| *l == self.me)
    }

    /// A worker's `Register` that reached this coordinator: let through at once if it leads, or
    /// once it does while it [holds registrations](Self::holds_registrations) (at most
    /// [`REGISTER_HOLD`]); otherwise refused, naming the leader.
    pub async fn admit_registration(&self) -> Result<(), Error> {
        match self.is_leading() || self.await_lead(REGISTER_HOLD).await {
            true => Ok(()),
            false => Err(self.refusal()),
        }
    }

    /// Waits, at most `within`, while this coordinator [holds registrations](Self::holds_registrations),
    /// for it to lead; whether it does.
    pub async fn await_lead(&self, within: Duration) -> bool {
        let deadline = tokio::time::Instant::now() + within;
        loop {
            let notified = self.changed.notified();
            tokio::pin!(notified);
            notified.as_mut().enable();
            if self.is_leading() {
                return true;
            }
            if !self.holds_registrations() {
                return false;
            }
            tokio::select! {
                () = &mut notified => {}
                () = tokio::time::sleep_until(deadline) => return self.is_leading(),
            }
        }
    }

    fn extend(&self, until: Instant) {
        let lapsed = {
            let mut v = self.valid_until.lock().unwrap_or_else(|p| p.into_inner());
            let lapsed = v.is_none_or(|t| Instant::now() >= t);
            if v.is_none_or(|t| until > t) {
                *v = Some(until);
            }
            lapsed
        };
        // A leader whose lease's validity had lapsed (a renewal late) may act again: the
        // registrations it held meanwhile go through now, not at the end of their hold (CI once
        // saw two workers wait the whole 8 s, and be declared lost meanwhile).
        if lapsed {
            self.changed.notify_waiters();
        }
    }

    fn expired(&self) -> bool {
        self.valid_until.lock().unwrap_or_else(|p| p.into_inner()).is_none_or(|t| Instant::now() >= t)
    }

    /// The refusal of a standby, naming the leader if one is known.
    pub fn refusal(&self) -> Error {
        Error::Standby { me: self.me.clone(), leader: self.leader() }
    }

    /// Every coordinator of the control plane, the leader marked.
    pub async fn coordinators(&self) -> Result<Vec<Coordinator>, Error> {
        let Some(etcd) = &self.etcd else {
            return Ok(vec![Coordinator {
                id: self.id.clone(),
                url: self.me.clone(),
                leader: true,
                started_ms: self.started_ms,
                me: true,
            }]);
        };
        // Read with the store's retry, so a member of etcd going down does not fail the list;
        // the leader is this coordinator, or the one the standby's watcher last saw.
        let prefix = etcd.key("/members/");
        let e = etcd.clone();
        let members = tokio::task::spawn_blocking(move || e.range(prefix.clone(), crate::etcd::prefix_end(&prefix)))
            .await
            .map_err(|e| Error::Engine(e.to_string()))??;
        let members: Vec<Vec<u8>> = members.into_iter().map(|(_, v)| v).collect();
        let leader = self.leader();
        let mut out: Vec<Coordinator> = members
            .iter()
            .filter_map(|v| serde_json::from_slice::<Member>(v).ok())
            .map(|m| Coordinator {
                leader: leader.as_deref() == Some(m.url.as_str()),
                me: m.id == self.id,
                id: m.id,
                url: m.url,
                started_ms: m.started_ms,
            })
            .collect();
        out.sort_by(|a, b| b.leader.cmp(&a.leader).then(a.url.cmp(&b.url)));
        Ok(out)
    }
}

/// A coordinator's record in `P/members/<id>`, on its lease.
#[derive(serde::Serialize, serde::Deserialize)]
struct Member {
    id: String,
    url: String,
    started_ms: u64,
}

/// Whether a call may reach a standby: the list of coordinators, and a worker's `Register` while
/// the standby holds registrations (the service then waits for it to lead).
fn standby_may_serve(role: &Role, path: &str) -> bool {
    path == "/plexus.v1.JobService/ListCoordinators"
        || (path == "/plexus.v1.WorkerService/Register" && role.holds_registrations())
}

/// The gate in front of every service (`crate::gate`): a standby refuses with the leader's URL.
#[derive(Clone)]
pub struct LeaderGate {
    role: Arc<Role>,
}

impl LeaderGate {
    pub fn new(role: Arc<Role>) -> LeaderGate {
        LeaderGate { role }
    }
}

impl crate::gate::Gate for LeaderGate {
    fn admit<B>(&self, req: &mut http::Request<B>) -> Result<(), tonic::Status> {
        if self.role.is_leading() || standby_may_serve(&self.role, req.uri().path()) {
            return Ok(());
        }
        Err(status(self.role.refusal()))
    }
}

/// What a term of leadership needs to start and stop an engine.
pub trait Term: Send + Sync {
    /// Loads the state from `store` and starts an engine on it (blocking); the engine acts only
    /// while `acting` says this coordinator may ([`crate::engine::Acting`]).
    fn start(
        &self,
        store: EtcdStore,
        acting: crate::engine::Acting,
    ) -> Result<(EngineHandle, std::thread::JoinHandle<Result<(), Error>>), Error>;
    /// Called as leadership begins (before the engine starts): reload what other leaders may
    /// have changed (the issued certificates).
    fn on_lead(&self) {}
}

/// Campaigns, leads, steps down, and campaigns again, until `shutdown`.
pub async fn lead(
    role: Arc<Role>,
    ttl: Duration,
    handle: EngineHandle,
    term: Arc<dyn Term>,
    shutdown: CancellationToken,
) -> Result<(), Error> {
    let etcd = role.etcd.clone().ok_or_else(|| Error::Invalid("leader election needs an etcd store".into()))?;
    let ttl_s = ttl.as_secs().max(1) as i64;
    let election = etcd.key("/election");
    // Who leads, for the standby's refusals.
    let watcher = tokio::spawn(watch_leader(role.clone(), etcd.clone(), election.clone(), shutdown.clone()));
    let mut backoff = Duration::from_millis(200);
    while !shutdown.is_cancelled() {
        match one_term(&role, &etcd, ttl, ttl_s, &election, &handle, &term, &shutdown).await {
            Ok(()) => backoff = Duration::from_millis(200),
            Err(e) => {
                tracing::warn!(error = %e, retry_in = ?backoff, "leadership: etcd failed; trying again");
                tokio::select! {
                    _ = tokio::time::sleep(backoff) => {}
                    _ = shutdown.cancelled() => {}
                }
                backoff = (backoff * 2).min(Duration::from_secs(2));
            }
        }
    }
    watcher.abort();
    Ok(())
}

/// One lease: campaign with it, lead while it holds, then give it back.
#[allow(clippy::too_many_arguments)]
async fn one_term(
    role: &Arc<Role>,
    etcd: &Etcd,
    ttl: Duration,
    ttl_s: i64,
    election: &[u8],
    handle: &EngineHandle,
    term: &Arc<dyn Term>,
    shutdown: &CancellationToken,
) -> Result<(), Error> {
    let granted_at = Instant::now();
    let lease = etcd.grant_lease(ttl_s).await?;
    role.extend(granted_at + ttl);
    let lost = CancellationToken::new();
    let keeper = tokio::spawn(keep_alive(role.clone(), etcd.clone(), lease, ttl, lost.clone()));
    let member = Member { id: role.id.clone(), url: role.me.clone(), started_ms: role.started_ms };
    let member_key = etcd.key(&format!("/members/{}", role.id));
    let registered = etcd.put_on_lease(member_key, serde_json::to_vec(&member).expect("plain struct"), lease).await;
    if let Err(e) = registered {
        keeper.abort();
        let _ = etcd.revoke_lease(lease).await;
        return Err(Error::Context { what: "registering as a coordinator".into(), source: Box::new(e) });
    }
    tracing::info!(lease, ttl_s, "campaigning for leadership");
    // While it waits, the standby reads what the leader commits, so that taking over reads only
    // what was written since.
    let follower = Follower::start(etcd);
    let campaign = tokio::select! {
        r = etcd.campaign(election.to_vec(), role.me.clone(), lease) => Some(r),
        _ = lost.cancelled() => None,
        _ = shutdown.cancelled() => None,
    };
    let fence = match campaign {
        Some(Ok(fence)) => fence,
        Some(Err(e)) => {
            follower.abandon();
            keeper.abort();
            let _ = etcd.revoke_lease(lease).await;
            return Err(e);
        }
        None => {
            follower.abandon();
            keeper.abort();
            let _ = etcd.revoke_lease(lease).await;
            return Ok(());
        }
    };
    let elected_at = Instant::now();
    etcd.set_fence(Some(fence));
    term.on_lead();
    let started = {
        let term = term.clone();
        // While its lease's validity lapses (a renewal late), the gate refuses every call:
        // the engine must not count the workers' silence meanwhile.
        let role = role.clone();
        let acting: crate::engine::Acting = Arc::new(move || role.is_leading());
        tokio::task::spawn_blocking(move || term.start(follower.stop(), acting))
            .await
            .map_err(|e| Error::Engine(e.to_string()))?
    };
    let (engine, thread) = match started {
        Ok(x) => x,
        Err(e) => {
            etcd.set_fence(None);
            keeper.abort();
            let _ = etcd.revoke_lease(lease).await;
            return Err(e);
        }
    };
    handle.replace(&engine);
    role.set_leader(Some(role.me.clone()));
    role.set_leading(true);
    tracing::info!(url = role.me, load_ms = elected_at.elapsed().as_millis() as u64, "leading");
    let engine_done = tokio::task::spawn_blocking(move || thread.join());
    tokio::pin!(engine_done);
    let why = tokio::select! {
        _ = lost.cancelled() => "its lease was lost",
        r = &mut engine_done => match r {
            Ok(Ok(Ok(()))) => "its engine stopped",
            Ok(Ok(Err(Error::Fenced))) => "etcd refused its write (fenced)",
            Ok(Ok(Err(_))) => "its engine failed to write",
            _ => "its engine panicked",
        },
        _ = shutdown.cancelled() => "shutdown",
    };
    // Stop acting at once: refuse calls, stop the engine (which drops its streams).
    role.set_leading(false);
    role.set_leader(None);
    engine.stop();
    handle.replace(&EngineHandle::detached());
    if why != "shutdown" {
        tracing::warn!(reason = why, "no longer leading; a standby now");
    }
    let _ = engine_done.await;
    etcd.set_fence(None);
    keeper.abort();
    // Giving the lease back deletes the election key now, so a standby takes over at once.
    let _ = etcd.revoke_lease(lease).await;
    Ok(())
}

/// How often a standby reads what the leader has committed since ([`Follower`]).
const FOLLOW_EVERY: Duration = Duration::from_millis(500);

/// A standby's store kept up with the leader's log while it campaigns ([`EtcdStore::follow`]),
/// on a thread of its own (the store's reads block).
struct Follower {
    stop: Arc<std::sync::atomic::AtomicBool>,
    thread: std::thread::JoinHandle<EtcdStore>,
    etcd: Etcd,
}

impl Follower {
    fn start(etcd: &Etcd) -> Follower {
        let store = EtcdStore::new(etcd.clone());
        use std::sync::atomic::Ordering::Relaxed;
        let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let flag = stop.clone();
        let thread = std::thread::spawn(move || {
            let mut failures = 0u32;
            while !flag.load(Relaxed) {
                match store.follow() {
                    Ok(()) => failures = 0,
                    // The load at election reads whatever this missed.
                    Err(e) => {
                        failures += 1;
                        if failures == 1 {
                            tracing::warn!(error = %e, "a standby could not read the leader's log; it tries again");
                        }
                    }
                }
                let until = Instant::now() + FOLLOW_EVERY;
                while !flag.load(Relaxed) && Instant::now() < until {
                    std::thread::sleep(Duration::from_millis(20));
                }
            }
            store
        });
        Follower { stop, thread, etcd: etcd.clone() }
    }

    /// Stops following; the store, with what it has read, for the new leader to load.
    fn stop(self) -> EtcdStore {
        self.stop.store(true, std::sync::atomic::Ordering::Relaxed);
        // A follower that panicked leaves the load to read everything.
        self.thread.join().unwrap_or_else(|_| EtcdStore::new(self.etcd))
    }

    /// Stops following without waiting for a read under way.
    fn abandon(self) {
        self.stop.store(true, std::sync::atomic::Ordering::Relaxed);
    }
}

/// Renews `lease` every third of its TTL; cancels `lost` when etcd says it expired, or when no
/// renewal has been confirmed for longer than the TTL.
async fn keep_alive(role: Arc<Role>, etcd: Etcd, lease: LeaseId, ttl: Duration, lost: CancellationToken) {
    let every = ttl / 3;
    let mut stream: Option<LeaseRenewal> = None;
    loop {
        let sent = Instant::now();
        if stream.is_none() {
            stream = tokio::time::timeout(every, etcd.renewal(lease)).await.ok().and_then(Result::ok);
        }
        let renewed = match &mut stream {
            Some(renewal) => renewal.renew(every).await.ok(),
            None => None,
        };
        match renewed {
            Some(t) if t > 0 => role.extend(sent + ttl),
            Some(_) => {
                tracing::warn!(lease, "etcd says the lease expired");
                lost.cancel();
                return;
            }
            None => {
                stream = None;
                if role.expired() {
                    tracing::warn!(lease, "the lease could not be renewed within its TTL");
                    lost.cancel();
                    return;
                }
            }
        }
        tokio::time::sleep(every.saturating_sub(sent.elapsed())).await;
    }
}

/// Keeps [`Role::leader`] current for a standby's refusals.
async fn watch_leader(role: Arc<Role>, etcd: Etcd, election: Vec<u8>, shutdown: CancellationToken) {
    while !shutdown.is_cancelled() {
        if !role.leading.load(Ordering::SeqCst) {
            // etcd unreachable for a moment (a member down): keep what was seen.
            if let Ok(leader) = etcd.leader(election.clone()).await {
                role.set_leader(leader);
            }
        }
        tokio::select! {
            _ = tokio::time::sleep(Duration::from_millis(250)) => {}
            _ = shutdown.cancelled() => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A standby of an etcd control plane, without the etcd (what the hold needs is in memory).
    fn standby(leader: Option<&str>) -> Arc<Role> {
        Arc::new(Role {
            id: "me".into(),
            started_ms: 0,
            leader: RwLock::new(leader.map(str::to_string)),
            me: "https://me:1".into(),
            single: false,
            leading: AtomicBool::new(false),
            valid_until: Mutex::new(None),
            store: "etcd://test".into(),
            etcd: None,
            changed: tokio::sync::Notify::new(),
        })
    }

    fn lead(role: &Role) {
        role.extend(Instant::now() + Duration::from_secs(30));
        role.set_leader(Some(role.me.clone()));
        role.set_leading(true);
    }

    #[tokio::test]
    async fn a_standby_holds_a_registration_while_no_leader_is_known_until_it_leads() {
        let role = standby(None);
        assert!(role.holds_registrations());
        assert!(standby_may_serve(&role, "/plexus.v1.WorkerService/Register"));
        assert!(!standby_may_serve(&role, "/plexus.v1.WorkerService/Heartbeat"), "only Register is held");
        let held = tokio::spawn({
            let role = role.clone();
            async move { role.await_lead(Duration::from_secs(20)).await }
        });
        tokio::time::sleep(Duration::from_millis(100)).await;
        assert!(!held.is_finished(), "held while the campaign is on");
        let led = Instant::now();
        lead(&role);
        assert!(held.await.unwrap(), "let through once it leads");
        assert!(led.elapsed() < Duration::from_secs(5), "at once, not at the hold's end");
        assert!(!role.holds_registrations(), "a leader holds nothing: it serves");
    }

    /// A leader whose lease's validity lapsed for a moment holds a worker's `Register` (it may
    /// not act) and lets it through as soon as the lease is renewed.
    #[tokio::test]
    async fn a_register_held_while_the_leaders_lease_lapsed_goes_through_at_the_renewal() {
        let role = standby(None);
        lead(&role);
        *role.valid_until.lock().unwrap() = Some(Instant::now());
        assert!(!role.is_leading() && role.holds_registrations());
        let held = tokio::spawn({
            let role = role.clone();
            async move { role.admit_registration().await }
        });
        tokio::time::sleep(Duration::from_millis(100)).await;
        assert!(!held.is_finished(), "held while the lease has lapsed");
        let renewed = Instant::now();
        role.extend(Instant::now() + Duration::from_secs(2));
        held.await.unwrap().expect("let through");
        assert!(renewed.elapsed() < Duration::from_secs(2), "at the renewal, not at the hold's end (8 s)");
    }

    #[tokio::test]
    async fn elected_and_loading_holds_too_and_the_hold_ends_within_its_bound() {
        let role = standby(Some("https://me:1"));
        assert!(role.holds_registrations(), "elected (the election names it) but not serving yet");
        let started = Instant::now();
        assert!(!role.await_lead(Duration::from_millis(200)).await, "it never led");
        assert!(started.elapsed() >= Duration::from_millis(200) && started.elapsed() < Duration::from_secs(5));
    }

    #[tokio::test]
    async fn another_leader_ends_the_hold_and_the_call_is_refused_naming_it() {
        let role = standby(Some("https://other:1"));
        assert!(!role.holds_registrations(), "a live leader elsewhere: refuse at once, naming it");
        assert!(!standby_may_serve(&role, "/plexus.v1.WorkerService/Register"));
        assert!(!role.await_lead(Duration::from_secs(20)).await);

        let role = standby(None);
        let held = tokio::spawn({
            let role = role.clone();
            async move { role.await_lead(Duration::from_secs(20)).await }
        });
        tokio::time::sleep(Duration::from_millis(100)).await;
        let seen = Instant::now();
        role.set_leader(Some("https://other:1".into()));
        assert!(!held.await.unwrap());
        assert!(seen.elapsed() < Duration::from_secs(5), "ends as soon as the other leader is seen");
        match role.refusal() {
            Error::Standby { leader, .. } => assert_eq!(leader.as_deref(), Some("https://other:1")),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn the_single_coordinator_of_a_sled_store_never_holds() {
        let role = Role::single("https://me:1".into(), "sled:/x".into());
        assert!(!role.holds_registrations());
    }
}
