//! Leases whose KeepAlive stream ended: nobody renews them here any more,
//! and if they run out their TTL, this broker is the one that can tell
//! (their holder is gone; the next grant of the name may be hours away).
//! A little past the latest moment each could expire, it is looked at
//! (without renewing it): one that expired there is counted as lost, unless
//! another request learnt it first (the store reports an expiry once); one
//! that was released, or resumed on another stream, is not. A look the
//! store does not answer (a timeout under load, a failover) is tried again,
//! backing off, for as long as the store keeps an expired lease's record
//! ([`LINGER`]): a look tried once left a loss uncounted whenever that one
//! store call failed.
//!
//! Why one shared set and not a task per ended stream: a stream names up to
//! `--max-stream-leases` leases, and a client can end streams as fast as it
//! can open connections. A task holding each stream's list until its
//! latest TTL (up to `--ttl-max`) grew the broker by gigabytes in seconds
//! under a loop of "connect, one heartbeat naming 1,000 one-hour leases,
//! reset". Here a lease is remembered once, by its owner token, however
//! many streams named it and ended: the set holds at most one entry per
//! lease renewed through this broker, and never more than [`MAX_WATCHED`].
//! An entry exists only for a lease a heartbeat renewed (the store said
//! the token holds it), so a caller cannot fill it with made-up tokens.

use std::{
    collections::{BTreeSet, HashMap},
    sync::{
        atomic::{AtomicBool, Ordering},
        Arc, Mutex, Weak,
    },
    time::Duration,
};

use tokio::{
    sync::Notify,
    time::{sleep_until, Instant},
};

use futures_util::StreamExt;

use super::{Inner, Leases, LossReason};
use crate::store::{contract::LINGER, Checked};

/// How long after the latest moment a lease could expire it is looked at,
/// so that the store has expired it by then.
const LOOK_AFTER: Duration = Duration::from_millis(250);

/// How long a failed look waits before it is tried again, at first; doubled
/// each time up to [`RETRY_MAX`], so that a store down for the whole
/// [`LINGER`] is asked about each lease a handful of times, not hammered.
const RETRY_FIRST: Duration = Duration::from_millis(250);
const RETRY_MAX: Duration = Duration::from_secs(2);

/// Most looks in flight at once: a batch that falls due together (a broker
/// of many streams that all broke) is looked at in parallel, so that a slow
/// store does not push the last looks past the record's [`LINGER`], yet the
/// store is never sent more than this at once from here.
const LOOKS_AT_ONCE: usize = 32;

/// Most leases watched at once: the size of the largest load the broker is
/// measured with (100,000 leases over 100 streams: BENCHMARKS.md, "Leases
/// kept alive over 100 streams"), about
/// 15 MB at worst. Past it, a lease of an ended stream is not watched (and
/// that is logged): its expiry, if it comes, is counted by the next grant
/// of its name instead, as for the leases of a broker that died.
pub(super) const MAX_WATCHED: usize = 100_000;

/// One watched lease.
struct Watched {
    /// The lock's name in the store.
    name: Box<str>,
    /// When to look at it.
    due: Instant,
    /// After this, a failed look is not tried again: the store has dropped
    /// an expired record by then ([`LINGER`] past its expiry).
    give_up: Instant,
    /// How long the next failed look waits before it is tried again.
    backoff: Duration,
}

/// A watched lease whose look is due.
struct Due {
    name: Box<str>,
    token: Arc<str>,
    give_up: Instant,
    backoff: Duration,
}

#[derive(Default)]
struct State {
    /// By owner token (a token holds one lease; the name is checked too).
    by_token: HashMap<Arc<str>, Watched>,
    /// The same entries in the order they are due.
    by_due: BTreeSet<(Instant, Arc<str>)>,
    /// The cap was hit since the last warning.
    warned: bool,
}

impl State {
    /// Watches `token`'s lease on `name` until `due` (or a later moment
    /// already set), within [`MAX_WATCHED`].
    fn watch(&mut self, name: String, token: String, due: Instant) {
        let give_up = due - LOOK_AFTER + LINGER;
        let full = self.by_token.len() >= MAX_WATCHED;
        match self.by_token.get_mut(token.as_str()) {
            Some(watched) if *watched.name == *name => {
                if due > watched.due {
                    let key: Arc<str> = Arc::from(token);
                    self.by_due.remove(&(watched.due, Arc::clone(&key)));
                    self.by_due.insert((due, key));
                    watched.due = due;
                    watched.give_up = watched.give_up.max(give_up);
                    watched.backoff = RETRY_FIRST;
                }
                return;
            }
            // The same token named with another name: the store said this
            // token holds `name` now, so the other entry is stale.
            Some(watched) => {
                let stale = watched.due;
                let key: Arc<str> = Arc::from(token.as_str());
                self.by_due.remove(&(stale, key));
                self.by_token.remove(token.as_str());
            }
            None if full => {
                if !self.warned {
                    self.warned = true;
                    tracing::warn!(
                        watched = MAX_WATCHED,
                        "too many leases of ended KeepAlive streams watched; the expiry of \
                         further ones is counted by the next grant of their name instead"
                    );
                }
                return;
            }
            None => {}
        }
        let key: Arc<str> = Arc::from(token);
        self.by_due.insert((due, Arc::clone(&key)));
        self.by_token.insert(
            key,
            Watched {
                name: name.into(),
                due,
                give_up,
                backoff: RETRY_FIRST,
            },
        );
        if self.by_token.len() < MAX_WATCHED / 2 {
            self.warned = false;
        }
    }
}

/// The leases of ended streams, shared with the task that looks at them
/// (held apart from the lease service, so that the task waits without
/// keeping the service alive).
#[derive(Default)]
pub(super) struct Abandoned {
    /// A std mutex: held for a few map operations, never across an await.
    state: Mutex<State>,
    /// Wakes the task when an entry is added.
    added: Notify,
    /// Whether the task runs (started by the first entry).
    started: AtomicBool,
}

impl Abandoned {
    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// How many leases are watched now.
    #[cfg(test)]
    fn len(&self) -> usize {
        self.lock().by_token.len()
    }

    /// Takes the entries due by `now`, earliest first.
    fn take_due(&self, now: Instant) -> Vec<Due> {
        let mut state = self.lock();
        let mut due = Vec::new();
        while let Some((when, token)) = state.by_due.first().cloned() {
            if when > now {
                break;
            }
            state.by_due.pop_first();
            if let Some(watched) = state.by_token.remove(&token) {
                due.push(Due {
                    name: watched.name,
                    token,
                    give_up: watched.give_up,
                    backoff: watched.backoff,
                });
            }
        }
        due
    }

    /// Puts back a lease whose look failed, to be looked at again after its
    /// backoff; `false` if that would be past its record's [`LINGER`] (then
    /// it is let go). A lease watched anew meanwhile (another stream that
    /// named it ended) keeps its new entry.
    fn retry(&self, failed: Due, now: Instant) -> bool {
        let due = now + failed.backoff;
        if due > failed.give_up {
            return false;
        }
        let mut state = self.lock();
        if state.by_token.contains_key(&failed.token) {
            return true;
        }
        // Within the cap: a retry only takes back the room its look freed,
        // unless new entries filled it meanwhile.
        if state.by_token.len() >= MAX_WATCHED {
            return false;
        }
        state.by_due.insert((due, Arc::clone(&failed.token)));
        state.by_token.insert(
            failed.token,
            Watched {
                name: failed.name,
                due,
                give_up: failed.give_up,
                backoff: (failed.backoff * 2).min(RETRY_MAX),
            },
        );
        true
    }

    fn next_due(&self) -> Option<Instant> {
        self.lock().by_due.first().map(|(when, _)| *when)
    }
}

impl Leases {
    /// Watches each `(name, token, expires_by)` (store name; the leases of
    /// one ended stream; the latest moment the store may expire each),
    /// until that moment plus the store's expiry lag plus [`LOOK_AFTER`]. A
    /// lease watched already (another stream that named it ended): the
    /// later moment stands. One lock of the set for the batch.
    pub(super) fn watch_abandoned(
        &self,
        ended: impl IntoIterator<Item = (String, String, Instant)>,
    ) {
        let abandoned = &self.inner.abandoned;
        let after = self.inner.store.expiry_lag() + LOOK_AFTER;
        {
            let mut state = abandoned.lock();
            for (name, token, expires_by) in ended {
                state.watch(name, token, expires_by + after);
            }
        }
        if !abandoned.started.swap(true, Ordering::SeqCst) {
            tokio::spawn(look(
                Arc::clone(&self.inner.abandoned),
                Arc::downgrade(&self.inner),
            ));
        }
        abandoned.added.notify_one();
    }

    /// Looks at one watched lease: counts its expiry if this is the first
    /// news of it; a look the store did not answer is put back, to be tried
    /// again. `false` when it failed for the last time (said once per batch
    /// by the caller: a store down for long would log every lease).
    async fn look_at_abandoned(&self, due: Due) -> bool {
        match self.inner.store.check(&due.name, &due.token).await {
            Ok(Checked::Expired) => self.lost(&due.name, LossReason::Expired),
            // Alive (resumed elsewhere), released, revoked (counted then),
            // or reported already (by its holder, or by the grant that took
            // it over: ExpiredReported).
            Ok(_) => {}
            Err(e) => {
                self.inner.events.store_failed();
                let name = due.name.clone();
                // Put back, it is seen by the task's next round: the task
                // runs this, and looks for the next due entry after the batch.
                let again = self.inner.abandoned.retry(due, Instant::now());
                tracing::debug!(lock = %name, error = %e, again, "could not look at the lease of an ended stream");
                return again;
            }
        }
        true
    }
}

/// Looks at each watched lease when it is due. Ends when the broker shuts
/// down (the leases stay in the store, for their holders to resume on
/// another replica) or the lease service is gone.
async fn look(abandoned: Arc<Abandoned>, inner: Weak<Inner>) {
    loop {
        let added = abandoned.added.notified();
        tokio::pin!(added);
        added.as_mut().enable();
        let Some(next) = abandoned.next_due() else {
            added.await;
            continue;
        };
        // No strong reference while asleep: the wait may last up to
        // --ttl-max, and must not keep a dropped lease service alive.
        let Some(mut shutdown) = inner.upgrade().map(|i| i.shutdown.subscribe()) else {
            return;
        };
        tokio::select! {
            () = sleep_until(next) => {}
            // An earlier entry may have arrived.
            () = &mut added => continue,
            // Shutting down, or the lease service is gone (the sender with it).
            _ = shutdown.wait_for(|down| *down) => return,
        }
        let Some(strong) = inner.upgrade() else {
            return;
        };
        let leases = Leases { inner: strong };
        let given_up = std::sync::atomic::AtomicUsize::new(0);
        futures_util::stream::iter(abandoned.take_due(Instant::now()))
            .for_each_concurrent(LOOKS_AT_ONCE, |due| async {
                if !leases.look_at_abandoned(due).await {
                    given_up.fetch_add(1, Ordering::Relaxed);
                }
            })
            .await;
        let given_up = given_up.into_inner();
        if given_up > 0 {
            tracing::warn!(
                leases = given_up,
                "the store did not answer the looks at leases of ended streams before it drops \
                 their records; their expiries, if any, go uncounted"
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{
        lease::{tests::leases, AcquireArgs, Caller},
        metrics::Metrics,
    };

    async fn grant(leases: &Leases, name: &str, ttl_ms: u64) -> String {
        let args = AcquireArgs {
            name: name.into(),
            ttl_ms,
            ..Default::default()
        };
        let granted = leases.acquire(&Caller::local(), args).await.unwrap();
        granted.lease.owner_token
    }

    fn expired(metrics: &Metrics) -> u64 {
        metrics.lost.with_label_values(&["expired"]).get()
    }

    /// However many ended streams named a lease, it is watched once, until
    /// the latest moment any of them said it could expire, and its expiry
    /// is counted once.
    #[tokio::test(start_paused = true)]
    async fn a_lease_named_by_many_ended_streams_is_watched_once() {
        let (leases, metrics) = leases();
        let token = grant(&leases, "many", 1_000).await;
        let soon = Instant::now() + Duration::from_millis(1_000);
        for i in 0..1_000 {
            // Earlier and later reports alike.
            let when = soon + Duration::from_millis(i % 3);
            leases.watch_abandoned([("many".to_owned(), token.clone(), when)]);
        }
        assert_eq!(leases.inner.abandoned.len(), 1);
        tokio::time::sleep(Duration::from_millis(1_500)).await;
        // The look happens on the task; let it run.
        while leases.inner.abandoned.len() > 0 || expired(&metrics) == 0 {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        assert_eq!(expired(&metrics), 1);
    }

    /// A lease released before it is looked at is not counted, and one
    /// resumed (renewed elsewhere) is not either.
    #[tokio::test(start_paused = true)]
    async fn released_and_resumed_leases_are_not_losses() {
        let (leases, metrics) = leases();
        let released = grant(&leases, "released", 1_000).await;
        let resumed = grant(&leases, "resumed", 1_000).await;
        let due = Instant::now() + Duration::from_millis(1_000);
        leases.watch_abandoned([
            ("released".to_owned(), released.clone(), due),
            ("resumed".to_owned(), resumed.clone(), due),
        ]);
        leases
            .release(&Caller::local(), "released", &released)
            .await
            .unwrap();
        let renew = |leases: Leases, token: String| async move {
            leases
                .renew(&Caller::local(), "resumed", &token, 60_000, false)
                .await
                .unwrap()
        };
        renew(leases.clone(), resumed.clone()).await;
        while leases.inner.abandoned.len() > 0 {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        // Taken off the set just before their look: let it finish.
        tokio::time::sleep(Duration::from_millis(100)).await;
        assert_eq!(expired(&metrics), 0);
    }

    /// The set never holds more than [`MAX_WATCHED`] leases.
    #[tokio::test(start_paused = true)]
    async fn the_set_is_capped() {
        let (leases, _metrics) = leases();
        let due = Instant::now() + Duration::from_secs(3_600);
        leases.watch_abandoned(
            (0..MAX_WATCHED + 10).map(|i| ("capped".to_owned(), format!("{i:032x}"), due)),
        );
        assert_eq!(leases.inner.abandoned.len(), MAX_WATCHED);
    }
}
