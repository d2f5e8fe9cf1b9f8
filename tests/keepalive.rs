//! The KeepAlive stream: heartbeats renew leases in one store round trip,
//! answer every lease (alive, lost and why, rejected), and when the stream
//! breaks the leases run out their TTL rather than being released early.

use leasehold_testkit as common;

use std::time::{Duration, Instant};

use common::{
    acquire_req, eventually,
    keepalive::{pair, through_proxy, Stream},
    must_acquire,
    proxy::Proxy,
    sample, scrape, Broker, RedisServer,
};
use leasehold_server::proto::{
    lease_status::State, leasehold_service_client::LeaseholdServiceClient, DescribeRequest,
    LossReason, ReleaseRequest,
};
use tonic::{transport::Channel, Code};

async fn held(client: &mut LeaseholdServiceClient<Channel>, name: &str) -> bool {
    client
        .describe(DescribeRequest {
            name: name.into(),
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner()
        .held
}

/// Heartbeats keep a 1 s lease alive for 3 s; a waiter cannot take it meanwhile.
#[tokio::test]
async fn heartbeats_keep_a_lease_alive() {
    let redis = RedisServer::start();
    let broker = Broker::start(&redis.url()).await;
    let mut client = broker.client().await;
    let lease = must_acquire(&mut client, "kept", 1_000).await;
    let mut waiter = client.clone();
    let waiting = tokio::spawn(async move {
        let started = Instant::now();
        (
            waiter
                .acquire(acquire_req("kept", 1_000, "waiter", 3_000))
                .await,
            started.elapsed(),
        )
    });
    let mut stream = Stream::open(&mut client).await;
    let mut interval = tokio::time::interval(Duration::from_millis(300));
    for _ in 0..10 {
        interval.tick().await;
        let r = stream.beat(&[pair(&lease)]).await.unwrap();
        assert_eq!(r.leases[0].state(), State::Alive, "{r:?}");
        assert_eq!(
            (r.leases[0].ttl_ms, r.leases[0].fence),
            (1_000, lease.fence)
        );
    }
    let (result, waited) = waiting.await.unwrap();
    assert_eq!(
        result.unwrap_err().code(),
        Code::Aborted,
        "the waiter took a kept lease"
    );
    assert!(waited >= Duration::from_millis(2_900));
}

/// Unknown, stolen and malformed leases are answered, and the stream goes on.
#[tokio::test]
async fn every_lease_is_answered_and_the_stream_survives() {
    let broker = Broker::start("memory").await;
    let mut client = broker.client().await;
    let lease = must_acquire(&mut client, "mine", 10_000).await;
    let mut stream = Stream::open(&mut client).await;
    let stranger = "0123456789abcdef0123456789abcdef";
    let r = stream
        .beat(&[
            ("nobody", stranger),
            ("mine", stranger),
            ("bad name", stranger),
            ("mine", "short"),
            pair(&lease),
        ])
        .await
        .unwrap();
    let states: Vec<_> = r
        .leases
        .iter()
        .map(|s| (s.name.as_str(), s.state(), s.reason()))
        .collect();
    assert_eq!(
        states,
        [
            ("nobody", State::Lost, LossReason::Expired),
            ("mine", State::Lost, LossReason::NotOwner),
            ("bad name", State::Rejected, LossReason::Unspecified),
            ("mine", State::Rejected, LossReason::Unspecified),
            ("mine", State::Alive, LossReason::Unspecified),
        ]
    );
    assert_eq!(
        r.leases[1].fence, lease.fence,
        "NOT_OWNER names the current holder's fence"
    );
    assert!(
        r.leases[2].message.contains("allowed are"),
        "{}",
        r.leases[2].message
    );
    // Same stream, next heartbeat: still serving.
    let r = stream.beat(&[pair(&lease)]).await.unwrap();
    assert_eq!(r.leases[0].state(), State::Alive);
}

/// A lease deleted from the store before its TTL is reported STORE_LOST.
#[tokio::test]
async fn a_lease_the_store_lost_is_reported_as_such() {
    let redis = RedisServer::start();
    let broker = Broker::start(&redis.url()).await;
    let mut client = broker.client().await;
    let lease = must_acquire(&mut client, "fragile", 10_000).await;
    let mut stream = Stream::open(&mut client).await;
    assert_eq!(
        stream.beat(&[pair(&lease)]).await.unwrap().leases[0].state(),
        State::Alive
    );
    let mut conn = redis.connection().await;
    let _: () = redis::cmd("FLUSHALL").query_async(&mut conn).await.unwrap();
    let r = stream.beat(&[pair(&lease)]).await.unwrap();
    assert_eq!(
        (r.leases[0].state(), r.leases[0].reason()),
        (State::Lost, LossReason::StoreLost),
        "{r:?}"
    );
    let metrics = scrape(broker.metrics_addr).await;
    assert_eq!(
        sample(&metrics, "lease_lost_total{reason=\"store_lost\"}"),
        1.0
    );
}

/// A heartbeat of many leases costs one store round trip: with 20 ms added
/// between broker and Redis, 200 renewals take far less than 200 x 20 ms.
#[tokio::test]
async fn many_leases_are_renewed_in_one_round_trip() {
    let redis = RedisServer::start();
    let redis_addr = redis
        .url()
        .trim_start_matches("redis://")
        .trim_end_matches('/')
        .parse()
        .unwrap();
    let proxy = Proxy::start(redis_addr).await;
    let broker = Broker::start_with(&format!("redis://{}/", proxy.addr()), |c| {
        c.store_timeout = Duration::from_secs(5);
    })
    .await;
    let mut client = broker.client().await;
    let mut leases = Vec::new();
    for i in 0..200 {
        leases.push(must_acquire(&mut client, &format!("batch-{i}"), 60_000).await);
    }
    let pairs: Vec<_> = leases.iter().map(pair).collect();
    let mut stream = Stream::open(&mut client).await;
    stream.beat(&pairs).await.unwrap(); // scripts loaded, connections warm
    proxy.set_latency(Duration::from_millis(20));
    let started = Instant::now();
    let r = stream.beat(&pairs).await.unwrap();
    let took = started.elapsed();
    assert!(r.leases.iter().all(|s| s.state() == State::Alive));
    assert!(
        took < Duration::from_millis(1_500),
        "200 renewals took {took:?}: not one round trip"
    );
}

/// A stream that breaks does not release its leases: they stay held until
/// their TTL, then expire, and the broker counts the loss.
#[tokio::test]
async fn a_broken_stream_lets_its_leases_run_out_their_ttl() {
    let broker = Broker::start("memory").await;
    let mut client = broker.client().await;
    let lease = must_acquire(&mut client, "orphan", 1_000).await;
    let (mut doomed, proxy) = through_proxy(&broker).await;
    let mut stream = Stream::open(&mut doomed).await;
    assert_eq!(
        stream.beat(&[pair(&lease)]).await.unwrap().leases[0].state(),
        State::Alive
    );
    proxy.drop_connections(); // the network breaks under the stream
    let broke = Instant::now();
    assert!(
        held(&mut client, "orphan").await,
        "the lease was released early"
    );
    eventually(Duration::from_secs(5), "the lease to expire", || {
        let mut c = client.clone();
        async move { !held(&mut c, "orphan").await }
    })
    .await;
    assert!(
        broke.elapsed() >= Duration::from_millis(600),
        "expired after {:?}",
        broke.elapsed()
    );
    eventually(
        Duration::from_secs(5),
        "the broker to count the loss",
        || async {
            sample(
                &scrape(broker.metrics_addr).await,
                "lease_lost_total{reason=\"expired\"}",
            ) == 1.0
        },
    )
    .await;
}

/// A Redis reached through a fault-injection proxy, and a broker on it
/// whose store calls may take up to 5 s.
async fn broker_behind_proxy(store_timeout: Duration) -> (RedisServer, Proxy, Broker) {
    let redis = RedisServer::start();
    let addr = redis
        .url()
        .trim_start_matches("redis://")
        .trim_end_matches('/')
        .parse()
        .unwrap();
    let proxy = Proxy::start(addr).await;
    let broker = Broker::start_with(&format!("redis://{}/", proxy.addr()), |c| {
        c.store_timeout = store_timeout;
    })
    .await;
    (redis, proxy, broker)
}

async fn expired_count(broker: &Broker) -> f64 {
    sample(
        &scrape(broker.metrics_addr).await,
        "lease_lost_total{reason=\"expired\"}",
    )
}

/// A 1 s lease on `name`, renewed once (after `before_beat`) over a stream
/// through a proxy: drop the proxy's connections to break the stream.
async fn renewed_over_a_doomed_stream(
    broker: &Broker,
    name: &str,
    before_beat: impl FnOnce(),
) -> (Proxy, Stream) {
    let mut client = broker.client().await;
    let lease = must_acquire(&mut client, name, 1_000).await;
    let (mut doomed, proxy) = through_proxy(broker).await;
    let mut stream = Stream::open(&mut doomed).await;
    before_beat();
    assert_eq!(
        stream.beat(&[pair(&lease)]).await.unwrap().leases[0].state(),
        State::Alive
    );
    (proxy, stream)
}

/// Waits for the broker to count one expiry, exactly.
async fn one_loss_counted(broker: &Broker) {
    eventually(
        Duration::from_secs(15),
        "the broker to count the loss",
        || async { expired_count(broker).await == 1.0 },
    )
    .await;
}

/// The lease of a broken stream whose last renewal took long to answer is
/// looked at past the latest moment the store may expire it, and its expiry
/// counted. The renewal reaches Redis 400 ms after it was sent, the look
/// at once: looked at 250 ms past send time + TTL (as before), the lease
/// was still alive there, and its expiry went uncounted.
#[tokio::test]
async fn a_slowly_renewed_lease_of_a_broken_stream_is_counted_when_it_expires() {
    let (_redis, store_proxy, broker) = broker_behind_proxy(Duration::from_secs(5)).await;
    let (proxy, _stream) = renewed_over_a_doomed_stream(&broker, "slow", || {
        store_proxy.set_latency(Duration::from_millis(400));
    })
    .await;
    // The look itself is quick.
    store_proxy.set_latency(Duration::ZERO);
    proxy.drop_connections();
    one_loss_counted(&broker).await;
}

/// On etcd too, whose leader revokes an expired lease up to about half a
/// second late: the broker looks at a broken stream's lease only after
/// that, and counts its expiry.
#[tokio::test]
async fn a_broken_streams_lease_on_etcd_is_counted_when_it_expires() {
    let etcd = common::EtcdServer::start();
    let broker = Broker::start(&etcd.store_url()).await;
    let (proxy, _stream) = renewed_over_a_doomed_stream(&broker, "late", || {}).await;
    proxy.drop_connections();
    one_loss_counted(&broker).await;
}

/// A look at a broken stream's lease that the store does not answer (the
/// network between broker and Redis lost it) is tried again, and the
/// expiry counted once. Looked at once, the loss went uncounted.
#[tokio::test]
async fn a_failed_look_at_a_broken_streams_lease_is_tried_again() {
    let (_redis, store_proxy, broker) = broker_behind_proxy(Duration::from_millis(500)).await;
    let (proxy, _stream) = renewed_over_a_doomed_stream(&broker, "unseen", || {}).await;
    let errors_before = sample(
        &scrape(broker.metrics_addr).await,
        "leasehold_store_errors_total",
    );
    // Nothing reaches Redis from here: the look, due a little past the
    // TTL, is the broker's only store call, and fails.
    store_proxy.stall();
    proxy.drop_connections();
    eventually(Duration::from_secs(10), "the look to fail", || async {
        sample(
            &scrape(broker.metrics_addr).await,
            "leasehold_store_errors_total",
        ) > errors_before
    })
    .await;
    assert_eq!(expired_count(&broker).await, 0.0);
    // The requests held are lost with their connections; Redis answers again.
    store_proxy.drop_connections();
    store_proxy.pass();
    one_loss_counted(&broker).await;
}

/// A client that reconnects to another broker resumes its lease with its
/// token, and the first broker does not count it as lost.
#[tokio::test]
async fn a_lease_resumes_on_another_broker() {
    let redis = RedisServer::start();
    let (a, b) = (
        Broker::start(&redis.url()).await,
        Broker::start(&redis.url()).await,
    );
    let mut on_a = a.client().await;
    let lease = must_acquire(&mut on_a, "roaming", 1_000).await;
    let (mut doomed, proxy) = through_proxy(&a).await;
    let mut broken = Stream::open(&mut doomed).await;
    broken.beat(&[pair(&lease)]).await.unwrap();
    proxy.drop_connections();
    let mut on_b = b.client().await;
    let mut stream = Stream::open(&mut on_b).await;
    let mut interval = tokio::time::interval(Duration::from_millis(250));
    for _ in 0..8 {
        interval.tick().await;
        let r = stream.beat(&[pair(&lease)]).await.unwrap();
        assert_eq!(r.leases[0].state(), State::Alive, "{r:?}");
    }
    // Well past the TTL and A's check: still held, and A counted no loss.
    assert!(held(&mut on_a, "roaming").await);
    assert_eq!(
        sample(
            &scrape(a.metrics_addr).await,
            "lease_lost_total{reason=\"expired\"}"
        ),
        0.0
    );
    on_b.release(ReleaseRequest {
        name: lease.name,
        owner_token: lease.owner_token,
    })
    .await
    .unwrap();
}

/// Closing the stream cleanly after releasing is not a loss.
#[tokio::test]
async fn a_clean_end_after_release_is_not_a_loss() {
    let broker = Broker::start("memory").await;
    let mut client = broker.client().await;
    let lease = must_acquire(&mut client, "tidy", 500).await;
    let mut stream = Stream::open(&mut client).await;
    stream.beat(&[pair(&lease)]).await.unwrap();
    client
        .release(ReleaseRequest {
            name: lease.name.clone(),
            owner_token: lease.owner_token.clone(),
        })
        .await
        .unwrap();
    let Stream { tx, mut rx, .. } = stream;
    drop(tx); // half-close
    assert!(
        rx.message().await.unwrap().is_none(),
        "the broker ends the stream cleanly too"
    );
    // Past the TTL and the broker's check of abandoned leases.
    tokio::time::sleep(Duration::from_millis(1_000)).await;
    let metrics = scrape(broker.metrics_addr).await;
    for reason in ["expired", "not_owner", "store_lost"] {
        assert_eq!(
            sample(
                &metrics,
                &format!("lease_lost_total{{reason=\"{reason}\"}}")
            ),
            0.0,
            "{reason}"
        );
    }
}

/// A heartbeat over the lease limit ends the stream with RESOURCE_EXHAUSTED.
#[tokio::test]
async fn a_heartbeat_over_the_lease_limit_ends_the_stream() {
    let broker = Broker::start_with("memory", |c| c.limits.max_stream_leases = 10).await;
    let mut client = broker.client().await;
    let mut stream = Stream::open(&mut client).await;
    let token = "0123456789abcdef0123456789abcdef";
    let names: Vec<String> = (0..11).map(|i| format!("n{i}")).collect();
    let pairs: Vec<_> = names.iter().map(|n| (n.as_str(), token)).collect();
    let status = stream.beat(&pairs).await.unwrap_err();
    assert_eq!(status.code(), Code::ResourceExhausted);
    assert!(
        status.message().contains("--max-stream-leases"),
        "{}",
        status.message()
    );
}

/// Heartbeats beyond the rate limit are slowed down, not dropped.
#[tokio::test]
async fn heartbeat_floods_are_slowed_down() {
    let broker = Broker::start_with("memory", |c| c.limits.max_stream_rate = 20).await;
    let mut client = broker.client().await;
    let lease = must_acquire(&mut client, "flood", 10_000).await;
    let mut stream = Stream::open(&mut client).await;
    let started = Instant::now();
    for _ in 0..40 {
        assert_eq!(
            stream.beat(&[pair(&lease)]).await.unwrap().leases[0].state(),
            State::Alive
        );
    }
    // 20 in the burst, 20 more at 20 per second.
    assert!(
        started.elapsed() >= Duration::from_millis(900),
        "40 heartbeats in {:?}",
        started.elapsed()
    );
}

/// A broker shutting down ends its streams with UNAVAILABLE; the leases stay.
#[tokio::test]
async fn shutdown_ends_streams_with_unavailable() {
    let redis = RedisServer::start();
    let broker = Broker::start(&redis.url()).await;
    let other = Broker::start(&redis.url()).await;
    let mut client = broker.client().await;
    let lease = must_acquire(&mut client, "stay", 10_000).await;
    let mut stream = Stream::open(&mut client).await;
    stream.beat(&[pair(&lease)]).await.unwrap();
    tokio::time::timeout(Duration::from_secs(10), broker.stop())
        .await
        .expect("shutdown is not held up by the stream")
        .expect("clean shutdown");
    let status = stream.rx.message().await.unwrap_err();
    assert_eq!(status.code(), Code::Unavailable, "{status:?}");
    assert!(held(&mut other.client().await, "stay").await);
}
