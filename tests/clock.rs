//! The broker notices when the store's clock steps: a real redis-server runs
//! under libfaketime, and the test moves its wall clock while it runs (as
//! NTP stepping the Redis host's clock would). Each health ping reads Redis'
//! clock; a step beyond 1 s is counted once, in its direction.
//!
//! What a step does to leases and fences is in `tests/checker.rs`
//! (`redis_clock_step_back`, `redis_clock_step_forward`).

use leasehold_testkit as common;

use std::time::Duration;

use common::{eventually, sample, scrape, Broker, RedisServer};

/// How many times Redis has served `TIME` (the broker's health pings; no
/// script runs in these tests).
async fn time_calls(redis: &mut redis::aio::MultiplexedConnection) -> u64 {
    let info: String = redis::cmd("INFO")
        .arg("commandstats")
        .query_async(redis)
        .await
        .expect("INFO commandstats");
    info.lines()
        .find_map(|l| l.strip_prefix("cmdstat_time:calls="))
        .and_then(|rest| rest.split(',').next())
        .and_then(|n| n.parse().ok())
        .unwrap_or(0)
}

/// Waits until the broker has pinged (read the clock) `n` more times.
async fn pings(redis: &mut redis::aio::MultiplexedConnection, n: u64) {
    let start = time_calls(redis).await;
    eventually(Duration::from_secs(20), "health pings", || {
        let mut conn = redis.clone();
        async move { time_calls(&mut conn).await >= start + n }
    })
    .await;
}

/// The broker's count of clock steps in `direction`.
async fn jumps(broker: &Broker, direction: &str) -> f64 {
    let text = scrape(broker.metrics_addr).await;
    sample(
        &text,
        &format!("leasehold_store_clock_jumps_total{{direction=\"{direction}\"}}"),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_step_of_the_redis_clock_is_counted_once_in_its_direction() {
    let redis = RedisServer::start_faketime();
    let broker = Broker::start(&redis.url()).await;
    let mut conn = redis.connection().await;

    // Pings (every 100 ms) with a steady clock: no step.
    pings(&mut conn, 10).await;
    assert_eq!(jumps(&broker, "forward").await, 0.0);
    assert_eq!(jumps(&broker, "backward").await, 0.0);
    let offset = sample(
        &scrape(broker.metrics_addr).await,
        "leasehold_store_clock_offset_seconds",
    );
    assert!(offset.abs() < 1.0, "offset {offset} s with a true clock");

    // Ten seconds forward: one forward step, however many pings follow.
    redis.set_clock_offset(10);
    eventually(
        Duration::from_secs(20),
        "the forward step counted",
        || async { jumps(&broker, "forward").await >= 1.0 },
    )
    .await;
    pings(&mut conn, 10).await;
    assert_eq!(jumps(&broker, "forward").await, 1.0);
    assert_eq!(jumps(&broker, "backward").await, 0.0);
    let offset = sample(
        &scrape(broker.metrics_addr).await,
        "leasehold_store_clock_offset_seconds",
    );
    assert!(
        (9.0..11.0).contains(&offset),
        "offset {offset} s after +10 s"
    );

    // An hour back (from 10 s ahead): one backward step.
    redis.set_clock_offset(-3_600);
    eventually(
        Duration::from_secs(20),
        "the backward step counted",
        || async { jumps(&broker, "backward").await >= 1.0 },
    )
    .await;
    pings(&mut conn, 10).await;
    assert_eq!(jumps(&broker, "forward").await, 1.0);
    assert_eq!(jumps(&broker, "backward").await, 1.0);
}

/// The memory store has no clock apart from the broker's: nothing to
/// compare, nothing counted, and the series still exist.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_memory_store_reports_no_clock_steps() {
    let broker = Broker::start("memory").await;
    eventually(Duration::from_secs(10), "leasehold_store_up", || async {
        sample(&scrape(broker.metrics_addr).await, "leasehold_store_up") == 1.0
    })
    .await;
    assert_eq!(jumps(&broker, "forward").await, 0.0);
    assert_eq!(jumps(&broker, "backward").await, 0.0);
}

/// After the Redis clock steps back an hour, a dead holder's lease and a
/// dead broker's place in line still end within their own lifetimes (the
/// lease's TTL, the place's 3 s), counted from the first look after the
/// step, not an hour later: a lease never has more than its TTL left.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_backward_step_does_not_keep_a_dead_holder_for_the_step() {
    use leasehold_server::store::{Acquired, GrantSpec, Store, StoreOptions};
    let redis = RedisServer::start_faketime();
    let store = Store::open(
        &redis.url(),
        &StoreOptions::new("clk:", Duration::from_secs(2)),
    )
    .unwrap();
    let spec = |token: &str, queued: bool| GrantSpec {
        name: "dead".into(),
        token: token.into(),
        holder: token.into(),
        ttl_ms: 1_000,
        lock_delay_ms: 0,
        limit: 1,
        queued,
    };
    // A holder that will never renew, and a waiter whose broker dies (it
    // never calls again): both in place before the step.
    assert!(matches!(
        store.acquire(&spec("holder", false)).await.unwrap(),
        Acquired::Granted { .. }
    ));
    assert!(matches!(
        store.acquire(&spec("dead-waiter", true)).await.unwrap(),
        Acquired::Blocked(_)
    ));
    redis.set_clock_offset(-3_600);
    let stepped = std::time::Instant::now();
    let mut granted = None;
    while stepped.elapsed() < Duration::from_secs(15) {
        if let Acquired::Granted { .. } = store.acquire(&spec("live", true)).await.unwrap() {
            granted = Some(stepped.elapsed());
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let granted = granted.expect("still blocked 15 s after a 1 h step back");
    println!("granted {granted:?} after a 1 h step back");
    // The lease's TTL and the dead waiter's place (3 s) run from the first
    // look after the step, at the latest.
    assert!(
        granted < Duration::from_secs(8),
        "granted {granted:?} after the step"
    );
}
