//! A held lease: its local deadline, its loss signal, its release.

use std::{
    fmt,
    sync::{
        atomic::{AtomicU64, Ordering},
        Arc,
    },
    time::Duration,
};

use tokio::{
    sync::watch,
    time::{sleep_until, Instant},
};

use crate::{client::release, ClientError, LossReason, Shared};

/// A lease as the keeper tracks it.
pub(crate) struct Held {
    pub(crate) name: String,
    pub(crate) token: String,
    pub(crate) fence: u64,
    /// The TTL in force, in milliseconds: as granted, then as each renewal
    /// applied it (a `ttl_auto` lease's changes with the latency).
    pub(crate) ttl_ms: AtomicU64,
    /// Renewed for the TTL the broker suggests (`AcquireOptions::ttl_auto`).
    pub(crate) ttl_auto: bool,
    /// Subtracted from every deadline (see `AcquireOptions::safety_margin`);
    /// `None`: a tenth of the TTL in force.
    pub(crate) margin: Option<Duration>,
    /// The local deadline: moves forward with each renewal, and back when
    /// a renewal shortened the TTL (a `ttl_auto` lease on a link that got
    /// faster), since the store then expires the lease sooner.
    pub(crate) deadline: watch::Sender<Instant>,
    /// Set once, when the lease is lost.
    pub(crate) lost: watch::Sender<Option<LossReason>>,
}

impl Held {
    /// The TTL in force.
    pub(crate) fn ttl(&self) -> Duration {
        Duration::from_millis(self.ttl_ms.load(Ordering::Relaxed))
    }

    /// The safety margin for a TTL: as set, or a tenth of it; never more
    /// than the TTL.
    pub(crate) fn margin_for(margin: Option<Duration>, ttl: Duration) -> Duration {
        margin.unwrap_or(ttl / 10).min(ttl)
    }

    /// Records a renewal confirmed for a heartbeat sent at `sent`, for
    /// `ttl_ms`. A lease whose deadline already passed stays lost: the
    /// application may have seen it lost, and must not see it come back.
    ///
    /// The renewal set the lease's expiry in the store anew, to at least
    /// `sent + ttl_ms`: the deadline follows it, later as a rule, but
    /// earlier when the TTL shrank (a `ttl_auto` lease whose link got
    /// faster): keeping the later deadline of a longer TTL would have the
    /// holder act on a lease the store may already have given away.
    /// Answers are applied in the order the heartbeats were sent, so the
    /// last one applied is the newest renewal.
    pub(crate) fn renewed(&self, sent: Instant, ttl_ms: u64) {
        if self.loss().is_some() {
            return;
        }
        let shrank = ttl_ms < self.ttl_ms.swap(ttl_ms, Ordering::Relaxed);
        let ttl = Duration::from_millis(ttl_ms);
        let deadline = (sent + ttl)
            .checked_sub(Self::margin_for(self.margin, ttl))
            .unwrap_or(sent);
        self.deadline.send_if_modified(|d| {
            let moved = deadline > *d || (shrank && deadline < *d);
            if moved {
                *d = deadline;
            }
            moved
        });
    }

    /// Marks the lease lost (the first reason wins).
    pub(crate) fn mark_lost(&self, reason: LossReason) {
        self.lost.send_if_modified(|r| {
            let first = r.is_none();
            if first {
                *r = Some(reason);
            }
            first
        });
    }

    /// The loss reason, if lost, counting a passed deadline as a loss.
    pub(crate) fn loss(&self) -> Option<LossReason> {
        if let Some(reason) = *self.lost.borrow() {
            return Some(reason);
        }
        if Instant::now() >= *self.deadline.borrow() {
            self.mark_lost(LossReason::DeadlinePassed);
            return Some(LossReason::DeadlinePassed);
        }
        None
    }
}

/// A held lease. Kept alive in the background; released by
/// [`release`](Lease::release) or, best effort, when dropped.
pub struct Lease {
    pub(crate) held: Arc<Held>,
    pub(crate) shared: Arc<Shared>,
    pub(crate) done: bool,
}

impl fmt::Debug for Lease {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Lease")
            .field("name", &self.held.name)
            .field("fence", &self.held.fence)
            .field("owner_token", &redacted(&self.held.token))
            .finish()
    }
}

impl Lease {
    /// The lock name.
    pub fn name(&self) -> &str {
        &self.held.name
    }

    /// The fencing token: attach it to every write made under this lease.
    pub fn fence(&self) -> u64 {
        self.held.fence
    }

    /// The owner token (a secret: do not log it).
    pub fn owner_token(&self) -> &str {
        &self.held.token
    }

    /// The lease TTL in force: as granted, then as last renewed (a
    /// [`ttl_auto`](crate::AcquireOptions::ttl_auto) lease's follows the
    /// measured latency).
    pub fn ttl(&self) -> Duration {
        self.held.ttl()
    }

    /// The local deadline: the lease is valid at least until then (it is
    /// computed from send times, less the safety margin), unless the broker
    /// says it is lost. Moves forward with each renewal, and back when a
    /// renewal shortened a [`ttl_auto`](crate::AcquireOptions::ttl_auto)
    /// lease's TTL ([`Lease::deadline_changes`] sees both).
    pub fn deadline(&self) -> Instant {
        *self.held.deadline.borrow()
    }

    /// Resolves with the deadline once it is later than `than` (a renewal
    /// was confirmed), at once if it already is; never if the lease is not
    /// renewed any more. Comparing with a value the caller read avoids
    /// missing a renewal confirmed between that read and this call, so a
    /// process that mirrors the deadline elsewhere never lags a renewal.
    pub async fn deadline_after(&self, than: Instant) -> Instant {
        let mut deadline = self.held.deadline.subscribe();
        loop {
            let at = *deadline.borrow_and_update();
            if at > than {
                return at;
            }
            if deadline.changed().await.is_err() {
                // Unreachable while `self` holds the sender; wait forever
                // rather than report a renewal that did not happen.
                std::future::pending::<()>().await;
            }
        }
    }

    /// The deadline as it changes: `changed().await` wakes at every move,
    /// forward or back. For a process that mirrors the deadline elsewhere
    /// (`leasehold run` tells its guardian) and must follow it down as
    /// well as up.
    pub fn deadline_changes(&self) -> watch::Receiver<Instant> {
        self.held.deadline.subscribe()
    }

    /// Whether the lease is lost (or its deadline passed), checked now.
    pub fn is_lost(&self) -> bool {
        self.held.loss().is_some()
    }

    /// `Err(reason)` if the lease is lost: call it before each write.
    pub fn check(&self) -> Result<(), LossReason> {
        self.held.loss().map_or(Ok(()), Err)
    }

    /// Resolves when the lease is lost or its deadline passes unrenewed.
    pub async fn lost(&self) -> LossReason {
        let mut lost = self.held.lost.subscribe();
        let mut deadline = self.held.deadline.subscribe();
        loop {
            if let Some(reason) = self.held.loss() {
                return reason;
            }
            let at = *deadline.borrow_and_update();
            tokio::select! {
                _ = lost.changed() => {}
                _ = deadline.changed() => {}
                () = sleep_until(at) => {}
            }
        }
    }

    /// Stops renewing and releases the lease. Fails with
    /// [`ClientError::Lost`] if it was already gone: then your lease ran out
    /// while you held it.
    pub async fn release(mut self) -> Result<(), ClientError> {
        self.done = true;
        self.shared.forget(&self.held);
        if let Some(reason) = *self.held.lost.borrow() {
            return Err(ClientError::Lost(reason));
        }
        release(&self.shared, &self.held.name, &self.held.token).await
    }
}

impl Drop for Lease {
    fn drop(&mut self) {
        if self.done {
            return;
        }
        self.shared.forget(&self.held);
        if self.held.lost.borrow().is_some() {
            return;
        }
        // Best effort: release in the background if a runtime is there; the
        // TTL frees the lock otherwise.
        if let Ok(runtime) = tokio::runtime::Handle::try_current() {
            let (shared, held) = (Arc::clone(&self.shared), Arc::clone(&self.held));
            runtime.spawn(async move {
                let _ = release(&shared, &held.name, &held.token).await;
            });
        }
    }
}

/// A token fit for logs and `Debug`: its first 4 characters only, enough to
/// correlate lines of one lease, useless for taking it over.
pub(crate) fn redacted(token: &str) -> String {
    format!("{}…", token.get(..4).unwrap_or(""))
}
