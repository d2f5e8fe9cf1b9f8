//! Acquire that waits: woken by the release itself (across brokers) or at the
//! moment the lease expires, never by a polling interval; bounded by its
//! timeout; and leaving nothing held when its caller goes away.

use leasehold_testkit as common;

use std::time::{Duration, Instant};

use common::{
    acquire_req, brokers_on_each_store, eventually, local_waiters, must_acquire, Broker,
    PostgresServer, RedisServer,
};
use leasehold_server::proto::{DescribeRequest, ReleaseRequest};
use tonic::Code;

/// A waiter gets the lock right after the holder releases it, long before the
/// holder's TTL, on either store.
#[tokio::test]
async fn a_waiter_is_woken_by_the_release() {
    for (store, broker, _redis) in brokers_on_each_store().await {
        let mut holder = broker.client().await;
        let held = must_acquire(&mut holder, "w", 30_000).await;
        let mut waiter = broker.client().await;
        let waiting = tokio::spawn(async move {
            waiter
                .acquire(acquire_req("w", 10_000, "waiter", 20_000))
                .await
        });
        eventually(Duration::from_secs(5), "the waiter to wait", || {
            let mut c = holder.clone();
            async move { local_waiters(&mut c, "w").await == 1 }
        })
        .await;

        let released = Instant::now();
        holder
            .release(ReleaseRequest {
                name: "w".into(),
                owner_token: held.owner_token,
            })
            .await
            .unwrap();
        let granted = waiting
            .await
            .unwrap()
            .expect("the waiter gets the lock")
            .into_inner();
        let handoff = released.elapsed();
        assert!(
            handoff < Duration::from_secs(2),
            "{store}: handoff took {handoff:?} with 30 s left on the lease"
        );
        assert!(granted.lease.unwrap().fence > held.fence);
        assert!(granted.waited_ms > 0);
    }
}

/// A waiter on one broker is woken by a release made through another broker
/// on the same Redis.
#[tokio::test]
async fn a_release_on_one_broker_wakes_a_waiter_on_another() {
    let redis = RedisServer::start();
    release_on_one_broker_wakes_a_waiter_on_another(&redis.url()).await;
}

/// The same on PostgreSQL: the release's NOTIFY reaches the other broker's
/// LISTEN.
#[tokio::test]
async fn a_release_on_one_broker_wakes_a_waiter_on_another_on_postgres() {
    let postgres = PostgresServer::start();
    release_on_one_broker_wakes_a_waiter_on_another(&postgres.url()).await;
}

async fn release_on_one_broker_wakes_a_waiter_on_another(store: &str) {
    let (a, b) = (Broker::start(store).await, Broker::start(store).await);
    let mut holder = a.client().await;
    let held = must_acquire(&mut holder, "x", 30_000).await;
    let mut waiter = b.client().await;
    let mut observer = waiter.clone();
    let waiting = tokio::spawn(async move {
        waiter
            .acquire(acquire_req("x", 10_000, "waiter", 20_000))
            .await
    });
    eventually(Duration::from_secs(5), "the waiter to wait", || {
        let mut c = observer.clone();
        async move { local_waiters(&mut c, "x").await == 1 }
    })
    .await;
    let released = Instant::now();
    holder
        .release(ReleaseRequest {
            name: "x".into(),
            owner_token: held.owner_token,
        })
        .await
        .unwrap();
    waiting.await.unwrap().expect("granted");
    assert!(
        released.elapsed() < Duration::from_secs(2),
        "cross-broker handoff took {:?}",
        released.elapsed()
    );
    assert_eq!(local_waiters(&mut observer, "x").await, 0);
}

/// A holder that never releases: the waiter gets the lock when the lease
/// expires, not later.
#[tokio::test]
async fn a_waiter_is_woken_at_expiry() {
    for (store, broker, _redis) in brokers_on_each_store().await {
        let mut client = broker.client().await;
        let held = must_acquire(&mut client, "e", 1_000).await;
        let started = Instant::now();
        let granted = client
            .acquire(acquire_req("e", 10_000, "waiter", 10_000))
            .await
            .expect("granted at expiry")
            .into_inner();
        let waited = started.elapsed();
        assert!(
            waited >= Duration::from_millis(800),
            "{store}: granted after {waited:?}, before the 1 s lease could expire"
        );
        assert!(
            waited < Duration::from_millis(2_500),
            "{store}: granted {waited:?} after a 1 s lease"
        );
        assert!(granted.lease.unwrap().fence > held.fence);
    }
}

/// A wait that runs out fails with ABORTED and says who holds the lock.
#[tokio::test]
async fn a_wait_that_runs_out_is_aborted_with_the_holder_named() {
    for (store, broker, _redis) in brokers_on_each_store().await {
        let mut client = broker.client().await;
        client
            .acquire(acquire_req("t", 30_000, "pod-a", 0))
            .await
            .unwrap();
        let started = Instant::now();
        let status = client
            .acquire(acquire_req("t", 10_000, "pod-b", 300))
            .await
            .unwrap_err();
        let waited = started.elapsed();
        assert_eq!(status.code(), Code::Aborted, "{store}");
        assert!(
            status.message().contains("'pod-a'"),
            "{store}: {}",
            status.message()
        );
        assert!(
            waited >= Duration::from_millis(300) && waited < Duration::from_secs(3),
            "{store}: {waited:?}"
        );
        // Try-once is refused at once, with a hint to wait.
        let status = client
            .acquire(acquire_req("t", 10_000, "pod-b", 0))
            .await
            .unwrap_err();
        assert_eq!(status.code(), Code::Aborted);
        assert!(
            status.message().contains("set a wait to queue for it"),
            "{}",
            status.message()
        );
    }
}

/// A waiter whose call is cancelled stops waiting, and does not take the lock
/// when it is released afterwards.
#[tokio::test]
async fn a_cancelled_waiter_leaves_nothing_held() {
    for (store, broker, _redis) in brokers_on_each_store().await {
        let mut holder = broker.client().await;
        let held = must_acquire(&mut holder, "c", 30_000).await;

        let mut waiter = broker.client().await;
        let mut request = tonic::Request::new(acquire_req("c", 30_000, "impatient", 20_000));
        request.set_timeout(Duration::from_millis(300));
        let status = waiter.acquire(request).await.unwrap_err();
        assert!(
            matches!(status.code(), Code::DeadlineExceeded | Code::Cancelled),
            "{store}: {status:?}"
        );

        eventually(
            Duration::from_secs(5),
            "the cancelled waiter to leave",
            || {
                let mut c = holder.clone();
                async move { local_waiters(&mut c, "c").await == 0 }
            },
        )
        .await;
        holder
            .release(ReleaseRequest {
                name: "c".into(),
                owner_token: held.owner_token,
            })
            .await
            .unwrap();
        let d = holder
            .describe(DescribeRequest {
                name: "c".into(),
                ..Default::default()
            })
            .await
            .unwrap()
            .into_inner();
        assert!(
            !d.held,
            "{store}: the lock is held by {:?} after the only waiter left",
            d.holder
        );
    }
}

/// Waiters beyond --max-waiters are refused with RESOURCE_EXHAUSTED; the
/// others keep waiting.
#[tokio::test]
async fn waiters_beyond_the_limit_are_refused() {
    let broker = Broker::start_with("memory", |c| c.limits.max_waiters = 2).await;
    let mut client = broker.client().await;
    let held = must_acquire(&mut client, "m", 30_000).await;
    let mut waiters = Vec::new();
    for i in 0..2 {
        let mut c = client.clone();
        waiters.push(tokio::spawn(async move {
            c.acquire(acquire_req("m", 10_000, &format!("w{i}"), 20_000))
                .await
        }));
    }
    eventually(Duration::from_secs(5), "two waiters", || {
        let mut c = client.clone();
        async move { local_waiters(&mut c, "m").await == 2 }
    })
    .await;
    let status = client
        .acquire(acquire_req("m", 10_000, "w3", 20_000))
        .await
        .unwrap_err();
    assert_eq!(status.code(), Code::ResourceExhausted);
    assert!(
        status.message().contains("--max-waiters"),
        "{}",
        status.message()
    );

    // The two admitted waiters both get the lock in turn.
    client
        .release(ReleaseRequest {
            name: "m".into(),
            owner_token: held.owner_token,
        })
        .await
        .unwrap();
    let mut granted = 0;
    for w in waiters {
        if let Ok(Ok(Ok(r))) = tokio::time::timeout(Duration::from_secs(15), w).await {
            let lease = r.into_inner().lease.unwrap();
            client
                .release(ReleaseRequest {
                    name: lease.name,
                    owner_token: lease.owner_token,
                })
                .await
                .unwrap();
            granted += 1;
        }
    }
    assert_eq!(granted, 2);
}

/// Stopping a broker ends its waits with UNAVAILABLE, promptly.
#[tokio::test]
async fn shutdown_ends_waits_with_unavailable() {
    let broker = Broker::start("memory").await;
    let mut client = broker.client().await;
    must_acquire(&mut client, "s", 30_000).await;
    let mut waiter = client.clone();
    let waiting =
        tokio::spawn(async move { waiter.acquire(acquire_req("s", 10_000, "w", 60_000)).await });
    eventually(Duration::from_secs(5), "the waiter", || {
        let mut c = client.clone();
        async move { local_waiters(&mut c, "s").await == 1 }
    })
    .await;
    let stopping = Instant::now();
    tokio::time::timeout(Duration::from_secs(10), broker.stop())
        .await
        .expect("shutdown is not held up by the waiter")
        .expect("clean shutdown");
    assert!(stopping.elapsed() < Duration::from_secs(5));
    let status = waiting.await.unwrap().unwrap_err();
    assert_eq!(status.code(), Code::Unavailable, "{status:?}");
}

/// A line of waiters costs Redis O(log n) per waiter, not O(n): its scripts
/// never scan a list (no list command at all runs, from join to handoffs
/// to a waiter leaving), and a broker keeps the places of all its waiters
/// on a name with one script call a second, not one per waiter. Both fail
/// on the list-based line (each waiter's LPOS, an acquire per waiter per
/// second); neither assertion depends on how fast anything ran: the window
/// is two full refreshes of every place, seen in Redis.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_line_scans_nothing_and_is_refreshed_in_one_call_per_name() {
    const WAITERS: usize = 50;
    let redis = RedisServer::start();
    let broker = Broker::start(&redis.url()).await;
    let mut holder = broker.client().await;
    let held = must_acquire(&mut holder, "crowd", 60_000).await;
    let mut waiters = Vec::new();
    for i in 0..WAITERS {
        let mut client = broker.client().await;
        waiters.push(tokio::spawn(async move {
            let lease = client
                .acquire(acquire_req("crowd", 60_000, &format!("w{i}"), 120_000))
                .await?
                .into_inner()
                .lease
                .expect("a lease");
            client
                .release(ReleaseRequest {
                    name: lease.name,
                    owner_token: lease.owner_token,
                })
                .await?;
            Ok::<_, tonic::Status>(())
        }));
    }
    let all = u32::try_from(WAITERS).expect("50 waiters");
    eventually(Duration::from_secs(20), "every waiter in line", || {
        let mut c = holder.clone();
        async move { local_waiters(&mut c, "crowd").await == all }
    })
    .await;

    let mut conn = redis.connection().await;
    let deadlines = |conn: &mut redis::aio::MultiplexedConnection| {
        let mut conn = conn.clone();
        async move {
            let scores: Vec<(String, f64)> = redis::cmd("ZRANGE")
                .arg("test:{crowd}:until")
                .arg(0)
                .arg(-1)
                .arg("WITHSCORES")
                .query_async(&mut conn)
                .await
                .expect("ZRANGE");
            assert_eq!(scores.len(), WAITERS, "every waiter has a place");
            let earliest = scores.iter().map(|s| s.1).fold(f64::MAX, f64::min);
            let latest = scores.iter().map(|s| s.1).fold(f64::MIN, f64::max);
            (earliest, latest)
        }
    };
    let _: () = redis::cmd("CONFIG")
        .arg("RESETSTAT")
        .query_async(&mut conn)
        .await
        .unwrap();
    // Two full rounds: every place refreshed after the latest deadline
    // there was, twice.
    for round in 0..2 {
        let (_, latest) = deadlines(&mut conn).await;
        eventually(
            Duration::from_secs(10),
            &format!("refresh round {round} of every place"),
            || {
                let f = deadlines(&mut conn);
                async move { f.await.0 > latest }
            },
        )
        .await;
    }
    let stats = commandstats(&mut conn).await;
    let scripts = script_calls(&stats);
    println!("{scripts} script calls over two refreshes of {WAITERS} places\n{stats}");
    // The list-based line: an acquire per waiter per round, 100 at least.
    // Here: the refresh (one per round), the first in line's own look (one
    // a second), a few more at the edges of the window.
    assert!(
        scripts < WAITERS as u64 / 2,
        "{scripts} script calls for two refreshes of {WAITERS} places"
    );

    // Handoffs down the line, with a waiter leaving from the middle.
    waiters.remove(WAITERS / 2).abort();
    holder
        .release(ReleaseRequest {
            name: "crowd".into(),
            owner_token: held.owner_token,
        })
        .await
        .unwrap();
    for waiter in waiters {
        waiter.await.unwrap().expect("granted in turn");
    }
    let stats = commandstats(&mut conn).await;
    for list_command in ["lpos", "lrem", "lindex", "llen", "rpush", "lpop", "lrange"] {
        assert!(
            !stats.contains(&format!("cmdstat_{list_command}:")),
            "{list_command} ran:\n{stats}"
        );
    }
    assert!(stats.contains("cmdstat_zrank:"), "{stats}");
}

/// A caller joining the line of a name already waited for on its broker
/// costs one script run (its attempt, which takes its place), not two:
/// its watch is set up before that attempt (the channel is subscribed
/// already), so no second look is needed once it is up. Twenty waiters
/// join; the scripts Redis ran meanwhile are counted: 40 or more before
/// (an attempt, a watch, another attempt each), here 20 and the odd
/// refresh or first-in-line look (one a second each).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn joining_a_waited_line_costs_one_script_run() {
    const JOINING: usize = 20;
    let redis = RedisServer::start();
    let broker = Broker::start(&redis.url()).await;
    let mut holder = broker.client().await;
    let held = must_acquire(&mut holder, "busy", 60_000).await;
    let mut first = broker.client().await;
    let mut waiters = vec![tokio::spawn(async move {
        first
            .acquire(acquire_req("busy", 60_000, "first", 120_000))
            .await
            .map(|_| ())
    })];
    eventually(Duration::from_secs(10), "the first waiter in line", || {
        let mut c = holder.clone();
        async move { local_waiters(&mut c, "busy").await == 1 }
    })
    .await;

    let mut conn = redis.connection().await;
    let _: () = redis::cmd("CONFIG")
        .arg("RESETSTAT")
        .query_async(&mut conn)
        .await
        .unwrap();
    for i in 0..JOINING {
        let mut client = broker.client().await;
        waiters.push(tokio::spawn(async move {
            client
                .acquire(acquire_req("busy", 60_000, &format!("w{i}"), 120_000))
                .await
                .map(|_| ())
        }));
    }
    let all = u32::try_from(JOINING).expect("20 waiters") + 1;
    eventually(Duration::from_secs(10), "every waiter in line", || {
        let mut c = holder.clone();
        async move { local_waiters(&mut c, "busy").await == all }
    })
    .await;
    let stats = commandstats(&mut conn).await;
    let scripts = script_calls(&stats);
    println!("{scripts} script calls for {JOINING} waiters joining a waited line");
    assert!(
        (JOINING as u64..JOINING as u64 + 6).contains(&scripts),
        "{scripts} script calls for {JOINING} waiters joining"
    );
    for waiter in &waiters {
        waiter.abort();
    }
    holder
        .release(ReleaseRequest {
            name: "busy".into(),
            owner_token: held.owner_token,
        })
        .await
        .unwrap();
}

/// The scripts Redis ran (FCALL of the broker's functions, EVALSHA and EVAL
/// calls), from INFO commandstats.
fn script_calls(stats: &str) -> u64 {
    let calls = |command: &str| {
        stats
            .lines()
            .find_map(|l| l.strip_prefix(&format!("cmdstat_{command}:calls=")))
            .and_then(|rest| rest.split(',').next())
            .map_or(0, |n| n.parse::<u64>().unwrap())
    };
    calls("fcall") + calls("evalsha") + calls("eval")
}

async fn commandstats(conn: &mut redis::aio::MultiplexedConnection) -> String {
    redis::cmd("INFO")
        .arg("commandstats")
        .query_async(conn)
        .await
        .unwrap()
}

/// The wake-up at expiry is driven by the expiry itself, not by a periodic
/// timer (the line's refresh runs every second): a holder renews its 1.5 s
/// lease a few times after the waiter queued (so the waiter's first
/// estimate of the expiry goes stale, as with a real holder's heartbeats)
/// and is then left to expire; the waiter is granted within a bound of the
/// expiry as the store has it (the lease's `e` field, read in Redis after
/// the last renewal; the grant's time is the new lease's `g`, same clock),
/// 20 times in a row. The bound is far below the refresh period and
/// generous for a loaded 2-core machine; the margins are printed.
#[tokio::test]
async fn a_waiter_is_granted_at_the_expiry_not_at_a_refresh() {
    const ROUNDS: usize = 20;
    const BOUND_MS: i64 = 250;
    let redis = RedisServer::start();
    let broker = Broker::start(&redis.url()).await;
    let mut conn = redis.connection().await;
    let mut client = broker.client().await;
    let mut store_late = Vec::new();
    let mut seen_late = Vec::new();
    for round in 0..ROUNDS {
        let name = format!("expiry/{round}");
        let key = leasehold_server::store::lease_key("test:", &name);
        let held = must_acquire(&mut client, &name, 1_500).await;
        let mut expiry = holder_expiry(&mut conn, &key, &held.owner_token)
            .await
            .expect("the holder's lease");
        let mut waiter = client.clone();
        let request = acquire_req(&name, 10_000, "waiter", 10_000);
        let waiting = tokio::spawn(async move {
            let granted = waiter.acquire(request).await;
            (wall_ms(), granted)
        });
        eventually(Duration::from_secs(5), "the waiter to wait", || {
            let mut c = client.clone();
            let name = name.clone();
            async move { local_waiters(&mut c, &name).await == 1 }
        })
        .await;
        // 0 to 2 renewals, 200 to 500 ms apart: the holder dies at a
        // different point of its heartbeat in each round. (On a machine so
        // slow that the lease ran out first, the renewal is refused and the
        // expiry read before it stands.)
        for _ in 0..round % 3 {
            tokio::time::sleep(Duration::from_millis(200 + 100 * (round as u64 % 4))).await;
            let renewed = client
                .renew(leasehold_server::proto::RenewRequest {
                    name: name.clone(),
                    owner_token: held.owner_token.clone(),
                    ttl_ms: 0,
                    ..Default::default()
                })
                .await;
            match (
                renewed,
                holder_expiry(&mut conn, &key, &held.owner_token).await,
            ) {
                (Ok(_), Some(renewed)) => expiry = renewed,
                _ => break,
            }
        }
        let (seen, granted) = waiting.await.unwrap();
        let granted = granted.expect("granted at the expiry").into_inner();
        let lease = granted.lease.expect("a lease");
        assert!(lease.fence > held.fence);
        let granted_at = leasehold_server::store::read_record(&mut conn, &key)
            .await
            .unwrap()
            .expect("the new lease's record")
            .granted_ms;
        assert!(
            granted_at >= expiry,
            "round {round}: granted at {granted_at}, before the expiry {expiry}"
        );
        store_late.push(granted_at - expiry);
        seen_late.push(seen - expiry);
        assert!(
            seen - expiry < BOUND_MS,
            "round {round}: granted {} ms after the expiry (store: {} ms); \
             the wake-up is not driven by the expiry",
            seen - expiry,
            granted_at - expiry
        );
        client
            .release(ReleaseRequest {
                name: name.clone(),
                owner_token: lease.owner_token,
            })
            .await
            .unwrap();
    }
    let summary = |v: &mut Vec<i64>| {
        v.sort();
        format!(
            "min {} / median {} / max {} ms",
            v[0],
            v[v.len() / 2],
            v[v.len() - 1]
        )
    };
    println!(
        "expiry -> grant over {ROUNDS} rounds: in the store {}; at the caller {}",
        summary(&mut store_late),
        summary(&mut seen_late)
    );
}

/// The expiry (ms, Redis clock) of the lease at `key` while `token` holds
/// it.
async fn holder_expiry(
    conn: &mut redis::aio::MultiplexedConnection,
    key: &str,
    token: &str,
) -> Option<i64> {
    leasehold_server::store::read_record(conn, key)
        .await
        .unwrap()
        .filter(|r| r.owner == token)
        .map(|r| r.expiry_ms)
}

/// Now on the wall clock (which Redis' TIME reads too), in ms.
fn wall_ms() -> i64 {
    let since_1970 = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .expect("after 1970");
    i64::try_from(since_1970.as_millis()).expect("the wall clock in ms fits an i64")
}
