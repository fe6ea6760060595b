//! Element types of the collective endpoint over the data plane's four: bf16 and f16 are widened
//! to f32 before a reduction (so partial sums keep f32's precision) and rounded back after;
//! `mean` is a sum divided by the members; local reductions for reduce-scatter.

use half::{bf16, f16};
use plexus_dataplane::elem::reduce_into;
use plexus_dataplane::{DType, ReduceOp};

use plexus_collective::wire::{Elem, Reduce};

/// The data-plane type a reduction of `elem` runs in (16-bit floats in f32); `None` for bytes.
pub fn wire_dtype(elem: Elem) -> Option<DType> {
    Some(match elem {
        Elem::F32 | Elem::Bf16 | Elem::F16 => DType::F32,
        Elem::F64 => DType::F64,
        Elem::I32 => DType::I32,
        Elem::I64 => DType::I64,
        Elem::U8 => return None,
    })
}

/// The data-plane operator of `r` (`mean` reduces as a sum).
pub fn wire_op(r: Reduce) -> ReduceOp {
    match r {
        Reduce::Sum | Reduce::Mean => ReduceOp::Sum,
        Reduce::Min => ReduceOp::Min,
        Reduce::Max => ReduceOp::Max,
        Reduce::Prod => ReduceOp::Prod,
    }
}

/// `data` as the data plane reduces it: 16-bit floats widened to f32, the others unchanged.
pub fn widen(elem: Elem, data: Vec<u8>) -> Vec<u8> {
    let conv: fn([u8; 2]) -> f32 = match elem {
        Elem::Bf16 => |b| bf16::from_le_bytes(b).to_f32(),
        Elem::F16 => |b| f16::from_le_bytes(b).to_f32(),
        _ => return data,
    };
    data.chunks_exact(2).flat_map(|c| conv([c[0], c[1]]).to_le_bytes()).collect()
}

/// The inverse of [`widen`]: f32 rounded to the nearest 16-bit float.
pub fn narrow(elem: Elem, data: Vec<u8>) -> Vec<u8> {
    let conv: fn(f32) -> [u8; 2] = match elem {
        Elem::Bf16 => |x| bf16::from_f32(x).to_le_bytes(),
        Elem::F16 => |x| f16::from_f32(x).to_le_bytes(),
        _ => return data,
    };
    data.chunks_exact(4).flat_map(|c| conv(f32::from_le_bytes([c[0], c[1], c[2], c[3]]))).collect()
}

/// Divides every element of `data` (of the data-plane type `dtype`) by `n`: a `mean` after its
/// sum (integers truncate toward zero).
pub fn divide(dtype: DType, data: &mut [u8], n: usize) {
    macro_rules! each {
        ($t:ty, $div:expr) => {
            for c in data.chunks_exact_mut(size_of::<$t>()) {
                let v = <$t>::from_le_bytes(c.try_into().expect("element"));
                c.copy_from_slice(&$div(v).to_le_bytes());
            }
        };
    }
    match dtype {
        DType::F32 => each!(f32, |v: f32| v / n as f32),
        DType::F64 => each!(f64, |v: f64| v / n as f64),
        DType::I32 => each!(i32, |v: i32| v / n as i32),
        DType::I64 => each!(i64, |v: i64| v / n as i64),
    }
}

/// Reduces equal-length `parts` (each of the data-plane type `dtype`) into the first.
pub fn reduce_parts(dtype: DType, op: ReduceOp, mut parts: Vec<Vec<u8>>) -> Vec<u8> {
    let mut acc = if parts.is_empty() { Vec::new() } else { parts.remove(0) };
    for p in &parts {
        reduce_into(dtype, op, &mut acc, p);
    }
    acc
}

#[cfg(test)]
mod tests {
    use super::*;

    fn bf(v: &[f32]) -> Vec<u8> {
        v.iter().flat_map(|x| bf16::from_f32(*x).to_le_bytes()).collect()
    }

    #[test]
    fn sixteen_bit_floats_are_summed_in_f32() {
        // 256 + 1 + 1 in bf16 arithmetic stays 256 (8 bits of mantissa); summed in f32 it is 258.
        let parts: Vec<Vec<u8>> = [256.0f32, 1.0, 1.0].iter().map(|v| widen(Elem::Bf16, bf(&[*v]))).collect();
        let sum = narrow(Elem::Bf16, reduce_parts(DType::F32, ReduceOp::Sum, parts));
        assert_eq!(bf16::from_le_bytes([sum[0], sum[1]]).to_f32(), 258.0);
        let h: Vec<u8> = [0.5f32, -2.0].iter().flat_map(|x| f16::from_f32(*x).to_le_bytes()).collect();
        assert_eq!(narrow(Elem::F16, widen(Elem::F16, h.clone())), h);
    }

    #[test]
    fn means_divide_and_parts_reduce() {
        let mut v: Vec<u8> = [3.0f32, 9.0].iter().flat_map(|x| x.to_le_bytes()).collect();
        divide(DType::F32, &mut v, 3);
        assert_eq!(f32::from_le_bytes(v[4..8].try_into().unwrap()), 3.0);
        let mut i: Vec<u8> = [-7i64].iter().flat_map(|x| x.to_le_bytes()).collect();
        divide(DType::I64, &mut i, 2);
        assert_eq!(i64::from_le_bytes(i[..].try_into().unwrap()), -3);
        let parts = vec![5i32.to_le_bytes().to_vec(), 2i32.to_le_bytes().to_vec(), 9i32.to_le_bytes().to_vec()];
        assert_eq!(reduce_parts(DType::I32, ReduceOp::Max, parts), 9i32.to_le_bytes().to_vec());
    }
}
