//! Request validation against the configured [`Limits`]. Every message says
//! what is wrong in the caller's words (the lock name, a TTL, a wait: never
//! a proto field's name, which a CLI or a Python caller never typed) and
//! names the limit and the broker flag that sets it, so a person can fix the
//! request; [`Error::BadArgument`] carries the same for programs.

use crate::duration::millis;
use std::time::Duration;

use super::token;
use super::Limits;
use crate::{duration::format_duration, error::Error, Result};

/// `(key, value)` facts of a refusal: durations in milliseconds.
fn ms(key: &'static str, d: Duration) -> (&'static str, String) {
    (key, millis(d).to_string())
}

/// Checks a lock name: 1..=max bytes of `[A-Za-z0-9._:/-]`. The set leaves
/// out `{` and `}` (Redis Cluster hash tags), spaces and control characters.
pub fn name(limits: &Limits, name: &str) -> Result<()> {
    let max = ("max_name_len", limits.max_name_len.to_string());
    if name.is_empty() {
        return Err(Error::bad(
            "name",
            "the lock name is empty: give the lock a name",
            vec![max],
        ));
    }
    if name.len() > limits.max_name_len {
        return Err(Error::bad(
            "name",
            format!(
                "the lock name is {} bytes long; the limit is {} bytes (--max-name-len)",
                name.len(),
                limits.max_name_len
            ),
            vec![max],
        ));
    }
    if let Some(bad) = name
        .chars()
        .find(|c| !(c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | ':' | '/' | '-')))
    {
        return Err(Error::bad(
            "name",
            format!("the lock name contains {bad:?}; allowed are A-Z a-z 0-9 and . _ : / -"),
            vec![max],
        ));
    }
    Ok(())
}

/// Checks a tenant id: 1..=64 of `[A-Za-z0-9_-]` (no `|`, which separates
/// the tenant from the lock name in the store). The reserved id of the root
/// namespace, `@root`, is outside this alphabet on purpose and is accepted
/// by the callers that allow it, not here.
pub fn tenant(id: &str) -> Result<()> {
    let ok = !id.is_empty()
        && id.len() <= 64
        && id
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-');
    if ok {
        Ok(())
    } else {
        Err(Error::bad(
            "tenant",
            format!(
                "tenant '{id}' is not a tenant id: 1 to 64 of A-Z a-z 0-9 _ -, or @root for \
                 the root namespace (the locks of callers of a broker without --auth-file)"
            ),
            vec![],
        ))
    }
}

/// Checks a holder label: at most max bytes, no control characters.
pub fn holder(limits: &Limits, holder: &str) -> Result<()> {
    let max = ("max_holder_len", limits.max_holder_len.to_string());
    if holder.len() > limits.max_holder_len {
        return Err(Error::bad(
            "holder",
            format!(
                "the holder label is {} bytes long; the limit is {} bytes (--max-holder-len)",
                holder.len(),
                limits.max_holder_len
            ),
            vec![max],
        ));
    }
    if holder.chars().any(char::is_control) {
        return Err(Error::bad(
            "holder",
            "the holder label contains a control character; use printable text such as a pod name",
            vec![max],
        ));
    }
    Ok(())
}

/// Resolves a requested TTL: 0 means `default` (or `None` for renew, which
/// keeps the lease's own TTL); anything else must lie within the bounds.
pub fn ttl(limits: &Limits, ttl_ms: u64, default: Option<Duration>) -> Result<Option<u64>> {
    if ttl_ms == 0 {
        return Ok(default.map(millis));
    }
    let (min, max) = (millis(limits.ttl_min), millis(limits.ttl_max));
    if ttl_ms < min || ttl_ms > max {
        let asked = format_duration(Duration::from_millis(ttl_ms));
        let message = if ttl_ms < min {
            format!(
                "a TTL of {asked} is below this broker's minimum of {} (--ttl-min)",
                format_duration(limits.ttl_min)
            )
        } else {
            format!(
                "a TTL of {asked} is above this broker's maximum of {} (--ttl-max)",
                format_duration(limits.ttl_max)
            )
        };
        return Err(Error::bad(
            "ttl",
            message,
            vec![
                ("ttl_ms", ttl_ms.to_string()),
                ms("min_ttl_ms", limits.ttl_min),
                ms("max_ttl_ms", limits.ttl_max),
            ],
        ));
    }
    Ok(Some(ttl_ms))
}

/// Checks a place in line passed back to Acquire (keep_place): empty for
/// none, else an owner token's form, which every place has (it is the token
/// the caller waited with).
pub fn place(place: &str) -> Result<()> {
    if place.is_empty() || token::is_well_formed(place) {
        Ok(())
    } else {
        Err(Error::bad(
            "place",
            format!(
                "the place in line passed back is not {} lowercase hex characters: pass back \
                 the place a refused wait kept, or none to join the line",
                token::TOKEN_LEN
            ),
            vec![],
        ))
    }
}

/// Resolves a requested wait; anything above the maximum is refused rather
/// than cut, so a client never waits less than it believes. A client that
/// wants longer chains waits with kept places, reading the maximum from
/// the refusal's `max_wait_ms`.
pub fn wait(limits: &Limits, wait_ms: u64) -> Result<Duration> {
    let max = millis(limits.max_wait);
    if wait_ms > max {
        return Err(Error::bad(
            "wait",
            format!(
                "a wait of {} is above this broker's maximum of {} (--max-wait)",
                format_duration(Duration::from_millis(wait_ms)),
                format_duration(limits.max_wait)
            ),
            vec![
                ("wait_ms", wait_ms.to_string()),
                ms("max_wait_ms", limits.max_wait),
            ],
        ));
    }
    Ok(Duration::from_millis(wait_ms))
}

/// Checks a requested lock-delay.
pub fn lock_delay(limits: &Limits, delay_ms: u64) -> Result<u64> {
    let max = millis(limits.max_lock_delay);
    if delay_ms > max {
        return Err(Error::bad(
            "lock_delay",
            format!(
                "a lock-delay of {} is above this broker's maximum of {} (--max-lock-delay)",
                format_duration(Duration::from_millis(delay_ms)),
                format_duration(limits.max_lock_delay)
            ),
            vec![
                ("lock_delay_ms", delay_ms.to_string()),
                ms("max_lock_delay_ms", limits.max_lock_delay),
            ],
        ));
    }
    Ok(delay_ms)
}

/// Resolves a semaphore limit: 0 and 1 mean a plain lock.
pub fn limit(limits: &Limits, limit: u32, lock_delay_ms: u64) -> Result<u32> {
    if limit > limits.max_semaphore_limit {
        return Err(Error::bad(
            "limit",
            format!(
                "a semaphore of {limit} permits is above this broker's maximum of {} \
                 (--max-semaphore-limit)",
                limits.max_semaphore_limit
            ),
            vec![
                ("limit", limit.to_string()),
                ("max_limit", limits.max_semaphore_limit.to_string()),
            ],
        ));
    }
    if limit > 1 && lock_delay_ms > 0 {
        return Err(Error::bad(
            "lock_delay",
            "a lock-delay applies to locks only; a semaphore (more than 1 permit) has none",
            vec![],
        ));
    }
    Ok(limit.max(1))
}

/// Checks an owner token's form.
pub fn owner_token(token: &str) -> Result<()> {
    if token::is_well_formed(token) {
        Ok(())
    } else if token.is_empty() {
        Err(Error::bad(
            "owner_token",
            "the owner token is empty: pass the owner token the grant returned",
            vec![],
        ))
    } else {
        Err(Error::bad(
            "owner_token",
            format!(
                "the owner token is not {} lowercase hex characters: pass the owner token the \
                 grant returned",
                token::TOKEN_LEN
            ),
            vec![],
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn message(r: Result<impl std::fmt::Debug>) -> String {
        match r {
            Err(Error::BadArgument { message, .. }) => message,
            other => panic!("expected a bad argument, got {other:?}"),
        }
    }

    fn facts(r: Result<impl std::fmt::Debug>) -> (&'static str, Vec<(&'static str, String)>) {
        match r {
            Err(Error::BadArgument {
                argument, facts, ..
            }) => (argument, facts),
            other => panic!("expected a bad argument, got {other:?}"),
        }
    }

    #[test]
    fn names_follow_the_charset_and_length() {
        let l = Limits::default();
        assert!(name(&l, "jobs/nightly-report_v2.1:eu").is_ok());
        assert!(name(&l, &"a".repeat(256)).is_ok());
        assert!(message(name(&l, "")).contains("empty"));
        assert!(message(name(&l, &"a".repeat(257))).contains("256 bytes"));
        assert!(message(name(&l, "a{b}")).contains("'{'"));
        assert!(message(name(&l, "café")).contains("'é'"));
        assert!(message(name(&l, "a b")).contains("' '"));
    }

    /// Property: for random names, `name` accepts exactly those of 1..=256
    /// bytes drawn from the allowed set, and never panics.
    #[test]
    fn random_names_are_judged_by_the_rule() {
        let l = Limits::default();
        let alphabet: Vec<char> = "ab.Z9_:/-{} é\0\n".chars().collect();
        let mut seed = [0u8; 4096];
        getrandom::fill(&mut seed).unwrap();
        for chunk in seed.chunks(16) {
            let len = usize::from(chunk[0]) * 2 % 300;
            let candidate: String = (0..len)
                .map(|i| alphabet[usize::from(chunk[i % 16]) % alphabet.len()])
                .collect();
            let allowed = !candidate.is_empty()
                && candidate.len() <= 256
                && candidate
                    .chars()
                    .all(|c| c.is_ascii_alphanumeric() || ".:_/-".contains(c));
            assert_eq!(name(&l, &candidate).is_ok(), allowed, "{candidate:?}");
        }
    }

    #[test]
    fn ttls_are_bounded_and_zero_means_default() {
        let l = Limits::default();
        assert_eq!(ttl(&l, 0, Some(l.ttl_default)).unwrap(), Some(10_000));
        assert_eq!(ttl(&l, 0, None).unwrap(), None);
        assert_eq!(ttl(&l, 500, None).unwrap(), Some(500));
        assert_eq!(
            message(ttl(&l, 100, None)),
            "a TTL of 100 ms is below this broker's minimum of 500 ms (--ttl-min)"
        );
        assert!(message(ttl(&l, 3_600_001, None)).contains("maximum of 1 h (--ttl-max)"));
        assert!(message(ttl(&l, u64::MAX, None)).contains("--ttl-max"));
        assert_eq!(
            facts(ttl(&l, 100, None)),
            (
                "ttl",
                vec![
                    ("ttl_ms", "100".to_owned()),
                    ("min_ttl_ms", "500".to_owned()),
                    ("max_ttl_ms", "3600000".to_owned())
                ]
            )
        );
    }

    #[test]
    fn holders_and_waits_and_tokens_are_checked() {
        let l = Limits::default();
        assert!(holder(&l, "").is_ok());
        assert!(message(holder(&l, &"h".repeat(257))).contains("--max-holder-len"));
        assert!(message(holder(&l, "a\nb")).contains("control"));
        assert_eq!(
            message(wait(&l, 600_000)),
            "a wait of 10 min is above this broker's maximum of 5 min (--max-wait)"
        );
        assert_eq!(
            facts(wait(&l, 600_000)),
            (
                "wait",
                vec![
                    ("wait_ms", "600000".to_owned()),
                    ("max_wait_ms", "300000".to_owned())
                ]
            )
        );
        assert!(message(owner_token("")).contains("empty"));
        assert!(message(owner_token("xyz")).contains("32 lowercase hex"));
    }
}
