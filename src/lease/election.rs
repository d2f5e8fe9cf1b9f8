//! Leader election (etcd's v3election, on leases): an election is a lock
//! whose holder label is the leader's value (an address, an id). The leader
//! holds the lease; its fence is the leader's *term*, strictly increasing
//! from one leader to the next, to be attached to everything the leader
//! writes so that a deposed leader's writes can be refused.

use std::time::Duration;

use tokio::time::{sleep, Instant};

use super::{validate, AcquireArgs, Granted, Leases};
use crate::{
    error::Result,
    store::{Event, Watch},
};

/// Who leads an election.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Leader {
    /// The value the leader campaigned with.
    pub value: String,
    /// The leader's term (its lease's fence).
    pub term: u64,
    /// Time left on the leader's lease unless renewed.
    pub remaining_ms: u64,
}

impl Leases {
    /// Waits (up to `wait_timeout_ms`) to become the leader of `election`
    /// with `value`; the lease returned is the leadership, kept alive like
    /// any lease (KeepAlive) and given up by Release.
    pub async fn campaign(
        &self,
        election: &str,
        value: &str,
        ttl_ms: u64,
        wait_timeout_ms: u64,
    ) -> Result<Granted> {
        self.acquire(AcquireArgs {
            name: election.to_owned(),
            ttl_ms,
            holder: value.to_owned(),
            wait_timeout_ms,
            lock_delay_ms: 0,
            limit: 1,
        })
        .await
    }

    /// The current leader of `election`, if any.
    pub async fn leader(&self, election: &str) -> Result<Option<Leader>> {
        let described = self.describe(election).await?;
        Ok(described.lease.map(|l| Leader {
            value: l.holder,
            term: l.fence,
            remaining_ms: l.remaining_ms,
        }))
    }

    /// Follows the leadership of `election`.
    pub async fn observe(&self, election: &str) -> Result<Observer> {
        validate::name(&self.inner.limits, election)?;
        let store = &self.inner.store;
        // Subscribed before the first look, so no change can slip between.
        let released = self.count_errors(store.watch(election, Event::Released, None).await)?;
        let granted = self.count_errors(store.watch(election, Event::Granted, None).await)?;
        Ok(Observer {
            leases: self.clone(),
            election: election.to_owned(),
            released,
            granted,
            last: None,
        })
    }
}

/// A follower of one election's leadership: [`Observer::next`] returns each
/// change, in order.
pub struct Observer {
    leases: Leases,
    election: String,
    released: Watch,
    granted: Watch,
    /// The last term reported (`Some(None)`: reported "no leader").
    last: Option<Option<u64>>,
}

impl Observer {
    /// The leadership as it is now, the first time; after that, waits for
    /// the next change (a new leader, or none) and returns it. Woken by
    /// grants and releases (pushed by the store) and by the current leader's
    /// expiry time; never polls.
    pub async fn next(&mut self) -> Result<Option<Leader>> {
        let leases = self.leases.clone();
        let shutdown = leases.shutting_down();
        tokio::pin!(shutdown);
        loop {
            let released = self.released.notified();
            let granted = self.granted.notified();
            tokio::pin!(released, granted);
            released.as_mut().enable();
            granted.as_mut().enable();

            let current = self.leases.leader(&self.election).await?;
            let term = current.as_ref().map(|l| l.term);
            if self.last != Some(term) {
                self.last = Some(term);
                return Ok(current);
            }
            // Unchanged. A leader that is not renewed is gone at its expiry,
            // which nothing announces: look again then.
            let expiry = current.map_or(Duration::from_secs(3600), |l| {
                Duration::from_millis(l.remaining_ms + 1)
            });
            let until = Instant::now() + expiry;
            tokio::select! {
                () = &mut released => {}
                () = &mut granted => {}
                () = sleep(until - Instant::now()) => {}
                () = &mut shutdown => {
                    return Err(crate::Error::Unavailable(
                        "the broker is shutting down; observe on another replica".into(),
                    ));
                }
            }
        }
    }
}
