//! Who may call what: the cluster CA, tokens, and the check in front of every call.
//!
//! [`Security`] is the coordinator's trust, kept in the store's `security` tree:
//!
//! - `meta/cluster`, `meta/ca_cert`, `meta/ca_key`, `meta/rail_key`: made on the first start
//!   ([`Security::open`]) and never changed by a restart. The CA's key lives only there, under
//!   the store's durability rules (flushed before anything that depends on it is handed out).
//! - `token/<id>`: a [`TokenRecord`] — scope, name, times, and the SHA-256 of the secret, never
//!   the secret.
//! - `cert/<fingerprint>` → worker id, and `worker/<worker id>` → its current fingerprint: the
//!   certificates issued to workers; `issued/<worker id>`: an [`IssuedRecord`] (the key it was
//!   issued for, its expiry, the certificate). A worker id is bound to the key of its current
//!   certificate: a join that claims it with another key is refused (issue 29: a join token
//!   would otherwise buy a live worker's identity and lock it out), until an admin revokes the
//!   certificate (`plexus-coordinator token revoke-worker ID`) or it expires. The same key gets
//!   the same certificate again (a join whose reply was lost).
//!
//! [`Auth`] runs before every call: it looks up what the called method needs ([`need`]),
//! checks the bearer token (looked up in the store on every call, so a revoked token stops at
//! once) or the client certificate, and leaves a [`Caller`] in the request for the handlers,
//! which compare a worker id in a message with the certificate's. Anything not in the table is
//! refused.

use std::collections::HashMap;
use std::path::Path;
use std::sync::{Arc, Mutex, RwLock};

use plexus_proto::{WorkerId, pb};
use plexus_security::pki::Issued;
use plexus_security::{ClusterCa, Fingerprint, Scope, Token};
use tonic::codegen::http;

use crate::error::Error;
use crate::status::status;
use crate::store::SecurityStore;

/// The file, in the data dir, that holds the CA certificate clients and workers trust.
pub const CA_FILE: &str = "ca.pem";
/// The first admin token, written (mode 0600) on the first start only.
pub const ADMIN_TOKEN_FILE: &str = "admin.token";
/// A join token for the workers of `plexus up` and the compose cluster, written (mode 0600) on
/// the first start only.
pub const JOIN_TOKEN_FILE: &str = "join.token";

/// The message of a call that needs a token and has none; the CLI shows it as it is.
pub const NEED_TOKEN: &str =
    "the coordinator requires a token: set PLEXUS_TOKEN or pass --token-file (plexus token create)";

/// A token as stored.
#[derive(Clone, Debug, serde::Serialize, serde::Deserialize)]
pub struct TokenRecord {
    pub id: String,
    pub name: String,
    pub scope: String,
    /// SHA-256 of the secret, hex.
    pub hash: String,
    pub created_ms: u64,
    /// 0: never.
    #[serde(default)]
    pub expires_ms: u64,
    /// 0: not revoked.
    #[serde(default)]
    pub revoked_ms: u64,
}

impl TokenRecord {
    /// What lists and revocations show of it.
    pub fn info(&self) -> plexus_security::tokens::TokenInfo {
        plexus_security::tokens::TokenInfo {
            id: self.id.clone(),
            scope: self.scope.clone(),
            name: self.name.clone(),
            created_ms: self.created_ms,
            expires_ms: self.expires_ms,
            revoked_ms: self.revoked_ms,
        }
    }
}

/// What is kept of a worker's current certificate besides its fingerprint.
#[derive(Clone, Debug, serde::Serialize, serde::Deserialize)]
struct IssuedRecord {
    /// The public key it certifies, hex.
    key: String,
    /// The end of its validity, Unix seconds.
    not_after_s: i64,
    pem: String,
}

/// Tokens made on the first start, to be written to the data dir.
pub struct FirstStart {
    pub admin: Token,
    pub join: Token,
}

/// The cluster's trust, as the running coordinator holds it.
pub struct Security {
    store: SecurityStore,
    ca: ClusterCa,
    /// The rail handshake's key, sent to every registered worker.
    pub rail_key: Vec<u8>,
    /// The coordinator's certificate, issued at this start.
    pub identity: Issued,
    /// `cert/…` records, in memory for the per-call lookup.
    certs: RwLock<HashMap<Fingerprint, WorkerId>>,
    /// Joins and revocations of one worker id are serialised by a stripe of these (by the id), so
    /// two joins for one id cannot both pass the check; those of other ids go on meanwhile, and
    /// `certs` is locked only to update it. Issue 35: one lock held across a join's four store
    /// calls made 5,000 joins take 34–55 s on etcd (a consensus write each), and every
    /// authenticated call waited behind it.
    joining: Vec<Mutex<()>>,
}

/// Stripes of [`Security::joining`].
const JOIN_STRIPES: usize = 64;

impl std::fmt::Debug for Security {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Security").finish_non_exhaustive()
    }
}

fn corrupt(key: &str, reason: impl std::fmt::Display) -> Error {
    Error::Corrupt { key: format!("security/{key}"), reason: reason.to_string() }
}

fn text(store: &SecurityStore, key: &str) -> Result<Option<String>, Error> {
    store.get(key)?.map(|v| String::from_utf8(v).map_err(|e| corrupt(key, e))).transpose()
}

fn load_certs(store: &SecurityStore) -> Result<HashMap<Fingerprint, WorkerId>, Error> {
    let mut certs = HashMap::new();
    for (key, worker) in store.scan("cert/")? {
        let fp = Fingerprint(key["cert/".len()..].to_string());
        let worker = String::from_utf8_lossy(&worker).parse::<WorkerId>().map_err(|e| corrupt(&key, e))?;
        certs.insert(fp, worker);
    }
    Ok(certs)
}

fn security_error(e: plexus_security::Error) -> Error {
    Error::Invalid(e.to_string())
}

impl Security {
    /// Loads the cluster's trust, making it on the first start (then also an admin token and a
    /// join token, returned once). The coordinator's certificate is issued anew for `names`
    /// (extra host names and addresses; the fixed name clients check is always in it).
    pub fn open(store: SecurityStore, names: &[String], now_ms: u64) -> Result<(Security, Option<FirstStart>), Error> {
        let mut first = None;
        let ca = match (text(&store, "meta/cluster")?, text(&store, "meta/ca_cert")?, text(&store, "meta/ca_key")?) {
            (Some(cluster), Some(cert), Some(key)) => {
                ClusterCa::load(&cluster, &cert, &key).map_err(|e| corrupt("meta/ca_key", e))?
            }
            (None, None, None) => {
                let cluster = hex::encode(plexus_security::random_bytes::<8>());
                let ca = ClusterCa::create(&cluster).map_err(security_error)?;
                store.put("meta/rail_key", &plexus_security::random_bytes::<32>())?;
                store.put("meta/ca_key", ca.key_pem().as_bytes())?;
                store.put("meta/ca_cert", ca.cert_pem().as_bytes())?;
                // Written last: its presence says the rest is there.
                store.put("meta/cluster", cluster.as_bytes())?;
                first = Some(());
                tracing::info!(cluster, "made the cluster CA");
                ca
            }
            _ => {
                return Err(corrupt(
                    "meta",
                    "the cluster CA is half there (cluster id, certificate and key must all be present)",
                ));
            }
        };
        let rail_key = store
            .get("meta/rail_key")?
            .filter(|k| k.len() == 32)
            .ok_or_else(|| corrupt("meta/rail_key", "missing or not 32 bytes"))?;
        let identity = ca.issue_coordinator(names).map_err(security_error)?;
        let certs = load_certs(&store)?;
        let joining = (0..JOIN_STRIPES).map(|_| Mutex::new(())).collect();
        let security = Security { store, ca, rail_key, identity, certs: RwLock::new(certs), joining };
        if first.is_some() {
            let (admin, _) = security.create_token(Scope::Admin, "bootstrap admin token", 0, now_ms)?;
            let (join, _) = security.create_token(Scope::Worker, "bootstrap join token", 0, now_ms)?;
            return Ok((security, Some(FirstStart { admin, join })));
        }
        Ok((security, None))
    }

    pub fn ca_pem(&self) -> &str {
        self.ca.cert_pem()
    }

    /// Writes `ca.pem` (every start) and, on the first start, `admin.token` and `join.token`
    /// (mode 0600) into `dir`, and says on stderr where the admin token is (never the token).
    pub fn write_files(&self, dir: &Path, first: Option<&FirstStart>) -> Result<(), Error> {
        let io = |e: plexus_security::Error| Error::Invalid(e.to_string());
        plexus_security::files::write(&dir.join(CA_FILE), self.ca_pem(), 0o644).map_err(io)?;
        if let Some(first) = first {
            let admin = dir.join(ADMIN_TOKEN_FILE);
            plexus_security::files::write_secret(&admin, &format!("{}\n", first.admin.expose())).map_err(io)?;
            plexus_security::files::write_secret(&dir.join(JOIN_TOKEN_FILE), &format!("{}\n", first.join.expose()))
                .map_err(io)?;
            // Where it is, never the token itself: stderr usually ends in a log file that is
            // kept, rotated and read by others.
            eprintln!(
                "plexus-coordinator: first start: an admin token is in {} (mode 0600; `export PLEXUS_TOKEN_FILE={}`)",
                admin.display(),
                admin.display()
            );
        }
        Ok(())
    }

    /// Copies what a worker needs to join — `ca.pem`, and the data dir's `join.token` when it
    /// still has one — into `dir`, a directory shared with workers.
    pub fn write_join_files(&self, data_dir: &Path, dir: &Path) -> Result<(), Error> {
        let io = |e: plexus_security::Error| Error::Invalid(e.to_string());
        std::fs::create_dir_all(dir).map_err(|e| Error::Io(format!("creating {}", dir.display()), e))?;
        plexus_security::files::write(&dir.join(CA_FILE), self.ca_pem(), 0o644).map_err(io)?;
        match std::fs::read_to_string(data_dir.join(JOIN_TOKEN_FILE)) {
            Ok(token) => plexus_security::files::write_secret(&dir.join(JOIN_TOKEN_FILE), &token).map_err(io)?,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                tracing::warn!(dir = %dir.display(), "no join.token in the data dir to share; make one with `plexus-coordinator token create --scope worker`")
            }
            Err(e) => return Err(Error::Io(format!("reading {}", data_dir.join(JOIN_TOKEN_FILE).display()), e)),
        }
        Ok(())
    }

    /// A new token; the whole token is returned once and only its hash is kept.
    pub fn create_token(
        &self,
        scope: Scope,
        name: &str,
        ttl_ms: u64,
        now_ms: u64,
    ) -> Result<(Token, TokenRecord), Error> {
        if name.len() > 200 || name.chars().any(char::is_control) {
            return Err(Error::Invalid("a token name is at most 200 characters, without control characters".into()));
        }
        let token = Token::generate();
        let record = TokenRecord {
            id: token.id.clone(),
            name: name.to_string(),
            scope: scope.as_str().to_string(),
            hash: hex::encode(token.hash()),
            created_ms: now_ms,
            expires_ms: if ttl_ms == 0 { 0 } else { now_ms.saturating_add(ttl_ms) },
            revoked_ms: 0,
        };
        self.store.put(
            &format!("token/{}", token.id),
            &serde_json::to_vec(&record).map_err(|e| Error::Invalid(e.to_string()))?,
        )?;
        Ok((token, record))
    }

    fn token_record(&self, id: &str) -> Result<Option<TokenRecord>, Error> {
        let key = format!("token/{id}");
        self.store.get(&key)?.map(|v| serde_json::from_slice(&v).map_err(|e| corrupt(&key, e))).transpose()
    }

    pub fn list_tokens(&self) -> Result<Vec<TokenRecord>, Error> {
        self.store
            .scan("token/")?
            .into_iter()
            .map(|(k, v)| serde_json::from_slice::<TokenRecord>(&v).map_err(|e| corrupt(&k, e)))
            .collect()
    }

    /// Revokes token `id` (at once: every call looks its token up).
    pub fn revoke(&self, id: &str, now_ms: u64) -> Result<TokenRecord, Error> {
        if !Token::is_id(id) {
            return Err(Error::Invalid(format!(
                "{id:?} is not a token id (12 hex digits, as `plexus token list` shows)"
            )));
        }
        let mut record = self.token_record(id)?.ok_or_else(|| Error::NotFound(format!("no token {id}")))?;
        if record.revoked_ms == 0 {
            record.revoked_ms = now_ms;
            self.store.put(
                &format!("token/{id}"),
                &serde_json::to_vec(&record).map_err(|e| Error::Invalid(e.to_string()))?,
            )?;
        }
        Ok(record)
    }

    /// The scope of a presented token, or why it is refused.
    pub fn authenticate(&self, token: &Token, now_ms: u64) -> Result<Scope, Error> {
        let record = self
            .token_record(&token.id)?
            .filter(|r| hex::decode(&r.hash).is_ok_and(|hash| token.matches(&hash)))
            .ok_or_else(|| Error::Unauthenticated(format!("token {} is not known to this coordinator", token.id)))?;
        if record.revoked_ms != 0 {
            return Err(Error::Unauthenticated(format!("token {} was revoked", token.id)));
        }
        if record.expires_ms != 0 && now_ms >= record.expires_ms {
            return Err(Error::Unauthenticated(format!("token {} has expired", token.id)));
        }
        record.scope.parse::<Scope>().map_err(|e| corrupt(&format!("token/{}", token.id), e))
    }

    /// Signs a joining worker's public key into a certificate for `worker`. An id whose current
    /// certificate (unrevoked, unexpired at `now_ms`) is for another key is refused; for the same
    /// key, that certificate is returned again.
    pub fn issue_worker(&self, worker: WorkerId, public_key: &[u8], now_ms: u64) -> Result<String, Error> {
        plexus_security::pki::check_worker_key(public_key)
            .map_err(|e| Error::Invalid(format!("the join of worker {worker} is refused: {e}")))?;
        let key = hex::encode(public_key);
        // Held from the check to the write, so two joins for one id cannot both pass the check.
        let _id = self.claim(worker);
        let mut stale = None;
        if let Some(old) = text(&self.store, &format!("worker/{worker}"))? {
            let now_s = i64::try_from(now_ms / 1000).unwrap_or(i64::MAX);
            match self.issued_record(worker)? {
                Some(r) if r.not_after_s <= now_s => {} // expired: the id is free again
                Some(r) if r.key == key => return Ok(r.pem),
                _ => {
                    return Err(Error::AlreadyExists(format!(
                        "worker id {worker} already has a current certificate, for another key: a join may not take \
                         over a worker's identity. If that worker is gone for good, an admin revokes its certificate \
                         first (`plexus-coordinator token revoke-worker {worker}`), then the id may join again"
                    )));
                }
            }
            self.store.remove(&format!("cert/{old}"))?;
            stale = Some(Fingerprint(old));
        }
        let issued = self.ca.issue_worker(&worker.to_string(), public_key).map_err(security_error)?;
        let fp = Fingerprint::of_pem(&issued.pem).map_err(security_error)?;
        let record = IssuedRecord { key, not_after_s: issued.not_after_s, pem: issued.pem.clone() };
        let json = serde_json::to_vec(&record).map_err(|e| Error::Invalid(e.to_string()))?;
        self.store.put_many(&[
            (format!("issued/{worker}"), json),
            (format!("cert/{fp}"), worker.to_string().into_bytes()),
            (format!("worker/{worker}"), fp.0.clone().into_bytes()),
        ])?;
        let mut certs = self.certs.write().unwrap_or_else(|p| p.into_inner());
        if let Some(old) = stale {
            certs.remove(&old);
        }
        certs.insert(fp, worker);
        Ok(issued.pem)
    }

    /// Serialises the joins and revocations of `worker` (see [`Security::joining`]).
    fn claim(&self, worker: WorkerId) -> std::sync::MutexGuard<'_, ()> {
        let stripe = worker.as_bytes().iter().fold(0usize, |h, b| h.wrapping_mul(31).wrapping_add(usize::from(*b)));
        self.joining[stripe % JOIN_STRIPES].lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The record of `worker`'s current certificate; `None` for one issued before records were
    /// kept (treated as current for any key: only a revocation frees its id).
    fn issued_record(&self, worker: WorkerId) -> Result<Option<IssuedRecord>, Error> {
        let key = format!("issued/{worker}");
        self.store.get(&key)?.map(|v| serde_json::from_slice(&v).map_err(|e| corrupt(&key, e))).transpose()
    }

    /// Revokes the current certificate of `worker`; false when it had none.
    pub fn revoke_worker(&self, worker: WorkerId) -> Result<bool, Error> {
        let _id = self.claim(worker);
        let Some(fp) = text(&self.store, &format!("worker/{worker}"))? else { return Ok(false) };
        self.store.remove(&format!("cert/{fp}"))?;
        // Refused from here on, though the other records are still to go.
        self.certs.write().unwrap_or_else(|p| p.into_inner()).remove(&Fingerprint(fp));
        self.store.remove(&format!("worker/{worker}"))?;
        self.store.remove(&format!("issued/{worker}"))?;
        Ok(true)
    }

    /// The worker a certificate was issued to, if it is current. Looked up in memory, then in
    /// the store: with several coordinators on one etcd (issue 19), another one may have issued
    /// it since this one loaded its certificates.
    pub fn worker_of(&self, fp: &Fingerprint) -> Option<WorkerId> {
        if let Some(w) = self.certs.read().unwrap_or_else(|p| p.into_inner()).get(fp).copied() {
            return Some(w);
        }
        text(&self.store, &format!("cert/{}", fp.0)).ok().flatten()?;
        // Read again under the lock: a revocation removes the record from the store before it
        // takes the lock to forget it, so one that came since the read is seen here.
        let mut certs = self.certs.write().unwrap_or_else(|p| p.into_inner());
        let worker = text(&self.store, &format!("cert/{}", fp.0)).ok().flatten()?.parse::<WorkerId>().ok()?;
        certs.insert(fp.clone(), worker);
        Some(worker)
    }

    /// Loads the issued certificates again from the store, forgetting those revoked elsewhere:
    /// a coordinator does so whenever it becomes the leader.
    pub fn reload_certs(&self) -> Result<(), Error> {
        let fresh = load_certs(&self.store)?;
        *self.certs.write().unwrap_or_else(|p| p.into_inner()) = fresh;
        Ok(())
    }

    /// The TLS settings of the coordinator's server: its certificate; a client certificate is
    /// optional (CLI users bring a token instead) but must be of this CA when presented.
    pub fn server_tls(&self) -> tonic::transport::ServerTlsConfig {
        plexus_security::tls::server(&self.identity, self.ca_pem(), true)
    }

    /// The TLS settings of the coordinator's calls to workers (log reads).
    pub fn peer_tls(&self) -> tonic::transport::ClientTlsConfig {
        plexus_security::tls::client(self.ca_pem(), plexus_security::tls::WORKER_NAME, Some(&self.identity))
    }
}

/// What a method needs of its caller.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Need {
    /// A bearer token of (at least) this scope.
    Token(Scope),
    /// A worker certificate issued by this coordinator.
    WorkerCert,
}

/// What each method of the coordinator's services needs; `None`: not a method it serves.
pub fn need(path: &str) -> Option<Need> {
    let (service, method) = path.strip_prefix('/')?.split_once('/')?;
    Some(match (service, method) {
        (
            "plexus.v1.JobService",
            "GetJob" | "ListJobs" | "WatchJob" | "GetLogs" | "GetObject" | "ListWorkers" | "ExplainPlacement"
            | "GetStoreInfo",
        ) => Need::Token(Scope::Read),
        ("plexus.v1.JobService", "SubmitJob" | "CancelJob" | "ResubmitJob" | "StatWorkingDir" | "UploadWorkingDir") => {
            Need::Token(Scope::Submit)
        }
        (
            "plexus.v1.JobService",
            "ExportPolicy" | "CreateToken" | "ListTokens" | "RevokeToken" | "RevokeWorker" | "SetQueue" | "DrainWorker"
            | "RemoveWorker",
        ) => Need::Token(Scope::Admin),
        ("plexus.v1.JobService", "ListQueues" | "ListCoordinators") => Need::Token(Scope::Read),
        ("plexus.v1.WorkerService", "Join") => Need::Token(Scope::Worker),
        (
            "plexus.v1.WorkerService",
            "Register" | "Heartbeat" | "Assignments" | "ReportTasks" | "ResolvePeer" | "FetchWorkingDir",
        ) => Need::WorkerCert,
        _ => return None,
    })
}

/// Who made a call, as [`Auth`] established it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Caller {
    User { token: String, scope: Scope },
    Worker(WorkerId),
}

/// Checks that a worker call's `worker_id` is the caller's (`caller`: what [`Auth`] left
/// in the request). `secure`: the coordinator checks callers (without it there is no [`Caller`]
/// and nothing to compare).
pub fn check_worker(caller: Option<&Caller>, claimed: WorkerId, secure: bool) -> Result<(), Error> {
    match caller {
        Some(Caller::Worker(id)) if *id == claimed => Ok(()),
        Some(Caller::Worker(id)) => Err(Error::PermissionDenied(format!(
            "worker id {claimed} in the request does not match the caller's certificate, which was issued to {id}"
        ))),
        Some(Caller::User { .. }) => {
            Err(Error::PermissionDenied("worker calls need a worker's certificate, not a user token".into()))
        }
        None if secure => Err(Error::Unauthenticated("worker calls need a worker's certificate".into())),
        None => Ok(()),
    }
}

/// Decides one call: the [`Caller`] or the refusal.
fn decide<B>(security: &Security, req: &http::Request<B>) -> Result<Caller, Error> {
    let path = req.uri().path();
    let Some(need) = need(path) else {
        return Err(Error::PermissionDenied(format!("{path} is not a method this coordinator serves to anyone")));
    };
    match need {
        Need::Token(scope) => {
            let header = req.headers().get(http::header::AUTHORIZATION).map(|v| v.as_bytes());
            let token = plexus_security::tls::bearer_of(header)
                .map_err(|e| Error::Unauthenticated(e.to_string()))?
                .ok_or_else(|| {
                    Error::Unauthenticated(if scope == Scope::Worker {
                        "joining needs a join token (plexus-coordinator token create --scope worker)".into()
                    } else {
                        NEED_TOKEN.into()
                    })
                })?;
            let have = security.authenticate(&token, plexus_proto::now_ms())?;
            if !have.allows(scope) {
                let method = path.rsplit('/').next().unwrap_or(path);
                return Err(Error::PermissionDenied(format!(
                    "token {} has scope {have}; {method} needs {scope}",
                    token.id
                )));
            }
            Ok(Caller::User { token: token.id, scope: have })
        }
        Need::WorkerCert => {
            let certs = req
                .extensions()
                .get::<tonic::transport::server::TlsConnectInfo<tonic::transport::server::TcpConnectInfo>>()
                .and_then(|i| i.peer_certs());
            let Some(cert) = certs.as_ref().and_then(|c| c.first()) else {
                return Err(Error::Unauthenticated(
                    "worker calls need the worker's certificate: start the worker with a join token (--join-token-file)"
                        .into(),
                ));
            };
            let fp = Fingerprint::of_der(cert.as_ref());
            security
                .worker_of(&fp)
                .map(Caller::Worker)
                .ok_or_else(|| Error::Unauthenticated("this certificate is not a current worker certificate (the worker joined again, or was issued by another cluster); join again with a join token".into()))
        }
    }
}

/// The gate (`crate::gate`) that runs [`decide`] before every call of the coordinator and leaves
/// the [`Caller`] on the call; without a [`Security`] (`--insecure`) it lets every call through.
#[derive(Clone)]
pub struct Auth {
    security: Option<Arc<Security>>,
}

impl Auth {
    pub fn new(security: Option<Arc<Security>>) -> Auth {
        Auth { security }
    }
}

impl crate::gate::Gate for Auth {
    fn admit<B>(&self, req: &mut http::Request<B>) -> Result<(), tonic::Status> {
        let Some(security) = &self.security else { return Ok(()) };
        match decide(security, req) {
            Ok(caller) => {
                req.extensions_mut().insert(caller);
                Ok(())
            }
            Err(refused) => {
                let refused = status(refused);
                tracing::debug!(path = req.uri().path(), code = ?refused.code(), message = refused.message(), "call refused");
                Err(refused)
            }
        }
    }
}

/// `Join`: a certificate for the joining worker's key (checked against its join token by the
/// auth layer), with the CA's certificate.
pub async fn join(security: Option<Arc<Security>>, r: pb::JoinRequest) -> Result<pb::JoinResponse, Error> {
    let Some(security) = security else {
        return Err(Error::Insecure(
            "this coordinator runs with --insecure: workers need no certificate (start the worker with --insecure)"
                .into(),
        ));
    };
    let worker = plexus_proto::convert::worker_id("worker_id", &r.worker_id)?;
    let (certificate, ca) = tokio::task::spawn_blocking(move || {
        security.issue_worker(worker, &r.public_key, plexus_proto::now_ms()).map(|c| (c, security.ca_pem().to_string()))
    })
    .await
    .map_err(|e| Error::Engine(format!("issuing a worker certificate: {e}")))??;
    tracing::info!(%worker, "issued a worker certificate");
    Ok(pb::JoinResponse { certificate, ca })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::SledStore;

    fn open(dir: &Path) -> (SledStore, Security, Option<FirstStart>) {
        let (store, _) = SledStore::open(&dir.join("state.sled")).unwrap();
        let (security, first) =
            Security::open(store.spaces().unwrap().security_store(), &["node7".into()], 1_000).unwrap();
        (store, security, first)
    }

    #[test]
    fn the_ca_and_tokens_survive_a_restart_and_only_the_first_start_bootstraps() {
        let dir = tempfile::tempdir().unwrap();
        let (store, security, first) = open(dir.path());
        let first = first.expect("the first start makes the bootstrap tokens");
        assert_eq!(security.authenticate(&first.admin, 2_000).unwrap(), Scope::Admin);
        assert_eq!(security.authenticate(&first.join, 2_000).unwrap(), Scope::Worker);
        security.write_files(dir.path(), Some(&first)).unwrap();
        let mode = |f: &str| {
            std::os::unix::fs::PermissionsExt::mode(&std::fs::metadata(dir.path().join(f)).unwrap().permissions())
                & 0o777
        };
        assert_eq!(mode(ADMIN_TOKEN_FILE), 0o600);
        assert_eq!(mode(JOIN_TOKEN_FILE), 0o600);
        let ca = security.ca_pem().to_string();
        let key = security.rail_key.clone();
        drop((security, store));

        let (_store, again, first_again) = open(dir.path());
        assert!(first_again.is_none(), "a restart must not make new bootstrap tokens");
        assert_eq!(again.ca_pem(), ca, "the CA is kept across restarts");
        assert_eq!(again.rail_key, key);
        assert_eq!(again.authenticate(&first.admin, 3_000).unwrap(), Scope::Admin);
        // The stored record never holds the secret.
        let stored = again.store.scan("token/").unwrap();
        let secret = &first.admin.expose()[17..];
        assert!(stored.iter().all(|(_, v)| !String::from_utf8_lossy(v).contains(secret)));
    }

    #[test]
    fn unknown_wrong_revoked_and_expired_tokens_are_refused() {
        let dir = tempfile::tempdir().unwrap();
        let (_store, security, _) = open(dir.path());
        let (token, record) = security.create_token(Scope::Read, "ci", 500, 1_000).unwrap();
        assert_eq!(record.expires_ms, 1_500);
        assert_eq!(security.authenticate(&token, 1_200).unwrap(), Scope::Read);
        let err = status(security.authenticate(&token, 1_500).unwrap_err());
        assert_eq!(err.code(), tonic::Code::Unauthenticated);
        assert!(err.message().contains("expired"), "{}", err.message());

        let (token, _) = security.create_token(Scope::Submit, "bot", 0, 1_000).unwrap();
        // Right id, wrong secret.
        let forged = Token::parse(&format!("plx_{}_{}", token.id, "0".repeat(64))).unwrap();
        assert!(security.authenticate(&forged, 1_000).unwrap_err().to_string().contains("not known"));
        assert!(security.authenticate(&Token::generate(), 1_000).is_err());
        security.revoke(&token.id, 2_000).unwrap();
        assert!(security.authenticate(&token, 2_001).unwrap_err().to_string().contains("revoked"));
        assert!(security.revoke("nope", 1).is_err());
        assert!(matches!(security.revoke("0123456789ab", 1), Err(Error::NotFound(_))));
        assert!(security.create_token(Scope::Read, "bad\nname", 0, 1).is_err());
    }

    #[test]
    fn a_worker_id_is_bound_to_its_key_until_revoked() {
        let dir = tempfile::tempdir().unwrap();
        let (_store, security, _) = open(dir.path());
        let worker = WorkerId::random();
        let key = plexus_security::WorkerKey::generate().unwrap().public_key();
        let now = 1_000;
        let pem = security.issue_worker(worker, &key, now).unwrap();
        let first = Fingerprint::of_pem(&pem).unwrap();
        assert_eq!(security.worker_of(&first), Some(worker));
        // The same key again (a join whose reply was lost): the same certificate.
        assert_eq!(security.issue_worker(worker, &key, now).unwrap(), pem);
        // Another key: refused, naming the id and the way out; the first stays current.
        let other = plexus_security::WorkerKey::generate().unwrap().public_key();
        let err = security.issue_worker(worker, &other, now).unwrap_err();
        assert!(matches!(err, Error::AlreadyExists(_)), "{err:?}");
        assert!(err.to_string().contains(&format!("token revoke-worker {worker}")), "{err}");
        assert_eq!(security.worker_of(&first), Some(worker));
        // Past its expiry the id is free.
        let expires_s = security.issued_record(worker).unwrap().unwrap().not_after_s;
        let expired = 1000 * expires_s as u64 + 1;
        let third = Fingerprint::of_pem(&security.issue_worker(worker, &other, expired).unwrap()).unwrap();
        assert_eq!(security.worker_of(&first), None);
        assert_eq!(security.worker_of(&third), Some(worker));
        // Revoked: free for any key.
        assert!(security.revoke_worker(worker).unwrap());
        assert_eq!(security.worker_of(&third), None);
        assert!(!security.revoke_worker(worker).unwrap());
        let fourth = Fingerprint::of_pem(&security.issue_worker(worker, &key, now).unwrap()).unwrap();
        assert_eq!(security.worker_of(&fourth), Some(worker));
        // Not a key: refused with the reason, before anything is stored.
        let err = security.issue_worker(WorkerId::random(), &[1, 2, 3], now).unwrap_err().to_string();
        assert!(err.contains("3 bytes"), "{err}");
        let mut off = key.clone();
        off[64] ^= 1;
        let err = security.issue_worker(WorkerId::random(), &off, now).unwrap_err().to_string();
        assert!(err.contains("not a point on the P-256 curve"), "{err}");
    }

    /// Joins run side by side (the store is written outside the lock calls authenticate
    /// through): of racing joins for one id with different keys exactly one gets it, and every
    /// other id joining meanwhile gets its certificate, each known afterwards.
    #[test]
    fn joins_of_one_id_race_to_one_certificate_while_other_ids_join() {
        let dir = tempfile::tempdir().unwrap();
        let (_store, security, _) = open(dir.path());
        let security = Arc::new(security);
        let contested = WorkerId::random();
        let threads: Vec<_> = (0..16)
            .map(|i| {
                let security = security.clone();
                std::thread::spawn(move || {
                    let key = plexus_security::WorkerKey::generate().unwrap().public_key();
                    let id = if i % 2 == 0 { contested } else { WorkerId::random() };
                    (id, security.issue_worker(id, &key, 1_000))
                })
            })
            .collect();
        let results: Vec<_> = threads.into_iter().map(|t| t.join().unwrap()).collect();
        let (won, lost): (Vec<_>, Vec<_>) =
            results.iter().filter(|(id, _)| *id == contested).partition(|(_, r)| r.is_ok());
        assert_eq!(won.len(), 1, "one join of the contested id wins");
        assert!(lost.iter().all(|(_, r)| matches!(r, Err(Error::AlreadyExists(_)))), "{lost:?}");
        for (id, r) in results.iter().filter(|(_, r)| r.is_ok()) {
            let fp = Fingerprint::of_pem(r.as_ref().unwrap()).unwrap();
            assert_eq!(security.worker_of(&fp), Some(*id));
        }
        assert_eq!(results.iter().filter(|(_, r)| r.is_ok()).count(), 9);
    }

    /// Every method of the proto's coordinator services is in [`need`]'s table.
    #[test]
    fn every_coordinator_method_has_a_requirement() {
        let proto = include_str!("../../proto/proto/plexus.proto");
        let mut checked = 0;
        let mut service = None;
        for line in proto.lines().map(str::trim) {
            if let Some(name) = line.strip_prefix("service ").and_then(|l| l.split_whitespace().next()) {
                service = Some(name.to_string());
            } else if line == "}" {
                service = None;
            } else if let (Some(s), Some(rest)) = (&service, line.strip_prefix("rpc ")) {
                if s == "PeerService" {
                    continue;
                }
                let method = rest.split('(').next().unwrap().trim();
                assert!(need(&format!("/plexus.v1.{s}/{method}")).is_some(), "{s}.{method} has no entry in auth::need");
                checked += 1;
            }
        }
        assert!(checked >= 19, "found only {checked} methods: the proto parse is broken");
        assert_eq!(need("/plexus.v1.JobService/Nope"), None);
        assert_eq!(need("/plexus.v1.PeerService/FetchObject"), None);
        assert_eq!(need("garbage"), None);
    }
}
