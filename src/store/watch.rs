//! Local registry of callers waiting for an event of a name (its release,
//! its grant), keyed by the event's channel (`{prefix}{name}:released`...).
//!
//! Each channel with at least one watcher on this replica has a slot holding
//! a [`Notify`]. An event (seen directly by the memory store, or as a Redis
//! pub/sub message) wakes every watcher of the channel. For Redis, the first
//! watcher of a channel subscribes to it and the last one to leave
//! unsubscribes; both requests go, in order, through one queue to the task
//! that owns the subscription connection, so an unsubscribe can never
//! overtake a later subscribe of the same channel.

use std::sync::{
    atomic::{AtomicUsize, Ordering},
    Arc,
};

use dashmap::{mapref::entry::Entry, DashMap};
use tokio::sync::{futures::Notified, mpsc, oneshot, Notify, OnceCell};

use crate::error::{Error, Result};

/// A request to the subscription task.
#[derive(Debug)]
pub(crate) enum SubscriptionRequest {
    /// Subscribe to the channel; answer once Redis confirmed it.
    Subscribe(String, oneshot::Sender<Result<()>>),
    /// Unsubscribe from the channel.
    Unsubscribe(String),
}

struct Slot {
    notify: Notify,
    /// Watches of this name alive now; changed only under the map entry lock.
    count: AtomicUsize,
    /// Of those, the ones of callers waiting to acquire (what Describe
    /// reports); the others observe (an election's Observe stream).
    waiters: AtomicUsize,
    /// Set once the subscription for this slot is confirmed.
    subscribed: OnceCell<()>,
}

struct Inner {
    slots: DashMap<String, Arc<Slot>>,
    /// `None` for stores that see every release themselves (memory).
    subscriptions: Option<mpsc::UnboundedSender<SubscriptionRequest>>,
}

/// The registry; cheap to clone.
#[derive(Clone)]
pub(crate) struct Watchers {
    inner: Arc<Inner>,
}

/// One caller's interest in the releases of one name. Dropping it ends the
/// interest (and the subscription, if it was the last).
pub struct Watch {
    name: String,
    waiter: bool,
    slot: Arc<Slot>,
    inner: Arc<Inner>,
}

impl Watchers {
    pub(crate) fn new(subscriptions: Option<mpsc::UnboundedSender<SubscriptionRequest>>) -> Self {
        Watchers {
            inner: Arc::new(Inner {
                slots: DashMap::new(),
                subscriptions,
            }),
        }
    }

    /// Registers a watch on `name`; returns once releases of the name will
    /// reach it.
    pub(crate) async fn watch(&self, name: &str, waiter: bool) -> Result<Watch> {
        let slot = {
            let slot = self.inner.slots.entry(name.to_owned()).or_insert_with(|| {
                Arc::new(Slot {
                    notify: Notify::new(),
                    count: AtomicUsize::new(0),
                    waiters: AtomicUsize::new(0),
                    subscribed: OnceCell::new(),
                })
            });
            slot.count.fetch_add(1, Ordering::SeqCst);
            if waiter {
                slot.waiters.fetch_add(1, Ordering::SeqCst);
            }
            Arc::clone(&slot)
        };
        // Built before subscribing, so that a failed subscription still
        // unregisters on drop.
        let watch = Watch {
            name: name.to_owned(),
            waiter,
            slot,
            inner: Arc::clone(&self.inner),
        };
        if let Some(subscriptions) = &self.inner.subscriptions {
            watch
                .slot
                .subscribed
                .get_or_try_init(|| async {
                    let (tx, rx) = oneshot::channel();
                    subscriptions
                        .send(SubscriptionRequest::Subscribe(name.to_owned(), tx))
                        .map_err(|_| {
                            Error::Unavailable("the store's subscription task has stopped".into())
                        })?;
                    rx.await.map_err(|_| {
                        Error::Unavailable("the store's subscription task has stopped".into())
                    })?
                })
                .await?;
        }
        Ok(watch)
    }

    /// Wakes every watch of `name` on this replica.
    pub(crate) fn wake(&self, name: &str) {
        if let Some(slot) = self.inner.slots.get(name) {
            slot.notify.notify_waiters();
        }
    }

    /// Wakes every watch: after a lost subscription connection, releases may
    /// have gone unseen, so every waiter must look again.
    pub(crate) fn wake_all(&self) {
        for slot in self.inner.slots.iter() {
            slot.notify.notify_waiters();
        }
    }

    /// Watches of `name` alive now.
    pub(crate) fn waiters(&self, name: &str) -> usize {
        self.inner
            .slots
            .get(name)
            .map_or(0, |s| s.waiters.load(Ordering::SeqCst))
    }
}

impl Watch {
    /// Resolves at the next release of the name. Create it (and `enable` it)
    /// *before* the acquire attempt whose failure makes you wait, so that a
    /// release between the attempt and the wait is not missed.
    pub fn notified(&self) -> Notified<'_> {
        self.slot.notify.notified()
    }
}

impl Drop for Watch {
    fn drop(&mut self) {
        // Decrement under the entry lock, so that a concurrent `watch` either
        // sees this slot alive or creates a fresh one after it is gone.
        if let Entry::Occupied(entry) = self.inner.slots.entry(self.name.clone()) {
            if self.waiter && Arc::ptr_eq(entry.get(), &self.slot) {
                entry.get().waiters.fetch_sub(1, Ordering::SeqCst);
            }
            if Arc::ptr_eq(entry.get(), &self.slot)
                && entry.get().count.fetch_sub(1, Ordering::SeqCst) == 1
            {
                entry.remove();
                if let Some(subscriptions) = &self.inner.subscriptions {
                    // Sent while the entry lock is held: ordered before any
                    // later subscribe of the same name.
                    let _ = subscriptions.send(SubscriptionRequest::Unsubscribe(self.name.clone()));
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn release_wakes_a_watch_and_the_last_drop_unsubscribes() {
        let (tx, mut rx) = mpsc::unbounded_channel();
        let watchers = Watchers::new(Some(tx));
        let w = watchers.clone();
        let first = tokio::spawn(async move { w.watch("a", true).await });
        match rx.recv().await {
            Some(SubscriptionRequest::Subscribe(name, ack)) => {
                assert_eq!(name, "a");
                ack.send(Ok(())).unwrap();
            }
            other => panic!("expected a subscribe, got {other:?}"),
        }
        let first = first.await.unwrap().unwrap();
        // A second watch of the same name does not subscribe again.
        let second = watchers.watch("a", true).await.unwrap();
        assert_eq!(watchers.waiters("a"), 2);

        {
            let notified = first.notified();
            tokio::pin!(notified);
            notified.as_mut().enable();
            watchers.wake("a");
            notified.await;
        }

        drop(first);
        assert!(rx.try_recv().is_err(), "unsubscribed while a watch remains");
        drop(second);
        assert!(matches!(rx.try_recv(), Ok(SubscriptionRequest::Unsubscribe(n)) if n == "a"));
        assert_eq!(watchers.waiters("a"), 0);
    }

    #[tokio::test]
    async fn a_failed_subscription_leaves_no_slot_behind() {
        let (tx, mut rx) = mpsc::unbounded_channel();
        let watchers = Watchers::new(Some(tx));
        let w = watchers.clone();
        let attempt = tokio::spawn(async move { w.watch("b", true).await });
        if let Some(SubscriptionRequest::Subscribe(_, ack)) = rx.recv().await {
            ack.send(Err(Error::Unavailable("down".into()))).unwrap();
        }
        assert!(attempt.await.unwrap().is_err());
        assert_eq!(watchers.waiters("b"), 0);
    }
}
