//! Element arithmetic, below both the transport and the collectives: the element types,
//! reduction operators and algorithms (defined once in [`plexus_proto::collective`] and
//! re-exported here), the [`Element`] trait of the typed API, and the reduction kernels over raw
//! little-endian bytes that a posted reduction (in the endpoint) and the collective executor both
//! run.

pub use plexus_proto::collective::{Algorithm, DType, ReduceOp};

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
        DType::F32 => typed::<f32, SWAP>(op, acc, other, |a, b| a + b, |a, b| a * b, f32::min, f32::max),
        DType::F64 => typed::<f64, SWAP>(op, acc, other, |a, b| a + b, |a, b| a * b, f64::min, f64::max),
        DType::I32 => typed::<i32, SWAP>(op, acc, other, i32::wrapping_add, i32::wrapping_mul, Ord::min, Ord::max),
        DType::I64 => typed::<i64, SWAP>(op, acc, other, i64::wrapping_add, i64::wrapping_mul, Ord::min, Ord::max),
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

/// `buf` as raw little-endian bytes.
pub(crate) fn to_bytes<T: Element>(buf: &[T]) -> Vec<u8> {
    let n = T::DTYPE.size();
    let mut raw = vec![0u8; buf.len() * n];
    for (x, c) in buf.iter().zip(raw.chunks_exact_mut(n)) {
        x.to_le(c);
    }
    raw
}

/// Fills `buf` from raw little-endian bytes.
pub(crate) fn from_bytes<T: Element>(raw: &[u8], buf: &mut [T]) {
    let n = T::DTYPE.size();
    for (x, c) in buf.iter_mut().zip(raw.chunks_exact(n)) {
        *x = T::from_le(c);
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
        for &d in DType::ALL {
            assert_eq!(d.to_string().parse::<DType>().unwrap(), d);
        }
        for &o in ReduceOp::ALL {
            assert_eq!(o.to_string().parse::<ReduceOp>().unwrap(), o);
        }
    }

    /// Where the data plane reports a bad name, it is the configuration error it always was,
    /// with the text naming the value and the expected names.
    #[test]
    fn unknown_names_become_configuration_errors() {
        let e = crate::error::Error::from("f16".parse::<DType>().unwrap_err());
        assert!(matches!(e, crate::error::Error::Config(_)), "{e:?}");
        assert_eq!(
            e.to_string(),
            "invalid data-plane configuration: unknown dtype \"f16\"; expected one of f32, f64, i32, i64"
        );
    }

    use super::to_bytes as bytes;

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
        reduce_into(DType::F64, ReduceOp::Prod, &mut acc, &bytes(&[2.0f64, 0.25]));
        assert_eq!(acc, bytes(&[3.0f64, -0.5]));
        let mut acc = bytes(&[1.5f32, f32::NAN]);
        reduce_into(DType::F32, ReduceOp::Max, &mut acc, &bytes(&[-1.0f32, 4.0]));
        assert_eq!(acc, bytes(&[1.5f32, 4.0]));
        let mut acc = bytes(&[i64::MAX, 3]);
        reduce_into(DType::I64, ReduceOp::Sum, &mut acc, &bytes(&[1i64, 4]));
        assert_eq!(acc, bytes(&[i64::MIN, 7]));
    }
}
