//! The last leases this replica learnt were lost, for the status page
//! (`GET /v1/status` of the JSON gateway): an operator who sees a loss in
//! `lease_lost_total` can see which lock, whose, and why, without a log
//! pipeline. A bounded ring: the newest [`CAPACITY`] losses, the oldest
//! forgotten, so that a storm of expiries costs a fixed amount of memory.
//!
//! Each replica knows the losses it learnt (a loss is counted once, by
//! whichever replica learns it first: see `Leases::lost`); the fleet's are
//! the union of the replicas'.

use std::{
    collections::VecDeque,
    sync::Mutex,
    time::{SystemTime, UNIX_EPOCH},
};

use super::{events::LossReason, tenant::split_stored};

/// Losses kept.
pub const CAPACITY: usize = 100;

/// One lost lease.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Loss {
    /// The lock name as its holders name it (without the tenant).
    pub name: String,
    /// The tenant whose lock it is (`@root` for the root namespace).
    pub tenant: String,
    /// Why it was lost.
    pub reason: LossReason,
    /// When this replica learnt it, in milliseconds since the Unix epoch.
    pub at_unix_ms: u64,
}

/// The ring of the newest losses.
#[derive(Debug, Default)]
pub struct Recent {
    /// Oldest first. A std mutex: held to push or copy, never across an
    /// await.
    losses: Mutex<VecDeque<Loss>>,
}

impl Recent {
    /// Records the loss of the lease on `stored` (the name as the store
    /// knows it: `tenant|name`, or the bare name in the root namespace).
    pub fn record(&self, stored: &str, reason: LossReason) {
        let (tenant, name) = split_stored(stored);
        let (tenant, name) = (tenant.to_owned(), name.to_owned());
        // A clock before 1970 or past u64 milliseconds says 0 or the most.
        let at_unix_ms = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX));
        let mut losses = self
            .losses
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if losses.len() == CAPACITY {
            losses.pop_front();
        }
        losses.push_back(Loss {
            name,
            tenant,
            reason,
            at_unix_ms,
        });
    }

    /// The losses kept, newest first: of `tenant` only, or of every tenant
    /// (`None`: for an administrator).
    pub fn list(&self, tenant: Option<&str>) -> Vec<Loss> {
        let losses = self
            .losses
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        losses
            .iter()
            .rev()
            .filter(|loss| tenant.is_none_or(|t| loss.tenant == t))
            .cloned()
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::lease::ROOT_TENANT;

    #[test]
    fn the_newest_losses_are_kept_and_listed_by_tenant() {
        let recent = Recent::default();
        recent.record("a|jobs/x", LossReason::Expired);
        recent.record("plain", LossReason::Revoked);
        let all = recent.list(None);
        assert_eq!(all.len(), 2);
        assert_eq!(
            (all[0].tenant.as_str(), all[0].name.as_str()),
            (ROOT_TENANT, "plain")
        );
        assert_eq!(all[0].reason, LossReason::Revoked);
        assert_eq!(
            (all[1].tenant.as_str(), all[1].name.as_str()),
            ("a", "jobs/x")
        );
        assert_eq!(recent.list(Some("a")).len(), 1);
        assert!(recent.list(Some("b")).is_empty());

        for i in 0..CAPACITY + 5 {
            recent.record(&format!("b|n{i}"), LossReason::NotOwner);
        }
        let all = recent.list(None);
        assert_eq!(all.len(), CAPACITY);
        assert_eq!(all[0].name, format!("n{}", CAPACITY + 4));
        assert_eq!(all[CAPACITY - 1].name, "n5");
        assert!(recent.list(Some("a")).is_empty(), "the oldest forgotten");
    }
}
