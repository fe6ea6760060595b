//! Shared helpers of the benchmark binaries.

/// The p-th percentile (0..=100) of a sample, by nearest rank; 0 for an empty sample.
pub fn percentile(sorted: &[u64], p: f64) -> u64 {
    if sorted.is_empty() {
        return 0;
    }
    let rank = ((p / 100.0) * sorted.len() as f64).ceil().max(1.0) as usize;
    sorted[rank.min(sorted.len()) - 1]
}

#[cfg(test)]
mod tests {
    #[test]
    fn percentiles_by_nearest_rank() {
        let v: Vec<u64> = (1..=100).collect();
        assert_eq!(super::percentile(&v, 50.0), 50);
        assert_eq!(super::percentile(&v, 99.0), 99);
        assert_eq!(super::percentile(&v, 100.0), 100);
        assert_eq!(super::percentile(&[], 50.0), 0);
    }
}
