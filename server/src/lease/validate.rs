//! Request validation against the configured [`Limits`]. Every message names
//! the field and the limit, so a person can fix the request.

use crate::duration::millis;
use std::time::Duration;

use super::token;
use super::Limits;
use crate::{duration::format_duration, error::Error, Result};

/// Checks a lock name: 1..=max bytes of `[A-Za-z0-9._:/-]`. The set leaves
/// out `{` and `}` (Redis Cluster hash tags), spaces and control characters.
pub fn name(limits: &Limits, name: &str) -> Result<()> {
    if name.is_empty() {
        return Err(Error::InvalidArgument(
            "name is empty: give the lock a name".into(),
        ));
    }
    if name.len() > limits.max_name_len {
        return Err(Error::InvalidArgument(format!(
            "name is {} bytes long; the limit is {} bytes (--max-name-len)",
            name.len(),
            limits.max_name_len
        )));
    }
    if let Some(bad) = name
        .chars()
        .find(|c| !(c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | ':' | '/' | '-')))
    {
        return Err(Error::InvalidArgument(format!(
            "name contains {bad:?}; allowed are A-Z a-z 0-9 and . _ : / -"
        )));
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
        Err(Error::InvalidArgument(format!(
            "tenant '{id}' is not a tenant id: 1 to 64 of A-Z a-z 0-9 _ -, or @root for \
             the root namespace (the locks of callers of a broker without --auth-file)"
        )))
    }
}

/// Checks a holder label: at most max bytes, no control characters.
pub fn holder(limits: &Limits, holder: &str) -> Result<()> {
    if holder.len() > limits.max_holder_len {
        return Err(Error::InvalidArgument(format!(
            "holder is {} bytes long; the limit is {} bytes (--max-holder-len)",
            holder.len(),
            limits.max_holder_len
        )));
    }
    if holder.chars().any(char::is_control) {
        return Err(Error::InvalidArgument(
            "holder contains a control character; use printable text such as a pod name".into(),
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
        return Err(Error::InvalidArgument(format!(
            "ttl_ms is {ttl_ms}; it must be from {} to {} (--ttl-min, --ttl-max), \
             or 0 for the default",
            format_duration(limits.ttl_min),
            format_duration(limits.ttl_max)
        )));
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
        Err(Error::InvalidArgument(format!(
            "place is not {} lowercase hex characters: pass the leasehold-place metadata \
             of an Acquire that kept its place, or leave place empty to join the line",
            token::TOKEN_LEN
        )))
    }
}

/// Resolves a requested wait; anything above the maximum is refused rather
/// than cut, so a client never waits less than it believes.
pub fn wait(limits: &Limits, wait_ms: u64) -> Result<Duration> {
    let max = millis(limits.max_wait);
    if wait_ms > max {
        return Err(Error::InvalidArgument(format!(
            "wait_timeout_ms is {wait_ms}; the limit is {} (--max-wait)",
            format_duration(limits.max_wait)
        )));
    }
    Ok(Duration::from_millis(wait_ms))
}

/// Checks a requested lock-delay.
pub fn lock_delay(limits: &Limits, delay_ms: u64) -> Result<u64> {
    let max = millis(limits.max_lock_delay);
    if delay_ms > max {
        return Err(Error::InvalidArgument(format!(
            "lock_delay_ms is {delay_ms}; the limit is {} (--max-lock-delay)",
            format_duration(limits.max_lock_delay)
        )));
    }
    Ok(delay_ms)
}

/// Resolves a semaphore limit: 0 and 1 mean a plain lock.
pub fn limit(limits: &Limits, limit: u32, lock_delay_ms: u64) -> Result<u32> {
    if limit > limits.max_semaphore_limit {
        return Err(Error::InvalidArgument(format!(
            "limit is {limit}; the most permits a semaphore may have is {} (--max-semaphore-limit)",
            limits.max_semaphore_limit
        )));
    }
    if limit > 1 && lock_delay_ms > 0 {
        return Err(Error::InvalidArgument(
            "lock_delay_ms applies to locks only; a semaphore (limit > 1) has no lock-delay".into(),
        ));
    }
    Ok(limit.max(1))
}

/// Checks an owner token's form.
pub fn owner_token(token: &str) -> Result<()> {
    if token::is_well_formed(token) {
        Ok(())
    } else if token.is_empty() {
        Err(Error::InvalidArgument(
            "owner_token is empty: pass the owner_token that Acquire returned".into(),
        ))
    } else {
        Err(Error::InvalidArgument(format!(
            "owner_token is not {} lowercase hex characters: pass the owner_token that Acquire returned",
            token::TOKEN_LEN
        )))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn message(r: Result<impl std::fmt::Debug>) -> String {
        match r {
            Err(Error::InvalidArgument(m)) => m,
            other => panic!("expected INVALID_ARGUMENT, got {other:?}"),
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
        assert!(message(ttl(&l, 499, None)).contains("from 500 ms to 1 h"));
        assert!(message(ttl(&l, 3_600_001, None)).contains("--ttl-max"));
        assert!(message(ttl(&l, u64::MAX, None)).contains("ttl_ms"));
    }

    #[test]
    fn holders_and_waits_and_tokens_are_checked() {
        let l = Limits::default();
        assert!(holder(&l, "").is_ok());
        assert!(message(holder(&l, &"h".repeat(257))).contains("--max-holder-len"));
        assert!(message(holder(&l, "a\nb")).contains("control"));
        assert!(message(wait(&l, 300_001)).contains("--max-wait"));
        assert!(message(owner_token("")).contains("empty"));
        assert!(message(owner_token("xyz")).contains("32 lowercase hex"));
    }
}
