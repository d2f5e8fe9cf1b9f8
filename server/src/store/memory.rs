//! The embedded store: leases in a sharded map inside this process.
//!
//! Same contract as Redis, for one process. Expiry uses tokio's clock, so
//! TTL logic can be tested on a paused clock. Fences come from one
//! process-wide counter raised to the wall clock in µs (Redis's counter, in
//! one process), so they strictly increase per name without remembering any
//! name that is free.

use crate::duration::{micros, millis};
use std::{
    collections::{BTreeMap, BTreeSet, HashMap},
    sync::{
        atomic::{AtomicU64, Ordering},
        Arc, Weak,
    },
    time::{Duration, SystemTime, UNIX_EPOCH},
};

use dashmap::{mapref::entry::Entry as MapEntry, DashMap};
use tokio::time::Instant;

use super::{
    backend::Backend,
    contract::LINGER,
    watch::{waiter_id, Watchers},
    Acquired, Blocked, BlockedBy, Checked, Described, Event, GrantSpec, LeaseInfo, Listed, Listing,
    Ping, RenewItem, Renewed, Revocation, QUEUE_LIFETIME,
};
use crate::error::Result;

/// How often expired leases nobody touches are swept from memory.
const SWEEP_INTERVAL: Duration = Duration::from_secs(1);

/// How a lease ended, as recorded for its token.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum End {
    /// Its holder released it.
    Released,
    /// An operator revoked it.
    Revoked,
    /// It expired, its loss was reported, and its record went (a grant
    /// replaced the lock lease, or a call dropped the expired permit).
    Expired,
}

/// The end of one lease (a release, a revoke, or a reported expiry whose
/// lease record went), kept for that lease's token alone (constants.lua's
/// end records): a name is held by many leases over time and at once, and
/// each hears its own end.
struct Ended {
    how: End,
    /// The lease's fence (told to a revoked holder).
    fence: u64,
    /// When the record may go.
    forget_at: Instant,
}

/// What the store keeps of a name's last lease, as the Redis store's lease
/// hash does: the live lease, or after its end (release, revoke, expiry) its
/// tombstone, so that its holder learns why. Named apart from the domain's
/// `lease::Lease` and the client's `Lease`.
struct Record {
    token: String,
    holder: String,
    fence: u64,
    ttl_ms: u64,
    granted_at_unix_ms: u64,
    lock_delay: Duration,
    /// When the lease ends unless renewed.
    expires_at: Instant,
    /// When the name becomes grantable after an involuntary end: the expiry
    /// plus the lock-delay, or the revocation plus the lock-delay.
    delay_ends: Instant,
    /// Revoked: the entry stays (as a tombstone) for the lock-delay and a
    /// retried revoke. (A released lease's entry goes at once.)
    end: Option<End>,
    /// Its expiry was reported to someone (counted once).
    noticed: bool,
    /// When the entry may go (the Redis key's expiry).
    forget_at: Instant,
}

impl Record {
    fn live(&self, now: Instant) -> bool {
        self.end.is_none() && now < self.expires_at
    }

    /// The entry is of no more use: the lease ended, its delay ran out, and
    /// its holder can no longer be expecting to hear of it.
    fn spent(&self, now: Instant) -> bool {
        now >= self.forget_at
    }

    fn info(&self, now: Instant) -> LeaseInfo {
        LeaseInfo {
            holder: self.holder.clone(),
            fence: self.fence,
            // At most the TTL: `now` may be read just before a renewal that
            // another task applies, which would otherwise show a few µs more
            // (rounded up to a whole ms) than any renewal grants.
            remaining_ms: ceil_ms(self.expires_at.saturating_duration_since(now)).min(self.ttl_ms),
            ttl_ms: self.ttl_ms,
            granted_at_unix_ms: self.granted_at_unix_ms,
            lock_delay_ms: millis(self.lock_delay),
        }
    }
}

/// One semaphore permit (semaphore_acquire.lua, in memory).
struct Permit {
    fence: u64,
    ttl_ms: u64,
    expires_at: Instant,
}

/// The permits of a name, by owner token (an expired one stays until a
/// renewal, release or acquire finds it and reports it, or the sweeper
/// drops it [`LINGER`] after).
#[derive(Default)]
struct Permits {
    held: HashMap<String, Permit>,
}

impl Permits {
    fn live(&self, now: Instant) -> impl Iterator<Item = &Permit> {
        self.held.values().filter(move |p| p.expires_at > now)
    }
}

struct Inner {
    leases: DashMap<String, Record>,
    /// Semaphore permits by name. Locked after `leases` when both are needed.
    permits: DashMap<String, Permits>,
    /// Released and revoked leases, and expired ones whose record went once
    /// their loss was reported, by (name, owner token), for [`LINGER`] after
    /// their end (an expiry's: after its report). Locked after `leases` and
    /// `permits`.
    ends: DashMap<(Box<str>, Box<str>), Ended>,
    /// Wait lines (line.lua, in memory). When a name needs both maps, the
    /// line is locked first.
    queues: DashMap<String, Line>,
    /// Highest fence issued by this process.
    high_water: AtomicU64,
    watchers: Watchers,
}

/// The in-process store; cheap to clone.
#[derive(Clone)]
pub struct MemoryStore {
    inner: Arc<Inner>,
}

impl Default for MemoryStore {
    fn default() -> Self {
        Self::new()
    }
}

impl MemoryStore {
    /// An empty store. Inside a tokio runtime it also starts a sweeper that
    /// drops expired leases, and stops when the store is dropped.
    pub fn new() -> Self {
        let inner = Arc::new(Inner {
            leases: DashMap::new(),
            permits: DashMap::new(),
            ends: DashMap::new(),
            queues: DashMap::new(),
            high_water: AtomicU64::new(0),
            watchers: Watchers::new(None),
        });
        if let Ok(runtime) = tokio::runtime::Handle::try_current() {
            runtime.spawn(sweep(Arc::downgrade(&inner)));
        }
        MemoryStore { inner }
    }

    /// The next fence: above the last one issued and not below the clock.
    fn next_fence(&self) -> u64 {
        let now_us = unix_micros();
        let prev = self
            .inner
            .high_water
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |hw| {
                Some(hw.saturating_add(1).max(now_us))
            })
            .unwrap_or_else(|hw| hw);
        prev.saturating_add(1).max(now_us)
    }

    /// An acquire attempt, `grant` (a lock's or a permit's) run with the
    /// name's line held and pruned; a grant wakes the name's grant
    /// watchers.
    fn acquire(
        &self,
        spec: &GrantSpec,
        grant: fn(&Self, &GrantSpec, &mut Line, Instant) -> Acquired,
    ) -> Acquired {
        let now = Instant::now();
        let mut queue = self.inner.queues.entry(spec.name.clone()).or_default();
        // Waiters that stopped calling (their call ended) leave.
        queue.prune(now);
        let outcome = grant(self, spec, &mut queue, now);
        let empty = queue.is_empty();
        drop(queue);
        if empty {
            self.inner.queues.remove_if(&spec.name, |_, q| q.is_empty());
        }
        if matches!(outcome, Acquired::Granted { .. }) {
            self.inner
                .watchers
                .wake(&self.channel(&spec.name, Event::Granted), "");
        }
        outcome
    }

    /// semaphore_acquire.lua, in memory (see there).
    fn take_permit(&self, spec: &GrantSpec, queue: &mut Line, now: Instant) -> Acquired {
        let position = |queue: &mut Line| join_queue(spec, queue, now);
        // A name held as a plain lock has no permit to give, nor one in
        // its lock-delay: the delay means nobody gets the name.
        if let Some(lease) = self.inner.leases.get(&spec.name) {
            if lease.live(now) {
                let (fence, remaining, holder) =
                    (lease.fence, lease.expires_at - now, lease.holder.clone());
                drop(lease);
                let p = position(queue);
                return blocked(BlockedBy::Holder, fence, remaining, &holder, p, queue.len());
            }
            if now < lease.delay_ends {
                let (fence, remaining) = (lease.fence, lease.delay_ends - now);
                drop(lease);
                let p = position(queue);
                return blocked(BlockedBy::LockDelay, fence, remaining, "", p, queue.len());
            }
        }
        let mut permits = self.inner.permits.entry(spec.name.clone()).or_default();
        // Expired permits found here are reported here, and their ends
        // recorded for their tokens (their holders then hear "expired,
        // reported already", not "not held").
        let mut expired = 0;
        permits.held.retain(|token, p| {
            let live = p.expires_at > now;
            if !live {
                self.record_end(&spec.name, token, End::Expired, p.fence, now + LINGER);
                expired += 1;
            }
            live
        });
        let outcome = self.grant_permit(spec, &mut permits, queue, now);
        reporting(outcome, expired)
    }

    /// The rest of [`MemoryStore::take_permit`], over live permits.
    fn grant_permit(
        &self,
        spec: &GrantSpec,
        permits: &mut Permits,
        queue: &mut Line,
        now: Instant,
    ) -> Acquired {
        let position = |queue: &mut Line| join_queue(spec, queue, now);
        if let Some(mine) = permits.held.get(&spec.token) {
            return Acquired::Granted {
                fence: mine.fence,
                expired: 0,
            };
        }
        if permits.live(now).count() >= spec.limit as usize {
            let first = permits
                .live(now)
                .min_by_key(|p| p.expires_at)
                .map(|p| (p.fence, p.expires_at - now));
            let (fence, remaining) = first.unwrap_or((0, Duration::from_millis(1)));
            let p = position(queue);
            return blocked(BlockedBy::Holder, fence, remaining, "", p, queue.len());
        }
        match queue.first() {
            Some((first, deadline)) if first != spec.token => {
                let remaining = deadline - now;
                let p = position(queue);
                return blocked(BlockedBy::Queue, 0, remaining, "", p, queue.len());
            }
            Some(_) => {
                queue.remove(&spec.token);
            }
            None => {}
        }
        let fence = self.next_fence();
        permits.held.insert(
            spec.token.clone(),
            Permit {
                fence,
                ttl_ms: spec.ttl_ms,
                expires_at: now + Duration::from_millis(spec.ttl_ms),
            },
        );
        Acquired::Granted { fence, expired: 0 }
    }

    /// acquire.lua, in memory (see there).
    fn grant_lock(&self, spec: &GrantSpec, queue: &mut Line, now: Instant) -> Acquired {
        let wait_in_line = |queue: &mut Line| join_queue(spec, queue, now);
        match self.inner.leases.entry(spec.name.clone()) {
            MapEntry::Occupied(e) if e.get().live(now) => {
                let lease = e.get();
                // The same token again is a repeated call for a grant that
                // already happened (as in Redis, where the broker may retry).
                if lease.token == spec.token {
                    return Acquired::Granted {
                        fence: lease.fence,
                        expired: 0,
                    };
                }
                let position = wait_in_line(queue);
                blocked(
                    BlockedBy::Holder,
                    lease.fence,
                    lease.expires_at - now,
                    &lease.holder,
                    position,
                    queue.len(),
                )
            }
            MapEntry::Occupied(e) if now < e.get().delay_ends => {
                let position = wait_in_line(queue);
                blocked(
                    BlockedBy::LockDelay,
                    e.get().fence,
                    e.get().delay_ends - now,
                    "",
                    position,
                    queue.len(),
                )
            }
            entry => {
                // Held as a semaphore: blocked until its permits are gone.
                let first_permit = self
                    .inner
                    .permits
                    .get(&spec.name)
                    .and_then(|permits| permits.live(now).map(|p| p.expires_at).min());
                if let Some(expiry) = first_permit {
                    let position = wait_in_line(queue);
                    return blocked(
                        BlockedBy::Holder,
                        0,
                        expiry - now,
                        "(semaphore permits)",
                        position,
                        queue.len(),
                    );
                }
                match queue.first() {
                    Some((first, deadline)) if first != spec.token => {
                        let (fence, remaining) = (0, deadline - now);
                        let position = wait_in_line(queue);
                        return blocked(
                            BlockedBy::Queue,
                            fence,
                            remaining,
                            "",
                            position,
                            queue.len(),
                        );
                    }
                    Some(_) => {
                        queue.remove(&spec.token);
                    }
                    None => {}
                }
                // An expired lease replaced here: reported now unless its
                // holder heard it already, and its end recorded for its
                // token, which the new lease no longer names.
                let mut expired = 0;
                if let MapEntry::Occupied(e) = &entry {
                    let old = e.get();
                    if old.end.is_none() && old.token != spec.token {
                        expired = u32::from(!old.noticed);
                        let forget_at = now + LINGER;
                        self.record_end(&spec.name, &old.token, End::Expired, old.fence, forget_at);
                    }
                }
                // The name's permits, all expired (none is live, or it would
                // not be free), go: reported now and recorded for their
                // tokens (acquire.lua), whose holders then hear "expired,
                // reported already", not another owner's lock.
                if let Some(mut permits) = self.inner.permits.get_mut(&spec.name) {
                    for (token, p) in permits.held.drain() {
                        self.record_end(&spec.name, &token, End::Expired, p.fence, now + LINGER);
                        expired += 1;
                    }
                }
                self.inner
                    .permits
                    .remove_if(&spec.name, |_, p| p.held.is_empty());
                let fence = self.next_fence();
                let ttl = Duration::from_millis(spec.ttl_ms);
                let lock_delay = Duration::from_millis(spec.lock_delay_ms);
                entry.insert(Record {
                    token: spec.token.clone(),
                    holder: spec.holder.clone(),
                    fence,
                    ttl_ms: spec.ttl_ms,
                    granted_at_unix_ms: unix_micros() / 1_000,
                    lock_delay,
                    expires_at: now + ttl,
                    delay_ends: now + ttl + lock_delay,
                    end: None,
                    noticed: false,
                    forget_at: now + ttl + lock_delay + LINGER,
                });
                Acquired::Granted { fence, expired }
            }
        }
    }

    /// renew_lease.lua, in memory (see there): `ttl_ms` is `None` to look
    /// only, `Some(None)` to keep the lease's own TTL.
    fn renew_or_look(
        &self,
        name: &str,
        token: &str,
        ttl_ms: Option<Option<u64>>,
    ) -> Checked<Renewed> {
        let now = Instant::now();
        if let Some(mut lease) = self.inner.leases.get_mut(name) {
            if let Some(ended) = self.ended(name, &mut lease, token, now) {
                return ended;
            }
            if lease.live(now) && lease.token == token {
                if let Some(ttl_ms) = ttl_ms {
                    let ttl_ms = ttl_ms.unwrap_or(lease.ttl_ms);
                    lease.ttl_ms = ttl_ms;
                    lease.expires_at = now + Duration::from_millis(ttl_ms);
                    lease.delay_ends = lease.expires_at + lease.lock_delay;
                    lease.forget_at = lease.expires_at + lease.lock_delay + LINGER;
                }
                return Checked::Done(Renewed {
                    ttl_ms: lease.ttl_ms,
                    fence: lease.fence,
                });
            }
        }
        let released = || match self.recorded_end(name, token) {
            Some((End::Released, _)) => Checked::Released,
            Some((End::Revoked, fence)) => Checked::Revoked { fence },
            Some((End::Expired, _)) => Checked::ExpiredReported,
            None => Checked::NotHeld,
        };
        let Some(mut permits) = self.inner.permits.get_mut(name) else {
            return released();
        };
        let permits = &mut *permits;
        match permits.held.get_mut(token) {
            Some(permit) if permit.expires_at > now => {
                if let Some(ttl_ms) = ttl_ms {
                    permit.ttl_ms = ttl_ms.unwrap_or(permit.ttl_ms);
                    permit.expires_at = now + Duration::from_millis(permit.ttl_ms);
                }
                Checked::Done(Renewed {
                    ttl_ms: permit.ttl_ms,
                    fence: permit.fence,
                })
            }
            Some(_) => {
                if let Some(p) = permits.held.remove(token) {
                    self.record_end(name, token, End::Expired, p.fence, now + LINGER);
                }
                Checked::Expired
            }
            // `ends` is locked after `permits` (see Inner).
            None => released(),
        }
    }

    /// Records that `token`'s lease of `name` ended by `how`, until
    /// `forget_at`.
    fn record_end(&self, name: &str, token: &str, how: End, fence: u64, forget_at: Instant) {
        self.inner.ends.insert(
            (name.into(), token.into()),
            Ended {
                how,
                fence,
                forget_at,
            },
        );
    }

    /// How `token`'s lease of `name` ended, if that is recorded, and its
    /// fence.
    fn recorded_end(&self, name: &str, token: &str) -> Option<(End, u64)> {
        let ended = self.inner.ends.get(&(Box::from(name), Box::from(token)))?;
        (Instant::now() < ended.forget_at).then_some((ended.how, ended.fence))
    }

    /// What the name's record says of `token` when it is not the live
    /// lease's (renew_lease.lua and release.lua share this): `None` when
    /// `token` holds the live lease, or the record knows nothing of it and
    /// the name is free or `token` has a permit of the name (the caller
    /// then looks at the permits). An expiry reported here is marked, so
    /// that it is reported once.
    ///
    /// A permit while a lock lives: a name is a lock or a semaphore at a
    /// time, but over time both, and a permit that expired before the lock
    /// was granted may still be there (the grant drops expired permits, but
    /// be safe). Its holder must hear its own end (expired), not another
    /// owner's lease, which a KeepAlive session counts as a store that lost
    /// its data; a permit that was released or dropped is found above, in
    /// the per-token end records.
    fn ended<T>(
        &self,
        name: &str,
        lease: &mut Record,
        token: &str,
        now: Instant,
    ) -> Option<Checked<T>> {
        let live = lease.live(now);
        if lease.token != token || lease.end.is_some() {
            match self.recorded_end(name, token) {
                Some((End::Released, _)) => return Some(Checked::Released),
                Some((End::Revoked, fence)) => return Some(Checked::Revoked { fence }),
                Some((End::Expired, _)) => return Some(Checked::ExpiredReported),
                None => {}
            }
        }
        if lease.token == token && lease.end.is_none() {
            if live {
                return None;
            }
            if lease.noticed {
                return Some(Checked::ExpiredReported);
            }
            lease.noticed = true;
            return Some(Checked::Expired);
        }
        // `permits` is locked after `leases` (see Inner).
        let a_permit = || {
            self.inner
                .permits
                .get(name)
                .is_some_and(|p| p.held.contains_key(token))
        };
        (live && !a_permit()).then_some(Checked::NotOwner { fence: lease.fence })
    }

    /// The token of the first live waiter in the name's line, or empty.
    fn next_in_line(&self, name: &str) -> String {
        let now = Instant::now();
        self.inner
            .queues
            .get_mut(name)
            .and_then(|mut q| {
                q.prune(now);
                q.first().map(|(t, _)| t.to_owned())
            })
            .unwrap_or_default()
    }
}

impl Backend for MemoryStore {
    /// The fence counter is this process's own (every fence the floor
    /// holds came from it), so the floor adds nothing here.
    async fn acquire_lock(&self, spec: &GrantSpec, _floor: u64) -> Result<Acquired> {
        Ok(self.acquire(spec, Self::grant_lock))
    }

    /// As [`Backend::acquire_lock`], a permit.
    async fn acquire_permit(&self, spec: &GrantSpec, _floor: u64) -> Result<Acquired> {
        Ok(self.acquire(spec, Self::take_permit))
    }

    async fn renew(
        &self,
        name: &str,
        token: &str,
        ttl_ms: Option<u64>,
    ) -> Result<Checked<Renewed>> {
        Ok(self.renew_or_look(name, token, Some(ttl_ms)))
    }

    async fn renew_many(&self, items: &[RenewItem]) -> Result<Vec<Checked<Renewed>>> {
        let mut outcomes = Vec::with_capacity(items.len());
        for item in items {
            outcomes.push(self.renew(&item.name, &item.token, item.ttl_ms).await?);
        }
        Ok(outcomes)
    }

    async fn check(&self, name: &str, token: &str) -> Result<Checked<Renewed>> {
        Ok(self.renew_or_look(name, token, None))
    }

    async fn release(&self, name: &str, token: &str) -> Result<Checked<()>> {
        let now = Instant::now();
        let mut next = None;
        if let Some(mut lease) = self.inner.leases.get_mut(name) {
            if let Some(ended) = self.ended(name, &mut lease, token, now) {
                return Ok(ended);
            }
            // Not the holder's token: a permit (see `ended`).
            if lease.live(now) && lease.token == token {
                // Voluntary: no lock-delay. The lease's entry goes; the
                // release is recorded for its token alone, for LINGER, so
                // that a retried release still hears it worked.
                let fence = lease.fence;
                drop(lease);
                self.inner.leases.remove(name);
                self.record_end(name, token, End::Released, fence, now + LINGER);
                // Only the first in line can take it: wake just that waiter.
                next = Some(self.next_in_line(name));
            }
        }
        let next = match next {
            Some(next) => next,
            None => {
                let released = || match self.recorded_end(name, token) {
                    Some((End::Released, _)) => Checked::Released,
                    Some((End::Expired, _)) => Checked::ExpiredReported,
                    _ => Checked::NotHeld,
                };
                let Some(mut permits) = self.inner.permits.get_mut(name) else {
                    return Ok(released());
                };
                match permits.held.remove(token) {
                    Some(p) if p.expires_at > now => {
                        let empty = permits.held.is_empty();
                        drop(permits);
                        if empty {
                            self.inner.permits.remove_if(name, |_, p| p.held.is_empty());
                        }
                        self.record_end(name, token, End::Released, p.fence, now + LINGER);
                    }
                    Some(p) => {
                        self.record_end(name, token, End::Expired, p.fence, now + LINGER);
                        return Ok(Checked::Expired);
                    }
                    None => {
                        drop(permits);
                        return Ok(released());
                    }
                }
                // A free permit may serve more than the first in line.
                String::new()
            }
        };
        self.inner
            .watchers
            .wake(&self.channel(name, Event::Released), waiter_id(&next));
        Ok(Checked::Done(()))
    }

    async fn revoke(&self, name: &str) -> Result<Revocation> {
        let now = Instant::now();
        let fence = match self.inner.leases.get_mut(name) {
            Some(mut lease) if lease.live(now) => {
                lease.end = Some(End::Revoked);
                lease.delay_ends = now + lease.lock_delay;
                lease.forget_at = lease.expires_at.max(lease.delay_ends) + LINGER;
                let (token, fence, forget_at) = (lease.token.clone(), lease.fence, lease.forget_at);
                drop(lease);
                self.record_end(name, &token, End::Revoked, fence, forget_at);
                fence
            }
            Some(lease) if lease.end == Some(End::Revoked) => {
                return Ok(Revocation::Already { fence: lease.fence })
            }
            _ => return Ok(Revocation::NotHeld),
        };
        self.inner
            .watchers
            .wake(&self.channel(name, Event::Released), "");
        Ok(Revocation::Revoked { fence })
    }

    async fn describe(&self, name: &str) -> Result<(Described, u64)> {
        let now = Instant::now();
        let waiters = self.inner.queues.get_mut(name).map_or(0, |mut q| {
            q.prune(now);
            q.len() as u64
        });
        let permits = self
            .inner
            .permits
            .get(name)
            .map_or(0, |p| p.live(now).count() as u64);
        // The fence counter is this process's own, above every fence the
        // floor could hold: no last fence to report.
        Ok((
            match self.inner.leases.get(name) {
                Some(lease) if lease.live(now) => Described {
                    lease: Some(lease.info(now)),
                    lock_delay_remaining_ms: 0,
                    waiters,
                    permits,
                },
                Some(lease) => Described {
                    lease: None,
                    lock_delay_remaining_ms: ceil_ms(
                        lease.delay_ends.saturating_duration_since(now),
                    ),
                    waiters,
                    permits,
                },
                None => Described {
                    waiters,
                    permits,
                    ..Described::default()
                },
            },
            0,
        ))
    }

    /// The names are gathered from the three maps and sorted on every
    /// page: O(names in the store) per call, in this process's memory and
    /// off any lock for long (each map is read shard by shard); a store for
    /// one process holds few enough names for that.
    async fn list(
        &self,
        prefix: &str,
        resume: Option<&str>,
        budget: usize,
    ) -> Result<(Listing, u64)> {
        let after = |name: &str| name.starts_with(prefix) && resume.is_none_or(|r| name > r);
        let mut names = BTreeSet::new();
        for name in self.inner.leases.iter().map(|e| e.key().clone()) {
            if after(&name) {
                names.insert(name);
            }
        }
        for name in self.inner.permits.iter().map(|e| e.key().clone()) {
            if after(&name) {
                names.insert(name);
            }
        }
        for name in self.inner.queues.iter().map(|e| e.key().clone()) {
            if after(&name) {
                names.insert(name);
            }
        }
        let more = names.len() > budget;
        let page: Vec<String> = names.into_iter().take(budget).collect();
        let next = if more { page.last().cloned() } else { None };
        let mut entries = Vec::new();
        for name in page {
            let (described, _) = self.describe(&name).await?;
            if !described.is_idle() {
                entries.push(Listed { name, described });
            }
        }
        Ok((Listing { entries, next }, 0))
    }

    async fn dequeue(&self, name: &str, token: &str) -> Result<()> {
        let Some(mut queue) = self.inner.queues.get_mut(name) else {
            return Ok(());
        };
        queue.prune(Instant::now());
        let was_first = queue.first().is_some_and(|(first, _)| first == token);
        queue.remove(token);
        drop(queue);
        if was_first {
            // The next in line may take a free lock now.
            let next = self.next_in_line(name);
            self.inner
                .watchers
                .wake(&self.channel(name, Event::Released), waiter_id(&next));
        }
        self.inner.queues.remove_if(name, |_, q| q.is_empty());
        Ok(())
    }

    /// refresh.lua, in memory (see there).
    async fn refresh_places(&self, name: &str, tokens: &[String]) -> Result<Vec<Option<u64>>> {
        let now = Instant::now();
        let Some(mut line) = self.inner.queues.get_mut(name) else {
            return Ok(vec![None; tokens.len()]);
        };
        line.prune(now);
        Ok(tokens
            .iter()
            .map(|token| line.renew(token, now + QUEUE_LIFETIME))
            .collect())
    }

    fn watchers(&self) -> &Watchers {
        &self.inner.watchers
    }

    /// The key of `event` of `name` in the watchers registry.
    fn channel(&self, name: &str, event: Event) -> String {
        super::watch::name_channel(name, event)
    }

    /// The memory store's clock is this process's own: nothing to read.
    async fn ping(&self) -> Result<Ping> {
        Ok(Ping::default())
    }
}

/// An attempt that was not granted.
fn blocked(
    by: BlockedBy,
    fence: u64,
    remaining: Duration,
    holder: &str,
    position: u64,
    queued: usize,
) -> Acquired {
    Acquired::Blocked(Blocked {
        by,
        fence,
        remaining_ms: ceil_ms(remaining).max(1),
        holder: holder.to_owned(),
        position,
        queued: queued as u64,
        expired: 0,
    })
}

/// `outcome`, reporting `n` expired leases found by the attempt.
fn reporting(outcome: Acquired, n: u32) -> Acquired {
    match outcome {
        Acquired::Granted { fence, expired } => Acquired::Granted {
            fence,
            expired: expired + n,
        },
        Acquired::Blocked(blocked) => Acquired::Blocked(Blocked {
            expired: blocked.expired + n,
            ..blocked
        }),
    }
}

/// Joins the queue (or renews the caller's place) if the caller waits; its
/// position (0 if it does not wait).
fn join_queue(spec: &GrantSpec, queue: &mut Line, now: Instant) -> u64 {
    if !spec.queued {
        return 0;
    }
    queue.join(&spec.token, now + QUEUE_LIFETIME)
}

/// A name's wait line (line.lua, in memory): each waiter's arrival
/// sequence and deadline, by token; the tokens by sequence (the order); the
/// deadlines in order (lapsed places leave without a scan); and which
/// sequences are present, for a waiter's rank. Every operation is O(log n),
/// a join amortized O(log n) (see [`Line::renumber`]).
#[derive(Default)]
struct Line {
    places: HashMap<String, Place>,
    order: BTreeMap<u64, String>,
    deadlines: BTreeSet<(Instant, u64)>,
    ranks: Ranks,
    next_seq: u64,
}

/// A waiter's place in a [`Line`].
#[derive(Clone, Copy)]
struct Place {
    seq: u64,
    deadline: Instant,
}

impl Line {
    fn len(&self) -> usize {
        self.places.len()
    }

    fn is_empty(&self) -> bool {
        self.places.is_empty()
    }

    /// Lapsed places (deadline not after `now`) leave.
    fn prune(&mut self, now: Instant) {
        while let Some(&(deadline, seq)) = self.deadlines.first() {
            if deadline > now {
                break;
            }
            self.deadlines.pop_first();
            if let Some(token) = self.order.remove(&seq) {
                self.places.remove(&token);
                self.ranks.add(seq, -1);
            }
        }
    }

    /// The first in line and its deadline.
    fn first(&self) -> Option<(&str, Instant)> {
        let (_, token) = self.order.first_key_value()?;
        let place = self.places.get(token)?;
        Some((token, place.deadline))
    }

    /// Takes `token` out of the line; whether it was in it.
    fn remove(&mut self, token: &str) -> bool {
        let Some(place) = self.places.remove(token) else {
            return false;
        };
        self.order.remove(&place.seq);
        self.deadlines.remove(&(place.deadline, place.seq));
        self.ranks.add(place.seq, -1);
        true
    }

    /// Joins at the back, or renews `token`'s place; its position (1 =
    /// next).
    fn join(&mut self, token: &str, deadline: Instant) -> u64 {
        if let Some(rank) = self.renew(token, deadline) {
            return rank + 1;
        }
        if self.next_seq >= self.ranks.capacity() {
            self.renumber();
        }
        let seq = self.next_seq;
        self.next_seq += 1;
        self.places
            .insert(token.to_owned(), Place { seq, deadline });
        self.order.insert(seq, token.to_owned());
        self.deadlines.insert((deadline, seq));
        self.ranks.add(seq, 1);
        self.len() as u64
    }

    /// Renews `token`'s place until `deadline`; its rank (0 = first), or
    /// `None` if it has no place.
    fn renew(&mut self, token: &str, deadline: Instant) -> Option<u64> {
        let place = self.places.get_mut(token)?;
        self.deadlines.remove(&(place.deadline, place.seq));
        place.deadline = deadline;
        self.deadlines.insert((deadline, place.seq));
        Some(self.ranks.below(place.seq))
    }

    /// Numbers the places again from 0, in order, with room in the rank
    /// tree for as many again: O(n log n), and at least n joins apart, so
    /// amortized O(log n) per join; the tree stays O(n) however many
    /// waiters came and went.
    fn renumber(&mut self) {
        let order = std::mem::take(&mut self.order);
        self.deadlines.clear();
        self.ranks = Ranks::with_capacity((order.len() * 2).max(64));
        for (seq, token) in order.into_values().enumerate() {
            let seq = seq as u64;
            if let Some(place) = self.places.get_mut(&token) {
                place.seq = seq;
                self.deadlines.insert((place.deadline, seq));
                self.ranks.add(seq, 1);
            }
            self.order.insert(seq, token);
        }
        self.next_seq = self.order.len() as u64;
    }
}

/// The sequences present in a [`Line`], as a Fenwick tree: how many are
/// below a given one (a waiter's rank) in O(log n).
#[derive(Default)]
struct Ranks {
    tree: Vec<i64>,
}

impl Ranks {
    fn with_capacity(n: usize) -> Self {
        Ranks { tree: vec![0; n] }
    }

    fn capacity(&self) -> u64 {
        self.tree.len() as u64
    }

    /// Counts `seq` in (`delta` 1) or out (-1). A sequence past the tree
    /// is ignored: [`Line::join`] renumbers before it hands one out.
    fn add(&mut self, seq: u64, delta: i64) {
        // A sequence beyond usize (32-bit targets) is past the tree too.
        let mut i = usize::try_from(seq).map_or(usize::MAX, |s| s.saturating_add(1));
        while i <= self.tree.len() {
            self.tree[i - 1] += delta;
            i += i & i.wrapping_neg();
        }
    }

    /// How many sequences present are below `seq`.
    fn below(&self, seq: u64) -> u64 {
        let mut i = usize::try_from(seq).map_or(self.tree.len(), |s| s.min(self.tree.len()));
        let mut sum = 0;
        while i > 0 {
            sum += self.tree[i - 1];
            i -= i & i.wrapping_neg();
        }
        // Never negative (each sequence counted out was counted in), and
        // zero were it.
        u64::try_from(sum).unwrap_or(0)
    }
}

async fn sweep(inner: Weak<Inner>) {
    loop {
        tokio::time::sleep(SWEEP_INTERVAL).await;
        let Some(inner) = inner.upgrade() else { return };
        let now = Instant::now();
        inner.leases.retain(|_, lease| !lease.spent(now));
        inner.ends.retain(|_, ended| now < ended.forget_at);
        inner.permits.retain(|_, permits| {
            permits.held.retain(|_, p| p.expires_at + LINGER > now);
            !permits.held.is_empty()
        });
        inner.queues.retain(|_, queue| {
            queue.prune(now);
            !queue.is_empty()
        });
    }
}

fn ceil_ms(d: Duration) -> u64 {
    let ms = millis(d);
    if d > Duration::from_millis(ms) {
        ms + 1
    } else {
        ms
    }
}

fn unix_micros() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, micros)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec(name: &str, token: &str, ttl_ms: u64) -> GrantSpec {
        GrantSpec {
            name: name.into(),
            token: token.into(),
            holder: "t".into(),
            ttl_ms,
            lock_delay_ms: 0,
            limit: 1,
            queued: false,
        }
    }

    /// Expiry follows tokio's clock, so it can be checked without waiting.
    #[tokio::test(start_paused = true)]
    async fn a_lease_expires_exactly_at_its_ttl_on_a_paused_clock() {
        let store = MemoryStore::new();
        assert!(matches!(
            store
                .acquire_lock(&spec("a", "t1", 1_000), 0)
                .await
                .unwrap(),
            Acquired::Granted { .. }
        ));
        tokio::time::advance(Duration::from_millis(999)).await;
        assert!(matches!(
            store
                .acquire_lock(&spec("a", "t2", 1_000), 0)
                .await
                .unwrap(),
            Acquired::Blocked(_)
        ));
        tokio::time::advance(Duration::from_millis(1)).await;
        assert!(matches!(
            store
                .acquire_lock(&spec("a", "t2", 1_000), 0)
                .await
                .unwrap(),
            Acquired::Granted { .. }
        ));
        // The grant reported the expiry; the old holder hears that it was
        // reported, not that a stranger holds the name.
        assert_eq!(
            store.renew("a", "t1", None).await.unwrap(),
            Checked::ExpiredReported
        );
    }

    #[tokio::test(start_paused = true)]
    async fn the_sweeper_forgets_expired_leases() {
        let store = MemoryStore::new();
        for i in 0..100 {
            store
                .acquire_lock(&spec(&format!("n{i}"), "t", 500), 0)
                .await
                .unwrap();
        }
        assert_eq!(store.inner.leases.len(), 100);
        // Kept while their holders may still ask how they ended...
        tokio::time::sleep(LINGER).await;
        assert_eq!(store.inner.leases.len(), 100);
        // ...and no longer.
        tokio::time::sleep(SWEEP_INTERVAL * 2).await;
        assert_eq!(store.inner.leases.len(), 0);
    }

    /// Property: whatever the joins, renewals, departures and lapses, a
    /// line's ranks and order are those of a plain list of its waiters in
    /// arrival order (what the list-based line computed in O(n)).
    #[test]
    fn a_line_ranks_as_a_list_would() {
        let mut seed = vec![0u8; 40_000];
        getrandom::fill(&mut seed).unwrap();
        let start = Instant::now();
        let mut line = Line::default();
        let mut model: Vec<(String, Instant)> = Vec::new();
        let mut now = start;
        for pair in seed.chunks(2) {
            let (op, who) = (pair[0] % 8, format!("w{}", pair[1] % 64));
            match op {
                0..=3 => {
                    let deadline = now + Duration::from_millis(u64::from(pair[1]) * 10);
                    let position = line.join(&who, deadline);
                    match model.iter().position(|(t, _)| *t == who) {
                        Some(i) => {
                            model[i].1 = deadline;
                            assert_eq!(position, i as u64 + 1);
                        }
                        None => {
                            model.push((who, deadline));
                            assert_eq!(position, model.len() as u64);
                        }
                    }
                }
                4 | 5 => {
                    let was = model.iter().position(|(t, _)| *t == who);
                    assert_eq!(line.remove(&who), was.is_some());
                    if let Some(i) = was {
                        model.remove(i);
                    }
                }
                6 => {
                    now += Duration::from_millis(u64::from(pair[1]));
                    line.prune(now);
                    model.retain(|(_, deadline)| *deadline > now);
                }
                _ => {
                    let rank = model.iter().position(|(t, _)| *t == who);
                    assert_eq!(
                        line.renew(&who, now + QUEUE_LIFETIME),
                        rank.map(|r| r as u64)
                    );
                    if let Some(i) = rank {
                        model[i].1 = now + QUEUE_LIFETIME;
                    }
                }
            }
            assert_eq!(line.len(), model.len());
            assert_eq!(
                line.first().map(|(t, _)| t.to_owned()),
                model.first().map(|(t, _)| t.clone())
            );
        }
    }

    #[test]
    fn fences_never_repeat_even_within_one_microsecond() {
        let store = MemoryStore {
            inner: Arc::new(Inner {
                leases: DashMap::new(),
                permits: DashMap::new(),
                ends: DashMap::new(),
                queues: DashMap::new(),
                high_water: AtomicU64::new(u64::MAX / 2),
                watchers: Watchers::new(None),
            }),
        };
        let a = store.next_fence();
        let b = store.next_fence();
        assert!(b > a && a > u64::MAX / 2);
    }
}
