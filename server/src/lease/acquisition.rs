//! One Acquire call, from its first attempt to its answer.
//!
//! A call carries the same state through every step (its caller, the
//! lock's two names, the grant it asks for, its clock and deadline, whether
//! it keeps its place in line, the channel its answer goes back on, and
//! whether a failed attempt may have granted unbeknownst to it), and each
//! step may need any of it: the first attempt, the wait in line, keeping
//! or giving up the place, and the report of the outcome. [`Acquisition`]
//! holds that state once, so that the steps are its methods instead of
//! functions passing it all along, and the one thing a step learns for a
//! later one (an attempt whose outcome is unknown) is a field, not an
//! out-parameter. The call runs in a task of its own, which
//! [`Leases::acquire`] spawns (why: see there).

use crate::duration::{micros, millis};
use std::{sync::Arc, time::Duration};

use tokio::{
    sync::oneshot,
    time::{sleep_until, Instant},
};

use super::{Caller, Events, Granted, GrantedLease, LeaseRoom, Leases, LossReason};
use crate::{
    error::{Error, Result},
    store::{Acquired, Blocked, BlockedBy, Event, GrantSpec, Watch, QUEUE_LIFETIME, QUEUE_REFRESH},
};

/// How long an Acquire waits, and whether it keeps its place in line when
/// that runs out.
pub(super) struct Wait {
    /// How long to wait for a held lock; zero to try once.
    pub(super) time: Duration,
    /// Whether a wait that runs out keeps its place in line
    /// ([`Error::PlaceKept`]).
    pub(super) keep_place: bool,
}

/// The state of one Acquire call while it tries and waits (see the module
/// documentation for why it is one type).
pub(super) struct Acquisition {
    leases: Leases,
    /// Whose call this is: its waits count against its caps.
    caller: Caller,
    /// The lock's name as the caller gave it; `spec.name` is its name in the
    /// store (within the caller's namespace).
    name: String,
    /// What each attempt asks the store for.
    spec: GrantSpec,
    /// When the call's task began: what `Granted::waited` and a refusal's
    /// `waited_ms` are measured from.
    started: Instant,
    /// When a wait runs out.
    deadline: Instant,
    /// See [`Wait::keep_place`].
    keep_place: bool,
    /// Where the answer goes; closed when the caller left, which ends a wait.
    reply: oneshot::Sender<Delivery>,
    /// Set when an attempt's store call failed without an answer: the
    /// script may have run and granted (see [`Acquisition::attempt`]).
    unknown: bool,
}

/// An Acquire's outcome on its way to the caller. A grant travels with a
/// guard: if the caller's future is dropped after the grant was sent and
/// before it read it (a cancel or a deadline racing with the grant), the
/// delivery drops unread and the guard releases the lease, so that nobody
/// holds a lease its caller never heard of. [`Delivery::take`] disarms it.
pub(super) struct Delivery {
    result: Result<Granted>,
    unheard: Option<Unheard>,
}

impl Delivery {
    /// The outcome, read by its caller: the grant is the caller's now.
    pub(super) fn take(self) -> Result<Granted> {
        let Delivery { result, unheard } = self;
        if let Some(mut unheard) = unheard {
            unheard.token.clear();
        }
        result
    }
}

/// Releases a grant nobody read (see [`Delivery`]) when dropped armed (its
/// token not cleared).
struct Unheard {
    leases: Leases,
    caller: Caller,
    name: String,
    token: String,
    ttl_ms: u64,
}

impl Drop for Unheard {
    fn drop(&mut self) {
        if self.token.is_empty() {
            return;
        }
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            return;
        };
        let (leases, caller, name, token, ttl_ms) = (
            self.leases.clone(),
            self.caller.clone(),
            std::mem::take(&mut self.name),
            std::mem::take(&mut self.token),
            self.ttl_ms,
        );
        runtime.spawn(async move {
            leases.release_unheard(&caller, &name, &token, ttl_ms).await;
        });
    }
}

impl Acquisition {
    /// Runs one Acquire call to its end: tries (and waits, see
    /// [`Acquisition::obtain`]), reports the outcome, and answers on
    /// `reply`. The call's clock starts here, in the call's own task.
    /// `room`: the caller's room for one more lease, which a grant fills.
    pub(super) async fn run(
        leases: Leases,
        caller: Caller,
        room: LeaseRoom,
        name: String,
        spec: GrantSpec,
        wait: Wait,
        reply: oneshot::Sender<Delivery>,
    ) {
        let started = Instant::now();
        let mut call = Acquisition {
            leases,
            caller,
            name,
            spec,
            started,
            deadline: started + wait.time,
            keep_place: wait.keep_place,
            reply,
            unknown: false,
        };
        let result = call.obtain().await;
        call.finish(room, result).await;
    }

    /// Counts and logs the outcome (`result`: the fence of the grant and
    /// when the granting attempt was sent), has the token of an attempt of
    /// unknown outcome released later, and answers the caller; a grant
    /// whose caller left meanwhile is released at once.
    async fn finish(self, room: LeaseRoom, result: Result<(u64, Instant)>) {
        let Acquisition {
            leases,
            caller,
            name,
            spec,
            started,
            reply,
            unknown,
            ..
        } = self;
        let result = result.map(|(fence, attempt)| Granted {
            lease: GrantedLease {
                name,
                owner_token: spec.token.clone(),
                fence,
                ttl_ms: spec.ttl_ms,
            },
            // Measured to the sending of the granting attempt, not to its
            // answer: a client adding this to its own send time gets a
            // moment no later than the grant.
            waited: attempt.duration_since(started),
        });
        let events = &leases.inner.events;
        match &result {
            Ok(granted) => {
                room.granted(
                    &spec.name,
                    &spec.token,
                    Instant::now() + Duration::from_millis(spec.ttl_ms),
                );
                events.acquired(granted.waited);
                super::audit::granted(
                    &spec.name,
                    granted.lease.fence,
                    &spec.holder,
                    spec.ttl_ms,
                    spec.limit,
                    &spec.token,
                );
            }
            // A place kept at shutdown is no refusal (nothing was counted
            // for a shutdown before places were kept at it).
            Err(Error::PlaceKept { refusal, .. }) if matches!(**refusal, Error::Unavailable(_)) => {
            }
            Err(
                Error::Held { .. }
                | Error::LockDelay { .. }
                | Error::Queued { .. }
                | Error::PlaceKept { .. },
            ) => events.acquire_refused(),
            // An attempt failed without an answer: it may have granted.
            Err(_) if unknown => leases.orphaned(&spec.name, &spec.token, spec.ttl_ms, spec.queued),
            Err(_) => {}
        }
        let unheard = result.is_ok().then(|| Unheard {
            leases: leases.clone(),
            caller: caller.clone(),
            name: spec.name.clone(),
            token: spec.token.clone(),
            ttl_ms: spec.ttl_ms,
        });
        if let Err(undelivered) = reply.send(Delivery { result, unheard }) {
            // The caller left before the grant arrived: this task releases
            // it now (not the guard, which would do it in another task).
            if let Ok(granted) = undelivered.take() {
                tracing::debug!(lock = %spec.name, fence = granted.lease.fence, "caller left as its grant arrived; releasing");
                leases
                    .release_unheard(&caller, &spec.name, &spec.token, spec.ttl_ms)
                    .await;
            }
        }
    }

    /// One acquire attempt. A failed store call leaves its outcome unknown
    /// (a timeout, a connection broken after the request went out: the
    /// script may have run and granted): `unknown` is set, and the Acquire,
    /// which ends with that error, has the token released later. An answer
    /// counts the expired leases it found whose loss nobody had reported
    /// (their holders never asked since): taken over after expiry
    /// (`not_owner`), reported to this attempt and to no one else.
    async fn attempt(&mut self) -> Result<Acquired> {
        let leases = &self.leases;
        let acquired = leases
            .count_errors(leases.inner.store.acquire(&self.spec).await)
            .inspect_err(|_| self.unknown = true)?;
        let expired = match &acquired {
            Acquired::Granted { expired, .. } => *expired,
            Acquired::Blocked(blocked) => blocked.expired,
        };
        for _ in 0..expired {
            leases.lost(&self.spec.name, LossReason::NotOwner);
        }
        Ok(acquired)
    }

    /// Tries until the deadline, woken by releases and expiries; returns the
    /// fence of the grant and when the granting attempt was sent (the lease
    /// started no sooner). A caller that waits holds a place in the name's
    /// queue (in the store, across replicas) and leaves it however the wait
    /// ends, unless `keep_place` and the wait ran out: then the place stays
    /// for [`QUEUE_LIFETIME`] (from the last attempt, which renewed it), for
    /// the caller's next Acquire to take back, and the refusal says so
    /// ([`Error::PlaceKept`]).
    async fn obtain(&mut self) -> Result<(u64, Instant)> {
        // A caller that will wait watches before its first attempt when
        // that is free (the name is contended here already): the attempt's
        // answer then stands, with no second look once the watch is up.
        let early = self
            .spec
            .queued
            .then(|| {
                self.leases.inner.store.watch_now(
                    &self.spec.name,
                    Event::Released,
                    &self.spec.token,
                )
            })
            .flatten();
        let attempt = Instant::now();
        let blocked = match self.attempt().await? {
            Acquired::Granted { fence, .. } => return Ok((fence, attempt)),
            Acquired::Blocked(blocked) => blocked,
        };
        if !self.spec.queued {
            // It tried once: it did not wait (the time was the store's).
            return Err(not_obtained(&self.name, blocked, 0));
        }
        let early = early.map(|watch| (watch, blocked));
        let result = self.wait_in_line(early).await;
        let (leases, spec) = (&self.leases, &self.spec);
        // Only the end of the wait (the refusals below) keeps the place, and
        // this broker's shutdown: the caller goes on waiting in it on another
        // replica, as after a wait that ran out (a rolling restart must not
        // send the waiters of the restarted replica to the back of the line).
        // A caller that left or a failure gives it up as usual. A failure
        // whose outcome is unknown (`unknown`: the attempt may have granted)
        // never keeps it: the token is released later instead.
        let result = match result {
            Err(
                refusal @ (Error::Held { .. } | Error::LockDelay { .. } | Error::Queued { .. }),
            ) if self.keep_place => {
                tracing::debug!(
                    lock = %spec.name, token = %crate::redact::Redacted(&spec.token),
                    "wait ran out; place in line kept"
                );
                return Err(place_kept(refusal, &spec.token));
            }
            Err(shutdown @ Error::Unavailable(_))
                if self.keep_place && !self.unknown && *leases.inner.shutdown.borrow() =>
            {
                tracing::debug!(
                    lock = %spec.name, token = %crate::redact::Redacted(&spec.token),
                    "shutting down; place in line kept"
                );
                return Err(place_kept(shutdown, &spec.token));
            }
            result => result,
        };
        if result.is_err() {
            // Give up the place in line at once, so the next waiter is not
            // kept waiting for it to lapse.
            if leases
                .count_errors(leases.inner.store.dequeue(&spec.name, &spec.token).await)
                .is_err()
            {
                tokio::spawn(dequeue_later(
                    leases.clone(),
                    spec.name.clone(),
                    spec.token.clone(),
                ));
            }
        }
        result
    }

    /// Waits in line for the grant, looking again when woken. `early`: a
    /// watch set up before the first attempt, and that attempt's answer,
    /// which then needs no second look ([`Store::watch_now`]); without it
    /// the watch is set up here and the name looked at again.
    ///
    /// [`Store::watch_now`]: crate::store::Store::watch_now
    async fn wait_in_line(&mut self, early: Option<(Watch, Blocked)>) -> Result<(u64, Instant)> {
        // A handle of its own: the guards and the shutdown future below
        // borrow it for the whole wait, whose attempts borrow `self`
        // mutably.
        let leases = self.leases.clone();
        let store = &leases.inner.store;
        let _caps = self.caller.waiter_slot()?;
        let _slot = Arc::clone(&leases.inner.waiter_slots)
            .try_acquire_owned()
            .map_err(|_| {
                Error::exhausted(
                    "max-waiters",
                    format!(
                        "{} callers are already waiting for locks on this broker replica \
                         (--max-waiters); retry later or on another replica",
                        leases.inner.limits.max_waiters
                    ),
                )
            })?;
        let _waiting = Waiting::new(leases.inner.events.as_ref());
        let (watch, mut answered) = match early {
            Some((watch, blocked)) => (watch, Some(blocked)),
            None => (
                leases.count_errors(
                    store
                        .watch(&self.spec.name, Event::Released, Some(&self.spec.token))
                        .await,
                )?,
                None,
            ),
        };
        let shutdown = leases.shutting_down();
        tokio::pin!(shutdown);
        // The first attempt (before this) took a place in line; from now on
        // this replica refreshes it, with its other waiters' (places.rs).
        let place = leases
            .inner
            .places
            .register(&self.spec.name, &self.spec.token, u64::MAX);
        loop {
            // Armed before the attempt, so a release between the attempt and
            // the wait below still wakes us.
            let notified = watch.notified();
            tokio::pin!(notified);
            notified.as_mut().enable();

            let blocked = match answered.take() {
                Some(blocked) => blocked,
                None => {
                    let attempt = Instant::now();
                    match self.attempt().await? {
                        Acquired::Granted { fence, .. } => return Ok((fence, attempt)),
                        Acquired::Blocked(blocked) => blocked,
                    }
                }
            };
            place.saw(blocked.position);
            let now = Instant::now();
            let deadline = self.deadline;
            if now >= deadline {
                return Err(not_obtained(&self.name, blocked, ms_since(self.started)));
            }
            // Woken by a release naming us, or by our replica's refresh of
            // the places finding us first in line or without a place
            // (places.rs). The first in line also looks again when the
            // lease would expire or the delay end (nobody announces those),
            // and at least every QUEUE_REFRESH (an event may be lost with a
            // subscription); one further back would only be refused, unless
            // the name is free and those ahead are slow to take it (a dead
            // replica's waiter, whose place lapses then: look again then).
            // So the line costs the store one call per second per name and
            // replica, not one per waiter.
            let remaining = Duration::from_millis(blocked.remaining_ms.max(1));
            let wake = if blocked.position <= 1 {
                now + remaining.min(QUEUE_REFRESH)
            } else if blocked.by == BlockedBy::Queue {
                now + remaining
            } else {
                deadline
            };
            // The timeline of a wait, for finding where a handoff's time
            // goes: what the attempt learnt, when it means to look again,
            // and what woke it (the timer how late: tokio's fires on the
            // next millisecond tick, so up to about 1 ms).
            let wake = wake.min(deadline);
            let lock = &self.spec.name;
            tracing::debug!(
                lock = %lock, position = blocked.position, remaining_ms = blocked.remaining_ms,
                wake_in_us = micros(wake.duration_since(now)), "blocked; waiting"
            );
            tokio::select! {
                () = &mut notified => {
                    tracing::debug!(lock = %lock, "woken by an event");
                }
                () = sleep_until(wake) => {
                    tracing::debug!(
                        lock = %lock,
                        late_us = micros(Instant::now().saturating_duration_since(wake)),
                        "woken by the timer"
                    );
                }
                () = self.reply.closed() => return Err(Error::Cancelled),
                () = &mut shutdown => {
                    return Err(Error::Unavailable(
                        "the broker is shutting down; retry on another replica".into(),
                    ))
                }
            }
        }
    }
}

/// How often [`dequeue_later`] tries again.
const DEQUEUE_RETRY: Duration = Duration::from_millis(200);

/// A dequeue that failed (the store was unreachable: a failover, say)
/// is tried again a few times while the place would still hold, so
/// that the line moves as soon as the store is back instead of when the
/// place lapses ([`QUEUE_LIFETIME`]).
async fn dequeue_later(leases: Leases, name: String, token: String) {
    let until = Instant::now() + QUEUE_LIFETIME;
    while Instant::now() < until {
        tokio::time::sleep(DEQUEUE_RETRY).await;
        if leases.inner.store.dequeue(&name, &token).await.is_ok() {
            return;
        }
    }
}

fn ms_since(started: Instant) -> u64 {
    millis(started.elapsed())
}

/// The error for an Acquire of `name` that ends without the lock.
fn not_obtained(name: &str, blocked: Blocked, waited_ms: u64) -> Error {
    let name = name.to_owned();
    match blocked.by {
        BlockedBy::Holder => Error::Held {
            name,
            holder: blocked.holder,
            fence: blocked.fence,
            remaining_ms: blocked.remaining_ms,
            waited_ms,
        },
        BlockedBy::LockDelay => Error::LockDelay {
            name,
            fence: blocked.fence,
            remaining_ms: blocked.remaining_ms,
            waited_ms,
        },
        BlockedBy::Queue => Error::Queued {
            name,
            queued: blocked.queued,
            waited_ms,
        },
    }
}

/// One waiting Acquire call, reported while it lives.
struct Waiting<'a>(&'a dyn Events);

impl<'a> Waiting<'a> {
    fn new(events: &'a dyn Events) -> Self {
        events.waiting(true);
        Waiting(events)
    }
}

impl Drop for Waiting<'_> {
    fn drop(&mut self) {
        self.0.waiting(false);
    }
}

/// `refusal` with the caller's place in line handed back (`keep_place`):
/// its token, kept in the line for [`QUEUE_LIFETIME`].
fn place_kept(refusal: Error, token: &str) -> Error {
    Error::PlaceKept {
        refusal: Box::new(refusal),
        place: crate::error::KeptPlace(token.to_owned()),
        kept_ms: millis(QUEUE_LIFETIME),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::lease::{tests::leases, token};

    /// A grant that arrives after its caller went away is released at once,
    /// not left holding the lock for nobody until its TTL.
    #[tokio::test]
    async fn a_grant_whose_caller_left_is_released_at_once() {
        let (leases, metrics) = leases();
        let spec = GrantSpec {
            name: "raced".into(),
            token: token::generate().unwrap(),
            holder: "gone".into(),
            ttl_ms: 60_000,
            lock_delay_ms: 0,
            limit: 1,
            queued: false,
        };
        let (tx, rx) = oneshot::channel();
        drop(rx); // the caller disconnected while the store granted
        let caller = Caller::local();
        Acquisition::run(
            leases.clone(),
            caller.clone(),
            caller.reserve_lease().unwrap(),
            "raced".into(),
            spec,
            Wait {
                time: Duration::ZERO,
                keep_place: false,
            },
            tx,
        )
        .await;
        assert_eq!(metrics.acquired.get(), 1, "the store did grant");
        assert_eq!(metrics.released.get(), 1, "and the grant was released");
        assert!(leases
            .describe(&Caller::local(), "", "raced")
            .await
            .unwrap()
            .lease
            .is_none());
    }
}
