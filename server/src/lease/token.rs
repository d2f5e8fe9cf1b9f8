//! Owner tokens: 128 random bits, written as 32 lowercase hex characters.

/// Length of an owner token in characters.
pub const TOKEN_LEN: usize = 32;

/// A new random owner token from the operating system's CSPRNG.
///
/// The random bytes are drawn from the OS in blocks of [`POOL`] tokens per
/// thread (one `getrandom` call instead of one per grant) and each token's
/// bytes are zeroed in the pool as they are handed out; hex is written from
/// a table into one allocation (it was one `format!` per byte: a grant's
/// token cost more than its gRPC decoding, in a profile of the broker).
pub fn generate() -> crate::Result<String> {
    const HEX: &[u8; 16] = b"0123456789abcdef";
    let bytes = POOL_BYTES.with(|pool| {
        let mut pool = pool.borrow_mut();
        if pool.used == pool.bytes.len() {
            getrandom::fill(&mut pool.bytes).map_err(|e| {
                crate::Error::Internal(format!("no randomness for an owner token: {e}"))
            })?;
            pool.used = 0;
        }
        let start = pool.used;
        let mut bytes = [0u8; TOKEN_LEN / 2];
        bytes.copy_from_slice(&pool.bytes[start..start + TOKEN_LEN / 2]);
        pool.bytes[start..start + TOKEN_LEN / 2].fill(0);
        pool.used += TOKEN_LEN / 2;
        Ok::<_, crate::Error>(bytes)
    })?;
    let mut token = String::with_capacity(TOKEN_LEN);
    for b in bytes {
        token.push(HEX[usize::from(b >> 4)] as char);
        token.push(HEX[usize::from(b & 0x0f)] as char);
    }
    Ok(token)
}

/// Tokens drawn from the OS at once, per thread.
const POOL: usize = 32;

/// A thread's random bytes not yet handed out: `bytes[used..]`.
struct Pool {
    bytes: [u8; POOL * TOKEN_LEN / 2],
    used: usize,
}

thread_local! {
    static POOL_BYTES: std::cell::RefCell<Pool> = const {
        std::cell::RefCell::new(Pool { bytes: [0; POOL * TOKEN_LEN / 2], used: POOL * TOKEN_LEN / 2 })
    };
}

/// Whether `token` has the form of an owner token (only such a token can
/// ever match a lease, so anything else is refused before the store).
pub fn is_well_formed(token: &str) -> bool {
    token.len() == TOKEN_LEN
        && token
            .bytes()
            .all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tokens_are_well_formed_and_distinct() {
        let a = generate().unwrap();
        let b = generate().unwrap();
        assert!(is_well_formed(&a) && is_well_formed(&b));
        assert_ne!(a, b);
    }

    /// More tokens than one pool holds, on two threads: all well formed
    /// and all distinct (a pool handed out twice, or bytes read after
    /// being zeroed, would repeat one).
    #[test]
    fn tokens_from_several_pools_and_threads_never_repeat() {
        let draw = || {
            (0..3 * POOL + 5)
                .map(|_| generate().unwrap())
                .collect::<Vec<_>>()
        };
        let other = std::thread::spawn(draw);
        let mut all = draw();
        all.extend(other.join().unwrap());
        assert!(all.iter().all(|t| is_well_formed(t)));
        let distinct: std::collections::HashSet<_> = all.iter().collect();
        assert_eq!(distinct.len(), all.len());
        assert!(all.iter().all(|t| t != &"0".repeat(TOKEN_LEN)));
    }

    #[test]
    fn malformed_tokens_are_recognised() {
        assert!(!is_well_formed(""));
        assert!(!is_well_formed(&"A".repeat(TOKEN_LEN)));
        assert!(!is_well_formed(&"a".repeat(TOKEN_LEN + 1)));
    }

    #[test]
    fn debug_output_of_lease_types_never_shows_a_token() {
        let token = generate().unwrap();
        let lease = crate::lease::GrantedLease {
            name: "n".into(),
            owner_token: token.clone(),
            fence: 1,
            ttl_ms: 1,
        };
        let spec = crate::store::GrantSpec {
            name: "n".into(),
            token: token.clone(),
            holder: "h".into(),
            ttl_ms: 1,
            lock_delay_ms: 0,
            limit: 1,
            queued: false,
        };
        let item = crate::store::RenewItem {
            name: "n".into(),
            token: token.clone(),
            ttl_ms: None,
        };
        let lease_ref = crate::lease::LeaseRef {
            name: "n".into(),
            owner_token: token.clone(),
            ttl_ms: 0,
            ttl_auto: false,
        };
        let args = crate::lease::AcquireArgs {
            place: token.clone(),
            ..Default::default()
        };
        let place = crate::lease::PlaceArgs {
            keep: true,
            given: token.clone(),
        };
        let kept = crate::error::Error::PlaceKept {
            refusal: Box::new(crate::error::Error::Cancelled),
            place: crate::error::KeptPlace(token.clone()),
            kept_ms: 3_000,
        };
        for shown in [
            format!("{args:?}"),
            format!("{place:?}"),
            format!("{kept:?}"),
            format!("{lease:?}"),
            format!("{spec:?}"),
            format!("{item:?}"),
            format!("{lease_ref:?}"),
        ] {
            assert!(!shown.contains(&token), "{shown}");
            assert!(shown.contains(&token[..4]), "{shown}");
        }
    }
}
