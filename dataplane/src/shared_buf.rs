//! [`SharedBuf`]: one allocation that several tasks read and write at once, each in ranges
//! that a protocol makes exclusive.
//!
//! Two users:
//! * the endpoint's reassembly: several connection readers write the segments of one incoming
//!   message, each into the range its [`Reassembler`](crate::reassembly::Reassembler)
//!   reservation gives it alone. That buffer starts uninitialised (every byte is written before
//!   anything reads it) and grows as the message arrives ([`SharedBuf::grown`]), so a peer
//!   that announces a huge message makes the receiver allocate only what it sent plus a step;
//! * a running collective: its working buffer, from which sends take zero-copy views
//!   ([`SharedBuf::view`]) while posted receives land in (or are reduced into) other ranges.
//!   The collective's executor orders every step so that no range is written while anything
//!   else reads or writes it (see `collective::Executor`).
//!
//! Every access goes through an `unsafe` method whose contract is that exclusivity (and, for
//! the reading ones, that the bytes were written).

use std::cell::UnsafeCell;
use std::mem::{ManuallyDrop, MaybeUninit};
use std::ops::Range;
use std::sync::Arc;

use bytes::Bytes;

pub(crate) struct SharedBuf {
    ptr: *mut u8,
    len: usize,
    /// The allocation; its length is `len`. `MaybeUninit`, so that a buffer may be allocated
    /// and grown without writing it first (a grown `Vec` keeps its first `len` elements).
    /// Empty for an [`external`](SharedBuf::external) buffer.
    vec: UnsafeCell<Vec<MaybeUninit<u8>>>,
    /// What keeps an external buffer's memory mapped (`None`: the memory is `vec`'s).
    owner: Option<Arc<dyn Send + Sync>>,
}

// SAFETY: every access is through the unsafe methods below, whose callers guarantee that
// concurrent accesses touch disjoint ranges (or only read), and that the happens-before edges
// between conflicting accesses come from the locks and channels of their protocol.
unsafe impl Send for SharedBuf {}
unsafe impl Sync for SharedBuf {}

impl SharedBuf {
    /// Takes over `vec`'s allocation (its contents stay).
    pub fn from_vec(vec: Vec<u8>) -> SharedBuf {
        let mut vec = ManuallyDrop::new(vec);
        // SAFETY: `MaybeUninit<u8>` has the layout of `u8`; the allocation, length and capacity
        // are `vec`'s, which is not dropped.
        let vec = unsafe { Vec::from_raw_parts(vec.as_mut_ptr().cast(), vec.len(), vec.capacity()) };
        SharedBuf::from_uninit(vec)
    }

    /// A buffer of `len` bytes that are not initialised, or `None` if the allocation fails
    /// (the caller refuses whatever asked for it instead of aborting the process). Large
    /// buffers come from fresh pages that cost nothing until written.
    pub fn try_uninit(len: usize) -> Option<SharedBuf> {
        let mut vec: Vec<MaybeUninit<u8>> = Vec::new();
        vec.try_reserve_exact(len).ok()?;
        // SAFETY: the capacity is at least `len`, and `MaybeUninit` needs no initialisation.
        unsafe { vec.set_len(len) };
        Some(SharedBuf::from_uninit(vec))
    }

    fn from_uninit(mut vec: Vec<MaybeUninit<u8>>) -> SharedBuf {
        SharedBuf { ptr: vec.as_mut_ptr().cast(), len: vec.len(), vec: UnsafeCell::new(vec), owner: None }
    }

    /// A buffer over `len` bytes at `ptr` that are not this buffer's allocation (a shared
    /// memory region a task mapped): kept mapped by `owner` for as long as any reference to the
    /// buffer lives, so a message still landing after a failed collective writes mapped memory.
    /// It cannot be [`grown`](Self::grown) or [`taken`](Self::take).
    ///
    /// # Safety
    /// `ptr..ptr + len` is valid for reads and writes, written, and stays mapped while `owner`
    /// lives; nothing outside the accesses this type's contracts allow reads or writes it until
    /// the caller is done with the buffer.
    pub unsafe fn external(ptr: *mut u8, len: usize, owner: Arc<dyn Send + Sync>) -> SharedBuf {
        SharedBuf { ptr, len, vec: UnsafeCell::new(Vec::new()), owner: Some(owner) }
    }

    /// This buffer's allocation grown to `len` bytes, its first `self.len()` bytes as they
    /// were and the rest uninitialised; `self` is left empty. `None` if the allocation fails
    /// (`self` is then unchanged). The allocator may grow the block in place or move it; large
    /// blocks are remapped, not copied.
    ///
    /// # Safety
    /// Nothing reads or writes `self`'s bytes now or later (other holders of `self` only keep
    /// it alive), and `len >= self.len()`.
    pub unsafe fn grown(&self, len: usize) -> Option<SharedBuf> {
        assert!(len >= self.len, "a buffer only grows");
        assert!(self.owner.is_none(), "an external buffer does not grow");
        // SAFETY: by the caller's contract nobody else uses the allocation.
        let vec = unsafe { &mut *self.vec.get() };
        vec.try_reserve_exact(len - self.len).ok()?;
        // SAFETY: the capacity is at least `len`, and `MaybeUninit` needs no initialisation.
        unsafe { vec.set_len(len) };
        Some(SharedBuf::from_uninit(std::mem::take(vec)))
    }

    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether the memory is not this buffer's allocation (see [`external`](Self::external)).
    pub fn is_external(&self) -> bool {
        self.owner.is_some()
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
    /// Nothing else reads or writes any of these bytes until the slice is dropped, and they
    /// were written before (a buffer made by `from_vec`, or a range a writer filled).
    #[allow(clippy::mut_from_ref)]
    pub unsafe fn range_mut(&self, offset: usize, len: usize) -> &mut [u8] {
        self.check(offset, len);
        if len == 0 {
            return &mut [];
        }
        // SAFETY: in bounds (checked above); exclusive by the caller's contract.
        unsafe { std::slice::from_raw_parts_mut(self.ptr.add(offset), len) }
    }

    /// The bytes `[offset, offset + len)`, to be filled: a reader from the socket writes them
    /// without reading them first (`tokio::io::ReadBuf::uninit`).
    ///
    /// # Safety
    /// Nothing else reads or writes any of these bytes until the slice is dropped.
    #[allow(clippy::mut_from_ref)]
    pub unsafe fn range_uninit(&self, offset: usize, len: usize) -> &mut [MaybeUninit<u8>] {
        self.check(offset, len);
        if len == 0 {
            return &mut [];
        }
        // SAFETY: in bounds (checked above); exclusive by the caller's contract.
        unsafe { std::slice::from_raw_parts_mut(self.ptr.add(offset).cast(), len) }
    }

    /// The bytes `[offset, offset + len)`, read-only.
    ///
    /// # Safety
    /// Nothing writes any of these bytes until the slice is dropped, and they were written.
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
        Bytes::from_owner(View { buf: self.clone(), range })
    }

    /// The allocation, back as a `Vec`.
    ///
    /// # Safety
    /// No other reference to the buffer's bytes exists or will be used (the caller holds the
    /// only `Arc`, or the others will never read or write again), and every byte was written.
    pub unsafe fn take(&self) -> Vec<u8> {
        assert!(self.owner.is_none(), "an external buffer has no allocation to take");
        // SAFETY: by the caller's contract nobody else uses the bytes.
        let vec = ManuallyDrop::new(unsafe { std::mem::take(&mut *self.vec.get()) });
        let (ptr, len, cap) = (vec.as_ptr().cast_mut(), vec.len(), vec.capacity());
        // SAFETY: the same allocation, length and capacity, as `u8`, whose layout
        // `MaybeUninit<u8>` has; every byte is initialised by the caller's contract.
        unsafe { Vec::from_raw_parts(ptr.cast(), len, cap) }
    }
}

/// Bytes that are not the data plane's allocation (a shared memory region a task mapped), given
/// to a collective to work in directly ([`Communicator::allreduce_mapped`]), with what keeps
/// them mapped.
///
/// [`Communicator::allreduce_mapped`]: crate::Communicator::allreduce_mapped
pub struct MappedBytes {
    ptr: *mut u8,
    len: usize,
    owner: Arc<dyn Send + Sync>,
}

// SAFETY: the bytes are only read or written under the contract of `MappedBytes::new`, which
// leaves them to whoever holds this value; `owner` is Send + Sync.
unsafe impl Send for MappedBytes {}
unsafe impl Sync for MappedBytes {}

impl MappedBytes {
    /// The `len` bytes at `ptr`, kept mapped by `owner`.
    ///
    /// # Safety
    /// They are valid for reads and writes, initialised, and stay mapped while `owner` lives;
    /// nothing else reads or writes them until this value and what is made of it are dropped
    /// (a collective given them returns only once it no longer touches them, but after a
    /// failure a straggling message may still write them, into memory `owner` keeps mapped).
    pub unsafe fn new(ptr: *mut u8, len: usize, owner: Arc<dyn Send + Sync>) -> MappedBytes {
        MappedBytes { ptr, len, owner }
    }

    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The bytes, once no collective works in them.
    pub fn as_mut_slice(&mut self) -> &mut [u8] {
        if self.len == 0 {
            return &mut [];
        }
        // SAFETY: valid and ours by `new`'s contract; `&mut self` makes the slice exclusive.
        unsafe { std::slice::from_raw_parts_mut(self.ptr, self.len) }
    }

    /// A working buffer over them for a collective.
    pub(crate) fn shared(&self) -> SharedBuf {
        // SAFETY: `new`'s contract is `external`'s.
        unsafe { SharedBuf::external(self.ptr, self.len, Arc::clone(&self.owner)) }
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

    /// A buffer allocated uninitialised and grown keeps what was written into it, and hands
    /// over its allocation once every byte was written.
    #[test]
    fn a_grown_buffer_keeps_its_written_prefix() {
        let small = SharedBuf::try_uninit(3).unwrap();
        // SAFETY: nothing else uses these buffers; every byte is written before it is read.
        unsafe {
            for (b, v) in small.range_uninit(0, 3).iter_mut().zip([1u8, 2, 3]) {
                b.write(v);
            }
            let big = small.grown(1 << 20).unwrap();
            assert_eq!(small.vec.get().as_ref().unwrap().len(), 0, "the old one is empty");
            assert_eq!(big.len(), 1 << 20);
            assert_eq!(big.range(0, 3), &[1, 2, 3]);
            for b in big.range_uninit(3, (1 << 20) - 3) {
                b.write(9);
            }
            let v = big.take();
            assert_eq!((&v[..4], v.len()), (&[1u8, 2, 3, 9][..], 1 << 20));
        }
        assert!(SharedBuf::try_uninit(usize::MAX).is_none(), "a failed allocation is None");
    }

    /// The accessors refuse (by a panic) exactly the ranges `bounds` refuses.
    #[test]
    fn out_of_bounds_ranges_are_refused() {
        let buf = SharedBuf::from_vec(vec![0; 8]);
        assert_eq!(buf.bounds(4, 5), None);
        assert_eq!(buf.bounds(9, 0), None);
        assert_eq!(buf.bounds(usize::MAX, 2), None, "no overflow");
        assert_eq!(buf.bounds(4, 4), Some(4..8));
        assert_eq!(buf.bounds(8, 0), Some(8..8));
    }
}
