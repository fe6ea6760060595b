//! Cutting a message into segments.

/// The segments of a `total`-byte message, front to back, each at most `seg_max` bytes: the
/// seed's step "if the unsent part is longer than seg_max take seg_max bytes, else take the
/// rest". An empty message is one empty segment, so that it still reaches the peer.
pub fn cut(total: u64, seg_max: u64) -> impl Iterator<Item = (u64, u64)> {
    assert!(seg_max > 0, "seg_max must be positive");
    let n = total.div_ceil(seg_max).max(1);
    (0..n).map(move |i| {
        let off = i * seg_max;
        (off, seg_max.min(total - off))
    })
}

#[cfg(test)]
mod tests {
    use super::cut;

    #[test]
    fn cuts_front_to_back_with_a_short_tail() {
        assert_eq!(cut(10, 4).collect::<Vec<_>>(), [(0, 4), (4, 4), (8, 2)]);
        assert_eq!(cut(8, 4).collect::<Vec<_>>(), [(0, 4), (4, 4)]);
        assert_eq!(cut(3, 4).collect::<Vec<_>>(), [(0, 3)]);
        assert_eq!(cut(0, 4).collect::<Vec<_>>(), [(0, 0)]);
    }

    #[test]
    fn segments_tile_the_message_exactly() {
        for total in 0..200 {
            for seg in 1..20 {
                let mut next = 0;
                for (off, len) in cut(total, seg) {
                    assert_eq!(off, next);
                    assert!(len <= seg);
                    next += len;
                }
                assert_eq!(next, total);
            }
        }
    }
}
