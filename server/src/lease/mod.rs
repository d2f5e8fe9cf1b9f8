//! The lease rules: validation, grants (once or waiting), renewals, releases,
//! and what each outcome means for metrics. The gRPC layer only converts
//! messages; the store only executes atomic operations; the decisions are
//! here.

mod abandoned;
mod acquisition;
pub mod advice;
pub mod audit;
pub mod census;
mod election;
mod events;
mod keepalive;
mod limits;
pub mod listing;
mod orphans;
mod places;
pub mod recent;
mod tenant;
pub mod token;
pub mod validate;

pub use self::{
    election::{Leader, Observer},
    events::{Events, LossReason, NoEvents, Refusal},
    keepalive::{Beat, LeaseRef, LeaseState, Scope, Session},
    limits::Limits,
    listing::{ListArgs, ListPage, ListedLock},
    tenant::{
        split_stored, store_name, Caller, Caps, LeaseRoom, Permissions, Slot, Tenant, Tenants,
        Usage, NAMESPACE_SEPARATOR, ROOT_TENANT,
    },
};

use crate::duration::millis;
use std::{sync::Arc, time::Duration};

use tokio::{
    sync::{oneshot, watch, Semaphore},
    time::Instant,
};

use self::acquisition::{Acquisition, Wait};
use crate::{
    error::{Error, Result},
    store::{Checked, GrantSpec, LeaseInfo, Renewed, Revocation, Store},
};

/// What a caller asks of Acquire (fields as in the proto). Its `Debug`
/// shows only a prefix of `place`, a secret.
#[derive(Clone, Default)]
pub struct AcquireArgs {
    /// Lock name.
    pub name: String,
    /// Requested TTL; 0 for the default.
    pub ttl_ms: u64,
    /// Let the broker choose the TTL from the heartbeat round trips it
    /// measured (`advice.rs`); `ttl_ms` must then be 0.
    pub ttl_auto: bool,
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
            .field("ttl_auto", &self.ttl_auto)
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
    /// The newest losses, for the status page.
    recent: recent::Recent,
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
                recent: recent::Recent::default(),
            }),
        }
    }

    /// The store (for health checks).
    pub fn store(&self) -> &Store {
        &self.inner.store
    }

    /// The newest leases lost (as this replica learnt them), for the
    /// status page.
    pub fn recent_losses(&self) -> &recent::Recent {
        &self.inner.recent
    }

    /// The limits requests are checked against.
    pub fn limits(&self) -> &Limits {
        &self.inner.limits
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

    /// A new session for one KeepAlive ([`Scope::Named`]) or Session
    /// ([`Scope::Held`]) stream, counted against the caller's stream caps
    /// until it ends.
    pub fn session(&self, caller: Caller, scope: Scope) -> Result<Session> {
        caller.require_use()?;
        let slots = caller.stream_slot()?;
        Ok(Session::new(self.clone(), caller, slots, scope))
    }

    /// Counts and logs a lease its holder lost. Called only where the store
    /// (or, for [`LossReason::StoreLost`], the session that renewed the
    /// lease) shows that this very lease ended without its holder's
    /// consent, and only the first time it is learnt (see
    /// [`Checked::Expired`]): a release, a second release, a heartbeat that
    /// crossed a release or a stranger's wrong token is never counted.
    fn lost(&self, name: &str, reason: LossReason) {
        self.inner.events.lost(reason);
        audit::lost(name, reason.as_str());
        self.inner.recent.record(name, reason);
    }

    /// Takes the lease, once or waiting (see the proto for the semantics).
    pub async fn acquire(&self, caller: &Caller, args: AcquireArgs) -> Result<Granted> {
        caller.require_use()?;
        let limits = &self.inner.limits;
        validate::name(limits, &args.name)?;
        validate::holder(limits, &args.holder)?;
        let store = &self.inner.store;
        // A unary call is fitted to its tenant's streams (a Session
        // stream's Acquire comes here fitted to its own stream already).
        let asked = advice::requested_ttl(args.ttl_ms, args.ttl_auto, || {
            advice::suggested_ttl(caller.tenant().round_trip_p99(), limits)
        })?;
        let ttl_ms = store.applied_ms(
            validate::ttl(limits, asked, Some(limits.ttl_default))?
                .unwrap_or(millis(limits.ttl_default)),
        );
        let wait = validate::wait(limits, args.wait_timeout_ms)?;
        let lock_delay_ms = store.applied_ms(validate::lock_delay(limits, args.lock_delay_ms)?);
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
        // at once instead of holding the lock for nobody until its TTL; so
        // is a grant sent as the caller went away, unread (`Delivery`).
        // Boxed: the task's future is copied whole when spawned and when it
        // ends, and unboxed it is kilobytes (the store calls it awaits).
        let (tx, rx) = oneshot::channel();
        tokio::spawn(Box::pin(Acquisition::run(
            self.clone(),
            caller.clone(),
            room,
            args.name,
            spec,
            Wait {
                time: wait,
                keep_place,
            },
            tx,
        )));
        rx.await
            .map_err(|_| Error::Internal("the acquire task ended without an answer".into()))?
            .take()
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

    /// Extends a lease (see the proto).
    pub async fn renew(
        &self,
        caller: &Caller,
        name: &str,
        owner_token: &str,
        ttl_ms: u64,
        ttl_auto: bool,
    ) -> Result<Renewed> {
        caller.require_use()?;
        let limits = &self.inner.limits;
        validate::name(limits, name)?;
        validate::owner_token(owner_token)?;
        let ttl_ms = advice::requested_ttl(ttl_ms, ttl_auto, || {
            advice::suggested_ttl(caller.tenant().round_trip_p99(), limits)
        })?;
        let ttl = validate::ttl(limits, ttl_ms, None)?.map(|t| self.inner.store.applied_ms(t));
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
                audit::released(&stored, owner_token, audit::Release::Holder);
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
                audit::revoked(&stored, fence);
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::metrics::Metrics;

    /// A lease service on the memory store, and the metrics it reports to.
    pub(super) fn leases() -> (Leases, Metrics) {
        let metrics = Metrics::new();
        let leases = Leases::new(
            Store::memory(),
            Limits::default(),
            Arc::new(metrics.clone()),
        );
        (leases, metrics)
    }

    /// A grant sent to a caller whose future is dropped before it reads it
    /// (a cancel or a deadline racing with the grant) is released at once,
    /// not left to hold the lock for nobody until its TTL.
    #[tokio::test]
    async fn a_grant_its_caller_never_read_is_released() {
        let (leases, metrics) = leases();
        let caller = Caller::local();
        let mut call = Box::pin(leases.acquire(
            &caller,
            AcquireArgs {
                name: "raced".into(),
                ttl_ms: 60_000,
                ..Default::default()
            },
        ));
        // Polled once: the attempt's task is spawned, the caller waits.
        assert!(futures_util::FutureExt::now_or_never(call.as_mut()).is_none());
        // The grant is made and sent; the caller never reads it.
        let held = || async {
            leases
                .describe(&caller, "", "raced")
                .await
                .unwrap()
                .lease
                .is_some()
        };
        while !held().await {
            tokio::task::yield_now().await;
        }
        while metrics.acquired.get() == 0 {
            tokio::task::yield_now().await;
        }
        drop(call);
        let released = async {
            while held().await {
                tokio::task::yield_now().await;
            }
        };
        tokio::time::timeout(Duration::from_secs(10), released)
            .await
            .expect("the unread grant released within 10 s");
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
