//! The PeerService: this worker serving its cached objects and attempt logs to peers and to the
//! coordinator ([`PeerServer`], [`serve`]), and the client side that fetches an object from a
//! peer into a local file.
//!
//! Objects move two ways:
//! - over the data plane ([`fetch_object_rails`]): the requester calls `PushObject` with its
//!   rail addresses and a fresh tag; the holder sends the object as tagged data-plane messages,
//!   striped over every rail by the configured rail scheduler, and answers once the requester's
//!   endpoint acknowledged every byte. This is the path between workers.
//! - as a gRPC stream of 1 MiB chunks ([`fetch_object`]): the fallback when a holder has no
//!   rails or the data-plane transfer failed.
//!
//! Object ids and attempts in requests are validated with `plexus_proto`'s typed ids before any
//! path is built, so a request can never make the worker read outside its cache or log dirs;
//! rail addresses with the rules shared with the coordinator (`plexus_proto::rules`).
//!
//! Each handler is a method returning the crate's [`Error`]; the `PeerService` impl only turns
//! that into a `Status` (`impl From<Error> for Status` in [`crate::error`] picks the code).

use std::net::SocketAddr;
use std::path::Path;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use bytes::{BufMut, Bytes, BytesMut};
use futures::Stream;
use plexus_dataplane::PeerId;
use plexus_proto::rules::{MAX_MESSAGE, parse_rails};
use plexus_proto::{Digest, ObjectId, Verifier, convert, pb};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpListener;
use tokio::sync::Semaphore;
use tokio_util::sync::CancellationToken;
use tonic::transport::{ClientTlsConfig, Endpoint, Server, ServerTlsConfig};
use tonic::{Request, Response, Status};
use tracing::{debug, info};

use crate::cache::Cache;
use crate::error::{Error, Result};
use crate::layout::Layout;
use crate::logs::{dropped_bytes, read_tail};

/// Objects travel in chunks of 1 MiB: large enough that per-message overhead is negligible, small
/// enough to stay far below gRPC's default 4 MiB message limit.
pub const CHUNK_BYTES: u64 = 1 << 20;

/// `ReadLog`'s default per-stream limit when the request says 0.
pub const DEFAULT_LOG_BYTES: u64 = 1 << 20;

/// The most `ReadLog` returns per stream whatever the request asks: a bound on the memory one
/// request can make the worker allocate.
pub const MAX_LOG_BYTES: u64 = 16 << 20;

/// How long connecting to a peer may take: a peer on the same network answers in milliseconds, and
/// a dead one should quickly give way to the next holder.
const PEER_CONNECT_TIMEOUT: Duration = Duration::from_secs(5);

/// How long a transfer may stall between two chunks before the peer is given up on: generous for
/// a loaded peer reading 1 MiB from disk, short enough that a hung peer does not hold an attempt.
const PEER_IDLE_TIMEOUT: Duration = Duration::from_secs(30);

/// A data-plane transfer is cut into messages of at most this many bytes: the sender and the
/// receiver each hold one piece in memory at a time (plus the receiver's queue of completed
/// ones), and 64 MiB is 64 segments of the default `seg_max`, enough to balance any rail set.
pub const PIECE_BYTES: u64 = 64 << 20;

/// The size header at the start of a transfer's first message.
const SIZE_HEADER: usize = 8;

/// A worker holding an object, as an assignment names it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Source {
    /// Its worker id (empty when the coordinator did not say): named when its copy is bad.
    pub worker: String,
    /// PeerService URL.
    pub peer_addr: String,
    /// Data-plane rails, in rail order; empty when the holder has none (or sent none usable).
    pub rails: Vec<SocketAddr>,
}

/// How many `PushObject` requests a worker serves at once. Each holds one piece of up to
/// [`PIECE_BYTES`] in memory until the requester acknowledged it, so this bounds what pushes can
/// cost a worker to 4 × 64 MiB = 256 MiB however many peers ask. More would not move data faster:
/// every push is already striped over all rails, and 4 at once keep them busy.
///
/// `FetchObject` streams are not bounded this way: they hold one 1 MiB chunk each, read only
/// when the client pulls the next one (the response stream is driven by gRPC flow control).
pub const MAX_CONCURRENT_PUSHES: usize = 4;

/// How long a `PushObject` beyond [`MAX_CONCURRENT_PUSHES`] waits for a slot before it is refused
/// with RESOURCE_EXHAUSTED (and the requester tries another holder, or the gRPC stream): the data
/// plane's default `stall_timeout`, so a slot held by a requester that stopped acknowledging is
/// free by then, while a request does not hang on a worker that stays busy.
pub const PUSH_SLOT_WAIT: Duration = Duration::from_secs(30);

/// Serves `FetchObject`, `PushObject` and `ReadLog` from this worker's cache and log dir.
#[derive(Debug, Clone)]
pub struct PeerServer {
    cache: Cache,
    layout: Layout,
    rails: Arc<plexus_dataplane::Endpoint>,
    /// One permit per push being served: see [`MAX_CONCURRENT_PUSHES`]. Shared by the clones
    /// tonic makes of the server.
    push_slots: Arc<Semaphore>,
    push_limit: usize,
    push_wait: Duration,
    /// Checks a push's rails against those its caller registered (secure clusters).
    guard: Option<Arc<PushGuard>>,
}

impl PeerServer {
    pub fn new(cache: Cache, layout: Layout, rails: Arc<plexus_dataplane::Endpoint>) -> PeerServer {
        PeerServer {
            cache,
            layout,
            rails,
            push_slots: Arc::new(Semaphore::new(MAX_CONCURRENT_PUSHES)),
            push_limit: MAX_CONCURRENT_PUSHES,
            push_wait: PUSH_SLOT_WAIT,
            guard: None,
        }
    }

    /// The same server pushing only to rails its caller registered with the coordinator.
    pub fn with_push_guard(self, guard: Arc<PushGuard>) -> PeerServer {
        PeerServer { guard: Some(guard), ..self }
    }

    /// The same server serving at most `limit` (at least 1) pushes at once, refusing one that
    /// waited `wait` for a slot; the defaults are [`MAX_CONCURRENT_PUSHES`] and
    /// [`PUSH_SLOT_WAIT`].
    pub fn with_push_limit(self, limit: usize, wait: Duration) -> PeerServer {
        let limit = limit.max(1);
        PeerServer { push_slots: Arc::new(Semaphore::new(limit)), push_limit: limit, push_wait: wait, ..self }
    }
}

impl PeerServer {
    /// Opens a cached object for sending, with its size. An open file stays readable even if
    /// the object is evicted while it is sent.
    async fn open_object(&self, id: &ObjectId) -> Result<(tokio::fs::File, u64)> {
        let not_found = || Error::ObjectNotFound { object: id.clone() };
        if !self.cache.contains(id) {
            return Err(not_found());
        }
        let file = match tokio::fs::File::open(self.cache.path(id)).await {
            Ok(f) => f,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                self.cache.forget(id);
                return Err(not_found());
            }
            Err(e) => return Err(Error::object_io("cannot open", id)(e)),
        };
        let size = file.metadata().await.map_err(Error::object_io("cannot read the size of", id))?.len();
        Ok((file, size))
    }

    /// `FetchObject`: the object as a stream of chunks.
    async fn serve_fetch(&self, req: pb::FetchObjectRequest) -> Result<ChunkStream> {
        let id = convert::object_id("object_id", &req.object_id)?;
        let (file, total_size) = self.open_object(&id).await?;
        debug!(object = %id, total_size, "serving object");
        Ok(chunks(file, id, total_size))
    }

    /// `PushObject`: the object sent over the data plane to the requester's rails; answers once
    /// every byte was acknowledged. At most `push_limit` run at once (see
    /// [`MAX_CONCURRENT_PUSHES`]); one more waits up to `push_wait` for a slot, then is refused.
    async fn serve_push(&self, req: pb::PushObjectRequest) -> Result<pb::PushObjectResponse> {
        let id = convert::object_id("object_id", &req.object_id)?;
        let rails = parse_rails(&req.rails)?;
        if rails.is_empty() {
            return Err(Error::NoRequesterRails);
        }
        // The request is checked before it waits for a slot: a bad one is answered at once.
        let busy = || Error::Busy { call: "PushObject", limit: self.push_limit, waited: self.push_wait };
        let _slot = tokio::time::timeout(self.push_wait, self.push_slots.acquire())
            .await
            .map_err(|_| busy())?
            .expect("the push semaphore is never closed");
        let (mut file, size) = self.open_object(&id).await?;
        debug!(object = %id, size, to = %rails[0], tag = req.tag, "pushing object over the rails");
        let mut sent = 0u64;
        let mut first = true;
        // The first message goes even for an empty object: it carries the size.
        while first || sent < size {
            let take = PIECE_BYTES.min(size - sent);
            let header = if first { SIZE_HEADER } else { 0 };
            let mut piece = BytesMut::with_capacity(header + take as usize);
            if first {
                piece.put_u64_le(size);
            }
            piece.resize(header + take as usize, 0);
            file.read_exact(&mut piece[header..]).await.map_err(Error::object_io("reading", &id))?;
            self.rails
                .send(&rails, req.tag, piece.freeze())
                .await
                .map_err(|e| Error::Push { object: id.clone(), source: Box::new(e) })?;
            sent += take;
            first = false;
        }
        Ok(pb::PushObjectResponse { size })
    }

    /// `ReadLog`: the tails of an attempt's stdout and stderr.
    async fn serve_read_log(&self, req: pb::ReadLogRequest) -> Result<pb::ReadLogResponse> {
        let attempt = convert::attempt("attempt", req.attempt.as_ref())?;
        let max = match req.max_bytes {
            0 => DEFAULT_LOG_BYTES,
            n => n.min(MAX_LOG_BYTES),
        };
        let (out_path, err_path) = self.layout.log_files(&attempt);
        let read = |p: std::path::PathBuf| async move { read_tail(&p, max).await.map_err(Error::io("cannot read", p)) };
        let (out, err) = (read(out_path).await?, read(err_path).await?);
        if out.is_none() && err.is_none() {
            return Err(Error::NoLogs { attempt });
        }
        let (stdout, cut_out) = out.unwrap_or_default();
        let (stderr, cut_err) = err.unwrap_or_default();
        let (out_path, err_path) = self.layout.log_files(&attempt);
        let dropped_bytes = dropped_bytes(&out_path).await + dropped_bytes(&err_path).await;
        Ok(pb::ReadLogResponse { stdout, stderr, truncated: cut_out || cut_err, dropped_bytes })
    }
}

/// How long what the coordinator said about a caller's rails is trusted before a push to a
/// rail not among them asks again (a worker that restarted registers new rail ports).
const GUARD_REFRESH: Duration = Duration::from_secs(1);

/// Pushes go only to rails the calling worker registered: the caller is known by its client
/// certificate, and the coordinator (`ResolvePeer`) says which worker that certificate is and
/// which rails it registered. Without this, any worker could make another send data anywhere.
#[derive(Debug)]
pub struct PushGuard {
    /// One client per coordinator of the list; only the leader answers.
    coordinators: Vec<pb::worker_service_client::WorkerServiceClient<tonic::transport::Channel>>,
    /// The one that answered last.
    leader: std::sync::atomic::AtomicUsize,
    /// By certificate fingerprint: what the coordinator last said.
    known: std::sync::Mutex<std::collections::HashMap<String, Resolved>>,
}

/// A caller's certificate resolved by the coordinator.
#[derive(Debug)]
struct Resolved {
    worker: String,
    rails: Vec<String>,
    at: std::time::Instant,
}

impl PushGuard {
    /// A guard asking the coordinator over `channels` (this worker's mutual-TLS connections, one
    /// per coordinator of an HA control plane).
    pub fn new(channels: Vec<tonic::transport::Channel>) -> PushGuard {
        let coordinators = channels.into_iter().map(pb::worker_service_client::WorkerServiceClient::new).collect();
        PushGuard { coordinators, leader: Default::default(), known: Default::default() }
    }

    /// `ResolvePeer` at the coordinator that answered last, then at the others: a standby
    /// refuses with UNAVAILABLE.
    async fn resolve(&self, fingerprint: String) -> Result<pb::ResolvePeerResponse> {
        let n = self.coordinators.len().max(1);
        let first = self.leader.load(std::sync::atomic::Ordering::Relaxed);
        let mut last = Error::NoCoordinator;
        for i in 0..n {
            let at = (first + i) % n;
            let Some(c) = self.coordinators.get(at) else { break };
            match c.clone().resolve_peer(pb::ResolvePeerRequest { fingerprint: fingerprint.clone() }).await {
                Ok(r) => {
                    self.leader.store(at, std::sync::atomic::Ordering::Relaxed);
                    return Ok(r.into_inner());
                }
                Err(s) if s.code() == tonic::Code::Unavailable => last = Error::rpc("ResolvePeer")(s),
                Err(s) => return Err(Error::rpc("ResolvePeer")(s)),
            }
        }
        Err(last)
    }

    /// Ok when every rail of `rails` was registered by the worker whose certificate is `cert`.
    pub async fn check(&self, cert: Option<&[u8]>, rails: &[String]) -> Result<()> {
        let Some(cert) = cert else {
            return Err(Error::PushUnauthenticated);
        };
        let fp = plexus_security::Fingerprint::of_der(cert).0;
        let fresh = |entry: Option<&Resolved>| {
            entry.map(|e| (e.worker.clone(), rails.iter().all(|r| e.rails.contains(r)), e.at.elapsed() < GUARD_REFRESH))
        };
        let cached = fresh(self.known.lock().unwrap_or_else(|p| p.into_inner()).get(&fp));
        let worker = match cached {
            Some((_, true, _)) => return Ok(()),
            // Refused a moment ago: do not ask the coordinator again for every retry.
            Some((w, false, true)) => w,
            _ => {
                // The coordinator's own words, without the call's name: what the caller sees.
                let reply = self.resolve(fp.clone()).await.map_err(|e| Error::PushUnchecked {
                    reason: match e {
                        Error::Rpc { status, .. } => status.message().to_string(),
                        other => other.to_string(),
                    },
                })?;
                let ok = rails.iter().all(|r| reply.rails.contains(r));
                let mut known = self.known.lock().unwrap_or_else(|p| p.into_inner());
                // Bounded: one entry per worker certificate, forgotten when it gets full.
                if known.len() >= 10_000 {
                    known.clear();
                }
                known.insert(
                    fp,
                    Resolved { worker: reply.worker_id.clone(), rails: reply.rails, at: std::time::Instant::now() },
                );
                if ok {
                    return Ok(());
                }
                reply.worker_id
            }
        };
        Err(Error::PushRefused { rails: rails.to_vec(), worker })
    }
}

type ChunkStream = Pin<Box<dyn Stream<Item = Result<pb::ObjectChunk, Status>> + Send>>;

/// The gRPC adapter: each call runs its handler above, and an error becomes a `Status` only here,
/// through `impl From<Error> for Status`.
#[tonic::async_trait]
impl pb::peer_service_server::PeerService for PeerServer {
    type FetchObjectStream = ChunkStream;

    async fn fetch_object(&self, request: Request<pb::FetchObjectRequest>) -> Result<Response<ChunkStream>, Status> {
        Ok(Response::new(self.serve_fetch(request.into_inner()).await?))
    }

    async fn push_object(
        &self,
        request: Request<pb::PushObjectRequest>,
    ) -> Result<Response<pb::PushObjectResponse>, Status> {
        if let Some(guard) = &self.guard {
            let cert = request.peer_certs().and_then(|c| c.first().map(|c| c.as_ref().to_vec()));
            guard.check(cert.as_deref(), &request.get_ref().rails).await?;
        }
        Ok(Response::new(self.serve_push(request.into_inner()).await?))
    }

    async fn read_log(&self, request: Request<pb::ReadLogRequest>) -> Result<Response<pb::ReadLogResponse>, Status> {
        Ok(Response::new(self.serve_read_log(request.into_inner()).await?))
    }
}

/// The chunks of an open file; the first carries `total_size` and is sent even when empty, so an
/// empty object still tells its size. The stream is driven by the response itself, so no task is
/// spawned and a client that goes away simply stops it.
fn chunks(file: tokio::fs::File, id: ObjectId, total_size: u64) -> ChunkStream {
    let state = Some((file, id, true));
    Box::pin(futures::stream::unfold(state, move |state| async move {
        let (mut file, id, first) = state?;
        let mut data = Vec::with_capacity(CHUNK_BYTES.min(total_size) as usize);
        match (&mut file).take(CHUNK_BYTES).read_to_end(&mut data).await {
            Err(e) => Some((Err(Error::object_io("reading", &id)(e).into()), None)),
            Ok(0) if !first => None,
            Ok(_) => {
                let chunk =
                    pb::ObjectChunk { data, total_size: if first { total_size } else { 0 }, ..Default::default() };
                Some((Ok(chunk), Some((file, id, false))))
            }
        }
    }))
}

/// Runs the PeerService on `listener` until `shutdown` is cancelled; with `tls`, only to clients
/// with a certificate of the cluster CA (peers and the coordinator).
pub async fn serve(
    listener: TcpListener,
    server: PeerServer,
    tls: Option<ServerTlsConfig>,
    shutdown: CancellationToken,
) -> Result<()> {
    let addr = listener.local_addr().ok();
    info!(?addr, tls = tls.is_some(), "peer service listening");
    let mut builder = Server::builder();
    if let Some(tls) = tls {
        builder = builder.tls_config(tls).map_err(Error::Serve)?;
    }
    builder
        .add_service(
            pb::peer_service_server::PeerServiceServer::new(server)
                .max_decoding_message_size(MAX_MESSAGE)
                .max_encoding_message_size(MAX_MESSAGE),
        )
        // TCP_NODELAY: log reads and the first chunk of an object should not wait on Nagle.
        .serve_with_incoming_shutdown(
            tonic::transport::server::TcpIncoming::from(listener).with_nodelay(Some(true)),
            shutdown.cancelled_owned(),
        )
        .await
        .map_err(Error::Serve)
}

/// What one successful fetch moved.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Fetched {
    pub bytes: u64,
    /// The digest of what arrived (the expected one, when the assignment gave one).
    pub digest: Digest,
}

/// What a fetched copy must be, as the assignment gives it: its size (a holder announcing
/// another is refused before anything is written) and its digest (a copy that hashes to another
/// is refused when it has arrived, with [`Error::DigestMismatch`]). `None`: not known.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Expected {
    pub size: Option<u64>,
    pub digest: Option<Digest>,
}

impl From<Option<u64>> for Expected {
    fn from(size: Option<u64>) -> Expected {
        Expected { size, digest: None }
    }
}

impl Source {
    /// How an error names this holder.
    fn name(&self) -> String {
        if self.worker.is_empty() {
            self.peer_addr.clone()
        } else {
            format!("worker {} ({})", self.worker, self.peer_addr)
        }
    }
}

/// A copy being received: written to its file while a running hash of it is kept. Each piece
/// is hashed on a blocking thread while it is written.
struct Receiving {
    file: tokio::fs::File,
    verifier: Verifier,
}

impl Receiving {
    async fn create(dest: &Path, digest: Option<Digest>) -> Result<Receiving> {
        let file = tokio::fs::File::create(dest).await.map_err(Error::io("create", dest))?;
        Ok(Receiving { file, verifier: Verifier::new(digest) })
    }

    async fn write(&mut self, data: Bytes, dest: &Path) -> Result<()> {
        let mut v = std::mem::replace(&mut self.verifier, Verifier::new(None));
        let piece = data.clone();
        let hashing = tokio::task::spawn_blocking(move || {
            v.update(&piece);
            v
        });
        self.file.write_all(&data).await.map_err(Error::io("write", dest))?;
        self.verifier = hashing.await?;
        Ok(())
    }

    /// Flushes the file and checks the copy's digest.
    async fn finish(mut self, id: &ObjectId, holder: &str, dest: &Path) -> Result<Digest> {
        self.file.flush().await.map_err(Error::io("write", dest))?;
        self.verifier.finish(&id.to_string(), holder).map_err(Error::DigestMismatch)
    }
}

/// A PeerService client for `holder`, over mutual TLS with `tls` (this worker's certificate).
async fn client(
    holder: &str,
    tls: Option<&ClientTlsConfig>,
) -> Result<pb::peer_service_client::PeerServiceClient<tonic::transport::Channel>> {
    let mut endpoint = Endpoint::from_shared(holder.to_string())
        .map_err(Error::connect(holder))?
        .connect_timeout(PEER_CONNECT_TIMEOUT)
        .tcp_nodelay(true);
    if let Some(tls) = tls {
        endpoint = endpoint.tls_config(tls.clone()).map_err(Error::connect(holder))?;
    }
    // A holder that hangs (stopped, or a host that stopped answering after accepting) would
    // otherwise hold the TLS handshake for ever.
    let channel =
        plexus_security::tls::connect_within(&endpoint, PEER_CONNECT_TIMEOUT).await.map_err(Error::connect(holder))?;
    Ok(pb::peer_service_client::PeerServiceClient::new(channel)
        .max_decoding_message_size(MAX_MESSAGE)
        .max_encoding_message_size(MAX_MESSAGE))
}

/// Checks the size a holder announced against the one the assignment gave (`expected`; `None`
/// when the coordinator does not know it, which it sends as 0).
fn check_announced(id: &ObjectId, holder: &str, announced: u64, expected: Option<u64>) -> Result<()> {
    match expected {
        Some(expected) if announced != expected => {
            Err(Error::SizeMismatch { object: id.clone(), holder: holder.to_string(), announced, expected })
        }
        _ => Ok(()),
    }
}

/// Fetches object `id` from `holder` over the data plane into the new file `dest`: asks the
/// holder to push it to this worker's rails, and writes the messages as they arrive. On error
/// the partial file may remain; the caller owns `dest` and removes it.
///
/// `expected` is the object's size and digest as the assignment gives them. A holder that
/// announces another size is refused before anything is written, and nothing beyond the
/// announced size is ever written: a holder cannot make this worker fill its disk. A copy that
/// does not hash to the digest is refused once it has arrived ([`Error::DigestMismatch`]).
///
/// Messages of an abandoned transfer that arrive later stay queued in the endpoint under their
/// tag, which is never asked for again (tags are random 64-bit numbers).
pub async fn fetch_object_rails(
    rails: &plexus_dataplane::Endpoint,
    tls: Option<&ClientTlsConfig>,
    holder: &Source,
    id: &ObjectId,
    expected: impl Into<Expected>,
    dest: &Path,
) -> Result<Fetched> {
    let expected = expected.into();
    let Some(&from) = holder.rails.first() else {
        return Err(Error::BadObject { object: id.to_string(), reason: "the holder has no data-plane rails".into() });
    };
    let from = PeerId(from);
    let tag = uuid::Uuid::new_v4().as_u64_pair().0;
    let mut client = client(&holder.peer_addr, tls).await?;
    let request = pb::PushObjectRequest {
        object_id: id.to_string(),
        rails: rails.local_addrs().iter().map(ToString::to_string).collect(),
        tag,
    };
    let push =
        async move { client.push_object(request).await.map(|r| r.into_inner().size).map_err(Error::rpc("PushObject")) };
    let bad = |reason: String| Error::BadObject { object: id.to_string(), reason };
    let receive = async {
        let mut file = Receiving::create(dest, expected.digest).await?;
        let mut announced: Option<u64> = None;
        let mut received = 0u64;
        loop {
            let msg = tokio::time::timeout(PEER_IDLE_TIMEOUT, rails.recv(from, tag))
                .await
                .map_err(|_| Error::Timeout { call: "PushObject (data plane)", after: PEER_IDLE_TIMEOUT })??;
            let data: Bytes = match announced {
                Some(_) => msg.freeze(),
                None => {
                    if msg.len() < SIZE_HEADER {
                        return Err(bad(format!(
                            "the first message has {} bytes, less than its size header",
                            msg.len()
                        )));
                    }
                    let mut msg = msg.freeze();
                    let size = u64::from_le_bytes(msg.split_to(SIZE_HEADER)[..].try_into().expect("8 bytes"));
                    check_announced(id, &holder.peer_addr, size, expected.size)?;
                    announced = Some(size);
                    msg
                }
            };
            let total = announced.unwrap_or(0);
            received += data.len() as u64;
            if received > total {
                return Err(Error::TooMuchData {
                    object: id.clone(),
                    holder: holder.peer_addr.clone(),
                    announced: total,
                });
            }
            file.write(data, dest).await?;
            if received == total {
                break;
            }
        }
        Ok::<_, Error>((received, file))
    };
    // The holder answers only after every message was acknowledged, so both finish; an early
    // error on either side ends the fetch.
    let (size, (received, file)) = tokio::try_join!(push, receive)?;
    if size != received {
        return Err(bad(format!("the peer announced {size} bytes and sent {received}")));
    }
    let digest = file.finish(id, &holder.name(), dest).await?;
    Ok(Fetched { bytes: received, digest })
}

/// Fetches object `id` from the PeerService at `holder` into the new file `dest`, as a gRPC
/// stream. On error the partial file may remain; the caller owns `dest` and removes it.
///
/// `expected` as for [`fetch_object_rails`]: a first chunk announcing another size is refused
/// before it is written, the stream is cut off as soon as more bytes arrive than announced, and
/// a copy that does not hash to the digest is refused. `holder` names the holder in errors.
pub async fn fetch_object(
    source: impl Into<Holder<'_>>,
    tls: Option<&ClientTlsConfig>,
    id: &ObjectId,
    expected: impl Into<Expected>,
    dest: &Path,
) -> Result<Fetched> {
    let (expected, source) = (expected.into(), source.into());
    let holder = source.url;
    let mut client = client(holder, tls).await?;
    let call = client.fetch_object(pb::FetchObjectRequest { object_id: id.to_string() });
    let mut stream = tokio::time::timeout(PEER_IDLE_TIMEOUT, call)
        .await
        .map_err(|_| Error::Timeout { call: "FetchObject", after: PEER_IDLE_TIMEOUT })?
        .map_err(Error::rpc("FetchObject"))?
        .into_inner();
    let mut file = Receiving::create(dest, expected.digest).await?;
    let bad = |reason: String| Error::BadObject { object: id.to_string(), reason };
    let mut total: Option<u64> = None;
    let mut received: u64 = 0;
    loop {
        let next = tokio::time::timeout(PEER_IDLE_TIMEOUT, stream.message())
            .await
            .map_err(|_| Error::Timeout { call: "FetchObject", after: PEER_IDLE_TIMEOUT })?
            .map_err(Error::rpc("FetchObject"))?;
        let Some(chunk) = next else { break };
        let announced = match total {
            Some(t) => t,
            None => {
                check_announced(id, holder, chunk.total_size, expected.size)?;
                *total.insert(chunk.total_size)
            }
        };
        received += chunk.data.len() as u64;
        if received > announced {
            return Err(Error::TooMuchData { object: id.clone(), holder: holder.to_string(), announced });
        }
        file.write(Bytes::from(chunk.data), dest).await?;
    }
    let Some(announced) = total else {
        return Err(bad("the peer sent no data".into()));
    };
    if received != announced {
        return Err(bad(format!("the peer sent {received} of the announced {announced} bytes")));
    }
    let digest = file.finish(id, &source.name, dest).await?;
    Ok(Fetched { bytes: received, digest })
}

/// The holder [`fetch_object`] asks: its PeerService URL, and how errors name it.
pub struct Holder<'a> {
    pub url: &'a str,
    pub name: String,
}

impl<'a> From<&'a str> for Holder<'a> {
    fn from(url: &'a str) -> Holder<'a> {
        Holder { url, name: url.to_string() }
    }
}

impl<'a> From<&'a String> for Holder<'a> {
    fn from(url: &'a String) -> Holder<'a> {
        Holder { url, name: url.clone() }
    }
}

impl<'a> From<&'a Source> for Holder<'a> {
    fn from(s: &'a Source) -> Holder<'a> {
        Holder { url: &s.peer_addr, name: s.name() }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use plexus_proto::{AttemptRef, JobId};

    /// A cache with a running PeerService in front of it.
    struct Peer {
        _dir: tempfile::TempDir,
        cache: Cache,
        layout: Layout,
        url: String,
        stop: CancellationToken,
        task: tokio::task::JoinHandle<Result<()>>,
        rails: Arc<plexus_dataplane::Endpoint>,
    }

    async fn peer() -> Peer {
        let dir = tempfile::tempdir().unwrap();
        let layout = Layout::new(dir.path());
        let cache = Cache::open(layout.cache_dir(), 1 << 30).unwrap();
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}", listener.local_addr().unwrap());
        let stop = CancellationToken::new();
        let rails = Arc::new(plexus_dataplane::Endpoint::bind(Default::default()).await.unwrap());
        let task = tokio::spawn(serve(
            listener,
            PeerServer::new(cache.clone(), layout.clone(), rails.clone()),
            None,
            stop.clone(),
        ));
        Peer { _dir: dir, cache, layout, url, stop, task, rails }
    }

    impl Peer {
        async fn stop(self) {
            self.stop.cancel();
            self.task.await.unwrap().unwrap();
        }
    }

    fn put(cache: &Cache, scratch: &Path, id: &ObjectId, data: &[u8]) {
        let src = scratch.join("scratch");
        std::fs::write(&src, data).unwrap();
        drop(cache.insert(id, &src).unwrap());
    }

    /// A PeerServer over a temp cache and log dir, with no gRPC server in front of it: the tests
    /// below call its handlers directly, as tonic would.
    async fn handlers() -> (tempfile::TempDir, PeerServer) {
        let dir = tempfile::tempdir().unwrap();
        let layout = Layout::new(dir.path());
        let cache = Cache::open(layout.cache_dir(), 1 << 30).unwrap();
        let rails = Arc::new(plexus_dataplane::Endpoint::bind(Default::default()).await.unwrap());
        (dir, PeerServer::new(cache, layout, rails))
    }

    /// The status of a call that must fail (the streaming response is not `Debug`, so no
    /// `unwrap_err`).
    fn refused<T>(r: Result<Response<T>, Status>) -> Status {
        match r {
            Ok(_) => panic!("the call succeeded"),
            Err(status) => status,
        }
    }

    fn absent_object() -> ObjectId {
        ObjectId { job: JobId::random(), task: "gen".into(), rank: 0, name: "absent".into() }
    }

    #[tokio::test]
    async fn handler_unknown_object_is_not_found_and_named() {
        use pb::peer_service_server::PeerService;
        let (_dir, server) = handlers().await;
        let id = absent_object();
        let status =
            refused(server.fetch_object(Request::new(pb::FetchObjectRequest { object_id: id.to_string() })).await);
        assert_eq!(status.code(), tonic::Code::NotFound, "{status:?}");
        assert_eq!(status.message(), format!("object {id} is not in the cache of this worker"));
        let push = pb::PushObjectRequest { object_id: id.to_string(), rails: vec!["127.0.0.1:1".into()], tag: 1 };
        let status = refused(server.push_object(Request::new(push)).await);
        assert_eq!(status.code(), tonic::Code::NotFound, "{status:?}");
        assert!(status.message().contains(&id.to_string()), "{status:?}");
    }

    #[tokio::test]
    async fn handler_malformed_object_id_is_invalid_and_names_the_field() {
        use pb::peer_service_server::PeerService;
        let (_dir, server) = handlers().await;
        for bad in ["../../etc/passwd", "", "job-x/gen/0/out"] {
            let req = pb::FetchObjectRequest { object_id: bad.into() };
            let status = refused(server.fetch_object(Request::new(req)).await);
            assert_eq!(status.code(), tonic::Code::InvalidArgument, "{bad:?}: {status:?}");
            assert!(status.message().starts_with("field object_id: "), "{bad:?}: {status:?}");
            let req = pb::PushObjectRequest { object_id: bad.into(), rails: vec!["127.0.0.1:1".into()], tag: 1 };
            let status = refused(server.push_object(Request::new(req)).await);
            assert_eq!(status.code(), tonic::Code::InvalidArgument, "{bad:?}: {status:?}");
            assert!(status.message().starts_with("field object_id: "), "{bad:?}: {status:?}");
        }
    }

    #[tokio::test]
    async fn handler_bad_rails_are_invalid_and_named() {
        use pb::peer_service_server::PeerService;
        let (_dir, server) = handlers().await;
        let id = absent_object();
        let push =
            |rails: Vec<String>| Request::new(pb::PushObjectRequest { object_id: id.to_string(), rails, tag: 1 });
        let many = vec!["127.0.0.1:1".to_string(); plexus_proto::rules::MAX_RAILS + 1];
        let cases = [
            (many, "65 rail addresses; at most 64".to_string()),
            (vec!["127.0.0.1:1".into(), "eth0".into()], "rail address \"eth0\" is not ip:port".to_string()),
            (vec![], "PushObject needs the requester's rail addresses".to_string()),
        ];
        for (rails, message) in cases {
            // The rails are checked before the cache is looked at: the object is absent, yet the
            // answer is about the rails.
            let status = refused(server.push_object(push(rails)).await);
            assert_eq!((status.code(), status.message()), (tonic::Code::InvalidArgument, message.as_str()));
        }
    }

    #[tokio::test]
    async fn handler_read_log_of_an_unknown_attempt_is_not_found() {
        use pb::peer_service_server::PeerService;
        let (_dir, server) = handlers().await;
        let attempt = AttemptRef { job: JobId::random(), task: "train".into(), rank: 1, attempt: 2 };
        let req = pb::ReadLogRequest { attempt: Some(pb::AttemptRef::from(&attempt)), max_bytes: 0 };
        let status = refused(server.read_log(Request::new(req)).await);
        assert_eq!(status.code(), tonic::Code::NotFound, "{status:?}");
        assert_eq!(status.message(), format!("this worker has no logs for attempt {attempt}"));
        let status = refused(server.read_log(Request::new(pb::ReadLogRequest { attempt: None, max_bytes: 0 })).await);
        assert_eq!((status.code(), status.message()), (tonic::Code::InvalidArgument, "field attempt is missing"));
    }

    #[tokio::test]
    async fn handler_streams_a_present_object_byte_for_byte() {
        use futures::StreamExt;
        use pb::peer_service_server::PeerService;
        let (dir, server) = handlers().await;
        // Two and a half chunks, with a pattern that shows any reordering or loss.
        let data: Vec<u8> = (0..(2 * CHUNK_BYTES + CHUNK_BYTES / 2)).map(|i| (i % 241) as u8).collect();
        let id = ObjectId { job: JobId::random(), task: "gen".into(), rank: 1, name: "numbers".into() };
        put(&server.cache, dir.path(), &id, &data);
        let response = server.fetch_object(Request::new(pb::FetchObjectRequest { object_id: id.to_string() })).await;
        let Ok(response) = response else { panic!("fetching a present object failed: {:?}", response.err()) };
        let chunks: Vec<pb::ObjectChunk> = response.into_inner().map(Result::unwrap).collect().await;
        assert_eq!(chunks.len(), 3);
        assert_eq!(chunks[0].total_size, data.len() as u64, "the first chunk carries the size");
        assert!(chunks[1..].iter().all(|c| c.total_size == 0));
        let got: Vec<u8> = chunks.into_iter().flat_map(|c| c.data).collect();
        assert!(got == data, "the object came back with other bytes");
    }

    /// A holder that hangs after its kernel accepted the connection (a stopped process, a host
    /// that stopped answering) is given up on after PEER_CONNECT_TIMEOUT, not waited for forever
    /// in the TLS handshake.
    #[tokio::test]
    async fn a_holder_that_accepts_and_never_answers_is_given_up_on() {
        let silent = std::net::TcpListener::bind("127.0.0.1:0").unwrap(); // never accepts
        let addr = silent.local_addr().unwrap();
        let ca = plexus_security::pki::ClusterCa::create("test").unwrap();
        let tls = plexus_security::tls::client(ca.cert_pem(), "peer", None);
        let dir = tempfile::tempdir().unwrap();
        let id = ObjectId { job: JobId::random(), task: "gen".into(), rank: 0, name: "numbers".into() };
        let (url, dest) = (format!("https://{addr}"), dir.path().join("x"));
        let fetch = fetch_object(&url, Some(&tls), &id, None, &dest);
        let e =
            tokio::time::timeout(PEER_CONNECT_TIMEOUT * 3, fetch).await.expect("the fetch ends by itself").unwrap_err();
        assert!(e.to_string().contains("no answer within 5s"), "{e}");
        drop(silent);
    }

    /// A listed object whose file was removed behind the worker's back: NOT_FOUND, and the cache
    /// forgets it, so the worker's next report stops offering it.
    #[tokio::test]
    async fn an_object_whose_file_is_gone_is_not_found_and_forgotten() {
        use pb::peer_service_server::PeerService;
        let (dir, server) = handlers().await;
        let id = ObjectId { job: JobId::random(), task: "gen".into(), rank: 0, name: "numbers".into() };
        put(&server.cache, dir.path(), &id, b"1234");
        std::fs::remove_file(server.cache.path(&id)).unwrap();
        let e = server
            .fetch_object(Request::new(pb::FetchObjectRequest { object_id: id.to_string() }))
            .await
            .err()
            .expect("refused");
        assert_eq!(e.code(), tonic::Code::NotFound, "{}", e.message());
        assert!(!server.cache.contains(&id));
        assert_eq!(server.cache.used(), 0);
    }

    #[tokio::test]
    async fn objects_move_between_two_caches() {
        let a = peer().await;
        let b = peer().await;
        let job = JobId::random();
        // Three and a half chunks, with a recognisable pattern, so chunk boundaries are exercised.
        let data: Vec<u8> = (0..(3 * CHUNK_BYTES + CHUNK_BYTES / 2)).map(|i| (i % 251) as u8).collect();
        let big = ObjectId { job, task: "gen".into(), rank: 3, name: "numbers".into() };
        let empty = ObjectId { job, task: "gen".into(), rank: 3, name: "empty".into() };
        put(&a.cache, a.layout.root(), &big, &data);
        put(&a.cache, a.layout.root(), &empty, b"");

        for (id, expect) in [(&big, &data[..]), (&empty, &b""[..])] {
            let tmp = b.layout.root().join("download");
            let got = fetch_object(&a.url, None, id, Some(expect.len() as u64), &tmp).await.unwrap();
            assert_eq!(got.bytes, expect.len() as u64);
            let ins = b.cache.insert(id, &tmp).unwrap();
            assert_eq!(ins.size, expect.len() as u64);
            assert_eq!(std::fs::read(b.cache.path(id)).unwrap(), expect);
        }
        a.stop().await;
        b.stop().await;
    }

    #[tokio::test]
    async fn objects_move_over_the_data_plane_in_pieces() {
        let a = peer().await;
        let b = peer().await;
        let job = JobId::random();
        // More than one piece, and not a whole number of segments.
        let data: Vec<u8> = (0..(PIECE_BYTES + 12_345)).map(|i| (i % 253) as u8).collect();
        let big = ObjectId { job, task: "gen".into(), rank: 0, name: "big".into() };
        let empty = ObjectId { job, task: "gen".into(), rank: 0, name: "empty".into() };
        put(&a.cache, a.layout.root(), &big, &data);
        put(&a.cache, a.layout.root(), &empty, b"");
        let holder = Source { worker: String::new(), peer_addr: a.url.clone(), rails: a.rails.local_addrs() };
        for (id, expect) in [(&big, &data[..]), (&empty, &b""[..])] {
            let tmp = b.layout.root().join("download");
            let got = fetch_object_rails(&b.rails, None, &holder, id, Some(expect.len() as u64), &tmp).await.unwrap();
            assert_eq!(got.bytes, expect.len() as u64);
            assert!(std::fs::read(&tmp).unwrap() == expect, "{id} arrived intact");
        }
        assert!(b.rails.stats().rails[0].bytes_received >= data.len() as u64);

        // Missing objects and unusable rail addresses are refused by the holder, not hung on.
        let absent = ObjectId { job, task: "gen".into(), rank: 1, name: "absent".into() };
        let err =
            fetch_object_rails(&b.rails, None, &holder, &absent, None, &b.layout.root().join("x")).await.unwrap_err();
        assert!(err.to_string().contains("not in the cache"), "{err}");
        let mut client = pb::peer_service_client::PeerServiceClient::connect(a.url.clone()).await.unwrap();
        for rails in [vec![], vec!["eth0".to_string()], vec!["127.0.0.1:1".to_string(); 65]] {
            let req = pb::PushObjectRequest { object_id: big.to_string(), rails, tag: 1 };
            let status = client.push_object(req).await.unwrap_err();
            assert_eq!(status.code(), tonic::Code::InvalidArgument, "{status}");
        }
        a.stop().await;
        b.stop().await;
    }

    #[tokio::test]
    async fn pushes_beyond_the_limit_wait_then_are_refused_as_resource_exhausted() {
        use pb::peer_service_server::PeerService;
        let (dir, server) = handlers().await;
        let wait = Duration::from_millis(300);
        let server = server.with_push_limit(2, wait);
        let id = ObjectId { job: JobId::random(), task: "gen".into(), rank: 0, name: "x".into() };
        put(&server.cache, dir.path(), &id, b"hello");
        let requester = plexus_dataplane::Endpoint::bind(Default::default()).await.unwrap();
        let push = |tag| {
            let rails = requester.local_addrs().iter().map(ToString::to_string).collect();
            Request::new(pb::PushObjectRequest { object_id: id.to_string(), rails, tag })
        };
        // Two pushes in flight hold both slots (the permits they would hold, taken here).
        let in_flight = Arc::clone(&server.push_slots).acquire_many_owned(2).await.unwrap();

        // A third waits out its wait, then is refused, without having sent anything.
        let started = std::time::Instant::now();
        let status = refused(server.push_object(push(1)).await);
        assert!(started.elapsed() >= wait, "it waited for a slot ({:?})", started.elapsed());
        assert_eq!(status.code(), tonic::Code::ResourceExhausted, "{status:?}");
        assert!(status.message().contains("2 PushObject requests"), "{status:?}");
        assert_eq!(requester.stats().rails[0].bytes_received, 0);

        // A bad request is still answered at once, not after the wait.
        let started = std::time::Instant::now();
        let bad = Request::new(pb::PushObjectRequest { object_id: id.to_string(), rails: vec![], tag: 2 });
        assert_eq!(refused(server.push_object(bad).await).code(), tonic::Code::InvalidArgument);
        assert!(started.elapsed() < wait);

        // One that finds a slot freed while it waits goes through.
        let from = PeerId(server.rails.local_addrs()[0]);
        let (pushed, received) = tokio::join!(server.push_object(push(3)), async {
            tokio::time::sleep(wait / 3).await;
            drop(in_flight);
            requester.recv(from, 3).await.unwrap()
        });
        assert_eq!(pushed.unwrap().into_inner().size, 5);
        assert_eq!(&received[SIZE_HEADER..], b"hello");
    }

    #[tokio::test]
    async fn a_holder_announcing_another_size_than_expected_is_refused_before_writing() {
        let a = peer().await;
        let b = peer().await;
        let data = vec![7u8; 3 * CHUNK_BYTES as usize];
        let id = ObjectId { job: JobId::random(), task: "gen".into(), rank: 0, name: "big".into() };
        put(&a.cache, a.layout.root(), &id, &data);
        let holder = Source { worker: String::new(), peer_addr: a.url.clone(), rails: a.rails.local_addrs() };
        let dest = b.layout.root().join("download");
        // The assignment says 1 MiB (or 4 MiB); the holder has (and announces) 3 MiB.
        for expected in [CHUNK_BYTES, 4 * CHUNK_BYTES] {
            let over_rails = fetch_object_rails(&b.rails, None, &holder, &id, Some(expected), &dest).await.unwrap_err();
            let written_rails = std::fs::metadata(&dest).map(|m| m.len()).unwrap_or(0);
            let _ = std::fs::remove_file(&dest);
            let over_grpc = fetch_object(&a.url, None, &id, Some(expected), &dest).await.unwrap_err();
            let written_grpc = std::fs::metadata(&dest).map(|m| m.len()).unwrap_or(0);
            let _ = std::fs::remove_file(&dest);
            for (err, written) in [(over_rails, written_rails), (over_grpc, written_grpc)] {
                assert!(matches!(err, Error::SizeMismatch { .. }), "{err:?}");
                assert_eq!(
                    err.to_string(),
                    format!(
                        "object {id}: holder {} announced {} bytes, but the assignment says it has {expected}",
                        a.url,
                        data.len()
                    )
                );
                assert_eq!(written, 0, "nothing was written");
            }
        }
        // Unknown (None) or matching, the same object comes.
        for expected in [None, Some(data.len() as u64)] {
            assert_eq!(
                fetch_object_rails(&b.rails, None, &holder, &id, expected, &dest).await.unwrap().bytes,
                data.len() as u64
            );
            assert_eq!(fetch_object(&a.url, None, &id, expected, &dest).await.unwrap().bytes, data.len() as u64);
        }
        a.stop().await;
        b.stop().await;
    }

    /// A hostile holder: its `FetchObject` announces `announced` bytes and then streams up to
    /// `chunks` chunks of 4 KiB, counting how many the client made it produce.
    struct Liar {
        announced: u64,
        chunks: usize,
        produced: Arc<std::sync::atomic::AtomicUsize>,
    }

    #[tonic::async_trait]
    impl pb::peer_service_server::PeerService for Liar {
        type FetchObjectStream = ChunkStream;

        async fn fetch_object(&self, _: Request<pb::FetchObjectRequest>) -> Result<Response<ChunkStream>, Status> {
            let (announced, produced) = (self.announced, Arc::clone(&self.produced));
            let stream = futures::StreamExt::map(futures::stream::iter(0..self.chunks), move |i| {
                produced.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                Ok(pb::ObjectChunk {
                    data: vec![1u8; 4096],
                    total_size: if i == 0 { announced } else { 0 },
                    ..Default::default()
                })
            });
            Ok(Response::new(Box::pin(stream)))
        }

        async fn push_object(
            &self,
            _: Request<pb::PushObjectRequest>,
        ) -> Result<Response<pb::PushObjectResponse>, Status> {
            Err(Status::unimplemented("liar"))
        }

        async fn read_log(&self, _: Request<pb::ReadLogRequest>) -> Result<Response<pb::ReadLogResponse>, Status> {
            Err(Status::unimplemented("liar"))
        }
    }

    #[tokio::test]
    async fn a_grpc_stream_sending_more_than_expected_is_cut_off() {
        let dir = tempfile::tempdir().unwrap();
        let id = ObjectId { job: JobId::random(), task: "gen".into(), rank: 0, name: "x".into() };
        let expected = 10_000u64;
        // Announcing 1 TiB, or announcing the expected size; either way it sends 4 MiB.
        for announced in [1 << 40, expected] {
            let produced = Arc::new(std::sync::atomic::AtomicUsize::new(0));
            let liar = Liar { announced, chunks: 1024, produced: Arc::clone(&produced) };
            let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
            let url = format!("http://{}", listener.local_addr().unwrap());
            let stop = CancellationToken::new();
            let server = tokio::spawn(
                Server::builder()
                    .add_service(pb::peer_service_server::PeerServiceServer::new(liar))
                    .serve_with_incoming_shutdown(
                        tonic::transport::server::TcpIncoming::from(listener),
                        stop.clone().cancelled_owned(),
                    ),
            );
            let dest = dir.path().join("download");
            let err = fetch_object(&url, None, &id, Some(expected), &dest).await.unwrap_err();
            let written = std::fs::metadata(&dest).unwrap().len();
            assert!(written <= expected, "{written} bytes written, more than the expected {expected}");
            let want = if announced == expected {
                format!("object {id}: holder {url} sent more than the {expected} bytes it announced; cut off")
            } else {
                format!(
                    "object {id}: holder {url} announced {announced} bytes, but the assignment says it has {expected}"
                )
            };
            assert_eq!(err.to_string(), want);
            stop.cancel();
            server.await.unwrap().unwrap();
            let produced = produced.load(std::sync::atomic::Ordering::Relaxed);
            assert!(produced < 1024, "the stream was cut off, not drained ({produced} chunks)");
            let _ = std::fs::remove_file(&dest);
        }
    }

    #[tokio::test]
    async fn missing_objects_and_bad_ids_are_refused() {
        let a = peer().await;
        let id = ObjectId { job: JobId::random(), task: "gen".into(), rank: 0, name: "absent".into() };
        let tmp = a.layout.root().join("download");
        let err = fetch_object(&a.url, None, &id, None, &tmp).await.unwrap_err();
        assert!(err.to_string().contains("not in the cache"), "{err}");

        let mut client = pb::peer_service_client::PeerServiceClient::connect(a.url.clone()).await.unwrap();
        for bad in [
            "../../etc/passwd".to_string(),
            format!("{}/gen/0/../../../../etc/passwd", id.job),
            format!("{}/../0/x", id.job),
            format!("{}/gen/0/.hidden", id.job),
            "/etc/passwd".to_string(),
            String::new(),
        ] {
            let status = client.fetch_object(pb::FetchObjectRequest { object_id: bad.clone() }).await.unwrap_err();
            assert_eq!(status.code(), tonic::Code::InvalidArgument, "{bad}: {status}");
        }
        // An unreachable holder is an error, not a hang or a panic.
        let dead = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let dead_url = format!("http://{}", dead.local_addr().unwrap());
        drop(dead);
        assert!(fetch_object(&dead_url, None, &id, None, &tmp).await.is_err());
        assert!(fetch_object("not a url", None, &id, None, &tmp).await.is_err());
        a.stop().await;
    }

    #[tokio::test]
    async fn logs_are_served_with_truncation() {
        let a = peer().await;
        let attempt = AttemptRef { job: JobId::random(), task: "train".into(), rank: 1, attempt: 2 };
        let mut client = pb::peer_service_client::PeerServiceClient::connect(a.url.clone()).await.unwrap();
        let req = |max_bytes| pb::ReadLogRequest { attempt: Some(pb::AttemptRef::from(&attempt)), max_bytes };
        let status = client.read_log(req(0)).await.unwrap_err();
        assert_eq!(status.code(), tonic::Code::NotFound);

        let (out, err) = a.layout.log_files(&attempt);
        std::fs::create_dir_all(out.parent().unwrap()).unwrap();
        std::fs::write(&out, b"hello world").unwrap();
        let r = client.read_log(req(0)).await.unwrap().into_inner();
        assert_eq!((r.stdout.as_slice(), r.stderr.as_slice(), r.truncated), (&b"hello world"[..], &b""[..], false));
        std::fs::write(&err, b"oops").unwrap();
        let r = client.read_log(req(5)).await.unwrap().into_inner();
        assert_eq!((r.stdout.as_slice(), r.stderr.as_slice(), r.truncated), (&b"world"[..], &b"oops"[..], true));

        let bad = pb::ReadLogRequest {
            attempt: Some(pb::AttemptRef { task: "../../x".into(), ..pb::AttemptRef::from(&attempt) }),
            max_bytes: 0,
        };
        assert_eq!(client.read_log(bad).await.unwrap_err().code(), tonic::Code::InvalidArgument);
        assert_eq!(
            client.read_log(pb::ReadLogRequest { attempt: None, max_bytes: 0 }).await.unwrap_err().code(),
            tonic::Code::InvalidArgument
        );
        a.stop().await;
    }
}
