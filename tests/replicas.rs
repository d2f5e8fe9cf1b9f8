//! Fences safe across a Redis failover: with --replica-acks, a grant or
//! renewal counts only once Redis `WAIT` reports it on enough replicas.
//! Real primary and replica redis-server processes.

use leasehold_testkit as common;

use std::time::{Duration, Instant};

use common::{acquire_req, must_acquire, Broker, RedisServer};
use leasehold_server::proto::{DescribeRequest, RenewRequest};
use tonic::Code;

async fn acked_broker(primary: &RedisServer) -> Broker {
    // Generous: replicas acknowledge slowly on a loaded 2-core machine.
    Broker::start_with(&primary.url(), |c| {
        c.replica_acks = 1;
        c.replica_ack_timeout = Duration::from_millis(1_500);
        c.store_timeout = Duration::from_secs(2);
        // No census: its taker's lease is a write too, which with the
        // replica down waits out the acknowledgement timeout on the one
        // multiplexed connection, ahead of the call whose promptness the
        // tests time.
        c.census_interval = Duration::ZERO;
    })
    .await
}

/// With its replica up, grants and renewals are acknowledged and succeed.
#[tokio::test]
async fn acknowledged_grants_succeed_while_the_replica_is_up() {
    let primary = RedisServer::start();
    let _replica = RedisServer::start_replica_of(&primary);
    primary.await_replicas(1).await;
    let broker = acked_broker(&primary).await;
    let mut client = broker.client().await;
    let lease = must_acquire(&mut client, "safe", 10_000).await;
    client
        .renew(RenewRequest {
            name: lease.name.clone(),
            owner_token: lease.owner_token.clone(),
            ttl_ms: 0,
            ..Default::default()
        })
        .await
        .expect("renewal acknowledged");
    // The grant is on the replica already.
    let mut on_replica = _replica.connection().await;
    let record = leasehold_server::store::read_record(
        &mut on_replica,
        &leasehold_server::store::lease_key("test:", "safe"),
    )
    .await
    .unwrap();
    assert_eq!(record.map(|r| r.fence), Some(lease.fence));
}

/// With the replica down and one acknowledgement required, a grant fails
/// with UNAVAILABLE, promptly, and leaves the lock free; so does a renewal.
#[tokio::test]
async fn without_the_replica_grants_fail_with_unavailable() {
    let primary = RedisServer::start();
    let mut replica = RedisServer::start_replica_of(&primary);
    primary.await_replicas(1).await;
    let broker = acked_broker(&primary).await;
    let mut client = broker.client().await;
    let held = must_acquire(&mut client, "renewed", 10_000).await;

    replica.stop();
    let started = Instant::now();
    let status = client
        .acquire(acquire_req("unsafe", 10_000, "t", 0))
        .await
        .unwrap_err();
    assert_eq!(status.code(), Code::Unavailable, "{status:?}");
    assert!(
        status.message().contains("--replica-acks"),
        "{}",
        status.message()
    );
    assert!(
        started.elapsed() < Duration::from_secs(2),
        "took {:?}",
        started.elapsed()
    );
    let d = client
        .describe(DescribeRequest {
            name: "unsafe".into(),
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner();
    assert!(!d.held, "an unacknowledged grant was left in place");

    let status = client
        .renew(RenewRequest {
            name: held.name,
            owner_token: held.owner_token,
            ttl_ms: 0,
            ..Default::default()
        })
        .await
        .unwrap_err();
    assert_eq!(status.code(), Code::Unavailable, "{status:?}");
}

/// --replica-ack-timeout must stay below --store-timeout.
#[tokio::test]
async fn an_ack_timeout_above_the_store_timeout_is_refused() {
    let broker = Broker::start_with("memory", |c| {
        c.replica_acks = 1;
        c.replica_ack_timeout = Duration::from_secs(5);
    })
    .await;
    let err = broker.stop().await.unwrap_err();
    assert!(err.to_string().contains("--replica-ack-timeout"), "{err}");
}
