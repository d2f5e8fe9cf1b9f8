//! Where leases live: the atomic grant / renew / release operations and the
//! release notifications that wake waiters.
//!
//! Five backends keep the same contract, each implementing the one seam
//! (the `Backend` trait, `backend.rs`) behind [`Store`], which owns what they
//! share (the fence floor, the lock/semaphore routing); the numbers of the
//! contract (reply codes, the linger) are declared once, in `contract.rs`.
//! One conformance suite (`tests/conformance.rs`) and the model checker run
//! on every backend:
//!
//! * [`MemoryStore`]: embedded, for trying the broker and single-process use.
//! * [`RedisStore`]: shared by any number of broker replicas; every operation
//!   is one Lua script, so it is atomic in Redis.
//! * [`PostgresStore`]: shared the same way, for teams that run PostgreSQL
//!   and no Redis; every operation is one statement calling a PL/pgSQL
//!   function (the Lua scripts' twin), so it is one short transaction.
//! * [`EtcdStore`]: shared the same way, on a Raft store: one etcd lease
//!   per grant (etcd's leader decides expiry), every operation a read of
//!   the name and a transaction that commits only if it is unchanged.
//! * [`ZooKeeperStore`]: shared the same way, on a ZAB ensemble: every
//!   operation a read of the name (after a `sync`) and a multi that commits
//!   only if the name's node is unchanged; expiry judged by the leader's
//!   stamps on writes, fences from zxids (`zookeeper/mod.rs`).
//!
//! # The contract
//!
//! * At most one unexpired lease per name; a grant happens only if none exists.
//! * Renew and release act only if the presented owner token matches.
//! * Every grant of a name gets a fence strictly greater than every earlier
//!   grant of that name. Fences come from a counter in the store (Redis:
//!   one key for a server, one per hash slot on a Cluster, `fence.lua`; a
//!   counter row on PostgreSQL, advanced in the grant's transaction; one
//!   atomic in memory), raised to at least
//!   `max(store clock in µs, caller's floor + 1)`. While the store keeps
//!   its data the counter alone rises, whatever any clock does; once it
//!   lost its data, the clock term is above every earlier fence (no fence
//!   runs ahead of the clock by more than the grants made within one
//!   microsecond), and the floor (the highest fence the broker replica
//!   saw) covers a clock that also stepped back. The store keeps nothing
//!   per free name beyond a short record of its last lease.
//! * A loss is reported once: the first request with an expired lease's
//!   token is answered [`Checked::Expired`], later ones
//!   [`Checked::ExpiredReported`] (see [`Checked`]).
//! * The store's clock decides expiry. Remaining times are what the store says.
//! * Lock-delay (Chubby, Consul): a lease granted with a delay leaves the name
//!   ungrantable for that long after an involuntary end (expiry, revoke), so
//!   that a paused holder's in-flight work dies out first. A release starts
//!   no delay.

mod backend;
pub(crate) mod contract;
mod etcd;
mod memory;
mod postgres;
mod redis;
pub mod safety;
mod url;
mod watch;
pub mod zookeeper;

pub use self::etcd::EtcdStore;
pub use self::memory::MemoryStore;
pub use self::postgres::{schema_for, PostgresStore};
pub use self::redis::{
    lease_key, read_record, LeaseRecord, RecordFormat, RedisStore, SCRIPTS, SCRIPT_CONSTANTS,
};
pub use self::watch::Watch;
pub use self::zookeeper::ZooKeeperStore;
// For the fuzz targets (see `crate::fuzzing`): the parsers of URLs and of
// script replies.
pub(crate) use self::{
    etcd::EtcdUrl,
    redis::{acquire_reply, release_reply, renew_reply, ClusterTarget, SentinelTarget},
};

use std::sync::{
    atomic::{AtomicU64, Ordering},
    Arc,
};

use self::backend::Backend;
use crate::{error::Result, redact::Redacted};

/// How to reach and use a store.
#[derive(Clone, Debug)]
pub struct StoreOptions {
    /// Prefix of every Redis key and channel.
    pub key_prefix: String,
    /// A store call slower than this fails with UNAVAILABLE.
    pub timeout: std::time::Duration,
    /// Redis replicas that must acknowledge every grant and renewal (Redis
    /// `WAIT`) before it counts; 0 for none.
    pub replica_acks: u32,
    /// How long to wait for those acknowledgements.
    pub replica_ack_timeout: std::time::Duration,
    /// Pooled connections to a PostgreSQL store (Redis multiplexes one).
    pub connections: usize,
    /// For a `rediss://` store: the CA certificates (PEM) to verify the
    /// server with, instead of the system's roots.
    pub tls_ca: Option<Vec<u8>>,
    /// For a `rediss://` store: a client certificate and key (PEM), for a
    /// Redis that requires them (`tls-auth-clients yes`, its default).
    pub tls_client: Option<(Vec<u8>, Vec<u8>)>,
    /// For a Redis store: the format of the lease records written (both
    /// are read; brokers before format 2 read only format 1).
    pub record_format: RecordFormat,
}

impl StoreOptions {
    /// Options with `key_prefix` and `timeout`, and no replica
    /// acknowledgements.
    pub fn new(key_prefix: impl Into<String>, timeout: std::time::Duration) -> Self {
        StoreOptions {
            key_prefix: key_prefix.into(),
            timeout,
            replica_acks: 0,
            replica_ack_timeout: std::time::Duration::from_millis(500),
            connections: 16,
            tls_ca: None,
            tls_client: None,
            record_format: RecordFormat::default(),
        }
    }
}

/// What a grant writes (`Debug` redacts the token).
#[derive(Clone)]
pub struct GrantSpec {
    /// The lock name (validated).
    pub name: String,
    /// The new owner token.
    pub token: String,
    /// The holder label.
    pub holder: String,
    /// Lease TTL in milliseconds.
    pub ttl_ms: u64,
    /// Lock-delay in milliseconds: after an involuntary end of this lease
    /// (expiry, revoke) the name cannot be granted for this long. 0: none.
    pub lock_delay_ms: u64,
    /// How many leases the name may have at once: 1 for a lock, more for a
    /// semaphore (each permit its own lease, token and fence).
    pub limit: u32,
    /// The caller waits: if not granted, it joins the name's queue (or
    /// renews its place). Waiters are granted in arrival order; a caller that
    /// tries once never jumps a queue either.
    pub queued: bool,
}

pub use self::contract::{ALL as CONTRACT, QUEUE_LIFETIME, QUEUE_REFRESH};

/// The codes the renew and release scripts (Lua on Redis, PL/pgSQL on
/// PostgreSQL) share for a lease that is not, or no longer, the caller's
/// (`contract::LEASE_*`); `None` for any other code.
pub(crate) fn ended<T>(code: i64, fence: u64) -> Option<Checked<T>> {
    use self::contract::{
        LEASE_EXPIRED, LEASE_EXPIRED_REPORTED, LEASE_NOT_HELD, LEASE_NOT_OWNER, LEASE_RELEASED,
        LEASE_REVOKED,
    };
    Some(match code {
        LEASE_NOT_HELD => Checked::NotHeld,
        LEASE_NOT_OWNER => Checked::NotOwner { fence },
        LEASE_REVOKED => Checked::Revoked { fence },
        LEASE_EXPIRED => Checked::Expired,
        LEASE_RELEASED => Checked::Released,
        LEASE_EXPIRED_REPORTED => Checked::ExpiredReported,
        _ => return None,
    })
}

/// Checks that a batched store call answered once per item it was given
/// (`got` `answers` for `wanted` `items`): the answers are matched to the
/// items by position, so a short or long reply would hand one caller
/// another's outcome.
pub(crate) fn one_answer_each(got: usize, wanted: usize, answers: &str, items: &str) -> Result<()> {
    if got == wanted {
        Ok(())
    } else {
        Err(crate::error::Error::Internal(format!(
            "{got} {answers} for {wanted} {items}"
        )))
    }
}

/// A lease as the store describes it to anyone (no owner token).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LeaseInfo {
    /// The holder label.
    pub holder: String,
    /// The lease's fence.
    pub fence: u64,
    /// Time left before expiry, in milliseconds.
    pub remaining_ms: u64,
    /// The TTL it was granted or last renewed with.
    pub ttl_ms: u64,
    /// Grant time by the store's clock, in ms since the Unix epoch.
    pub granted_at_unix_ms: u64,
    /// The lease's lock-delay.
    pub lock_delay_ms: u64,
}

/// What the store knows of a name.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Described {
    /// The current lease, if the name is held.
    pub lease: Option<LeaseInfo>,
    /// When free: time left of a lock-delay (0 if none).
    pub lock_delay_remaining_ms: u64,
    /// Callers queued for the name, on every broker.
    pub waiters: u64,
    /// Semaphore permits held now (0 for a plain lock).
    pub permits: u64,
}

impl Described {
    /// Nothing is on the name: no lease, permit, waiter or lock-delay (a
    /// listing leaves it out).
    pub fn is_idle(&self) -> bool {
        self.lease.is_none()
            && self.permits == 0
            && self.waiters == 0
            && self.lock_delay_remaining_ms == 0
    }
}

/// A name a listing found something on.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Listed {
    /// The name, as stored (with its tenant's prefix).
    pub name: String,
    /// What is on it.
    pub described: Described,
}

/// One page of a listing ([`Store::list`]).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Listing {
    /// The names of the page with something on them, in name order.
    pub entries: Vec<Listed>,
    /// Where the next page starts (a name, or a Redis SCAN cursor: the
    /// backend's own); `None` when the walk is done.
    pub next: Option<String>,
}

/// The refusal of a listing's page token that no listing gave: one the
/// lease layer finds unreadable, or one a backend cannot resume from
/// ([`Backend::list`]).
pub(crate) fn bad_token() -> crate::Error {
    crate::Error::bad(
        "page_token",
        "the page token is not one a listing gave: pass the next_page_token of the \
         previous page unchanged, with the same prefix and tenant, or none to start",
        Vec::new(),
    )
}

/// The outcome of an acquire attempt.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Acquired {
    /// The lease was written: its fence.
    Granted {
        /// The fencing token of this grant.
        fence: u64,
        /// Expired leases of the name whose loss nobody had reported (their
        /// holders never asked since), which this attempt found: reported
        /// now, once, for the caller to count. Each is recorded for its
        /// token, whose holder then hears [`Checked::ExpiredReported`].
        expired: u32,
    },
    /// Not granted, and why.
    Blocked(Blocked),
}

/// Why an acquire attempt was not granted.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BlockedBy {
    /// Someone holds the name.
    Holder,
    /// The name is free but in its lock-delay after an involuntary loss.
    LockDelay,
    /// The name is free but callers queued earlier come first.
    Queue,
}

/// An acquire attempt that was not granted.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Blocked {
    /// Why.
    pub by: BlockedBy,
    /// The current (or, in a lock-delay, the lost) lease's fence.
    pub fence: u64,
    /// When it is worth trying again: the lease's expiry, the delay's end, or
    /// when the first in line must have called again.
    pub remaining_ms: u64,
    /// The current holder's label (empty unless held).
    pub holder: String,
    /// The caller's place in the queue (1 = next); 0 if not queued.
    pub position: u64,
    /// The queue's length.
    pub queued: u64,
    /// As [`Acquired::Granted::expired`].
    pub expired: u32,
}

/// The outcome of a renew, a look ([`Store::check`]) or a release.
///
/// The store tells a lease's own end apart from a stranger's token: a lease's
/// record outlives its end by a while (`LINGER_MS`, `contract.rs`), and
/// so does a record per token of how it ended (released, revoked, or expired
/// and reported), so that the first request about an expired lease is
/// answered [`Checked::Expired`] (the loss, to count once), every later one
/// [`Checked::ExpiredReported`], and one with a token the store never saw
/// neither.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Checked<T> {
    /// The token matched and the operation was applied.
    Done(T),
    /// The store has no record of a lease of this token: never held here,
    /// its record lapsed, or the store lost its data.
    NotHeld,
    /// Another owner holds the name, and the store has no record of this
    /// token (a stranger's token, or one whose record lapsed).
    NotOwner {
        /// The current holder's fence.
        fence: u64,
    },
    /// This very lease was revoked by an operator.
    Revoked {
        /// The revoked lease's fence.
        fence: u64,
    },
    /// This token's lease expired, and this is the first request that
    /// learns it: the one loss to count. (Once the name was granted again,
    /// the grant reported it: see [`Acquired::Granted::expired`].)
    Expired,
    /// This token's lease expired, and its loss was reported already (to an
    /// earlier request of its holder, or to the grant that found it
    /// expired): not a loss to count again. Kept per token, not read off
    /// the name's record: the grant that reports an expiry overwrites or
    /// drops the lease, and without this its holder's next request would
    /// find no record of its token at all, which a KeepAlive session that
    /// believes the lease cannot have expired yet (it was renewed elsewhere
    /// with a shorter TTL) takes for a store that lost its data.
    ExpiredReported,
    /// This token released the lease (a retried release, or a heartbeat
    /// that crossed the release): nothing was lost.
    Released,
}

/// The outcome of a revoke.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Revocation {
    /// The lease with this fence was revoked now.
    Revoked {
        /// Its fence.
        fence: u64,
    },
    /// The name's last lease was revoked already and nothing was granted
    /// since (a retried Revoke): the work is done.
    Already {
        /// Its fence.
        fence: u64,
    },
    /// No lease was held.
    NotHeld,
}

/// One lease of a batch renewal (`Debug` redacts the token).
#[derive(Clone)]
pub struct RenewItem {
    /// The lock name (validated).
    pub name: String,
    /// The presented owner token.
    pub token: String,
    /// The new TTL, or `None` to keep the lease's own.
    pub ttl_ms: Option<u64>,
}

impl std::fmt::Debug for GrantSpec {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("GrantSpec")
            .field("name", &self.name)
            .field("token", &Redacted(&self.token))
            .field("holder", &self.holder)
            .field("ttl_ms", &self.ttl_ms)
            .field("lock_delay_ms", &self.lock_delay_ms)
            .field("limit", &self.limit)
            .field("queued", &self.queued)
            .finish()
    }
}

impl std::fmt::Debug for RenewItem {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RenewItem")
            .field("name", &self.name)
            .field("token", &Redacted(&self.token))
            .field("ttl_ms", &self.ttl_ms)
            .finish()
    }
}

/// A renewal that was applied.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Renewed {
    /// The TTL applied, in milliseconds.
    pub ttl_ms: u64,
    /// The lease's fence.
    pub fence: u64,
}

/// What a [`Watch`] waits for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Event {
    /// The name's lease ended by release or revocation (what waiters need).
    Released,
    /// The name was granted (what leader observers need, besides releases).
    Granted,
}

impl Event {
    pub(crate) fn suffix(self) -> &'static str {
        match self {
            Event::Released => "released",
            Event::Granted => "granted",
        }
    }
}

/// A lease store: one backend ([`backend::Backend`]), and what every
/// backend needs around it, owned here once: the fence floor, the choice
/// between a lock and a semaphore grant, the watch plumbing's entry points.
/// Cheap to clone (the clones share everything).
#[derive(Clone)]
pub struct Store {
    backend: Backends,
    /// The highest fence this replica has seen in any answer, passed to
    /// every grant as a floor: if the store lost its data *and* its clock
    /// stepped back, fences issued from here still do not go backwards.
    floor: Arc<AtomicU64>,
}

/// The backends, one variant each: enum dispatch keeps every call static
/// (the backend's own future, no boxing) and makes the compiler point at
/// every match a new backend must join.
#[derive(Clone)]
enum Backends {
    /// Embedded, in this process.
    Memory(MemoryStore),
    /// Shared, in Redis.
    Redis(RedisStore),
    /// Shared, in PostgreSQL.
    Postgres(PostgresStore),
    /// Shared, in etcd.
    Etcd(EtcdStore),
    /// Shared, in ZooKeeper.
    ZooKeeper(ZooKeeperStore),
}

/// Calls `$call` with `$s` bound to the store's backend.
macro_rules! dispatch {
    ($self:ident, $s:ident => $call:expr) => {
        match &$self.backend {
            Backends::Memory($s) => $call,
            Backends::Redis($s) => $call,
            Backends::Postgres($s) => $call,
            Backends::Etcd($s) => $call,
            Backends::ZooKeeper($s) => $call,
        }
    };
}

/// Every kind of `--store` value [`Store::open`] accepts, as it dispatches
/// on them: `memory` (the whole value: the embedded store), then the URL
/// schemes (a value `<scheme>://...`): Redis (one server, Sentinel,
/// Cluster; each with its TLS variant, `rediss...`), PostgreSQL, etcd
/// (`etcds`: with TLS) and ZooKeeper (`zookeepers`: with TLS).
/// docs/stores.md lists the same, and tests/ecosystem.rs fails when the
/// two differ.
pub const SCHEMES: &[&str] = &[
    "memory",
    "redis",
    "rediss",
    "redis+sentinel",
    "rediss+sentinel",
    "redis+cluster",
    "rediss+cluster",
    "postgres",
    "postgresql",
    "etcd",
    "etcds",
    "zookeeper",
    "zookeepers",
];

/// The entry of [`SCHEMES`] a `--store` value names, if any.
fn scheme_of(url: &str) -> Option<&'static str> {
    SCHEMES.iter().copied().find(|&scheme| {
        if scheme == "memory" {
            url == scheme
        } else {
            url.strip_prefix(scheme)
                .is_some_and(|rest| rest.starts_with("://"))
        }
    })
}

impl Store {
    fn new(backend: Backends) -> Store {
        Store {
            backend,
            floor: Arc::new(AtomicU64::new(0)),
        }
    }

    /// An embedded store, in this process (`--store memory`).
    pub fn memory() -> Store {
        Store::new(Backends::Memory(MemoryStore::new()))
    }

    /// Opens the store a `--store` value names: `memory`, or a URL of one of
    /// the [`SCHEMES`]: `redis://` / `rediss://`, `redis+sentinel://`,
    /// `redis+cluster://` (each with a TLS variant, `rediss+...`),
    /// `postgres://` / `postgresql://`, `etcd://` / `etcds://`, or
    /// `zookeeper://` / `zookeepers://`.
    pub fn open(url: &str, options: &StoreOptions) -> Result<Store> {
        // Before any store client can ask rustls for the default provider.
        crate::crypto::install();
        let backend = match scheme_of(url) {
            Some("memory") => Backends::Memory(MemoryStore::new()),
            Some(
                "redis" | "rediss" | "redis+sentinel" | "rediss+sentinel" | "redis+cluster"
                | "rediss+cluster",
            ) => Backends::Redis(RedisStore::open(url, options)?),
            Some("postgres" | "postgresql") => {
                Backends::Postgres(PostgresStore::open(url, options)?)
            }
            Some("etcd" | "etcds") => Backends::Etcd(EtcdStore::open(url, options)?),
            Some("zookeeper" | "zookeepers") => {
                Backends::ZooKeeper(ZooKeeperStore::open(url, options)?)
            }
            Some(other) => {
                return Err(crate::Error::Internal(format!(
                    "the store scheme '{other}' is in SCHEMES but opens no store"
                )))
            }
            None => {
                return Err(crate::Error::InvalidArgument(format!(
                    "unknown store '{}': use 'memory' or a URL of one of the schemes {}",
                    crate::redact::url(url),
                    SCHEMES
                        .iter()
                        .filter(|&&s| s != "memory")
                        .map(|s| format!("{s}://"))
                        .collect::<Vec<_>>()
                        .join(", ")
                )))
            }
        };
        Ok(Store::new(backend))
    }

    /// Raises the floor to a fence an answer carried.
    fn saw(&self, fence: u64) {
        self.floor.fetch_max(fence, Ordering::Relaxed);
    }

    /// Raises the floor to the fence a lease outcome carries, if any.
    fn saw_outcome<T>(&self, outcome: &Checked<T>, fence_of: impl Fn(&T) -> u64) {
        match outcome {
            Checked::Done(done) => self.saw(fence_of(done)),
            Checked::NotOwner { fence } | Checked::Revoked { fence } => self.saw(*fence),
            Checked::NotHeld | Checked::Expired | Checked::ExpiredReported | Checked::Released => {}
        }
    }

    /// Grants the lease if the name is free: a lock when `spec.limit` is
    /// 1, one of the name's permits when it is more.
    pub async fn acquire(&self, spec: &GrantSpec) -> Result<Acquired> {
        let floor = self.floor.load(Ordering::Relaxed);
        let acquired = if spec.limit > 1 {
            dispatch!(self, s => s.acquire_permit(spec, floor).await)
        } else {
            dispatch!(self, s => s.acquire_lock(spec, floor).await)
        }?;
        self.saw(match &acquired {
            Acquired::Granted { fence, .. } => *fence,
            Acquired::Blocked(blocked) => blocked.fence,
        });
        Ok(acquired)
    }

    /// Extends the lease to `ttl_ms` from now (or its own TTL when `None`) if
    /// `token` holds it.
    pub async fn renew(
        &self,
        name: &str,
        token: &str,
        ttl_ms: Option<u64>,
    ) -> Result<Checked<Renewed>> {
        let renewed = dispatch!(self, s => s.renew(name, token, ttl_ms).await)?;
        self.saw_outcome(&renewed, |r| r.fence);
        Ok(renewed)
    }

    /// Renews every item, in one store round trip; one outcome per item, in
    /// order.
    pub async fn renew_many(&self, items: &[RenewItem]) -> Result<Vec<Checked<Renewed>>> {
        let outcomes = dispatch!(self, s => s.renew_many(items).await)?;
        one_answer_each(outcomes.len(), items.len(), "outcomes", "renewals")?;
        for outcome in &outcomes {
            self.saw_outcome(outcome, |r| r.fence);
        }
        Ok(outcomes)
    }

    /// What became of `token`'s lease on `name`, without extending it:
    /// [`Checked::Done`] while it lives (with its TTL and fence), else as
    /// [`Store::renew`] answers (an expiry seen here first is reported here).
    pub async fn check(&self, name: &str, token: &str) -> Result<Checked<Renewed>> {
        let checked = dispatch!(self, s => s.check(name, token).await)?;
        self.saw_outcome(&checked, |r| r.fence);
        Ok(checked)
    }

    /// Deletes the lease if `token` holds it, and wakes the name's waiters on
    /// every replica.
    pub async fn release(&self, name: &str, token: &str) -> Result<Checked<()>> {
        let released = dispatch!(self, s => s.release(name, token).await)?;
        self.saw_outcome(&released, |()| 0);
        Ok(released)
    }

    /// Ends the current lease on `name`, whoever holds it; its lock-delay
    /// starts now and waiters are woken.
    pub async fn revoke(&self, name: &str) -> Result<Revocation> {
        let revocation = dispatch!(self, s => s.revoke(name).await)?;
        if let Revocation::Revoked { fence } | Revocation::Already { fence } = revocation {
            self.saw(fence);
        }
        Ok(revocation)
    }

    /// The current lease on `name`, if any, and any lock-delay running.
    pub async fn describe(&self, name: &str) -> Result<Described> {
        let (described, fence) = dispatch!(self, s => s.describe(name).await)?;
        self.saw(fence);
        Ok(described)
    }

    /// One page of the names that start with `prefix` with something on
    /// them (a lease, permits, waiters, a lock-delay), looking at no more
    /// than `budget` names in the store, from `resume` (the `next` of the
    /// page before; `None` to start). See [`Backend::list`] for what a walk
    /// promises.
    pub async fn list(&self, prefix: &str, resume: Option<&str>, budget: usize) -> Result<Listing> {
        let (listing, fence) = dispatch!(self, s => s.list(prefix, resume, budget.max(1)).await)?;
        self.saw(fence);
        Ok(listing)
    }

    /// Starts watching `name` for `event`. When this returns, every later
    /// such event wakes the watch (on Redis: the subscription is confirmed),
    /// so a caller that looks at the name *after* `watch` and then awaits
    /// [`Watch::notified`] cannot miss an event in between.
    ///
    /// `waiter`: the token of a caller waiting to acquire (counted by
    /// [`Store::local_waiters`], and woken by a release only when it is first
    /// in line), or `None` for an observer (woken by every event). A waiter
    /// must have its place in line already (a blocked [`Store::acquire`]
    /// with `queued` took it): the PostgreSQL store notifies the releases
    /// of a name only while someone waits in its line or observes it.
    pub async fn watch(&self, name: &str, event: Event, waiter: Option<&str>) -> Result<Watch> {
        dispatch!(self, s => s.watch(name, event, waiter).await)
    }

    /// [`Store::watch`] for a waiter, done now if that needs no store round
    /// trip (the name's events reach this replica already: another caller
    /// here waits for it, or the store is in memory); `None` otherwise.
    /// Armed *before* the acquire attempt that takes the waiter's place,
    /// it spares the waiter the second look [`Store::watch`] after the
    /// attempt needs (a release in between would go unseen): one store call
    /// less per waiting caller on a contended name.
    pub fn watch_now(&self, name: &str, event: Event, waiter: &str) -> Option<Watch> {
        dispatch!(self, s => s.watchers().watch_now(&s.channel(name, event), Some(waiter)))
    }

    /// Takes a waiter out of the name's queue (its wait ended without a
    /// grant), waking the next in line if it was first.
    pub async fn dequeue(&self, name: &str, token: &str) -> Result<()> {
        dispatch!(self, s => s.dequeue(name, token).await)
    }

    /// Renews the places in `name`'s line of `tokens` (waiters of this
    /// replica), in one store call: each token's rank in the line (0: first
    /// in line), or `None` if it has no place (it lapsed: the waiter must
    /// call [`Store::acquire`] again to take one, at the back). A waiting
    /// caller's place is kept this way, every [`QUEUE_REFRESH`], instead of
    /// by an acquire attempt of its own.
    pub async fn refresh_places(&self, name: &str, tokens: &[String]) -> Result<Vec<Option<u64>>> {
        if tokens.is_empty() {
            return Ok(Vec::new());
        }
        let ranks = dispatch!(self, s => s.refresh_places(name, tokens).await)?;
        one_answer_each(ranks.len(), tokens.len(), "ranks", "places")?;
        Ok(ranks)
    }

    /// Wakes the callers waiting on this replica to acquire `name` with
    /// `tokens` (their [`Watch`]es), and no other watch of the name.
    pub fn wake_waiters(&self, name: &str, tokens: &[&str]) {
        dispatch!(self, s => s.watchers().wake_waiters(&s.channel(name, Event::Released), tokens));
    }

    /// The TTL (or lock-delay) the store applies when asked for `ms`: `ms`,
    /// or more on a store whose leases have a coarser unit (etcd: whole
    /// seconds). The lease layer asks the store for this before it grants
    /// or renews, so that what the holder is told is what the store holds.
    pub fn applied_ms(&self, ms: u64) -> u64 {
        dispatch!(self, s => s.applied_ms(ms))
    }

    /// How long past its TTL a lease may still read as alive (etcd revokes
    /// late; the other stores, never): the broker looks at a lease of an
    /// ended stream only after this more.
    pub fn expiry_lag(&self) -> std::time::Duration {
        dispatch!(self, s => s.expiry_lag())
    }

    /// Callers waiting on this replica to acquire `name`.
    pub fn local_waiters(&self, name: &str) -> usize {
        dispatch!(self, s => s.watchers().waiters(&s.channel(name, Event::Released)))
    }

    /// Checks that the store answers and takes writes. The ping also reads
    /// the store's clock, the clock that decides when leases expire, so that
    /// the broker can notice it stepping (the memory store's clock is this
    /// process's own: no reading), and the store's settings under which it
    /// may lose leases ([`safety`]). A store that answers but takes no
    /// writes (a Redis replica, a PostgreSQL standby or a server set
    /// read-only) fails the ping: no call could succeed.
    pub async fn ping(&self) -> Result<Ping> {
        dispatch!(self, s => s.ping().await)
    }
}

/// The error of a store call that took longer than the store timeout, in
/// the words every backend uses: `store` is the store's name ("Redis",
/// "PostgreSQL"), `op` the call.
pub(crate) fn timed_out(store: &str, op: &str, timeout: std::time::Duration) -> crate::Error {
    crate::Error::Unavailable(format!(
        "{store} did not answer {op} within {} ms (the store timeout)",
        timeout.as_millis()
    ))
}

/// What one health ping learnt of the store.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Ping {
    /// The store's clock, if it has one of its own.
    pub clock: Option<ClockReading>,
    /// Its settings that may lose leases.
    pub settings: safety::Settings,
}

/// The store's clock as one health ping read it. The store read its clock
/// at some moment between `sent` and `received` (this process's monotonic
/// clock), so the reading is only as precise as the round trip was short.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ClockReading {
    /// The store's wall clock, in µs since the Unix epoch.
    pub store_unix_us: u64,
    /// Just before the request was sent.
    pub sent: std::time::Instant,
    /// Just after the answer arrived.
    pub received: std::time::Instant,
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Whether opening `url` failed as an unknown store (or as a scheme of
    /// [`SCHEMES`] that opens nothing).
    fn refused_as_unknown(url: &str) -> bool {
        let options = StoreOptions::new("leasehold:", std::time::Duration::from_secs(1));
        match Store::open(url, &options) {
            Ok(_) => false,
            Err(crate::Error::InvalidArgument(message)) => message.starts_with("unknown store"),
            Err(crate::Error::Internal(_)) => true,
            Err(_) => false,
        }
    }

    /// Every entry of SCHEMES opens its store (or fails in that store's own
    /// checks, never as an unknown store); a made-up scheme, a prefix of a
    /// scheme and a scheme without `://` are refused.
    #[tokio::test]
    async fn every_scheme_is_opened_and_a_made_up_one_refused() {
        for scheme in SCHEMES {
            let url = if *scheme == "memory" {
                "memory".to_owned()
            } else {
                format!("{scheme}://127.0.0.1:1/leasehold")
            };
            assert_eq!(scheme_of(&url), Some(*scheme), "{url}");
            assert!(!refused_as_unknown(&url), "{url} refused as unknown");
        }
        for url in [
            "mongodb://127.0.0.1:27017",
            "redis+raft://127.0.0.1:6379",
            "redi://127.0.0.1:6379",
            "postgres:127.0.0.1",
            "memory://",
            "memoryx",
            "",
        ] {
            assert_eq!(scheme_of(url), None, "{url}");
            assert!(refused_as_unknown(url), "{url} not refused");
        }
        // The refusal names every scheme.
        let options = StoreOptions::new("leasehold:", std::time::Duration::from_secs(1));
        let Err(crate::Error::InvalidArgument(message)) = Store::open("consul://x", &options)
        else {
            panic!("consul:// opened a store")
        };
        for scheme in SCHEMES.iter().filter(|&&s| s != "memory") {
            assert!(message.contains(&format!("{scheme}://")), "{message}");
        }
    }
}
