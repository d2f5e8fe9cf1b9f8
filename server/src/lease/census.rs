//! The census: what the store holds now (lock leases, semaphore permits,
//! callers in line), counted by tenant, for the `leasehold_store_*` gauges,
//! so that a dashboard shows the fleet without summing counters (grants
//! minus releases drifts with every lease that expired unseen, or was
//! taken before the broker started).
//!
//! The store is the only place that knows: a replica sees only the calls it
//! served, and leases move between replicas with their holders' streams.
//! So every `--census-interval` each replica walks the store's names with
//! the listing's bounded pages ([`super::listing::MAX_PAGE`] names a call,
//! one call at a time), up to `--census-max-names`. Every replica reports
//! the same fleet-wide numbers: aggregate them with `max`, not `sum`. The
//! cost is a walk of every name per interval per replica, stated in
//! docs/operations.md; a census that fails (the store did not answer) keeps
//! the last counts, whose age `leasehold_census_timestamp_seconds` shows.

use std::{collections::BTreeMap, time::Duration};

use tokio::{sync::watch, time::Instant};

use super::{
    listing::MAX_PAGE,
    tenant::{NAMESPACE_SEPARATOR, ROOT_TENANT},
    Leases,
};
use crate::error::Result;

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
    /// Counts what the store holds, looking at no more than `max_names`
    /// names. Fails as soon as one page fails (counted as a store error).
    pub async fn census(&self, max_names: usize) -> Result<Census> {
        let began = Instant::now();
        let mut census = Census::default();
        // The root namespace always has its series, at 0 when nothing is
        // held: a dashboard then shows 0, not "no data".
        census
            .tenants
            .insert(ROOT_TENANT.to_owned(), Counts::default());
        let (mut resume, mut looked) = (None::<String>, 0usize);
        loop {
            let budget = (MAX_PAGE as usize).min(max_names - looked).max(1);
            let page =
                self.count_errors(self.inner.store.list("", resume.as_deref(), budget).await)?;
            looked += budget;
            for listed in page.entries {
                let tenant = match listed.name.split_once(NAMESPACE_SEPARATOR) {
                    Some((tenant, _)) => tenant,
                    None => ROOT_TENANT,
                };
                let label = if census.tenants.contains_key(tenant)
                    || census.tenants.len() < MAX_TENANT_LABELS
                {
                    tenant
                } else {
                    OTHER_TENANTS
                };
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
                Some(_) if looked >= max_names => break,
                Some(next) => resume = Some(next),
            }
        }
        census.took = began.elapsed();
        Ok(census)
    }
}

/// Takes a census every `interval` (none when zero) until `stop` turns
/// true, reporting each to `report`. A census that fails is logged and
/// skipped: the gauges keep the last counts.
pub async fn run(
    leases: Leases,
    interval: Duration,
    max_names: usize,
    report: impl Fn(&Census) + Send,
    mut stop: watch::Receiver<bool>,
) {
    if interval.is_zero() || max_names == 0 {
        return;
    }
    let mut ticks = tokio::time::interval(interval);
    ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    // Said when the census becomes partial, not at every interval.
    let mut was_complete = true;
    loop {
        tokio::select! {
            _ = ticks.tick() => {}
            _ = stop.wait_for(|stopped| *stopped) => return,
        }
        let census = tokio::select! {
            census = leases.census(max_names) => census,
            _ = stop.wait_for(|stopped| *stopped) => return,
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
                report(&census);
            }
            Err(e) => {
                tracing::warn!(error = %e, "census of the store failed; the gauges keep the last counts");
            }
        }
    }
}
