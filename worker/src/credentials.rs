//! The worker's identity in a secure cluster: its certificate, and how it gets one.
//!
//! On its first start a worker has only a join token and the cluster CA's certificate. It makes
//! its own key pair, calls `WorkerService.Join` over TLS (checking the coordinator against the
//! CA, presenting the token), and receives a certificate whose identity is its worker id. The
//! key, the certificate and the CA stay in `DIR/tls/` (the key mode 0600); every later start
//! uses them and needs no token. From then on every connection is mutually authenticated: to
//! the coordinator, to peers' `PeerService`, and from peers and the coordinator to this
//! worker's `PeerService`.
//!
//! A `--ca` that differs from the stored one means the cluster changed: the worker joins again
//! (which needs a join token).

use std::path::{Path, PathBuf};
use std::time::Duration;

use plexus_proto::{WorkerId, pb};
use plexus_security::pki::Issued;
use plexus_security::tls::{self, Bearer};
use plexus_security::{Token, WorkerKey};
use tonic::transport::{ClientTlsConfig, Endpoint, ServerTlsConfig};
use tracing::{info, warn};

use crate::error::{Error, Result};
use crate::layout::Layout;

/// How long a joining worker keeps trying to reach the coordinator (it may be starting too)
/// before it gives up.
const JOIN_PATIENCE: Duration = Duration::from_secs(120);

/// What the worker is told about the cluster's trust on its command line.
#[derive(Debug, Clone, Default)]
pub struct TrustConfig {
    /// No TLS anywhere, no rail handshake (`--insecure`).
    pub insecure: bool,
    /// The cluster CA's certificate file (`--ca`).
    pub ca_file: Option<PathBuf>,
    /// The join token, read from `--join-token-file` or `PLEXUS_JOIN_TOKEN`.
    pub join_token: Option<String>,
}

/// A worker's certificate, its key, and the CA: everything its connections need.
#[derive(Clone)]
pub struct Credentials {
    pub ca_pem: String,
    pub identity: Issued,
}

impl std::fmt::Debug for Credentials {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Credentials").finish_non_exhaustive()
    }
}

impl Credentials {
    /// To the coordinator, as this worker.
    pub fn coordinator_tls(&self) -> ClientTlsConfig {
        tls::client(&self.ca_pem, tls::COORDINATOR_NAME, Some(&self.identity))
    }

    /// To a peer's `PeerService`, as this worker.
    pub fn peer_client_tls(&self) -> ClientTlsConfig {
        tls::client(&self.ca_pem, tls::WORKER_NAME, Some(&self.identity))
    }

    /// This worker's `PeerService`: only clients with a certificate of the cluster CA.
    pub fn peer_server_tls(&self) -> ServerTlsConfig {
        tls::server(&self.identity, &self.ca_pem, false)
    }
}

fn read_opt(path: &Path) -> Result<Option<String>> {
    match std::fs::read_to_string(path) {
        Ok(s) => Ok(Some(s)),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(Error::io("read", path)(e)),
    }
}

fn write(path: &Path, contents: &str, mode: u32) -> Result<()> {
    plexus_security::files::write(path, contents, mode).map_err(|e| Error::Config(e.to_string()))
}

/// The worker's credentials: the stored ones, or new ones from joining. `None` with `--insecure`.
pub async fn obtain(
    trust: &TrustConfig,
    layout: &Layout,
    worker_id: WorkerId,
    coordinator: &str,
) -> Result<Option<Credentials>> {
    if trust.insecure {
        return Ok(None);
    }
    let dir = layout.tls_dir();
    let given_ca = match &trust.ca_file {
        Some(p) => Some(
            std::fs::read_to_string(p)
                .map_err(|e| Error::Config(format!("cannot read the CA certificate --ca {}: {e}", p.display())))?,
        ),
        None => None,
    };
    let stored =
        (read_opt(&dir.join("ca.pem"))?, read_opt(&dir.join("worker.pem"))?, read_opt(&dir.join("worker.key"))?);
    if let (Some(ca), Some(cert), Some(key)) = stored {
        if given_ca.as_deref().is_none_or(|g| g.trim() == ca.trim()) {
            return Ok(Some(Credentials { ca_pem: ca, identity: Issued { cert_pem: cert, key_pem: key } }));
        }
        info!("--ca names another CA than the one this worker joined with: joining the new cluster");
    }
    let Some(ca) = given_ca else {
        return Err(Error::Config(
            "this worker has no certificate yet: pass --ca (the cluster CA, ca.pem in the coordinator's data dir) and a join token \
             (--join-token-file; make one with `plexus-coordinator token create --scope worker`), or --insecure for a coordinator run with --insecure"
                .into(),
        ));
    };
    let Some(token_text) = &trust.join_token else {
        return Err(Error::Config(
            "this worker has no certificate yet and no join token: pass --join-token-file FILE or set PLEXUS_JOIN_TOKEN \
             (make one with `plexus-coordinator token create --scope worker`)"
                .into(),
        ));
    };
    let token = Token::parse(token_text).map_err(|e| Error::Config(format!("the join token: {e}")))?;
    let key = WorkerKey::generate().map_err(|e| Error::Config(e.to_string()))?;
    let reply = join(coordinator, &ca, &token, worker_id, &key).await?;
    std::fs::create_dir_all(&dir).map_err(Error::io("create", &dir))?;
    write(&dir.join("worker.key"), &key.to_pem(), 0o600)?;
    write(&dir.join("worker.pem"), &reply.certificate, 0o644)?;
    // Written last: its presence says the other two are there.
    write(&dir.join("ca.pem"), &reply.ca, 0o644)?;
    info!(%worker_id, "joined the cluster: certificate stored in {}", dir.display());
    Ok(Some(Credentials { ca_pem: reply.ca, identity: Issued { cert_pem: reply.certificate, key_pem: key.to_pem() } }))
}

/// `Join`, retried while the coordinator cannot be reached (it may be starting), for at most
/// [`JOIN_PATIENCE`]; a refusal (bad token, bad CA) ends it at once.
async fn join(
    coordinators: &str,
    ca: &str,
    token: &Token,
    worker_id: WorkerId,
    key: &WorkerKey,
) -> Result<pb::JoinResponse> {
    let start = std::time::Instant::now();
    let mut delay = Duration::from_millis(200);
    // With an HA control plane only the leader lets a worker join: a standby's refusal names
    // it, and any other failure moves on to the next coordinator of the list.
    let list = crate::session::Coordinators::new(coordinators);
    loop {
        let coordinator = list.current();
        let coordinator = coordinator.as_str();
        let endpoint = Endpoint::from_shared(coordinator.to_string())
            .map_err(Error::connect(coordinator))?
            .connect_timeout(Duration::from_secs(5))
            .tls_config(tls::client(ca, tls::COORDINATOR_NAME, None))
            .map_err(Error::connect(coordinator))?;
        let e = match plexus_security::tls::connect_within(&endpoint, Duration::from_secs(5)).await {
            Ok(channel) => {
                let mut client =
                    pb::worker_service_client::WorkerServiceClient::with_interceptor(channel, Bearer::new(Some(token)));
                let request = pb::JoinRequest { worker_id: worker_id.to_string(), public_key: key.public_key() };
                // A coordinator that connects but never answers is retried (or the next tried).
                let limit = Duration::from_secs(10);
                match tokio::time::timeout(limit, client.join(request)).await {
                    Err(_) => Error::Timeout { call: "Join", after: limit },
                    Ok(Ok(r)) => return Ok(r.into_inner()),
                    Ok(Err(s)) if s.code() == tonic::Code::Unavailable => Error::rpc("Join")(s),
                    Ok(Err(s)) => {
                        return Err(Error::Config(format!(
                            "the coordinator refused to let this worker join: {}",
                            s.message()
                        )));
                    }
                }
            }
            Err(e) => {
                let e = Error::connect(coordinator)(e);
                // A certificate the CA did not sign is not going to change by waiting.
                if e.to_string().contains("certificate") {
                    return Err(Error::Config(format!("{e} (is --ca the CA of this coordinator's cluster?)")));
                }
                e
            }
        };
        if list.failed(&e) {
            continue;
        }
        if start.elapsed() > JOIN_PATIENCE {
            return Err(e);
        }
        warn!(error = %e, retry_in = ?delay, "cannot join yet");
        tokio::time::sleep(delay).await;
        delay = (delay * 2).min(Duration::from_secs(5));
    }
}
