//! The one percentile the benchmarks report, and the integers durations are
//! recorded in.

use std::time::Duration;

// Durations in whole microseconds and milliseconds, saturating: the
// broker's own conversions, so that a benchmark rounds as the broker does.
pub use leasehold_server::duration::{micros, millis};

/// `duration` in whole nanoseconds, saturating at `u64::MAX` (584 years):
/// instants kept in an atomic as the time since an origin.
pub fn nanos(duration: Duration) -> u64 {
    u64::try_from(duration.as_nanos()).unwrap_or(u64::MAX)
}

/// The `p` quantile (0..=1) of `values` by the nearest-rank method on the
/// sorted values (`values` is sorted in place); 0 for no values.
pub fn percentile(values: &mut [u64], p: f64) -> u64 {
    if values.is_empty() {
        return 0;
    }
    values.sort_unstable();
    #[expect(
        clippy::cast_possible_truncation,
        clippy::cast_sign_loss,
        reason = "the rank len * p is in 0..=len for p in 0..=1; `as` from f64 \
                  saturates (a negative or NaN p gives 0) and .min bounds it above"
    )]
    let rank = (values.len() as f64 * p) as usize;
    values[rank.min(values.len() - 1)]
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
