//! Shared regions between a task and its worker (see [`crate::wire`]): a memfd the task creates,
//! sizes and seals against shrinking, mapped by both; and the one file descriptor it travels
//! with over the Unix socket (`SCM_RIGHTS`).
//!
//! The seal is what makes the worker's mapping safe: a file that shrank under a mapping would
//! raise `SIGBUS` on the next access to the pages it lost, and a sealed memfd cannot shrink.
//! The worker maps only memfds that carry the seal ([`Region::map`]), of at most
//! [`MAX_REGION`] bytes.

use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};

use crate::wire::MAX_REGION;

/// A shared mapping of a whole memfd, unmapped when dropped.
#[derive(Debug)]
pub struct Region {
    ptr: *mut u8,
    len: usize,
}

// SAFETY: the mapping is plain memory owned by this value; every access goes through raw
// copies bounded by `len` (see `read` and `write`).
unsafe impl Send for Region {}
unsafe impl Sync for Region {}

fn os_err(what: &str) -> io::Error {
    let e = io::Error::last_os_error();
    io::Error::new(e.kind(), format!("{what}: {e}"))
}

impl Region {
    /// A new region of `size` bytes (the task's side): a memfd sized and sealed against
    /// shrinking, mapped; and its descriptor, to send to the worker.
    pub fn create(size: u64) -> io::Result<(Region, OwnedFd)> {
        if size == 0 || size > MAX_REGION {
            return Err(io::Error::new(io::ErrorKind::InvalidInput, format!("a region of {size} bytes")));
        }
        // SAFETY: plain syscalls on a descriptor this function owns.
        let fd =
            unsafe { libc::memfd_create(c"plexus-collective".as_ptr(), libc::MFD_CLOEXEC | libc::MFD_ALLOW_SEALING) };
        if fd < 0 {
            return Err(os_err("memfd_create"));
        }
        // SAFETY: `fd` was just created and is owned here.
        let fd = unsafe { OwnedFd::from_raw_fd(fd) };
        if unsafe { libc::ftruncate(fd.as_raw_fd(), size as libc::off_t) } != 0 {
            return Err(os_err("size the region"));
        }
        if unsafe { libc::fcntl(fd.as_raw_fd(), libc::F_ADD_SEALS, libc::F_SEAL_SHRINK) } != 0 {
            return Err(os_err("seal the region"));
        }
        let region = Region::mmap(fd.as_raw_fd(), size as usize)?;
        Ok((region, fd))
    }

    /// Maps a region a task sent (the worker's side), after checking that it is a memfd sealed
    /// against shrinking, of 1 to [`MAX_REGION`] bytes. The errors are for the task to read.
    pub fn map(fd: OwnedFd) -> Result<Region, String> {
        // SAFETY: fcntl and fstat on a descriptor we own; `st` is written by fstat.
        let seals = unsafe { libc::fcntl(fd.as_raw_fd(), libc::F_GET_SEALS) };
        if seals < 0 {
            return Err("the region is not a memfd (its seals cannot be read)".into());
        }
        if seals & libc::F_SEAL_SHRINK == 0 {
            return Err("the region's memfd is not sealed against shrinking (add F_SEAL_SHRINK)".into());
        }
        let mut st: libc::stat = unsafe { std::mem::zeroed() };
        if unsafe { libc::fstat(fd.as_raw_fd(), &mut st) } != 0 {
            return Err(format!("the region's size cannot be read: {}", io::Error::last_os_error()));
        }
        let size = st.st_size as u64;
        if size == 0 || size > MAX_REGION {
            return Err(format!("a region of {size} bytes (1 to {MAX_REGION} are mapped)"));
        }
        Region::mmap(fd.as_raw_fd(), size as usize).map_err(|e| format!("the region cannot be mapped: {e}"))
    }

    fn mmap(fd: RawFd, len: usize) -> io::Result<Region> {
        // SAFETY: a fresh shared mapping of `len` bytes of `fd`, which is at least that long.
        let p = unsafe {
            libc::mmap(std::ptr::null_mut(), len, libc::PROT_READ | libc::PROT_WRITE, libc::MAP_SHARED, fd, 0)
        };
        if p == libc::MAP_FAILED {
            return Err(os_err("mmap"));
        }
        Ok(Region { ptr: p.cast(), len })
    }

    pub fn len(&self) -> u64 {
        self.len as u64
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    fn check(&self, off: u64, n: usize) -> usize {
        let end = off.checked_add(n as u64).expect("a range within the region");
        assert!(end <= self.len as u64, "{n} bytes at {off} past a region of {} bytes", self.len);
        off as usize
    }

    /// Copies `dst.len()` bytes from offset `off` (which the caller checked fit).
    pub fn read(&self, off: u64, dst: &mut [u8]) {
        let off = self.check(off, dst.len());
        // SAFETY: in bounds (checked); the other side may write concurrently, which can only
        // garble the bytes it gets, never reach outside the mapping.
        unsafe { std::ptr::copy_nonoverlapping(self.ptr.add(off), dst.as_mut_ptr(), dst.len()) }
    }

    /// Copies `src` to offset `off` (which the caller checked fit).
    pub fn write(&self, off: u64, src: &[u8]) {
        let off = self.check(off, src.len());
        // SAFETY: in bounds (checked); see `read`.
        unsafe { std::ptr::copy_nonoverlapping(src.as_ptr(), self.ptr.add(off), src.len()) }
    }

    /// `n` bytes at `off` as a slice, to reduce into in place.
    ///
    /// # Safety
    /// No other slice of these bytes may be alive in this process while it is. The other
    /// process may still write them: the caller must only copy in and out of it.
    #[allow(clippy::mut_from_ref)]
    pub unsafe fn slice_mut(&self, off: u64, n: usize) -> &mut [u8] {
        let off = self.check(off, n);
        // SAFETY: in bounds; exclusivity in this process is the caller's promise.
        unsafe { std::slice::from_raw_parts_mut(self.ptr.add(off), n) }
    }
}

impl Drop for Region {
    fn drop(&mut self) {
        // SAFETY: the mapping this value made; no slice of it outlives `self`.
        unsafe { libc::munmap(self.ptr.cast(), self.len) };
    }
}

/// Sends `bytes` with `fd` attached to the first of them (`SCM_RIGHTS`), on a blocking
/// stream socket; the rest of `bytes` follows with plain writes if the first send was short.
pub fn send_with_fd(sock: RawFd, bytes: &[u8], fd: RawFd) -> io::Result<usize> {
    let mut cbuf = [0u64; 8];
    let space = unsafe { libc::CMSG_SPACE(size_of::<RawFd>() as u32) } as usize;
    let mut iov = libc::iovec { iov_base: bytes.as_ptr() as *mut libc::c_void, iov_len: bytes.len() };
    // SAFETY: msghdr and its control buffer are local and outlive the call; CMSG_* stay within
    // `cbuf` (8 u64s hold one descriptor's header and data).
    let n = unsafe {
        let mut msg: libc::msghdr = std::mem::zeroed();
        msg.msg_iov = &mut iov;
        msg.msg_iovlen = 1;
        msg.msg_control = cbuf.as_mut_ptr().cast();
        msg.msg_controllen = space as _;
        let c = libc::CMSG_FIRSTHDR(&msg);
        (*c).cmsg_level = libc::SOL_SOCKET;
        (*c).cmsg_type = libc::SCM_RIGHTS;
        (*c).cmsg_len = libc::CMSG_LEN(size_of::<RawFd>() as u32) as _;
        std::ptr::write_unaligned(libc::CMSG_DATA(c).cast::<RawFd>(), fd);
        libc::sendmsg(sock, &msg, libc::MSG_NOSIGNAL)
    };
    if n < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(n as usize)
}

/// One `recvmsg` into `buf` on a (non-blocking or blocking) stream socket: the bytes read and
/// the first descriptor that came with them, if any (opened close-on-exec; any others the
/// kernel closes, as they do not fit the control buffer).
pub fn recv_with_fd(sock: RawFd, buf: &mut [u8]) -> io::Result<(usize, Option<OwnedFd>)> {
    let mut cbuf = [0u64; 8];
    let space = unsafe { libc::CMSG_SPACE(size_of::<RawFd>() as u32) } as usize;
    let mut iov = libc::iovec { iov_base: buf.as_mut_ptr().cast(), iov_len: buf.len() };
    // SAFETY: as in `send_with_fd`; the kernel writes at most `space` control bytes.
    unsafe {
        let mut msg: libc::msghdr = std::mem::zeroed();
        msg.msg_iov = &mut iov;
        msg.msg_iovlen = 1;
        msg.msg_control = cbuf.as_mut_ptr().cast();
        msg.msg_controllen = space as _;
        let n = libc::recvmsg(sock, &mut msg, libc::MSG_CMSG_CLOEXEC);
        if n < 0 {
            return Err(io::Error::last_os_error());
        }
        let mut fd = None;
        let mut c = libc::CMSG_FIRSTHDR(&msg);
        while !c.is_null() {
            if (*c).cmsg_level == libc::SOL_SOCKET && (*c).cmsg_type == libc::SCM_RIGHTS {
                let data = libc::CMSG_DATA(c).cast::<RawFd>();
                let count = ((*c).cmsg_len as usize - libc::CMSG_LEN(0) as usize) / size_of::<RawFd>();
                for i in 0..count {
                    let raw = std::ptr::read_unaligned(data.add(i));
                    let owned = OwnedFd::from_raw_fd(raw);
                    if fd.is_none() {
                        fd = Some(owned);
                    } // else dropped: closed
                }
            }
            c = libc::CMSG_NXTHDR(&msg, c);
        }
        Ok((n as usize, fd))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_created_region_maps_on_the_other_side_and_shares_its_bytes() {
        let (mine, fd) = Region::create(8192).unwrap();
        let theirs = Region::map(fd.try_clone().unwrap()).unwrap();
        assert_eq!(theirs.len(), 8192);
        mine.write(4000, b"hello");
        let mut got = [0u8; 5];
        theirs.read(4000, &mut got);
        assert_eq!(&got, b"hello");
        // Sealed: the task cannot shrink it under the worker's mapping.
        assert_ne!(unsafe { libc::ftruncate(fd.as_raw_fd(), 10) }, 0);
    }

    #[test]
    fn the_worker_refuses_what_is_not_a_sealed_memfd_of_a_sane_size() {
        let file = tempfile_fd();
        assert!(Region::map(file).unwrap_err().contains("not a memfd"));
        let raw = unsafe { libc::memfd_create(c"t".as_ptr(), libc::MFD_CLOEXEC | libc::MFD_ALLOW_SEALING) };
        let fd = unsafe { OwnedFd::from_raw_fd(raw) };
        assert_eq!(unsafe { libc::ftruncate(fd.as_raw_fd(), 4096) }, 0);
        assert!(Region::map(fd.try_clone().unwrap()).unwrap_err().contains("not sealed against shrinking"));
        assert_eq!(unsafe { libc::ftruncate(fd.as_raw_fd(), 0) }, 0);
        assert_eq!(unsafe { libc::fcntl(fd.as_raw_fd(), libc::F_ADD_SEALS, libc::F_SEAL_SHRINK) }, 0);
        assert!(Region::map(fd).unwrap_err().contains("a region of 0 bytes"));
        assert!(Region::create(MAX_REGION + 1).is_err());
    }

    fn tempfile_fd() -> OwnedFd {
        let f = std::fs::File::open("/proc/self/exe").unwrap();
        OwnedFd::from(f)
    }

    #[test]
    fn a_descriptor_travels_with_its_bytes() {
        let (a, b) = std::os::unix::net::UnixStream::pair().unwrap();
        let (_r, fd) = Region::create(4096).unwrap();
        assert_eq!(send_with_fd(a.as_raw_fd(), b"abcd", fd.as_raw_fd()).unwrap(), 4);
        let mut buf = [0u8; 4];
        let (n, got) = recv_with_fd(b.as_raw_fd(), &mut buf).unwrap();
        assert_eq!((n, &buf), (4, b"abcd"));
        assert_eq!(Region::map(got.unwrap()).unwrap().len(), 4096);
    }
}
