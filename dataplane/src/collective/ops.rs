//! Element types, reduction operators, algorithms — parsed from the names job files use — and
//! the reduction kernels over raw little-endian bytes.

use std::fmt;
use std::str::FromStr;

use crate::error::{Error, Result};

/// The element type of a buffer: raw little-endian arrays of one of these.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum DType {
    F32,
    F64,
    I32,
    I64,
}

impl DType {
    pub const ALL: [DType; 4] = [DType::F32, DType::F64, DType::I32, DType::I64];

    /// Bytes per element.
    pub fn size(self) -> usize {
        match self {
            DType::F32 | DType::I32 => 4,
            DType::F64 | DType::I64 => 8,
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            DType::F32 => "f32",
            DType::F64 => "f64",
            DType::I32 => "i32",
            DType::I64 => "i64",
        }
    }

    pub(crate) fn code(self) -> u8 {
        self as u8
    }
}

impl fmt::Display for DType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for DType {
    type Err = Error;
    fn from_str(s: &str) -> Result<DType> {
        DType::ALL
            .into_iter()
            .find(|d| d.name() == s)
            .ok_or_else(|| {
                Error::Config(format!(
                    "unknown dtype {s:?}; expected one of f32, f64, i32, i64"
                ))
            })
    }
}

/// The reduction operator. Integer `sum` and `prod` wrap around (two's complement), so any
/// order of reduction gives the same integers; float `min`/`max` ignore a NaN operand (IEEE
/// minNum/maxNum, Rust's `f32::min`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ReduceOp {
    Sum,
    Min,
    Max,
    Prod,
}

impl ReduceOp {
    pub const ALL: [ReduceOp; 4] = [ReduceOp::Sum, ReduceOp::Min, ReduceOp::Max, ReduceOp::Prod];

    pub fn name(self) -> &'static str {
        match self {
            ReduceOp::Sum => "sum",
            ReduceOp::Min => "min",
            ReduceOp::Max => "max",
            ReduceOp::Prod => "prod",
        }
    }

    pub(crate) fn code(self) -> u8 {
        self as u8
    }
}

impl fmt::Display for ReduceOp {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for ReduceOp {
    type Err = Error;
    fn from_str(s: &str) -> Result<ReduceOp> {
        ReduceOp::ALL
            .into_iter()
            .find(|o| o.name() == s)
            .ok_or_else(|| {
                Error::Config(format!(
                    "unknown reduce op {s:?}; expected one of sum, min, max, prod"
                ))
            })
    }
}

/// Which schedule of messages a collective uses.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Algorithm {
    /// Seed 003: pipelined recursive halving, then recursive doubling (or a binomial gather).
    Halving,
    /// Ring reduce-scatter then ring allgather (what NCCL and Gloo use for large buffers).
    Ring,
}

impl Algorithm {
    pub const ALL: [Algorithm; 2] = [Algorithm::Halving, Algorithm::Ring];

    pub fn name(self) -> &'static str {
        match self {
            Algorithm::Halving => "halving",
            Algorithm::Ring => "ring",
        }
    }

    pub(crate) fn code(self) -> u8 {
        self as u8
    }
}

impl fmt::Display for Algorithm {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for Algorithm {
    type Err = Error;
    fn from_str(s: &str) -> Result<Algorithm> {
        match s {
            "halving" | "pairwise" | "seed003" => Ok(Algorithm::Halving),
            "ring" => Ok(Algorithm::Ring),
            _ => Err(Error::Config(format!(
                "unknown collective algorithm {s:?}; expected halving (alias pairwise) or ring"
            ))),
        }
    }
}

/// An element type the typed API accepts.
pub trait Element: Copy + Send + Sync + 'static {
    const DTYPE: DType;
    fn to_le(self, out: &mut [u8]);
    fn from_le(b: &[u8]) -> Self;
}

macro_rules! element {
    ($t:ty, $d:expr) => {
        impl Element for $t {
            const DTYPE: DType = $d;
            fn to_le(self, out: &mut [u8]) {
                out.copy_from_slice(&self.to_le_bytes());
            }
            fn from_le(b: &[u8]) -> Self {
                let mut a = [0u8; std::mem::size_of::<$t>()];
                a.copy_from_slice(b);
                <$t>::from_le_bytes(a)
            }
        }
    };
}
element!(f32, DType::F32);
element!(f64, DType::F64);
element!(i32, DType::I32);
element!(i64, DType::I64);

/// `acc[i] = op(acc[i], other[i])` over raw little-endian elements. The lengths are equal
/// multiples of the element size (the executor checked them against the plan).
pub fn reduce_into(dtype: DType, op: ReduceOp, acc: &mut [u8], other: &[u8]) {
    reduce::<false>(dtype, op, acc, other)
}

/// `acc[i] = op(first[i], acc[i])`: [`reduce_into`] with the operands swapped, for reducing a
/// received segment (`first`) into the receiver's own data in the same operand order as
/// reducing the receiver's data into the received buffer. (`min`/`max` of ±0 and NaN payloads
/// of `sum` depend on the order, and every rank must reduce alike.)
pub fn reduce_from(dtype: DType, op: ReduceOp, acc: &mut [u8], first: &[u8]) {
    reduce::<true>(dtype, op, acc, first)
}

fn reduce<const SWAP: bool>(dtype: DType, op: ReduceOp, acc: &mut [u8], other: &[u8]) {
    debug_assert_eq!(acc.len(), other.len());
    debug_assert_eq!(acc.len() % dtype.size(), 0);
    match dtype {
        DType::F32 => typed::<f32, SWAP>(
            op,
            acc,
            other,
            |a, b| a + b,
            |a, b| a * b,
            f32::min,
            f32::max,
        ),
        DType::F64 => typed::<f64, SWAP>(
            op,
            acc,
            other,
            |a, b| a + b,
            |a, b| a * b,
            f64::min,
            f64::max,
        ),
        DType::I32 => typed::<i32, SWAP>(
            op,
            acc,
            other,
            i32::wrapping_add,
            i32::wrapping_mul,
            Ord::min,
            Ord::max,
        ),
        DType::I64 => typed::<i64, SWAP>(
            op,
            acc,
            other,
            i64::wrapping_add,
            i64::wrapping_mul,
            Ord::min,
            Ord::max,
        ),
    }
}

/// One operator, monomorphised so the loop vectorises.
#[inline(always)]
fn typed<T: Element + Pod, const SWAP: bool>(
    op: ReduceOp,
    acc: &mut [u8],
    other: &[u8],
    sum: fn(T, T) -> T,
    prod: fn(T, T) -> T,
    min: fn(T, T) -> T,
    max: fn(T, T) -> T,
) {
    match op {
        ReduceOp::Sum => apply::<T, SWAP>(acc, other, sum),
        ReduceOp::Prod => apply::<T, SWAP>(acc, other, prod),
        ReduceOp::Min => apply::<T, SWAP>(acc, other, min),
        ReduceOp::Max => apply::<T, SWAP>(acc, other, max),
    }
}

/// Plain numbers: every bit pattern is a valid value.
///
/// # Safety
/// Implement only for types without padding and without invalid bit patterns.
unsafe trait Pod {}
// SAFETY: primitive numbers.
unsafe impl Pod for f32 {}
unsafe impl Pod for f64 {}
unsafe impl Pod for i32 {}
unsafe impl Pod for i64 {}

#[inline(always)]
fn apply<T: Element + Pod, const SWAP: bool>(acc: &mut [u8], other: &[u8], f: impl Fn(T, T) -> T) {
    let f = |a: T, b: T| if SWAP { f(b, a) } else { f(a, b) };
    #[cfg(target_endian = "little")]
    {
        // SAFETY: T is Pod (any bits are a valid T); `align_to` only yields the aligned middle.
        let (ap, am, asuf) = unsafe { acc.align_to_mut::<T>() };
        let (op, om, osuf) = unsafe { other.align_to::<T>() };
        if ap.is_empty() && asuf.is_empty() && op.is_empty() && osuf.is_empty() {
            for (a, b) in am.iter_mut().zip(om) {
                *a = f(*a, *b);
            }
            return;
        }
    }
    // Unaligned buffers (or a big-endian host): element by element through little-endian bytes.
    let n = std::mem::size_of::<T>();
    for (a, b) in acc.chunks_exact_mut(n).zip(other.chunks_exact(n)) {
        f(T::from_le(a), T::from_le(b)).to_le(a);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_names_and_names_the_bad_value() {
        assert_eq!("f64".parse::<DType>().unwrap(), DType::F64);
        assert_eq!("prod".parse::<ReduceOp>().unwrap(), ReduceOp::Prod);
        assert_eq!("ring".parse::<Algorithm>().unwrap(), Algorithm::Ring);
        assert_eq!("pairwise".parse::<Algorithm>().unwrap(), Algorithm::Halving);
        let e = "f16".parse::<DType>().unwrap_err().to_string();
        assert!(e.contains("\"f16\"") && e.contains("f32"), "{e}");
        let e = "avg".parse::<ReduceOp>().unwrap_err().to_string();
        assert!(e.contains("\"avg\"") && e.contains("sum"), "{e}");
        let e = "tree".parse::<Algorithm>().unwrap_err().to_string();
        assert!(e.contains("\"tree\""), "{e}");
        for d in DType::ALL {
            assert_eq!(d.to_string().parse::<DType>().unwrap(), d);
        }
        for o in ReduceOp::ALL {
            assert_eq!(o.to_string().parse::<ReduceOp>().unwrap(), o);
        }
    }

    use crate::collective::to_bytes as bytes;

    #[test]
    fn kernels_compute_each_op_aligned_or_not() {
        let a = [1i32, -5, 7, i32::MAX];
        let b = [2i32, 3, -7, 1];
        let cases = [
            (ReduceOp::Sum, [3, -2, 0, i32::MIN]),
            (ReduceOp::Prod, [2, -15, -49, i32::MAX]),
            (ReduceOp::Min, [1, -5, -7, 1]),
            (ReduceOp::Max, [2, 3, 7, i32::MAX]),
        ];
        for (op, want) in cases {
            // Aligned, then shifted by one byte so the slow path runs.
            for shift in [0, 1] {
                let mut acc = vec![0u8; shift];
                acc.extend(bytes(&a));
                let mut oth = vec![0u8; shift];
                oth.extend(bytes(&b));
                reduce_into(DType::I32, op, &mut acc[shift..], &oth[shift..]);
                assert_eq!(acc[shift..], bytes(&want)[..], "{op} shift {shift}");
            }
        }
        let mut acc = bytes(&[1.5f64, -2.0]);
        reduce_into(
            DType::F64,
            ReduceOp::Prod,
            &mut acc,
            &bytes(&[2.0f64, 0.25]),
        );
        assert_eq!(acc, bytes(&[3.0f64, -0.5]));
        let mut acc = bytes(&[1.5f32, f32::NAN]);
        reduce_into(DType::F32, ReduceOp::Max, &mut acc, &bytes(&[-1.0f32, 4.0]));
        assert_eq!(acc, bytes(&[1.5f32, 4.0]));
        let mut acc = bytes(&[i64::MAX, 3]);
        reduce_into(DType::I64, ReduceOp::Sum, &mut acc, &bytes(&[1i64, 4]));
        assert_eq!(acc, bytes(&[i64::MIN, 7]));
    }
}
