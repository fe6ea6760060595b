//! How records travel in etcd: framed one after the other, lz4-compressed, cut into parts of
//! at most [`PART`] bytes.

use crate::error::Error;

/// The largest value or log part written in one request: etcd refuses requests over 1.5 MiB
/// by default, and a part travels with its key and the fencing condition.
pub const PART: usize = 1 << 20;
/// The largest decompressed round or snapshot accepted (a damaged size field must not
/// allocate without bound).
pub(super) const MAX_DECOMPRESSED: usize = 4 << 30;

/// Records as a round or a snapshot holds them: a key and its value, or `None` for a deletion.
pub type Items = Vec<(Vec<u8>, Option<Vec<u8>>)>;

/// Records framed one after the other: key length (u32 BE), key, then 0 (deleted) or 1 and the
/// value's length (u32 BE) and the value.
pub fn encode_items<'a>(items: impl Iterator<Item = (&'a [u8], Option<&'a [u8]>)>) -> Vec<u8> {
    let mut out = Vec::new();
    for (k, v) in items {
        out.extend_from_slice(&(k.len() as u32).to_be_bytes());
        out.extend_from_slice(k);
        match v {
            None => out.push(0),
            Some(v) => {
                out.push(1);
                out.extend_from_slice(&(v.len() as u32).to_be_bytes());
                out.extend_from_slice(v);
            }
        }
    }
    out
}

/// The records of [`encode_items`], or what is wrong with them (`what`: where they were read,
/// which names them in the error).
pub fn decode_items(mut b: &[u8], what: &str) -> Result<Items, Error> {
    let damaged = |reason: String| Error::Corrupt { key: what.to_string(), reason };
    let take = |b: &mut &[u8], n: usize| -> Result<Vec<u8>, Error> {
        if b.len() < n {
            return Err(damaged(format!("truncated: {n} bytes wanted, {} left", b.len())));
        }
        let (head, rest) = b.split_at(n);
        *b = rest;
        Ok(head.to_vec())
    };
    let len = |b: &mut &[u8]| -> Result<usize, Error> {
        Ok(u32::from_be_bytes(take(b, 4)?.try_into().expect("4 bytes")) as usize)
    };
    let mut out = Vec::new();
    while !b.is_empty() {
        let n = len(&mut b)?;
        let k = take(&mut b, n)?;
        match take(&mut b, 1)?[0] {
            0 => out.push((k, None)),
            1 => {
                let n = len(&mut b)?;
                out.push((k, Some(take(&mut b, n)?)));
            }
            t => return Err(damaged(format!("unknown record tag {t}"))),
        }
    }
    Ok(out)
}

pub(super) fn compress(raw: &[u8]) -> Vec<u8> {
    lz4_flex::compress_prepend_size(raw)
}

/// The bytes [`compress`] made, or what is wrong with them (`what`: where they were read).
pub(super) fn decompress(bytes: &[u8], what: &str) -> Result<Vec<u8>, Error> {
    let damaged = |reason: String| Error::Corrupt { key: what.to_string(), reason };
    let claimed = bytes
        .get(..4)
        .map(|b| u32::from_le_bytes(b.try_into().expect("4 bytes")) as usize)
        .ok_or_else(|| damaged("no size".into()))?;
    // lz4 expands at most 255-fold; a larger claim is damage, not data.
    if claimed > MAX_DECOMPRESSED || claimed > bytes.len().saturating_mul(255) {
        return Err(damaged(format!("implausible decompressed size {claimed}")));
    }
    lz4_flex::decompress_size_prepended(bytes).map_err(|e| damaged(e.to_string()))
}

/// A log entry's header: format (1), round (u64 BE: the seq of its first part), last (0/1).
pub(super) const ENTRY_HEADER: usize = 10;
pub(super) const ENTRY_FORMAT: u8 = 1;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn records_round_trip_and_damage_is_an_error() {
        let items: Vec<(Vec<u8>, Option<Vec<u8>>)> =
            vec![(b"a".to_vec(), Some(b"1".to_vec())), (b"b".to_vec(), None), (vec![], Some(vec![]))];
        let raw = encode_items(items.iter().map(|(k, v)| (k.as_slice(), v.as_deref())));
        assert_eq!(decode_items(&raw, "t").unwrap(), items);
        assert!(decode_items(&raw[..raw.len() - 1], "t").is_err());
        let mut bad = raw.clone();
        bad[4 + 1] = 7;
        assert!(decode_items(&bad, "t").unwrap_err().to_string().contains("tag"));
        let huge = [0xff, 0xff, 0xff, 0xff, 1];
        assert!(decode_items(&huge, "t").unwrap_err().to_string().contains("truncated"));
        let c = compress(&raw);
        assert_eq!(decompress(&c, "t").unwrap(), raw);
        let mut lie = c.clone();
        lie[..4].copy_from_slice(&u32::MAX.to_le_bytes());
        assert!(decompress(&lie, "t").unwrap_err().to_string().contains("implausible"));
    }
}
