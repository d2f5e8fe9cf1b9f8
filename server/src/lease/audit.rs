//! The audit trail: one INFO event per change of a lease's state (granted,
//! released, lost, revoked), under the tracing target [`TARGET`], for a log
//! pipeline to index (`--log-format json` makes each a JSON object with
//! these fields). Each names the lock (as the store knows it: a tenant's
//! locks carry their tenant), and a grant its fence, holder label and TTL;
//! the owner token only by its first characters (`crate::redact`), enough
//! to join a grant with its release, never enough to use it.
//!
//! Why a target of their own: `--audit-log false` (or `RUST_LOG` with
//! `leasehold::audit=off`) quiets them without quieting the rest, and a
//! pipeline can route them apart. A renewal is no change of state and is
//! not logged: a heartbeat renews hundreds of leases a second.

use crate::redact::Redacted;

/// The tracing target of every audit event.
pub const TARGET: &str = "leasehold::audit";

/// A lease (or a semaphore permit: `limit` above 1) was granted.
pub(super) fn granted(lock: &str, fence: u64, holder: &str, ttl_ms: u64, limit: u32, token: &str) {
    tracing::info!(
        target: TARGET,
        event = "granted",
        lock,
        fence,
        holder,
        ttl_ms,
        limit,
        token = %Redacted(token),
        "lease granted"
    );
}

/// Why a lease ended with its holder's consent (or on its behalf).
#[derive(Clone, Copy, Debug)]
pub(super) enum Release {
    /// Its holder released it.
    Holder,
    /// The broker released a grant its caller never heard of (the call
    /// ended as it was granted, or its answer could not be delivered).
    Unheard,
}

/// A lease was released.
pub(super) fn released(lock: &str, token: &str, by: Release) {
    let by = match by {
        Release::Holder => "holder",
        Release::Unheard => "broker: the caller never heard of the grant",
    };
    tracing::info!(target: TARGET, event = "released", lock, by, token = %Redacted(token), "lease released");
}

/// A lease ended without its holder's consent; `reason` as the metric's
/// label says it.
pub(super) fn lost(lock: &str, reason: &str) {
    tracing::info!(target: TARGET, event = "lost", lock, reason, "lease lost");
}

/// An operator revoked the lease of `fence`.
pub(super) fn revoked(lock: &str, fence: u64) {
    tracing::info!(target: TARGET, event = "revoked", lock, fence, "lease revoked");
}
