//! Heartbeat sessions: what one KeepAlive stream renews, and what its end
//! means.
//!
//! A session is stateless towards the client (each heartbeat names the
//! leases to renew) but remembers, per lease it renewed (by owner token: a
//! semaphore's name has several leases at once, and a lock's name many over
//! time), the earliest moment the lease could expire. That memory lets it
//! tell the holder *why* a lease is gone (a lease missing before it could
//! have expired was lost by the store, not by the clock) and, when the
//! stream ends, have the broker look a little past the TTL whether the
//! lease was resumed elsewhere, released, or ran out
//! (`lease_lost_total{reason="expired"}`; `abandoned.rs`).

use std::{collections::HashMap, time::Duration};

use tokio::time::{sleep_until, Instant};

use super::{validate, Caller, Leases, LossReason, Slot};
use crate::{
    error::{Error, Result},
    store::{Checked, RenewItem},
};

/// One lease named in a heartbeat (`Debug` redacts the token).
#[derive(Clone)]
pub struct LeaseRef {
    /// Lock name.
    pub name: String,
    /// Owner token.
    pub owner_token: String,
    /// New TTL; 0 keeps the lease's own.
    pub ttl_ms: u64,
}

impl std::fmt::Debug for LeaseRef {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LeaseRef")
            .field("name", &self.name)
            .field("owner_token", &crate::redact::Redacted(&self.owner_token))
            .field("ttl_ms", &self.ttl_ms)
            .finish()
    }
}

/// What became of one lease in a heartbeat.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum LeaseState {
    /// Renewed for `ttl_ms`.
    Alive {
        /// The TTL applied.
        ttl_ms: u64,
        /// The lease's fence.
        fence: u64,
    },
    /// Gone for good.
    Lost {
        /// Why.
        reason: LossReason,
        /// The current holder's fence, for `NotOwner`; else 0.
        fence: u64,
        /// For people.
        message: String,
    },
    /// The store did not answer; the lease may still be alive.
    Unconfirmed {
        /// For people.
        message: String,
    },
    /// Malformed entry.
    Rejected {
        /// What is wrong.
        message: String,
    },
}

/// A lease this session renewed, kept by its owner token.
#[derive(Clone)]
struct Tracked {
    /// Its name in the store.
    name: String,
    /// The earliest moment the store may expire it: the renewal was applied
    /// after this session sent it, so the lease lives at least until then.
    expires_no_sooner_than: Instant,
}

/// The state of one KeepAlive stream.
pub struct Session {
    leases: Leases,
    /// Whose leases these are: names are in its namespace, and the leases
    /// count against its caps.
    caller: Caller,
    _slots: (Slot, Slot),
    /// By owner token (never logged, never `Debug`).
    tracked: HashMap<String, Tracked>,
    /// Rate limit (GCRA): the theoretical arrival time of the next heartbeat.
    next_arrival: Instant,
}

impl Session {
    pub(super) fn new(leases: Leases, caller: Caller, slots: (Slot, Slot)) -> Self {
        leases.inner.events.keepalive_stream(true);
        Session {
            leases,
            caller,
            _slots: slots,
            tracked: HashMap::new(),
            next_arrival: Instant::now(),
        }
    }

    /// Waits as long as needed to keep this stream within
    /// `--max-stream-rate` heartbeats per second (with a burst of one
    /// second's worth). The caller reads the next heartbeat only afterwards,
    /// so a flood is slowed by HTTP/2 flow control, not buffered.
    pub async fn throttle(&mut self) {
        let rate = self.leases.inner.limits.max_stream_rate.max(1);
        let interval = Duration::from_secs(1) / rate;
        let burst = Duration::from_secs(1).saturating_sub(interval);
        let now = Instant::now();
        let arrival = self.next_arrival.max(now);
        if arrival > now + burst {
            sleep_until(arrival - burst).await;
        }
        self.next_arrival = arrival + interval;
    }

    /// Renews the leases of one heartbeat, in one store round trip, and says
    /// what became of each (same order). Fails only when the heartbeat breaks
    /// a stream limit; the stream should then end with that error.
    pub async fn heartbeat(&mut self, leases: Vec<LeaseRef>) -> Result<Vec<(String, LeaseState)>> {
        let inner = &self.leases.inner;
        let limits = &inner.limits;
        if leases.len() > limits.max_stream_leases {
            return Err(Error::ResourceExhausted(format!(
                "a heartbeat names {} leases; the limit is {} per stream (--max-stream-leases): \
                 spread them over several streams",
                leases.len(),
                limits.max_stream_leases
            )));
        }

        let mut states: Vec<Option<LeaseState>> = Vec::with_capacity(leases.len());
        let mut items = Vec::with_capacity(leases.len());
        for lease in &leases {
            let checked = validate::name(limits, &lease.name)
                .and_then(|()| validate::owner_token(&lease.owner_token))
                .and_then(|()| validate::ttl(limits, lease.ttl_ms, None));
            match checked {
                Ok(ttl_ms) => {
                    states.push(None);
                    items.push(RenewItem {
                        name: self.caller.tenant().qualify(&lease.name),
                        token: lease.owner_token.clone(),
                        ttl_ms,
                    });
                }
                Err(e) => states.push(Some(LeaseState::Rejected {
                    message: e.to_string(),
                })),
            }
        }

        let sent = Instant::now();
        let outcomes = self
            .leases
            .count_errors(inner.store.renew_many(&items).await);
        if !items.is_empty() {
            inner.events.renewed(sent.elapsed());
        }
        let now = Instant::now();
        let mut next_tracked = HashMap::with_capacity(items.len());
        let mut outcomes = match outcomes {
            Ok(outcomes) => outcomes.into_iter().map(Ok).collect::<Vec<_>>(),
            Err(e) => {
                // Unknown fate: keep tracking what we knew until we know more.
                for item in &items {
                    if let Some(t) = self.tracked_as(item) {
                        next_tracked.insert(item.token.clone(), t.clone());
                    }
                }
                let message = e.to_string();
                items.iter().map(|_| Err(message.clone())).collect()
            }
        }
        .into_iter();

        // The items are consumed here: a renewed lease's name and token move
        // into the tracked map instead of being copied (two allocations per
        // lease per heartbeat, a heartbeat naming up to 1,000).
        for (item, slot) in items
            .into_iter()
            .zip(states.iter_mut().filter(|s| s.is_none()))
        {
            // Both stores answer every item (Redis checks the count).
            let outcome = outcomes
                .next()
                .unwrap_or_else(|| Err("no answer from the store".into()));
            let state = match outcome {
                Err(message) => LeaseState::Unconfirmed { message },
                Ok(Checked::Done(renewed)) => {
                    self.caller.hold(
                        &item.name,
                        &item.token,
                        now + Duration::from_millis(renewed.ttl_ms),
                    );
                    next_tracked.insert(
                        item.token,
                        Tracked {
                            name: item.name,
                            expires_no_sooner_than: sent + Duration::from_millis(renewed.ttl_ms),
                        },
                    );
                    LeaseState::Alive {
                        ttl_ms: renewed.ttl_ms,
                        fence: renewed.fence,
                    }
                }
                Ok(Checked::Released) => {
                    // A heartbeat that crossed its own release: nothing lost.
                    self.caller.forget(&item.name, &item.token);
                    LeaseState::Lost {
                        reason: LossReason::Expired,
                        fence: 0,
                        message: "the lease was released with this owner token".into(),
                    }
                }
                Ok(Checked::Expired) => {
                    self.caller.forget(&item.name, &item.token);
                    self.leases.lost(&item.name, LossReason::Expired);
                    LeaseState::Lost {
                        reason: LossReason::Expired,
                        fence: 0,
                        message: "the lease expired before this renewal reached the store".into(),
                    }
                }
                Ok(Checked::ExpiredReported) => {
                    // Counted where it was first learnt (an earlier request,
                    // or the grant that found it expired). This session may
                    // still believe it alive (a renewal elsewhere gave it a
                    // shorter TTL than this stream's): the store's word on
                    // the token decides, not that belief.
                    self.caller.forget(&item.name, &item.token);
                    LeaseState::Lost {
                        reason: LossReason::Expired,
                        fence: 0,
                        message: "the lease expired (its loss was reported already)".into(),
                    }
                }
                Ok(outcome @ (Checked::NotHeld | Checked::NotOwner { .. })) => {
                    self.caller.forget(&item.name, &item.token);
                    let fence = match outcome {
                        Checked::NotOwner { fence } => fence,
                        _ => 0,
                    };
                    // The store has no record of this lease (an expiry
                    // reported already is ExpiredReported, above). If this
                    // session renewed it and it cannot have expired yet, the
                    // store lost it (restarted empty, flushed, evicted): a
                    // loss only this session can see, so count it here.
                    // Else it is an old or foreign token, or one whose
                    // record lapsed.
                    let lost_early = self
                        .tracked_as(&item)
                        .is_some_and(|t| now < t.expires_no_sooner_than);
                    if lost_early {
                        self.leases.lost(&item.name, LossReason::StoreLost);
                        LeaseState::Lost {
                            reason: LossReason::StoreLost,
                            fence,
                            message: "the store lost the lease before it could have expired \
                                      (restarted empty, flushed, or the key was deleted)"
                                .into(),
                        }
                    } else if fence == 0 {
                        LeaseState::Lost {
                            reason: LossReason::Expired,
                            fence,
                            message: "no such lease: it expired (its loss was reported \
                                      already), or this owner token never held it"
                                .into(),
                        }
                    } else {
                        LeaseState::Lost {
                            reason: LossReason::NotOwner,
                            fence,
                            message: format!(
                                "the lock is held by another owner (current fence {fence})"
                            ),
                        }
                    }
                }
                // Counted as lost when it was revoked.
                Ok(Checked::Revoked { fence }) => {
                    self.caller.forget(&item.name, &item.token);
                    LeaseState::Lost {
                        reason: LossReason::Revoked,
                        fence,
                        message: "an operator revoked the lease".into(),
                    }
                }
            };
            *slot = Some(state);
        }
        // Leases the client no longer names are no longer this session's.
        self.tracked = next_tracked;
        Ok(leases
            .into_iter()
            .zip(states)
            .map(|(lease, state)| {
                let state = state.unwrap_or_else(|| LeaseState::Unconfirmed {
                    message: "internal error: no outcome".into(),
                });
                (lease.name, state)
            })
            .collect())
    }

    /// This session's record of the lease `item` names: only if it renewed
    /// that token's lease *of that name*.
    fn tracked_as(&self, item: &RenewItem) -> Option<&Tracked> {
        self.tracked
            .get(&item.token)
            .filter(|t| t.name == item.name)
    }

    /// The stream ended, however: the client closed it (after releasing
    /// its leases, or handing them to another stream), reset it (a cancel,
    /// which reaches the broker as a clean end), or the connection broke.
    /// Renewals stop; the leases run out their TTL unless the client
    /// resumes them elsewhere, and the broker looks at each a little past
    /// its TTL (`abandoned.rs`): an expiry is counted, a release or a
    /// resumption is not, so a clean end needs no trust in the client.
    pub fn end(mut self) {
        let tracked = std::mem::take(&mut self.tracked);
        if tracked.is_empty() {
            return;
        }
        tracing::debug!(
            leases = tracked.len(),
            "KeepAlive stream ended; its leases run out their TTL unless resumed"
        );
        self.leases.watch_abandoned(
            tracked
                .into_iter()
                .map(|(token, t)| (t.name, token, t.expires_no_sooner_than)),
        );
    }
}

impl Drop for Session {
    fn drop(&mut self) {
        self.leases.inner.events.keepalive_stream(false);
    }
}
