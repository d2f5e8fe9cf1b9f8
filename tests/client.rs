//! The Rust client: leases keep themselves alive over one stream, survive a
//! broker restart, and signal their loss (with a reason) before the holder
//! could act on a lease it no longer has.

use leasehold_testkit as common;

use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use common::{Broker, RedisServer};
use leasehold_client::{AcquireOptions, Client, ClientError, LossReason};

fn opts(ttl_ms: u64) -> AcquireOptions {
    AcquireOptions::new()
        .ttl(Duration::from_millis(ttl_ms))
        .holder("test")
}

/// A 1 s lease is kept alive for 5 s; nobody else can take it meanwhile.
#[tokio::test]
async fn a_lease_keeps_itself_alive() {
    let redis = RedisServer::start();
    let broker = Broker::start(&redis.url()).await;
    let holder = Client::connect(broker.url()).await.unwrap();
    let lease = holder.acquire("kept", opts(1_000)).await.unwrap();
    let rival = Client::connect(broker.url()).await.unwrap();
    let started = Instant::now();
    let attempt = rival
        .acquire("kept", opts(1_000).wait(Duration::from_secs(5)))
        .await;
    assert!(
        matches!(attempt, Err(ClientError::NotAcquired(_))),
        "{attempt:?}"
    );
    assert!(started.elapsed() >= Duration::from_millis(4_900));
    assert!(!lease.is_lost());
    assert!(lease.deadline() > tokio::time::Instant::now());
    let fence = lease.fence();
    lease.release().await.expect("still ours after 5 s");
    let next = rival.acquire("kept", opts(1_000)).await.unwrap();
    assert!(next.fence() > fence);
}

/// A broker restart: the client reconnects and resumes its lease; nobody
/// else acquires in between and `lost()` never fires.
#[tokio::test]
async fn a_lease_survives_a_broker_restart() {
    let redis = RedisServer::start();
    let broker = Broker::start(&redis.url()).await;
    let addr = broker.addr;
    let client = Client::connect(broker.url()).await.unwrap();
    let lease = client.acquire("survivor", opts(2_000)).await.unwrap();

    broker.stop().await.unwrap();
    tokio::time::sleep(Duration::from_millis(300)).await; // the restart gap
    let restarted = Broker::start_at(addr, &redis.url()).await;

    let rival = Client::connect(restarted.url()).await.unwrap();
    let attempt = tokio::select! {
        attempt = rival.acquire("survivor", opts(1_000).wait(Duration::from_secs(4))) => attempt,
        reason = lease.lost() => panic!("lost across the restart: {reason}"),
    };
    assert!(
        matches!(attempt, Err(ClientError::NotAcquired(_))),
        "{attempt:?}"
    );
    assert!(!lease.is_lost());
    lease.release().await.expect("still ours after the restart");
}

/// A client given two replicas moves its stream to the other when one stops.
#[tokio::test]
async fn a_lease_moves_to_another_replica() {
    let redis = RedisServer::start();
    let a = Broker::start(&redis.url()).await;
    let b = Broker::start(&redis.url()).await;
    let client = Client::connect_any([a.url(), b.url()]).await.unwrap();
    let lease = client.acquire("mover", opts(1_500)).await.unwrap();
    a.stop().await.unwrap();
    tokio::select! {
        () = tokio::time::sleep(Duration::from_secs(4)) => {}
        reason = lease.lost() => panic!("lost when one replica stopped: {reason}"),
    }
    lease.release().await.expect("still ours");
    drop(b);
}

/// The store loses the lease: `lost()` fires with STORE_LOST within about
/// one heartbeat interval (a third of the TTL).
#[tokio::test]
async fn a_lease_lost_by_the_store_is_signalled() {
    let redis = RedisServer::start();
    let broker = Broker::start(&redis.url()).await;
    let client = Client::connect(broker.url()).await.unwrap();
    let lease = client.acquire("flushed", opts(3_000)).await.unwrap();
    let mut conn = redis.connection().await;
    let _: () = redis::cmd("FLUSHALL").query_async(&mut conn).await.unwrap();
    let flushed = Instant::now();
    let reason = tokio::time::timeout(Duration::from_secs(3), lease.lost())
        .await
        .expect("lost() fired");
    assert_eq!(reason, LossReason::StoreLost);
    assert!(
        flushed.elapsed() < Duration::from_millis(2_000),
        "told after {:?}",
        flushed.elapsed()
    );
    assert!(lease.is_lost() && lease.check() == Err(LossReason::StoreLost));
    assert!(matches!(
        lease.release().await,
        Err(ClientError::Lost(LossReason::StoreLost))
    ));
}

/// Heartbeats stall (a proxy stops forwarding, connections stay open):
/// `lost()` fires from the client's own deadline, before the lease expires
/// on the broker.
#[tokio::test]
async fn a_stalled_connection_is_lost_locally_before_the_broker_expires_it() {
    let redis = RedisServer::start();
    let broker = Broker::start(&redis.url()).await;
    let proxy = common::proxy::Proxy::start(broker.addr).await;
    let client = Client::connect(format!("http://{}", proxy.addr()))
        .await
        .unwrap();
    let lease = client.acquire("stalled", opts(2_000)).await.unwrap();
    // Let a few renewals through first.
    tokio::time::sleep(Duration::from_millis(1_500)).await;
    assert!(!lease.is_lost());

    // Watch the broker-side expiry (absolute, Redis clock = ours: same host).
    let key = leasehold_server::store::lease_key("test:", "stalled");
    let mut conn = redis.connection().await;
    let watcher = tokio::spawn(async move {
        let mut last_expiry_ms: i64 = -1;
        loop {
            let at: i64 = redis::cmd("PEXPIRETIME")
                .arg(&key)
                .query_async(&mut conn)
                .await
                .unwrap();
            if at < 0 {
                return last_expiry_ms; // the key expired
            }
            last_expiry_ms = at;
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    });
    proxy.stall();
    let reason = tokio::time::timeout(Duration::from_secs(5), lease.lost())
        .await
        .expect("lost() fired");
    let lost_at_ms = i64::try_from(
        SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .unwrap()
            .as_millis(),
    )
    .expect("now in ms since 1970 fits an i64");
    assert_eq!(reason, LossReason::DeadlinePassed);
    let broker_expiry_ms = watcher.await.unwrap();
    assert!(
        broker_expiry_ms > 0,
        "the lease never existed on the broker"
    );
    assert!(
        lost_at_ms <= broker_expiry_ms,
        "lost() fired at {lost_at_ms}, after the broker-side expiry at {broker_expiry_ms}"
    );
}

/// Dropping a lease releases it (best effort, in the background).
#[tokio::test]
async fn dropping_a_lease_releases_it() {
    let broker = Broker::start("memory").await;
    let client = Client::connect(broker.url()).await.unwrap();
    let lease = client.acquire("dropped", opts(30_000)).await.unwrap();
    drop(lease);
    let next = client
        .acquire("dropped", opts(1_000).wait(Duration::from_secs(5)))
        .await
        .expect("freed long before its 30 s TTL");
    next.release().await.unwrap();
}

/// An unreachable broker is a clear error, not a hang.
#[tokio::test]
async fn connecting_to_nothing_fails_clearly() {
    let unused = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap();
    let started = Instant::now();
    let err = Client::connect(format!("http://{unused}"))
        .await
        .err()
        .expect("no broker there");
    assert!(matches!(err, ClientError::Connect(_)), "{err:?}");
    assert!(started.elapsed() < Duration::from_secs(6));
    // A malformed URL is the caller's mistake, not an outage.
    for url in ["not a url", "127.0.0.1:7420"] {
        assert!(
            matches!(Client::connect(url).await, Err(ClientError::Config(_))),
            "{url}"
        );
    }
}

/// One client may hold several permits of a semaphore; all are kept alive.
#[tokio::test]
async fn one_client_keeps_several_permits_alive() {
    let broker = Broker::start("memory").await;
    let client = Client::connect(broker.url()).await.unwrap();
    let a = client.acquire("pool", opts(1_000).limit(2)).await.unwrap();
    let b = client.acquire("pool", opts(1_000).limit(2)).await.unwrap();
    assert_ne!(a.fence(), b.fence());
    tokio::time::sleep(Duration::from_secs(3)).await; // three TTLs
    assert!(!a.is_lost() && !b.is_lost());
    assert_eq!(client.describe("pool").await.unwrap().permits_held, 2);
    a.release().await.expect("a still held");
    b.release().await.expect("b still held");
}

/// A release whose answer never arrived (the connection broke after the
/// broker did the work) is retried, and the retry reports success: the
/// holder is not told it lost a lease it released.
#[tokio::test]
async fn a_release_whose_answer_was_lost_is_retried_and_succeeds() {
    let redis = RedisServer::start();
    let broker = Broker::start(&redis.url()).await;
    let proxy = common::proxy::Proxy::start(broker.addr).await;
    let client = Client::connect(format!("http://{}", proxy.addr()))
        .await
        .unwrap();
    let lease = client.acquire("answer-lost", opts(10_000)).await.unwrap();
    let observer = Client::connect(broker.url()).await.unwrap();
    proxy.hold_answers();
    let releasing = tokio::spawn(lease.release());
    common::eventually(Duration::from_secs(5), "the release done", || async {
        observer
            .describe("answer-lost")
            .await
            .is_ok_and(|d| !d.held)
    })
    .await;
    proxy.drop_connections();
    proxy.pass();
    let released = tokio::time::timeout(Duration::from_secs(10), releasing)
        .await
        .expect("the release returned")
        .unwrap();
    assert!(released.is_ok(), "{released:?}");
    let metrics = common::scrape(broker.metrics_addr).await;
    assert_eq!(
        common::sample(&metrics, "leasehold_lease_released_total"),
        1.0
    );
    assert_eq!(
        common::sample(&metrics, "lease_lost_total{reason=\"expired\"}"),
        0.0
    );
}

/// More leases than one heartbeat may name (the broker's default
/// --max-stream-leases, 1,000) are kept alive over several heartbeats a
/// beat: 1,200 leases of 2 s stay held for three TTLs. (Sent in one
/// heartbeat, it is refused and every lease is lost.)
#[tokio::test]
async fn more_leases_than_one_heartbeat_names_are_kept_alive() {
    let broker = Broker::start("memory").await;
    let client = Client::connect(broker.url()).await.unwrap();
    let mut leases = Vec::new();
    for i in 0..1_200 {
        leases.push(
            client
                .acquire(&format!("many-{i}"), opts(2_000))
                .await
                .unwrap(),
        );
    }
    tokio::time::sleep(Duration::from_secs(6)).await; // three TTLs
    assert_eq!(leases.iter().filter(|l| l.is_lost()).count(), 0);
    for name in ["many-0", "many-999", "many-1000", "many-1199"] {
        assert!(client.describe(name).await.unwrap().held, "{name}");
    }
    for lease in leases {
        lease.release().await.expect("still held");
    }
}

/// The client's acquires, releases and heartbeats ride one Session stream
/// (no KeepAlive stream); built with `unary`, it uses unary calls and a
/// KeepAlive stream instead, with the same outcomes.
#[tokio::test]
async fn the_client_uses_one_session_stream_unless_told_otherwise() {
    use common::{eventually, sample, scrape};
    let broker = Broker::start("memory").await;
    let streams = |kind: &'static str| {
        let metrics = broker.metrics_addr;
        async move { sample(&scrape(metrics).await, &format!("leasehold_{kind}_streams")) }
    };
    for unary in [false, true] {
        let options = leasehold_client::ClientOptions {
            unary,
            ..Default::default()
        };
        let client = Client::connect_any_with([broker.url()], &options)
            .await
            .unwrap();
        let names: Vec<String> = (0..8).map(|i| format!("s{i}")).collect();
        let leases: Vec<_> =
            futures_util::future::join_all(names.iter().map(|n| client.acquire(n, opts(1_000))))
                .await
                .into_iter()
                .map(Result::unwrap)
                .collect();
        let expected = if unary { (0.0, 1.0) } else { (1.0, 0.0) };
        eventually(Duration::from_secs(10), "the streams opened", || async {
            (streams("session").await, streams("keepalive").await) == expected
        })
        .await;
        // Kept alive past three TTLs by the heartbeats of that stream.
        let renewed = leases[0].deadline();
        for lease in &leases {
            lease.deadline_after(renewed).await;
        }
        tokio::time::sleep(Duration::from_secs(3)).await;
        assert!(leases.iter().all(|l| !l.is_lost()), "unary: {unary}");
        for lease in leases {
            lease.release().await.expect("still held");
        }
        drop(client);
        eventually(Duration::from_secs(10), "the streams closed", || async {
            (streams("session").await, streams("keepalive").await) == (0.0, 0.0)
        })
        .await;
    }
}

/// An acquire whose caller stops waiting (its future dropped by a timeout)
/// leaves the line on the broker at once: the caller behind it gets the
/// lock next.
#[tokio::test]
async fn an_abandoned_acquire_leaves_the_line() {
    use common::eventually;
    let broker = Broker::start("memory").await;
    let client = Client::connect(broker.url()).await.unwrap();
    let holder = client.acquire("line", opts(30_000)).await.unwrap();
    let waiters = || {
        let client = client.clone();
        async move { client.describe("line").await.unwrap().waiters }
    };
    let first = tokio::spawn({
        let client = client.clone();
        async move {
            tokio::time::timeout(
                Duration::from_secs(600),
                client.acquire("line", opts(30_000).wait(Duration::from_secs(60))),
            )
            .await
        }
    });
    eventually(
        Duration::from_secs(10),
        "the first waiter queued",
        || async { waiters().await == 1 },
    )
    .await;
    let second = tokio::spawn({
        let client = client.clone();
        async move {
            client
                .acquire("line", opts(30_000).wait(Duration::from_secs(60)))
                .await
        }
    });
    eventually(
        Duration::from_secs(10),
        "the second waiter queued",
        || async { waiters().await == 2 },
    )
    .await;
    first.abort();
    eventually(Duration::from_secs(10), "the first waiter left", || async {
        waiters().await == 1
    })
    .await;
    let fence = holder.fence();
    holder.release().await.unwrap();
    let next = second.await.unwrap().expect("the second waiter's grant");
    assert!(next.fence() > fence);
}

/// A broker whose stream cap refuses the client's Session stream still
/// serves its acquires and releases, as unary calls (which are no streams).
#[tokio::test]
async fn a_refused_session_stream_leaves_the_unary_calls() {
    let broker = Broker::start_with("memory", |c| c.limits.conn_max_streams = 1).await;
    let client = Client::connect(broker.url()).await.unwrap();
    // The connection's one stream, taken by an observer.
    let _observing = client.observe("elsewhere").await.unwrap();
    let lease = client
        .grant("capped", opts(30_000))
        .await
        .expect("granted by a unary call");
    assert!(client.describe("capped").await.unwrap().held);
    client
        .release_token("capped", &lease.owner_token)
        .await
        .expect("released by a unary call");
    assert!(!client.describe("capped").await.unwrap().held);
}

/// A grant whose answer reaches the client after its caller stopped
/// waiting (the cancel crossed the grant on the wire) is given back by the
/// client at once, not held for nobody until its TTL.
#[tokio::test]
async fn a_grant_that_crossed_its_cancel_is_given_back() {
    use common::{eventually, proxy::Proxy};
    let broker = Broker::start("memory").await;
    let proxy = Proxy::start(broker.addr).await;
    let client = Client::connect(format!("http://{}", proxy.addr()))
        .await
        .unwrap();
    let direct = broker.client().await;
    let held = || {
        let mut direct = direct.clone();
        async move {
            direct
                .describe(leasehold_server::proto::DescribeRequest {
                    name: "crossed".into(),
                    ..Default::default()
                })
                .await
                .unwrap()
                .into_inner()
                .held
        }
    };
    // The client's Session stream is open.
    let warm = client.grant("warm", opts(30_000)).await.unwrap();
    client
        .release_token("warm", &warm.owner_token)
        .await
        .unwrap();
    // The broker grants; the answer waits in the proxy; the caller gives up.
    proxy.hold_answers();
    let gave_up = tokio::time::timeout(
        Duration::from_millis(300),
        client.grant("crossed", opts(60_000)),
    )
    .await;
    assert!(gave_up.is_err(), "{gave_up:?}");
    eventually(Duration::from_secs(10), "the broker granted", held).await;
    proxy.pass();
    eventually(Duration::from_secs(10), "the grant given back", || async {
        !held().await
    })
    .await;
}
