//! Mutual exclusion under contention: many clients, two broker replicas, one
//! Redis. Every grant is checked against a shared record of who is inside the
//! critical section, and fences must rise in grant order.

use leasehold_testkit as common;

use std::{
    sync::{
        atomic::{AtomicBool, AtomicUsize, Ordering},
        Arc, Mutex,
    },
    time::Duration,
};

use common::{acquire_req, Broker, RedisServer};
use leasehold_server::proto::ReleaseRequest;
use tonic::Code;

const CLIENTS: usize = 32;

#[derive(Default)]
struct Record {
    inside: AtomicBool,
    overlaps: AtomicUsize,
    fences: Mutex<Vec<u64>>,
}

/// Runs `CLIENTS` clients spread over `brokers` until `target` grants were
/// made (or 60 s passed); returns the record.
async fn hammer(brokers: &[Broker], target: usize, wait_timeout_ms: u64) -> Arc<Record> {
    let record = Arc::new(Record::default());
    let grants = Arc::new(AtomicUsize::new(0));
    let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
    let mut tasks = Vec::new();
    for i in 0..CLIENTS {
        let mut client = brokers[i % brokers.len()].client().await;
        let (record, grants) = (record.clone(), grants.clone());
        tasks.push(tokio::spawn(async move {
            while grants.load(Ordering::SeqCst) < target && tokio::time::Instant::now() < deadline {
                let lease = match client
                    .acquire(acquire_req(
                        "hot",
                        10_000,
                        &format!("client-{i}"),
                        wait_timeout_ms,
                    ))
                    .await
                {
                    Ok(r) => r.into_inner().lease.expect("lease"),
                    Err(s) if s.code() == Code::Aborted => continue,
                    Err(s) => panic!("client {i}: unexpected {s:?}"),
                };
                // Inside the critical section: nobody else may be.
                if record.inside.swap(true, Ordering::SeqCst) {
                    record.overlaps.fetch_add(1, Ordering::SeqCst);
                }
                record.fences.lock().unwrap().push(lease.fence);
                grants.fetch_add(1, Ordering::SeqCst);
                tokio::task::yield_now().await;
                record.inside.store(false, Ordering::SeqCst);
                client
                    .release(ReleaseRequest {
                        name: lease.name,
                        owner_token: lease.owner_token,
                    })
                    .await
                    .unwrap_or_else(|s| panic!("client {i}: release failed: {s:?}"));
            }
        }));
    }
    for task in tasks {
        task.await.expect("client task");
    }
    record
}

fn check(record: &Record, target: usize) {
    assert_eq!(
        record.overlaps.load(Ordering::SeqCst),
        0,
        "two clients held the lock at once"
    );
    let fences = record.fences.lock().unwrap();
    assert!(
        fences.len() >= target,
        "only {} grants were made",
        fences.len()
    );
    for pair in fences.windows(2) {
        assert!(
            pair[1] > pair[0],
            "fence went from {} to {} in grant order",
            pair[0],
            pair[1]
        );
    }
}

/// 32 clients over 2 brokers hammer one lock with try-acquire and release.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_brokers_32_clients_try_acquire_never_overlap() {
    let redis = RedisServer::start();
    let brokers = [
        Broker::start(&redis.url()).await,
        Broker::start(&redis.url()).await,
    ];
    let record = hammer(&brokers, 300, 0).await;
    check(&record, 300);
}

/// The same with waiting acquires: every handoff goes through a release
/// notification, across brokers.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_brokers_32_waiting_clients_never_overlap() {
    let redis = RedisServer::start();
    let brokers = [
        Broker::start(&redis.url()).await,
        Broker::start(&redis.url()).await,
    ];
    let record = hammer(&brokers, 300, 30_000).await;
    check(&record, 300);
}

/// And on the memory store, with one broker.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn memory_store_32_clients_never_overlap() {
    let brokers = [Broker::start("memory").await];
    let record = hammer(&brokers, 300, 30_000).await;
    check(&record, 300);
}
