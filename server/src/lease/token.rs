//! Owner tokens: 128 random bits, written as 32 lowercase hex characters.

/// Length of an owner token in characters.
pub const TOKEN_LEN: usize = 32;

/// A new random owner token from the operating system's CSPRNG.
pub fn generate() -> crate::Result<String> {
    let mut bytes = [0u8; TOKEN_LEN / 2];
    getrandom::fill(&mut bytes)
        .map_err(|e| crate::Error::Internal(format!("no randomness for an owner token: {e}")))?;
    Ok(bytes.iter().map(|b| format!("{b:02x}")).collect())
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
