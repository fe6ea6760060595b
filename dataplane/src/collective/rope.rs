//! The buffer of a running collective as a rope of immutable pieces.
//!
//! The transport sends `Bytes` (owned, shareable) and receives each message into a fresh
//! buffer. Keeping the working buffer as pieces — the input, and every received message once
//! reduced in place — lets a send take a zero-copy slice of one piece, and lets a reduction
//! write its result into the received buffer, which then replaces that range. A range that
//! spans several pieces is copied (counted, so the benchmark can show it does not happen with
//! power-of-two slices).

use std::collections::BTreeMap;
use std::ops::Range;

use bytes::{Bytes, BytesMut};

/// Byte ranges `[0, len)` covered by non-overlapping pieces, keyed by start offset.
pub(crate) struct Rope {
    len: usize,
    pieces: BTreeMap<usize, Bytes>,
}

impl Rope {
    pub fn new(data: Bytes) -> Rope {
        let mut pieces = BTreeMap::new();
        let len = data.len();
        if len > 0 {
            pieces.insert(0, data);
        }
        Rope { len, pieces }
    }

    #[cfg(test)]
    pub fn len(&self) -> usize {
        self.len
    }

    /// The pieces overlapping `r`, each cut to `r`, with their start offsets, front to back.
    pub fn parts(&self, r: Range<usize>) -> Vec<(usize, Bytes)> {
        assert!(r.end <= self.len, "range {r:?} beyond {}", self.len);
        let mut out = Vec::new();
        if r.is_empty() {
            return out;
        }
        let first = self
            .pieces
            .range(..=r.start)
            .next_back()
            .map_or(r.start, |(&s, _)| s);
        for (&s, b) in self.pieces.range(first..r.end) {
            let e = s + b.len();
            let (a, z) = (s.max(r.start), e.min(r.end));
            if a < z {
                out.push((a, b.slice(a - s..z - s)));
            }
        }
        out
    }

    /// The bytes of `r`, and whether they had to be copied (the range spans pieces).
    pub fn take(&self, r: Range<usize>) -> (Bytes, bool) {
        let parts = self.parts(r.clone());
        if parts.len() == 1 {
            return (
                parts.into_iter().next().map(|(_, b)| b).unwrap_or_default(),
                false,
            );
        }
        let mut v = Vec::with_capacity(r.len());
        for (_, b) in parts {
            v.extend_from_slice(&b);
        }
        (Bytes::from(v), !r.is_empty())
    }

    /// Replaces `[start, start + data.len())` with `data`.
    pub fn put(&mut self, start: usize, data: Bytes) {
        let end = start + data.len();
        assert!(end <= self.len, "put {start}..{end} beyond {}", self.len);
        if data.is_empty() {
            return;
        }
        // Keep the parts of the pieces cut at `start` and `end` that lie outside.
        if let Some((&s, b)) = self.pieces.range(..start).next_back()
            && s + b.len() > start
        {
            let b = b.clone();
            self.pieces.insert(s, b.slice(..start - s));
            if s + b.len() > end {
                self.pieces.insert(end, b.slice(end - s..));
            }
        }
        if let Some((&s, b)) = self.pieces.range(start..end).next_back()
            && s + b.len() > end
        {
            let b = b.clone();
            self.pieces.insert(end, b.slice(end - s..));
        }
        let inside: Vec<usize> = self.pieces.range(start..end).map(|(&s, _)| s).collect();
        for s in inside {
            self.pieces.remove(&s);
        }
        self.pieces.insert(start, data);
    }

    /// Writes every piece into `out`, skipping pieces that are still the untouched part of
    /// `original` at the same offset (the caller's buffer already holds those bytes). Returns
    /// the bytes copied.
    pub fn write_to(&self, out: &mut [u8], original: Option<&Bytes>) -> usize {
        assert_eq!(out.len(), self.len);
        let mut copied = 0;
        for (&s, b) in &self.pieces {
            if let Some(o) = original
                && o.len() >= s + b.len()
                && std::ptr::eq(o[s..].as_ptr(), b.as_ptr())
            {
                continue;
            }
            out[s..s + b.len()].copy_from_slice(b);
            copied += b.len();
        }
        copied
    }

    /// The whole buffer as one `Bytes`, written into `target`'s allocation when no piece still
    /// refers to it and nobody else holds it (e.g. the caller's input, once every range of it
    /// was replaced); else as [`into_bytes`](Self::into_bytes).
    pub fn into_bytes_reusing(self, target: Bytes) -> (Bytes, usize) {
        if self.pieces.len() <= 1 || target.len() != self.len {
            return self.into_bytes();
        }
        match target.try_into_mut() {
            Ok(mut m) => {
                let copied = self.write_to(&mut m, None);
                (m.freeze(), copied)
            }
            Err(_) => self.into_bytes(),
        }
    }

    /// The whole buffer as one `Bytes`: the single piece if there is one, else a copy.
    pub fn into_bytes(self) -> (Bytes, usize) {
        if self.pieces.len() <= 1 {
            return (self.pieces.into_values().next().unwrap_or_default(), 0);
        }
        let mut v = BytesMut::with_capacity(self.len);
        for b in self.pieces.values() {
            v.extend_from_slice(b);
        }
        (v.freeze(), self.len)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn flat(r: &Rope) -> Vec<u8> {
        let mut out = vec![0u8; r.len()];
        r.write_to(&mut out, None);
        out
    }

    #[test]
    fn put_replaces_exactly_its_range() {
        let mut rope = Rope::new(Bytes::from((0u8..20).collect::<Vec<_>>()));
        let mut model: Vec<u8> = (0u8..20).collect();
        let mut n = 100u8;
        // Overlapping puts of every shape against a flat model.
        for (s, l) in [
            (3, 4),
            (0, 2),
            (5, 10),
            (19, 1),
            (2, 3),
            (0, 20),
            (7, 1),
            (6, 3),
        ] {
            let data: Vec<u8> = (0..l).map(|i| n.wrapping_add(i as u8)).collect();
            n = n.wrapping_add(30);
            rope.put(s, Bytes::from(data.clone()));
            model[s..s + l].copy_from_slice(&data);
            assert_eq!(flat(&rope), model, "after put at {s} of {l}");
            for a in 0..=20 {
                for b in a..=20 {
                    assert_eq!(&rope.take(a..b).0[..], &model[a..b]);
                }
            }
        }
    }

    #[test]
    fn take_within_one_piece_does_not_copy() {
        let mut rope = Rope::new(Bytes::from(vec![1u8; 16]));
        rope.put(8, Bytes::from(vec![2u8; 8]));
        assert!(!rope.take(0..8).1);
        assert!(!rope.take(9..12).1);
        assert!(rope.take(4..12).1);
        let (orig, mut out) = (rope.take(0..8).0, vec![0u8; 16]);
        let _ = orig;
        assert_eq!(rope.write_to(&mut out, None), 16);
    }

    #[test]
    fn write_to_skips_the_untouched_original() {
        let original = Bytes::from(vec![7u8; 16]);
        let mut rope = Rope::new(original.clone());
        rope.put(4, Bytes::from(vec![9u8; 4]));
        let mut out = vec![7u8; 16];
        assert_eq!(rope.write_to(&mut out, Some(&original)), 4);
        assert_eq!(out[4..8], [9; 4]);
        assert_eq!(out[8..], [7; 8]);
    }
}
