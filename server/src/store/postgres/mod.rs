//! The PostgreSQL store: each operation is ONE statement calling one
//! PL/pgSQL function (schema.sql), so it runs in one short transaction in
//! the database, serialised per name by an advisory transaction lock; the
//! broker never checks and then sets. The functions are the Redis store's
//! Lua scripts, reply for reply; time is the database's clock_timestamp(),
//! fences come from one counter row.
//!
//! Why this shape: PostgreSQL advisory locks alone would bind a lock to
//! one database session, which a stateless broker replica cannot keep for
//! a client across its calls (or hand over when the replica dies); a row
//! per lease with an expiry by the database's clock can.
//!
//! Driver: tokio-postgres (async, no compile-time database, pipelines
//! concurrent calls on a connection) under deadpool-postgres (a small pool:
//! a call takes a connection for one statement). Objects live in one
//! schema derived from the key prefix ([`connect::schema_for`]), created or
//! migrated by the first call (or by `leasehold migrate`), with a version
//! table. Waiters are woken by LISTEN/NOTIFY (`listen`); rows whose time is
//! up are swept every second (schema.sql's sweep), so nothing grows per
//! distinct name.
//!
//! Every call is bounded by the store timeout and fails with UNAVAILABLE
//! past it, so a dead or stalled PostgreSQL never hangs a request.

mod connect;
mod deadline;
mod listen;
mod tls;

use crate::duration::millis;
use std::{sync::Arc, time::Duration};

use deadpool_postgres::Pool;
use tokio::{
    sync::{mpsc, watch, OnceCell},
    time::Instant,
};
use tokio_postgres::{config::TargetSessionAttrs, Row};

pub use self::connect::schema_for;
use self::connect::{classify, pool_error, timed_out};
use super::{
    backend::Backend,
    contract::{
        ttl_arg, GRANT_GRANTED, GRANT_HELD, GRANT_LOCK_DELAY, GRANT_QUEUE, GRANT_TOO_LATE,
        LEASE_DONE, LEASE_RELEASED_ALREADY, REVOKE_ALREADY, REVOKE_DONE, REVOKE_NOTHING, TTL_KEEP,
        TTL_LOOK,
    },
    ended, one_answer_each,
    watch::Watchers,
    Acquired, Blocked, BlockedBy, Checked, ClockReading, Described, Event, GrantSpec, LeaseInfo,
    Listed, Listing, Ping, RenewItem, Renewed, Revocation, StoreOptions, QUEUE_LIFETIME,
};
use crate::error::{Error, Result};

/// Most leases one `renew_many` statement renews: their names stay locked
/// until it commits, so a bound keeps every grant of those names waiting
/// for at most one short statement. A bigger heartbeat is several
/// statements, sent at once (the driver pipelines them).
const RENEW_BATCH: usize = 500;

/// Most rows of each kind one sweep deletes; a sweep runs again at once
/// while it found that many.
const SWEEP_BATCH: i32 = 1_000;

/// How long the first call may wait for the schema to be checked (and
/// created or migrated): DDL on a busy server can take longer than a store
/// call should. Only until the schema is first found ready; a server that
/// is down fails at once, not after this.
const MIGRATE_TIMEOUT: Duration = Duration::from_secs(10);

/// How long the database takes a name as watched after a broker said so
/// ([`PostgresStore::watch`]); each broker says it again every
/// [`OBSERVED_REFRESH`] for the names it still watches. Long, so that an
/// outage shorter than this loses no watched name: a stale row only costs
/// a NOTIFY nobody needs.
const OBSERVED_LIFETIME: Duration = Duration::from_secs(60);

/// How often a broker renews the rows of the names it watches.
const OBSERVED_REFRESH: Duration = Duration::from_secs(20);

/// How often rows whose time is up are deleted.
const SWEEP_EVERY: Duration = Duration::from_secs(1);

/// The statements, the schema written in.
struct Statements {
    acquire: String,
    semaphore_acquire: String,
    renew: String,
    renew_many: String,
    release: String,
    revoke: String,
    describe: String,
    list: String,
    dequeue: String,
    refresh: String,
    sweep: String,
    observe: String,
}

impl Statements {
    fn new(s: &str) -> Self {
        Statements {
            acquire: format!("SELECT * FROM {s}.acquire($1, $2, $3, $4, $5, $6, $7, $8, $9)"),
            semaphore_acquire: format!(
                "SELECT * FROM {s}.semaphore_acquire($1, $2, $3, $4, $5, $6, $7, $8, $9)"
            ),
            renew: format!("SELECT * FROM {s}.renew($1, $2, $3)"),
            // In the order of the arguments, whatever the plan.
            renew_many: format!("SELECT * FROM {s}.renew_many($1, $2, $3) ORDER BY ord"),
            release: format!("SELECT * FROM {s}.release($1, $2)"),
            revoke: format!("SELECT * FROM {s}.revoke($1)"),
            describe: format!("SELECT * FROM {s}.describe($1)"),
            list: format!("SELECT * FROM {s}.list($1, $2, $3)"),
            dequeue: format!("SELECT {s}.dequeue($1, $2)"),
            refresh: format!("SELECT * FROM {s}.refresh($1, $2, $3) ORDER BY ord"),
            sweep: format!("SELECT {s}.sweep($1)"),
            observe: format!("SELECT {s}.observe($1, $2)"),
        }
    }
}

/// What the clones of one store share.
pub(crate) struct Inner {
    pool: Pool,
    /// For cancel requests ([`PostgresStore::abandon`]).
    tls: tls::Tls,
    /// The newest reading of the database's clock, for grants' not-after.
    clock: Arc<deadline::StoreClock>,
    schema: String,
    statements: Statements,
    timeout: Duration,
    /// Set once the schema is known to be at this broker's version.
    migrated: OnceCell<()>,
    watchers: Watchers,
}

/// The PostgreSQL store; cheap to clone.
#[derive(Clone)]
pub struct PostgresStore {
    inner: Arc<Inner>,
}

/// A number for a `bigint` parameter (values above i64::MAX do not occur:
/// the lease layer bounds TTLs and fences are microseconds).
fn int(v: u64) -> i64 {
    i64::try_from(v).unwrap_or(i64::MAX)
}

/// A `bigint` column as the store's unsigned number (negative: 0).
fn uint(row: &Row, column: &str) -> Result<u64> {
    let v: Option<i64> = row
        .try_get(column)
        .map_err(|e| Error::Internal(format!("PostgreSQL reply column {column}: {e}")))?;
    Ok(v.map_or(0, |v| u64::try_from(v).unwrap_or(0)))
}

/// A reply's code (`store::contract`'s numbers; an `integer` column).
fn code(row: &Row) -> Result<i64> {
    row.try_get::<_, Option<i32>>("code")
        .map_err(|e| Error::Internal(format!("PostgreSQL reply column code: {e}")))?
        .map(i64::from)
        .ok_or_else(|| Error::Internal("PostgreSQL reply without a code".into()))
}

fn text(row: &Row, column: &str) -> Result<String> {
    let v: Option<String> = row
        .try_get(column)
        .map_err(|e| Error::Internal(format!("PostgreSQL reply column {column}: {e}")))?;
    Ok(v.unwrap_or_default())
}

/// A row with `describe()`'s columns (`describe()`'s own, or one of
/// `list()`'s) as what the store knows of the name, and the last fence it
/// remembers of it.
fn described(row: &Row) -> Result<(Described, u64)> {
    let held: bool = row
        .try_get("held")
        .map_err(|e| Error::Internal(format!("PostgreSQL describe held: {e}")))?;
    let fence = uint(row, "fence")?;
    let remaining_ms = uint(row, "remaining_ms")?;
    let lease = if held {
        Some(LeaseInfo {
            holder: text(row, "holder")?,
            fence,
            remaining_ms,
            ttl_ms: uint(row, "ttl_ms")?,
            granted_at_unix_ms: uint(row, "granted_ms")?,
            lock_delay_ms: uint(row, "delay_ms")?,
        })
    } else {
        None
    };
    let described = Described {
        lock_delay_remaining_ms: if held { 0 } else { remaining_ms },
        lease,
        waiters: uint(row, "waiters")?,
        permits: uint(row, "permits")?,
    };
    Ok((described, fence))
}

impl PostgresStore {
    /// Reads the URL and prepares the pool and the listening connection;
    /// connects lazily, so the broker starts (NOT_SERVING) while
    /// PostgreSQL is down.
    pub fn open(url: &str, options: &StoreOptions) -> Result<Self> {
        if options.replica_acks > 0 {
            // Said at start-up rather than ignored: the operator asked for
            // a durability this store would not give that way.
            return Err(Error::InvalidArgument(
                "--replica-acks is Redis's WAIT; on PostgreSQL, have standbys acknowledge \
                 commits with synchronous replication (synchronous_standby_names) instead"
                    .into(),
            ));
        }
        let (config, tls) = connect::parse_url(url, options)?;
        let schema = schema_for(&options.key_prefix)?;
        let clock = Arc::new(deadline::StoreClock::default());
        let pool = connect::pool(
            config.clone(),
            tls.clone(),
            options.connections,
            options.timeout,
            Arc::clone(&clock),
        )?;
        let (requests, requests_rx) = mpsc::unbounded_channel();
        let watchers = Watchers::new(Some(requests));
        let (listening, listening_rx) = watch::channel(false);
        let store = PostgresStore {
            inner: Arc::new(Inner {
                pool,
                tls: tls.clone(),
                clock,
                statements: Statements::new(&schema),
                schema: schema.clone(),
                timeout: options.timeout,
                migrated: OnceCell::new(),
                watchers: watchers.clone(),
            }),
        };
        tokio::spawn(listen::serve_subscriptions(
            requests_rx,
            listening_rx,
            options.timeout,
        ));
        let link = listen::Link {
            read_write: config.get_target_session_attrs() == TargetSessionAttrs::ReadWrite,
            config,
            tls,
            schema,
            timeout: options.timeout,
        };
        tokio::spawn(listen::run(
            Arc::downgrade(&store.inner),
            link,
            watchers,
            listening,
        ));
        tokio::spawn(sweep(Arc::downgrade(&store.inner)));
        Ok(store)
    }

    /// Creates or migrates the schema of `url` for `key_prefix` now, and
    /// returns the schema's name: `leasehold migrate`, for deployments
    /// whose brokers may not run DDL (a broker finding the schema at its
    /// version runs none).
    pub async fn migrate(url: &str, options: &StoreOptions) -> Result<String> {
        let store = Self::open(url, options)?;
        store.ready().await?;
        Ok(store.inner.schema.clone())
    }

    /// Tells the database that `names` are watched, for
    /// [`OBSERVED_LIFETIME`].
    async fn observe(&self, names: &[&str]) -> Result<()> {
        let life = int(millis(OBSERVED_LIFETIME));
        for batch in names.chunks(1_000) {
            self.query("observe", &self.inner.statements.observe, &[&batch, &life])
                .await?;
        }
        Ok(())
    }

    /// Renews the rows of every name watched here now.
    async fn observe_watched(&self) -> Result<()> {
        let mut names: Vec<String> = self
            .inner
            .watchers
            .observed_channels()
            .into_iter()
            .filter_map(|channel| channel.rsplit_once(':').map(|(name, _)| name.to_owned()))
            .collect();
        names.sort();
        names.dedup();
        let names: Vec<&str> = names.iter().map(String::as_str).collect();
        self.observe(&names).await
    }

    /// The schema is at this broker's version (migrated by the first call
    /// that finds it older).
    async fn ready(&self) -> Result<()> {
        self.inner
            .migrated
            .get_or_try_init(|| async {
                let limit = self.inner.timeout.max(MIGRATE_TIMEOUT);
                let deadline = Instant::now() + limit;
                let client = self.client("migrate", deadline, limit).await?;
                let migrated = tokio::time::timeout_at(
                    deadline,
                    connect::migrate(&client, &self.inner.schema, limit),
                )
                .await;
                migrated.unwrap_or_else(|_| {
                    self.abandon("migrate", client);
                    Err(timed_out("migrate", limit))
                })
            })
            .await?;
        Ok(())
    }

    /// A pooled connection by `deadline` (`limit`: the bound it stands
    /// for, for the message).
    async fn client(
        &self,
        op: &str,
        deadline: Instant,
        limit: Duration,
    ) -> Result<deadpool_postgres::Object> {
        match tokio::time::timeout_at(deadline, self.inner.pool.get()).await {
            Ok(got) => got.map_err(|e| pool_error(op, e)),
            Err(_) => Err(timed_out(op, limit)),
        }
    }

    /// Runs one statement (prepared once per connection) and returns its
    /// rows, under the store timeout: the one call path of every operation.
    async fn query(
        &self,
        op: &'static str,
        sql: &str,
        params: &[&(dyn tokio_postgres::types::ToSql + Sync)],
    ) -> Result<Vec<Row>> {
        self.ready().await?;
        self.query_by(op, sql, params, Instant::now() + self.inner.timeout)
            .await
    }

    /// [`PostgresStore::query`] with its deadline given (the store timeout
    /// from when the call began). A statement still running then is
    /// abandoned ([`PostgresStore::abandon`]): cancelled in the server, its
    /// connection closed, never back in the pool.
    async fn query_by(
        &self,
        op: &'static str,
        sql: &str,
        params: &[&(dyn tokio_postgres::types::ToSql + Sync)],
        deadline: Instant,
    ) -> Result<Vec<Row>> {
        let timeout = self.inner.timeout;
        let client = self.client(op, deadline, timeout).await?;
        let ran = tokio::time::timeout_at(deadline, async {
            let statement = client.prepare_cached(sql).await?;
            client.query(&statement, params).await
        })
        .await;
        match ran {
            Ok(Ok(rows)) => Ok(rows),
            Ok(Err(e)) => {
                if connect::is_read_only(&e) {
                    self.drop_read_only(client);
                }
                Err(classify(op, e))
            }
            Err(_) => {
                self.abandon(op, client);
                Err(timed_out(op, timeout))
            }
        }
    }

    /// Gives up on `client`, whose statement did not answer in time. Handed
    /// back to the pool, its connection would serve the next call with that
    /// statement still running ahead of it in the server (tokio-postgres
    /// pipelines: the next statement waits behind it), so that one name
    /// blocked by another session's lock would fail calls on every name and
    /// let heartbeated leases expire. Instead it is taken out of the pool
    /// and closed, and a cancel request (a connection of its own, bounded by
    /// the store timeout) stops the statement in the server: closing alone
    /// would not, as a backend waiting on a lock does not read its socket.
    /// The server's own statement_timeout, below the store timeout, stops
    /// it in any case, should the cancel not get through.
    fn abandon(&self, op: &str, client: deadpool_postgres::Object) {
        let cancel = client.cancel_token();
        drop(deadpool_postgres::Object::take(client));
        let (tls, timeout) = (self.inner.tls.clone(), self.inner.timeout);
        let op = op.to_owned();
        tokio::spawn(async move {
            match tokio::time::timeout(timeout, cancel.cancel_query(tls)).await {
                Ok(Ok(())) => {
                    tracing::debug!(op, "PostgreSQL statement past the store timeout cancelled");
                }
                Ok(Err(e)) => tracing::debug!(op, error = %e, "PostgreSQL cancel request failed"),
                Err(_) => tracing::debug!(op, "PostgreSQL cancel request timed out"),
            }
        });
    }

    /// Drops `client`, whose server takes no writes now, and every idle
    /// connection with it: at a failover that leaves the old primary up
    /// but read-only, they all still reach it (alive, so the pool's
    /// recycling keeps them) and would fail every call they serve. New
    /// ones go where the URL says: with target_session_attrs=read-write,
    /// to a server that takes writes (the promoted standby, once it is).
    /// A connection in use now is dropped when it fails so too.
    fn drop_read_only(&self, client: deadpool_postgres::Object) {
        drop(deadpool_postgres::Object::take(client));
        let dropped = self.inner.pool.retain(|_, _| false).removed.len();
        tracing::warn!(
            dropped = dropped + 1,
            "PostgreSQL server takes no writes (a standby, or a failed-over primary); \
             reconnecting"
        );
    }

    /// [`PostgresStore::query`] for a statement that answers one row.
    async fn query_one(
        &self,
        op: &'static str,
        sql: &str,
        params: &[&(dyn tokio_postgres::types::ToSql + Sync)],
    ) -> Result<Row> {
        self.ready().await?;
        let deadline = Instant::now() + self.inner.timeout;
        self.query_one_by(op, sql, params, deadline).await
    }

    /// [`PostgresStore::query_by`] for a statement that answers one row.
    async fn query_one_by(
        &self,
        op: &'static str,
        sql: &str,
        params: &[&(dyn tokio_postgres::types::ToSql + Sync)],
        deadline: Instant,
    ) -> Result<Row> {
        self.query_by(op, sql, params, deadline)
            .await?
            .pop()
            .ok_or_else(|| Error::Internal(format!("PostgreSQL {op}: no row")))
    }

    /// Reads the database's clock for grants' not-after
    /// ([`deadline::StoreClock`]).
    async fn read_clock(&self) -> Result<()> {
        let row = self
            .query_one(
                "clock",
                "SELECT (extract(epoch FROM clock_timestamp()) * 1000000)::bigint AS now_us",
                &[],
            )
            .await?;
        let received = Instant::now();
        let now_us: i64 = row
            .try_get("now_us")
            .map_err(|e| Error::Internal(format!("PostgreSQL clock: {e}")))?;
        self.inner.clock.record(now_us, received);
        Ok(())
    }

    /// Runs `acquire()` or `semaphore_acquire()`, which differ in their
    /// sixth parameter (the lock-delay or the limit).
    async fn acquire(
        &self,
        sql: &str,
        spec: &GrantSpec,
        floor: u64,
        sixth: &(dyn tokio_postgres::types::ToSql + Sync),
    ) -> Result<Acquired> {
        self.ready().await?;
        let deadline = Instant::now() + self.inner.timeout;
        let not_after = self.inner.clock.not_after_ms(deadline);
        let floor = int(floor);
        let ttl = int(spec.ttl_ms);
        let life = int(millis(QUEUE_LIFETIME));
        let params: [&(dyn tokio_postgres::types::ToSql + Sync); 9] = [
            &spec.name,
            &spec.token,
            &ttl,
            &spec.holder,
            &floor,
            sixth,
            &spec.queued,
            &life,
            &not_after,
        ];
        let row = self.query_one_by("acquire", sql, &params, deadline).await?;
        let fence = uint(&row, "fence")?;
        let expired: Option<i32> = row
            .try_get("expired")
            .map_err(|e| Error::Internal(format!("PostgreSQL reply column expired: {e}")))?;
        let expired = expired.map_or(0, |n| u32::try_from(n).unwrap_or(0));
        let by = match code(&row)? {
            GRANT_GRANTED => return Ok(Acquired::Granted { fence, expired }),
            GRANT_TOO_LATE => return Err(connect::too_late(self.inner.timeout)),
            GRANT_HELD => BlockedBy::Holder,
            GRANT_LOCK_DELAY => BlockedBy::LockDelay,
            GRANT_QUEUE => BlockedBy::Queue,
            other => return Err(Error::Internal(format!("acquire reply code {other}"))),
        };
        Ok(Acquired::Blocked(Blocked {
            by,
            fence,
            remaining_ms: uint(&row, "remaining_ms")?,
            holder: text(&row, "holder")?,
            position: uint(&row, "pos")?,
            queued: uint(&row, "queued")?,
            expired,
        }))
    }

    async fn renew_one(
        &self,
        op: &'static str,
        name: &str,
        token: &str,
        ttl: i64,
    ) -> Result<Checked<Renewed>> {
        let row = self
            .query_one(op, &self.inner.statements.renew, &[&name, &token, &ttl])
            .await?;
        self.renewed(&row)
    }

    /// A renewal row (code, ttl_ms, fence) as the store's outcome.
    fn renewed(&self, row: &Row) -> Result<Checked<Renewed>> {
        let code = code(row)?;
        let fence = uint(row, "fence")?;
        if code == LEASE_DONE {
            return Ok(Checked::Done(Renewed {
                ttl_ms: uint(row, "ttl_ms")?,
                fence,
            }));
        }
        ended(code, fence).ok_or_else(|| Error::Internal(format!("renew reply code {code}")))
    }

    /// Deletes rows whose time is up, as many sweeps as it takes (each
    /// bounded): what Redis key expiry does for the Redis store.
    async fn sweep_once(&self) -> Result<()> {
        for _ in 0..20 {
            let row = self
                .query_one("sweep", &self.inner.statements.sweep, &[&SWEEP_BATCH])
                .await?;
            let gone: i64 = row
                .try_get(0)
                .map_err(|e| Error::Internal(format!("PostgreSQL sweep: {e}")))?;
            if gone < i64::from(SWEEP_BATCH) {
                break;
            }
        }
        Ok(())
    }
}

impl Backend for PostgresStore {
    /// A grant, refused by the database past the broker's deadline for the
    /// call (its `not_after`, see `deadline`): a grant can never outlive
    /// the broker's knowledge of it, and the orphan cleanup's release, sent
    /// after that deadline, finds every grant the attempt ever makes.
    async fn acquire_lock(&self, spec: &GrantSpec, floor: u64) -> Result<Acquired> {
        let delay = int(spec.lock_delay_ms);
        let sql = &self.inner.statements.acquire;
        self.acquire(sql, spec, floor, &delay).await
    }

    /// As [`Backend::acquire_lock`], with `semaphore_acquire()`.
    async fn acquire_permit(&self, spec: &GrantSpec, floor: u64) -> Result<Acquired> {
        let limit = i32::try_from(spec.limit).unwrap_or(i32::MAX);
        let sql = &self.inner.statements.semaphore_acquire;
        self.acquire(sql, spec, floor, &limit).await
    }

    async fn renew(
        &self,
        name: &str,
        token: &str,
        ttl_ms: Option<u64>,
    ) -> Result<Checked<Renewed>> {
        self.renew_one("renew", name, token, ttl_ms.map_or(TTL_KEEP, ttl_arg))
            .await
    }

    /// Renews every item: one statement per [`RENEW_BATCH`] leases, the
    /// statements sent at once.
    async fn renew_many(&self, items: &[RenewItem]) -> Result<Vec<Checked<Renewed>>> {
        let batches = items.chunks(RENEW_BATCH).map(|batch| async move {
            let names: Vec<&str> = batch.iter().map(|i| i.name.as_str()).collect();
            let tokens: Vec<&str> = batch.iter().map(|i| i.token.as_str()).collect();
            let ttls: Vec<i64> = batch
                .iter()
                .map(|i| i.ttl_ms.map_or(TTL_KEEP, ttl_arg))
                .collect();
            let rows = self
                .query(
                    "renew_many",
                    &self.inner.statements.renew_many,
                    &[&names, &tokens, &ttls],
                )
                .await?;
            one_answer_each(rows.len(), batch.len(), "outcomes", "renewals")?;
            rows.iter()
                .map(|row| self.renewed(row))
                .collect::<Result<Vec<_>>>()
        });
        let mut outcomes = Vec::with_capacity(items.len());
        for batch in futures_util::future::join_all(batches).await {
            outcomes.extend(batch?);
        }
        Ok(outcomes)
    }

    /// What became of `token`'s lease, without extending it (renew with a
    /// TTL of `TTL_LOOK`).
    async fn check(&self, name: &str, token: &str) -> Result<Checked<Renewed>> {
        self.renew_one("check", name, token, TTL_LOOK).await
    }

    async fn release(&self, name: &str, token: &str) -> Result<Checked<()>> {
        let row = self
            .query_one("release", &self.inner.statements.release, &[&name, &token])
            .await?;
        let fence = uint(&row, "fence")?;
        Ok(match code(&row)? {
            LEASE_DONE => Checked::Done(()),
            LEASE_RELEASED_ALREADY => Checked::Released,
            other => ended(other, fence)
                .ok_or_else(|| Error::Internal(format!("release reply code {other}")))?,
        })
    }

    async fn revoke(&self, name: &str) -> Result<Revocation> {
        let row = self
            .query_one("revoke", &self.inner.statements.revoke, &[&name])
            .await?;
        let fence = uint(&row, "fence")?;
        Ok(match code(&row)? {
            REVOKE_DONE => Revocation::Revoked { fence },
            REVOKE_ALREADY => Revocation::Already { fence },
            REVOKE_NOTHING => Revocation::NotHeld,
            other => return Err(Error::Internal(format!("revoke reply code {other}"))),
        })
    }

    /// One statement: `list()` (schema.sql) reads at most `budget` + 1
    /// names from each table that can put something on a name, in byte
    /// order, off its byte-order index (leases by one range scan, permits
    /// and line by a skip scan, one index descent per name), and describes
    /// the page's names; here the idle ones are left out. `resume` is a
    /// name of an earlier page: text without a NUL byte (PostgreSQL's text
    /// holds none; one would fail the statement, not the token).
    async fn list(
        &self,
        prefix: &str,
        resume: Option<&str>,
        budget: usize,
    ) -> Result<(Listing, u64)> {
        if resume.is_some_and(|r| r.contains('\0')) {
            return Err(super::bad_token());
        }
        if prefix.contains('\0') {
            // No stored name holds a NUL byte, so none starts with it.
            return Ok((Listing::default(), 0));
        }
        // The lease layer asks for at most MAX_PAGE; the function reads one
        // row more than this.
        let budget = i32::try_from(budget)
            .unwrap_or(i32::MAX)
            .clamp(1, i32::MAX - 1);
        let rows = self
            .query(
                "list",
                &self.inner.statements.list,
                &[&prefix, &resume, &budget],
            )
            .await?;
        let (mut listing, mut highest, mut more, mut last) = (Listing::default(), 0, false, None);
        for row in &rows {
            let name = text(row, "name")?;
            // The same on every row: whether names may follow the last.
            more = row
                .try_get::<_, Option<bool>>("more")
                .map_err(|e| Error::Internal(format!("PostgreSQL list more: {e}")))?
                .unwrap_or(false);
            let (described, fence) = described(row)?;
            highest = highest.max(fence);
            if !described.is_idle() {
                listing.entries.push(Listed {
                    name: name.clone(),
                    described,
                });
            }
            last = Some(name);
        }
        listing.next = last.filter(|_| more);
        Ok((listing, highest))
    }

    async fn describe(&self, name: &str) -> Result<(Described, u64)> {
        let row = self
            .query_one("describe", &self.inner.statements.describe, &[&name])
            .await?;
        described(&row)
    }

    async fn dequeue(&self, name: &str, token: &str) -> Result<()> {
        self.query("dequeue", &self.inner.statements.dequeue, &[&name, &token])
            .await?;
        Ok(())
    }

    /// Renews the places of `tokens` in one statement: each token's rank (0:
    /// first in line), or `None` when it has no place.
    async fn refresh_places(&self, name: &str, tokens: &[String]) -> Result<Vec<Option<u64>>> {
        if tokens.is_empty() {
            return Ok(Vec::new());
        }
        let life = int(millis(QUEUE_LIFETIME));
        let rows = self
            .query(
                "refresh",
                &self.inner.statements.refresh,
                &[&name, &life, &tokens],
            )
            .await?;
        rows.iter()
            .map(|row| {
                let rank: i64 = row
                    .try_get("rank")
                    .map_err(|e| Error::Internal(format!("PostgreSQL refresh rank: {e}")))?;
                Ok(u64::try_from(rank).ok())
            })
            .collect()
    }

    fn watchers(&self) -> &Watchers {
        &self.inner.watchers
    }

    /// Starts watching `name` for `event` ([`super::Store::watch`]). An
    /// observer (`waiter` None) tells the database the name is watched
    /// first (committed before the watch is confirmed, so every later grant
    /// or release of it notifies), unless an observer of this replica has it
    /// already: that one said so, and its row outlives it by
    /// [`OBSERVED_LIFETIME`] less at most [`OBSERVED_REFRESH`]. A waiter
    /// says nothing: its place in line (taken by the attempt before its
    /// watch) is what makes a release, a revoke or the first's leaving
    /// notify, and a grant need not then (a notifying commit is serialised
    /// with every other: a contended lock's handoffs would pay it twice).
    async fn watch(&self, name: &str, event: Event, waiter: Option<&str>) -> Result<super::Watch> {
        let channel = self.channel(name, event);
        if waiter.is_none() && !self.inner.watchers.has_observer(&channel) {
            self.observe(&[name]).await?;
        }
        self.inner.watchers.watch(&channel, waiter).await
    }

    /// The watch key of `event` on `name`.
    fn channel(&self, name: &str, event: Event) -> String {
        listen::channel(name, event)
    }

    /// Checks that PostgreSQL answers (and the schema is ready) and takes
    /// writes, and reads its clock, the one that decides when leases expire,
    /// and the settings that may lose leases ([`safety`]), all in one
    /// statement on one of the pooled sessions the calls use (so that a
    /// per-session setting reads as the calls have it).
    ///
    /// A server that takes no writes (in recovery: a standby; or
    /// `transaction_read_only`: a primary set read-only, as a failover may
    /// leave the old one) fails the ping, so that health says NOT_SERVING
    /// while every grant would fail; and the idle pooled sessions are
    /// dropped, as a failed call drops them: new ones follow the URL (with
    /// `target_session_attrs=read-write`, to a server that takes writes),
    /// and a broker that no one calls, being NOT_SERVING, still finds the
    /// promoted standby.
    async fn ping(&self) -> Result<Ping> {
        self.ready().await?;
        let sent = std::time::Instant::now();
        let row = self
            .query_one(
                "ping",
                "SELECT (extract(epoch FROM clock_timestamp()) * 1000000)::bigint AS now_us, \
                 pg_is_in_recovery() AS recovery, \
                 current_setting('transaction_read_only') AS read_only, \
                 current_setting('synchronous_commit') AS synchronous_commit, \
                 current_setting('fsync') AS fsync",
                &[],
            )
            .await?;
        let received = std::time::Instant::now();
        let recovery: bool = row
            .try_get("recovery")
            .map_err(|e| Error::Internal(format!("PostgreSQL ping recovery: {e}")))?;
        let read_only = text(&row, "read_only")? == "on";
        if recovery || read_only {
            let dropped = self.inner.pool.retain(|_, _| false).removed.len();
            let why = if recovery {
                "it is a standby (pg_is_in_recovery())"
            } else {
                "it is set read-only (transaction_read_only is on: default_transaction_read_only)"
            };
            tracing::debug!(dropped, "PostgreSQL ping: the server takes no writes");
            return Err(Error::Unavailable(format!(
                "PostgreSQL takes no writes there: {why}; list the primary in --store, or every \
                 server with ?target_session_attrs=read-write to follow a failover"
            )));
        }
        Ok(Ping {
            clock: Some(ClockReading {
                store_unix_us: uint(&row, "now_us")?,
                sent,
                received,
            }),
            settings: super::safety::postgres_settings(
                &text(&row, "synchronous_commit")?,
                &text(&row, "fsync")?,
            ),
        })
    }
}

/// Sweeps every [`SWEEP_EVERY`] while the store lives. Every broker replica
/// sweeps; they skip each other's rows (and those of names in use) by the
/// names' advisory locks.
///
/// It also renews, every [`OBSERVED_REFRESH`], the rows of the names
/// watched here, and reads the database's clock each time (grants'
/// not-after, `deadline`).
async fn sweep(store: std::sync::Weak<Inner>) {
    let mut tick = tokio::time::interval(SWEEP_EVERY);
    let mut observed_at = Instant::now();
    loop {
        tick.tick().await;
        let Some(inner) = store.upgrade() else { return };
        let store = PostgresStore { inner };
        if observed_at.elapsed() >= OBSERVED_REFRESH {
            match store.observe_watched().await {
                Ok(()) => observed_at = Instant::now(),
                Err(e) => tracing::debug!(error = %e, "PostgreSQL watched names not renewed"),
            }
        }
        if let Err(e) = store.read_clock().await {
            tracing::debug!(error = %e, "PostgreSQL clock not read");
        }
        if let Err(e) = store.sweep_once().await {
            tracing::debug!(error = %e, "PostgreSQL sweep failed");
        }
    }
}
