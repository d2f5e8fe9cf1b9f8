//! The numbers of the lease contract that every store's code shares,
//! declared once.
//!
//! The Redis store's Lua scripts and the PostgreSQL store's PL/pgSQL
//! functions answer with reply codes, and keep a lease's record for a
//! linger after its end; the memory store and the Rust readers of those
//! replies need the same numbers. Each is declared here only: the Lua and
//! SQL texts name them as placeholders, `__NAME__`, that [`fill`] replaces
//! with the values when the scripts are built and the schema is created
//! (as `__SCHEMA__` stands for the schema's name), and the Rust code names
//! the constants. In Lua, `constants.lua` has the one placeholder
//! `__CONSTANTS__`, which becomes a `local NAME = value` line for every
//! constant, so that the scripts read `LEASE_EXPIRED`, not `-3`.
//!
//! Tests read the values back: from the scripts as Redis runs them and
//! from the functions as PostgreSQL created them (`tests/conformance.rs`,
//! `contract_constants`). A placeholder that names no constant fails the
//! fill of the scripts' and the schema's texts (unit tests below).

use std::time::Duration;

/// Declares the constants, each an `i64` (the type Lua and PL/pgSQL
/// answer with), and [`ALL`], every one of them by name.
macro_rules! contract {
    ($($(#[$doc:meta])* $name:ident = $value:expr;)*) => {
        $($(#[$doc])* pub(crate) const $name: i64 = $value;)*

        /// Every constant of the contract, by the name the Lua and SQL
        /// texts give it.
        pub const ALL: &[(&str, i64)] = &[$((stringify!($name), $name)),*];
    };
}

contract! {
    /// How long, in milliseconds, a lease's record outlives the lease's
    /// end (its expiry as last granted or renewed, beyond any lock-delay;
    /// its release; its revocation), and a record of how a token's lease
    /// ended outlives that end. Within it, the holder's late renewal or
    /// release still finds its own lease, so the broker can tell it
    /// "expired" and count the loss once (later requests are told the loss
    /// was reported already), a heartbeat that crossed a release is told
    /// "released" (not a loss), and a retried release or revoke reports the
    /// success of its first try. A holder that asks later is told "not
    /// held". See [`LINGER`].
    LINGER_MS = 10_000;

    // An acquire attempt's outcome (acquire.lua, semaphore_acquire.lua,
    // queue.lua; acquire() and semaphore_acquire() in schema.sql).

    /// Not granted: the name is held ([`super::BlockedBy::Holder`]).
    GRANT_HELD = 0;
    /// Granted.
    GRANT_GRANTED = 1;
    /// Not granted: the name is free but in its lock-delay
    /// ([`super::BlockedBy::LockDelay`]).
    GRANT_LOCK_DELAY = 2;
    /// Not granted: callers queued earlier come first
    /// ([`super::BlockedBy::Queue`]).
    GRANT_QUEUE = 3;
    /// Not granted: the store began the attempt after the broker had given
    /// up on it (PostgreSQL's not-after, postgres/deadline.rs).
    GRANT_TOO_LATE = 4;

    // A lease as a renewal, a look or a release finds it (renew_lease.lua,
    // release.lua; record_end(), renew_lock(), renew_permit(), release() in
    // schema.sql), mapped to [`super::Checked`] by [`super::ended`].

    /// The store has no record of a lease of this token
    /// ([`super::Checked::NotHeld`]).
    LEASE_NOT_HELD = 0;
    /// The token matched and the operation was applied
    /// ([`super::Checked::Done`]).
    LEASE_DONE = 1;
    /// A release of a lease this token released already: the work is done
    /// ([`super::Checked::Released`], as release answers it).
    LEASE_RELEASED_ALREADY = 2;
    /// renew_lock.lua only: the name is not held as a lock (look among its
    /// permits).
    LEASE_NOT_A_LOCK = 3;
    /// Another owner holds the name ([`super::Checked::NotOwner`]).
    LEASE_NOT_OWNER = -1;
    /// This lease was revoked ([`super::Checked::Revoked`]).
    LEASE_REVOKED = -2;
    /// This token's lease expired, first heard now
    /// ([`super::Checked::Expired`]).
    LEASE_EXPIRED = -3;
    /// This token released the lease ([`super::Checked::Released`], as a
    /// renewal or a look answers it).
    LEASE_RELEASED = -4;
    /// This token's lease expired, its loss reported already
    /// ([`super::Checked::ExpiredReported`]).
    LEASE_EXPIRED_REPORTED = -5;

    // What a renewal's TTL argument may say besides a TTL (renew_lease.lua;
    // renew_lock(), renew_permit() in schema.sql).

    /// Keep the lease's own TTL.
    TTL_KEEP = 0;
    /// Only look: report the lease's state without extending it
    /// ([`super::Store::check`]).
    TTL_LOOK = -1;

    /// A token with no place in the line, in refresh's ranks (refresh.lua,
    /// refresh() in schema.sql; any negative rank reads as none).
    RANK_NONE = -1;

    // A revoke's outcome (revoke.lua, revoke() in schema.sql), as
    // [`super::Revocation`].

    /// No lease was held ([`super::Revocation::NotHeld`]).
    REVOKE_NOTHING = 0;
    /// The lease was revoked now ([`super::Revocation::Revoked`]).
    REVOKE_DONE = 1;
    /// The name's last lease was revoked already
    /// ([`super::Revocation::Already`]).
    REVOKE_ALREADY = 2;
}

/// A TTL as a renewal's TTL argument (a TTL is never 0 or negative: the
/// lease layer bounds it below; past `i64::MAX` it saturates).
pub(crate) fn ttl_arg(ttl_ms: u64) -> i64 {
    i64::try_from(ttl_ms).unwrap_or(i64::MAX)
}

/// [`LINGER_MS`] as a duration, for the memory store.
pub(crate) const LINGER: Duration = Duration::from_millis(LINGER_MS.unsigned_abs());

/// How long a queued waiter keeps its place without being refreshed. Its
/// broker refreshes it every [`QUEUE_REFRESH`]
/// ([`super::Store::refresh_places`]), so a live waiter never lapses, and
/// the waiters of a broker that died leave within this.
pub const QUEUE_LIFETIME: Duration = Duration::from_secs(3);

/// How often a broker renews the places of its waiting callers.
pub const QUEUE_REFRESH: Duration = Duration::from_secs(1);

/// The placeholder of `constants.lua` that becomes every constant's
/// `local` line.
const LUA_CONSTANTS: &str = "CONSTANTS";

/// `text` with every placeholder `__NAME__` replaced: a constant's by its
/// value, `__CONSTANTS__` by a Lua `local NAME = value` line per constant;
/// the placeholders named in `keep` are left for the caller (the schema's
/// name). An unknown placeholder is an error naming it.
pub(crate) fn fill(text: &str, keep: &[&str]) -> Result<String, String> {
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(start) = rest.find("__") {
        let after = &rest[start + 2..];
        let len = after
            .find(|c: char| !(c.is_ascii_uppercase() || c.is_ascii_digit() || c == '_'))
            .unwrap_or(after.len());
        // The name ends where the closing `__` starts (a name has no `__`).
        let Some(end) = after[..len].find("__").filter(|&end| end > 0) else {
            out.push_str(&rest[..start + 2]);
            rest = after;
            continue;
        };
        let name = &after[..end];
        out.push_str(&rest[..start]);
        if keep.contains(&name) {
            out.push_str(&rest[start..start + 2 + end + 2]);
        } else if name == LUA_CONSTANTS {
            // Lines of code: only where a line of code can go.
            let after_it = &after[end + 2..];
            if !(out.is_empty() || out.ends_with('\n'))
                || !(after_it.is_empty() || after_it.starts_with('\n'))
            {
                return Err(format!("__{name}__ must be a line of its own"));
            }
            for (constant, value) in ALL {
                out.push_str(&format!("local {constant} = {value}\n"));
            }
        } else if let Some((_, value)) = ALL.iter().find(|(constant, _)| *constant == name) {
            out.push_str(&value.to_string());
        } else {
            return Err(format!(
                "the placeholder __{name}__ names no constant of the contract"
            ));
        }
        rest = &after[end + 2..];
    }
    out.push_str(rest);
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn placeholders_become_their_values() {
        assert_eq!(
            fill("return {__LEASE_EXPIRED__, 0} -- __LINGER_MS__", &[]).unwrap(),
            "return {-3, 0} -- 10000"
        );
        assert_eq!(
            fill("SELECT __SCHEMA__.f(__GRANT_QUEUE__)", &["SCHEMA"]).unwrap(),
            "SELECT __SCHEMA__.f(3)"
        );
        // Not placeholders: Lua's metamethods, a lone `__`, lowercase.
        for text in ["t.__index", "a__b", "__", "____", "__x__", "x = __"] {
            assert_eq!(fill(text, &[]).unwrap(), text);
        }
        let err = fill("return __LEASE_EXPIRD__", &[]).unwrap_err();
        assert!(err.contains("__LEASE_EXPIRD__"), "{err}");
        // The Lua constants are lines: inside a comment or an expression
        // they would break the script.
        for text in ["-- see __CONSTANTS__ below\n", "x = 1 __CONSTANTS__\n"] {
            let err = fill(text, &[]).unwrap_err();
            assert!(err.contains("a line of its own"), "{err}");
        }
    }

    #[test]
    fn the_lua_constants_are_one_local_each() {
        let lua = fill("-- the constants:\n__CONSTANTS__\nlocal x = 1\n", &[]).unwrap();
        assert!(lua.starts_with("-- the constants:\nlocal ") && lua.ends_with("\n\nlocal x = 1\n"));
        let lua = fill("__CONSTANTS__", &[]).unwrap();
        assert_eq!(lua.lines().count(), ALL.len());
        assert!(lua.contains("local LEASE_NOT_OWNER = -1\n"), "{lua}");
        assert!(lua.contains("local LINGER_MS = 10000\n"), "{lua}");
    }

    #[test]
    fn names_are_unique_and_the_linger_agrees() {
        let mut names: Vec<&str> = ALL.iter().map(|(name, _)| *name).collect();
        names.sort_unstable();
        names.dedup();
        assert_eq!(names.len(), ALL.len());
        assert_eq!(u128::from(LINGER_MS.unsigned_abs()), LINGER.as_millis());
    }
}
