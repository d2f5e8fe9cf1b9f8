//! The seam between the lease contract and one store: what a backend
//! implements, and only that.
//!
//! [`super::Store`] owns, once, what every backend needs around these
//! operations: the fence floor (the highest fence this broker has seen,
//! passed to every grant and raised by every answer), the choice between a
//! lock and a semaphore grant, and the one list of backends it dispatches
//! over. A backend owns its connections, its store-side code (Lua, SQL,
//! in-process maps), its store timeout's enforcement (each must end the
//! store's work when the broker gives up, in its own way: dropping a Redis
//! request, cancelling a PostgreSQL statement) and the classification of
//! its driver's errors (through [`super::timed_out`] and
//! [`crate::Error::Unavailable`]).
//!
//! A new store implements [`Backend`], joins the `Backends` enum and the
//! `dispatch!` macro in `store/mod.rs` (the compiler then points at every
//! match that lacks it), the scheme list `SCHEMES`, and the one list of
//! backends the conformance suite and the model checker run on
//! (`tests/harness/src/backends.rs`): from its first commit both check it.
//!
//! The methods are `async fn` in a trait, dispatched statically through
//! the enum: each call's future is the backend's own, on the stack, with
//! no boxing (a `dyn Backend` would need a boxed future per call).

use super::{
    Acquired, Checked, Described, Event, GrantSpec, Listing, Ping, RenewItem, Renewed, Revocation,
    Watch,
};
use crate::error::Result;

/// A store's operations (see [`super::Store`] for what each promises to
/// callers; here, what a backend must do).
pub(crate) trait Backend: Send + Sync {
    /// Grants a lock lease (`spec.limit` is 1) if the name is free, with a
    /// fence above every earlier fence of the name and above `floor`
    /// (contract: [`super::Store`]'s module docs). A blocked attempt with
    /// `spec.queued` takes or keeps the caller's place in line.
    async fn acquire_lock(&self, spec: &GrantSpec, floor: u64) -> Result<Acquired>;

    /// Grants one of `spec.limit` (more than 1) semaphore permits of the
    /// name, as [`Backend::acquire_lock`] a lock.
    async fn acquire_permit(&self, spec: &GrantSpec, floor: u64) -> Result<Acquired>;

    /// Extends `token`'s lease to `ttl_ms` (or its own TTL when `None`).
    async fn renew(&self, name: &str, token: &str, ttl_ms: Option<u64>)
        -> Result<Checked<Renewed>>;

    /// Renews every item in one store round trip; one outcome per item, in
    /// order.
    async fn renew_many(&self, items: &[RenewItem]) -> Result<Vec<Checked<Renewed>>>;

    /// What became of `token`'s lease, without extending it.
    async fn check(&self, name: &str, token: &str) -> Result<Checked<Renewed>>;

    /// Deletes `token`'s lease and wakes the name's waiters on every
    /// replica.
    async fn release(&self, name: &str, token: &str) -> Result<Checked<()>>;

    /// Ends the name's current lease, whoever holds it.
    async fn revoke(&self, name: &str) -> Result<Revocation>;

    /// What the store knows of the name, and the last fence it remembers
    /// of it (0 if none; raises the floor even when the name is free).
    async fn describe(&self, name: &str) -> Result<(Described, u64)>;

    /// One page of a walk over the names that start with `prefix`: looks
    /// at no more than `budget` names (Redis: about that many keys, its
    /// SCAN's `COUNT`), from `resume` (a [`Listing::next`] of an earlier
    /// page with the same prefix; `None` to start), and returns those with
    /// something on them ([`Described::is_idle`] false), each page in name
    /// order, with the highest fence it read (to raise the floor). The cost
    /// of one call is bounded by `budget` whatever the store holds: a walk
    /// over a million names is many calls, none of which stalls the store.
    ///
    /// A name that has something on it for the whole walk is in some page;
    /// a store whose walk is not in name order (Redis) may list a name on
    /// two pages. A `resume` the backend cannot read is
    /// [`crate::Error::bad`] for the argument `page_token`.
    async fn list(
        &self,
        prefix: &str,
        resume: Option<&str>,
        budget: usize,
    ) -> Result<(Listing, u64)>;

    /// Takes a waiter out of the name's line.
    async fn dequeue(&self, name: &str, token: &str) -> Result<()>;

    /// Renews the places of `tokens` in the name's line: each one's rank
    /// (0: first), or `None` when it has no place.
    async fn refresh_places(&self, name: &str, tokens: &[String]) -> Result<Vec<Option<u64>>>;

    /// This replica's registry of watches, which the backend's
    /// notifications (a Redis message, a PostgreSQL NOTIFY, an in-process
    /// event) wake.
    fn watchers(&self) -> &super::watch::Watchers;

    /// The key of `event` of `name` in [`Backend::watchers`].
    fn channel(&self, name: &str, event: Event) -> String;

    /// Starts a watch ([`super::Store::watch`]): by default, registering it
    /// is all (the store notifies every event); a backend that must tell
    /// the store first (PostgreSQL notifies only watched names) overrides
    /// it.
    async fn watch(&self, name: &str, event: Event, waiter: Option<&str>) -> Result<Watch> {
        self.watchers()
            .watch(&self.channel(name, event), waiter)
            .await
    }

    /// The TTL (or lock-delay) the store applies when asked for `ms`: the
    /// same, or more where its leases have a coarser unit (etcd's are whole
    /// seconds). Never less: a lease may outlive what its holder was told,
    /// never end before it.
    fn applied_ms(&self, ms: u64) -> u64 {
        ms
    }

    /// How long past its TTL a lease may still read as alive: none where
    /// the store decides expiry by its clock when asked (Redis, PostgreSQL,
    /// memory); etcd's leader revokes an expired lease within about half a
    /// second.
    fn expiry_lag(&self) -> std::time::Duration {
        std::time::Duration::ZERO
    }

    /// Checks that the store answers and takes writes, and reads its clock
    /// and settings ([`super::Store::ping`]).
    async fn ping(&self) -> Result<Ping>;
}
