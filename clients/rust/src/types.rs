//! What the client hands back, in Rust's terms (durations, times), not the
//! API's generated messages: a program using the client never needs the
//! proto crate's types.

use std::{
    fmt,
    time::{Duration, SystemTime, UNIX_EPOCH},
};

/// A lease granted by [`crate::Client::grant`] and *not* kept alive: it
/// expires at its TTL unless renewed or released by its owner token (what
/// `leasehold acquire` prints for a shell script).
#[derive(Clone, PartialEq, Eq)]
pub struct Grant {
    /// The lock name.
    pub name: String,
    /// The secret that proves ownership: pass it to renew and release.
    pub owner_token: String,
    /// The fencing token: attach it to every write.
    pub fence: u64,
    /// The TTL the broker applied.
    pub ttl: Duration,
}

impl fmt::Debug for Grant {
    /// The owner token is a secret: only its first characters are shown.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Grant")
            .field("name", &self.name)
            .field(
                "owner_token",
                &format_args!("{}…", self.owner_token.get(..8).unwrap_or("")),
            )
            .field("fence", &self.fence)
            .field("ttl", &self.ttl)
            .finish()
    }
}

impl From<leasehold_proto::Lease> for Grant {
    fn from(lease: leasehold_proto::Lease) -> Self {
        Grant {
            name: lease.name,
            owner_token: lease.owner_token,
            fence: lease.fence,
            ttl: Duration::from_millis(lease.ttl_ms),
        }
    }
}

/// Who holds a lock, as [`crate::Client::describe`] says (never its owner
/// token).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Description {
    /// Whether the name is held as a lock now.
    pub held: bool,
    /// The holder's label.
    pub holder: String,
    /// The current lease's fence.
    pub fence: u64,
    /// Time left on the current lease.
    pub remaining: Duration,
    /// The current lease's TTL.
    pub ttl: Duration,
    /// When the current lease was granted (the store's clock).
    pub granted_at: SystemTime,
    /// The current lease's lock-delay.
    pub lock_delay: Duration,
    /// Time left of a lock-delay in force now (the name is free but
    /// nobody may take it yet).
    pub lock_delay_remaining: Duration,
    /// Callers waiting in line, on every broker replica.
    pub waiters: u64,
    /// Callers waiting on the replica that answered.
    pub local_waiters: u32,
    /// Permits held, for a semaphore.
    pub permits_held: u64,
}

impl From<leasehold_proto::DescribeResponse> for Description {
    fn from(d: leasehold_proto::DescribeResponse) -> Self {
        Description {
            held: d.held,
            holder: d.holder,
            fence: d.fence,
            remaining: Duration::from_millis(d.remaining_ms),
            ttl: Duration::from_millis(d.ttl_ms),
            granted_at: UNIX_EPOCH + Duration::from_millis(d.granted_at_unix_ms),
            lock_delay: Duration::from_millis(d.lock_delay_ms),
            lock_delay_remaining: Duration::from_millis(d.lock_delay_remaining_ms),
            waiters: d.waiters,
            local_waiters: d.local_waiters,
            permits_held: d.permits_held,
        }
    }
}

/// A name a listing found something on ([`crate::Client::list_page`]):
/// its state as [`Description`] tells it, with the tenant it belongs to.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Listed {
    /// The tenant whose name it is (`@root` for the root namespace).
    pub tenant: String,
    /// The name, as its holders name it.
    pub name: String,
    /// Whether a lock lease holds it (false for a semaphore).
    pub held: bool,
    /// The holder's label (an election's leader's value).
    pub holder: String,
    /// The lease's fence (an election's term).
    pub fence: u64,
    /// Time left on the lease.
    pub remaining: Duration,
    /// The lease's TTL.
    pub ttl: Duration,
    /// When the lease was granted (the store's clock).
    pub granted_at: SystemTime,
    /// Callers waiting in line, on every broker replica.
    pub waiters: u64,
    /// Permits held, for a semaphore.
    pub permits_held: u64,
    /// Time left of a lock-delay in force now.
    pub lock_delay_remaining: Duration,
}

impl From<leasehold_proto::ListedLock> for Listed {
    fn from(l: leasehold_proto::ListedLock) -> Self {
        Listed {
            tenant: l.tenant,
            name: l.name,
            held: l.held,
            holder: l.holder,
            fence: l.fence,
            remaining: Duration::from_millis(l.remaining_ms),
            ttl: Duration::from_millis(l.ttl_ms),
            granted_at: UNIX_EPOCH + Duration::from_millis(l.granted_at_unix_ms),
            waiters: l.waiters,
            permits_held: l.permits_held,
            lock_delay_remaining: Duration::from_millis(l.lock_delay_remaining_ms),
        }
    }
}

/// One page of a listing: see [`crate::Client::list_page`].
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ListPage {
    /// The names of the page with something on them.
    pub locks: Vec<Listed>,
    /// Empty when the walk is done; else the token of the next page.
    pub next_page_token: String,
}

/// The broker's advice on a stream's TTLs ([`crate::Client::ttl_advice`]):
/// a lease renewed on it has a TTL under 10 times the p99 of the
/// heartbeats' round trips.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TtlAdvice {
    /// The p99 of the stream's last heartbeat round trips.
    pub round_trip_p99: Duration,
    /// The shortest TTL the heartbeat renewed.
    pub shortest_ttl: Duration,
    /// A TTL fit for the latency (what `ttl_auto` gives).
    pub suggested_ttl: Duration,
    /// How many leases of the heartbeat have a TTL too short.
    pub leases_below: u32,
    /// The broker's sentence.
    pub message: String,
}

impl From<leasehold_proto::TtlAdvice> for TtlAdvice {
    fn from(advice: leasehold_proto::TtlAdvice) -> Self {
        TtlAdvice {
            round_trip_p99: Duration::from_micros(advice.round_trip_p99_us),
            shortest_ttl: Duration::from_millis(advice.shortest_ttl_ms),
            suggested_ttl: Duration::from_millis(advice.suggested_ttl_ms),
            leases_below: advice.leases_below,
            message: advice.message,
        }
    }
}
