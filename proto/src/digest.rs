//! Content digests of data objects (BLAKE3, 32 bytes).
//!
//! The worker that runs an attempt hashes each output when the attempt completes and reports the
//! digest with it; the coordinator keeps it with the subtask's record and hands it to whoever
//! fetches the object (a worker fetching an input, its own relay for `plexus get`, the CLI).
//! Each of them hashes the bytes as they arrive ([`Verifier`]) and refuses a copy whose digest
//! differs ([`Error::DigestMismatch`]). On the wire a digest is 32 bytes, empty when unknown (an
//! output reported by a worker from before digests); in text, 64 lowercase hex digits.

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Deserializer, Serialize, Serializer};

use crate::error::Error;

/// A BLAKE3 digest of an object's bytes.
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct Digest([u8; Digest::LEN]);

impl Digest {
    /// Bytes in a digest.
    pub const LEN: usize = 32;

    /// The digest of `bytes`.
    pub fn of(bytes: &[u8]) -> Digest {
        Digest(*blake3::hash(bytes).as_bytes())
    }

    /// The digest of what `reader` yields to its end, read in blocks: the caller runs it where
    /// blocking is allowed (a file of gigabytes takes seconds).
    pub fn of_reader(reader: impl std::io::Read) -> std::io::Result<Digest> {
        let mut h = blake3::Hasher::new();
        h.update_reader(reader)?;
        Ok(Digest(*h.finalize().as_bytes()))
    }

    /// A digest as a proto field carries it: 32 bytes, or empty for "not known" (`None`).
    /// Any other length is refused, naming `field`.
    pub fn from_field(field: &'static str, bytes: &[u8]) -> Result<Option<Digest>, Error> {
        match bytes.len() {
            0 => Ok(None),
            Digest::LEN => Ok(Some(Digest(bytes.try_into().expect("checked length")))),
            n => Err(Error::Invalid {
                field,
                reason: format!("a digest is {} bytes (BLAKE3), or empty when unknown; got {n}", Digest::LEN),
            }),
        }
    }

    pub fn as_bytes(&self) -> &[u8; Digest::LEN] {
        &self.0
    }

    /// The bytes as a proto field carries them.
    pub fn to_vec(&self) -> Vec<u8> {
        self.0.to_vec()
    }
}

impl fmt::Display for Digest {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&hex::encode(self.0))
    }
}

impl fmt::Debug for Digest {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Digest({self})")
    }
}

impl FromStr for Digest {
    type Err = Error;

    fn from_str(s: &str) -> Result<Digest, Error> {
        let mut out = [0u8; Digest::LEN];
        hex::decode_to_slice(s, &mut out)
            .map_err(|e| Error::id("digest", s, format!("expected {} hex digits ({e})", 2 * Digest::LEN)))?;
        Ok(Digest(out))
    }
}

impl Serialize for Digest {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

impl<'de> Deserialize<'de> for Digest {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Digest, D::Error> {
        let s = String::deserialize(d)?;
        s.parse().map_err(serde::de::Error::custom)
    }
}

/// A running check of a copy as it arrives: fed every chunk in order, then
/// [`finish`](Verifier::finish)ed, which compares what came with the expected digest.
#[derive(Clone, Debug)]
pub struct Verifier {
    hasher: blake3::Hasher,
    expected: Option<Digest>,
}

impl Verifier {
    /// A check against `expected`; `None` (the digest is not known) only computes it.
    pub fn new(expected: Option<Digest>) -> Verifier {
        Verifier { hasher: blake3::Hasher::new(), expected }
    }

    pub fn expected(&self) -> Option<Digest> {
        self.expected
    }

    /// Feeds the next bytes of the copy.
    pub fn update(&mut self, chunk: &[u8]) {
        self.hasher.update(chunk);
    }

    /// The copy's digest, or [`Error::DigestMismatch`] naming `object` and `holder` (where the
    /// copy came from) when it is not the expected one.
    pub fn finish(&self, object: &str, holder: &str) -> Result<Digest, Error> {
        let got = Digest(*self.hasher.finalize().as_bytes());
        match self.expected {
            Some(expected) if expected != got => Err(Error::DigestMismatch {
                object: object.to_string(),
                holder: holder.to_string(),
                expected: expected.to_string(),
                got: got.to_string(),
            }),
            _ => Ok(got),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_digest_reads_back_from_its_text_and_its_field() {
        let d = Digest::of(b"numbers");
        assert_eq!(d.to_string().len(), 64);
        assert_eq!(d.to_string().parse::<Digest>().unwrap(), d);
        assert_eq!(Digest::from_field("digest", &d.to_vec()).unwrap(), Some(d));
        assert_eq!(Digest::from_field("digest", &[]).unwrap(), None);
        let e = Digest::from_field("outputs[0].digest", &[1; 31]).unwrap_err().to_string();
        assert!(e.contains("outputs[0].digest") && e.contains("got 31"), "{e}");
        let e = "xyz".parse::<Digest>().unwrap_err().to_string();
        assert!(e.contains("64 hex digits"), "{e}");
        let json = serde_json::to_string(&d).unwrap();
        assert_eq!(json, format!("\"{d}\""));
        assert_eq!(serde_json::from_str::<Digest>(&json).unwrap(), d);
        assert_eq!(Digest::of_reader(&b"numbers"[..]).unwrap(), d);
    }

    #[test]
    fn chunks_in_any_cut_hash_as_the_whole() {
        let data: Vec<u8> = (0..3_000_000u32).map(|i| (i * 7 % 251) as u8).collect();
        let whole = Digest::of(&data);
        for cut in [1usize, 1000, 65_536, 1 << 20, data.len()] {
            let mut v = Verifier::new(Some(whole));
            for chunk in data.chunks(cut) {
                v.update(chunk);
            }
            assert_eq!(v.finish("j/t/0/o", "w").unwrap(), whole, "cut {cut}");
        }
    }

    #[test]
    fn a_changed_byte_is_refused_naming_object_holder_and_both_digests() {
        let data = vec![7u8; 100_000];
        let expected = Digest::of(&data);
        let mut tampered = data.clone();
        tampered[54_321] ^= 1;
        let mut v = Verifier::new(Some(expected));
        for chunk in tampered.chunks(4096) {
            v.update(chunk);
        }
        let got = Digest::of(&tampered);
        let e = v.finish("job-1/gen/0/o", "worker wkr-2").unwrap_err();
        assert_eq!(
            e,
            Error::DigestMismatch {
                object: "job-1/gen/0/o".into(),
                holder: "worker wkr-2".into(),
                expected: expected.to_string(),
                got: got.to_string()
            }
        );
        let text = e.to_string();
        for part in ["job-1/gen/0/o", "worker wkr-2", &expected.to_string(), &got.to_string()] {
            assert!(text.contains(part), "{text} names {part}");
        }
        // Without an expected digest it only computes one.
        let mut v = Verifier::new(None);
        v.update(&tampered);
        assert_eq!(v.finish("o", "h").unwrap(), got);
    }
}
