//! Fair waiting across broker replicas: waiters are granted in arrival
//! order, and a waiter that dies in the middle does not stall the queue.

use leasehold_testkit as common;

use std::{
    sync::{Arc, Mutex},
    time::{Duration, Instant},
};

use common::{acquire_req, eventually, must_acquire, Broker, RedisServer};
use leasehold_server::proto::{DescribeRequest, ReleaseRequest};

/// 20 waiters, alternating between 2 brokers on one Redis, queue up one
/// after the other; the 7th is killed while waiting. Once the holder
/// releases, the others get the lock one at a time, in arrival order.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn twenty_waiters_on_two_brokers_are_served_in_arrival_order() {
    let redis = RedisServer::start();
    let brokers = [
        Broker::start(&redis.url()).await,
        Broker::start(&redis.url()).await,
    ];
    let mut observer = brokers[0].client().await;
    let holder = must_acquire(&mut observer, "fair", 30_000).await;

    let order = Arc::new(Mutex::new(Vec::new()));
    let mut waiters = Vec::new();
    for i in 0..20usize {
        let mut client = brokers[i % 2].client().await;
        let order = Arc::clone(&order);
        waiters.push(tokio::spawn(async move {
            let lease = client
                .acquire(acquire_req("fair", 30_000, &format!("waiter-{i}"), 60_000))
                .await
                .unwrap_or_else(|s| panic!("waiter {i}: {s:?}"))
                .into_inner()
                .lease
                .unwrap();
            order.lock().unwrap().push(i);
            client
                .release(ReleaseRequest {
                    name: lease.name,
                    owner_token: lease.owner_token,
                })
                .await
                .unwrap();
        }));
        // Wait until it is in line, so that arrival order is known.
        eventually(Duration::from_secs(10), "the waiter to queue", || {
            let mut c = observer.clone();
            async move {
                let d = c
                    .describe(DescribeRequest {
                        name: "fair".into(),
                        ..Default::default()
                    })
                    .await
                    .unwrap()
                    .into_inner();
                d.waiters == i as u64 + 1
            }
        })
        .await;
    }

    // Waiter 6 dies while waiting: its call is dropped.
    waiters[6].abort();
    eventually(
        Duration::from_secs(5),
        "the dead waiter to leave the line",
        || {
            let mut c = observer.clone();
            async move {
                c.describe(DescribeRequest {
                    name: "fair".into(),
                    ..Default::default()
                })
                .await
                .unwrap()
                .into_inner()
                .waiters
                    == 19
            }
        },
    )
    .await;

    let released = Instant::now();
    observer
        .release(ReleaseRequest {
            name: "fair".into(),
            owner_token: holder.owner_token,
        })
        .await
        .unwrap();
    for (i, waiter) in waiters.into_iter().enumerate() {
        if i == 6 {
            continue;
        }
        tokio::time::timeout(Duration::from_secs(20), waiter)
            .await
            .unwrap_or_else(|_| panic!("waiter {i} never got the lock: the queue stalled"))
            .unwrap();
    }
    let expected: Vec<usize> = (0..20).filter(|&i| i != 6).collect();
    assert_eq!(
        *order.lock().unwrap(),
        expected,
        "not served in arrival order"
    );
    // 19 handoffs by push, none waiting for a 3-second lapse.
    assert!(
        released.elapsed() < Duration::from_secs(3),
        "19 handoffs took {:?}",
        released.elapsed()
    );
}

/// A waiter whose broker dies leaves the line by itself (within about 3 s),
/// so the waiters behind it are not stalled for long.
#[tokio::test]
async fn the_waiters_of_a_dead_broker_lapse() {
    let redis = RedisServer::start();
    let mut doomed = common::BrokerProcess::start(&redis.url()).await;
    let survivor = Broker::start(&redis.url()).await;
    let mut client = survivor.client().await;
    let holder = must_acquire(&mut client, "lapse", 30_000).await;

    let mut on_doomed = doomed.client().await;
    let _first = tokio::spawn(async move {
        on_doomed
            .acquire(acquire_req("lapse", 10_000, "first", 60_000))
            .await
    });
    let describe =
        |mut c: leasehold_server::proto::leasehold_service_client::LeaseholdServiceClient<
            tonic::transport::Channel,
        >| async move {
            c.describe(DescribeRequest {
                name: "lapse".into(),
                ..Default::default()
            })
            .await
            .unwrap()
            .into_inner()
            .waiters
        };
    eventually(Duration::from_secs(5), "the first waiter", || {
        describe(client.clone()).map_eq(1)
    })
    .await;
    let mut second_client = survivor.client().await;
    let second = tokio::spawn(async move {
        second_client
            .acquire(acquire_req("lapse", 10_000, "second", 60_000))
            .await
    });
    eventually(Duration::from_secs(5), "the second waiter", || {
        describe(client.clone()).map_eq(2)
    })
    .await;

    // The first waiter's broker dies without a word (no dequeue).
    doomed.kill();
    client
        .release(ReleaseRequest {
            name: "lapse".into(),
            owner_token: holder.owner_token,
        })
        .await
        .unwrap();
    let released = Instant::now();
    let granted = tokio::time::timeout(Duration::from_secs(10), second)
        .await
        .expect("not stalled")
        .unwrap();
    assert!(granted.is_ok(), "{granted:?}");
    assert!(
        released.elapsed() < Duration::from_millis(4_500),
        "second waited {:?}",
        released.elapsed()
    );
}

trait MapEq {
    fn map_eq(self, want: u64) -> impl std::future::Future<Output = bool>;
}

impl<F: std::future::Future<Output = u64>> MapEq for F {
    async fn map_eq(self, want: u64) -> bool {
        self.await == want
    }
}
