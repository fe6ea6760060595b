//! The names of the collective kinds' parameters — element types, reduction operators and
//! algorithms — written once, for the job-file parser, the coordinator, the worker and the data
//! plane, which all parse and print them through these enums.
//!
//! Each enum's discriminant is its wire code in the data plane's collective header, so the order
//! of the variants is part of the wire format: append, never reorder.

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Serialize};

use crate::error::Error;

/// Declares a fieldless enum whose variants have one text name each (plus optional aliases
/// accepted when parsing), with `ALL`, `NAMES`, `name`, `code`, `from_code`, `Display` and
/// `FromStr`, and serde in the same names.
macro_rules! named_enum {
    (
        $(#[$meta:meta])*
        $name:ident, $what:literal {
            $( $(#[$vmeta:meta])* $variant:ident = $text:literal $(| $alias:literal)* ),+ $(,)?
        }
    ) => {
        $(#[$meta])*
        #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
        #[repr(u8)]
        pub enum $name {
            $( $(#[$vmeta])* #[serde(rename = $text)] $variant ),+
        }

        impl $name {
            /// Every variant, in code order.
            pub const ALL: &'static [$name] = &[$($name::$variant),+];
            /// Every name, in code order (aliases are accepted by `FromStr` but not listed).
            pub const NAMES: &'static [&'static str] = &[$($text),+];

            pub fn name(self) -> &'static str {
                match self {
                    $($name::$variant => $text),+
                }
            }

            /// The wire code: the variant's position.
            pub fn code(self) -> u8 {
                self as u8
            }

            pub fn from_code(code: u8) -> Option<$name> {
                Self::ALL.get(usize::from(code)).copied()
            }
        }

        impl fmt::Display for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str(self.name())
            }
        }

        impl FromStr for $name {
            type Err = Error;
            fn from_str(s: &str) -> Result<$name, Error> {
                match s {
                    $($text $(| $alias)* => Ok($name::$variant),)+
                    _ => Err(Error::UnknownName { what: $what, got: s.to_string(), expected: Self::NAMES }),
                }
            }
        }
    };
}

named_enum! {
    /// The element type of a buffer: raw little-endian arrays of one of these.
    DType, "dtype" {
        F32 = "f32",
        F64 = "f64",
        I32 = "i32",
        I64 = "i64",
    }
}

impl DType {
    /// Bytes per element.
    pub fn size(self) -> usize {
        match self {
            DType::F32 | DType::I32 => 4,
            DType::F64 | DType::I64 => 8,
        }
    }
}

named_enum! {
    /// The reduction operator. Integer `sum` and `prod` wrap around (two's complement), so any
    /// order of reduction gives the same integers; float `min`/`max` ignore a NaN operand (IEEE
    /// minNum/maxNum, Rust's `f32::min`).
    ReduceOp, "reduce op" {
        Sum = "sum",
        Min = "min",
        Max = "max",
        Prod = "prod",
    }
}

named_enum! {
    /// Which schedule of messages a collective uses.
    Algorithm, "collective algorithm" {
        /// Seed 003: pipelined recursive halving, then recursive doubling (or a binomial gather).
        Halving = "halving" | "pairwise" | "seed003",
        /// Ring reduce-scatter then ring allgather (what NCCL and Gloo use for large buffers).
        Ring = "ring",
        /// Chosen per call by the data plane's cost model (`plexus_dataplane::collective::cost`)
        /// from the members' measured latencies and rates, the same on every member: halving or
        /// ring (hierarchical too where members share hosts), and the pipeline depth. Never on the
        /// wire: a call runs one of the others.
        Auto = "auto",
        /// Members that share a host (the same rail addresses) reduce into the host's first
        /// member over the host's own links, those leaders run halving across the hosts, and
        /// each leader sends the result back to its host's members; pipelined slice by slice.
        /// Where every member has a host of its own it is halving.
        Hierarchical = "hierarchical" | "hier",
    }
}

named_enum! {
    /// The order of messages of an `alltoall` or a `redistribute` (seed 004); the data plane's
    /// schedules of the same names.
    ExchangeSchedule, "all-to-all schedule" {
        /// Contention-free: the demand split into max-degree matchings, similar sizes together.
        Css = "css",
        /// The seed's baseline: step p, sender i sends to (i + p) mod N.
        Shift = "shift",
        /// MPICH's pairwise exchange (XOR partners for powers of two).
        Pairwise = "pairwise",
        /// A `redistribute` only: the seed's closed form (Algorithm 1) where its condition holds,
        /// else its greedy sort-and-fill (Algorithm 2).
        Seed = "seed",
        /// Every message at once, no steps (what Gloo's `all_to_all_single` does): the
        /// transport's flow control paces them.
        Direct = "direct",
        /// Chosen per call by the data plane's cost model from the table and the members'
        /// measured latencies and rates: css, pairwise, shift or direct.
        Auto = "auto",
    }
}

named_enum! {
    /// How an `alltoall` member cuts its input into one part per member.
    Split, "split" {
        /// As equal as possible, in whole elements (the first `len mod N` parts one larger).
        Equal = "equal",
        /// The job file's `counts` table: elements sender i sends receiver j.
        Counts = "counts",
        /// The producer's split file, the member's second input: N counts in elements.
        File = "file",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_round_trip_and_codes_are_positions() {
        for &d in DType::ALL {
            assert_eq!(d.name().parse::<DType>(), Ok(d));
            assert_eq!(DType::from_code(d.code()), Some(d));
        }
        for &o in ReduceOp::ALL {
            assert_eq!(o.to_string().parse::<ReduceOp>(), Ok(o));
        }
        assert_eq!("pairwise".parse::<Algorithm>(), Ok(Algorithm::Halving));
        assert_eq!(Algorithm::NAMES, &["halving", "ring", "auto", "hierarchical"]);
        assert_eq!("hier".parse::<Algorithm>(), Ok(Algorithm::Hierarchical));
        assert_eq!((DType::F32.code(), DType::I64.code(), ReduceOp::Prod.code(), Algorithm::Ring.code()), (0, 3, 3, 1));
        assert_eq!(DType::from_code(4), None);
    }

    #[test]
    fn an_unknown_name_is_named_with_the_expected_ones() {
        let e = "f16".parse::<DType>().unwrap_err().to_string();
        assert_eq!(e, "unknown dtype \"f16\"; expected one of f32, f64, i32, i64");
        let e = "avg".parse::<ReduceOp>().unwrap_err().to_string();
        assert!(e.contains("reduce op \"avg\"") && e.contains("sum, min, max, prod"), "{e}");
    }

    #[test]
    fn serde_uses_the_same_names() {
        assert_eq!(serde_json::to_string(&DType::I32).unwrap(), "\"i32\"");
        assert_eq!(serde_json::from_str::<Algorithm>("\"ring\"").unwrap(), Algorithm::Ring);
    }
}
