//! Fences never go backwards, whatever the clocks do while Redis keeps its
//! data (a counter), and even when Redis forgets everything (the clock and
//! the broker's floor); and every key of a name expires by itself.

use leasehold_testkit as common;

use std::time::Duration;

use common::{must_acquire, Broker, RedisServer};
use leasehold_server::{
    proto::ReleaseRequest,
    store::{lease_key, Acquired, Checked, GrantSpec, Store, StoreOptions, SCRIPTS},
};
use redis::AsyncCommands;

fn spec(name: &str, token: &str) -> GrantSpec {
    GrantSpec {
        name: name.into(),
        token: token.into(),
        holder: "h".into(),
        ttl_ms: 10_000,
        lock_delay_ms: 0,
        limit: 1,
        queued: false,
    }
}

async fn grant(store: &Store, name: &str, token: &str) -> u64 {
    match store.acquire(&spec(name, token)).await.unwrap() {
        Acquired::Granted { fence, .. } => fence,
        held @ Acquired::Blocked(_) => panic!("{name} held: {held:?}"),
    }
}

/// Writes a 10-second lease with `token` and `fence` straight into Redis, as
/// acquire.lua would (fields documented there).
async fn plant(conn: &mut redis::aio::MultiplexedConnection, key: &str, token: &str, fence: u64) {
    let now_ms = common::unix_ms();
    let fields = [
        ("o", token.to_owned()),
        ("f", fence.to_string()),
        ("h", "h".to_owned()),
        ("t", "10000".to_owned()),
        ("g", now_ms.to_string()),
        ("e", (now_ms + 10_000).to_string()),
        ("d", "0".to_owned()),
    ];
    let _: () = conn.hset_multiple(key, &fields).await.unwrap();
    let _: () = conn.pexpire(key, 10_000).await.unwrap();
}

/// Every Lua script is valid and loads into a real Redis.
#[tokio::test]
async fn every_script_loads_into_redis() {
    let redis = RedisServer::start();
    let mut conn = redis.connection().await;
    for &(file, source) in SCRIPTS.iter() {
        let sha: String = redis::cmd("SCRIPT")
            .arg("LOAD")
            .arg(source)
            .query_async(&mut conn)
            .await
            .unwrap_or_else(|e| panic!("{file} does not load: {e}"));
        assert_eq!(sha.len(), 40, "{file}");
    }
}

/// Redis restarted empty: the next fence of an old name is above every fence
/// issued before, from a broker that remembers them and from a fresh one.
#[tokio::test]
async fn fences_survive_a_redis_restart_that_lost_all_data() {
    let mut redis = RedisServer::start();
    let broker = Broker::start(&redis.url()).await;
    let mut client = broker.client().await;
    let mut highest = 0;
    for _ in 0..20 {
        let lease = must_acquire(&mut client, "jobs/nightly", 10_000).await;
        assert!(lease.fence > highest);
        highest = lease.fence;
        client
            .release(ReleaseRequest {
                name: lease.name,
                owner_token: lease.owner_token,
            })
            .await
            .unwrap();
    }
    // Leave one lease held at the restart too.
    let held = must_acquire(&mut client, "jobs/nightly", 10_000).await;
    highest = highest.max(held.fence);

    redis.restart();
    let mut conn = redis.connection().await;
    let keys: usize = redis::cmd("DBSIZE").query_async(&mut conn).await.unwrap();
    assert_eq!(keys, 0, "the restarted Redis is empty");

    // A broker that never saw the old fences (its floor is 0)...
    let fresh = Broker::start(&redis.url()).await;
    let lease = must_acquire(&mut fresh.client().await, "jobs/nightly", 10_000).await;
    assert!(
        lease.fence > highest,
        "fresh broker: fence {} after {highest}",
        lease.fence
    );
    let after_fresh = lease.fence;
    drop(fresh);

    // ...and the old broker, which reconnects by itself (the name is freed
    // from outside so that it can be granted again).
    let _: () = conn.del(lease_key("test:", "jobs/nightly")).await.unwrap();
    let lease = must_acquire(&mut client, "jobs/nightly", 10_000).await;
    assert!(lease.fence > after_fresh);
}

/// FLUSHALL has the same effect as a restart: fences keep increasing.
#[tokio::test]
async fn fences_survive_flushall() {
    let redis = RedisServer::start();
    let store = Store::open(
        &redis.url(),
        &StoreOptions::new("f:", Duration::from_secs(2)),
    )
    .unwrap();
    let before = grant(&store, "x", "t1").await;
    let mut conn = redis.connection().await;
    let _: () = redis::cmd("FLUSHALL").query_async(&mut conn).await.unwrap();
    let fresh = Store::open(
        &redis.url(),
        &StoreOptions::new("f:", Duration::from_secs(2)),
    )
    .unwrap();
    assert!(grant(&fresh, "x", "t2").await > before);
}

/// A broker's floor keeps fences increasing even if the store's clock is
/// behind the fences it issued (here: a fence planted far in the future).
#[tokio::test]
async fn the_broker_floor_outranks_a_clock_that_fell_behind() {
    let redis = RedisServer::start();
    let store = Store::open(
        &redis.url(),
        &StoreOptions::new("f:", Duration::from_secs(2)),
    )
    .unwrap();
    let future_fence: u64 = 1 << 52; // ~ year 2112 in µs
    let mut conn = redis.connection().await;
    plant(&mut conn, &lease_key("f:", "planted"), "x", future_fence).await;
    // The broker sees the planted fence...
    assert_eq!(
        store
            .describe("planted")
            .await
            .unwrap()
            .lease
            .unwrap()
            .fence,
        future_fence
    );
    // ...so a never-used name gets a fence above it, clock or not.
    assert!(grant(&store, "other", "t1").await > future_fence);
}

/// Fences come from the store's counter: with the counter far ahead of the
/// clock (fences issued before the Redis clock stepped back by days), a
/// broker that remembers nothing (floor 0) still continues from it, one by
/// one, for every name.
#[tokio::test]
async fn fences_come_from_the_counter_whatever_the_clock_says() {
    let redis = RedisServer::start();
    let mut conn = redis.connection().await;
    let now_us = common::unix_us();
    let counter = now_us + 1_000_000_000_000; // 11.6 days ahead of the clock
    let _: () = conn.set("f:fences", counter).await.unwrap();
    let fresh = || {
        Store::open(
            &redis.url(),
            &StoreOptions::new("f:", Duration::from_secs(2)),
        )
        .unwrap()
    };
    let store = fresh();
    assert_eq!(grant(&store, "x", "t1").await, counter + 1);
    assert_eq!(store.release("x", "t1").await.unwrap(), Checked::Done(()));
    assert_eq!(grant(&fresh(), "x", "t2").await, counter + 2);
    assert_eq!(grant(&fresh(), "other", "t3").await, counter + 3);
    let permit = GrantSpec {
        limit: 3,
        ..spec("sem", "t4")
    };
    assert_eq!(
        fresh().acquire(&permit).await.unwrap(),
        Acquired::Granted {
            fence: counter + 4,
            expired: 0
        }
    );
    let stored: u64 = conn.get("f:fences").await.unwrap();
    assert_eq!(stored, counter + 4);
}

/// Upgrading from brokers that issued fences before the counter existed: a
/// name's stored fence (even one ahead of the clock) is exceeded by its
/// first fence from the counter.
#[tokio::test]
async fn the_first_fence_from_the_counter_is_above_the_old_ones() {
    let redis = RedisServer::start();
    let store = Store::open(
        &redis.url(),
        &StoreOptions::new("f:", Duration::from_secs(2)),
    )
    .unwrap();
    let mut conn = redis.connection().await;
    let now_us = common::unix_us();
    let ahead = now_us + 5_000_000;
    // An old-style tombstone: just the fence, left by a release.
    let key = lease_key("f:", "t");
    let _: () = conn.hset(&key, "f", ahead).await.unwrap();
    let _: () = conn.pexpire(&key, 10_000).await.unwrap();
    let exists: bool = conn.exists("f:fences").await.unwrap();
    assert!(!exists, "no counter yet");
    assert!(grant(&store, "t", "next").await > ahead);
}

/// Every key Redis holds for a name expires by itself: a lease's hash lives
/// at most its TTL (plus lock-delay) plus the 10 s during which its holder
/// can still learn how it ended, and a released lease only those 10 s,
/// whatever its TTL (its hash goes, the release is recorded for its token);
/// the fence counter is the one key that stays (one per Redis, or per
/// Cluster slot), whatever the number of names.
#[tokio::test]
async fn every_key_but_the_fence_counter_expires() {
    let redis = RedisServer::start();
    let store = Store::open(
        &redis.url(),
        &StoreOptions::new("f:", Duration::from_secs(2)),
    )
    .unwrap();
    let mut conn = redis.connection().await;
    for i in 0..2_000 {
        let name = format!("job-{i}");
        let hour = GrantSpec {
            ttl_ms: 3_600_000,
            ..spec(&name, "tok")
        };
        assert!(matches!(
            store.acquire(&hour).await.unwrap(),
            Acquired::Granted { .. }
        ));
        assert_eq!(
            store.release(&name, "tok").await.unwrap(),
            Checked::Done(())
        );
    }
    for i in 0..500 {
        store
            .acquire(&GrantSpec {
                ttl_ms: 100,
                ..spec(&format!("short-{i}"), "tok")
            })
            .await
            .unwrap();
    }
    // On a loaded machine the loop above can outlast the 10 s linger: the
    // first release records are then gone already (expired, as they should),
    // before KEYS or between KEYS and PTTL (-2). Never more keys than these,
    // and the latest ones are still there.
    let keys: Vec<String> = conn.keys("*").await.unwrap();
    assert!(keys.len() <= 2_000 + 500 + 1, "{} keys", keys.len());
    assert!(keys.len() > 500, "only {} keys", keys.len());
    assert!(keys.iter().any(|k| k == "f:fences"), "the counter stays");
    for key in keys {
        let pttl: i64 = conn.pttl(&key).await.unwrap();
        if key == "f:fences" {
            assert_eq!(pttl, -1, "the counter stays");
        } else if key.starts_with("f:{job-") {
            // The one-hour leases released at once: their release record.
            assert!(
                pttl == -2 || (pttl > 0 && pttl <= 10_000),
                "{key} lives {pttl} ms"
            );
        } else {
            assert!(
                pttl == -2 || (pttl > 0 && pttl <= 100 + 10_000),
                "{key} lives {pttl} ms"
            );
        }
    }
}
