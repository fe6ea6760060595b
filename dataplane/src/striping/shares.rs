//! Per-message rail shares (issue 30): how many bytes of one message each rail carries, from
//! the rates that message can expect on each rail at *both* ends, and in which order its
//! segments are queued. Pure.
//!
//! The rail schedulers ([`Weighted`](super::Weighted) and the others) see only the sender's
//! rails. In an all-to-all several senders write to one receiver at once, and a receiver whose
//! rails differ from the sender's (a slower second NIC, a rail shared with others) takes each
//! rail at its own rate: the sender cannot see that until its acknowledgements slow down. A
//! caller that knows both ends' measured rail rates and how many messages share each end (an
//! exchange knows its table and schedule) computes, per rail, the rate the message can expect
//! ([`message_rates`]: the lesser of the sender's share and the receiver's share of the rail)
//! and stripes the message by those rates ([`rail_shares`]): every rail used finishes at the
//! same time, and a rail whose share would be so small that its fixed costs make it finish after
//! the others (under [`MIN_SHARE`]) carries nothing — the others carry its bytes. So two rails
//! are never used where one is faster: a small message goes on the fast rail alone.

/// A rail whose share of a message would be below this many bytes carries none of it: below
/// it, the segment's header, reply and system calls cost more than the rail's parallel bytes
/// gain (the same floor as the transport's smallest segment).
pub const MIN_SHARE: u64 = 64 << 10;

/// The rate (bytes/s) one message can expect on each rail, both ends considered: rail r gives
/// the sender `sender[r]` shared by the `sending` messages it sends at once, and the receiver
/// `receiver[r]` shared by the `receiving` messages it receives at once; the message gets the
/// lesser. `None` when a rate is unknown (not measured yet) at either end: then there is
/// nothing to share by, and the rail scheduler decides alone. Only the rails both ends have
/// count (the shorter list).
pub fn message_rates(
    sender: &[Option<f64>],
    sending: usize,
    receiver: &[Option<f64>],
    receiving: usize,
) -> Option<Vec<f64>> {
    let (out, inn) = (sending.max(1) as f64, receiving.max(1) as f64);
    let rails = sender.len().min(receiver.len());
    if rails == 0 {
        return None;
    }
    (0..rails)
        .map(|r| match (sender[r], receiver[r]) {
            (Some(s), Some(d)) if s.is_finite() && d.is_finite() && s > 0.0 && d > 0.0 => Some((s / out).min(d / inn)),
            _ => None,
        })
        .collect()
}

/// Bytes of a message of `len` bytes that each rail carries, at the per-rail `rates` (bytes/s;
/// a rail at 0 or unusable carries none): in proportion to the rates, so every rail used
/// finishes at `len / Σ rates`, except that the slowest rail is left out, and the shares
/// recomputed without it, while its share would be under `min_share` bytes (its fixed costs
/// would make it finish after the others). Shares are multiples of 8 bytes (a segment never
/// splits an element of a collective) except the fastest rail's, which takes the remainder;
/// they sum to `len`. With no usable rate, the first rail takes everything.
pub fn rail_shares(len: u64, rates: &[f64], min_share: u64) -> Vec<u64> {
    let mut shares = vec![0u64; rates.len()];
    if rates.is_empty() {
        return shares;
    }
    // Usable rails, fastest first (ties: lower index first).
    let mut used: Vec<usize> = (0..rates.len()).filter(|&r| rates[r].is_finite() && rates[r] > 0.0).collect();
    used.sort_by(|&a, &b| rates[b].total_cmp(&rates[a]).then(a.cmp(&b)));
    if used.is_empty() {
        shares[0] = len;
        return shares;
    }
    while used.len() > 1 {
        let sum: f64 = used.iter().map(|&r| rates[r]).sum();
        let slowest = *used.last().expect("more than one rail");
        if (len as f64 * rates[slowest] / sum) < min_share as f64 {
            used.pop();
        } else {
            break;
        }
    }
    let sum: f64 = used.iter().map(|&r| rates[r]).sum();
    let mut given = 0u64;
    for &r in &used[1..] {
        let s = ((len as f64 * rates[r] / sum) as u64 / 8 * 8).min(len - given);
        shares[r] = s;
        given += s;
    }
    shares[used[0]] = len - given;
    shares
}

/// One segment of a message striped by shares: `offset`, `len`, and the rail it goes on.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PlannedSegment {
    pub offset: u64,
    pub len: u64,
    pub rail: usize,
}

/// The segments of a message striped by `shares` (from [`rail_shares`]): each rail's share is a
/// contiguous range of the message, in rail order, cut into segments of at most `seg_len`; the
/// segments are listed in the order they would be through at `rates` (each rail's k-th segment
/// at its share so far ÷ its rate; ties to the lower rail), which is the order they are queued,
/// so that every rail starts at once instead of the first rail's queue filling before the second
/// gets anything. An empty message is one empty segment on the first rail with a share (or
/// rail 0).
pub fn plan_segments(shares: &[u64], rates: &[f64], seg_len: u64) -> Vec<PlannedSegment> {
    assert!(seg_len > 0, "seg_len must be positive");
    let mut planned: Vec<(f64, PlannedSegment)> = Vec::new();
    let mut start = 0u64;
    for (rail, &share) in shares.iter().enumerate() {
        let rate = rates.get(rail).copied().filter(|r| r.is_finite() && *r > 0.0).unwrap_or(f64::MIN_POSITIVE);
        let mut done = 0u64;
        while done < share {
            let len = seg_len.min(share - done);
            done += len;
            planned.push((done as f64 / rate, PlannedSegment { offset: start + done - len, len, rail }));
        }
        start += share;
    }
    if planned.is_empty() {
        let rail = shares.iter().position(|&s| s > 0).unwrap_or(0);
        return vec![PlannedSegment { offset: 0, len: 0, rail }];
    }
    planned.sort_by(|a, b| a.0.total_cmp(&b.0).then(a.1.rail.cmp(&b.1.rail)));
    planned.into_iter().map(|(_, s)| s).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    const MB: f64 = 1e6;

    #[test]
    fn shares_follow_the_rates_and_sum_to_the_message() {
        // 2 Gbit/s and 500 Mbit/s: four fifths and one fifth.
        let s = rail_shares(10_000_000, &[250.0 * MB, 62.5 * MB], MIN_SHARE);
        assert_eq!(s, [8_000_000, 2_000_000]);
        // Shares other than the fastest's are multiples of 8; the fastest takes the rest.
        let s = rail_shares(1_000_003, &[1.0, 3.0, 1.0], 8);
        assert_eq!(s.iter().sum::<u64>(), 1_000_003);
        assert_eq!((s[0] % 8, s[2] % 8), (0, 0));
        assert_eq!(s[0], 200_000);
        assert_eq!(s[1], 1_000_003 - 400_000);
    }

    #[test]
    fn a_rail_whose_share_is_too_small_gets_none() {
        // 256 KiB over 250 and 62.5 MB/s: the slow rail's fifth is 52 KiB, under MIN_SHARE: it
        // would finish after the fast rail, which carries everything.
        assert_eq!(rail_shares(256 << 10, &[250.0 * MB, 62.5 * MB], MIN_SHARE), [256 << 10, 0]);
        // 1 MiB: its fifth is 205 KiB, it is used.
        let s = rail_shares(1 << 20, &[250.0 * MB, 62.5 * MB], MIN_SHARE);
        assert!(s[1] > MIN_SHARE && s[0] + s[1] == 1 << 20, "{s:?}");
        // The slowest goes first, then the shares are recomputed: 600 KiB over 100/10/1 — the
        // 1-rate rail's share (5.4 KiB) is dropped, then the 10-rate rail's (54.5 KiB) too.
        assert_eq!(rail_shares(600 << 10, &[100.0, 10.0, 1.0], MIN_SHARE), [600 << 10, 0, 0]);
        // Order does not matter: the fast rail may be rail 1.
        assert_eq!(rail_shares(100 << 10, &[62.5 * MB, 250.0 * MB], MIN_SHARE), [0, 100 << 10]);
    }

    #[test]
    fn unusable_rates_carry_nothing() {
        assert_eq!(rail_shares(1 << 20, &[0.0, 5.0, f64::NAN], 1), [0, 1 << 20, 0]);
        assert_eq!(rail_shares(77, &[0.0, f64::INFINITY], 1), [77, 0], "nothing usable: rail 0");
        assert_eq!(rail_shares(0, &[1.0, 1.0], MIN_SHARE), [0, 0]);
        assert!(rail_shares(5, &[], 1).is_empty());
    }

    /// Receiver-aware: the message's rate on a rail is the lesser of the sender's and the
    /// receiver's share of it, so a receiver whose second rail is slow (or taken by three
    /// senders at once) gets less on that rail than the sender's own rates would give it.
    #[test]
    fn message_rates_take_the_lesser_end() {
        let fast = [Some(250.0 * MB), Some(250.0 * MB)];
        let skewed = [Some(250.0 * MB), Some(25.0 * MB)];
        // One message each way: the receiver's slow second rail bounds it.
        let r = message_rates(&fast, 1, &skewed, 1).unwrap();
        assert_eq!(r, [250.0 * MB, 25.0 * MB]);
        // The sender's own rates would split 50/50; the receiver's give a tenth to rail 1.
        let s = rail_shares(11 << 20, &r, MIN_SHARE);
        assert!(s[1].abs_diff(1 << 20) <= 8, "{s:?}");
        // Four senders share the receiver, the sender sends two messages at once: 250/4 against
        // 250/2 on rail 0, 25/4 against 250/2 on rail 1.
        let r = message_rates(&fast, 2, &skewed, 4).unwrap();
        assert_eq!(r, [62.5 * MB, 6.25 * MB]);
        // The rails both ends have; an unmeasured rail at either end: no shares.
        assert_eq!(message_rates(&fast, 1, &fast[..1], 1).unwrap().len(), 1);
        assert_eq!(message_rates(&[Some(1.0), None], 1, &fast, 1), None);
        assert_eq!(message_rates(&fast, 1, &[Some(1.0), Some(0.0)], 1), None);
        assert_eq!(message_rates(&[], 1, &fast, 1), None);
    }

    #[test]
    fn segments_interleave_by_when_they_would_be_through() {
        // Rates 3:1, shares 6 and 2 bytes, segments of 2: rail 0 finishes its segments at
        // 2/3, 4/3, 6/3; rail 1 its one at 2/1 — a tie with rail 0's last, to the lower rail.
        let p = plan_segments(&[6, 2], &[3.0, 1.0], 2);
        let rails: Vec<usize> = p.iter().map(|s| s.rail).collect();
        assert_eq!(rails, [0, 0, 0, 1]);
        assert_eq!(p[3], PlannedSegment { offset: 6, len: 2, rail: 1 });
        // Rates 4:1, shares 8 and 2, segments of 1: rail 0's are through every 1/4, rail 1's
        // at 1 and 2, so rail 1 gets one segment after every four of rail 0's.
        let p = plan_segments(&[8, 2], &[4.0, 1.0], 1);
        assert_eq!(p.iter().map(|s| s.rail).collect::<Vec<_>>(), [0, 0, 0, 0, 1, 0, 0, 0, 0, 1]);
        // Every byte exactly once.
        let p = plan_segments(&[1000, 0, 333], &[5.0, 1.0, 2.0], 64);
        let mut covered: Vec<(u64, u64)> = p.iter().map(|s| (s.offset, s.len)).collect();
        covered.sort();
        let mut at = 0;
        for (o, l) in covered {
            assert_eq!(o, at);
            at += l;
        }
        assert_eq!(at, 1333);
        assert!(p.iter().all(|s| s.len <= 64 && s.rail != 1));
        // An empty message: one empty segment.
        assert_eq!(plan_segments(&[0, 0], &[1.0, 1.0], 8), [PlannedSegment { offset: 0, len: 0, rail: 0 }]);
    }
}
