//! [`SharedBuf`]: one allocation that several tasks read and write at once, each in ranges
//! that a protocol makes exclusive.
//!
//! Two users:
//! * the endpoint's reassembly: several connection readers write the segments of one incoming
//!   message, each into the range its [`Reassembler`](crate::reassembly::Reassembler)
//!   reservation gives it alone;
//! * a running collective: its working buffer, from which sends take zero-copy views
//!   ([`SharedBuf::view`]) while posted receives land in (or are reduced into) other ranges.
//!   The collective's executor orders every step so that no range is written while anything
//!   else reads or writes it (see `collective::Executor`).
//!
//! Every access goes through an `unsafe` method whose contract is that exclusivity.

use std::cell::UnsafeCell;
use std::ops::Range;
use std::sync::Arc;

use bytes::Bytes;

pub(crate) struct SharedBuf {
    ptr: *mut u8,
    len: usize,
    vec: UnsafeCell<Vec<u8>>,
}

// SAFETY: every access is through the unsafe methods below, whose callers guarantee that
// concurrent accesses touch disjoint ranges (or only read), and that the happens-before edges
// between conflicting accesses come from the locks and channels of their protocol.
unsafe impl Send for SharedBuf {}
unsafe impl Sync for SharedBuf {}

impl SharedBuf {
    /// A buffer of `len` zero bytes.
    pub fn zeroed(len: usize) -> SharedBuf {
        // Zeroed allocation: for large buffers the allocator maps fresh zero pages, which costs
        // nothing until written.
        SharedBuf::from_vec(vec![0u8; len])
    }

    /// Takes over `vec`'s allocation (its contents stay).
    pub fn from_vec(mut vec: Vec<u8>) -> SharedBuf {
        SharedBuf {
            ptr: vec.as_mut_ptr(),
            len: vec.len(),
            vec: UnsafeCell::new(vec),
        }
    }

    pub fn len(&self) -> usize {
        self.len
    }

    /// `[offset, offset + len)` if it lies inside the buffer, else `None` (without overflowing
    /// for any inputs). The accessors below refuse a range outside with a panic: their callers
    /// compute ranges from a plan or a reservation already checked, so one outside is a bug.
    pub fn bounds(&self, offset: usize, len: usize) -> Option<Range<usize>> {
        (offset <= self.len && len <= self.len - offset).then(|| offset..offset + len)
    }

    /// The bytes `[offset, offset + len)`, writable.
    ///
    /// # Safety
    /// Nothing else reads or writes any of these bytes until the slice is dropped.
    #[allow(clippy::mut_from_ref)]
    pub unsafe fn range_mut(&self, offset: usize, len: usize) -> &mut [u8] {
        self.check(offset, len);
        if len == 0 {
            return &mut [];
        }
        // SAFETY: in bounds (checked above); exclusive by the caller's contract.
        unsafe { std::slice::from_raw_parts_mut(self.ptr.add(offset), len) }
    }

    /// The bytes `[offset, offset + len)`, read-only.
    ///
    /// # Safety
    /// Nothing writes any of these bytes until the slice is dropped.
    pub unsafe fn range(&self, offset: usize, len: usize) -> &[u8] {
        self.check(offset, len);
        if len == 0 {
            return &[];
        }
        // SAFETY: in bounds (checked above); not written meanwhile by the caller's contract.
        unsafe { std::slice::from_raw_parts(self.ptr.add(offset), len) }
    }

    /// Panics unless `[offset, offset + len)` is inside the buffer (see [`bounds`](Self::bounds)).
    fn check(&self, offset: usize, len: usize) {
        if self.bounds(offset, len).is_none() {
            panic!("range {offset}+{len} beyond {}", self.len);
        }
    }

    /// `range` as `Bytes` that keep the buffer alive, without copying.
    ///
    /// # Safety
    /// Nothing writes these bytes while the returned `Bytes` (or a clone or slice of it) is
    /// read. (It may outlive that: holders that no longer read it, like a queued segment of a
    /// finished message, only keep the memory alive.)
    pub unsafe fn view(self: &Arc<Self>, range: Range<usize>) -> Bytes {
        assert!(range.start <= range.end && range.end <= self.len);
        Bytes::from_owner(View {
            buf: self.clone(),
            range,
        })
    }

    /// The allocation, back as a `Vec`.
    ///
    /// # Safety
    /// No other reference to the buffer's bytes exists or will be used (the caller holds the
    /// only `Arc`, or the others will never read or write again).
    pub unsafe fn take(&self) -> Vec<u8> {
        // SAFETY: by the caller's contract nobody else uses the bytes.
        unsafe { std::mem::take(&mut *self.vec.get()) }
    }
}

struct View {
    buf: Arc<SharedBuf>,
    range: Range<usize>,
}

impl AsRef<[u8]> for View {
    fn as_ref(&self) -> &[u8] {
        // SAFETY: the view was made under `SharedBuf::view`'s contract: its bytes are not
        // written while it is read.
        unsafe { self.buf.range(self.range.start, self.range.len()) }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn views_share_the_allocation_and_keep_it_alive() {
        let buf = Arc::new(SharedBuf::from_vec((0u8..100).collect()));
        // SAFETY: nothing writes the buffer in this test while views are read.
        let v = unsafe { buf.view(10..20) };
        assert_eq!(&v[..], &(10u8..20).collect::<Vec<_>>()[..]);
        assert_eq!(v.as_ptr(), unsafe { buf.range(10, 10) }.as_ptr());
        drop(buf);
        assert_eq!(v[9], 19, "the view keeps the memory alive");
        assert_eq!(&v.slice(2..4)[..], &[12, 13]);
    }

    /// The accessors refuse (by a panic) exactly the ranges `bounds` refuses.
    #[test]
    fn out_of_bounds_ranges_are_refused() {
        let buf = SharedBuf::zeroed(8);
        assert_eq!(buf.bounds(4, 5), None);
        assert_eq!(buf.bounds(9, 0), None);
        assert_eq!(buf.bounds(usize::MAX, 2), None, "no overflow");
        assert_eq!(buf.bounds(4, 4), Some(4..8));
        assert_eq!(buf.bounds(8, 0), Some(8..8));
    }
}
