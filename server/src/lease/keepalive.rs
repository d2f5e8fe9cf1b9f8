//! Heartbeat sessions: what one KeepAlive or Session stream renews, and
//! what its end means.
//!
//! A KeepAlive session is stateless towards the client (each heartbeat
//! names the leases to renew); a Session stream's also keeps the leases
//! granted on it until they are released or lost there ([`Scope`]). Both
//! remember, per lease it renewed (by owner token: a
//! semaphore's name has several leases at once, and a lock's name many over
//! time), the earliest moment the lease could expire. That memory lets it
//! tell the holder *why* a lease is gone (a lease missing before it could
//! have expired was lost by the store, not by the clock) and, when the
//! stream ends, have the broker look a little past the TTL whether the
//! lease was resumed elsewhere, released, or ran out
//! (`lease_lost_total{reason="expired"}`; `abandoned.rs`).

use std::{
    collections::HashMap,
    sync::{
        atomic::{AtomicBool, Ordering},
        Mutex, MutexGuard,
    },
    time::Duration,
};

use tokio::time::{sleep_until, Instant};

use super::{
    advice::{self, Advice, RoundTrips},
    validate, AcquireArgs, Caller, Granted, Leases, LossReason, Slot,
};
use crate::{
    error::{Error, Result},
    store::{Checked, RenewItem, Renewed},
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
    /// Renew for the TTL the broker suggests for this stream
    /// (`advice::suggested_ttl`); `ttl_ms` must then be 0.
    pub ttl_auto: bool,
}

impl std::fmt::Debug for LeaseRef {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LeaseRef")
            .field("name", &self.name)
            .field("owner_token", &crate::redact::Redacted(&self.owner_token))
            .field("ttl_ms", &self.ttl_ms)
            .field("ttl_auto", &self.ttl_auto)
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
struct Tracked {
    /// Its name in the store.
    name: String,
    /// When the store may expire it.
    when: Expiry,
}

/// When the store may expire a lease this session renewed (no name: a
/// heartbeat reads it for every lease it names, without allocating).
#[derive(Clone, Copy)]
struct Expiry {
    /// The earliest moment: the renewal was applied after this session
    /// sent it, so the lease lives at least until then.
    no_sooner_than: Instant,
    /// The latest: the renewal was applied before its answer arrived (or,
    /// for one whose answer never came, before the broker gave up on it).
    /// A lease of an ended stream is looked at past this, not past the
    /// earliest: looked at sooner, a lease whose renewal took long to
    /// answer (a loaded machine) was found alive, and its expiry went
    /// uncounted.
    by: Instant,
    /// Its TTL as last renewed here, for the latest moment of a renewal
    /// whose answer never came.
    ttl: Duration,
}

impl Tracked {
    /// A lease granted or renewed for `ttl_ms`, the request sent at `sent`
    /// and answered at `answered`.
    fn new(name: String, sent: Instant, answered: Instant, ttl_ms: u64) -> Tracked {
        let ttl = Duration::from_millis(ttl_ms);
        Tracked {
            name,
            when: Expiry {
                no_sooner_than: sent + ttl,
                by: answered + ttl,
                ttl,
            },
        }
    }
}

impl Expiry {
    /// After a renewal of unknown fate (asked for `ttl_ms`, or the lease's
    /// own TTL; given up on at `now`): it may have been applied.
    fn unconfirmed(self, ttl_ms: Option<u64>, now: Instant) -> Expiry {
        let ttl = ttl_ms.map_or(self.ttl, Duration::from_millis);
        Expiry {
            no_sooner_than: self.no_sooner_than,
            by: self.by.max(now + ttl),
            ttl: self.ttl.max(ttl),
        }
    }
}

/// Which leases a session tracks.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Scope {
    /// KeepAlive: each heartbeat names every lease the client still holds;
    /// a lease it leaves out is no longer this session's.
    Named,
    /// Session stream: the leases granted or renewed on the stream, until
    /// they are released or lost there (a heartbeat need not name them
    /// all), at most `--max-stream-leases` of them (see `Session::track`).
    Held,
}

/// The leases a session tracks.
#[derive(Default)]
struct Tracking {
    /// By owner token (never logged, never `Debug`).
    leases: HashMap<String, Tracked>,
}

/// The state of one KeepAlive or Session stream. Shared by the requests in
/// flight on a Session stream: its state sits behind locks held for a few
/// map operations, never across an await.
pub struct Session {
    leases: Leases,
    /// Whose leases these are: names are in its namespace, and the leases
    /// count against its caps.
    caller: Caller,
    _slots: (Slot, Slot),
    scope: Scope,
    tracking: Mutex<Tracking>,
    /// Rate limit (GCRA): the theoretical arrival time of the next heartbeat.
    next_arrival: Mutex<Instant>,
    /// The stream's last heartbeat round trips, for its TTL advice.
    round_trips: Mutex<RoundTrips>,
    /// Whether the stream's TTL advice was logged (once per stream).
    advised: AtomicBool,
}

/// One heartbeat's answer: what became of each lease, in order, and the
/// advice on their TTLs.
#[derive(Debug)]
pub struct Beat {
    /// Each lease's name and state, in the heartbeat's order.
    pub states: Vec<(String, LeaseState)>,
    /// Set when a lease renewed has a TTL under
    /// [`advice::TTL_PER_ROUND_TRIP`] times the stream's p99 round trip.
    pub advice: Option<Advice>,
}

/// The lock's data even if a thread panicked while holding it: every
/// critical section leaves the maps consistent.
fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

impl Session {
    pub(super) fn new(leases: Leases, caller: Caller, slots: (Slot, Slot), scope: Scope) -> Self {
        leases.inner.events.stream(scope, true);
        Session {
            leases,
            caller,
            _slots: slots,
            scope,
            tracking: Mutex::default(),
            next_arrival: Mutex::new(Instant::now()),
            round_trips: Mutex::default(),
            advised: AtomicBool::new(false),
        }
    }

    /// Admits one request of a Session stream under the caller's rate caps,
    /// as a unary call is admitted.
    pub fn admit(&self) -> Result<()> {
        self.caller.admit()
    }

    /// Waits as long as needed to keep this stream within
    /// `--max-stream-rate` heartbeats per second (with a burst of one
    /// second's worth). The caller reads the next heartbeat only afterwards,
    /// so a flood is slowed by HTTP/2 flow control, not buffered.
    pub async fn throttle(&self) {
        let rate = self.leases.inner.limits.max_stream_rate.max(1);
        let interval = Duration::from_secs(1) / rate;
        let burst = Duration::from_secs(1).saturating_sub(interval);
        let now = Instant::now();
        let arrival = {
            let mut next = lock(&self.next_arrival);
            let arrival = (*next).max(now);
            *next = arrival + interval;
            arrival
        };
        if arrival > now + burst {
            sleep_until(arrival - burst).await;
        }
    }

    /// Acquire on a Session stream: the lease rules' Acquire, and the grant
    /// tracked by this session from the moment the store applied it (its
    /// first heartbeat), while it tracks fewer than `--max-stream-leases`
    /// leases. Dropped (cancelled) while it waits, it gives up its place,
    /// and a grant that raced with the drop is released (see
    /// [`Leases::acquire`]).
    pub async fn acquire(&self, mut args: AcquireArgs) -> Result<Granted> {
        let arrived = Instant::now();
        // Fitted to this stream's round trips (when measured), rather than
        // to the tenant's that a unary call gets.
        args.ttl_ms = advice::requested_ttl(args.ttl_ms, args.ttl_auto, || self.suggested_ttl())?;
        args.ttl_auto = false;
        let granted = self.leases.acquire(&self.caller, args).await?;
        self.track(
            &granted.lease.owner_token,
            Tracked::new(
                self.caller.tenant().qualify(&granted.lease.name),
                // The store applied the grant after the granting attempt was
                // sent, `waited` after the call's arrival.
                arrived + granted.waited,
                Instant::now(),
                granted.lease.ttl_ms,
            ),
        );
        Ok(granted)
    }

    /// Tracks (or tracks anew) the lease of `token`, if there is room: what
    /// a session tracks is bounded by `--max-stream-leases`, as a
    /// KeepAlive heartbeat is. A stream may hold more leases than that (the
    /// lease caps are the tenant's and the connection's); those it does not
    /// track are renewed all the same, and only their accounting differs:
    /// an expiry after the stream ended is counted when the name is granted
    /// again, rather than a moment past the TTL. When the session is full,
    /// the leases it tracks that may have expired unrenewed (let go without
    /// a release) make room first: they are looked at past their TTL, as
    /// those of an ended stream are.
    fn track(&self, token: &str, tracked: Tracked) {
        let cap = self.leases.inner.limits.max_stream_leases;
        let mut tracking = lock(&self.tracking);
        if let Some(known) = tracking.leases.get_mut(token) {
            *known = tracked;
            return;
        }
        if tracking.leases.len() >= cap {
            let now = Instant::now();
            let lapsed: Vec<_> = tracking
                .leases
                .extract_if(|_, t| t.when.no_sooner_than <= now)
                .map(|(token, t)| (t.name, token, t.when.by))
                .collect();
            if !lapsed.is_empty() {
                drop(tracking);
                self.leases.watch_abandoned(lapsed);
                tracking = lock(&self.tracking);
            }
        }
        if tracking.leases.len() < cap {
            tracking.leases.insert(token.to_owned(), tracked);
        }
    }

    /// Renew on a Session stream: the lease rules' Renew, tracked when it
    /// succeeds (a lease resumed from another stream becomes this one's,
    /// while there is room), forgotten when the store says it is gone.
    pub async fn renew(
        &self,
        name: &str,
        owner_token: &str,
        ttl_ms: u64,
        ttl_auto: bool,
    ) -> Result<Renewed> {
        let sent = Instant::now();
        let ttl_ms = advice::requested_ttl(ttl_ms, ttl_auto, || self.suggested_ttl())?;
        let result = self
            .leases
            .renew(&self.caller, name, owner_token, ttl_ms, false)
            .await;
        match &result {
            Ok(renewed) => self.track(
                owner_token,
                Tracked::new(
                    self.caller.tenant().qualify(name),
                    sent,
                    Instant::now(),
                    renewed.ttl_ms,
                ),
            ),
            Err(e) if e.settles_the_lease() => {
                lock(&self.tracking).leases.remove(owner_token);
            }
            // Unknown fate: it may have been renewed.
            Err(_) => {
                let now = Instant::now();
                if let Some(known) = lock(&self.tracking).leases.get_mut(owner_token) {
                    known.when = known.when.unconfirmed(Some(ttl_ms), now);
                }
            }
        }
        result
    }

    /// Release on a Session stream: the lease rules' Release; the lease is
    /// no longer this session's once the store answered.
    pub async fn release(&self, name: &str, owner_token: &str) -> Result<()> {
        let result = self.leases.release(&self.caller, name, owner_token).await;
        if result
            .as_ref()
            .map_or_else(Error::settles_the_lease, |()| true)
        {
            lock(&self.tracking).leases.remove(owner_token);
        }
        result
    }

    /// Releases a lease granted on this stream whose answer never reached
    /// the client (the stream broke, or the request was cancelled, as the
    /// answer was on its way): see [`Leases::release_unheard`].
    pub async fn release_unheard(&self, name: &str, owner_token: &str, ttl_ms: u64) {
        lock(&self.tracking).leases.remove(owner_token);
        let stored = self.caller.tenant().qualify(name);
        self.leases
            .release_unheard(&self.caller, &stored, owner_token, ttl_ms)
            .await;
    }

    /// Renews the leases of one heartbeat, in one store round trip, and says
    /// what became of each (same order). Fails only when the heartbeat breaks
    /// a stream limit; the stream should then end with that error.
    ///
    /// `reported` is the round trip of the stream's previous heartbeat as
    /// the client measured it, if it said; without it the stream is judged
    /// by the store's renewal time alone (`advice.rs`).
    pub async fn heartbeat(
        &self,
        leases: Vec<LeaseRef>,
        reported: Option<Duration>,
    ) -> Result<Beat> {
        let inner = &self.leases.inner;
        let limits = &inner.limits;
        if leases.len() > limits.max_stream_leases {
            return Err(Error::exhausted(
                "max-stream-leases",
                format!(
                    "a heartbeat names {} leases; the limit is {} per stream \
                     (--max-stream-leases): spread them over several streams",
                    leases.len(),
                    limits.max_stream_leases
                ),
            ));
        }

        if let Some(round_trip) = reported {
            self.record_round_trip(round_trip);
        }
        // The p99 this heartbeat is judged by, as its ttl_auto leases are
        // renewed by: a sample recorded after the renewal (the store's time,
        // for a client that reports none) counts from the next heartbeat,
        // or an auto lease would be told its TTL, just applied, is short.
        let p99 = lock(&self.round_trips).p99();
        let (mut states, items) = self.renewals(&leases, p99);
        let sent = Instant::now();
        let outcomes = self
            .leases
            .count_errors(inner.store.renew_many(&items).await);
        if !items.is_empty() {
            let took = sent.elapsed();
            inner.events.renewed(took);
            if reported.is_none() {
                self.record_round_trip(took);
            }
        }
        let now = Instant::now();
        let mut guard = lock(&self.tracking);
        let tracking = &mut *guard;
        // KeepAlive: what this heartbeat renews is all the session tracks
        // next. Session: the leases it does not name stay tracked.
        let mut next_tracked = match self.scope {
            Scope::Named => HashMap::with_capacity(items.len()),
            Scope::Held => std::mem::take(&mut tracking.leases),
        };
        let previous = match self.scope {
            Scope::Named => &tracking.leases,
            Scope::Held => &next_tracked,
        };
        // When this session renewed the lease `item` names (that token's
        // lease *of that name*), what it knew of it.
        let tracked_as = |item: &RenewItem| -> Option<Expiry> {
            previous
                .get(&item.token)
                .filter(|t| t.name == item.name)
                .map(|t| t.when)
        };
        let mut outcomes = match outcomes {
            Ok(outcomes) => outcomes.into_iter().map(Ok).collect::<Vec<_>>(),
            Err(e) => {
                let message = e.to_string();
                items.iter().map(|_| Err(message.clone())).collect()
            }
        }
        .into_iter();
        // Decided first, applied after: the verdicts read the tracking as it
        // was before this heartbeat.
        let mut verdicts = Vec::with_capacity(items.len());
        for item in items {
            // Every store answers every item (the Redis store checks the count).
            let outcome = outcomes
                .next()
                .unwrap_or_else(|| Err("no answer from the store".into()));
            let known = tracked_as(&item);
            // Asked only of an answer that finds no lease of this token.
            let lost_early = || known.is_some_and(|t| now < t.no_sooner_than);
            let (state, loss) = renewal_state(outcome, lost_early);
            verdicts.push((item, known, state, loss));
        }
        let room = limits.max_stream_leases;
        // The items are consumed here: a renewed lease's name and token move
        // into the tracked map instead of being copied (two allocations per
        // lease per heartbeat, a heartbeat naming up to 1,000).
        for ((item, known, state, loss), slot) in verdicts
            .into_iter()
            .zip(states.iter_mut().filter(|s| s.is_none()))
        {
            match &state {
                LeaseState::Alive { ttl_ms, .. } => {
                    self.caller.hold(
                        &item.name,
                        &item.token,
                        now + Duration::from_millis(*ttl_ms),
                    );
                    if self.scope == Scope::Named
                        || next_tracked.contains_key(&item.token)
                        || next_tracked.len() < room
                    {
                        next_tracked
                            .insert(item.token, Tracked::new(item.name, sent, now, *ttl_ms));
                    }
                }
                LeaseState::Lost { .. } => {
                    self.caller.forget(&item.name, &item.token);
                    if let Some(reason) = loss {
                        self.leases.lost(&item.name, reason);
                    }
                    if self.scope == Scope::Held {
                        next_tracked.remove(&item.token);
                    }
                }
                // Unknown fate: keep tracking what we knew until we know
                // more, the renewal perhaps applied.
                LeaseState::Unconfirmed { .. } => {
                    if let Some(known) = known {
                        if self.scope == Scope::Named || next_tracked.contains_key(&item.token) {
                            next_tracked.insert(
                                item.token,
                                Tracked {
                                    name: item.name,
                                    when: known.unconfirmed(item.ttl_ms, now),
                                },
                            );
                        }
                    }
                }
                LeaseState::Rejected { .. } => {}
            }
            *slot = Some(state);
        }
        tracking.leases = next_tracked;
        drop(guard);
        let states: Vec<_> = leases
            .into_iter()
            .zip(states)
            .map(|(lease, state)| {
                let state = state.unwrap_or_else(|| LeaseState::Unconfirmed {
                    message: "internal error: no outcome".into(),
                });
                (lease.name, state)
            })
            .collect();
        let advice = self.advise(p99, &states);
        Ok(Beat { states, advice })
    }

    /// Records a heartbeat round trip of this stream (and of its tenant,
    /// for the tenant's unary `ttl_auto` calls).
    fn record_round_trip(&self, round_trip: Duration) {
        lock(&self.round_trips).record(round_trip);
        self.caller.tenant().record_round_trip(round_trip);
    }

    /// What `ttl_auto` gives on this stream: fitted to its own round trips
    /// once measured, else to its tenant's.
    fn suggested_ttl(&self) -> Duration {
        self.suggested_for(lock(&self.round_trips).p99())
    }

    /// [`Session::suggested_ttl`] for the stream's p99 `p99`.
    fn suggested_for(&self, p99: Option<Duration>) -> Duration {
        let p99 = p99.or_else(|| self.caller.tenant().round_trip_p99());
        advice::suggested_ttl(p99, &self.leases.inner.limits)
    }

    /// The advice on the TTLs a heartbeat renewed (those alive after it),
    /// counted each time it is given and logged the first time on the
    /// stream: a stream keeps its TTLs for its life, and one line tells
    /// the operator as much as a line per heartbeat would.
    fn advise(&self, p99: Option<Duration>, states: &[(String, LeaseState)]) -> Option<Advice> {
        let inner = &self.leases.inner;
        let ttls = states.iter().filter_map(|(_, state)| match state {
            LeaseState::Alive { ttl_ms, .. } => Some(Duration::from_millis(*ttl_ms)),
            _ => None,
        });
        let advice = Advice::of(p99, ttls, &inner.limits)?;
        let tenant = self.caller.tenant().id();
        inner.events.ttl_advised(tenant);
        if !self.advised.swap(true, Ordering::Relaxed) {
            tracing::warn!(
                tenant,
                round_trip_p99_ms = advice.round_trip_p99.as_secs_f64() * 1e3,
                shortest_ttl_ms =
                    u64::try_from(advice.shortest_ttl.as_millis()).unwrap_or(u64::MAX),
                suggested_ttl_ms =
                    u64::try_from(advice.suggested_ttl.as_millis()).unwrap_or(u64::MAX),
                leases_below = advice.leases_below,
                "TTL too short for this stream's heartbeat latency (logged once per stream): {}",
                advice.message()
            );
        }
        Some(advice)
    }

    /// What the store is asked to renew for `leases`, in order, and the
    /// state of each lease so far: settled ([`LeaseState::Rejected`]) for a
    /// malformed one, which the store is not asked about; `None` for one
    /// that has a renewal in the list.
    ///
    /// A `ttl_auto` lease is renewed for the suggestion of `p99`, the
    /// stream's p99 this heartbeat is judged by.
    fn renewals(
        &self,
        leases: &[LeaseRef],
        p99: Option<Duration>,
    ) -> (Vec<Option<LeaseState>>, Vec<RenewItem>) {
        let limits = &self.leases.inner.limits;
        let mut states: Vec<Option<LeaseState>> = Vec::with_capacity(leases.len());
        let mut items = Vec::with_capacity(leases.len());
        // Asked once per heartbeat, and only if a lease wants it.
        let mut suggested = None;
        for lease in leases {
            let checked = validate::name(limits, &lease.name)
                .and_then(|()| validate::owner_token(&lease.owner_token))
                .and_then(|()| {
                    advice::requested_ttl(lease.ttl_ms, lease.ttl_auto, || {
                        *suggested.get_or_insert_with(|| self.suggested_for(p99))
                    })
                })
                .and_then(|ttl_ms| validate::ttl(limits, ttl_ms, None))
                .map(|ttl| ttl.map(|t| self.leases.inner.store.applied_ms(t)));
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
        (states, items)
    }

    /// The stream ended, however: the client closed it (after releasing
    /// its leases, or handing them to another stream), reset it (a cancel,
    /// which reaches the broker as a clean end), or the connection broke.
    /// Renewals stop; the leases run out their TTL unless the client
    /// resumes them elsewhere, and the broker looks at each a little past
    /// its TTL (`abandoned.rs`): an expiry is counted, a release or a
    /// resumption is not, so a clean end needs no trust in the client.
    /// Called once the stream's requests have all ended.
    pub fn end(&self) {
        let tracked = std::mem::take(&mut lock(&self.tracking).leases);
        if tracked.is_empty() {
            return;
        }
        tracing::debug!(
            leases = tracked.len(),
            "stream ended; its leases run out their TTL unless resumed"
        );
        self.leases.watch_abandoned(
            tracked
                .into_iter()
                .map(|(token, t)| (t.name, token, t.when.by)),
        );
    }
}

/// What the store's answer to one renewal means for its lease: the state
/// its holder hears, and the loss to count, if the answer is the first
/// news of one (see [`Leases::lost`]). Only a [`LeaseState::Lost`] comes
/// with a loss. `answer` is the store's verdict on the token, or why there
/// is none (the lease may then still be alive). `lost_early` is asked only
/// of an answer that finds no lease of this token: whether this session
/// renewed it and it cannot have expired yet.
fn renewal_state(
    answer: std::result::Result<Checked<Renewed>, String>,
    lost_early: impl FnOnce() -> bool,
) -> (LeaseState, Option<LossReason>) {
    let lost = |reason, fence, message: String| LeaseState::Lost {
        reason,
        fence,
        message,
    };
    match answer {
        Err(message) => (LeaseState::Unconfirmed { message }, None),
        Ok(Checked::Done(renewed)) => (
            LeaseState::Alive {
                ttl_ms: renewed.ttl_ms,
                fence: renewed.fence,
            },
            None,
        ),
        // A heartbeat that crossed its own release: nothing lost.
        Ok(Checked::Released) => (
            lost(
                LossReason::Expired,
                0,
                "the lease was released with this owner token".into(),
            ),
            None,
        ),
        Ok(Checked::Expired) => (
            lost(
                LossReason::Expired,
                0,
                "the lease expired before this renewal reached the store".into(),
            ),
            Some(LossReason::Expired),
        ),
        // Counted where it was first learnt (an earlier request, or the
        // grant that found it expired). This session may still believe it
        // alive (a renewal elsewhere gave it a shorter TTL than this
        // stream's): the store's word on the token decides, not that belief.
        Ok(Checked::ExpiredReported) => (
            lost(
                LossReason::Expired,
                0,
                "the lease expired (its loss was reported already)".into(),
            ),
            None,
        ),
        Ok(outcome @ (Checked::NotHeld | Checked::NotOwner { .. })) => {
            let fence = match outcome {
                Checked::NotOwner { fence } => fence,
                _ => 0,
            };
            // The store has no record of this lease (an expiry reported
            // already is ExpiredReported, above). If this session renewed it
            // and it cannot have expired yet, the store lost it (restarted
            // empty, flushed, evicted): a loss only this session can see, so
            // count it here. Else it is an old or foreign token, or one whose
            // record lapsed.
            if lost_early() {
                (
                    lost(
                        LossReason::StoreLost,
                        fence,
                        "the store lost the lease before it could have expired \
                         (restarted empty, flushed, or the key was deleted)"
                            .into(),
                    ),
                    Some(LossReason::StoreLost),
                )
            } else if fence == 0 {
                (
                    lost(
                        LossReason::Expired,
                        fence,
                        "no such lease: it expired (its loss was reported \
                         already), or this owner token never held it"
                            .into(),
                    ),
                    None,
                )
            } else {
                (
                    lost(
                        LossReason::NotOwner,
                        fence,
                        format!("the lock is held by another owner (current fence {fence})"),
                    ),
                    None,
                )
            }
        }
        // Counted as lost when it was revoked.
        Ok(Checked::Revoked { fence }) => (
            lost(
                LossReason::Revoked,
                fence,
                "an operator revoked the lease".into(),
            ),
            None,
        ),
    }
}

impl Drop for Session {
    fn drop(&mut self) {
        self.leases.inner.events.stream(self.scope, false);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The reason, fence and message of a [`LeaseState::Lost`].
    fn lost(state: LeaseState) -> (LossReason, u64, String) {
        match state {
            LeaseState::Lost {
                reason,
                fence,
                message,
            } => (reason, fence, message),
            other => panic!("not lost: {other:?}"),
        }
    }

    /// For answers whose meaning must not depend on this session's memory.
    fn never_asked() -> bool {
        panic!("lost_early was asked of an answer that names the lease's fate")
    }

    #[test]
    fn a_renewal_is_alive_with_the_ttl_and_fence_the_store_applied() {
        let renewed = Renewed {
            ttl_ms: 1_500,
            fence: 9,
        };
        assert_eq!(
            renewal_state(Ok(Checked::Done(renewed)), never_asked),
            (
                LeaseState::Alive {
                    ttl_ms: 1_500,
                    fence: 9
                },
                None
            )
        );
    }

    #[test]
    fn no_answer_is_unconfirmed_with_the_stores_error_and_no_loss() {
        assert_eq!(
            renewal_state(Err("Redis is unavailable".into()), never_asked),
            (
                LeaseState::Unconfirmed {
                    message: "Redis is unavailable".into()
                },
                None
            )
        );
    }

    #[test]
    fn a_first_expiry_is_lost_and_counted() {
        let (state, loss) = renewal_state(Ok(Checked::Expired), never_asked);
        assert_eq!(loss, Some(LossReason::Expired));
        let (reason, fence, message) = lost(state);
        assert_eq!((reason, fence), (LossReason::Expired, 0));
        assert!(message.contains("expired before this renewal"), "{message}");
    }

    #[test]
    fn an_expiry_reported_already_is_lost_but_not_counted_again() {
        let (state, loss) = renewal_state(Ok(Checked::ExpiredReported), never_asked);
        assert_eq!(loss, None);
        let (reason, fence, message) = lost(state);
        assert_eq!((reason, fence), (LossReason::Expired, 0));
        assert!(message.contains("reported already"), "{message}");
    }

    #[test]
    fn a_renewal_that_crossed_its_release_is_gone_but_no_loss() {
        let (state, loss) = renewal_state(Ok(Checked::Released), never_asked);
        assert_eq!(loss, None);
        let (reason, fence, message) = lost(state);
        assert_eq!((reason, fence), (LossReason::Expired, 0));
        assert!(message.contains("released"), "{message}");
    }

    #[test]
    fn a_revoked_lease_is_lost_with_its_fence_counted_by_the_revoke_only() {
        let (state, loss) = renewal_state(Ok(Checked::Revoked { fence: 4 }), never_asked);
        assert_eq!(loss, None, "the revoke counted it");
        let (reason, fence, message) = lost(state);
        assert_eq!((reason, fence), (LossReason::Revoked, 4));
        assert!(message.contains("revoked"), "{message}");
    }

    #[test]
    fn an_unknown_token_is_gone_without_a_loss() {
        let (state, loss) = renewal_state(Ok(Checked::NotHeld), || false);
        assert_eq!(loss, None);
        let (reason, fence, message) = lost(state);
        assert_eq!((reason, fence), (LossReason::Expired, 0));
        assert!(message.contains("no such lease"), "{message}");
    }

    #[test]
    fn another_owner_is_reported_with_its_fence_without_a_loss() {
        let (state, loss) = renewal_state(Ok(Checked::NotOwner { fence: 7 }), || false);
        assert_eq!(loss, None);
        let (reason, fence, message) = lost(state);
        assert_eq!((reason, fence), (LossReason::NotOwner, 7));
        assert!(message.contains("current fence 7"), "{message}");
    }

    /// A lease this session renewed that the store no longer knows before
    /// it could have expired was lost by the store, whatever holds the
    /// name now; only this session can see it, so it is counted here.
    #[test]
    fn a_lease_missing_before_it_could_expire_was_lost_by_the_store() {
        for (answer, current) in [(Checked::NotHeld, 0), (Checked::NotOwner { fence: 7 }, 7)] {
            let (state, loss) = renewal_state(Ok(answer), || true);
            assert_eq!(loss, Some(LossReason::StoreLost));
            let (reason, fence, message) = lost(state);
            assert_eq!((reason, fence), (LossReason::StoreLost, current));
            assert!(message.contains("store lost the lease"), "{message}");
        }
    }
}
