//! What the lease rules report as they work. The rules count nothing
//! themselves: they tell an [`Events`] sink, which the server gives them
//! (its Prometheus metrics, `metrics.rs`). So the domain knows no metrics
//! library, and what each event means is decided here, once.

use std::time::Duration;

use super::Scope;

/// Why a holder lost its lease.
///
/// Each loss is reported once, by whoever learns it first (the store keeps a
/// short record of every lease's end and reports an expiry once), and only
/// a lease that ended without its holder's consent is a loss.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LossReason {
    /// The TTL ran out before a renewal; learnt from the holder's own late
    /// renewal or release, or by the broker whose KeepAlive stream carried
    /// it, a moment after the TTL, when that stream broke.
    Expired,
    /// The TTL ran out and the name was acquired again before anyone
    /// learnt it: taken over after expiry (reported by that acquire).
    NotOwner,
    /// The store lost the lease (restarted empty, flushed, evicted).
    StoreLost,
    /// An operator revoked the lease.
    Revoked,
}

impl LossReason {
    /// Every reason.
    pub const ALL: [LossReason; 4] = [
        LossReason::Expired,
        LossReason::NotOwner,
        LossReason::StoreLost,
        LossReason::Revoked,
    ];

    /// The reason as the broker says it everywhere, in its logs and as the
    /// `reason` label of `lease_lost_total`: the proto's `LossReason` name
    /// without its prefix, in Prometheus's lower case.
    pub fn as_str(self) -> &'static str {
        match self {
            LossReason::Expired => "expired",
            LossReason::NotOwner => "not_owner",
            LossReason::StoreLost => "store_lost",
            LossReason::Revoked => "revoked",
        }
    }
}

/// Why the lease rules refused a caller before doing anything.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Refusal {
    /// A credential without the permission the call needs.
    PermissionDenied,
    /// A tenant's or a connection's cap (leases, waiters, streams, rate).
    Cap,
}

/// The sink of what happens to leases.
pub trait Events: Send + Sync + std::fmt::Debug {
    /// A lease or permit was granted, `waited` after the call began.
    fn acquired(&self, waited: Duration);
    /// An Acquire gave up (the name stayed taken until its wait ran out).
    fn acquire_refused(&self);
    /// A holder released its lease (once per lease, whatever the retries).
    fn released(&self);
    /// A grant nobody learnt of (its call failed) was released.
    fn orphan_released(&self);
    /// A lease ended without its holder's consent.
    fn lost(&self, reason: LossReason);
    /// A renewal, of one lease or of a heartbeat's leases in one store
    /// round trip, took `latency`.
    fn renewed(&self, latency: Duration);
    /// A heartbeat was answered with TTL advice (`advice.rs`): a lease of
    /// tenant `tenant`'s stream has a TTL under 10 times the stream's p99
    /// round trip.
    fn ttl_advised(&self, tenant: &str);
    /// A store call failed (unreachable, timed out, or an unexpected answer).
    fn store_failed(&self);
    /// One more (`true`) or one fewer (`false`) Acquire call waits.
    fn waiting(&self, more: bool);
    /// One more (`true`) or one fewer (`false`) KeepAlive stream
    /// ([`Scope::Named`]) or Session stream ([`Scope::Held`]) is open.
    fn stream(&self, scope: Scope, more: bool);
    /// A caller was refused.
    fn refused(&self, why: Refusal);
}

/// Reports nothing: for tools and tests that do not look.
#[derive(Debug)]
pub struct NoEvents;

impl Events for NoEvents {
    fn acquired(&self, _: Duration) {}
    fn acquire_refused(&self) {}
    fn released(&self) {}
    fn orphan_released(&self) {}
    fn lost(&self, _: LossReason) {}
    fn renewed(&self, _: Duration) {}
    fn ttl_advised(&self, _: &str) {}
    fn store_failed(&self) {}
    fn waiting(&self, _: bool) {}
    fn stream(&self, _: Scope, _: bool) {}
    fn refused(&self, _: Refusal) {}
}
