//! Shared regions on a connection of the endpoint: the `map` request's descriptor (read with the
//! header it came with), the regions a connection holds (at most [`MAX_REGIONS`], each at most
//! `MAX_REGION` bytes, all of an endpoint's connections together at most [`MAX_MAPPED`]), and
//! running a request whose payload and result are in one: an allreduce of a 4- or 8-byte type
//! in place reduces the region's bytes directly (the communicator works in the mapped memory
//! itself: sends read it, receptions land and reduce in it, no copy); every other request copies
//! its payload out of the region and its result into it.
//!
//! A task that writes its region while its own request runs only garbles its own result: the
//! worker reads the payload once, at the start, and writes the result once, at the end.

use std::os::fd::{AsRawFd, OwnedFd};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use tokio::io::Interest;
use tokio::net::unix::OwnedReadHalf;

use super::ops::Gang;
use plexus_collective::region::{Region, recv_with_fd};
use plexus_collective::wire::{Elem, MAX_REGIONS, Op, REQUEST_LEN, Request, SharedRef};

/// The most bytes of regions one endpoint maps at once, all its connections together (address
/// space only: the pages are the task's).
pub const MAX_MAPPED: u64 = 64 << 30;

/// A region a connection mapped, counted against its endpoint's [`MAX_MAPPED`] until dropped.
pub struct Mapped {
    region: Region,
    budget: Arc<AtomicU64>,
}

impl Mapped {
    /// Maps `fd` if the endpoint's budget (`budget`: bytes mapped now) has room for it.
    pub fn new(fd: OwnedFd, budget: &Arc<AtomicU64>) -> Result<Mapped, String> {
        let region = Region::map(fd)?;
        let n = region.len();
        budget
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |used| used.checked_add(n).filter(|t| *t <= MAX_MAPPED))
            .map_err(|used| {
                format!(
                    "the endpoint already maps {used} bytes of regions; {n} more would pass its limit of {MAX_MAPPED}"
                )
            })?;
        Ok(Mapped { region, budget: Arc::clone(budget) })
    }

    pub fn len(&self) -> u64 {
        self.region.len()
    }
}

impl Drop for Mapped {
    fn drop(&mut self) {
        self.budget.fetch_sub(self.region.len(), Ordering::SeqCst);
    }
}

/// A connection's regions, by number.
#[derive(Default)]
pub struct Regions(Vec<Option<Arc<Mapped>>>);

impl Regions {
    /// Maps `fd` (which came with the map request) as region `n`, replacing the one before; an
    /// error is the connection's answer, for the task to read.
    pub fn map(&mut self, n: u32, fd: Option<OwnedFd>, budget: &Arc<AtomicU64>) -> Result<(), String> {
        if n >= MAX_REGIONS {
            return Err(format!("map: region {n} is not one of 0..{MAX_REGIONS}"));
        }
        let fd = fd.ok_or("map: no file descriptor came with the request (send a memfd with SCM_RIGHTS)")?;
        if self.0.len() <= n as usize {
            self.0.resize_with(n as usize + 1, || None);
        }
        // The previous region goes first, so that its bytes do not count against the new one.
        self.0[n as usize] = None;
        self.0[n as usize] = Some(Arc::new(Mapped::new(fd, budget).map_err(|e| format!("map: {e}"))?));
        Ok(())
    }

    /// The payload of a request that names `at` for its `len` bytes, checked to fit.
    pub fn payload(&self, at: SharedRef, len: u64) -> Result<Payload, String> {
        let region = self.0.get(at.region as usize).and_then(Option::as_ref);
        at.check(len, region.map(|r| r.len()))?;
        Ok(Payload::Shared { region: Arc::clone(region.expect("checked")), at, len })
    }
}

/// A request's payload.
pub enum Payload {
    /// Read from the socket.
    Inline(Vec<u8>),
    /// In a region of the connection (checked to fit), the result to go there too.
    Shared { region: Arc<Mapped>, at: SharedRef, len: u64 },
}

/// A reply's payload.
pub enum Body {
    Inline(Vec<u8>),
    /// This many result bytes were written at the request's `out_off` in its region.
    Shared(u64),
}

/// Runs `req` on its payload; the result goes where the payload came from.
pub async fn run(gang: &Gang, req: &Request, payload: Payload) -> Result<Body, String> {
    let (region, at, len) = match payload {
        Payload::Inline(data) => return gang.run(req, data).await.map(Body::Inline),
        Payload::Shared { region, at, len } => (region, at, len),
    };
    let in_place = req.op == Op::Allreduce
        && matches!(req.elem, Elem::F32 | Elem::F64 | Elem::I32 | Elem::I64)
        && at.in_off == at.out_off
        && at.out_cap >= len;
    if in_place {
        // SAFETY: requests run one at a time, so nothing else in the worker touches this
        // region's bytes meanwhile; `region` keeps them mapped for as long as the collective
        // holds them (a message landing after a failure included).
        let ptr = unsafe { region.region.slice_mut(at.in_off, len as usize) }.as_mut_ptr();
        let buf = unsafe { plexus_dataplane::MappedBytes::new(ptr, len as usize, region) };
        gang.allreduce_in_place(req.elem, req.reduce, buf).await?;
        return Ok(Body::Shared(len));
    }
    let mut data = vec![0u8; len as usize];
    region.region.read(at.in_off, &mut data);
    let out = gang.run(req, data).await?;
    if out.len() as u64 > at.out_cap {
        return Err(format!(
            "{}: the result's {} bytes do not fit the {} bytes the request left for it in its region",
            req.op.name(),
            out.len(),
            at.out_cap
        ));
    }
    region.region.write(at.out_off, &out);
    Ok(Body::Shared(out.len() as u64))
}

/// Reads a request header with `recvmsg`, so that a descriptor sent with it (a map request's)
/// is received: `None` at the end of the stream before the header's first byte. A descriptor
/// that came with bytes of a header is returned with it; any other is closed.
pub async fn read_header(read: &OwnedReadHalf) -> std::io::Result<Option<([u8; REQUEST_LEN], Option<OwnedFd>)>> {
    let sock = read.as_ref();
    let mut h = [0u8; REQUEST_LEN];
    let (mut got, mut fd) = (0, None);
    while got < REQUEST_LEN {
        sock.readable().await?;
        match sock.try_io(Interest::READABLE, || recv_with_fd(sock.as_raw_fd(), &mut h[got..])) {
            Ok((0, _)) if got == 0 => return Ok(None),
            Ok((0, _)) => return Err(std::io::ErrorKind::UnexpectedEof.into()),
            Ok((n, f)) => {
                got += n;
                if fd.is_none() {
                    fd = f;
                }
            }
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {}
            Err(e) => return Err(e),
        }
    }
    Ok(Some((h, fd)))
}
