//! The lease rules: validation, grants (once or waiting), renewals, releases,
//! and what each outcome means for metrics. The gRPC layer only converts
//! messages; the store only executes atomic operations; the decisions are
//! here.

mod abandoned;
mod election;
mod events;
mod keepalive;
mod limits;
mod orphans;
mod places;
mod tenant;
pub mod token;
pub mod validate;

pub use self::{
    election::{Leader, Observer},
    events::{Events, LossReason, NoEvents, Refusal},
    keepalive::{LeaseRef, LeaseState, Session},
    limits::Limits,
    tenant::{
        store_name, Caller, Caps, LeaseRoom, Permissions, Slot, Tenant, Tenants, Usage,
        NAMESPACE_SEPARATOR, ROOT_TENANT,
    },
};

use std::{sync::Arc, time::Duration};

use tokio::{
    sync::{oneshot, watch, Semaphore},
    time::{sleep_until, Instant},
};

use crate::{
    error::{Error, Result},
    store::{
        Acquired, Blocked, BlockedBy, Checked, Event, GrantSpec, LeaseInfo, Renewed, Revocation,
        Store, Watch, QUEUE_LIFETIME, QUEUE_REFRESH,
    },
};

/// What a caller asks of Acquire (fields as in the proto). Its `Debug`
/// shows only a prefix of `place`, a secret.
#[derive(Clone, Default)]
pub struct AcquireArgs {
    /// Lock name.
    pub name: String,
    /// Requested TTL; 0 for the default.
    pub ttl_ms: u64,
    /// Holder label.
    pub holder: String,
    /// How long to wait for a held lock; 0 to try once.
    pub wait_timeout_ms: u64,
    /// Lock-delay after an involuntary end of the lease; 0 for none.
    pub lock_delay_ms: u64,
    /// Leases the name may have at once: 0 or 1 for a lock, more for a
    /// semaphore.
    pub limit: u32,
    /// Whether a wait that runs out keeps its place in line
    /// ([`Error::PlaceKept`]).
    pub keep_place: bool,
    /// A place kept by an earlier call, to wait in; empty for a new one.
    pub place: String,
}

/// A waiter's place in line across calls (a Campaign's keep_place and
/// place; see [`AcquireArgs`]). Its `Debug` shows only a prefix of the
/// place, a secret.
#[derive(Clone, Default)]
pub struct PlaceArgs {
    /// Whether a wait that runs out keeps its place in line.
    pub keep: bool,
    /// A place kept by an earlier call; empty for a new one.
    pub given: String,
}

impl std::fmt::Debug for AcquireArgs {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AcquireArgs")
            .field("name", &self.name)
            .field("ttl_ms", &self.ttl_ms)
            .field("holder", &self.holder)
            .field("wait_timeout_ms", &self.wait_timeout_ms)
            .field("lock_delay_ms", &self.lock_delay_ms)
            .field("limit", &self.limit)
            .field("keep_place", &self.keep_place)
            .field("place", &crate::redact::Redacted(&self.place))
            .finish()
    }
}

impl std::fmt::Debug for PlaceArgs {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PlaceArgs")
            .field("keep", &self.keep)
            .field("given", &crate::redact::Redacted(&self.given))
            .finish()
    }
}

/// A granted lease, with the secret that proves it (redacted by `Debug`).
/// (The client crate's `Lease` is the holder's live handle; the proto's
/// `Lease` the message this becomes.)
#[derive(Clone)]
pub struct GrantedLease {
    /// Lock name.
    pub name: String,
    /// Owner token (secret).
    pub owner_token: String,
    /// Fencing token.
    pub fence: u64,
    /// Validity from the moment the store applied it.
    pub ttl_ms: u64,
}

impl std::fmt::Debug for GrantedLease {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("GrantedLease")
            .field("name", &self.name)
            .field("owner_token", &crate::redact::Redacted(&self.owner_token))
            .field("fence", &self.fence)
            .field("ttl_ms", &self.ttl_ms)
            .finish()
    }
}

/// The result of a successful Acquire.
#[derive(Clone, Debug)]
pub struct Granted {
    /// The lease.
    pub lease: GrantedLease,
    /// Time from the call's arrival to the sending of the attempt that got
    /// the grant (0 when the lock was free).
    pub waited: Duration,
}

/// What Describe reports.
#[derive(Clone, Debug)]
pub struct Description {
    /// The current lease, if the name is held.
    pub lease: Option<LeaseInfo>,
    /// Acquire calls waiting for the name on this replica.
    pub local_waiters: usize,
    /// Acquire calls queued for the name on every replica.
    pub waiters: u64,
    /// Semaphore permits held now.
    pub permits: u64,
    /// When free: time left of a lock-delay.
    pub lock_delay_remaining_ms: u64,
}

struct Inner {
    store: Store,
    limits: Limits,
    events: Arc<dyn Events>,
    /// Bounds the Acquire calls waiting at once (`--max-waiters`).
    waiter_slots: Arc<Semaphore>,
    /// Flips to true when the broker shuts down, ending every wait.
    shutdown: watch::Sender<bool>,
    /// Tokens whose grant may exist unbeknownst to anyone.
    orphans: Arc<orphans::Orphans>,
    /// Leases of ended KeepAlive streams, to look at past their TTL.
    abandoned: Arc<abandoned::Abandoned>,
    /// This replica's waiters, whose places in line it refreshes.
    places: Arc<places::Places>,
}

/// The lease service; cheap to clone.
#[derive(Clone)]
pub struct Leases {
    inner: Arc<Inner>,
}

impl Leases {
    /// A lease service over `store`, reporting what happens to `events`.
    /// Inside a tokio runtime it also starts the task that refreshes the
    /// places of its waiters in line, which stops when the service is
    /// dropped.
    pub fn new(store: Store, limits: Limits, events: Arc<dyn Events>) -> Self {
        let places: Arc<places::Places> = Default::default();
        if let Ok(runtime) = tokio::runtime::Handle::try_current() {
            runtime.spawn(places::keep(
                Arc::downgrade(&places),
                store.clone(),
                Arc::clone(&events),
            ));
        }
        Leases {
            inner: Arc::new(Inner {
                waiter_slots: Arc::new(Semaphore::new(limits.max_waiters)),
                store,
                limits,
                events,
                shutdown: watch::Sender::new(false),
                orphans: Default::default(),
                abandoned: Default::default(),
                places,
            }),
        }
    }

    /// The store (for health checks).
    pub fn store(&self) -> &Store {
        &self.inner.store
    }

    /// Ends every wait in progress with UNAVAILABLE, so that a graceful
    /// shutdown is not held up by callers waiting for minutes.
    pub fn begin_shutdown(&self) {
        self.inner.shutdown.send_replace(true);
    }

    /// Resolves when the broker begins to shut down.
    pub async fn shutting_down(&self) {
        let mut shutdown = self.inner.shutdown.subscribe();
        let _ = shutdown.wait_for(|down| *down).await;
    }

    /// A new KeepAlive session (one per stream), counted against the
    /// caller's stream caps until it ends.
    pub fn keepalive_session(&self, caller: Caller) -> Result<Session> {
        caller.require_use()?;
        let slots = caller.stream_slot()?;
        Ok(Session::new(self.clone(), caller, slots))
    }

    /// Counts and logs a lease its holder lost. Called only where the store
    /// (or, for [`LossReason::StoreLost`], the session that renewed the
    /// lease) shows that this very lease ended without its holder's
    /// consent, and only the first time it is learnt (see
    /// [`Checked::Expired`]): a release, a second release, a heartbeat that
    /// crossed a release or a stranger's wrong token is never counted.
    fn lost(&self, name: &str, reason: LossReason) {
        self.inner.events.lost(reason);
        tracing::info!(lock = %name, ?reason, "lease lost");
    }

    /// Takes the lease, once or waiting (see the proto for the semantics).
    pub async fn acquire(&self, caller: &Caller, args: AcquireArgs) -> Result<Granted> {
        caller.require_use()?;
        let limits = &self.inner.limits;
        validate::name(limits, &args.name)?;
        validate::holder(limits, &args.holder)?;
        let ttl_ms = validate::ttl(limits, args.ttl_ms, Some(limits.ttl_default))?
            .unwrap_or(limits.ttl_default.as_millis() as u64);
        let wait = validate::wait(limits, args.wait_timeout_ms)?;
        let lock_delay_ms = validate::lock_delay(limits, args.lock_delay_ms)?;
        let limit = validate::limit(limits, args.limit, lock_delay_ms)?;
        validate::place(&args.place)?;
        let room = caller.reserve_lease()?;
        let stored = caller.tenant().qualify(&args.name);
        let token = if args.place.is_empty() {
            token::generate()?
        } else {
            self.kept_place(&stored, args.place).await?
        };
        let keep_place = args.keep_place;
        let spec = GrantSpec {
            name: stored,
            token,
            holder: args.holder,
            ttl_ms,
            lock_delay_ms,
            limit,
            queued: !wait.is_zero(),
        };
        // The attempt runs in its own task: if the caller goes away, a store
        // call in flight still completes, and a grant it produced is released
        // at once instead of holding the lock for nobody until its TTL.
        let (tx, rx) = oneshot::channel();
        tokio::spawn(self.clone().acquire_task(
            caller.clone(),
            room,
            args.name,
            spec,
            Wait {
                time: wait,
                keep_place,
            },
            tx,
        ));
        rx.await
            .map_err(|_| Error::Internal("the acquire task ended without an answer".into()))?
    }

    /// The token an Acquire passing back `place` waits as: the place
    /// itself while it is in `name`'s line now (the store keeps its position,
    /// and granted, it is the owner token; only its caller ever learnt it,
    /// see [`Error::PlaceKept`]), else a fresh token, at the back. A place
    /// is never taken on its word: a well-formed string that is in no line
    /// (a released or a live owner token, a place that lapsed, one made up)
    /// would otherwise let the caller choose its own owner token, and be
    /// granted under a token whose release or renewal the store already
    /// recorded. Looking refreshes the place (refresh.lua), so it cannot
    /// lapse before the attempt that follows; nothing else is written.
    async fn kept_place(&self, name: &str, place: String) -> Result<String> {
        let ranks = self.count_errors(
            self.inner
                .store
                .refresh_places(name, std::slice::from_ref(&place))
                .await,
        )?;
        if matches!(ranks.first(), Some(Some(_))) {
            return Ok(place);
        }
        tracing::debug!(
            lock = %name, place = %crate::redact::Redacted(&place),
            "the place passed back is not in line (lapsed, taken or never kept); joining with a fresh token"
        );
        token::generate()
    }

    /// `name` is the lock's name as the caller gave it; `spec.name` is its
    /// name in the store (within the caller's namespace).
    async fn acquire_task(
        self,
        who: Caller,
        room: LeaseRoom,
        name: String,
        spec: GrantSpec,
        wait: Wait,
        mut reply: oneshot::Sender<Result<Granted>>,
    ) {
        let started = Instant::now();
        let mut unknown = false;
        let result = self
            .acquire_until(
                &who,
                &name,
                &spec,
                started,
                (started + wait.time, wait.keep_place),
                &mut reply,
                &mut unknown,
            )
            .await
            .map(|(fence, attempt)| Granted {
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
        let events = &self.inner.events;
        match &result {
            Ok(granted) => {
                room.granted(
                    &spec.name,
                    &spec.token,
                    Instant::now() + Duration::from_millis(spec.ttl_ms),
                );
                events.acquired(granted.waited);
                tracing::debug!(
                    lock = %spec.name, fence = granted.lease.fence, ttl_ms = spec.ttl_ms,
                    holder = %spec.holder, token = %crate::redact::Redacted(&spec.token), "granted"
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
            Err(_) if unknown => self.orphaned(&spec),
            Err(_) => {}
        }
        if let Err(Ok(granted)) = reply.send(result) {
            tracing::debug!(lock = %spec.name, fence = granted.lease.fence, "caller left as its grant arrived; releasing");
            match self.count_errors(self.inner.store.release(&spec.name, &spec.token).await) {
                Ok(Checked::Done(())) => events.released(),
                Ok(_) => {}
                Err(_) => self.orphaned(&spec),
            }
            who.forget(&spec.name, &spec.token);
        }
    }

    /// One acquire attempt. A failed store call leaves its outcome unknown
    /// (a timeout, a connection broken after the request went out: the
    /// script may have run and granted): `unknown` is set, and the Acquire,
    /// which ends with that error, has the token released later. An answer
    /// counts the expired leases it found whose loss nobody had reported
    /// (their holders never asked since): taken over after expiry
    /// (`not_owner`), reported to this attempt and to no one else.
    async fn attempt(&self, spec: &GrantSpec, unknown: &mut bool) -> Result<Acquired> {
        let acquired = self
            .count_errors(self.inner.store.acquire(spec).await)
            .inspect_err(|_| *unknown = true)?;
        let expired = match &acquired {
            Acquired::Granted { expired, .. } => *expired,
            Acquired::Blocked(blocked) => blocked.expired,
        };
        for _ in 0..expired {
            self.lost(&spec.name, LossReason::NotOwner);
        }
        Ok(acquired)
    }

    /// Tries until `deadline`, woken by releases and expiries; returns the
    /// fence of the grant and when the granting attempt was sent (the lease
    /// started no sooner). A caller that waits holds a place in the name's
    /// queue (in the store, across replicas) and leaves it however the wait
    /// ends, unless `keep_place` and the wait ran out: then the place stays
    /// for [`QUEUE_LIFETIME`] (from the last attempt, which renewed it), for
    /// the caller's next Acquire to take back, and the refusal says so
    /// ([`Error::PlaceKept`]). `unknown`: see [`Leases::attempt`].
    #[allow(clippy::too_many_arguments)]
    async fn acquire_until(
        &self,
        who: &Caller,
        name: &str,
        spec: &GrantSpec,
        started: Instant,
        (deadline, keep_place): (Instant, bool),
        reply: &mut oneshot::Sender<Result<Granted>>,
        unknown: &mut bool,
    ) -> Result<(u64, Instant)> {
        let store = &self.inner.store;
        // A caller that will wait watches before its first attempt when
        // that is free (the name is contended here already): the attempt's
        // answer then stands, with no second look once the watch is up.
        let early = spec
            .queued
            .then(|| store.watch_now(&spec.name, Event::Released, &spec.token))
            .flatten();
        let attempt = Instant::now();
        let blocked = match self.attempt(spec, unknown).await? {
            Acquired::Granted { fence, .. } => return Ok((fence, attempt)),
            Acquired::Blocked(blocked) => blocked,
        };
        if !spec.queued {
            // It tried once: it did not wait (the time was the store's).
            return Err(not_obtained(name, blocked, 0));
        }
        let early = early.map(|watch| (watch, blocked));
        let result = self
            .wait_in_line(who, name, spec, (started, deadline), early, reply, unknown)
            .await;
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
            ) if keep_place => {
                tracing::debug!(
                    lock = %spec.name, token = %crate::redact::Redacted(&spec.token),
                    "wait ran out; place in line kept"
                );
                return Err(Error::PlaceKept {
                    refusal: Box::new(refusal),
                    place: crate::error::KeptPlace(spec.token.clone()),
                    kept_ms: crate::store::QUEUE_LIFETIME.as_millis() as u64,
                });
            }
            Err(shutdown @ Error::Unavailable(_))
                if keep_place && !*unknown && *self.inner.shutdown.borrow() =>
            {
                tracing::debug!(
                    lock = %spec.name, token = %crate::redact::Redacted(&spec.token),
                    "shutting down; place in line kept"
                );
                return Err(Error::PlaceKept {
                    refusal: Box::new(shutdown),
                    place: crate::error::KeptPlace(spec.token.clone()),
                    kept_ms: crate::store::QUEUE_LIFETIME.as_millis() as u64,
                });
            }
            result => result,
        };
        if result.is_err() {
            // Give up the place in line at once, so the next waiter is not
            // kept waiting for it to lapse.
            if self
                .count_errors(store.dequeue(&spec.name, &spec.token).await)
                .is_err()
            {
                tokio::spawn(
                    self.clone()
                        .dequeue_later(spec.name.clone(), spec.token.clone()),
                );
            }
        }
        result
    }

    /// A dequeue that failed (the store was unreachable: a failover, say)
    /// is tried again a few times while the place would still hold, so
    /// that the line moves as soon as the store is back instead of when the
    /// place lapses ([`QUEUE_LIFETIME`]).
    async fn dequeue_later(self, name: String, token: String) {
        let until = Instant::now() + QUEUE_LIFETIME;
        while Instant::now() < until {
            tokio::time::sleep(DEQUEUE_RETRY).await;
            if self.inner.store.dequeue(&name, &token).await.is_ok() {
                return;
            }
        }
    }

    /// Waits in line for the grant, looking again when woken. `early`: a
    /// watch set up before the first attempt, and that attempt's answer,
    /// which then needs no second look ([`Store::watch_now`]); without it
    /// the watch is set up here and the name looked at again.
    #[allow(clippy::too_many_arguments)]
    async fn wait_in_line(
        &self,
        who: &Caller,
        name: &str,
        spec: &GrantSpec,
        (started, deadline): (Instant, Instant),
        early: Option<(Watch, Blocked)>,
        reply: &mut oneshot::Sender<Result<Granted>>,
        unknown: &mut bool,
    ) -> Result<(u64, Instant)> {
        let store = &self.inner.store;
        let _caps = who.waiter_slot()?;
        let _slot = Arc::clone(&self.inner.waiter_slots)
            .try_acquire_owned()
            .map_err(|_| {
                Error::ResourceExhausted(format!(
                    "{} Acquire calls are already waiting on this broker replica (--max-waiters); \
                 retry later or on another replica",
                    self.inner.limits.max_waiters
                ))
            })?;
        let _waiting = Waiting::new(self.inner.events.as_ref());
        let (watch, mut answered) = match early {
            Some((watch, blocked)) => (watch, Some(blocked)),
            None => (
                self.count_errors(
                    store
                        .watch(&spec.name, Event::Released, Some(&spec.token))
                        .await,
                )?,
                None,
            ),
        };
        let shutdown = self.shutting_down();
        tokio::pin!(shutdown);
        // The first attempt (before this) took a place in line; from now on
        // this replica refreshes it, with its other waiters' (places.rs).
        let place = self
            .inner
            .places
            .register(&spec.name, &spec.token, u64::MAX);
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
                    match self.attempt(spec, unknown).await? {
                        Acquired::Granted { fence, .. } => return Ok((fence, attempt)),
                        Acquired::Blocked(blocked) => blocked,
                    }
                }
            };
            place.saw(blocked.position);
            let now = Instant::now();
            if now >= deadline {
                return Err(not_obtained(name, blocked, ms_since(started)));
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
            tracing::debug!(
                lock = %spec.name, position = blocked.position, remaining_ms = blocked.remaining_ms,
                wake_in_us = wake.duration_since(now).as_micros() as u64, "blocked; waiting"
            );
            tokio::select! {
                () = &mut notified => {
                    tracing::debug!(lock = %spec.name, "woken by an event")
                }
                () = sleep_until(wake) => {
                    tracing::debug!(
                        lock = %spec.name,
                        late_us = Instant::now().saturating_duration_since(wake).as_micros() as u64,
                        "woken by the timer"
                    )
                }
                () = reply.closed() => return Err(Error::Cancelled),
                () = &mut shutdown => {
                    return Err(Error::Unavailable(
                        "the broker is shutting down; retry on another replica".into(),
                    ))
                }
            }
        }
    }

    /// Extends a lease (see the proto).
    pub async fn renew(
        &self,
        caller: &Caller,
        name: &str,
        owner_token: &str,
        ttl_ms: u64,
    ) -> Result<Renewed> {
        caller.require_use()?;
        let limits = &self.inner.limits;
        validate::name(limits, name)?;
        validate::owner_token(owner_token)?;
        let ttl = validate::ttl(limits, ttl_ms, None)?;
        let stored = caller.tenant().qualify(name);
        let started = Instant::now();
        let outcome = self.count_errors(self.inner.store.renew(&stored, owner_token, ttl).await)?;
        self.inner.events.renewed(started.elapsed());
        match &outcome {
            Checked::Done(renewed) => caller.hold(
                &stored,
                owner_token,
                Instant::now() + Duration::from_millis(renewed.ttl_ms),
            ),
            _ => caller.forget(&stored, owner_token),
        }
        self.checked(name, &stored, outcome)
    }

    /// Ends a lease (see the proto). Idempotent: a release repeated with the
    /// same token (a retry after a broken connection, whose first try did
    /// the work) succeeds again; only the first is counted.
    pub async fn release(&self, caller: &Caller, name: &str, owner_token: &str) -> Result<()> {
        caller.require_use()?;
        validate::name(&self.inner.limits, name)?;
        validate::owner_token(owner_token)?;
        let stored = caller.tenant().qualify(name);
        let outcome = self.count_errors(self.inner.store.release(&stored, owner_token).await)?;
        caller.forget(&stored, owner_token);
        match outcome {
            Checked::Done(()) => {
                self.inner.events.released();
                tracing::debug!(lock = %stored, token = %crate::redact::Redacted(owner_token), "released");
                Ok(())
            }
            Checked::Released => Ok(()),
            other => self.checked(name, &stored, other),
        }
    }

    /// The store name of `name` in `tenant`'s namespace: the caller's own
    /// when `tenant` is empty or the caller's, else another tenant's (the
    /// root namespace's being [`ROOT_TENANT`]), which only an administrator
    /// may address.
    fn scoped(&self, caller: &Caller, tenant: &str, name: &str) -> Result<String> {
        validate::name(&self.inner.limits, name)?;
        if tenant.is_empty() || tenant == caller.tenant().id() {
            if !caller.permissions().admin {
                caller.require_use()?;
            }
            return Ok(caller.tenant().qualify(name));
        }
        caller.require_admin("Naming another tenant's lock")?;
        if tenant != ROOT_TENANT {
            validate::tenant(tenant)?;
        }
        Ok(store_name(tenant, name))
    }

    /// Who holds `name`, in the caller's namespace or (for an
    /// administrator) in `tenant`'s.
    pub async fn describe(&self, caller: &Caller, tenant: &str, name: &str) -> Result<Description> {
        let stored = self.scoped(caller, tenant, name)?;
        self.describe_stored(&stored).await
    }

    async fn describe_stored(&self, stored: &str) -> Result<Description> {
        let described = self.count_errors(self.inner.store.describe(stored).await)?;
        Ok(Description {
            lease: described.lease,
            local_waiters: self.inner.store.local_waiters(stored),
            waiters: described.waiters,
            permits: described.permits,
            lock_delay_remaining_ms: described.lock_delay_remaining_ms,
        })
    }

    /// Whether `fence` is the fence of the current lease on `name` (Chubby's
    /// CheckSequencer), and the current fence (0 if the name is free).
    pub async fn check_fence(
        &self,
        caller: &Caller,
        name: &str,
        fence: u64,
    ) -> Result<(bool, u64)> {
        let stored = self.scoped(caller, "", name)?;
        let described = self.count_errors(self.inner.store.describe(&stored).await)?;
        let current = described.lease.map_or(0, |l| l.fence);
        Ok((fence != 0 && current == fence, current))
    }

    /// Ends the current lease on `name` (in `tenant`'s namespace, or the
    /// caller's when empty), whoever holds it: an administrator's action.
    /// Without authentication every caller is one exactly when the broker
    /// runs with `--enable-revoke`. Its holder hears REVOKED at its next
    /// renewal, its lock-delay starts, waiters are woken, and the next grant
    /// gets a higher fence. Returns the revoked lease's fence.
    pub async fn revoke(&self, caller: &Caller, tenant: &str, name: &str) -> Result<u64> {
        caller.require_admin("Revoke")?;
        let stored = self.scoped(caller, tenant, name)?;
        match self.count_errors(self.inner.store.revoke(&stored).await)? {
            Revocation::Revoked { fence } => {
                self.lost(&stored, LossReason::Revoked);
                Ok(fence)
            }
            // A retry whose first try did the work: counted then.
            Revocation::Already { fence } => Ok(fence),
            Revocation::NotHeld => Err(Error::NotHeld {
                name: name.to_owned(),
            }),
        }
    }

    /// Turns an outcome that is not `Done` into the error the caller must
    /// hear, counting the loss when the store says this is the first news
    /// of this lease's expiry. `name` is the caller's name of the lock,
    /// `stored` the store's.
    fn checked<T>(&self, name: &str, stored: &str, outcome: Checked<T>) -> Result<T> {
        let name = name.to_owned();
        match outcome {
            Checked::Done(value) => Ok(value),
            Checked::Expired => {
                self.lost(stored, LossReason::Expired);
                Err(Error::NotHeld { name })
            }
            // Not this token's lease, or its end was reported already, or
            // it was released: a refused request, not a loss.
            Checked::NotHeld | Checked::Released | Checked::ExpiredReported => {
                Err(Error::NotHeld { name })
            }
            Checked::NotOwner { fence } => Err(Error::NotOwner { name, fence }),
            // Counted when it was revoked.
            Checked::Revoked { fence } => Err(Error::Revoked { name, fence }),
        }
    }

    /// Counts store failures in `leasehold_store_errors_total`.
    fn count_errors<T>(&self, result: Result<T>) -> Result<T> {
        if let Err(e @ (Error::Unavailable(_) | Error::Internal(_))) = &result {
            self.inner.events.store_failed();
            tracing::warn!(error = %e, "store call failed");
        }
        result
    }
}

fn ms_since(started: Instant) -> u64 {
    started.elapsed().as_millis() as u64
}

/// How long an Acquire waits, and whether it keeps its place in line when
/// that runs out.
struct Wait {
    time: Duration,
    keep_place: bool,
}

/// How often [`Leases::dequeue_later`] tries again.
const DEQUEUE_RETRY: Duration = Duration::from_millis(200);

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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{metrics::Metrics, store::MemoryStore};

    /// A lease service on the memory store, and the metrics it reports to.
    pub(super) fn leases() -> (Leases, Metrics) {
        let metrics = Metrics::new();
        let leases = Leases::new(
            Store::Memory(MemoryStore::new()),
            Limits::default(),
            Arc::new(metrics.clone()),
        );
        (leases, metrics)
    }

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
        leases
            .clone()
            .acquire_task(
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

    /// Shutting down ends a wait with UNAVAILABLE instead of holding up the
    /// graceful shutdown.
    #[tokio::test]
    async fn shutdown_ends_waits() {
        let (leases, metrics) = leases();
        let args = |holder: &str, wait| AcquireArgs {
            name: "busy".into(),
            ttl_ms: 60_000,
            holder: holder.into(),
            wait_timeout_ms: wait,
            lock_delay_ms: 0,
            limit: 0,
            ..Default::default()
        };
        let caller = Caller::local();
        leases.acquire(&caller, args("first", 0)).await.unwrap();
        let waiting = tokio::spawn({
            let (leases, caller) = (leases.clone(), caller.clone());
            async move { leases.acquire(&caller, args("second", 60_000)).await }
        });
        // The waiter is registered once the store counts its watch.
        while leases
            .describe(&caller, "", "busy")
            .await
            .unwrap()
            .local_waiters
            == 0
        {
            tokio::task::yield_now().await;
        }
        leases.begin_shutdown();
        let result = waiting.await.unwrap();
        assert!(
            matches!(result, Err(Error::Unavailable(ref m)) if m.contains("shutting down")),
            "{result:?}"
        );
        assert_eq!(metrics.waiters.get(), 0);
    }

    /// A wait that asked to keep its place keeps it when the shutdown ends
    /// it (UNAVAILABLE carrying the place), so that the caller waits on in
    /// it on another replica; without keep_place it is given up.
    #[tokio::test]
    async fn shutdown_keeps_the_place_of_a_wait_that_asked_to_keep_it() {
        let (leases, metrics) = leases();
        let args = |holder: &str, wait, keep_place| AcquireArgs {
            name: "restarting".into(),
            ttl_ms: 60_000,
            holder: holder.into(),
            wait_timeout_ms: wait,
            keep_place,
            ..Default::default()
        };
        let caller = Caller::local();
        leases
            .acquire(&caller, args("holder", 0, false))
            .await
            .unwrap();
        let waiting = |holder: &'static str, keep| {
            let (leases, caller) = (leases.clone(), caller.clone());
            tokio::spawn(async move { leases.acquire(&caller, args(holder, 60_000, keep)).await })
        };
        let local_waiters = || async {
            let d = leases.describe(&caller, "", "restarting").await.unwrap();
            (d.waiters, d.local_waiters)
        };
        let keeping = waiting("keeping", true);
        while local_waiters().await != (1, 1) {
            tokio::task::yield_now().await;
        }
        let leaving = waiting("leaving", false);
        while local_waiters().await != (2, 2) {
            tokio::task::yield_now().await;
        }
        leases.begin_shutdown();
        let kept = keeping.await.unwrap();
        let Err(Error::PlaceKept { refusal, place, .. }) = kept else {
            panic!("{kept:?}")
        };
        assert!(
            matches!(*refusal, Error::Unavailable(ref m) if m.contains("shutting down")),
            "{refusal:?}"
        );
        let left = leaving.await.unwrap();
        assert!(matches!(left, Err(Error::Unavailable(_))), "{left:?}");
        // The kept place is still in line, nobody waits here any more.
        assert_eq!(local_waiters().await, (1, 0));
        let status = tonic::Status::from(Error::PlaceKept {
            refusal,
            place,
            kept_ms: 3_000,
        });
        assert_eq!(status.code(), tonic::Code::Unavailable);
        assert!(status.metadata().get("leasehold-place").is_some());
        assert_eq!(metrics.waiters.get(), 0);
    }
}
