//! Request validation: the protobuf bytes of a request, decoded as tonic
//! decodes them, then checked field by field as `Leases` checks them before
//! anything reaches the store (`server/src/lease/validate.rs`, in the order of
//! `Leases::acquire`, `renew`, `release`, `describe`/`revoke` and the
//! KeepAlive session).
//!
//! Asserts that validation accepts exactly what it documents (an
//! independent statement of each rule, with the default limits), resolves
//! TTLs, waits and limits as documented, refuses with INVALID_ARGUMENT and a
//! message naming the field, never repeats an owner token it refuses, and
//! that a valid (tenant, name) maps to a store name that reads back as that
//! pair and as no other.

#![no_main]

use std::time::Duration;

use leasehold_server::{
    config::Limits,
    lease::{store_name, validate, NAMESPACE_SEPARATOR, ROOT_TENANT},
    proto::{
        AcquireRequest, DescribeRequest, KeepAliveRequest, ReleaseRequest, RenewRequest,
        RevokeRequest,
    },
    Error,
};
use libfuzzer_sys::fuzz_target;
use prost::Message;

fn limits() -> Limits {
    Limits::default()
}

// The rules as documented (docs/configuration.md, proto, validate.rs), with the defaults.

fn name_ok(name: &str) -> bool {
    (1..=256).contains(&name.len())
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b".:_/-".contains(&b))
}

fn holder_ok(holder: &str) -> bool {
    holder.len() <= 256 && !holder.chars().any(char::is_control)
}

fn tenant_ok(id: &str) -> bool {
    (1..=64).contains(&id.len())
        && id
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-')
}

fn token_ok(token: &str) -> bool {
    token.len() == 32
        && token
            .bytes()
            .all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'))
}

/// 0: the default; else 500 ms ..= 1 h.
fn ttl_ok(ttl_ms: u64) -> bool {
    ttl_ms == 0 || (500..=3_600_000).contains(&ttl_ms)
}

/// A refusal is a bad argument, `argument` (the structured detail a client
/// reads), with a message for people.
fn refused<T: std::fmt::Debug>(r: leasehold_server::Result<T>, argument: &str) -> String {
    match r {
        Err(Error::BadArgument {
            message,
            argument: said,
            ..
        }) => {
            assert_eq!(said, argument, "{message:?}");
            assert!(!message.is_empty());
            message
        }
        other => panic!("{argument}: expected a bad argument, got {other:?}"),
    }
}

fn name(l: &Limits, name: &str) {
    match validate::name(l, name) {
        Ok(()) => assert!(name_ok(name), "accepted name {name:?}"),
        r => {
            assert!(!name_ok(name), "refused name {name:?}");
            refused(r, "name");
        }
    }
}

fn owner_token(token: &str) {
    match validate::owner_token(token) {
        Ok(()) => assert!(token_ok(token), "accepted token {token:?}"),
        r => {
            assert!(!token_ok(token), "refused token {token:?}");
            let m = refused(r, "owner_token");
            // A token is a secret, even a malformed one (a truncated copy):
            // the message is the one a token of as many `x` gets, unless the
            // token is words of that message itself.
            let blank = "x".repeat(token.chars().count());
            let Err(Error::BadArgument { message: other, .. }) = validate::owner_token(&blank)
            else {
                panic!("{blank:?} accepted");
            };
            assert!(!m.contains(token) || other.contains(token), "{m:?}");
        }
    }
}

fn ttl(l: &Limits, ttl_ms: u64, default: Option<Duration>) {
    match validate::ttl(l, ttl_ms, default) {
        Ok(t) => {
            assert!(ttl_ok(ttl_ms), "accepted ttl {ttl_ms}");
            let want = if ttl_ms == 0 {
                default.map(|d| d.as_millis() as u64)
            } else {
                Some(ttl_ms)
            };
            assert_eq!(t, want);
        }
        r => {
            assert!(!ttl_ok(ttl_ms), "refused ttl {ttl_ms}");
            refused(r, "ttl");
        }
    }
}

/// A tenant as Describe and Revoke take it: empty (the caller's own), the
/// root namespace's id, or an ordinary id.
fn tenant(id: &str) {
    if id.is_empty() || id == ROOT_TENANT {
        return;
    }
    match validate::tenant(id) {
        Ok(()) => assert!(tenant_ok(id), "accepted tenant {id:?}"),
        r => {
            assert!(!tenant_ok(id), "refused tenant {id:?}");
            refused(r, "tenant");
        }
    }
}

/// A valid (tenant, name) reads back from its store name, and no other
/// valid pair has that store name.
fn namespaced(l: &Limits, id: &str, lock: &str) {
    if validate::name(l, lock).is_err() {
        return;
    }
    let stored = if id == ROOT_TENANT || id.is_empty() {
        let stored = store_name(ROOT_TENANT, lock);
        assert_eq!(stored, lock);
        assert!(!stored.contains(NAMESPACE_SEPARATOR));
        return;
    } else if validate::tenant(id).is_ok() {
        store_name(id, lock)
    } else {
        return;
    };
    assert_eq!(stored.split_once(NAMESPACE_SEPARATOR), Some((id, lock)));
}

fuzz_target!(|data: &[u8]| {
    let Some((&kind, bytes)) = data.split_first() else {
        return;
    };
    let l = limits();
    match kind % 6 {
        0 => {
            let Ok(r) = AcquireRequest::decode(bytes) else {
                return;
            };
            // Leases::acquire, in its order.
            name(&l, &r.name);
            match validate::holder(&l, &r.holder) {
                Ok(()) => assert!(holder_ok(&r.holder), "accepted holder {:?}", r.holder),
                e => {
                    assert!(!holder_ok(&r.holder), "refused holder {:?}", r.holder);
                    refused(e, "holder");
                }
            }
            ttl(&l, r.ttl_ms, Some(l.ttl_default));
            match validate::wait(&l, r.wait_timeout_ms) {
                Ok(w) => assert_eq!(w, Duration::from_millis(r.wait_timeout_ms)),
                e => {
                    assert!(
                        r.wait_timeout_ms > 300_000,
                        "refused wait {}",
                        r.wait_timeout_ms
                    );
                    refused(e, "wait");
                }
            }
            let delay = match validate::lock_delay(&l, r.lock_delay_ms) {
                Ok(d) => {
                    assert!(d == r.lock_delay_ms && d <= 60_000, "lock_delay {d}");
                    d
                }
                e => {
                    assert!(
                        r.lock_delay_ms > 60_000,
                        "refused lock_delay {}",
                        r.lock_delay_ms
                    );
                    refused(e, "lock_delay");
                    return;
                }
            };
            match validate::limit(&l, r.limit, delay) {
                Ok(n) => {
                    assert!(r.limit <= 1_000 && (r.limit <= 1 || delay == 0));
                    assert_eq!(n, r.limit.max(1), "0 and 1 mean a plain lock");
                }
                e => {
                    assert!(
                        r.limit > 1_000 || (r.limit > 1 && delay > 0),
                        "refused limit {}",
                        r.limit
                    );
                    refused(
                        e,
                        if r.limit > 1_000 {
                            "limit"
                        } else {
                            "lock_delay"
                        },
                    );
                }
            }
        }
        1 => {
            let Ok(r) = RenewRequest::decode(bytes) else {
                return;
            };
            name(&l, &r.name);
            owner_token(&r.owner_token);
            ttl(&l, r.ttl_ms, None);
        }
        2 => {
            let Ok(r) = ReleaseRequest::decode(bytes) else {
                return;
            };
            name(&l, &r.name);
            owner_token(&r.owner_token);
        }
        3 => {
            let Ok(r) = DescribeRequest::decode(bytes) else {
                return;
            };
            name(&l, &r.name);
            tenant(&r.tenant);
            namespaced(&l, &r.tenant, &r.name);
        }
        4 => {
            let Ok(r) = RevokeRequest::decode(bytes) else {
                return;
            };
            name(&l, &r.name);
            tenant(&r.tenant);
            namespaced(&l, &r.tenant, &r.name);
        }
        _ => {
            let Ok(r) = KeepAliveRequest::decode(bytes) else {
                return;
            };
            // The session checks each lease of a heartbeat on its own.
            for lease in &r.leases {
                name(&l, &lease.name);
                owner_token(&lease.owner_token);
                ttl(&l, lease.ttl_ms, None);
            }
        }
    }
});
