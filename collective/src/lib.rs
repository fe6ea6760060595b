//! Collectives from inside a Plexus task, over its worker's data plane.
//!
//! A task of a `communicator = true` gang (a command task whose replicas are one gang, one member
//! per worker) connects to its worker's collective endpoint (`$PLEXUS_COLLECTIVE_SOCKET`, proven
//! with `$PLEXUS_COLLECTIVE_SECRET`) and asks for collectives that the worker runs with the other
//! members over its striped rails. Every member must make the same calls in the same order.
//!
//! ```no_run
//! use plexus_collective::{Client, Reduce};
//! let mut comm = Client::from_env()?;                // rank and size from the worker
//! let mut grad = vec![1.0f32; 1024];
//! comm.allreduce(&mut grad, Reduce::Sum)?;           // in place: every member's sum
//! let mut all = vec![0i64; comm.size()];
//! comm.allgather(&mut all, &[comm.rank() as i64])?;  // [0, 1, ..., size - 1]
//! comm.barrier()?;
//! # Ok::<(), plexus_collective::Error>(())
//! ```
//!
//! Outstanding operations: [`Client::submit`] sends a request and returns its id, and
//! [`Client::finish`] reads the replies in order; the typed methods do both.
//!
//! Payloads travel through shared memory ([`region`]): each request's bytes go into a region
//! of its own (a memfd mapped by the task and its worker, made or grown when no idle one is
//! large enough, at most [`wire::MAX_REGIONS`]), the worker reduces there and the result comes
//! back there, so only a request's header crosses the socket. An `alltoallv` (whose result's
//! size is not known ahead), a request while every region is busy, or a client made with
//! [`Client::connect_copying`] sends its payload on the socket instead.
//!
//! [`wire`] is the endpoint's frame format, which the worker (`plexus_worker::gang_endpoint`)
//! serves and the Python client (`plexus.collective`) speaks too.

pub mod region;
pub mod wire;

use std::collections::VecDeque;
use std::io::{Read, Write};
use std::os::fd::AsRawFd;
use std::os::unix::net::UnixStream;
use std::path::Path;

use region::Region;
pub use wire::{Elem, Op, Reduce};
use wire::{FLAG_SHARED, HELLO_MAGIC, Header, MAX_REGIONS, REPLY_LEN, Reply, SECRET_LEN, SharedRef};

/// The smallest region made: small requests share one size, so a region is rarely remade.
const MIN_REGION: u64 = 64 << 10;

/// What can go wrong.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// `$PLEXUS_COLLECTIVE_SOCKET` is not set: this process is not a member of a gang.
    #[error(
        "no collective endpoint: $PLEXUS_COLLECTIVE_SOCKET is not set, so this process is not a member of a Plexus gang (give the task `replicas = N` and `communicator = true`)"
    )]
    NotInGang,
    /// The socket could not be reached, or the connection broke.
    #[error("collective endpoint {what}: {source}")]
    Io { what: String, source: std::io::Error },
    /// The operation failed on every member; the text names the member and the cause.
    #[error("{0}")]
    Failed(String),
    /// A call whose buffers do not fit together (checked before anything is sent).
    #[error("{0}")]
    Usage(String),
}

type Result<T> = std::result::Result<T, Error>;

/// Elements the typed methods take: the endpoint's numeric types (16-bit floats go as raw
/// `u16` bits with [`Client::submit`] and [`Elem::Bf16`] / [`Elem::F16`]).
pub trait Element: Copy + Default {
    const ELEM: Elem;
    fn to_le(self, out: &mut Vec<u8>);
    fn from_le(b: &[u8]) -> Self;
}

macro_rules! element {
    ($t:ty, $e:expr) => {
        impl Element for $t {
            const ELEM: Elem = $e;
            fn to_le(self, out: &mut Vec<u8>) {
                out.extend_from_slice(&self.to_le_bytes());
            }
            fn from_le(b: &[u8]) -> Self {
                <$t>::from_le_bytes(b.try_into().expect("one element"))
            }
        }
    };
}
element!(f32, Elem::F32);
element!(f64, Elem::F64);
element!(i32, Elem::I32);
element!(i64, Elem::I64);
element!(u8, Elem::U8);

fn bytes_of<T: Element>(v: &[T]) -> Vec<u8> {
    let mut out = Vec::with_capacity(std::mem::size_of_val(v));
    v.iter().for_each(|x| x.to_le(&mut out));
    out
}

fn fill<T: Element>(dst: &mut [T], b: &[u8]) -> Result<()> {
    let n = T::ELEM.size();
    if b.len() != dst.len() * n {
        return Err(Error::Failed(format!("the worker answered {} bytes for {} elements", b.len(), dst.len())));
    }
    dst.iter_mut().zip(b.chunks_exact(n)).for_each(|(d, c)| *d = T::from_le(c));
    Ok(())
}

/// Connects to `path`, through `/proc/self/fd/<dir>/<name>` when it is longer than a socket
/// address holds (108 bytes).
fn connect(path: &Path) -> std::io::Result<UnixStream> {
    use std::os::fd::AsRawFd;
    if path.as_os_str().len() < 100 {
        return UnixStream::connect(path);
    }
    let (Some(dir), Some(name)) = (path.parent(), path.file_name()) else {
        return UnixStream::connect(path);
    };
    let d = std::fs::File::open(dir)?;
    UnixStream::connect(Path::new(&format!("/proc/self/fd/{}", d.as_raw_fd())).join(name))
}

/// One connection to the task's collective endpoint.
pub struct Client {
    sock: UnixStream,
    rank: usize,
    size: usize,
    next: u64,
    /// Shared regions by number, and whether a request outstanding uses each.
    regions: Vec<(Region, bool)>,
    /// Requests outstanding, oldest first: their ids and the region each uses.
    pending: VecDeque<(u64, Option<usize>)>,
    /// Whether to use shared regions at all.
    sharing: bool,
}

impl Client {
    /// Connects to `$PLEXUS_COLLECTIVE_SOCKET` with `$PLEXUS_COLLECTIVE_SECRET`.
    pub fn from_env() -> Result<Client> {
        let path = std::env::var_os("PLEXUS_COLLECTIVE_SOCKET").ok_or(Error::NotInGang)?;
        let secret = std::env::var("PLEXUS_COLLECTIVE_SECRET").unwrap_or_default();
        Client::connect(Path::new(&path), &secret)
    }

    /// Connects to the endpoint at `path` with `secret`.
    pub fn connect(path: &Path, secret: &str) -> Result<Client> {
        Client::open(path, secret, true)
    }

    /// Connects without shared memory: every payload and result crosses the socket.
    pub fn connect_copying(path: &Path, secret: &str) -> Result<Client> {
        Client::open(path, secret, false)
    }

    fn open(path: &Path, secret: &str, sharing: bool) -> Result<Client> {
        let io = |what: &str| {
            let what = format!("{what} {}", path.display());
            move |source| Error::Io { what, source }
        };
        let mut sock = connect(path).map_err(io("connect to"))?;
        let mut hello = HELLO_MAGIC.to_vec();
        let mut s = secret.as_bytes().to_vec();
        s.resize(SECRET_LEN, 0);
        hello.extend_from_slice(&s);
        sock.write_all(&hello).map_err(io("say hello to"))?;
        let mut c = Client { sock, rank: 0, size: 0, next: 1, regions: Vec::new(), pending: VecDeque::new(), sharing };
        let body = c.read_reply(0, None)?;
        if body.len() != 8 {
            return Err(Error::Failed(format!("the endpoint's hello reply has {} bytes, not 8", body.len())));
        }
        c.rank = u32::from_le_bytes(body[0..4].try_into().expect("4 bytes")) as usize;
        c.size = u32::from_le_bytes(body[4..8].try_into().expect("4 bytes")) as usize;
        Ok(c)
    }

    pub fn rank(&self) -> usize {
        self.rank
    }

    pub fn size(&self) -> usize {
        self.size
    }

    /// Sends one request (raw bytes of `elem`) and returns its id; its reply is read by
    /// [`Client::finish`], replies coming in request order. Many may be outstanding.
    pub fn submit(
        &mut self,
        op: Op,
        elem: Elem,
        reduce: Reduce,
        root: usize,
        counts: &[u64],
        data: &[u8],
    ) -> Result<u64> {
        let id = self.next;
        self.next += 1;
        let cap = wire::result_len(op, data.len() as u64, self.size, self.rank, root);
        let slot = match cap {
            Some(cap) if self.sharing && op != Op::Poison => self.region_for(data.len().max(cap as usize) as u64)?,
            _ => None,
        };
        let h = Header {
            id,
            op: op.code(),
            dtype: elem.code(),
            reduce: reduce.code(),
            flags: if slot.is_some() { FLAG_SHARED } else { 0 },
            root: root as u32,
            counts: counts.len() as u64,
            len: data.len() as u64,
        };
        let mut frame = h.encode().to_vec();
        counts.iter().for_each(|c| frame.extend_from_slice(&c.to_le_bytes()));
        if let Some(n) = slot {
            let (region, busy) = &mut self.regions[n];
            region.write(0, data);
            *busy = true;
            let out_cap = cap.unwrap_or(0);
            let at = SharedRef { region: n as u32, in_off: 0, out_off: 0, out_cap };
            frame.extend_from_slice(&at.encode());
        }
        let io = |source| Error::Io { what: "send to".into(), source };
        self.pending.push_back((id, slot));
        self.sock.write_all(&frame).map_err(io)?;
        if slot.is_none() {
            self.sock.write_all(data).map_err(io)?;
        }
        Ok(id)
    }

    /// An idle region of at least `need` bytes, mapped on the worker too: an idle one that is
    /// large enough, else a new or regrown one, made only while nothing is outstanding (its
    /// map request's answer is read at once). `None`: send on the socket.
    fn region_for(&mut self, need: u64) -> Result<Option<usize>> {
        if need == 0 || need > wire::MAX_REGION {
            return Ok(None);
        }
        let fits = self.regions.iter().enumerate().filter(|(_, (r, busy))| !busy && r.len() >= need);
        if let Some((n, _)) = fits.min_by_key(|(_, (r, _))| r.len()) {
            return Ok(Some(n));
        }
        if !self.pending.is_empty() {
            return Ok(None);
        }
        let n = match self.regions.iter().position(|(_, busy)| !busy) {
            Some(n) => n,
            None if self.regions.len() < MAX_REGIONS as usize => self.regions.len(),
            None => return Ok(None),
        };
        let size = need.next_power_of_two().clamp(MIN_REGION, wire::MAX_REGION);
        let io = |what: &'static str| move |source| Error::Io { what: what.into(), source };
        let (region, fd) = Region::create(size).map_err(io("make a shared region for"))?;
        let id = self.next;
        self.next += 1;
        let h = Header { id, op: Op::Map.code(), dtype: 0, reduce: 0, flags: 0, root: n as u32, counts: 0, len: 0 };
        let frame = h.encode();
        let sent = region::send_with_fd(self.sock.as_raw_fd(), &frame, fd.as_raw_fd()).map_err(io("send to"))?;
        self.sock.write_all(&frame[sent..]).map_err(io("send to"))?;
        match self.read_reply(id, None) {
            Ok(_) => {}
            // The worker would not map it (its limits): the socket carries payloads from now on.
            Err(Error::Failed(_)) => {
                self.sharing = false;
                return Ok(None);
            }
            Err(e) => return Err(e),
        }
        if n == self.regions.len() {
            self.regions.push((region, false));
        } else {
            self.regions[n] = (region, false);
        }
        Ok(Some(n))
    }

    /// The result of the request `id` (the oldest outstanding one).
    pub fn finish(&mut self, id: u64) -> Result<Vec<u8>> {
        let (want, slot) = self.pending.pop_front().unwrap_or((id, None));
        if want != id {
            return Err(Error::Usage(format!("finish({id}): the oldest outstanding request is {want}")));
        }
        let out = self.read_reply(id, slot);
        if let Some(n) = slot {
            self.regions[n].1 = false;
        }
        out
    }

    /// Reads the reply to `id`; a result in a region (`slot`, the request's) is copied out.
    fn read_reply(&mut self, id: u64, slot: Option<usize>) -> Result<Vec<u8>> {
        let io = |source| Error::Io { what: "read from".into(), source };
        let mut h = [0u8; REPLY_LEN];
        self.sock.read_exact(&mut h).map_err(io)?;
        let r = Reply::decode(&h);
        if r.len > wire::MAX_PAYLOAD * 2 {
            return Err(Error::Failed(format!("the endpoint announced a reply of {} bytes", r.len)));
        }
        let on_socket = if r.shared { 0 } else { r.len as usize };
        let mut body = vec![0u8; on_socket];
        self.sock.read_exact(&mut body).map_err(io)?;
        if r.id != id {
            return Err(Error::Failed(format!("reply {} to request {id}", r.id)));
        }
        if !r.ok {
            return Err(Error::Failed(String::from_utf8_lossy(&body).into_owned()));
        }
        if r.shared {
            let region = slot.map(|n| &self.regions[n].0).filter(|reg| reg.len() >= r.len);
            let Some(region) = region else {
                return Err(Error::Failed(format!("a result of {} bytes in a region the request did not use", r.len)));
            };
            body = vec![0u8; r.len as usize];
            region.read(0, &mut body);
        }
        Ok(body)
    }

    fn call(
        &mut self,
        op: Op,
        elem: Elem,
        reduce: Reduce,
        root: usize,
        counts: &[u64],
        data: &[u8],
    ) -> Result<Vec<u8>> {
        let id = self.submit(op, elem, reduce, root, counts, data)?;
        self.finish(id)
    }

    /// Replaces `buf` with the element-wise reduction of every member's `buf`.
    pub fn allreduce<T: Element>(&mut self, buf: &mut [T], op: Reduce) -> Result<()> {
        let out = self.call(Op::Allreduce, T::ELEM, op, 0, &[], &bytes_of(buf))?;
        fill(buf, &out)
    }

    /// Reduces every member's `buf` into the root's; the others' are unchanged.
    pub fn reduce<T: Element>(&mut self, buf: &mut [T], root: usize, op: Reduce) -> Result<()> {
        let out = self.call(Op::Reduce, T::ELEM, op, root, &[], &bytes_of(buf))?;
        if self.rank == root { fill(buf, &out) } else { Ok(()) }
    }

    /// Every member's `buf` becomes the root's.
    pub fn broadcast<T: Element>(&mut self, buf: &mut [T], root: usize) -> Result<()> {
        let out = self.call(Op::Broadcast, T::ELEM, Reduce::Sum, root, &[], &bytes_of(buf))?;
        fill(buf, &out)
    }

    /// `out` (size × `inp`) becomes every member's `inp`, in rank order.
    pub fn allgather<T: Element>(&mut self, out: &mut [T], inp: &[T]) -> Result<()> {
        if out.len() != inp.len() * self.size {
            return Err(Error::Usage(format!(
                "allgather: out has {} elements, not {} x {}",
                out.len(),
                self.size,
                inp.len()
            )));
        }
        let got = self.call(Op::Allgather, T::ELEM, Reduce::Sum, 0, &[], &bytes_of(inp))?;
        fill(out, &got)
    }

    /// `out` becomes part `rank` of the reduction of every member's `inp` (size equal parts).
    pub fn reduce_scatter<T: Element>(&mut self, out: &mut [T], inp: &[T], op: Reduce) -> Result<()> {
        if out.len() * self.size != inp.len() {
            return Err(Error::Usage(format!(
                "reduce_scatter: inp has {} elements, not {} x {}",
                inp.len(),
                self.size,
                out.len()
            )));
        }
        let got = self.call(Op::ReduceScatter, T::ELEM, op, 0, &[], &bytes_of(inp))?;
        fill(out, &got)
    }

    /// Block j of `inp` goes to member j; block j of `out` is what member j sent.
    pub fn alltoall<T: Element>(&mut self, out: &mut [T], inp: &[T]) -> Result<()> {
        let got = self.call(Op::Alltoall, T::ELEM, Reduce::Sum, 0, &[], &bytes_of(inp))?;
        fill(out, &got)
    }

    /// Sends `counts[j]` elements of `inp` (in order) to member j; returns what each member sent
    /// this one, in rank order.
    pub fn alltoallv<T: Element>(&mut self, inp: &[T], counts: &[usize]) -> Result<Vec<Vec<T>>> {
        let n = T::ELEM.size();
        let bytes: Vec<u64> = counts.iter().map(|c| (c * n) as u64).collect();
        let got = self.call(Op::Alltoallv, T::ELEM, Reduce::Sum, 0, &bytes, &bytes_of(inp))?;
        let size = self.size;
        if got.len() < 8 * size {
            return Err(Error::Failed(format!("an alltoallv reply of {} bytes", got.len())));
        }
        let (head, mut data) = got.split_at(8 * size);
        let mut out = Vec::with_capacity(size);
        for c in head.chunks_exact(8) {
            let len = u64::from_le_bytes(c.try_into().expect("8 bytes")) as usize;
            if len > data.len() || !len.is_multiple_of(n) {
                return Err(Error::Failed("an alltoallv reply whose counts do not match its data".into()));
            }
            let (part, rest) = data.split_at(len);
            let mut v = vec![T::default(); len / n];
            fill(&mut v, part)?;
            out.push(v);
            data = rest;
        }
        Ok(out)
    }

    /// Returns once every member called it.
    pub fn barrier(&mut self) -> Result<()> {
        self.call(Op::Barrier, Elem::U8, Reduce::Sum, 0, &[], &[]).map(|_| ())
    }
}
