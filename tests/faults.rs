//! Redis (and PostgreSQL) faults: calls fail fast with UNAVAILABLE, health
//! says NOT_SERVING, and the broker recovers by itself when the store is
//! back.

use leasehold_testkit as common;

use std::time::{Duration, Instant};

use common::{acquire_req, await_health, must_acquire, Broker, PostgresServer, RedisServer};
use leasehold_server::proto::leasehold_service_client::LeaseholdServiceClient;
use tonic::Code;
use tonic_health::pb::{
    health_check_response::ServingStatus, health_client::HealthClient, HealthCheckRequest,
};

async fn watch_health(broker: &Broker) -> tonic::Streaming<tonic_health::pb::HealthCheckResponse> {
    HealthClient::new(broker.channel().await)
        .watch(HealthCheckRequest {
            service: String::new(),
        })
        .await
        .expect("health watch")
        .into_inner()
}

/// Three acquires fail UNAVAILABLE, each within 2 s, their message naming
/// `store` (the store is down).
async fn unavailable_within_2s(
    client: &mut LeaseholdServiceClient<tonic::transport::Channel>,
    store: &str,
) {
    for name in ["during-1", "during-2", "during-3"] {
        let started = Instant::now();
        let status = client
            .acquire(acquire_req(name, 10_000, "t", 0))
            .await
            .unwrap_err();
        assert_eq!(status.code(), Code::Unavailable, "{status:?}");
        assert!(status.message().contains(store), "{}", status.message());
        assert!(
            started.elapsed() < Duration::from_secs(2),
            "UNAVAILABLE took {:?}",
            started.elapsed()
        );
    }
}

/// Redis stops: calls fail with UNAVAILABLE within 2 s and health turns
/// NOT_SERVING; Redis returns: health turns SERVING and calls succeed, with
/// no broker restart.
#[tokio::test]
async fn redis_down_means_unavailable_fast_and_recovery_is_automatic() {
    let mut redis = RedisServer::start();
    let broker = Broker::start(&redis.url()).await;
    let mut client = broker.client().await;
    let mut health = watch_health(&broker).await;
    await_health(&mut health, ServingStatus::Serving).await;
    must_acquire(&mut client, "before", 10_000).await;

    redis.stop();
    unavailable_within_2s(&mut client, "Redis").await;
    await_health(&mut health, ServingStatus::NotServing).await;

    redis.restart();
    await_health(&mut health, ServingStatus::Serving).await;
    must_acquire(&mut client, "after", 10_000).await;
}

/// The same on the PostgreSQL store: PostgreSQL stops, calls fail with
/// UNAVAILABLE within 2 s and health turns NOT_SERVING; it comes back
/// (with its data): health turns SERVING, the lease taken before is still
/// held, and calls succeed, with no broker restart.
#[tokio::test]
async fn postgres_down_means_unavailable_fast_and_recovery_is_automatic() {
    let mut postgres = PostgresServer::start_durable();
    let broker = Broker::start(&postgres.url()).await;
    let mut client = broker.client().await;
    let mut health = watch_health(&broker).await;
    await_health(&mut health, ServingStatus::Serving).await;
    must_acquire(&mut client, "before", 60_000).await;

    postgres.stop();
    unavailable_within_2s(&mut client, "PostgreSQL").await;
    await_health(&mut health, ServingStatus::NotServing).await;

    postgres.restart();
    await_health(&mut health, ServingStatus::Serving).await;
    let status = client
        .acquire(acquire_req("before", 10_000, "t", 0))
        .await
        .unwrap_err();
    assert_eq!(status.code(), Code::Aborted, "still held: {status:?}");
    must_acquire(&mut client, "after", 10_000).await;
}

/// A Redis that accepts connections but never answers (a hung server, a
/// black-holed network) still gives UNAVAILABLE within the store timeout.
#[tokio::test]
async fn a_redis_that_never_answers_gives_unavailable_not_a_hang() {
    let silent = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("redis://{}/", silent.local_addr().unwrap());
    tokio::spawn(async move {
        let mut held = Vec::new();
        while let Ok((socket, _)) = silent.accept().await {
            held.push(socket); // read nothing, answer nothing
        }
    });
    let broker = Broker::start(&url).await;
    let mut client = broker.client().await;
    let started = Instant::now();
    let status = client
        .acquire(acquire_req("x", 10_000, "t", 0))
        .await
        .unwrap_err();
    assert_eq!(status.code(), Code::Unavailable, "{status:?}");
    assert!(
        started.elapsed() < Duration::from_secs(3),
        "took {:?}",
        started.elapsed()
    );
    let mut health = watch_health(&broker).await;
    await_health(&mut health, ServingStatus::NotServing).await;
}

/// A broker started while Redis is down comes up NOT_SERVING and starts
/// serving once Redis appears.
#[tokio::test]
async fn a_broker_started_before_redis_serves_once_redis_is_up() {
    let mut redis = RedisServer::start();
    redis.stop();
    let broker = Broker::start(&redis.url()).await;
    let mut health = watch_health(&broker).await;
    await_health(&mut health, ServingStatus::NotServing).await;
    let mut client = broker.client().await;
    let status = client
        .acquire(acquire_req("x", 10_000, "t", 0))
        .await
        .unwrap_err();
    assert_eq!(status.code(), Code::Unavailable);

    redis.restart();
    await_health(&mut health, ServingStatus::Serving).await;
    must_acquire(&mut client, "x", 10_000).await;
}
