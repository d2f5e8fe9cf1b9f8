//! The census: what the store holds now (lock leases, semaphore permits,
//! callers in line), counted by tenant, for the `leasehold_store_*` gauges,
//! so that a dashboard shows the fleet without summing counters (grants
//! minus releases drifts with every lease that expired unseen, or was
//! taken before the broker started).
//!
//! The store is the only place that knows: a replica sees only the calls it
//! served, and leases move between replicas with their holders' streams.
//! So every `--census-interval` one replica, the one holding the census
//! taker's lease in the store ([`TAKER_LEASE`]), walks the store's names
//! with the listing's bounded pages ([`MAX_PAGE`] names a call, one call
//! at a time), up to `--census-max-names`, and publishes the counts; the
//! others publish none (aggregate with `max`, which then reads the
//! taker's). The cost is one walk per interval for the whole fleet,
//! whatever the number of replicas, and at most a tenth of the store's
//! time for one connection (a long walk spaces the next); stated in
//! docs/operations.md. A census that fails (the store did not answer)
//! keeps the last counts, whose age `leasehold_census_timestamp_seconds`
//! shows.

use std::{
    collections::{BTreeMap, HashSet},
    time::Duration,
};

use tokio::{sync::watch, time::Instant};

use super::{
    listing::{is_internal, MAX_PAGE},
    tenant::{split_stored, ROOT_TENANT},
    Leases,
};
use crate::{
    error::Result,
    store::{Acquired, Checked, GrantSpec},
};

/// Distinct tenants a census labels: the tenants of an auth file, in
/// practice. Names of more tenants than this (a store shared with a
/// broker whose auth file held more) are counted under [`OTHER_TENANTS`],
/// so that the series count stays bounded whatever the store holds.
pub const MAX_TENANT_LABELS: usize = 1000;

/// The tenant label of names past [`MAX_TENANT_LABELS`].
pub const OTHER_TENANTS: &str = "(other)";

/// What one tenant holds now.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Counts {
    /// Lock leases held.
    pub leases: u64,
    /// Semaphore permits held.
    pub permits: u64,
    /// Callers in the names' wait lines, on every replica.
    pub waiters: u64,
}

/// One census of the store.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Census {
    /// By tenant id (`@root` for the root namespace).
    pub tenants: BTreeMap<String, Counts>,
    /// Whether the walk covered every name (false: it stopped at the
    /// cap, and the counts are partial).
    pub complete: bool,
    /// How long the walk took.
    pub took: Duration,
}

impl Leases {
    /// Counts what the store holds, up to `max_names` names with
    /// something on them, in at most [`pages_for`]`(max_names)` pages.
    /// Fails as soon as one page fails (counted as a store error).
    pub async fn census(&self, max_names: usize) -> Result<Census> {
        let began = Instant::now();
        let mut census = Census::default();
        // The root namespace always has its series, at 0 when nothing is
        // held: a dashboard then shows 0, not "no data".
        census
            .tenants
            .insert(ROOT_TENANT.to_owned(), Counts::default());
        let max_pages = pages_for(max_names);
        let (mut resume, mut counted, mut pages) = (None::<String>, 0usize, 0usize);
        // A walk not in name order (Redis's SCAN, etcd's keys) may list a
        // name on two pages: each is counted once. Kept as 64-bit hashes,
        // 8 bytes a name (800 KB at the default cap), whatever the names'
        // length; two of 100,000 names share one with odds of about 1 in
        // 3 billion, and would then count once.
        let mut seen: HashSet<u64> = HashSet::new();
        loop {
            let budget = (MAX_PAGE as usize).min(max_names - counted).max(1);
            let page =
                self.count_errors(self.inner.store.list("", resume.as_deref(), budget).await)?;
            pages += 1;
            for listed in page.entries.into_iter().filter(|l| !is_internal(&l.name)) {
                if !seen.insert(name_hash(&listed.name)) {
                    continue;
                }
                let (tenant, _) = split_stored(&listed.name);
                let label = if census.tenants.contains_key(tenant)
                    || census.tenants.len() < MAX_TENANT_LABELS
                {
                    tenant
                } else {
                    OTHER_TENANTS
                };
                counted += 1;
                let counts = census.tenants.entry(label.to_owned()).or_default();
                let d = listed.described;
                counts.leases += u64::from(d.lease.is_some());
                counts.permits += d.permits;
                counts.waiters += d.waiters;
            }
            match page.next {
                None => {
                    census.complete = true;
                    break;
                }
                Some(_) if counted >= max_names || pages >= max_pages => break,
                Some(next) => resume = Some(next),
            }
        }
        census.took = began.elapsed();
        Ok(census)
    }
}

/// A name's hash for [`Leases::census`]'s set of names counted: SipHash
/// with fixed keys (the names are the store's, not an attacker's choice of
/// collisions against a per-process key: a collision only undercounts).
fn name_hash(name: &str) -> u64 {
    let mut hasher = std::hash::DefaultHasher::new();
    std::hash::Hash::hash(name, &mut hasher);
    std::hash::Hasher::finish(&hasher)
}

/// The most pages a census of up to `max_names` names reads: four times
/// the full pages those names fill. A page holds fewer names than it looks
/// at where a name has several keys (Redis SCAN counts keys; etcd reads
/// keys), or the walk meets names with nothing on them (records lingering
/// after a release): about 1.3 pages per 1000 names on Redis, 1.0 on
/// PostgreSQL, 2 on etcd (BENCHMARKS.md). The walk's cost stays bounded
/// by the cap however sparse the pages.
pub fn pages_for(max_names: usize) -> usize {
    (max_names.saturating_mul(4) / MAX_PAGE as usize).max(1)
}

/// How often a census that may not write to the store (not judged yet,
/// or refused as unsafe) looks again: an atomic load, no store call.
const VERDICT_CHECK: Duration = Duration::from_millis(100);

/// The store name of the census-taker's lease. `@` is in neither the
/// lock-name nor the tenant-id alphabet, so no caller's lock is this name,
/// and listings leave it out ([`super::listing`]).
pub const TAKER_LEASE: &str = "@census";

/// What a replica tells its metrics after each round.
#[derive(Clone, Copy, Debug)]
pub enum Report<'a> {
    /// This replica took a census: its counts.
    Took(&'a Census),
    /// This replica does not take the census (another one holds the
    /// taker's lease, or this one lost it): it reports no counts, so that
    /// a dashboard's `max` never mixes in stale ones.
    NotTaker,
}

/// One replica takes the census for all: the one that holds the taker's
/// lease ([`TAKER_LEASE`]), a lease in the store like any other (granted
/// if free, renewed every interval, released at shutdown, expired at 3
/// intervals when its broker dies, then taken by another). The walk's
/// cost is then once per interval whatever the number of replicas.
struct Taker {
    /// The taker lease's owner token while this replica holds it.
    token: Option<String>,
    /// Its TTL: three intervals, so that one late renewal loses nothing.
    ttl_ms: u64,
}

impl Taker {
    /// Whether this replica is the taker now: renews the lease it holds,
    /// or takes it if it is free. A store that does not answer makes it no
    /// taker for this round (and keeps the token, to renew at the next).
    async fn hold(&mut self, leases: &Leases) -> bool {
        let store = &leases.inner.store;
        if let Some(token) = &self.token {
            match store.renew(TAKER_LEASE, token, Some(self.ttl_ms)).await {
                Ok(Checked::Done(_)) => return true,
                Ok(_) => self.token = None,
                Err(_) => return false,
            }
        }
        let Ok(token) = super::token::generate() else {
            return false;
        };
        let spec = GrantSpec {
            name: TAKER_LEASE.to_owned(),
            token: token.clone(),
            holder: holder_label(),
            ttl_ms: self.ttl_ms,
            lock_delay_ms: 0,
            limit: 1,
            queued: false,
        };
        match store.acquire(&spec).await {
            Ok(Acquired::Granted { .. }) => {
                self.token = Some(token);
                true
            }
            Ok(Acquired::Blocked(_)) => false,
            // The grant may have happened in the store all the same (the
            // call timed out on the way back): the token is kept, so that
            // the next round renews that lease if it exists (and this
            // replica takes the census) or learns it does not, and shutdown
            // releases it; otherwise it would block every replica's
            // census until its expiry.
            Err(_) => {
                self.token = Some(token);
                false
            }
        }
    }

    /// Gives the role up at shutdown, so that another replica takes it at
    /// its next interval rather than at the lease's expiry.
    async fn release(&mut self, leases: &Leases) {
        if let Some(token) = self.token.take() {
            let _ = leases.inner.store.release(TAKER_LEASE, &token).await;
        }
    }
}

/// The taker lease's holder label: this host and process, for an operator
/// who looks at the store.
fn holder_label() -> String {
    let host = std::fs::read_to_string("/proc/sys/kernel/hostname").unwrap_or_default();
    format!("census by {}:{}", host.trim(), std::process::id())
}

/// Takes part in the census until `stop` turns true: every `interval`
/// (none when zero), while `may_write` (the store judged and not refused
/// as unsafe), this replica holds or tries to take the taker's lease,
/// and while it holds it, counts the store, no more often than every
/// `interval` and leaving the store at least nine tenths of the time (a
/// census that took 2 s waits 18 s for the next), renewing the lease on
/// the way. `report` hears each census, and [`Report::NotTaker`] when this
/// replica stops being the taker. A census that fails is logged and
/// skipped: the gauges keep the last counts. At `stop` the lease is given
/// up before this returns: await it, so that a broker that stops leaves no
/// taker's lease behind.
pub async fn run(
    leases: Leases,
    (interval, max_names): (Duration, usize),
    may_write: impl Fn() -> bool + Send,
    report: impl Fn(Report<'_>) + Send,
    mut stop: watch::Receiver<bool>,
) {
    if interval.is_zero() || max_names == 0 {
        return;
    }
    let mut taker = Taker {
        token: None,
        ttl_ms: leases
            .inner
            .store
            .applied_ms(crate::duration::millis(interval * 3)),
    };
    let mut ticks = tokio::time::interval(interval);
    ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let (mut reporting, mut was_complete) = (false, true);
    let mut due = Instant::now();
    'rounds: loop {
        tokio::select! {
            _ = ticks.tick() => {}
            _ = stop.wait_for(|stopped| *stopped) => break,
        }
        // Nothing written (the taker's lease) to a store the broker has
        // not judged yet, or refuses as unsafe: its lease lapses, and no
        // replica counts until the store is fixed. The verdict (the first
        // health ping's, or the fix) is waited for in short steps, not a
        // whole interval: a broker's first census follows its first ping.
        if !may_write() {
            if std::mem::take(&mut reporting) {
                report(Report::NotTaker);
            }
            while !may_write() {
                tokio::select! {
                    () = tokio::time::sleep(VERDICT_CHECK.min(interval)) => {}
                    _ = stop.wait_for(|stopped| *stopped) => break 'rounds,
                }
            }
        }
        if !taker.hold(&leases).await {
            if std::mem::take(&mut reporting) {
                report(Report::NotTaker);
            }
            continue;
        }
        if Instant::now() < due {
            continue;
        }
        let census = leases.census(max_names);
        tokio::pin!(census);
        let census = loop {
            // What woke the walk, decided on outside the select (which
            // holds the stop flag's guard while it runs a branch).
            let tick = tokio::select! {
                census = &mut census => break census,
                _ = ticks.tick() => true,
                _ = stop.wait_for(|stopped| *stopped) => false,
            };
            if !tick {
                break 'rounds;
            }
            if !may_write() || !taker.hold(&leases).await {
                // Another replica may count now: this one stops.
                if std::mem::take(&mut reporting) {
                    report(Report::NotTaker);
                }
                continue 'rounds;
            }
        };
        match census {
            Ok(census) => {
                if was_complete && !census.complete {
                    tracing::warn!(
                        max_names,
                        "the census stopped at --census-max-names: the leasehold_store_* \
                         gauges count part of the store"
                    );
                }
                was_complete = census.complete;
                due = Instant::now() + interval.max(census.took * 9);
                reporting = true;
                report(Report::Took(&census));
            }
            Err(e) => {
                tracing::warn!(error = %e, "census of the store failed; the gauges keep the last counts");
            }
        }
    }
    taker.release(&leases).await;
}
