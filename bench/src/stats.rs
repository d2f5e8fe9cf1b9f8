//! The one percentile the benchmarks report.

/// The `p` quantile (0..=1) of `values` by the nearest-rank method on the
/// sorted values (`values` is sorted in place); 0 for no values.
pub fn percentile(values: &mut [u64], p: f64) -> u64 {
    if values.is_empty() {
        return 0;
    }
    values.sort_unstable();
    values[((values.len() as f64 * p) as usize).min(values.len() - 1)]
}

#[cfg(test)]
mod tests {
    use super::percentile;

    #[test]
    fn nearest_rank_of_the_sorted_values() {
        let mut values: Vec<u64> = (1..=100).rev().collect();
        assert_eq!(percentile(&mut values, 0.5), 51);
        assert_eq!(percentile(&mut values, 0.99), 100);
        assert_eq!(percentile(&mut values, 1.0), 100);
        assert_eq!(percentile(&mut values, 0.0), 1);
        assert_eq!(percentile(&mut [], 0.99), 0);
    }
}
