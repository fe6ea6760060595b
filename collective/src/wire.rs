//! The collective endpoint's wire format between a task and its worker, over the attempt's Unix
//! socket: pure, no I/O. All integers are little-endian.
//!
//! - The task opens with `HELLO_MAGIC` and the attempt's secret (`SECRET_LEN` bytes, the
//!   `PLEXUS_COLLECTIVE_SECRET` text); the worker answers a [`Reply`] with id 0 whose payload is
//!   `rank: u32, size: u32` (or an error text), and closes the connection on a wrong secret.
//! - Then requests, any number outstanding: a [`REQUEST_LEN`]-byte header (`id: u64, op: u8,
//!   dtype: u8, reduce: u8, 0: u8, root: u32, counts: u64, len: u64`), `counts` u64 values (an
//!   `alltoallv`'s bytes to each member), and `len` payload bytes.
//! - Each request gets one reply, in request order: a [`REPLY_LEN`]-byte header (`id: u64,
//!   status: u8 (0 ok, 1 error), 7 zero bytes, len: u64`) and `len` bytes: the result, or the
//!   error text (UTF-8).
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
        None
    }

    /// The request, checked against a gang of `size` members with the `counts` read after the
    /// header, or the error to report (on every member).
    pub fn check(&self, size: usize, counts: Vec<u64>) -> Result<Request, String> {
        let op = Op::from_code(self.op).ok_or_else(|| format!("unknown operation code {}", self.op))?;
        let what = op.name();
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
    pub len: u64,
}

impl Reply {
    pub fn encode(&self) -> [u8; REPLY_LEN] {
        let mut b = [0u8; REPLY_LEN];
        b[0..8].copy_from_slice(&self.id.to_le_bytes());
        b[8] = u8::from(!self.ok);
        b[16..24].copy_from_slice(&self.len.to_le_bytes());
        b
    }

    pub fn decode(b: &[u8; REPLY_LEN]) -> Reply {
        Reply {
            id: u64::from_le_bytes(b[0..8].try_into().expect("8 bytes")),
            ok: b[8] == 0,
            len: u64::from_le_bytes(b[16..24].try_into().expect("8 bytes")),
        }
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
        Header { id: 7, op: op.code(), dtype: elem.code(), reduce: Reduce::Sum.code(), root: 0, counts: 0, len }
    }

    #[test]
    fn headers_round_trip() {
        let h = Header { id: 1 << 40, op: 3, dtype: 4, reduce: 1, root: 2, counts: 3, len: 99 };
        assert_eq!(Header::decode(&h.encode()), h);
        let r = Reply { id: 5, ok: false, len: 12 };
        assert_eq!(Reply::decode(&r.encode()), r);
        for c in 1..=9 {
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
    fn secrets_compare_whole() {
        assert!(same_secret(b"abcd", b"abcd"));
        assert!(!same_secret(b"abcd", b"abce"));
        assert!(!same_secret(b"abc", b"abcd"));
    }
}
