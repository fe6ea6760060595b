//! The collective endpoint's wire format between a task and its worker, over the attempt's Unix
//! socket: pure, no I/O. All integers are little-endian.
//!
//! - The task opens with `HELLO_MAGIC` and the attempt's secret (`SECRET_LEN` bytes, the
//!   `PLEXUS_COLLECTIVE_SECRET` text); the worker answers a [`Reply`] with id 0 whose payload is
//!   `rank: u32, size: u32` (or an error text), and closes the connection on a wrong secret.
//! - Then requests, any number outstanding: a [`REQUEST_LEN`]-byte header (`id: u64, op: u8,
//!   dtype: u8, reduce: u8, flags: u8, root: u32, counts: u64, len: u64`), `counts` u64 values
//!   (an `alltoallv`'s bytes to each member), then either `len` payload bytes or, with
//!   [`FLAG_SHARED`], a [`SHARED_LEN`]-byte [`SharedRef`] naming where in a shared region the
//!   `len` payload bytes are and where the result goes.
//! - Each request gets one reply, in request order: a [`REPLY_LEN`]-byte header (`id: u64,
//!   status: u8 (0 ok, 1 error), flags: u8, 6 zero bytes, len: u64`) and `len` bytes: the result,
//!   or the error text (UTF-8); with [`FLAG_SHARED`] the `len` result bytes are at the request's
//!   `out_off` in its region instead, and nothing follows the header.
//!
//! Shared regions: a [`Op::Map`] request (`root`: the region's number, below [`MAX_REGIONS`];
//! `len` 0) carries one file descriptor (`SCM_RIGHTS`, sent with the header's first byte): a
//! memfd the task created, sized (at most [`MAX_REGION`] bytes) and sealed against shrinking
//! (`F_SEAL_SHRINK`), so the worker's mapping can never lose its pages under it. The worker maps
//! it (replacing that number's previous region) and answers ok or why not; a failed map is that
//! connection's error only. Regions belong to the connection and end with it.
//!
//! The worker (`plexus_worker::gang_endpoint`) serves it; this crate's [`crate::Client`] and the
//! Python client (`python/plexus/collective.py`) speak it.

use std::fmt;

/// The first four bytes a task sends.
pub const HELLO_MAGIC: &[u8; 4] = b"PXS1";
/// The secret's length: 32 hex digits.
pub const SECRET_LEN: usize = 32;
pub const REQUEST_LEN: usize = 32;
pub const REPLY_LEN: usize = 24;
/// The most bytes one request may carry (2 GiB): a larger tensor is an error, not an allocation.
pub const MAX_PAYLOAD: u64 = 2 << 30;
/// A request's or a reply's flag: its payload is in a shared region, not on the socket.
pub const FLAG_SHARED: u8 = 1;
pub const SHARED_LEN: usize = 32;
/// The most regions a connection may have mapped at once (numbers `0..MAX_REGIONS`).
pub const MAX_REGIONS: u32 = 16;
/// The largest region the worker maps (8 GiB: an allgather's result of the largest payload
/// among a few members).
pub const MAX_REGION: u64 = 8 << 30;

/// What a request asks for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Op {
    Allreduce,
    Reduce,
    Broadcast,
    Allgather,
    ReduceScatter,
    Alltoall,
    Alltoallv,
    Barrier,
    /// The task reports a mistake of its own (its payload says which); every member fails.
    Poison,
    /// Not a collective: maps the shared region that comes with the request (see the module).
    Map,
}

impl Op {
    pub fn from_code(c: u8) -> Option<Op> {
        use Op::*;
        Some(match c {
            1 => Allreduce,
            2 => Reduce,
            3 => Broadcast,
            4 => Allgather,
            5 => ReduceScatter,
            6 => Alltoall,
            7 => Alltoallv,
            8 => Barrier,
            9 => Poison,
            10 => Map,
            _ => return None,
        })
    }

    pub fn code(self) -> u8 {
        self as u8 + 1
    }

    pub fn name(self) -> &'static str {
        match self {
            Op::Allreduce => "allreduce",
            Op::Reduce => "reduce",
            Op::Broadcast => "broadcast",
            Op::Allgather => "allgather",
            Op::ReduceScatter => "reduce_scatter",
            Op::Alltoall => "alltoall",
            Op::Alltoallv => "alltoallv",
            Op::Barrier => "barrier",
            Op::Poison => "poison",
            Op::Map => "map",
        }
    }

    /// Whether the op combines elements (and so needs a reducible element type and an operator).
    pub fn reduces(self) -> bool {
        matches!(self, Op::Allreduce | Op::Reduce | Op::ReduceScatter)
    }
}

/// Element types a task may name: the data plane's four, the two 16-bit floats (reduced in f32),
/// and plain bytes (for the ops that only move data).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Elem {
    F32,
    F64,
    I32,
    I64,
    Bf16,
    F16,
    U8,
}

impl Elem {
    pub fn from_code(c: u8) -> Option<Elem> {
        use Elem::*;
        Some(match c {
            0 => F32,
            1 => F64,
            2 => I32,
            3 => I64,
            4 => Bf16,
            5 => F16,
            6 => U8,
            _ => return None,
        })
    }

    pub fn code(self) -> u8 {
        self as u8
    }

    pub fn size(self) -> usize {
        match self {
            Elem::F64 | Elem::I64 => 8,
            Elem::F32 | Elem::I32 => 4,
            Elem::Bf16 | Elem::F16 => 2,
            Elem::U8 => 1,
        }
    }
}

impl fmt::Display for Elem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let s = match self {
            Elem::F32 => "f32",
            Elem::F64 => "f64",
            Elem::I32 => "i32",
            Elem::I64 => "i64",
            Elem::Bf16 => "bf16",
            Elem::F16 => "f16",
            Elem::U8 => "u8",
        };
        f.write_str(s)
    }
}

/// A reduction operator as the task names it (`mean` is a sum divided by the members).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Reduce {
    Sum,
    Mean,
    Min,
    Max,
    Prod,
}

impl Reduce {
    pub fn from_code(c: u8) -> Option<Reduce> {
        use Reduce::*;
        Some(match c {
            0 => Sum,
            1 => Mean,
            2 => Min,
            3 => Max,
            4 => Prod,
            _ => return None,
        })
    }

    pub fn code(self) -> u8 {
        self as u8
    }
}

/// A request header as read, not yet checked against the gang (see [`Header::check`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Header {
    pub id: u64,
    pub op: u8,
    pub dtype: u8,
    pub reduce: u8,
    /// [`FLAG_SHARED`] or 0.
    pub flags: u8,
    pub root: u32,
    pub counts: u64,
    pub len: u64,
}

/// A checked request.
#[derive(Clone, Debug, PartialEq)]
pub struct Request {
    pub id: u64,
    pub op: Op,
    pub elem: Elem,
    pub reduce: Reduce,
    pub root: usize,
    /// An `alltoallv`'s bytes to each member, in rank order.
    pub counts: Vec<u64>,
}

impl Header {
    pub fn decode(b: &[u8; REQUEST_LEN]) -> Header {
        let u64_at = |i: usize| u64::from_le_bytes(b[i..i + 8].try_into().expect("8 bytes"));
        Header {
            id: u64_at(0),
            op: b[8],
            dtype: b[9],
            reduce: b[10],
            flags: b[11],
            root: u32::from_le_bytes(b[12..16].try_into().expect("4 bytes")),
            counts: u64_at(16),
            len: u64_at(24),
        }
    }

    pub fn encode(&self) -> [u8; REQUEST_LEN] {
        let mut b = [0u8; REQUEST_LEN];
        b[0..8].copy_from_slice(&self.id.to_le_bytes());
        b[8] = self.op;
        b[9] = self.dtype;
        b[10] = self.reduce;
        b[11] = self.flags;
        b[12..16].copy_from_slice(&self.root.to_le_bytes());
        b[16..24].copy_from_slice(&self.counts.to_le_bytes());
        b[24..32].copy_from_slice(&self.len.to_le_bytes());
        b
    }

    /// What is wrong with this header for a gang of `size` members, named for the task: the
    /// framing limits first (a violation ends the connection, as what follows cannot be read),
    /// then the request's own fields.
    pub fn frame_error(&self, size: usize) -> Option<String> {
        if self.len > MAX_PAYLOAD {
            return Some(format!(
                "request {} carries {} bytes, more than the limit of {MAX_PAYLOAD}",
                self.id, self.len
            ));
        }
        if self.counts > size as u64 {
            return Some(format!("request {} has {} counts for a gang of {size} members", self.id, self.counts));
        }
        if self.flags & !FLAG_SHARED != 0 {
            return Some(format!("request {} has unknown flags {:#x}", self.id, self.flags));
        }
        if self.op == Op::Map.code() && (self.len != 0 || self.counts != 0 || self.flags != 0) {
            return Some(format!("map request {} carries bytes or flags (it carries a descriptor only)", self.id));
        }
        None
    }

    /// The request, checked against a gang of `size` members with the `counts` read after the
    /// header, or the error to report (on every member).
    pub fn check(&self, size: usize, counts: Vec<u64>) -> Result<Request, String> {
        let op = Op::from_code(self.op).ok_or_else(|| format!("unknown operation code {}", self.op))?;
        let what = op.name();
        if op == Op::Map {
            return Err("map: not a collective (a region comes with its own request)".into());
        }
        let elem =
            Elem::from_code(self.dtype).ok_or_else(|| format!("{what}: unsupported dtype code {}", self.dtype))?;
        let reduce =
            Reduce::from_code(self.reduce).ok_or_else(|| format!("{what}: unknown reduction code {}", self.reduce))?;
        if op.reduces() && elem == Elem::U8 {
            return Err(format!("{what}: dtype u8 cannot be reduced (f32, f64, i32, i64, bf16, f16 can)"));
        }
        let root = self.root as usize;
        if matches!(op, Op::Reduce | Op::Broadcast) && root >= size {
            return Err(format!("{what}: root {root} is not a member of a gang of {size}"));
        }
        if !self.len.is_multiple_of(elem.size() as u64) {
            return Err(format!("{what}: {} bytes is not a whole number of {elem} elements", self.len));
        }
        if op == Op::ReduceScatter && !self.len.is_multiple_of((size * elem.size()) as u64) {
            return Err(format!("{what}: {} bytes do not split into {size} equal parts of {elem}", self.len));
        }
        if op == Op::Alltoall && !self.len.is_multiple_of(size as u64) {
            return Err(format!("{what}: {} bytes do not split into {size} equal blocks", self.len));
        }
        if op == Op::Alltoallv {
            if counts.len() != size {
                return Err(format!("{what}: {} counts for a gang of {size} members", counts.len()));
            }
            let total = counts.iter().try_fold(0u64, |a, c| a.checked_add(*c));
            if total != Some(self.len) {
                return Err(format!("{what}: the counts {counts:?} do not add up to the {} bytes sent", self.len));
            }
        }
        Ok(Request { id: self.id, op, elem, reduce, root, counts })
    }
}

/// A reply header.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Reply {
    pub id: u64,
    pub ok: bool,
    /// The `len` result bytes are in the request's region ([`FLAG_SHARED`]), not on the socket.
    pub shared: bool,
    pub len: u64,
}

impl Reply {
    pub fn encode(&self) -> [u8; REPLY_LEN] {
        let mut b = [0u8; REPLY_LEN];
        b[0..8].copy_from_slice(&self.id.to_le_bytes());
        b[8] = u8::from(!self.ok);
        b[9] = if self.shared { FLAG_SHARED } else { 0 };
        b[16..24].copy_from_slice(&self.len.to_le_bytes());
        b
    }

    pub fn decode(b: &[u8; REPLY_LEN]) -> Reply {
        Reply {
            id: u64::from_le_bytes(b[0..8].try_into().expect("8 bytes")),
            ok: b[8] == 0,
            shared: b[9] & FLAG_SHARED != 0,
            len: u64::from_le_bytes(b[16..24].try_into().expect("8 bytes")),
        }
    }
}

/// Where a [`FLAG_SHARED`] request's payload and result are: `len` bytes at `in_off` of region
/// `region`, the result at `out_off`, in at most `out_cap` bytes (the two may overlap: the
/// worker reads the payload before it writes the result).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SharedRef {
    pub region: u32,
    pub in_off: u64,
    pub out_off: u64,
    pub out_cap: u64,
}

impl SharedRef {
    pub fn encode(&self) -> [u8; SHARED_LEN] {
        let mut b = [0u8; SHARED_LEN];
        b[0..4].copy_from_slice(&self.region.to_le_bytes());
        b[8..16].copy_from_slice(&self.in_off.to_le_bytes());
        b[16..24].copy_from_slice(&self.out_off.to_le_bytes());
        b[24..32].copy_from_slice(&self.out_cap.to_le_bytes());
        b
    }

    pub fn decode(b: &[u8; SHARED_LEN]) -> SharedRef {
        let u64_at = |i: usize| u64::from_le_bytes(b[i..i + 8].try_into().expect("8 bytes"));
        SharedRef {
            region: u32::from_le_bytes(b[0..4].try_into().expect("4 bytes")),
            in_off: u64_at(8),
            out_off: u64_at(16),
            out_cap: u64_at(24),
        }
    }

    /// What is wrong with this reference for a payload of `len` bytes, given the size of the
    /// region it names (`None`: not mapped), named for the task.
    pub fn check(&self, len: u64, region_size: Option<u64>) -> Result<(), String> {
        let r = self.region;
        let Some(size) = region_size else {
            return Err(format!("shared region {r} is not mapped on this connection"));
        };
        let fits = |off: u64, n: u64| off.checked_add(n).is_some_and(|end| end <= size);
        if !fits(self.in_off, len) {
            return Err(format!(
                "the payload of {len} bytes at offset {} does not fit shared region {r} of {size} bytes",
                self.in_off
            ));
        }
        if !fits(self.out_off, self.out_cap) {
            return Err(format!(
                "the result's {} bytes at offset {} do not fit shared region {r} of {size} bytes",
                self.out_cap, self.out_off
            ));
        }
        Ok(())
    }
}

/// The bytes of `op`'s result on `len` payload bytes for member `rank` of a gang of `size`
/// (`root`: a reduce's); `None` where it is not known ahead (an `alltoallv`'s).
pub fn result_len(op: Op, len: u64, size: usize, rank: usize, root: usize) -> Option<u64> {
    match op {
        Op::Allgather => len.checked_mul(size as u64),
        Op::ReduceScatter => Some(len / size.max(1) as u64),
        Op::Reduce if rank != root => Some(0),
        Op::Alltoallv | Op::Map => None,
        Op::Barrier | Op::Poison => Some(0),
        Op::Allreduce | Op::Reduce | Op::Broadcast | Op::Alltoall => Some(len),
    }
}

/// Compares two secrets in time independent of where they differ.
pub fn same_secret(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

#[cfg(test)]
mod tests {
    use super::*;

    fn header(op: Op, elem: Elem, len: u64) -> Header {
        Header {
            id: 7,
            op: op.code(),
            dtype: elem.code(),
            reduce: Reduce::Sum.code(),
            flags: 0,
            root: 0,
            counts: 0,
            len,
        }
    }

    #[test]
    fn headers_round_trip() {
        let h = Header { id: 1 << 40, op: 3, dtype: 4, reduce: 1, flags: FLAG_SHARED, root: 2, counts: 3, len: 99 };
        assert_eq!(Header::decode(&h.encode()), h);
        let r = Reply { id: 5, ok: false, shared: true, len: 12 };
        assert_eq!(Reply::decode(&r.encode()), r);
        let s = SharedRef { region: 3, in_off: 1 << 33, out_off: 8, out_cap: 1 << 20 };
        assert_eq!(SharedRef::decode(&s.encode()), s);
        for c in 1..=10 {
            assert_eq!(Op::from_code(c).unwrap().code(), c);
        }
        for c in 0..=6 {
            assert_eq!(Elem::from_code(c).unwrap().code(), c);
        }
    }

    #[test]
    fn bad_requests_are_named() {
        let e = |h: Header, counts: Vec<u64>| h.check(4, counts).unwrap_err();
        assert!(
            e(Header { op: 42, ..header(Op::Allreduce, Elem::F32, 8) }, vec![]).contains("unknown operation code 42")
        );
        assert!(
            e(Header { dtype: 9, ..header(Op::Allreduce, Elem::F32, 8) }, vec![]).contains("unsupported dtype code 9")
        );
        assert!(e(header(Op::Allreduce, Elem::U8, 8), vec![]).contains("u8 cannot be reduced"));
        assert!(e(header(Op::Allreduce, Elem::F32, 6), vec![]).contains("not a whole number of f32"));
        assert!(
            e(Header { root: 4, ..header(Op::Broadcast, Elem::F32, 8) }, vec![]).contains("root 4 is not a member")
        );
        assert!(e(header(Op::ReduceScatter, Elem::F32, 8), vec![]).contains("do not split into 4 equal parts"));
        assert!(e(header(Op::Alltoallv, Elem::U8, 8), vec![1, 2, 3]).contains("3 counts for a gang of 4"));
        assert!(e(header(Op::Alltoallv, Elem::U8, 8), vec![1, 2, 3, 4]).contains("do not add up to the 8 bytes"));
        assert!(header(Op::Alltoallv, Elem::U8, 10).check(4, vec![1, 2, 3, 4]).is_ok());
        assert!(header(Op::Allgather, Elem::U8, 3).check(4, vec![]).is_ok());
        assert!(Header { len: MAX_PAYLOAD + 1, ..header(Op::Allreduce, Elem::F32, 0) }.frame_error(4).is_some());
        assert!(Header { counts: 5, ..header(Op::Alltoallv, Elem::U8, 0) }.frame_error(4).is_some());
    }

    #[test]
    fn shared_references_must_fit_their_region() {
        let s = SharedRef { region: 2, in_off: 0, out_off: 0, out_cap: 4096 };
        assert!(s.check(4096, Some(4096)).is_ok());
        assert!(s.check(8, None).unwrap_err().contains("shared region 2 is not mapped"));
        assert!(SharedRef { in_off: 8190, ..s }.check(8, Some(8192)).unwrap_err().contains("at offset 8190"));
        assert!(SharedRef { in_off: u64::MAX - 2, ..s }.check(8, Some(8192)).unwrap_err().contains("does not fit"));
        assert!(
            SharedRef { out_off: 4097, ..s }
                .check(8, Some(8192))
                .unwrap_err()
                .contains("result's 4096 bytes at offset 4097")
        );
        assert!(SharedRef { out_cap: u64::MAX, ..s }.check(8, Some(8192)).is_err());
        let flagged = Header { flags: 0x80, ..header(Op::Allreduce, Elem::F32, 8) };
        assert!(flagged.frame_error(4).unwrap().contains("unknown flags 0x80"));
        assert!(header(Op::Map, Elem::U8, 8).frame_error(4).unwrap().contains("descriptor only"));
        assert!(header(Op::Map, Elem::U8, 0).check(4, vec![]).unwrap_err().contains("not a collective"));
    }

    #[test]
    fn secrets_compare_whole() {
        assert!(same_secret(b"abcd", b"abcd"));
        assert!(!same_secret(b"abcd", b"abce"));
        assert!(!same_secret(b"abc", b"abcd"));
    }
}
