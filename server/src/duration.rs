//! Durations as people write them: parsed from flags and the CLI (`250ms`,
//! `10s`, `5m`, `1h`) and shown in messages (`500 ms`, `5 min`). A leaf:
//! the lease rules' messages and the flags both use it.

use std::time::Duration;

/// `duration` in whole milliseconds, saturating at `u64::MAX` (585 million
/// years): the unit every TTL, wait and lock-delay crosses the API and the
/// stores in. `Duration::as_millis` is a `u128`, and the `as u64` this
/// replaces would wrap a huge duration to a small one.
pub fn millis(duration: Duration) -> u64 {
    u64::try_from(duration.as_millis()).unwrap_or(u64::MAX)
}

/// `duration` in whole microseconds, saturating at `u64::MAX` (as
/// [`millis`]): for logs and latency figures.
pub fn micros(duration: Duration) -> u64 {
    u64::try_from(duration.as_micros()).unwrap_or(u64::MAX)
}

/// Parses `250ms`, `10s`, `5m`, `1h` (a whole number and a unit). A bare
/// `0` needs no unit: zero is zero in every unit (`--wait 0`).
pub fn parse_duration(text: &str) -> Result<Duration, String> {
    let text = text.trim();
    if !text.is_empty() && text.bytes().all(|b| b == b'0') {
        return Ok(Duration::ZERO);
    }
    let split = text
        .find(|c: char| !c.is_ascii_digit())
        .ok_or_else(|| format!("'{text}' has no unit: write e.g. 500ms, 10s, 5m or 1h"))?;
    let (number, unit) = text.split_at(split);
    let n: u64 = number
        .parse()
        .map_err(|_| format!("'{text}' does not start with a whole number"))?;
    let ms = match unit {
        "ms" => Some(n),
        "s" => n.checked_mul(1_000),
        "m" => n.checked_mul(60_000),
        "h" => n.checked_mul(3_600_000),
        _ => {
            return Err(format!(
                "'{text}' has unknown unit '{unit}': use ms, s, m or h"
            ))
        }
    };
    ms.map(Duration::from_millis)
        .ok_or_else(|| format!("'{text}' is too large"))
}

/// Shows a duration as a person writes it, in the largest unit that keeps
/// it whole: `500 ms`, `10 s`, `5 min`, `1 h` (messages, not `{:?}`'s
/// `300s`, nor milliseconds nobody counts in).
pub fn format_duration(duration: Duration) -> String {
    let ms = duration.as_millis();
    match ms {
        0 => "0 s".into(),
        ms if ms % 3_600_000 == 0 => format!("{} h", ms / 3_600_000),
        ms if ms % 60_000 == 0 => format!("{} min", ms / 60_000),
        ms if ms % 1_000 == 0 => format!("{} s", ms / 1_000),
        ms => format!("{ms} ms"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_show_in_the_largest_whole_unit() {
        let show = |ms| format_duration(Duration::from_millis(ms));
        assert_eq!(show(0), "0 s");
        assert_eq!(show(500), "500 ms");
        assert_eq!(show(1_500), "1500 ms");
        assert_eq!(show(10_000), "10 s");
        assert_eq!(show(90_000), "90 s");
        assert_eq!(show(300_000), "5 min");
        assert_eq!(show(3_600_000), "1 h");
    }

    #[test]
    fn a_bare_zero_needs_no_unit() {
        assert_eq!(parse_duration("0"), Ok(Duration::ZERO));
        assert_eq!(parse_duration("00"), Ok(Duration::ZERO));
        assert_eq!(parse_duration("0s"), Ok(Duration::ZERO));
    }

    #[test]
    fn durations_parse_in_every_unit() {
        assert_eq!(parse_duration("250ms"), Ok(Duration::from_millis(250)));
        assert_eq!(parse_duration("10s"), Ok(Duration::from_secs(10)));
        assert_eq!(parse_duration("5m"), Ok(Duration::from_secs(300)));
        assert_eq!(parse_duration("1h"), Ok(Duration::from_secs(3600)));
    }

    #[test]
    fn bad_durations_say_what_is_wrong() {
        assert!(parse_duration("10").unwrap_err().contains("no unit"));
        assert!(parse_duration("ms").unwrap_err().contains("whole number"));
        assert!(parse_duration("3d").unwrap_err().contains("unknown unit"));
        assert!(parse_duration("99999999999999999999h").is_err());
    }
}
