//! Reaching PostgreSQL: the URL, the schema a key prefix names, the pool,
//! the migration, and how driver errors become the broker's.

use std::{
    sync::{Arc, LazyLock},
    time::Duration,
};

use deadpool_postgres::{
    Hook, HookError, Manager, ManagerConfig, Pool, PoolError, RecyclingMethod, Runtime,
};
use tokio_postgres::{config::SslMode, error::SqlState, Client};

use super::{deadline::StoreClock, tls::Tls};
use crate::{
    error::{Error, Result},
    store::{contract::fill, StoreOptions},
};

/// The schema's version this broker's functions are ([`SCHEMA_SQL`]); the
/// version table holds the one the database has.
pub(super) const SCHEMA_VERSION: i32 = 5;

/// The tables and functions as written, `__SCHEMA__` standing for the
/// schema and `__NAME__` for each constant of `store::contract`.
const SCHEMA_FILE: &str = include_str!("schema.sql");

/// [`SCHEMA_FILE`] with the contract's constants filled in; `__SCHEMA__`
/// is left for [`migrate`] to fill (the tests fill the file, so an unknown
/// placeholder fails them, never a running broker).
pub(super) static SCHEMA_SQL: LazyLock<String> =
    LazyLock::new(|| fill(SCHEMA_FILE, &["SCHEMA"]).unwrap_or_else(|e| panic!("schema.sql: {e}")));

/// The advisory lock key that serialises migrations (two brokers starting
/// at once must not both create the same objects): "LEASEHLD" in ASCII.
const MIGRATION_LOCK: i64 = 0x4C45_4153_4548_4C44;

/// Longest schema name: PostgreSQL cuts identifiers (and the NOTIFY
/// channel, named after the schema) at 63 bytes; this leaves room.
const MAX_SCHEMA: usize = 40;

/// The schema that holds every object of a deployment: the counterpart of
/// Redis's key prefix, derived from `--key-prefix` so that one flag keeps
/// deployments apart on either store. Lowercased, every character other
/// than a letter, digit or `_` becomes `_`, and leading and trailing `_`
/// go (`leasehold:` -> `leasehold`); one that would start with a digit or
/// `pg_` (reserved) gets `lh_` in front. Several prefixes can name one
/// schema (`a:` and `a-`): such deployments share their leases.
pub fn schema_for(prefix: &str) -> Result<String> {
    let mapped: String = prefix
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '_' {
                c.to_ascii_lowercase()
            } else {
                '_'
            }
        })
        .collect();
    let trimmed = mapped.trim_matches('_');
    let schema = if trimmed.is_empty() {
        "leasehold".to_owned()
    } else if trimmed.starts_with(|c: char| c.is_ascii_digit()) || trimmed.starts_with("pg_") {
        format!("lh_{trimmed}")
    } else {
        trimmed.to_owned()
    };
    if schema.len() > MAX_SCHEMA {
        return Err(Error::InvalidArgument(format!(
            "--key-prefix '{prefix}' names the PostgreSQL schema '{schema}', longer than \
             {MAX_SCHEMA} characters: use a shorter prefix"
        )));
    }
    Ok(schema)
}

/// Reads a `postgres://` / `postgresql://` URL (libpq's URL form, with its
/// query parameters: `sslmode`, `connect_timeout`, `application_name`...)
/// and the TLS it asks for (see `tls`: `require`, `verify-ca` and
/// `verify-full` all verify the server; `prefer`, the default, is TLS
/// unverified or else plain text, as libpq's; `disable` is plain text).
pub(super) fn parse_url(
    url: &str,
    options: &StoreOptions,
) -> Result<(tokio_postgres::Config, Tls)> {
    // tokio-postgres reads disable, prefer and require only; the verifying
    // modes are require here, which verifies.
    let (base, query) = url.split_once('?').unwrap_or((url, ""));
    let query: Vec<&str> = query
        .split('&')
        .map(|pair| match pair {
            "sslmode=verify-full" | "sslmode=verify-ca" => "sslmode=require",
            other => other,
        })
        .collect();
    let url = if query.iter().all(|p| p.is_empty()) {
        base.to_owned()
    } else {
        format!("{base}?{}", query.join("&"))
    };
    let mut config: tokio_postgres::Config = url.parse().map_err(|e| {
        Error::InvalidArgument(format!(
            "bad PostgreSQL URL '{}': {e}",
            crate::redact::url(&url)
        ))
    })?;
    let tls = match config.get_ssl_mode() {
        SslMode::Require => Tls::verifying(options.tls_ca.as_deref(), options.tls_client.as_ref())?,
        SslMode::Prefer => Tls::unverified(options.tls_client.as_ref())?,
        _ => {
            config.ssl_mode(SslMode::Disable);
            Tls::none()
        }
    };
    if config.get_connect_timeout().is_none() {
        config.connect_timeout(options.timeout);
    }
    if config.get_application_name().is_none() {
        config.application_name("leasehold");
    }
    Ok((config, tls))
}

/// The share of the store timeout a broker session's statement may run in
/// the server (`statement_timeout`), as a fraction: the server gives up on
/// a statement before the broker does, so that its connection comes back
/// free rather than busy, and what a timed-out statement was doing ends in
/// the server too. The rest of the store timeout is for the pool wait and
/// the network.
const STATEMENT_SHARE: (u32, u32) = (3, 4);

/// The share of the store timeout a statement may wait for one lock
/// (`lock_timeout`: a row lock, or a name's advisory lock, held by another
/// session), as a fraction: below [`STATEMENT_SHARE`], so that such a wait
/// fails as what it is (SQLSTATE 55P03, [`classify`] says which lock).
const LOCK_SHARE: (u32, u32) = (1, 2);

/// `statement_timeout` and `lock_timeout` in ms for a store timeout (at
/// least 1 ms each: 0 would mean no limit).
pub(super) fn session_limits(timeout: Duration) -> (u128, u128) {
    let share = |(num, den): (u32, u32)| (timeout * num / den).as_millis().max(1);
    (share(STATEMENT_SHARE), share(LOCK_SHARE))
}

/// The statement every new pooled connection runs first, one round trip:
/// its limits ([`session_limits`]), and `synchronous_commit` raised to `on`
/// when the server's (or the role's, or the database's) default is weaker:
/// `off` acknowledges a commit before its WAL is on disk, so that a crash
/// loses a grant its caller was told of, and the lock is given to another
/// as well; `local` and `remote_write` do not wait for a synchronous
/// standby to have it on disk; `on` and `remote_apply` are kept. And a
/// reading of the database's clock, for [`super::deadline`]. Session
/// settings: a statement of the broker's never runs in another session,
/// nor anyone else's in these.
fn session_setup(timeout: Duration) -> String {
    let (statement_ms, lock_ms) = session_limits(timeout);
    format!(
        "SELECT set_config('statement_timeout', '{statement_ms}ms', false), \
                set_config('lock_timeout', '{lock_ms}ms', false), \
                CASE WHEN current_setting('synchronous_commit') IN ('off', 'local', 'remote_write') \
                     THEN set_config('synchronous_commit', 'on', false) \
                     ELSE current_setting('synchronous_commit') END AS synchronous_commit, \
                (extract(epoch FROM clock_timestamp()) * 1000000)::bigint AS now_us"
    )
}

/// The pool of connections for store calls. Nothing connects here: the
/// broker starts (NOT_SERVING) while PostgreSQL is down, and connects when
/// it is up. Every wait on the pool is bounded by the store timeout. Each
/// store call holds a connection for one statement (a short transaction),
/// so `size` (`--store-connections`) of them serve thousands of calls a
/// second; more only add server processes. Each new connection runs
/// [`session_setup`] before its first use, its clock reading going to
/// `clock`.
pub(super) fn pool(
    config: tokio_postgres::Config,
    tls: Tls,
    size: usize,
    timeout: Duration,
    clock: Arc<StoreClock>,
) -> Result<Pool> {
    let manager = Manager::from_config(
        config,
        tls,
        ManagerConfig {
            // A broken connection is noticed by its failing call (and then
            // dropped by the driver); checking each one before use would
            // cost a round trip per call.
            recycling_method: RecyclingMethod::Fast,
        },
    );
    let setup: Arc<str> = session_setup(timeout).into();
    let hook = Hook::async_fn(move |client, _| {
        let (setup, clock) = (Arc::clone(&setup), Arc::clone(&clock));
        Box::pin(async move {
            let row = client
                .query_one(&*setup, &[])
                .await
                .map_err(HookError::Backend)?;
            let received = tokio::time::Instant::now();
            let now_us: i64 = row.try_get("now_us").map_err(HookError::Backend)?;
            clock.record(now_us, received);
            let durability: String = row
                .try_get("synchronous_commit")
                .map_err(HookError::Backend)?;
            tracing::debug!(synchronous_commit = %durability, "PostgreSQL session set up");
            Ok(())
        })
    });
    Pool::builder(manager)
        .max_size(size)
        .runtime(Runtime::Tokio1)
        .wait_timeout(Some(timeout))
        .create_timeout(Some(timeout))
        .recycle_timeout(Some(timeout))
        .post_create(hook)
        .build()
        .map_err(|e| Error::Internal(format!("PostgreSQL pool: {e}")))
}

/// A driver error in the broker's words: a database error that says the
/// server is going away, overloaded or unreachable (SQLSTATE classes 08,
/// 53, 57, and 40: a rollback a retry may cure) or that it refuses us (28:
/// a wrong password, 3D: no such database: the operator's to fix, and
/// the broker serves nothing meanwhile) is UNAVAILABLE, as is any error
/// without a database answer (connection refused, reset, closed), and a
/// server that takes no writes ([`is_read_only`]: a standby, or a primary
/// set read-only at a failover: the writes belong elsewhere); any other
/// database error is our bug (INTERNAL).
#[expect(
    clippy::needless_pass_by_value,
    reason = "called as map_err(|e| classify(op, e)): the error is given away"
)]
pub(super) fn classify(op: &str, e: tokio_postgres::Error) -> Error {
    match e.as_db_error() {
        Some(db) => {
            // The message only: a DETAIL line can quote a row's values, and
            // a row may hold an owner token.
            let (code, message) = (db.code().code(), db.message());
            if db.code() == &SqlState::LOCK_NOT_AVAILABLE {
                Error::Unavailable(format!(
                    "PostgreSQL: {op} waited longer than lock_timeout (set by the broker to half \
                     the store timeout) for a lock another session holds ({message}): look in \
                     pg_stat_activity for a session 'idle in transaction' or a long statement on \
                     the broker's schema (idle_in_transaction_session_timeout ends such sessions)"
                ))
            } else if db.code() == &SqlState::QUERY_CANCELED {
                Error::Unavailable(format!(
                    "PostgreSQL cancelled {op} ({message}): it ran past statement_timeout (set \
                     by the broker below the store timeout) or was cancelled when the broker \
                     gave up on it; the server is overloaded, or the statement waited on a lock \
                     another session holds (see pg_stat_activity)"
                ))
            } else if is_read_only(&e) {
                Error::Unavailable(format!(
                    "PostgreSQL takes no writes there ({op}: {message}): a standby, or a server \
                     set read-only; list the primary in --store, or every server with \
                     ?target_session_attrs=read-write to follow a failover"
                ))
            } else if ["08", "53", "57", "40", "28", "3D"]
                .iter()
                .any(|c| code.starts_with(c))
            {
                Error::Unavailable(format!("PostgreSQL is unavailable ({op}: {message})"))
            } else {
                Error::Internal(format!("PostgreSQL {op}: {message} (SQLSTATE {code})"))
            }
        }
        None => Error::Unavailable(format!("PostgreSQL is unavailable ({op}: {})", chain(&e))),
    }
}

/// The server refused a write because it takes none (SQLSTATE 25006,
/// read_only_sql_transaction): a standby, or a primary set read-only
/// (default_transaction_read_only) when it was failed over.
pub(super) fn is_read_only(e: &tokio_postgres::Error) -> bool {
    e.code() == Some(&SqlState::READ_ONLY_SQL_TRANSACTION)
}

/// An error and its causes, `: `-separated: tokio-postgres' own message
/// ("error performing TLS handshake") leaves the reason ("invalid peer
/// certificate: UnknownIssuer") to its source.
fn chain(e: &dyn std::error::Error) -> String {
    let mut text = e.to_string();
    let mut source = e.source();
    while let Some(cause) = source {
        text.push_str(": ");
        text.push_str(&cause.to_string());
        source = cause.source();
    }
    text
}

pub(super) fn pool_error(op: &str, e: PoolError) -> Error {
    match e {
        PoolError::Backend(e) | PoolError::PostCreateHook(HookError::Backend(e)) => classify(op, e),
        other => Error::Unavailable(format!("PostgreSQL is unavailable ({op}: {other})")),
    }
}

/// An acquire the database refused because it began past the broker's
/// deadline for it (reply code 4: `deadline`).
pub(super) fn too_late(timeout: Duration) -> Error {
    Error::Unavailable(format!(
        "PostgreSQL began this acquire after the broker had given up on it (past the {} ms \
         store timeout: it was delayed on its way, or waited on the name's lock), and granted \
         nothing; retry",
        timeout.as_millis()
    ))
}

pub(super) fn timed_out(op: &str, timeout: Duration) -> Error {
    crate::store::timed_out("PostgreSQL", op, timeout)
}

/// The schema's version in the database: `None` when it has no version
/// table (or no schema) yet.
async fn version(client: &Client, schema: &str) -> Result<Option<i32>> {
    let table = format!("{schema}.leasehold_schema_version");
    let read =
        |e: tokio_postgres::Error| Error::Internal(format!("PostgreSQL schema version: {e}"));
    let exists: bool = client
        .query_one("SELECT to_regclass($1) IS NOT NULL", &[&table])
        .await
        .map_err(|e| classify("migrate", e))?
        .try_get(0)
        .map_err(read)?;
    if !exists {
        return Ok(None);
    }
    client
        .query_one(&format!("SELECT max(version) FROM {table}"), &[])
        .await
        .map_err(|e| classify("migrate", e))?
        .try_get(0)
        .map_err(read)
}

/// Whether `version` is this broker's (`true`), older (`false`), or newer
/// (refused: its functions may answer in ways this broker cannot read).
fn is_current(schema: &str, version: Option<i32>) -> Result<bool> {
    match version {
        Some(v) if v == SCHEMA_VERSION => Ok(true),
        Some(v) if v > SCHEMA_VERSION => Err(Error::Unavailable(format!(
            "PostgreSQL schema '{schema}' is at version {v}, newer than this \
             broker's {SCHEMA_VERSION}: upgrade the broker"
        ))),
        _ => Ok(false),
    }
}

/// Brings `schema` to [`SCHEMA_VERSION`]: nothing when the version table
/// says it is there already (so a broker whose role may not run DDL starts
/// on a schema `leasehold migrate` made), else the whole of schema.sql in
/// one transaction under [`MIGRATION_LOCK`], unless the version, read again
/// under that lock, shows that another broker did it meanwhile (brokers
/// starting at once all find the schema old; running the DDL again beside
/// the first one's grants locks their tables, and deadlocked with them).
/// The lock is taken for the session, in a transaction before the
/// migration's: a transaction reads the catalog as its cache had it at its
/// start (an advisory lock refreshes nothing), so one begun before the
/// wait would not see the version table the other broker created. A
/// schema newer than this broker is refused. `limit`: how long the wait
/// and the DDL may take in the server.
pub(super) async fn migrate(client: &Client, schema: &str, limit: Duration) -> Result<()> {
    if is_current(schema, version(client, schema).await?)? {
        return Ok(());
    }
    // The session's limits are for store calls; DDL on a busy server may
    // wait longer (as long as the caller's own bound, `limit`).
    let ms = limit.as_millis().max(1);
    let limits =
        format!("SET LOCAL statement_timeout = '{ms}ms'; SET LOCAL lock_timeout = '{ms}ms';");
    client
        .batch_execute(&format!(
            "BEGIN; {limits} SELECT pg_advisory_lock({MIGRATION_LOCK}); COMMIT;"
        ))
        .await
        .map_err(|e| classify("migrate", e))?;
    let sql = SCHEMA_SQL.replace("__SCHEMA__", schema);
    let migrated = async {
        client
            .batch_execute(&format!("BEGIN; {limits}"))
            .await
            .map_err(|e| classify("migrate", e))?;
        if is_current(schema, version(client, schema).await?)? {
            client
                .batch_execute("COMMIT")
                .await
                .map_err(|e| classify("migrate", e))?;
            return Ok(false);
        }
        client
            .batch_execute(&format!("{sql}\nCOMMIT;"))
            .await
            .map_err(|e| match classify("migrate", e) {
                Error::Internal(why) => Error::Unavailable(format!(
                    "cannot create or migrate the PostgreSQL schema '{schema}' ({why}): run \
                     `leasehold migrate` with a role that may, or let this role create schemas"
                )),
                other => other,
            })?;
        Ok(true)
    };
    let outcome = migrated.await;
    if outcome.is_err() {
        // Leave the connection usable for the pool's next caller.
        let _ = client.batch_execute("ROLLBACK").await;
    }
    // A connection that fails here is dropped by the pool, and the lock
    // with its session.
    let _ = client
        .batch_execute(&format!("SELECT pg_advisory_unlock({MIGRATION_LOCK})"))
        .await;
    if outcome? {
        tracing::info!(schema, version = SCHEMA_VERSION, "PostgreSQL schema ready");
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every placeholder of schema.sql is filled: the contract's constants
    /// with their values, `__SCHEMA__` left for the migration; nothing else
    /// of the `__NAME__` shape is left.
    #[test]
    fn the_schema_text_has_the_contracts_values() {
        let sql = &*SCHEMA_SQL;
        let left: Vec<&str> = sql
            .match_indices("__")
            .map(|(i, _)| &sql[i..])
            .filter(|rest| rest[2..].starts_with(|c: char| c.is_ascii_uppercase()))
            .filter(|rest| !rest.starts_with("__SCHEMA__"))
            .collect();
        assert!(
            left.is_empty(),
            "unfilled: {:?}",
            &left[..left.len().min(3)]
        );
        assert!(
            sql.contains("SELECT 10000::bigint"),
            "linger_ms() is LINGER_MS"
        );
        assert!(sql.contains("ROW(-5, 0, 0)::__SCHEMA__.renewal"));
        assert!(!SCHEMA_FILE.contains("ROW(-5,"), "the file names its codes");
    }

    #[test]
    fn a_key_prefix_names_a_schema() {
        assert_eq!(schema_for("leasehold:").unwrap(), "leasehold");
        assert_eq!(schema_for("Team-A:locks:").unwrap(), "team_a_locks");
        assert_eq!(schema_for("").unwrap(), "leasehold");
        assert_eq!(schema_for("7x").unwrap(), "lh_7x");
        assert_eq!(schema_for("pg_x").unwrap(), "lh_pg_x");
        assert_eq!(schema_for("\"; DROP").unwrap(), "drop");
        assert!(matches!(
            schema_for(&"a".repeat(41)),
            Err(Error::InvalidArgument(_))
        ));
    }

    #[test]
    fn sslmode_chooses_plain_text_or_tls() {
        let options = StoreOptions::new("p:", Duration::from_secs(1));
        let mode = |url: &str| parse_url(url, &options).map(|(c, _)| c.get_ssl_mode());
        assert!(matches!(
            mode("postgres://u:p@127.0.0.1:5432/db"),
            Ok(SslMode::Prefer)
        ));
        assert!(matches!(
            mode("postgresql://u@127.0.0.1/db?sslmode=prefer"),
            Ok(SslMode::Prefer)
        ));
        assert!(matches!(
            mode("postgresql://u@127.0.0.1/db?sslmode=disable"),
            Ok(SslMode::Disable)
        ));
        for verifying in ["require", "verify-ca", "verify-full"] {
            let url = format!("postgres://u@127.0.0.1/db?application_name=x&sslmode={verifying}");
            assert!(matches!(mode(&url), Ok(SslMode::Require)), "{verifying}");
        }
        match mode("postgres://u:secret@127.0.0.1/db?sslmode=sometimes") {
            Err(Error::InvalidArgument(m)) => assert!(!m.contains("secret"), "{m}"),
            other => panic!("{other:?}"),
        }
        assert!(matches!(
            mode("postgres://127.0.0.1:notaport/db"),
            Err(Error::InvalidArgument(_))
        ));
        let acks = StoreOptions {
            replica_acks: 1,
            ..options.clone()
        };
        assert!(matches!(
            super::super::PostgresStore::open("postgres://u@127.0.0.1/db", &acks),
            Err(Error::InvalidArgument(_))
        ));
        let bad_ca = StoreOptions {
            tls_ca: Some(b"not a certificate".to_vec()),
            ..options.clone()
        };
        assert!(matches!(
            parse_url("postgres://u@127.0.0.1/db?sslmode=require", &bad_ca),
            Err(Error::InvalidArgument(_))
        ));
    }
}
