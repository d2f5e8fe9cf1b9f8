//! Who is asking: tenants, their permissions, and the caps on what one
//! tenant or one connection may take of a broker replica.
//!
//! A tenant owns a namespace of lock names. Its locks live in the store
//! under `tenant|name`: `|` is not allowed in a lock name, so no name a
//! client can send reaches another tenant's lock, whatever it holds (an
//! owner token included). Without `--auth-file` there are no tenants: every
//! caller shares the root namespace, as before authentication existed, and
//! its locks are stored under their bare names.
//!
//! The root namespace is also a tenant an auth file can name, [`ROOT_TENANT`]
//! (`@root`): turning authentication on for existing callers must leave their
//! locks where they are. Otherwise, in a rolling update, a replica without
//! auth (`name`) and one with it (`tenant|name`) grant the same lock to two
//! holders at once. `@` is outside the tenant-id alphabet, so no auth file
//! that loaded before could name it: the reserved name moves no existing
//! tenant's locks.
//!
//! Caps are counted per broker replica, like `--max-waiters`: the replicas
//! share nothing but the store, and a quota kept in the store would cost a
//! round trip on every call and a key outside the lock's Redis Cluster slot.
//! A client that spreads over N replicas can take N times a cap; the caps
//! are there to stop one client from exhausting a replica, not to bill.

use std::{
    collections::HashMap,
    sync::{
        atomic::{AtomicUsize, Ordering},
        Arc, Mutex,
    },
    time::Duration,
};

use tokio::time::Instant;

use super::{
    advice::RoundTrips,
    events::{Events, NoEvents, Refusal},
};
use crate::error::{Error, Result};

/// The separator between a tenant's id and a lock name in the store. Not in
/// the lock-name alphabet (see `validate::name`), so names cannot forge it.
pub const NAMESPACE_SEPARATOR: char = '|';

/// The tenant id of the root namespace: the lock names of callers of a
/// broker without `--auth-file`, stored without a prefix. An auth file maps
/// credentials to it like to any tenant (and its caps apply as to any), so
/// that the callers of a broker keep their locks when authentication is
/// turned on. Outside the alphabet of `validate::tenant` (no ordinary id can
/// be it), and read as what it is in messages, Describe's `tenant` field
/// and the auth file.
pub const ROOT_TENANT: &str = "@root";

/// The store-name prefix of tenant `id`'s locks: `id|`, or none for the
/// root namespace.
fn prefix_of(id: &str) -> String {
    if id == ROOT_TENANT {
        String::new()
    } else {
        format!("{id}{NAMESPACE_SEPARATOR}")
    }
}

/// The store name of lock `name` in tenant `id`'s namespace (`id` is
/// [`ROOT_TENANT`] or an id `validate::tenant` accepts).
pub fn store_name(id: &str, name: &str) -> String {
    let mut qualified = prefix_of(id);
    qualified.push_str(name);
    qualified
}

/// The tenant id and the lock name of a store name: [`store_name`]
/// undone (`tenant|name`, or a bare name of [`ROOT_TENANT`]).
pub fn split_stored(stored: &str) -> (&str, &str) {
    stored
        .split_once(NAMESPACE_SEPARATOR)
        .unwrap_or((ROOT_TENANT, stored))
}

/// Caps on what one tenant, or one connection, may hold at once on a
/// replica; 0 means no cap.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Caps {
    /// Leases held (granted or renewed through this replica, not yet
    /// released or expired).
    pub leases: usize,
    /// Acquire calls waiting.
    pub waiters: usize,
    /// KeepAlive and Observe streams open.
    pub streams: usize,
    /// Requests per second (unary calls and stream opens), with a burst of
    /// one second's worth.
    pub rate: u32,
}

/// What a credential allows.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Permissions {
    /// Acquire, renew, release, keep alive, describe: within the tenant's own
    /// namespace.
    pub use_locks: bool,
    /// Revoke, and describe any tenant's locks.
    pub admin: bool,
}

/// Whose counters a [`Usage`] keeps: named in the messages of refusals.
#[derive(Clone, Debug)]
enum Owner {
    Tenant(String),
    Connection,
}

/// The counters of one tenant or one connection.
#[derive(Debug)]
pub struct Usage {
    owner: Owner,
    caps: Caps,
    waiters: AtomicUsize,
    streams: AtomicUsize,
    /// Rate limit (GCRA): the theoretical arrival time of the next request.
    /// A std mutex: held for a few instructions, never across an await.
    next_arrival: Mutex<Instant>,
}

impl Usage {
    /// Counters for one connection.
    pub fn connection(caps: Caps) -> Arc<Self> {
        Arc::new(Usage::new(Owner::Connection, caps))
    }

    fn new(owner: Owner, caps: Caps) -> Self {
        Usage {
            owner,
            caps,
            waiters: AtomicUsize::new(0),
            streams: AtomicUsize::new(0),
            next_arrival: Mutex::new(Instant::now()),
        }
    }

    /// "tenant 'x'" or "this connection", and the flag of the cap.
    fn who(&self, what: &str) -> (String, String) {
        match &self.owner {
            Owner::Tenant(id) => (format!("tenant '{id}'"), format!("--tenant-max-{what}")),
            Owner::Connection => ("this connection".into(), format!("--conn-max-{what}")),
        }
    }

    /// Admits one request under the rate cap.
    fn admit(&self) -> Result<()> {
        let rate = self.caps.rate;
        if rate == 0 {
            return Ok(());
        }
        let interval = Duration::from_secs(1) / rate;
        let burst = Duration::from_secs(1).saturating_sub(interval);
        let now = Instant::now();
        let mut next = self
            .next_arrival
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let arrival = (*next).max(now);
        if arrival > now + burst {
            let (who, flag) = self.who("rate");
            let retry = arrival - burst - now + Duration::from_millis(1);
            let retry_ms = retry.as_millis();
            return Err(Error::ResourceExhausted {
                message: format!(
                    "{who} sent more than {rate} requests per second ({flag}); \
                     retry in {retry_ms} ms or slow down"
                ),
                limit: flag.trim_start_matches('-').to_owned(),
                retry_after: Some(retry),
            });
        }
        *next = arrival + interval;
        Ok(())
    }

    /// Takes one of `what` under its cap; given back when the slot drops.
    fn take(self: &Arc<Self>, kind: SlotKind) -> Result<Slot> {
        let (counter, cap, what, noun) = match kind {
            SlotKind::Waiter => (
                &self.waiters,
                self.caps.waiters,
                "waiters",
                "callers waiting for locks",
            ),
            SlotKind::Stream => (
                &self.streams,
                self.caps.streams,
                "streams",
                "streams open (heartbeats, sessions, observers)",
            ),
        };
        let taken = counter.fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| {
            (cap == 0 || n < cap).then_some(n + 1)
        });
        if taken.is_err() {
            let (who, flag) = self.who(what);
            return Err(Error::exhausted(
                &flag,
                format!(
                    "{who} already has {cap} {noun} on this broker replica ({flag}); \
                     end some first"
                ),
            ));
        }
        Ok(Slot {
            usage: Arc::clone(self),
            kind,
        })
    }
}

#[derive(Clone, Copy, Debug)]
enum SlotKind {
    Waiter,
    Stream,
}

/// A waiter or stream counted against a tenant's or a connection's cap,
/// given back on drop.
#[derive(Debug)]
pub struct Slot {
    usage: Arc<Usage>,
    kind: SlotKind,
}

impl Drop for Slot {
    fn drop(&mut self) {
        let counter = match self.kind {
            SlotKind::Waiter => &self.usage.waiters,
            SlotKind::Stream => &self.usage.streams,
        };
        counter.fetch_sub(1, Ordering::AcqRel);
    }
}

/// A tenant as a replica knows it: its namespace, its counters and the
/// leases it holds here. Lives as long as the replica (see [`Tenants`]), so
/// that a reload of the credentials does not reset its counts.
#[derive(Debug)]
pub struct Tenant {
    /// The tenant's id; [`ROOT_TENANT`] for the root namespace.
    id: String,
    /// `id|`, or empty for the root namespace.
    prefix: String,
    /// Whether this is the root namespace of a broker without
    /// authentication: administration is then a switch of the broker, which
    /// a refusal names, rather than a permission of a credential.
    open: bool,
    usage: Arc<Usage>,
    /// Counted only when a lease cap is set (tenant or connection).
    ledger: Option<Mutex<Ledger>>,
    /// Where refusals are reported.
    events: Arc<dyn Events>,
    /// The last heartbeat round trips of the tenant's streams on this
    /// replica: what a unary `ttl_auto` request is fitted to.
    round_trips: Mutex<RoundTrips>,
}

impl Tenant {
    /// Records a heartbeat round trip of one of the tenant's streams.
    pub fn record_round_trip(&self, round_trip: Duration) {
        self.round_trips
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .record(round_trip);
    }

    /// The p99 of the tenant's last heartbeat round trips on this replica.
    pub fn round_trip_p99(&self) -> Option<Duration> {
        self.round_trips
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .p99()
    }

    /// The tenant's id ([`ROOT_TENANT`] for the root namespace).
    pub fn id(&self) -> &str {
        &self.id
    }

    /// The store name of the tenant's lock `name`.
    pub fn qualify(&self, name: &str) -> String {
        let mut qualified = String::with_capacity(self.prefix.len() + name.len());
        qualified.push_str(&self.prefix);
        qualified.push_str(name);
        qualified
    }
}

/// The tenants a replica has seen, created on first use.
pub struct Tenants {
    caps: Caps,
    conn_caps: Caps,
    events: Arc<dyn Events>,
    /// A std mutex: looked up once per request, never held across an await.
    known: Mutex<HashMap<String, Arc<Tenant>>>,
    root: Arc<Tenant>,
}

impl Tenants {
    /// Tenants with these caps per tenant and per connection.
    pub fn new(caps: Caps, conn_caps: Caps, events: Arc<dyn Events>) -> Self {
        let track = caps.leases > 0 || conn_caps.leases > 0;
        Tenants {
            root: Arc::new(Tenant {
                id: ROOT_TENANT.to_owned(),
                prefix: String::new(),
                open: true,
                // No tenants without authentication: the root namespace is
                // everyone's, and only the connection caps apply.
                usage: Arc::new(Usage::new(
                    Owner::Tenant(ROOT_TENANT.into()),
                    Caps::default(),
                )),
                ledger: track.then(|| Mutex::new(Ledger::default())),
                events: Arc::clone(&events),
                round_trips: Mutex::default(),
            }),
            caps,
            conn_caps,
            events,
            known: Mutex::new(HashMap::new()),
        }
    }

    /// The caps of each connection.
    pub fn conn_caps(&self) -> Caps {
        self.conn_caps
    }

    /// The root namespace: every caller's when the broker has no
    /// authentication.
    pub fn root(&self) -> Arc<Tenant> {
        Arc::clone(&self.root)
    }

    /// The tenant `id` (`[A-Za-z0-9_-]`, or [`ROOT_TENANT`]: checked where
    /// credentials are read). The root namespace got this way, through a
    /// credential, has the tenant caps like any tenant.
    pub fn get(&self, id: &str) -> Arc<Tenant> {
        let mut known = self
            .known
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if let Some(tenant) = known.get(id) {
            return Arc::clone(tenant);
        }
        let tenant = Arc::new(Tenant {
            id: id.to_owned(),
            prefix: prefix_of(id),
            open: false,
            usage: Arc::new(Usage::new(Owner::Tenant(id.to_owned()), self.caps)),
            ledger: (self.caps.leases > 0 || self.conn_caps.leases > 0)
                .then(|| Mutex::new(Ledger::default())),
            events: Arc::clone(&self.events),
            round_trips: Mutex::default(),
        });
        known.insert(id.to_owned(), Arc::clone(&tenant));
        tenant
    }
}

/// Who makes a request: the tenant, what the credential allows, and the
/// connection it came on.
#[derive(Clone, Debug)]
pub struct Caller {
    tenant: Arc<Tenant>,
    permissions: Permissions,
    conn: Arc<Usage>,
    /// Identifies the connection in the lease ledger.
    conn_id: u64,
}

impl Caller {
    /// A caller of `tenant` with `permissions`, on the connection `conn_id`
    /// whose counters are `conn`.
    pub fn new(
        tenant: Arc<Tenant>,
        permissions: Permissions,
        conn: Arc<Usage>,
        conn_id: u64,
    ) -> Self {
        Caller {
            tenant,
            permissions,
            conn,
            conn_id,
        }
    }

    /// A caller with every permission in the root namespace, on a connection
    /// of its own without caps: for embedding and unit tests.
    pub fn local() -> Self {
        Caller::new(
            Arc::new(Tenant {
                id: ROOT_TENANT.to_owned(),
                prefix: String::new(),
                open: true,
                usage: Arc::new(Usage::new(
                    Owner::Tenant(ROOT_TENANT.into()),
                    Caps::default(),
                )),
                ledger: None,
                events: Arc::new(NoEvents),
                round_trips: Mutex::default(),
            }),
            Permissions {
                use_locks: true,
                admin: true,
            },
            Usage::connection(Caps::default()),
            0,
        )
    }

    /// The caller's tenant.
    pub fn tenant(&self) -> &Tenant {
        &self.tenant
    }

    /// What the caller may do.
    pub fn permissions(&self) -> Permissions {
        self.permissions
    }

    /// Admits one request under the connection's and the tenant's rate caps.
    pub fn admit(&self) -> Result<()> {
        self.counted(
            Refusal::Cap,
            self.conn.admit().and_then(|()| self.tenant.usage.admit()),
        )
    }

    /// Reports a refusal.
    fn counted<T>(&self, reason: Refusal, result: Result<T>) -> Result<T> {
        if result.is_err() {
            self.tenant.events.refused(reason);
        }
        result
    }

    /// Fails unless the caller may use locks.
    pub fn require_use(&self) -> Result<()> {
        if self.permissions.use_locks {
            return Ok(());
        }
        self.tenant.events.refused(Refusal::PermissionDenied);
        Err(Error::PermissionDenied(format!(
            "this credential of tenant '{}' has no 'use' permission: it may not take, renew, \
             release or describe locks (grant `use` in the --auth-file)",
            self.tenant.id
        )))
    }

    /// Fails unless the caller is an administrator; `action` says what for.
    pub fn require_admin(&self, action: &str) -> Result<()> {
        if self.permissions.admin {
            return Ok(());
        }
        self.tenant.events.refused(Refusal::PermissionDenied);
        Err(Error::PermissionDenied(if self.tenant.open {
            // No authentication: administration is a switch of the broker.
            format!(
                "{action} is disabled on this broker; start it with --enable-revoke \
                 (LEASEHOLD_ENABLE_REVOKE=true) to allow it, or give administrators \
                 credentials with `admin` in an --auth-file"
            )
        } else {
            format!(
                "{action} needs the 'admin' permission, which this credential of tenant '{}' \
                 does not have",
                self.tenant.id
            )
        }))
    }

    /// A waiter slot under both caps.
    pub fn waiter_slot(&self) -> Result<(Slot, Slot)> {
        self.counted(Refusal::Cap, self.slots(SlotKind::Waiter))
    }

    /// A stream slot under both caps.
    pub fn stream_slot(&self) -> Result<(Slot, Slot)> {
        self.counted(Refusal::Cap, self.slots(SlotKind::Stream))
    }

    fn slots(&self, kind: SlotKind) -> Result<(Slot, Slot)> {
        Ok((self.conn.take(kind)?, self.tenant.usage.take(kind)?))
    }

    /// Takes room for one more lease under the tenant's and the
    /// connection's lease caps, or fails when either is full. The room is
    /// held from now (so that calls in flight together cannot overshoot the
    /// cap) until the grant is recorded with [`LeaseRoom::granted`], or
    /// given back when the reservation drops without a grant.
    pub fn reserve_lease(&self) -> Result<LeaseRoom> {
        self.counted(Refusal::Cap, self.lease_room())
    }

    fn lease_room(&self) -> Result<LeaseRoom> {
        let Some(ledger) = &self.tenant.ledger else {
            return Ok(LeaseRoom { caller: None });
        };
        let mut ledger = ledger
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let (tenant_cap, conn_cap) = (self.tenant.usage.caps.leases, self.conn.caps.leases);
        let full = |l: &Ledger| {
            (tenant_cap > 0 && l.held.len() + l.reserved >= tenant_cap)
                || (conn_cap > 0 && l.per_conn.get(&self.conn_id).copied().unwrap_or(0) >= conn_cap)
        };
        if full(&ledger) {
            ledger.prune(Instant::now());
        }
        if !full(&ledger) {
            ledger.reserved += 1;
            *ledger.per_conn.entry(self.conn_id).or_default() += 1;
            return Ok(LeaseRoom {
                caller: Some(self.clone()),
            });
        }
        let (who, flag, cap) =
            if tenant_cap > 0 && ledger.held.len() + ledger.reserved >= tenant_cap {
                let (who, flag) = self.tenant.usage.who("leases");
                (who, flag, tenant_cap)
            } else {
                let (who, flag) = self.conn.who("leases");
                (who, flag, conn_cap)
            };
        Err(Error::exhausted(
            &flag,
            format!(
                "{who} already holds {cap} leases on this broker replica ({flag}); \
                 release some first"
            ),
        ))
    }

    /// Records a lease granted or renewed through this caller, alive until
    /// `deadline` unless renewed.
    pub fn hold(&self, store_name: &str, token: &str, deadline: Instant) {
        if let Some(ledger) = &self.tenant.ledger {
            let mut ledger = ledger
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner);
            ledger.hold(LeaseId::new(store_name, token), deadline, self.conn_id);
        }
    }

    /// Forgets a lease that was released or lost.
    pub fn forget(&self, store_name: &str, token: &str) {
        if let Some(ledger) = &self.tenant.ledger {
            let mut ledger = ledger
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner);
            ledger.forget(&LeaseId::new(store_name, token));
        }
    }
}

/// Room for one lease under the caps, taken by [`Caller::reserve_lease`].
#[derive(Debug)]
pub struct LeaseRoom {
    /// `None` when no lease cap is set (nothing is counted).
    caller: Option<Caller>,
}

impl LeaseRoom {
    /// The lease was granted: it now counts as held until `deadline`
    /// (unless renewed), released or forgotten.
    pub fn granted(mut self, store_name: &str, token: &str, deadline: Instant) {
        if let Some(caller) = self.caller.take() {
            if let Some(ledger) = &caller.tenant.ledger {
                let mut ledger = ledger
                    .lock()
                    .unwrap_or_else(std::sync::PoisonError::into_inner);
                ledger.reserved -= 1;
                // The reservation's count on the connection passes to the
                // lease.
                ledger.insert_counted(LeaseId::new(store_name, token), deadline, caller.conn_id);
            }
        }
    }
}

impl Drop for LeaseRoom {
    fn drop(&mut self) {
        if let Some(caller) = self.caller.take() {
            if let Some(ledger) = &caller.tenant.ledger {
                let mut ledger = ledger
                    .lock()
                    .unwrap_or_else(std::sync::PoisonError::into_inner);
                ledger.reserved -= 1;
                ledger.uncount(caller.conn_id);
            }
        }
    }
}

/// A lease in the ledger: its store name and the first 16 hex digits of its
/// owner token (a semaphore has several leases per name; 64 bits tell them
/// apart, and the whole token need not be kept).
#[derive(Clone, Debug, Hash, PartialEq, Eq)]
struct LeaseId {
    name: Box<str>,
    token: u64,
}

impl LeaseId {
    fn new(name: &str, token: &str) -> Self {
        LeaseId {
            name: name.into(),
            token: token
                .get(..16)
                .and_then(|t| u64::from_str_radix(t, 16).ok())
                .unwrap_or(0),
        }
    }
}

#[derive(Clone, Copy, Debug)]
struct Held {
    deadline: Instant,
    conn: u64,
}

/// The leases a tenant holds through this replica, by connection.
#[derive(Debug, Default)]
struct Ledger {
    held: HashMap<LeaseId, Held>,
    /// Leases and reservations per connection.
    per_conn: HashMap<u64, usize>,
    /// Room reserved by Acquire calls in flight.
    reserved: usize,
    /// The size of `held` at which expired entries are dropped next (see
    /// [`Ledger::grew`]).
    prune_at: usize,
}

/// The smallest ledger that is pruned as it grows.
const LEDGER_PRUNE_MIN: usize = 64;

impl Ledger {
    fn hold(&mut self, id: LeaseId, deadline: Instant, conn: u64) {
        match self.held.get_mut(&id) {
            // A renewal: the lease stays counted against the connection
            // that took it.
            Some(held) => held.deadline = held.deadline.max(deadline),
            None => {
                self.held.insert(id, Held { deadline, conn });
                *self.per_conn.entry(conn).or_default() += 1;
                self.grew();
            }
        }
    }

    /// Records a granted lease whose connection count was taken already
    /// (by its reservation).
    fn insert_counted(&mut self, id: LeaseId, deadline: Instant, conn: u64) {
        if let Some(old) = self.held.insert(id, Held { deadline, conn }) {
            // Cannot happen (a grant has a new token); keep the counts true.
            self.uncount(old.conn);
        }
        self.grew();
    }

    /// Leases that expire without a release leave their entry behind; a
    /// full cap prunes them, but a cap that is never full (say only
    /// `--conn-max-leases` set, with many connections) would not. So the
    /// ledger also prunes whenever it has doubled since the last prune:
    /// amortized O(1) per entry, and at most about twice the leases held
    /// (plus [`LEDGER_PRUNE_MIN`]), whatever the caps.
    fn grew(&mut self) {
        if self.held.len() >= self.prune_at.max(LEDGER_PRUNE_MIN) {
            self.prune(Instant::now());
            self.prune_at = 2 * self.held.len();
        }
    }

    fn forget(&mut self, id: &LeaseId) {
        if let Some(held) = self.held.remove(id) {
            self.uncount(held.conn);
        }
    }

    fn uncount(&mut self, conn: u64) {
        if let Some(n) = self.per_conn.get_mut(&conn) {
            *n -= 1;
            if *n == 0 {
                self.per_conn.remove(&conn);
            }
        }
    }

    /// Drops the leases past their deadline (expired, unless renewed
    /// through another replica, which then counts them).
    fn prune(&mut self, now: Instant) {
        let mut gone = Vec::new();
        self.held.retain(|_, held| {
            let alive = held.deadline > now;
            if !alive {
                gone.push(held.conn);
            }
            alive
        });
        for conn in gone {
            self.uncount(conn);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Leases that expire without a release do not pile up in the ledger,
    /// whatever the caps (here nothing ever fills one): 10,000 entries
    /// expiring one after another leave a ledger the size of the live
    /// leases, give or take a factor of two, and the live ones stay counted.
    #[tokio::test(start_paused = true)]
    async fn the_ledger_stays_the_size_of_the_leases_held() {
        let mut ledger = Ledger::default();
        let far = Instant::now() + Duration::from_secs(3_600);
        for i in 0..100u64 {
            ledger.hold(
                LeaseId::new(&format!("live{i}"), &format!("{i:032x}")),
                far,
                0,
            );
        }
        let mut largest = 0;
        for i in 0..10_000u64 {
            let soon = Instant::now() + Duration::from_millis(10);
            let id = LeaseId::new(&format!("gone{i}"), &format!("{:032x}", i + 1_000));
            ledger.hold(id, soon, 1 + i % 50);
            largest = largest.max(ledger.held.len());
            tokio::time::advance(Duration::from_millis(20)).await;
        }
        assert!(largest <= 2 * 101 + 1, "the ledger grew to {largest}");
        let live = ledger.held.values().filter(|h| h.deadline == far).count();
        assert_eq!(live, 100);
        let counted: usize = ledger.per_conn.values().sum();
        assert_eq!(counted, ledger.held.len(), "per-connection counts follow");
    }

    fn caps(leases: usize, waiters: usize, streams: usize, rate: u32) -> Caps {
        Caps {
            leases,
            waiters,
            streams,
            rate,
        }
    }

    fn caller(tenants: &Tenants, id: &str, conn: u64, conn_usage: &Arc<Usage>) -> Caller {
        Caller::new(
            tenants.get(id),
            Permissions {
                use_locks: true,
                admin: false,
            },
            Arc::clone(conn_usage),
            conn,
        )
    }

    #[test]
    fn names_are_qualified_by_tenant_and_cannot_be_forged() {
        let tenants = Tenants::new(Caps::default(), Caps::default(), Arc::new(NoEvents));
        assert_eq!(tenants.get("a").qualify("x"), "a|x");
        assert_eq!(tenants.root().qualify("a|x"), "a|x");
        assert_eq!(tenants.root().qualify("x"), "x");
        assert!(Arc::ptr_eq(&tenants.get("a"), &tenants.get("a")));
    }

    /// The root namespace named by a credential is where callers without
    /// authentication keep their locks, and it has the tenant caps (the
    /// root of a broker without --auth-file has none).
    #[test]
    fn the_root_tenant_stores_bare_names_and_has_the_tenant_caps() {
        let tenants = Tenants::new(caps(1, 0, 0, 0), Caps::default(), Arc::new(NoEvents));
        let root = tenants.get(ROOT_TENANT);
        assert_eq!((root.id(), root.qualify("x")), ("@root", "x".to_owned()));
        assert_eq!(tenants.root().id(), "@root");
        assert_eq!(tenants.root().qualify("x"), root.qualify("x"));
        assert_eq!(store_name(ROOT_TENANT, "x"), "x");
        assert_eq!(store_name("root", "x"), "root|x");

        let conn = Usage::connection(tenants.conn_caps());
        let soon = Instant::now() + Duration::from_secs(5);
        let named = caller(&tenants, ROOT_TENANT, 1, &conn);
        named.hold("x", &"1".repeat(32), soon);
        let e = named.reserve_lease().unwrap_err().to_string();
        assert!(
            e.contains("tenant '@root'") && e.contains("--tenant-max-leases"),
            "{e}"
        );
        let open = Caller::new(tenants.root(), Permissions::default(), conn, 2);
        drop(open.reserve_lease().unwrap());
        // Without authentication, administration is the broker's switch.
        let e = open.require_admin("Revoke").unwrap_err().to_string();
        assert!(e.contains("--enable-revoke"), "{e}");
        let e = named.require_admin("Revoke").unwrap_err().to_string();
        assert!(e.contains("credential of tenant '@root'"), "{e}");
    }

    #[tokio::test(start_paused = true)]
    async fn leases_are_capped_per_tenant_and_per_connection_and_expire() {
        let tenants = Tenants::new(caps(3, 0, 0, 0), caps(2, 0, 0, 0), Arc::new(NoEvents));
        let conn1 = Usage::connection(tenants.conn_caps());
        let conn2 = Usage::connection(tenants.conn_caps());
        let a1 = caller(&tenants, "a", 1, &conn1);
        let a2 = caller(&tenants, "a", 2, &conn2);
        let soon = Instant::now() + Duration::from_secs(1);
        a1.hold("a|x", &"1".repeat(32), soon);
        a1.hold("a|y", &"2".repeat(32), soon);
        let e = a1.reserve_lease().unwrap_err().to_string();
        assert!(
            e.contains("this connection") && e.contains("--conn-max-leases"),
            "{e}"
        );
        a2.reserve_lease()
            .unwrap()
            .granted("a|z", &"3".repeat(32), soon + Duration::from_secs(10));
        let e = a2.reserve_lease().unwrap_err().to_string();
        assert!(
            e.contains("tenant 'a'") && e.contains("--tenant-max-leases"),
            "{e}"
        );
        // Another tenant is not touched.
        caller(&tenants, "b", 1, &conn1).reserve_lease().unwrap();
        // A release frees room; so does an expiry.
        a1.forget("a|x", &"1".repeat(32));
        drop(a2.reserve_lease().unwrap());
        a1.hold("a|x", &"4".repeat(32), soon);
        assert!(a2.reserve_lease().is_err());
        tokio::time::advance(Duration::from_secs(2)).await;
        drop(a2.reserve_lease().unwrap());
        drop(a1.reserve_lease().unwrap());
    }

    /// Acquire calls in flight together hold their room: the cap is never
    /// overshot, and a call that ends without a grant gives its room back.
    #[tokio::test(start_paused = true)]
    async fn reservations_keep_concurrent_calls_within_the_cap() {
        let tenants = Tenants::new(caps(2, 0, 0, 0), caps(0, 0, 0, 0), Arc::new(NoEvents));
        let conn = Usage::connection(tenants.conn_caps());
        let a = caller(&tenants, "a", 1, &conn);
        let first = a.reserve_lease().unwrap();
        let second = a.reserve_lease().unwrap();
        assert!(
            a.reserve_lease().is_err(),
            "two calls in flight fill a cap of 2"
        );
        drop(second); // not granted
        let third = a.reserve_lease().unwrap();
        first.granted(
            "a|x",
            &"1".repeat(32),
            Instant::now() + Duration::from_secs(5),
        );
        assert!(a.reserve_lease().is_err());
        drop(third);
        let ledger = a.tenant.ledger.as_ref().unwrap().lock().unwrap();
        assert_eq!((ledger.held.len(), ledger.reserved), (1, 0));
        assert_eq!(ledger.per_conn.get(&1), Some(&1));
    }

    #[tokio::test(start_paused = true)]
    async fn the_rate_cap_allows_a_second_of_burst_then_refuses() {
        let tenants = Tenants::new(caps(0, 0, 0, 10), Caps::default(), Arc::new(NoEvents));
        let conn = Usage::connection(tenants.conn_caps());
        let a = caller(&tenants, "a", 1, &conn);
        for _ in 0..10 {
            a.admit().unwrap();
        }
        let e = a.admit().unwrap_err().to_string();
        assert!(
            e.contains("10 requests per second") && e.contains("--tenant-max-rate"),
            "{e}"
        );
        tokio::time::advance(Duration::from_millis(100)).await;
        a.admit().unwrap();
    }

    #[test]
    fn slots_are_capped_and_given_back() {
        let tenants = Tenants::new(caps(0, 1, 2, 0), caps(0, 5, 5, 0), Arc::new(NoEvents));
        let conn = Usage::connection(tenants.conn_caps());
        let a = caller(&tenants, "a", 1, &conn);
        let waiter = a.waiter_slot().unwrap();
        let e = a.waiter_slot().unwrap_err().to_string();
        assert!(
            e.contains("1 callers waiting for locks") && e.contains("--tenant-max-waiters"),
            "{e}"
        );
        drop(waiter);
        let _w = a.waiter_slot().unwrap();
        let _s1 = a.stream_slot().unwrap();
        let _s2 = a.stream_slot().unwrap();
        assert!(a.stream_slot().is_err());
        // The refused attempts gave back what they took of the connection.
        assert_eq!(conn.streams.load(Ordering::Acquire), 2);
        assert_eq!(conn.waiters.load(Ordering::Acquire), 1);
    }
}
