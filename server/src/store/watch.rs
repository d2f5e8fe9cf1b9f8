//! Local registry of callers waiting for an event of a name (its release,
//! its grant), keyed by the event's channel (`{prefix}{name}:released`...).
//!
//! Each channel with at least one watch on this replica has an entry listing
//! its watches, each with a [`Notify`] of its own. An event (seen directly by
//! the memory store, as a Redis pub/sub message, or as a PostgreSQL NOTIFY
//! on the schema's channel, `postgres/listen.rs`) names the waiter first in
//! the name's queue, if any: only that waiter is woken, with every observer
//! (an election's Observe stream). The others could not take the lock anyway
//! (the queue is FIFO), so waking them would only cost a script run each per
//! handoff. An event that names nobody wakes every watch.
//!
//! For Redis, the first watch of a channel subscribes to it and the last one
//! to leave unsubscribes; both requests go, in order, through one queue to
//! the task that owns the subscription connection, so an unsubscribe can
//! never overtake a later subscribe of the same channel.

use std::sync::{
    atomic::{AtomicU64, Ordering},
    Arc, Mutex, MutexGuard, PoisonError,
};

use dashmap::{mapref::entry::Entry, DashMap};
use tokio::sync::{futures::Notified, mpsc, oneshot, Notify, OnceCell};

use crate::error::{Error, Result};

/// How a waiter is named in events: the first 16 hex digits (64 bits) of its
/// token. Enough to tell the waiters of one name apart, and the token itself
/// (which becomes the owner token on a grant) is never published.
pub(crate) fn waiter_id(token: &str) -> &str {
    token.get(..16).unwrap_or(token)
}

/// The channel of `event` on `name` in a [`Watchers`] registry, for the
/// stores whose watches are set per name and event rather than per key
/// (memory, etcd, ZooKeeper): `<event suffix>:<name>`.
pub(crate) fn name_channel(name: &str, event: super::Event) -> String {
    format!("{}:{name}", event.suffix())
}

/// The event and name a [`name_channel`] stands for; `None` for any other
/// string.
pub(crate) fn parse_name_channel(channel: &str) -> Option<(super::Event, &str)> {
    let (suffix, name) = channel.split_once(':')?;
    let event = [super::Event::Released, super::Event::Granted]
        .into_iter()
        .find(|e| e.suffix() == suffix)?;
    Some((event, name))
}

/// A request to the subscription task.
#[derive(Debug)]
pub(crate) enum SubscriptionRequest {
    /// Subscribe to the channel; answer once Redis confirmed it.
    Subscribe(String, oneshot::Sender<Result<()>>),
    /// Unsubscribe from the channel.
    Unsubscribe(String),
}

/// One watch, as its channel's entry knows it.
struct Member {
    id: u64,
    /// The waiter id ([`waiter_id`]) of a caller waiting to acquire; `None`
    /// for an observer.
    waiter: Option<Box<str>>,
    notify: Arc<Notify>,
}

/// The watches of one channel: its entry in the registry.
struct ChannelWatches {
    /// The watches of this channel; changed only under the map entry lock.
    members: Mutex<Vec<Member>>,
    /// Set once the subscription to this channel is confirmed.
    subscribed: OnceCell<()>,
}

impl ChannelWatches {
    fn new() -> Arc<Self> {
        Arc::new(ChannelWatches {
            members: Mutex::new(Vec::new()),
            subscribed: OnceCell::new(),
        })
    }

    fn members(&self) -> MutexGuard<'_, Vec<Member>> {
        // Nothing panics while holding it; a poisoned list is still whole.
        self.members.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

struct Inner {
    by_channel: DashMap<String, Arc<ChannelWatches>>,
    next_id: AtomicU64,
    /// `None` for stores that see every release themselves (memory).
    subscriptions: Option<mpsc::UnboundedSender<SubscriptionRequest>>,
}

/// The registry; cheap to clone.
#[derive(Clone)]
pub(crate) struct Watchers {
    inner: Arc<Inner>,
}

/// One caller's interest in the events of one name. Dropping it ends the
/// interest (and the subscription, if it was the last).
pub struct Watch {
    channel: String,
    id: u64,
    notify: Arc<Notify>,
    watches: Arc<ChannelWatches>,
    inner: Arc<Inner>,
}

impl Watchers {
    pub(crate) fn new(subscriptions: Option<mpsc::UnboundedSender<SubscriptionRequest>>) -> Self {
        Watchers {
            inner: Arc::new(Inner {
                by_channel: DashMap::new(),
                next_id: AtomicU64::new(0),
                subscriptions,
            }),
        }
    }

    /// Registers a watch on `channel`; returns once its events will reach
    /// it. `waiter`: the token of a caller waiting to acquire (woken when it
    /// is first in line), or `None` for an observer (woken by every event).
    pub(crate) async fn watch(&self, channel: &str, waiter: Option<&str>) -> Result<Watch> {
        // Built before subscribing, so that a failed subscription still
        // unregisters on drop.
        let watch = {
            let watches = self
                .inner
                .by_channel
                .entry(channel.to_owned())
                .or_insert_with(ChannelWatches::new);
            self.join(channel, &watches, waiter)
        };
        if let Some(subscriptions) = &self.inner.subscriptions {
            watch
                .watches
                .subscribed
                .get_or_try_init(|| async {
                    let (tx, rx) = oneshot::channel();
                    subscriptions
                        .send(SubscriptionRequest::Subscribe(channel.to_owned(), tx))
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

    /// Registers a watch on `channel` if that needs nothing of the store:
    /// it sees every event itself (memory), or the channel's subscription
    /// is up already (another watch of this replica has it). `None`
    /// otherwise: [`Watchers::watch`] then.
    pub(crate) fn watch_now(&self, channel: &str, waiter: Option<&str>) -> Option<Watch> {
        // Joined while the entry is held: a Drop removing the last member
        // takes the entry's write lock, so it either ran before (no entry,
        // or a fresh one) or sees the new member.
        if self.inner.subscriptions.is_some() {
            let watches = self.inner.by_channel.get(channel)?;
            watches
                .subscribed
                .initialized()
                .then(|| self.join(channel, &watches, waiter))
        } else {
            let watches = self
                .inner
                .by_channel
                .entry(channel.to_owned())
                .or_insert_with(ChannelWatches::new);
            Some(self.join(channel, &watches, waiter))
        }
    }

    /// A new watch among `watches`, the entry of `channel`, which the
    /// caller holds.
    fn join(&self, channel: &str, watches: &Arc<ChannelWatches>, waiter: Option<&str>) -> Watch {
        let id = self.inner.next_id.fetch_add(1, Ordering::Relaxed);
        let notify = Arc::new(Notify::new());
        watches.members().push(Member {
            id,
            waiter: waiter.map(|t| waiter_id(t).into()),
            notify: Arc::clone(&notify),
        });
        Watch {
            channel: channel.to_owned(),
            id,
            notify,
            watches: Arc::clone(watches),
            inner: Arc::clone(&self.inner),
        }
    }

    /// An event on `channel`. `next`: the waiter id of the first in line
    /// (only it is woken, with every observer), or empty to wake every
    /// watch. A wake-up reaching a watch that is not waiting is kept for its
    /// next wait, so a caller busy with an attempt does not miss it.
    pub(crate) fn wake(&self, channel: &str, next: &str) {
        if let Some(watches) = self.inner.by_channel.get(channel) {
            for member in watches.members().iter() {
                let woken = match &member.waiter {
                    None => true,
                    Some(id) => next.is_empty() || **id == *next,
                };
                if woken {
                    member.notify.notify_one();
                }
            }
        }
    }

    /// Wakes the waiters whose tokens are `tokens` on `channel` and no
    /// other watch (observers included): their broker found them first in
    /// line, or without a place, when it refreshed the places of its
    /// waiters. One pass over the channel's watches, however many tokens.
    pub(crate) fn wake_waiters(&self, channel: &str, tokens: &[&str]) {
        if tokens.is_empty() {
            return;
        }
        let ids: std::collections::HashSet<&str> = tokens.iter().map(|t| waiter_id(t)).collect();
        if let Some(watches) = self.inner.by_channel.get(channel) {
            for member in watches.members().iter() {
                if member.waiter.as_deref().is_some_and(|id| ids.contains(id)) {
                    member.notify.notify_one();
                }
            }
        }
    }

    /// Wakes every watch: after a lost subscription connection, releases may
    /// have gone unseen, so every waiter must look again.
    pub(crate) fn wake_all(&self) {
        for watches in &self.inner.by_channel {
            for member in watches.members().iter() {
                member.notify.notify_one();
            }
        }
    }

    /// Every channel an observer watches on this replica now (the
    /// PostgreSQL store keeps telling the database that they are watched).
    pub(crate) fn observed_channels(&self) -> Vec<String> {
        self.inner
            .by_channel
            .iter()
            .filter(|entry| entry.value().members().iter().any(|m| m.waiter.is_none()))
            .map(|entry| entry.key().clone())
            .collect()
    }

    /// Whether an observer watches `channel` on this replica now.
    pub(crate) fn has_observer(&self, channel: &str) -> bool {
        self.inner
            .by_channel
            .get(channel)
            .is_some_and(|entry| entry.members().iter().any(|m| m.waiter.is_none()))
    }

    /// Watches of `channel` by callers waiting to acquire, alive now.
    pub(crate) fn waiters(&self, channel: &str) -> usize {
        self.inner.by_channel.get(channel).map_or(0, |s| {
            s.members().iter().filter(|m| m.waiter.is_some()).count()
        })
    }
}

impl Watch {
    /// Resolves at the next event that wakes this watch, or at once if one
    /// came since the last wait. Creating it *before* the look at the name
    /// that makes you wait is not needed for correctness (wake-ups are kept),
    /// but harmless.
    pub fn notified(&self) -> Notified<'_> {
        self.notify.notified()
    }
}

impl Drop for Watch {
    fn drop(&mut self) {
        // Removed under the entry lock, so that a concurrent `watch` either
        // sees this entry alive or creates a fresh one after it is gone.
        if let Entry::Occupied(entry) = self.inner.by_channel.entry(self.channel.clone()) {
            if !Arc::ptr_eq(entry.get(), &self.watches) {
                return;
            }
            let empty = {
                let mut members = entry.get().members();
                members.retain(|m| m.id != self.id);
                members.is_empty()
            };
            if empty {
                entry.remove();
                if let Some(subscriptions) = &self.inner.subscriptions {
                    // Sent while the entry lock is held: ordered before any
                    // later subscribe of the same channel.
                    let _ =
                        subscriptions.send(SubscriptionRequest::Unsubscribe(self.channel.clone()));
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use futures_util::FutureExt;

    use super::*;

    const T1: &str = "0123456789abcdef0123456789abcdef";
    const T2: &str = "fedcba9876543210fedcba9876543210";

    #[test]
    fn a_name_channel_reads_back_its_event_and_name() {
        for event in [crate::store::Event::Released, crate::store::Event::Granted] {
            let channel = name_channel("t|jobs:a/b", event);
            assert_eq!(parse_name_channel(&channel), Some((event, "t|jobs:a/b")));
        }
        assert_eq!(parse_name_channel("nothing:x"), None);
        assert_eq!(parse_name_channel("released"), None);
    }

    #[tokio::test]
    async fn an_event_wakes_the_first_in_line_and_the_observers_only() {
        let watchers = Watchers::new(None);
        let first = watchers.watch("c", Some(T1)).await.unwrap();
        let second = watchers.watch("c", Some(T2)).await.unwrap();
        let observer = watchers.watch("c", None).await.unwrap();
        assert_eq!(watchers.waiters("c"), 2);

        // Sent while nobody waits: kept for the next wait.
        watchers.wake("c", waiter_id(T1));
        assert!(first.notified().now_or_never().is_some());
        assert!(second.notified().now_or_never().is_none());
        assert!(observer.notified().now_or_never().is_some());
        // Consumed: the next wait waits.
        assert!(first.notified().now_or_never().is_none());

        // First in line is a waiter of another replica: observers only.
        watchers.wake("c", "0000000000000000");
        assert!(first.notified().now_or_never().is_none());
        assert!(second.notified().now_or_never().is_none());
        assert!(observer.notified().now_or_never().is_some());

        // Nobody named: everyone.
        watchers.wake("c", "");
        assert!(first.notified().now_or_never().is_some());
        assert!(second.notified().now_or_never().is_some());
        assert!(observer.notified().now_or_never().is_some());

        watchers.wake_all();
        assert!(second.notified().now_or_never().is_some());
        drop((first, second, observer));
        assert_eq!(watchers.waiters("c"), 0);
        assert!(watchers.inner.by_channel.is_empty());
    }

    #[tokio::test]
    async fn release_wakes_a_watch_and_the_last_drop_unsubscribes() {
        let (tx, mut rx) = mpsc::unbounded_channel();
        let watchers = Watchers::new(Some(tx));
        let w = watchers.clone();
        let first = tokio::spawn(async move { w.watch("a", Some(T1)).await });
        match rx.recv().await {
            Some(SubscriptionRequest::Subscribe(name, ack)) => {
                assert_eq!(name, "a");
                ack.send(Ok(())).unwrap();
            }
            other => panic!("expected a subscribe, got {other:?}"),
        }
        let first = first.await.unwrap().unwrap();
        // A second watch of the same name does not subscribe again.
        let second = watchers.watch("a", Some(T2)).await.unwrap();
        assert_eq!(watchers.waiters("a"), 2);

        {
            let notified = first.notified();
            tokio::pin!(notified);
            notified.as_mut().enable();
            watchers.wake("a", "");
            notified.await;
        }

        drop(first);
        assert!(rx.try_recv().is_err(), "unsubscribed while a watch remains");
        drop(second);
        assert!(matches!(rx.try_recv(), Ok(SubscriptionRequest::Unsubscribe(n)) if n == "a"));
        assert_eq!(watchers.waiters("a"), 0);
    }

    /// `watch_now` registers only what needs no subscribing: on a store
    /// that subscribes, a channel not yet subscribed gets `None` (and no
    /// entry, no request); once another watch subscribed it, a watch that
    /// events wake, and the subscription ends with the last of them.
    #[tokio::test]
    async fn watch_now_needs_a_subscribed_channel() {
        let (tx, mut rx) = mpsc::unbounded_channel();
        let watchers = Watchers::new(Some(tx));
        assert!(watchers.watch_now("a", Some(T1)).is_none());
        assert!(watchers.inner.by_channel.is_empty());
        assert!(rx.try_recv().is_err());

        let w = watchers.clone();
        let subscribing = tokio::spawn(async move { w.watch("a", Some(T1)).await });
        let Some(SubscriptionRequest::Subscribe(_, ack)) = rx.recv().await else {
            panic!("expected a subscribe");
        };
        // Not confirmed yet: still none.
        tokio::task::yield_now().await;
        assert!(watchers.watch_now("a", Some(T2)).is_none());
        ack.send(Ok(())).unwrap();
        let first = subscribing.await.unwrap().unwrap();

        let early = watchers.watch_now("a", Some(T2)).expect("subscribed: free");
        assert_eq!(watchers.waiters("a"), 2);
        watchers.wake("a", waiter_id(T2));
        assert!(early.notified().now_or_never().is_some());
        assert!(first.notified().now_or_never().is_none());
        drop(first);
        assert!(rx.try_recv().is_err(), "unsubscribed while a watch remains");
        drop(early);
        assert!(matches!(rx.try_recv(), Ok(SubscriptionRequest::Unsubscribe(n)) if n == "a"));

        // A store that sees every event itself: always at once.
        let memory = Watchers::new(None);
        let watch = memory.watch_now("m", Some(T1)).expect("memory: free");
        memory.wake("m", "");
        assert!(watch.notified().now_or_never().is_some());
        drop(watch);
        assert!(memory.inner.by_channel.is_empty());
    }

    #[tokio::test]
    async fn a_failed_subscription_leaves_no_entry_behind() {
        let (tx, mut rx) = mpsc::unbounded_channel();
        let watchers = Watchers::new(Some(tx));
        let w = watchers.clone();
        let attempt = tokio::spawn(async move { w.watch("b", Some(T1)).await });
        if let Some(SubscriptionRequest::Subscribe(_, ack)) = rx.recv().await {
            ack.send(Err(Error::Unavailable("down".into()))).unwrap();
        }
        assert!(attempt.await.unwrap().is_err());
        assert_eq!(watchers.waiters("b"), 0);
    }
}
