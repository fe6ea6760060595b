//! The socket of one member's collective endpoint: its listener, each connection's reader and
//! writer, the one queue that runs requests in order, and the notices between members' workers.

use std::os::unix::fs::PermissionsExt;
use std::sync::atomic::AtomicU64;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::UnixListener;
use tokio::net::unix::{OwnedReadHalf, OwnedWriteHalf};
use tokio::sync::{mpsc, watch};
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;
use tracing::{debug, warn};

use crate::error::{Error, Result};

use super::ops::Gang;
use super::shm::{self, Body, Payload, Regions};
use super::spec::{STALL_TIMEOUT, Spec};
use plexus_collective::wire::{
    self, FLAG_SHARED, HELLO_MAGIC, Header, Op, Reply, Request, SECRET_LEN, SHARED_LEN, SharedRef,
};

/// The low 32 bits of the notice tag (with the gang's tag base): above every tag the
/// communicator's and exchanger's first call use.
const NOTICE: u64 = 0xFFFF_FF00;
/// A notice's first byte: the member failed (ops fail at once), or it ended cleanly.
const FAILED: u8 = 0;
const ENDED: u8 = 1;
/// How long a connection may take to say hello, and a notice to reach a peer's worker.
const HELLO_WITHIN: Duration = Duration::from_secs(10);
const NOTICE_WITHIN: Duration = Duration::from_secs(2);
/// Requests read ahead of the one running.
const QUEUE: usize = 16;

type Answer = (u64, std::result::Result<Body, String>);

/// One request on its way to the queue, with where its answer goes.
struct Job {
    id: u64,
    work: Work,
    answer: mpsc::Sender<Answer>,
}

enum Work {
    /// A collective (or the error that its request did not check, which fails the gang).
    Op(std::result::Result<Request, String>, Payload),
    /// A connection's own answer (a map's), sent in its turn without touching the gang.
    Answer(std::result::Result<Body, String>),
}

/// What the endpoint's tasks share.
struct Shared {
    gang: Gang,
    spec_members: Vec<Vec<std::net::SocketAddr>>,
    rails: Arc<plexus_dataplane::Endpoint>,
    notice_tag: u64,
    secret: String,
    /// Bytes of shared regions mapped now, all connections together.
    mapped: Arc<AtomicU64>,
    /// The gang's first failure: every op fails with it from then on.
    failed: Mutex<Option<String>>,
    /// Cancelled with `failed`: a running op stops.
    poisoned: CancellationToken,
    /// Set when another member ended cleanly: from then on an op that does not complete within
    /// the stall timeout fails (it cannot complete without that member).
    ended: watch::Sender<Option<String>>,
}

/// A member's running endpoint; [`GangEndpoint::close`] ends it.
pub struct GangEndpoint {
    shared: Arc<Shared>,
    cancel: CancellationToken,
    tracker: TaskTracker,
    socket: std::path::PathBuf,
}

impl GangEndpoint {
    /// Binds the socket (the task's, 0600) and starts serving it.
    pub fn open(spec: Spec) -> Result<GangEndpoint> {
        let gang =
            Gang::new(Arc::clone(&spec.rails), spec.members.clone(), spec.rank, spec.tag, Arc::clone(&spec.meter))
                .map_err(|e| Error::InvalidAssignment(format!("the gang's communicator: {e}")))?;
        let _ = std::fs::remove_file(&spec.socket);
        let listener = bind(&spec.socket)?;
        std::fs::set_permissions(&spec.socket, std::fs::Permissions::from_mode(0o600))
            .map_err(Error::io("set the mode of", &spec.socket))?;
        if let Some(uid) = spec.uid {
            crate::isolation::give_to(&spec.socket, uid)?;
        }
        let shared = Arc::new(Shared {
            gang,
            spec_members: spec.members,
            rails: spec.rails,
            notice_tag: spec.tag.wrapping_add(NOTICE),
            secret: spec.secret,
            mapped: Arc::new(AtomicU64::new(0)),
            failed: Mutex::new(None),
            poisoned: CancellationToken::new(),
            ended: watch::Sender::new(None),
        });
        let (cancel, tracker) = (CancellationToken::new(), TaskTracker::new());
        let (queue, jobs) = mpsc::channel(QUEUE);
        tracker.spawn(run_queue(Arc::clone(&shared), jobs, cancel.clone()));
        tracker.spawn(listen_notices(Arc::clone(&shared), cancel.clone()));
        tracker.spawn(accept(Arc::clone(&shared), listener, queue, cancel.clone(), tracker.clone()));
        Ok(GangEndpoint { shared, cancel, tracker, socket: spec.socket })
    }

    /// Ends the endpoint when the member's task has ended: tells the other members' workers
    /// (`failure`: why the task failed, `None` when it exited 0), stops every task, removes the
    /// socket.
    pub async fn close(self, failure: Option<String>) {
        let rank = self.shared.gang.rank();
        let (kind, text) = match failure {
            Some(why) => (FAILED, format!("member {rank} of the gang failed: {why}")),
            None => (ENDED, format!("member {rank} of the gang has ended (its task exited 0)")),
        };
        notify(&self.shared, kind, &text).await;
        self.cancel.cancel();
        self.tracker.close();
        self.tracker.wait().await;
        let _ = std::fs::remove_file(&self.socket);
    }
}

/// Binds a listener at `path`, which may be longer than a socket address holds (108 bytes):
/// through `/proc/self/fd/<dir>/<name>` of its directory, opened for the call.
fn bind(path: &std::path::Path) -> Result<UnixListener> {
    use std::os::fd::AsRawFd;
    let io = |e| Error::io("bind the collective socket", path)(e);
    let (Some(dir), Some(name)) = (path.parent(), path.file_name()) else {
        return Err(io(std::io::Error::other("no directory or file name")));
    };
    let d = std::fs::File::open(dir).map_err(io)?;
    let short = std::path::Path::new(&format!("/proc/self/fd/{}", d.as_raw_fd())).join(name);
    UnixListener::bind(&short).map_err(io)
}

impl Shared {
    /// Records the gang's first failure and stops the running op.
    fn fail(&self, why: &str) {
        let mut f = self.failed.lock().expect("failed lock");
        if f.is_none() {
            *f = Some(why.to_string());
        }
        self.poisoned.cancel();
    }

    fn failure(&self) -> Option<String> {
        self.failed.lock().expect("failed lock").clone()
    }

    fn rank_of(&self, peer: plexus_dataplane::PeerId) -> Option<usize> {
        self.spec_members.iter().position(|m| m.first() == Some(&peer.0))
    }
}

/// Sends a notice to every other member's worker, each within [`NOTICE_WITHIN`].
async fn notify(shared: &Shared, kind: u8, text: &str) {
    let mut msg = vec![kind];
    msg.extend_from_slice(text.as_bytes());
    let msg = Bytes::from(msg);
    let me = shared.gang.rank();
    let sends = shared.spec_members.iter().enumerate().filter(|(r, _)| *r != me).map(|(r, m)| {
        let msg = msg.clone();
        async move {
            match tokio::time::timeout(NOTICE_WITHIN, shared.rails.send(m, shared.notice_tag, msg)).await {
                Ok(Ok(())) => {}
                Ok(Err(e)) => debug!(member = r, error = %e, "a gang notice was not delivered"),
                Err(_) => debug!(member = r, "a gang notice was not acknowledged in time"),
            }
        }
    });
    futures::future::join_all(sends).await;
}

/// Receives the other members' notices until the endpoint closes.
async fn listen_notices(shared: Arc<Shared>, cancel: CancellationToken) {
    loop {
        let (peer, msg) = tokio::select! {
            () = cancel.cancelled() => return,
            m = shared.rails.recv_any(shared.notice_tag) => match m {
                Ok(m) => m,
                Err(e) => { debug!(error = %e, "gang notices: receive ended"); return; }
            },
        };
        if shared.rank_of(peer).is_none() || msg.is_empty() {
            warn!(%peer, "a gang notice from a worker that holds no member; ignored");
            continue;
        }
        let text = String::from_utf8_lossy(&msg[1..]).into_owned();
        if msg[0] == FAILED {
            shared.fail(&text);
            continue;
        }
        shared.ended.send_replace(Some(text));
    }
}

/// Runs the queue's requests one at a time, in order.
async fn run_queue(shared: Arc<Shared>, mut jobs: mpsc::Receiver<Job>, cancel: CancellationToken) {
    loop {
        let job = tokio::select! {
            () = cancel.cancelled() => return,
            j = jobs.recv() => match j { Some(j) => j, None => return },
        };
        let id = job.id;
        let result = match job.work {
            Work::Op(req, payload) => run_one(&shared, req, payload).await,
            Work::Answer(a) => a,
        };
        let _ = job.answer.send((id, result)).await;
    }
}

/// One request: refused when the gang failed or a member ended, else run until it completes
/// or the gang fails. A failure here is the gang's and goes to every member.
async fn run_one(
    shared: &Shared,
    req: std::result::Result<Request, String>,
    payload: Payload,
) -> std::result::Result<Body, String> {
    let me = shared.gang.rank();
    if let Some(f) = shared.failure() {
        return Err(f);
    }
    let req = match req {
        Ok(r) => r,
        Err(why) => {
            let text = format!("member {me} of the gang made a bad request: {why}");
            shared.fail(&text);
            notify(shared, FAILED, &text).await;
            return Err(text);
        }
    };
    let result = tokio::select! {
        r = shm::run(&shared.gang, &req, payload) => r,
        () = shared.poisoned.cancelled() => Err(shared.failure().unwrap_or_default()),
        ended = stalled(shared.ended.subscribe()) => {
            Err(format!("{}: {ended}; it waited {} s for that member", req.op.name(), STALL_TIMEOUT.as_secs()))
        }
    };
    match result {
        Ok(out) => Ok(out),
        Err(e) => {
            // The gang's first failure is every member's answer from now on.
            if shared.failure().is_none() {
                let text = format!("member {me} of the gang: {e}");
                shared.fail(&text);
                notify(shared, FAILED, &text).await;
            }
            Err(shared.failure().unwrap_or(e))
        }
    }
}

/// Returns [`STALL_TIMEOUT`] after another member ended (its notice's text); never before.
async fn stalled(mut ended: watch::Receiver<Option<String>>) -> String {
    let text = loop {
        if let Some(t) = ended.borrow_and_update().clone() {
            break t;
        }
        if ended.changed().await.is_err() {
            std::future::pending::<()>().await;
        }
    };
    tokio::time::sleep(STALL_TIMEOUT).await;
    text
}

/// Accepts connections until the endpoint closes; each is served by a reader and a writer.
async fn accept(
    shared: Arc<Shared>,
    listener: UnixListener,
    queue: mpsc::Sender<Job>,
    cancel: CancellationToken,
    tracker: TaskTracker,
) {
    loop {
        let stream = tokio::select! {
            () = cancel.cancelled() => return,
            s = listener.accept() => match s {
                Ok((s, _)) => s,
                Err(e) => { warn!(error = %e, "collective socket: accept failed"); return; }
            },
        };
        let (read, write) = stream.into_split();
        let (answers, replies) = mpsc::channel(QUEUE);
        let (s, q, c) = (Arc::clone(&shared), queue.clone(), cancel.clone());
        tracker.spawn(async move {
            tokio::select! {
                () = c.cancelled() => {}
                r = read_requests(&s, read, q, answers) => if let Err(e) = r { debug!(error = %e, "collective connection ended") },
            }
        });
        let (s, c) = (Arc::clone(&shared), cancel.clone());
        tracker.spawn(async move {
            tokio::select! {
                () = c.cancelled() => {}
                r = write_replies(&s, write, replies) => if let Err(e) = r { debug!(error = %e, "collective connection ended") },
            }
        });
    }
}

/// Checks the hello, then reads requests into the queue until the task closes the connection.
async fn read_requests(
    shared: &Shared,
    mut read: OwnedReadHalf,
    queue: mpsc::Sender<Job>,
    answers: mpsc::Sender<Answer>,
) -> std::io::Result<()> {
    let mut hello = [0u8; 4 + SECRET_LEN];
    tokio::time::timeout(HELLO_WITHIN, read.read_exact(&mut hello)).await??;
    if &hello[..4] != HELLO_MAGIC || !wire::same_secret(&hello[4..], shared.secret.as_bytes()) {
        let _ = answers.send((0, Err("refused: not this attempt's secret".into()))).await;
        return Ok(());
    }
    let (rank, size) = (shared.gang.rank() as u32, shared.gang.size() as u32);
    let _ = answers.send((0, Ok(Body::Inline([rank.to_le_bytes(), size.to_le_bytes()].concat())))).await;
    let size = shared.gang.size();
    let mut regions = Regions::default();
    loop {
        let Some((h, fd)) = shm::read_header(&read).await? else { return Ok(()) };
        let h = Header::decode(&h);
        let answer = answers.clone();
        if let Some(why) = h.frame_error(size) {
            // What follows cannot be read: the gang fails and the connection ends.
            let job = Job { id: h.id, work: Work::Op(Err(why), Payload::Inline(Vec::new())), answer };
            let _ = queue.send(job).await;
            return Ok(());
        }
        let work = if h.op == Op::Map.code() {
            Work::Answer(regions.map(h.root, fd, &shared.mapped).map(|()| Body::Inline(Vec::new())))
        } else {
            let (req, payload) = read_request(&mut read, &h, (rank as usize, size), &regions).await?;
            Work::Op(req, payload)
        };
        if queue.send(Job { id: h.id, work, answer }).await.is_err() {
            return Ok(());
        }
    }
}

/// The rest of a request after its header `h`: its counts, then its payload (or where in a
/// region it is), checked.
async fn read_request(
    read: &mut OwnedReadHalf,
    h: &Header,
    (rank, size): (usize, usize),
    regions: &Regions,
) -> std::io::Result<(std::result::Result<Request, String>, Payload)> {
    let mut counts = vec![0u8; h.counts as usize * 8];
    read.read_exact(&mut counts).await?;
    let counts = counts.chunks_exact(8).map(|c| u64::from_le_bytes(c.try_into().expect("8 bytes"))).collect();
    let req = h.check(size, counts);
    if h.flags & FLAG_SHARED == 0 {
        let mut data = vec![0u8; h.len as usize];
        read.read_exact(&mut data).await?;
        return Ok((req, Payload::Inline(data)));
    }
    let mut at = [0u8; SHARED_LEN];
    read.read_exact(&mut at).await?;
    let at = SharedRef::decode(&at);
    let fits = |r: &Request| match wire::result_len(r.op, h.len, size, rank, r.root) {
        Some(n) if n > at.out_cap => Err(format!(
            "{}: the result's {n} bytes do not fit the {} bytes the request left for it in its region",
            r.op.name(),
            at.out_cap
        )),
        _ => Ok(()),
    };
    let req = req.and_then(|r| fits(&r).map(|()| r));
    Ok(match regions.payload(at, h.len) {
        Ok(payload) => (req, payload),
        Err(why) => (req.and(Err(why)), Payload::Inline(Vec::new())),
    })
}

/// Writes each answer as a reply frame, in order.
async fn write_replies(
    _shared: &Shared,
    mut write: OwnedWriteHalf,
    mut replies: mpsc::Receiver<Answer>,
) -> std::io::Result<()> {
    while let Some((id, result)) = replies.recv().await {
        let (reply, body) = match result {
            Ok(Body::Inline(b)) => (Reply { id, ok: true, shared: false, len: b.len() as u64 }, b),
            Ok(Body::Shared(n)) => (Reply { id, ok: true, shared: true, len: n }, Vec::new()),
            Err(e) => (Reply { id, ok: false, shared: false, len: e.len() as u64 }, e.into_bytes()),
        };
        write.write_all(&reply.encode()).await?;
        write.write_all(&body).await?;
    }
    Ok(())
}
