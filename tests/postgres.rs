//! The PostgreSQL store beyond the contract (tests/conformance.rs runs that
//! on PostgreSQL too): nothing grows per distinct name, a PostgreSQL that
//! is down or stalled fails calls UNAVAILABLE within the store timeout, and
//! one that comes back (with its data) is used again by itself, leases and
//! fences intact, its LISTEN restored; so is a synchronous standby promoted
//! in its place, found through a multi-host URL.

use leasehold_testkit as common;

use std::time::{Duration, Instant};

use common::{certs::Ca, eventually, proxy::Proxy, PostgresServer};
use leasehold_server::{
    store::{Acquired, Checked, Event, GrantSpec, RenewItem, Renewed, Store, StoreOptions},
    Error,
};

fn spec(name: &str, token: &str, ttl_ms: u64) -> GrantSpec {
    GrantSpec {
        name: name.into(),
        token: token.into(),
        holder: "test".into(),
        ttl_ms,
        lock_delay_ms: 0,
        limit: 1,
        queued: false,
    }
}

async fn grant(store: &Store, spec: &GrantSpec) -> u64 {
    match store.acquire(spec).await {
        Ok(Acquired::Granted { fence, .. }) => fence,
        other => panic!("{} not granted: {other:?}", spec.name),
    }
}

fn open(url: &str, prefix: &str, timeout: Duration) -> Store {
    Store::open(url, &StoreOptions::new(prefix, timeout)).expect("open the PostgreSQL store")
}

/// Every row the store keeps in `schema`, whatever the table.
async fn rows(url: &str, schema: &str) -> i64 {
    query_i64(
        url,
        &format!(
            "SELECT (SELECT count(*) FROM {schema}.leases) + (SELECT count(*) FROM {schema}.permits) \
             + (SELECT count(*) FROM {schema}.semaphores) + (SELECT count(*) FROM {schema}.line) \
             + (SELECT count(*) FROM {schema}.ended)"
        ),
    )
    .await
}

/// The one number `sql` answers, read on a connection of the test's own.
async fn query_i64(url: &str, sql: &str) -> i64 {
    let (client, connection) = tokio_postgres::connect(url, tokio_postgres::NoTls)
        .await
        .expect("connect to the test PostgreSQL");
    let driver = tokio::spawn(connection);
    let n: i64 = client
        .query_one(sql, &[])
        .await
        .expect("run the query")
        .get(0);
    drop(client);
    let _ = driver.await;
    n
}

/// 10,000 distinct names (locks released, locks left to expire, semaphore
/// permits, waiters that leave the line) leave the row count where it
/// started once their records have lapsed: what the store keeps is bounded
/// by the names in use, not by every name ever used.
#[tokio::test]
async fn ten_thousand_names_leave_no_rows_behind() {
    const NAMES: usize = 10_000;
    let postgres = PostgresServer::start();
    let store = open(&postgres.url(), "rows:", Duration::from_secs(5));
    // The first call creates the schema.
    store.describe("warm-up").await.expect("describe");
    let start = rows(&postgres.url(), "rows").await;
    let names: Vec<usize> = (0..NAMES).collect();
    for chunk in names.chunks(50) {
        let calls = chunk.iter().map(|&i| {
            let store = &store;
            async move {
                let name = format!("n/{i}");
                match i % 4 {
                    0 => {
                        grant(store, &spec(&name, "t", 5_000)).await;
                        assert_eq!(store.release(&name, "t").await.unwrap(), Checked::Done(()));
                    }
                    1 => {
                        // Left to expire.
                        grant(store, &spec(&name, "t", 200)).await;
                    }
                    2 => {
                        let permit = GrantSpec {
                            limit: 3,
                            ..spec(&name, "p", 5_000)
                        };
                        grant(store, &permit).await;
                        assert_eq!(store.release(&name, "p").await.unwrap(), Checked::Done(()));
                    }
                    _ => {
                        grant(store, &spec(&name, "h", 5_000)).await;
                        let waiter = GrantSpec {
                            queued: true,
                            ..spec(&name, "w", 5_000)
                        };
                        assert!(matches!(
                            store.acquire(&waiter).await,
                            Ok(Acquired::Blocked(_))
                        ));
                        store.dequeue(&name, "w").await.unwrap();
                        assert_eq!(store.release(&name, "h").await.unwrap(), Checked::Done(()));
                    }
                }
            }
        });
        futures_util::future::join_all(calls).await;
    }
    let peak = rows(&postgres.url(), "rows").await;
    assert!(
        peak >= start + i64::try_from(NAMES).expect("10 000 names") / 2,
        "the names' records were never written: {start} rows before, {peak} after"
    );
    // Records linger 10 s past their lease (LINGER_MS), then go.
    let began = Instant::now();
    eventually(
        Duration::from_secs(90),
        "the row count to return to its start",
        || async { rows(&postgres.url(), "rows").await == start },
    )
    .await;
    eprintln!(
        "{NAMES} names: {start} rows before, {peak} at the peak, {start} again {:?} later",
        began.elapsed()
    );
}

/// PostgreSQL killed: calls fail UNAVAILABLE within the store timeout (no
/// hang). Restarted with its data: the store is used again by itself, the
/// lease granted before is still held with its fence, fences go on rising,
/// and the LISTEN is back (a release wakes a watcher).
#[tokio::test]
async fn postgres_down_is_unavailable_then_back_with_its_leases() {
    let timeout = Duration::from_secs(1);
    let mut postgres = PostgresServer::start_durable();
    let store = open(&postgres.url(), "down:", timeout);
    let kept = grant(&store, &spec("kept", "t1", 120_000)).await;

    postgres.stop();
    for attempt in 0..3 {
        let started = Instant::now();
        let outcome = store.acquire(&spec("other", "t2", 10_000)).await;
        assert!(
            matches!(outcome, Err(Error::Unavailable(_))),
            "attempt {attempt}: {outcome:?}"
        );
        assert!(
            started.elapsed() < timeout + Duration::from_millis(1_500),
            "attempt {attempt} took {:?}",
            started.elapsed()
        );
    }
    assert!(store.ping().await.is_err(), "ping while PostgreSQL is down");

    postgres.restart();
    eventually(Duration::from_secs(30), "the store to answer again", || {
        let store = store.clone();
        async move { store.ping().await.is_ok() }
    })
    .await;
    assert_eq!(
        store.check("kept", "t1").await.unwrap(),
        Checked::Done(Renewed {
            ttl_ms: 120_000,
            fence: kept
        }),
        "the lease survived the restart"
    );
    let after = grant(&store, &spec("after", "t3", 10_000)).await;
    assert!(after > kept, "fence {after} after {kept}");

    // The LISTEN connection came back (a watch is confirmed only while it
    // is up), and a release reaches the watcher through it.
    // Each attempt waits up to the store timeout for the LISTEN.
    let deadline = Instant::now() + Duration::from_secs(30);
    let watch = loop {
        match store.watch("kept", Event::Released, None).await {
            Ok(watch) => break watch,
            Err(e) => assert!(
                Instant::now() < deadline,
                "no LISTEN after the restart: {e:?}"
            ),
        }
    };
    let notified = watch.notified();
    tokio::pin!(notified);
    notified.as_mut().enable();
    assert_eq!(
        store.release("kept", "t1").await.unwrap(),
        Checked::Done(())
    );
    tokio::time::timeout(Duration::from_secs(5), notified)
        .await
        .expect("the release woke the watcher after the restart");
}

/// A primary with a synchronous standby, and a store whose URL lists both
/// (target_session_attrs=read-write: the one that takes writes), holding
/// leases: eight held, one granted then released. Returns the held leases
/// with their fences, and the highest fence granted.
async fn primary_with_standby() -> (
    PostgresServer,
    PostgresServer,
    Store,
    Vec<(GrantSpec, u64)>,
    u64,
) {
    let primary = PostgresServer::start();
    let standby = primary.start_standby(true).await;
    let url = format!(
        "postgres://postgres@127.0.0.1:{},127.0.0.1:{}/postgres?target_session_attrs=read-write",
        primary.port(),
        standby.port()
    );
    let store = open(&url, "failover:", FAILOVER_TIMEOUT);
    // At once, so that the pool holds several connections to the primary.
    let leases: Vec<GrantSpec> = (0..8)
        .map(|i| spec(&format!("held/{i}"), &format!("t{i}"), 300_000))
        .collect();
    let fences =
        futures_util::future::join_all(leases.iter().map(|lease| grant(&store, lease))).await;
    let held: Vec<(GrantSpec, u64)> = leases.into_iter().zip(fences).collect();
    let freed = grant(&store, &spec("freed", "f1", 300_000)).await;
    assert_eq!(
        store.release("freed", "f1").await.unwrap(),
        Checked::Done(())
    );
    let highest = held.iter().map(|(_, f)| *f).max().unwrap().max(freed);
    (primary, standby, store, held, highest)
}

const FAILOVER_TIMEOUT: Duration = Duration::from_secs(2);

/// With no server taking writes: a new name, a held name and a renewal all
/// fail UNAVAILABLE (the standby grants nothing), each within the store
/// timeout and a margin, three times over.
async fn unavailable_without_a_primary(store: &Store) {
    for attempt in 0..3 {
        let outcomes = [
            ("a new name", spec("new", "n1", 10_000)),
            ("a held name", spec("held/1", "thief", 10_000)),
        ]
        .map(|(what, spec)| {
            let store = store.clone();
            (what, async move { store.acquire(&spec).await.map(|_| ()) })
        });
        for (what, outcome) in outcomes {
            let started = Instant::now();
            let outcome = outcome.await;
            assert!(
                matches!(outcome, Err(Error::Unavailable(_))),
                "attempt {attempt}, {what} with no primary: {outcome:?}"
            );
            assert!(started.elapsed() < FAILOVER_TIMEOUT + Duration::from_millis(1_500));
        }
        let renewal = store.renew("held/0", "t0", None).await;
        assert!(
            matches!(renewal, Err(Error::Unavailable(_))),
            "attempt {attempt}, a renewal with no primary: {renewal:?}"
        );
    }
}

/// After the promotion, the same store (no restart) reaches the new primary
/// by itself, failing only UNAVAILABLE until then; every lease in `held` is
/// still held with its fence, the released one is free, fences go on
/// rising above `highest`, and the LISTEN connection followed too: once it
/// listens on `promoted`, a waiter in line on a held name is woken by the
/// release, through that connection (a NOTIFY naming it: the store has no
/// timer of its own, and the connection is the same before and after, so
/// no reconnection's wake-all did it), then granted.
async fn followed_to_the_new_primary(
    store: &Store,
    promoted: &PostgresServer,
    held: &[(GrantSpec, u64)],
    highest: u64,
) {
    let started = Instant::now();
    let refused = std::cell::Cell::new(0);
    eventually(
        Duration::from_secs(60),
        "the store to reach the promoted standby",
        || {
            let (store, refused) = (store.clone(), &refused);
            async move {
                match store.renew("held/0", "t0", None).await {
                    Ok(_) => true,
                    Err(Error::Unavailable(_)) => {
                        refused.set(refused.get() + 1);
                        false
                    }
                    Err(e) => panic!("after the promotion: {e:?}"),
                }
            }
        },
    )
    .await;
    eprintln!(
        "the store was back {:?} after the promotion ({} calls UNAVAILABLE meanwhile)",
        started.elapsed(),
        refused.get()
    );
    for (lease, fence) in held {
        match store.renew(&lease.name, &lease.token, None).await {
            Ok(Checked::Done(renewed)) => assert_eq!(renewed.fence, *fence, "{}", lease.name),
            other => panic!("{} lost in the failover: {other:?}", lease.name),
        }
        match store.acquire(&spec(&lease.name, "thief", 10_000)).await {
            Ok(Acquired::Blocked(blocked)) => assert_eq!(blocked.fence, *fence, "{}", lease.name),
            other => panic!("{} granted twice: {other:?}", lease.name),
        }
    }
    let regranted = grant(store, &spec("freed", "f2", 10_000)).await;
    assert!(
        regranted > highest,
        "fence {regranted} after the failover, {highest} before"
    );

    // The listening connection's last statement is its LISTEN, or its
    // check every second; the pool's are the store's functions.
    let listener = "SELECT pid FROM pg_stat_activity \
                    WHERE query LIKE 'LISTEN %' OR query = 'SHOW transaction_read_only'";
    let listening = std::cell::RefCell::new(String::new());
    eventually(
        Duration::from_secs(30),
        "the LISTEN connection on the promoted standby",
        || async {
            let pids = promoted.psql(&[listener]).await;
            let found = !pids.is_empty();
            *listening.borrow_mut() = pids;
            found
        },
    )
    .await;
    let (name, token) = (held[0].0.name.as_str(), held[0].0.token.as_str());
    let waiter = GrantSpec {
        queued: true,
        ..spec(name, "waiter", 10_000)
    };
    assert!(matches!(
        store.acquire(&waiter).await,
        Ok(Acquired::Blocked(_))
    ));
    // Each attempt waits up to the store timeout for the LISTEN.
    let deadline = Instant::now() + Duration::from_secs(30);
    let watch = loop {
        match store.watch(name, Event::Released, Some("waiter")).await {
            Ok(watch) => break watch,
            Err(e) => assert!(
                Instant::now() < deadline,
                "no LISTEN after the failover: {e:?}"
            ),
        }
    };
    let notified = watch.notified();
    tokio::pin!(notified);
    notified.as_mut().enable();
    assert_eq!(store.release(name, token).await.unwrap(), Checked::Done(()));
    let released = Instant::now();
    tokio::time::timeout(Duration::from_secs(5), notified)
        .await
        .expect("the release woke the waiter after the failover");
    eprintln!(
        "the waiter was woken {:?} after the release",
        released.elapsed()
    );
    assert_eq!(
        promoted.psql(&[listener]).await,
        listening.into_inner(),
        "the LISTEN connection changed under the wait"
    );
    let granted = grant(store, &waiter).await;
    assert!(granted > regranted, "fence {granted} after {regranted}");
}

/// Failover to a synchronous streaming standby, the primary killed
/// (immediate shutdown): while the standby is not yet promoted every call
/// fails UNAVAILABLE (read-only, it grants nothing); once it is, the same
/// store follows it through the multi-host URL by itself, every lease and
/// fence intact, its LISTEN back ([`followed_to_the_new_primary`]).
#[tokio::test]
async fn failover_to_a_promoted_synchronous_standby_keeps_every_lease_and_fence() {
    let (mut primary, standby, store, held, highest) = primary_with_standby().await;
    primary.stop();
    unavailable_without_a_primary(&store).await;
    standby.promote().await;
    followed_to_the_new_primary(&store, &standby, &held, highest).await;
}

/// Failover with the old primary left running but set read-only (as a
/// failover tool fencing it, or a full disk, may do: default_transaction_
/// read_only), so the store's pooled connections and its LISTEN connection
/// stay open to a server that takes no writes: calls fail UNAVAILABLE, not
/// INTERNAL (a read-only server is no bug of ours), and once the standby is
/// promoted the store drops those connections and follows the URL to it,
/// its LISTEN too.
#[tokio::test]
async fn failover_from_a_primary_left_read_only_follows_the_new_primary() {
    let (primary, standby, store, held, highest) = primary_with_standby().await;
    // The LISTEN is up, on the primary.
    store
        .watch("held/0", Event::Released, None)
        .await
        .expect("LISTEN on the primary");
    primary
        .psql(&[
            "ALTER SYSTEM SET default_transaction_read_only = on",
            "SELECT pg_reload_conf()",
        ])
        .await;
    // Sessions read the setting at their next statement after the reload's
    // signal: grants may still land until then.
    let (mut n, highest) = (0, std::cell::Cell::new(highest));
    eventually(
        Duration::from_secs(30),
        "the primary to take no more writes",
        || {
            n += 1;
            let (store, name, highest) = (store.clone(), format!("late/{n}"), &highest);
            async move {
                match store.acquire(&spec(&name, "l", 10_000)).await {
                    Ok(Acquired::Granted { fence, .. }) => {
                        highest.set(highest.get().max(fence));
                        false
                    }
                    Err(Error::Unavailable(_)) => true,
                    other => panic!("{name} on a primary going read-only: {other:?}"),
                }
            }
        },
    )
    .await;
    unavailable_without_a_primary(&store).await;
    standby.promote().await;
    followed_to_the_new_primary(&store, &standby, &held, highest.get()).await;
}

/// A PostgreSQL that stops answering (a network black hole: no error, only
/// silence) fails calls UNAVAILABLE within the store timeout; once it
/// answers again, so does the store.
#[tokio::test]
async fn a_stalled_postgres_is_unavailable_within_the_store_timeout() {
    let timeout = Duration::from_secs(1);
    let postgres = PostgresServer::start();
    let proxy = Proxy::start(([127, 0, 0, 1], postgres.port()).into()).await;
    let url = format!("postgres://postgres@{}/postgres", proxy.addr());
    let store = open(&url, "stall:", timeout);
    grant(&store, &spec("a", "t1", 60_000)).await;

    proxy.stall();
    let started = Instant::now();
    let outcome = store.renew("a", "t1", None).await;
    let took = started.elapsed();
    assert!(matches!(outcome, Err(Error::Unavailable(_))), "{outcome:?}");
    assert!(
        took >= timeout - Duration::from_millis(100) && took < timeout + Duration::from_secs(2),
        "answered after {took:?}"
    );

    proxy.pass();
    eventually(Duration::from_secs(30), "the store to answer again", || {
        let store = store.clone();
        async move { matches!(store.renew("a", "t1", None).await, Ok(Checked::Done(_))) }
    })
    .await;
}

/// sslmode=verify-full: the store talks TLS to a PostgreSQL that accepts
/// TLS connections only, verifying its certificate against --store-ca. The
/// same server refuses plain text (sslmode=disable), and a certificate the
/// store cannot verify (no --store-ca: the system's roots) is refused too:
/// both UNAVAILABLE, with the reason.
#[tokio::test]
async fn tls_by_sslmode_verifies_the_server() {
    let ca = Ca::new("leasehold-test-pg-ca");
    let (cert, key) = ca.issue(&["127.0.0.1"]);
    let postgres = PostgresServer::start_tls(&cert, &key);
    let url = |mode: &str| {
        format!(
            "postgres://postgres@127.0.0.1:{}/postgres?sslmode={mode}",
            postgres.port()
        )
    };
    let timeout = Duration::from_secs(2);
    let with_ca = StoreOptions {
        tls_ca: Some(ca.pem.clone().into_bytes()),
        ..StoreOptions::new("tls:", timeout)
    };
    let store = Store::open(&url("verify-full"), &with_ca).expect("open");
    let fence = grant(&store, &spec("a", "t1", 10_000)).await;
    assert_eq!(
        store.check("a", "t1").await.unwrap(),
        Checked::Done(Renewed {
            ttl_ms: 10_000,
            fence
        })
    );

    let plain = open(&url("disable"), "tls:", timeout);
    match plain.describe("a").await {
        Err(Error::Unavailable(why)) => assert!(why.contains("no encryption"), "{why}"),
        other => panic!("plain text to a TLS-only server: {other:?}"),
    }
    let unverified = open(&url("require"), "tls:", timeout);
    match unverified.describe("a").await {
        Err(Error::Unavailable(why)) => assert!(why.contains("certificate"), "{why}"),
        other => panic!("a certificate nobody vouches for was accepted: {other:?}"),
    }

    // prefer (libpq's default, and the broker's when the URL names no
    // sslmode) is libpq's: TLS whatever the certificate, so a server that
    // takes TLS only is reached (plain text is refused there, above).
    let default = format!("postgres://postgres@127.0.0.1:{}/postgres", postgres.port());
    for url in [url("prefer"), default] {
        let preferring = open(&url, "tls:", timeout);
        assert_eq!(
            preferring.check("a", "t1").await.unwrap(),
            Checked::Done(Renewed {
                ttl_ms: 10_000,
                fence
            }),
            "{url}"
        );
    }
}

/// `--store-connections` bounds the connections a broker opens, however
/// many calls arrive at once: 48 concurrent grants open more than 4
/// connections with the default pool, and no more than 3 (+ LISTEN's)
/// with a pool of 3, every grant served.
#[tokio::test]
async fn store_connections_bounds_the_pool() {
    let postgres = PostgresServer::start();
    let base = postgres.url();
    let opened = |name: &'static str, connections: usize| {
        // Each store under its own application_name, to count its own.
        let url = format!("{base}?application_name={name}");
        let base = base.clone();
        async move {
            let options = StoreOptions {
                connections,
                ..StoreOptions::new(name, Duration::from_secs(10))
            };
            let store = Store::open(&url, &options).expect("open");
            let grants = (0..48).map(|i| {
                let store = store.clone();
                async move {
                    grant(&store, &spec(&format!("n{i}"), &format!("t{i}"), 60_000)).await
                }
            });
            let fences = futures_util::future::join_all(grants).await;
            assert_eq!(fences.len(), 48);
            let sql =
                format!("SELECT count(*) FROM pg_stat_activity WHERE application_name = '{name}'");
            query_i64(&base, &sql).await
        }
    };
    let bounded = opened("small", 3).await;
    assert!(
        (1..=4).contains(&bounded),
        "{bounded} connections for a pool of 3"
    );
    let wide = opened("wide", 16).await;
    assert!(
        wide > 4,
        "{wide} connections: the grants did not run at once"
    );
}

/// Runs `sql` on `url` as it is (several statements at once).
async fn execute(url: &str, sql: &str) {
    let (client, connection) = tokio_postgres::connect(url, tokio_postgres::NoTls)
        .await
        .expect("connect to the test PostgreSQL");
    let driver = tokio::spawn(connection);
    client.batch_execute(sql).await.expect("run the SQL");
    drop(client);
    let _ = driver.await;
}

/// For deployments whose brokers may not run DDL: a broker whose role may
/// not create the schema serves nothing and says to run `leasehold
/// migrate`; once `leasehold migrate` ran with a role that may (and the
/// broker's role was granted the tables, as docs/stores.md says), the broker
/// runs no DDL and serves.
#[tokio::test]
async fn leasehold_migrate_prepares_the_schema_for_a_role_without_ddl() {
    let postgres = PostgresServer::start();
    execute(&postgres.url(), "CREATE ROLE app LOGIN").await;
    let as_app = format!(
        "postgres://app@127.0.0.1:{}/postgres?application_name=app",
        postgres.port()
    );
    let before = open(&as_app, "app:", Duration::from_secs(5));
    match before.describe("a").await {
        Err(Error::Unavailable(why)) => assert!(why.contains("leasehold migrate"), "{why}"),
        other => panic!("a role without DDL rights made the schema: {other:?}"),
    }

    let migrate = |url: String| {
        std::process::Command::new(env!("CARGO_BIN_EXE_leasehold"))
            .args(["migrate", "--store", &url, "--key-prefix", "app:"])
            .env_remove("LEASEHOLD_STORE")
            .output()
            .expect("run leasehold migrate")
    };
    for run in 0..2 {
        // Twice: a second run finds the schema at its version.
        let out = tokio::task::spawn_blocking({
            let url = postgres.url();
            move || migrate(url)
        })
        .await
        .unwrap();
        assert!(
            out.status.success(),
            "run {run}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        assert_eq!(
            String::from_utf8_lossy(&out.stdout),
            "PostgreSQL schema 'app' is ready\n"
        );
    }
    execute(
        &postgres.url(),
        "GRANT USAGE ON SCHEMA app TO app;
         GRANT SELECT, INSERT, UPDATE, DELETE ON ALL TABLES IN SCHEMA app TO app;
         GRANT USAGE, UPDATE ON ALL SEQUENCES IN SCHEMA app TO app;",
    )
    .await;
    let after = open(&as_app, "app:", Duration::from_secs(5));
    let fence = grant(&after, &spec("a", "t1", 10_000)).await;
    assert_eq!(
        after.renew("a", "t1", Some(20_000)).await.unwrap(),
        Checked::Done(Renewed {
            ttl_ms: 20_000,
            fence
        })
    );
    assert_eq!(after.release("a", "t1").await.unwrap(), Checked::Done(()));
    let permit = GrantSpec {
        limit: 2,
        ..spec("s", "p1", 10_000)
    };
    grant(&after, &permit).await;
}

/// The database's clock steps back an hour (NTP, a VM restored): a lease
/// granted before the step keeps at most its TTL, not an hour more (the
/// store counts it from now), fences still rise (the counter, not the
/// clock), and the name is free again within its TTL.
#[tokio::test]
async fn a_database_clock_stepped_back_lowers_no_fence_and_stretches_no_lease() {
    let postgres = PostgresServer::start_faketime();
    let store = open(&postgres.url(), "clock:", Duration::from_secs(2));
    let before = grant(&store, &spec("a", "t1", 2_000)).await;

    postgres.set_clock_offset(-3_600);
    match store.acquire(&spec("a", "t2", 2_000)).await {
        Ok(Acquired::Blocked(held)) => assert!(
            held.remaining_ms <= 2_000,
            "the step back stretched the lease: {held:?}"
        ),
        other => panic!("{other:?}"),
    }
    let other = grant(&store, &spec("b", "t3", 10_000)).await;
    assert!(
        other > before,
        "fence {other} after {before}, clock an hour back"
    );
    let mut after = 0;
    let started = Instant::now();
    while after == 0 {
        match store.acquire(&spec("a", "t2", 2_000)).await {
            Ok(Acquired::Granted { fence, .. }) => after = fence,
            Ok(Acquired::Blocked(held)) => {
                assert!(held.remaining_ms <= 2_000, "{held:?}");
                assert!(
                    started.elapsed() < Duration::from_secs(10),
                    "still held {:?} after the step",
                    started.elapsed()
                );
                // Blocked tells when the lease ends: wait that long.
                tokio::time::sleep(Duration::from_millis(held.remaining_ms)).await;
            }
            Err(e) => panic!("{e:?}"),
        }
    }
    assert!(after > other, "fence {after} after {other}");
}

/// A session of someone else's (tokio-postgres, from the test) that opens
/// a transaction on `url`, runs `sql` in it and keeps it open, idle, until
/// the returned sender is used (or dropped): then it commits.
async fn blocker(url: &str, sql: &str) -> tokio::sync::oneshot::Sender<()> {
    let (client, connection) = tokio_postgres::connect(url, tokio_postgres::NoTls)
        .await
        .expect("connect to the test PostgreSQL");
    let driver = tokio::spawn(connection);
    client
        .batch_execute(&format!("BEGIN; {sql}"))
        .await
        .expect("take the locks");
    let (done, until) = tokio::sync::oneshot::channel::<()>();
    tokio::spawn(async move {
        let _ = until.await;
        client.batch_execute("COMMIT").await.expect("commit");
        drop(client);
        let _ = driver.await;
    });
    done
}

/// One name's lease row locked, and another name's advisory lock held, by
/// a session left idle in transaction: calls on those two names fail
/// UNAVAILABLE within the store timeout (saying why), again and
/// again, while every other name keeps being served: new names are
/// granted, and 20 heartbeated leases (renew_many, as KeepAlive renews)
/// are renewed for 4 of their TTLs, none failing, none expiring; once the
/// blocker commits, the two names are served and no statement of the
/// broker's is left running in the server.
#[tokio::test]
async fn a_name_blocked_by_another_session_blocks_no_other_name() {
    let timeout = Duration::from_secs(1);
    const TTL_MS: u64 = 1_500;
    let postgres = PostgresServer::start();
    let url = format!("{}?application_name=blocked_broker", postgres.url());
    let store = open(&url, "blocked:", timeout);
    grant(&store, &spec("row-locked", "r1", 120_000)).await;
    let kept: Vec<GrantSpec> = (0..20)
        .map(|i| spec(&format!("kept/{i}"), &format!("k{i}"), TTL_MS))
        .collect();
    for lease in &kept {
        grant(&store, lease).await;
    }
    let commit = blocker(
        &postgres.url(),
        "SELECT 1 FROM blocked.leases WHERE name = 'row-locked' FOR UPDATE; \
         SELECT pg_advisory_xact_lock(blocked.name_key('lock-held'));",
    )
    .await;

    let until = Instant::now() + Duration::from_millis(4 * TTL_MS);
    // Four callers at once keep trying the blocked names.
    let blocked = (0..4).map(|caller| {
        let store = store.clone();
        async move {
            let mut answers = Vec::new();
            while Instant::now() < until {
                let started = Instant::now();
                let outcome = if caller % 2 == 0 {
                    store.renew("row-locked", "r1", None).await.map(|_| ())
                } else {
                    store
                        .acquire(&spec("lock-held", &format!("b{caller}"), 10_000))
                        .await
                        .map(|_| ())
                };
                let took = started.elapsed();
                match outcome {
                    Err(Error::Unavailable(why)) => answers.push((why, took)),
                    other => panic!("caller {caller}: a blocked name answered {other:?}"),
                }
            }
            answers
        }
    });
    let heartbeats = async {
        let items: Vec<RenewItem> = kept
            .iter()
            .map(|l| RenewItem {
                name: l.name.clone(),
                token: l.token.clone(),
                ttl_ms: None,
            })
            .collect();
        let mut beats = 0;
        while Instant::now() < until {
            let renewed = store.renew_many(&items).await;
            let renewed = renewed.unwrap_or_else(|e| panic!("heartbeat {beats} failed: {e:?}"));
            for (lease, outcome) in kept.iter().zip(renewed) {
                assert!(
                    matches!(outcome, Checked::Done(_)),
                    "heartbeat {beats}: {} {outcome:?}",
                    lease.name
                );
            }
            beats += 1;
            tokio::time::sleep(Duration::from_millis(300)).await;
        }
        beats
    };
    let others = async {
        let mut round = 0;
        while Instant::now() < until {
            let grants = (0..20).map(|i| {
                let store = store.clone();
                async move {
                    let name = format!("fresh/{round}/{i}");
                    match store.acquire(&spec(&name, "f", 10_000)).await {
                        Ok(Acquired::Granted { .. }) => {}
                        other => panic!("{name}, not blocked, answered {other:?}"),
                    }
                }
            });
            futures_util::future::join_all(grants).await;
            round += 1;
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        round
    };
    let (answers, beats, rounds) =
        tokio::join!(futures_util::future::join_all(blocked), heartbeats, others);
    let tries: Vec<usize> = answers.iter().map(Vec::len).collect();
    eprintln!("blocked calls {tries:?}, {beats} heartbeats, {rounds} rounds of 20 grants");
    for (why, took) in answers.iter().flatten() {
        // Said as what it is (or, on a loaded machine, as the broker's own
        // timeout): a lock, the server's statement limit, the store timeout.
        assert!(
            ["lock_timeout", "statement_timeout", "store timeout"]
                .iter()
                .any(|what| why.contains(what)),
            "{why}"
        );
        assert!(
            *took < timeout + Duration::from_millis(500),
            "a blocked call took {took:?}"
        );
    }
    assert!(tries.iter().all(|&n| n >= 2), "{tries:?}");

    commit.send(()).expect("the blocker is waiting");
    eventually(Duration::from_secs(10), "the blocked names served", || {
        let store = store.clone();
        async move {
            matches!(
                store.renew("row-locked", "r1", None).await,
                Ok(Checked::Done(_))
            ) && matches!(
                store.acquire(&spec("lock-held", "after", 10_000)).await,
                Ok(Acquired::Granted { .. })
            )
        }
    })
    .await;
    // Nothing of the broker's left running in the server: the statements
    // that timed out were cancelled, not left to wait behind the locks.
    let running = query_i64(
        &postgres.url(),
        "SELECT count(*) FROM pg_stat_activity WHERE application_name = 'blocked_broker' \
         AND state = 'active' AND query_start < now() - interval '2 seconds'",
    )
    .await;
    assert_eq!(running, 0, "statements of the broker's still running");
}

/// A server whose default is `synchronous_commit = off` (acknowledging a
/// commit before its WAL is on disk, as tuning guides suggest), crashed
/// (immediate shutdown) right after a grant: the grant survives the restart
/// with its token and fence, and another acquire of the name is refused,
/// since the broker's sessions commit durably whatever the server's default.
#[tokio::test]
async fn a_grant_survives_a_crash_of_a_server_set_to_synchronous_commit_off() {
    // The WAL writer left to flush async commits every 10 s only (its
    // longest), so that a crash loses the last of them.
    let mut postgres =
        PostgresServer::start_durable_with(&["synchronous_commit=off", "wal_writer_delay=10000"]);
    let store = open(&postgres.url(), "durable:", Duration::from_secs(2));
    // The schema, created, and on disk whatever the sessions' setting.
    store.describe("warm-up").await.expect("describe");
    postgres.psql(&["CHECKPOINT"]).await;
    // A first grant: the WAL writer, idle, may flush it at once; the next
    // one then waits for its next round, 10 s later.
    grant(&store, &spec("first", "t0", 120_000)).await;
    let fence = grant(&store, &spec("kept", "t1", 120_000)).await;

    postgres.restart();
    let started = Instant::now();
    let kept = loop {
        match store.check("kept", "t1").await {
            Err(Error::Unavailable(_)) if started.elapsed() < Duration::from_secs(30) => {
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
            other => break other,
        }
    };
    match kept {
        Ok(checked) => assert_eq!(
            checked,
            Checked::Done(Renewed {
                ttl_ms: 120_000,
                fence
            }),
            "the acknowledged grant was lost in the crash"
        ),
        Err(e) => panic!("after the restart: {e:?}"),
    }
    match store.acquire(&spec("kept", "t2", 10_000)).await {
        Ok(Acquired::Blocked(held)) => assert_eq!(held.fence, fence),
        other => panic!("the lock was granted a second time: {other:?}"),
    }
}

/// The store's fence counter now (or version 1's sequence, where that
/// schema is what runs), read on a connection of the test's own.
async fn fence_counter(url: &str, schema: &str) -> u64 {
    let table = format!("{schema}.fence_counter");
    let exists = query_i64(
        url,
        &format!("SELECT (to_regclass('{table}') IS NOT NULL)::int::bigint"),
    )
    .await;
    let sql = if exists == 1 {
        format!("SELECT value FROM {table}")
    } else {
        format!("SELECT last_value FROM {schema}.fences")
    };
    u64::try_from(query_i64(url, &sql).await).expect("a positive counter")
}

/// The fence function itself, called by 8 sessions at once 300 times each
/// with floors that win over the counter (as a broker's fence floor does
/// over a database restored from an old backup): every fence it gives is
/// unique, and the counter
/// is never left below one of them. (Version 1's nextval-then-setval let
/// two sessions set the sequence in the wrong order: the counter fell below
/// an issued fence and the next calls gave that fence again.)
#[tokio::test]
async fn concurrent_fences_are_unique_and_the_counter_stays_above_them() {
    const SESSIONS: u64 = 8;
    const CALLS: u64 = 300;
    let postgres = PostgresServer::start();
    let store = open(&postgres.url(), "fence:", Duration::from_secs(5));
    store.describe("warm-up").await.expect("describe");
    let calls = (0..SESSIONS).map(|_| {
        let url = postgres.url();
        async move {
            let (client, connection) = tokio_postgres::connect(&url, tokio_postgres::NoTls)
                .await
                .expect("connect to the test PostgreSQL");
            let driver = tokio::spawn(connection);
            let statement = client
                .prepare("SELECT fence.next_fence(0, 0, $1)")
                .await
                .expect("prepare");
            let mut fences = Vec::new();
            // A floor that jumps ahead of the counter at each call, the
            // same in every session: each session's call at that step has
            // the floor win, unless another's moved the counter past it.
            for call in 0..CALLS {
                let floor = i64::try_from(call * 1_000).expect("small");
                let fence: i64 = client
                    .query_one(&statement, &[&floor])
                    .await
                    .expect("next_fence")
                    .get(0);
                fences.push(u64::try_from(fence).expect("a positive fence"));
            }
            drop(client);
            let _ = driver.await;
            fences
        }
    });
    let mut fences: Vec<u64> = futures_util::future::join_all(calls)
        .await
        .into_iter()
        .flatten()
        .collect();
    let highest = *fences.iter().max().unwrap();
    fences.sort_unstable();
    let issued = fences.len();
    fences.dedup();
    assert_eq!(fences.len(), issued, "a fence was given twice");
    let counter = fence_counter(&postgres.url(), "fence").await;
    assert!(
        counter >= highest,
        "counter {counter} below fence {highest}"
    );
}

/// 8 brokers' stores (each with its own fence floor) granting 400 names
/// each at once on one PostgreSQL: 3,200 grants, every fence unique, and
/// the counter at or above the highest of them.
#[tokio::test]
async fn eight_brokers_granting_at_once_issue_unique_fences() {
    const BROKERS: usize = 8;
    const GRANTS: usize = 400;
    let postgres = PostgresServer::start();
    let stores: Vec<Store> = (0..BROKERS)
        .map(|_| open(&postgres.url(), "fences8:", Duration::from_secs(10)))
        .collect();
    stores[0].describe("warm-up").await.expect("describe");
    let workers = stores.iter().enumerate().map(|(b, store)| async move {
        let mut fences = Vec::with_capacity(GRANTS);
        for i in 0..GRANTS {
            fences.push(grant(store, &spec(&format!("n/{b}/{i}"), "t", 60_000)).await);
        }
        fences
    });
    let mut fences: Vec<u64> = futures_util::future::join_all(workers)
        .await
        .into_iter()
        .flatten()
        .collect();
    let highest = *fences.iter().max().unwrap();
    fences.sort_unstable();
    fences.dedup();
    assert_eq!(fences.len(), BROKERS * GRANTS, "a fence was given twice");
    let counter = fence_counter(&postgres.url(), "fences8").await;
    assert!(
        counter >= highest,
        "counter {counter} below fence {highest}"
    );
}

/// The names of every page of a walk of `prefix` in pages of `budget`.
async fn walk(store: &Store, prefix: &str, budget: usize) -> Vec<String> {
    let (mut names, mut resume) = (Vec::new(), None::<String>);
    loop {
        let page = store
            .list(prefix, resume.as_deref(), budget)
            .await
            .expect("list");
        names.extend(page.entries.into_iter().map(|e| e.name));
        match page.next {
            Some(next) => resume = Some(next),
            None => return names,
        }
    }
}

/// A page token is text the broker passes to the database as a parameter:
/// quotes, LIKE's wildcards and SQL are names like any other, past which
/// the walk goes on; one with a NUL byte (no PostgreSQL text holds one) is
/// the caller's bad page_token, not a statement that fails. A prefix with
/// a wildcard matches only names that start with it as written.
#[tokio::test]
async fn a_hostile_page_token_is_a_bad_argument_or_a_name() {
    let postgres = PostgresServer::start();
    let store = open(&postgres.url(), "token:", Duration::from_secs(5));
    for (i, name) in ["a", "a%", "a_b", "a'b", "b"].iter().enumerate() {
        grant(&store, &spec(name, &format!("t{i}"), 30_000)).await;
    }
    match store.list("", Some("a\0b"), 10).await {
        Err(Error::BadArgument { argument, .. }) => assert_eq!(argument, "page_token"),
        other => panic!("a NUL in the page token: {other:?}"),
    }
    for (token, after) in [
        ("a'; DROP TABLE token.leases; --", vec!["a'b", "a_b", "b"]),
        ("a%", vec!["a'b", "a_b", "b"]),
        ("%", vec!["a", "a%", "a'b", "a_b", "b"]),
        ("\u{10FFFF}", vec![]),
        ("", vec!["a", "a%", "a'b", "a_b", "b"]),
    ] {
        let page = store.list("", Some(token), 10).await.expect(token);
        let names: Vec<&str> = page.entries.iter().map(|e| e.name.as_str()).collect();
        assert_eq!(names, after, "after {token:?}");
    }
    assert_eq!(walk(&store, "a%", 1).await, ["a%"]);
    assert_eq!(walk(&store, "a_", 1).await, ["a_b"]);
    assert_eq!(walk(&store, "%", 1).await, Vec::<String>::new());
    assert_eq!(walk(&store, "a\0", 1).await, Vec::<String>::new());
    // The table is still there.
    assert_eq!(walk(&store, "", 2).await, ["a", "a%", "a'b", "a_b", "b"]);
}

/// A database whose default collation is not byte order (ICU's en-US sorts
/// case and punctuation otherwise): pages still come in the broker's byte
/// order, and a walk in pages of one meets every name once.
#[tokio::test]
async fn a_listing_is_in_byte_order_whatever_the_databases_collation() {
    let postgres = PostgresServer::start();
    execute(
        &postgres.url(),
        "CREATE DATABASE icu TEMPLATE template0 ENCODING 'UTF8' LOCALE 'C.UTF-8' \
         LOCALE_PROVIDER icu ICU_LOCALE 'en-US'",
    )
    .await;
    let url = format!("postgres://postgres@127.0.0.1:{}/icu", postgres.port());
    let store = open(&url, "icu:", Duration::from_secs(5));
    let mut names = vec!["B", "a", "a-b", "a.b", "a/b", "aB", "a_b", "ab", "b", "Ab"];
    for (i, name) in names.iter().enumerate() {
        grant(&store, &spec(name, &format!("t{i}"), 30_000)).await;
    }
    names.sort_unstable();
    for budget in [1, 3, 100] {
        assert_eq!(walk(&store, "", budget).await, names, "budget {budget}");
    }
    assert_eq!(walk(&store, "a", 2).await, &names[2..9]);
}

/// The statement of one page reads, in tables of 100,000 leases, places
/// and permits, its
/// budget of names from the byte-order indexes (and each name's rows to
/// describe it), never the table: no sequential scan, whichever page.
/// Counted by PostgreSQL itself, in the transaction that runs it
/// (pg_stat_xact_*).
#[tokio::test]
async fn one_page_reads_an_index_range_not_the_table() {
    const NAMES: i64 = 100_000;
    const BUDGET: i64 = 100;
    let postgres = PostgresServer::start();
    let store = open(&postgres.url(), "big:", Duration::from_secs(5));
    store.describe("warm-up").await.expect("the schema");
    execute(
        &postgres.url(),
        &format!(
            "INSERT INTO big.leases (name, token, holder, fence, ttl_ms, granted_ms, expires_ms, \
                                     delay_ms, forget_ms)
             SELECT 'n/' || lpad(i::text, 6, '0'), 't' || i, 'h', i, 60000, 0, 9e15::bigint, 0,
                    9e15::bigint
               FROM generate_series(1, {NAMES}) AS i;
             INSERT INTO big.line (name, token, seq, deadline_ms)
             SELECT 'n/' || lpad((i % 1000)::text, 6, '0'), 'w' || i, i, 9e15::bigint
               FROM generate_series(1, {NAMES}) AS i;
             INSERT INTO big.permits (name, token, fence, expires_ms, ttl_ms, granted_ms, holder)
             SELECT 'n/' || lpad((i % 2000)::text, 6, '0'), 'p' || i, i, 9e15::bigint, 60000, 0,
                    'h'
               FROM generate_series(1, {NAMES}) AS i;
             ANALYZE big.leases; ANALYZE big.line; ANALYZE big.permits;"
        ),
    )
    .await;
    let budget = usize::try_from(BUDGET).unwrap();
    let page = store
        .list("n/", Some("n/050000"), budget)
        .await
        .expect("list");
    assert_eq!(page.entries.len(), budget);
    assert_eq!(page.entries[0].name, "n/050001");
    assert_eq!(page.next.as_deref(), Some("n/050100"));
    let first = store.list("n/", None, budget).await.expect("list");
    // n/000000 has waiters and no lease; n/000001, a lease and waiters.
    assert_eq!(first.entries[0].name, "n/000000");
    assert_eq!(first.entries[0].described.lease, None);
    assert_eq!(first.entries[0].described.waiters, 100);
    assert_eq!(first.entries[1].described.waiters, 100);
    assert_eq!(first.entries[1].described.permits, 50);
    assert!(first.entries[1].described.lease.is_some());

    for after in ["NULL", "'n/000500'", "'n/099950'"] {
        // A session of its own: a session's counts of its transactions add
        // up until it reports them.
        let (client, connection) = tokio_postgres::connect(&postgres.url(), tokio_postgres::NoTls)
            .await
            .expect("connect");
        let driver = tokio::spawn(connection);
        let read = client
            .simple_query(&format!(
                "BEGIN; SELECT count(*) FROM big.list('n/', {after}, {BUDGET});"
            ))
            .await
            .expect("list");
        drop(read);
        let tables: Vec<(String, i64, i64)> = client
            .query(
                "SELECT relname::text, seq_scan, seq_tup_read FROM pg_stat_xact_user_tables \
                  WHERE schemaname = 'big' AND relname IN ('leases', 'permits', 'line')",
                &[],
            )
            .await
            .expect("table statistics")
            .iter()
            .map(|r| (r.get(0), r.get(1), r.get(2)))
            .collect();
        assert_eq!(tables.len(), 3);
        for (table, scans, rows) in &tables {
            assert_eq!((*scans, *rows), (0, 0), "{table} read whole, after {after}");
        }
        let walked: Vec<(String, i64)> = client
            .query(
                "SELECT c.relname::text, pg_stat_get_xact_tuples_returned(c.oid) \
                   FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace \
                  WHERE n.nspname = 'big' AND c.relname LIKE '%\\_name\\_bytes'",
                &[],
            )
            .await
            .expect("index statistics")
            .iter()
            .map(|r| (r.get(0), r.get(1)))
            .collect();
        assert_eq!(walked.len(), 3);
        for (index, entries) in &walked {
            assert!(
                *entries <= BUDGET + 1,
                "{index}: {entries} entries for a page of {BUDGET}, after {after}"
            );
        }
        client.batch_execute("COMMIT").await.expect("commit");
        eprintln!("after {after}: {walked:?}");
        drop(client);
        let _ = driver.await;
    }
}

/// A schema as version 4 left it (no list(), no byte-order indexes), with
/// a lease held on it: the next broker migrates it to version 5, the lease
/// still held, and lists it; `leasehold migrate` finds nothing more to do.
#[tokio::test]
async fn a_schema_of_version_4_gains_the_listing() {
    let postgres = PostgresServer::start();
    let before = open(&postgres.url(), "old:", Duration::from_secs(5));
    let fence = grant(&before, &spec("kept", "t1", 60_000)).await;
    execute(
        &postgres.url(),
        "DROP FUNCTION old.list(text, text, integer);
         DROP FUNCTION old.prefix_end(text);
         DROP INDEX old.leases_name_bytes, old.permits_name_bytes, old.line_name_bytes;
         UPDATE old.leasehold_schema_version SET version = 4;",
    )
    .await;
    let url = postgres.url();
    let version = || {
        query_i64(
            &url,
            "SELECT max(version)::bigint FROM old.leasehold_schema_version",
        )
    };
    assert_eq!(version().await, 4);
    let after = open(&postgres.url(), "old:", Duration::from_secs(5));
    let page = after
        .list("", None, 10)
        .await
        .expect("list after the migration");
    assert_eq!(page.entries.len(), 1, "{page:?}");
    assert_eq!(page.entries[0].name, "kept");
    assert_eq!(
        page.entries[0].described.lease.as_ref().map(|l| l.fence),
        Some(fence)
    );
    assert_eq!(version().await, 5);
    assert_eq!(
        query_i64(
            &postgres.url(),
            "SELECT count(*) FROM pg_indexes WHERE schemaname = 'old' AND indexname LIKE '%name_bytes'"
        )
        .await,
        3
    );
    assert_eq!(
        after.renew("kept", "t1", None).await.unwrap(),
        Checked::Done(Renewed {
            ttl_ms: 60_000,
            fence
        })
    );
}
