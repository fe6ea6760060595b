//! Receive buffers an exchange keeps for its next call.
//!
//! An all-to-all lands every message in one receive buffer and hands the caller views of it.
//! A fresh buffer of tens of MiB costs a page fault per 4 KiB page as the messages land (the
//! kernel zeroes each page, then the socket copy writes it again): on loopback a fifth of the
//! transport's CPU. A training loop exchanges the same sizes every step, so when the caller
//! drops a call's results the buffer comes back here, pages mapped, for the next call of about
//! that size — what a caching allocator does, and what a library that fills a caller's
//! preallocated output (Gloo's `all_to_all_single`) gets for free.
//!
//! Bounded: at most [`KEEP`] buffers and [`KEEP_BYTES`] in all; a buffer is taken only for a
//! call between half its size and its size, so a small call never pins a large buffer; buffers
//! under [`KEEP_MIN`] are left to the allocator. When the exchanger is dropped, so are they.

use std::sync::{Arc, Mutex, Weak};
use std::time::{Duration, Instant};

use bytes::Bytes;

use crate::shared_buf::SharedBuf;

/// Buffers smaller than this are the allocator's: it serves them from memory already mapped.
const KEEP_MIN: usize = 256 << 10;
/// How many buffers are kept: a step's results still held while the next step runs, and one.
const KEEP: usize = 2;
/// The most bytes kept in all.
const KEEP_BYTES: usize = 512 << 20;
/// How many times [`sole_owner`] yields to the runtime before it sleeps.
const YIELDS: u32 = 64;

/// The buffers kept (see the module documentation).
#[derive(Default)]
pub(crate) struct Spares {
    bufs: Mutex<Vec<Vec<u8>>>,
}

impl Spares {
    /// A buffer of `len` bytes: the smallest kept one that fits within twice `len` (its old
    /// contents are overwritten by the exchange), else a fresh one; `None` if that allocation
    /// fails.
    pub fn buffer(&self, len: usize) -> Option<SharedBuf> {
        if len >= KEEP_MIN {
            let mut bufs = self.bufs.lock().unwrap_or_else(|p| p.into_inner());
            let fits = (0..bufs.len())
                .filter(|&i| bufs[i].len() >= len && bufs[i].len() / 2 <= len)
                .min_by_key(|&i| bufs[i].len());
            if let Some(i) = fits {
                let mut v = bufs.swap_remove(i);
                v.truncate(len);
                return Some(SharedBuf::from_vec(v));
            }
        }
        SharedBuf::try_uninit(len)
    }

    /// All of `buf` as `Bytes`, without copying and without waiting for the transport to let
    /// go of it (a connection task may hold a reference a moment longer); when the last view is
    /// dropped the buffer comes back here if nothing else holds it then.
    ///
    /// # Safety
    /// Every byte of `buf` was written, and nothing writes it any more.
    pub unsafe fn bytes(self: &Arc<Self>, buf: Arc<SharedBuf>) -> Bytes {
        Bytes::from_owner(Kept { buf: Some(buf), home: Arc::downgrade(self) })
    }

    /// Keeps `buf`'s allocation if it is worth keeping, forgetting the oldest beyond the bounds.
    fn keep(&self, buf: SharedBuf) {
        if buf.len() < KEEP_MIN || buf.len() > KEEP_BYTES || buf.is_external() {
            return;
        }
        // SAFETY: the caller owns the buffer outright, and every byte was written (the
        // contract of `bytes`, through which every kept buffer comes).
        let vec = unsafe { buf.take() };
        let mut bufs = self.bufs.lock().unwrap_or_else(|p| p.into_inner());
        bufs.push(vec);
        while bufs.len() > KEEP || bufs.iter().map(Vec::len).sum::<usize>() > KEEP_BYTES {
            bufs.remove(0);
        }
    }

    /// How many buffers are kept now.
    #[cfg(test)]
    fn kept(&self) -> usize {
        self.bufs.lock().unwrap_or_else(|p| p.into_inner()).len()
    }
}

/// A buffer lent out as `Bytes`.
struct Kept {
    /// `Some` until dropped.
    buf: Option<Arc<SharedBuf>>,
    home: Weak<Spares>,
}

impl AsRef<[u8]> for Kept {
    fn as_ref(&self) -> &[u8] {
        let buf = self.buf.as_ref().expect("a kept buffer is there until dropped");
        // SAFETY: written, and written no more (the contract of `Spares::bytes`).
        unsafe { buf.range(0, buf.len()) }
    }
}

impl Drop for Kept {
    fn drop(&mut self) {
        if let (Some(home), Some(buf)) = (self.home.upgrade(), self.buf.take())
            && let Ok(buf) = Arc::try_unwrap(buf)
        {
            home.keep(buf);
        }
    }
}

/// The buffer itself once this is its last `Arc`. When a collective ends, a transport task may
/// still hold a view of it for a moment (a connection reader that delivered a message in place;
/// a connection's drain task drops its copy of the last segment only when it next runs, which
/// can be after the acknowledgement arrived), so this waits up to 50 ms for such holders before
/// giving up and the caller copies (measured: without the wait, one 256 MiB allreduce in six
/// paid a 147 ms copy into fresh memory).
pub(crate) async fn sole_owner(mut buf: Arc<SharedBuf>) -> std::result::Result<SharedBuf, Arc<SharedBuf>> {
    let until = Instant::now() + Duration::from_millis(50);
    for tries in 0u32.. {
        match Arc::try_unwrap(buf) {
            Ok(b) => return Ok(b),
            Err(b) if Instant::now() >= until => return Err(b),
            Err(b) => {
                buf = b;
                // The holder is a task that is about to run, usually: let it, then look again.
                // A timer sleeps a millisecond at least, which a small collective would pay
                // whole, so it is only for a holder that takes longer.
                if tries < YIELDS {
                    tokio::task::yield_now().await;
                } else {
                    tokio::time::sleep(Duration::from_micros(200)).await;
                }
            }
        }
    }
    unreachable!("the loop returns")
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `len` bytes of `byte`, as an exchange's finished receive buffer.
    fn filled(b: SharedBuf, byte: u8) -> Arc<SharedBuf> {
        let len = b.len();
        // SAFETY: the only reference.
        for d in unsafe { b.range_uninit(0, len) } {
            d.write(byte);
        }
        Arc::new(b)
    }

    fn address(b: &SharedBuf) -> *const u8 {
        // SAFETY: read only, and the tests write every buffer before this.
        unsafe { b.range(0, b.len()) }.as_ptr()
    }

    #[test]
    fn a_dropped_result_is_the_next_calls_buffer() {
        let spares = Arc::new(Spares::default());
        let len = 1 << 20;
        let buf = filled(spares.buffer(len).unwrap(), 7);
        let at = address(&buf);
        // SAFETY: written, and not written again.
        let got = unsafe { spares.bytes(buf) };
        let view = got.slice(10..20);
        drop(got);
        assert_eq!(spares.kept(), 0, "a view still holds the buffer");
        assert_eq!(&view[..], &[7u8; 10]);
        drop(view);
        assert_eq!(spares.kept(), 1);
        // A call of about the same size takes it (the same memory), a smaller one does not.
        let small = spares.buffer(len / 4).unwrap();
        assert_eq!(spares.kept(), 1, "a quarter-size call leaves the buffer kept");
        drop(small);
        let again = spares.buffer(len - 100).unwrap();
        assert_eq!(again.len(), len - 100);
        assert_eq!(spares.kept(), 0);
        assert_eq!(address(&filled(again, 1)), at);
    }

    #[test]
    fn a_buffer_the_transport_still_holds_is_not_kept() {
        let spares = Arc::new(Spares::default());
        let buf = filled(spares.buffer(KEEP_MIN).unwrap(), 3);
        let transport = buf.clone();
        // SAFETY: written, and not written again.
        drop(unsafe { spares.bytes(buf) });
        assert_eq!(spares.kept(), 0);
        drop(transport);
    }

    #[test]
    fn it_keeps_at_most_two_buffers_and_none_small_or_after_its_exchanger() {
        let spares = Arc::new(Spares::default());
        // SAFETY (each `bytes` below): written, and not written again.
        let results: Vec<Bytes> =
            (0..4).map(|i| unsafe { spares.bytes(filled(SharedBuf::try_uninit(KEEP_MIN + i).unwrap(), 0)) }).collect();
        drop(results);
        assert_eq!(spares.kept(), KEEP);
        // The newest are kept.
        assert_eq!(spares.buffer(KEEP_MIN + 3).unwrap().len(), KEEP_MIN + 3);
        assert_eq!(spares.kept(), 1);
        drop(unsafe { spares.bytes(filled(SharedBuf::try_uninit(KEEP_MIN - 1).unwrap(), 0)) });
        assert_eq!(spares.kept(), 1, "a small buffer is the allocator's");
        let kept = unsafe { spares.bytes(filled(SharedBuf::try_uninit(KEEP_MIN).unwrap(), 0)) };
        drop(spares);
        drop(kept); // its home is gone: freed, no panic
    }
}
