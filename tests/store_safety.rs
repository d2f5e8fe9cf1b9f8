//! A store set up so that it may lose leases is never served silently: a
//! Redis that evicts keys, or a PostgreSQL that commits asynchronously, is
//! refused (NOT_SERVING, calls UNAVAILABLE naming the setting and the flag)
//! under `--store-unsafe=refuse`, the default, or served with a warning
//! under `warn`, and exported either way; fixing the setting recovers at
//! the next health ping, with no restart. A store that answers but takes
//! no writes (a Redis replica, a PostgreSQL standby or a server set
//! read-only) is NOT_SERVING with `leasehold_store_up 0` until it takes
//! writes again.

use leasehold_testkit as common;

use std::time::Duration;

use common::{acquire_req, must_acquire, sample, scrape, Broker, PostgresServer, RedisServer};
use leasehold_server::proto::leasehold_service_client::LeaseholdServiceClient;
use tonic::{transport::Channel, Code};
use tonic_health::pb::{
    health_check_response::ServingStatus, health_client::HealthClient, HealthCheckRequest,
};

const POLICY: &str = "leasehold_store_unsafe{setting=\"maxmemory-policy\"}";
const SYNC_COMMIT: &str = "leasehold_store_unsafe{setting=\"synchronous_commit\"}";
const UP: &str = "leasehold_store_up";

/// Follows the broker's health (service "") until it reports `want`, for at
/// most 15 s (the brokers here ping every 100 ms).
async fn await_health(broker: &Broker, want: ServingStatus) {
    let mut stream = HealthClient::new(broker.channel().await)
        .watch(HealthCheckRequest {
            service: String::new(),
        })
        .await
        .expect("health watch")
        .into_inner();
    common::await_health(&mut stream, want).await;
}

/// An Acquire's refusal: UNAVAILABLE, its message.
async fn refused(client: &mut LeaseholdServiceClient<Channel>, name: &str) -> String {
    let status = client
        .acquire(acquire_req(name, 10_000, "t", 0))
        .await
        .expect_err("an Acquire on a refused store");
    assert_eq!(status.code(), Code::Unavailable, "{status:?}");
    status.message().to_owned()
}

/// A Redis evicting leases (`maxmemory 100mb`, `volatile-lru`, as managed
/// services default to) from the start is refused by default: NOT_SERVING,
/// Acquire UNAVAILABLE naming maxmemory-policy and --store-unsafe, the
/// metric at 1 while the store is up; `CONFIG SET maxmemory-policy
/// noeviction` makes it SERVING again and its calls succeed.
#[tokio::test]
async fn an_evicting_redis_is_refused_until_its_policy_is_fixed() {
    let redis = RedisServer::start();
    redis.set_eviction(Some("volatile-lru")).await;
    let broker = Broker::start(&redis.url()).await;
    let mut client = broker.client().await;
    await_health(&broker, ServingStatus::NotServing).await;
    let message = refused(&mut client, "a").await;
    assert!(
        message.contains("maxmemory-policy is volatile-lru")
            && message.contains("noeviction")
            && message.contains("--store-unsafe"),
        "{message}"
    );
    let metrics = scrape(broker.metrics_addr).await;
    assert_eq!(sample(&metrics, POLICY), 1.0);
    assert_eq!(sample(&metrics, UP), 1.0, "the store is up, only refused");
    let mut conn = redis.connection().await;
    let keys: Vec<String> = redis::cmd("KEYS")
        .arg("*")
        .query_async(&mut conn)
        .await
        .expect("KEYS");
    assert!(keys.is_empty(), "a refused call wrote {keys:?}");

    redis.set_eviction(None).await;
    await_health(&broker, ServingStatus::Serving).await;
    must_acquire(&mut client, "a", 10_000).await;
    assert_eq!(sample(&scrape(broker.metrics_addr).await, POLICY), 0.0);
}

/// A policy turned evicting while the broker serves (`allkeys-lru`, which
/// evicts the fence counters too) is refused from the next ping on, and
/// lifted at the one after the fix; a memory limit of 0 with an evicting
/// policy evicts nothing and is served.
#[tokio::test]
async fn a_policy_made_unsafe_at_run_time_is_refused_at_the_next_ping() {
    let redis = RedisServer::start();
    {
        // No limit: nothing is evicted, whatever the policy.
        let mut conn = redis.connection().await;
        let () = redis::cmd("CONFIG")
            .arg("SET")
            .arg("maxmemory-policy")
            .arg("volatile-lru")
            .query_async(&mut conn)
            .await
            .expect("CONFIG SET");
    }
    let broker = Broker::start(&redis.url()).await;
    let mut client = broker.client().await;
    await_health(&broker, ServingStatus::Serving).await;
    must_acquire(&mut client, "before", 10_000).await;
    assert_eq!(sample(&scrape(broker.metrics_addr).await, POLICY), 0.0);

    redis.set_eviction(Some("allkeys-lru")).await;
    await_health(&broker, ServingStatus::NotServing).await;
    let message = refused(&mut client, "during").await;
    assert!(message.contains("allkeys-lru"), "{message}");
    assert_eq!(sample(&scrape(broker.metrics_addr).await, POLICY), 1.0);

    redis.set_eviction(None).await;
    await_health(&broker, ServingStatus::Serving).await;
    must_acquire(&mut client, "after", 10_000).await;
}

/// `--store-unsafe=warn` serves an evicting Redis, and says so: the metric
/// at 1 and a warning in the log naming the setting.
#[tokio::test]
async fn warn_mode_serves_an_evicting_redis_and_says_so() {
    let redis = RedisServer::start();
    redis.set_eviction(Some("volatile-lru")).await;
    let log = std::env::temp_dir().join(format!(
        "leasehold-store-safety-{}-{}.log",
        std::process::id(),
        common::free_port()
    ));
    let broker = common::BrokerProcess::start_logged(
        &redis.url(),
        &["--store-unsafe", "warn", "--health-interval", "100ms"],
        Some(&log),
    )
    .await;
    let mut client = broker.client().await;
    common::eventually(Duration::from_secs(15), "the metric at 1", || async {
        scrape(broker.metrics_addr)
            .await
            .contains(&format!("{POLICY} 1"))
    })
    .await;
    must_acquire(&mut client, "served", 10_000).await;
    common::eventually(Duration::from_secs(15), "the warning logged", || async {
        std::fs::read_to_string(&log).is_ok_and(|text| {
            text.lines().any(|l| {
                l.contains("WARN")
                    && l.contains("maxmemory-policy is volatile-lru")
                    && l.contains("--store-unsafe=warn")
            })
        })
    })
    .await;
    drop(broker);
    let _ = std::fs::remove_file(&log);
}

/// The memory store and a Redis with no memory limit are served in the
/// default mode; Redis without an append-only file (the harness's, a
/// cache's) is reported not durable, never refused.
#[tokio::test]
async fn a_store_that_only_loses_leases_at_a_crash_is_reported_not_refused() {
    let redis = RedisServer::start();
    let broker = Broker::start(&redis.url()).await;
    let mut client = broker.client().await;
    await_health(&broker, ServingStatus::Serving).await;
    must_acquire(&mut client, "a", 10_000).await;
    let metrics = scrape(broker.metrics_addr).await;
    assert_eq!(sample(&metrics, POLICY), 0.0);
    assert_eq!(
        sample(
            &metrics,
            "leasehold_store_not_durable{setting=\"appendonly\"}"
        ),
        1.0
    );
    let memory = Broker::start("memory").await;
    must_acquire(&mut memory.client().await, "a", 10_000).await;
    let metrics = scrape(memory.metrics_addr).await;
    assert_eq!(
        sample(
            &metrics,
            "leasehold_store_not_durable{setting=\"appendonly\"}"
        ),
        0.0
    );
}

/// A broker pointed at a Redis replica (which takes no writes) is
/// NOT_SERVING with `leasehold_store_up 0`, its calls UNAVAILABLE.
#[tokio::test]
async fn a_redis_replica_is_not_serving() {
    let primary = RedisServer::start();
    let replica = RedisServer::start_replica_of(&primary);
    let broker = Broker::start(&replica.url()).await;
    await_health(&broker, ServingStatus::NotServing).await;
    assert_eq!(sample(&scrape(broker.metrics_addr).await, UP), 0.0);
    let status = broker
        .client()
        .await
        .acquire(acquire_req("a", 10_000, "t", 0))
        .await
        .expect_err("an Acquire on a replica");
    assert_eq!(status.code(), Code::Unavailable, "{status:?}");
}

/// A PostgreSQL primary set read-only (default_transaction_read_only, as a
/// failover may leave the old primary) makes the broker NOT_SERVING with
/// `leasehold_store_up 0` while every grant would fail, and SERVING again
/// once it takes writes.
#[tokio::test]
async fn a_postgres_set_read_only_is_not_serving_until_it_takes_writes_again() {
    let postgres = PostgresServer::start();
    let broker = Broker::start(&postgres.url()).await;
    let mut client = broker.client().await;
    await_health(&broker, ServingStatus::Serving).await;
    must_acquire(&mut client, "before", 10_000).await;

    postgres
        .psql(&[
            "ALTER SYSTEM SET default_transaction_read_only = on",
            "SELECT pg_reload_conf()",
        ])
        .await;
    await_health(&broker, ServingStatus::NotServing).await;
    assert_eq!(sample(&scrape(broker.metrics_addr).await, UP), 0.0);
    let message = refused(&mut client, "during").await;
    assert!(message.contains("takes no writes"), "{message}");

    postgres
        .psql(&[
            "ALTER SYSTEM RESET default_transaction_read_only",
            "SELECT pg_reload_conf()",
        ])
        .await;
    await_health(&broker, ServingStatus::Serving).await;
    assert_eq!(sample(&scrape(broker.metrics_addr).await, UP), 1.0);
    must_acquire(&mut client, "after", 10_000).await;
}

/// A broker pointed at a PostgreSQL standby is NOT_SERVING with
/// `leasehold_store_up 0`, its calls UNAVAILABLE saying the server takes
/// no writes.
#[tokio::test]
async fn a_postgres_standby_is_not_serving() {
    let primary = PostgresServer::start();
    // The schema made on the primary, so that the standby has it.
    let on_primary = Broker::start(&primary.url()).await;
    await_health(&on_primary, ServingStatus::Serving).await;
    must_acquire(&mut on_primary.client().await, "a", 10_000).await;
    let standby = primary.start_standby(false).await;
    let broker = Broker::start(&standby.url()).await;
    await_health(&broker, ServingStatus::NotServing).await;
    assert_eq!(sample(&scrape(broker.metrics_addr).await, UP), 0.0);
    let message = refused(&mut broker.client().await, "b").await;
    assert!(message.contains("takes no writes"), "{message}");
}

/// A PostgreSQL whose default is to commit asynchronously
/// (synchronous_commit = off: a crash loses acknowledged grants) is served
/// safely: the broker raises the setting in its own sessions, and the
/// check, read in one of those sessions, finds nothing unsafe (metric 0),
/// before and after the default is reset. (The refusal stays as a
/// backstop for a session the raise did not reach.)
#[tokio::test]
async fn an_asynchronously_committing_postgres_default_is_overridden() {
    let postgres = PostgresServer::start();
    postgres
        .psql(&[
            "ALTER SYSTEM SET synchronous_commit = off",
            "SELECT pg_reload_conf()",
        ])
        .await;
    let broker = Broker::start(&postgres.url()).await;
    let mut client = broker.client().await;
    await_health(&broker, ServingStatus::Serving).await;
    must_acquire(&mut client, "a", 10_000).await;
    assert_eq!(sample(&scrape(broker.metrics_addr).await, SYNC_COMMIT), 0.0);
    postgres
        .psql(&[
            "ALTER SYSTEM RESET synchronous_commit",
            "SELECT pg_reload_conf()",
        ])
        .await;
    must_acquire(&mut client, "b", 10_000).await;
    assert_eq!(sample(&scrape(broker.metrics_addr).await, SYNC_COMMIT), 0.0);
}
