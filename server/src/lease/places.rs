//! The places of this replica's waiting callers in the wait lines of their
//! names (in the store, shared by every replica).
//!
//! A place lapses unless refreshed within [`QUEUE_LIFETIME`], so that the
//! waiters of a replica that died leave the line by themselves. Each waiter
//! used to refresh its own with an acquire attempt every [`QUEUE_REFRESH`]:
//! a script run per waiter per second, and with a list for a line, each
//! O(n) in the line's length (10,000 waiters on one name took more than a
//! Redis core). Here one task refreshes them all, every [`QUEUE_REFRESH`]:
//! one store call per name ([`Store::refresh_places`]: O(log n) per waiter
//! in Redis), whatever the number of this replica's waiters on it.
//!
//! The refresh also tells each waiter's rank, so a waiter need not look at
//! the name itself to learn it moved up: only the first in line can be
//! granted, and the others wait for an event naming them. The task wakes a
//! waiter that became first in line without being told (it had a place
//! further back at its last attempt: the event that would have named it
//! went to a waiter that lapsed since, or was lost with a subscription),
//! and one that lost its place (it lapsed while the store was slow or lost
//! its data), which then takes a new one at the back.

use std::{
    collections::HashMap,
    sync::{
        atomic::{AtomicU64, Ordering},
        Arc, Weak,
    },
};

use dashmap::DashMap;

use super::Events;
use crate::store::{Store, QUEUE_LIFETIME, QUEUE_REFRESH};

/// The waiters of this replica, by store name of the lock.
#[derive(Default)]
pub(super) struct Places {
    names: DashMap<String, HashMap<u64, Waiter>>,
    next_id: AtomicU64,
}

struct Waiter {
    token: String,
    /// Its position (1 = next) as its last attempt learnt it.
    position: Arc<AtomicU64>,
}

/// A waiter as a refresh sees it: its token, and the position it knew.
type Known = (String, Arc<AtomicU64>);

/// A waiter's registration: its place is refreshed while this lives.
pub(super) struct Place {
    places: Arc<Places>,
    name: String,
    id: u64,
    position: Arc<AtomicU64>,
}

impl Place {
    /// Records the position the waiter's last attempt learnt.
    pub(super) fn saw(&self, position: u64) {
        self.position.store(position, Ordering::Relaxed);
    }
}

impl Drop for Place {
    fn drop(&mut self) {
        if let dashmap::mapref::entry::Entry::Occupied(mut entry) =
            self.places.names.entry(self.name.clone())
        {
            entry.get_mut().remove(&self.id);
            if entry.get().is_empty() {
                entry.remove();
            }
        }
    }
}

impl Places {
    /// Starts refreshing the place of `token` in `name`'s line (the
    /// waiter's attempt just took it).
    pub(super) fn register(self: &Arc<Self>, name: &str, token: &str, position: u64) -> Place {
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        let position = Arc::new(AtomicU64::new(position));
        self.names.entry(name.to_owned()).or_default().insert(
            id,
            Waiter {
                token: token.to_owned(),
                position: Arc::clone(&position),
            },
        );
        Place {
            places: Arc::clone(self),
            name: name.to_owned(),
            id,
            position,
        }
    }

    /// Refreshes every place once: one store call per name, all at once.
    /// Returns how many waiters were woken.
    pub(super) async fn refresh(&self, store: &Store, events: &dyn Events) -> usize {
        let lines: Vec<(String, Vec<Known>)> = self
            .names
            .iter()
            .map(|entry| {
                let waiters = entry
                    .value()
                    .values()
                    .map(|w| (w.token.clone(), Arc::clone(&w.position)))
                    .collect();
                (entry.key().clone(), waiters)
            })
            .collect();
        let calls = lines.iter().map(|(name, waiters)| async move {
            let tokens: Vec<String> = waiters.iter().map(|(t, _)| t.clone()).collect();
            match store.refresh_places(name, &tokens).await {
                Ok(ranks) => {
                    let woken: Vec<&str> = waiters
                        .iter()
                        .zip(ranks)
                        .filter(|((_, position), rank)| match rank {
                            None => true,
                            Some(0) => position.load(Ordering::Relaxed) != 1,
                            Some(_) => false,
                        })
                        .map(|((token, _), _)| token.as_str())
                        .collect();
                    store.wake_waiters(name, &woken);
                    woken.len()
                }
                Err(e) => {
                    // The places last QUEUE_LIFETIME: the next refresh, a
                    // second later, may still keep them.
                    events.store_failed();
                    tracing::warn!(lock = %name, error = %e, "refreshing waiters' places failed");
                    0
                }
            }
        });
        futures_util::future::join_all(calls)
            .await
            .into_iter()
            .sum()
    }
}

/// Refreshes the places every [`QUEUE_REFRESH`] until `places` is dropped.
/// A refresh slower than that delays the next one rather than overlapping
/// it (the places last [`QUEUE_LIFETIME`], three refreshes).
pub(super) async fn keep(places: Weak<Places>, store: Store, events: Arc<dyn Events>) {
    const _: () = assert!(QUEUE_REFRESH.as_millis() * 2 < QUEUE_LIFETIME.as_millis());
    let mut ticks = tokio::time::interval(QUEUE_REFRESH);
    ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        ticks.tick().await;
        let Some(places) = places.upgrade() else {
            return;
        };
        if places.names.is_empty() {
            continue;
        }
        places.refresh(&store, &*events).await;
    }
}
