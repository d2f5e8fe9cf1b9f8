//! Grants nobody heard of (issue 14, item 3): an Acquire whose store call
//! timed out gets UNAVAILABLE, yet the script may have run in Redis and
//! granted the lock to a token nobody knows. The broker releases that token
//! as soon as Redis answers again, instead of leaving the lock held for its
//! TTL. Against a real Redis made slow by `DEBUG SLEEP`, or behind a proxy
//! that lets requests through and holds the answers back, or holds the
//! requests back (issue 26, item 4: on PostgreSQL, a grant that reaches the
//! server after its call gave up must not happen at all, since the release
//! went on another connection and found nothing).

use leasehold_testkit as common;

use std::time::Duration;

use common::{
    acquire_req, must_acquire, proxy::Proxy, scrape, Broker, PostgresServer, RedisServer,
};
use leasehold_server::proto::{
    leasehold_service_client::LeaseholdServiceClient, DescribeRequest, ReleaseRequest,
};
use tokio::time::Instant;
use tonic::{transport::Channel, Code};

/// The broker's store timeout here (the default is 1 s): short, so that
/// Redis can be made to miss it for a while.
const STORE_TIMEOUT: Duration = Duration::from_millis(500);

/// TTL of the lost grants: far longer than any test, so a lock found free
/// was released, not expired.
const TTL_MS: u64 = 60_000;

/// The holder label of `name`'s lease, if held.
async fn holder(client: &mut LeaseholdServiceClient<Channel>, name: &str) -> Option<String> {
    let described = client
        .describe(DescribeRequest {
            name: name.into(),
            ..Default::default()
        })
        .await
        .expect("describe")
        .into_inner();
    described.held.then_some(described.holder)
}

/// Waits until `name` is free, failing past `deadline`; returns when it
/// was seen free.
async fn free_by(
    client: &mut LeaseholdServiceClient<Channel>,
    name: &str,
    deadline: Instant,
) -> Instant {
    loop {
        if holder(client, name).await.is_none() {
            return Instant::now();
        }
        assert!(
            Instant::now() < deadline,
            "'{name}' is still held {:?} past the deadline: the lost grant was not released",
            Instant::now() - deadline
        );
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

/// `leasehold_orphans_released_total` of a broker.
async fn orphans_released(broker: &Broker) -> f64 {
    common::sample(
        &scrape(broker.metrics_addr).await,
        "leasehold_orphans_released_total",
    )
}

async fn broker_on(url: &str) -> Broker {
    Broker::start_with(url, |c| c.store_timeout = STORE_TIMEOUT).await
}

/// A Redis, a proxy in front of it, a broker reaching Redis through the
/// proxy (whose traffic a test holds back), and an observer broker on
/// Redis directly (which sees what Redis really holds).
async fn behind_a_proxy() -> (RedisServer, Proxy, Broker, Broker) {
    let redis = RedisServer::start();
    let proxy = Proxy::start(format!("127.0.0.1:{}", redis.port()).parse().unwrap()).await;
    let broker = broker_on(&format!("redis://{}/", proxy.addr())).await;
    let observer = Broker::start(&redis.url()).await;
    (redis, proxy, broker, observer)
}

/// Redis stalls (`DEBUG SLEEP 2`, longer than the store timeout) while an
/// Acquire is sent: the caller gets UNAVAILABLE, Redis grants when it wakes,
/// and the broker releases that grant within the store timeout + 1 s of
/// Redis answering again.
#[tokio::test]
async fn a_grant_made_after_its_call_timed_out_is_released_when_redis_answers() {
    let redis = RedisServer::start_debuggable();
    let broker = broker_on(&redis.url()).await;
    let mut client = broker.client().await;
    // Scripts loaded and connections up before Redis sleeps.
    must_acquire(&mut client, "warm-up", TTL_MS).await;

    // Without a response timeout: its answer comes after the sleep.
    let mut sleeper = redis::Client::open(redis.url())
        .unwrap()
        .get_multiplexed_async_connection_with_config(
            &redis::AsyncConnectionConfig::new().set_response_timeout(None),
        )
        .await
        .expect("connect to the test redis");
    let probe = redis.connection().await;
    let asleep = tokio::spawn(async move {
        redis::cmd("DEBUG")
            .arg("SLEEP")
            .arg(2)
            .query_async::<()>(&mut sleeper)
            .await
            .expect("DEBUG SLEEP");
        // Its answer: the moment Redis answers again.
        Instant::now()
    });
    // Asleep once a PING goes unanswered (Redis runs one command at a time).
    common::eventually(Duration::from_secs(5), "Redis asleep", || {
        let ping = redis::cmd("PING");
        let mut probe = probe.clone();
        async move {
            tokio::time::timeout(
                Duration::from_millis(100),
                ping.query_async::<()>(&mut probe),
            )
            .await
            .is_err()
        }
    })
    .await;

    let status = client
        .acquire(acquire_req("stalled", TTL_MS, "lost", 0))
        .await
        .expect_err("Redis is asleep past the store timeout");
    assert_eq!(status.code(), Code::Unavailable, "{status:?}");

    let answering = asleep.await.unwrap();
    let free = free_by(
        &mut client,
        "stalled",
        answering + STORE_TIMEOUT + Duration::from_secs(1),
    )
    .await;
    // The grant did happen (and was released by the broker), and the
    // caller was never told of it.
    common::eventually(Duration::from_secs(5), "the orphan counted", || async {
        orphans_released(&broker).await == 1.0
    })
    .await;
    eprintln!(
        "DEBUG SLEEP: lock free {} ms after Redis answered again",
        (free - answering).as_millis()
    );
    // The name is usable at once.
    must_acquire(&mut client, "stalled", TTL_MS).await;
}

/// The Acquire reaches Redis, which grants, but the answer is held back
/// past the store timeout (a stalled network): the caller gets UNAVAILABLE
/// while the lock is held for nobody; once answers flow again, the broker
/// releases it within the store timeout + 1 s.
#[tokio::test]
async fn a_grant_whose_answer_was_held_back_is_released_when_answers_flow() {
    let (_redis, proxy, broker, observer) = behind_a_proxy().await;
    let (mut client, mut watcher) = (broker.client().await, observer.client().await);
    must_acquire(&mut client, "warm-up", TTL_MS).await;

    proxy.hold_answers();
    let status = client
        .acquire(acquire_req("unheard", TTL_MS, "lost", 0))
        .await
        .expect_err("the answer is held back past the store timeout");
    assert_eq!(status.code(), Code::Unavailable, "{status:?}");
    // Granted all the same, to a token nobody was told.
    assert_eq!(
        holder(&mut watcher, "unheard").await.as_deref(),
        Some("lost")
    );

    proxy.pass();
    let answering = Instant::now();
    let free = free_by(
        &mut watcher,
        "unheard",
        answering + STORE_TIMEOUT + Duration::from_secs(1),
    )
    .await;
    common::eventually(Duration::from_secs(5), "the orphan counted", || async {
        orphans_released(&broker).await == 1.0
    })
    .await;
    eprintln!(
        "held answers: lock free {} ms after answers flowed again",
        (free - answering).as_millis()
    );
}

/// A waiting Acquire whose granting attempt times out: the waiter gets
/// UNAVAILABLE, and the lock it was granted unbeknownst is released within
/// the store timeout + 1 s of answers flowing again; the next waiter gets
/// it.
#[tokio::test]
async fn a_waiters_grant_that_timed_out_is_released_when_answers_flow() {
    let (redis, proxy, broker, observer) = behind_a_proxy().await;
    let (mut client, mut watcher) = (broker.client().await, observer.client().await);
    // The held-back answer must be the granting attempt's. If the waiter's
    // previous (blocked) attempt had run in Redis but its answer was still
    // on its way when answers were held (a loaded machine), that answer is
    // the one that times out and nothing is granted: the round says so and
    // the next one, on a fresh lock, tries again.
    let mut granted_unheard = None;
    for round in 0..3 {
        let name = format!("queued{round}");
        let first = must_acquire(&mut client, &name, TTL_MS).await;
        proxy.pass();
        let waiter = tokio::spawn({
            let mut client = broker.client().await;
            let name = name.clone();
            async move {
                client
                    .acquire(acquire_req(&name, TTL_MS, "waiter", 30_000))
                    .await
            }
        });
        // The waiter renews its place in line at each attempt (the score of
        // its liveness, in ms): once it moved, the waiter's attempt in its
        // waiting loop is done, and the next comes by its timer, a second
        // later.
        let mut redis_conn = redis.connection().await;
        let line = format!("test:{{{name}}}:until");
        let alive = |conn: &mut redis::aio::MultiplexedConnection| {
            let mut conn = conn.clone();
            let line = line.clone();
            async move {
                redis::cmd("ZRANGE")
                    .arg(line)
                    .arg(0)
                    .arg(-1)
                    .arg("WITHSCORES")
                    .query_async::<Vec<(String, f64)>>(&mut conn)
                    .await
                    .expect("ZRANGE")
            }
        };
        common::eventually(Duration::from_secs(10), "the waiter in line", || {
            let f = alive(&mut redis_conn);
            async move { f.await.len() == 1 }
        })
        .await;
        let queued_at = alive(&mut redis_conn).await[0].1;
        common::eventually(Duration::from_secs(10), "the waiter's loop attempt", || {
            let f = alive(&mut redis_conn);
            async move { f.await.first().is_some_and(|(_, s)| *s > queued_at) }
        })
        .await;

        // The release is not heard (its message is held back too); the
        // waiter's timer makes the next attempt, which is granted, unheard.
        proxy.hold_answers();
        watcher
            .release(ReleaseRequest {
                name: name.clone(),
                owner_token: first.owner_token.clone(),
            })
            .await
            .expect("release through the observer");
        let status = waiter
            .await
            .unwrap()
            .expect_err("the attempt's answer is held back");
        assert_eq!(status.code(), Code::Unavailable, "{status:?}");
        match holder(&mut watcher, &name).await.as_deref() {
            Some("waiter") => {
                granted_unheard = Some((name, first));
                break;
            }
            None => eprintln!("round {round}: the blocked attempt's answer was the one held"),
            other => panic!("{name} held by {other:?}"),
        }
    }
    let (name, first) = granted_unheard.expect("the waiter's timed-out attempt granted it");

    // Another waiter, on the observer, gets it as soon as it is released.
    let next = tokio::spawn(async move {
        let granted = watcher
            .acquire(acquire_req(&name, TTL_MS, "next", 5_000))
            .await;
        (granted, Instant::now())
    });
    proxy.pass();
    let answering = Instant::now();
    let (granted, at) = next.await.unwrap();
    let granted = granted.expect("the next waiter is granted").into_inner();
    assert!(granted.lease.unwrap().fence > first.fence);
    let took = at - answering;
    assert!(
        took < STORE_TIMEOUT + Duration::from_secs(1),
        "the next waiter got the lock {took:?} after answers flowed again"
    );
    common::eventually(Duration::from_secs(5), "the orphan counted", || async {
        orphans_released(&broker).await == 1.0
    })
    .await;
    eprintln!(
        "waiter's grant held back: next waiter granted {} ms after answers flowed again",
        took.as_millis()
    );
}

/// How long a request is held on its way to the store, past its call's
/// failure: longer than the orphan cleanup needs to try its release.
const REQUEST_DELAY: Duration = Duration::from_millis(2_500);

/// An Acquire whose statement is held on its way to PostgreSQL (its pooled
/// connection delayed in a proxy) until well after the call failed
/// UNAVAILABLE and the orphan cleanup, on another connection, released
/// the token and found nothing: when the statement reaches the server, it
/// grants nothing (its not-after, by the database's clock, is past), so the
/// name is free, not held by nobody for its TTL, and served at once.
#[tokio::test]
async fn a_postgres_acquire_that_arrives_after_its_call_failed_grants_nothing() {
    let postgres = PostgresServer::start();
    let proxy = Proxy::start(([127, 0, 0, 1], postgres.port()).into()).await;
    let url = format!(
        "postgres://postgres@{}/postgres?application_name=delayed_broker",
        proxy.addr()
    );
    let broker = Broker::start_with(&url, |c| {
        c.store_timeout = STORE_TIMEOUT;
        // One pooled connection: the one the proxy delays.
        c.store_connections = 1;
    })
    .await;
    let observer = Broker::start(&postgres.url()).await;
    let mut client = broker.client().await;
    let mut watcher = observer.client().await;
    must_acquire(&mut client, "warm-up", TTL_MS).await;
    // Not the LISTEN connection (its last statement is its LISTEN or its
    // check, none while it is being made). Polled: a loaded machine once
    // showed two pids here (2026-12-02), a connection being made or one
    // closed (the start-up's) whose backend had not exited yet.
    let pooled = "SELECT pid FROM pg_stat_activity WHERE application_name = 'delayed_broker' \
                  AND query NOT LIKE 'LISTEN%' AND query <> 'SHOW transaction_read_only' \
                  AND query <> ''";
    let deadline = Instant::now() + Duration::from_secs(10);
    let delayed_pid = loop {
        let pids = postgres.psql(&[pooled]).await;
        if !pids.is_empty() && !pids.contains('\n') {
            break pids;
        }
        if Instant::now() > deadline {
            let all = postgres
                .psql(&[
                    "SELECT pid, state, backend_start, query FROM pg_stat_activity \
                         WHERE application_name = 'delayed_broker'",
                ])
                .await;
            panic!("not one pooled connection after 10 s: {pids:?} of\n{all}");
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    };

    proxy.hold_requests_of_open_connections();
    let status = client
        .acquire(acquire_req("delayed", TTL_MS, "lost", 0))
        .await
        .expect_err("the statement is held on its way past the store timeout");
    assert_eq!(status.code(), Code::Unavailable, "{status:?}");
    let failed = Instant::now();
    // The request arrives late: the orphan cleanup's release (on a new
    // connection, which passes) has come and gone by then.
    tokio::time::sleep_until(failed + REQUEST_DELAY).await;
    proxy.pass();
    // The delayed statement reached the server and ran: its backend, which
    // then read the broker's close, is gone.
    let gone = format!("SELECT count(*) FROM pg_stat_activity WHERE pid = {delayed_pid}");
    common::eventually(
        Duration::from_secs(10),
        "the delayed backend to end",
        || async { postgres.psql(&[&gone]).await == "0" },
    )
    .await;
    let free = free_by(
        &mut watcher,
        "delayed",
        failed + STORE_TIMEOUT + Duration::from_secs(1) + REQUEST_DELAY,
    )
    .await;
    eprintln!(
        "delayed acquire: lock free {} ms after the call failed (request held {} ms)",
        (free - failed).as_millis(),
        REQUEST_DELAY.as_millis()
    );
    // Nobody holds it: the next caller is granted at once.
    must_acquire(&mut watcher, "delayed", TTL_MS).await;
}

/// The same on Redis: the Acquire's script held on its way (every
/// connection open then: the broker's one command connection) until well
/// after its call failed. Redis runs one connection's commands in order and
/// the broker keeps that connection (a timeout does not replace it), so the
/// orphan cleanup's release can only run after the late grant: the grant
/// happens, and is released within the store timeout + 1 s of the requests
/// flowing again.
#[tokio::test]
async fn a_redis_acquire_that_arrives_after_its_call_failed_is_released_after_it() {
    let (_redis, proxy, broker, observer) = behind_a_proxy().await;
    let (mut client, mut watcher) = (broker.client().await, observer.client().await);
    must_acquire(&mut client, "warm-up", TTL_MS).await;

    proxy.hold_requests_of_open_connections();
    let status = client
        .acquire(acquire_req("delayed", TTL_MS, "lost", 0))
        .await
        .expect_err("the script is held on its way past the store timeout");
    assert_eq!(status.code(), Code::Unavailable, "{status:?}");
    let failed = Instant::now();
    tokio::time::sleep_until(failed + REQUEST_DELAY).await;
    proxy.pass();
    let flowing = Instant::now();
    let free = free_by(
        &mut watcher,
        "delayed",
        flowing + STORE_TIMEOUT + Duration::from_secs(1),
    )
    .await;
    common::eventually(Duration::from_secs(5), "the orphan counted", || async {
        orphans_released(&broker).await == 1.0
    })
    .await;
    eprintln!(
        "delayed script: lock free {} ms after requests flowed again",
        (free - flowing).as_millis()
    );
}
