//! Leader election (etcd's v3election, on leases): an election is a lock
//! whose holder label is the leader's value (an address, an id). The leader
//! holds the lease; its fence is the leader's *term*, strictly increasing
//! from one leader to the next, to be attached to everything the leader
//! writes so that a deposed leader's writes can be refused.

use std::time::Duration;

use tokio::time::{sleep, Instant};

use super::{AcquireArgs, Caller, Granted, Leases, PlaceArgs, Slot};
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
    /// any lease (KeepAlive) and given up by Release. `place`: as for
    /// Acquire (keep_place, place).
    pub async fn campaign(
        &self,
        caller: &Caller,
        election: &str,
        value: &str,
        (ttl_ms, wait_timeout_ms): (u64, u64),
        place: PlaceArgs,
    ) -> Result<Granted> {
        self.acquire(
            caller,
            AcquireArgs {
                ttl_auto: false,
                name: election.to_owned(),
                ttl_ms,
                holder: value.to_owned(),
                wait_timeout_ms,
                lock_delay_ms: 0,
                limit: 1,
                keep_place: place.keep,
                place: place.given,
            },
        )
        .await
    }

    /// The current leader of `election`, if any.
    pub async fn leader(&self, caller: &Caller, election: &str) -> Result<Option<Leader>> {
        let stored = self.scoped(caller, "", election)?;
        self.leader_stored(&stored).await
    }

    async fn leader_stored(&self, stored: &str) -> Result<Option<Leader>> {
        let described = self.describe_stored(stored).await?;
        Ok(described.lease.map(|l| Leader {
            value: l.holder,
            term: l.fence,
            remaining_ms: l.remaining_ms,
        }))
    }

    /// Follows the leadership of `election`; the observer counts as one of
    /// the caller's streams until dropped.
    pub async fn observe(&self, caller: &Caller, election: &str) -> Result<Observer> {
        let stored = self.scoped(caller, "", election)?;
        let slots = caller.stream_slot()?;
        let store = &self.inner.store;
        // Subscribed before the first look, so no change can slip between.
        let released = self.count_errors(store.watch(&stored, Event::Released, None).await)?;
        let granted = self.count_errors(store.watch(&stored, Event::Granted, None).await)?;
        Ok(Observer {
            leases: self.clone(),
            election: stored,
            released,
            granted,
            last: None,
            _slots: slots,
        })
    }
}

/// A follower of one election's leadership: [`Observer::next`] returns each
/// change, in order.
pub struct Observer {
    leases: Leases,
    /// The election's store name.
    election: String,
    released: Watch,
    granted: Watch,
    /// The last term reported (`Some(None)`: reported "no leader").
    last: Option<Option<u64>>,
    _slots: (Slot, Slot),
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

            let current = self.leases.leader_stored(&self.election).await?;
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
