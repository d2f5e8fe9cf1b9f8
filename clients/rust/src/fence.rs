//! Fence guards for the data layer: the storage refuses a write made with
//! a fence lower than one it has already seen.
//!
//! A lease alone cannot stop a holder that was paused (a GC pause, a
//! SIGSTOP, a VM migration) past its TTL: when it wakes up it still
//! believes it holds the lock, and its next write lands after its
//! successor's. Every grant carries a fence greater than every earlier one
//! of the same name; a store that keeps the highest fence it has seen next
//! to the data, and refuses lower ones *in the same atomic step as the
//! write*, makes the late write harmless. This module is that step for the
//! two kinds of store most applications write to:
//!
//! - **SQL** (PostgreSQL, and any SQL store through the same statements): a
//!   `fence` column ([`migration`]), written only where `fence <= $fence`,
//!   in one statement. [`GuardedSql`] builds the statement text for any
//!   driver (sqlx, diesel, ...); with the `postgres` feature,
//!   `guarded_update` and `guarded_upsert` run them on tokio-postgres.
//! - **Object stores** (S3, GCS, anything with conditional writes): the
//!   object's fence in its metadata, and a conditional PUT keyed by its
//!   ETag ([`guarded_put`] over the [`ObjectStore`] adapter, which any SDK
//!   can implement).
//!
//! For a side effect that stores nothing (sending a message, calling an
//! API), ask the broker right before it: [`Client::check_fence`](crate::Client::check_fence).
//! docs/fencing.md walks through all three.
//!
//! Equal fences are allowed (`<=`): the holder of one lease writes many
//! times with the same fence, and a successor always has a strictly higher
//! one.

use std::{error::Error as StdError, future::Future};

/// The name of the column (SQL) and metadata key (object stores) that holds
/// the fence of the last write.
pub const FENCE_COLUMN: &str = "fence";

/// The migration that gives a table its fence column, with `<table>` to
/// replace by the (quoted) table name; [`migration`] does it. Existing
/// rows get fence 0, which any lease's fence outranks.
pub const MIGRATION_TEMPLATE: &str =
    "ALTER TABLE <table> ADD COLUMN IF NOT EXISTS fence bigint NOT NULL DEFAULT 0;";

/// [`MIGRATION_TEMPLATE`] for `table` (quoted as one identifier: see
/// [`quote_ident`]; for a table in a schema use [`GuardedSql::migration`]).
pub fn migration(table: &str) -> String {
    MIGRATION_TEMPLATE.replace("<table>", &quote_ident(table))
}

/// `name` as a quoted SQL identifier: in double quotes, each inner double
/// quote doubled. Whatever the name holds (spaces, quotes, semicolons,
/// capitals), it stays one identifier and is never read as SQL. Quoted
/// identifiers are case-sensitive: a table created as `Accounts` without
/// quotes is `accounts`.
pub fn quote_ident(name: &str) -> String {
    format!("\"{}\"", name.replace('"', "\"\""))
}

/// The statements of a guarded write to one table, for any SQL driver.
///
/// Parameters, in every statement: `$1` the fence (a `bigint`: pass the
/// lease's fence as an `i64`, see [`fence_param`]), `$2` the key, `$3`...
/// the columns' new values in the order they were added with
/// [`GuardedSql::column`]. Identifiers are quoted ([`quote_ident`]); values
/// are only ever parameters.
///
/// ```
/// use leasehold_client::fence::GuardedSql;
///
/// let sql = GuardedSql::new("accounts", "id").column("balance");
/// assert_eq!(
///     sql.update(),
///     r#"UPDATE "accounts" SET "balance" = $3, "fence" = $1 WHERE "id" = $2 AND "fence" <= $1"#
/// );
/// ```
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct GuardedSql {
    /// Quoted, and qualified by its schema if one was given.
    table: String,
    /// Quoted.
    key: String,
    /// Quoted, in parameter order ($3...).
    columns: Vec<String>,
}

impl GuardedSql {
    /// The guarded writes to `table`, whose rows are found by `key_column`.
    pub fn new(table: &str, key_column: &str) -> Self {
        GuardedSql {
            table: quote_ident(table),
            key: quote_ident(key_column),
            columns: Vec::new(),
        }
    }

    /// The table is in `schema` (`"schema"."table"`).
    #[must_use]
    pub fn in_schema(mut self, schema: &str) -> Self {
        self.table = format!("{}.{}", quote_ident(schema), self.table);
        self
    }

    /// One more column to write; its value is the next parameter.
    #[must_use]
    pub fn column(mut self, name: &str) -> Self {
        self.columns.push(quote_ident(name));
        self
    }

    /// The migration adding the fence column to this table.
    pub fn migration(&self) -> String {
        MIGRATION_TEMPLATE.replace("<table>", &self.table)
    }

    /// `UPDATE t SET c = $3, ..., fence = $1 WHERE key = $2 AND fence <= $1`.
    ///
    /// Zero rows changed means the write was refused: the row holds a
    /// higher fence, *or* no row has that key (this statement cannot tell
    /// which: [`GuardedSql::checked_update`] can). Pass the row count to
    /// [`rows_outcome`].
    pub fn update(&self) -> String {
        format!(
            "UPDATE {} SET {} WHERE {} = $2 AND {fence} <= $1",
            self.table,
            self.assignments(),
            self.key,
            fence = quote_ident(FENCE_COLUMN),
        )
    }

    /// [`GuardedSql::update`] that also tells a missing row from a stale
    /// fence, in the same single statement: it returns one row of two
    /// columns, `written` (bigint: rows updated) and `found` (boolean: a
    /// row with that key exists). Pass them to [`checked_outcome`].
    ///
    /// `found` is read in the statement's snapshot, the same one the
    /// UPDATE starts from, so the two agree: a row inserted by a
    /// transaction that commits meanwhile is seen by neither (no row), and
    /// a row whose fence a concurrent transaction raised is refused by the
    /// UPDATE (PostgreSQL re-checks the WHERE on the newest version) and
    /// found (stale). The one approximation: a row deleted by a transaction
    /// that committed while this statement waited for it is reported stale
    /// rather than missing; the write was refused either way.
    pub fn checked_update(&self) -> String {
        format!(
            "WITH written AS ({} RETURNING 1) \
             SELECT (SELECT count(*) FROM written) AS written, \
             EXISTS (SELECT 1 FROM {} WHERE {} = $2) AS found",
            self.update(),
            self.table,
            self.key,
        )
    }

    /// `INSERT ... ON CONFLICT (key) DO UPDATE ... WHERE t.fence <=
    /// EXCLUDED.fence`: creates the row, or updates it unless it holds a
    /// higher fence. Zero rows changed means stale ([`rows_outcome`]).
    /// The key column needs a unique index or constraint (a primary key
    /// is one).
    pub fn upsert(&self) -> String {
        let fence = quote_ident(FENCE_COLUMN);
        let mut names = vec![self.key.clone()];
        names.extend(self.columns.iter().cloned());
        names.push(fence.clone());
        let mut values = vec!["$2".to_owned()];
        values.extend((0..self.columns.len()).map(|i| format!("${}", i + 3)));
        values.push("$1".to_owned());
        let mut updates: Vec<String> = self
            .columns
            .iter()
            .map(|c| format!("{c} = EXCLUDED.{c}"))
            .collect();
        updates.push(format!("{fence} = EXCLUDED.{fence}"));
        format!(
            "INSERT INTO {table} AS t ({names}) VALUES ({values}) \
             ON CONFLICT ({key}) DO UPDATE SET {updates} \
             WHERE t.{fence} <= EXCLUDED.{fence}",
            table = self.table,
            names = names.join(", "),
            values = values.join(", "),
            key = self.key,
            updates = updates.join(", "),
        )
    }

    /// `c = $3, ..., fence = $1`.
    fn assignments(&self) -> String {
        let mut set: Vec<String> = self
            .columns
            .iter()
            .enumerate()
            .map(|(i, c)| format!("{c} = ${}", i + 3))
            .collect();
        set.push(format!("{} = $1", quote_ident(FENCE_COLUMN)));
        set.join(", ")
    }
}

/// The fence as the `bigint` parameter `$1`: PostgreSQL has no unsigned
/// 64-bit type. Fences are about 1.8 × 10^15 today, far below `i64::MAX`
/// (about 9.2 × 10^18); one above it is refused rather than wrapped
/// negative, which would make every later write look stale.
pub fn fence_param(fence: u64) -> Result<i64, FenceError> {
    i64::try_from(fence).map_err(|_| FenceError::FenceTooLarge { fence })
}

/// What `rows` changed by [`GuardedSql::update`] or
/// [`GuardedSql::upsert`] mean: none is [`FenceError::Stale`].
pub fn rows_outcome(rows: u64, fence: u64) -> Result<(), FenceError> {
    if rows == 0 {
        Err(FenceError::Stale { fence })
    } else {
        Ok(())
    }
}

/// What the row of [`GuardedSql::checked_update`] means: written, no row
/// with that key ([`FenceError::NoRow`]), or refused
/// ([`FenceError::Stale`]).
pub fn checked_outcome(written: i64, found: bool, fence: u64) -> Result<(), FenceError> {
    match (written, found) {
        (0, false) => Err(FenceError::NoRow { fence }),
        (0, true) => Err(FenceError::Stale { fence }),
        _ => Ok(()),
    }
}

/// Why a guarded write wrote nothing.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum FenceError {
    /// The storage holds a write made with a higher fence: a later lease
    /// has written here, so this writer's lease is over. Stop, and do not
    /// retry with the same fence.
    #[error("write refused: fence {fence} is stale (a later lease has written here)")]
    Stale {
        /// The fence this write carried.
        fence: u64,
    },
    /// No row has the key: nothing was written (a guarded update creates
    /// no row; a guarded upsert does).
    #[error("nothing written with fence {fence}: no row has that key (an upsert would create it)")]
    NoRow {
        /// The fence this write carried.
        fence: u64,
    },
    /// Every conditional write of [`guarded_put`] found the object changed
    /// since it was read, by writers whose fences were not higher: nothing
    /// was written. Worth retrying.
    #[error(
        "nothing written with fence {fence}: the object changed under each of {tries} conditional writes"
    )]
    Contended {
        /// The fence this write carried.
        fence: u64,
        /// The conditional writes tried.
        tries: u32,
    },
    /// The fence does not fit PostgreSQL's `bigint` (see [`fence_param`]).
    #[error("fence {fence} does not fit a bigint column")]
    FenceTooLarge {
        /// The fence given.
        fence: u64,
    },
    /// The database failed the statement (connection, missing table or
    /// column, a type that does not match the column).
    #[cfg(feature = "postgres")]
    #[error("the guarded write failed: {0}")]
    Database(#[from] tokio_postgres::Error),
    /// The object store's adapter failed a read or a write.
    #[error("the object store failed: {0}")]
    Store(Box<dyn StdError + Send + Sync>),
}

impl FenceError {
    /// Whether the write was refused because a later lease has written:
    /// the one answer that means "stop, your lease is over".
    pub fn is_stale(&self) -> bool {
        matches!(self, FenceError::Stale { .. })
    }
}

#[cfg(feature = "postgres")]
pub use self::postgres::{guarded_update, guarded_upsert, Write};

/// The guarded writes run on tokio-postgres (feature `postgres`).
#[cfg(feature = "postgres")]
mod postgres {
    use tokio_postgres::{types::ToSql, GenericClient};

    use super::{checked_outcome, fence_param, rows_outcome, FenceError, GuardedSql};

    /// One guarded write: the table, the row's key and the new values.
    ///
    /// ```no_run
    /// # async fn f(db: &tokio_postgres::Client, fence: u64) -> Result<(), leasehold_client::fence::FenceError> {
    /// use leasehold_client::fence::{guarded_update, Write};
    ///
    /// let (id, balance) = (42_i64, 100_i64);
    /// let write = Write::new("accounts", "id", &id).set("balance", &balance);
    /// guarded_update(db, &write, fence).await?;
    /// # Ok(()) }
    /// ```
    pub struct Write<'a> {
        sql: GuardedSql,
        key: &'a (dyn ToSql + Sync),
        values: Vec<&'a (dyn ToSql + Sync)>,
    }

    impl<'a> Write<'a> {
        /// A write to the row of `table` whose `key_column` is `key`.
        pub fn new(table: &str, key_column: &str, key: &'a (dyn ToSql + Sync)) -> Self {
            Write {
                sql: GuardedSql::new(table, key_column),
                key,
                values: Vec::new(),
            }
        }

        /// The table is in `schema`.
        #[must_use]
        pub fn in_schema(mut self, schema: &str) -> Self {
            self.sql = self.sql.in_schema(schema);
            self
        }

        /// Sets `column` to `value` (its type must match the column's, as
        /// for any tokio-postgres parameter).
        #[must_use]
        pub fn set(mut self, column: &str, value: &'a (dyn ToSql + Sync)) -> Self {
            self.sql = self.sql.column(column);
            self.values.push(value);
            self
        }

        /// The statements this write runs.
        pub fn sql(&self) -> &GuardedSql {
            &self.sql
        }
    }

    /// Updates the row unless it holds a higher fence, in one statement
    /// ([`GuardedSql::checked_update`]): `Err(Stale)` if a later lease has
    /// written it, `Err(NoRow)` if no row has the key. Runs on a
    /// connection or inside a transaction alike.
    pub async fn guarded_update<C>(
        client: &C,
        write: &Write<'_>,
        fence: u64,
    ) -> Result<(), FenceError>
    where
        C: GenericClient + Sync + ?Sized,
    {
        let fence_param = fence_param(fence)?;
        let params = params(&fence_param, write);
        let row = client
            .query_one(&write.sql.checked_update(), &params)
            .await?;
        checked_outcome(row.try_get(0)?, row.try_get(1)?, fence)
    }

    /// Creates the row, or updates it unless it holds a higher fence, in
    /// one statement ([`GuardedSql::upsert`]): `Err(Stale)` if a later
    /// lease has written it. The key column needs a unique constraint.
    pub async fn guarded_upsert<C>(
        client: &C,
        write: &Write<'_>,
        fence: u64,
    ) -> Result<(), FenceError>
    where
        C: GenericClient + Sync + ?Sized,
    {
        let fence_param = fence_param(fence)?;
        let params = params(&fence_param, write);
        let rows = client.execute(&write.sql.upsert(), &params).await?;
        rows_outcome(rows, fence)
    }

    /// `$1` the fence, `$2` the key, `$3`... the values.
    fn params<'a>(fence: &'a i64, write: &'a Write<'_>) -> Vec<&'a (dyn ToSql + Sync)> {
        let mut params: Vec<&(dyn ToSql + Sync)> = Vec::with_capacity(2 + write.values.len());
        params.push(fence);
        params.push(write.key);
        params.extend(write.values.iter().copied());
        params
    }
}

/// How many conditional writes [`guarded_put`] tries before it gives up
/// with [`FenceError::Contended`].
pub const PUT_TRIES: u32 = 5;

/// What a HEAD of an object says: its ETag (or generation, on GCS) and the
/// fence in its metadata.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ObjectHead {
    /// The version to make the next write conditional on.
    pub etag: String,
    /// The `fence` metadata of the object; `None` for an object written
    /// without one (it counts as 0: any lease may overwrite it once).
    pub fence: Option<u64>,
}

/// The condition a write is made on.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Precondition {
    /// Write only if the object's ETag is still this one (S3 `If-Match`,
    /// GCS `x-goog-if-generation-match: <generation>`).
    IfMatch(String),
    /// Write only if there is no object yet (S3 `If-None-Match: *`, GCS
    /// `x-goog-if-generation-match: 0`).
    IfNoneMatch,
}

/// What a conditional write did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PutOutcome {
    /// The object was written, with the fence in its metadata.
    Written,
    /// The precondition did not hold: someone wrote (or deleted) the
    /// object since it was read. On S3: 412 Precondition Failed, 409
    /// ConditionalRequestConflict, and 404 NoSuchKey for an `If-Match`
    /// on an object deleted meanwhile; on GCS: 412.
    PreconditionFailed,
}

/// The two calls [`guarded_put`] needs from an object store: implement it
/// over your SDK (docs/fencing.md shows aws-sdk-s3). Every write stores
/// the fence in the object's metadata under [`FENCE_COLUMN`]
/// (`x-amz-meta-fence` on S3, `x-goog-meta-fence` on GCS).
pub trait ObjectStore {
    /// The SDK's error.
    type Error: StdError + Send + Sync + 'static;

    /// The object's ETag and fence; `None` if there is no such object.
    fn head(
        &self,
        key: &str,
    ) -> impl Future<Output = Result<Option<ObjectHead>, Self::Error>> + Send;

    /// Writes `body` under `key` with `fence` in its metadata, only if
    /// `precondition` holds; a failed precondition is
    /// [`PutOutcome::PreconditionFailed`], not an error.
    fn put(
        &self,
        key: &str,
        body: &[u8],
        precondition: &Precondition,
        fence: u64,
    ) -> impl Future<Output = Result<PutOutcome, Self::Error>> + Send;
}

/// Writes `body` under `key` unless the object holds a higher fence.
///
/// Reads the object's fence and ETag; refuses ([`FenceError::Stale`]) if
/// the stored fence is higher; else writes on the condition that the
/// object is still the one read (`If-Match: <etag>`, or `If-None-Match: *`
/// when there was none), so that no write can land between the check and
/// the write. A failed condition means someone wrote meanwhile: read
/// again and decide again, at most [`PUT_TRIES`] times
/// ([`FenceError::Contended`] after that).
pub async fn guarded_put<S>(store: &S, key: &str, body: &[u8], fence: u64) -> Result<(), FenceError>
where
    S: ObjectStore + Sync + ?Sized,
{
    let failed = |e: S::Error| FenceError::Store(Box::new(e));
    for _ in 0..PUT_TRIES {
        let precondition = match store.head(key).await.map_err(failed)? {
            Some(head) if head.fence.unwrap_or(0) > fence => {
                return Err(FenceError::Stale { fence })
            }
            Some(head) => Precondition::IfMatch(head.etag),
            None => Precondition::IfNoneMatch,
        };
        match store
            .put(key, body, &precondition, fence)
            .await
            .map_err(failed)?
        {
            PutOutcome::Written => return Ok(()),
            PutOutcome::PreconditionFailed => {}
        }
    }
    Err(FenceError::Contended {
        fence,
        tries: PUT_TRIES,
    })
}

#[cfg(test)]
mod tests {
    use std::{
        collections::HashMap,
        sync::{
            atomic::{AtomicU64, Ordering},
            Mutex,
        },
    };

    use super::*;

    #[test]
    fn identifiers_are_quoted_whole() {
        assert_eq!(quote_ident("accounts"), r#""accounts""#);
        assert_eq!(quote_ident("Mixed Case"), r#""Mixed Case""#);
        assert_eq!(quote_ident(r#"a"b"#), r#""a""b""#);
        assert_eq!(quote_ident(r#"""#), r#""""""#);
        // An injection attempt stays one identifier: every quote inside is
        // doubled, so the only lone quotes are the outer two.
        let hostile = r#"x"; DROP TABLE accounts; --"#;
        let quoted = quote_ident(hostile);
        assert_eq!(quoted, r#""x""; DROP TABLE accounts; --""#);
        let inner = &quoted[1..quoted.len() - 1];
        assert_eq!(inner.replace("\"\"", ""), inner.replace('"', ""));
    }

    #[test]
    fn the_migration_adds_a_bigint_fence_defaulting_to_zero() {
        assert_eq!(
            migration("accounts"),
            r#"ALTER TABLE "accounts" ADD COLUMN IF NOT EXISTS fence bigint NOT NULL DEFAULT 0;"#
        );
        assert_eq!(
            GuardedSql::new("t", "id").in_schema("app").migration(),
            r#"ALTER TABLE "app"."t" ADD COLUMN IF NOT EXISTS fence bigint NOT NULL DEFAULT 0;"#
        );
    }

    #[test]
    fn the_statements_bind_fence_key_then_columns() {
        let sql = GuardedSql::new("docs", "name")
            .in_schema("app")
            .column("body")
            .column("author");
        assert_eq!(
            sql.update(),
            r#"UPDATE "app"."docs" SET "body" = $3, "author" = $4, "fence" = $1 WHERE "name" = $2 AND "fence" <= $1"#
        );
        assert_eq!(
            sql.checked_update(),
            r#"WITH written AS (UPDATE "app"."docs" SET "body" = $3, "author" = $4, "fence" = $1 WHERE "name" = $2 AND "fence" <= $1 RETURNING 1) SELECT (SELECT count(*) FROM written) AS written, EXISTS (SELECT 1 FROM "app"."docs" WHERE "name" = $2) AS found"#
        );
        assert_eq!(
            sql.upsert(),
            r#"INSERT INTO "app"."docs" AS t ("name", "body", "author", "fence") VALUES ($2, $3, $4, $1) ON CONFLICT ("name") DO UPDATE SET "body" = EXCLUDED."body", "author" = EXCLUDED."author", "fence" = EXCLUDED."fence" WHERE t."fence" <= EXCLUDED."fence""#
        );
    }

    #[test]
    fn a_write_of_no_column_only_moves_the_fence() {
        let sql = GuardedSql::new("t", "id");
        assert_eq!(
            sql.update(),
            r#"UPDATE "t" SET "fence" = $1 WHERE "id" = $2 AND "fence" <= $1"#
        );
        assert_eq!(
            sql.upsert(),
            r#"INSERT INTO "t" AS t ("id", "fence") VALUES ($2, $1) ON CONFLICT ("id") DO UPDATE SET "fence" = EXCLUDED."fence" WHERE t."fence" <= EXCLUDED."fence""#
        );
    }

    #[test]
    fn outcomes_tell_stale_from_missing() {
        assert!(rows_outcome(1, 7).is_ok());
        assert!(matches!(
            rows_outcome(0, 7),
            Err(FenceError::Stale { fence: 7 })
        ));
        assert!(checked_outcome(1, true, 7).is_ok());
        assert!(matches!(
            checked_outcome(0, true, 7),
            Err(FenceError::Stale { fence: 7 })
        ));
        assert!(matches!(
            checked_outcome(0, false, 7),
            Err(FenceError::NoRow { fence: 7 })
        ));
        assert!(FenceError::Stale { fence: 1 }.is_stale());
        assert!(!FenceError::NoRow { fence: 1 }.is_stale());
    }

    #[test]
    fn a_fence_beyond_bigint_is_refused_not_wrapped() {
        assert_eq!(
            fence_param(1_796_472_242_201_136).unwrap(),
            1_796_472_242_201_136
        );
        assert!(matches!(
            fence_param(u64::MAX),
            Err(FenceError::FenceTooLarge { fence: u64::MAX })
        ));
    }

    /// A writer that reaches the bucket just before a PUT.
    type Racer = Box<dyn FnOnce(&Bucket) + Send>;

    /// One object as S3 keeps it.
    #[derive(Clone, Debug)]
    struct Object {
        etag: String,
        body: Vec<u8>,
        /// `x-amz-meta-fence`, as S3 stores user metadata: a string.
        meta_fence: Option<String>,
    }

    /// A bucket with S3's conditional-write semantics, answering with S3's
    /// status codes: `If-None-Match: *` on an existing key is 412,
    /// `If-Match` on a missing key is 404 (NoSuchKey), on another ETag
    /// 412; a write gives the object a new ETag.
    #[derive(Default)]
    struct Bucket {
        objects: Mutex<HashMap<String, Object>>,
        versions: AtomicU64,
        /// Run just before each of the next PUTs reaches the bucket: a
        /// writer racing in between HEAD and PUT.
        racers: Mutex<Vec<Racer>>,
        puts: AtomicU64,
        /// Fail every HEAD (the SDK's error).
        broken: bool,
    }

    #[derive(Debug, thiserror::Error)]
    #[error("connection reset by the bucket")]
    struct BucketDown;

    impl Bucket {
        /// A PUT as S3 answers it: its HTTP status.
        fn put_status(
            &self,
            key: &str,
            body: &[u8],
            if_match: Option<&str>,
            if_none_match: bool,
            meta_fence: Option<String>,
        ) -> u16 {
            let mut objects = self.objects.lock().unwrap();
            match (objects.get(key), if_match, if_none_match) {
                (Some(_), _, true) => return 412,
                (None, Some(_), _) => return 404,
                (Some(o), Some(etag), _) if o.etag != etag => return 412,
                _ => {}
            }
            let version = self.versions.fetch_add(1, Ordering::Relaxed);
            objects.insert(
                key.to_owned(),
                Object {
                    etag: format!("\"etag-{version}\""),
                    body: body.to_vec(),
                    meta_fence,
                },
            );
            200
        }

        /// An unconditional write by another writer.
        fn overwrite(&self, key: &str, body: &[u8], fence: u64) {
            assert_eq!(
                self.put_status(key, body, None, false, Some(fence.to_string())),
                200
            );
        }

        fn race(&self, racer: impl FnOnce(&Bucket) + Send + 'static) {
            self.racers.lock().unwrap().push(Box::new(racer));
        }

        fn get(&self, key: &str) -> Option<(Vec<u8>, Option<String>)> {
            let objects = self.objects.lock().unwrap();
            objects
                .get(key)
                .map(|o| (o.body.clone(), o.meta_fence.clone()))
        }
    }

    /// The adapter, as a user writes one over an SDK: S3's answers mapped
    /// to the trait's.
    impl ObjectStore for Bucket {
        type Error = BucketDown;

        async fn head(&self, key: &str) -> Result<Option<ObjectHead>, BucketDown> {
            if self.broken {
                return Err(BucketDown);
            }
            let objects = self.objects.lock().unwrap();
            Ok(objects.get(key).map(|o| ObjectHead {
                etag: o.etag.clone(),
                fence: o.meta_fence.as_deref().and_then(|f| f.parse().ok()),
            }))
        }

        async fn put(
            &self,
            key: &str,
            body: &[u8],
            precondition: &Precondition,
            fence: u64,
        ) -> Result<PutOutcome, BucketDown> {
            let racer = {
                let mut racers = self.racers.lock().unwrap();
                (!racers.is_empty()).then(|| racers.remove(0))
            };
            if let Some(racer) = racer {
                racer(self);
            }
            self.puts.fetch_add(1, Ordering::Relaxed);
            let (if_match, if_none_match) = match precondition {
                Precondition::IfMatch(etag) => (Some(etag.as_str()), false),
                Precondition::IfNoneMatch => (None, true),
            };
            match self.put_status(key, body, if_match, if_none_match, Some(fence.to_string())) {
                200 => Ok(PutOutcome::Written),
                404 | 409 | 412 => Ok(PutOutcome::PreconditionFailed),
                status => panic!("unexpected status {status}"),
            }
        }
    }

    fn stored(bucket: &Bucket, key: &str) -> (String, u64) {
        let (body, fence) = bucket.get(key).expect("an object");
        (
            String::from_utf8(body).unwrap(),
            fence.expect("a fence").parse().unwrap(),
        )
    }

    #[tokio::test]
    async fn a_new_object_is_created_with_its_fence() {
        let bucket = Bucket::default();
        guarded_put(&bucket, "k", b"a", 10).await.unwrap();
        assert_eq!(stored(&bucket, "k"), ("a".into(), 10));
    }

    #[tokio::test]
    async fn equal_and_higher_fences_write_a_lower_one_is_stale() {
        let bucket = Bucket::default();
        guarded_put(&bucket, "k", b"a1", 10).await.unwrap();
        guarded_put(&bucket, "k", b"a2", 10).await.unwrap();
        assert_eq!(stored(&bucket, "k"), ("a2".into(), 10));
        guarded_put(&bucket, "k", b"b", 20).await.unwrap();
        let late = guarded_put(&bucket, "k", b"a3", 10).await.unwrap_err();
        assert!(matches!(late, FenceError::Stale { fence: 10 }), "{late}");
        assert_eq!(stored(&bucket, "k"), ("b".into(), 20));
    }

    #[tokio::test]
    async fn an_object_without_a_fence_counts_as_fence_zero() {
        let bucket = Bucket::default();
        assert_eq!(bucket.put_status("k", b"old", None, false, None), 200);
        guarded_put(&bucket, "k", b"new", 1).await.unwrap();
        assert_eq!(stored(&bucket, "k"), ("new".into(), 1));
    }

    /// The race the precondition exists for: the holder read fence 10,
    /// then its successor (fence 20) wrote before its PUT reached the
    /// bucket. Without the ETag condition the late write would land.
    #[tokio::test]
    async fn a_higher_fence_written_between_head_and_put_wins() {
        let bucket = Bucket::default();
        guarded_put(&bucket, "k", b"a1", 10).await.unwrap();
        bucket.race(|b| b.overwrite("k", b"b", 20));
        let late = guarded_put(&bucket, "k", b"a2", 10).await.unwrap_err();
        assert!(matches!(late, FenceError::Stale { fence: 10 }), "{late}");
        assert_eq!(stored(&bucket, "k"), ("b".into(), 20));
        // One conditional PUT refused (412), then the re-read said stale.
        assert_eq!(bucket.puts.load(Ordering::Relaxed), 2);
    }

    #[tokio::test]
    async fn a_lower_fence_written_between_head_and_put_is_overwritten() {
        let bucket = Bucket::default();
        guarded_put(&bucket, "k", b"a", 10).await.unwrap();
        bucket.race(|b| b.overwrite("k", b"older", 5));
        guarded_put(&bucket, "k", b"b", 20).await.unwrap();
        assert_eq!(stored(&bucket, "k"), ("b".into(), 20));
        assert_eq!(bucket.puts.load(Ordering::Relaxed), 3, "one retry");
    }

    #[tokio::test]
    async fn an_object_created_between_head_and_put_is_read_again() {
        let bucket = Bucket::default();
        bucket.race(|b| b.overwrite("k", b"b", 20));
        let late = guarded_put(&bucket, "k", b"a", 10).await.unwrap_err();
        assert!(late.is_stale(), "{late}");
        assert_eq!(stored(&bucket, "k"), ("b".into(), 20));

        let bucket = Bucket::default();
        bucket.race(|b| b.overwrite("k", b"a", 10));
        guarded_put(&bucket, "k", b"b", 20).await.unwrap();
        assert_eq!(stored(&bucket, "k"), ("b".into(), 20));
    }

    #[tokio::test]
    async fn an_object_deleted_between_head_and_put_is_created() {
        let bucket = Bucket::default();
        guarded_put(&bucket, "k", b"a", 10).await.unwrap();
        bucket.race(|b| {
            b.objects.lock().unwrap().remove("k");
        });
        guarded_put(&bucket, "k", b"b", 20).await.unwrap();
        assert_eq!(stored(&bucket, "k"), ("b".into(), 20));
    }

    #[tokio::test]
    async fn endless_contention_gives_up_after_the_bounded_tries() {
        let bucket = Bucket::default();
        guarded_put(&bucket, "k", b"a", 10).await.unwrap();
        for i in 0..PUT_TRIES {
            bucket.race(move |b| b.overwrite("k", format!("c{i}").as_bytes(), 10));
        }
        let err = guarded_put(&bucket, "k", b"b", 20).await.unwrap_err();
        assert!(
            matches!(
                err,
                FenceError::Contended {
                    fence: 20,
                    tries: PUT_TRIES
                }
            ),
            "{err}"
        );
        assert_eq!(stored(&bucket, "k"), (format!("c{}", PUT_TRIES - 1), 10));
    }

    #[tokio::test]
    async fn the_stores_error_is_passed_on() {
        let bucket = Bucket {
            broken: true,
            ..Bucket::default()
        };
        let err = guarded_put(&bucket, "k", b"a", 1).await.unwrap_err();
        assert!(matches!(err, FenceError::Store(_)), "{err}");
        assert_eq!(
            err.to_string(),
            "the object store failed: connection reset by the bucket"
        );
    }
}
