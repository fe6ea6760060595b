//! The PeerService: this worker serving its cached objects and attempt logs to peers and to the
//! coordinator ([`PeerServer`], [`serve`]), and the client side that fetches an object from a
//! peer into a local file ([`fetch_object`]).
//!
//! Object ids and attempts in requests are validated with `plexus_proto`'s typed ids before any
//! path is built, so a request can never make the worker read outside its cache or log dirs.

use std::path::Path;
use std::pin::Pin;
use std::time::Duration;

use futures::Stream;
use plexus_proto::{ObjectId, convert, pb};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;
use tonic::transport::{Endpoint, Server};
use tonic::{Request, Response, Status};
use tracing::{debug, info};

use crate::cache::Cache;
use crate::error::{Error, Result};
use crate::layout::Layout;
use crate::logs::read_tail;

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

/// Serves `FetchObject` and `ReadLog` from this worker's cache and log dir.
#[derive(Debug, Clone)]
pub struct PeerServer {
    cache: Cache,
    layout: Layout,
}

impl PeerServer {
    pub fn new(cache: Cache, layout: Layout) -> PeerServer {
        PeerServer { cache, layout }
    }
}

type ChunkStream = Pin<Box<dyn Stream<Item = Result<pb::ObjectChunk, Status>> + Send>>;

#[tonic::async_trait]
impl pb::peer_service_server::PeerService for PeerServer {
    type FetchObjectStream = ChunkStream;

    async fn fetch_object(&self, request: Request<pb::FetchObjectRequest>) -> Result<Response<ChunkStream>, Status> {
        let id = convert::object_id("object_id", &request.get_ref().object_id)?;
        let not_found = || Status::not_found(format!("object {id} is not in the cache of this worker"));
        if !self.cache.contains(&id) {
            return Err(not_found());
        }
        // An open file stays readable even if the object is evicted while it streams.
        let path = self.cache.path(&id);
        let file = match tokio::fs::File::open(&path).await {
            Ok(f) => f,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Err(not_found()),
            Err(e) => return Err(Status::internal(format!("cannot open object {id}: {e}"))),
        };
        let total_size = file
            .metadata()
            .await
            .map_err(|e| Status::internal(format!("cannot read the size of object {id}: {e}")))?
            .len();
        debug!(object = %id, total_size, "serving object");
        Ok(Response::new(chunks(file, total_size)))
    }

    async fn read_log(&self, request: Request<pb::ReadLogRequest>) -> Result<Response<pb::ReadLogResponse>, Status> {
        let req = request.into_inner();
        let attempt = convert::attempt("attempt", req.attempt.as_ref())?;
        let max = match req.max_bytes {
            0 => DEFAULT_LOG_BYTES,
            n => n.min(MAX_LOG_BYTES),
        };
        let (out_path, err_path) = self.layout.log_files(&attempt);
        let read = |p: std::path::PathBuf| async move {
            read_tail(&p, max).await.map_err(|e| Status::internal(format!("cannot read {}: {e}", p.display())))
        };
        let (out, err) = (read(out_path).await?, read(err_path).await?);
        if out.is_none() && err.is_none() {
            return Err(Status::not_found(format!("this worker has no logs for attempt {attempt}")));
        }
        let (stdout, cut_out) = out.unwrap_or_default();
        let (stderr, cut_err) = err.unwrap_or_default();
        Ok(Response::new(pb::ReadLogResponse { stdout, stderr, truncated: cut_out || cut_err }))
    }
}

/// The chunks of an open file; the first carries `total_size` and is sent even when empty, so an
/// empty object still tells its size. The stream is driven by the response itself, so no task is
/// spawned and a client that goes away simply stops it.
fn chunks(file: tokio::fs::File, total_size: u64) -> ChunkStream {
    let state = Some((file, true));
    Box::pin(futures::stream::unfold(state, move |state| async move {
        let (mut file, first) = state?;
        let mut data = Vec::with_capacity(CHUNK_BYTES.min(total_size) as usize);
        match (&mut file).take(CHUNK_BYTES).read_to_end(&mut data).await {
            Err(e) => Some((Err(Status::internal(format!("reading object: {e}"))), None)),
            Ok(0) if !first => None,
            Ok(_) => {
                let chunk = pb::ObjectChunk { data, total_size: if first { total_size } else { 0 } };
                Some((Ok(chunk), Some((file, false))))
            }
        }
    }))
}

/// Runs the PeerService on `listener` until `shutdown` is cancelled.
pub async fn serve(listener: TcpListener, server: PeerServer, shutdown: CancellationToken) -> Result<()> {
    let addr = listener.local_addr().ok();
    info!(?addr, "peer service listening");
    Server::builder()
        .add_service(pb::peer_service_server::PeerServiceServer::new(server))
        // TCP_NODELAY: log reads and the first chunk of an object should not wait on Nagle.
        .serve_with_incoming_shutdown(tonic::transport::server::TcpIncoming::from(listener).with_nodelay(Some(true)), shutdown.cancelled_owned())
        .await
        .map_err(Error::Serve)
}

/// What one successful fetch moved.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Fetched {
    pub bytes: u64,
}

/// Fetches object `id` from the PeerService at `holder` into the new file `dest`. On error the
/// partial file may remain; the caller owns `dest` and removes it.
pub async fn fetch_object(holder: &str, id: &ObjectId, dest: &Path) -> Result<Fetched> {
    let endpoint = Endpoint::from_shared(holder.to_string())
        .map_err(Error::connect(holder))?
        .connect_timeout(PEER_CONNECT_TIMEOUT)
        .tcp_nodelay(true);
    let channel = endpoint.connect().await.map_err(Error::connect(holder))?;
    let mut client = pb::peer_service_client::PeerServiceClient::new(channel);
    let call = client.fetch_object(pb::FetchObjectRequest { object_id: id.to_string() });
    let mut stream = tokio::time::timeout(PEER_IDLE_TIMEOUT, call)
        .await
        .map_err(|_| Error::Timeout { call: "FetchObject", after: PEER_IDLE_TIMEOUT })?
        .map_err(Error::rpc("FetchObject"))?
        .into_inner();
    let mut file = tokio::fs::File::create(dest).await.map_err(Error::io("create", dest))?;
    let bad = |reason: String| Error::BadObject { object: id.to_string(), reason };
    let mut total: Option<u64> = None;
    let mut received: u64 = 0;
    loop {
        let next = tokio::time::timeout(PEER_IDLE_TIMEOUT, stream.message())
            .await
            .map_err(|_| Error::Timeout { call: "FetchObject", after: PEER_IDLE_TIMEOUT })?
            .map_err(Error::rpc("FetchObject"))?;
        let Some(chunk) = next else { break };
        let expected = *total.get_or_insert(chunk.total_size);
        received += chunk.data.len() as u64;
        if received > expected {
            return Err(bad(format!("the peer sent more than the announced {expected} bytes")));
        }
        file.write_all(&chunk.data).await.map_err(Error::io("write", dest))?;
    }
    let Some(expected) = total else {
        return Err(bad("the peer sent no data".into()));
    };
    if received != expected {
        return Err(bad(format!("the peer sent {received} of the announced {expected} bytes")));
    }
    file.flush().await.map_err(Error::io("write", dest))?;
    Ok(Fetched { bytes: received })
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
    }

    async fn peer() -> Peer {
        let dir = tempfile::tempdir().unwrap();
        let layout = Layout::new(dir.path());
        let cache = Cache::open(layout.cache_dir(), 1 << 30).unwrap();
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}", listener.local_addr().unwrap());
        let stop = CancellationToken::new();
        let task = tokio::spawn(serve(listener, PeerServer::new(cache.clone(), layout.clone()), stop.clone()));
        Peer { _dir: dir, cache, layout, url, stop, task }
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
            let got = fetch_object(&a.url, id, &tmp).await.unwrap();
            assert_eq!(got.bytes, expect.len() as u64);
            let ins = b.cache.insert(id, &tmp).unwrap();
            assert_eq!(ins.size, expect.len() as u64);
            assert_eq!(std::fs::read(b.cache.path(id)).unwrap(), expect);
        }
        a.stop().await;
        b.stop().await;
    }

    #[tokio::test]
    async fn missing_objects_and_bad_ids_are_refused() {
        let a = peer().await;
        let id = ObjectId { job: JobId::random(), task: "gen".into(), rank: 0, name: "absent".into() };
        let tmp = a.layout.root().join("download");
        let err = fetch_object(&a.url, &id, &tmp).await.unwrap_err();
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
        assert!(fetch_object(&dead_url, &id, &tmp).await.is_err());
        assert!(fetch_object("not a url", &id, &tmp).await.is_err());
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
