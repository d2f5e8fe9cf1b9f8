//! Grants nobody heard of. An Acquire attempt whose store call failed
//! (it timed out, or the connection broke after the request was sent) may
//! still have run in the store: the lock is then granted to an owner token
//! that no caller knows, and nobody would end it before its TTL (up to
//! `--ttl-max`), while waiters queue behind it. The same holds for a grant
//! whose caller left and whose release then failed.
//!
//! Such a token is remembered here and released *by its token* (which only
//! deletes a lease that token holds: safe to repeat, and harmless when the
//! attempt never ran) as soon as the store answers again. One task serves
//! every pending token of a broker, so an outage with many failed attempts
//! costs one probe per [`ORPHAN_RETRY`], not one timer per attempt.
//!
//! Nobody was told of these leases, so they count neither as released nor
//! as lost; `leasehold_orphans_released_total` counts those that existed.

use std::{
    collections::HashMap,
    sync::{
        atomic::{AtomicBool, Ordering},
        Arc, Mutex, Weak,
    },
    time::Duration,
};

use tokio::{sync::Notify, time::Instant};

use super::{Caller, Inner, Leases};
use crate::redact::Redacted;
use crate::{error::Error, store::Checked};

/// How often the pending tokens are tried while the store does not answer.
pub(super) const ORPHAN_RETRY: Duration = Duration::from_millis(200);

/// Most tokens pending at once. Past it a failed attempt is not
/// remembered (and logged): its lease, if any, lapses at its TTL. Keeps an
/// outage with a storm of Acquire calls from growing the broker without
/// bound.
const MAX_PENDING: usize = 100_000;

/// A token whose grant may exist.
struct Orphan {
    /// The lock's name in the store.
    name: String,
    /// When a grant made by the attempt has expired anyway.
    until: Instant,
    /// The attempt may have left a place in the name's queue.
    queued: bool,
}

/// The pending tokens of one broker, shared with the task that releases
/// them (held apart from the lease service, so that the task waits without
/// keeping the service alive).
#[derive(Default)]
pub(super) struct Orphans {
    /// By owner token.
    pending: Mutex<HashMap<String, Orphan>>,
    /// Wakes the task when a token is added.
    added: Notify,
    /// Whether the task runs (started by the first token).
    started: AtomicBool,
}

impl Orphans {
    fn len(&self) -> usize {
        self.pending
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .len()
    }
}

impl Leases {
    /// Remembers that the grant of `token` on `name` (stored name; TTL
    /// `ttl_ms`; `queued` if its attempt may have joined the line) may
    /// exist without its caller hearing of it, and has it released as soon
    /// as the store answers.
    pub(super) fn orphaned(&self, name: &str, token: &str, ttl_ms: u64, queued: bool) {
        let orphans = &self.inner.orphans;
        {
            let mut pending = orphans
                .pending
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner);
            if pending.len() >= MAX_PENDING {
                tracing::warn!(
                    lock = %name, token = %Redacted(token),
                    "too many grants of unknown outcome pending; this one lapses at its TTL"
                );
                return;
            }
            pending.insert(
                token.to_owned(),
                Orphan {
                    name: name.to_owned(),
                    until: Instant::now() + Duration::from_millis(ttl_ms),
                    queued,
                },
            );
        }
        tracing::debug!(
            lock = %name, token = %Redacted(token),
            "the outcome of an acquire attempt is unknown; releasing its token once the store answers"
        );
        if !orphans.started.swap(true, Ordering::SeqCst) {
            tokio::spawn(reap(
                Arc::clone(&self.inner.orphans),
                Arc::downgrade(&self.inner),
            ));
        }
        orphans.added.notify_one();
    }

    /// Releases a grant its caller never heard of: the caller left as the
    /// grant arrived, or the stream that was to carry the answer broke
    /// first. If the store does not answer, the grant is released later
    /// ([`Leases::orphaned`]): nobody holds a lease for a caller that never
    /// learnt it has one, beyond the store's silence.
    pub(super) async fn release_unheard(
        &self,
        caller: &Caller,
        stored: &str,
        token: &str,
        ttl_ms: u64,
    ) {
        match self.count_errors(self.inner.store.release(stored, token).await) {
            Ok(Checked::Done(())) => {
                self.inner.events.released();
                super::audit::released(stored, token, super::audit::Release::Unheard);
            }
            Ok(_) => {}
            Err(_) => self.orphaned(stored, token, ttl_ms, false),
        }
        caller.forget(stored, token);
    }

    /// Leaves the queue (if the attempt may have joined it) and releases
    /// `token`. `Ok` once the store answered both.
    async fn release_orphan(&self, token: &str, orphan: &mut Orphan) -> Result<(), Error> {
        let store = &self.inner.store;
        if orphan.queued {
            self.count_errors(store.dequeue(&orphan.name, token).await)?;
            orphan.queued = false;
        }
        if let Checked::Done(()) = self.count_errors(store.release(&orphan.name, token).await)? {
            self.inner.events.orphan_released();
            super::audit::released(&orphan.name, token, super::audit::Release::Unheard);
        }
        Ok(())
    }
}

/// Releases the pending tokens: waits for one, then every
/// [`ORPHAN_RETRY`] until none is left: when the store answers a PING,
/// releases them all. Drops tokens whose lease would have expired anyway.
/// Ends when the broker shuts down or the lease service is gone.
async fn reap(orphans: Arc<Orphans>, inner: Weak<Inner>) {
    loop {
        let added = orphans.added.notified();
        tokio::pin!(added);
        added.as_mut().enable();
        if orphans.len() == 0 {
            added.await;
        }
        let Some(inner) = inner.upgrade() else { return };
        let leases = Leases { inner };
        if *leases.inner.shutdown.borrow() {
            return;
        }
        let now = Instant::now();
        orphans
            .pending
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .retain(|_, o| o.until > now);
        // A cheap probe first: while the store does not answer, one PING
        // per round rather than a release per token; and a release is sent
        // only once the store answers, so that its answer (was the grant
        // there?) is heard rather than lost to another timeout.
        if leases.inner.store.ping().await.is_ok() {
            leases.release_orphans(&orphans).await;
        }
        if orphans.len() == 0 {
            continue;
        }
        tokio::select! {
            () = tokio::time::sleep(ORPHAN_RETRY) => {}
            () = leases.shutting_down() => return,
        }
    }
}

impl Leases {
    /// One round of [`reap`]: releases every pending token, stopping at
    /// the first store failure (those left wait for the next round).
    async fn release_orphans(&self, orphans: &Orphans) {
        let tokens: Vec<String> = orphans
            .pending
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .keys()
            .cloned()
            .collect();
        for token in tokens {
            let Some(mut orphan) = orphans
                .pending
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner)
                .remove(&token)
            else {
                continue;
            };
            if self.release_orphan(&token, &mut orphan).await.is_err() {
                orphans
                    .pending
                    .lock()
                    .unwrap_or_else(std::sync::PoisonError::into_inner)
                    .insert(token, orphan);
                break;
            }
        }
    }
}
